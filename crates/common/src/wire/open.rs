//! The answers of the broker's routes that take no credential (spec, "Open routes"): the
//! store's settings, a secret's reread, health and readiness.

use serde::{Deserialize, Serialize};

/// `GET /v1/settings`: the secret store's settings, and the secrets an issuer makes per grant.
/// A cloud store's fields are absent from another store's settings; `issued` is absent when
/// no secret is issued.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Settings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub cloud_a_account_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub cloud_a_key_arn: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub cloud_a_region: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub cloud_b_key_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub cloud_b_project: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub issued: Vec<IssuedSecret>,
    pub secrets_prefix: String,
    /// The store's kind: `local-file-store`, …
    pub store: String,
}

/// A secret an issuer makes for each grant, as the broker's settings list it (`issued`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IssuedSecret {
    /// `postgres` or `aws-iam`.
    pub issuer: String,
    /// Always `issued`.
    #[serde(default = "issued")]
    pub kind: String,
    pub name: String,
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub tier: String,
}

fn issued() -> String {
    "issued".to_owned()
}

/// `POST /v1/secrets/{name}/reread`: whether the secret is served now, and why not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Reread {
    pub name: String,
    /// Why it is not served; absent when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub reason: Option<String>,
    pub served: bool,
}

/// `GET /healthz`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Health {
    pub status: String,
}

/// `GET /readyz`: whether this replica can serve (`status`: `ready` or `not ready`), and each
/// part it waits on: the database (`ok` or `unavailable`), the policy from the secret store
/// (`ok` or `not loaded`) and the audit follower (`ok`, `verifying` or `broken`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Ready {
    pub audit: String,
    pub database: String,
    pub status: String,
    pub store: String,
}

impl Ready {
    /// The answer for these parts: `ready` when each is `ok`.
    pub fn of(database: &str, store: &str, audit: &str) -> Self {
        let ready = [database, store, audit].iter().all(|p| *p == "ok");
        Self {
            audit: audit.to_owned(),
            database: database.to_owned(),
            status: ready_word(ready).to_owned(),
            store: store.to_owned(),
        }
    }

    /// Whether every part is ready.
    pub fn is_ready(&self) -> bool {
        self.status == ready_word(true)
    }
}

/// A `/readyz` answer's `status` (the broker's and the console's): `ready` or `not ready`.
pub fn ready_word(ready: bool) -> &'static str {
    if ready { "ready" } else { "not ready" }
}

/// `POST /v1/audit/witness` (console token), both ways: the head of the broker's audit chain a
/// witness remembers, and the last accepted position it has seen; the broker answers its own.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WitnessHead {
    pub position: i64,
    pub hash: String,
    pub accepted: i64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_written_as_the_broker_wrote_it() {
        let ready = Ready::of("ok", "ok", "ok");
        assert!(ready.is_ready());
        assert_eq!(
            serde_json::to_string(&ready).unwrap_or_default(),
            r#"{"audit":"ok","database":"ok","status":"ready","store":"ok"}"#
        );
        crate::wire::tests::sorted(&ready);
        for (database, store, audit) in [
            ("unavailable", "ok", "ok"),
            ("ok", "not loaded", "ok"),
            ("ok", "ok", "verifying"),
            ("ok", "ok", "broken"),
        ] {
            let r = Ready::of(database, store, audit);
            assert!(!r.is_ready(), "{r:?}");
            assert_eq!(r.status, "not ready");
            let back: Ready = serde_json::from_str(&serde_json::to_string(&r).unwrap_or_default())
                .expect("reads back");
            assert_eq!(back, r);
        }
    }
}
