//! The broker as the console sees it: its console-token routes (spec `broker-http-api.md`), each
//! naming the person acting as `approver`. The shapes are the broker's answers; unknown fields
//! are ignored so that a newer broker does not break the console.
//!
//! A client answers a broker refusal as [`crate::Error::broker`] (the broker's code, status and
//! message) and an unreachable broker as `BROKER_UNAVAILABLE`.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::error::Error;
use crate::ids::Login;

/// Where a session runs, as records and grants name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollmentSummary {
    pub kind: String,
    pub runtime_id: String,
    #[serde(default)]
    pub operator: Option<String>,
    #[serde(default)]
    pub slot: Option<String>,
}

/// The notification-session ids a request stated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionIds {
    #[serde(default)]
    pub request: Option<String>,
    #[serde(default)]
    pub enrollment: Option<String>,
}

/// How a record was decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    pub event: String,
    pub at: Time,
    #[serde(default)]
    pub credential_id: Option<String>,
}

/// A credential-request record (a secret request or a person's machine login).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CredentialRecord {
    pub record_id: String,
    /// `agent_secret` or `launcher_credential`.
    pub kind: String,
    pub state: String,
    pub approver: String,
    #[serde(default)]
    pub enrollment: Option<EnrollmentSummary>,
    #[serde(default)]
    pub session: SessionIds,
    #[serde(default)]
    pub identifiers: Vec<String>,
    #[serde(default)]
    pub service: Option<String>,
    #[serde(default)]
    pub reason: String,
    #[serde(default)]
    pub lifetime_seconds: Option<u64>,
    #[serde(default)]
    pub rules_version: String,
    pub expires_at: Time,
    pub requested_at: Time,
    #[serde(default)]
    pub decided: Option<Decided>,
}

impl CredentialRecord {
    pub fn is_machine_login(&self) -> bool {
        self.kind == "launcher_credential"
    }
}

/// An undecided record in the broker's pending list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingItem {
    pub record_id: String,
    pub kind: String,
    #[serde(default)]
    pub identifiers: Vec<String>,
    pub requested_at: Time,
    #[serde(default)]
    pub session: SessionIds,
}

/// What an approval produced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    #[serde(default)]
    pub credential_id: Option<String>,
    #[serde(default)]
    pub grant_id: Option<String>,
    pub state: String,
}

/// A machine login (launcher credential) in the approver's list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MachineLogin {
    pub credential_id: String,
    pub host: String,
    #[serde(default)]
    pub service: Option<String>,
    #[serde(default)]
    pub subject: Option<String>,
    #[serde(default)]
    pub approved_by: String,
    pub issued_at: Time,
    pub expires_at: Time,
    #[serde(default)]
    pub expired: bool,
}

/// A grant in the approver's list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantItem {
    pub grant_id: String,
    /// `automatic` or `approval`.
    pub granted: String,
    #[serde(default)]
    pub record_id: Option<String>,
    pub enrollment: EnrollmentSummary,
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub approver: Option<String>,
    #[serde(default)]
    pub expires_at: Option<Time>,
    pub created_at: Time,
}

/// The broker's console-token routes. `approver` is always the signed-in person.
#[async_trait]
pub trait BrokerClient: Send + Sync + std::fmt::Debug {
    /// `GET /v1/pending?approver=`
    async fn pending(&self, approver: &Login) -> Result<Vec<PendingItem>, Error>;
    /// `GET /v1/credential-requests/{record}`
    async fn record(&self, record_id: &str) -> Result<CredentialRecord, Error>;
    /// `POST /v1/credential-requests/{record}/approve`
    async fn approve(
        &self,
        record_id: &str,
        approver: &Login,
        code: Option<&str>,
    ) -> Result<Approval, Error>;
    /// `POST /v1/credential-requests/{record}/deny`; answers the state.
    async fn deny(
        &self,
        record_id: &str,
        approver: &Login,
        code: Option<&str>,
    ) -> Result<String, Error>;
    /// `POST /v1/machine-logins/lookup`
    async fn lookup(&self, code: &str) -> Result<CredentialRecord, Error>;
    /// `GET /v1/launcher-credentials?approver=`
    async fn machine_logins(&self, approver: &Login) -> Result<Vec<MachineLogin>, Error>;
    /// `POST /v1/launcher-credentials/{id}/revoke-by-approver`; answers the state.
    async fn revoke_machine_login(
        &self,
        credential_id: &str,
        approver: &Login,
    ) -> Result<String, Error>;
    /// `GET /v1/grants?approver=`
    async fn grants(&self, approver: &Login) -> Result<Vec<GrantItem>, Error>;
    /// `POST /v1/grants/{id}/revoke-by-approver`; answers the state.
    async fn revoke_grant(&self, grant_id: &str, approver: &Login) -> Result<String, Error>;
}
