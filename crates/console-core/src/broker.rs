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

pub use countersign_common::requester::Requester;

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
    /// The request it decides, by the id the requesting session was given (what `countersign
    /// request`, `run` and MCP print); none for a machine login, or from a broker older than
    /// issue 48.
    #[serde(default)]
    pub request_id: Option<String>,
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

    /// The name people know it by: its request's id (what the agent was told), else (a machine
    /// login, an older broker) its record id.
    pub fn name(&self) -> &str {
        self.request_id.as_deref().unwrap_or(&self.record_id)
    }

    /// Who asks, in people's words (its machine, its session's label); none for a machine
    /// login.
    pub fn requester(&self) -> Option<Requester> {
        self.enrollment.as_ref().map(|e| {
            e.requester(
                self.session
                    .request
                    .as_deref()
                    .or(self.session.enrollment.as_deref()),
            )
        })
    }

    /// Whether `q` names it: its request id or record id, whole (any case).
    pub fn is_named(&self, q: &str) -> bool {
        q.eq_ignore_ascii_case(&self.record_id)
            || self
                .request_id
                .as_deref()
                .is_some_and(|r| q.eq_ignore_ascii_case(r))
    }
}

impl EnrollmentSummary {
    /// The session enrolled here, in people's words, with the notification session it named.
    pub fn requester(&self, session_id: Option<&str>) -> Requester {
        Requester::of(
            &self.kind,
            &self.runtime_id,
            self.operator.as_deref(),
            self.slot.as_deref(),
            session_id,
        )
    }

    /// The raw ids, for a title on hover: `kind runtime_id (slot) · operator`.
    pub fn raw(&self, session_id: Option<&str>) -> String {
        let mut s = format!("{} {}", self.kind, self.runtime_id);
        if let Some(slot) = self.slot.as_deref().filter(|s| !s.is_empty()) {
            s.push_str(&format!(" slot {slot}"));
        }
        if let Some(o) = self.operator.as_deref().filter(|o| !o.is_empty()) {
            s.push_str(&format!(" · operator {o}"));
        }
        if let Some(n) = session_id {
            s.push_str(&format!(" · session id {n}"));
        }
        s
    }
}

/// An undecided record in the broker's pending list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingItem {
    pub record_id: String,
    #[serde(default)]
    pub request_id: Option<String>,
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

/// A grant in the approver's list: a live one, or an ended one whose issued credentials are
/// not all destroyed yet.
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
    /// `live`, `revoked`, `expired` or `ended` (its session ended); `live` from a broker older
    /// than issue 49, which lists live grants only.
    #[serde(default = "live")]
    pub state: String,
    /// The credentials issuers made for it (issue 49): none for a grant of stored secrets.
    #[serde(default)]
    pub credentials: Vec<IssuedCredential>,
}

fn live() -> String {
    "live".to_owned()
}

impl GrantItem {
    /// Whether it is live (an ended grant is listed while its credentials are destroyed).
    pub fn is_live(&self) -> bool {
        self.state == "live"
    }
}

/// A credential an issuer made for one grant, as the grant lists it: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedCredential {
    /// The secret it was made for.
    pub secret: String,
    /// `postgres` or `aws-iam`.
    pub issuer: String,
    /// The issuer's name for it (the role's, the IAM user's).
    #[serde(default)]
    pub name: String,
    /// `minting`, `live`, `destroying` or `destroyed`.
    pub state: String,
    /// The issuer's last error destroying it.
    #[serde(default)]
    pub error: Option<String>,
    /// When the destroy is tried next.
    #[serde(default)]
    pub next_attempt_at: Option<Time>,
    #[serde(default)]
    pub destroyed_at: Option<Time>,
}

/// A secret an issuer makes for each grant, as the broker's settings list it (`issued`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedSecret {
    pub name: String,
    /// `postgres` or `aws-iam`.
    pub issuer: String,
    #[serde(default)]
    pub owner: String,
    #[serde(default)]
    pub tier: String,
}

/// An issuer's kind in people's words: `PostgreSQL`, `AWS IAM`, else the kind as it is.
pub fn issuer_words(kind: &str) -> &str {
    match kind {
        "postgres" => "PostgreSQL",
        "aws-iam" => "AWS IAM",
        other => other,
    }
}

/// A passkey assertion over an approval statement (or, as an endorsement, over a registration
/// challenge), as the browser answered it: base64url fields. The console carries it to the
/// broker, which verifies it; the console cannot make one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Countersignature {
    pub credential: String,
    pub nonce: String,
    pub client_data: String,
    pub authenticator_data: String,
    pub signature: String,
}

/// One of a person's passkeys, as the broker lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PasskeyItem {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub aaguid: String,
    /// A synced passkey (backup eligible); false: bound to one device.
    #[serde(default)]
    pub synced: bool,
    pub created_at: Time,
    #[serde(default)]
    pub enrolled_by: String,
}

/// What the browser needs to create a passkey (`POST /v1/passkeys/challenge`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PasskeyOffer {
    pub nonce: String,
    pub expires_at: Time,
    pub challenge: String,
    pub rp_id: String,
    pub user_handle: String,
    #[serde(default)]
    pub passkeys: Vec<PasskeyItem>,
}

/// A registration as the browser answered it, allowed by an enrollment code or an endorsement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeyRegistration {
    pub name: String,
    pub nonce: String,
    pub client_data: String,
    pub attestation_object: String,
    #[serde(default)]
    pub enroll_code: Option<String>,
    #[serde(default)]
    pub endorsement: Option<Countersignature>,
}

/// The statement a person countersigns to approve a record
/// (`POST /v1/credential-requests/{record}/statement`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalStatement {
    /// The canonical text whose hash is the challenge.
    pub statement: String,
    /// The statement in words, shown before the person touches the key.
    pub words: String,
    pub challenge: String,
    pub nonce: String,
    pub expires_at: Time,
    /// Whether policy asks for the countersignature.
    pub required: bool,
    #[serde(default)]
    pub device_bound: bool,
    #[serde(default)]
    pub aaguids: Option<Vec<String>>,
    #[serde(default)]
    pub rp_id: String,
    /// The person's passkeys that may sign it.
    #[serde(default)]
    pub passkeys: Vec<PasskeyItem>,
}

fn passkeys_off() -> Error {
    Error::broker(
        "PASSKEYS_OFF",
        404,
        "this broker has no [passkeys] settings: no passkey is registered or required",
    )
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
    /// `GET /v1/settings`, its `issued` list: the secrets an issuer makes per grant. A broker
    /// client that knows none (or a broker older than issue 49) answers none.
    async fn issued_secrets(&self) -> Result<Vec<IssuedSecret>, Error> {
        Ok(Vec::new())
    }

    // Passkeys (docs/passkeys.md). A broker client without them answers PASSKEYS_OFF.

    /// `POST /v1/credential-requests/{record}/approve` with the approver's countersignature.
    async fn approve_countersigned(
        &self,
        _record_id: &str,
        _approver: &Login,
        _code: Option<&str>,
        _countersignature: &Countersignature,
    ) -> Result<Approval, Error> {
        Err(passkeys_off())
    }
    /// `POST /v1/credential-requests/{record}/statement`
    async fn statement(
        &self,
        _record_id: &str,
        _approver: &Login,
    ) -> Result<ApprovalStatement, Error> {
        Err(passkeys_off())
    }
    /// `GET /v1/passkeys?approver=`
    async fn passkeys(&self, _approver: &Login) -> Result<Vec<PasskeyItem>, Error> {
        Err(passkeys_off())
    }
    /// `POST /v1/passkeys/challenge`
    async fn passkey_offer(&self, _approver: &Login) -> Result<PasskeyOffer, Error> {
        Err(passkeys_off())
    }
    /// `POST /v1/passkeys`
    async fn register_passkey(
        &self,
        _approver: &Login,
        _registration: &PasskeyRegistration,
    ) -> Result<PasskeyItem, Error> {
        Err(passkeys_off())
    }
    /// `PATCH /v1/passkeys/{id}`
    async fn rename_passkey(
        &self,
        _id: &str,
        _approver: &Login,
        _name: &str,
    ) -> Result<PasskeyItem, Error> {
        Err(passkeys_off())
    }
    /// `POST /v1/passkeys/{id}/remove`; answers the state.
    async fn remove_passkey(&self, _id: &str, _approver: &Login) -> Result<String, Error> {
        Err(passkeys_off())
    }
}
