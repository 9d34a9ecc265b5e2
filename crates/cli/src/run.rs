//! `run`: a session around one command.
//!
//! 1. This process becomes a child subreaper (so what the command leaves running is reparented
//!    here, and stays inside the session's process tree while it lasts) and registers itself
//!    with the helper as a session's root; the helper makes the session's key and enrolls it.
//! 2. The secrets are requested with the reason; a pending request is waited for (75 when not
//!    waiting or when the wait times out, after cancelling it; 77 when denied).
//! 3. The command is started with each granted value in the environment variable of its name,
//!    and each part of an issued secret's credential (`PGPASSWORD`, `AWS_ACCESS_KEY_ID` …) in
//!    its own, the first secret in the grant winning a variable two give ([`crate::granted`])
//!    (127 when it is not found, 126 when it cannot be executed). Its output reaches ours
//!    through a masker that conceals every value and every part ([`crate::relay`]), unless
//!    `--no-mask`.
//!    SIGTERM and SIGHUP are passed on to it; so are SIGINT and SIGQUIT unless standard input
//!    is a terminal (whose own keys already reach the command).
//! 4. When it exits, the session is unregistered (the helper unenrolls it at the broker, which
//!    ends its grants), and its exit status is returned (128 + the signal if it was killed).

use std::ffi::OsString;
use std::ops::ControlFlow;
use std::path::Path;

use countersign_launcher_proto::messages::Register;
use countersign_launcher_proto::paths::SOCKET_ENV;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::args::RunArgs;
use crate::child::{forward_signals_until_exit, spawn_failed, status_code};
use crate::ctx::Ctx;
use crate::exit::{self, Fail};
use crate::granted::Granted;
use crate::{relay, session};

/// Unregisters the session when dropped, whatever path `run` leaves by.
struct SessionGuard<'a>(&'a Ctx);

impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.0.helper.unregister() {
            eprintln!("countersign: ending the session: {e}");
        }
    }
}

fn default_reason(command: &[OsString]) -> String {
    let line = command
        .iter()
        .map(|a| a.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ");
    let line: String = line.chars().take(200).collect();
    format!("countersign run: {line}")
}

pub async fn run(ctx: &Ctx, a: RunArgs) -> Result<u8, Fail> {
    let Some(program) = a.command.first().cloned() else {
        return Err(Fail::usage("name the command to run after --"));
    };
    let label = Path::new(&program)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    // Orphans of the command are reparented here, not to init: they stay in the session.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let session = ctx.helper.register(Register {
        session_id: a.ask.session_id.clone(),
        wait: true,
        label,
    })?;
    let _guard = SessionGuard(ctx);
    ctx.note(&format!(
        "countersign: session {} enrolled",
        session.enrollment_id.as_deref().unwrap_or("?")
    ));

    let granted = match granted_env(ctx, &a).await? {
        ControlFlow::Continue(g) => g,
        ControlFlow::Break(code) => return Ok(code),
    };

    if !a.no_mask && relay::any_maskable(&granted.masked) {
        let code = relay::run_masked(&a.command, &granted.env, &granted.masked, &ctx.socket).await;
        drop(granted);
        return code;
    }
    let mut cmd = tokio::process::Command::new(&program);
    cmd.args(&a.command[1..]);
    for (name, value) in &granted.env {
        cmd.env(name, value.expose());
    }
    cmd.env(SOCKET_ENV, &ctx.socket);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Ok(spawn_failed(&program, &e)),
    };
    drop(granted);
    let pid = child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(Pid::from_raw);
    let status = forward_signals_until_exit(&mut child, pid).await;
    Ok(status_code(status))
}

/// The environment the command runs with and the values its output masks, from a request for
/// `--secret`s answered now or after a wait: none when it names no secret; `Break` with the
/// exit code when it must not run (interrupted, left pending under `--no-wait`, denied).
async fn granted_env(ctx: &Ctx, a: &RunArgs) -> Result<ControlFlow<u8, Granted>, Fail> {
    if a.ask.secrets.is_empty() {
        return Ok(ControlFlow::Continue(Granted::default()));
    }
    let reason = a
        .reason
        .clone()
        .unwrap_or_else(|| default_reason(&a.command));
    let created = session::create(ctx, &a.ask, &reason).await?;
    let id = created.answer.request_id.clone();
    let waited = tokio::select! {
        r = session::wait(ctx, created, a.ask.no_wait, a.ask.timeout) => r?,
        _ = tokio::signal::ctrl_c() => {
            let _ = session::cancel_request(ctx, &id).await;
            eprintln!("countersign: interrupted; request {id} cancelled");
            return Ok(ControlFlow::Break(exit::for_signal(libc_sigint())));
        }
    };
    match waited.answer.state.as_str() {
        "granted" => {
            let grant = waited.answer.grant_id.clone().unwrap_or_default();
            let v = session::values(ctx, &grant).await?;
            Ok(ControlFlow::Continue(v.granted()))
        }
        "pending" => {
            let _ = session::cancel_request(ctx, &waited.answer.request_id).await;
            ctx.print(&waited.raw, || waited.describe());
            ctx.note(
                "countersign: not waiting for the approval; the request is withdrawn with the session (run again without --no-wait, or use `countersign request` inside a session to leave one pending)",
            );
            Ok(ControlFlow::Break(exit::PENDING))
        }
        "denied" => {
            ctx.print(&waited.raw, || waited.describe());
            Ok(ControlFlow::Break(exit::DENIED))
        }
        _ => Err(Fail::failure(waited.describe())),
    }
}

fn libc_sigint() -> i32 {
    Signal::SIGINT as i32
}
