//! The identity provider a person signs in with (OpenID Connect: authorization code with PKCE).

use async_trait::async_trait;

/// What starting a sign-in produced: the URL to send the browser to, and what the callback
/// needs to finish (kept server-side until then).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthStart {
    pub url: String,
    pub state: String,
    pub nonce: String,
    pub pkce_verifier: String,
}

/// What the provider vouched for once the code was exchanged and the ID token verified
/// (signature, issuer, audience, expiry, nonce).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedIdentity {
    pub subject: String,
    pub email: Option<String>,
    pub email_verified: Option<bool>,
}

/// A provider failure; the message names the step, never a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdpError {
    /// The provider could not be reached or answered badly.
    #[error("identity provider unavailable: {0}")]
    Unavailable(String),
    /// The provider refused, or what it answered does not verify.
    #[error("{0}")]
    Refused(String),
}

#[async_trait]
pub trait IdentityProvider: Send + Sync + std::fmt::Debug {
    /// A human-readable name for the sign-in button (e.g. the issuer's host).
    fn name(&self) -> String;
    async fn begin(&self) -> Result<AuthStart, IdpError>;
    async fn finish(
        &self,
        code: &str,
        pkce_verifier: &str,
        nonce: &str,
    ) -> Result<VerifiedIdentity, IdpError>;
}
