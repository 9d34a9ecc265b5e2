//! The answers of the broker's console-token routes (spec, "Console token"): records, the
//! pending list, approvals, machine logins, grants, passkeys and approval statements. The
//! console reads them; the broker writes them.

use serde::{Deserialize, Serialize};

use crate::Time;
use crate::requester::Requester;

/// Where a session runs, as records and grants name it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EnrollmentSummary {
    /// `session`, `pod` or a launcher's kind.
    pub kind: String,
    /// The person the session runs for; empty for a pod.
    #[serde(default)]
    pub operator: String,
    pub runtime_id: String,
    #[serde(default)]
    pub slot: Option<String>,
}

impl EnrollmentSummary {
    /// The session enrolled here, in people's words, with the notification session it named.
    pub fn requester(&self, session_id: Option<&str>) -> Requester {
        Requester::of(
            &self.kind,
            &self.runtime_id,
            Some(self.operator.as_str()),
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
        if !self.operator.is_empty() {
            s.push_str(&format!(" · operator {}", self.operator));
        }
        if let Some(n) = session_id {
            s.push_str(&format!(" · session id {n}"));
        }
        s
    }
}

/// The notification-session ids a request stated.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SessionIds {
    #[serde(default)]
    pub enrollment: Option<String>,
    #[serde(default)]
    pub request: Option<String>,
}

/// How a record was decided.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Decided {
    pub at: Time,
    /// The machine login it issued, if any.
    #[serde(default)]
    pub credential_id: Option<String>,
    /// `approved`, `denied`, `expired`, `cancelled`, …
    pub event: String,
}

/// A credential-request record (a secret request or a person's machine login):
/// `GET /v1/credential-requests/{record}` and `POST /v1/machine-logins/lookup`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CredentialRecord {
    pub approver: String,
    #[serde(default)]
    pub decided: Option<Decided>,
    #[serde(default)]
    pub enrollment: Option<EnrollmentSummary>,
    pub expires_at: Time,
    #[serde(default)]
    pub identifiers: Vec<String>,
    /// `agent_secret` or `launcher_credential`.
    pub kind: String,
    #[serde(default)]
    pub lifetime_seconds: Option<u64>,
    #[serde(default)]
    pub reason: String,
    pub record_id: String,
    /// The request it decides, by the id the requesting session was given (what `countersign
    /// request`, `run` and MCP print); null for a machine login, absent from a broker older
    /// than issue 48.
    #[serde(default)]
    pub request_id: Option<String>,
    pub requested_at: Time,
    #[serde(default)]
    pub rules_version: String,
    #[serde(default)]
    pub service: Option<String>,
    #[serde(default)]
    pub session: SessionIds,
    pub state: String,
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

/// An undecided record in the broker's pending list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PendingItem {
    #[serde(default)]
    pub identifiers: Vec<String>,
    pub kind: String,
    pub record_id: String,
    #[serde(default)]
    pub request_id: Option<String>,
    pub requested_at: Time,
    #[serde(default)]
    pub session: SessionIds,
}

/// `GET /v1/pending`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PendingList {
    pub pending: Vec<PendingItem>,
}

/// What an approval produced (`POST /v1/credential-requests/{record}/approve`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Approval {
    #[serde(default)]
    pub credential_id: Option<String>,
    #[serde(default)]
    pub grant_id: Option<String>,
    pub state: String,
}

/// A machine login (launcher credential) in a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MachineLogin {
    #[serde(default)]
    pub approved_by: String,
    pub credential_id: String,
    #[serde(default)]
    pub expired: bool,
    pub expires_at: Time,
    pub host: String,
    pub issued_at: Time,
    #[serde(default)]
    pub service: Option<String>,
    #[serde(default)]
    pub subject: Option<String>,
}

/// `GET /v1/launcher-credentials` and `GET /v1/operator/machines`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct MachineLoginList {
    pub credentials: Vec<MachineLogin>,
}

/// A grant in a list: a live one, or an ended one whose issued credentials are not all
/// destroyed yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GrantItem {
    #[serde(default)]
    pub approver: Option<String>,
    pub created_at: Time,
    /// The credentials issuers made for it (issue 49): none for a grant of stored secrets.
    #[serde(default)]
    pub credentials: Vec<IssuedCredential>,
    pub enrollment: EnrollmentSummary,
    #[serde(default)]
    pub expires_at: Option<Time>,
    pub grant_id: String,
    /// `automatic` or `approval`.
    pub granted: String,
    #[serde(default)]
    pub names: Vec<String>,
    #[serde(default)]
    pub record_id: Option<String>,
    /// `live`, `revoked`, `expired` or `ended` (its session ended); `live` from a broker older
    /// than issue 49, which lists live grants only.
    #[serde(default = "live")]
    pub state: String,
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

/// `GET /v1/grants` and `GET /v1/operator/grants`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct GrantList {
    pub grants: Vec<GrantItem>,
}

/// A credential an issuer made for one grant, as the grant lists it: never its secret.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IssuedCredential {
    #[serde(default)]
    pub destroyed_at: Option<Time>,
    /// The issuer's last error destroying it.
    #[serde(default)]
    pub error: Option<String>,
    /// `postgres` or `aws-iam`.
    pub issuer: String,
    /// The issuer's name for it (the role's, the IAM user's).
    #[serde(default)]
    pub name: String,
    /// When the destroy is tried next.
    #[serde(default)]
    pub next_attempt_at: Option<Time>,
    /// The secret it was made for.
    pub secret: String,
    /// `minting`, `live`, `destroying` or `destroyed`.
    pub state: String,
}

/// A passkey assertion over an approval statement (or, as an endorsement, over a registration
/// challenge), as the browser answered it: base64url fields. The console carries it to the
/// broker in a decision's or a registration's body; the broker verifies it and keeps it with
/// the decision and in the audit chain (its serialized form is sealed: keep the field order).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Countersignature {
    /// The passkey's credential id, base64url.
    pub credential: String,
    /// The broker's nonce the statement carried.
    pub nonce: String,
    /// Base64url of the client data JSON, the authenticator data and the signature, as the
    /// browser answered.
    pub client_data: String,
    pub authenticator_data: String,
    pub signature: String,
}

/// One of a person's passkeys, as the broker lists it (its public key stays in the broker and
/// the audit chain).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PasskeyItem {
    #[serde(default)]
    pub aaguid: String,
    pub created_at: Time,
    #[serde(default)]
    pub enrolled_by: String,
    pub id: String,
    pub name: String,
    /// A synced passkey (backup eligible); false: bound to one device.
    #[serde(default)]
    pub synced: bool,
}

/// `GET /v1/passkeys`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PasskeyList {
    pub passkeys: Vec<PasskeyItem>,
}

/// What the browser needs to create a passkey (`POST /v1/passkeys/challenge`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct PasskeyOffer {
    pub challenge: String,
    pub expires_at: Time,
    pub nonce: String,
    #[serde(default)]
    pub passkeys: Vec<PasskeyItem>,
    pub rp_id: String,
    pub user_handle: String,
}

/// The statement a person countersigns to approve a record
/// (`POST /v1/credential-requests/{record}/statement`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ApprovalStatement {
    #[serde(default)]
    pub aaguids: Option<Vec<String>>,
    pub challenge: String,
    #[serde(default)]
    pub device_bound: bool,
    pub expires_at: Time,
    pub nonce: String,
    /// The person's passkeys that may sign it.
    #[serde(default)]
    pub passkeys: Vec<PasskeyItem>,
    /// Whether policy asks for the countersignature.
    pub required: bool,
    #[serde(default)]
    pub rp_id: String,
    /// The canonical text whose hash is the challenge.
    pub statement: String,
    /// The statement in words, shown before the person touches the key.
    pub words: String,
}
