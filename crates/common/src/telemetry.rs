//! Traces over OTLP (issue 30): when an endpoint is configured, every `tracing` span of the
//! process is also exported as an OpenTelemetry span (HTTP/protobuf to `<endpoint>/v1/traces`,
//! batched on the exporter's own thread), and W3C trace context (`traceparent`, `tracestate`)
//! joins a process's spans to its caller's: the console injects it into its broker calls
//! ([`inject_current`]), the broker's request span takes it as its parent
//! ([`in_remote_context`]).
//!
//! [`metrics_handle`] is the process's one Prometheus recorder; [`Requests`] the span and the
//! metrics each server wraps every request in.
//!
//! The servers' `init_logs` (in the `server` module, which uses this one) installs the
//! subscriber with an empty slot for the OpenTelemetry layer; [`enable`] fills it once the
//! configuration is read. Without an endpoint nothing is exported and no header is sent (an
//! empty context injects nothing).

use std::sync::OnceLock;

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::reload;

/// The OpenTelemetry layer as it sits on the registry.
pub(crate) type OtelLayer = tracing_opentelemetry::OpenTelemetryLayer<
    tracing_subscriber::Registry,
    opentelemetry_sdk::trace::SdkTracer,
>;

/// The slot the servers' `init_logs` leaves for the layer.
pub(crate) type Slot = reload::Handle<Option<OtelLayer>, tracing_subscriber::Registry>;

pub(crate) static SLOT: OnceLock<Slot> = OnceLock::new();

/// The standard variables that name an OTLP endpoint without a configuration key.
pub const ENDPOINT_VARS: [&str; 2] = [
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
];

/// Export in progress; [`Telemetry::shutdown`] (or dropping it) flushes what is batched.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn enabled(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports what is batched and stops the exporter.
    pub fn shutdown(mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.shutdown();
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(p) = self.provider.take() {
            let _ = p.shutdown();
        }
    }
}

/// Starts exporting spans as `service` when an endpoint is configured: `endpoint` (a base URL,
/// as `OTEL_EXPORTER_OTLP_ENDPOINT` is: `/v1/traces` is appended) or else the standard
/// variables ([`ENDPOINT_VARS`]). Nothing configured: a disabled [`Telemetry`]. The
/// exporter's other standard variables apply (`OTEL_EXPORTER_OTLP_HEADERS`,
/// `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_BSP_SCHEDULE_DELAY`, ...).
pub fn enable(service: &str, endpoint: Option<&str>) -> Result<Telemetry, String> {
    let from_env = ENDPOINT_VARS
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|s| !s.trim().is_empty()));
    let endpoint = endpoint.map(str::trim).filter(|e| !e.is_empty());
    if endpoint.is_none() && !from_env {
        return Ok(Telemetry::default());
    }
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary);
    if let Some(e) = endpoint {
        exporter = exporter.with_endpoint(format!("{}/v1/traces", e.trim_end_matches('/')));
    }
    // The batch processor exports from its own thread, outside any async runtime: the
    // exporter's default client is reqwest's blocking one, which works there.
    let exporter = exporter
        .build()
        .map_err(|e| format!("OTLP exporter: {e}"))?;
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(
            opentelemetry_sdk::Resource::builder()
                .with_service_name(service.to_owned())
                .build(),
        )
        .build();
    let layer = tracing_opentelemetry::layer().with_tracer(provider.tracer("countersign"));
    match SLOT.get() {
        Some(slot) => slot
            .reload(Some(layer))
            .map_err(|e| format!("tracing layer: {e}"))?,
        None => return Err("init_logs has not run: no subscriber to export from".into()),
    }
    Ok(Telemetry {
        provider: Some(provider),
    })
}

struct Headers<'a, F: Fn(&str) -> Option<&'a str>>(F);

impl<'a, F: Fn(&str) -> Option<&'a str>> Extractor for Headers<'a, F> {
    fn get(&self, key: &str) -> Option<&str> {
        (self.0)(key)
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// Runs `make` (which creates a request's server span) inside the trace context the request
/// carries (`traceparent`, `tracestate`, read by `header`), so that the span continues the
/// caller's trace. A request without one, or a process that exports nothing, runs `make` as it
/// is.
///
/// Why not `OpenTelemetrySpanExt::set_parent`: it reaches the OpenTelemetry layer by
/// downcasting, which the `reload` layer its slot sits in refuses (tracing-subscriber's
/// `reload::Layer::downcast_raw` answers `None`), so it silently did nothing. The layer instead
/// takes a new span's parent from the OpenTelemetry context attached at its creation (its
/// "context activation", on by default).
pub fn in_remote_context<'a, T>(
    header: impl Fn(&str) -> Option<&'a str>,
    make: impl FnOnce() -> T,
) -> T {
    if header("traceparent").is_none() {
        return make();
    }
    let cx = TraceContextPropagator::new().extract(&Headers(header));
    let _attached = cx.attach();
    make()
}

#[derive(Default)]
struct Collected(Vec<(&'static str, String)>);

impl Injector for Collected {
    fn set(&mut self, key: &str, value: String) {
        let key = match key {
            "traceparent" => "traceparent",
            "tracestate" => "tracestate",
            _ => return,
        };
        self.0.push((key, value));
    }
}

/// The headers that carry the current span's trace context to a callee (none when nothing
/// is exported).
pub fn inject_current() -> Vec<(&'static str, String)> {
    // The OpenTelemetry context the layer attached when the current span was entered (not
    // `Span::current().context()`, which needs a downcast the `reload` layer refuses).
    let cx = opentelemetry::Context::current();
    let mut out = Collected::default();
    TraceContextPropagator::new().inject_context(&cx, &mut out);
    out.0
}

/// The process-wide Prometheus recorder (installed on first use). Another recorder already
/// installed by an embedding program keeps its place; then this one renders nothing.
pub fn metrics_handle() -> metrics_exporter_prometheus::PrometheusHandle {
    static HANDLE: OnceLock<metrics_exporter_prometheus::PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
            let handle = recorder.handle();
            let _ = metrics::set_global_recorder(recorder);
            handle
        })
        .clone()
}

/// How a server names its requests in traces and metrics (`docs/metrics.md`): the span each
/// request runs in ([`Requests::span`]) and the counter and latency histogram it lands in
/// ([`Requests::track`]), labelled by the route's template, never by the URI: paths and
/// queries carry ids (a machine login's `pending_id`, which only its machine may know) and
/// search words, and their values are unbounded.
#[derive(Debug, Clone, Copy)]
pub struct Requests {
    /// The side, the first word of a request span's trace name (`broker GET /v1/...`).
    pub side: &'static str,
    /// The counter by method, route and status.
    pub total: &'static str,
    /// The latency histogram by method and route, in seconds.
    pub duration: &'static str,
}

/// The route pattern a request matched, or `unmatched`.
fn route_of(req: &axum::extract::Request) -> &str {
    req.extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or("unmatched", |m| m.as_str())
}

impl Requests {
    /// The span a request runs in, continuing the caller's trace when its headers carry one
    /// ([`in_remote_context`]).
    pub fn span(&self, req: &axum::extract::Request) -> tracing::Span {
        let route = route_of(req);
        in_remote_context(
            |name| req.headers().get(name).and_then(|v| v.to_str().ok()),
            || {
                tracing::info_span!(
                    "request",
                    method = %req.method(),
                    route,
                    otel.name = format!("{} {} {route}", self.side, req.method()),
                    otel.kind = "server",
                )
            },
        )
    }

    /// Runs the request and counts it and its latency by route and status (a router's
    /// `middleware::from_fn` body).
    pub async fn track(
        self,
        req: axum::extract::Request,
        next: axum::middleware::Next,
    ) -> axum::response::Response {
        let route = route_of(&req).to_owned();
        let method = req.method().as_str().to_owned();
        let start = std::time::Instant::now();
        let resp = next.run(req).await;
        let status = resp.status().as_u16().to_string();
        metrics::counter!(self.total, "method" => method.clone(), "route" => route.clone(), "status" => status).increment(1);
        metrics::histogram!(self.duration, "method" => method, "route" => route)
            .record(start.elapsed().as_secs_f64());
        resp
    }
}
