//! Building and running the server: storage, store and broker from the configuration, the
//! router with logs and metrics, rustls when a certificate is configured, the connection cap and
//! read timeouts ([`crate::conn`]), background work
//! (sweep, policy reload on the core's clock, expiry notifications) and graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use countersign_broker_core::broker::Parts;
use countersign_broker_core::seal::Sealer;
use countersign_broker_core::{Broker, Clock, SystemEntropy};
use countersign_common::tick::Ticker;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::task::JoinHandle;

use crate::AppState;
use crate::config::{Config, StoreConfig};

/// Builds the broker and the shared state from a configuration.
pub async fn build(config: &Config, clock: Arc<dyn Clock>) -> anyhow::Result<Arc<AppState>> {
    let storage = countersign_broker_sql::SqlStorage::connect(&config.database_url)
        .await
        .map_err(|e| anyhow::anyhow!("database: {e}"))?;
    let store = secret_store(&config.store).await?;
    let sealer = Sealer::new(&config.seal_key()?).context("seal key")?;
    // SQLite is written by this process alone: its hot reads and single-use values can live in
    // memory. PostgreSQL is shared by replicas: every read goes to the database.
    let storage: Arc<dyn countersign_broker_core::Storage> = match storage.backend() {
        countersign_broker_sql::Backend::Sqlite => {
            Arc::new(countersign_broker_core::exclusive::Exclusive::new(storage))
        }
        countersign_broker_sql::Backend::Postgres => Arc::new(storage),
    };
    let tokens = token_verifier(config, clock.as_ref())?;
    let parts = Parts {
        storage,
        store,
        clock,
        entropy: Arc::new(SystemEntropy),
        tokens,
    };
    let issued = crate::issuers::build(&config.issued, parts.store.as_ref()).await?;
    let broker = Arc::new(Broker::new(parts, sealer, config.broker_config()));
    broker.set_issued_secrets(issued);
    // A destroy a crashed broker had claimed is taken again within one reconciler period.
    broker.set_destroy_lease(chrono::Duration::milliseconds(
        config.durations.issued_sweep.saturating_mul(500),
    ));
    if let Err(e) = broker.reload_policy().await {
        tracing::warn!(error = %e, "policy load at start failed; serving no secrets until a reload succeeds");
    }
    let token = config.console_token()?;
    let mut state = AppState::new(
        broker,
        token.as_deref().map(|s| s.as_str()),
        config.limits.quotas(),
    );
    state.body_limit = config.limits.body_bytes;
    state.read_timeout = Duration::from_secs(config.limits.read_timeout_seconds.max(1));
    state.max_connections = config.limits.max_connections;
    state.metrics = Some(metrics_handle());
    state.loops.reconcile = Ticker::every(
        "broker.reconcile",
        Duration::from_secs(config.durations.issued_sweep.max(1).unsigned_abs()),
    );
    // The audit log head this replica remembers (its state file, written before every end is
    // answered): a chain now shorter or different fails closed before the first request.
    let keeper = crate::audit::start(&state.broker, config).await?;
    state.audit_state_file = keeper.map(|k| k.path().to_path_buf());
    state.notifier = config
        .notifications
        .as_ref()
        .map(crate::notify::Notifier::new)
        .transpose()?
        .map(Arc::new);
    Ok(Arc::new(state))
}

/// The secret store a configuration names, opened.
async fn secret_store(
    store: &StoreConfig,
) -> anyhow::Result<Arc<dyn countersign_broker_core::SecretStore>> {
    let store: Arc<dyn countersign_broker_core::SecretStore> = match store {
        StoreConfig::Local { path } => Arc::new(
            countersign_store_local::LocalFileStore::open(path)
                .await
                .map_err(|e| anyhow::anyhow!("secret store: {e}"))?,
        ),
        StoreConfig::CloudA {
            secrets_prefix,
            key_arn,
            account_id,
            region,
            endpoint_url,
            timeout_seconds,
        } => {
            let mut c = countersign_store_aws::AwsStoreConfig::new(
                secrets_prefix,
                key_arn,
                account_id,
                region,
            );
            c.endpoint_url = endpoint_url.clone();
            c.timeout = Duration::from_secs(*timeout_seconds);
            Arc::new(
                countersign_store_aws::AwsSecretStore::new(c)
                    .await
                    .map_err(|e| anyhow::anyhow!("secret store: {e}"))?,
            )
        }
        StoreConfig::CloudB {
            secrets_prefix,
            key_name,
            endpoint,
            timeout_seconds,
        } => {
            let mut c = countersign_store_gcp::GcpStoreConfig::new(secrets_prefix, key_name);
            if let Some(e) = endpoint {
                c.endpoint = Some(e.clone());
            }
            c.timeout = Duration::from_secs(*timeout_seconds);
            Arc::new(
                countersign_store_gcp::GcpSecretStore::new(c)
                    .await
                    .map_err(|e| anyhow::anyhow!("secret store: {e}"))?,
            )
        }
    };
    Ok(store)
}

/// The ServiceAccount token verifier, when an issuer is configured; its keys are fetched in
/// the background.
fn token_verifier(
    config: &Config,
    clock: &dyn Clock,
) -> anyhow::Result<Option<Arc<dyn countersign_broker_core::TokenVerifier>>> {
    let tokens: Option<Arc<dyn countersign_broker_core::TokenVerifier>> = match &config.token_issuer
    {
        None => None,
        Some(t) => {
            let verifier = Arc::new(
                countersign_k8s_tokens::K8sTokenVerifier::new(
                    t.verifier_config(None).map_err(anyhow::Error::msg)?,
                )
                .context("token issuer")?,
            );
            // Fetch the keys now, beside the start: an issuer that is down does not stop
            // the broker (the first token login fetches again).
            let (v, now) = (verifier.clone(), clock.now());
            tokio::spawn(async move {
                if let Err(e) = v.refresh(now).await {
                    tracing::warn!(error = %e, "token issuer keys: first fetch failed");
                }
            });
            Some(verifier)
        }
    };
    Ok(tokens)
}

/// The storage a broker runs on: SQLite is written by this process alone, so its hot reads and
/// single-use values live in memory ([`Exclusive`]); PostgreSQL is shared by replicas, so every
/// read goes to the database.
///
/// [`Exclusive`]: countersign_broker_core::exclusive::Exclusive
pub fn storage_for(
    storage: countersign_broker_sql::SqlStorage,
) -> Arc<dyn countersign_broker_core::Storage> {
    match storage.backend() {
        countersign_broker_sql::Backend::Sqlite => {
            Arc::new(countersign_broker_core::exclusive::Exclusive::new(storage))
        }
        countersign_broker_sql::Backend::Postgres => Arc::new(storage),
    }
}

/// The process-wide Prometheus recorder (shared with the console in dev mode's one process),
/// with the broker's metrics described and its rare-event counters registered at zero, so that
/// they are listed (and `rate()` works) before their first event (`docs/metrics.md`).
pub fn metrics_handle() -> PrometheusHandle {
    let handle = countersign_common::telemetry::metrics_handle();
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    REGISTERED.call_once(register_metrics);
    handle
}

fn register_metrics() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_counter!("countersign_http_requests_total", "HTTP requests answered");
    describe_histogram!(
        "countersign_http_request_duration_seconds",
        metrics::Unit::Seconds,
        "time from the request's head to the answer's head"
    );
    describe_counter!(
        "countersign_http_connections_refused_total",
        "connections closed on accept at the connection cap"
    );
    describe_counter!(
        "countersign_requests_total",
        "secret requests created, by outcome"
    );
    describe_gauge!(
        "countersign_requests_pending",
        "credential requests waiting for a person"
    );
    describe_gauge!(
        "countersign_requests_pending_oldest_age_seconds",
        metrics::Unit::Seconds,
        "how long the oldest pending credential request has waited"
    );
    describe_counter!(
        "countersign_decisions_total",
        "people's decisions on credential requests"
    );
    describe_histogram!(
        "countersign_approval_wait_seconds",
        metrics::Unit::Seconds,
        "from a credential request's creation to a person's decision"
    );
    describe_gauge!(
        "countersign_grants_live",
        "grants not ended and not expired"
    );
    describe_counter!("countersign_releases_total", "releases of a grant's values");
    describe_counter!(
        "countersign_released_secrets_total",
        "secret values released"
    );
    describe_counter!("countersign_notifications_total", "expiry notifications");
    describe_gauge!(
        "countersign_audit_head_position",
        "the audit log head this replica has verified"
    );
    describe_gauge!(
        "countersign_audit_chain_broken",
        "1 while the audit chain is broken"
    );
    describe_counter!(
        "countersign_tamper_detected_total",
        "rows refused because their seal did not verify"
    );
    metrics::counter!("countersign_http_connections_refused_total").increment(0);
    for outcome in ["delivered", "failed", "given_up", "dropped"] {
        metrics::counter!("countersign_notifications_total", "outcome" => outcome).increment(0);
    }
    for what in ["credentials", "enrollments", "grants", "audit_log"] {
        metrics::counter!("countersign_tamper_detected_total", "what" => what).increment(0);
    }
}

/// The full router: the API, `/v1/openapi.json`, `/metrics`, `/readyz`, logs and metrics.
pub fn router(state: Arc<AppState>) -> Router {
    crate::openapi::api()
        .route("/v1/openapi.json", get(openapi))
        .route("/metrics", get(render_metrics))
        .route(
            "/v1/audit/witness",
            axum::routing::post(crate::audit::witness_route),
        )
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .layer(middleware::from_fn(|req, next| REQUESTS.track(req, next)))
        .layer(
            tower_http::trace::TraceLayer::new_for_http()
                .make_span_with(|req: &Request| REQUESTS.span(req)),
        )
        .with_state(state)
}

/// `GET /readyz`: 200 when this replica can serve: its database answers, the policy has been
/// loaded from the secret store, and the audit follower has verified the chain (its first full
/// walk done, no break since); otherwise 503 naming what is not ready. The database is ready
/// when a primary takes writes: on PostgreSQL, a read-only server (a standby, a demoted
/// primary) or none reachable is `"database": "unavailable"`. `/healthz` stays the liveness
/// check (the database answers).
async fn readyz(State(st): State<Arc<AppState>>) -> Response {
    use std::sync::atomic::Ordering;
    let database = match st.broker.ready().await {
        Ok(()) => "ok",
        Err(_) => "unavailable",
    };
    let store = match st.broker.policy_state().loaded_at {
        Some(_) => "ok",
        None => "not loaded",
    };
    let audit = if st.broker.audit_follower().state().broken.is_some() {
        "broken"
    } else if st.audit_walked.load(Ordering::Acquire) {
        "ok"
    } else {
        "verifying"
    };
    let body = countersign_common::wire::Ready::of(database, store, audit);
    let status = if body.is_ready() {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        axum::Json(body),
    )
        .into_response()
}

/// The gauges read from the database at each scrape (`docs/metrics.md`): credential requests
/// pending and the oldest one's age, by kind, and live grants. With PostgreSQL every replica
/// reads the same rows: aggregate them with `max`, not `sum`.
async fn sample_gauges(st: &AppState) {
    use countersign_broker_core::model::{RecordKind, RecordState};
    let now = st.broker.now();
    let read = async {
        let mut tx = st.broker.storage().read().await?;
        let records = tx.pending_records().await?;
        let grants = tx.live_grants().await?;
        Ok::<_, countersign_broker_core::StorageError>((records, grants))
    };
    let (records, grants) = match read.await {
        Ok(r) => r,
        Err(e) => {
            tracing::debug!(error = %e, "metrics: pending requests not read");
            return;
        }
    };
    for kind in [RecordKind::AgentSecret, RecordKind::LauncherCredential] {
        let pending: Vec<_> = records
            .iter()
            .filter(|r| r.body.kind == kind)
            // Stored-pending and not yet past its expiry (what `Record::settled` decides).
            .filter(|r| r.state == RecordState::Pending && now < r.body.expires_at)
            .collect();
        let oldest = pending
            .iter()
            .map(|r| (now - r.body.requested_at).num_milliseconds().max(0))
            .max()
            .unwrap_or(0);
        metrics::gauge!("countersign_requests_pending", "kind" => kind.as_str())
            .set(pending.len() as f64);
        metrics::gauge!("countersign_requests_pending_oldest_age_seconds", "kind" => kind.as_str())
            .set(oldest as f64 / 1000.0);
    }
    let live = grants
        .iter()
        .filter(|g| g.end.is_none() && g.expires_at.is_none_or(|at| at > now))
        .count();
    metrics::gauge!("countersign_grants_live").set(live as f64);
}

async fn not_found() -> Response {
    crate::error::ApiError::from(countersign_broker_core::Error::with_message(
        countersign_broker_core::ErrorCode::NOT_FOUND,
        "no such route",
    ))
    .into_response()
}

async fn openapi() -> Response {
    let mut r = axum::Json(crate::openapi::document()).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

async fn render_metrics(State(st): State<Arc<AppState>>) -> Response {
    if st.metrics.is_some() {
        sample_gauges(&st).await;
    }
    let text = st
        .metrics
        .as_ref()
        .map(PrometheusHandle::render)
        .unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// A running server.
#[derive(Debug)]
pub struct Running {
    pub addr: SocketAddr,
    pub handle: axum_server::Handle<SocketAddr>,
    server: JoinHandle<std::io::Result<()>>,
    background: Vec<JoinHandle<()>>,
    state: Arc<AppState>,
}

impl Running {
    /// What the handlers share, and the background loops' pace ([`AppState::loops`]).
    pub fn state(&self) -> &Arc<AppState> {
        &self.state
    }

    /// Stops accepting, lets requests in flight finish (up to `grace`), stops background work,
    /// and keeps the audit head this replica verified (its state file).
    pub async fn shutdown(self, grace: Duration) {
        self.handle.graceful_shutdown(Some(grace));
        let _ = self.server.await;
        for b in self.background {
            b.abort();
        }
        self.state.broker.at_shutdown().await;
        crate::audit::at_shutdown(&self.state.broker).await;
    }

    /// Waits for the server to end (after a shutdown from elsewhere), then stops background
    /// work and keeps the audit head this replica verified.
    pub async fn wait(self) -> std::io::Result<()> {
        let r = self
            .server
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        for b in self.background {
            b.abort();
        }
        self.state.broker.at_shutdown().await;
        crate::audit::at_shutdown(&self.state.broker).await;
        r
    }

    /// Stops at once, as a crash would: connections are dropped, background work stops, and
    /// nothing is kept (no proof horizon released, no audit head written). For tests of what
    /// a successor inherits from a predecessor that did not stop gracefully.
    pub async fn abort(self) {
        self.handle.shutdown();
        let _ = self.server.await;
        for b in self.background {
            b.abort();
        }
    }
}

/// Serves `state` on `listen` (port 0 picks one), with TLS when `tls` is given, and starts the
/// background work: the sweep every 2 s, a policy reload whenever `reload` has passed on the
/// core's clock, the expiry-notification deliverer ([`crate::notify`]), and rate-limiter
/// housekeeping.
pub async fn serve(
    state: Arc<AppState>,
    listen: SocketAddr,
    tls: Option<&crate::config::Tls>,
    reload: chrono::Duration,
) -> anyhow::Result<Running> {
    let listener = std::net::TcpListener::bind(listen).with_context(|| format!("bind {listen}"))?;
    serve_listener(state, listener, tls, reload).await
}

/// As [`serve`], on a listener the caller has already bound (so that it knows the port before
/// building the broker whose public URL names it, as the end-to-end tests do).
pub async fn serve_listener(
    state: Arc<AppState>,
    listener: std::net::TcpListener,
    tls: Option<&crate::config::Tls>,
    reload: chrono::Duration,
) -> anyhow::Result<Running> {
    listener.set_nonblocking(true)?;
    let addr = listener.local_addr()?;
    let handle = axum_server::Handle::new();
    let app = router(state.clone()).into_make_service_with_connect_info::<SocketAddr>();
    let capped = crate::conn::Capped::new(
        axum_server::accept::DefaultAcceptor::new(),
        state.max_connections,
    );
    let server = match tls {
        Some(t) => {
            // Both of rustls's providers are compiled in (reqwest brings ring): without a
            // process default, building the server configuration panics. aws-lc-rs, as
            // everywhere else here; an already installed default is kept.
            let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
            let rustls = axum_server::tls_rustls::RustlsConfig::from_pem_file(&t.cert, &t.key)
                .await
                .with_context(|| {
                    format!(
                        "TLS certificate {} / key {}",
                        t.cert.display(),
                        t.key.display()
                    )
                })?;
            // The connection cap sits under TLS: it bounds handshakes in progress too.
            let acceptor = axum_server::tls_rustls::RustlsAcceptor::new(rustls)
                .handshake_timeout(state.read_timeout)
                .acceptor(capped);
            let mut srv = axum_server::from_tcp(listener)?
                .acceptor(acceptor)
                .handle(handle.clone());
            crate::conn::configure_http(srv.http_builder(), state.read_timeout);
            tokio::spawn(async move { srv.serve(app).await })
        }
        None => {
            let mut srv = axum_server::from_tcp(listener)?
                .acceptor(capped)
                .handle(handle.clone());
            crate::conn::configure_http(srv.http_builder(), state.read_timeout);
            tokio::spawn(async move { srv.serve(app).await })
        }
    };
    let background = background(state.clone(), reload);
    Ok(Running {
        addr,
        handle,
        server,
        background,
        state,
    })
}

/// The pace of the background loops: each runs a pass when its period elapses or when a
/// test turns it ([`Ticker::turn`]); what a pass decides reads the core's clock.
#[derive(Debug, Clone)]
pub struct Loops {
    /// Ended records, requests and grants: every 2 s.
    pub sweep: Ticker,
    /// The policy epoch, and a reload once the reload interval has passed: every second.
    pub policy: Ticker,
    /// The audit follower (its first full walk, then its rounds): every second.
    pub audit: Ticker,
    /// The notification outbox's deliverer: every [`crate::notify::POLL`].
    pub outbox: Ticker,
    /// The rate limiter's housekeeping: every minute.
    pub housekeeping: Ticker,
    /// The destroyer of issued credentials: a look every 100 ms at whether this process
    /// queued a destroy, and at the outbox every second.
    pub destroy: Ticker,
    /// The issued credentials' reconciler (ends no write stored, orphans): at start, then
    /// every minute.
    pub reconcile: Ticker,
}

impl Default for Loops {
    fn default() -> Self {
        Self {
            sweep: Ticker::every("broker.sweep", Duration::from_secs(2)),
            policy: Ticker::every("broker.policy", Duration::from_secs(1)),
            audit: Ticker::every("broker.audit", Duration::from_secs(1)),
            outbox: Ticker::every("broker.outbox", crate::notify::POLL),
            housekeeping: Ticker::every("broker.housekeeping", Duration::from_secs(60)),
            destroy: Ticker::every("broker.destroy", DESTROY_LOOK),
            reconcile: Ticker::every("broker.reconcile", Duration::from_secs(60)),
        }
    }
}

fn background(state: Arc<AppState>, reload: chrono::Duration) -> Vec<JoinHandle<()>> {
    let loops = &state.loops;
    let sweep = {
        let st = state.clone();
        let mut ticks = loops.sweep.ticks();
        tokio::spawn(async move {
            loop {
                let _pass = ticks.next().await;
                if let Err(e) = st.broker.sweep(500).await {
                    tracing::warn!(code = %e.code, error = e.message(), "sweep failed");
                }
            }
        })
    };
    let reloader = {
        let st = state.clone();
        let mut ticks = loops.policy.ticks();
        tokio::spawn(async move {
            loop {
                let _pass = ticks.next().await;
                let due = match st.broker.policy_state().loaded_at {
                    Some(at) => st.broker.now() - at >= reload,
                    None => true,
                };
                if let Err(e) = st.broker.follow_policy_epoch().await {
                    tracing::debug!(code = %e.code, "policy epoch check failed");
                }
                if due {
                    match st.broker.reload_policy().await {
                        Ok(p) => {
                            tracing::info!(rules_version = p.rules_version(), "policy reloaded")
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "policy reload failed; keeping the last good policy")
                        }
                    }
                }
            }
        })
    };
    let auditor = {
        // `/readyz` waits for a first full walk of the chain; then the follower goes on as
        // ever (its own first round walks it again).
        let st = state.clone();
        let mut ticks = loops.audit.ticks();
        tokio::spawn(async move {
            loop {
                let _pass = ticks.next().await;
                // A break is answered by `/readyz` from the follower's state.
                match st.broker.follow_audit(true).await {
                    Ok(_) => break,
                    Err(e) => tracing::debug!(code = %e.code, "audit log: first walk failed"),
                }
            }
            st.audit_walked
                .store(true, std::sync::atomic::Ordering::Release);
            crate::audit::follow(st.broker.clone(), ticks).await
        })
    };
    let deliverer = tokio::spawn(crate::notify::run(
        state.broker.clone(),
        state.notifier.clone(),
        loops.outbox.ticks(),
    ));
    let (destroyer, reconciler) = issued_loops(&state);
    let mut ticks = loops.housekeeping.ticks();
    let housekeeping = tokio::spawn(async move {
        loop {
            let _pass = ticks.next().await;
            state.limits.shrink();
        }
    });
    vec![
        sweep,
        reloader,
        auditor,
        deliverer,
        destroyer,
        reconciler,
        housekeeping,
    ]
}

/// How often the destroyer looks whether this process queued a destroy.
const DESTROY_LOOK: Duration = Duration::from_millis(100);
/// How many looks between two reads of the outbox for destroys (any replica's): one a second.
const DESTROY_POLL_EVERY: u32 = 10;

/// The destroyer and the reconciler of issued credentials ([`countersign_broker_core::broker::issued`]).
fn issued_loops(state: &Arc<AppState>) -> (JoinHandle<()>, JoinHandle<()>) {
    let destroyer = {
        let st = state.clone();
        let mut ticks = st.loops.destroy.ticks();
        tokio::spawn(async move {
            if !st.broker.issued_secrets().is_empty() {
                match st.broker.take_over_destroys().await {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(
                        destroys = n,
                        "took over the destroys claimed before this start"
                    ),
                    Err(e) => {
                        tracing::warn!(code = %e.code, error = e.message(), "taking over claimed destroys failed: their leases lapse on their own")
                    }
                }
            }
            let mut looks = 0u32;
            loop {
                let _pass = ticks.next().await;
                looks = looks.wrapping_add(1);
                let queued = st.broker.take_destroy_queued();
                let poll = looks.is_multiple_of(DESTROY_POLL_EVERY)
                    && !st.broker.issued_secrets().is_empty();
                if !queued && !poll {
                    continue;
                }
                match st.broker.destroy_due(16).await {
                    Ok(r) if r.destroyed + r.failed > 0 => {
                        tracing::debug!(
                            destroyed = r.destroyed,
                            failed = r.failed,
                            "destroyer pass"
                        )
                    }
                    Ok(_) => {}
                    Err(e) => {
                        tracing::warn!(code = %e.code, error = e.message(), "destroyer pass failed")
                    }
                }
            }
        })
    };
    let reconciler = {
        let st = state.clone();
        let mut ticks = st.loops.reconcile.ticks();
        tokio::spawn(async move {
            loop {
                let _pass = ticks.next().await;
                if st.broker.issued_secrets().is_empty() {
                    continue;
                }
                match st.broker.reconcile_issued().await {
                    Ok(r) => {
                        if r.queued + r.orphans + r.failures > 0 {
                            tracing::info!(
                                queued = r.queued,
                                orphans = r.orphans,
                                failures = r.failures,
                                "issued credentials reconciled"
                            )
                        }
                    }
                    Err(e) => {
                        tracing::warn!(code = %e.code, error = e.message(), "reconciler pass failed")
                    }
                }
            }
        })
    };
    (destroyer, reconciler)
}

/// This server's request span and metrics (`docs/metrics.md`).
const REQUESTS: countersign_common::telemetry::Requests = countersign_common::telemetry::Requests {
    side: "broker",
    total: "countersign_http_requests_total",
    duration: "countersign_http_request_duration_seconds",
};
