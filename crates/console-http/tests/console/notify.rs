//! People told where to approve (issue 29): a real broker sends `record.pending` to the
//! console's webhook; the console queues a notice per person and channel and sends it to a local
//! SMTP server (Python's `aiosmtpd`, writing a maildir), a Slack-compatible receiver and a
//! Standard Webhooks receiver (an axum server in the test). Each carries the approval page's
//! link and no value; each is sent once; a console stopped while the broker's webhook waits
//! loses nothing, and one restarted after its sends sends nothing twice; a person who asked for
//! a digest gets one message for a shared request and their machine's login together.
//!
//! Skips (printing `skipped: aiosmtpd not installed`) without `aiosmtpd`, unless
//! `COUNTERSIGN_REQUIRE_SMTP=1` (`.ci/run` installs it).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use common::*;
use serde_json::{Value, json};

/// `python3 -m aiosmtpd` on a free port, writing what it receives to a maildir.
struct Smtp {
    child: Child,
    port: u16,
    maildir: PathBuf,
}

impl Drop for Smtp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn aiosmtpd_or_skip() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import aiosmtpd"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("COUNTERSIGN_REQUIRE_SMTP").as_deref() != Ok("1"),
            "COUNTERSIGN_REQUIRE_SMTP=1 but aiosmtpd is not installed (pip install aiosmtpd)"
        );
        println!("skipped: aiosmtpd not installed");
    }
    ok
}

impl Smtp {
    async fn start(port: u16, maildir: &Path) -> anyhow::Result<Self> {
        let child = Command::new("python3")
            .args([
                "-m",
                "aiosmtpd",
                "-n",
                "-l",
                &format!("127.0.0.1:{port}"),
                "-c",
                "aiosmtpd.handlers.Mailbox",
            ])
            .arg(maildir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("start aiosmtpd")?;
        for _ in 0..100 {
            if tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
            {
                return Ok(Self {
                    child,
                    port,
                    maildir: maildir.to_owned(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::bail!("aiosmtpd did not listen")
    }

    /// Every message received, as text (quoted-printable soft line breaks joined).
    fn mails(&self) -> Vec<String> {
        let mut out = Vec::new();
        for sub in ["new", "cur"] {
            if let Ok(rd) = std::fs::read_dir(self.maildir.join(sub)) {
                for e in rd.flatten() {
                    if let Ok(t) = std::fs::read_to_string(e.path()) {
                        out.push(t.replace("=\r\n", "").replace("=\n", ""));
                    }
                }
            }
        }
        out
    }

    fn mails_to(&self, who: &str) -> Vec<String> {
        self.mails()
            .into_iter()
            .filter(|m| m.lines().any(|l| l.starts_with("To:") && l.contains(who)))
            .collect()
    }
}

/// What the test's webhook receiver got: `(path, headers, body)`.
type Received = Arc<Mutex<Vec<(String, axum::http::HeaderMap, Vec<u8>)>>>;

async fn receiver() -> anyhow::Result<(String, Received)> {
    let got: Received = Default::default();
    let g = got.clone();
    let app = axum::Router::new().fallback(
        move |uri: axum::http::Uri, headers: axum::http::HeaderMap, body: axum::body::Bytes| {
            let g = g.clone();
            async move {
                g.lock().unwrap_or_else(|p| p.into_inner()).push((
                    uri.path().to_owned(),
                    headers,
                    body.to_vec(),
                ));
                axum::http::StatusCode::OK
            }
        },
    );
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", l.local_addr()?);
    tokio::spawn(async move {
        let _ = axum::serve(l, app).await;
    });
    Ok((url, got))
}

fn posts(got: &Received, path: &str) -> Vec<(axum::http::HeaderMap, Value)> {
    raw_posts(got, path)
        .into_iter()
        .map(|(h, b)| (h, serde_json::from_slice(&b).unwrap_or(Value::Null)))
        .collect()
}

fn raw_posts(got: &Received, path: &str) -> Vec<(axum::http::HeaderMap, Vec<u8>)> {
    got.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .filter(|(p, _, _)| p == path)
        .map(|(_, h, b)| (h.clone(), b.clone()))
        .collect()
}

const BROKER_HOOK_SECRET: &str = "whsec_dGVzdC1icm9rZXItd2ViaG9vay1zZWNyZXQtMzI=";
const NOTIFY_SECRET: &str = "test-console-notify-secret-0123456789";

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

struct Stack {
    broker: TestBroker,
    console: Option<TestConsole>,
    port: u16,
    db: String,
    dir: tempfile::TempDir,
    smtp_port: u16,
}

impl Stack {
    async fn console(&mut self, listener: Option<std::net::TcpListener>) -> anyhow::Result<()> {
        let listener = match listener {
            Some(l) => l,
            None => std::net::TcpListener::bind(("127.0.0.1", self.port))?,
        };
        let console = TestConsole::start(ConsoleOptions {
            broker: Some(&self.broker),
            local_sign_in: true,
            listener: Some(listener),
            database_url: Some(self.db.clone()),
            webhook_secret_file: Some(self.dir.path().join("broker-hook-secret")),
            notifications: Some(countersign_console_http::notify::NotificationsConfig {
                smtp_url: Some(format!("smtp://127.0.0.1:{}", self.smtp_port)),
                smtp_password_file: None,
                from: Some("Countersign <countersign@localhost>".into()),
                webhook_secret_file: Some(self.dir.path().join("notify-secret")),
                digest_seconds: 3,
                timeout_seconds: 5,
                max_attempts: 20,
            }),
            ..Default::default()
        })
        .await?;
        self.console = Some(console);
        Ok(())
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    async fn stop_console(&mut self) {
        if let Some(c) = self.console.take() {
            c.stop().await;
        }
    }
}

async fn prefs(stack: &Stack, who: &str, body: Value) -> anyhow::Result<()> {
    let console = stack.console.as_ref().context("console")?;
    let p = Who::person(console, who).await?;
    let r = p
        .call(
            reqwest::Method::PUT,
            "/api/v1/notification-preferences",
            Some(body),
        )
        .await?;
    anyhow::ensure!(r.status == 200, "{}", r.text);
    Ok(())
}

#[tokio::test]
async fn people_are_told_once_where_to_approve_across_restarts() -> anyhow::Result<()> {
    if !aiosmtpd_or_skip() {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("broker-hook-secret"), BROKER_HOOK_SECRET)?;
    std::fs::write(dir.path().join("notify-secret"), NOTIFY_SECRET)?;
    let smtp_port = free_port()?;
    let smtp = Smtp::start(smtp_port, &dir.path().join("maildir")).await?;
    let (hooks, got) = receiver().await?;
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let broker = TestBroker::start_with(&format!(
        "\n[notifications]\nurl = \"http://127.0.0.1:{port}/hooks/broker\"\nsecret_file = {}\n\
         retry_initial_seconds = 1\nretry_max_seconds = 1\n",
        serde_json::to_string(&dir.path().join("broker-hook-secret").display().to_string())?
    ))
    .await?;
    let db = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("console.db").display()
    );
    let mut stack = Stack {
        broker,
        console: None,
        port,
        db,
        dir,
        smtp_port,
    };
    stack.console(Some(listener)).await?;
    prefs(
        &stack,
        ADA,
        json!({ "email": true, "slack_url": format!("{hooks}/slack"), "webhook_url": format!("{hooks}/hook") }),
    )
    .await?;
    prefs(&stack, BOB, json!({ "email": true, "digest": true })).await?;
    {
        let console = stack.console.as_ref().context("console")?;
        let carol = Who::person(console, "carol@example.com").await?;
        let page = carol.get("/notifications").await?;
        assert_eq!(page.status, 200);
        assert!(page.text.contains("id=\"notify-form\""), "{}", page.text);
        let bad = carol
            .call(
                reqwest::Method::PUT,
                "/api/v1/notification-preferences",
                Some(json!({ "slack_url": "javascript:alert(1)" })),
            )
            .await?;
        refused(&bad, 400, "INVALID_BODY");
        let unknown = carol
            .call(
                reqwest::Method::PUT,
                "/api/v1/notification-preferences",
                Some(json!({ "sms": true })),
            )
            .await?;
        refused(&unknown, 400, "INVALID_BODY");
        let read = carol.get("/api/v1/notification-preferences").await?;
        assert_eq!(read.json["email"], false, "nothing set: all off");
        assert_eq!(read.json["available"], json!(["email", "slack", "webhook"]));
    }

    // An agent of Ada's asks for her owner-tier secret.
    let login = start_machine_login(&stack.broker, ADA, "ada-laptop").await?;
    let rec = stack
        .broker
        .console_call("/v1/machine-logins/lookup", json!({ "code": login.code }))
        .await?;
    let login_record = rec.json["record_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let a = stack
        .broker
        .console_call(
            &format!("/v1/credential-requests/{login_record}/approve"),
            json!({ "approver": ADA, "code": login.code }),
        )
        .await?;
    anyhow::ensure!(a.status == 200, "{}", a.text);
    let session = login
        .machine(&stack.broker)
        .await?
        .enroll(&stack.broker, "ada-agent")
        .await?;
    let r = session
        .request(&stack.broker, &[ADA_SECRET], "rotate the key", None)
        .await?;
    let record = r["record_id"].as_str().context("record")?.to_owned();
    let page = format!("{}/requests/{record}", stack.url());

    // E-mail, Slack and the signed webhook, each with the page's link, no value.
    let mails = eventually(20, || async {
        let m: Vec<String> = smtp
            .mails_to(ADA)
            .into_iter()
            .filter(|m| m.contains(&record))
            .collect();
        anyhow::Ok((!m.is_empty()).then_some(m))
    })
    .await?;
    let value = stack.broker.values.get(ADA_SECRET).context("value")?;
    assert!(mails[0].contains(&page), "{}", mails[0]);
    assert!(mails[0].contains("rotate the key"), "{}", mails[0]);
    assert!(!mails[0].contains(value.as_str()));
    eventually(10, || async {
        let found = posts(&got, "/slack").iter().any(|(_, b)| {
            b["text"]
                .as_str()
                .is_some_and(|t| t.contains(&format!("<{page}|")))
        });
        anyhow::Ok(found.then_some(()))
    })
    .await?;
    let (h, raw) = eventually(10, || async {
        anyhow::Ok(
            raw_posts(&got, "/hook")
                .into_iter()
                .find(|(_, b)| String::from_utf8_lossy(b).contains(&page)),
        )
    })
    .await?;
    let body: Value = serde_json::from_slice(&raw)?;
    assert_eq!(body["type"], "countersign.waiting");
    assert_eq!(body["person"], ADA);
    let secret = countersign_common::webhook::WebhookSecret::parse(NOTIFY_SECRET)
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let header = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or_default();
    assert!(
        secret.verifies(
            header("webhook-id"),
            header("webhook-timestamp"),
            &raw,
            header("webhook-signature")
        ),
        "the generic webhook is signed"
    );

    // The console stops; an agent asks for a shared secret (anyone decides: Ada and Bob, who
    // asked for a digest) while it is down; the broker's webhook waits and retries.
    stack.stop_console().await;
    let shared_one = session
        .request(&stack.broker, &[SHARED], "first shared", None)
        .await?;
    // And Bob's own machine logs in: a second item for his digest.
    let bobs = start_machine_login(&stack.broker, BOB, "bob-laptop").await?;
    let bob_login = stack
        .broker
        .console_call("/v1/machine-logins/lookup", json!({ "code": bobs.code }))
        .await?
        .json["record_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    tokio::time::sleep(Duration::from_secs(2)).await;
    stack.console(None).await?;
    let shared_record = shared_one["record_id"]
        .as_str()
        .context("record")?
        .to_owned();
    eventually(20, || async {
        anyhow::Ok(
            smtp.mails_to(ADA)
                .iter()
                .any(|m| m.contains(&shared_record))
                .then_some(()),
        )
    })
    .await?;
    // Bob's digest: after its period, one mail with the shared request.
    let bob = eventually(20, || async {
        let m = smtp.mails_to(BOB);
        anyhow::Ok((!m.is_empty()).then_some(m))
    })
    .await?;
    assert!(
        bob[0].contains(&shared_record) && bob[0].contains(&bob_login),
        "one digest with both items: {}",
        bob[0]
    );

    // Sent once each: a few seconds later, and after another restart, nothing more.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stack.stop_console().await;
    stack.console(None).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    // Ada's own machine login, her request and the shared one: each in exactly one message
    // per channel (items due together may share one).
    let ada_mails = smtp.mails_to(ADA);
    let slack: Vec<String> = posts(&got, "/slack")
        .iter()
        .map(|(_, b)| b["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    let hooks: Vec<String> = posts(&got, "/hook")
        .iter()
        .map(|(_, b)| b.to_string())
        .collect();
    for item in [&login_record, &record, &shared_record] {
        for (channel, texts) in [
            ("e-mail", &ada_mails),
            ("Slack", &slack),
            ("webhook", &hooks),
        ] {
            assert_eq!(
                texts.iter().filter(|t| t.contains(item.as_str())).count(),
                1,
                "{item} once by {channel}: {texts:?}"
            );
        }
    }
    assert_eq!(smtp.mails_to(BOB).len(), 1, "one digest");
    let _ = smtp.port;
    stack.stop_console().await;
    stack.broker.stop().await;
    Ok(())
}
