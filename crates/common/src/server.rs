//! What every binary does at start and stop: logs to stderr (text or JSON lines, filtered by
//! `RUST_LOG`, with a slot for [`crate::telemetry`]'s OTLP export), and a future that completes on Ctrl-C or SIGTERM.

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
