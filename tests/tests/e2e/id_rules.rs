//! One session-id rule and one UUID rule (issue 51), as the three programs answer them: the
//! broker over HTTP on a real socket, the launcher helper on its real Unix socket, and the
//! console over HTTP, each given the same strings.
//!
//! - A session id: the broker's `POST /v1/requests` (`session_id` in the body; refused: 400
//!   SESSION_ID_INPUT), the helper's `register` (`session_id`; refused: BAD_REQUEST before
//!   anything else is looked at, accepted: the next check answers, NO_CREDENTIAL), the console's
//!   agent-artifact route (the session in the path, and as `?session=`; refused: 400
//!   INVALID_SESSION_ID, accepted: 404 NOT_FOUND, no such artifact).
//! - A UUID: an id that exists, written each way: the broker's `GET /v1/requests/{id}`
//!   (refused: 400 REQUEST_ID_INPUT), the console's `GET /api/v1/artifacts/{id}` (refused: 404
//!   NOT_FOUND, a malformed id names nothing); accepted: 200 with the id written lowercase.

use std::sync::Arc;

use countersign_console_http::Config;
use countersign_console_http::config::AgentsConfig;
use countersign_e2e::http::*;
use countersign_e2e::k8s::{Issuer, IssuerKey, TokenSpec};
use countersign_launcher_helper::{Helper, HelperConfig, SessionCgroups};
use countersign_launcher_proto::{Client, messages::Register};
use serde_json::Value;

type R = anyhow::Result<()>;

/// Session ids and whether the spec's rule (console-protocol §4.1) takes them.
fn session_ids() -> Vec<(String, bool)> {
    let mut t: Vec<(String, bool)> = vec![
        ("sess-1.a_b:c".into(), true),
        ("x".into(), true),
        ("é日本~!@$%^&*()=+,;".into(), true),
        ("67e55044-10b1-426f-9247-bb680e5fe0c8".into(), true),
        ("x".repeat(128), true),
        ("é".repeat(128), true),
        (String::new(), false),
        ("x".repeat(129), false),
        ("a b".into(), false),
        ("a\tb".into(), false),
        ("a\u{7}b".into(), false),
        ("a\u{a0}b".into(), false),
    ];
    // Accepted by the broker's and the helper's rule before issue 51; never by the console's.
    t.extend("/?#<>\"'`[]\\|".chars().map(|c| (format!("a{c}b"), false)));
    t
}

/// `id` written each way, and whether the rule (RFC 9562's hyphenated form, any case) reads it.
fn uuid_forms(id: &str) -> Vec<(String, bool)> {
    vec![
        (id.to_owned(), true),
        (id.to_uppercase(), true),
        (format!("{}{}", id[..9].to_uppercase(), &id[9..]), true),
        (id.replace('-', ""), false),
        (format!("{{{id}}}"), false),
        (format!("urn:uuid:{id}"), false),
        (format!("{id}0"), false),
        (id[..35].to_owned(), false),
        (format!(" {}", &id[1..]), false),
    ]
}

/// Percent-encodes everything but RFC 3986's unreserved characters (a path segment or a query
/// value that arrives as `s`).
fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A console on loopback that lets in the ServiceAccount `team/agent` (an agent bearer).
async fn console(
    issuer: &Issuer,
) -> anyhow::Result<(String, countersign_console_http::Running, tempfile::TempDir)> {
    let agents: AgentsConfig = toml::from_str(&format!(
        "service_accounts = [\"team/agent\"]\n[token_issuer]\nissuer = \"{}\"\njwks_url = \"{}\"\n",
        issuer.url,
        issuer.jwks_url()
    ))?;
    let dir = tempfile::tempdir()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let mut c = Config::new(&url);
    c.database_url = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
    c.agents = Some(agents);
    let state =
        countersign_console_http::build(&c, Arc::new(countersign_console_core::SystemClock))
            .await?;
    let running = countersign_console_http::serve(state, listener).await?;
    Ok((url, running, dir))
}

/// A bearer token of the ServiceAccount `team/agent`, for the console.
fn agent_token(key: &IssuerKey, issuer: &Issuer) -> String {
    key.mint(&TokenSpec {
        aud: vec!["countersign-console".to_owned()],
        ..TokenSpec::projected(&issuer.url, "team/agent", chrono::Utc::now().timestamp())
    })
}

/// A console answer: status, code (if refused) and body.
async fn call(token: &str, rb: reqwest::RequestBuilder) -> anyhow::Result<(u16, Value)> {
    let r = rb.bearer_auth(token).send().await?;
    let status = r.status().as_u16();
    Ok((status, r.json().await.unwrap_or(Value::Null)))
}

/// Uploads a small text file to session `sess-ids`'s conversation (multipart): its id.
async fn upload(client: &reqwest::Client, url: &str, token: &str) -> anyhow::Result<String> {
    let boundary = "id-rules-boundary";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"notes.txt\"\r\n\
         Content-Type: text/plain\r\n\r\nhello\r\n--{boundary}--\r\n"
    );
    let rb = client
        .post(format!(
            "{url}/api/v1/agents/sess-ids/artifacts?session=sess-ids"
        ))
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body);
    let (status, v) = call(token, rb).await?;
    anyhow::ensure!(status == 201 || status == 200, "upload: {status} {v}");
    let id = v["id"]
        .as_str()
        .or_else(|| v["artifact"]["id"].as_str())
        .unwrap_or_default();
    anyhow::ensure!(id.len() == 36, "upload answered no id: {v}");
    Ok(id.to_owned())
}

/// A launcher helper on a Unix socket of its own, talking to `broker_url`; not logged in.
struct LauncherHelper {
    socket: std::path::PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    _dir: tempfile::TempDir,
}

impl LauncherHelper {
    fn start(broker_url: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("run").join("l.sock");
        let mut cfg = HelperConfig::new(broker_url, dir.path().join("state"));
        cfg.no_store = true;
        cfg.session_cgroups = SessionCgroups::Off;
        let helper = Arc::new(Helper::new(cfg)?);
        let listener = countersign_launcher_helper::server::bind(&socket)?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(countersign_launcher_helper::server::serve(
            helper,
            listener,
            async move {
                let _ = stopped.await;
            },
        ));
        Ok(Self {
            socket,
            stop: Some(stop),
            task,
            _dir: dir,
        })
    }

    /// `register` with `session_id`, from this (outside) process: the helper's answer line.
    async fn register(&self, session_id: &str) -> anyhow::Result<Value> {
        let client = Client::new(&self.socket);
        let req = countersign_launcher_proto::messages::Request::Register(Register {
            session_id: Some(session_id.to_owned()),
            ..Register::default()
        });
        let line = serde_json::to_vec(&req)?;
        let answer = tokio::task::spawn_blocking(move || client.raw(&line)).await??;
        Ok(serde_json::from_slice(&answer)?)
    }

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        let _ = tokio::time::timeout(std::time::Duration::from_secs(10), &mut self.task).await;
    }
}

#[tokio::test]
async fn the_broker_the_launcher_helper_and_the_console_take_the_same_session_ids() -> R {
    let tb = TestBroker::start().await?;
    let (_m, session) = tb.session_of(ADA).await?;
    let helper = LauncherHelper::start(&tb.conn.base_url)?;
    let key = IssuerKey::ec();
    let issuer = Issuer::start(&[&key]).await?;
    let (url, running, _dir) = console(&issuer).await?;
    let token = agent_token(&key, &issuer);
    let client = reqwest::Client::new();

    for (sid, ok) in session_ids() {
        // The broker: a request naming its notification session.
        let r = session.request_with(&[AUTO], None, Some(&sid)).await?;
        let broker = if ok {
            assert_eq!(r.status, 200, "broker {sid:?}: {}", r.text);
            true
        } else {
            r.refused(400, "SESSION_ID_INPUT");
            false
        };

        // The launcher helper: registering a session that names it.
        let v = helper.register(&sid).await?;
        let launcher = match v["code"].as_str() {
            Some("NO_CREDENTIAL") => true,
            Some("BAD_REQUEST") => {
                let e = v["error"].as_str().unwrap_or_default();
                assert!(e.starts_with("session_id must be"), "helper {sid:?}: {v}");
                false
            }
            _ => panic!("helper {sid:?}: {v}"),
        };

        // The console: the agent-artifact route, the session as `?session=` and (where a path
        // segment can hold it: not empty) in the path.
        let rb = client.get(format!(
            "{url}/api/v1/agents/sess-ids/artifacts/none?session={}",
            enc(&sid)
        ));
        let (status, body) = call(&token, rb).await?;
        let console = match (status, body["code"].as_str()) {
            (404, Some("NOT_FOUND")) => true,
            (400, Some("INVALID_SESSION_ID")) => false,
            other => panic!("console ?session={sid:?}: {other:?} {body}"),
        };
        if !sid.is_empty() {
            let rb = client.get(format!(
                "{url}/api/v1/agents/{}/artifacts/none?session=sess-ids",
                enc(&sid)
            ));
            let (status, body) = call(&token, rb).await?;
            let in_path = match (status, body["code"].as_str()) {
                (404, Some("NOT_FOUND")) => true,
                (400, Some("INVALID_SESSION_ID")) => false,
                other => panic!("console path {sid:?}: {other:?} {body}"),
            };
            assert_eq!(in_path, console, "console path and query {sid:?}");
        }

        assert_eq!(
            (broker, launcher, console),
            (ok, ok, ok),
            "session id {sid:?}: (broker, launcher helper, console)"
        );
    }

    helper.stop().await;
    running.shutdown(std::time::Duration::from_secs(1)).await;
    Ok(())
}

#[tokio::test]
async fn the_broker_and_the_console_read_the_same_uuids() -> R {
    let tb = TestBroker::start().await?;
    let (_m, session) = tb.session_of(ADA).await?;
    let request_id = session.request(&[AUTO]).await?.expect(200).s("request_id");
    let key = IssuerKey::ec();
    let issuer = Issuer::start(&[&key]).await?;
    let (url, running, _dir) = console(&issuer).await?;
    let token = agent_token(&key, &issuer);
    let client = reqwest::Client::new();
    let artifact_id = upload(&client, &url, &token).await?;

    for ((broker_form, ok), (console_form, same)) in uuid_forms(&request_id)
        .into_iter()
        .zip(uuid_forms(&artifact_id))
    {
        assert_eq!(ok, same);
        let r = session.get_request(&enc(&broker_form)).await?;
        let broker = if r.status == 200 {
            assert_eq!(r.s("request_id"), request_id, "{broker_form:?}");
            true
        } else {
            r.refused(400, "REQUEST_ID_INPUT");
            false
        };

        let rb = client.get(format!("{url}/api/v1/artifacts/{}", enc(&console_form)));
        let (status, body) = call(&token, rb).await?;
        let console = match (status, body["code"].as_str()) {
            (200, _) => {
                assert_eq!(body["id"], artifact_id.as_str(), "{console_form:?}");
                true
            }
            (404, Some("NOT_FOUND")) => false,
            other => panic!("console {console_form:?}: {other:?} {body}"),
        };

        assert_eq!(
            (broker, console),
            (ok, ok),
            "UUID written as {broker_form:?} / {console_form:?}: (broker, console)"
        );
    }

    running.shutdown(std::time::Duration::from_secs(1)).await;
    Ok(())
}
