//! What every binary does at start and stop: logs to stderr (text or JSON lines, filtered by
//! `RUST_LOG`, with a slot for [`crate::telemetry`]'s OTLP export), and a future that completes on Ctrl-C or SIGTERM.
//!
//! The servers' binaries (`countersign-broker`, `countersign-console`) start and stop the same
//! way, through this module alone: [`init_logs`] first; once the configuration is read, their
//! work inside [`traced`] (the OTLP export for the configuration's endpoint, flushed at the
//! end whether the work ended well or not); and their graceful shutdown started by
//! [`stop_on_signal`] (or awaited with [`shutdown_requested`]), which logs `shutting down:
//! finishing requests in flight` on Ctrl-C or SIGTERM.

/// Installs the global `tracing` subscriber. `default_filter` applies when `RUST_LOG` is unset
/// (e.g. `"info,sqlx=warn"`). It leaves a slot for exporting spans over OTLP, which
/// [`crate::telemetry::enable`] fills once the configuration is read.
pub fn init_logs(json: bool, default_filter: &str) {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| default_filter.into());
    let (otel, slot) = tracing_subscriber::reload::Layer::new(None::<crate::telemetry::OtelLayer>);
    let _ = crate::telemetry::SLOT.set(slot);
    let text = (!json).then(|| tracing_subscriber::fmt::layer().with_writer(std::io::stderr));
    let lines = json.then(|| {
        tracing_subscriber::fmt::layer()
            .json()
            .with_writer(std::io::stderr)
    });
    tracing_subscriber::registry()
        .with(otel)
        .with(filter)
        .with(text)
        .with(lines)
        .init();
}

/// Completes on Ctrl-C or (on unix) SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

/// Completes on Ctrl-C or SIGTERM, once it has logged that the server is shutting down.
pub async fn shutdown_requested() {
    shutdown_signal().await;
    tracing::info!("shutting down: finishing requests in flight");
}

/// Calls `stop` (a server's graceful shutdown) from a task of its own on Ctrl-C or SIGTERM,
/// logged as [`shutdown_requested`] logs it.
pub fn stop_on_signal(stop: impl FnOnce() + Send + 'static) {
    tokio::spawn(async move {
        shutdown_requested().await;
        stop();
    });
}

/// The OTLP export could not start (its text says why): a server exits with it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TelemetryFailed(pub String);

/// Runs a server's `work` with its spans exported as `service` ([`crate::telemetry::enable`]:
/// to `otlp_endpoint`, else where the standard variables say, else nowhere), then flushes the
/// export, whether `work` ended well or not.
pub async fn traced<T, E: From<TelemetryFailed>>(
    service: &str,
    otlp_endpoint: Option<&str>,
    work: impl Future<Output = Result<T, E>>,
) -> Result<T, E> {
    let telemetry = crate::telemetry::enable(service, otlp_endpoint).map_err(TelemetryFailed)?;
    let done = work.await;
    telemetry.shutdown();
    done
}
