//! Who is calling: a signed-in person or an agent's bearer token (spec, "Caller identity").

use serde::Serialize;

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
}
