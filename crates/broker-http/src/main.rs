//! `countersign-broker`: the secrets broker's server.
//!
//! - `countersign-broker serve --config broker.toml` runs from a configuration file (with
//!   `COUNTERSIGN_*` environment overrides).
//! - `countersign-broker dev` runs on embedded defaults: SQLite and a local store with demo
//!   secrets of every tier under `.countersign-dev/`, kept across restarts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use countersign_broker_core::SystemClock;
use countersign_broker_http::config::{Config, Durations, LimitsConfig, StoreConfig};

#[derive(Parser, Debug)]
#[command(
    name = "countersign-broker",
    version,
    about = "The Countersign secrets broker"
)]
struct Cli {
    /// Log as JSON lines (for log collectors) instead of text.
    #[arg(long, global = true, env = "COUNTERSIGN_LOG_JSON")]
    log_json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve from a configuration file.
    Serve {
        /// The TOML configuration file.
        #[arg(long, short, env = "COUNTERSIGN_CONFIG")]
        config: PathBuf,
    },
    /// Serve in dev mode: SQLite and a local store with demo secrets, state kept in DIR.
    Dev {
        /// Where dev state lives (database, demo secrets, keys).
        #[arg(long, default_value = ".countersign-dev", env = "COUNTERSIGN_DEV_DIR")]
        dir: PathBuf,
        /// Port on 127.0.0.1 (0 picks a free one).
        #[arg(long, default_value_t = 8080, env = "COUNTERSIGN_PORT")]
        port: u16,
    },
}

/// The person dev mode's demo secrets belong to.
pub const DEV_PERSON: &str = "dev@countersign.local";

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logs(cli.log_json);
    let (config, dev) = match cli.command {
        Command::Serve { config } => (Config::load(&config)?, None),
        Command::Dev { dir, port } => (dev_config(&dir, port)?, Some(dir)),
    };
    let state = countersign_broker_http::server::build(&config, Arc::new(SystemClock)).await?;
    let reload = chrono::Duration::seconds(config.durations.policy_reload);
    let running =
        countersign_broker_http::serve(state, config.listen, config.tls.as_ref(), reload).await?;
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    tracing::info!(addr = %running.addr, "broker listening");
    if let Some(dir) = dev {
        let token = config
            .console_token()?
            .map(|t| t.to_string())
            .unwrap_or_default();
        println!(
            "Countersign broker (dev mode) at {scheme}://{}",
            running.addr
        );
        println!("  state:         {}", dir.display());
        println!("  console token: {token}");
        println!(
            "  demo secrets:  DEMO_AUTOMATIC (automatic), DEMO_OWNER (owner {DEV_PERSON}), DEMO_SHARED (shared), DEMO_LOCKED (locked)"
        );
        println!(
            "Next: curl {scheme}://{}/v1/settings   (API: {scheme}://{}/v1/openapi.json)",
            running.addr, running.addr
        );
    }
    let handle = running.handle.clone();
    tokio::spawn(async move {
        shutdown_signal().await;
        tracing::info!("shutting down: finishing requests in flight");
        handle.graceful_shutdown(Some(Duration::from_secs(20)));
    });
    running.wait().await.context("server")?;
    Ok(())
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| "info,tower_http=info,sqlx=warn".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}

/// Dev mode's configuration, creating its state on first run.
fn dev_config(dir: &Path, port: u16) -> anyhow::Result<Config> {
    std::fs::create_dir_all(dir).with_context(|| format!("create {}", dir.display()))?;
    restrict(dir, 0o700)?;
    let seal = dir.join("seal.key");
    if !seal.exists() {
        write_secret(&seal, &countersign_proto::b64::encode(&random::<32>()))?;
    }
    let token = dir.join("console-token");
    if !token.exists() {
        write_secret(
            &token,
            &format!("cs-dev-{}", countersign_proto::b64::encode(&random::<24>())),
        )?;
    }
    let secrets = dir.join("secrets.toml");
    if !secrets.exists() {
        write_secret(&secrets, &demo_secrets())?;
    }
    let listen = SocketAddr::from(([127, 0, 0, 1], port));
    let db = dir.join("broker.db");
    let mut c = Config {
        listen,
        public_url: format!("http://{listen}"),
        database_url: format!("sqlite://{}?mode=rwc", db.display()),
        seal_key_file: seal,
        console_token_file: Some(token),
        tls: None,
        store: StoreConfig::Local { path: secrets },
        limits: LimitsConfig::default(),
        durations: Durations::default(),
        service_logins: Default::default(),
        token_issuer: None,
        notifications: None,
    };
    c.apply_env(|k| std::env::var(k).ok())?;
    Ok(c)
}

fn demo_secrets() -> String {
    let v = |p: &str| format!("{p}-{}", countersign_proto::b64::encode(&random::<12>()));
    format!(
        r#"# Dev mode's demo secrets (a local file store; edit freely, it is reread on every use).
prefix = "agents/"
key = "local"

[[secret]]
name = "agents/demo-automatic"
owner = "{DEV_PERSON}"
tier = "automatic"
value = "{}"

[[secret]]
name = "agents/demo-owner"
owner = "{DEV_PERSON}"
tier = "owner"
value = "{}"

[[secret]]
name = "agents/demo-shared"
owner = "{DEV_PERSON}"
tier = "shared"
value = "{}"

[[secret]]
name = "agents/demo-locked"
owner = "{DEV_PERSON}"
tier = "locked"
value = "{}"
"#,
        v("auto"),
        v("owner"),
        v("shared"),
        v("locked")
    )
}

fn random<const N: usize>() -> [u8; N] {
    countersign_broker_core::clock::random::<N>(&countersign_broker_core::SystemEntropy)
}

fn write_secret(path: &Path, contents: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts
        .open(path)
        .with_context(|| format!("create {}", path.display()))?;
    f.write_all(contents.as_bytes())?;
    Ok(())
}

fn restrict(path: &Path, mode: u32) -> anyhow::Result<()> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
    }
    let _ = mode;
    Ok(())
}
