//! # countersign-launcher-helper
//!
//! The launcher helper (`countersign-launcher`): a per-user daemon on a Unix socket that holds
//! the machine's launcher credential and every session's key, so that no agent process ever
//! holds a key. Programs ask it, in newline-delimited JSON (`countersign-launcher-proto`), to
//! register a session, sign proofs and secret requests for a session, or sign launcher proofs
//! for the operator routes; it decides from the caller's place in the process tree, as the
//! kernel reports it.
//!
//! - [`procfs`]: processes named by pid and start time, ancestry walks;
//! - [`peer`]: SO_PEERCRED and the re-checks around each identification;
//! - [`tracker`]: the processes seen inside each session, sticky until they exit;
//! - [`cgroup`]: a cgroup v2 directory per session, where the machine lets the helper make one;
//! - [`clock`]: the injected wall clock;
//! - [`helper`]: the state and the operations, by area (login, credential, sessions and the
//!   `membership` decision, signing, renewal);
//! - [`keys`]: making keys and signing (aws-lc-rs; a test may set another source);
//! - [`store`]: the launcher credential at rest;
//! - [`server`]: the socket, framing and background ticks.
//!
//! The protocol is written down in `docs/launcher-helper.md`.

pub mod cgroup;
pub mod clock;
pub mod helper;
pub mod keys;
pub mod peer;
pub mod procfs;
pub mod server;
pub mod store;
pub mod tracker;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub use helper::{Helper, HelperConfig, SessionCgroups};

/// Runs the helper on `socket` until SIGTERM or SIGINT; then ends every enrolled session at
/// the broker and removes the socket. With `service_login`, logs the service in with its token
/// file first (and keeps it logged in).
///
/// # Errors
/// When the helper cannot start: bad configuration, a stored credential that cannot be read,
/// a socket that cannot be made, or a failed service login.
pub async fn run(
    cfg: HelperConfig,
    socket: PathBuf,
    service_login: Option<(String, PathBuf)>,
) -> anyhow::Result<()> {
    // Not dumpable: no core file holds the keys, and processes of the same user (agents among
    // them) cannot ptrace the helper or read its memory through /proc.
    if let Err(e) = nix::sys::prctl::set_dumpable(false) {
        tracing::warn!(error = %e, "could not make the helper non-dumpable");
    }
    let helper = Arc::new(Helper::new(cfg)?);
    if let Some((service, file)) = service_login {
        let info = helper.login_with_token_file(&service, &file).await?;
        tracing::info!(credential_id = %info.credential_id, %service, "service logged in");
    }
    let listener = server::bind(&socket)?;
    let _cleanup = server::SocketFile(socket.clone());
    tracing::info!(socket = %socket.display(), broker = %helper.config().broker_url, "launcher helper listening");
    println!("countersign-launcher listening on {}", socket.display());
    server::serve(helper.clone(), listener, stop_signal()).await;
    tracing::info!("stopping: ending this helper's sessions at the broker");
    helper.shutdown(Duration::from_secs(5)).await;
    Ok(())
}

async fn stop_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}
