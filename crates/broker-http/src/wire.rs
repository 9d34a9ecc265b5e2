//! Wire shapes of the broker API (spec, "Resources and their fields"), kept apart from the
//! core's types: each answer is built from domain values here, each body parsed into a struct
//! that refuses unknown fields.

use countersign_broker_core::broker::approver::GrantListItem;
use countersign_broker_core::clock::{Time, rfc3339};
use countersign_broker_core::model::{
    Enrollment, EnrollmentSummary, Grant, LauncherCredential, Record, Request,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

fn t(t: &Time) -> String {
    rfc3339(t)
}

fn ot(x: &Option<Time>) -> Value {
    x.as_ref()
        .map(|x| Value::String(rfc3339(x)))
        .unwrap_or(Value::Null)
}

// ----- bodies -----

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnrollBody {
    pub kind: String,
    pub runtime_id: String,
    #[serde(default)]
    pub slot: Option<String>,
    #[serde(default)]
    pub operator: Option<String>,
    pub thumbprint: String,
    /// The session's public key; its thumbprint must equal `thumbprint`.
    pub jwk: Value,
    #[serde(default)]
    pub session_id: Option<String>,
    #[serde(default)]
    pub pod_token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignedBody {
    pub request: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenLoginBody {
    pub token: String,
    pub request: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenewBody {
    #[serde(default)]
    pub pod_token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestBody {
    pub request: String,
    #[serde(default)]
    pub session_id: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    #[serde(default)]
    pub approver: Option<String>,
    #[serde(default)]
    pub code: Option<String>,
    /// The approver's passkey assertion over the statement (docs/passkeys.md).
    #[serde(default)]
    pub countersignature: Option<CountersignatureBody>,
}

/// A WebAuthn assertion as the console passes it on: base64url fields, the statement's nonce.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountersignatureBody {
    pub credential: String,
    pub nonce: String,
    pub client_data: String,
    pub authenticator_data: String,
    pub signature: String,
}

impl CountersignatureBody {
    pub fn into_core(self) -> countersign_broker_core::model::Countersignature {
        countersign_broker_core::model::Countersignature {
            credential: self.credential,
            nonce: self.nonce,
            client_data: self.client_data,
            authenticator_data: self.authenticator_data,
            signature: self.signature,
        }
    }
}

/// `POST /v1/passkeys`: a registration.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeyBody {
    #[serde(default)]
    pub approver: Option<String>,
    pub name: String,
    pub nonce: String,
    pub client_data: String,
    pub attestation_object: String,
    #[serde(default)]
    pub enroll_code: Option<String>,
    #[serde(default)]
    pub endorsement: Option<CountersignatureBody>,
}

/// `PATCH /v1/passkeys/{id}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeyRenameBody {
    #[serde(default)]
    pub approver: Option<String>,
    pub name: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupBody {
    #[serde(default)]
    pub code: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevokeBody {
    #[serde(default)]
    pub approver: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ApproverQuery {
    pub approver: Option<String>,
}

// ----- answers -----

pub fn enrollment_summary(e: &EnrollmentSummary) -> Value {
    json!({ "kind": e.kind, "runtime_id": e.runtime_id, "operator": e.operator, "slot": e.slot })
}

pub fn enrolled(e: &Enrollment) -> Value {
    json!({
        "enrollment_id": e.id.to_string(),
        "lease_expires_at": t(&e.lease_expires_at),
        "slot": e.slot.as_ref().map(|s| s.as_str()),
    })
}

pub fn session_grant(g: &Grant) -> Value {
    json!({
        "grant_id": g.id.to_string(),
        "request_id": g.request_id.to_string(),
        "approver": g.approver.as_ref().map(|a| a.as_str()),
        "expires_at": ot(&g.expires_at),
    })
}

pub fn enrollment_self(e: &Enrollment, grants: &[Grant]) -> Value {
    json!({
        "enrollment_id": e.id.to_string(),
        "grants": grants.iter().map(session_grant).collect::<Vec<_>>(),
        "kind": e.kind.as_str(),
        "lease_expires_at": t(&e.lease_expires_at),
        "operator": e.operator.as_ref().map(|o| o.as_str()),
        "slot": e.slot.as_ref().map(|s| s.as_str()),
    })
}

pub fn request(r: &Request, coalesced: Option<bool>) -> Value {
    let mut v = json!({
        "request_id": r.id.to_string(),
        "state": r.state.as_str(),
        "secrets": r.secrets.iter().map(|(n, d)| json!({"name": n.as_str(), "decision": d.as_str()})).collect::<Vec<_>>(),
        "grant_id": r.grant_id.map(|g| g.to_string()),
        "record_id": r.record_id.map(|g| g.to_string()),
        "approver": r.approver.as_ref().map(|a| a.as_str()),
        "lifetime_seconds": r.lifetime_seconds,
        "decided_at": ot(&r.decided_at),
        "decision": r.decision.as_ref().map(|d| json!({"by": d.by, "at": t(&d.at)})),
    });
    if let (Some(c), Some(obj)) = (coalesced, v.as_object_mut()) {
        obj.insert("coalesced".into(), Value::Bool(c));
    }
    v
}

/// [`request`], saying `"countersign": "passkey"` while it waits for an approval that policy
/// says needs the approver's passkey (docs/passkeys.md): a client can tell its person where and
/// how to approve.
pub fn request_for(
    broker: &countersign_broker_core::Broker,
    r: &Request,
    coalesced: Option<bool>,
) -> Value {
    let mut v = request(r, coalesced);
    let names: Vec<_> = r.secrets.iter().map(|(n, _)| n.clone()).collect();
    let passkey = r.state.as_str() == "pending"
        && broker
            .config()
            .passkeys
            .as_ref()
            .is_some_and(|p| p.requirement_for(&broker.policy(), &names, false).is_some());
    if let (true, Some(obj)) = (passkey, v.as_object_mut()) {
        obj.insert("countersign".into(), Value::String("passkey".into()));
    }
    v
}

pub fn record(r: &Record) -> Value {
    let b = &r.body;
    json!({
        "record_id": r.id.to_string(),
        // Added in issue 48 (answers grow by fields): the request it decides, by the id its
        // session was given; null for a machine login.
        "request_id": b.request_id.map(|q| q.to_string()),
        "kind": b.kind.as_str(),
        "state": r.state.as_str(),
        "approver": b.approver.as_str(),
        "enrollment": b.enrollment.as_ref().map(enrollment_summary),
        "session": { "request": b.session.request, "enrollment": b.session.enrollment },
        "identifiers": b.identifiers,
        "service": b.service,
        "reason": b.reason,
        "lifetime_seconds": b.lifetime_seconds,
        "rules_version": b.rules_version,
        "expires_at": t(&b.expires_at),
        "requested_at": t(&b.requested_at),
        "decided": r.decided.as_ref().map(|d| json!({
            "event": d.event.as_str(),
            "at": t(&d.at),
            "credential_id": d.credential_id.map(|c| c.to_string()),
        })),
    })
}

pub fn pending_item(r: &Record) -> Value {
    json!({
        "record_id": r.id.to_string(),
        "request_id": r.body.request_id.map(|q| q.to_string()),
        "kind": r.body.kind.as_str(),
        "identifiers": r.body.identifiers,
        "requested_at": t(&r.body.requested_at),
        "session": { "request": r.body.session.request, "enrollment": r.body.session.enrollment },
    })
}

/// `{"credentials": [...]}`: the machine logins a list answers, each `expired` or not at
/// `now`.
pub fn credentials(list: &[LauncherCredential], now: Time) -> Value {
    json!({ "credentials": list.iter().map(|c| credential(c, now)).collect::<Vec<_>>() })
}

fn credential(c: &LauncherCredential, now: Time) -> Value {
    json!({
        "credential_id": c.id.to_string(),
        "host": c.host,
        "service": c.service,
        "subject": c.subject,
        "approved_by": c.approved_by,
        "issued_at": t(&c.issued_at),
        "expires_at": t(&c.expires_at),
        "expired": c.is_expired(now),
    })
}

/// `{"grants": [...]}`: the grants a list answers.
pub fn grants(list: &[GrantListItem]) -> Value {
    json!({ "grants": list.iter().map(grant_item).collect::<Vec<_>>() })
}

fn grant_item(i: &GrantListItem) -> Value {
    let g = &i.grant;
    json!({
        "grant_id": g.id.to_string(),
        "granted": match g.granted {
            countersign_broker_core::model::GrantedBy::Automatic => "automatic",
            countersign_broker_core::model::GrantedBy::Approval => "approval",
        },
        "record_id": g.record_id.map(|r| r.to_string()),
        "enrollment": enrollment_summary(&i.enrollment),
        "names": g.names.iter().map(|n| n.as_str()).collect::<Vec<_>>(),
        "approver": g.approver.as_ref().map(|a| a.as_str()),
        "expires_at": ot(&g.expires_at),
        "created_at": t(&g.created_at),
        "state": g.state_str(),
        "credentials": i.credentials.iter().map(issued).collect::<Vec<_>>(),
    })
}

/// An issued credential as a grant's list item shows it: never its secret.
fn issued(c: &countersign_broker_core::issuer::Issued) -> Value {
    json!({
        "secret": c.secret.as_str(),
        "issuer": c.issuer,
        "name": c.name,
        "state": c.state.as_str(),
        "error": c.last_error,
        "next_attempt_at": ot(&c.next_attempt_at),
        "destroyed_at": ot(&c.destroyed_at),
    })
}

/// `{"state": ...}`.
#[derive(Debug, Serialize)]
pub struct StateAnswer {
    pub state: &'static str,
}

/// A passkey as the console lists it (its public key stays in the broker and the audit chain).
pub fn passkey(p: &countersign_broker_core::model::Passkey) -> Value {
    json!({
        "id": p.id,
        "name": p.name,
        "aaguid": p.aaguid,
        "synced": p.backup_eligible,
        "created_at": t(&p.created_at),
        "enrolled_by": p.enrolled_by,
    })
}

/// `POST /v1/passkeys/challenge`'s answer: what `navigator.credentials.create()` needs.
pub fn passkey_offer(o: &countersign_broker_core::broker::RegistrationOffer) -> Value {
    use countersign_proto::b64::encode;
    json!({
        "nonce": o.nonce.value,
        "expires_at": t(&o.nonce.expires_at),
        "challenge": encode(&o.challenge),
        "rp_id": o.rp_id,
        "user_handle": encode(&o.user_handle),
        "passkeys": o.passkeys.iter().map(passkey).collect::<Vec<_>>(),
    })
}

/// `POST /v1/credential-requests/{record}/statement`'s answer.
pub fn statement(o: &countersign_broker_core::broker::StatementOffer, rp_id: &str) -> Value {
    json!({
        "rp_id": rp_id,
        "statement": o.statement.canonical(),
        "words": o.statement.words(),
        "challenge": countersign_proto::b64::encode(&o.statement.challenge()),
        "nonce": o.nonce.value,
        "expires_at": t(&o.nonce.expires_at),
        "required": o.requirement.is_some(),
        "device_bound": o.requirement.as_ref().is_some_and(|r| r.device_bound),
        "aaguids": o.requirement.as_ref().and_then(|r| r.aaguids.clone()),
        "passkeys": o.passkeys.iter().map(passkey).collect::<Vec<_>>(),
    })
}
