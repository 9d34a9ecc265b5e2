//! The issuer's JSON Web Key Set (RFC 7517), parsed once into keys ready to verify RS256
//! (RSASSA-PKCS1-v1_5 with SHA-256, 2048 to 8192 bits) and ES256 (P-256, raw `R || S`) signatures.
//!
//! Keys this verifier cannot use are skipped, not fatal: another kind (`OKP`, other curves), an
//! `alg` other than the one its type implies, `use` other than `sig`, a key carrying private
//! members, or key material that does not parse. A set with no usable key at all is an error.

use aws_lc_rs::signature::{ParsedPublicKey, RSA_PKCS1_2048_8192_SHA256, RsaPublicKeyComponents};
use countersign_proto::VerifyingKey;
use countersign_proto::b64;
use serde::Deserialize;

/// The most keys one set may hold; the rest are ignored.
pub const MAX_KEYS: usize = 100;

/// A signature algorithm this verifier accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    Rs256,
    Es256,
}

impl Alg {
    /// `RS256` or `ES256`; anything else (`none`, `HS256`, `PS256`, ...) is refused.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "RS256" => Some(Self::Rs256),
            "ES256" => Some(Self::Es256),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Rs256 => "RS256",
            Self::Es256 => "ES256",
        }
    }
}

enum Verifier {
    Rsa(ParsedPublicKey),
    Ec(VerifyingKey),
}

/// One usable key of the set.
pub struct Key {
    pub kid: Option<String>,
    pub alg: Alg,
    verifier: Verifier,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key")
            .field("kid", &self.kid)
            .field("alg", &self.alg)
            .finish_non_exhaustive()
    }
}

impl Key {
    /// Whether `signature` over `signing_input` verifies under this key.
    pub fn verifies(&self, signing_input: &[u8], signature: &[u8]) -> bool {
        match &self.verifier {
            Verifier::Rsa(k) => k.verify_sig(signing_input, signature).is_ok(),
            Verifier::Ec(k) => k.verify(signing_input, signature).is_ok(),
        }
    }
}

/// The usable keys of one JWKS document.
#[derive(Debug, Default)]
pub struct KeySet {
    keys: Vec<Key>,
}

/// Why a JWKS document was refused as a whole.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JwksError {
    #[error("the JWKS is not a JSON object with a `keys` array")]
    Shape,
    #[error("the JWKS holds no RS256 or ES256 signing key this verifier can use")]
    NoUsableKey,
}

#[derive(Deserialize)]
struct Document {
    keys: Vec<serde_json::Value>,
}

#[derive(Deserialize)]
struct RawJwk {
    kty: String,
    #[serde(default)]
    kid: Option<String>,
    #[serde(default)]
    alg: Option<String>,
    #[serde(default, rename = "use")]
    use_: Option<String>,
    #[serde(default)]
    n: Option<String>,
    #[serde(default)]
    e: Option<String>,
    #[serde(default)]
    crv: Option<String>,
    #[serde(default)]
    x: Option<String>,
    #[serde(default)]
    y: Option<String>,
    /// A private member: a key carrying one is refused.
    #[serde(default)]
    d: Option<serde::de::IgnoredAny>,
}

impl KeySet {
    /// Parses a JWKS document, keeping the keys this verifier can use (at most [`MAX_KEYS`]).
    pub fn parse(bytes: &[u8]) -> Result<Self, JwksError> {
        let doc: Document = serde_json::from_slice(bytes).map_err(|_| JwksError::Shape)?;
        let keys: Vec<Key> = doc
            .keys
            .iter()
            .filter_map(|v| match parse_key(v) {
                Ok(k) => Some(k),
                Err(why) => {
                    tracing::debug!(why, "skipping a JWKS key");
                    None
                }
            })
            .take(MAX_KEYS)
            .collect();
        if keys.is_empty() {
            return Err(JwksError::NoUsableKey);
        }
        Ok(Self { keys })
    }

    pub fn len(&self) -> usize {
        self.keys.len()
    }

    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys a token signed with `alg` and naming `kid` may be signed by: those of that
    /// algorithm with that `kid` (every key of the algorithm when the token names none).
    pub fn candidates<'a>(
        &'a self,
        kid: Option<&'a str>,
        alg: Alg,
    ) -> impl Iterator<Item = &'a Key> + 'a {
        self.keys
            .iter()
            .filter(move |k| k.alg == alg && (kid.is_none() || k.kid.as_deref() == kid))
    }

    /// Whether some key could have signed a token with this `kid` and `alg`.
    pub fn knows(&self, kid: Option<&str>, alg: Alg) -> bool {
        self.candidates(kid, alg).next().is_some()
    }
}

fn parse_key(v: &serde_json::Value) -> Result<Key, &'static str> {
    let raw: RawJwk = serde_json::from_value(v.clone()).map_err(|_| "not a JWK object")?;
    if raw.d.is_some() {
        return Err("carries a private member");
    }
    if raw.use_.as_deref().is_some_and(|u| u != "sig") {
        return Err("not a signing key");
    }
    let (alg, verifier) = match raw.kty.as_str() {
        "RSA" => {
            let n = strip_zeros(
                b64::decode(raw.n.as_deref().ok_or("RSA key without n")?)
                    .map_err(|_| "RSA n is not base64url")?,
            );
            let e = strip_zeros(
                b64::decode(raw.e.as_deref().ok_or("RSA key without e")?)
                    .map_err(|_| "RSA e is not base64url")?,
            );
            // 2048 to 8192 bits (the library checks the exact size again when verifying).
            if !(256..=1024).contains(&n.len()) {
                return Err("RSA modulus not 2048 to 8192 bits");
            }
            let parsed = RsaPublicKeyComponents { n: &n, e: &e }
                .to_parsed_public_key(&RSA_PKCS1_2048_8192_SHA256)
                .map_err(|_| "RSA key does not parse")?;
            (Alg::Rs256, Verifier::Rsa(parsed))
        }
        "EC" => {
            if raw.crv.as_deref() != Some("P-256") {
                return Err("EC key not on P-256");
            }
            let coordinate = |c: Option<&str>| -> Result<Vec<u8>, &'static str> {
                let bytes = b64::decode(c.ok_or("EC key without x or y")?)
                    .map_err(|_| "EC coordinate is not base64url")?;
                if bytes.len() != 32 {
                    return Err("EC coordinate is not 32 bytes");
                }
                Ok(bytes)
            };
            let mut point = vec![0x04];
            point.extend(coordinate(raw.x.as_deref())?);
            point.extend(coordinate(raw.y.as_deref())?);
            let key = VerifyingKey::from_uncompressed(&point).map_err(|_| "EC point invalid")?;
            (Alg::Es256, Verifier::Ec(key))
        }
        _ => return Err("key type not RSA or EC"),
    };
    if raw.alg.as_deref().is_some_and(|a| a != alg.as_str()) {
        return Err("alg other than RS256/ES256");
    }
    Ok(Key {
        kid: raw.kid.filter(|k| !k.is_empty()),
        alg,
        verifier,
    })
}

/// Big-endian integers arrive from some issuers with a leading zero octet; the library wants none.
fn strip_zeros(mut v: Vec<u8>) -> Vec<u8> {
    let zeros = v.iter().take_while(|b| **b == 0).count();
    v.drain(..zeros);
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_shapes_and_sets_without_a_usable_key() {
        assert_eq!(KeySet::parse(b"[]").err(), Some(JwksError::Shape));
        assert_eq!(KeySet::parse(b"{}").err(), Some(JwksError::Shape));
        assert_eq!(
            KeySet::parse(br#"{"keys":[]}"#).err(),
            Some(JwksError::NoUsableKey)
        );
        // Unusable keys are skipped: another kty, a private member, an encryption key, a bad
        // point, HS256's symmetric key.
        let k = countersign_proto::SigningKey::generate().ok();
        let jwk = k.map(|k| serde_json::to_value(k.public_jwk()).unwrap_or_default());
        let jwk = jwk.unwrap_or_default();
        let mut private = jwk.clone();
        private["d"] = "AAAA".into();
        let mut enc = jwk.clone();
        enc["use"] = "enc".into();
        let mut wrong_alg = jwk.clone();
        wrong_alg["alg"] = "ES384".into();
        let doc = serde_json::json!({ "keys": [
            { "kty": "OKP", "crv": "Ed25519", "x": "AAAA" },
            { "kty": "oct", "k": "c2VjcmV0" },
            { "kty": "EC", "crv": "P-256", "x": "AAAA", "y": "AAAA" },
            { "kty": "RSA", "n": "AQAB", "e": "AQAB" },
            private, enc, wrong_alg, 7, "x",
        ]});
        let bytes = serde_json::to_vec(&doc).unwrap_or_default();
        assert_eq!(KeySet::parse(&bytes).err(), Some(JwksError::NoUsableKey));
        let ok = serde_json::json!({ "keys": [ jwk ] });
        let set = KeySet::parse(&serde_json::to_vec(&ok).unwrap_or_default());
        assert_eq!(set.map(|s| s.len()).ok(), Some(1));
    }
}
