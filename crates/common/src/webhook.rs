//! [Standard Webhooks](https://www.standardwebhooks.com/) signing and verification: the broker
//! signs its expiry notifications, the console verifies them (and any other sender or receiver
//! of the project uses this one key type).
//!
//! - The secret: a `whsec_`-prefixed base64 string is decoded and its bytes are the HMAC key
//!   (the convention, what the reference libraries expect); any other text is the key as it
//!   is. Either way at least [`WebhookSecret::MIN_BYTES`].
//! - The signature: `v1,<base64 of HMAC-SHA256 over "<webhook-id>.<webhook-timestamp>.<body>">`;
//!   a `webhook-signature` header may carry several, space-separated.

use base64::Engine as _;
use zeroize::Zeroizing;

/// Why a webhook secret was refused (its text is never repeated).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SecretError {
    #[error("a whsec_ secret must be base64 after the prefix")]
    NotBase64,
    #[error(
        "the webhook secret must hold at least {} bytes of key",
        WebhookSecret::MIN_BYTES
    )]
    TooShort,
}

/// A Standard Webhooks key (zeroized when dropped; its `Debug` shows nothing of it).
pub struct WebhookSecret(Zeroizing<Vec<u8>>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

/// Standard base64, padding optional (Standard Webhooks secrets are written both ways).
const STANDARD_LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

impl WebhookSecret {
    /// The shortest key accepted (Standard Webhooks: 24 to 64 bytes).
    pub const MIN_BYTES: usize = 24;

    /// `whsec_<base64>`, or else the text's bytes; surrounding whitespace is ignored.
    pub fn parse(text: &str) -> Result<Self, SecretError> {
        let text = text.trim();
        let key = match text.strip_prefix("whsec_") {
            Some(b64) => Zeroizing::new(
                STANDARD_LENIENT
                    .decode(b64)
                    .map_err(|_| SecretError::NotBase64)?,
            ),
            None => Zeroizing::new(text.as_bytes().to_vec()),
        };
        if key.len() < Self::MIN_BYTES {
            return Err(SecretError::TooShort);
        }
        Ok(Self(key))
    }

    /// HMAC-SHA256 of `<id>.<timestamp>.<body>` (`timestamp` as the header carries it).
    pub fn mac(&self, id: &str, timestamp: &str, body: &[u8]) -> Vec<u8> {
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &self.0);
        let mut ctx = aws_lc_rs::hmac::Context::with_key(&key);
        ctx.update(id.as_bytes());
        ctx.update(b".");
        ctx.update(timestamp.as_bytes());
        ctx.update(b".");
        ctx.update(body);
        ctx.sign().as_ref().to_vec()
    }

    /// The `webhook-signature` value for a message: `v1,<base64 HMAC>`.
    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        format!(
            "v1,{}",
            base64::engine::general_purpose::STANDARD.encode(self.mac(
                id,
                &timestamp.to_string(),
                body
            ))
        )
    }

    /// Whether one of the `v1,<base64>` entries of `signatures` is the body's signature. Every
    /// entry is compared, each in constant time: the time taken does not say which matched.
    pub fn verifies(&self, id: &str, timestamp: &str, body: &[u8], signatures: &str) -> bool {
        let expected = self.mac(id, timestamp, body);
        let mut ok = false;
        for entry in signatures.split(' ') {
            let Some(b64) = entry.strip_prefix("v1,") else {
                continue;
            };
            let Ok(given) = base64::engine::general_purpose::STANDARD.decode(b64) else {
                continue;
            };
            ok |= crate::clock::ct_eq(&given, &expected);
        }
        ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_as_the_standard_webhooks_example() {
        // The example of the Standard Webhooks specification and its reference libraries.
        let secret = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").ok();
        let sig = secret.map(|s| {
            s.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#,
            )
        });
        assert_eq!(
            sig.as_deref(),
            Some("v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=")
        );
    }

    #[test]
    fn verifies_any_of_several_entries_and_nothing_else() {
        let Ok(s) = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw") else {
            panic!("the example secret parses");
        };
        let sig = format!("v0,zzz {}", s.sign("msg_1", 1_700_000_000, b"{}"));
        assert!(s.verifies("msg_1", "1700000000", b"{}", &sig));
        assert!(!s.verifies("msg_1", "1700000001", b"{}", &sig));
        assert!(!s.verifies("msg_2", "1700000000", b"{}", &sig));
        assert!(!s.verifies("msg_1", "1700000000", b"{} ", &sig));
        assert!(!s.verifies("msg_1", "1700000000", b"{}", "v1,AAAA"));
        assert!(!s.verifies("msg_1", "1700000000", b"{}", ""));
    }

    #[test]
    fn secrets_are_long_enough_and_well_formed() {
        assert!(WebhookSecret::parse("whsec_short").is_err());
        // "short", well encoded: too few bytes of key.
        assert_eq!(
            WebhookSecret::parse("whsec_c2hvcnQ=").err(),
            Some(SecretError::TooShort)
        );
        assert_eq!(
            WebhookSecret::parse("whsec_!!!not-base64!!!AAAAAAAAAAAAAAAAAAAA").err(),
            Some(SecretError::NotBase64)
        );
        assert!(WebhookSecret::parse("too short").is_err());
        assert!(WebhookSecret::parse("  a raw secret of enough length here \n").is_ok());
        assert_eq!(
            format!("{:?}", WebhookSecret::parse(&"x".repeat(32)).ok()),
            "Some(WebhookSecret(..))"
        );
    }
}
