//! The notification outbox survives SIGKILL: the real `countersign-broker` binary, run from a
//! configuration file, expires a pending request and queues its notice while the webhook
//! receiver is not listening yet; it is killed with SIGKILL after a failed attempt; with the
//! receiver up, a restarted broker delivers the notice, and the receiver verifies its Standard
//! Webhooks signature.

use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use anyhow::{Context, bail};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use common::client::{Machine, s};
use common::process::{Deployment, Stop};
use countersign_broker_core::Storage as _;
use countersign_broker_core::storage::OutboxItem;
use serde_json::{Value, json};

type R = anyhow::Result<()>;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const ADA: &str = "ada@example.com";

#[derive(Debug, Clone)]
struct Hit {
    id: String,
    timestamp: String,
    signature: String,
    body: String,
}

fn verifies(hit: &Hit) -> bool {
    let key = SECRET
        .strip_prefix("whsec_")
        .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
        .unwrap_or_default();
    let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &key);
    let signed = format!("{}.{}.{}", hit.id, hit.timestamp, hit.body);
    hit.signature.split(' ').any(|sig| {
        sig.strip_prefix("v1,")
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .is_some_and(|tag| aws_lc_rs::hmac::verify(&key, signed.as_bytes(), &tag).is_ok())
    })
}

async fn hook(
    State(hits): State<Arc<Mutex<Vec<Hit>>>>,
    headers: HeaderMap,
    body: String,
) -> StatusCode {
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let hit = Hit {
        id: h("webhook-id"),
        timestamp: h("webhook-timestamp"),
        signature: h("webhook-signature"),
        body,
    };
    // A receiver accepts only what verifies.
    let ok = verifies(&hit);
    // The records waiting for their approver (`record.pending`, issue 29) ride the same
    // outbox; this test follows the expiry notice.
    let pending =
        serde_json::from_str::<Value>(&hit.body).is_ok_and(|v| v["type"] == "record.pending");
    if let (Ok(mut v), false) = (hits.lock(), pending) {
        v.push(hit);
    }
    if ok {
        StatusCode::NO_CONTENT
    } else {
        StatusCode::UNAUTHORIZED
    }
}

/// The outbox as stored, read through a second connection to the broker's database.
async fn outbox(db: &countersign_broker_sql::SqlStorage) -> anyhow::Result<Vec<OutboxItem>> {
    let mut tx = db.read().await.map_err(|e| anyhow::anyhow!("{e}"))?;
    let far = chrono::Utc::now() + chrono::Duration::days(3650);
    // The expiry notices (`msg_…`), not the records waiting for their approver (`rec_…`).
    Ok(tx
        .take_outbox("notification", far, 100)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .into_iter()
        .filter(|i| i.id.starts_with("msg_"))
        .collect())
}

#[tokio::test]
async fn a_notice_queued_before_sigkill_is_delivered_after_restart() -> R {
    let hook_port = common::process::free_port()?;
    let d = Deployment::builder()
        .secret("ADA_SECRET", ADA, "owner")
        .log_filter("info,countersign_broker_http::notify=debug")
        .config(move |dir| {
            format!(
                r#"[durations]
request_pending = 2

[notifications]
url = "http://127.0.0.1:{hook_port}/hooks/countersign"
secret_file = {secret:?}
timeout_seconds = 2
retry_initial_seconds = 1
retry_max_seconds = 2
"#,
                secret = dir.join("webhook-secret"),
            )
        })
        .create()?;
    std::fs::write(d.path("webhook-secret"), SECRET)?;
    let broker = d.start().await?;
    let c = d.client();

    // Ada's machine logs in; a session enrolls and asks for Ada's secret: pending, with a
    // notification session.
    let machine = Machine::login(&c, ADA, "laptop").await?;
    let session = machine.session(&c, "rt-restart").await?;
    let made = session
        .request(&c, "ADA_SECRET", Some("sess-restart"), None)
        .await?;
    assert_eq!(s(&made, "state"), "pending");
    let request_id = s(&made, "request_id");

    // The request expires (2 s), the sweep queues the notice, and delivery fails: nothing
    // listens on the receiver's port yet. Wait until a failed attempt is on record.
    let db = countersign_broker_sql::SqlStorage::connect(&d.database_url)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let mut queued = None;
    for _ in 0..300 {
        if let Some(item) = outbox(&db).await?.into_iter().find(|i| i.attempts >= 1) {
            queued = Some(item);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let queued = queued.context("the expiry notice was queued and attempted")?;
    broker.stop(Stop::Kill)?;

    // Killed: the notice is still in the outbox.
    let after_kill = outbox(&db).await?;
    assert_eq!(
        after_kill.iter().map(|i| &i.id).collect::<Vec<_>>(),
        vec![&queued.id]
    );

    // The receiver comes up; the broker restarts and delivers.
    let hits = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", hook_port)).await?;
    let app = axum::Router::new()
        .route("/hooks/countersign", axum::routing::post(hook))
        .with_state(hits.clone());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let broker = d.start().await?;
    let mut delivered = None;
    for _ in 0..600 {
        if let Some(hit) = hits.lock().ok().and_then(|h| h.first().cloned()) {
            delivered = Some(hit);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let Some(hit) = delivered else {
        bail!(
            "no webhook after the restart; broker log:\n{}",
            d.log_text()
        );
    };
    assert_eq!(hit.id, queued.id, "the same message, by its id");
    assert!(verifies(&hit), "the receiver verifies the signature");
    let payload: Value = serde_json::from_str(&hit.body)?;
    assert_eq!(payload["type"], json!("request.expired"));
    assert_eq!(payload["session_id"], json!("sess-restart"));
    assert_eq!(payload["request_id"], json!(request_id));
    assert_eq!(payload["identifiers"], json!(["ADA_SECRET"]));
    // Accepted: the outbox empties, and the notice arrives once.
    for _ in 0..200 {
        if outbox(&db).await?.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(outbox(&db).await?.is_empty());
    common::whole_pass(&c.base, "broker.outbox").await?;
    assert_eq!(hits.lock().map(|h| h.len()).unwrap_or_default(), 1);
    broker.stop(Stop::Kill)?;
    Ok(())
}
