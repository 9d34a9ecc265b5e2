//! End-to-end fixtures: the real broker (in this process, on a port the OS picks, from a TOML
//! configuration in a temporary directory), the real helper binary on a temporary socket, and
//! the real `countersign` binary.
#![allow(dead_code, clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use countersign_broker_http::server::Running;
use serde_json::{Value, json};

pub const ADA: &str = "ada@example.com";
pub const BOB: &str = "bob@example.com";
/// Tier `automatic`, owner Ada.
pub const AUTO: &str = "AUTO_TOKEN";
/// Tier `owner`, owner Ada.
pub const ADA_SECRET: &str = "ADA_SECRET";
/// Tier `shared`, owner Bob.
pub const SHARED: &str = "SHARED_SECRET";
/// Tier `locked`.
pub const LOCKED: &str = "LOCKED_SECRET";
/// Tier `automatic`, owner Ada; its value holds JSON-special and non-ASCII characters.
pub const QUOTED: &str = "QUOTED_TOKEN";

pub type R<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

/// A directory removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        // Short: a Unix socket path must fit in 108 bytes.
        let p = std::env::temp_dir().join(format!("cs-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The value each test secret holds.
pub fn value_of(name: &str) -> String {
    if name == QUOTED {
        return "quoted\"token/v\u{e4}lue\\e2e".to_owned();
    }
    format!("{}-value-e2e", name.to_ascii_lowercase())
}

/// The real broker, served from this process.
pub struct Broker {
    pub url: String,
    pub console_token: String,
    rt: tokio::runtime::Runtime,
    running: Option<Running>,
    http: reqwest::Client,
    _dir: TempDir,
}

impl Broker {
    /// A broker whose enrollment leases last `lease` seconds (protocol.md's 15 min by default).
    pub fn start_with_lease(lease: Option<i64>) -> Self {
        Self::start_configured(lease, "")
    }

    /// A broker whose configuration file ends with `extra` (TOML sections such as
    /// `[token_issuer]` and `[service_logins]`).
    pub fn start_configured(lease: Option<i64>, extra: &str) -> Self {
        let dir = TempDir::new("broker");
        let d = &dir.0;
        std::fs::write(
            d.join("seal.key"),
            countersign_proto::b64::encode(&[7u8; 32]),
        )
        .unwrap();
        let console_token = format!("console-token-{}", std::process::id());
        std::fs::write(d.join("console-token"), &console_token).unwrap();
        let mut store = String::from("prefix = \"agents/\"\nkey = \"local\"\n");
        for (name, owner, tier) in [
            (AUTO, ADA, "automatic"),
            (ADA_SECRET, ADA, "owner"),
            (SHARED, BOB, "shared"),
            (LOCKED, BOB, "locked"),
            (QUOTED, ADA, "automatic"),
        ] {
            store.push_str(&format!(
                "\n[[secret]]\nname = \"agents/{}\"\nowner = \"{owner}\"\ntier = \"{tier}\"\nvalue = \"{}\"\n",
                name.to_ascii_lowercase().replace('_', "-"),
                value_of(name).replace('\\', "\\\\").replace('"', "\\\"")
            ));
        }
        std::fs::write(d.join("secrets.toml"), store).unwrap();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let url = format!("http://{addr}");
        let mut config = format!(
            "listen = \"{addr}\"\npublic_url = \"{url}\"\ndatabase_url = \"sqlite://{}?mode=rwc\"\nseal_key_file = \"{}\"\nconsole_token_file = \"{}\"\naudit_state_file = \"{}\"\n\n[store]\nkind = \"local\"\npath = \"{}\"\n",
            d.join("broker.db").display(),
            d.join("seal.key").display(),
            d.join("console-token").display(),
            d.join("audit-state.json").display(),
            d.join("secrets.toml").display(),
        );
        if let Some(l) = lease {
            config.push_str(&format!("\n[durations]\nlease = {l}\n"));
        }
        config.push_str(extra);
        std::fs::write(d.join("broker.toml"), config).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let running = rt.block_on(async {
            let config =
                countersign_broker_http::config::Config::load(&d.join("broker.toml")).unwrap();
            let state = countersign_broker_http::server::build(
                &config,
                Arc::new(countersign_broker_core::SystemClock),
            )
            .await
            .unwrap();
            countersign_broker_http::server::serve_listener(
                state,
                listener,
                None,
                chrono::Duration::minutes(5),
            )
            .await
            .unwrap()
        });
        Self {
            url,
            console_token,
            rt,
            running: Some(running),
            http: reqwest::Client::new(),
            _dir: dir,
        }
    }

    pub fn start() -> Self {
        Self::start_with_lease(None)
    }

    /// A console-token call; answers (status, JSON).
    pub fn console(&self, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let url = format!("{}{path}", self.url);
        self.rt.block_on(async {
            let mut req = self
                .http
                .request(method.parse().unwrap(), &url)
                .bearer_auth(&self.console_token);
            if let Some(b) = body {
                req = req.json(&b);
            }
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let v = resp.json::<Value>().await.unwrap_or(Value::Null);
            (status, v)
        })
    }

    /// Approves the machine login showing `code`, as `approver` in the console would.
    pub fn approve_login(&self, code: &str, approver: &str) {
        let (s, rec) = self.console(
            "POST",
            "/v1/machine-logins/lookup",
            Some(json!({"code": code})),
        );
        assert_eq!(s, 200, "lookup: {rec}");
        let id = rec["record_id"].as_str().unwrap();
        let (s, v) = self.console(
            "POST",
            &format!("/v1/credential-requests/{id}/approve"),
            Some(json!({"approver": approver, "code": code})),
        );
        assert_eq!(s, 200, "approve: {v}");
    }

    /// Waits for a pending secret request record `approver` decides; answers its id.
    pub fn wait_pending_record(&self, approver: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (s, v) = self.console("GET", &format!("/v1/pending?approver={approver}"), None);
            assert_eq!(s, 200, "{v}");
            if let Some(r) = v["pending"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["kind"] == "agent_secret")
            {
                return r["record_id"].as_str().unwrap().to_owned();
            }
            assert!(
                Instant::now() < deadline,
                "no pending request for {approver}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    pub fn decide(&self, record: &str, approver: &str, approve: bool) {
        let verb = if approve { "approve" } else { "deny" };
        let (s, v) = self.console(
            "POST",
            &format!("/v1/credential-requests/{record}/{verb}"),
            Some(json!({"approver": approver})),
        );
        assert_eq!(s, 200, "{verb}: {v}");
    }

    /// Live grants the person's sessions hold or they approved.
    pub fn grants_for(&self, approver: &str) -> Vec<Value> {
        let (s, v) = self.console("GET", &format!("/v1/grants?approver={approver}"), None);
        assert_eq!(s, 200, "{v}");
        v["grants"].as_array().unwrap().clone()
    }

    pub fn pending_for(&self, approver: &str) -> Vec<Value> {
        let (s, v) = self.console("GET", &format!("/v1/pending?approver={approver}"), None);
        assert_eq!(s, 200, "{v}");
        v["pending"].as_array().unwrap().clone()
    }

    /// Ends a machine login from the console (its sessions end with it).
    pub fn revoke_machine(&self, credential_id: &str, approver: &str) {
        let (s, v) = self.console(
            "POST",
            &format!("/v1/launcher-credentials/{credential_id}/revoke-by-approver"),
            Some(json!({"approver": approver})),
        );
        assert_eq!(s, 200, "{v}");
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            self.rt.block_on(r.shutdown(Duration::from_millis(200)));
        }
    }
}

/// The `countersign` binary.
pub fn cli_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_countersign"))
}

/// The `countersign-launcher` binary (another package's): beside ours, built if missing.
pub fn helper_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = cli_bin().with_file_name("countersign-launcher");
        // `cargo test --workspace` has built it; `cargo test -p countersign-cli` may not have,
        // or may have left it older than its sources: then build it, so that a test never runs
        // a stale helper.
        let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
        let newest = [
            "launcher-helper/src",
            "launcher-helper/Cargo.toml",
            "launcher-proto/src",
            "launcher-proto/Cargo.toml",
            "proto/src",
        ]
        .iter()
        .filter_map(|p| newest_mtime(&crates.join(p)))
        .max();
        if let (Some(b), Some(n)) = (built, newest)
            && b >= n
        {
            return bin;
        }
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args([
                "build",
                "--quiet",
                "-p",
                "countersign-launcher-helper",
                "--bin",
                "countersign-launcher",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status();
        if !matches!(status, Ok(s) if s.success()) {
            assert!(bin.exists(), "could not build {}", bin.display());
        }
        bin
    })
    .clone()
}

/// The real helper on a temporary socket.
pub struct Helper {
    child: Child,
    pub socket: PathBuf,
    pub state: PathBuf,
    pub dir: TempDir,
    log: PathBuf,
}

impl Helper {
    pub fn start(broker_url: &str) -> Self {
        Self::start_args(broker_url, &[])
    }

    pub fn start_args(broker_url: &str, extra: &[&str]) -> Self {
        let dir = TempDir::new("helper");
        let run = dir.0.join("run");
        let socket = run.join("l.sock");
        let state = dir.0.join("state");
        let log = dir.0.join("helper.log");
        let child = Command::new(helper_bin())
            .arg("--broker")
            .arg(broker_url)
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(&state)
            .arg("--console-url")
            .arg("http://console.test")
            .args(extra)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let h = Self {
            child,
            socket,
            state,
            dir,
            log,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&h.socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "helper did not start: {}",
                h.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        h
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `countersign --socket <ours> --poll-interval 0.1 ARGS`.
    pub fn cli(&self) -> Command {
        let mut c = Command::new(cli_bin());
        c.arg("--socket")
            .arg(&self.socket)
            .arg("--poll-interval")
            .arg("0.1")
            .env_remove("COUNTERSIGN_NON_INTERACTIVE");
        c
    }

    /// Runs the CLI to completion.
    pub fn run(&self, args: &[&str]) -> Out {
        let out = self.cli().args(args).stdin(Stdio::null()).output().unwrap();
        Out {
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Logs the machine in as `who` through the CLI, approving the code through the broker's
    /// console-token routes. Answers the credential id.
    pub fn login(&self, broker: &Broker, who: &str) -> String {
        let mut child = self
            .cli()
            .args(["--json", "login", "--login", who])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        assert_eq!(first["event"], "code", "{first}");
        assert_eq!(first["console_url"], "http://console.test");
        let code = first["code"].as_str().unwrap().to_owned();
        broker.approve_login(&code, who);
        let last: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
        let status = wait_timeout(&mut child, Duration::from_secs(30));
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        assert_eq!(status.code(), Some(0), "login: {last} {err}");
        assert_eq!(last["event"], "issued", "{last}");
        last["credential"]["credential_id"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// A raw protocol exchange: one line out, one line back.
    pub fn raw(&self, line: &[u8]) -> Value {
        let c = countersign_launcher_proto::Client::new(&self.socket);
        serde_json::from_slice(&c.raw(line).unwrap()).unwrap()
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A finished CLI run.
#[derive(Debug)]
pub struct Out {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Out {
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }
}

/// Waits for a child, killing it after `limit`.
pub fn wait_timeout(child: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("child did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Reads a child's stream on a thread, so the test can wait on it while the child runs.
pub fn collect(stream: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut s = String::new();
        let mut r = stream;
        let _ = r.read_to_string(&mut s);
        s
    })
}

pub fn exists(p: &Path) -> bool {
    p.exists()
}

/// The newest modification time of a file or of the files under a directory.
fn newest_mtime(p: &Path) -> Option<std::time::SystemTime> {
    let meta = std::fs::metadata(p).ok()?;
    if !meta.is_dir() {
        return meta.modified().ok();
    }
    std::fs::read_dir(p)
        .ok()?
        .flatten()
        .filter_map(|e| newest_mtime(&e.path()))
        .max()
}
