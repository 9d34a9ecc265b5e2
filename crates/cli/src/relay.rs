//! The masked output path of `countersign run`: the command's output reaches ours only through
//! a [`Masker`] built from the granted values.
//!
//! - Our standard output is not a terminal: the command gets our standard input and pipes for
//!   its standard output and error, each copied through its own masker to ours, chunk by chunk
//!   (a chunk is written and flushed as soon as it is read; only a tail that may begin a value
//!   waits for the next read or the end of the stream).
//! - Our standard output is a terminal: the command gets a pseudo terminal of its own as its
//!   controlling terminal and standard output and error (as a terminal does), with our window
//!   size (and its changes); its output is copied through the masker to ours. When our standard
//!   input is a terminal too, it is put in raw mode while the command runs (restored on every
//!   exit path) and relayed to the pseudo terminal, whose line discipline turns ^C and ^Z into
//!   signals for the command's foreground job; otherwise the command gets our standard input.
//!   A tail held back because it may begin a value is shown after [`IDLE_FLUSH`] without more
//!   output, so a prompt always appears.
//!
//! Both wait for the command's output to end (the last writer to close it), as a pipe reader
//! does, before answering the command's exit status.

use std::ffi::OsString;
use std::io::{IsTerminal, Read};
use std::os::fd::AsFd;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use countersign_launcher_proto::Secret;
use countersign_launcher_proto::paths::SOCKET_ENV;
use nix::sys::termios::{SetArg, Termios, cfmakeraw, tcgetattr, tcsetattr};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::signal::unix::{Signal, SignalKind, signal};
use zeroize::Zeroizing;

use crate::child::{forward_signals_until_exit, spawn_failed, status_code};
use crate::exit::Fail;
use crate::mask::{Masker, maskable};

/// How long a held-back tail waits for more output on a terminal before it is shown anyway.
pub const IDLE_FLUSH: Duration = Duration::from_millis(50);

const CHUNK: usize = 64 * 1024;

/// Whether any of the values is long enough to be masked; warns about each that is not.
#[must_use]
pub fn any_maskable(masked: &[(String, Secret)]) -> bool {
    let mut any = false;
    for (name, value) in masked {
        if maskable(value.expose().as_bytes()) {
            any = true;
        } else {
            eprintln!(
                "countersign: {name} is shorter than {} bytes: it is not masked in the output",
                crate::mask::MIN_VALUE_LEN
            );
        }
    }
    any
}

fn masker(masked: &[(String, Secret)]) -> Result<Masker, Fail> {
    Masker::new(masked.iter().map(|(_, v)| v.expose().as_bytes()))
        .map_err(|e| Fail::failure(e.to_string()))
}

/// Runs `command` with `env`, its output masked with every value of `masked`; answers its exit
/// status.
///
/// # Errors
/// When the masker or the pseudo terminal cannot be made (the command is not started).
pub async fn run_masked(
    command: &[OsString],
    env: &[(String, Secret)],
    masked: &[(String, Secret)],
    socket: &Path,
) -> Result<u8, Fail> {
    let Some(program) = command.first() else {
        return Err(Fail::usage("name the command to run after --"));
    };
    let build = || masker(masked);
    if std::io::stdout().is_terminal() {
        via_pty(program, &command[1..], env, build()?, socket).await
    } else {
        via_pipes(program, &command[1..], env, [build()?, build()?], socket).await
    }
}

async fn via_pipes(
    program: &OsString,
    args: &[OsString],
    env: &[(String, Secret)],
    [out_masker, err_masker]: [Masker; 2],
    socket: &Path,
) -> Result<u8, Fail> {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (name, value) in env {
        cmd.env(name, value.expose());
    }
    cmd.env(SOCKET_ENV, socket);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => return Ok(spawn_failed(program, &e)),
    };
    let pid = child_pid(&child);
    let out = child
        .stdout
        .take()
        .map(|r| tokio::spawn(copy_masked(r, tokio::io::stdout(), out_masker, None)));
    let err = child
        .stderr
        .take()
        .map(|r| tokio::spawn(copy_masked(r, tokio::io::stderr(), err_masker, None)));
    let status = forward_signals_until_exit(&mut child, pid).await;
    for task in [out, err].into_iter().flatten() {
        let _ = task.await;
    }
    Ok(status_code(status))
}

async fn via_pty(
    program: &OsString,
    args: &[OsString],
    env: &[(String, Secret)],
    masker: Masker,
    socket: &Path,
) -> Result<u8, Fail> {
    let (pty, pts) = pty_process::open()
        .map_err(|e| Fail::failure(format!("opening a pseudo terminal: {e}")))?;
    copy_window_size(&pty);
    let stdin_tty = std::io::stdin().is_terminal();
    let mut cmd = pty_process::Command::new(program).args(args);
    for (name, value) in env {
        cmd = cmd.env(name, value.expose());
    }
    cmd = cmd.env(SOCKET_ENV, socket);
    if !stdin_tty {
        cmd = cmd.stdin(Stdio::inherit());
    }
    let mut child = match cmd.spawn(pts) {
        Ok(c) => c,
        Err(pty_process::Error::Io(e)) => return Ok(spawn_failed(program, &e)),
        Err(e) => return Err(Fail::failure(format!("starting the command: {e}"))),
    };
    let pid = child_pid(&child);
    let raw = if stdin_tty { RawMode::enter() } else { None };
    let (reader, writer) = pty.into_split();
    let output = tokio::spawn(copy_masked(
        reader,
        tokio::io::stdout(),
        masker,
        Some(IDLE_FLUSH),
    ));
    let input = tokio::spawn(relay_input(writer, stdin_tty));
    let status = forward_signals_until_exit(&mut child, pid).await;
    let _ = output.await;
    input.abort();
    drop(raw);
    Ok(status_code(status))
}

fn child_pid(child: &tokio::process::Child) -> Option<Pid> {
    child
        .id()
        .and_then(|p| i32::try_from(p).ok())
        .map(Pid::from_raw)
}

fn copy_window_size(pty: &impl PtySize) {
    if let Ok(ws) = rustix::termios::tcgetwinsize(std::io::stdout()) {
        pty.set_size(pty_process::Size::new_with_pixel(
            ws.ws_row,
            ws.ws_col,
            ws.ws_xpixel,
            ws.ws_ypixel,
        ));
    }
}

trait PtySize {
    fn set_size(&self, size: pty_process::Size);
}

impl PtySize for pty_process::Pty {
    fn set_size(&self, size: pty_process::Size) {
        let _ = self.resize(size);
    }
}

impl PtySize for pty_process::OwnedWritePty {
    fn set_size(&self, size: pty_process::Size) {
        let _ = self.resize(size);
    }
}

/// Our terminal in raw mode while the command runs; restored when dropped.
struct RawMode(Termios);

impl RawMode {
    fn enter() -> Option<Self> {
        let stdin = std::io::stdin();
        let saved = tcgetattr(stdin.as_fd()).ok()?;
        let mut raw = saved.clone();
        cfmakeraw(&mut raw);
        tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw).ok()?;
        Some(Self(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = tcsetattr(std::io::stdin().as_fd(), SetArg::TCSADRAIN, &self.0);
    }
}

/// Our keystrokes to the pseudo terminal, and our window size changes.
async fn relay_input(mut writer: pty_process::OwnedWritePty, stdin_tty: bool) {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Zeroizing<Vec<u8>>>(16);
    if stdin_tty {
        // A thread of its own: a blocking read of a terminal cannot be cancelled, and the
        // process ends without waiting for it.
        std::thread::spawn(move || {
            let mut buf = Zeroizing::new([0u8; 4096]);
            let mut stdin = std::io::stdin().lock();
            while let Ok(n) = stdin.read(buf.as_mut_slice()) {
                if n == 0 || tx.blocking_send(Zeroizing::new(buf[..n].to_vec())).is_err() {
                    break;
                }
            }
        });
    } else {
        drop(tx);
    }
    let mut winch = signal(SignalKind::window_change()).ok();
    let mut open = true;
    loop {
        tokio::select! {
            keys = rx.recv(), if open => match keys {
                Some(k) => {
                    if writer.write_all(&k).await.is_err() {
                        open = false;
                    }
                }
                None => open = false,
            },
            () = next_signal(&mut winch) => copy_window_size(&writer),
        }
    }
}

async fn next_signal(s: &mut Option<Signal>) {
    match s {
        Some(s) => {
            if s.recv().await.is_none() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// Copies `r` to `w` through `m` until `r` ends (or fails: a pseudo terminal whose last
/// slave closed answers EIO) or `w` fails (then `r` is dropped, and the command's next write
/// fails as it would have on our closed output). With `idle`, a held-back tail is shown after
/// that long without more input.
async fn copy_masked<R, W>(mut r: R, mut w: W, mut m: Masker, idle: Option<Duration>)
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = Zeroizing::new(vec![0u8; CHUNK]);
    let mut out = Zeroizing::new(Vec::with_capacity(CHUNK + 1024));
    loop {
        let read = match idle {
            Some(wait) if m.held() > 0 => {
                match tokio::time::timeout(wait, r.read(buf.as_mut_slice())).await {
                    Ok(read) => read,
                    Err(_) => {
                        m.finish(&mut out);
                        if write_out(&mut w, &mut out).await.is_err() {
                            return;
                        }
                        continue;
                    }
                }
            }
            _ => r.read(buf.as_mut_slice()).await,
        };
        match read {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                m.push(&buf[..n], &mut out);
                if write_out(&mut w, &mut out).await.is_err() {
                    return;
                }
            }
        }
    }
    m.finish(&mut out);
    let _ = write_out(&mut w, &mut out).await;
}

async fn write_out<W: AsyncWrite + Unpin>(w: &mut W, out: &mut Vec<u8>) -> std::io::Result<()> {
    if out.is_empty() {
        return Ok(());
    }
    let r = w.write_all(out).await;
    out.clear();
    r?;
    w.flush().await
}
