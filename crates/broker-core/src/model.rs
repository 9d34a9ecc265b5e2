//! The broker's resources as typed values, with their states and the time-driven transitions
//! (expiry, lease lapse) applied by pure `settle` functions: a stored row may lag behind the
//! clock, but nothing the broker reads or answers ever shows a state live after its time.

use std::collections::BTreeSet;

use countersign_proto::PublicJwk;
use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::ids::{
    Approver, ConfirmationCode, CredentialId, EnrollmentId, GrantId, Login, RecordId, RequestId,
    SecretName, SessionId, Slot,
};
use crate::policy::SecretDecision;

/// A launcher credential: what a machine login mints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LauncherCredential {
    pub id: CredentialId,
    /// The thumbprint of the key its launcher proofs are signed with.
    pub thumbprint: String,
    pub jwk: PublicJwk,
    /// Host name; `<namespace>/<name>` for a service's token login.
    pub host: String,
    /// The service a token login is for; `None` for a person's machine.
    pub service: Option<String>,
    /// `system:serviceaccount:<ns>:<name>` for a token login.
    pub subject: Option<String>,
    /// The person whose machine it is (the login hint the person approved); `None` for a service.
    pub operator: Option<Login>,
    /// The approving person's login; empty for a token login.
    pub approved_by: String,
    pub issued_at: Time,
    pub expires_at: Time,
    pub revoked_at: Option<Time>,
    /// The machine-login record that minted it (person's machine).
    pub record_id: Option<RecordId>,
    /// The broker's seal over what the credential's authority rests on (see
    /// `Sealer::seal_credential`); empty on rows written before seals existed,
    /// which are refused.
    #[serde(default)]
    pub seal: String,
}

impl LauncherCredential {
    /// Whether launcher proofs signed for it authenticate (not revoked). An expired credential
    /// still authenticates its operator routes and unenrollment, but enrolls nothing more.
    pub fn is_revoked(&self) -> bool {
        self.revoked_at.is_some()
    }

    pub fn is_expired(&self, now: Time) -> bool {
        now >= self.expires_at
    }

    pub fn is_live(&self, now: Time) -> bool {
        !self.is_revoked() && !self.is_expired(now)
    }
}

/// The machine side of a pending person's machine login: the poll handle and the code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingLogin {
    /// Hex SHA-256 of the pending id (the id itself is known only to the machine).
    pub pending_hash: String,
    pub record_id: RecordId,
    pub code: ConfirmationCode,
}

/// Kinds of enrollment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EnrollmentKind {
    Session,
    Pod,
}

impl EnrollmentKind {
    /// `session` and `pod`; `host` and `box` are accepted as `session`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "session" | "host" | "box" => Some(Self::Session),
            "pod" => Some(Self::Pod),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Pod => "pod",
        }
    }
}

/// How something ended: when, and by whom (`session:<id>`, `launcher:<id>`, `broker`, a login).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ended {
    pub at: Time,
    pub by: String,
}

/// An enrolled session or pod key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Enrollment {
    pub id: EnrollmentId,
    pub credential_id: CredentialId,
    pub kind: EnrollmentKind,
    pub runtime_id: String,
    pub slot: Option<Slot>,
    pub operator: Option<Login>,
    pub thumbprint: String,
    pub jwk: PublicJwk,
    #[serde(default, deserialize_with = "SessionId::stored")]
    pub session_id: Option<SessionId>,
    pub lease_expires_at: Time,
    pub created_at: Time,
    pub ended: Option<Ended>,
    /// Set once a pod has renewed with a projected token: later renewals must carry one.
    #[serde(default)]
    pub pod_token_seen: bool,
    /// The ServiceAccount (`<ns>/<name>`) a pod token proved, if any.
    #[serde(default)]
    pub pod_account: Option<String>,
    /// Secrets withheld from this session by an operator's revoke: they need approval again.
    #[serde(default)]
    pub withheld: BTreeSet<SecretName>,
    /// The broker's seal over what the enrollment's authority rests on (see
    /// `Sealer::seal_enrollment`); empty on rows written before seals existed,
    /// which are refused.
    #[serde(default)]
    pub seal: String,
}

impl Enrollment {
    /// The enrollment as of `now`: a lapsed lease ends it, by `broker`, at the lease's end.
    pub fn settled(mut self, now: Time) -> Self {
        if self.ended.is_none() && now >= self.lease_expires_at {
            self.ended = Some(Ended {
                at: self.lease_expires_at,
                by: "broker".into(),
            });
        }
        self
    }

    pub fn is_live(&self, now: Time) -> bool {
        self.ended.is_none() && now < self.lease_expires_at
    }

    /// The summary other views embed.
    pub fn summary(&self) -> EnrollmentSummary {
        EnrollmentSummary {
            kind: self.kind.as_str().into(),
            runtime_id: self.runtime_id.clone(),
            operator: self
                .operator
                .as_ref()
                .map(|l| l.to_string())
                .unwrap_or_default(),
            slot: self.slot.as_ref().map(|s| s.as_str().to_owned()),
        }
    }
}

/// `enrollment` as records and grant lists show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EnrollmentSummary {
    pub kind: String,
    pub runtime_id: String,
    /// Empty for a pod.
    pub operator: String,
    pub slot: Option<String>,
}

/// A secret request's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RequestState {
    Pending,
    Granted,
    Denied,
    Expired,
    Cancelled,
}

impl RequestState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Granted => "granted",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
        }
    }
}

/// Who decided, and when (`decision` of a request).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionBy {
    pub by: String,
    #[serde(with = "crate::clock::serde_time")]
    pub at: Time,
}

/// A secret request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Request {
    pub id: RequestId,
    pub enrollment_id: EnrollmentId,
    pub state: RequestState,
    pub secrets: Vec<(SecretName, SecretDecision)>,
    pub grant_id: Option<GrantId>,
    pub record_id: Option<RecordId>,
    pub approver: Option<Approver>,
    pub lifetime_seconds: Option<u64>,
    #[serde(default, deserialize_with = "SessionId::stored")]
    pub session_id: Option<SessionId>,
    /// The unsigned id the session stated for this request, if any.
    pub stated_id: Option<String>,
    pub reason: String,
    pub created_at: Time,
    pub decided_at: Option<Time>,
    pub decision: Option<DecisionBy>,
    /// When a pending request lapses undecided (its record's `expires_at`).
    pub expires_at: Option<Time>,
}

impl Request {
    pub fn names(&self) -> Vec<SecretName> {
        self.secrets.iter().map(|(n, _)| n.clone()).collect()
    }

    /// The request as of `now`, given its session: a pending one past its expiry is `expired`
    /// (decision null); one whose session ended is `cancelled` by whoever ended the session.
    pub fn settled(mut self, now: Time, enrollment: &Enrollment) -> Self {
        if self.state != RequestState::Pending {
            return self;
        }
        let expiry = self.expires_at.filter(|t| now >= *t);
        let session_end = enrollment.clone().settled(now).ended;
        match (expiry, session_end) {
            (Some(exp), Some(end)) if exp <= end.at => self.expire(exp),
            (_, Some(end)) => {
                self.state = RequestState::Cancelled;
                self.decided_at = Some(end.at);
                self.decision = Some(DecisionBy {
                    by: end.by,
                    at: end.at,
                });
            }
            (Some(exp), None) => self.expire(exp),
            (None, None) => {}
        }
        self
    }

    fn expire(&mut self, at: Time) {
        self.state = RequestState::Expired;
        self.decided_at = Some(at);
        self.decision = None;
    }
}

/// How a grant came about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GrantedBy {
    Automatic,
    Approval,
}

/// A grant's end state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GrantEnd {
    Expired,
    Revoked,
    /// Ended with its session.
    Ended,
}

/// A grant: a session's right to read some secrets' current values.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub id: GrantId,
    pub request_id: RequestId,
    pub enrollment_id: EnrollmentId,
    /// Sorted, unique.
    pub names: Vec<SecretName>,
    pub granted: GrantedBy,
    pub record_id: Option<RecordId>,
    pub approver: Option<Login>,
    pub expires_at: Option<Time>,
    pub created_at: Time,
    pub rules_version: String,
    pub end: Option<(GrantEnd, Time)>,
    /// The seal over the grant (see `Sealer`).
    pub seal: String,
    /// For an automatic grant: the seal over policy's automatic decision.
    pub decision_seal: Option<String>,
}

impl Grant {
    /// The grant as of `now`, given its session.
    pub fn settled(mut self, now: Time, enrollment: &Enrollment) -> Self {
        if self.end.is_some() {
            return self;
        }
        let expiry = self.expires_at.filter(|t| now >= *t);
        let session_end = enrollment.clone().settled(now).ended.map(|e| e.at);
        self.end = match (expiry, session_end) {
            (Some(e), Some(s)) if e <= s => Some((GrantEnd::Expired, e)),
            (_, Some(s)) => Some((GrantEnd::Ended, s)),
            (Some(e), None) => Some((GrantEnd::Expired, e)),
            (None, None) => None,
        };
        self
    }

    pub fn is_live(&self) -> bool {
        self.end.is_none()
    }

    /// `live`, `expired`, `revoked` or `ended`.
    pub fn state_str(&self) -> &'static str {
        match self.end {
            None => "live",
            Some((GrantEnd::Expired, _)) => "expired",
            Some((GrantEnd::Revoked, _)) => "revoked",
            Some((GrantEnd::Ended, _)) => "ended",
        }
    }
}

/// A credential-request record's kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecordKind {
    AgentSecret,
    LauncherCredential,
}

impl RecordKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::AgentSecret => "agent_secret",
            Self::LauncherCredential => "launcher_credential",
        }
    }
}

/// A record's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecordState {
    Pending,
    Approved,
    Denied,
    Expired,
    Cancelled,
    Revoked,
}

impl RecordState {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Denied => "denied",
            Self::Expired => "expired",
            Self::Cancelled => "cancelled",
            Self::Revoked => "revoked",
        }
    }
}

/// The `session` object of a record: the ids stated by the request and by the enrollment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionIds {
    pub request: Option<String>,
    pub enrollment: Option<String>,
}

/// What a record says: the immutable part, whose canonical text hashes to the record id.
///
/// Field order is the canonical order; serde writes fields in declaration order, so the JSON
/// text of this struct is its canonical text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordText {
    pub version: u32,
    pub kind: RecordKind,
    pub approver: Approver,
    pub enrollment: Option<EnrollmentSummary>,
    pub session: SessionIds,
    pub identifiers: Vec<String>,
    pub service: Option<String>,
    pub reason: String,
    pub lifetime_seconds: Option<u64>,
    pub rules_version: String,
    #[serde(with = "crate::clock::serde_time")]
    pub expires_at: Time,
    #[serde(with = "crate::clock::serde_time")]
    pub requested_at: Time,
    /// The requesting enrollment (secret request) or `None` (machine login).
    pub enrollment_id: Option<EnrollmentId>,
    /// The request it decides (secret request).
    pub request_id: Option<RequestId>,
    /// The new key's thumbprint and JWK (machine login).
    pub thumbprint: Option<String>,
    pub jwk: Option<PublicJwk>,
    /// Makes two otherwise identical records distinct.
    pub nonce: String,
}

impl RecordText {
    /// The canonical text.
    pub fn canonical(&self) -> String {
        // Serializing plain data to a String cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }
}

/// A decision on a record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordDecision {
    /// `approved`, `denied`, `expired`, `cancelled`.
    pub event: RecordState,
    pub at: Time,
    /// Who decided: a login, `session:<id>`, `launcher:<id>`, `broker`.
    pub by: String,
    pub credential_id: Option<CredentialId>,
    /// The approver's passkey countersignature over the approval statement, when one was
    /// given (the `passkey` module).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub countersignature: Option<Countersignature>,
    /// The seal over (record id, event, by, at), and the countersignature when there is one
    /// (see `Sealer`).
    pub seal: String,
}

/// A WebAuthn assertion over an approval statement, kept with the decision and in the audit
/// chain so that anyone holding the passkey's public key can check it again: the one type the
/// console sends and the broker reads and keeps (`countersign_common::wire`).
pub use countersign_common::wire::Countersignature;

/// A person's registered passkey: the public key the broker verifies their countersignatures
/// with. Sealed as it is written (`broker::guard`), its registration and removal in the audit
/// chain.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Passkey {
    /// The credential id, base64url.
    pub id: String,
    pub person: Login,
    /// The person's name for it ("work laptop").
    pub name: String,
    /// The public key ([`countersign_proto::webauthn::CredentialKey::to_text`]).
    pub key: String,
    /// The authenticator model's AAGUID, hex, as the authenticator stated it.
    pub aaguid: String,
    /// Backup eligible at registration: a synced passkey (clear: bound to one device).
    pub backup_eligible: bool,
    /// The highest sign count seen.
    pub sign_count: u32,
    #[serde(with = "crate::clock::serde_time")]
    pub created_at: Time,
    #[serde(default, with = "crate::clock::serde_time::option")]
    pub removed_at: Option<Time>,
    /// How its registration was allowed: `code` (an operator's enrollment code) or
    /// `passkey:<id>` (an assertion from a passkey already registered).
    pub enrolled_by: String,
    pub seal: String,
}

impl Passkey {
    pub fn is_live(&self) -> bool {
        self.removed_at.is_none()
    }
}

/// A credential-request record as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub id: RecordId,
    /// The canonical text, exactly as hashed.
    pub text: String,
    pub body: RecordText,
    pub state: RecordState,
    pub decided: Option<RecordDecision>,
    /// The machine login's code (while it can be looked up).
    pub code: Option<ConfirmationCode>,
}

impl Record {
    /// Whether the stored text still hashes to the id.
    pub fn text_verifies(&self) -> bool {
        RecordId::of_text(&self.text) == self.id
    }

    /// The record as of `now`: a pending one past `expires_at` is expired.
    pub fn settled(mut self, now: Time) -> Self {
        if self.state == RecordState::Pending && now >= self.body.expires_at {
            self.state = RecordState::Expired;
            self.decided = Some(RecordDecision {
                event: RecordState::Expired,
                at: self.body.expires_at,
                by: "broker".into(),
                credential_id: None,
                countersignature: None,
                seal: String::new(),
            });
        }
        self
    }
}
