//! Agents that authenticate with Kubernetes ServiceAccount tokens: the console's
//! [`ServiceTokens`] over the broker's verifier (`countersign-k8s-tokens`), so both verify them
//! the same way (protocol §3.1, protocol.md §7).

use countersign_console_core::{ServiceTokens, Time};
use countersign_k8s_tokens::K8sTokenVerifier;

/// The verifier, answering a verified token's subject.
#[derive(Debug)]
pub struct K8sServiceTokens(pub K8sTokenVerifier);

#[async_trait::async_trait]
impl ServiceTokens for K8sServiceTokens {
    async fn verify(&self, token: &str, now: Time) -> Option<String> {
        match self.0.verify_token(token, now).await {
            Ok(t) => Some(t.subject),
            Err(e) => {
                tracing::debug!(code = %e.code, "service-account token refused");
                None
            }
        }
    }
}
