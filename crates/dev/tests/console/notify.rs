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
use crate::on_both_databases;

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

/// A console with `[notifications]` (SMTP on `smtp_port`, the signed webhook's secret in `dir`)
/// on `listener` and database `db`, the agents' shared token set, and the broker's webhook when
/// there is a broker.
async fn notify_console(
    listener: std::net::TcpListener,
    db: &str,
    dir: &Path,
    smtp_port: u16,
    broker: Option<&TestBroker>,
) -> anyhow::Result<TestConsole> {
    TestConsole::start(ConsoleOptions {
        broker,
        local_sign_in: true,
        shared_token: true,
        listener: Some(listener),
        database_url: Some(db.to_owned()),
        webhook_secret_file: broker.map(|_| dir.join("broker-hook-secret")),
        notifications: Some(countersign_console_http::notify::NotificationsConfig {
            smtp_url: Some(format!("smtp://127.0.0.1:{smtp_port}")),
            smtp_password_file: None,
            from: Some("Countersign <countersign@localhost>".into()),
            webhook_secret_file: Some(dir.join("notify-secret")),
            digest_seconds: 3,
            timeout_seconds: 5,
            max_attempts: 20,
            mailbox: None,
        }),
        ..Default::default()
    })
    .await
}

impl Stack {
    async fn console(&mut self, listener: Option<std::net::TcpListener>) -> anyhow::Result<()> {
        let listener = match listener {
            Some(l) => l,
            None => std::net::TcpListener::bind(("127.0.0.1", self.port))?,
        };
        let console = notify_console(
            listener,
            &self.db,
            self.dir.path(),
            self.smtp_port,
            Some(&self.broker),
        )
        .await?;
        self.console = Some(console);
        Ok(())
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Whole passes of the broker's deliverer and the console's sender, so that whatever
    /// either had to send has been sent.
    async fn settle(&self) {
        self.broker.deliver().await;
        if let Some(c) = &self.console {
            c.state.loops.notify.turn().await;
        }
        self.broker.deliver().await;
    }

    async fn stop_console(&mut self) {
        if let Some(c) = self.console.take() {
            c.stop().await;
        }
    }
}

async fn prefs(stack: &Stack, who: &str, body: Value) -> anyhow::Result<()> {
    set_prefs(stack.console.as_ref().context("console")?, who, body).await
}

async fn set_prefs(console: &TestConsole, who: &str, body: Value) -> anyhow::Result<()> {
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
    // A pass of the broker's deliverer: its webhook to the stopped console fails.
    stack.broker.deliver().await;
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

    // Sent once each: after the passes under way and one more of the console's sender and the
    // broker's deliverer, and after another restart, nothing more.
    stack.settle().await;
    stack.stop_console().await;
    stack.console(None).await?;
    stack.settle().await;
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

/// How many notices of the console's outbox are not sent yet, read from its database.
async fn unsent(db: &str) -> anyhow::Result<i64> {
    use sqlx::Connection;
    const Q: &str = "SELECT COUNT(*) FROM notify_outbox WHERE sent_at IS NULL";
    Ok(if db.starts_with("sqlite:") {
        let mut c = sqlx::SqliteConnection::connect(db).await?;
        sqlx::query_scalar(Q).fetch_one(&mut c).await?
    } else {
        let mut c = sqlx::PgConnection::connect(db).await?;
        sqlx::query_scalar(Q).fetch_one(&mut c).await?
    })
}

/// A project `NTF` with `NTF-1` (Ada's), `NTF-2` (Bob's) and `NTF-3` (nobody's).
async fn asks_project(console: &TestConsole) -> anyhow::Result<()> {
    let ada = Who::person(console, ADA).await?;
    Who::person(console, BOB).await?;
    let r = ada
        .post("/api/v1/projects", json!({"key": "NTF", "name": "Notices"}))
        .await?;
    anyhow::ensure!(r.status == 201, "{}", r.text);
    for (title, assignee) in [
        ("refunds", json!(ADA)),
        ("ledger", json!(BOB)),
        ("nobody's", Value::Null),
    ] {
        let r = ada
            .post(
                "/api/v1/issues",
                json!({"project": "NTF", "title": title, "assignee": assignee}),
            )
            .await?;
        anyhow::ensure!(r.status == 201, "{}", r.text);
    }
    let r = ada
        .patch("/api/v1/issues/NTF-3", json!({"assignee": null}))
        .await?;
    anyhow::ensure!(r.json["assignee"] == Value::Null, "{}", r.text);
    Ok(())
}

/// Opens an ask on `issue` as `who` (an agent as its session `s1`) and answers its id.
async fn open_ask(who: &Who, issue: &str, question: &str) -> anyhow::Result<String> {
    let mut body = json!({"question": question, "options": [{"label": "Yes"}, {"label": "No"}]});
    if who.bearer.is_some() {
        body["actor"] = json!("s1");
    }
    let r = who
        .post(&format!("/api/v1/issues/{issue}/asks"), body)
        .await?;
    anyhow::ensure!(r.status == 201, "{}", r.text);
    r.json["id"]
        .as_str()
        .map(str::to_owned)
        .context("the ask's id")
}

/// Asks tell the people who may answer them (issue 29): an agent's ask on Ada's issue reaches
/// her by e-mail, Slack and the signed webhook with its page's link, once each; one on nobody's
/// issue reaches everyone who asked to hear; Bob's digest gathers his asks into one mail; a
/// person is not told of the ask they opened themselves.
async fn asks_are_told_once_to_who_may_answer(db: Option<String>) -> anyhow::Result<()> {
    if !aiosmtpd_or_skip() {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("notify-secret"), NOTIFY_SECRET)?;
    let smtp_port = free_port()?;
    let smtp = Smtp::start(smtp_port, &dir.path().join("maildir")).await?;
    let (hooks, got) = receiver().await?;
    let db = db.unwrap_or_else(|| {
        format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("console.db").display()
        )
    });
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let console = notify_console(listener, &db, dir.path(), smtp_port, None).await?;
    set_prefs(
        &console,
        ADA,
        json!({ "email": true, "slack_url": format!("{hooks}/slack"), "webhook_url": format!("{hooks}/hook") }),
    )
    .await?;
    set_prefs(&console, BOB, json!({ "email": true, "digest": true })).await?;
    asks_project(&console).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let ada = Who::person(&console, ADA).await?;
    let mine = open_ask(&agent, "NTF-1", "Refund <!channel> & partial captures?").await?;
    let bobs = open_ask(&agent, "NTF-2", "Export the ledger nightly?").await?;
    let anyones = open_ask(&agent, "NTF-3", "Who owns the orphan job?").await?;
    let adas_own = open_ask(&ada, "NTF-3", "Should Bob look at this?").await?;
    let link = |id: &str| format!("{}/asks/{id}", console.url);

    // Ada: her issue's ask and nobody's, on each channel, with the ask's page.
    for id in [&mine, &anyones] {
        let mail = eventually(20, || async {
            anyhow::Ok(
                smtp.mails_to(ADA)
                    .into_iter()
                    .find(|m| m.contains(&link(id))),
            )
        })
        .await?;
        assert!(mail.contains("Answer an ask on NTF-"), "{mail}");
        eventually(10, || async {
            let slack = posts(&got, "/slack").iter().any(|(_, b)| {
                b["text"]
                    .as_str()
                    .is_some_and(|t| t.contains(&format!("<{}|", link(id))))
            });
            let hook = raw_posts(&got, "/hook")
                .iter()
                .any(|(_, b)| String::from_utf8_lossy(b).contains(&link(id)));
            anyhow::Ok((slack && hook).then_some(()))
        })
        .await?;
    }
    // Slack's markup is escaped: the question's `<!channel>` pings nobody.
    let slack: Vec<String> = posts(&got, "/slack")
        .iter()
        .map(|(_, b)| b["text"].as_str().unwrap_or_default().to_owned())
        .collect();
    let text = slack.iter().find(|t| t.contains(&mine)).context("Slack")?;
    assert!(
        text.contains("&lt;!channel&gt; &amp; partial") && !text.contains("<!channel>"),
        "{text}"
    );
    // Bob's digest: one mail with his issue's ask, nobody's, and the one Ada opened.
    let digest = eventually(20, || async {
        let m = smtp.mails_to(BOB);
        anyhow::Ok((!m.is_empty()).then_some(m))
    })
    .await?;
    for id in [&bobs, &anyones, &adas_own] {
        assert!(digest[0].contains(&link(id)), "{id} in {}", digest[0]);
    }

    // Everything sent: the console stops, and what arrived is final.
    eventually(20, || async {
        anyhow::Ok((unsent(&db).await? == 0).then_some(()))
    })
    .await?;
    console.stop().await;
    let hooks: Vec<String> = posts(&got, "/hook")
        .iter()
        .map(|(_, b)| b.to_string())
        .collect();
    let ada_mails = smtp.mails_to(ADA);
    for id in [&mine, &anyones] {
        for (channel, texts) in [
            ("e-mail", &ada_mails),
            ("Slack", &slack),
            ("webhook", &hooks),
        ] {
            assert_eq!(
                texts.iter().filter(|t| t.contains(id.as_str())).count(),
                1,
                "{id} once by {channel}: {texts:?}"
            );
        }
    }
    for id in [&bobs, &adas_own] {
        assert!(
            !ada_mails
                .iter()
                .chain(&slack)
                .chain(&hooks)
                .any(|t| t.contains(id.as_str())),
            "Ada is told of neither Bob's ask nor her own"
        );
    }
    let bob = smtp.mails_to(BOB);
    assert_eq!(bob.len(), 1, "one digest: {bob:?}");
    assert!(!bob[0].contains(&mine), "Ada's issue's ask is not Bob's");
    Ok(())
}

on_both_databases!(
    asks_are_told_once_to_who_may_answer,
    asks_are_told_once_sqlite,
    asks_are_told_once_postgres
);

/// A restart between the queue and the send (issue 29): the ask's notice is queued when the
/// ask is opened, its first send fails (the SMTP server is not listening yet), the console
/// stops; the SMTP server comes up and the console starts again on the same database: the mail
/// arrives, once.
#[tokio::test]
async fn a_notice_queued_before_a_restart_is_sent_once_after_it() -> anyhow::Result<()> {
    if !aiosmtpd_or_skip() {
        return Ok(());
    }
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("notify-secret"), NOTIFY_SECRET)?;
    let smtp_port = free_port()?;
    let db = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("console.db").display()
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let console = notify_console(listener, &db, dir.path(), smtp_port, None).await?;
    set_prefs(&console, ADA, json!({ "email": true })).await?;
    asks_project(&console).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let id = open_ask(&agent, "NTF-1", "Rotate the signing key today?").await?;
    // Queued with the ask; its first send failed (nothing listens on the SMTP port).
    eventually(20, || async {
        use sqlx::Connection;
        let mut c = sqlx::SqliteConnection::connect(&db).await?;
        let attempts: Vec<i64> = sqlx::query_scalar(
            "SELECT attempts FROM notify_outbox WHERE item = $1 AND sent_at IS NULL",
        )
        .bind(format!("ask:{id}"))
        .fetch_all(&mut c)
        .await?;
        anyhow::Ok((attempts.len() == 1 && attempts[0] >= 1).then_some(()))
    })
    .await?;
    console.stop().await;

    let smtp = Smtp::start(smtp_port, &dir.path().join("maildir")).await?;
    assert!(smtp.mails().is_empty());
    let listener = std::net::TcpListener::bind(("127.0.0.1", port))?;
    let console = notify_console(listener, &db, dir.path(), smtp_port, None).await?;
    let link = format!("{}/asks/{id}", console.url);
    let mail = eventually(40, || async {
        anyhow::Ok(smtp.mails_to(ADA).into_iter().find(|m| m.contains(&link)))
    })
    .await?;
    assert!(mail.contains("Rotate the signing key today?"), "{mail}");
    eventually(20, || async {
        anyhow::Ok((unsent(&db).await? == 0).then_some(()))
    })
    .await?;
    console.stop().await;
    assert_eq!(smtp.mails().len(), 1, "sent once: {:?}", smtp.mails());
    Ok(())
}

/// The form's values as the page holds them: `[email, slack, webhook, digest]`.
async fn form_values(b: &common::webdriver::Browser) -> anyhow::Result<Value> {
    b.execute(
        "const v = id => document.getElementById(id); \
         return [v('notify-email').checked, v('notify-slack').value, \
                 v('notify-webhook').value, v('notify-digest').checked];",
    )
    .await
}

/// The Notifications page in Chromium: a person signs in, turns e-mail on, sets a webhook URL
/// and a digest, saves; the page reloads with what was saved, and the API reads the same. A
/// URL the console refuses shows its message in the form, and the form keeps every value typed
/// (nothing saved, nothing lost). Screenshot: `notifications.png`.
#[tokio::test]
async fn the_notifications_page_keeps_what_a_person_saves() -> anyhow::Result<()> {
    let Some((chromium, chromedriver)) = common::webdriver::browser_or_skip() else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("notify-secret"), NOTIFY_SECRET)?;
    let db = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("console.db").display()
    );
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let console = notify_console(listener, &db, dir.path(), free_port()?, None).await?;
    let profiles = tempfile::tempdir()?;
    let driver = common::webdriver::Driver::start(&chromedriver).await?;
    let b = driver
        .browser(&chromium, &profiles.path().join("ada"))
        .await?;
    b.goto(&format!("{}/notifications", console.url)).await?;
    b.wait_for("#email", 10).await?;
    b.type_into("#email", ADA).await?;
    b.click_text("Sign in").await?;
    b.wait_text("h1", "Notifications", 10).await?;
    assert_eq!(form_values(&b).await?, json!([false, "", "", false]));

    // Save: e-mail, a webhook, a digest. The page reloads with them.
    let hook = "https://hooks.example.com/countersign";
    b.click("#notify-email").await?;
    b.type_into("#notify-webhook", hook).await?;
    b.click("#notify-digest").await?;
    b.execute("window.countersignBeforeSave = true; return null;")
        .await?;
    b.click("#notify-save").await?;
    eventually(10, || async {
        let reloaded = b
            .execute(
                "return document.readyState === 'complete' && \
                 window.countersignBeforeSave === undefined && \
                 !!document.getElementById('notify-form');",
            )
            .await?;
        anyhow::Ok((reloaded == Value::Bool(true)).then_some(()))
    })
    .await?;
    assert_eq!(form_values(&b).await?, json!([true, "", hook, true]));
    let ada = Who::person(&console, ADA).await?;
    let saved = ada.get("/api/v1/notification-preferences").await?;
    assert_eq!(saved.json["email"], true, "{}", saved.text);
    assert_eq!(saved.json["webhook_url"], hook);
    assert_eq!(saved.json["digest"], true);
    assert_eq!(saved.json["slack_url"], Value::Null);
    b.screenshot(&crate::browser::shots().join("notifications.png"))
        .await?;

    // A URL the console refuses: its message in the form, every value kept, nothing saved.
    b.type_into("#notify-slack", "hooks.slack.com/services/T000/B000")
        .await?;
    b.click("#notify-digest").await?;
    b.click("#notify-save").await?;
    let shown = b
        .wait_text(
            "#notify-form [data-form-error]",
            "slack_url must be an http:// or https:// URL",
            10,
        )
        .await?;
    assert!(shown.starts_with("INVALID_BODY: "), "{shown}");
    assert_eq!(
        form_values(&b).await?,
        json!([true, "hooks.slack.com/services/T000/B000", hook, false])
    );
    let kept = ada.get("/api/v1/notification-preferences").await?;
    assert_eq!(kept.json["slack_url"], Value::Null, "{}", kept.text);
    assert_eq!(kept.json["digest"], true, "nothing saved");
    b.quit().await;
    console.stop().await;
    Ok(())
}

/// Issue 48: `countersign-console dev --config FILE` takes `[notifications]` as `serve` does.
/// The real dev binary pointed at a real SMTP server (aiosmtpd): the dev person asks for
/// e-mail, an agent opens an ask on an unassigned issue, and the e-mail arrives with the ask's
/// link at the URL dev mode printed, which opens the ask; the dev mailbox keeps the notice too.
#[tokio::test]
async fn dev_mode_with_a_config_sends_notices_to_its_smtp_server() -> anyhow::Result<()> {
    if !aiosmtpd_or_skip() {
        return Ok(());
    }
    const DEV_PERSON: &str = countersign_dev::DEV_PERSON;
    let dir = tempfile::tempdir()?;
    let smtp_port = free_port()?;
    let smtp = Smtp::start(smtp_port, &dir.path().join("maildir")).await?;
    let file = dir.path().join("dev.toml");
    std::fs::write(
        &file,
        format!(
            "[notifications]\nsmtp_url = \"smtp://127.0.0.1:{smtp_port}\"\n\
             from = \"Countersign dev <countersign@localhost>\"\n"
        ),
    )?;
    let dev = crate::dev::DevProcess::start(Some(&file)).await?;
    let url = dev.console_url.clone();
    let mut p = Person::at(&url)?;
    let r = p.sign_in_local(DEV_PERSON).await?;
    assert_eq!(r.status, 303, "{}", r.text);
    let r = Resp::read(
        p.http
            .put(format!("{url}/api/v1/notification-preferences"))
            .header("origin", &url)
            .header("x-csrf-token", &p.csrf)
            .json(&json!({ "email": true }))
            .send()
            .await?,
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["available"], json!(["email", "slack"]), "{}", r.text);

    // An agent opens an ask on an issue nobody holds: everyone signed in may answer.
    let agent = reqwest::Client::new();
    let token = dev.agent_token();
    for (path, body) in [
        (
            "/api/v1/projects",
            json!({ "key": "DEV", "name": "Dev", "actor": "s1" }),
        ),
        (
            "/api/v1/issues",
            json!({ "project": "DEV", "title": "try notices", "actor": "s1" }),
        ),
    ] {
        let r = Resp::read(
            agent
                .post(format!("{url}{path}"))
                .bearer_auth(&token)
                .json(&body)
                .send()
                .await?,
        )
        .await?;
        assert_eq!(r.status, 201, "{path}: {}", r.text);
    }
    let r = Resp::read(
        agent
            .post(format!("{url}/api/v1/issues/DEV-1/asks"))
            .bearer_auth(&token)
            .json(&json!({ "question": "Ship it on Friday?", "actor": "s1" }))
            .send()
            .await?,
    )
    .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();
    let link = format!("{url}/asks/{id}");

    let mail = eventually(30, || async {
        Ok(smtp.mails_to(DEV_PERSON).into_iter().next())
    })
    .await?;
    assert!(mail.contains(&link), "{mail}");
    assert!(mail.contains("Ship it on Friday?"), "{mail}");
    assert!(
        mail.lines()
            .any(|l| l.starts_with("From:") && l.contains("countersign@localhost")),
        "{mail}"
    );
    // The link opens the ask.
    let page = p.get(&format!("/asks/{id}")).await?;
    assert_eq!(page.status, 200);
    assert!(page.text.contains("Ship it on Friday?"));
    // The dev mailbox keeps it too, with the same link.
    eventually(20, || async {
        let page = p.get("/notifications/mailbox").await?;
        Ok(page
            .text
            .contains(&format!("href=\"{link}\""))
            .then_some(()))
    })
    .await?;
    assert_eq!(smtp.mails_to(DEV_PERSON).len(), 1, "sent once");
    dev.stop().await;
    Ok(())
}
