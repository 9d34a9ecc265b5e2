//! The notification outbox survives SIGKILL: the real `countersign-broker` binary, run from a
//! configuration file, expires a pending request and queues its notice while the webhook
//! receiver is not listening yet; it is killed with SIGKILL after a failed attempt; with the
//! receiver up, a restarted broker delivers the notice, and the receiver verifies its Standard
//! Webhooks signature.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

mod common;

use anyhow::{Context, bail};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use base64::Engine as _;
use countersign_broker_core::Storage as _;
use countersign_broker_core::storage::OutboxItem;
use countersign_proto::claims::{
    self, AuthorizationDetail, MachineLoginClaims, ProofClaims, SecretRequestClaims,
};
use countersign_proto::jws::{self, Header};
use countersign_proto::{SigningKey, b64};
use serde_json::{Value, json};

type R = anyhow::Result<()>;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const CONSOLE: &str = "restart-test-console-token-0123456789";
const ADA: &str = "ada@example.com";

/// A directory removed on drop.
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The broker process, killed on drop.
struct Broker {
    child: Child,
}

impl Broker {
    fn spawn(config: &Path, log: &Path) -> anyhow::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        let child = Command::new(env!("CARGO_BIN_EXE_countersign-broker"))
            .args(["serve", "--config"])
            .arg(config)
            .env("RUST_LOG", "info,countersign_broker_http::notify=debug")
            .env_remove("COUNTERSIGN_CONSOLE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start countersign-broker")?;
        Ok(Self { child })
    }

    /// SIGKILL: no shutdown, nothing flushed but what was committed.
    fn kill(mut self) -> anyhow::Result<()> {
        self.child.kill()?;
        self.child.wait()?;
        Ok(())
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

fn jti() -> String {
    claims::new_jti().unwrap_or_default()
}

struct Client {
    http: reqwest::Client,
    base: String,
}

impl Client {
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value)> {
        let mut rb = self.http.request(method, format!("{}{path}", self.base));
        for (k, v) in headers {
            rb = rb.header(*k, v);
        }
        if let Some(b) = body {
            rb = rb
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let r = rb.send().await?;
        let status = r.status().as_u16();
        let text = r.text().await?;
        Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
    }

    async fn expect(
        &self,
        status: u16,
        method: reqwest::Method,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&Value>,
    ) -> anyhow::Result<Value> {
        let (s, v) = self.send(method, path, headers, body).await?;
        if s != status {
            bail!("{path}: expected {status}, got {s}: {v}");
        }
        Ok(v)
    }

    /// A `Proof` header for `path` with `body`, signed by `key` named `kid`.
    fn proof(&self, typ: &str, kid: &str, key: &SigningKey, path: &str, body: &Value) -> String {
        let c = ProofClaims {
            htm: "POST".into(),
            htu: claims::htu(&self.base, path),
            iat: now(),
            jti: jti(),
            bh: Some(claims::body_hash(body.to_string().as_bytes())),
        };
        jws::sign(key, &Header::with_kid(typ, kid), &c).unwrap_or_default()
    }

    async fn wait_healthy(&self) -> anyhow::Result<()> {
        for _ in 0..200 {
            if let Ok((200, _)) = self.send(reqwest::Method::GET, "/healthz", &[], None).await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("the broker did not become healthy")
    }
}

fn s(v: &Value, f: &str) -> String {
    v[f].as_str().unwrap_or_default().to_owned()
}

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
    let dir = Dir(std::env::temp_dir().join(format!(
        "countersign-restart-{}",
        uuid::Uuid::new_v4().simple()
    )));
    std::fs::create_dir_all(&dir.0)?;
    let p = |f: &str| dir.0.join(f);
    std::fs::write(p("seal.key"), b64::encode(&[9u8; 32]))?;
    std::fs::write(p("console-token"), CONSOLE)?;
    std::fs::write(p("webhook-secret"), SECRET)?;
    std::fs::write(
        p("secrets.toml"),
        format!(
            "prefix = \"agents/\"\nkey = \"local\"\n\n[[secret]]\nname = \"agents/ada-secret\"\nowner = \"{ADA}\"\ntier = \"owner\"\nvalue = \"v\"\n"
        ),
    )?;
    let (port, hook_port) = (free_port()?, free_port()?);
    let base = format!("http://127.0.0.1:{port}");
    let db_url = format!("sqlite://{}?mode=rwc", p("broker.db").display());
    std::fs::write(
        p("broker.toml"),
        format!(
            r#"listen = "127.0.0.1:{port}"
public_url = "{base}"
database_url = {db:?}
seal_key_file = {seal:?}
console_token_file = {console:?}
audit_state_file = {audit:?}

[store]
kind = "local"
path = {store:?}

[durations]
request_pending = 2

[notifications]
url = "http://127.0.0.1:{hook_port}/hooks/countersign"
secret_file = {secret:?}
timeout_seconds = 2
retry_initial_seconds = 1
retry_max_seconds = 2
"#,
            db = db_url,
            seal = p("seal.key").display().to_string(),
            console = p("console-token").display().to_string(),
            audit = p("audit-state.json").display().to_string(),
            store = p("secrets.toml").display().to_string(),
            secret = p("webhook-secret").display().to_string(),
        ),
    )?;
    let log = p("broker.log");
    let broker = Broker::spawn(&p("broker.toml"), &log)?;
    let c = Client {
        http: reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()?,
        base: base.clone(),
    };
    c.wait_healthy().await?;
    let bearer = [("authorization", format!("Bearer {CONSOLE}"))];
    use reqwest::Method as M;

    // Ada's machine logs in: start, look the code up, approve it with the code typed again.
    let machine = SigningKey::generate()?;
    let login = jws::sign(
        &machine,
        &Header::with_jwk(claims::TYP_MACHINE_LOGIN, machine.public_jwk()),
        &MachineLoginClaims {
            iat: now(),
            exp: now() + 120,
            jti: jti(),
            login_hint: ADA.into(),
            host: "laptop".into(),
            authorization_details: None,
        },
    )?;
    let started = c
        .expect(
            202,
            M::POST,
            "/v1/launcher-credentials",
            &[],
            Some(&json!({ "request": login })),
        )
        .await?;
    let code = s(&started, "code");
    let record = c
        .expect(
            200,
            M::POST,
            "/v1/machine-logins/lookup",
            &bearer,
            Some(&json!({ "code": code })),
        )
        .await?;
    let approved = c
        .expect(
            200,
            M::POST,
            &format!(
                "/v1/credential-requests/{}/approve",
                s(&record, "record_id")
            ),
            &bearer,
            Some(&json!({ "approver": ADA, "code": code })),
        )
        .await?;
    let credential = s(&approved, "credential_id");

    // A session enrolls and asks for Ada's secret: pending, with a notification session.
    let session = SigningKey::generate()?;
    let body = json!({
        "kind": "session",
        "runtime_id": "rt-restart",
        "thumbprint": session.thumbprint(),
        "jwk": session.public_jwk(),
    });
    let proof = c.proof(
        claims::TYP_LAUNCHER_PROOF,
        &credential,
        &machine,
        "/v1/enrollments",
        &body,
    );
    let enrolled = c
        .expect(
            201,
            M::POST,
            "/v1/enrollments",
            &[("proof", proof)],
            Some(&body),
        )
        .await?;
    let enrollment = s(&enrolled, "enrollment_id");
    let request = jws::sign(
        &session,
        &Header::with_kid(claims::TYP_SECRET_REQUEST, &enrollment),
        &SecretRequestClaims {
            iat: now(),
            exp: now() + 120,
            jti: jti(),
            aud: base.clone(),
            authorization_details: vec![AuthorizationDetail::agent_secret("ADA_SECRET")],
            reason: "restart test".into(),
            lifetime_seconds: None,
        },
    )?;
    let body = json!({ "request": request, "session_id": "sess-restart" });
    let proof = c.proof(
        claims::TYP_SESSION_PROOF,
        &enrollment,
        &session,
        "/v1/requests",
        &body,
    );
    let made = c
        .expect(
            200,
            M::POST,
            "/v1/requests",
            &[("proof", proof)],
            Some(&body),
        )
        .await?;
    assert_eq!(s(&made, "state"), "pending");
    let request_id = s(&made, "request_id");

    // The request expires (2 s), the sweep queues the notice, and delivery fails: nothing
    // listens on the receiver's port yet. Wait until a failed attempt is on record.
    let db = countersign_broker_sql::SqlStorage::connect(&db_url)
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
    broker.kill()?;

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
    let broker = Broker::spawn(&p("broker.toml"), &log)?;
    c.wait_healthy().await?;
    let mut delivered = None;
    for _ in 0..600 {
        if let Some(hit) = hits.lock().ok().and_then(|h| h.first().cloned()) {
            delivered = Some(hit);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let Some(hit) = delivered else {
        let log = std::fs::read_to_string(&log).unwrap_or_default();
        bail!("no webhook after the restart; broker log:\n{log}");
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
    broker.kill()?;
    Ok(())
}
