//! P-256 keys: public JWKs (RFC 7517), RFC 7638 thumbprints, and the ES256 signing and
//! verifying keys.
//!
//! A [`PublicJwk`] that came from outside (a JWS header, a stored value) is only ever built through
//! [`PublicJwk::from_value`] or its `Deserialize` impl, both of which refuse private members,
//! other key types and curves, wrong coordinate lengths and points not on P-256.

use aws_lc_rs::digest;
use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    ECDSA_P256_SHA256_FIXED, ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair, KeyPair as _,
    ParsedPublicKey,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use zeroize::Zeroizing;

use crate::{JwsError, b64};

/// The only key type accepted.
pub const KTY_EC: &str = "EC";
/// The only curve accepted.
pub const CRV_P256: &str = "P-256";

/// The order `n` of the P-256 group, big-endian.
const P256_ORDER: [u8; 32] = [
    0xff, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
    0xbc, 0xe6, 0xfa, 0xad, 0xa7, 0x17, 0x9e, 0x84, 0xf3, 0xb9, 0xca, 0xc2, 0xfc, 0x63, 0x25, 0x51,
];

/// An EC P-256 public key as a JWK.
///
/// `x` and `y` are the base64url (unpadded) big-endian coordinates, 32 bytes each. Other JWK
/// members (`alg`, `use`, `kid`, ...) are accepted on input and dropped.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(try_from = "Value")]
pub struct PublicJwk {
    pub kty: String,
    pub crv: String,
    pub x: String,
    pub y: String,
}

impl PublicJwk {
    /// Reads and validates a JWK from a JSON value.
    ///
    /// # Errors
    /// - [`JwsError::BadKey`] if it holds a private member `d` or the point is not on P-256;
    /// - [`JwsError::Unsupported`] if `kty` is not `EC` or `crv` is not `P-256`;
    /// - [`JwsError::Malformed`] if it is not an object or a member is missing, not a string, or
    ///   not 32 bytes of canonical base64url.
    pub fn from_value(v: &Value) -> Result<PublicJwk, JwsError> {
        Self::from_value_with_key(v).map(|(jwk, _)| jwk)
    }

    /// As [`PublicJwk::from_value`], also returning the parsed key so it is parsed only once.
    pub(crate) fn from_value_with_key(v: &Value) -> Result<(PublicJwk, VerifyingKey), JwsError> {
        let obj = v
            .as_object()
            .ok_or(JwsError::Malformed("jwk is not a JSON object"))?;
        if obj.contains_key("d") {
            return Err(JwsError::BadKey("jwk holds a private key"));
        }
        let member = |name: &'static str, missing: &'static str| {
            obj.get(name)
                .and_then(Value::as_str)
                .ok_or(JwsError::Malformed(missing))
        };
        let jwk = PublicJwk {
            kty: member("kty", "jwk kty missing or not a string")?.to_owned(),
            crv: member("crv", "jwk crv missing or not a string")?.to_owned(),
            x: member("x", "jwk x missing or not a string")?.to_owned(),
            y: member("y", "jwk y missing or not a string")?.to_owned(),
        };
        let key = VerifyingKey::from_jwk(&jwk)?;
        Ok((jwk, key))
    }

    /// The RFC 7638 SHA-256 thumbprint, base64url without padding.
    #[must_use]
    pub fn thumbprint(&self) -> String {
        // Members in lexicographic order, compact, with JSON string escaping.
        let canonical = serde_json::json!({
            "crv": self.crv,
            "kty": self.kty,
            "x": self.x,
            "y": self.y,
        })
        .to_string();
        b64::encode(digest::digest(&digest::SHA256, canonical.as_bytes()).as_ref())
    }

    /// Parses this JWK into a key that can verify signatures.
    ///
    /// # Errors
    /// As [`VerifyingKey::from_jwk`].
    pub fn verifying_key(&self) -> Result<VerifyingKey, JwsError> {
        VerifyingKey::from_jwk(self)
    }
}

impl TryFrom<Value> for PublicJwk {
    type Error = JwsError;

    fn try_from(v: Value) -> Result<Self, Self::Error> {
        Self::from_value(&v)
    }
}

/// A validated P-256 public key, parsed once for ES256 verification.
#[derive(Clone)]
pub struct VerifyingKey {
    x: [u8; 32],
    y: [u8; 32],
    key: ParsedPublicKey,
}

impl VerifyingKey {
    /// Builds a key from a JWK, checking the key type, curve, lengths and that the point lies on
    /// P-256.
    ///
    /// # Errors
    /// [`JwsError::Unsupported`] for another `kty` or `crv`; [`JwsError::Malformed`] for bad
    /// base64url; [`JwsError::BadKey`] for wrong lengths or a point not on the curve.
    pub fn from_jwk(jwk: &PublicJwk) -> Result<Self, JwsError> {
        if jwk.kty != KTY_EC {
            return Err(JwsError::Unsupported("jwk kty must be EC"));
        }
        if jwk.crv != CRV_P256 {
            return Err(JwsError::Unsupported("jwk crv must be P-256"));
        }
        let coordinate = |s: &str| -> Result<[u8; 32], JwsError> {
            b64::decode(s)?
                .try_into()
                .map_err(|_| JwsError::BadKey("jwk coordinate is not 32 bytes"))
        };
        Self::from_coordinates(coordinate(&jwk.x)?, coordinate(&jwk.y)?)
    }

    /// Builds a key from an uncompressed SEC1 point, `0x04 || x || y` (65 bytes).
    ///
    /// # Errors
    /// [`JwsError::BadKey`] for any other encoding or a point not on P-256.
    pub fn from_uncompressed(point: &[u8]) -> Result<Self, JwsError> {
        const BAD: JwsError = JwsError::BadKey("not an uncompressed P-256 point");
        let Some((&0x04, xy)) = point.split_first() else {
            return Err(BAD);
        };
        let (x, y) = xy.split_at_checked(32).ok_or(BAD)?;
        Self::from_coordinates(
            x.try_into().map_err(|_| BAD)?,
            y.try_into().map_err(|_| BAD)?,
        )
    }

    fn from_coordinates(x: [u8; 32], y: [u8; 32]) -> Result<Self, JwsError> {
        let mut point = [0u8; 65];
        point[0] = 0x04;
        point[1..33].copy_from_slice(&x);
        point[33..].copy_from_slice(&y);
        let key = ParsedPublicKey::new(&ECDSA_P256_SHA256_FIXED, point)
            .map_err(|_| JwsError::BadKey("point is not on P-256"))?;
        Ok(Self { x, y, key })
    }

    /// Verifies an ES256 signature: exactly 64 bytes `R || S`, both scalars in `1..n`.
    ///
    /// The scalar range is checked here, before the library is called (CVE-2022-21449). High-S
    /// signatures are accepted (protocol.md §1).
    ///
    /// # Errors
    /// [`JwsError::Malformed`] if the signature is not 64 bytes; [`JwsError::BadSignature`] if a
    /// scalar is out of range or the signature does not verify.
    pub fn verify(&self, signing_input: &[u8], signature: &[u8]) -> Result<(), JwsError> {
        let (r, s) = match signature.split_at_checked(32) {
            Some((r, s)) if signature.len() == 64 => (r, s),
            _ => return Err(JwsError::Malformed("signature must be 64 bytes")),
        };
        if !scalar_in_range(r) || !scalar_in_range(s) {
            return Err(JwsError::BadSignature);
        }
        self.key
            .verify_sig(signing_input, signature)
            .map_err(|_| JwsError::BadSignature)
    }

    /// This key as a JWK.
    #[must_use]
    pub fn to_jwk(&self) -> PublicJwk {
        PublicJwk {
            kty: KTY_EC.to_owned(),
            crv: CRV_P256.to_owned(),
            x: b64::encode(&self.x),
            y: b64::encode(&self.y),
        }
    }

    /// The RFC 7638 thumbprint of this key.
    #[must_use]
    pub fn thumbprint(&self) -> String {
        self.to_jwk().thumbprint()
    }
}

/// Whether a 32-byte big-endian scalar is in `1..n`.
fn scalar_in_range(scalar: &[u8]) -> bool {
    // Equal-length byte slices compare lexicographically, i.e. as big-endian integers.
    scalar.len() == 32 && scalar.iter().any(|&b| b != 0) && scalar < P256_ORDER.as_slice()
}

impl PartialEq for VerifyingKey {
    fn eq(&self, other: &Self) -> bool {
        self.x == other.x && self.y == other.y
    }
}

impl Eq for VerifyingKey {}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerifyingKey")
            .field("thumbprint", &self.thumbprint())
            .finish()
    }
}

/// A P-256 private key that signs ES256.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    public: VerifyingKey,
}

impl SigningKey {
    /// Generates a fresh key from the system CSPRNG.
    ///
    /// # Errors
    /// [`JwsError::Crypto`] if the library fails.
    pub fn generate() -> Result<Self, JwsError> {
        let pair = EcdsaKeyPair::generate(&ECDSA_P256_SHA256_FIXED_SIGNING)
            .map_err(|_| JwsError::Crypto)?;
        Self::from_pair(pair)
    }

    /// Loads a P-256 key from PKCS#8 DER (v1 or v2).
    ///
    /// # Errors
    /// [`JwsError::BadKey`] if it is not a valid P-256 PKCS#8 key.
    pub fn from_pkcs8(der: &[u8]) -> Result<Self, JwsError> {
        let pair = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, der)
            .map_err(|_| JwsError::BadKey("not a P-256 PKCS#8 private key"))?;
        Self::from_pair(pair)
    }

    fn from_pair(pair: EcdsaKeyPair) -> Result<Self, JwsError> {
        let public = VerifyingKey::from_uncompressed(pair.public_key().as_ref())
            .map_err(|_| JwsError::Crypto)?;
        Ok(Self { pair, public })
    }

    /// Exports the key as PKCS#8 v1 DER, zeroized on drop.
    ///
    /// # Errors
    /// [`JwsError::Crypto`] if the library fails.
    pub fn to_pkcs8(&self) -> Result<Zeroizing<Vec<u8>>, JwsError> {
        let doc = self.pair.to_pkcs8v1().map_err(|_| JwsError::Crypto)?;
        Ok(Zeroizing::new(doc.as_ref().to_vec()))
    }

    /// The public half as a JWK.
    #[must_use]
    pub fn public_jwk(&self) -> PublicJwk {
        self.public.to_jwk()
    }

    /// The public half as a verifying key.
    #[must_use]
    pub fn verifying_key(&self) -> &VerifyingKey {
        &self.public
    }

    /// The RFC 7638 thumbprint of the public half.
    #[must_use]
    pub fn thumbprint(&self) -> String {
        self.public.thumbprint()
    }

    /// Signs `msg` with ES256, returning the raw `R || S` signature.
    ///
    /// # Errors
    /// [`JwsError::Crypto`] if the library fails.
    pub fn sign(&self, msg: &[u8]) -> Result<[u8; 64], JwsError> {
        let sig = self
            .pair
            .sign(&SystemRandom::new(), msg)
            .map_err(|_| JwsError::Crypto)?;
        sig.as_ref().try_into().map_err(|_| JwsError::Crypto)
    }
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("thumbprint", &self.thumbprint())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const RFC9449_X: &str = "l8tFrhx-34tV3hRICRDY9zCkDlpBhF42UQUfWVAWBFs";
    const RFC9449_Y: &str = "9VE4jf_Ok_o64zbTTlcuNJajHmt6v9TDVrU0CdvGRDA";
    const RFC7517_X: &str = "MKBCTNIcKUSDii11ySs3526iDZ8AiTo7Tu6KPAqv7D4";
    const RFC7517_Y: &str = "4Etl6SRW2YiLUrN5vfvVHuhp7x8PxltmWWlbbM4IFyM";

    fn ec(x: &str, y: &str) -> Value {
        json!({"kty": "EC", "crv": "P-256", "x": x, "y": y})
    }

    #[test]
    fn thumbprint_vectors() -> Result<(), JwsError> {
        let a = PublicJwk::from_value(&ec(RFC9449_X, RFC9449_Y))?;
        assert_eq!(
            a.thumbprint(),
            "0ZcOCORZNYy-DWpqq30jZyJGHTN0d2HglBV3uiguA4I"
        );
        assert_eq!(a.verifying_key()?.thumbprint(), a.thumbprint());

        // RFC 7517 A.1 carries extra members ("use", "kid"); they do not enter the thumbprint.
        let b = PublicJwk::from_value(&json!({
            "kty": "EC", "crv": "P-256", "x": RFC7517_X, "y": RFC7517_Y,
            "use": "enc", "kid": "1",
        }))?;
        assert_eq!(
            b.thumbprint(),
            "cn-I_WNMClehiVp51i_0VpOENW1upEerA8sEam5hn-s"
        );
        assert_eq!(b.verifying_key()?.to_jwk(), b);
        Ok(())
    }

    #[test]
    fn from_value_refusals() {
        let mut with_d = ec(RFC9449_X, RFC9449_Y);
        with_d["d"] = json!("870MB6gfuTJ4HtUnUvYMyJpr5eUZNP4Bk43bVdj3eAE");
        assert_eq!(
            PublicJwk::from_value(&with_d),
            Err(JwsError::BadKey("jwk holds a private key"))
        );

        let mut rsa = ec(RFC9449_X, RFC9449_Y);
        rsa["kty"] = json!("RSA");
        assert!(matches!(
            PublicJwk::from_value(&rsa),
            Err(JwsError::Unsupported(_))
        ));

        let mut p384 = ec(RFC9449_X, RFC9449_Y);
        p384["crv"] = json!("P-384");
        assert!(matches!(
            PublicJwk::from_value(&p384),
            Err(JwsError::Unsupported(_))
        ));

        let short = b64::encode(&[7u8; 31]);
        assert!(matches!(
            PublicJwk::from_value(&ec(&short, RFC9449_Y)),
            Err(JwsError::BadKey(_))
        ));
        let long = b64::encode(&[7u8; 33]);
        assert!(matches!(
            PublicJwk::from_value(&ec(RFC9449_X, &long)),
            Err(JwsError::BadKey(_))
        ));
        let padded = format!("{RFC9449_X}=");
        assert!(matches!(
            PublicJwk::from_value(&ec(&padded, RFC9449_Y)),
            Err(JwsError::Malformed(_))
        ));

        let mut no_y = ec(RFC9449_X, RFC9449_Y);
        no_y.as_object_mut().map(|o| o.remove("y"));
        assert!(matches!(
            PublicJwk::from_value(&no_y),
            Err(JwsError::Malformed(_))
        ));
        assert!(matches!(
            PublicJwk::from_value(&json!("EC")),
            Err(JwsError::Malformed(_))
        ));
    }

    #[test]
    fn point_not_on_curve_refused() -> Result<(), JwsError> {
        let mut y = b64::decode(RFC9449_Y)?;
        if let Some(last) = y.last_mut() {
            *last ^= 1;
        }
        let off_curve = ec(RFC9449_X, &b64::encode(&y));
        assert_eq!(
            PublicJwk::from_value(&off_curve),
            Err(JwsError::BadKey("point is not on P-256"))
        );
        // Nor through serde.
        assert!(serde_json::from_value::<PublicJwk>(off_curve).is_err());
        // The identity / all-zero point is not a valid public key either.
        let zero = b64::encode(&[0u8; 32]);
        assert!(PublicJwk::from_value(&ec(&zero, &zero)).is_err());
        Ok(())
    }

    #[test]
    fn serde_validates_and_round_trips() -> Result<(), Box<dyn std::error::Error>> {
        let jwk: PublicJwk = serde_json::from_value(ec(RFC9449_X, RFC9449_Y))?;
        let back: PublicJwk = serde_json::from_str(&serde_json::to_string(&jwk)?)?;
        assert_eq!(back, jwk);
        let mut with_d = ec(RFC9449_X, RFC9449_Y);
        with_d["d"] = json!("AAAA");
        assert!(serde_json::from_value::<PublicJwk>(with_d).is_err());
        Ok(())
    }

    #[test]
    fn signing_key_pkcs8_round_trip_and_debug() -> Result<(), JwsError> {
        let key = SigningKey::generate()?;
        let der = key.to_pkcs8()?;
        let again = SigningKey::from_pkcs8(&der)?;
        assert_eq!(again.public_jwk(), key.public_jwk());
        assert_eq!(again.thumbprint(), key.thumbprint());
        assert_eq!(key.public_jwk().thumbprint(), key.thumbprint());

        let sig = again.sign(b"msg")?;
        key.verifying_key().verify(b"msg", &sig)?;

        let debug = format!("{key:?}");
        assert!(debug.contains(&key.thumbprint()));
        assert!(!debug.contains(&key.public_jwk().x));
        assert!(SigningKey::from_pkcs8(b"not a key").is_err());
        Ok(())
    }

    #[test]
    fn scalar_range() {
        let mut below = P256_ORDER;
        below[31] -= 1;
        assert!(scalar_in_range(&below));
        assert!(!scalar_in_range(&P256_ORDER));
        assert!(!scalar_in_range(&[0u8; 32]));
        assert!(!scalar_in_range(&[0xffu8; 32]));
        assert!(scalar_in_range(&{
            let mut one = [0u8; 32];
            one[31] = 1;
            one
        }));
        assert!(!scalar_in_range(&[1u8; 31]));
    }

    #[test]
    fn from_uncompressed_refusals() -> Result<(), JwsError> {
        let key = SigningKey::generate()?;
        let jwk = key.public_jwk();
        let mut point = vec![0x04];
        point.extend(b64::decode(&jwk.x)?);
        point.extend(b64::decode(&jwk.y)?);
        assert_eq!(
            &VerifyingKey::from_uncompressed(&point)?,
            key.verifying_key()
        );
        point[0] = 0x02;
        assert!(VerifyingKey::from_uncompressed(&point).is_err());
        assert!(VerifyingKey::from_uncompressed(&[]).is_err());
        assert!(VerifyingKey::from_uncompressed(&[0x04; 64]).is_err());
        Ok(())
    }
}
