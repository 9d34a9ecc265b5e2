//! One function per fuzz target: each takes one input and runs it through a parser that reads
//! from the network or the helper's socket, the way the broker or the helper calls it. None may
//! panic, whatever the input. `tests/tests/e2e/fuzz_regressions.rs` includes this file and replays
//! `fuzz/regressions/<target>/` through the same functions under `cargo test`.
//!
//! Signatures cannot be forged by a fuzzer, so the targets that need a verified token
//! (`proof`, `request_object`) sign the fuzz input as the payload with a fixed test key: the
//! claims parsing behind the signature check is reached with every input.

use std::io::Cursor;
use std::sync::OnceLock;

use countersign_broker_core::ids::{EnrollmentId, Login};
use countersign_k8s_tokens::{KeySet, token};
use countersign_launcher_proto::frame;
use countersign_launcher_proto::{MAX_LINE, Request};
use countersign_proto::claims::{
    self, MachineLoginClaims, ProofClaims, SecretRequestClaims, TokenLoginClaims,
};
use countersign_proto::{Header, PublicJwk, SigningKey, b64, jws};
use serde::de::DeserializeOwned;
use serde_json::Value;

/// A P-256 key made for fuzzing only (PKCS#8, base64url): it signs the seed corpus and the
/// targets' payloads. It protects nothing.
pub const FIXED_KEY_PKCS8: &str = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgDEH2QlWD0IczElZaK-lYu-5L0cQZSBcvuEEafzU14oOhRANCAASVQ_74mYHuylJTxrBGObE9VUurv7liabiQTjzL7u5t4z9LoyVQ2ncxIukQ2vQedcczlFCPQRgNYppyfYx4cq-n";

/// The public URL the targets bind proofs to.
pub const PUBLIC_URL: &str = "https://broker.example.com";

/// The enrollment id the `proof` target's header names.
pub const ENROLLMENT_KID: &str = "0193b6a4-7c1e-7d2a-9f3b-2a4c5e6f7a8b";

/// The fixed key, or none if it does not load (then the signed targets do nothing).
pub fn fixed_key() -> Option<&'static SigningKey> {
    static KEY: OnceLock<Option<SigningKey>> = OnceLock::new();
    KEY.get_or_init(|| {
        b64::decode(FIXED_KEY_PKCS8)
            .ok()
            .and_then(|der| SigningKey::from_pkcs8(&der).ok())
    })
    .as_ref()
}

/// A compact JWS of `payload` (any bytes) under `header`, signed with the fixed key.
pub fn sign_raw(header: &Header, payload: &[u8]) -> Option<String> {
    let key = fixed_key()?;
    let header = serde_json::to_vec(header).ok()?;
    let input = format!("{}.{}", b64::encode(&header), b64::encode(payload));
    let signature = key.sign(input.as_bytes()).ok()?;
    Some(format!("{input}.{}", b64::encode(&signature)))
}

/// `jws`: a compact JWS from the network (a `Proof` header, a request object): parse, the
/// header checks, then verification under the embedded `jwk` or the fixed key, then claims.
pub fn jws(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(token) = jws::parse(text) else {
        return;
    };
    let _ = (token.typ(), token.kid());
    let _ = token.expect_typ(claims::TYP_SESSION_PROOF);
    if let Some(jwk) = token.jwk() {
        let _ = (jwk.thumbprint(), jwk.verifying_key().is_ok());
    }
    let verified = if token.jwk().is_some() {
        token.verify_with_embedded_jwk().ok().map(|(v, _)| v)
    } else {
        fixed_key().and_then(|k| token.verify(k.verifying_key()).ok())
    };
    if let Some(v) = verified {
        let _ = v.claims::<Value>();
        let _ = v.claims::<ProofClaims>();
        let _ = v.claims::<SecretRequestClaims>();
    }
}

/// `proof`: the input is a proof's claim set, signed with the fixed key under a session-proof
/// header naming an enrollment by `kid`, then read as the broker reads a `Proof` header:
/// parse, `typ`, `kid`, signature, [`ProofClaims`], and the values the binding compares
/// (`htu` of the path, `bh` of the body).
pub fn proof(data: &[u8]) {
    let header = Header::with_kid(claims::TYP_SESSION_PROOF, ENROLLMENT_KID);
    let Some(token) = sign_raw(&header, data) else {
        return;
    };
    let Ok(parsed) = jws::parse(&token) else {
        return;
    };
    if parsed.typ() != claims::TYP_SESSION_PROOF || parsed.jwk().is_some() {
        return;
    }
    if parsed
        .kid()
        .map(EnrollmentId::parse)
        .is_none_or(|r| r.is_err())
    {
        return;
    }
    let Some(key) = fixed_key() else {
        return;
    };
    let Ok(verified) = parsed.verify(key.verifying_key()) else {
        return;
    };
    let Ok(c) = verified.claims::<ProofClaims>() else {
        return;
    };
    let _ = c.htu == claims::htu(PUBLIC_URL, "/v1/requests");
    let _ = c.iat.abs_diff(chrono::Utc::now().timestamp());
    if let Some(bh) = &c.bh {
        let _ = *bh == claims::body_hash(c.jti.as_bytes());
    }
}

/// `request_object`: the first byte picks the object (machine login, token login, secret
/// request); the rest is its claim set, signed with the fixed key (embedded as `jwk` for a
/// machine login, as the CLI does; by `kid` otherwise), then parsed, checked and read into the
/// object's claims. The whole input is also parsed as an unsigned token.
pub fn request_object(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = jws::parse(text);
    }
    let (Some(&which), Some(key)) = (data.first(), fixed_key()) else {
        return;
    };
    let payload = &data[1..];
    let (typ, embedded) = match which % 3 {
        0 => (claims::TYP_MACHINE_LOGIN, true),
        1 => (claims::TYP_TOKEN_LOGIN, false),
        _ => (claims::TYP_SECRET_REQUEST, false),
    };
    let header = if embedded {
        Header::with_jwk(typ, key.public_jwk())
    } else {
        Header::with_kid(typ, ENROLLMENT_KID)
    };
    let Some(token) = sign_raw(&header, payload) else {
        return;
    };
    let Ok(parsed) = jws::parse(&token) else {
        return;
    };
    if parsed.expect_typ(typ).is_err() {
        return;
    }
    let verified = if embedded {
        parsed.verify_with_embedded_jwk().ok().map(|(v, jwk)| {
            let _ = jwk.thumbprint();
            v
        })
    } else {
        parsed.verify(key.verifying_key()).ok()
    };
    let Some(v) = verified else {
        return;
    };
    match which % 3 {
        0 => {
            if let Ok(c) = v.claims::<MachineLoginClaims>() {
                let _ = Login::parse(&c.login_hint);
                let _ = c.exp.saturating_sub(c.iat);
            }
        }
        1 => {
            let _ = v.claims::<TokenLoginClaims>();
        }
        _ => {
            if let Ok(c) = v.claims::<SecretRequestClaims>() {
                let _ = c.aud == PUBLIC_URL;
                let _ = c.lifetime_seconds.map(i64::try_from);
            }
        }
    }
}

/// `k8s_token`: the first byte picks the input's role: a ServiceAccount token (split, header
/// checks, then the claim rules on its payload), a claim set alone, or an issuer's JWKS.
pub fn k8s_token(data: &[u8]) {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    let expect = token::Expect {
        issuer: "https://kubernetes.default.svc.cluster.local",
        audience: "countersign",
    };
    let now = chrono::DateTime::from_timestamp(1_750_000_000, 0).unwrap_or_default();
    match which % 3 {
        0 => {
            if let Ok(text) = std::str::from_utf8(rest)
                && let Ok(parsed) = token::parse(text)
            {
                let _ = token::check_claims(&parsed.payload, &expect, now);
            }
        }
        1 => {
            let _ = token::check_claims(rest, &expect, now);
        }
        _ => {
            if let Ok(keys) = KeySet::parse(rest) {
                let _ = (keys.len(), keys.is_empty());
            }
        }
    }
}

/// `helper_line`: bytes as they arrive on the helper's socket: framed into lines under the
/// cap, each line parsed as a request.
pub fn helper_line(data: &[u8]) {
    let mut reader = Cursor::new(data);
    for _ in 0..64 {
        match frame::read_line(&mut reader, MAX_LINE) {
            Ok(Some(line)) => {
                if let Ok(req) = Request::parse_line(&line) {
                    let _ = req.op();
                }
            }
            Ok(None) | Err(_) => break,
        }
    }
    let _ = Request::parse_line(data);
}

/// The broker's body parse (`extract::parse_json`): one JSON value without a repeated member
/// (`countersign_proto::json`), an object, then the route's shape.
fn body<T: DeserializeOwned>(data: &[u8]) -> Option<T> {
    let value: Value = countersign_proto::json::value_from_slice(data).ok()?;
    if !value.is_object() {
        return None;
    }
    serde_json::from_value(value).ok()
}

/// `json_body`: a request body, read into every route's body shape, and the values the routes
/// then parse (an enrolling session's `jwk`, an approver's login, a session id).
pub fn json_body(data: &[u8]) {
    use super::wire;
    if let Some(b) = body::<wire::EnrollBody>(data) {
        if let Ok(jwk) = PublicJwk::from_value(&b.jwk) {
            let _ = (
                jwk.thumbprint() == b.thumbprint,
                jwk.verifying_key().is_ok(),
            );
        }
        if let Some(s) = &b.session_id {
            let _ = EnrollmentId::parse(s);
        }
    }
    let _ = body::<wire::SignedBody>(data);
    let _ = body::<wire::TokenLoginBody>(data);
    let _ = body::<wire::RenewBody>(data);
    if let Some(b) = body::<wire::RequestBody>(data)
        && let Some(s) = &b.session_id
    {
        let _ = EnrollmentId::parse(s);
    }
    if let Some(b) = body::<wire::DecisionBody>(data)
        && let Some(a) = &b.approver
    {
        let _ = Login::parse(a.trim());
    }
    let _ = body::<wire::LookupBody>(data);
    let _ = body::<wire::RevokeBody>(data);
}
