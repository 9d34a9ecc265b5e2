//! Building the console from a configuration, the router from the route table, security
//! headers, serving with graceful shutdown, and housekeeping (lapsed sessions purged).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use countersign_common::tick::Ticker;
use countersign_console_core::{Clock, Console, ConsoleConfig, Error, ErrorCode, Parts};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::error::ApiError;
use crate::route::{Kind, RouteSpec};
use crate::table::ROUTES;
use crate::{AppState, Config};

/// Builds the console from a configuration: storage, the broker client, the identity provider.
pub async fn build(config: &Config, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<AppState>> {
    config.check()?;
    let storage = countersign_console_sql::SqlStorage::connect(&config.database_url)
        .await
        .map_err(|e| anyhow::anyhow!("console database: {e}"))?;
    let broker = broker_client(config)?;
    let loops = Loops::default();
    // The console witnesses the broker's audit log outside the broker's database (witness.rs).
    if let (Some(b), Some(token)) = (&config.broker, config.console_token()?) {
        let timeout = Duration::from_secs(b.timeout_seconds);
        crate::witness::Witness::new(storage.clone(), &b.url, token, timeout)?
            .spawn(loops.witness.ticks());
    }
    let idp = identity_provider(config)?;
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
    let service_tokens = service_tokens(config)?;
    let listener_storage = storage.clone();
    let notifier = match &config.notifications {
        Some(n) => Some(Arc::new(crate::notify::Notifier::new(
            n,
            storage.clone(),
            &config.public_url,
            clock.clone(),
        )?)),
        None => None,
    };
    let sessions = Arc::new(crate::link::Registry::default());
    let console = Console::new(
        Parts {
            storage: Arc::new(storage),
            broker,
            idp,
            clock,
            entropy: Arc::new(countersign_console_core::SystemEntropy),
            presence: Some(sessions.clone()),
            service_tokens,
        },
        console_config,
        shared.as_deref().map(|s| s.as_str()),
    );
    if let Some(ch) = &config.code_hosting {
        let gh = countersign_code_host::GitHub::new(&ch.api_url, ch.token_file.clone())
            .map_err(|e| anyhow::anyhow!("[code_hosting]: {e}"))?;
        console.set_code_host(
            Arc::new(crate::code_host::GitHubHost(gh)),
            config.delivery_targets.clone().unwrap_or_default(),
        );
    }
    if let Some(n) = &notifier {
        console.set_outbox(n.outbox());
    }
    let mut state = state(console, config);
    state.sessions = sessions;
    state.webhook_secret = config.webhook_secret()?;
    state.notifier = notifier;
    state.loops = loops;
    let state = Arc::new(state);
    listen(&state, &listener_storage);
    Ok(state)
}

/// The broker client, when a broker is configured (its console token is then required).
fn broker_client(
    config: &Config,
) -> anyhow::Result<Option<Arc<dyn countersign_console_core::BrokerClient>>> {
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
    Ok(broker)
}

/// The OpenID Connect provider people sign in with, when one is configured.
fn identity_provider(
    config: &Config,
) -> anyhow::Result<Option<Arc<dyn countersign_console_core::IdentityProvider>>> {
    let idp: Option<Arc<dyn countersign_console_core::IdentityProvider>> = match &config.oidc {
        Some(o) => Some(Arc::new(crate::oidc::OidcProvider::new(
            &o.issuer,
            &o.client_id,
            config.oidc_client_secret()?,
            &format!("{}/auth/callback", config.public_url.trim_end_matches('/')),
        )?)),
        None => None,
    };
    Ok(idp)
}

/// A ServiceAccount token verifier and the accounts it admits.
type Admitted = (
    Arc<dyn countersign_console_core::ServiceTokens>,
    Vec<String>,
);

/// The ServiceAccount token verifier agents in pods sign in with, and the accounts it
/// admits, when `[agents.token_issuer]` is configured.
fn service_tokens(config: &Config) -> anyhow::Result<Option<Admitted>> {
    let service_tokens = match &config.agents {
        Some(a) => match &a.token_issuer {
            Some(t) => {
                let vc = t
                    .verifier_config(Some(crate::config::DEFAULT_AUDIENCE))
                    .map_err(anyhow::Error::msg)?;
                let v = countersign_k8s_tokens::K8sTokenVerifier::new(vc)
                    .map_err(|e| anyhow::anyhow!("[agents.token_issuer]: {e}"))?;
                let v: Arc<dyn countersign_console_core::ServiceTokens> =
                    Arc::new(crate::agents::K8sServiceTokens(v));
                Some((v, a.service_accounts.clone()))
            }
            None => None,
        },
        None => None,
    };
    Ok(service_tokens)
}

/// Hears the database's notifications: each committed event wakes its streams, and link
/// notices from other replicas reach the links this one holds.
fn listen(state: &Arc<AppState>, storage: &countersign_console_sql::SqlStorage) {
    let weak = Arc::downgrade(state);
    let listener = storage.listen_events(Arc::new(move |id| {
        if let Some(st) = weak.upgrade() {
            st.console.heard_committed(id);
        }
    }));
    if let Ok(mut slot) = state.event_listener.lock() {
        *slot = listener;
    }
    // Link notices from other replicas: deliveries to the links this one holds, links to close.
    let weak = Arc::downgrade(state);
    let links = storage.listen_links(Arc::new(move |payload| {
        if let Some(st) = weak.upgrade() {
            crate::link::on_notice(st, payload);
        }
    }));
    if let Ok(mut slot) = state.sessions.listener.lock() {
        *slot = links;
    }
}

/// The shared state for a console built by the caller (tests inject their own parts).
pub fn state(console: Console, config: &Config) -> AppState {
    AppState {
        console,
        public_origin: config.public_origin(),
        secure_cookies: config.is_https(),
        local_sign_in_hint: config.local_sign_in_hint.clone(),
        dev: config.dev.clone(),
        sessions: Default::default(),
        webhook_secret: None,
        event_listener: Default::default(),
        broker_readyz: config
            .broker
            .as_ref()
            .and_then(|b| crate::broker_client::client(&b.url, Duration::from_secs(2)).ok()),
        notifier: None,
        loops: Loops::default(),
    }
}

/// The pace of the console's background loops: each runs a pass when its period elapses or
/// when a test turns it ([`Ticker::turn`]); what a pass decides reads the console's clock.
#[derive(Debug, Clone)]
pub struct Loops {
    /// Lapsed sessions and sign-in attempts: every minute.
    pub housekeeping: Ticker,
    /// Notices to people (`[notifications]`): every second.
    pub notify: Ticker,
    /// Deliveries not acknowledged in time, and sessions of a silent replica: every second.
    pub link_sweep: Ticker,
    /// This replica's presence heartbeat: every 20 s.
    pub heartbeat: Ticker,
    /// The broker's audit head, witnessed: every 2 s.
    pub witness: Ticker,
    /// Delivery data: every 5 minutes.
    pub delivery_sync: Ticker,
    /// Architecture sources: hourly.
    pub architecture_sync: Ticker,
}

impl Default for Loops {
    fn default() -> Self {
        use crate::api::delivery::{ARCHITECTURE_EVERY, DELIVERY_EVERY};
        Self {
            housekeeping: Ticker::every("console.housekeeping", Duration::from_secs(60)),
            notify: Ticker::every("console.notify", crate::notify::EVERY),
            link_sweep: Ticker::every("console.link_sweep", Duration::from_secs(1)),
            heartbeat: Ticker::every("console.heartbeat", crate::link::HEARTBEAT),
            witness: Ticker::every("console.witness", crate::witness::INTERVAL),
            delivery_sync: Ticker::every("console.delivery_sync", DELIVERY_EVERY),
            architecture_sync: Ticker::every("console.architecture_sync", ARCHITECTURE_EVERY),
        }
    }
}

/// The message of the fallback, which the route-table test tells apart from a handler's 404.
pub const NO_ROUTE: &str = "no route has this method and path";

/// No route: JSON for API callers; a browser asking for a page gets the 404 page in the layout.
async fn no_route(req: Request) -> Response {
    let path = req.uri().path();
    let wants_html = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("text/html"));
    if wants_html && !path.starts_with("/api/") && !path.starts_with("/link/") {
        return crate::pages::no_page();
    }
    ApiError(Error::with_message(ErrorCode::NOT_FOUND, NO_ROUTE)).into_response()
}

/// The router: every row of [`ROUTES`] with its caller class as a route layer.
pub fn router(state: Arc<AppState>) -> Router {
    ROUTES
        .iter()
        .fold(Router::new(), |router, spec| {
            let auth =
                middleware::from_fn_with_state((state.clone(), *spec), crate::auth::authenticate);
            let rules = middleware::from_fn_with_state(*spec, request_rules);
            // Inside the caller's check: a page's error is framed with the person's navigation.
            let faults = middleware::from_fn(crate::pages::render_faults);
            router.route(
                spec.path,
                (spec.handler)()
                    .route_layer(rules)
                    .route_layer(faults)
                    .route_layer(auth),
            )
        })
        .fallback(no_route)
        .layer(middleware::from_fn(method_not_allowed))
        .layer(compression())
        .layer(middleware::from_fn(security_headers))
        .layer(middleware::from_fn(|req, next| REQUESTS.track(req, next)))
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(|req: &Request| REQUESTS.span(req)),
        )
        .with_state(state)
}

/// gzip for what a browser reads, when it asks (`Accept-Encoding`): pages, scripts, styles,
/// the favicon and JSON over 1 KiB, at the fastest level (the issue page of 215 KiB in
/// `docs/benchmarks.md` compresses to 26 KiB for about a millisecond of CPU). Event
/// streams, WebSocket upgrades and everything else pass as they are. Pages carry the CSRF
/// token masked afresh each time (`Human::masked_csrf`), so compression exposes no secret to a
/// length-watching observer (BREACH): see `docs/decisions.md`.
fn compression()
-> tower_http::compression::CompressionLayer<impl tower_http::compression::Predicate> {
    use tower_http::compression::Predicate as _;
    use tower_http::compression::{CompressionLayer, CompressionLevel, predicate::SizeAbove};
    let compressible = |_: axum::http::StatusCode,
                        _: axum::http::Version,
                        h: &axum::http::HeaderMap,
                        _: &axum::http::Extensions| {
        let Some(t) = h.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        let t = t.split(';').next().unwrap_or_default().trim();
        matches!(
            t,
            "text/html"
                | "text/css"
                | "text/javascript"
                | "application/javascript"
                | "application/json"
                | "image/svg+xml"
        )
    };
    CompressionLayer::new()
        .quality(CompressionLevel::Fastest)
        .compress_when(SizeAbove::new(1024).and(compressible))
}

/// The request rules every API row holds before its handler (protocol §2, after the caller's
/// credential, class and CSRF): a body too large by its `Content-Length` (413), a query
/// parameter the row does not take (400 INVALID_QUERY).
async fn request_rules(State(spec): State<RouteSpec>, req: Request, next: Next) -> Response {
    if spec.kind == Kind::Api {
        let declared = req
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok());
        // Multipart uploads take up to 25 MiB; every JSON body 1 MiB (protocol §2).
        let limit = if crate::api::documents::is_multipart(req.headers()) {
            crate::api::documents::UPLOAD_LIMIT
        } else {
            crate::api::JSON_LIMIT
        };
        if declared.is_some_and(|n| n > limit) {
            return ApiError::from(ErrorCode::REQUEST_TOO_LARGE).into_response();
        }
        let query = req.uri().query().unwrap_or("");
        if let Some((name, _)) = url::form_urlencoded::parse(query.as_bytes())
            .find(|(name, _)| !spec.query.contains(&name.as_ref()))
        {
            return ApiError(Error::with_message(
                ErrorCode::INVALID_QUERY,
                format!(
                    "this route takes no `{}` parameter",
                    name.chars().take(64).collect::<String>()
                ),
            ))
            .into_response();
        }
    }
    next.run(req).await
}

/// A known path with another method: 405 METHOD_NOT_ALLOWED as JSON, keeping the router's
/// `Allow` header (RFC 9110 §15.5.6).
async fn method_not_allowed(req: Request, next: Next) -> Response {
    let resp = next.run(req).await;
    if resp.status() != axum::http::StatusCode::METHOD_NOT_ALLOWED {
        return resp;
    }
    let allow = resp.headers().get(header::ALLOW).cloned();
    let mut out = ApiError::from(ErrorCode::METHOD_NOT_ALLOWED).into_response();
    if let Some(a) = allow {
        out.headers_mut().insert(header::ALLOW, a);
    }
    out
}

/// Headers on every answer: no framing, no sniffing, scripts and styles from this origin only
/// (an answer that set a stricter policy keeps it: a download's `sandbox`).
async fn security_headers(req: Request, next: Next) -> Response {
    let mut resp = next.run(req).await;
    let h = resp.headers_mut();
    if !h.contains_key(header::CONTENT_SECURITY_POLICY) {
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(
                "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                 connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            ),
        );
    }
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

/// Aborts a task when dropped (the housekeeping task's helpers end with it).
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A running console.
#[derive(Debug)]
pub struct Running {
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    server: JoinHandle<std::io::Result<()>>,
    background: JoinHandle<()>,
    /// The storage's listener for other replicas' events, if any.
    listener: Option<JoinHandle<()>>,
}

impl Running {
    /// Stops accepting, lets requests in flight finish (up to `grace`), stops housekeeping.
    pub async fn shutdown(mut self, grace: Duration) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(grace, self.server).await;
        self.background.abort();
        if let Some(l) = self.listener.take() {
            l.abort();
        }
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
        if let Some(l) = self.listener {
            l.abort();
        }
        r
    }
}

/// Serves on a bound listener, with housekeeping every minute.
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
) -> anyhow::Result<Running> {
    let addr = listener.local_addr()?;
    let events = state.event_listener.lock().ok().and_then(|mut l| l.take());
    let (stop, mut stopped) = watch::channel(false);
    let app = router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.wait_for(|s| *s).await;
            })
            .await
    });
    let syncs = crate::api::delivery::background(state.clone());
    let links = crate::link::background(state.clone());
    let notices = state
        .notifier
        .clone()
        .map(|n| n.spawn(state.loops.notify.ticks()));
    let mut ticks = state.loops.housekeeping.ticks();
    let background = tokio::spawn(async move {
        let _links = AbortOnDrop(links);
        let _notices = notices.map(AbortOnDrop);
        let housekeeping = async {
            loop {
                let _pass = ticks.next().await;
                if let Err(e) = state.console.purge().await {
                    tracing::warn!(code = e.code_str(), error = %e.message, "purge failed");
                }
            }
        };
        tokio::join!(housekeeping, syncs);
    });
    Ok(Running {
        addr,
        stop,
        server,
        background,
        listener: events,
    })
}

/// This server's request span and metrics (`docs/metrics.md`).
const REQUESTS: countersign_common::telemetry::Requests = countersign_common::telemetry::Requests {
    side: "console",
    total: "countersign_console_http_requests_total",
    duration: "countersign_console_http_request_duration_seconds",
};
