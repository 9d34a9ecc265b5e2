//! Building the console from a configuration, the router from the route table, security
//! headers, serving with graceful shutdown, and housekeeping (lapsed sessions purged).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, post};
use countersign_console_core::{Clock, Console, ConsoleConfig, Error, ErrorCode, Parts};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::ApiError;
use crate::table::{ROUTES, RouteSpec};
use crate::{AppState, Config, api, pages};

/// Builds the console from a configuration: storage, the broker client, the identity provider.
pub async fn build(config: &Config, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<AppState>> {
    config.check()?;
    let storage = countersign_console_sql::SqlStorage::connect(&config.database_url)
        .await
        .map_err(|e| anyhow::anyhow!("console database: {e}"))?;
    let broker: Option<Arc<dyn countersign_console_core::BrokerClient>> = match &config.broker {
        Some(b) => {
            let token = config
                .console_token()?
                .context("the broker's console token: set [broker] console_token_file or COUNTERSIGN_CONSOLE_TOKEN")?;
            Some(Arc::new(crate::broker_client::HttpBroker::new(
                &b.url,
                token,
                Duration::from_secs(b.timeout_seconds),
            )?))
        }
        None => None,
    };
    let idp: Option<Arc<dyn countersign_console_core::IdentityProvider>> = match &config.oidc {
        Some(o) => Some(Arc::new(crate::oidc::OidcProvider::new(
            &o.issuer,
            &o.client_id,
            config.oidc_client_secret()?,
            &format!("{}/auth/callback", config.public_url.trim_end_matches('/')),
        )?)),
        None => None,
    };
    let console_config = ConsoleConfig {
        session_lifetime: chrono::Duration::hours(config.session_hours),
        local_sign_in: config.local_sign_in,
        require_verified_email: config
            .oidc
            .as_ref()
            .map(|o| o.require_verified_email)
            .unwrap_or(true),
        allowed_domains: config.allowed_email_domains.clone(),
        ..ConsoleConfig::default()
    };
    let shared = config.shared_token()?;
    let console = Console::new(
        Parts {
            storage: Arc::new(storage),
            broker,
            idp,
            clock,
            entropy: Arc::new(countersign_console_core::SystemEntropy),
        },
        console_config,
        shared.as_deref().map(|s| s.as_str()),
    );
    Ok(Arc::new(state(console, config)))
}

/// The shared state for a console built by the caller (tests inject their own parts).
pub fn state(console: Console, config: &Config) -> AppState {
    AppState {
        console,
        public_origin: config.public_origin(),
        secure_cookies: config.is_https(),
        local_sign_in_hint: config.local_sign_in_hint.clone(),
        history: Default::default(),
    }
}

/// The handler of one row of the route table.
fn handler(spec: &RouteSpec) -> MethodRouter<Arc<AppState>> {
    match (spec.method, spec.path) {
        ("GET", "/api/v1") => get(api::index),
        ("GET", "/api/v1/me") => get(api::me),
        ("GET", "/api/v1/people") => get(api::people),
        ("GET", "/api/v1/agent-tokens") => get(api::list_tokens),
        ("POST", "/api/v1/agent-tokens") => post(api::mint_token),
        ("DELETE", "/api/v1/agent-tokens/{id}") => delete(api::revoke_token),
        ("GET", "/api/v1/credential-requests") => get(api::list_requests),
        ("POST", "/api/v1/credential-requests/machine-lookup") => post(api::machine_lookup),
        ("GET", "/api/v1/credential-requests/{id}") => get(api::get_request),
        ("POST", "/api/v1/credential-requests/{id}/approve") => post(api::approve),
        ("POST", "/api/v1/credential-requests/{id}/deny") => post(api::deny),
        ("GET", "/api/v1/credential-grants") => get(api::list_grants),
        ("POST", "/api/v1/credential-grants/{id}/revoke") => post(api::revoke_grant),
        ("GET", "/api/v1/machine-logins") => get(api::list_machines),
        ("POST", "/api/v1/machine-logins/{id}/revoke") => post(api::revoke_machine),
        ("GET", "/") => get(pages::inbox),
        ("GET", "/inbox/rows") => get(pages::inbox_rows),
        ("GET", "/requests/{id}") => get(pages::request_page),
        ("GET", "/machines/approve") => get(pages::machine_approve_page),
        ("GET", "/machines") => get(pages::machines_page),
        ("GET", "/grants") => get(pages::grants_page),
        ("GET", "/tokens") => get(pages::tokens_page),
        ("GET", "/history") => get(pages::history_page),
        ("POST", "/sign-out") => post(pages::sign_out),
        ("GET", "/sign-in") => get(pages::sign_in_page),
        ("GET", "/auth/oidc") => get(pages::oidc_start),
        ("GET", "/auth/callback") => get(pages::oidc_callback),
        ("POST", "/auth/local") => post(pages::local_sign_in),
        ("GET", "/assets/console.js") => get(pages::script),
        ("GET", "/assets/console.css") => get(pages::style),
        ("GET", "/healthz") => get(api::health),
        // The table and this match are kept together by the route-table test: a row without
        // a handler answers 405 to every method.
        _ => MethodRouter::new(),
    }
}

/// The message of the fallback, which the route-table test tells apart from a handler's 404.
pub const NO_ROUTE: &str = "no route has this method and path";

async fn no_route() -> Response {
    ApiError(Error::with_message(ErrorCode::NOT_FOUND, NO_ROUTE)).into_response()
}

/// The router: every row of [`ROUTES`] with its caller class as a route layer.
pub fn router(state: Arc<AppState>) -> Router {
    ROUTES
        .iter()
        .fold(Router::new(), |router, spec| {
            let layer =
                middleware::from_fn_with_state((state.clone(), *spec), crate::auth::authenticate);
            router.route(spec.path, handler(spec).route_layer(layer))
        })
        .fallback(no_route)
        .layer(middleware::from_fn(security_headers))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .with_state(state)
}

/// Headers on every answer: no framing, no sniffing, scripts and styles from this origin only.
async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    resp
}

/// A running console.
#[derive(Debug)]
pub struct Running {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    server: JoinHandle<std::io::Result<()>>,
    background: JoinHandle<()>,
}

impl Running {
    /// Stops accepting, lets requests in flight finish (up to `grace`), stops housekeeping.
    pub async fn shutdown(self, grace: Duration) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(grace, self.server).await;
        self.background.abort();
    }

    /// A handle that stops the server when told (or dropped).
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }

    /// Waits for the server to end.
    pub async fn wait(self) -> std::io::Result<()> {
        let r = self
            .server
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        self.background.abort();
        r
    }
}

/// Serves on a bound listener, with housekeeping every minute.
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<Running> {
    let addr = listener.local_addr()?;
    let (stop, mut stopped) = watch::channel(false);
    let app = router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
    });
    let background = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(60));
        loop {
            tick.tick().await;
            if let Err(e) = state.console.purge().await {
                tracing::warn!(code = e.code_str(), error = %e.message, "purge failed");
            }
        }
    });
    Ok(Running {
        addr,
        stop,
        server,
        background,
    })
}
