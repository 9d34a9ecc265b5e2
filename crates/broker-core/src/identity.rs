//! Identity, as the core needs it: verifying a container orchestrator's ServiceAccount token
//! (the Kubernetes verifier implements this; a broker with none answers TOKEN_LOGIN_OFF).

use async_trait::async_trait;

use crate::clock::Time;
use crate::error::Error;

/// What a verified ServiceAccount token proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServiceAccountToken {
    pub namespace: String,
    pub name: String,
    /// `system:serviceaccount:<ns>:<name>`.
    pub subject: String,
    pub expires_at: Time,
    /// The pod a pod-bound token names: its UID.
    pub pod_uid: Option<String>,
}

impl ServiceAccountToken {
    /// `<namespace>/<name>`.
    pub fn account(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Verifies ServiceAccount tokens. Errors use the spec's TOKEN_* codes.
#[async_trait]
pub trait TokenVerifier: Send + Sync + std::fmt::Debug + 'static {
    async fn verify(&self, token: &str, now: Time) -> Result<ServiceAccountToken, Error>;
}
