//! Wire shapes of the broker API (spec, "Resources and their fields"), kept apart from the
//! core's types: each body is parsed into a struct here that refuses unknown fields, and each
//! answer is built here from domain values into its type in `countersign_common::wire`, the one
//! definition its readers (the console) read with.

use countersign_broker_core::broker::approver::GrantListItem;
use countersign_broker_core::clock::Time;
use countersign_broker_core::model::{
    Enrollment, EnrollmentSummary, Grant, LauncherCredential, Record, Request,
};
use countersign_common::wire as w;
pub use countersign_common::wire::Countersignature;
use serde::Deserialize;
use serde_json::Value;

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
    pub countersignature: Option<Countersignature>,
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
    pub endorsement: Option<Countersignature>,
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

pub fn enrollment_summary(e: &EnrollmentSummary) -> w::EnrollmentSummary {
    w::EnrollmentSummary {
        kind: e.kind.clone(),
        operator: e.operator.clone(),
        runtime_id: e.runtime_id.clone(),
        slot: e.slot.clone(),
    }
}

fn slot(e: &Enrollment) -> Option<String> {
    e.slot.as_ref().map(|s| s.as_str().to_owned())
}

pub fn enrolled(e: &Enrollment) -> w::Enrolled {
    w::Enrolled {
        enrollment_id: e.id.to_string(),
        lease_expires_at: e.lease_expires_at,
        slot: slot(e),
    }
}

pub fn session_grant(g: &Grant) -> w::SessionGrant {
    w::SessionGrant {
        approver: g.approver.as_ref().map(|a| a.as_str().to_owned()),
        expires_at: g.expires_at,
        grant_id: g.id.to_string(),
        request_id: g.request_id.to_string(),
    }
}

pub fn enrollment_self(e: &Enrollment, grants: &[Grant]) -> w::EnrollmentSelf {
    w::EnrollmentSelf {
        enrollment_id: e.id.to_string(),
        grants: grants.iter().map(session_grant).collect(),
        kind: e.kind.as_str().to_owned(),
        lease_expires_at: e.lease_expires_at,
        operator: e.operator.as_ref().map(|o| o.as_str().to_owned()),
        slot: slot(e),
    }
}

pub fn request(r: &Request, coalesced: Option<bool>) -> w::RequestAnswer {
    w::RequestAnswer {
        approver: r.approver.as_ref().map(|a| a.as_str().to_owned()),
        coalesced,
        countersign: None,
        decided_at: r.decided_at,
        decision: r.decision.as_ref().map(|d| w::DecisionBy {
            at: d.at,
            by: d.by.clone(),
        }),
        grant_id: r.grant_id.map(|g| g.to_string()),
        lifetime_seconds: r.lifetime_seconds,
        record_id: r.record_id.map(|g| g.to_string()),
        request_id: r.id.to_string(),
        secrets: r
            .secrets
            .iter()
            .map(|(n, d)| w::SecretDecision {
                decision: d.as_str().to_owned(),
                name: n.as_str().to_owned(),
            })
            .collect(),
        state: r.state.as_str().to_owned(),
    }
}

/// [`request`], saying `"countersign": "passkey"` while it waits for an approval that policy
/// says needs the approver's passkey (docs/passkeys.md): a client can tell its person where and
/// how to approve.
pub fn request_for(
    broker: &countersign_broker_core::Broker,
    r: &Request,
    coalesced: Option<bool>,
) -> w::RequestAnswer {
    let names: Vec<_> = r.secrets.iter().map(|(n, _)| n.clone()).collect();
    let passkey = r.state.as_str() == "pending"
        && broker
            .config()
            .passkeys
            .as_ref()
            .is_some_and(|p| p.requirement_for(&broker.policy(), &names, false).is_some());
    w::RequestAnswer {
        countersign: passkey.then(|| "passkey".to_owned()),
        ..request(r, coalesced)
    }
}

fn session_ids(s: &countersign_broker_core::model::SessionIds) -> w::SessionIds {
    w::SessionIds {
        enrollment: s.enrollment.clone(),
        request: s.request.clone(),
    }
}

pub fn record(r: &Record) -> w::CredentialRecord {
    let b = &r.body;
    w::CredentialRecord {
        approver: b.approver.as_str().to_owned(),
        decided: r.decided.as_ref().map(|d| w::Decided {
            at: d.at,
            credential_id: d.credential_id.map(|c| c.to_string()),
            event: d.event.as_str().to_owned(),
        }),
        enrollment: b.enrollment.as_ref().map(enrollment_summary),
        expires_at: b.expires_at,
        identifiers: b.identifiers.clone(),
        kind: b.kind.as_str().to_owned(),
        lifetime_seconds: b.lifetime_seconds,
        reason: b.reason.clone(),
        record_id: r.id.to_string(),
        // Added in issue 48 (answers grow by fields): the request it decides, by the id its
        // session was given; null for a machine login.
        request_id: b.request_id.map(|q| q.to_string()),
        requested_at: b.requested_at,
        rules_version: b.rules_version.clone(),
        service: b.service.clone(),
        session: session_ids(&b.session),
        state: r.state.as_str().to_owned(),
    }
}

pub fn pending_item(r: &Record) -> w::PendingItem {
    w::PendingItem {
        identifiers: r.body.identifiers.clone(),
        kind: r.body.kind.as_str().to_owned(),
        record_id: r.id.to_string(),
        request_id: r.body.request_id.map(|q| q.to_string()),
        requested_at: r.body.requested_at,
        session: session_ids(&r.body.session),
    }
}

/// `{"credentials": [...]}`: the machine logins a list answers, each `expired` or not at
/// `now`.
pub fn credentials(list: &[LauncherCredential], now: Time) -> w::MachineLoginList {
    w::MachineLoginList {
        credentials: list.iter().map(|c| credential(c, now)).collect(),
    }
}

fn credential(c: &LauncherCredential, now: Time) -> w::MachineLogin {
    w::MachineLogin {
        approved_by: c.approved_by.clone(),
        credential_id: c.id.to_string(),
        expired: c.is_expired(now),
        expires_at: c.expires_at,
        host: c.host.clone(),
        issued_at: c.issued_at,
        service: c.service.clone(),
        subject: c.subject.clone(),
    }
}

/// `{"grants": [...]}`: the grants a list answers.
pub fn grants(list: &[GrantListItem]) -> w::GrantList {
    w::GrantList {
        grants: list.iter().map(grant_item).collect(),
    }
}

fn grant_item(i: &GrantListItem) -> w::GrantItem {
    let g = &i.grant;
    w::GrantItem {
        approver: g.approver.as_ref().map(|a| a.as_str().to_owned()),
        created_at: g.created_at,
        credentials: i.credentials.iter().map(issued).collect(),
        enrollment: enrollment_summary(&i.enrollment),
        expires_at: g.expires_at,
        grant_id: g.id.to_string(),
        granted: match g.granted {
            countersign_broker_core::model::GrantedBy::Automatic => "automatic",
            countersign_broker_core::model::GrantedBy::Approval => "approval",
        }
        .to_owned(),
        names: g.names.iter().map(|n| n.as_str().to_owned()).collect(),
        record_id: g.record_id.map(|r| r.to_string()),
        state: g.state_str().to_owned(),
    }
}

/// An issued credential as a grant's list item shows it: never its secret.
fn issued(c: &countersign_broker_core::issuer::Issued) -> w::IssuedCredential {
    w::IssuedCredential {
        destroyed_at: c.destroyed_at,
        error: c.last_error.clone(),
        issuer: c.issuer.clone(),
        name: c.name.clone(),
        next_attempt_at: c.next_attempt_at,
        secret: c.secret.as_str().to_owned(),
        state: c.state.as_str().to_owned(),
    }
}

/// A passkey as the console lists it (its public key stays in the broker and the audit chain).
pub fn passkey(p: &countersign_broker_core::model::Passkey) -> w::PasskeyItem {
    w::PasskeyItem {
        aaguid: p.aaguid.clone(),
        created_at: p.created_at,
        enrolled_by: p.enrolled_by.clone(),
        id: p.id.clone(),
        name: p.name.clone(),
        synced: p.backup_eligible,
    }
}

/// `{"passkeys": [...]}`.
pub fn passkeys(list: &[countersign_broker_core::model::Passkey]) -> w::PasskeyList {
    w::PasskeyList {
        passkeys: list.iter().map(passkey).collect(),
    }
}

/// `POST /v1/passkeys/challenge`'s answer: what `navigator.credentials.create()` needs.
pub fn passkey_offer(o: &countersign_broker_core::broker::RegistrationOffer) -> w::PasskeyOffer {
    use countersign_proto::b64::encode;
    w::PasskeyOffer {
        challenge: encode(&o.challenge),
        expires_at: o.nonce.expires_at,
        nonce: o.nonce.value.clone(),
        passkeys: o.passkeys.iter().map(passkey).collect(),
        rp_id: o.rp_id.clone(),
        user_handle: encode(&o.user_handle),
    }
}

/// `POST /v1/credential-requests/{record}/statement`'s answer.
pub fn statement(
    o: &countersign_broker_core::broker::StatementOffer,
    rp_id: &str,
) -> w::ApprovalStatement {
    w::ApprovalStatement {
        aaguids: o.requirement.as_ref().and_then(|r| r.aaguids.clone()),
        challenge: countersign_proto::b64::encode(&o.statement.challenge()),
        device_bound: o.requirement.as_ref().is_some_and(|r| r.device_bound),
        expires_at: o.nonce.expires_at,
        nonce: o.nonce.value.clone(),
        passkeys: o.passkeys.iter().map(passkey).collect(),
        required: o.requirement.is_some(),
        rp_id: rp_id.to_owned(),
        statement: o.statement.canonical(),
        words: o.statement.words(),
    }
}

/// `GET /v1/settings`'s answer: the store's settings and the secrets issuers make per grant.
pub fn settings(
    s: countersign_broker_core::secrets::Settings,
    issued: &[countersign_broker_core::broker::IssuedSecret],
) -> w::Settings {
    w::Settings {
        cloud_a_account_id: s.cloud_a_account_id,
        cloud_a_key_arn: s.cloud_a_key_arn,
        cloud_a_region: s.cloud_a_region,
        cloud_b_key_name: s.cloud_b_key_name,
        cloud_b_project: s.cloud_b_project,
        issued: issued
            .iter()
            .map(|s| w::IssuedSecret {
                issuer: s.issuer.kind().to_owned(),
                kind: "issued".to_owned(),
                name: s.name.as_str().to_owned(),
                owner: s.owner.as_str().to_owned(),
                tier: s.tier.as_str().to_owned(),
            })
            .collect(),
        secrets_prefix: s.secrets_prefix,
        store: s.store,
    }
}
