//! Who is calling: a signed-in person or an agent's bearer token (spec, "Caller identity").

use serde::Serialize;

use crate::clock::{Entropy, mask_token, masked_matches};
use crate::ids::Login;

/// A signed-in person, as their browser session shows them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Human {
    pub login: Login,
    /// The session's CSRF token, which the browser's state changes must carry.
    pub csrf_token: String,
    /// SHA-256 (hex) of the session token: the stored key of the session.
    pub session_key: String,
}

impl Human {
    /// The CSRF token as a page prints it: masked with a fresh one-time pad each time
    /// ([`crate::clock::mask_token`]), so a compressed page's length tells an observer nothing
    /// about it (BREACH); [`Human::csrf_matches`] takes any masking.
    pub fn masked_csrf(&self, entropy: &dyn Entropy) -> String {
        mask_token(self.csrf_token.as_bytes(), entropy)
    }

    /// Whether `presented` is a masking of the session's CSRF token.
    pub fn csrf_matches(&self, presented: &str) -> bool {
        masked_matches(presented, self.csrf_token.as_bytes())
    }
}

/// A caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    Human(Human),
    /// An agent: `owner` is a personal token's owner (null for the shared token); `service` a
    /// verified service-account token's orchestrator subject (null otherwise).
    Agent {
        owner: Option<Login>,
        service: Option<String>,
    },
}

/// The caller-identity answer: `{kind: user, login}` or `{kind: agent, owner, service}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum Identity {
    User {
        login: Login,
    },
    Agent {
        owner: Option<Login>,
        service: Option<String>,
    },
}

impl Caller {
    pub fn identity(&self) -> Identity {
        match self {
            Caller::Human(h) => Identity::User {
                login: h.login.clone(),
            },
            Caller::Agent { owner, service } => Identity::Agent {
                owner: owner.clone(),
                service: service.clone(),
            },
        }
    }

    /// The person, or HUMAN_ONLY for an agent.
    pub fn human(&self) -> Result<&Human, crate::Error> {
        match self {
            Caller::Human(h) => Ok(h),
            Caller::Agent { .. } => Err(crate::ErrorCode::HUMAN_ONLY.into()),
        }
    }
}

/// Verifies Kubernetes ServiceAccount tokens as the broker does (protocol.md §7), answering the
/// token's subject (`system:serviceaccount:<ns>:<name>`), or `None` for any failure: the caller
/// is told only that it is unauthenticated, never which check failed.
#[async_trait::async_trait]
pub trait ServiceTokens: Send + Sync + std::fmt::Debug {
    async fn verify(&self, token: &str, now: crate::clock::Time) -> Option<String>;
}

/// Whether a bearer token has the shape of a JWS: three dot-separated parts.
pub fn looks_like_jws(token: &str) -> bool {
    token.split('.').count() == 3
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_shapes() {
        let login = Login::parse("Ada@Example.com").expect("login");
        let h = Caller::Human(Human {
            login: login.clone(),
            csrf_token: "c".into(),
            session_key: "k".into(),
        });
        assert_eq!(
            serde_json::to_value(h.identity()).ok(),
            Some(serde_json::json!({"kind": "user", "login": "ada@example.com"}))
        );
        let a = Caller::Agent {
            owner: Some(login),
            service: None,
        };
        assert_eq!(
            serde_json::to_value(a.identity()).ok(),
            Some(serde_json::json!({"kind": "agent", "owner": "ada@example.com", "service": null}))
        );
        assert!(a.human().is_err());
    }

    #[test]
    fn a_masked_csrf_token_differs_each_time_and_only_its_maskings_match() {
        let h = Human {
            login: Login::parse("ada@example.com").expect("login"),
            csrf_token: "HXWnT3o0c2tEY0u2aS3bKqX8oR5x7Vh0dJkLmN9pQrs".into(),
            session_key: "k".into(),
        };
        let e = crate::clock::SystemEntropy;
        let (a, b) = (h.masked_csrf(&e), h.masked_csrf(&e));
        assert_ne!(a, b, "each page carries a fresh masking");
        assert!(!a.contains(&h.csrf_token));
        assert!(h.csrf_matches(&a) && h.csrf_matches(&b));
        // The bare token, a masking of another token, a truncated or non-hex value: refused.
        assert!(!h.csrf_matches(&h.csrf_token));
        let other = Human {
            csrf_token: "x".repeat(h.csrf_token.len()),
            ..h.clone()
        };
        assert!(!h.csrf_matches(&other.masked_csrf(&e)));
        assert!(!h.csrf_matches(&a[..a.len() - 2]));
        assert!(!h.csrf_matches(&format!("{}!!", &a[..a.len() - 2])));
        assert!(!h.csrf_matches(""));
    }
}
