//! The command a session runs, as a child process: a start that failed reported as 127 or 126,
//! SIGTERM and SIGHUP passed on to it (SIGINT and SIGQUIT too unless standard input is a
//! terminal, whose own keys already reach it), and its exit status as ours. Both ways of
//! running it use these: directly (`run`) and through the masker (`relay`).

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tokio::signal::unix::{SignalKind, signal};

use crate::exit;

/// Reports a command that could not be started; answers 127 (not found) or 126.
pub(crate) fn spawn_failed(program: &OsString, e: &std::io::Error) -> u8 {
    let shown = Path::new(program).display().to_string();
    let (code, why) = if e.kind() == std::io::ErrorKind::NotFound {
        (exit::NOT_FOUND, "command not found")
    } else {
        (exit::CANNOT_EXECUTE, "cannot execute")
    };
    eprintln!("countersign: {shown}: {why}: {e}");
    code
}

/// The command's exit status as ours (128 + the signal if it was killed).
pub(crate) fn status_code(status: std::io::Result<std::process::ExitStatus>) -> u8 {
    match status {
        Ok(s) => match (s.code(), s.signal()) {
            (Some(c), _) => u8::try_from(c).unwrap_or(exit::FAILURE),
            (None, Some(sig)) => exit::for_signal(sig),
            _ => exit::FAILURE,
        },
        Err(e) => {
            eprintln!("countersign: waiting for the command: {e}");
            exit::FAILURE
        }
    }
}

pub(crate) async fn forward_signals_until_exit(
    child: &mut tokio::process::Child,
    pid: Option<Pid>,
) -> std::io::Result<std::process::ExitStatus> {
    let tty = std::io::stdin().is_terminal();
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut quit = signal(SignalKind::quit())?;
    let send = |s: Signal| {
        if let Some(p) = pid {
            let _ = kill(p, s);
        }
    };
    loop {
        tokio::select! {
            status = child.wait() => return status,
            _ = term.recv() => send(Signal::SIGTERM),
            _ = hup.recv() => send(Signal::SIGHUP),
            _ = int.recv() => if !tty { send(Signal::SIGINT) },
            _ = quit.recv() => if !tty { send(Signal::SIGQUIT) },
        }
    }
}
