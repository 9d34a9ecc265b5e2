//! The broker API's answers as types, defined once: the broker writes each answer from one of
//! these (`countersign-broker-http`), and its readers (the console's broker client) read the
//! same type, so a field renamed on one side is renamed on the other or fails to compile.
//!
//! The rules every type here keeps (spec `broker-http-api.md`, "Resources and their fields"):
//!
//! - A field the broker always writes is always serialized: an empty value is `null` (an
//!   `Option`), never left out. A field the broker adds only in some answers (`coalesced`,
//!   `countersign`, settings' `issued`, a reread's `reason`) is left out when it has none
//!   (`skip_serializing_if`), as the spec says; its schema is its value's, without `null`
//!   (`schemars(with = ...)`): left out, never null.
//! - Fields are declared in alphabetical order: the order the broker wrote them in when its
//!   answers were `serde_json::Value` maps, so its answers stay the same bytes.
//! - Readers tolerate what older brokers left out (`#[serde(default)]`) and ignore fields they
//!   do not know (no `deny_unknown_fields` on answers), so a newer broker does not break them.
//! - Times are [`Time`](crate::Time), written as RFC 3339 in UTC with `Z` and only the
//!   fraction digits needed (chrono's serde form, the broker's `rfc3339`).
//!
//! With the `schema` feature every answer also derives `schemars::JsonSchema`: the broker's
//! `GET /v1/openapi.json` describes each route's answer from these types.

mod console;
mod open;
mod session;

pub use console::*;
pub use open::*;
pub use session::*;

use serde::{Deserialize, Deserializer};

/// `{"state": ...}`: what a cancel, a deny, a revoke or a removal answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct StateAnswer {
    pub state: String,
}

impl StateAnswer {
    pub fn new(state: &str) -> Self {
        Self {
            state: state.to_owned(),
        }
    }
}

/// `t` as an answer writes it (RFC 3339 in UTC with `Z`, only the fraction digits needed, the
/// same text as its serde form): for a reader that keeps or shows an answer's time as text.
pub fn rfc3339(t: &crate::Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// Reads a field that is there (a value or `null`) as `Some`, for `Option<Option<T>>` fields
/// whose absence (the outer `None`, with `#[serde(default)]`) differs from `null`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

#[cfg(test)]
pub(crate) mod tests {
    use serde::Serialize;

    use crate::Time;

    pub fn t(s: &str) -> Time {
        chrono::DateTime::parse_from_rfc3339(s)
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap_or_default()
    }

    /// `v` is written with its keys in the order a `serde_json::Value` map writes them (sorted,
    /// at every depth): the same bytes the broker's `json!` answers were.
    pub fn sorted<T: Serialize>(v: &T) {
        let direct = serde_json::to_string(v).unwrap_or_default();
        let via_map = serde_json::to_value(v)
            .map(|v| v.to_string())
            .unwrap_or_default();
        assert_eq!(direct, via_map, "keys out of alphabetical order");
    }

    #[test]
    fn times_are_written_as_the_broker_writes_them() {
        for s in [
            "2026-11-24T14:05:00Z",
            "2026-11-24T14:05:00.120Z",
            "2026-11-24T14:05:00.123456Z",
            "2026-11-24T14:05:00.123456789Z",
        ] {
            let time = t(s);
            let rfc3339 = time.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true);
            assert_eq!(
                serde_json::to_string(&time).unwrap_or_default(),
                format!("\"{rfc3339}\"")
            );
            assert_eq!(rfc3339, s);
            assert_eq!(super::rfc3339(&time), s);
        }
    }

    #[test]
    fn present_tells_null_from_absent() {
        let absent: super::LoginPoll =
            serde_json::from_str(r#"{"state":"pending"}"#).expect("parses");
        assert_eq!(absent.expires_at, None);
        let null: super::LoginPoll =
            serde_json::from_str(r#"{"credential_id":"c","expires_at":null,"state":"issued"}"#)
                .expect("parses");
        assert_eq!(null.expires_at, Some(None));
        sorted(&null);
        assert_eq!(
            serde_json::to_string(&absent).unwrap_or_default(),
            r#"{"state":"pending"}"#
        );
        assert_eq!(
            serde_json::to_string(&null).unwrap_or_default(),
            r#"{"credential_id":"c","expires_at":null,"state":"issued"}"#
        );
    }
}
