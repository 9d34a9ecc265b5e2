//! `countersign-broker`: the secrets broker's server.
//!
//! - `countersign-broker serve --config broker.toml` runs from a configuration file (with
//!   `COUNTERSIGN_*` environment overrides).
//! - `countersign-broker dev` runs on embedded defaults: SQLite and a local store with demo
//!   secrets of every tier under `.countersign-dev/`, kept across restarts.
//! - `countersign-broker audit verify|export|accept-head` checks the audit log offline with the
//!   seal key (`docs/audit.md`).

/// mimalloc: measured on the broker's hot paths, 14% less server CPU per write request than
/// glibc's allocator (`docs/benchmarks.md`, `docs/decisions.md`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand};
use countersign_broker_core::SystemClock;
use countersign_broker_http::config::Config;
use countersign_common::server::{init_logs, shutdown_signal, stop_on_signal, traced};

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
    /// Check or export the audit log offline, with the seal key.
    Audit {
        #[command(subcommand)]
        action: AuditAction,
    },
    /// People's passkeys (docs/passkeys.md).
    Passkeys {
        #[command(subcommand)]
        action: PasskeysAction,
    },
}

#[derive(Subcommand, Debug)]
enum PasskeysAction {
    /// Print a one-time enrollment code for PERSON's first passkey: they type it on the
    /// console's passkeys page. Single use, short-lived; made with the seal key alone (no
    /// database). Give it to the person over a channel you trust: whoever holds it can register
    /// a passkey in their name until it is used or expires.
    EnrollCode {
        /// The person's login (`ada@example.com`).
        person: String,
        /// How long the code lives, in minutes (at most 1440).
        #[arg(long, default_value_t = 15)]
        minutes: i64,
        /// The broker's TOML configuration file.
        #[arg(
            long,
            short,
            env = "COUNTERSIGN_CONFIG",
            required_unless_present = "seal_key_file"
        )]
        config: Option<PathBuf>,
        /// The seal key file (instead of a configuration file).
        #[arg(long, conflicts_with = "config")]
        seal_key_file: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum AuditAction {
    /// Check everything sealed: every entry of the chain, every credential, enrollment, grant
    /// and record against its seal and the chain's entries, and that the chain holds the head
    /// this replica's state file remembers. `ok: N entries, head H`, or every finding (position,
    /// or table and id, and why) on stderr with exit status 1.
    Verify {
        #[command(flatten)]
        db: AuditDb,
        /// The replica's state file (default: as the configuration says).
        #[arg(long, conflicts_with = "no_state_file")]
        state_file: Option<PathBuf>,
        /// Do not compare against a state file.
        #[arg(long)]
        no_state_file: bool,
    },
    /// Print entries from a position or an RFC 3339 time on, as JSON lines (names, never
    /// values), verifying the chain as it goes; exit status 1 on a break.
    Export {
        #[command(flatten)]
        db: AuditDb,
        /// A position or an RFC 3339 time.
        #[arg(long, default_value = "1")]
        since: countersign_broker_http::audit::Since,
        /// Keep going: write new entries as they are appended, until SIGTERM or Ctrl-C (for
        /// a log shipper).
        #[arg(long)]
        follow: bool,
        /// With --follow: resume after the entry this file names, and write it after each
        /// batch (at-least-once delivery; `position` tells a repeat).
        #[arg(long, requires = "follow")]
        cursor_file: Option<PathBuf>,
        /// With --follow: how often to look for new entries, in milliseconds.
        #[arg(long, default_value_t = 1000, requires = "follow")]
        poll_ms: u64,
    },
    /// After investigating a break: verify the chain as it now is, record the acceptance in
    /// it (a sealed `head_accepted` entry, which also lets witnesses take the new head), and make
    /// its head the one this replica remembers (its state file); restart the broker afterwards.
    AcceptHead {
        #[command(flatten)]
        db: AuditDb,
        /// The state file (default: as the configuration says).
        #[arg(long)]
        state_file: Option<PathBuf>,
    },
}

/// Which database and seal key: a configuration file, or both given directly.
#[derive(clap::Args, Debug)]
struct AuditDb {
    /// The broker's TOML configuration file.
    #[arg(
        long,
        short,
        env = "COUNTERSIGN_CONFIG",
        required_unless_present = "database_url"
    )]
    config: Option<PathBuf>,
    /// The database URL (instead of a configuration file).
    #[arg(long, requires = "seal_key_file", conflicts_with = "config")]
    database_url: Option<String>,
    /// The seal key file (instead of a configuration file).
    #[arg(long, requires = "database_url")]
    seal_key_file: Option<PathBuf>,
}

use countersign_broker_http::dev::DEV_PERSON;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logs(cli.log_json, "info,tower_http=info,sqlx=warn");
    let (config, dev, bound) = match cli.command {
        Command::Audit { action } => return audit(action).await,
        Command::Passkeys { action } => return passkeys(action),
        Command::Serve { config } => (Config::load(&config)?, None, None),
        Command::Dev { dir, port } => {
            // Bind first, so that the public URL (every proof's `htu`) names the port really
            // bound, also when `--port 0` let the system pick it.
            let listen = SocketAddr::from(([127, 0, 0, 1], port));
            let listener =
                std::net::TcpListener::bind(listen).with_context(|| format!("bind {listen}"))?;
            let mut c = countersign_broker_http::dev::dev_config(&dir, listener.local_addr()?)?;
            c.apply_env(|k| std::env::var(k).ok())?;
            let pg = std::env::var(countersign_broker_http::dev::DEV_POSTGRES_VAR).ok();
            countersign_broker_http::dev::declare_demo_database(&mut c, &dir, pg.as_deref())?;
            // COUNTERSIGN_LISTEN may move it elsewhere: then bind that instead.
            let bound = (c.listen == listener.local_addr()?).then_some(listener);
            (c, Some(dir), bound)
        }
    };
    let endpoint = config.otlp_endpoint.clone();
    traced(
        "countersign-broker",
        endpoint.as_deref(),
        serve(config, dev, bound),
    )
    .await
}

/// Builds the broker from `config` and serves it (on `bound` when dev mode bound it already)
/// until a signal's graceful shutdown; dev mode (`dev`: its state directory) prints its banner
/// once listening.
async fn serve(
    config: Config,
    dev: Option<PathBuf>,
    bound: Option<std::net::TcpListener>,
) -> anyhow::Result<()> {
    let state = countersign_broker_http::server::build(&config, Arc::new(SystemClock)).await?;
    let audit_state_file = state.audit_state_file.clone();
    let reload = chrono::Duration::seconds(config.durations.policy_reload);
    let running = match bound {
        Some(listener) => {
            countersign_broker_http::server::serve_listener(
                state,
                listener,
                config.tls.as_ref(),
                reload,
            )
            .await?
        }
        None => {
            countersign_broker_http::serve(state, config.listen, config.tls.as_ref(), reload)
                .await?
        }
    };
    tracing::info!(addr = %running.addr, "broker listening");
    if let Some(dir) = dev {
        dev_banner(&config, &dir, audit_state_file.as_deref(), running.addr)?;
    }
    let handle = running.handle.clone();
    stop_on_signal(move || handle.graceful_shutdown(Some(Duration::from_secs(20))));
    running.wait().await.context("server")
}

/// What `dev` prints once listening: where its state is, the console token, the demo secrets,
/// and a first request to try.
fn dev_banner(
    config: &Config,
    dir: &std::path::Path,
    audit_state_file: Option<&std::path::Path>,
    addr: SocketAddr,
) -> anyhow::Result<()> {
    let scheme = if config.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let token = config
        .console_token()?
        .map(|t| t.to_string())
        .unwrap_or_default();
    // The public URL: what proofs' `htu` must name (the bound port, unless overridden).
    println!(
        "Countersign broker (dev mode) at {}",
        config.public_url.trim_end_matches('/')
    );
    println!("  state:         {}", dir.display());
    if let Some(p) = audit_state_file {
        println!("  audit state:   {}", p.display());
    }
    println!("  console token: {token}");
    println!(
        "  demo secrets:  DEMO_AUTOMATIC (automatic), DEMO_OWNER (owner {DEV_PERSON}), DEMO_SHARED (shared), DEMO_LOCKED (locked)"
    );
    println!("Next: curl {scheme}://{addr}/v1/settings   (API: {scheme}://{addr}/v1/openapi.json)");
    Ok(())
}

/// Runs a `passkeys` subcommand.
fn passkeys(action: PasskeysAction) -> anyhow::Result<()> {
    let PasskeysAction::EnrollCode {
        person,
        minutes,
        config,
        seal_key_file,
    } = action;
    let key = match (config, seal_key_file) {
        (Some(c), _) => Config::load(&c)?.seal_key()?,
        (None, Some(k)) => countersign_broker_http::config::read_seal_key(&k)?,
        (None, None) => anyhow::bail!("give --config or --seal-key-file"),
    };
    let sealer = countersign_broker_core::seal::Sealer::new(&key).context("seal key")?;
    let person = countersign_broker_core::ids::Login::parse(&person)
        .with_context(|| format!("{person:?} is not a login (local@domain)"))?;
    let code = countersign_broker_core::passkey::enroll_code(
        &sealer,
        &countersign_broker_core::clock::SystemEntropy,
        &person,
        chrono::Utc::now(),
        chrono::Duration::minutes(minutes),
    )
    .map_err(anyhow::Error::msg)?;
    println!("{}", code.value);
    eprintln!(
        "enrollment code for {person}'s first passkey, single use, until {} (type it on the console's passkeys page)",
        countersign_broker_core::clock::rfc3339(&code.expires_at)
    );
    Ok(())
}

/// Runs an `audit` subcommand.
async fn audit(action: AuditAction) -> anyhow::Result<()> {
    use countersign_broker_http::audit as log;
    let db = match &action {
        AuditAction::Verify { db, .. } | AuditAction::Export { db, .. } => db,
        AuditAction::AcceptHead { db, .. } => db,
    };
    let (config, url, key) = match (&db.config, &db.database_url, &db.seal_key_file) {
        (Some(c), _, _) => {
            let c = Config::load(c)?;
            let key = c.seal_key()?;
            (Some(c.clone()), c.database_url, key)
        }
        (None, Some(u), Some(k)) => (
            None,
            u.clone(),
            countersign_broker_http::config::read_seal_key(k)?,
        ),
        _ => anyhow::bail!("give --config, or --database-url and --seal-key-file"),
    };
    let sealer = countersign_broker_core::seal::Sealer::new(&key).context("seal key")?;
    let storage = countersign_broker_sql::SqlStorage::connect(&url)
        .await
        .map_err(|e| anyhow::anyhow!("database: {e}"))?;
    let broken = match action {
        AuditAction::Verify {
            state_file,
            no_state_file,
            ..
        } => {
            let path = match (state_file, &config, no_state_file) {
                (_, _, true) => None,
                (Some(p), _, _) => Some(p),
                (None, Some(c), _) => log::state_path(c)?,
                (None, None, _) => None,
            };
            return audit_verify(storage, &sealer, config.as_ref(), path).await;
        }
        AuditAction::Export {
            since,
            follow: true,
            cursor_file,
            poll_ms,
            ..
        } => {
            let mut out = std::io::stdout().lock();
            log::export_follow(
                &storage,
                &sealer,
                since,
                cursor_file.as_deref(),
                Duration::from_millis(poll_ms.max(10)),
                &mut out,
                shutdown_signal(),
            )
            .await?
        }
        AuditAction::Export { since, .. } => {
            let mut out = std::io::stdout().lock();
            log::export(&storage, &sealer, since, &mut out).await?
        }
        AuditAction::AcceptHead { state_file, .. } => {
            let path = match (state_file, &config) {
                (Some(p), _) => p,
                (None, Some(c)) => {
                    log::state_path(c)?.context("an in-memory database has no state file")?
                }
                (None, None) => anyhow::bail!("give --state-file or --config"),
            };
            audit_accept_head(&storage, &sealer, &path).await?
        }
    };
    storage.close().await;
    match broken {
        None => Ok(()),
        Some(b) => {
            eprintln!("broken at position {}: {}", b.position, b.reason.as_str());
            std::process::exit(1)
        }
    }
}

/// `audit verify`: every finding on stderr and exit status 1, or `ok` with the head.
async fn audit_verify(
    storage: countersign_broker_sql::SqlStorage,
    sealer: &countersign_broker_core::seal::Sealer,
    config: Option<&Config>,
    state_file: Option<PathBuf>,
) -> anyhow::Result<()> {
    use countersign_broker_http::audit as log;
    let remembered = match &state_file {
        Some(p) => log::read_state(p)?.map(|h| (h, format!("the state file {}", p.display()))),
        None => None,
    };
    let settings = match config {
        Some(c) => c.passkey_settings()?,
        None => None,
    };
    let found = log::inspect(&storage, sealer, settings.as_ref(), remembered).await?;
    storage.close().await;
    if found.findings.is_empty() {
        println!(
            "ok: {} entries, head {}",
            found.head.position, found.head.hash
        );
        return Ok(());
    }
    for f in &found.findings {
        eprintln!("{f}");
    }
    eprintln!(
        "{} finding(s) in {} entries and the sealed rows",
        found.findings.len(),
        found.entries
    );
    std::process::exit(1)
}

/// `audit accept-head`: the chain as it now is accepted and its head written to the state
/// file; the break instead when it does not verify.
async fn audit_accept_head(
    storage: &countersign_broker_sql::SqlStorage,
    sealer: &countersign_broker_core::seal::Sealer,
    path: &std::path::Path,
) -> anyhow::Result<Option<countersign_broker_core::audit::ChainBreak>> {
    use countersign_broker_http::audit as log;
    let remembered = log::read_state(path)?;
    match log::accept_head(storage, sealer, remembered.as_ref(), chrono::Utc::now()).await? {
        Ok(head) => {
            log::write_state(path, &head)?;
            println!(
                "accepted: head {} ({}) written to {}; restart the broker",
                head.position,
                head.hash,
                path.display()
            );
            Ok(None)
        }
        Err(b) => Ok(Some(b)),
    }
}
