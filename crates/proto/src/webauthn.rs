//! WebAuthn relying-party checks, for passkey countersignatures (issue 29).
//!
//! What a browser's `navigator.credentials.create()` and `.get()` answer, checked as the
//! WebAuthn Level 3 ceremonies say (§7.1 "Registering a New Credential", §7.2 "Verifying an
//! Authentication Assertion"), for a relying party whose challenge is not only random but the
//! hash of what the person approves (see `docs/decisions.md`, "Passkeys": `webauthn-rs` does not
//! take a caller's challenge). Pure: bytes in, a verdict out; the caller keeps the credentials,
//! the nonces and the sign counts.
//!
//! - [`verify_registration`]: the client data (`webauthn.create`, the challenge, an allowed
//!   origin, not cross-origin), the attestation object (CBOR: `fmt`, `attStmt`, `authData`),
//!   the authenticator data (the RP ID's hash, user presence, user verification when asked,
//!   the attested credential), and the attestation: `none`, or `packed` self-attestation (its
//!   signature by the new credential's own key). A browser asked for no attestation sends
//!   `none`; any other format is refused.
//! - [`verify_assertion`]: the same checks for `webauthn.get`, then the signature over the
//!   authenticator data and the client data's SHA-256 with the stored key, and the sign count
//!   (it must grow, unless the authenticator keeps none: both zero).
//!
//! Keys: ES256 (P-256), EdDSA (Ed25519) and RS256, as COSE keys. Nothing here panics on input,
//! and no error carries key material or input bytes.

use aws_lc_rs::digest::{SHA256, digest};
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_ASN1, ED25519, RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents,
    UnparsedPublicKey,
};
use ciborium::Value as Cbor;

/// Why a registration or an assertion was refused. Each names the check that failed, never
/// the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WebauthnError {
    #[error("client data: {0}")]
    ClientData(&'static str),
    #[error("the client data is for another ceremony")]
    WrongType,
    #[error("the challenge is not the one asked for")]
    WrongChallenge,
    #[error("the origin is not this console's")]
    WrongOrigin,
    #[error("a cross-origin ceremony is not accepted")]
    CrossOrigin,
    #[error("authenticator data: {0}")]
    AuthenticatorData(&'static str),
    #[error("the credential is for another relying party")]
    WrongRpId,
    #[error("the person's presence was not tested")]
    NoUserPresence,
    #[error("the person was not verified (PIN or biometric)")]
    NoUserVerification,
    #[error("attestation: {0}")]
    Attestation(&'static str),
    #[error("the credential's key: {0}")]
    Key(&'static str),
    #[error("the signature does not verify")]
    BadSignature,
    #[error("the sign count did not grow: the credential may have been copied")]
    SignCountRegressed,
}

use WebauthnError as E;

/// What a ceremony must show.
#[derive(Debug, Clone, Copy)]
pub struct Expect<'a> {
    /// The relying party ID: the console's host name.
    pub rp_id: &'a str,
    /// The origins the ceremony may come from (`https://console.example`).
    pub origins: &'a [&'a str],
    /// The challenge the relying party gave (for an approval, the statement's hash).
    pub challenge: &'a [u8],
    /// Whether user verification (a PIN or biometric, the `UV` flag) is required.
    pub user_verification: bool,
}

/// A credential's public key, as its COSE key said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CredentialKey {
    /// ES256: a P-256 point, uncompressed (`04 || x || y`).
    Es256(Vec<u8>),
    /// EdDSA over Ed25519: the 32-byte public key.
    Ed25519(Vec<u8>),
    /// RS256: the modulus and exponent, big-endian.
    Rs256 { n: Vec<u8>, e: Vec<u8> },
}

/// The authenticator data's flags (WebAuthn §6.1).
pub mod flags {
    pub const UP: u8 = 0x01;
    pub const UV: u8 = 0x04;
    /// Backup eligible: a synced passkey (clear: bound to one device).
    pub const BE: u8 = 0x08;
    /// Backed up now.
    pub const BS: u8 = 0x10;
    /// Attested credential data follows.
    pub const AT: u8 = 0x40;
    /// Extensions follow.
    pub const ED: u8 = 0x80;
}

/// The authenticator data, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticatorData {
    pub rp_id_hash: [u8; 32],
    pub flags: u8,
    pub sign_count: u32,
    /// The new credential, when `AT` is set (registration).
    pub attested: Option<AttestedCredential>,
}

/// The credential a registration creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AttestedCredential {
    /// The authenticator model's AAGUID, as the authenticator states it (attestation `none`
    /// does not prove it).
    pub aaguid: [u8; 16],
    pub credential_id: Vec<u8>,
    pub key: CredentialKey,
}

impl AuthenticatorData {
    pub fn backup_eligible(&self) -> bool {
        self.flags & flags::BE != 0
    }

    pub fn backed_up(&self) -> bool {
        self.flags & flags::BS != 0
    }

    pub fn user_verified(&self) -> bool {
        self.flags & flags::UV != 0
    }

    /// Parses authenticator data: 32 bytes of RP ID hash, flags, a big-endian sign count, then
    /// the attested credential (when `AT`) and the extensions (when `ED`), and nothing after.
    pub fn parse(bytes: &[u8]) -> Result<Self, WebauthnError> {
        let bad = E::AuthenticatorData;
        if bytes.len() < 37 {
            return Err(bad("shorter than 37 bytes"));
        }
        let mut rp_id_hash = [0u8; 32];
        rp_id_hash.copy_from_slice(&bytes[..32]);
        let flags = bytes[32];
        let sign_count = u32::from_be_bytes([bytes[33], bytes[34], bytes[35], bytes[36]]);
        if flags & flags::BS != 0 && flags & flags::BE == 0 {
            return Err(bad("backed up but not backup eligible"));
        }
        let mut rest = &bytes[37..];
        let attested = if flags & flags::AT != 0 {
            if rest.len() < 18 {
                return Err(bad("attested credential data cut short"));
            }
            let mut aaguid = [0u8; 16];
            aaguid.copy_from_slice(&rest[..16]);
            let len = usize::from(u16::from_be_bytes([rest[16], rest[17]]));
            rest = &rest[18..];
            if len == 0 || len > 1023 || rest.len() < len {
                return Err(bad("credential id length"));
            }
            let credential_id = rest[..len].to_vec();
            rest = &rest[len..];
            let key = read_cbor(&mut rest).map_err(|_| bad("the credential's key is not CBOR"))?;
            Some(AttestedCredential {
                aaguid,
                credential_id,
                key: CredentialKey::from_cose(&key)?,
            })
        } else {
            None
        };
        if flags & flags::ED != 0 {
            match read_cbor(&mut rest) {
                Ok(Cbor::Map(_)) => {}
                _ => return Err(bad("extensions are not a CBOR map")),
            }
        }
        if !rest.is_empty() {
            return Err(bad("bytes after the end"));
        }
        Ok(AuthenticatorData {
            rp_id_hash,
            flags,
            sign_count,
            attested,
        })
    }
}

impl CredentialKey {
    /// A COSE key (RFC 9052, 9053): EC2 on P-256 with ES256 (-7), OKP on Ed25519 with EdDSA
    /// (-8), RSA with RS256 (-257). Anything else is refused.
    pub fn from_cose(key: &Cbor) -> Result<Self, WebauthnError> {
        let bad = E::Key;
        let Cbor::Map(entries) = key else {
            return Err(bad("not a COSE map"));
        };
        let mut seen = Vec::with_capacity(entries.len());
        let get = |label: i128| {
            entries
                .iter()
                .find(|(k, _)| int(k) == Some(label))
                .map(|(_, v)| v)
        };
        for (k, _) in entries {
            let k = int(k).ok_or(bad("a label is not an integer"))?;
            if seen.contains(&k) {
                return Err(bad("a label is repeated"));
            }
            seen.push(k);
        }
        let kty = get(1).and_then(int).ok_or(bad("no key type"))?;
        let alg = get(3).and_then(int).ok_or(bad("no algorithm"))?;
        let bytes = |label: i128, what: &'static str| match get(label) {
            Some(Cbor::Bytes(b)) => Ok(b.clone()),
            _ => Err(bad(what)),
        };
        match (kty, alg) {
            (2, -7) => {
                if get(-1).and_then(int) != Some(1) {
                    return Err(bad("ES256 needs the P-256 curve"));
                }
                let (x, y) = (bytes(-2, "no x")?, bytes(-3, "no y")?);
                if x.len() != 32 || y.len() != 32 {
                    return Err(bad("a P-256 coordinate is not 32 bytes"));
                }
                let mut point = Vec::with_capacity(65);
                point.push(0x04);
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                Ok(CredentialKey::Es256(point))
            }
            (1, -8) => {
                if get(-1).and_then(int) != Some(6) {
                    return Err(bad("EdDSA needs the Ed25519 curve"));
                }
                let x = bytes(-2, "no x")?;
                if x.len() != 32 {
                    return Err(bad("an Ed25519 key is not 32 bytes"));
                }
                Ok(CredentialKey::Ed25519(x))
            }
            (3, -257) => {
                let (n, e) = (bytes(-1, "no modulus")?, bytes(-2, "no exponent")?);
                if n.len() < 256 || n.len() > 1024 || e.is_empty() || e.len() > 8 {
                    return Err(bad("an RSA key of 2048 to 8192 bits"));
                }
                Ok(CredentialKey::Rs256 { n, e })
            }
            _ => Err(bad("only ES256, EdDSA (Ed25519) and RS256 are accepted")),
        }
    }

    /// The key as one line of text, for storage and the audit chain: `es256:<point>`,
    /// `ed25519:<key>` or `rs256:<n>.<e>`, each part base64url.
    pub fn to_text(&self) -> String {
        use crate::b64::encode;
        match self {
            CredentialKey::Es256(p) => format!("es256:{}", encode(p)),
            CredentialKey::Ed25519(k) => format!("ed25519:{}", encode(k)),
            CredentialKey::Rs256 { n, e } => format!("rs256:{}.{}", encode(n), encode(e)),
        }
    }

    /// Parses [`CredentialKey::to_text`]'s form, with the sizes [`CredentialKey::from_cose`]
    /// accepts.
    pub fn from_text(text: &str) -> Result<Self, WebauthnError> {
        let bad = E::Key;
        let b = |s: &str| crate::b64::decode(s).map_err(|_| bad("not base64url"));
        match text.split_once(':') {
            Some(("es256", p)) => {
                let p = b(p)?;
                if p.len() != 65 || p[0] != 0x04 {
                    return Err(bad("a P-256 point is 65 bytes, uncompressed"));
                }
                Ok(CredentialKey::Es256(p))
            }
            Some(("ed25519", k)) => {
                let k = b(k)?;
                if k.len() != 32 {
                    return Err(bad("an Ed25519 key is not 32 bytes"));
                }
                Ok(CredentialKey::Ed25519(k))
            }
            Some(("rs256", ne)) => {
                let (n, e) = ne.split_once('.').ok_or(bad("rs256 is n.e"))?;
                let (n, e) = (b(n)?, b(e)?);
                if n.len() < 256 || n.len() > 1024 || e.is_empty() || e.len() > 8 {
                    return Err(bad("an RSA key of 2048 to 8192 bits"));
                }
                Ok(CredentialKey::Rs256 { n, e })
            }
            _ => Err(bad("only es256, ed25519 and rs256 keys")),
        }
    }

    /// The COSE algorithm number.
    pub fn alg(&self) -> i128 {
        match self {
            CredentialKey::Es256(_) => -7,
            CredentialKey::Ed25519(_) => -8,
            CredentialKey::Rs256 { .. } => -257,
        }
    }

    /// Verifies `signature` over `message`.
    pub fn verify(&self, message: &[u8], signature: &[u8]) -> Result<(), WebauthnError> {
        let ok = match self {
            CredentialKey::Es256(point) => UnparsedPublicKey::new(&ECDSA_P256_SHA256_ASN1, point)
                .verify(message, signature)
                .is_ok(),
            CredentialKey::Ed25519(key) => UnparsedPublicKey::new(&ED25519, key)
                .verify(message, signature)
                .is_ok(),
            CredentialKey::Rs256 { n, e } => RsaPublicKeyComponents { n, e }
                .verify(&RSA_PKCS1_2048_8192_SHA256, message, signature)
                .is_ok(),
        };
        ok.then_some(()).ok_or(E::BadSignature)
    }
}

/// A registration that passed: what to keep of the new credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Registered {
    pub credential_id: Vec<u8>,
    pub key: CredentialKey,
    pub aaguid: [u8; 16],
    pub sign_count: u32,
    pub backup_eligible: bool,
    pub backed_up: bool,
    pub user_verified: bool,
    /// `none` or `packed` (self-attestation).
    pub format: &'static str,
}

/// Checks a registration (`navigator.credentials.create()`'s answer): the client data JSON and
/// the attestation object, as sent.
pub fn verify_registration(
    client_data_json: &[u8],
    attestation_object: &[u8],
    expect: &Expect<'_>,
) -> Result<Registered, WebauthnError> {
    check_client_data(client_data_json, "webauthn.create", expect)?;
    let mut rest = attestation_object;
    let object = read_cbor(&mut rest).map_err(|_| E::Attestation("not CBOR"))?;
    if !rest.is_empty() {
        return Err(E::Attestation("bytes after the end"));
    }
    let Cbor::Map(entries) = object else {
        return Err(E::Attestation("not a map"));
    };
    let member = |name: &str| {
        let mut found = entries
            .iter()
            .filter(|(k, _)| matches!(k, Cbor::Text(t) if t == name));
        match (found.next(), found.next()) {
            (Some((_, v)), None) => Ok(v),
            (None, _) => Err(E::Attestation("a member is missing")),
            (Some(_), Some(_)) => Err(E::Attestation("a member is repeated")),
        }
    };
    let (Cbor::Text(fmt), Cbor::Map(statement), Cbor::Bytes(auth)) =
        (member("fmt")?, member("attStmt")?, member("authData")?)
    else {
        return Err(E::Attestation(
            "fmt, attStmt or authData has the wrong type",
        ));
    };
    let data = AuthenticatorData::parse(auth)?;
    check_authenticator_data(&data, expect)?;
    let Some(credential) = data.attested.clone() else {
        return Err(E::AuthenticatorData("no attested credential"));
    };
    let format = match fmt.as_str() {
        "none" if statement.is_empty() => "none",
        "none" => return Err(E::Attestation("`none` with a statement")),
        "packed" => {
            check_self_attestation(statement, &credential, auth, client_data_json)?;
            "packed"
        }
        _ => return Err(E::Attestation("an attestation format not accepted")),
    };
    Ok(Registered {
        credential_id: credential.credential_id,
        key: credential.key,
        aaguid: credential.aaguid,
        sign_count: data.sign_count,
        backup_eligible: data.backup_eligible(),
        backed_up: data.backed_up(),
        user_verified: data.user_verified(),
        format,
    })
}

/// A `packed` attestation statement that is self-attestation: `alg` (the credential's) and
/// `sig`, the credential's own signature over the authenticator data and the client data's
/// hash; no certificate chain.
fn check_self_attestation(
    statement: &[(Cbor, Cbor)],
    credential: &AttestedCredential,
    auth: &[u8],
    client_data_json: &[u8],
) -> Result<(), WebauthnError> {
    let field = |name: &str| {
        statement
            .iter()
            .find(|(k, _)| matches!(k, Cbor::Text(t) if t == name))
            .map(|(_, v)| v)
    };
    if field("x5c").is_some() || field("ecdaaKeyId").is_some() {
        return Err(E::Attestation(
            "only self-attestation is accepted (a browser asked for none sends none)",
        ));
    }
    if statement.len() != 2 {
        return Err(E::Attestation(
            "packed self-attestation has alg and sig only",
        ));
    }
    let alg = field("alg").and_then(int);
    let Some(Cbor::Bytes(sig)) = field("sig") else {
        return Err(E::Attestation("no signature"));
    };
    if alg != Some(credential.key.alg()) {
        return Err(E::Attestation("the algorithm is not the credential's"));
    }
    credential
        .key
        .verify(&signed_bytes(auth, client_data_json), sig)?;
    Ok(())
}

/// An assertion that passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Asserted {
    /// The sign count to keep for the credential.
    pub sign_count: u32,
    pub backup_eligible: bool,
    pub backed_up: bool,
    pub user_verified: bool,
}

/// Checks an assertion (`navigator.credentials.get()`'s answer) made with a stored credential:
/// the client data, the authenticator data, the signature with `key`, and that the sign count
/// grew past `stored_count` (unless both are zero: an authenticator that keeps no count).
pub fn verify_assertion(
    key: &CredentialKey,
    stored_count: u32,
    client_data_json: &[u8],
    authenticator_data: &[u8],
    signature: &[u8],
    expect: &Expect<'_>,
) -> Result<Asserted, WebauthnError> {
    check_client_data(client_data_json, "webauthn.get", expect)?;
    let data = AuthenticatorData::parse(authenticator_data)?;
    if data.attested.is_some() {
        return Err(E::AuthenticatorData("an assertion attests no credential"));
    }
    check_authenticator_data(&data, expect)?;
    key.verify(
        &signed_bytes(authenticator_data, client_data_json),
        signature,
    )?;
    if (data.sign_count != 0 || stored_count != 0) && data.sign_count <= stored_count {
        return Err(E::SignCountRegressed);
    }
    Ok(Asserted {
        sign_count: data.sign_count,
        backup_eligible: data.backup_eligible(),
        backed_up: data.backed_up(),
        user_verified: data.user_verified(),
    })
}

/// What an authenticator signs: its data, then the SHA-256 of the client data JSON.
fn signed_bytes(authenticator_data: &[u8], client_data_json: &[u8]) -> Vec<u8> {
    let mut m = Vec::with_capacity(authenticator_data.len() + 32);
    m.extend_from_slice(authenticator_data);
    m.extend_from_slice(digest(&SHA256, client_data_json).as_ref());
    m
}

fn check_client_data(json: &[u8], kind: &str, expect: &Expect<'_>) -> Result<(), WebauthnError> {
    let v = crate::json::value_from_slice(json)
        .map_err(|_| E::ClientData("not JSON, or a member repeated"))?;
    let text = |name: &str| v.get(name).and_then(serde_json::Value::as_str);
    if text("type") != Some(kind) {
        return Err(E::WrongType);
    }
    let challenge = text("challenge").ok_or(E::ClientData("no challenge"))?;
    let challenge = crate::b64::decode(challenge).map_err(|_| E::WrongChallenge)?;
    if !constant_time_eq(&challenge, expect.challenge) {
        return Err(E::WrongChallenge);
    }
    let origin = text("origin").ok_or(E::ClientData("no origin"))?;
    if !expect.origins.contains(&origin) {
        return Err(E::WrongOrigin);
    }
    match v.get("crossOrigin") {
        None | Some(serde_json::Value::Bool(false)) => {}
        Some(serde_json::Value::Bool(true)) => return Err(E::CrossOrigin),
        Some(_) => return Err(E::ClientData("crossOrigin is not a boolean")),
    }
    if v.get("topOrigin").is_some() {
        return Err(E::CrossOrigin);
    }
    Ok(())
}

fn check_authenticator_data(
    data: &AuthenticatorData,
    expect: &Expect<'_>,
) -> Result<(), WebauthnError> {
    let want = digest(&SHA256, expect.rp_id.as_bytes());
    if !constant_time_eq(&data.rp_id_hash, want.as_ref()) {
        return Err(E::WrongRpId);
    }
    if data.flags & flags::UP == 0 {
        return Err(E::NoUserPresence);
    }
    if expect.user_verification && data.flags & flags::UV == 0 {
        return Err(E::NoUserVerification);
    }
    Ok(())
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && aws_lc_rs::constant_time::verify_slices_are_equal(a, b).is_ok()
}

/// Reads one CBOR item from the front of `bytes`, leaving the rest.
fn read_cbor(bytes: &mut &[u8]) -> Result<Cbor, ()> {
    ciborium::de::from_reader(bytes).map_err(|_| ())
}

fn int(v: &Cbor) -> Option<i128> {
    match v {
        Cbor::Integer(i) => Some(i128::from(*i)),
        _ => None,
    }
}

#[cfg(test)]
mod tests;

#[cfg(any(test, feature = "soft-authenticator"))]
pub mod soft;
