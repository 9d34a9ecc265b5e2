//! ES256 compact JWS (RFC 7515) with the refusals of protocol.md §1.
//!
//! [`parse`] checks everything that can be checked without a key and yields an [`Unverified`]
//! token; the caller picks the key (by `kid`, or the embedded `jwk`) and calls
//! [`Unverified::verify`] or [`Unverified::verify_with_embedded_jwk`] to get a [`Verified`] one.
//! Header and payload must be JSON objects in which no object, at any depth, repeats a member
//! ([`crate::json`]).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::{JwsError, PublicJwk, SigningKey, VerifyingKey, b64, json};

/// The longest token accepted by [`parse`] or produced by [`sign`], in bytes.
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

/// The only `alg` accepted.
pub const ALG_ES256: &str = "ES256";

/// A JOSE protected header as this protocol uses it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub alg: String,
    pub typ: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jwk: Option<PublicJwk>,
}

impl Header {
    /// An `ES256` header naming its key by `kid`.
    #[must_use]
    pub fn with_kid(typ: &str, kid: &str) -> Self {
        Self {
            alg: ALG_ES256.to_owned(),
            typ: typ.to_owned(),
            kid: Some(kid.to_owned()),
            jwk: None,
        }
    }

    /// An `ES256` header embedding its public key as `jwk`.
    #[must_use]
    pub fn with_jwk(typ: &str, jwk: PublicJwk) -> Self {
        Self {
            alg: ALG_ES256.to_owned(),
            typ: typ.to_owned(),
            kid: None,
            jwk: Some(jwk),
        }
    }
}

/// A token that passed [`parse`] but whose signature is not yet checked.
pub struct Unverified {
    header: Header,
    embedded_key: Option<VerifyingKey>,
    signing_input: String,
    payload: Vec<u8>,
    signature: [u8; 64],
}

/// Parses a compact JWS, refusing anything protocol.md §1 refuses.
///
/// # Errors
/// [`JwsError::Malformed`] for a token over [`MAX_TOKEN_LEN`], not three base64url parts, a header
/// or payload that is not a JSON object (or has an object repeating a member, at any depth), a missing or non-string `alg`/`typ`,
/// a non-string or empty `kid`, both `jwk` and `kid`, or a signature that is not 64 bytes;
/// [`JwsError::Unsupported`] for an `alg` other than `ES256`, a `crit` or a `b64` member; the
/// errors of [`PublicJwk::from_value`] for a bad `jwk`.
pub fn parse(token: &str) -> Result<Unverified, JwsError> {
    if token.len() > MAX_TOKEN_LEN {
        return Err(JwsError::Malformed("token too long"));
    }
    const PARTS: JwsError = JwsError::Malformed("token is not three dot-separated parts");
    let (signing_input, signature) = token.rsplit_once('.').ok_or(PARTS)?;
    let (header, payload) = signing_input.split_once('.').ok_or(PARTS)?;
    if payload.contains('.') {
        return Err(PARTS);
    }

    let header = strict_object(&b64::decode(header)?, "header is not a JSON object")?;
    let (header, embedded_key) = check_header(&header)?;
    let payload = b64::decode(payload)?;
    strict_object(&payload, "payload is not a JSON object")?;
    let signature = b64::decode(signature)?
        .try_into()
        .map_err(|_| JwsError::Malformed("signature must be 64 bytes"))?;

    Ok(Unverified {
        header,
        embedded_key,
        signing_input: signing_input.to_owned(),
        payload,
        signature,
    })
}

fn check_header(h: &Map<String, Value>) -> Result<(Header, Option<VerifyingKey>), JwsError> {
    let alg = match h.get("alg") {
        Some(Value::String(alg)) if alg == ALG_ES256 => alg.clone(),
        Some(Value::String(_)) => return Err(JwsError::Unsupported("alg must be ES256")),
        _ => return Err(JwsError::Malformed("alg missing or not a string")),
    };
    if h.contains_key("crit") {
        return Err(JwsError::Unsupported("crit header"));
    }
    if h.contains_key("b64") {
        return Err(JwsError::Unsupported("b64 header"));
    }
    let typ = match h.get("typ") {
        Some(Value::String(typ)) if !typ.is_empty() => typ.clone(),
        _ => return Err(JwsError::Malformed("typ missing or not a non-empty string")),
    };
    if h.contains_key("jwk") && h.contains_key("kid") {
        return Err(JwsError::Malformed("header has both jwk and kid"));
    }
    let kid = match h.get("kid") {
        None => None,
        Some(Value::String(kid)) if !kid.is_empty() => Some(kid.clone()),
        Some(_) => return Err(JwsError::Malformed("kid not a non-empty string")),
    };
    let (jwk, key) = match h.get("jwk") {
        None => (None, None),
        Some(v) => {
            let (jwk, key) = PublicJwk::from_value_with_key(v)?;
            (Some(jwk), Some(key))
        }
    };
    Ok((Header { alg, typ, kid, jwk }, key))
}

impl Unverified {
    /// The protected header.
    #[must_use]
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The `typ` header.
    #[must_use]
    pub fn typ(&self) -> &str {
        &self.header.typ
    }

    /// The `kid` header, if any.
    #[must_use]
    pub fn kid(&self) -> Option<&str> {
        self.header.kid.as_deref()
    }

    /// The embedded (already validated) `jwk` header, if any.
    #[must_use]
    pub fn jwk(&self) -> Option<&PublicJwk> {
        self.header.jwk.as_ref()
    }

    /// Refuses the token unless its `typ` is exactly `typ` (RFC 8725 §3.11).
    ///
    /// # Errors
    /// [`JwsError::Unsupported`] on a mismatch.
    pub fn expect_typ(&self, typ: &str) -> Result<(), JwsError> {
        if self.header.typ == typ {
            Ok(())
        } else {
            Err(JwsError::Unsupported("unexpected typ"))
        }
    }

    /// Checks the signature under `key`.
    ///
    /// # Errors
    /// [`JwsError::BadSignature`] if it does not verify.
    pub fn verify(self, key: &VerifyingKey) -> Result<Verified, JwsError> {
        key.verify(self.signing_input.as_bytes(), &self.signature)?;
        Ok(Verified {
            header: self.header,
            payload: self.payload,
        })
    }

    /// Checks the signature under the key in the token's own `jwk` header, returning that key.
    ///
    /// # Errors
    /// [`JwsError::Malformed`] if there is no `jwk` header; [`JwsError::BadSignature`] if the
    /// signature does not verify.
    pub fn verify_with_embedded_jwk(self) -> Result<(Verified, PublicJwk), JwsError> {
        let (Some(key), Some(jwk)) = (&self.embedded_key, self.header.jwk.clone()) else {
            return Err(JwsError::Malformed("no jwk header"));
        };
        key.verify(self.signing_input.as_bytes(), &self.signature)?;
        Ok((
            Verified {
                header: self.header,
                payload: self.payload,
            },
            jwk,
        ))
    }
}

impl std::fmt::Debug for Unverified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unverified")
            .field("header", &self.header)
            .field("payload_len", &self.payload.len())
            .finish_non_exhaustive()
    }
}

/// A token whose signature verified. `payload` holds the decoded payload bytes (a JSON object).
#[derive(Clone)]
pub struct Verified {
    pub header: Header,
    pub payload: Vec<u8>,
}

impl Verified {
    /// Deserializes the payload into a claim set.
    ///
    /// # Errors
    /// [`JwsError::Malformed`] if the payload does not fit `T` (or repeats a member: checked
    /// again here because a [`Verified`] can be built by hand).
    pub fn claims<T: DeserializeOwned>(&self) -> Result<T, JwsError> {
        json::from_slice(&self.payload)
            .map_err(|_| JwsError::Malformed("claims do not match the expected shape"))
    }
}

impl std::fmt::Debug for Verified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Verified")
            .field("header", &self.header)
            .field("payload_len", &self.payload.len())
            .finish()
    }
}

/// Signs `claims` under `header` as a compact JWS.
///
/// # Errors
/// [`JwsError::Unsupported`] if `header.alg` is not `ES256`; [`JwsError::Malformed`] if the header
/// has both `jwk` and `kid` or an empty `typ`, the claims do not serialize to a JSON object, or
/// the token would exceed [`MAX_TOKEN_LEN`]; [`JwsError::Crypto`] if signing fails.
pub fn sign(
    key: &SigningKey,
    header: &Header,
    claims: &impl Serialize,
) -> Result<String, JwsError> {
    if header.alg != ALG_ES256 {
        return Err(JwsError::Unsupported("alg must be ES256"));
    }
    if header.typ.is_empty() {
        return Err(JwsError::Malformed("typ must not be empty"));
    }
    if header.jwk.is_some() && header.kid.is_some() {
        return Err(JwsError::Malformed("header has both jwk and kid"));
    }
    let header =
        serde_json::to_vec(header).map_err(|_| JwsError::Malformed("header does not serialize"))?;
    let payload =
        serde_json::to_vec(claims).map_err(|_| JwsError::Malformed("claims do not serialize"))?;
    // A top-level serialization that starts with '{' is a JSON object.
    if payload.first() != Some(&b'{') {
        return Err(JwsError::Malformed(
            "claims must serialize to a JSON object",
        ));
    }
    let signing_input = format!("{}.{}", b64::encode(&header), b64::encode(&payload));
    let signature = key.sign(signing_input.as_bytes())?;
    let token = format!("{signing_input}.{}", b64::encode(&signature));
    if token.len() > MAX_TOKEN_LEN {
        return Err(JwsError::Malformed("token too long"));
    }
    Ok(token)
}

/// Parses `bytes` as one JSON object in which no object, at any depth, repeats a member name.
fn strict_object(bytes: &[u8], what: &'static str) -> Result<Map<String, Value>, JwsError> {
    match json::value_from_slice(bytes) {
        Ok(Value::Object(map)) => Ok(map),
        _ => Err(JwsError::Malformed(what)),
    }
}

#[cfg(test)]
mod tests;
