//! The crate's single error type.

/// Why a key, signature or token was refused.
///
/// The `&'static str` details are fixed descriptions chosen by this crate; they never contain key
/// material, token bytes or any other input.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum JwsError {
    /// The input is not well formed (encoding, JSON shape, lengths, missing members).
    #[error("malformed: {0}")]
    Malformed(&'static str),
    /// The input is well formed but uses something this protocol refuses (`alg`, `crit`, ...).
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// A key is not a usable P-256 public or private key.
    #[error("bad key: {0}")]
    BadKey(&'static str),
    /// The signature does not verify under the given key.
    #[error("bad signature")]
    BadSignature,
    /// The cryptographic library failed for a reason unrelated to the input.
    #[error("cryptographic operation failed")]
    Crypto,
}
