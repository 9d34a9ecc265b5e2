//! Strict base64url without padding (RFC 7515 §2, RFC 4648 §5).
//!
//! Decoding refuses padding, the standard (`+` `/`) alphabet, whitespace, and non-canonical
//! encodings (non-zero trailing bits), so each byte string has exactly one accepted encoding.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::JwsError;

/// Encodes `bytes` as base64url without padding.
#[must_use]
pub fn encode(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Decodes canonical base64url without padding.
///
/// # Errors
/// [`JwsError::Malformed`] for anything else.
pub fn decode(s: &str) -> Result<Vec<u8>, JwsError> {
    URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| JwsError::Malformed("invalid base64url"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for len in 0..70 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 % 256) as u8).collect();
            assert_eq!(decode(&encode(&bytes)), Ok(bytes));
        }
        assert_eq!(encode(b"\xfb\xff"), "-_8");
    }

    #[test]
    fn refuses_non_canonical() {
        assert!(decode("-_8").is_ok());
        assert!(decode("+/8").is_err(), "standard alphabet");
        assert!(decode("-_8=").is_err(), "padding");
        assert!(decode("-_9").is_err(), "non-zero trailing bits");
        assert!(decode("-_ 8").is_err(), "whitespace");
        assert!(decode("A").is_err(), "impossible length");
    }
}
