//! The sealed approval chain. A key the broker holds outside the database seals each decision
//! and each grant; releasing values recomputes every link, so a row written straight into the
//! database, or a record edited after its decision, fails closed (GRANT_CHAIN_INVALID).
//!
//! Seals are HMAC-SHA-256 over length-prefixed fields with a domain label, base64url.

use std::sync::Arc;

use aws_lc_rs::{aead, hmac};
use zeroize::Zeroizing;

use crate::clock::Time;
use crate::ids::{EnrollmentId, RecordId, RequestId, SecretName};
use crate::model::{Countersignature, Enrollment, Grant, LauncherCredential, Passkey, RecordState};

/// The sealing key. Its `Debug` shows nothing of the key.
#[derive(Clone)]
pub struct Sealer {
    key: hmac::Key,
    /// AES-256-GCM under a key derived from the seal key: issued credentials at rest.
    cipher: Arc<aead::LessSafeKey>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sealer(..)")
    }
}

impl Sealer {
    /// A sealer from key bytes (at least 32).
    pub fn new(key: &Zeroizing<Vec<u8>>) -> Option<Self> {
        if key.len() < 32 {
            return None;
        }
        let key = hmac::Key::new(hmac::HMAC_SHA256, key);
        // A key of its own for encryption, derived so that no seal is ever made with it.
        let derived = Zeroizing::new(
            hmac::sign(&key, b"countersign issued-credential encryption v1")
                .as_ref()
                .to_vec(),
        );
        let unbound = aead::UnboundKey::new(&aead::AES_256_GCM, &derived).ok()?;
        Some(Self {
            key,
            cipher: Arc::new(aead::LessSafeKey::new(unbound)),
        })
    }

    /// Encrypts `plain` bound to `context` (what it belongs to: a grant and secret), with a
    /// random nonce: base64url of nonce and ciphertext.
    pub fn encrypt(&self, context: &str, plain: &[u8]) -> Option<String> {
        let mut nonce = [0u8; aead::NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).ok()?;
        let mut buf = Zeroizing::new(plain.to_vec());
        self.cipher
            .seal_in_place_append_tag(
                aead::Nonce::assume_unique_for_key(nonce),
                aead::Aad::from(context.as_bytes()),
                &mut *buf,
            )
            .ok()?;
        let mut out = nonce.to_vec();
        out.extend_from_slice(&buf);
        Some(countersign_proto::b64::encode(&out))
    }

    /// The plain text [`Sealer::encrypt`] sealed for `context`; `None` for anything else (another
    /// context, another key, an edited byte).
    pub fn decrypt(&self, context: &str, sealed: &str) -> Option<Zeroizing<Vec<u8>>> {
        let bytes = countersign_proto::b64::decode(sealed).ok()?;
        if bytes.len() < aead::NONCE_LEN {
            return None;
        }
        let (nonce, body) = bytes.split_at(aead::NONCE_LEN);
        let nonce = aead::Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut buf = Zeroizing::new(body.to_vec());
        let plain = self
            .cipher
            .open_in_place(nonce, aead::Aad::from(context.as_bytes()), &mut buf)
            .ok()?;
        Some(Zeroizing::new(plain.to_vec()))
    }

    fn mac(&self, label: &str, fields: &[&[u8]]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.key);
        for f in std::iter::once(label.as_bytes()).chain(fields.iter().copied()) {
            ctx.update(&(f.len() as u64).to_be_bytes());
            ctx.update(f);
        }
        ctx.sign()
    }

    fn seal(&self, label: &str, fields: &[&[u8]]) -> String {
        countersign_proto::b64::encode(self.mac(label, fields).as_ref())
    }

    fn verify(&self, label: &str, fields: &[&[u8]], seal: &str) -> bool {
        let Ok(tag) = countersign_proto::b64::decode(seal) else {
            return false;
        };
        let expected = self.mac(label, fields);
        // Constant-time comparison of the two tags.
        aws_lc_rs::constant_time::verify_slices_are_equal(expected.as_ref(), &tag).is_ok()
    }

    /// Seals a decision on a record, and the passkey countersignature that came with it: a
    /// countersignature removed, added or swapped after the decision breaks the seal.
    pub fn seal_decision(
        &self,
        record: &RecordId,
        event: RecordState,
        by: &str,
        at: Time,
        countersignature: Option<&Countersignature>,
    ) -> String {
        let (label, f) = decision_fields(record, event, by, at, countersignature);
        self.seal(label, &f.iter().map(|s| s.as_bytes()).collect::<Vec<_>>())
    }

    pub fn verify_decision(
        &self,
        record: &RecordId,
        event: RecordState,
        by: &str,
        at: Time,
        countersignature: Option<&Countersignature>,
        seal: &str,
    ) -> bool {
        let (label, f) = decision_fields(record, event, by, at, countersignature);
        self.verify(
            label,
            &f.iter().map(|s| s.as_bytes()).collect::<Vec<_>>(),
            seal,
        )
    }

    /// Seals a passkey nonce (the `passkey` module): what it is for (`record:<id>`, `register`,
    /// `enroll`), the person, its random part and its expiry (Unix seconds).
    pub fn seal_passkey_nonce(
        &self,
        subject: &str,
        person: &str,
        random: &str,
        expires: i64,
    ) -> String {
        let e = expires.to_string();
        self.seal(
            "passkey-nonce/v1",
            &[
                subject.as_bytes(),
                person.as_bytes(),
                random.as_bytes(),
                e.as_bytes(),
            ],
        )
    }

    pub fn verify_passkey_nonce(
        &self,
        subject: &str,
        person: &str,
        random: &str,
        expires: i64,
        seal: &str,
    ) -> bool {
        let e = expires.to_string();
        self.verify(
            "passkey-nonce/v1",
            &[
                subject.as_bytes(),
                person.as_bytes(),
                random.as_bytes(),
                e.as_bytes(),
            ],
            seal,
        )
    }

    /// Seals a registered passkey: everything but its seal.
    pub fn seal_passkey(&self, p: &Passkey) -> String {
        let f = passkey_fields(p);
        self.seal("passkey/v1", &f.each_ref().map(|s| s.as_bytes()))
    }

    pub fn verify_passkey(&self, p: &Passkey) -> bool {
        let f = passkey_fields(p);
        self.verify("passkey/v1", &f.each_ref().map(|s| s.as_bytes()), &p.seal)
    }

    /// Seals policy's automatic decision for a request.
    pub fn seal_automatic(
        &self,
        request: &RequestId,
        enrollment: &EnrollmentId,
        names: &[SecretName],
        rules_version: &str,
        at: Time,
    ) -> String {
        let f = automatic_fields(request, enrollment, names, rules_version, at);
        self.seal(AUTOMATIC, &f.each_ref().map(|s| s.as_bytes()))
    }

    pub fn verify_automatic(
        &self,
        request: &RequestId,
        enrollment: &EnrollmentId,
        names: &[SecretName],
        rules_version: &str,
        at: Time,
        seal: &str,
    ) -> bool {
        let f = automatic_fields(request, enrollment, names, rules_version, at);
        self.verify(AUTOMATIC, &f.each_ref().map(|s| s.as_bytes()), seal)
    }

    /// Seals a grant over its record (or automatic decision), secrets, session and lifetime.
    pub fn seal_grant(&self, g: &Grant) -> String {
        let f = GrantFields::of(g);
        self.seal("grant/v1", &f.as_slices())
    }

    pub fn verify_grant(&self, g: &Grant) -> bool {
        let f = GrantFields::of(g);
        self.verify("grant/v1", &f.as_slices(), &g.seal)
    }

    /// Seals what a launcher credential's authority rests on: its id, key thumbprint, operator,
    /// service (and the token subject), approving record, approver and expiry.
    pub fn seal_credential(&self, c: &LauncherCredential) -> String {
        let f = credential_fields(c);
        self.seal("credential/v1", &f.each_ref().map(|s| s.as_bytes()))
    }

    pub fn verify_credential(&self, c: &LauncherCredential) -> bool {
        let f = credential_fields(c);
        self.verify(
            "credential/v1",
            &f.each_ref().map(|s| s.as_bytes()),
            &c.seal,
        )
    }

    /// Seals what an enrollment's authority rests on: its id, credential, key thumbprint, kind,
    /// runtime id and operator.
    pub fn seal_enrollment(&self, e: &Enrollment) -> String {
        let f = enrollment_fields(e);
        self.seal("enrollment/v1", &f.each_ref().map(|s| s.as_bytes()))
    }

    pub fn verify_enrollment(&self, e: &Enrollment) -> bool {
        let f = enrollment_fields(e);
        self.verify(
            "enrollment/v1",
            &f.each_ref().map(|s| s.as_bytes()),
            &e.seal,
        )
    }

    /// Seals an audit log entry: its position and its chained hash (see the `audit` module).
    pub fn seal_audit(&self, position: i64, hash: &str) -> String {
        self.seal(
            "audit/v1",
            &[position.to_string().as_bytes(), hash.as_bytes()],
        )
    }

    pub fn verify_audit(&self, position: i64, hash: &str, seal: &str) -> bool {
        self.verify(
            "audit/v1",
            &[position.to_string().as_bytes(), hash.as_bytes()],
            seal,
        )
    }
}

fn opt<T: std::fmt::Display>(v: Option<&T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn credential_fields(c: &LauncherCredential) -> [String; 8] {
    [
        c.id.to_string(),
        c.thumbprint.clone(),
        opt(c.operator.as_ref()),
        c.service.clone().unwrap_or_default(),
        c.subject.clone().unwrap_or_default(),
        opt(c.record_id.as_ref()),
        c.approved_by.clone(),
        c.expires_at.timestamp_millis().to_string(),
    ]
}

fn enrollment_fields(e: &Enrollment) -> [String; 6] {
    [
        e.id.to_string(),
        e.credential_id.to_string(),
        e.thumbprint.clone(),
        e.kind.as_str().to_owned(),
        e.runtime_id.clone(),
        opt(e.operator.as_ref()),
    ]
}

/// The label of policy's automatic decision's seal.
const AUTOMATIC: &str = "automatic/v1";

/// What policy's automatic decision's seal covers, in order.
fn automatic_fields(
    request: &RequestId,
    enrollment: &EnrollmentId,
    names: &[SecretName],
    rules_version: &str,
    at: Time,
) -> [String; 5] {
    [
        request.to_string(),
        enrollment.to_string(),
        join_names(names),
        rules_version.to_owned(),
        at.timestamp_millis().to_string(),
    ]
}

fn decision_fields(
    record: &RecordId,
    event: RecordState,
    by: &str,
    at: Time,
    countersignature: Option<&Countersignature>,
) -> (&'static str, Vec<String>) {
    let mut f = vec![
        record.to_string(),
        event.as_str().to_owned(),
        by.to_owned(),
        at.timestamp_millis().to_string(),
    ];
    match countersignature {
        None => ("decision/v1", f),
        Some(c) => {
            f.extend([
                c.credential.clone(),
                c.nonce.clone(),
                c.client_data.clone(),
                c.authenticator_data.clone(),
                c.signature.clone(),
            ]);
            ("decision/v2", f)
        }
    }
}

fn passkey_fields(p: &Passkey) -> [String; 10] {
    [
        p.id.clone(),
        p.person.to_string(),
        p.name.clone(),
        p.key.clone(),
        p.aaguid.clone(),
        p.backup_eligible.to_string(),
        p.sign_count.to_string(),
        p.created_at.timestamp_millis().to_string(),
        opt(p.removed_at.map(|t| t.timestamp_millis()).as_ref()),
        p.enrolled_by.clone(),
    ]
}

fn join_names(names: &[SecretName]) -> String {
    names
        .iter()
        .map(|n| n.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

struct GrantFields([String; 10]);

impl GrantFields {
    fn of(g: &Grant) -> Self {
        Self([
            g.id.to_string(),
            g.request_id.to_string(),
            g.enrollment_id.to_string(),
            join_names(&g.names),
            format!("{:?}", g.granted),
            g.record_id.map(|r| r.to_string()).unwrap_or_default(),
            g.approver
                .as_ref()
                .map(|a| a.to_string())
                .unwrap_or_default(),
            g.expires_at
                .map(|t| t.timestamp_millis().to_string())
                .unwrap_or_default(),
            g.rules_version.clone(),
            g.decision_seal.clone().unwrap_or_default(),
        ])
    }

    fn as_slices(&self) -> [&[u8]; 10] {
        self.0.each_ref().map(|s| s.as_bytes())
    }
}
