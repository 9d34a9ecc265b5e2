//! # countersign-k8s-tokens
//!
//! The broker's [`TokenVerifier`](countersign_broker_core::identity::TokenVerifier) for
//! Kubernetes ServiceAccount tokens (protocol.md §7): [`K8sTokenVerifier`], configured by a
//! [`VerifierConfig`] (issuer URL, audience, and where the keys are: [`JwksSource`]).
//!
//! A token is accepted when:
//! - it is a compact JWS with `alg` `RS256` (RSASSA-PKCS1-v1_5, SHA-256, 2048–8192-bit keys)
//!   or `ES256` (P-256, raw `R || S`), verified with aws-lc-rs against a key of the issuer's JWKS
//!   (by `kid`; `none`, `HS256` and every other `alg` are refused; `typ` is not required, since
//!   Kubernetes sets none);
//! - its claims pass [`token::check_claims`]: `iss`, `exp` (`TOKEN_EXPIRED`), a lifetime
//!   `exp - iat` of at most an hour (`TOKEN_TOO_LONG_LIVED`), `aud` containing ours, `nbf`, and a
//!   `sub` of `system:serviceaccount:<ns>:<name>` agreeing with the `kubernetes.io` claim.
//!
//! Anything else is `TOKEN_INVALID`. It answers the core's
//! [`ServiceAccountToken`](countersign_broker_core::identity::ServiceAccountToken): namespace,
//! name, subject, expiry, and the pod UID of a pod-bound token. Nothing here panics on input,
//! and no message quotes a token.
//!
//! Key handling (fetch, cache, refresh on an unknown `kid`, rate limit) is described in
//! [`verifier`].

#[cfg(feature = "verifier")]
pub mod config;
pub mod jwks;
pub mod token;
#[cfg(feature = "verifier")]
pub mod verifier;

#[cfg(feature = "verifier")]
pub use config::IssuerConfig;
pub use jwks::{Alg, JwksError, KeySet};
#[cfg(feature = "verifier")]
pub use verifier::{ConfigError, FetchError, JwksSource, K8sTokenVerifier, VerifierConfig};
