//! Running one command for `run_with_secrets`: `/bin/sh -c COMMAND` in a process group of its
//! own, the granted values in its environment only, standard input empty, standard output and
//! error captured (the first [`HEAD`] and last [`TAIL`] bytes of each) and masked as a whole once
//! it has exited, with the values of every grant the session held before or after the command
//! (a command inside the session could have released another grant's values itself).
//!
//! A value shorter than [`crate::mask::MIN_VALUE_LEN`] cannot be masked: then the output is
//! withheld (only the exit status is answered). Where the capture was cut, the bytes before the
//! cut that may begin a value are dropped, and so are the first bytes after it up to the longest
//! pattern's length: no part of a value is shown around an omission.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use countersign_launcher_proto::Secret;
use countersign_launcher_proto::paths::SOCKET_ENV;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::io::{AsyncRead, AsyncReadExt};
use zeroize::{Zeroize, Zeroizing};

use crate::mask::{Masker, maskable, patterns};

use super::report::Reporter;

/// Bytes kept from the start of each stream.
pub const HEAD: usize = 24 * 1024;
/// Bytes kept from the end of each stream.
pub const TAIL: usize = 8 * 1024;
/// How long the pipes may stay open after the command exits (something it started still holds
/// them) before its process group is stopped.
const DRAIN: Duration = Duration::from_secs(2);
/// Between SIGTERM and SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(2);

/// The process groups of the commands running now, stopped when the server stops.
#[derive(Debug, Default, Clone)]
pub struct Commands(Arc<Mutex<HashSet<i32>>>);

impl Commands {
    fn add(&self, pgid: i32) {
        if let Ok(mut s) = self.0.lock() {
            s.insert(pgid);
        }
    }

    fn remove(&self, pgid: i32) {
        if let Ok(mut s) = self.0.lock() {
            s.remove(&pgid);
        }
    }

    /// SIGTERM to every running command's group, SIGKILL to those still there after a grace.
    pub async fn stop_all(&self) {
        let groups: Vec<i32> = self
            .0
            .lock()
            .map(|s| s.iter().copied().collect())
            .unwrap_or_default();
        if groups.is_empty() {
            return;
        }
        for g in &groups {
            let _ = killpg(Pid::from_raw(*g), Signal::SIGTERM);
        }
        tokio::time::sleep(KILL_GRACE).await;
        for g in &groups {
            let _ = killpg(Pid::from_raw(*g), Signal::SIGKILL);
        }
    }
}

/// The first and last bytes of a stream, and how many in between were dropped.
#[derive(Default)]
struct Capture {
    head: Zeroizing<Vec<u8>>,
    tail: Zeroizing<Vec<u8>>,
    dropped: u64,
}

impl Capture {
    fn push(&mut self, mut bytes: &[u8]) {
        if self.head.len() < HEAD {
            let n = (HEAD - self.head.len()).min(bytes.len());
            self.head.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
        }
        if bytes.is_empty() {
            return;
        }
        if self.tail.capacity() < 2 * TAIL {
            let mut grown = Zeroizing::new(Vec::with_capacity(2 * TAIL));
            grown.extend_from_slice(&self.tail);
            self.tail = grown;
        }
        for chunk in bytes.chunks(TAIL) {
            if self.tail.len() + chunk.len() > 2 * TAIL {
                let drop = self.tail.len() + chunk.len() - TAIL;
                let keep = self.tail.len() - drop;
                self.tail.copy_within(drop.., 0);
                self.tail[keep..].zeroize();
                self.tail.truncate(keep);
                self.dropped += drop as u64;
            }
            self.tail.extend_from_slice(chunk);
        }
    }

    fn finish(&mut self) {
        if self.tail.len() > TAIL {
            let drop = self.tail.len() - TAIL;
            let keep = TAIL;
            self.tail.copy_within(drop.., 0);
            self.tail[keep..].zeroize();
            self.tail.truncate(keep);
            self.dropped += drop as u64;
        }
    }
}

impl std::fmt::Debug for Capture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Capture")
            .field("head", &self.head.len())
            .field("tail", &self.tail.len())
            .field("dropped", &self.dropped)
            .finish()
    }
}

async fn capture(mut r: impl AsyncRead + Unpin) -> Capture {
    let mut c = Capture::default();
    let mut buf = Zeroizing::new(vec![0u8; 16 * 1024]);
    loop {
        match r.read(buf.as_mut_slice()).await {
            Ok(0) | Err(_) => break,
            Ok(n) => c.push(&buf[..n]),
        }
    }
    c.finish();
    c
}

/// How the command ended.
#[derive(Debug, Clone)]
pub struct Finished {
    /// Its exit status, 128 + the signal if killed; `None` if it could not be started.
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Stopped because the time limit passed.
    pub timed_out: bool,
    /// Why it could not be started.
    pub spawn_error: Option<String>,
}

/// One stream's masked text.
#[derive(Debug, Clone, Default)]
pub struct Shown {
    pub text: String,
    /// Bytes not shown (cut from the middle).
    pub omitted: u64,
}

/// A command's raw capture, masked only by [`Ran::mask`].
#[derive(Debug)]
pub struct Ran {
    pub finished: Finished,
    stdout: Capture,
    stderr: Capture,
}

/// Runs `command` with `env`; reports progress while it runs.
pub async fn run(
    command: &str,
    cwd: Option<&PathBuf>,
    env: &[(String, Secret)],
    socket: &std::path::Path,
    limit: Duration,
    commands: &Commands,
    report: &Reporter,
) -> Ran {
    let mut cmd = shell(command, cwd, env, socket);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            return Ran {
                finished: Finished {
                    exit_code: None,
                    signal: None,
                    timed_out: false,
                    spawn_error: Some(e.to_string()),
                },
                stdout: Capture::default(),
                stderr: Capture::default(),
            };
        }
    };
    let pgid = child.id().and_then(|p| i32::try_from(p).ok()).unwrap_or(0);
    if pgid > 0 {
        commands.add(pgid);
    }
    let out = child.stdout.take().map(|r| tokio::spawn(capture(r)));
    let err = child.stderr.take().map(|r| tokio::spawn(capture(r)));
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + limit;
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    tick.tick().await;
    let mut timed_out = false;
    let status = loop {
        tokio::select! {
            s = child.wait() => break s.ok(),
            () = tokio::time::sleep_until(deadline), if !timed_out => {
                timed_out = true;
                stop_group(pgid).await;
            }
            _ = tick.tick() => {
                report.say(&format!("the command is running ({} s)", started.elapsed().as_secs())).await;
            }
        }
    };
    let (stdout, stderr) = drain(out, err, pgid).await;
    if pgid > 0 {
        commands.remove(pgid);
    }
    let (exit_code, signal) = exit_of(status);
    Ran {
        finished: Finished {
            exit_code,
            signal,
            timed_out,
            spawn_error: None,
        },
        stdout,
        stderr,
    }
}

/// `/bin/sh -c command` in its own process group, with no stdin, its output piped, `env` and
/// the helper's socket set and the console token removed.
fn shell(
    command: &str,
    cwd: Option<&PathBuf>,
    env: &[(String, Secret)],
    socket: &std::path::Path,
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("/bin/sh");
    cmd.arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);
    if let Some(d) = cwd {
        cmd.current_dir(d);
    }
    for (name, value) in env {
        cmd.env(name, value.expose());
    }
    cmd.env(SOCKET_ENV, socket)
        .env_remove(super::console::TOKEN_ENV);
    cmd
}

/// The command's output once its pipes end: they end when every process holding them has
/// exited, so what the command left running gets a moment, then its group is stopped.
async fn drain(
    out: Option<tokio::task::JoinHandle<Capture>>,
    err: Option<tokio::task::JoinHandle<Capture>>,
    pgid: i32,
) -> (Capture, Capture) {
    let take = |h: Option<tokio::task::JoinHandle<Capture>>| async move {
        match h {
            Some(h) => h.await.unwrap_or_default(),
            None => Capture::default(),
        }
    };
    let both = async { (take(out).await, take(err).await) };
    tokio::pin!(both);
    match tokio::time::timeout(DRAIN, &mut both).await {
        Ok(b) => b,
        Err(_) => {
            stop_group(pgid).await;
            both.await
        }
    }
}

/// The exit code (128 + the signal when killed by one) and the signal of an exit status;
/// neither when it is unknown.
fn exit_of(status: Option<std::process::ExitStatus>) -> (Option<i32>, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match status {
        Some(s) => match (s.code(), s.signal()) {
            (Some(c), _) => (Some(c), None),
            (None, Some(sig)) => (Some(128 + sig), Some(sig)),
            _ => (None, None),
        },
        None => (None, None),
    }
}

async fn stop_group(pgid: i32) {
    if pgid <= 0 {
        return;
    }
    let g = Pid::from_raw(pgid);
    if killpg(g, Signal::SIGTERM).is_err() {
        return;
    }
    tokio::time::sleep(KILL_GRACE).await;
    let _ = killpg(g, Signal::SIGKILL);
}

/// Why output is not shown.
#[derive(Debug, Clone)]
pub struct Withheld(pub String);

impl Ran {
    /// The command's output, masked with every value in `values` (and their encodings).
    ///
    /// # Errors
    /// When a value is too short to be masked (the output is withheld), or the masker cannot
    /// be built.
    pub fn mask<'a>(
        mut self,
        values: impl IntoIterator<Item = (&'a str, &'a Secret)>,
    ) -> (Finished, Result<(Shown, Shown), Withheld>) {
        let values: Vec<(&str, &Secret)> = values.into_iter().collect();
        let short: Vec<&str> = values
            .iter()
            .filter(|(_, v)| !maskable(v.expose().as_bytes()))
            .map(|(n, _)| *n)
            .collect();
        if !short.is_empty() {
            let mut names: Vec<&str> = short;
            names.sort_unstable();
            names.dedup();
            return (
                self.finished,
                Err(Withheld(format!(
                    "output withheld: the value of {} is shorter than {} bytes and cannot be masked",
                    names.join(", "),
                    crate::mask::MIN_VALUE_LEN
                ))),
            );
        }
        let longest = values
            .iter()
            .flat_map(|(_, v)| patterns(v.expose().as_bytes()))
            .map(|p| p.len())
            .max()
            .unwrap_or(0);
        let build = || Masker::new(values.iter().map(|(_, v)| v.expose().as_bytes()));
        let shown = (|| {
            let out = show(&mut self.stdout, build()?, longest);
            let err = show(&mut self.stderr, build()?, longest);
            Ok::<_, crate::mask::BuildError>((out, err))
        })();
        match shown {
            Ok(s) => (self.finished, Ok(s)),
            Err(e) => (
                self.finished,
                Err(Withheld(format!("output withheld: the masker failed: {e}"))),
            ),
        }
    }
}

fn show(c: &mut Capture, mut m: Masker, longest: usize) -> Shown {
    let mut out = Zeroizing::new(Vec::with_capacity(c.head.len() + c.tail.len() + 64));
    if c.dropped == 0 {
        m.push(&c.head, &mut out);
        m.push(&c.tail, &mut out);
        m.finish(&mut out);
        return Shown {
            text: String::from_utf8_lossy(&out).into_owned(),
            omitted: 0,
        };
    }
    // Before the cut: what may begin a value stays held, and is dropped.
    m.push(&c.head, &mut out);
    let held = m.held() as u64;
    let mut scratch = Zeroizing::new(Vec::new());
    m.finish(&mut scratch);
    // After it: the first bytes may end a value.
    let skip = longest.saturating_sub(1).min(c.tail.len());
    let omitted = c.dropped + held + skip as u64;
    out.extend_from_slice(format!("\n[... {omitted} bytes omitted ...]\n").as_bytes());
    m.push(&c.tail[skip..], &mut out);
    m.finish(&mut out);
    Shown {
        text: String::from_utf8_lossy(&out).into_owned(),
        omitted,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn cap(data: &[u8]) -> Capture {
        let mut c = Capture::default();
        for chunk in data.chunks(1000) {
            c.push(chunk);
        }
        c.finish();
        c
    }

    #[test]
    fn keeps_head_and_tail() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        let c = cap(&data);
        assert_eq!(c.head.as_slice(), &data[..HEAD]);
        assert_eq!(c.tail.as_slice(), &data[data.len() - TAIL..]);
        assert_eq!(c.dropped as usize, data.len() - HEAD - TAIL);
        let small = cap(b"hello");
        assert_eq!(small.head.as_slice(), b"hello");
        assert_eq!(small.dropped, 0);
    }

    #[test]
    fn no_part_of_a_value_shows_around_the_cut() {
        let value = "s3cr3t-value-of-some-length";
        let secret = Secret::new(value.into());
        // The value straddles the head's end, another its tail's start, one is in the middle.
        for shift in 0..value.len() {
            let mut data = vec![b'.'; HEAD - shift];
            data.extend_from_slice(value.as_bytes());
            data.extend(std::iter::repeat_n(b'x', 20_000));
            data.extend_from_slice(value.as_bytes());
            let tail_start = data.len() + value.len() - shift;
            data.extend_from_slice(value.as_bytes());
            data.extend(std::iter::repeat_n(b'y', TAIL));
            let _ = tail_start;
            let ran = Ran {
                finished: Finished {
                    exit_code: Some(0),
                    signal: None,
                    timed_out: false,
                    spawn_error: None,
                },
                stdout: cap(&data),
                stderr: Capture::default(),
            };
            let (_, shown) = ran.mask([("V", &secret)]);
            let (out, _) = shown.unwrap();
            for w in 4..=value.len() {
                for part in value.as_bytes().windows(w) {
                    let part = std::str::from_utf8(part).unwrap();
                    if part.chars().all(|c| c == '.' || c == 'x' || c == 'y') {
                        continue;
                    }
                    assert!(!out.text.contains(part), "shift {shift}: {part:?} shows");
                }
            }
            assert!(out.omitted > 0);
        }
    }

    #[test]
    fn a_short_value_withholds_the_output() {
        let short = Secret::new("abc".into());
        let ran = Ran {
            finished: Finished {
                exit_code: Some(0),
                signal: None,
                timed_out: false,
                spawn_error: None,
            },
            stdout: cap(b"abc"),
            stderr: Capture::default(),
        };
        let (_, shown) = ran.mask([("SHORT", &short)]);
        assert!(shown.unwrap_err().0.contains("SHORT"));
    }
}
