//! The broker as a process: the real `countersign-broker` binary, run as a server from a
//! configuration file in a temporary directory ([`Deployment`]), in dev mode, or as a one-shot
//! command (`audit verify`, `audit export --follow`, …); stopped by SIGTERM or SIGKILL, and
//! killed when dropped.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdout, Command, Output, Stdio};

use anyhow::{Context, bail};
use countersign_proto::b64;

use super::client::Client;

/// The console token of every [`Deployment`].
pub const CONSOLE_TOKEN: &str = "process-test-console-token-0123456789";

/// The broker binary with `args`: no `COUNTERSIGN_*` variable of the caller's environment (a
/// developer's shell, CI) reaches it, so that the test's configuration is the one it runs with;
/// stdin closed.
pub fn command<I, S>(args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_countersign-broker"));
    cmd.args(args).stdin(Stdio::null());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("COUNTERSIGN_") {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// Runs a one-shot command to its end: its status and output.
pub fn run<S: AsRef<OsStr>>(args: &[S]) -> anyhow::Result<Output> {
    command(args).output().context("run countersign-broker")
}

/// How a broker process is stopped.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// SIGTERM: a graceful shutdown, which must end with status 0.
    Term,
    /// SIGKILL: no shutdown, nothing flushed but what was committed.
    Kill,
}

/// A running broker process, killed on drop.
#[derive(Debug)]
pub struct BrokerProcess {
    child: Child,
}

impl BrokerProcess {
    /// Starts `cmd` (made by [`command`]).
    pub fn spawn(cmd: &mut Command) -> anyhow::Result<Self> {
        let child = cmd.spawn().context("start countersign-broker")?;
        Ok(Self { child })
    }

    /// `serve --config <config>`, its log (stderr) appended to `log`, at `RUST_LOG` `filter`.
    pub fn serve(config: &Path, log: &Path, filter: &str) -> anyhow::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)?;
        Self::spawn(
            command(["serve", "--config"])
                .arg(config)
                .env("RUST_LOG", filter)
                .stdout(Stdio::null())
                .stderr(log),
        )
    }

    /// Its stdout, once, if it was piped.
    pub fn stdout(&mut self) -> Option<ChildStdout> {
        self.child.stdout.take()
    }

    /// Stops it; after SIGTERM it must have exited cleanly.
    pub fn stop(mut self, how: Stop) -> anyhow::Result<()> {
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

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port free now on loopback.
pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// A broker deployment under test, in a temporary directory (removed on drop): a sealing key
/// (`seal.key`), the console token ([`CONSOLE_TOKEN`]), a local secret store (`secrets.toml`),
/// the audit state file (`state/audit-state.json`), the configuration (`broker.toml`) and the
/// log (`broker.log`) of every process started from it.
#[derive(Debug)]
pub struct Deployment {
    pub dir: tempfile::TempDir,
    pub config: PathBuf,
    pub log: PathBuf,
    /// `http://127.0.0.1:<port>`: where it listens, and its public URL.
    pub base: String,
    pub database_url: String,
    filter: String,
}

/// More of a configuration file, made from the deployment directory's path.
type ConfigPart = Box<dyn FnOnce(&Path) -> String>;

/// What a [`Deployment`] is made with.
pub struct DeploymentBuilder {
    database_url: Option<String>,
    secrets: String,
    extra: Vec<ConfigPart>,
    filter: String,
}

impl DeploymentBuilder {
    /// A database other than a fresh SQLite file in the directory (e.g. PostgreSQL).
    pub fn database_url(mut self, url: &str) -> Self {
        self.database_url = Some(url.to_owned());
        self
    }

    /// One more secret in the store: agent name `name` (`ADA_SECRET` is stored as
    /// `agents/ada-secret`), value `v`.
    pub fn secret(mut self, name: &str, owner: &str, tier: &str) -> Self {
        let stored = name.to_ascii_lowercase().replace('_', "-");
        self.secrets.push_str(&format!(
            "\n[[secret]]\nname = \"agents/{stored}\"\nowner = {owner:?}\ntier = {tier:?}\nvalue = \"v\"\n"
        ));
        self
    }

    /// More of `broker.toml` (sections after the store's), made from the directory's path.
    pub fn config(mut self, f: impl FnOnce(&Path) -> String + 'static) -> Self {
        self.extra.push(Box::new(f));
        self
    }

    /// The processes' `RUST_LOG` (default `info`).
    pub fn log_filter(mut self, filter: &str) -> Self {
        self.filter = filter.to_owned();
        self
    }

    /// Writes the files.
    pub fn create(self) -> anyhow::Result<Deployment> {
        let dir = tempfile::Builder::new()
            .prefix("countersign-process-")
            .tempdir()?;
        let p = |f: &str| dir.path().join(f);
        std::fs::write(p("seal.key"), b64::encode(&[7u8; 32]))?;
        std::fs::write(p("console-token"), CONSOLE_TOKEN)?;
        std::fs::write(
            p("secrets.toml"),
            format!("prefix = \"agents/\"\nkey = \"local\"\n{}", self.secrets),
        )?;
        let port = free_port()?;
        let base = format!("http://127.0.0.1:{port}");
        let database_url = self
            .database_url
            .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", p("broker.db").display()));
        let mut config = format!(
            "listen = \"127.0.0.1:{port}\"\npublic_url = \"{base}\"\ndatabase_url = {database_url:?}\nseal_key_file = {:?}\nconsole_token_file = {:?}\naudit_state_file = {:?}\n\n[store]\nkind = \"local\"\npath = {:?}\n",
            p("seal.key"),
            p("console-token"),
            p("state/audit-state.json"),
            p("secrets.toml"),
        );
        for f in self.extra {
            config.push('\n');
            config.push_str(&f(dir.path()));
        }
        std::fs::write(p("broker.toml"), config)?;
        Ok(Deployment {
            config: p("broker.toml"),
            log: p("broker.log"),
            base,
            database_url,
            filter: self.filter,
            dir,
        })
    }
}

impl Deployment {
    pub fn builder() -> DeploymentBuilder {
        DeploymentBuilder {
            database_url: None,
            secrets: String::new(),
            extra: Vec::new(),
            filter: "info".into(),
        }
    }

    /// A file of the directory.
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    /// A client of the broker, with the console token.
    pub fn client(&self) -> Client {
        Client::new(&self.base, CONSOLE_TOKEN)
    }

    /// Starts `serve` and waits until it answers `/healthz` (failing with its log if not).
    pub async fn start(&self) -> anyhow::Result<BrokerProcess> {
        let b = BrokerProcess::serve(&self.config, &self.log, &self.filter)?;
        if let Err(e) = self.client().wait_healthy().await {
            bail!("{e}; log:\n{}", self.log_text());
        }
        Ok(b)
    }

    /// Runs a one-shot command with `--config` this deployment's.
    pub fn cli(&self, args: &[&str]) -> anyhow::Result<Output> {
        let mut cmd = command(args);
        cmd.arg("--config").arg(&self.config);
        cmd.output().context("run countersign-broker")
    }

    /// What the processes logged so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
