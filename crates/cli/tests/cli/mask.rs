//! Masked output of `countersign run`, end to end: the real broker, the real helper, the real
//! `countersign`, a real `sh` child printing its granted value in pieces and encodings, on
//! pipes and on a terminal.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::*;

const CONCEALED: &str = "<concealed by countersign>";

/// Prints `$QUOTED_TOKEN` byte by byte (one `dd` process, one write, per byte), in base64, inside
/// a JSON string (escaped as JSON encoders do) and on standard error.
const LEAKY: &str = r#"set -eu
V="$QUOTED_TOKEN"
n=$(printf '%s' "$V" | wc -c)
printf 'bytes: '
printf '%s' "$V" | { i=0; while [ "$i" -lt "$n" ]; do dd bs=1 count=1 2>/dev/null; i=$((i+1)); done; }
echo
printf 'base64: %s\n' "$(printf '%s' "$V" | base64)"
printf 'json: {"k":"%s"}\n' "$(printf '%s' "$V" | sed 's/\\/\\\\/g; s/"/\\"/g')"
printf 'stderr: %s\n' "$V" >&2
printf 'done\n'
"#;

fn base64_of(v: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(v)
}

fn json_of(v: &str) -> String {
    let s = serde_json::to_string(v).unwrap();
    s[1..s.len() - 1].to_owned()
}

fn logged_in() -> (Broker, Helper) {
    let broker = Broker::start();
    let helper = Helper::start(&broker.url);
    helper.login(&broker, ADA);
    (broker, helper)
}

#[test]
fn run_conceals_a_value_printed_byte_by_byte_in_base64_in_json_and_on_stderr() {
    let (_broker, helper) = logged_in();
    let value = value_of(QUOTED);
    let out = helper.run(&["run", "--secret", QUOTED, "--", "sh", "-c", LEAKY]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    for (stream, text) in [("stdout", &out.stdout), ("stderr", &out.stderr)] {
        for leak in [&value, &base64_of(&value), &json_of(&value), "quoted"] {
            assert!(!text.contains(leak), "{stream} shows {leak:?}: {out:?}");
        }
    }
    for want in ["bytes: ", "base64: ", "json: {\"k\":\""] {
        assert!(
            out.stdout.contains(&format!("{want}{CONCEALED}")),
            "{want}: {out:?}"
        );
    }
    assert!(out.stdout.ends_with("done\n"), "{out:?}");
    assert!(out.stdout.contains(&format!("{CONCEALED}\"}}")), "{out:?}");
    assert!(
        out.stderr.contains(&format!("stderr: {CONCEALED}\n")),
        "{out:?}"
    );
}

#[test]
fn with_no_mask_the_value_reaches_the_output() {
    let (_broker, helper) = logged_in();
    let value = value_of(QUOTED);
    let out = helper.run(&[
        "run",
        "--no-mask",
        "--secret",
        QUOTED,
        "--",
        "sh",
        "-c",
        LEAKY,
    ]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains(&format!("bytes: {value}\n")), "{out:?}");
    assert!(out.stdout.contains(&base64_of(&value)), "{out:?}");
    assert!(out.stdout.contains(&json_of(&value)), "{out:?}");
    assert!(out.stderr.contains(&value), "{out:?}");
    assert!(!out.stdout.contains(CONCEALED), "{out:?}");
}

#[test]
fn masked_output_keeps_binary_bytes_and_the_exit_status() {
    let (_broker, helper) = logged_in();
    // Every byte value, twice, with no granted value among them; then exit 5.
    let script = r#"i=0; while [ $i -lt 2 ]; do
  for h in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do for l in 0 1 2 3 4 5 6 7 8 9 a b c d e f; do
    printf "\\$(printf '%03o' $((0x$h$l)))"; done; done; i=$((i+1)); done; exit 5"#;
    let out = helper
        .cli()
        .args(["run", "--secret", AUTO, "--", "sh", "-c", script])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    let want: Vec<u8> = (0..2).flat_map(|_| 0u8..=255).collect();
    assert_eq!(out.stdout, want);
}

#[test]
fn a_prompt_without_a_newline_reaches_the_output_while_the_command_waits() {
    let (_broker, helper) = logged_in();
    let mut child = helper
        .cli()
        .args([
            "run",
            "--secret",
            AUTO,
            "--",
            "sh",
            "-c",
            r#"printf 'name? '; read x; printf 'hello %s, %s\n' "$x" "$AUTO_TOKEN""#,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 256];
    // The command is blocked reading its input: the prompt can only come from a prompt flush.
    while !seen.ends_with(b"name? ") {
        let n = stdout.read(&mut buf).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    child.stdin.take().unwrap().write_all(b"ada\n").unwrap();
    let rest = collect(stdout).join().unwrap();
    let status = wait_timeout(&mut child, Duration::from_secs(30));
    assert_eq!(status.code(), Some(0), "{rest}");
    assert_eq!(rest, format!("hello ada, {CONCEALED}\n"));
}

#[test]
fn on_a_terminal_the_command_keeps_a_terminal_and_its_output_is_masked() {
    let (_broker, helper) = logged_in();
    let (mut pty, pts) = pty_process::blocking::open().unwrap();
    pty.resize(pty_process::Size::new(33, 101)).unwrap();
    let mut child = pty_process::blocking::Command::new(cli_bin())
        .arg("--socket")
        .arg(&helper.socket)
        .args(["--poll-interval", "0.1", "run", "--secret", QUOTED, "--"])
        .args(["sh", "-c"])
        .arg(
            r#"test -t 0 && test -t 1 && test -t 2 && echo "tty $(stty size)"
printf 'value: %s\n' "$QUOTED_TOKEN"
printf 'err: %s\n' "$QUOTED_TOKEN" >&2
printf 'name? '; read x; echo "got $x""#,
        )
        .env_remove("COUNTERSIGN_NON_INTERACTIVE")
        .spawn(pts)
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    let deadline = Instant::now() + Duration::from_secs(60);
    while !seen.ends_with(b"name? ") {
        assert!(
            Instant::now() < deadline,
            "{}",
            String::from_utf8_lossy(&seen)
        );
        let n = pty.read(&mut buf).unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    // Our terminal is in raw mode: the command's own terminal echoes and ends the line.
    pty.write_all(b"ada\r").unwrap();
    let mut rest = BufReader::new(&mut pty);
    let mut line = String::new();
    while !line.contains("got ada") {
        line.clear();
        if rest.read_line(&mut line).unwrap_or(0) == 0 {
            break;
        }
        seen.extend_from_slice(line.as_bytes());
    }
    let status = wait_timeout(&mut child, Duration::from_secs(30));
    let text = String::from_utf8_lossy(&seen);
    assert_eq!(status.code(), Some(0), "{text}");
    assert!(text.contains("tty 33 101"), "{text}");
    assert!(text.contains(&format!("value: {CONCEALED}")), "{text}");
    assert!(text.contains(&format!("err: {CONCEALED}")), "{text}");
    assert!(text.contains("got ada"), "{text}");
    assert!(!text.contains("quoted"), "{text}");
}
