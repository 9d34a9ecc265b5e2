//! Ends no replica forgets: the real `countersign-broker` binary, on SQLite and on PostgreSQL,
//! stopped by SIGTERM and by SIGKILL right after each kind of end (a grant's revocation, a
//! session's end, a machine login's revocation, a withholding, an expiry), then started on a
//! copy of its database taken before the end. Nothing ended comes back: the broker answers 503
//! with an `audit log:` error (its state file, `fsync`ed before the end was answered, remembers
//! a head the database no longer holds) until an operator runs `audit accept-head`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

mod common;

use anyhow::{Context, bail};
use countersign_proto::claims::{
    self, AuthorizationDetail, MachineLoginClaims, ProofClaims, SecretRequestClaims,
};
use countersign_proto::jws::{self, Header};
use countersign_proto::{SigningKey, b64};
use reqwest::Method as M;
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

type R = anyhow::Result<()>;

const CONSOLE: &str = "restore-test-console-token-0123456789";
const ADA: &str = "ada@example.com";

struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Clone, Copy, Debug)]
enum Stop {
    Term,
    Kill,
}

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
            .env("RUST_LOG", "info")
            .env_remove("COUNTERSIGN_CONSOLE_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .context("start countersign-broker")?;
        Ok(Self { child })
    }

    fn stop(mut self, how: Stop) -> anyhow::Result<()> {
        match how {
            Stop::Kill => self.child.kill()?,
            Stop::Term => {
                let pid = self.child.id().to_string();
                let ok = Command::new("kill")
                    .args(["-TERM", &pid])
                    .status()?
                    .success();
                if !ok {
                    bail!("kill -TERM {pid} failed");
                }
            }
        }
        let status = self.child.wait()?;
        if matches!(how, Stop::Term) && !status.success() {
            bail!("the broker did not stop cleanly on SIGTERM: {status}");
        }
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

fn s(v: &Value, f: &str) -> String {
    v[f].as_str().unwrap_or_default().to_owned()
}

struct Client {
    base: String,
}

impl Client {
    async fn send(
        &self,
        method: M,
        path: &str,
        headers: &[(&str, String)],
        body: Option<&Value>,
    ) -> anyhow::Result<(u16, Value)> {
        // No pooled connection outlives a call: SIGTERM's graceful shutdown is not kept waiting.
        let http = reqwest::Client::builder()
            .no_proxy()
            .pool_max_idle_per_host(0)
            .timeout(Duration::from_secs(20))
            .build()?;
        let mut rb = http.request(method, format!("{}{path}", self.base));
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
        method: M,
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

    fn proof(
        &self,
        typ: &str,
        kid: &str,
        key: &SigningKey,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> String {
        let c = ProofClaims {
            htm: method.into(),
            htu: claims::htu(&self.base, path),
            iat: now(),
            jti: jti(),
            bh: body.map(|b| claims::body_hash(b.to_string().as_bytes())),
        };
        jws::sign(key, &Header::with_kid(typ, kid), &c).unwrap_or_default()
    }

    async fn wait_healthy(&self) -> anyhow::Result<()> {
        for _ in 0..400 {
            if let Ok((200, _)) = self.send(M::GET, "/healthz", &[], None).await {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        bail!("the broker did not become healthy")
    }
}

/// A person's machine, logged in and approved by the console.
struct Machine {
    key: SigningKey,
    credential: String,
}

/// A session enrolled under a machine.
struct Session {
    key: SigningKey,
    enrollment: String,
}

fn bearer() -> [(&'static str, String); 1] {
    [("authorization", format!("Bearer {CONSOLE}"))]
}

async fn machine(c: &Client, host: &str) -> anyhow::Result<Machine> {
    let key = SigningKey::generate()?;
    let login = jws::sign(
        &key,
        &Header::with_jwk(claims::TYP_MACHINE_LOGIN, key.public_jwk()),
        &MachineLoginClaims {
            iat: now(),
            exp: now() + 120,
            jti: jti(),
            login_hint: ADA.into(),
            host: host.into(),
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
            &bearer(),
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
            &bearer(),
            Some(&json!({ "approver": ADA, "code": code })),
        )
        .await?;
    Ok(Machine {
        key,
        credential: s(&approved, "credential_id"),
    })
}

/// Enrolls a session under `m`: the answer's status and body.
async fn enroll(
    c: &Client,
    m: &Machine,
    runtime: &str,
) -> anyhow::Result<(u16, Value, SigningKey)> {
    let key = SigningKey::generate()?;
    let body = json!({
        "kind": "session",
        "runtime_id": runtime,
        "thumbprint": key.thumbprint(),
        "jwk": key.public_jwk(),
    });
    let proof = c.proof(
        claims::TYP_LAUNCHER_PROOF,
        &m.credential,
        &m.key,
        "POST",
        "/v1/enrollments",
        Some(&body),
    );
    let (status, v) = c
        .send(M::POST, "/v1/enrollments", &[("proof", proof)], Some(&body))
        .await?;
    Ok((status, v, key))
}

async fn session(c: &Client, m: &Machine, runtime: &str) -> anyhow::Result<Session> {
    let (status, v, key) = enroll(c, m, runtime).await?;
    if status != 201 {
        bail!("enroll: {status} {v}");
    }
    Ok(Session {
        key,
        enrollment: s(&v, "enrollment_id"),
    })
}

/// An automatic grant of `AUTO_SECRET` to `se`, lasting `lifetime` seconds (or the session).
async fn grant(c: &Client, se: &Session, lifetime: Option<u64>) -> anyhow::Result<String> {
    let request = jws::sign(
        &se.key,
        &Header::with_kid(claims::TYP_SECRET_REQUEST, &se.enrollment),
        &SecretRequestClaims {
            iat: now(),
            exp: now() + 120,
            jti: jti(),
            aud: c.base.clone(),
            authorization_details: vec![AuthorizationDetail::agent_secret("AUTO_SECRET")],
            reason: "restore test".into(),
            lifetime_seconds: lifetime,
        },
    )?;
    let body = json!({ "request": request, "session_id": null });
    let proof = c.proof(
        claims::TYP_SESSION_PROOF,
        &se.enrollment,
        &se.key,
        "POST",
        "/v1/requests",
        Some(&body),
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
    if s(&made, "state") != "granted" {
        bail!("not granted: {made}");
    }
    Ok(s(&made, "grant_id"))
}

/// Asks for `grant`'s values: the status and body.
async fn values(c: &Client, se: &Session, grant: &str) -> anyhow::Result<(u16, Value)> {
    let path = format!("/v1/grants/{grant}/values");
    let proof = c.proof(
        claims::TYP_SESSION_PROOF,
        &se.enrollment,
        &se.key,
        "POST",
        &path,
        None,
    );
    c.send(M::POST, &path, &[("proof", proof)], None).await
}

/// The session revokes its grant. It runs right after a graceful restart: the previous
/// process released its proof horizon at shutdown (`exclusive.rs`), so nothing honest is refused.
async fn revoke(c: &Client, se: &Session, grant: &str) -> R {
    let path = format!("/v1/grants/{grant}/revoke");
    let proof = c.proof(
        claims::TYP_SESSION_PROOF,
        &se.enrollment,
        &se.key,
        "POST",
        &path,
        None,
    );
    c.expect(200, M::POST, &path, &[("proof", proof)], None)
        .await?;
    Ok(())
}

/// A deployment under test: its files, its database (SQLite file or PostgreSQL database).
struct Deployment {
    dir: Dir,
    config: PathBuf,
    log: PathBuf,
    base: String,
    db: Db,
}

enum Db {
    Sqlite(PathBuf),
    Postgres { admin: String, name: String },
}

impl Deployment {
    async fn new(postgres: bool) -> anyhow::Result<Option<Self>> {
        let dir = Dir(std::env::temp_dir().join(format!(
            "countersign-restore-{}",
            uuid::Uuid::new_v4().simple()
        )));
        std::fs::create_dir_all(&dir.0)?;
        let p = |f: &str| dir.0.join(f);
        let db = if postgres {
            let Ok(admin) = std::env::var("COUNTERSIGN_TEST_POSTGRES_URL") else {
                if std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
                    bail!(
                        "COUNTERSIGN_REQUIRE_POSTGRES=1 but COUNTERSIGN_TEST_POSTGRES_URL is unset"
                    );
                }
                eprintln!("skipped: COUNTERSIGN_TEST_POSTGRES_URL is unset");
                return Ok(None);
            };
            let name = format!("cs_restore_{}", uuid::Uuid::new_v4().simple());
            pg(&admin, &format!("CREATE DATABASE {name}")).await?;
            Db::Postgres { admin, name }
        } else {
            Db::Sqlite(p("broker.db"))
        };
        std::fs::write(p("seal.key"), b64::encode(&[7u8; 32]))?;
        std::fs::write(p("console-token"), CONSOLE)?;
        std::fs::write(
            p("secrets.toml"),
            "prefix = \"agents/\"\nkey = \"local\"\n\n[[secret]]\nname = \"agents/auto-secret\"\nowner = \"ops@example.com\"\ntier = \"automatic\"\nvalue = \"v\"\n",
        )?;
        let port = free_port()?;
        let base = format!("http://127.0.0.1:{port}");
        let url = match &db {
            Db::Sqlite(f) => format!("sqlite://{}?mode=rwc", f.display()),
            Db::Postgres { admin, name } => with_database(admin, name),
        };
        std::fs::write(
            p("broker.toml"),
            format!(
                r#"listen = "127.0.0.1:{port}"
public_url = "{base}"
database_url = {url:?}
seal_key_file = {seal:?}
console_token_file = {console:?}
audit_state_file = {state:?}

[store]
kind = "local"
path = {store:?}
"#,
                seal = p("seal.key").display().to_string(),
                console = p("console-token").display().to_string(),
                state = p("state/audit-state.json").display().to_string(),
                store = p("secrets.toml").display().to_string(),
            ),
        )?;
        Ok(Some(Self {
            config: p("broker.toml"),
            log: p("broker.log"),
            base,
            db,
            dir,
        }))
    }

    fn client(&self) -> Client {
        Client {
            base: self.base.clone(),
        }
    }

    async fn start(&self) -> anyhow::Result<Broker> {
        let b = Broker::spawn(&self.config, &self.log)?;
        if let Err(e) = self.client().wait_healthy().await {
            bail!(
                "{e}; log:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
        Ok(b)
    }

    /// A copy of the database as it is now (the broker stopped).
    async fn snapshot(&self, tag: &str) -> R {
        match &self.db {
            Db::Sqlite(f) => {
                for ext in ["", "-wal", "-shm"] {
                    let from = PathBuf::from(format!("{}{ext}", f.display()));
                    let to = self.dir.0.join(format!("{tag}.db{ext}"));
                    let _ = std::fs::remove_file(&to);
                    if from.exists() {
                        std::fs::copy(&from, &to)?;
                    }
                }
            }
            Db::Postgres { admin, name } => {
                pg(admin, &format!("DROP DATABASE IF EXISTS {name}_{tag}")).await?;
                pg(
                    admin,
                    &format!("CREATE DATABASE {name}_{tag} TEMPLATE {name}"),
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Puts the copy back in place of the database (the broker stopped).
    async fn restore(&self, tag: &str) -> R {
        match &self.db {
            Db::Sqlite(f) => {
                for ext in ["", "-wal", "-shm"] {
                    let to = PathBuf::from(format!("{}{ext}", f.display()));
                    let from = self.dir.0.join(format!("{tag}.db{ext}"));
                    let _ = std::fs::remove_file(&to);
                    if from.exists() {
                        std::fs::copy(&from, &to)?;
                    }
                }
            }
            Db::Postgres { admin, name } => {
                pg(admin, &format!("DROP DATABASE {name}")).await?;
                pg(
                    admin,
                    &format!("CREATE DATABASE {name} TEMPLATE {name}_{tag}"),
                )
                .await?;
            }
        }
        Ok(())
    }

    fn cli(&self, args: &[&str]) -> anyhow::Result<std::process::Output> {
        Ok(Command::new(env!("CARGO_BIN_EXE_countersign-broker"))
            .args(args)
            .arg("--config")
            .arg(&self.config)
            .env_remove("COUNTERSIGN_CONFIG")
            .output()?)
    }

    async fn drop_databases(&self, tags: &[&str]) {
        if let Db::Postgres { admin, name } = &self.db {
            for t in tags {
                let _ = pg(admin, &format!("DROP DATABASE IF EXISTS {name}_{t}")).await;
            }
            let _ = pg(admin, &format!("DROP DATABASE IF EXISTS {name}")).await;
        }
    }
}

fn with_database(admin: &str, name: &str) -> String {
    let (head, _) = admin.rsplit_once('/').unwrap_or((admin, ""));
    format!("{head}/{name}")
}

/// Runs `sql` on the admin database; retried for a few seconds while a stopped broker's
/// connections are still closing (a database in use cannot be copied or dropped).
async fn pg(admin: &str, sql: &str) -> R {
    sqlx::any::install_default_drivers();
    let mut last = None;
    for _ in 0..100 {
        let mut c = sqlx::AnyConnection::connect(admin).await?;
        let r = c.execute(sql).await;
        c.close().await?;
        match r {
            Ok(_) => return Ok(()),
            Err(e) if e.to_string().contains("being accessed by other users") => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    bail!("{sql}: {last:?}")
}

/// The ends, each with what must not come back.
#[derive(Clone, Copy, Debug)]
enum End {
    Revocation,
    SessionEnded,
    MachineLoginRevocation,
    Withholding,
    Expiry,
}

const ENDS: [End; 5] = [
    End::Revocation,
    End::SessionEnded,
    End::MachineLoginRevocation,
    End::Withholding,
    End::Expiry,
];

/// 503 with an `audit log:` error.
fn closed(status: u16, body: &Value) -> bool {
    status == 503 && s(body, "error").starts_with("audit log:")
}

async fn scenario(postgres: bool, stop: Stop) -> R {
    let Some(d) = Deployment::new(postgres).await? else {
        return Ok(());
    };
    let c = d.client();
    let mut tags = Vec::new();
    let result = async {
        for (i, end) in ENDS.into_iter().enumerate() {
            // What this end acts on, made and then copied with the broker stopped.
            let b = d.start().await?;
            let m = machine(&c, &format!("host-{i}")).await?;
            let se = session(&c, &m, &format!("rt-{i}")).await?;
            let lifetime = matches!(end, End::Expiry).then_some(6);
            let g = grant(&c, &se, lifetime).await?;
            let (status, v) = values(&c, &se, &g).await?;
            if status != 200 {
                bail!("{end:?}: values before the end: {status} {v}");
            }
            b.stop(Stop::Term)?;
            let tag = format!("before{i}");
            d.snapshot(&tag).await?;
            tags.push(tag.clone());

            // The end, then the broker stops at once.
            let b = d.start().await?;
            match end {
                End::Revocation => {
                    revoke(&c, &se, &g).await?;
                }
                End::SessionEnded => {
                    let path = format!("/v1/enrollments/{}", se.enrollment);
                    let proof = c.proof(
                        claims::TYP_LAUNCHER_PROOF,
                        &m.credential,
                        &m.key,
                        "DELETE",
                        &path,
                        None,
                    );
                    c.expect(204, M::DELETE, &path, &[("proof", proof)], None)
                        .await?;
                }
                End::MachineLoginRevocation => {
                    let path = format!(
                        "/v1/launcher-credentials/{}/revoke-by-approver",
                        m.credential
                    );
                    c.expect(
                        200,
                        M::POST,
                        &path,
                        &bearer(),
                        Some(&json!({ "approver": ADA })),
                    )
                    .await?;
                }
                End::Withholding => {
                    let path = format!("/v1/operator/grants/{g}/revoke");
                    let proof = c.proof(
                        claims::TYP_LAUNCHER_PROOF,
                        &m.credential,
                        &m.key,
                        "POST",
                        &path,
                        None,
                    );
                    c.expect(200, M::POST, &path, &[("proof", proof)], None)
                        .await?;
                }
                End::Expiry => {
                    // The sweep writes the expiry (every 2 s): wait until the values are refused
                    // and the state file has moved past the copy's head.
                    let before = std::fs::read_to_string(d.dir.0.join("state/audit-state.json"))?;
                    let mut written = false;
                    for _ in 0..400 {
                        let now = std::fs::read_to_string(d.dir.0.join("state/audit-state.json"))?;
                        let (status, _) = values(&c, &se, &g).await?;
                        if status == 403 && now != before {
                            written = true;
                            break;
                        }
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    if !written {
                        bail!("the expiry was not written");
                    }
                }
            }
            b.stop(stop)?;

            // The copy from before the end comes back; the broker starts on it.
            d.restore(&tag).await?;
            let b = d.start().await?;
            let (status, v) = values(&c, &se, &g).await?;
            if !closed(status, &v) {
                bail!("{end:?} ({stop:?}): values after the restore: {status} {v}");
            }
            if matches!(end, End::MachineLoginRevocation | End::SessionEnded) {
                let (status, v, _) = enroll(&c, &m, &format!("rt-again-{i}")).await?;
                if !closed(status, &v) {
                    bail!("{end:?} ({stop:?}): enroll after the restore: {status} {v}");
                }
            }
            // Still closed after a whole round of the follower (its rounds do not reopen it).
            common::whole_pass(&d.base, "broker.audit").await?;
            let (status, v) = values(&c, &se, &g).await?;
            if !closed(status, &v) {
                bail!("{end:?} ({stop:?}): values a round later: {status} {v}");
            }
            b.stop(Stop::Term)?;
            // Until an operator acts.
            let out = d.cli(&["audit", "accept-head"])?;
            if !out.status.success() {
                bail!("accept-head: {out:?}");
            }
            let b = d.start().await?;
            let (status, v) = values(&c, &se, &g).await?;
            if closed(status, &v) {
                bail!("{end:?}: still closed after accept-head: {v}");
            }
            b.stop(Stop::Term)?;
        }
        Ok(())
    }
    .await;
    let tag_refs: Vec<&str> = tags.iter().map(|t| t.as_str()).collect();
    d.drop_databases(&tag_refs).await;
    if let Err(e) = result {
        bail!(
            "{e:#}\nbroker log:\n{}",
            std::fs::read_to_string(&d.log).unwrap_or_default()
        );
    }
    Ok(())
}

#[tokio::test]
async fn sqlite_sigterm_after_each_end() -> R {
    scenario(false, Stop::Term).await
}

#[tokio::test]
async fn sqlite_sigkill_after_each_end() -> R {
    scenario(false, Stop::Kill).await
}

#[tokio::test]
async fn postgres_sigterm_after_each_end() -> R {
    scenario(true, Stop::Term).await
}

#[tokio::test]
async fn postgres_sigkill_after_each_end() -> R {
    scenario(true, Stop::Kill).await
}

/// Runs `audit verify` on a SQLite file with the test's seal key (and a state file).
fn verify(d: &Deployment, db: &Path, state: Option<&Path>) -> anyhow::Result<std::process::Output> {
    let url = format!("sqlite://{}?mode=rw", db.display());
    let key = d.dir.0.join("seal.key");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_countersign-broker"));
    cmd.args(["audit", "verify", "--database-url", &url, "--seal-key-file"])
        .arg(&key)
        .env_remove("COUNTERSIGN_CONFIG");
    if let Some(s) = state {
        cmd.arg("--state-file").arg(s);
    }
    Ok(cmd.output()?)
}

/// `audit verify` names each kind of tampering: an edited record, decision, grant, credential
/// and enrollment, and a deleted tail (given the state file); an untampered copy passes.
#[tokio::test]
async fn verify_names_each_tampering() -> R {
    let Some(d) = Deployment::new(false).await? else {
        return Ok(());
    };
    let c = d.client();
    let b = d.start().await?;
    let m = machine(&c, "laptop").await?;
    let se = session(&c, &m, "rt-verify").await?;
    let g = grant(&c, &se, None).await?;
    let (status, _) = values(&c, &se, &g).await?;
    assert_eq!(status, 200);
    b.stop(Stop::Term)?;
    let Db::Sqlite(db) = &d.db else {
        bail!("sqlite")
    };
    let state = d.dir.0.join("state/audit-state.json");

    let ok = verify(&d, db, Some(&state))?;
    assert!(ok.status.success(), "an untampered copy passes: {ok:?}");
    assert!(
        String::from_utf8_lossy(&ok.stdout).starts_with("ok: "),
        "{ok:?}"
    );

    let record_id = {
        sqlx::any::install_default_drivers();
        let url = format!("sqlite://{}?mode=rw", db.display());
        let mut conn = sqlx::AnyConnection::connect(&url).await?;
        let row: (String,) = sqlx::query_as("SELECT id FROM records LIMIT 1")
            .fetch_one(&mut conn)
            .await?;
        conn.close().await?;
        row.0
    };
    let cases: Vec<(&str, String, String)> = vec![
        (
            "record",
            "UPDATE records SET text = text || ' '".into(),
            format!("records {record_id}: text"),
        ),
        (
            "decision",
            "UPDATE records SET decided = json_set(decided, '$.by', 'mallory@example.com')".into(),
            format!("records {record_id}: decision seal"),
        ),
        (
            "grant",
            "UPDATE grants SET doc = json_set(doc, '$.rules_version', 'forged')".into(),
            format!("grants {g}: seal"),
        ),
        (
            "credential",
            "UPDATE credentials SET doc = json_set(doc, '$.approved_by', 'mallory@example.com')"
                .into(),
            format!("credentials {}: seal", m.credential),
        ),
        (
            "enrollment",
            "UPDATE enrollments SET doc = json_set(doc, '$.runtime_id', 'rt-forged')".into(),
            format!("enrollments {}: seal", se.enrollment),
        ),
        (
            "tail",
            "DELETE FROM audit_log WHERE position > (SELECT MAX(position) - 2 FROM audit_log)"
                .into(),
            "the database is behind the state file".into(),
        ),
    ];
    for (what, sql, expected) in cases {
        let copy = d.dir.0.join(format!("tampered-{what}.db"));
        for ext in ["", "-wal", "-shm"] {
            let from = PathBuf::from(format!("{}{ext}", db.display()));
            let to = PathBuf::from(format!("{}{ext}", copy.display()));
            let _ = std::fs::remove_file(&to);
            if from.exists() {
                std::fs::copy(&from, &to)?;
            }
        }
        let url = format!("sqlite://{}?mode=rw", copy.display());
        let mut conn = sqlx::AnyConnection::connect(&url).await?;
        let done = conn.execute(sql.as_str()).await?;
        assert!(done.rows_affected() > 0, "{what}: the edit changed nothing");
        conn.close().await?;
        let out = verify(&d, &copy, Some(&state))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {out:?}");
        assert!(
            stderr.lines().any(|l| l.contains(&expected)),
            "{what}: expected a finding naming {expected:?}, got:\n{stderr}"
        );
    }
    Ok(())
}

/// Presents the console's record until the broker answers (it refuses until its first full
/// walk since the start).
async fn witness_round(
    w: &countersign_console_http::witness::Witness,
) -> anyhow::Result<countersign_console_http::witness::Round> {
    use countersign_console_http::witness::Round;
    for _ in 0..200 {
        match w.round().await? {
            Round::Refused(503, m) if m.contains("still being verified") => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return Ok(r),
        }
    }
    bail!("the broker never answered the witness")
}

/// The console as a witness: the database and the replica's state file both rolled back (a
/// whole-machine restore) go unnoticed by the broker itself, but not by the console, which
/// remembers a later head in its own database: the broker fails closed on its next round, until
/// an operator accepts the head, which the witness then takes.
#[tokio::test]
async fn a_witness_catches_a_rollback_of_database_and_state_file() -> R {
    use countersign_console_http::witness::{Round, Witness};
    let Some(d) = Deployment::new(false).await? else {
        return Ok(());
    };
    let c = d.client();
    let console_db = format!("sqlite://{}?mode=rwc", d.dir.0.join("console.db").display());
    let storage = countersign_console_sql::SqlStorage::connect(&console_db)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let w = Witness::new(
        storage.clone(),
        &d.base,
        zeroize::Zeroizing::new(CONSOLE.to_owned()),
        Duration::from_secs(10),
    )?;
    let state = d.dir.0.join("state/audit-state.json");
    let saved_state = d.dir.0.join("saved-state.json");

    let b = d.start().await?;
    let m = machine(&c, "laptop").await?;
    let se = session(&c, &m, "rt-witness").await?;
    let g = grant(&c, &se, None).await?;
    let Round::Kept(first) = witness_round(&w).await? else {
        bail!("the first round was refused");
    };
    assert!(first.position > 0);
    b.stop(Stop::Term)?;
    d.snapshot("machine").await?;
    std::fs::copy(&state, &saved_state)?;

    // The grant is revoked; the witness sees the later head.
    let b = d.start().await?;
    revoke(&c, &se, &g).await?;
    let Round::Kept(later) = witness_round(&w).await? else {
        bail!("refused after the revocation");
    };
    assert!(later.position > first.position, "{later:?} after {first:?}");
    b.stop(Stop::Kill)?;

    // The whole machine comes back from the copy: database and state file.
    d.restore("machine").await?;
    std::fs::copy(&saved_state, &state)?;
    let b = d.start().await?;
    match witness_round(&w).await? {
        Round::Refused(503, m) if m.starts_with("audit log:") && m.contains("witness") => {}
        other => bail!("the witness's round: {other:?}"),
    }
    let (status, v) = values(&c, &se, &g).await?;
    assert!(
        closed(status, &v),
        "values after the witness's round: {status} {v}"
    );
    let (status, v, _) = enroll(&c, &m, "rt-witness-2").await?;
    assert!(
        closed(status, &v),
        "enroll after the witness's round: {status} {v}"
    );
    // The console kept its record.
    let kept = storage
        .witness_record(&d.base)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(kept.map(|k| k.position), Some(later.position));
    b.stop(Stop::Term)?;

    // The operator accepts the head; the witness takes it.
    let out = d.cli(&["audit", "accept-head"])?;
    assert!(out.status.success(), "{out:?}");
    let b = d.start().await?;
    let Round::Kept(taken) = witness_round(&w).await? else {
        bail!("refused after accept-head");
    };
    assert!(taken.accepted > 0, "{taken:?}");
    assert_ne!(taken.hash, later.hash, "{taken:?} replaced {later:?}");
    b.stop(Stop::Term)?;
    storage.close().await;
    Ok(())
}
