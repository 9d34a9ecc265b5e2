//! The broker under test as a process of its own: the release binary `countersign-broker serve
//! --config <file>`, its configuration written here (a local store with no secrets, a seal key,
//! a console token, the `[[issued]]` secret on the PostgreSQL or the AWS IAM issuer, its admin
//! credential in a file, `durations.issued_sweep`),
//! its database (SQLite in the run's directory, or a scratch PostgreSQL database this tool makes
//! and drops), started, waited on until `/readyz` answers 200, and killed with SIGKILL
//! (`Child::kill` is SIGKILL on Unix) to be started again on the same database and config.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use sqlx::Connection;

/// The one person of the run: the machine's owner, the approver, the issued secret's owner.
pub const PERSON: &str = "bench@countersign.local";
/// The issued secret's name, as sessions request it.
pub const SECRET: &str = "BENCH_DB";
const TOKEN: &str = "issued-bench-console-token-0123456789";

/// Where the broker keeps its state.
pub enum Storage {
    /// A SQLite file in the run's directory.
    Sqlite { url: String },
    /// A database this tool made on a PostgreSQL server, dropped at the end.
    Postgres {
        /// The server URL the tool connects to for creating and dropping it.
        server: String,
        name: String,
        url: String,
    },
}

impl Storage {
    /// SQLite in `dir`, or a fresh database on the server `database_url` names.
    pub async fn create(dir: &Path, database_url: Option<&str>) -> anyhow::Result<Self> {
        let Some(server) = database_url else {
            let url = format!("sqlite://{}?mode=rwc", dir.join("broker.db").display());
            return Ok(Self::Sqlite { url });
        };
        if !server.starts_with("postgres") {
            bail!("--database-url must be a postgres:// URL (SQLite is the default)");
        }
        let name = format!("cs_issued_bench_{}", crate::random_hex(8));
        let mut c = sqlx::PgConnection::connect(server)
            .await
            .context("connect to --database-url")?;
        sqlx::query(&format!("CREATE DATABASE \"{name}\""))
            .execute(&mut c)
            .await?;
        let _ = c.close().await;
        let mut url = reqwest::Url::parse(server).context("--database-url")?;
        url.set_path(&format!("/{name}"));
        Ok(Self::Postgres {
            server: server.to_owned(),
            name,
            url: url.to_string(),
        })
    }

    pub fn url(&self) -> &str {
        match self {
            Self::Sqlite { url } | Self::Postgres { url, .. } => url,
        }
    }

    pub fn label(&self) -> String {
        match self {
            Self::Sqlite { .. } => "SQLite (a file in the run's directory)".into(),
            Self::Postgres { name, .. } => format!("PostgreSQL (scratch database {name})"),
        }
    }

    /// Drops the scratch database (the broker must have stopped).
    pub async fn drop_database(&self) -> anyhow::Result<()> {
        if let Self::Postgres { server, name, .. } = self {
            let mut c = sqlx::PgConnection::connect(server).await?;
            sqlx::query(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                .execute(&mut c)
                .await?;
            let _ = c.close().await;
        }
        Ok(())
    }
}

/// What the tool needs to know of the broker it configured.
pub struct Settings {
    pub base: String,
    pub token: String,
    /// The issuer's role prefix: every credential of this run is named by it.
    pub prefix: String,
    pub sweep: u64,
}

/// The issued secret's issuer, as the configuration declares it.
pub enum IssuerSpec {
    /// PostgreSQL, its admin URL.
    Postgres { admin_url: String },
    /// AWS IAM at an endpoint (moto), its admin key as credential_process JSON.
    AwsIam {
        endpoint: String,
        admin_json: String,
    },
}

impl IssuerSpec {
    /// A prefix of this run's own, in the kind's alphabet.
    fn prefix(&self) -> String {
        match self {
            Self::Postgres { .. } => format!("csib_{}_", crate::random_hex(8)),
            Self::AwsIam { .. } => format!("csib-{}-", crate::random_hex(8)),
        }
    }

    /// The admin credential's text, written to `admin_file`.
    fn admin(&self) -> &str {
        match self {
            Self::Postgres { admin_url } => admin_url,
            Self::AwsIam { admin_json, .. } => admin_json,
        }
    }

    /// The `[issued.<kind>]` section.
    fn section(&self, prefix: &str) -> String {
        match self {
            Self::Postgres { .. } => {
                format!("[issued.postgres]\nroles = []\nprefix = \"{prefix}\"\n")
            }
            Self::AwsIam { endpoint, .. } => format!(
                "[issued.aws_iam]\nprefix = \"{prefix}\"\npath = \"{}\"\n\
                 inline_policy = '{}'\nendpoint_url = {}\n",
                crate::aws::PATH,
                crate::aws::LIST_USERS,
                toml_string(endpoint)
            ),
        }
    }
}

/// Writes the broker's configuration into `dir`; answers its path and the settings.
pub fn write_config(
    dir: &Path,
    storage: &Storage,
    issuer: &IssuerSpec,
    sweep: u64,
) -> anyhow::Result<(PathBuf, Settings)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let prefix = issuer.prefix();
    std::fs::write(
        dir.join("seal.key"),
        // A bench's broker: its sealed values protect nothing that outlives the run.
        countersign_proto::b64::encode(&[7u8; 32]),
    )?;
    std::fs::write(dir.join("console-token"), TOKEN)?;
    std::fs::write(dir.join("secrets.toml"), "prefix = \"agents/\"\n")?;
    std::fs::write(dir.join("issuer-admin"), issuer.admin())?;
    let q = |p: &Path| toml_string(&p.display().to_string());
    let config = format!(
        "listen = \"127.0.0.1:{port}\"\n\
         public_url = \"{base}\"\n\
         database_url = {db}\n\
         seal_key_file = {seal}\n\
         console_token_file = {token}\n\
         audit_state_file = {audit}\n\
         [store]\nkind = \"local\"\npath = {store}\n\
         [durations]\nissued_sweep = {sweep}\nlease = 7200\n\
         [[issued]]\nname = \"{SECRET}\"\nowner = \"{PERSON}\"\ntier = \"automatic\"\n\
         admin_file = {admin}\n{section}",
        db = toml_string(storage.url()),
        seal = q(&dir.join("seal.key")),
        token = q(&dir.join("console-token")),
        audit = q(&dir.join("audit-state.json")),
        store = q(&dir.join("secrets.toml")),
        admin = q(&dir.join("issuer-admin")),
        section = issuer.section(&prefix),
    );
    let path = dir.join("broker.toml");
    std::fs::write(&path, config)?;
    Ok((
        path,
        Settings {
            base,
            token: TOKEN.into(),
            prefix,
            sweep,
        },
    ))
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// The broker binary: `--broker-bin`, else `countersign-broker` beside this tool.
pub fn binary(given: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    let bin = match given {
        Some(b) => b,
        None => std::env::current_exe()?
            .parent()
            .context("this tool's directory")?
            .join("countersign-broker"),
    };
    if !bin.is_file() {
        bail!(
            "no broker binary at {} (build it with `cargo build --release -p countersign-broker-http --bin countersign-broker`, or give --broker-bin)",
            bin.display()
        );
    }
    Ok(bin)
}

/// The broker process: started, killed and started again on the same config.
pub struct BrokerProc {
    bin: PathBuf,
    config: PathBuf,
    logs: PathBuf,
    child: Option<Child>,
    /// How many times it was started.
    pub starts: u32,
}

impl BrokerProc {
    pub fn new(bin: PathBuf, config: PathBuf, logs: PathBuf) -> Self {
        Self {
            bin,
            config,
            logs,
            child: None,
            starts: 0,
        }
    }

    /// Starts it, its log (standard error) in `broker-<n>.log` beside its config.
    pub fn start(&mut self) -> anyhow::Result<()> {
        self.starts += 1;
        let log = std::fs::File::create(self.logs.join(format!("broker-{}.log", self.starts)))?;
        let mut cmd = Command::new(&self.bin);
        cmd.args(["serve", "--config"])
            .arg(&self.config)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        // The file says everything: no override from this tool's environment.
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("COUNTERSIGN_") {
                cmd.env_remove(k);
            }
        }
        self.child = Some(cmd.spawn().context("start countersign-broker")?);
        Ok(())
    }

    /// Waits until `/readyz` answers 200; fails when the process exits or `within` passes.
    pub async fn wait_ready(
        &mut self,
        http: &reqwest::Client,
        base: &str,
        within: Duration,
    ) -> anyhow::Result<Duration> {
        let started = Instant::now();
        loop {
            if let Some(c) = self.child.as_mut()
                && let Some(status) = c.try_wait()?
            {
                bail!(
                    "the broker exited ({status}) before it was ready: see {}",
                    self.log_path().display()
                );
            }
            let r = http
                .get(format!("{base}/readyz"))
                .timeout(Duration::from_secs(2))
                .send()
                .await;
            if r.is_ok_and(|r| r.status().is_success()) {
                return Ok(started.elapsed());
            }
            if started.elapsed() > within {
                bail!(
                    "the broker was not ready within {within:?}: see {}",
                    self.log_path().display()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL, and the process reaped.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        Ok(())
    }

    /// The current (last) log file.
    pub fn log_path(&self) -> PathBuf {
        self.logs.join(format!("broker-{}.log", self.starts))
    }
}

impl Drop for BrokerProc {
    fn drop(&mut self) {
        let _ = self.kill();
    }
}
