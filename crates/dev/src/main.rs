//! `countersign-console`: the approval console's server (the binary of `countersign-dev`, the
//! crate above both servers, so that `dev` can run the broker too).
//!
//! - `countersign-console serve --config console.toml` runs from a configuration file (with
//!   `COUNTERSIGN_CONSOLE_*` environment overrides).
//! - `countersign-console dev` runs the broker and the console together on loopback, with the
//!   broker's dev state under `.countersign-dev/` and dev mode's local sign-in, the console at
//!   one printed URL, `http://localhost:PORT`, its notices kept in the dev mailbox.

/// mimalloc: measured on the broker's hot paths, 14% less server CPU per write request than
/// glibc's allocator (`docs/benchmarks.md`, `docs/decisions.md`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;
use clap::{Parser, Subcommand};
use countersign_common::server::{init_logs, shutdown_requested, stop_on_signal, traced};
use countersign_console_http::Config;

#[derive(Parser, Debug)]
#[command(
    name = "countersign-console",
    version,
    about = "The Countersign approval console"
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
        #[arg(long, short, env = "COUNTERSIGN_CONSOLE_CONFIG")]
        config: PathBuf,
    },
    /// Dev mode: the broker and the console together on loopback, state kept in DIR.
    Dev {
        /// Where dev state lives (the broker's database, demo secrets and keys; the console's
        /// database).
        #[arg(long, default_value = ".countersign-dev", env = "COUNTERSIGN_DEV_DIR")]
        dir: PathBuf,
        /// The broker's port on 127.0.0.1 (0 picks a free one).
        #[arg(long, default_value_t = 8080, env = "COUNTERSIGN_PORT")]
        broker_port: u16,
        /// The console's port on loopback, printed as `http://localhost:PORT` (0 picks a free
        /// one).
        #[arg(long, default_value_t = 8081, env = "COUNTERSIGN_CONSOLE_PORT")]
        console_port: u16,
        /// A TOML file with the console's optional tables (`[code_hosting]`,
        /// `[delivery_targets]`, `[agents]`, `[notifications]`), as `serve`'s configuration
        /// writes them.
        #[arg(long, short)]
        config: Option<PathBuf>,
    },
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    init_logs(cli.log_json, "info,tower_http=warn,sqlx=warn");
    match cli.command {
        Command::Serve { config } => {
            let config = Config::load(&config)?;
            let endpoint = config.otlp_endpoint.clone();
            traced("countersign-console", endpoint.as_deref(), serve(config)).await
        }
        Command::Dev {
            dir,
            broker_port,
            console_port,
            config,
        } => {
            // Dev mode exports traces when the standard variables name an endpoint.
            traced(
                "countersign-console",
                None,
                dev(dir, broker_port, console_port, config),
            )
            .await
        }
    }
}

/// `dev`: the broker and the console together until a signal, then both shut down.
async fn dev(
    dir: PathBuf,
    broker_port: u16,
    console_port: u16,
    config: Option<PathBuf>,
) -> anyhow::Result<()> {
    let options = countersign_dev::DevOptions {
        extras: match &config {
            Some(path) => countersign_dev::DevExtras::load(path)?,
            None => Default::default(),
        },
        ..Default::default()
    };
    let dev = countersign_dev::start_with(&dir, broker_port, console_port, options).await?;
    dev.print();
    shutdown_requested().await;
    dev.shutdown(std::time::Duration::from_secs(10)).await;
    Ok(())
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let state =
        countersign_console_http::build(&config, Arc::new(countersign_console_core::SystemClock))
            .await?;
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .with_context(|| format!("bind {}", config.listen))?;
    let running = countersign_console_http::serve(state, listener).await?;
    tracing::info!(addr = %running.addr, "console listening");
    let stop = running.stopper();
    stop_on_signal(move || {
        let _ = stop.send(true);
    });
    running.wait().await.context("server")
}
