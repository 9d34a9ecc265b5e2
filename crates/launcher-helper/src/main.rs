//! `countersign-launcher`: the launcher helper daemon. Thin: parses flags, then runs
//! [`countersign_launcher_helper::run`].

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use countersign_launcher_helper::{HelperConfig, SessionCgroups};
use countersign_launcher_proto::paths;

/// The Countersign launcher helper: holds this machine's launcher credential and every
/// session's signing key, and signs for processes by where they stand in the process tree.
///
/// It listens on a Unix socket (mode 0600) speaking newline-delimited JSON; the `countersign`
/// command is its usual client (protocol: docs/launcher-helper.md). The launcher credential
/// (with the machine key) is kept in STATE_DIR/launcher-credential.json, mode 0600, unless
/// --no-store. Sessions' keys live only in memory: when the helper stops (SIGTERM, SIGINT), it
/// ends its sessions at the broker.
#[derive(Parser, Debug)]
#[command(name = "countersign-launcher", version)]
struct Args {
    /// The broker's public URL (proofs are bound to it).
    #[arg(long, env = "COUNTERSIGN_BROKER_URL", value_name = "URL")]
    broker: String,
    /// The approval console's address, shown to a person logging in.
    #[arg(long, env = "COUNTERSIGN_CONSOLE_URL", value_name = "URL")]
    console_url: Option<String>,
    /// The socket to listen on [default: $XDG_RUNTIME_DIR/countersign/launcher.sock].
    #[arg(long, env = paths::SOCKET_ENV, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Where the launcher credential is kept [default: $XDG_STATE_HOME/countersign, else
    /// ~/.local/state/countersign].
    #[arg(long, env = "COUNTERSIGN_STATE_DIR", value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Keep the launcher credential in memory only: nothing is written to STATE_DIR, and the
    /// machine logs in again after every restart of the helper.
    #[arg(long)]
    no_store: bool,
    /// This machine's name as logins and sessions show it [default: the host name].
    #[arg(long, value_name = "NAME")]
    host: Option<String>,
    /// Log in as this service at start, with --token-file, and keep logging in.
    #[arg(long, requires = "token_file", value_name = "NAME")]
    service: Option<String>,
    /// The service's ServiceAccount token file (reread at each login).
    #[arg(long, requires = "service", value_name = "PATH")]
    token_file: Option<PathBuf>,
    /// Whether each session gets a cgroup v2 directory of its own, which keeps every process it
    /// runs inside it whatever happens to its ancestry: `auto` where the helper can make one
    /// (root, or a delegated subtree), `require` (do not start without), `off`.
    #[arg(long, value_enum, default_value = "auto", value_name = "WHEN")]
    session_cgroups: CgroupsArg,
    /// The cgroup v2 directory session cgroups are made in [default: the helper's own].
    #[arg(long, value_name = "DIR")]
    cgroup_dir: Option<PathBuf>,
    /// Log as JSON lines instead of text.
    #[arg(long, env = "COUNTERSIGN_LOG_JSON")]
    log_json: bool,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug)]
enum CgroupsArg {
    Auto,
    Require,
    Off,
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("countersign-launcher: {msg}");
    ExitCode::from(2)
}

fn main() -> ExitCode {
    let args = Args::parse();
    init_logs(args.log_json);
    let Some(socket) = args
        .socket
        .clone()
        .or_else(|| paths::default_socket(paths::process_env))
    else {
        return usage("no socket path: set XDG_RUNTIME_DIR or give --socket");
    };
    let Some(state_dir) = args
        .state_dir
        .clone()
        .or_else(|| paths::default_state_dir(paths::process_env))
    else {
        return usage("no state directory: set XDG_STATE_HOME or HOME, or give --state-dir");
    };
    let service_login = match (args.service, args.token_file) {
        (Some(s), Some(f)) => match std::path::absolute(&f) {
            Ok(f) => Some((s, f)),
            Err(e) => return usage(&format!("--token-file {}: {e}", f.display())),
        },
        _ => None,
    };
    let mut cfg = HelperConfig::new(&args.broker, state_dir);
    cfg.console_url = args.console_url;
    cfg.no_store = args.no_store;
    cfg.session_cgroups = match args.session_cgroups {
        CgroupsArg::Auto => SessionCgroups::Auto,
        CgroupsArg::Require => SessionCgroups::Require,
        CgroupsArg::Off => SessionCgroups::Off,
    };
    cfg.cgroup_dir = args.cgroup_dir;
    if let Some(h) = args.host {
        cfg.host = h;
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("countersign-launcher: runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match rt.block_on(countersign_launcher_helper::run(cfg, socket, service_login)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("countersign-launcher: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logs(json: bool) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let b = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if json {
        b.json().init();
    } else {
        b.init();
    }
}
