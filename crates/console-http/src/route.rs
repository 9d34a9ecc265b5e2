//! One row of the route table and its parts: the caller class a route takes ([`Auth`]), what it
//! answers ([`Kind`]) and the row itself ([`RouteSpec`]). The table (`table.rs`) lists the rows;
//! the caller's check (`auth.rs`) and the router (`server.rs`) read them.

use std::sync::Arc;

use axum::routing::MethodRouter;

use crate::AppState;

/// Caller classes (spec, "Caller classes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// No credential.
    Anyone,
    /// A signed-in person (browser session) or an agent (bearer token).
    HumanOrAgent,
    /// A signed-in person; an agent's bearer token is refused with 403 HUMAN_ONLY.
    HumanOnly,
    /// An agent's bearer token; a browser session is refused with 403 AGENT_ONLY.
    AgentOnly,
}

impl Auth {
    /// The class by its spec name, as `GET /api/v1` lists it.
    pub fn as_str(self) -> &'static str {
        match self {
            Auth::Anyone => "Anyone",
            Auth::HumanOrAgent => "Human or agent",
            Auth::HumanOnly => "Human only",
            Auth::AgentOnly => "Agent only",
        }
    }
}

/// What a route answers: JSON (refusals as JSON, unknown query parameters refused), or a page
/// (HTML; a person not signed in is sent to the sign-in page).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Api,
    Page,
}

/// One route.
#[derive(Clone, Copy)]
pub struct RouteSpec {
    pub method: &'static str,
    pub path: &'static str,
    pub auth: Auth,
    pub kind: Kind,
    /// The query parameters the route reads; any other is 400 INVALID_QUERY (API routes).
    pub query: &'static [&'static str],
    pub purpose: &'static str,
    /// Mounts the handler under the row's method.
    pub handler: fn() -> MethodRouter<Arc<AppState>>,
}

impl std::fmt::Debug for RouteSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.method, self.path)
    }
}

impl RouteSpec {
    /// Whether `GET /api/v1` lists the row under `routes` (the API's own routes) rather than
    /// `other_routes` (pages, sign-in, assets, health).
    pub fn is_api(&self) -> bool {
        (self.path == "/api/v1" || self.path.starts_with("/api/v1/"))
            && !EXTENSIONS.iter().any(|e| self.path.starts_with(e))
    }
}

/// API routes outside the spec's 131 (issue 29: passkeys, the approval statement, notification
/// preferences): served under `/api/v1` like the rest, listed under `other_routes` so that the
/// spec's list stays exactly its own (docs/decisions.md).
const EXTENSIONS: &[&str] = &[
    "/api/v1/passkeys",
    "/api/v1/notification-preferences",
    "/api/v1/credential-requests/{id}/statement",
];
