//! Expiry notifications through the real broker (started from its configuration file) to a
//! real webhook receiver on loopback: Standard Webhooks headers and signature, the payload of
//! protocol.md §9, retries with backoff on the broker's clock after a refusal or a timeout,
//! deletion after a 2xx, dropping when no URL is configured, and two replicas on one PostgreSQL
//! database never delivering one message twice.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use countersign_broker_core::clock::rfc3339;
use countersign_broker_core::storage::OutboxItem;
use countersign_e2e::http::{ADA, BOB, Machine, PgDatabase, Session, TempDir};
use countersign_e2e::k8s::{K8sBroker, K8sConfig};
use serde_json::{Value, json};

type R = anyhow::Result<()>;

const OWNED: &str = "ADA_SECRET";
/// A Standard Webhooks secret: `whsec_` + base64 of 24 random-looking bytes.
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

// ----- the receiver -----

#[derive(Debug, Clone, Copy)]
enum Answer {
    Status(u16),
    /// Holds the request this long, then answers 200 (the broker has given up by then).
    Hang(Duration),
}

#[derive(Debug, Clone)]
struct Hit {
    id: String,
    timestamp: String,
    signature: String,
    content_type: String,
    body: String,
}

impl Hit {
    /// Verifies the signature as a Standard Webhooks receiver does.
    fn verifies(&self, secret: &str) -> bool {
        let key = secret
            .strip_prefix("whsec_")
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .unwrap_or_default();
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &key);
        let signed = format!("{}.{}.{}", self.id, self.timestamp, self.body);
        self.signature.split(' ').any(|s| {
            s.strip_prefix("v1,")
                .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
                .is_some_and(|tag| aws_lc_rs::hmac::verify(&key, signed.as_bytes(), &tag).is_ok())
        })
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
}

#[derive(Debug, Default)]
struct Receiver {
    script: Mutex<VecDeque<Answer>>,
    hits: Mutex<Vec<Hit>>,
    /// `record.pending` messages, apart from the expiry notices.
    pending: Mutex<Vec<Hit>>,
}

async fn hook(State(rx): State<Arc<Receiver>>, headers: HeaderMap, body: String) -> StatusCode {
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
        content_type: h("content-type"),
        body,
    };
    // A record waiting for its approver (`record.pending`, issue 29) rides the same outbox;
    // these tests are about the expiry notice, so such messages are kept apart and answered.
    if hit.json()["type"] == "record.pending" {
        if let Ok(mut p) = rx.pending.lock() {
            p.push(hit);
        }
        return StatusCode::OK;
    }
    if let Ok(mut hits) = rx.hits.lock() {
        hits.push(hit);
    }
    let answer = rx.script.lock().ok().and_then(|mut s| s.pop_front());
    match answer.unwrap_or(Answer::Status(200)) {
        Answer::Status(s) => StatusCode::from_u16(s).unwrap_or(StatusCode::OK),
        Answer::Hang(d) => {
            tokio::time::sleep(d).await;
            StatusCode::OK
        }
    }
}

impl Receiver {
    /// Serves on loopback; answers its URL.
    async fn start(script: &[Answer]) -> anyhow::Result<(Arc<Self>, String)> {
        let rx = Arc::new(Self {
            script: Mutex::new(script.iter().copied().collect()),
            hits: Mutex::default(),
            pending: Mutex::default(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hooks/countersign", listener.local_addr()?);
        let app = axum::Router::new()
            .route("/hooks/countersign", axum::routing::post(hook))
            .with_state(rx.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok((rx, url))
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().map(|h| h.clone()).unwrap_or_default()
    }

    /// Waits (real time, up to 15 s) until `n` deliveries arrived.
    async fn wait_for(&self, n: usize) -> Vec<Hit> {
        for _ in 0..300 {
            let hits = self.hits();
            if hits.len() >= n {
                return hits;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("expected {n} deliveries, got {}", self.hits().len());
    }
}

// ----- the broker -----

fn notifications(url: &str, secret_file: &std::path::Path) -> String {
    format!(
        "url = {url:?}\nsecret_file = {:?}\ntimeout_seconds = 1\nretry_initial_seconds = 20\nretry_max_seconds = 600",
        secret_file.display().to_string()
    )
}

async fn broker(notify: Option<String>, database_url: Option<String>) -> anyhow::Result<K8sBroker> {
    K8sBroker::start(K8sConfig {
        notifications: notify,
        durations: Some("request_pending = 60".into()),
        secrets: vec![(OWNED.into(), ADA.into(), "owner".into())],
        // Replicas sharing a database share the seal key: each verifies the other's seals and
        // audit log entries.
        seal_key: database_url.as_ref().map(|_| [9u8; 32]),
        database_url,
        ..Default::default()
    })
    .await
}

/// The outbox as stored (every message, due or not).
async fn outbox(b: &K8sBroker) -> anyhow::Result<Vec<OutboxItem>> {
    let mut tx = b
        .state
        .broker
        .storage()
        .read()
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let far = b.state.broker.now() + chrono::Duration::days(3650);
    // The expiry notices (`msg_…`); the records waiting for their approver (`rec_…`) are
    // delivered beside them and checked apart.
    Ok(tx
        .take_outbox("notification", far, 1000)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?
        .into_iter()
        .filter(|i| i.id.starts_with("msg_"))
        .collect())
}

/// Waits (real time) until the stored message has been rescheduled after its `n`-th attempt:
/// claimed, it is leased for 7 s (twice the 1 s timeout, and 5 s); rescheduled, it waits at
/// least 10 s (half the 20 s first retry).
async fn wait_rescheduled(b: &K8sBroker, n: u32) -> anyhow::Result<OutboxItem> {
    for _ in 0..300 {
        if let Some(item) = outbox(b).await?.into_iter().next()
            && item.attempts == n
            && item.next_attempt_at - b.state.broker.now() > chrono::Duration::seconds(7)
        {
            return Ok(item);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("the message was not rescheduled after attempt {n}")
}

/// A pending request of a session with notification session `sid`: answers the session, the
/// request's id and its record's.
async fn pending_request(b: &K8sBroker, sid: &str) -> anyhow::Result<(Session, String, String)> {
    let m = b.conn.machine_login(BOB).await?;
    pending_request_of(&m, sid).await
}

/// As [`pending_request`], in a new session of machine `m`.
async fn pending_request_of(m: &Machine, sid: &str) -> anyhow::Result<(Session, String, String)> {
    let s = m.enroll_session(&format!("rt-{sid}")).await?;
    let r = s.request_with(&[OWNED], None, Some(sid)).await?.expect(200);
    assert_eq!(r.s("state"), "pending");
    Ok((s, r.s("request_id"), r.s("record_id")))
}

#[tokio::test]
async fn an_expired_request_is_notified_signed_and_retried_until_accepted() -> R {
    let dir = TempDir::new()?;
    let secret = dir.path().join("webhook-secret");
    std::fs::write(&secret, format!("{SECRET}\n"))?;
    // A timeout, then a 500, then accepted.
    let (rx, url) =
        Receiver::start(&[Answer::Hang(Duration::from_secs(3)), Answer::Status(500)]).await?;
    let b = broker(Some(notifications(&url, &secret)), None).await?;
    let (session, request_id, record_id) = pending_request(&b, "sess-42").await?;
    let expires = b.now() + 60;
    assert!(outbox(&b).await?.is_empty());

    // The request expires; the sweep queues the notice and the deliverer sends it at once.
    b.advance(61);
    let first = rx.wait_for(1).await;
    let r = session.get_request(&request_id).await?.expect(200);
    assert_eq!(r.s("state"), "expired");
    // The receiver held it past the 1 s timeout: a failed attempt, retried after 10 to 20 s
    // on the broker's clock, not before.
    let item = wait_rescheduled(&b, 1).await?;
    let delay = item.next_attempt_at - b.state.broker.now();
    assert!(
        (10_000..=20_000).contains(&delay.num_milliseconds()),
        "first retry in {delay}"
    );
    // A whole pass of the deliverer on this clock: nothing is due.
    b.state.loops.outbox.turn().await;
    assert_eq!(rx.hits().len(), 1, "no retry before the clock reaches it");
    b.advance(20);
    rx.wait_for(2).await;
    // The 500: doubled backoff, 20 to 40 s.
    let item = wait_rescheduled(&b, 2).await?;
    let delay = item.next_attempt_at - b.state.broker.now();
    assert!(
        (20_000..=40_000).contains(&delay.num_milliseconds()),
        "second retry in {delay}"
    );
    b.advance(40);
    let hits = rx.wait_for(3).await;
    // Accepted: the message is gone and nothing more arrives.
    for _ in 0..100 {
        if outbox(&b).await?.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(outbox(&b).await?.is_empty());
    b.advance(3600);
    b.state.loops.sweep.turn().await;
    b.state.loops.outbox.turn().await;
    assert_eq!(rx.hits().len(), 3);
    // Before it expired, the record waited for its approver: `record.pending`, once, signed,
    // with names and the approver, never a value.
    let pending: Vec<Hit> = rx
        .pending
        .lock()
        .map(|p| p.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|h| h.json()["record_id"] == json!(record_id))
        .collect();
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert!(pending[0].verifies(SECRET));
    let p = pending[0].json();
    assert_eq!(p["type"], "record.pending");
    assert_eq!(p["record_id"], json!(record_id));
    assert_eq!(p["identifiers"], json!([OWNED]));
    assert_eq!(p["kind"], "agent_secret");
    assert_eq!(p["passkey"], false);

    // Every attempt: the same id, this attempt's time, a signature the receiver verifies, and
    // the payload of protocol.md §9.
    let expected = json!({
        "type": "request.expired",
        "session_id": "sess-42",
        "request_id": request_id,
        "record_id": record_id,
        "identifiers": [OWNED],
        "expired_at": rfc3339(&chrono::DateTime::from_timestamp(expires, 0).unwrap_or_default()),
    });
    let t = expires + 1;
    for (hit, ts) in hits.iter().zip([t, t + 20, t + 60]) {
        assert_eq!(hit.id, first[0].id);
        assert!(hit.id.starts_with("msg_"), "{}", hit.id);
        assert_eq!(hit.timestamp, ts.to_string());
        assert!(hit.verifies(SECRET), "signature {}", hit.signature);
        assert!(!hit.verifies("whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"));
        assert_eq!(hit.content_type, "application/json");
        assert_eq!(hit.json(), expected);
    }
    Ok(())
}

#[tokio::test]
async fn without_a_notification_url_notices_are_dropped() -> R {
    let b = broker(None, None).await?;
    let (session, request_id, _) = pending_request(&b, "sess-1").await?;
    b.advance(61);
    // The sweep writes the expiry and queues the notice; the deliverer drops it.
    let mut dropped = false;
    for _ in 0..300 {
        let expired = session.get_request(&request_id).await?.s("state") == "expired";
        let metrics = b.conn.open("GET", "/metrics", None).await?.text;
        if expired
            && outbox(&b).await?.is_empty()
            && metrics.contains("countersign_notifications_total{outcome=\"dropped\"}")
        {
            dropped = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(dropped, "the notice was written and dropped");
    Ok(())
}

#[tokio::test]
async fn two_replicas_on_one_postgres_deliver_each_notice_once() -> R {
    let Some(db) = PgDatabase::create("cs_outbox").await? else {
        return Ok(());
    };
    let db_url = db.url.clone();
    let result = async {
        let dir = TempDir::new()?;
        let secret = dir.path().join("webhook-secret");
        std::fs::write(&secret, SECRET)?;
        // Slow answers widen the window in which both replicas look for work.
        let (rx, hook_url) =
            Receiver::start(&[Answer::Hang(Duration::from_millis(300)); 40]).await?;
        let a = broker(
            Some(notifications(&hook_url, &secret)),
            Some(db_url.clone()),
        )
        .await?;
        let b = broker(
            Some(notifications(&hook_url, &secret)),
            Some(db_url.clone()),
        )
        .await?;
        let (ma, mb) = (
            a.conn.machine_login(BOB).await?,
            b.conn.machine_login(BOB).await?,
        );
        let mut requests = Vec::new();
        // More than one claim's batch, so that both replicas find work.
        for i in 0..40 {
            let m = if i % 2 == 0 { &ma } else { &mb };
            let (_, id, _) = pending_request_of(m, &format!("s-{i}")).await?;
            requests.push(id);
        }
        a.advance(61);
        b.advance(61);
        let hits = rx.wait_for(requests.len()).await;
        // Each replica's pass under way, and one more, ends: a second delivery would be in.
        for r in [&a, &b] {
            r.state.loops.outbox.turn().await;
            r.state.loops.outbox.turn().await;
        }
        let hits_after = rx.hits();
        assert_eq!(hits_after.len(), hits.len(), "no second delivery");
        let mut ids: Vec<String> = hits_after.iter().map(|h| h.id.clone()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), requests.len(), "each notice exactly once");
        assert!(hits_after.iter().all(|h| h.verifies(SECRET)));
        anyhow::Ok(())
    }
    .await;
    db.drop_now().await;
    result
}
