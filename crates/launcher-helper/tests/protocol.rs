//! The helper's protocol over its real socket, from a real process (this test): framing and
//! BAD_REQUEST, refusals that need no broker, the socket's mode, a second helper, shutdown,
//! and a caller that changes while being identified.
#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

struct Helper {
    child: Child,
    socket: PathBuf,
    dir: PathBuf,
}

impl Helper {
    fn start(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("cs-proto-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let socket = dir.join("run").join("l.sock");
        let child = Command::new(env!("CARGO_BIN_EXE_countersign-launcher"))
            // Nothing listens there: every broker call fails.
            .args(["--broker", "http://127.0.0.1:9"])
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(dir.join("state"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while UnixStream::connect(&socket).is_err() {
            assert!(Instant::now() < deadline, "helper did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { child, socket, dir }
    }

    fn connect(&self) -> (UnixStream, BufReader<UnixStream>) {
        let s = UnixStream::connect(&self.socket).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let r = BufReader::new(s.try_clone().unwrap());
        (s, r)
    }

    fn ask(&self, line: &str) -> Value {
        let (mut s, mut r) = self.connect();
        s.write_all(line.as_bytes()).unwrap();
        s.write_all(b"\n").unwrap();
        let mut answer = String::new();
        r.read_line(&mut answer).unwrap();
        serde_json::from_str(&answer).unwrap()
    }

    fn stop(&mut self) -> Option<i32> {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s.code();
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn code(v: &Value) -> &str {
    assert_eq!(v["result"], "error", "{v}");
    assert!(v["error"].as_str().is_some_and(|e| !e.is_empty()), "{v}");
    v["code"].as_str().unwrap_or_default()
}

#[test]
fn malformed_lines_and_unknown_ops_are_bad_request_and_the_connection_goes_on() {
    let h = Helper::start("bad");
    let (mut s, mut r) = h.connect();
    for line in [
        "this is not json",
        "[1,2,3]",
        "{\"op\": 7}",
        "{\"no_op\": true}",
        "{\"op\":\"launch_missiles\"}",
        "{\"op\":\"sign_request\",\"secrets\":[\"A\"]}",
        "{\"op\":\"sign_proof\",\"path\":\"/v1/requests\"}",
        "",
    ] {
        s.write_all(format!("{line}\n").as_bytes()).unwrap();
        let mut answer = String::new();
        r.read_line(&mut answer).unwrap();
        let v: Value = serde_json::from_str(&answer).unwrap();
        assert_eq!(code(&v), "BAD_REQUEST", "{line}: {v}");
    }
    // Still open: a good request on the same connection is answered.
    s.write_all(b"{\"op\":\"status\"}\n").unwrap();
    let mut answer = String::new();
    r.read_line(&mut answer).unwrap();
    let v: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(v["result"], "status", "{v}");
    assert_eq!(v["broker_url"], "http://127.0.0.1:9");
    assert_eq!(v["caller"]["pid"], std::process::id());
    assert_eq!(v["caller"]["standing"], "outside");
    assert!(v["credential"].is_null());

    // Launcher signing of anything but the four operator routes.
    for path in [
        "/v1/enrollments",
        "/v1/operator/machines/x/revoke",
        "/v1/requests",
    ] {
        let v = h.ask(&format!(
            r#"{{"op":"sign_launcher_proof","method":"POST","path":"{path}"}}"#
        ));
        assert_eq!(code(&v), "BAD_REQUEST", "{path}: {v}");
    }
    let v =
        h.ask(r#"{"op":"sign_proof","method":"GET","path":"/v1/enrollments/self","bh":"short"}"#);
    assert_eq!(code(&v), "BAD_REQUEST");
}

#[test]
fn an_oversize_line_is_bad_request_and_closes_the_connection() {
    let h = Helper::start("big");
    let (mut s, mut r) = h.connect();
    let mut line = b"{\"op\":\"status\",\"pad\":\"".to_vec();
    line.extend(std::iter::repeat_n(b'x', 70 * 1024));
    line.extend_from_slice(b"\"}\n");
    // The helper may close before reading all of it.
    let _ = s.write_all(&line);
    let mut answer = String::new();
    r.read_line(&mut answer).unwrap();
    let v: Value = serde_json::from_str(&answer).unwrap();
    assert_eq!(code(&v), "BAD_REQUEST");
    assert!(v["error"].as_str().unwrap().contains("65536"), "{v}");
    let mut rest = Vec::new();
    let _ = r.read_to_end(&mut rest);
    assert!(rest.is_empty());
    // A line just under the cap is fine.
    let mut ok = b"{\"op\":\"status\",\"pad\":\"".to_vec();
    ok.extend(std::iter::repeat_n(b'x', 60 * 1024));
    ok.extend_from_slice(b"\"}");
    let v = h.ask(std::str::from_utf8(&ok).unwrap());
    assert_eq!(v["result"], "status");
}

#[test]
fn refusals_that_need_no_broker() {
    let h = Helper::start("refuse");
    let v = h.ask(r#"{"op":"sign_proof","method":"GET","path":"/v1/enrollments/self"}"#);
    assert_eq!(code(&v), "NOT_A_SESSION");
    let v = h.ask(r#"{"op":"sign_request","secrets":["AUTO_TOKEN"],"reason":"r"}"#);
    assert_eq!(code(&v), "NOT_A_SESSION");
    let v = h.ask(r#"{"op":"unregister"}"#);
    assert_eq!(code(&v), "NOT_A_SESSION");
    let v = h.ask(r#"{"op":"sign_launcher_proof","method":"GET","path":"/v1/operator/machines"}"#);
    assert_eq!(code(&v), "NO_CREDENTIAL");
    let v = h.ask(r#"{"op":"register"}"#);
    assert_eq!(code(&v), "NO_CREDENTIAL");
    let v = h.ask(r#"{"op":"login_start","login":"ada@example.com"}"#);
    assert_eq!(code(&v), "LOGIN_FAILED");
    assert!(
        v["error"].as_str().unwrap().contains("broker unreachable"),
        "{v}"
    );
    let v = h.ask(r#"{"op":"login_poll"}"#);
    assert_eq!(code(&v), "LOGIN_FAILED");
    let v = h.ask(r#"{"op":"token_login","service":"svc","token_file":"/no/such/file"}"#);
    assert_eq!(code(&v), "LOGIN_FAILED");
    let v = h.ask(r#"{"op":"token_login","service":"svc","token_file":"relative"}"#);
    assert_eq!(code(&v), "BAD_REQUEST");
    let v = h.ask(r#"{"op":"logout"}"#);
    assert_eq!(v["result"], "logged_out", "{v}");
}

#[test]
fn the_socket_is_private_a_second_helper_is_refused_and_sigterm_cleans_up() {
    let mut h = Helper::start("sock");
    let mode = std::fs::metadata(&h.socket).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let dir_mode = std::fs::metadata(h.socket.parent().unwrap())
        .unwrap()
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(dir_mode, 0o700);
    let second = Command::new(env!("CARGO_BIN_EXE_countersign-launcher"))
        .args(["--broker", "http://127.0.0.1:9", "--socket"])
        .arg(&h.socket)
        .arg("--state-dir")
        .arg(h.dir.join("state2"))
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&second.stderr).contains("another launcher helper"));
    assert_eq!(h.stop(), Some(0));
    assert!(!h.socket.exists());
    // Without XDG_RUNTIME_DIR or --socket there is no socket to use: a usage error.
    let out = Command::new(env!("CARGO_BIN_EXE_countersign-launcher"))
        .args(["--broker", "http://127.0.0.1:9"])
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("COUNTERSIGN_HELPER_SOCKET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A process connects, hands the connection to its child, and exits: the helper must not take
/// the child (or anything now holding that pid) for the process that connected.
#[test]
fn a_caller_that_exits_after_connecting_is_peer_unidentified() {
    if Command::new("python3").arg("--version").output().is_err() {
        println!("skipped: python3 is not installed");
        return;
    }
    let h = Helper::start("peer");
    let script = r#"
import os, socket, sys, time
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect(sys.argv[1])
if os.fork() != 0:
    os._exit(0)          # the process that connected is gone
time.sleep(0.5)
s.sendall(b'{"op":"status"}\n')
print(s.makefile().readline().strip(), flush=True)
"#;
    let out = Command::new("python3")
        .args(["-c", script])
        .arg(&h.socket)
        .output()
        .unwrap();
    // The parent exits at once; the pipe stays open until its child has printed the answer.
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let v: Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(code(&v), "PEER_UNIDENTIFIED", "{v}");
}
