//! Claim sets of the `Proof` header (protocol.md §2) and the signed request objects (§3).
//!
//! The types accept unknown claims (so the protocol can be extended) but are strictly typed:
//! `iat`/`exp` must be JSON integers, strings must be strings. Semantic checks (clock windows,
//! `jti` replay, `htm`/`htu`/`bh` matching, `authorization_details` contents) belong to the
//! broker.

use aws_lc_rs::digest;
use serde::{Deserialize, Serialize};

use crate::{JwsError, b64};

/// `typ` of a session's per-request proof.
pub const TYP_SESSION_PROOF: &str = "session-proof+jwt";
/// `typ` of a launcher's per-request proof.
pub const TYP_LAUNCHER_PROOF: &str = "launcher-proof+jwt";
/// `typ` of a person's machine-login request object.
pub const TYP_MACHINE_LOGIN: &str = "machine-login+jwt";
/// `typ` of a service token-login request object.
pub const TYP_TOKEN_LOGIN: &str = "token-login+jwt";
/// `typ` of a secret request object.
pub const TYP_SECRET_REQUEST: &str = "secret-request+jwt";

/// A proof's `iat` is refused when further than this from the broker's clock, either side.
pub const PROOF_MAX_SKEW_SECONDS: i64 = 60;
/// A signed request object's `exp` is at most this long after its `iat`.
pub const REQUEST_MAX_LIFETIME_SECONDS: i64 = 300;

/// `authorization_details` type naming a secret by `name`.
pub const DETAIL_AGENT_SECRET: &str = "agent_secret";
/// `authorization_details` type naming a service by `service`.
pub const DETAIL_LAUNCHER_CREDENTIAL: &str = "launcher_credential";

/// Claims of a `Proof` header (after RFC 9449 DPoP).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct ProofClaims {
    pub htm: String,
    pub htu: String,
    pub iat: i64,
    pub jti: String,
    /// [`body_hash`] of the request body; present exactly when the request has a body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bh: Option<String>,
}

/// One RFC 9396 authorization detail.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct AuthorizationDetail {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<String>,
}

impl AuthorizationDetail {
    /// `{"type":"agent_secret","name":<name>}`.
    #[must_use]
    pub fn agent_secret(name: &str) -> Self {
        Self {
            kind: DETAIL_AGENT_SECRET.to_owned(),
            name: Some(name.to_owned()),
            service: None,
        }
    }

    /// `{"type":"launcher_credential","service":<service>}`.
    #[must_use]
    pub fn launcher_credential(service: &str) -> Self {
        Self {
            kind: DETAIL_LAUNCHER_CREDENTIAL.to_owned(),
            name: None,
            service: Some(service.to_owned()),
        }
    }
}

/// Claims of a person's machine-login object (`machine-login+jwt`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct MachineLoginClaims {
    pub iat: i64,
    pub exp: i64,
    pub jti: String,
    pub login_hint: String,
    pub host: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub authorization_details: Option<Vec<AuthorizationDetail>>,
}

/// Claims of a service token-login object (`token-login+jwt`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TokenLoginClaims {
    pub iat: i64,
    pub exp: i64,
    pub jti: String,
    pub authorization_details: Vec<AuthorizationDetail>,
}

/// Claims of a secret request object (`secret-request+jwt`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SecretRequestClaims {
    pub iat: i64,
    pub exp: i64,
    pub jti: String,
    pub aud: String,
    pub authorization_details: Vec<AuthorizationDetail>,
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime_seconds: Option<u64>,
}

/// The `bh` claim: base64url SHA-256 of the exact body bytes.
#[must_use]
pub fn body_hash(body: &[u8]) -> String {
    b64::encode(digest::digest(&digest::SHA256, body).as_ref())
}

/// The `htu` claim: the public URL without trailing `/`, joined with the request path. Any query
/// or fragment on `path` is dropped; a missing leading `/` is supplied.
#[must_use]
pub fn htu(public_url: &str, path: &str) -> String {
    let base = public_url.trim_end_matches('/');
    let path = path.split(['?', '#']).next().unwrap_or_default();
    if path.starts_with('/') {
        format!("{base}{path}")
    } else {
        format!("{base}/{path}")
    }
}

/// A fresh `jti`: 128 random bits, base64url.
///
/// # Errors
/// [`JwsError::Crypto`] if the system CSPRNG fails.
pub fn new_jti() -> Result<String, JwsError> {
    let mut bytes = [0u8; 16];
    aws_lc_rs::rand::fill(&mut bytes).map_err(|_| JwsError::Crypto)?;
    Ok(b64::encode(&bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn body_hash_matches_sha256() {
        // SHA-256("") and SHA-256("abc") from FIPS 180-2.
        assert_eq!(
            body_hash(b""),
            "47DEQpj8HBSa-_TImW-5JCeuQeRkm5NMpJWZG3hSuFU"
        );
        assert_eq!(
            body_hash(b"abc"),
            "ungWv48Bz-pBQUDeXa4iI7ADYaOWF3qctBD_YfIAFa0"
        );
    }

    #[test]
    fn htu_joins() {
        let want = "https://broker.example/v1/sessions";
        assert_eq!(htu("https://broker.example", "/v1/sessions"), want);
        assert_eq!(htu("https://broker.example/", "/v1/sessions"), want);
        assert_eq!(htu("https://broker.example/", "v1/sessions"), want);
        assert_eq!(htu("https://broker.example", "/v1/sessions?x=1#f"), want);
        assert_eq!(
            htu("https://example.org/broker/", "/v1/x"),
            "https://example.org/broker/v1/x"
        );
    }

    #[test]
    fn jti_is_random() -> Result<(), JwsError> {
        let (a, b) = (new_jti()?, new_jti()?);
        assert_ne!(a, b);
        assert_eq!(b64::decode(&a)?.len(), 16);
        Ok(())
    }

    #[test]
    fn strict_types_open_members() {
        let ok = json!({"htm": "GET", "htu": "https://b/x", "iat": 1, "jti": "j", "extra": true});
        assert!(serde_json::from_value::<ProofClaims>(ok).is_ok());
        for iat in [json!("1"), json!(1.5), json!(null), json!(1e3)] {
            let v = json!({"htm": "GET", "htu": "https://b/x", "iat": iat, "jti": "j"});
            assert!(serde_json::from_value::<ProofClaims>(v).is_err());
        }
        let negative = json!({
            "iat": 1, "exp": 2, "jti": "j", "aud": "a", "reason": "r",
            "authorization_details": [{"type": "agent_secret", "name": "X"}],
            "lifetime_seconds": -1,
        });
        assert!(serde_json::from_value::<SecretRequestClaims>(negative).is_err());
    }

    #[test]
    fn serialization_shape() -> Result<(), serde_json::Error> {
        let c = TokenLoginClaims {
            iat: 10,
            exp: 20,
            jti: "j".into(),
            authorization_details: vec![AuthorizationDetail::launcher_credential("svc")],
        };
        assert_eq!(
            serde_json::to_value(&c)?,
            json!({"iat": 10, "exp": 20, "jti": "j",
                   "authorization_details": [{"type": "launcher_credential", "service": "svc"}]})
        );
        let p = ProofClaims {
            htm: "GET".into(),
            htu: "u".into(),
            iat: 1,
            jti: "j".into(),
            bh: None,
        };
        assert!(!serde_json::to_string(&p)?.contains("bh"));
        Ok(())
    }
}
