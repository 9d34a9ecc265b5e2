//! The answers of the broker's machine-credential, machine-login and session-proof routes
//! (spec, "Machine credential", "Session proof"): what the launcher helper and the CLI read.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::Time;

/// `POST /v1/enrollments` (201).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Enrolled {
    pub enrollment_id: String,
    pub lease_expires_at: Time,
    #[serde(default)]
    pub slot: Option<String>,
}

/// `POST /v1/launcher-credentials` (202): a person's machine login, started.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LoginStarted {
    /// The confirmation code the person types into the console.
    pub code: String,
    pub pending_id: String,
}

/// `POST /v1/launcher-credentials/token`: a service's machine credential.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TokenLogin {
    pub credential_id: String,
    pub expires_at: Time,
}

/// `GET /v1/launcher-credentials/{pending}`: `{"state"}` while `pending`, `denied` or `expired`;
/// once `issued`, also `credential_id` and `expires_at` (null: no expiry).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LoginPoll {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub credential_id: Option<String>,
    /// Absent until issued; then the credential's expiry, or null.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::present"
    )]
    #[cfg_attr(feature = "schema", schemars(with = "Option<Time>"))]
    pub expires_at: Option<Option<Time>>,
    /// `pending`, `issued`, `denied` or `expired`.
    pub state: String,
}

impl LoginPoll {
    /// A poll's answer in state `state`, with nothing issued.
    pub fn state(state: &str) -> Self {
        Self {
            credential_id: None,
            expires_at: None,
            state: state.to_owned(),
        }
    }
}

/// `POST /v1/enrollments/{id}/renew`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Renewed {
    pub lease_expires_at: Time,
}

/// A live grant of the calling session, as `GET /v1/enrollments/self` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionGrant {
    #[serde(default)]
    pub approver: Option<String>,
    #[serde(default)]
    pub expires_at: Option<Time>,
    pub grant_id: String,
    pub request_id: String,
}

/// `GET /v1/enrollments/self`: the calling session's enrollment and live grants.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EnrollmentSelf {
    pub enrollment_id: String,
    #[serde(default)]
    pub grants: Vec<SessionGrant>,
    pub kind: String,
    pub lease_expires_at: Time,
    /// The person it runs for; null for a pod.
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub slot: Option<String>,
}

/// One secret of a request and what was decided for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SecretDecision {
    /// `automatic`, `approval`, `denied`, …
    pub decision: String,
    pub name: String,
}

/// Who decided a request, and when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct DecisionBy {
    pub at: Time,
    pub by: String,
}

/// A secret request: `POST /v1/requests` and `GET /v1/requests/{id}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RequestAnswer {
    #[serde(default)]
    pub approver: Option<String>,
    /// Only from `POST /v1/requests`: whether it joined a pending request of the session.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "bool"))]
    pub coalesced: Option<bool>,
    /// `passkey` while it waits for an approval policy says needs the approver's passkey;
    /// absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[cfg_attr(feature = "schema", schemars(with = "String"))]
    pub countersign: Option<String>,
    #[serde(default)]
    pub decided_at: Option<Time>,
    #[serde(default)]
    pub decision: Option<DecisionBy>,
    #[serde(default)]
    pub grant_id: Option<String>,
    #[serde(default)]
    pub lifetime_seconds: Option<u64>,
    #[serde(default)]
    pub record_id: Option<String>,
    pub request_id: String,
    #[serde(default)]
    pub secrets: Vec<SecretDecision>,
    /// `pending`, `approved`, `denied`, `expired`, `cancelled`, …
    pub state: String,
}

/// `POST /v1/grants/{id}/values`: the shape of the answer, for its schema and for tests. The
/// broker writes this answer by hand into a buffer it zeroizes (no copy of a value is left
/// behind), and a reader should read it into zeroizing strings; this type holds plain ones.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GrantValues {
    #[serde(default)]
    pub expires_at: Option<Time>,
    /// An issued secret's credential as environment variables, by secret; absent when no
    /// granted secret is issued.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub parts: BTreeMap<String, BTreeMap<String, String>>,
    /// The variables of `parts` that are not secret, by secret; absent with `parts`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub public_parts: BTreeMap<String, Vec<String>>,
    /// Each granted secret's value, by name.
    pub values: BTreeMap<String, String>,
}
