//! `countersign mcp`: a Model Context Protocol server on standard input and output through
//! which a model uses secrets without ever seeing them (docs/agents.md).
//!
//! 1. This process becomes a child subreaper and registers itself with the launcher helper as
//!    a session's root, as `countersign run` does: the helper makes and keeps the session's key,
//!    this process never holds one. (Started inside a session already, it serves that session
//!    and leaves it running at exit.)
//! 2. It serves MCP over stdio with [`rmcp`] ([`tools::Server`]): secret tools always, console
//!    tools when a console agent token is configured (then it also holds the session's console
//!    link, [`console::LinkTask`]).
//! 3. When standard input closes, or on SIGTERM, SIGINT or SIGHUP, it stops the commands still
//!    running (their process groups), unregisters the session (the helper unenrolls it at the
//!    broker, which ends its grants and pending requests) and exits 0. Killed otherwise, the
//!    helper sees the root gone within a second and ends the session all the same.
//!
//! Standard output carries the protocol only: nothing here prints to it, and commands get
//! pipes of their own. Log lines go to standard error ([`log`]) and name sessions, requests,
//! records, grants and secret names, never a value. No `tracing` subscriber is installed, so the
//! SDK's own tracing (which could show messages) prints nothing.

pub mod console;
pub mod exec;
pub mod report;
pub mod requests;
pub mod tools;

use std::sync::Arc;
use std::time::Duration;

use countersign_launcher_proto::messages::{Register, SessionState, Standing};
use rmcp::ServiceExt;
use tokio::signal::unix::{SignalKind, signal};

use crate::args::McpArgs;
use crate::ctx::Ctx;
use crate::exit::{self, Fail};

/// A line on standard error for the person running the agent (never a value).
pub fn log(line: impl AsRef<str>) {
    eprintln!("countersign mcp: {}", line.as_ref());
}

/// The session this server acts for.
#[derive(Debug, Clone)]
pub struct SessionFacts {
    pub enrollment_id: String,
    pub runtime_id: String,
    /// The console session id (and the broker's notification session).
    pub session_id: String,
    /// Registered by this process (and so unregistered at exit).
    pub own: bool,
}

/// Runs `countersign mcp` on a runtime of its own; answers the exit status.
pub fn main(ctx: Ctx, args: McpArgs) -> Result<u8, Fail> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Fail::failure(format!("runtime: {e}")))?;
    let code = rt.block_on(serve(ctx, args));
    // A blocking read of standard input (when it is not a pipe) cannot be cancelled: do not
    // wait for it.
    rt.shutdown_timeout(Duration::from_millis(200));
    code
}

fn new_session_id() -> Result<String, Fail> {
    let r = countersign_proto::claims::new_jti()
        .map_err(|e| Fail::failure(format!("a random session id: {e}")))?;
    let tail: String = r
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(16)
        .collect();
    Ok(format!("mcp-{}", tail.to_ascii_lowercase()))
}

/// Registers (or finds) the session this process acts for.
fn session(ctx: &Ctx, args: &McpArgs) -> Result<SessionFacts, Fail> {
    let status = ctx.helper.status()?;
    if status.caller.standing == Standing::Session
        && let Some(s) = status.caller.session
    {
        let enrollment_id = match (s.state, s.enrollment_id) {
            (SessionState::Enrolled, Some(id)) => id,
            _ => {
                return Err(Fail::failure(format!(
                    "this process runs inside session {} whose enrollment is not live: {}",
                    s.runtime_id,
                    s.error.as_deref().unwrap_or("?")
                )));
            }
        };
        let session_id = match (&args.session_id, s.session_id) {
            (Some(a), _) => a.clone(),
            (None, Some(b)) => b,
            (None, None) => new_session_id()?,
        };
        log(format!(
            "already inside session {} (enrollment {enrollment_id}): serving it; it stays when this server exits",
            s.runtime_id
        ));
        return Ok(SessionFacts {
            enrollment_id,
            runtime_id: s.runtime_id,
            session_id,
            own: false,
        });
    }
    let session_id = match &args.session_id {
        Some(s) => s.clone(),
        None => new_session_id()?,
    };
    // What the commands leave running is reparented here, not to init: it stays in the session.
    let _ = nix::sys::prctl::set_child_subreaper(true);
    let s = ctx.helper.register(Register {
        session_id: Some(session_id.clone()),
        wait: true,
        label: Some(args.label.clone()),
    })?;
    let Some(enrollment_id) = s
        .enrollment_id
        .filter(|_| s.state == SessionState::Enrolled)
    else {
        let _ = ctx.helper.unregister();
        return Err(Fail::failure(format!(
            "the session did not enroll: {}",
            s.error.as_deref().unwrap_or("?")
        )));
    };
    log(format!(
        "session {} enrolled (enrollment {enrollment_id}, console session {session_id})",
        s.runtime_id
    ));
    Ok(SessionFacts {
        enrollment_id,
        runtime_id: s.runtime_id,
        session_id,
        own: true,
    })
}

async fn serve(ctx: Ctx, args: McpArgs) -> Result<u8, Fail> {
    let facts = session(&ctx, &args)?;
    let own = facts.own;
    let ctx = Arc::new(ctx);
    let result = serve_session(Arc::clone(&ctx), &args, facts).await;
    if own {
        match ctx.helper.unregister() {
            Ok(_) => log("session ended"),
            Err(e) => log(format!("ending the session: {e}")),
        }
    }
    result
}

async fn serve_session(ctx: Arc<Ctx>, args: &McpArgs, facts: SessionFacts) -> Result<u8, Fail> {
    let console = console::Console::configure(&ctx, args, &facts)?;
    let link = console.as_ref().map(|c| c.start_link(args));
    let server = tools::Server::new(Arc::clone(&ctx), facts, args.wait, console);
    let commands = server.commands();
    let running = server
        .serve(rmcp::transport::stdio_pipes())
        .await
        .map_err(|e| Fail::failure(format!("starting MCP on stdio: {e}")))?;
    let mut term = signal(SignalKind::terminate()).map_err(io_fail)?;
    let mut int = signal(SignalKind::interrupt()).map_err(io_fail)?;
    let mut hup = signal(SignalKind::hangup()).map_err(io_fail)?;
    let stop = running.cancellation_token();
    let why = tokio::select! {
        r = running.waiting() => match r {
            Ok(reason) => format!("the client closed the connection ({reason:?})"),
            Err(e) => format!("the server stopped: {e}"),
        },
        _ = term.recv() => { stop.cancel(); "SIGTERM".to_owned() }
        _ = int.recv() => { stop.cancel(); "SIGINT".to_owned() }
        _ = hup.recv() => { stop.cancel(); "SIGHUP".to_owned() }
    };
    log(format!("stopping: {why}"));
    commands.stop_all().await;
    // The link closes (the session is no longer live on the console) while the session ends.
    if let Some(l) = link {
        tokio::spawn(l.stop());
    }
    Ok(exit::SUCCESS)
}

fn io_fail(e: std::io::Error) -> Fail {
    Fail::failure(format!("signal handler: {e}"))
}
