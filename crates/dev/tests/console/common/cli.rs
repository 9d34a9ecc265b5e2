//! The real launcher helper (`countersign-launcher`) and the real `countersign` CLI, as child
//! processes. Both are other packages' binaries, so `env!("CARGO_BIN_EXE_...")` cannot name
//! them: they are taken from beside this test's own target directory, and built there first
//! when missing or older than their sources (as `crates/cli/tests/common` does for the helper).
//!
//! Everything here is async: the broker and the console run on the test's own runtime, so
//! waiting on a child must never block its thread.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The `countersign` binary.
pub fn cli_bin() -> anyhow::Result<PathBuf> {
    bins().map(|(cli, _)| cli)
}

/// The `countersign-launcher` binary.
pub fn helper_bin() -> anyhow::Result<PathBuf> {
    bins().map(|(_, helper)| helper)
}

/// Both binaries, in the profile directory this test binary was built into
/// (`target/<profile>/deps/browser-*` → `target/<profile>/`), built if missing or stale.
fn bins() -> anyhow::Result<(PathBuf, PathBuf)> {
    static BINS: OnceLock<Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    BINS.get_or_init(|| locate_or_build().map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(anyhow::Error::msg)
}

fn locate_or_build() -> anyhow::Result<(PathBuf, PathBuf)> {
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .context("test binary outside target/<profile>/deps")?;
    let cli = profile_dir.join("countersign");
    let helper = profile_dir.join("countersign-launcher");
    // `cargo test --workspace` has built both; `cargo test -p countersign-dev` may
    // not have, or may have left them older than their sources: then build them, so that the
    // test never runs a stale binary.
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let newest = [
        "cli/src",
        "cli/Cargo.toml",
        "launcher-helper/src",
        "launcher-helper/Cargo.toml",
        "launcher-proto/src",
        "launcher-proto/Cargo.toml",
        "proto/src",
        "proto/Cargo.toml",
    ]
    .iter()
    .filter_map(|p| newest_mtime(&crates.join(p)))
    .max();
    let built = [&cli, &helper]
        .iter()
        .map(|b| std::fs::metadata(b).and_then(|m| m.modified()).ok())
        .collect::<Option<Vec<_>>>()
        .and_then(|t| t.into_iter().min());
    if let (Some(b), Some(n)) = (built, newest)
        && b >= n
    {
        return Ok((cli, helper));
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = std::process::Command::new(cargo);
    build.args([
        "build",
        "--quiet",
        "-p",
        "countersign-cli",
        "-p",
        "countersign-launcher-helper",
        "--bin",
        "countersign",
        "--bin",
        "countersign-launcher",
    ]);
    match profile_dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") | None => {}
        Some(profile) => {
            build.args(["--profile", profile]);
        }
    }
    let status = build.current_dir(env!("CARGO_MANIFEST_DIR")).status();
    let built = matches!(status, Ok(s) if s.success());
    if built || (cli.exists() && helper.exists()) {
        return Ok((cli, helper));
    }
    bail!(
        "could not build {} and {} ({status:?})",
        cli.display(),
        helper.display()
    )
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

/// Environment that would point the helper or the CLI somewhere else than this test's.
const FOREIGN_ENV: &[&str] = &[
    "COUNTERSIGN_HELPER_SOCKET",
    "COUNTERSIGN_STATE_DIR",
    "COUNTERSIGN_BROKER_URL",
    "COUNTERSIGN_CONSOLE_URL",
    "COUNTERSIGN_NON_INTERACTIVE",
    "COUNTERSIGN_LOG_JSON",
];

/// The real helper, its XDG directories in a temporary directory: its socket is the default
/// `$XDG_RUNTIME_DIR/countersign/launcher.sock`, its state `$XDG_STATE_HOME/countersign`.
pub struct Helper {
    child: Child,
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    log: PathBuf,
}

impl Helper {
    /// Starts the helper for the machine `host` against `broker_url`, telling people to
    /// approve at `console_url`; answers once its socket accepts connections.
    pub async fn start(broker_url: &str, console_url: &str, host: &str) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        for d in ["run", "state", "config", "cache"] {
            std::fs::create_dir(dir.path().join(d))?;
        }
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(
                dir.path().join("run"),
                std::fs::Permissions::from_mode(0o700),
            )?;
        }
        let socket = dir.path().join("run/countersign/launcher.sock");
        let log = dir.path().join("helper.log");
        let mut cmd = Command::new(helper_bin()?);
        Self::xdg(&mut cmd, dir.path());
        let child = cmd
            .arg("--broker")
            .arg(broker_url)
            .arg("--console-url")
            .arg(console_url)
            .arg("--host")
            .arg(host)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("start countersign-launcher")?;
        let mut h = Self {
            child,
            dir,
            socket,
            log,
        };
        let until = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&h.socket).is_err() {
            if let Some(s) = h.child.try_wait()? {
                bail!("the helper exited ({s}): {}", h.log());
            }
            if Instant::now() > until {
                bail!("the helper did not start: {}", h.log());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(h)
    }

    fn xdg(cmd: &mut Command, dir: &Path) {
        for name in FOREIGN_ENV {
            cmd.env_remove(name);
        }
        cmd.env("XDG_RUNTIME_DIR", dir.join("run"))
            .env("XDG_STATE_HOME", dir.join("state"))
            .env("XDG_CONFIG_HOME", dir.join("config"))
            .env("XDG_CACHE_HOME", dir.join("cache"));
    }

    /// The helper's log (stderr).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `countersign --poll-interval 0.1 ARGS`, finding the helper through the same XDG
    /// directories; killed if dropped while running.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<Command> {
        let mut cmd = Command::new(cli_bin()?);
        Self::xdg(&mut cmd, self.dir.path());
        cmd.args(["--poll-interval", "0.1"])
            .args(args)
            .kill_on_drop(true);
        Ok(cmd)
    }

    /// Starts `countersign --json login --login WHO`; answers the process and its first
    /// event, which shows the code a person types in the console.
    pub async fn start_login(&self, who: &str) -> anyhow::Result<Login> {
        let mut child = self
            .cli(&["--json", "login", "--login", who])?
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("start countersign login")?;
        let stderr = collect(child.stderr.take().context("stderr")?);
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let first = next_event(&mut lines).await?;
        if first["event"] != "code" {
            bail!("login: {first}: {}", self.log());
        }
        Ok(Login {
            code: first["code"].as_str().context("code")?.to_owned(),
            first,
            child,
            lines,
            stderr,
        })
    }

    /// Ends the helper with SIGTERM (it unenrolls its sessions and removes its socket) and
    /// waits for it.
    pub async fn stop(mut self) -> anyhow::Result<ExitStatus> {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        Ok(
            tokio::time::timeout(Duration::from_secs(10), self.child.wait())
                .await
                .context("the helper did not stop on SIGTERM")??,
        )
    }
}

/// A `countersign login` waiting for a person.
pub struct Login {
    pub code: String,
    /// The `code` event.
    pub first: Value,
    child: Child,
    lines: Lines<BufReader<ChildStdout>>,
    stderr: tokio::task::JoinHandle<String>,
}

impl Login {
    /// Waits for the login to end: exit 0 with an `issued` event; answers the credential id.
    pub async fn issued(mut self) -> anyhow::Result<String> {
        let last = next_event(&mut self.lines).await?;
        let status = wait_timeout(&mut self.child, 30).await?;
        let err = self.stderr.await.unwrap_or_default();
        if !status.success() || last["event"] != "issued" {
            bail!("login ended {status}: {last} {err}");
        }
        Ok(last["credential"]["credential_id"]
            .as_str()
            .context("credential_id")?
            .to_owned())
    }
}

/// The next JSON line a `--json` command prints, waiting up to 30 s.
async fn next_event(lines: &mut Lines<BufReader<ChildStdout>>) -> anyhow::Result<Value> {
    let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .context("no event within 30 s")??
        .context("output ended")?;
    serde_json::from_str(&line).with_context(|| format!("not JSON: {line:?}"))
}

/// Waits up to `secs` seconds for a child to exit (killing it then).
pub async fn wait_timeout(child: &mut Child, secs: u64) -> anyhow::Result<ExitStatus> {
    match tokio::time::timeout(Duration::from_secs(secs), child.wait()).await {
        Ok(status) => Ok(status?),
        Err(_) => {
            let _ = child.kill().await;
            bail!("child did not exit within {secs} s")
        }
    }
}

/// Reads a child's stream to its end on a task, so the test can go on while the child runs.
pub fn collect(
    mut stream: impl AsyncRead + Unpin + Send + 'static,
) -> tokio::task::JoinHandle<String> {
    tokio::spawn(async move {
        let mut buf = Vec::new();
        let _ = stream.read_to_end(&mut buf).await;
        String::from_utf8_lossy(&buf).into_owned()
    })
}
