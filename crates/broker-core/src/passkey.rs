//! What a passkey countersignature signs (issue 29): the approval statement and its nonce.
//!
//! A person who approves (or denies) a record with a passkey signs a WebAuthn assertion whose
//! challenge is the SHA-256 of a canonical [`Statement`]: the record (whose id is the hash of
//! its whole canonical text), the decision, the secret names, the requesting session, its host
//! and person, the reason, the grant's lifetime, the approver, and a broker [`Nonce`] that
//! expires within five minutes and is used once. The approval page shows
//! [`Statement::words`] before the person touches the key; anyone holding the recorded
//! statement, assertion and public key can check it again offline.
//!
//! The nonce is stateless to issue and single-use to spend: `<random>.<expiry>.<seal>`, the
//! seal the broker's HMAC over the record, the approver, the random part and the expiry
//! ([`Sealer::seal_passkey_nonce`]); spending it is the storage's `remember_once` in the scope
//! [`NONCE_SCOPE`] until its expiry, so a replay after a restart or on another replica is
//! refused by the database. The WebAuthn checks themselves are `countersign_proto::webauthn`.

use aws_lc_rs::digest::{SHA256, digest};
use serde::Serialize;

use countersign_proto::webauthn::{
    Asserted, CredentialKey, Expect, WebauthnError, verify_assertion,
};

use crate::clock::{Entropy, Time};
use crate::ids::{RecordId, SecretName};
use crate::model::{Countersignature, Passkey, Record, RecordKind};
use crate::policy::{Policy, Tier};
use crate::seal::Sealer;

/// How long a nonce may be spent after it was issued.
pub const NONCE_LIFETIME: chrono::Duration = chrono::Duration::minutes(5);
/// The single-use scope nonces are spent in.
pub const NONCE_SCOPE: &str = "passkey-nonce";
/// What precedes the canonical statement in the hash that is the challenge: a version and a
/// purpose, so no other signed object of this project can be mistaken for a statement.
const DOMAIN: &[u8] = b"countersign approval statement v1\n";

/// The decision a statement countersigns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Approve,
    Deny,
}

/// The approval statement. Its fields are in a fixed order and serialize to one canonical
/// JSON text ([`Statement::canonical`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Statement {
    pub version: u32,
    /// `agent_secret` or `launcher_credential` (a machine login).
    pub kind: &'static str,
    /// The record's id: the SHA-256 of its canonical text, so every field of the request is
    /// bound, not only those repeated here.
    pub record: String,
    pub decision: Decision,
    /// The secret names (a secret request), sorted; empty for a machine login.
    pub secrets: Vec<String>,
    /// The requesting session's id, as the request or its enrollment stated it.
    pub session: Option<String>,
    /// Where it runs: the enrollment's runtime id (a host or a pod).
    pub host: Option<String>,
    /// Whose machine it is: the enrollment's operator (empty for a pod: none).
    pub person: Option<String>,
    /// A service account's subject, for a pod.
    pub service: Option<String>,
    pub reason: String,
    /// The grant's lifetime in seconds; none: the session's.
    pub lifetime_seconds: Option<u64>,
    /// Who decides: the signed-in person's login.
    pub approver: String,
    /// The broker's nonce ([`Nonce`]).
    pub nonce: String,
}

impl Statement {
    /// The statement of `decision` on `record` by `approver`, with `nonce`.
    pub fn of(record: &Record, decision: Decision, approver: &str, nonce: &str) -> Self {
        let b = &record.body;
        let mut secrets = match b.kind {
            RecordKind::AgentSecret => b.identifiers.clone(),
            RecordKind::LauncherCredential => Vec::new(),
        };
        secrets.sort();
        let e = b.enrollment.as_ref();
        Statement {
            version: 1,
            kind: b.kind.as_str(),
            record: record.id.to_string(),
            decision,
            secrets,
            session: b.session.request.clone().or(b.session.enrollment.clone()),
            host: e.map(|e| e.runtime_id.clone()).filter(|s| !s.is_empty()),
            person: e.map(|e| e.operator.clone()).filter(|s| !s.is_empty()),
            service: b.service.clone(),
            reason: b.reason.clone(),
            lifetime_seconds: b.lifetime_seconds,
            approver: approver.to_owned(),
            nonce: nonce.to_owned(),
        }
    }

    /// The canonical text: compact JSON, the fields in this struct's order.
    pub fn canonical(&self) -> String {
        // Serializing plain data to a String cannot fail.
        serde_json::to_string(self).unwrap_or_default()
    }

    /// The WebAuthn challenge: SHA-256 of a domain label and the canonical text.
    pub fn challenge(&self) -> [u8; 32] {
        let mut bytes = DOMAIN.to_vec();
        bytes.extend_from_slice(self.canonical().as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(digest(&SHA256, &bytes).as_ref());
        out
    }

    /// The statement in words, as the approval page shows it before the key is touched: one
    /// sentence a person can check, made from this statement's fields alone (so it says
    /// nothing the key does not sign), the requester named by its machine and session label
    /// ([`countersign_common::requester`]) rather than its runtime id. The words are not what
    /// is signed (the canonical text is): they changed in issue 48 without moving any
    /// challenge, so countersignatures made before still verify.
    pub fn words(&self) -> String {
        let verb = match self.decision {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        };
        let reason = format!("for the reason “{}”", self.reason);
        if self.kind == RecordKind::LauncherCredential.as_str() {
            let service = self
                .service
                .as_ref()
                .map(|s| format!(" for the service {s}"))
                .unwrap_or_default();
            return format!(
                "I, {}, {verb} a machine login{service}, {reason}.",
                self.approver
            );
        }
        let (who, close) = match &self.host {
            Some(host) => {
                // A statement names no enrollment kind: a runtime id with no person that the
                // launcher helper did not make is a pod's.
                let pod = self.person.is_none()
                    && countersign_common::requester::helper_runtime(host).is_none();
                let r = countersign_common::requester::Requester::of(
                    if pod { "pod" } else { "session" },
                    host,
                    self.person.as_deref(),
                    None,
                    self.session.as_deref(),
                );
                // "…, logged in as dev@…," closes its apposition.
                (r.phrase(), if r.open_apposition() { "," } else { "" })
            }
            None => match &self.session {
                Some(s) => (format!("the session ‘{s}’"), ""),
                None => ("an unnamed session".to_owned(), ""),
            },
        };
        let lifetime = match self.lifetime_seconds {
            Some(s) => format!("for {}", duration_words(s)),
            None => "for as long as the session lives".to_owned(),
        };
        format!(
            "I, {}, {verb} that {who}{close} receives {} {lifetime}, {reason}.",
            self.approver,
            self.secrets.join(", ")
        )
    }
}

fn duration_words(s: u64) -> String {
    match s {
        s if s % 3600 == 0 => plural(s / 3600, "hour"),
        s if s % 60 == 0 => plural(s / 60, "minute"),
        s => plural(s, "second"),
    }
}

fn plural(n: u64, unit: &str) -> String {
    if n == 1 {
        format!("1 {unit}")
    } else {
        format!("{n} {unit}s")
    }
}

/// What a nonce is for: one person's decision on one record, a registration, or a first
/// registration's enrollment code. The seal covers it, so a nonce for one is refused for any
/// other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purpose<'a> {
    Decide(&'a RecordId),
    Register,
    Enroll,
}

impl Purpose<'_> {
    fn subject(&self) -> String {
        match self {
            Purpose::Decide(r) => format!("record:{r}"),
            Purpose::Register => "register".to_owned(),
            Purpose::Enroll => "enroll".to_owned(),
        }
    }

    /// The single-use scope it is spent in.
    pub fn scope(&self) -> &'static str {
        match self {
            Purpose::Decide(_) | Purpose::Register => NONCE_SCOPE,
            Purpose::Enroll => ENROLL_SCOPE,
        }
    }
}

/// The single-use scope enrollment codes are spent in.
pub const ENROLL_SCOPE: &str = "passkey-enroll";
/// How long an enrollment code lives by default, and at most.
pub const ENROLL_CODE_LIFETIME: chrono::Duration = chrono::Duration::minutes(15);
pub const ENROLL_CODE_MAX_LIFETIME: chrono::Duration = chrono::Duration::hours(24);

/// A nonce: issued to the page that shows what it is for, spent once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nonce {
    pub value: String,
    pub expires_at: Time,
}

/// Why a nonce was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NonceError {
    #[error("the nonce is not one this broker issued for this purpose and person")]
    Invalid,
    #[error("the nonce has expired")]
    Expired,
}

/// Issues a nonce for `person` and `purpose`, valid for `lifetime`.
pub fn issue_nonce(
    sealer: &Sealer,
    entropy: &dyn Entropy,
    purpose: Purpose<'_>,
    person: &str,
    now: Time,
    lifetime: chrono::Duration,
) -> Nonce {
    let random = crate::clock::random_token::<16>(entropy);
    let expires_at = now + lifetime;
    let seconds = expires_at.timestamp();
    let seal = sealer.seal_passkey_nonce(&purpose.subject(), person, &random, seconds);
    Nonce {
        value: format!("{random}.{seconds}.{seal}"),
        expires_at,
    }
}

/// An enrollment code for `person`'s first passkey (`countersign-broker passkeys enroll-code`),
/// living `lifetime`: more than nothing and at most [`ENROLL_CODE_MAX_LIFETIME`]. Sealed with
/// the broker's key, so issuing one needs the key, not the database; spent once at
/// registration.
pub fn enroll_code(
    sealer: &Sealer,
    entropy: &dyn Entropy,
    person: &crate::ids::Login,
    now: Time,
    lifetime: chrono::Duration,
) -> Result<Nonce, &'static str> {
    if lifetime <= chrono::Duration::zero() || lifetime > ENROLL_CODE_MAX_LIFETIME {
        return Err("an enrollment code lives more than 0 seconds and at most 24 hours");
    }
    Ok(issue_nonce(
        sealer,
        entropy,
        Purpose::Enroll,
        person.as_str(),
        now,
        lifetime,
    ))
}

/// Checks that `nonce` was issued for `person` and `purpose`, lives no longer than
/// `lifetime` and has not expired; answers its expiry (how long the caller must remember it
/// spent).
pub fn check_nonce(
    sealer: &Sealer,
    nonce: &str,
    purpose: Purpose<'_>,
    person: &str,
    now: Time,
    lifetime: chrono::Duration,
) -> Result<Time, NonceError> {
    let mut parts = nonce.splitn(3, '.');
    let (Some(random), Some(seconds), Some(seal)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(NonceError::Invalid);
    };
    let seconds: i64 = seconds.parse().map_err(|_| NonceError::Invalid)?;
    if random.len() != 22
        || !sealer.verify_passkey_nonce(&purpose.subject(), person, random, seconds, seal)
    {
        return Err(NonceError::Invalid);
    }
    let expires_at = chrono::DateTime::from_timestamp(seconds, 0).ok_or(NonceError::Invalid)?;
    if expires_at <= now {
        return Err(NonceError::Expired);
    }
    // A nonce dated further ahead than it could have been issued is not ours.
    if expires_at > now + lifetime + chrono::Duration::seconds(60) {
        return Err(NonceError::Invalid);
    }
    Ok(expires_at)
}

/// What precedes a registration nonce in the hash that is a registration's challenge (and the
/// endorsing assertion's, when a registered passkey vouches for the new one).
const REGISTER_DOMAIN: &[u8] = b"countersign passkey registration v1\n";

/// The WebAuthn challenge of a registration with `nonce`.
pub fn registration_challenge(nonce: &str) -> [u8; 32] {
    let mut bytes = REGISTER_DOMAIN.to_vec();
    bytes.extend_from_slice(nonce.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest(&SHA256, &bytes).as_ref());
    out
}

/// Where passkeys are used and which approvals need one (the `[passkeys]` and `[[approval]]`
/// settings). No settings: passkeys are off.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PasskeySettings {
    /// The relying party ID: the console's host name.
    pub rp_id: String,
    /// The console's origins (`https://console.example`).
    pub origins: Vec<String>,
    pub rules: Vec<ApprovalRule>,
}

/// One `[[approval]]` rule: what it covers, and what it asks of the passkey.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalRule {
    pub covers: Covers,
    pub requirement: Requirement,
}

/// What a rule covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Covers {
    Tier(Tier),
    Secret(SecretName),
    MachineLogins,
}

/// What a countersignature must come from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Requirement {
    /// A passkey bound to one device (backup eligibility clear at registration and now).
    pub device_bound: bool,
    /// Authenticator models allowed (AAGUIDs, hex); none: any.
    pub aaguids: Option<Vec<String>>,
}

impl Requirement {
    /// Both requirements at once.
    fn and(self, other: &Requirement) -> Requirement {
        let aaguids = match (self.aaguids, &other.aaguids) {
            (None, b) => b.clone(),
            (a, None) => a,
            (Some(a), Some(b)) => Some(a.into_iter().filter(|x| b.contains(x)).collect()),
        };
        Requirement {
            device_bound: self.device_bound || other.device_bound,
            aaguids,
        }
    }

    /// Whether `p` may countersign under this requirement.
    pub fn admits(&self, p: &Passkey) -> Result<(), &'static str> {
        if self.device_bound && p.backup_eligible {
            return Err("this approval needs a device-bound passkey, not a synced one");
        }
        if let Some(list) = &self.aaguids
            && !list.iter().any(|a| a.eq_ignore_ascii_case(&p.aaguid))
        {
            return Err("this approval needs a passkey of an allowed authenticator model");
        }
        Ok(())
    }
}

impl PasskeySettings {
    /// What approving `record` asks of a countersignature under these rules and `policy`:
    /// none, or the combined requirement of every rule that covers it.
    pub fn requirement(&self, policy: &Policy, record: &Record) -> Option<Requirement> {
        let names: Vec<SecretName> = match record.body.kind {
            RecordKind::AgentSecret => record
                .body
                .identifiers
                .iter()
                .filter_map(|n| SecretName::parse(n).ok())
                .collect(),
            RecordKind::LauncherCredential => Vec::new(),
        };
        let machine = record.body.kind == RecordKind::LauncherCredential;
        self.requirement_for(policy, &names, machine)
    }

    /// The requirement for granting `names` (or, `machine`, a machine login).
    pub fn requirement_for(
        &self,
        policy: &Policy,
        names: &[SecretName],
        machine: bool,
    ) -> Option<Requirement> {
        let mut out: Option<Requirement> = None;
        for rule in &self.rules {
            let covered = match &rule.covers {
                Covers::MachineLogins => machine,
                Covers::Secret(s) => names.contains(s),
                Covers::Tier(t) => names
                    .iter()
                    .any(|n| policy.get(n).is_some_and(|e| e.tier == *t)),
            };
            if covered {
                out = Some(match out {
                    None => rule.requirement.clone(),
                    Some(r) => r.and(&rule.requirement),
                });
            }
        }
        out
    }

    /// What a ceremony over `challenge` must show here: this RP ID, one of these origins, the
    /// person verified.
    pub fn check<T>(
        &self,
        challenge: &[u8],
        f: impl FnOnce(&Expect<'_>) -> Result<T, WebauthnError>,
    ) -> Result<T, WebauthnError> {
        let origins: Vec<&str> = self.origins.iter().map(String::as_str).collect();
        f(&Expect {
            rp_id: &self.rp_id,
            origins: &origins,
            challenge,
            user_verification: true,
        })
    }
}

/// Why a countersignature does not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CountersignError {
    #[error("the countersignature is not base64url")]
    Encoding,
    #[error("the passkey's stored key does not parse")]
    Key,
    #[error("{0}")]
    Webauthn(#[from] WebauthnError),
    #[error("{0}")]
    Requirement(&'static str),
    #[error("the passkey is not the approver's")]
    NotTheApprovers,
}

/// Verifies `c` as `passkey`'s assertion over `statement` (its challenge), the sign count
/// growing past `stored_count`, under `requirement`. The caller has checked the nonce.
pub fn verify_countersignature(
    settings: &PasskeySettings,
    passkey: &Passkey,
    statement: &Statement,
    c: &Countersignature,
    stored_count: u32,
    requirement: Option<&Requirement>,
) -> Result<Asserted, CountersignError> {
    if passkey.person.as_str() != statement.approver || passkey.id != c.credential {
        return Err(CountersignError::NotTheApprovers);
    }
    if let Some(r) = requirement {
        r.admits(passkey).map_err(CountersignError::Requirement)?;
    }
    let key = CredentialKey::from_text(&passkey.key).map_err(|_| CountersignError::Key)?;
    let b = |s: &str| countersign_proto::b64::decode(s).map_err(|_| CountersignError::Encoding);
    let (client, auth, sig) = (
        b(&c.client_data)?,
        b(&c.authenticator_data)?,
        b(&c.signature)?,
    );
    let asserted = settings.check(&statement.challenge(), |expect| {
        verify_assertion(&key, stored_count, &client, &auth, &sig, expect)
    })?;
    if requirement.is_some_and(|r| r.device_bound) && asserted.backup_eligible {
        return Err(CountersignError::Requirement(
            "this approval needs a device-bound passkey, not a synced one",
        ));
    }
    Ok(asserted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemEntropy;
    use crate::ids::{Approver, Login};
    use crate::model::{EnrollmentSummary, RecordState, RecordText, SessionIds};

    fn at(s: i64) -> Time {
        chrono::DateTime::from_timestamp(s, 0).unwrap_or_default()
    }

    fn record() -> Record {
        let body = RecordText {
            version: 1,
            kind: RecordKind::AgentSecret,
            approver: Approver::Person(Login::parse("ada@example.com").expect("login")),
            enrollment: Some(EnrollmentSummary {
                kind: "session".into(),
                runtime_id: "laptop-7".into(),
                operator: "ben@example.com".into(),
                slot: None,
            }),
            session: SessionIds {
                request: Some("claude-42".into()),
                enrollment: Some("claude-42".into()),
            },
            identifiers: vec!["DB_PASSWORD".into(), "AWS_KEY".into()],
            service: None,
            reason: "migrate the \"orders\" table".into(),
            lifetime_seconds: Some(900),
            rules_version: "r1".into(),
            expires_at: at(1_800_000_600),
            requested_at: at(1_800_000_000),
            enrollment_id: None,
            request_id: None,
            thumbprint: None,
            jwk: None,
            nonce: "n".into(),
        };
        let text = body.canonical();
        Record {
            id: RecordId::of_text(&text),
            text,
            body,
            state: RecordState::Pending,
            decided: None,
            code: None,
        }
    }

    fn sealer(byte: u8) -> Sealer {
        Sealer::new(&zeroize::Zeroizing::new(vec![byte; 32])).expect("sealer")
    }

    #[test]
    fn the_statement_is_canonical_and_every_field_moves_its_challenge() {
        let r = record();
        let s = Statement::of(&r, Decision::Approve, "ada@example.com", "N");
        assert_eq!(
            s.canonical(),
            format!(
                r#"{{"version":1,"kind":"agent_secret","record":"{}","decision":"approve","secrets":["AWS_KEY","DB_PASSWORD"],"session":"claude-42","host":"laptop-7","person":"ben@example.com","service":null,"reason":"migrate the \"orders\" table","lifetime_seconds":900,"approver":"ada@example.com","nonce":"N"}}"#,
                r.id
            )
        );
        assert_eq!(
            s.words(),
            "I, ada@example.com, approve that the session ‘laptop-7’ on ben@example.com's machine receives AWS_KEY, DB_PASSWORD for 15 minutes, for the reason “migrate the \"orders\" table”."
        );
        let base = s.challenge();
        let changed: Vec<Statement> = vec![
            Statement {
                decision: Decision::Deny,
                ..s.clone()
            },
            Statement {
                record: "0".repeat(64),
                ..s.clone()
            },
            Statement {
                secrets: vec!["AWS_KEY".into()],
                ..s.clone()
            },
            Statement {
                session: Some("other".into()),
                ..s.clone()
            },
            Statement {
                host: None,
                ..s.clone()
            },
            Statement {
                person: Some("eve@example.com".into()),
                ..s.clone()
            },
            Statement {
                service: Some("sa".into()),
                ..s.clone()
            },
            Statement {
                reason: "other".into(),
                ..s.clone()
            },
            Statement {
                lifetime_seconds: None,
                ..s.clone()
            },
            Statement {
                approver: "eve@example.com".into(),
                ..s.clone()
            },
            Statement {
                nonce: "M".into(),
                ..s.clone()
            },
            Statement {
                kind: "launcher_credential",
                ..s.clone()
            },
        ];
        for c in changed {
            assert_ne!(c.challenge(), base, "{}", c.canonical());
        }
        assert_eq!(
            Statement::of(&r, Decision::Approve, "ada@example.com", "N").challenge(),
            base
        );
    }

    /// What is signed did not move when the words did (issue 48): a statement's canonical
    /// text and challenge are those of every countersignature already stored, pinned here
    /// (SHA-256 of the domain label and the text, computed outside this code).
    #[test]
    fn the_signed_statement_is_the_one_stored_countersignatures_signed() {
        let s = Statement {
            version: 1,
            kind: "agent_secret",
            record: "0a".repeat(32),
            decision: Decision::Approve,
            secrets: vec!["DEMO_PASSKEY".into()],
            session: None,
            host: Some("vm/pid-17541-225829/sh".into()),
            person: Some("dev@countersign.local".into()),
            service: None,
            reason: "deploy the fix".into(),
            lifetime_seconds: Some(900),
            approver: "dev@countersign.local".into(),
            nonce: "N.1.S".into(),
        };
        assert_eq!(
            s.canonical(),
            format!(
                r#"{{"version":1,"kind":"agent_secret","record":"{}","decision":"approve","secrets":["DEMO_PASSKEY"],"session":null,"host":"vm/pid-17541-225829/sh","person":"dev@countersign.local","service":null,"reason":"deploy the fix","lifetime_seconds":900,"approver":"dev@countersign.local","nonce":"N.1.S"}}"#,
                "0a".repeat(32)
            )
        );
        assert_eq!(
            hex::encode(s.challenge()),
            "621ac74d43ab24dab93eac01535d4a0ca17da3d5090eea48b2ec7917b7a96a84"
        );
        // The words: one sentence, the requester by its machine and label, no runtime id.
        assert_eq!(
            s.words(),
            "I, dev@countersign.local, approve that the session ‘sh’ on machine vm, logged in as dev@countersign.local, receives DEMO_PASSKEY for 15 minutes, for the reason “deploy the fix”."
        );
        let deny = Statement {
            decision: Decision::Deny,
            lifetime_seconds: None,
            host: Some("7c1d-uid".into()),
            person: None,
            session: Some("build-3".into()),
            ..s.clone()
        };
        assert_eq!(
            deny.words(),
            "I, dev@countersign.local, deny that the session ‘build-3’ on pod 7c1d-uid receives DEMO_PASSKEY for as long as the session lives, for the reason “deploy the fix”."
        );
        let machine = Statement {
            kind: "launcher_credential",
            secrets: Vec::new(),
            host: None,
            person: None,
            service: Some("ci".into()),
            ..s
        };
        assert_eq!(
            machine.words(),
            "I, dev@countersign.local, approve a machine login for the service ci, for the reason “deploy the fix”."
        );
    }

    fn passkey(backup_eligible: bool, aaguid: &str) -> Passkey {
        Passkey {
            id: "id".into(),
            person: Login::parse("ada@example.com").expect("login"),
            name: "k".into(),
            key: String::new(),
            aaguid: aaguid.into(),
            backup_eligible,
            sign_count: 0,
            created_at: at(1_800_000_000),
            removed_at: None,
            enrolled_by: "code".into(),
            seal: String::new(),
        }
    }

    #[test]
    fn rules_combine_into_one_requirement_for_what_they_cover() {
        use crate::policy::PolicyEntry;
        let name = |n: &str| SecretName::parse(n).expect("name");
        let policy = Policy::new([
            PolicyEntry {
                name: name("DB_PASSWORD"),
                owner: Login::parse("ada@example.com").expect("login"),
                tier: Tier::Owner,
                resource_name: "r1".into(),
                issuer: None,
            },
            PolicyEntry {
                name: name("AWS_KEY"),
                owner: Login::parse("ada@example.com").expect("login"),
                tier: Tier::Shared,
                resource_name: "r2".into(),
                issuer: None,
            },
        ]);
        let rule = |covers, device_bound, aaguids: Option<Vec<&str>>| ApprovalRule {
            covers,
            requirement: Requirement {
                device_bound,
                aaguids: aaguids.map(|v| v.into_iter().map(str::to_owned).collect()),
            },
        };
        let settings = PasskeySettings {
            rp_id: "c.example".into(),
            origins: vec!["https://c.example".into()],
            rules: vec![
                rule(Covers::Tier(Tier::Owner), false, Some(vec!["aa", "bb"])),
                rule(Covers::Secret(name("AWS_KEY")), true, None),
                rule(
                    Covers::Secret(name("DB_PASSWORD")),
                    false,
                    Some(vec!["bb", "cc"]),
                ),
                rule(Covers::MachineLogins, false, None),
            ],
        };
        // Owner tier and its own rule: the AAGUID lists intersect.
        let db = settings
            .requirement_for(&policy, &[name("DB_PASSWORD")], false)
            .expect("covered");
        assert_eq!(db.aaguids, Some(vec!["bb".to_owned()]));
        assert!(!db.device_bound);
        // Both secrets: device-bound from one rule, the models from the others.
        let both = settings
            .requirement_for(&policy, &[name("DB_PASSWORD"), name("AWS_KEY")], false)
            .expect("covered");
        assert!(both.device_bound);
        assert!(both.admits(&passkey(false, "BB")).is_ok());
        assert!(both.admits(&passkey(true, "bb")).is_err(), "synced");
        assert!(both.admits(&passkey(false, "aa")).is_err(), "another model");
        // Nothing covers an unknown secret; machine logins have their own rule.
        assert_eq!(
            settings.requirement_for(&policy, &[name("OTHER")], false),
            None
        );
        assert_eq!(
            settings.requirement_for(&policy, &[], true),
            Some(Requirement::default())
        );
        // The record's kind decides which: a machine login's record.
        let mut r = record();
        r.body.kind = RecordKind::LauncherCredential;
        assert_eq!(
            settings.requirement(&policy, &r),
            Some(Requirement::default())
        );
    }

    #[test]
    fn a_nonce_is_for_one_purpose_and_an_enrollment_code_for_one_person() {
        let (s, now) = (sealer(7), at(1_800_000_000));
        let ada = Login::parse("ada@example.com").expect("login");
        let code = enroll_code(&s, &SystemEntropy, &ada, now, ENROLL_CODE_LIFETIME).expect("code");
        let check = |purpose, who: &str| {
            check_nonce(&s, &code.value, purpose, who, now, ENROLL_CODE_MAX_LIFETIME)
        };
        assert_eq!(
            check(Purpose::Enroll, "ada@example.com"),
            Ok(code.expires_at)
        );
        assert_eq!(
            check(Purpose::Enroll, "bob@example.com"),
            Err(NonceError::Invalid)
        );
        assert_eq!(
            check(Purpose::Register, "ada@example.com"),
            Err(NonceError::Invalid)
        );
        let r = RecordId::of_text("r");
        assert_eq!(
            check(Purpose::Decide(&r), "ada@example.com"),
            Err(NonceError::Invalid)
        );
        assert!(enroll_code(&s, &SystemEntropy, &ada, now, chrono::Duration::zero()).is_err());
        assert!(enroll_code(&s, &SystemEntropy, &ada, now, chrono::Duration::hours(25)).is_err());
        assert_ne!(registration_challenge("a"), registration_challenge("b"));
    }

    #[test]
    fn a_nonce_is_for_one_record_and_approver_and_expires() {
        let (s, now, r) = (sealer(7), at(1_800_000_000), record());
        let n = issue_nonce(
            &s,
            &SystemEntropy,
            Purpose::Decide(&r.id),
            "ada@example.com",
            now,
            NONCE_LIFETIME,
        );
        assert_eq!(n.expires_at, now + NONCE_LIFETIME);
        assert_eq!(
            check_nonce(
                &s,
                &n.value,
                Purpose::Decide(&r.id),
                "ada@example.com",
                now,
                NONCE_LIFETIME
            ),
            Ok(n.expires_at)
        );
        let other = RecordId::of_text("another record");
        for (nonce, record, who, when, want) in [
            (
                n.value.as_str(),
                &other,
                "ada@example.com",
                now,
                NonceError::Invalid,
            ),
            (
                n.value.as_str(),
                &r.id,
                "eve@example.com",
                now,
                NonceError::Invalid,
            ),
            (
                n.value.as_str(),
                &r.id,
                "ada@example.com",
                n.expires_at,
                NonceError::Expired,
            ),
            ("x.1.y", &r.id, "ada@example.com", now, NonceError::Invalid),
            ("", &r.id, "ada@example.com", now, NonceError::Invalid),
        ] {
            assert_eq!(
                check_nonce(
                    &s,
                    nonce,
                    Purpose::Decide(record),
                    who,
                    when,
                    NONCE_LIFETIME
                ),
                Err(want)
            );
        }
        // Another broker's key; an expiry moved later (the seal covers it).
        assert_eq!(
            check_nonce(
                &sealer(8),
                &n.value,
                Purpose::Decide(&r.id),
                "ada@example.com",
                now,
                NONCE_LIFETIME
            ),
            Err(NonceError::Invalid)
        );
        let mut parts: Vec<&str> = n.value.split('.').collect();
        let later = (n.expires_at.timestamp() + 3600).to_string();
        parts[1] = &later;
        assert_eq!(
            check_nonce(
                &s,
                &parts.join("."),
                Purpose::Decide(&r.id),
                "ada@example.com",
                now,
                NONCE_LIFETIME
            ),
            Err(NonceError::Invalid)
        );
        // Two nonces for one statement differ.
        let m = issue_nonce(
            &s,
            &SystemEntropy,
            Purpose::Decide(&r.id),
            "ada@example.com",
            now,
            NONCE_LIFETIME,
        );
        assert_ne!(m.value, n.value);
    }
}
