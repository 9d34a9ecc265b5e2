//! Test fixtures: a real broker (in-process, port 0, temp SQLite, local store), a small OpenID
//! provider on loopback ([`idp::TestIdp`]), the console on port 0 against both, people with
//! browser-like cookie jars, machines and sessions speaking the broker protocol with real
//! ES256 keys, and the real launcher helper and `countersign` CLI as child processes
//! ([`cli::Helper`]).

#![allow(dead_code)]

pub mod axe;
pub mod cli;
pub mod idp;
pub mod webdriver;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use countersign_console_http::Config;
use countersign_console_http::config::{BrokerConfig, OidcConfig};
use countersign_proto::SigningKey;
use countersign_proto::claims::{
    self, AuthorizationDetail, MachineLoginClaims, ProofClaims, SecretRequestClaims,
};
use countersign_proto::jws::{self, Header};
use reqwest::Method;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};

pub const ADA: &str = "ada@example.com";
pub const BOB: &str = "bob@example.com";
/// Tier `owner`, owner Ada.
pub const ADA_SECRET: &str = "ADA_SECRET";
/// Tier `shared`, owner Bob: anyone approves.
pub const SHARED: &str = "SHARED_SECRET";
/// Tier `automatic`, owner Ada.
pub const AUTO: &str = "AUTO_TOKEN";

pub const CONSOLE_TOKEN: &str = "test-console-token-0123456789abcdef";
pub const SHARED_TOKEN: &str = "test-shared-agent-token-0123456789";
pub const CLIENT_ID: &str = "countersign-console";
pub const CLIENT_SECRET: &str = "test-client-secret-0123456789";

/// A broker in this process.
pub struct TestBroker {
    pub url: String,
    pub values: HashMap<String, String>,
    running: Option<countersign_broker_http::Running>,
    pub dir: tempfile::TempDir,
}

impl TestBroker {
    pub async fn start() -> anyhow::Result<Self> {
        Self::start_with("").await
    }

    /// A broker whose configuration ends with `extra` (TOML: `[passkeys]`, `[[approval]]`).
    pub async fn start_with(extra: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let mut values = HashMap::new();
        let mut secrets = String::from("prefix = \"agents/\"\nkey = \"local\"\n");
        for (name, owner, tier) in [
            (ADA_SECRET, ADA, "owner"),
            (SHARED, BOB, "shared"),
            (AUTO, ADA, "automatic"),
        ] {
            let value = format!(
                "{}-value-{}",
                name.to_lowercase(),
                uuid::Uuid::new_v4().simple()
            );
            secrets.push_str(&format!(
                "\n[[secret]]\nname = \"agents/{}\"\nowner = \"{owner}\"\ntier = \"{tier}\"\nvalue = \"{value}\"\n",
                name.to_lowercase().replace('_', "-")
            ));
            values.insert(name.to_owned(), value);
        }
        std::fs::write(dir.path().join("secrets.toml"), secrets)?;
        std::fs::write(
            dir.path().join("seal.key"),
            countersign_proto::b64::encode(&[9u8; 32]),
        )?;
        std::fs::write(dir.path().join("console-token"), CONSOLE_TOKEN)?;
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        let addr = listener.local_addr()?;
        let q = |p: std::path::PathBuf| {
            serde_json::to_string(&p.display().to_string()).unwrap_or_default()
        };
        let toml = format!(
            "listen = \"{addr}\"\npublic_url = \"http://{addr}\"\ndatabase_url = {}\nseal_key_file = {}\n\
             console_token_file = {}\naudit_state_file = {}\n[store]\nkind = \"local\"\npath = {}\n",
            serde_json::to_string(&format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("broker.db").display()
            ))?,
            q(dir.path().join("seal.key")),
            q(dir.path().join("console-token")),
            q(dir.path().join("audit-state.json")),
            q(dir.path().join("secrets.toml")),
        );
        let toml = format!("{toml}{extra}");
        let config: countersign_broker_http::Config = toml::from_str(&toml)?;
        config.passkey_settings()?;
        let state = countersign_broker_http::server::build(
            &config,
            Arc::new(countersign_broker_core::SystemClock),
        )
        .await?;
        let running = countersign_broker_http::server::serve_listener(
            state,
            listener,
            None,
            chrono::Duration::minutes(5),
        )
        .await?;
        Ok(Self {
            url: format!("http://{addr}"),
            values,
            running: Some(running),
            dir,
        })
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown(Duration::from_secs(2)).await;
        }
    }

    /// Runs a whole pass of the broker's notification deliverer.
    pub async fn deliver(&self) {
        if let Some(r) = &self.running {
            r.state().loops.outbox.turn().await;
        }
    }

    /// A console-token call to the broker, naming the person in the body.
    pub async fn console_call(&self, path: &str, body: Value) -> anyhow::Result<Resp> {
        Resp::read(
            reqwest::Client::new()
                .post(format!("{}{path}", self.url))
                .bearer_auth(CONSOLE_TOKEN)
                .json(&body)
                .send()
                .await?,
        )
        .await
    }
}

/// The console in this process.
pub struct TestConsole {
    pub url: String,
    pub dir: tempfile::TempDir,
    /// The console's state (its core: `state.console`).
    pub state: Arc<countersign_console_http::AppState>,
    running: Option<countersign_console_http::Running>,
}

/// How to build a test console.
#[derive(Default)]
pub struct ConsoleOptions<'a> {
    pub broker: Option<&'a TestBroker>,
    pub idp: Option<&'a idp::TestIdp>,
    pub local_sign_in: bool,
    pub shared_token: bool,
    /// The console's database; a SQLite file in the test's directory when `None`.
    pub database_url: Option<String>,
    /// `[code_hosting]`: the API's URL (a recorded stand-in's) and the token its file holds
    /// (no file when `None`).
    pub code_host: Option<(String, Option<String>)>,
    /// The console's clock; the system's when `None`.
    pub clock: Option<Arc<dyn countersign_console_core::Clock>>,
    /// `[code_hosting]` (a stand-in's URL and a token file) and `[delivery_targets]`.
    pub code_hosting: Option<countersign_console_http::config::CodeHostingConfig>,
    pub delivery_targets: Option<countersign_console_core::work::delivery::Targets>,
    /// A listener bound beforehand (to know the console's port first), and the host name its
    /// URL uses (`localhost`, where passkeys need a domain); `127.0.0.1` and a fresh port when
    /// `None`.
    pub listener: Option<std::net::TcpListener>,
    pub host: Option<&'a str>,
    /// `[notifications]`, and the broker's webhook secret (`[broker] webhook_secret_file`).
    pub notifications: Option<countersign_console_http::notify::NotificationsConfig>,
    pub webhook_secret_file: Option<std::path::PathBuf>,
}

impl TestConsole {
    pub async fn start(o: ConsoleOptions<'_>) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let listener = match o.listener {
            Some(l) => {
                l.set_nonblocking(true)?;
                tokio::net::TcpListener::from_std(l)?
            }
            None => tokio::net::TcpListener::bind("127.0.0.1:0").await?,
        };
        let addr = listener.local_addr()?;
        let url = match o.host {
            Some(h) => format!("http://{h}:{}", addr.port()),
            None => format!("http://{addr}"),
        };
        let mut c = Config::new(&url);
        c.listen = addr;
        c.database_url = o.database_url.clone().unwrap_or_else(|| {
            format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("console.db").display()
            )
        });
        if let Some(b) = o.broker {
            c.broker = Some(BrokerConfig {
                url: b.url.clone(),
                console_token_file: Some(b.dir.path().join("console-token")),
                timeout_seconds: 5,
                webhook_secret_file: o.webhook_secret_file.clone(),
            });
        }
        c.notifications = o.notifications.clone();
        if let Some(i) = o.idp {
            let secret = dir.path().join("client-secret");
            std::fs::write(&secret, CLIENT_SECRET)?;
            c.oidc = Some(OidcConfig {
                issuer: i.issuer.clone(),
                client_id: CLIENT_ID.into(),
                client_secret_file: Some(secret),
                require_verified_email: true,
            });
            i.register_redirect(&format!("{url}/auth/callback"));
        }
        if o.shared_token {
            let p = dir.path().join("shared-token");
            std::fs::write(&p, SHARED_TOKEN)?;
            c.shared_token_file = Some(p);
        }
        if let Some((api_url, token)) = &o.code_host {
            let token_file = match token {
                Some(t) => {
                    let p = dir.path().join("code-host-token");
                    std::fs::write(&p, t)?;
                    Some(p)
                }
                None => None,
            };
            c.code_hosting = Some(countersign_console_http::config::CodeHostingConfig {
                api_url: api_url.clone(),
                token_file,
            });
        }
        c.local_sign_in = o.local_sign_in;
        if o.code_hosting.is_some() {
            c.code_hosting = o.code_hosting.clone();
        }
        c.delivery_targets = o.delivery_targets.clone();
        let clock = o
            .clock
            .clone()
            .unwrap_or_else(|| Arc::new(countersign_console_core::SystemClock));
        let state = countersign_console_http::build(&c, clock).await?;
        let running = countersign_console_http::serve(state.clone(), listener).await?;
        Ok(Self {
            url,
            dir,
            state,
            running: Some(running),
        })
    }

    /// Drops the documents the console keeps in memory (what a restart does).
    pub fn forget_loaded_documents(&self) {
        self.state.console.documents().forget_loaded();
    }

    pub async fn stop(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown(Duration::from_secs(2)).await;
        }
    }
}

/// A fresh PostgreSQL database on the test server, or `None` when no server is named
/// (`COUNTERSIGN_REQUIRE_POSTGRES=1` makes that a failure).
pub async fn fresh_postgres() -> anyhow::Result<Option<String>> {
    use sqlx::Connection;
    let Ok(url) = std::env::var("COUNTERSIGN_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").as_deref() != Ok("1"),
            "COUNTERSIGN_REQUIRE_POSTGRES=1 but COUNTERSIGN_TEST_POSTGRES_URL is unset"
        );
        println!("skipped: COUNTERSIGN_TEST_POSTGRES_URL is not set");
        return Ok(None);
    };
    let name = format!("cs_console_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&url).await?;
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await?;
    let base = url.split('?').next().unwrap_or(&url);
    let base = base.rsplit_once('/').map(|(b, _)| b).unwrap_or(base);
    Ok(Some(format!("{base}/{name}")))
}

/// Runs `body` on a fresh PostgreSQL database ([`fresh_postgres`]; nothing when none is
/// configured) and drops the database after it, whatever it answered. A test that panics
/// leaves its database behind for inspection.
pub async fn on_fresh_postgres<F, Fut>(body: F) -> anyhow::Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<()>>,
{
    let Some(db) = fresh_postgres().await? else {
        return Ok(());
    };
    let result = body(db.clone()).await;
    drop_postgres(&db).await;
    result
}

/// Drops a database [`fresh_postgres`] made, with what still holds connections to it (best
/// effort: a leftover one costs only disk on a test server).
pub async fn drop_postgres(db_url: &str) {
    use sqlx::Connection;
    let (Ok(admin), Some((_, name))) = (
        std::env::var("COUNTERSIGN_TEST_POSTGRES_URL"),
        db_url.rsplit_once('/'),
    ) else {
        return;
    };
    if !name.starts_with("cs_console_") {
        return;
    }
    if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
        let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
            .execute(&mut conn)
            .await;
    }
}

/// A caller: a signed-in person (cookie, CSRF) or an agent (bearer).
#[derive(Clone)]
pub struct Who {
    pub http: reqwest::Client,
    pub base: String,
    pub bearer: Option<String>,
    pub csrf: Option<String>,
}

impl Who {
    pub fn agent(console: &TestConsole, token: &str) -> Self {
        Who {
            http: reqwest::Client::new(),
            base: console.url.clone(),
            bearer: Some(token.into()),
            csrf: None,
        }
    }

    pub async fn person(console: &TestConsole, email: &str) -> anyhow::Result<Self> {
        let mut p = Person::new(console)?;
        let r = p.sign_in_local(email).await?;
        anyhow::ensure!(r.status == 303, "sign-in: {}", r.status);
        Ok(Who {
            http: p.http.clone(),
            base: console.url.clone(),
            bearer: None,
            csrf: Some(p.csrf.clone()),
        })
    }

    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<Resp> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("origin", &self.base);
        if let Some(t) = &self.bearer {
            req = req.bearer_auth(t);
        }
        if let Some(c) = &self.csrf {
            req = req.header("x-csrf-token", c);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        Resp::read(req.send().await?).await
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Resp> {
        self.call(Method::GET, path, None).await
    }
    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Resp> {
        self.call(Method::POST, path, Some(body)).await
    }
    pub async fn patch(&self, path: &str, body: Value) -> anyhow::Result<Resp> {
        self.call(Method::PATCH, path, Some(body)).await
    }
}

#[track_caller]
pub fn refused(r: &Resp, status: u16, code: &str) {
    assert_eq!((r.status, r.code()), (status, code), "{}", r.text);
}

pub async fn console_on(db: Option<String>) -> anyhow::Result<TestConsole> {
    TestConsole::start(ConsoleOptions {
        local_sign_in: true,
        shared_token: true,
        database_url: db,
        ..Default::default()
    })
    .await
}

/// Runs `body(db)` as two tests: `sqlite` (a SQLite file) and `postgres` (a fresh database on
/// the test server; skipped, or failed under `COUNTERSIGN_REQUIRE_POSTGRES=1`, when none is
/// named): `on_both_databases!(body, body_sqlite, body_postgres);`.
#[macro_export]
macro_rules! on_both_databases {
    ($body:ident, $sqlite:ident, $postgres:ident) => {
        #[tokio::test]
        async fn $sqlite() -> anyhow::Result<()> {
            $body(None).await
        }

        #[tokio::test]
        async fn $postgres() -> anyhow::Result<()> {
            $crate::common::on_fresh_postgres(|db| $body(Some(db))).await
        }
    };
}

/// Reads server-sent events from `GET /api/v1/events` until `n` events came or `secs` passed:
/// `(id, kind, envelope)` each.
pub async fn read_events(
    who: &Who,
    last_event_id: Option<i64>,
    query: &str,
    n: usize,
    secs: u64,
) -> anyhow::Result<Vec<(i64, String, Value)>> {
    let resp = open_events(who, last_event_id, query).await?;
    events_of(resp, n, secs).await
}

/// Opens `GET /api/v1/events`. When it answers, the stream's cursor is set: every event
/// committed from then on is on it (a live-only stream included).
pub async fn open_events(
    who: &Who,
    last_event_id: Option<i64>,
    query: &str,
) -> anyhow::Result<reqwest::Response> {
    let mut req = who.http.get(format!("{}/api/v1/events{query}", who.base));
    if let Some(t) = &who.bearer {
        req = req.bearer_auth(t);
    }
    if let Some(id) = last_event_id {
        req = req.header("last-event-id", id.to_string());
    }
    let resp = req.send().await?;
    anyhow::ensure!(resp.status() == 200, "events: {}", resp.status());
    let ct = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    anyhow::ensure!(ct.starts_with("text/event-stream"), "{ct}");
    Ok(resp)
}

/// Reads an open event stream until `n` events came or `secs` passed.
pub async fn events_of(
    mut resp: reqwest::Response,
    n: usize,
    secs: u64,
) -> anyhow::Result<Vec<(i64, String, Value)>> {
    let mut buf = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while out.len() < n {
        let chunk = match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(c))) => c,
            _ => break,
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut id, mut kind, mut data) = (None, None, None);
            for line in block.lines() {
                if let Some(v) = line
                    .strip_prefix("id: ")
                    .or_else(|| line.strip_prefix("id:"))
                {
                    id = v.trim().parse::<i64>().ok();
                } else if let Some(v) = line
                    .strip_prefix("event: ")
                    .or_else(|| line.strip_prefix("event:"))
                {
                    kind = Some(v.trim().to_owned());
                } else if let Some(v) = line
                    .strip_prefix("data: ")
                    .or_else(|| line.strip_prefix("data:"))
                {
                    data = serde_json::from_str::<Value>(v).ok();
                }
            }
            if let (Some(id), Some(kind), Some(data)) = (id, kind, data) {
                out.push((id, kind, data));
            }
        }
    }
    Ok(out)
}

/// An answer.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Resp {
    pub async fn read(r: reqwest::Response) -> anyhow::Result<Self> {
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await?;
        let json = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Self {
            status,
            headers,
            text,
            json,
        })
    }

    pub fn code(&self) -> &str {
        self.json["code"].as_str().unwrap_or("")
    }

    pub fn location(&self) -> Option<String> {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }

    pub fn set_cookies(&self) -> Vec<String> {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_owned))
            .collect()
    }
}

/// A person at a browser: a cookie jar, redirects followed by hand (so tests see each hop).
pub struct Person {
    pub http: reqwest::Client,
    pub base: String,
    pub csrf: String,
    /// Every answer of the last [`Person::follow`], in order.
    pub hops: Vec<Resp>,
}

impl Person {
    pub fn new(console: &TestConsole) -> anyhow::Result<Self> {
        Self::at(&console.url)
    }

    /// A person at the console at `url`.
    pub fn at(url: &str) -> anyhow::Result<Self> {
        Ok(Self {
            http: reqwest::Client::builder()
                .cookie_store(true)
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
            base: url.to_owned(),
            csrf: String::new(),
            hops: Vec::new(),
        })
    }

    fn abs(&self, path: &str) -> String {
        if path.starts_with("http") {
            path.to_owned()
        } else {
            format!("{}{path}", self.base)
        }
    }

    /// GETs `path` and follows redirects; answers the last answer.
    pub async fn follow(&mut self, path: &str) -> anyhow::Result<&Resp> {
        self.hops.clear();
        let mut url = self.abs(path);
        for _ in 0..10 {
            let r = Resp::read(self.http.get(&url).send().await?).await?;
            let next = (300..400)
                .contains(&r.status)
                .then(|| r.location())
                .flatten();
            self.hops.push(r);
            match next {
                Some(l) if l.starts_with("http") => url = l,
                Some(l) => {
                    let base = url::Url::parse(&url)?;
                    url = base.join(&l)?.to_string();
                }
                None => break,
            }
        }
        self.hops.last().context("no answer")
    }

    /// Signs in through the test OpenID provider as `email`.
    pub async fn sign_in_oidc(&mut self, idp: &idp::TestIdp, email: &str) -> anyhow::Result<()> {
        idp.set_next_login(email);
        let last = self.follow("/auth/oidc?next=/").await?;
        if last.status != 200 || !last.text.contains("csrf-token") {
            bail!("sign-in ended at {} {}", last.status, last.text);
        }
        self.csrf = scrape_csrf(&last.text).context("csrf meta")?;
        Ok(())
    }

    /// Dev mode's local sign-in.
    pub async fn sign_in_local(&mut self, email: &str) -> anyhow::Result<Resp> {
        let page = self.follow("/sign-in").await?;
        let token = scrape_field(&page.text, "csrf").context("form token")?;
        let r = Resp::read(
            self.http
                .post(self.abs("/auth/local"))
                .header("origin", &self.base)
                .form(&[("email", email), ("csrf", &token), ("next", "/")])
                .send()
                .await?,
        )
        .await?;
        if r.status == 303 {
            let home = self.follow("/").await?;
            if let Some(c) = scrape_csrf(&home.text) {
                self.csrf = c;
            }
        }
        Ok(r)
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Resp> {
        Resp::read(self.http.get(self.abs(path)).send().await?).await
    }

    /// A state change as the pages' script makes it: same origin, CSRF header.
    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Resp> {
        Resp::read(
            self.http
                .post(self.abs(path))
                .header("origin", &self.base)
                .header("x-csrf-token", &self.csrf)
                .json(&body)
                .send()
                .await?,
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Resp> {
        Resp::read(
            self.http
                .delete(self.abs(path))
                .header("origin", &self.base)
                .header("x-csrf-token", &self.csrf)
                .send()
                .await?,
        )
        .await
    }
}

pub fn scrape_csrf(html: &str) -> Option<String> {
    let i = html.find("name=\"csrf-token\" content=\"")? + "name=\"csrf-token\" content=\"".len();
    Some(html[i..].split('"').next()?.to_owned())
}

pub fn scrape_field(html: &str, name: &str) -> Option<String> {
    let pat = format!("name=\"{name}\" value=\"");
    let i = html.find(&pat)? + pat.len();
    Some(html[i..].split('"').next()?.to_owned())
}

/// An agent calling the console with a bearer token.
pub async fn bearer_get(console: &TestConsole, token: &str, path: &str) -> anyhow::Result<Resp> {
    Resp::read(
        reqwest::Client::new()
            .get(format!("{}{path}", console.url))
            .bearer_auth(token)
            .send()
            .await?,
    )
    .await
}

pub async fn bearer_post(
    console: &TestConsole,
    token: &str,
    path: &str,
    body: Value,
) -> anyhow::Result<Resp> {
    Resp::read(
        reqwest::Client::new()
            .post(format!("{}{path}", console.url))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await?,
    )
    .await
}

// ----- the broker protocol -----

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

async fn broker_call(
    broker: &TestBroker,
    method: reqwest::Method,
    path: &str,
    proof: Option<String>,
    body: Option<Vec<u8>>,
) -> anyhow::Result<Resp> {
    let mut req = reqwest::Client::new().request(method, format!("{}{path}", broker.url));
    if let Some(p) = proof {
        req = req.header("proof", p);
    }
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b);
    }
    Resp::read(req.send().await?).await
}

fn proof(
    key: &SigningKey,
    typ: &str,
    kid: &str,
    base: &str,
    method: &str,
    path: &str,
    body: Option<&[u8]>,
) -> anyhow::Result<String> {
    Ok(jws::sign(
        key,
        &Header::with_kid(typ, kid),
        &ProofClaims {
            htm: method.into(),
            htu: claims::htu(base, path),
            iat: now(),
            jti: claims::new_jti()?,
            bh: body.map(claims::body_hash),
        },
    )?)
}

/// A machine login under way: the machine shows `code`.
pub struct PendingLogin {
    pub key: SigningKey,
    pub code: String,
    pub pending_id: String,
}

/// Starts a person's machine login for `host`.
pub async fn start_machine_login(
    broker: &TestBroker,
    person: &str,
    host: &str,
) -> anyhow::Result<PendingLogin> {
    let key = SigningKey::generate()?;
    let object = jws::sign(
        &key,
        &Header::with_jwk(claims::TYP_MACHINE_LOGIN, key.public_jwk()),
        &MachineLoginClaims {
            iat: now(),
            exp: now() + 300,
            jti: claims::new_jti()?,
            login_hint: person.into(),
            host: host.into(),
            authorization_details: None,
        },
    )?;
    let r = broker_call(
        broker,
        reqwest::Method::POST,
        "/v1/launcher-credentials",
        None,
        Some(serde_json::to_vec(&json!({ "request": object }))?),
    )
    .await?;
    if r.status != 202 {
        bail!("login start: {} {}", r.status, r.text);
    }
    Ok(PendingLogin {
        key,
        code: r.json["code"].as_str().context("code")?.to_owned(),
        pending_id: r.json["pending_id"]
            .as_str()
            .context("pending_id")?
            .to_owned(),
    })
}

impl PendingLogin {
    pub async fn poll(&self, broker: &TestBroker) -> anyhow::Result<Value> {
        let r = broker_call(
            broker,
            reqwest::Method::GET,
            &format!("/v1/launcher-credentials/{}", self.pending_id),
            None,
            None,
        )
        .await?;
        Ok(r.json)
    }

    /// The machine once its login was approved.
    pub async fn machine(self, broker: &TestBroker) -> anyhow::Result<Machine> {
        let p = self.poll(broker).await?;
        if p["state"] != "issued" {
            bail!("machine login not issued: {p}");
        }
        Ok(Machine {
            key: self.key,
            credential_id: p["credential_id"]
                .as_str()
                .context("credential_id")?
                .to_owned(),
        })
    }
}

/// A logged-in machine.
pub struct Machine {
    pub key: SigningKey,
    pub credential_id: String,
}

impl Machine {
    pub async fn enroll(&self, broker: &TestBroker, runtime_id: &str) -> anyhow::Result<Session> {
        let key = SigningKey::generate()?;
        let body = serde_json::to_vec(&json!({
            "kind": "session",
            "runtime_id": runtime_id,
            "thumbprint": key.thumbprint(),
            "jwk": key.public_jwk(),
            // A session id holds no `/` (console-protocol §4.1): a runtime id's `/` becomes `-`.
            "session_id": format!("notify-{}", runtime_id.replace('/', "-")),
        }))?;
        let p = proof(
            &self.key,
            claims::TYP_LAUNCHER_PROOF,
            &self.credential_id,
            &broker.url,
            "POST",
            "/v1/enrollments",
            Some(&body),
        )?;
        let r = broker_call(
            broker,
            reqwest::Method::POST,
            "/v1/enrollments",
            Some(p),
            Some(body),
        )
        .await?;
        if r.status != 201 {
            bail!("enroll: {} {}", r.status, r.text);
        }
        Ok(Session {
            key,
            enrollment_id: r.json["enrollment_id"]
                .as_str()
                .context("enrollment_id")?
                .to_owned(),
        })
    }
}

/// An enrolled agent session.
pub struct Session {
    pub key: SigningKey,
    pub enrollment_id: String,
}

impl Session {
    async fn call(
        &self,
        broker: &TestBroker,
        method: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<Resp> {
        let p = proof(
            &self.key,
            claims::TYP_SESSION_PROOF,
            &self.enrollment_id,
            &broker.url,
            method,
            path,
            body.as_deref(),
        )?;
        broker_call(broker, method.parse()?, path, Some(p), body).await
    }

    /// Requests secrets; answers the broker's request.
    pub async fn request(
        &self,
        broker: &TestBroker,
        names: &[&str],
        reason: &str,
        lifetime: Option<u64>,
    ) -> anyhow::Result<Value> {
        let object = jws::sign(
            &self.key,
            &Header::with_kid(claims::TYP_SECRET_REQUEST, &self.enrollment_id),
            &SecretRequestClaims {
                iat: now(),
                exp: now() + 300,
                jti: claims::new_jti()?,
                aud: broker.url.clone(),
                authorization_details: names
                    .iter()
                    .map(|n| AuthorizationDetail::agent_secret(n))
                    .collect(),
                reason: reason.into(),
                lifetime_seconds: lifetime,
            },
        )?;
        let r = self
            .call(
                broker,
                "POST",
                "/v1/requests",
                Some(serde_json::to_vec(&json!({ "request": object }))?),
            )
            .await?;
        if r.status != 200 {
            bail!("request: {} {}", r.status, r.text);
        }
        Ok(r.json)
    }

    pub async fn get_request(&self, broker: &TestBroker, id: &str) -> anyhow::Result<Value> {
        Ok(self
            .call(broker, "GET", &format!("/v1/requests/{id}"), None)
            .await?
            .json)
    }

    pub async fn values(&self, broker: &TestBroker, grant_id: &str) -> anyhow::Result<Resp> {
        self.call(
            broker,
            "POST",
            &format!("/v1/grants/{grant_id}/values"),
            None,
        )
        .await
    }
}

/// Polls `f` until it answers `Some`, up to `secs` seconds.
pub async fn eventually<T, F, Fut>(secs: u64, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let until = std::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if std::time::Instant::now() > until {
            bail!("condition not met within {secs} s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// One part of a multipart/form-data body.
pub struct Part<'a> {
    pub name: &'a str,
    pub filename: Option<&'a str>,
    pub content_type: Option<&'a str>,
    pub bytes: &'a [u8],
}

impl Who {
    /// POSTs a multipart/form-data body (RFC 7578) of `parts`.
    pub async fn multipart(&self, path: &str, parts: &[Part<'_>]) -> anyhow::Result<Resp> {
        let boundary = "countersign-test-boundary-7c1e";
        let mut body: Vec<u8> = Vec::new();
        for p in parts {
            body.extend_from_slice(format!("--{boundary}\r\n").as_bytes());
            let mut disposition = format!("Content-Disposition: form-data; name=\"{}\"", p.name);
            if let Some(f) = p.filename {
                disposition.push_str(&format!("; filename=\"{f}\""));
            }
            body.extend_from_slice(disposition.as_bytes());
            body.extend_from_slice(b"\r\n");
            if let Some(t) = p.content_type {
                body.extend_from_slice(format!("Content-Type: {t}\r\n").as_bytes());
            }
            body.extend_from_slice(b"\r\n");
            body.extend_from_slice(p.bytes);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        self.raw(
            Method::POST,
            path,
            &format!("multipart/form-data; boundary={boundary}"),
            body,
        )
        .await
    }

    /// A request with a body of any type.
    pub async fn raw(
        &self,
        method: Method,
        path: &str,
        content_type: &str,
        body: Vec<u8>,
    ) -> anyhow::Result<Resp> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("origin", &self.base)
            .header("content-type", content_type)
            .body(body);
        if let Some(t) = &self.bearer {
            req = req.bearer_auth(t);
        }
        if let Some(c) = &self.csrf {
            req = req.header("x-csrf-token", c);
        }
        Resp::read(req.send().await?).await
    }

    /// A GET answering the raw bytes and headers (downloads).
    pub async fn bytes(&self, path: &str) -> anyhow::Result<(u16, HeaderMap, Vec<u8>)> {
        let mut req = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = &self.bearer {
            req = req.bearer_auth(t);
        }
        let r = req.send().await?;
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        Ok((status, headers, r.bytes().await?.to_vec()))
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Resp> {
        self.call(Method::DELETE, path, None).await
    }
}

// ----- messages (issue 14) -----

impl TestConsole {
    /// A console on `clock` (tests move a `ManualClock`), its configuration adjusted by
    /// `tweak` before it starts.
    pub async fn start_with(
        o: ConsoleOptions<'_>,
        clock: Arc<dyn countersign_console_core::Clock>,
        tweak: impl FnOnce(&mut Config, &std::path::Path),
    ) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let url = format!("http://{addr}");
        let mut c = Config::new(&url);
        c.listen = addr;
        c.database_url = o.database_url.clone().unwrap_or_else(|| {
            format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("console.db").display()
            )
        });
        if o.shared_token {
            let p = dir.path().join("shared-token");
            std::fs::write(&p, SHARED_TOKEN)?;
            c.shared_token_file = Some(p);
        }
        c.local_sign_in = o.local_sign_in;
        tweak(&mut c, dir.path());
        let state = countersign_console_http::build(&c, clock).await?;
        let running = countersign_console_http::serve(state.clone(), listener).await?;
        Ok(Self {
            url,
            dir,
            state,
            running: Some(running),
        })
    }
}

/// A console with local sign-in and the shared token on `clock`.
pub async fn console_with_clock(
    db: Option<String>,
    clock: Arc<dyn countersign_console_core::Clock>,
) -> anyhow::Result<TestConsole> {
    TestConsole::start_with(
        ConsoleOptions {
            local_sign_in: true,
            shared_token: true,
            database_url: db,
            ..Default::default()
        },
        clock,
        |_, _| {},
    )
    .await
}

/// Reads `n` events from `/api/v1/events` (from `since`), each `(id, kind, data)`, giving up
/// after `secs`.
pub async fn events_since(
    who: &Who,
    since: i64,
    n: usize,
    secs: u64,
) -> anyhow::Result<Vec<(i64, String, Value)>> {
    let mut req = who
        .http
        .get(format!("{}/api/v1/events?since={since}", who.base));
    if let Some(t) = &who.bearer {
        req = req.bearer_auth(t);
    }
    let mut resp = req.send().await?;
    anyhow::ensure!(resp.status() == 200, "events: {}", resp.status());
    let mut buf = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while out.len() < n {
        let chunk = match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(c))) => c,
            _ => break,
        };
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut id, mut kind, mut data) = (None, None, None);
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = v.trim().parse::<i64>().ok();
                } else if let Some(v) = line.strip_prefix("event:") {
                    kind = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = serde_json::from_str::<Value>(v.trim()).ok();
                }
            }
            if let (Some(id), Some(kind), Some(data)) = (id, kind, data) {
                out.push((id, kind, data));
            }
        }
    }
    Ok(out)
}

impl TestBroker {
    /// A broker already running at `url` (dev mode's), for the protocol helpers.
    pub fn at(url: &str) -> anyhow::Result<Self> {
        Ok(Self {
            url: url.to_owned(),
            values: HashMap::new(),
            running: None,
            dir: tempfile::tempdir()?,
        })
    }
}
