//! The secret prompt's exit statuses: each signal sent to a real `countersign` process while it
//! waits at the prompt; and, when tmux is installed, hidden input on a real terminal.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::Read;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// Starts `countersign login --service svc` (no token file: it prompts), waits for the prompt.
fn at_prompt(helper: &Helper) -> (std::process::Child, std::process::ChildStdin) {
    let mut child = helper
        .cli()
        .args(["login", "--service", "svc"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut buf = [0u8; 256];
    while !String::from_utf8_lossy(&seen).contains("ServiceAccount token for svc: ") {
        assert!(
            Instant::now() < deadline,
            "no prompt: {}",
            String::from_utf8_lossy(&seen)
        );
        let n = err.read(&mut buf).unwrap();
        assert!(n > 0, "stderr closed: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    // Keep draining stderr so the child never blocks on it.
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut err, &mut std::io::sink());
    });
    (child, stdin)
}

#[test]
fn each_signal_at_the_prompt_exits_with_its_code() {
    // The prompt needs only a helper that answers (no broker is called before it).
    let helper = Helper::start("http://127.0.0.1:9");
    for (signal, code) in [
        (Signal::SIGHUP, 129),
        (Signal::SIGINT, 130),
        (Signal::SIGQUIT, 131),
        (Signal::SIGTERM, 143),
    ] {
        let (mut child, stdin) = at_prompt(&helper);
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        let status = wait_timeout(&mut child, Duration::from_secs(20));
        drop(stdin);
        assert_eq!(status.code(), Some(code), "{signal:?}");
    }
    // End of input at the prompt: nothing was entered, a usage error.
    let (mut child, stdin) = at_prompt(&helper);
    drop(stdin);
    assert_eq!(
        wait_timeout(&mut child, Duration::from_secs(20)).code(),
        Some(2)
    );
}

fn tmux(socket: &str, args: &[&str]) -> Option<String> {
    let out = std::process::Command::new("tmux")
        .arg("-S")
        .arg(socket)
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn on_a_terminal_the_token_is_not_echoed_and_ctrl_c_exits_130() {
    if std::process::Command::new("tmux")
        .arg("-V")
        .output()
        .is_err()
    {
        println!("skipped: tmux is not installed");
        return;
    }
    let helper = Helper::start("http://127.0.0.1:9");
    let dir = TempDir::new("tmux");
    let sock = dir.0.join("tmux.sock");
    let sock = sock.to_str().unwrap();
    let status_file = dir.0.join("status");
    let command = format!(
        "trap '' INT; '{}' --socket '{}' login --service svc; echo $? > '{}'",
        cli_bin().display(),
        helper.socket.display(),
        status_file.display()
    );
    tmux(
        sock,
        &["new-session", "-d", "-x", "120", "-y", "20", &command],
    )
    .unwrap();
    let screen = |want: &str| {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let s = tmux(sock, &["capture-pane", "-p"]).unwrap_or_default();
            if s.contains(want) {
                return s;
            }
            assert!(Instant::now() < deadline, "never saw {want:?}: {s}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    screen("ServiceAccount token for svc:");
    tmux(sock, &["send-keys", "secret-typed-here"]).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let s = screen("ServiceAccount token for svc:");
    assert!(!s.contains("secret-typed-here"), "echoed: {s}");
    tmux(sock, &["send-keys", "C-c"]).unwrap();
    // The shell writes the status and a newline: read it once the line is whole.
    let deadline = Instant::now() + Duration::from_secs(20);
    let code = loop {
        let written = std::fs::read_to_string(&status_file).unwrap_or_default();
        if written.ends_with('\n') {
            break written;
        }
        assert!(Instant::now() < deadline, "no status");
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = tmux(sock, &["kill-server"]);
    assert_eq!(code.trim(), "130");
}
