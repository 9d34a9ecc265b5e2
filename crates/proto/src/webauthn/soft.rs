//! A software authenticator, for tests here and in other crates (the `soft-authenticator`
//! feature): P-256 or Ed25519 keys from aws-lc-rs, CBOR written with ciborium, answering
//! `create()` and `get()` as a browser would pass them on. Never for production: its keys live
//! in memory and it asks nobody.

use aws_lc_rs::digest::{SHA256, digest};
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1_SIGNING, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _,
};
use ciborium::Value as Cbor;

use super::flags;

/// The AAGUID the soft authenticator states.
pub const AAGUID: [u8; 16] = *b"countersign-test";

fn cbor(v: &Cbor) -> Vec<u8> {
    let mut out = Vec::new();
    // Writing CBOR to a Vec cannot fail.
    let _ = ciborium::ser::into_writer(v, &mut out);
    out
}

fn int(i: i64) -> Cbor {
    Cbor::Integer(i.into())
}

enum Key {
    P256(EcdsaKeyPair),
    Ed(Ed25519KeyPair),
}

/// A passkey: its key, credential id, sign count, flags, and where it is used.
pub struct Soft {
    key: Key,
    pub id: Vec<u8>,
    pub count: u32,
    pub flags: u8,
    pub rp_id: String,
    pub origin: String,
    pub aaguid: [u8; 16],
}

impl std::fmt::Debug for Soft {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Soft")
            .field("id", &self.id)
            .field("count", &self.count)
            .field("flags", &self.flags)
            .finish_non_exhaustive()
    }
}

impl Soft {
    /// A synced (backup-eligible, backed-up) P-256 passkey for `rp_id` at `origin`, verifying
    /// its person, with a random credential id.
    pub fn p256(rp_id: &str, origin: &str) -> Self {
        // Key generation from the system's randomness does not fail in practice; a failure is
        // a broken machine, and this is test code.
        let key = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_ASN1_SIGNING).expect("P-256 key");
        Self::with(Key::P256(key), rp_id, origin, flags::BE | flags::BS)
    }

    /// A device-bound Ed25519 passkey (backup eligibility clear).
    pub fn ed25519(rp_id: &str, origin: &str) -> Self {
        let key = Ed25519KeyPair::generate().expect("Ed25519 key");
        Self::with(Key::Ed(key), rp_id, origin, 0)
    }

    fn with(key: Key, rp_id: &str, origin: &str, backup: u8) -> Self {
        let mut id = [0u8; 16];
        aws_lc_rs::rand::fill(&mut id).expect("random id");
        Soft {
            key,
            id: id.to_vec(),
            count: 0,
            flags: flags::UP | flags::UV | backup,
            rp_id: rp_id.to_owned(),
            origin: origin.to_owned(),
            aaguid: AAGUID,
        }
    }

    /// The credential id, base64url.
    pub fn id_text(&self) -> String {
        crate::b64::encode(&self.id)
    }

    /// The public key as a COSE map.
    pub fn cose(&self) -> Cbor {
        match &self.key {
            Key::P256(k) => {
                let p = k.public_key().as_ref();
                Cbor::Map(vec![
                    (int(1), int(2)),
                    (int(3), int(-7)),
                    (int(-1), int(1)),
                    (int(-2), Cbor::Bytes(p[1..33].to_vec())),
                    (int(-3), Cbor::Bytes(p[33..65].to_vec())),
                ])
            }
            Key::Ed(k) => Cbor::Map(vec![
                (int(1), int(1)),
                (int(3), int(-8)),
                (int(-1), int(6)),
                (int(-2), Cbor::Bytes(k.public_key().as_ref().to_vec())),
            ]),
        }
    }

    /// Authenticator data for `rp`, with the attested credential when `attested`.
    pub fn auth_data(&self, rp: &str, attested: bool) -> Vec<u8> {
        let mut d = digest(&SHA256, rp.as_bytes()).as_ref().to_vec();
        d.push(self.flags | if attested { flags::AT } else { 0 });
        d.extend_from_slice(&self.count.to_be_bytes());
        if attested {
            d.extend_from_slice(&self.aaguid);
            d.extend_from_slice(&(self.id.len() as u16).to_be_bytes());
            d.extend_from_slice(&self.id);
            d.extend_from_slice(&cbor(&self.cose()));
        }
        d
    }

    /// Signs `message` with the credential's key.
    pub fn sign(&self, message: &[u8]) -> Vec<u8> {
        match &self.key {
            Key::P256(k) => k
                .sign(&SystemRandom::new(), message)
                .expect("sign")
                .as_ref()
                .to_vec(),
            Key::Ed(k) => k.sign(message).as_ref().to_vec(),
        }
    }

    /// The COSE algorithm number.
    pub fn alg(&self) -> i64 {
        match self.key {
            Key::P256(_) => -7,
            Key::Ed(_) => -8,
        }
    }

    /// `create()`'s answer over `challenge`: client data JSON and attestation object (`fmt`
    /// `none`, or `packed` self-attestation).
    pub fn create(&self, challenge: &[u8], fmt: &str) -> (Vec<u8>, Vec<u8>) {
        let client = client_data("webauthn.create", challenge, &self.origin);
        let auth = self.auth_data(&self.rp_id, true);
        let statement = match fmt {
            "packed" => Cbor::Map(vec![
                (Cbor::Text("alg".into()), int(self.alg())),
                (
                    Cbor::Text("sig".into()),
                    Cbor::Bytes(self.sign(&signed_bytes(&auth, &client))),
                ),
            ]),
            _ => Cbor::Map(vec![]),
        };
        let object = Cbor::Map(vec![
            (Cbor::Text("fmt".into()), Cbor::Text(fmt.into())),
            (Cbor::Text("attStmt".into()), statement),
            (Cbor::Text("authData".into()), Cbor::Bytes(auth)),
        ]);
        (client, cbor(&object))
    }

    /// `get()`'s answer over `challenge`: client data JSON, authenticator data and signature;
    /// the sign count grows by one first.
    pub fn get(&mut self, challenge: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<u8>) {
        self.count += 1;
        let client = client_data("webauthn.get", challenge, &self.origin);
        let auth = self.auth_data(&self.rp_id, false);
        let sig = self.sign(&signed_bytes(&auth, &client));
        (client, auth, sig)
    }
}

/// Client data JSON as a browser writes it (with a member a verifier must ignore).
pub fn client_data(kind: &str, challenge: &[u8], origin: &str) -> Vec<u8> {
    format!(
        r#"{{"type":"{kind}","challenge":"{}","origin":"{origin}","crossOrigin":false,"other_keys_can_be_added_here":"do not compare clientDataJSON against a template"}}"#,
        crate::b64::encode(challenge)
    )
    .into_bytes()
}

/// What an authenticator signs: its data, then the SHA-256 of the client data JSON.
pub fn signed_bytes(authenticator_data: &[u8], client_data_json: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(authenticator_data.len() + 32);
    m.extend_from_slice(authenticator_data);
    m.extend_from_slice(digest(&SHA256, client_data_json).as_ref());
    m
}
