//! Time and randomness are parameters: every lease, expiry, proof window and rate limit reads an
//! injected [`Clock`], and every identifier, code and nonce comes from an injected [`Entropy`].

use chrono::{Duration, DurationRound};

// One clock and one entropy source for the broker and the console (`countersign-common`); the
// broker stores times to the millisecond and writes them as below.
pub use countersign_common::clock::{
    Clock, Entropy, ManualClock, SystemClock, SystemEntropy, Time, random, random_token,
};

/// Truncates to whole milliseconds, the precision stored.
pub fn to_millis(t: Time) -> Time {
    t.duration_trunc(Duration::milliseconds(1)).unwrap_or(t)
}

/// RFC 3339 in UTC with `Z`, as every answer shows times.
pub fn rfc3339(t: &Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// Serde helpers that write times as RFC 3339 with `Z`.
pub mod serde_time {
    use super::Time;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Time, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::rfc3339(t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Time, D::Error> {
        let s = String::deserialize(d)?;
        chrono::DateTime::parse_from_rfc3339(&s)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(serde::de::Error::custom)
    }

    pub mod option {
        use super::Time;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(t: &Option<Time>, s: S) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.serialize_str(&super::super::rfc3339(t)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|s| {
                    chrono::DateTime::parse_from_rfc3339(&s)
                        .map(|t| t.with_timezone(&chrono::Utc))
                        .map_err(serde::de::Error::custom)
                })
                .transpose()
        }
    }
}
