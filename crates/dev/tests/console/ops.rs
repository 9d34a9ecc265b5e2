//! Operating the console (issue 30): `/readyz` follows the database and the broker; `/metrics`
//! lists every console metric `docs/metrics.md` documents (its table parsed here); and one
//! trace, exported over OTLP to a receiver in this test, crosses the console, its broker call,
//! the broker and the broker's storage.

use crate::common;

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use common::*;
use countersign_dev::{self as dev, DEV_PERSON};
use prost::Message;
use tokio::io::{AsyncBufReadExt, BufReader};

/// The documented metrics of `component`: (name, type) from the table in docs/metrics.md.
fn documented(component: &str) -> Vec<(String, String)> {
    let doc = include_str!("../../../../docs/metrics.md");
    let mut rows = Vec::new();
    let mut in_table = false;
    for line in doc.lines() {
        if line.starts_with("| name | component | type |") {
            in_table = true;
            continue;
        }
        if !in_table || line.starts_with("|---") {
            continue;
        }
        if !line.starts_with('|') {
            in_table = false;
            continue;
        }
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() >= 6 && cells[2] == component {
            rows.push((cells[1].trim_matches('`').to_owned(), cells[3].to_owned()));
        }
    }
    rows
}

/// Whether the Prometheus text lists `name` as a metric of `kind` with a sample.
fn listed(text: &str, name: &str, kind: &str) -> bool {
    let types: &[&str] = match kind {
        "histogram" => &["summary", "histogram"],
        other => &[other][..],
    };
    let typed = types
        .iter()
        .any(|t| text.lines().any(|l| l == format!("# TYPE {name} {t}")));
    let sampled = text.lines().any(|l| {
        l.strip_prefix(name).is_some_and(|rest| {
            rest.starts_with(' ')
                || rest.starts_with('{')
                || rest.starts_with("_sum")
                || rest.starts_with("_count")
        })
    });
    typed && sampled
}

fn value(text: &str, sample: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(sample)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

async fn status_within(url: &str, want: u16, limit: Duration) -> anyhow::Result<Resp> {
    let deadline = Instant::now() + limit;
    loop {
        let r = Resp::read(reqwest::get(url).await?).await?;
        if r.status == want || Instant::now() > deadline {
            return Ok(r);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn readyz_and_every_documented_console_metric_in_dev_mode() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dev::start(&dir.path().join("dev"), 0, 0).await?;
    let rows = documented("console");
    assert!(rows.len() >= 4, "the table was not found: {rows:?}");

    let ready = status_within(
        &format!("{}/readyz", d.console_url),
        200,
        Duration::from_secs(30),
    )
    .await?;
    assert_eq!(ready.status, 200, "{}", ready.text);
    assert_eq!(
        ready.json,
        serde_json::json!({ "status": "ready", "database": "ok", "broker": "ok" })
    );

    // A request of each kind: pages, the API through the broker, an event stream held open.
    let mut p = Person::at(&d.console_url)?;
    assert_eq!(p.sign_in_local(DEV_PERSON).await?.status, 303);
    assert_eq!(
        p.get("/api/v1/credential-requests?approver=me")
            .await?
            .status,
        200
    );
    let stream = p
        .http
        .get(format!("{}/api/v1/events", d.console_url))
        .send()
        .await?;
    assert_eq!(stream.status(), 200);
    let page = p.get("/metrics").await?;
    assert_eq!(page.status, 200);
    let text = page.text;
    let missing: Vec<_> = rows
        .iter()
        .filter(|(name, kind)| !listed(&text, name, kind))
        .collect();
    assert!(
        missing.is_empty(),
        "documented but not on /metrics: {missing:?}\n{text}"
    );
    assert!(
        value(&text, "countersign_console_streams").is_some_and(|v| v >= 1.0),
        "the open stream is not counted:\n{text}"
    );
    assert!(text.contains(
        "countersign_console_http_requests_total{method=\"GET\",route=\"/api/v1/credential-requests\",status=\"200\"}"
    ));
    drop(stream);

    // The broker goes away: the console is alive but not ready.
    let broker_url = d.broker_url.clone();
    let dev::Dev {
        broker, console, ..
    } = d;
    broker.shutdown(Duration::from_secs(2)).await;
    let r = Resp::read(reqwest::get(format!("{}/readyz", p.base)).await?).await?;
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(r.json["broker"], "unreachable", "{} ({broker_url})", r.text);
    assert_eq!(r.json["database"], "ok");
    assert_eq!(p.get("/healthz").await?.status, 200);
    console.shutdown(Duration::from_secs(2)).await;
    Ok(())
}

fn hx(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// One exported span, as the receiver decoded it.
#[derive(Debug, Clone)]
struct Span {
    service: String,
    trace: Vec<u8>,
    id: Vec<u8>,
    parent: Vec<u8>,
    name: String,
}

/// An OTLP/HTTP receiver on 127.0.0.1:0: `POST /v1/traces` with a protobuf
/// `ExportTraceServiceRequest`, each span kept.
async fn receiver() -> anyhow::Result<(String, Arc<Mutex<Vec<Span>>>)> {
    use opentelemetry_proto::tonic::collector::trace::v1::{
        ExportTraceServiceRequest, ExportTraceServiceResponse,
    };
    let spans: Arc<Mutex<Vec<Span>>> = Arc::default();
    let kept = spans.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let kept = kept.clone();
            async move {
                let protobuf = headers
                    .get("content-type")
                    .is_some_and(|v| v.as_bytes() == b"application/x-protobuf");
                let Ok(req) = ExportTraceServiceRequest::decode(body.as_ref()) else {
                    return (axum::http::StatusCode::BAD_REQUEST, Vec::new());
                };
                if !protobuf {
                    return (axum::http::StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new());
                }
                let mut out = kept.lock().unwrap_or_else(|p| p.into_inner());
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .iter()
                        .flat_map(|r| r.attributes.iter())
                        .find(|a| a.key == "service.name")
                        .and_then(|a| a.value.as_ref())
                        .and_then(|v| match &v.value {
                            Some(
                                opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s),
                            ) => Some(s.clone()),
                            _ => None,
                        })
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for s in ss.spans {
                            out.push(Span {
                                service: service.clone(),
                                trace: s.trace_id,
                                id: s.span_id,
                                parent: s.parent_span_id,
                                name: s.name,
                            });
                        }
                    }
                }
                (
                    axum::http::StatusCode::OK,
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok((url, spans))
}

/// The trace that crosses console → broker → storage, if the receiver has one: the console's
/// server span, its client span under it, the broker's server span whose parent is that client
/// span (joined by the `traceparent` header), and a storage span under the broker's.
fn crossing(spans: &[Span]) -> Option<Vec<String>> {
    let by_id: HashMap<&[u8], &Span> = spans.iter().map(|s| (s.id.as_slice(), s)).collect();
    let under = |s: &Span, ancestor: &Span| {
        let mut at = s;
        for _ in 0..32 {
            if at.parent == ancestor.id {
                return true;
            }
            match by_id.get(at.parent.as_slice()) {
                Some(p) => at = p,
                None => return false,
            }
        }
        false
    };
    for console in spans
        .iter()
        .filter(|s| s.name == "console GET /api/v1/credential-requests")
    {
        for client in spans
            .iter()
            .filter(|s| s.name.starts_with("console → broker") && s.parent == console.id)
        {
            for broker in spans
                .iter()
                .filter(|s| s.name.starts_with("broker GET /v1/") && s.parent == client.id)
            {
                if let Some(db) = spans
                    .iter()
                    .find(|s| s.name.starts_with("database ") && under(s, broker))
                {
                    let all = [console, client, broker, db];
                    if all.iter().all(|s| s.trace == console.trace) {
                        return Some(
                            all.iter()
                                .map(|s| format!("{}: {}", s.service, s.name))
                                .collect(),
                        );
                    }
                }
            }
        }
    }
    None
}

#[tokio::test]
async fn one_trace_crosses_console_broker_and_storage_over_otlp() -> anyhow::Result<()> {
    let (otlp, spans) = receiver().await?;
    let dir = tempfile::tempdir()?;
    let log = dir.path().join("dev.log");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_countersign-console"))
        .arg("dev")
        .arg("--dir")
        .arg(dir.path().join("dev"))
        .args(["--broker-port", "0", "--console-port", "0"])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", &otlp)
        .env("OTEL_BSP_SCHEDULE_DELAY", "100")
        .env("RUST_LOG", "info")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .env_remove("COUNTERSIGN_LOG_JSON")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(&log)?)
        .kill_on_drop(true)
        .spawn()
        .context("start countersign-console dev")?;
    let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
    let until = Instant::now() + Duration::from_secs(60);
    let console_url = loop {
        let line = tokio::time::timeout_at(until.into(), lines.next_line())
            .await
            .context("dev mode did not start within 60 s")??
            .with_context(|| {
                format!(
                    "dev mode exited: {}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            })?;
        if line.trim_start().starts_with("console:") {
            break line
                .split_whitespace()
                .nth(1)
                .context("console URL")?
                .to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });

    let mut p = Person::at(&console_url)?;
    assert_eq!(p.sign_in_local(DEV_PERSON).await?.status, 303);
    let r = p.get("/api/v1/credential-requests?approver=me").await?;
    assert_eq!(r.status, 200, "{}", r.text);

    let deadline = Instant::now() + Duration::from_secs(30);
    let found = loop {
        let now = spans.lock().unwrap_or_else(|p| p.into_inner()).clone();
        if let Some(chain) = crossing(&now) {
            break chain;
        }
        if Instant::now() > deadline {
            let names: Vec<_> = now
                .iter()
                .map(|s| {
                    format!(
                        "{} [{}] {} < {}",
                        s.name,
                        hx(&s.trace),
                        hx(&s.id),
                        hx(&s.parent)
                    )
                })
                .collect();
            anyhow::bail!(
                "no trace crossed console → broker → storage; spans: {names:?}\nlog: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        found.iter().all(|s| s.starts_with("countersign-console: ")),
        "{found:?}"
    );
    child.kill().await?;
    Ok(())
}
