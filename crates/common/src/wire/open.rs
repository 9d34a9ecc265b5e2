//! The answers of the broker's routes that take no credential (spec, "Open routes"): the
//! store's settings, a secret's reread, health.

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
