//! # countersign-console-http
//!
//! The approval console's HTTP server (spec: `console-http-api.md`, the first slice): a thin
//! axum shell over [`countersign_console_core::Console`]. Each handler reads the request, is
//! handed its caller by the route's class ([`auth`]), calls one core operation and renders JSON
//! ([`api`]) or a server-rendered page ([`pages`]).
//!
//! - [`table`]: the route table; the router and `GET /api/v1` are both built from it
//!   ([`route`]: one row's type).
//! - [`auth`]: bearer tokens and browser sessions, HUMAN_ONLY, and CSRF checks on a browser's
//!   state changes (same origin and the session's CSRF token).
//! - [`broker_client`]: the broker over HTTP with the console token.
//! - [`oidc`]: OpenID Connect sign-in (authorization code with PKCE).
//! - [`server`]: building from a [`config::Config`], serving, housekeeping.
//!
//! Dev mode (the broker and the console together in one process) and the `countersign-console`
//! binary are `countersign-dev`'s, the crate above both servers: this one does not depend on
//! the broker's.

pub mod agents;
pub mod api;
pub mod auth;
pub mod broker_client;
pub mod code_host;
pub mod config;
pub mod error;
pub mod hooks;
mod html;
pub mod link;
pub mod notify;
pub mod oidc;
pub mod pages;
pub mod route;
pub mod server;
pub mod table;
pub mod witness;

use std::sync::Arc;

use countersign_console_core::Console;

pub use config::Config;
pub use server::{Running, build, serve};

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    pub console: Console,
    /// `scheme://host[:port]` of the public URL: a same-origin request's `Origin`.
    pub public_origin: String,
    /// Cookies are `Secure` (and `__Host-` prefixed) behind https.
    pub secure_cookies: bool,
    /// Dev mode: the e-mail the local sign-in form suggests.
    pub local_sign_in_hint: Option<String>,
    /// Dev mode's additions (the other loopback origin, fresh enrollment codes); none in
    /// `serve`.
    pub dev: Option<config::DevHooks>,
    /// The live sessions linked to this replica.
    pub sessions: Arc<link::Registry>,
    /// The broker's webhook signing secret (`[broker] webhook_secret_file`); none: the
    /// webhook route answers 404.
    pub webhook_secret: Option<hooks::WebhookSecret>,
    /// The storage's listener for other replicas' events, until [`serve`] takes it.
    pub event_listener: std::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
    /// A client of the broker (2 s per call) for its `/readyz`, which the console's own
    /// `/readyz` asks (none: no broker).
    pub broker_readyz: Option<countersign_broker_client::BrokerClient>,
    /// Tells people where to approve (`[notifications]`); none: nothing is sent.
    pub notifier: Option<Arc<notify::Notifier>>,
    /// The background loops' pace, which tests turn (see [`server::Loops`]).
    pub loops: server::Loops,
}

impl AppState {
    /// The session cookie's name.
    pub fn session_cookie(&self) -> &'static str {
        if self.secure_cookies {
            "__Host-countersign_session"
        } else {
            "countersign_session"
        }
    }

    /// The cookie that binds a sign-in under way to this browser.
    pub fn sign_in_cookie(&self) -> &'static str {
        if self.secure_cookies {
            "__Host-countersign_sign_in"
        } else {
            "countersign_sign_in"
        }
    }

    /// The cookie that carries the local sign-in form's CSRF token (double submit).
    pub fn form_cookie(&self) -> &'static str {
        if self.secure_cookies {
            "__Host-countersign_form"
        } else {
            "countersign_form"
        }
    }

    /// A `Set-Cookie` value: HttpOnly, SameSite=Lax, Path=/, Secure behind https.
    pub fn cookie(&self, name: &str, value: &str, max_age_secs: i64) -> String {
        format!(
            "{name}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age_secs}{}",
            if self.secure_cookies { "; Secure" } else { "" }
        )
    }
}
