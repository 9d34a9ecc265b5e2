//! The route table: every route the server has, with its caller class and purpose. The router
//! is built from it ([`crate::server::router`]) and `GET /api/v1` answers it, so the two cannot
//! drift; the route-table test checks that every row reaches a handler.

use serde_json::{Value, json};

/// Caller classes (spec, "Caller classes").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Auth {
    /// No credential.
    Anyone,
    /// A signed-in person (browser session) or an agent (bearer token).
    HumanOrAgent,
    /// A signed-in person; an agent's bearer token is refused with 403 HUMAN_ONLY.
    HumanOnly,
    /// An agent's bearer token; a browser session is refused.
    AgentOnly,
}

impl Auth {
    pub fn as_str(self) -> &'static str {
        match self {
            Auth::Anyone => "Anyone",
            Auth::HumanOrAgent => "Human or agent",
            Auth::HumanOnly => "Human only",
            Auth::AgentOnly => "Agent only",
        }
    }
}

/// What a route answers: JSON (refusals as JSON), or a page (HTML; a person not signed in is
/// sent to the sign-in page).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Api,
    Page,
}

/// One route.
#[derive(Debug, Clone, Copy)]
pub struct RouteSpec {
    pub method: &'static str,
    pub path: &'static str,
    pub auth: Auth,
    pub kind: Kind,
    pub purpose: &'static str,
}

const fn r(
    method: &'static str,
    path: &'static str,
    auth: Auth,
    kind: Kind,
    purpose: &'static str,
) -> RouteSpec {
    RouteSpec {
        method,
        path,
        auth,
        kind,
        purpose,
    }
}

use Auth::{Anyone, HumanOnly, HumanOrAgent};
use Kind::{Api, Page};

/// Every route of the console.
pub const ROUTES: &[RouteSpec] = &[
    // ----- API -----
    r(
        "GET",
        "/api/v1",
        Anyone,
        Api,
        "the route table with method, auth and purpose",
    ),
    r(
        "GET",
        "/api/v1/me",
        HumanOrAgent,
        Api,
        "who the server takes the caller for (caller identity): {kind: user, login} or {kind: agent, owner, service}",
    ),
    r(
        "GET",
        "/api/v1/people",
        HumanOnly,
        Api,
        "everyone who has signed in, by lowercase e-mail",
    ),
    r(
        "GET",
        "/api/v1/agent-tokens",
        HumanOnly,
        Api,
        "list the caller's personal agent tokens",
    ),
    r(
        "POST",
        "/api/v1/agent-tokens",
        HumanOnly,
        Api,
        "mint a personal agent token {name?}; the token is shown once, only its hash is kept",
    ),
    r(
        "DELETE",
        "/api/v1/agent-tokens/{id}",
        HumanOnly,
        Api,
        "revoke one of the caller's personal agent tokens",
    ),
    r(
        "GET",
        "/api/v1/credential-requests",
        HumanOnly,
        Api,
        "list credential requests the caller may decide (only ?approver=me): those naming the caller, shared secrets' and service machine logins'; null without a configured broker",
    ),
    r(
        "POST",
        "/api/v1/credential-requests/machine-lookup",
        HumanOnly,
        Api,
        "resolve a pending machine login by typed confirmation code {code}, returning its facts",
    ),
    r(
        "GET",
        "/api/v1/credential-requests/{id}",
        HumanOnly,
        Api,
        "read one credential request's facts; the broker is authoritative",
    ),
    r(
        "POST",
        "/api/v1/credential-requests/{id}/approve",
        HumanOnly,
        Api,
        "approve as the caller {code?} (a machine login also takes its typed code); the broker decides whether the caller is its approver",
    ),
    r(
        "POST",
        "/api/v1/credential-requests/{id}/deny",
        HumanOnly,
        Api,
        "deny as the caller {code?}; same rule",
    ),
    r(
        "GET",
        "/api/v1/credential-grants",
        HumanOnly,
        Api,
        "list credential grants the caller may revoke (only ?approver=me)",
    ),
    r(
        "POST",
        "/api/v1/credential-grants/{id}/revoke",
        HumanOnly,
        Api,
        "revoke a broker grant as the caller (its approver or its enrollment's operator)",
    ),
    r(
        "GET",
        "/api/v1/machine-logins",
        HumanOnly,
        Api,
        "list machine logins the caller may revoke that can still reach a secret, each naming who approved it",
    ),
    r(
        "POST",
        "/api/v1/machine-logins/{id}/revoke",
        HumanOnly,
        Api,
        "revoke a machine login, expired or not, ending every session it enrolled",
    ),
    // ----- pages -----
    r(
        "GET",
        "/",
        HumanOnly,
        Page,
        "inbox: pending requests the person decides, with approve and deny; new ones appear without a reload",
    ),
    r(
        "GET",
        "/inbox/rows",
        HumanOnly,
        Page,
        "the inbox's rows (HTML fragment the inbox page polls)",
    ),
    r(
        "GET",
        "/requests/{id}",
        HumanOnly,
        Page,
        "one credential request's facts, with approve and deny",
    ),
    r(
        "GET",
        "/machines/approve",
        HumanOnly,
        Page,
        "type a machine's confirmation code, see its facts and approve",
    ),
    r(
        "GET",
        "/machines",
        HumanOnly,
        Page,
        "machine logins the person may revoke",
    ),
    r(
        "GET",
        "/grants",
        HumanOnly,
        Page,
        "live grants the person may revoke",
    ),
    r(
        "GET",
        "/tokens",
        HumanOnly,
        Page,
        "the person's personal agent tokens: mint and revoke",
    ),
    r(
        "GET",
        "/history",
        HumanOnly,
        Page,
        "what the person decided through this console, and when, newest first",
    ),
    r(
        "POST",
        "/sign-out",
        HumanOnly,
        Page,
        "end the browser session",
    ),
    r("GET", "/sign-in", Anyone, Page, "sign-in page"),
    r(
        "GET",
        "/auth/oidc",
        Anyone,
        Page,
        "start OpenID Connect sign-in (authorization code with PKCE)",
    ),
    r(
        "GET",
        "/auth/callback",
        Anyone,
        Page,
        "OpenID Connect redirect URI: finish sign-in",
    ),
    r(
        "POST",
        "/auth/local",
        Anyone,
        Page,
        "dev mode's local sign-in by e-mail (loopback only)",
    ),
    r(
        "GET",
        "/assets/console.js",
        Anyone,
        Page,
        "the pages' script",
    ),
    r(
        "GET",
        "/assets/console.css",
        Anyone,
        Page,
        "the pages' style sheet",
    ),
    r(
        "GET",
        "/healthz",
        Anyone,
        Api,
        "health: the console's database answers",
    ),
];

/// The `GET /api/v1` answer.
pub fn describe() -> Value {
    json!({
        "routes": ROUTES.iter().map(|r| json!({
            "method": r.method,
            "path": r.path,
            "auth": r.auth.as_str(),
            "purpose": r.purpose,
        })).collect::<Vec<_>>(),
        "count": ROUTES.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_route_is_listed_twice() {
        let mut seen = std::collections::HashSet::new();
        for r in ROUTES {
            assert!(
                seen.insert((r.method, r.path)),
                "{} {} twice",
                r.method,
                r.path
            );
        }
    }
}
