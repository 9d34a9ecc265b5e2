//! A session cannot be left: real processes, through the helper binary's real socket, that were
//! inside a registered session and then lose their ancestry (the session's root killed, a
//! double fork re-parenting to init, a `setsid` child whose root dies) are still refused
//! launcher signing and a new registration (`IN_SESSION`), and are never taken for outside.
//!
//! Each scenario runs twice: with session cgroups (`--session-cgroups require`), and with
//! process snapshots only (`--session-cgroups off`). Where this machine lets no cgroup be made,
//! the first run checks instead that `require` refuses to start and that `auto` falls back to
//! snapshots and still holds; `COUNTERSIGN_REQUIRE_CGROUP=1` (set by `.ci/run` where its probe
//! makes a cgroup) turns that fallback into a failure. No run passes having checked nothing.
//! With snapshots
//! only, the escaping process first asks `status` while its ancestry is intact (the helper has
//! then seen it inside); a process whose whole chain dies before the helper ever sees it is the
//! documented limit of that mode (docs/launcher-helper.md).
//!
//! The processes are `sh` scripts (`setsid`, `kill` by the programs) and this test binary run
//! again as a small client program ([`child_program`]), which asks the helper with the blocking
//! client of `countersign-launcher-proto` and writes each answer to a file. The broker is
//! unreachable: a registration answers at once (`wait: false`) and its enrollment then fails,
//! so the session stays registered (state `failed`) while its root lives, and a request signed
//! for it is `NOT_ENROLLED`, which tells "treated as the session" from outside's
//! `NOT_A_SESSION`.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use countersign_launcher_helper::store::{CredentialStore, Stored};
use countersign_launcher_proto::client::Client;
use countersign_launcher_proto::messages::CredentialKind;
use countersign_proto::SigningKey;
use serde_json::Value;

const BROKER: &str = "http://127.0.0.1:9";

// ----- the child program -----

/// Not a test: this binary run again as a client program when `CS_CHILD` is set. Its steps
/// (`CS_STEPS`, space-separated) run in order; every answer is appended to `CS_OUT` as one JSON
/// line `{"step", "answer"}`.
#[test]
fn child_program() {
    if std::env::var_os("CS_CHILD").is_none() {
        return;
    }
    let socket = std::env::var("CS_SOCKET").unwrap();
    let out = PathBuf::from(std::env::var("CS_OUT").unwrap());
    let steps = std::env::var("CS_STEPS").unwrap();
    let client = Client::new(socket).with_timeout(Duration::from_secs(30));
    let first_parent = nix::unistd::getppid();
    for step in steps.split_whitespace() {
        let line = match step {
            "status" => r#"{"op":"status"}"#,
            "register" => r#"{"op":"register","wait":false,"label":"escape"}"#,
            "launcher" => {
                r#"{"op":"sign_launcher_proof","method":"GET","path":"/v1/operator/machines"}"#
            }
            "request" => r#"{"op":"sign_request","secrets":["GITHUB_TOKEN"],"reason":"escape"}"#,
            "killparent" => {
                kill_and_wait(first_parent.as_raw());
                // Until the kernel re-parents this process.
                wait_for(|| nix::unistd::getppid() != first_parent);
                continue;
            }
            "killroot" => {
                let root: i32 = std::env::var("CS_ROOT").unwrap().parse().unwrap();
                kill_and_wait(root);
                continue;
            }
            "ended" => {
                // Until the helper has seen the root exit and ended the session (its tick).
                wait_for(|| {
                    let v: Value =
                        serde_json::from_slice(&client.raw(br#"{"op":"status"}"#).unwrap())
                            .unwrap();
                    v["caller"]["standing"] != "session"
                });
                continue;
            }
            "done" => {
                record(&out, step, &Value::Null);
                continue;
            }
            other => {
                if let Some(cmd) = other.strip_prefix("exec:") {
                    // Become the script: same pid, same start time.
                    let script = std::env::var(cmd).unwrap();
                    let e = std::os::unix::process::CommandExt::exec(
                        Command::new("sh").arg("-c").arg(script),
                    );
                    panic!("exec: {e}");
                }
                panic!("unknown step {other}");
            }
        };
        let answer = client.raw(line.as_bytes()).unwrap();
        record(&out, step, &serde_json::from_slice(&answer).unwrap());
    }
    std::process::exit(0);
}

fn record(out: &Path, step: &str, answer: &Value) {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(out)
        .unwrap();
    let line = serde_json::json!({ "step": step, "pid": std::process::id(), "answer": answer });
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// SIGKILLs `pid` and waits until it has exited (a zombie, or gone).
fn kill_and_wait(pid: i32) {
    let _ = nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    );
    wait_for(|| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
        })
    });
}

/// Waits for a condition the kernel makes true at once (bounded, so a bug fails, not hangs).
fn wait_for(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "the condition never came true");
        std::thread::sleep(Duration::from_millis(5));
    }
}

// ----- the helper and the scenarios -----

struct Helper {
    child: Child,
    socket: PathBuf,
    dir: PathBuf,
}

impl Helper {
    /// The helper binary with a stored credential (for a broker that does not answer), and
    /// `--session-cgroups mode`. `None` when it does not start (no cgroup can be made here).
    fn start(tag: &str, mode: &str) -> Option<Self> {
        // Short: a Unix socket path must fit in 108 bytes.
        let dir = std::env::temp_dir().join(format!("cs-esc-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let machine = SigningKey::generate().unwrap();
        CredentialStore::new(dir.join("state"))
            .save(&Stored {
                version: 1,
                broker_url: BROKER.into(),
                credential_id: "7d444840-9dc0-11d1-b245-5ffdce74fad2".into(),
                kind: CredentialKind::Person,
                host: "test-host".into(),
                login: Some("ada@example.com".into()),
                service: None,
                expires_at: Some("2999-01-01T00:00:00.000Z".into()),
                token_file: None,
                key_pkcs8: Stored::encode_key(&machine).unwrap(),
            })
            .unwrap();
        let socket = dir.join("l.sock");
        let mut child = Command::new(env!("CARGO_BIN_EXE_countersign-launcher"))
            .args(["--broker", BROKER, "--session-cgroups", mode])
            .arg("--socket")
            .arg(&socket)
            .arg("--state-dir")
            .arg(dir.join("state"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            if child.try_wait().unwrap().is_some() {
                let _ = std::fs::remove_dir_all(&dir);
                return None;
            }
            assert!(Instant::now() < deadline, "helper did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(Self { child, socket, dir })
    }

    /// Runs a session: a root process registers, then becomes `script` (`sh -c`, `$$` its
    /// pid, exported as `CS_ROOT`); `$ME` runs the child program (set `CS_STEPS`). Waits until
    /// a `done` step is recorded, and answers every recorded step.
    fn session(&self, script: &str) -> Vec<Value> {
        let out = self.dir.join(format!("out-{}", rand_tag()));
        let me = std::env::current_exe().unwrap();
        let me = format!(
            "{} child_program --exact --nocapture --test-threads=1 -q",
            me.display()
        );
        let mut root = Command::new(std::env::current_exe().unwrap())
            .args([
                "child_program",
                "--exact",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env("CS_CHILD", "1")
            .env("CS_SOCKET", &self.socket)
            .env("CS_OUT", &out)
            .env("CS_STEPS", "register exec:CS_SCRIPT")
            .env("CS_SCRIPT", format!("export CS_ROOT=$$\n{script}"))
            .env("ME", me)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // Until the programs are done (or have stopped short: the answers so far then show
        // what went wrong).
        let deadline = Instant::now() + Duration::from_secs(30);
        let mut lines: Vec<Value>;
        loop {
            lines = std::fs::read_to_string(&out)
                .unwrap_or_default()
                .lines()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .collect();
            if lines.iter().any(|l| l["step"] == "done") || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = root.kill();
        let _ = root.wait();
        lines
    }

    fn stop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let deadline = Instant::now() + Duration::from_secs(20);
        while self.child.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = self.child.kill();
                break;
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

/// A fresh name for each session's answer file.
fn rand_tag() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    NEXT.fetch_add(1, Ordering::SeqCst)
}

fn answer<'a>(lines: &'a [Value], step: &str) -> &'a Value {
    let found: Vec<&Value> = lines.iter().filter(|l| l["step"] == step).collect();
    found
        .last()
        .map(|l| &l["answer"])
        .unwrap_or_else(|| panic!("no {step} answer in {lines:?}"))
}

fn code(v: &Value) -> &str {
    assert_eq!(v["result"], "error", "{v}");
    v["code"].as_str().unwrap_or_default()
}

/// The escaped process is still inside: never `outside`, refused launcher signing and a new
/// registration, and a secret request is the session's (`NOT_ENROLLED`: its enrollment
/// failed) or, once the helper has seen the root exit and ended the session, refused as an
/// ended session's (`NOT_A_SESSION`, standing `former_session`). Answers every standing seen.
fn assert_still_inside(lines: &[Value], what: &str) -> Vec<String> {
    let all = |step: &str| -> Vec<&Value> {
        lines
            .iter()
            .filter(|l| l["step"] == step)
            .map(|l| &l["answer"])
            .collect()
    };
    let regs = all("register");
    assert_eq!(
        regs[0]["result"], "registered",
        "{what}: the root: {lines:?}"
    );
    assert!(regs.len() >= 2, "{what}: {lines:?}");
    for r in &regs[1..] {
        assert_eq!(code(r), "IN_SESSION", "{what}: {lines:?}");
    }
    let launcher = all("launcher");
    assert!(!launcher.is_empty(), "{what}: {lines:?}");
    for l in launcher {
        assert_eq!(code(l), "IN_SESSION", "{what}: {lines:?}");
    }
    let mut standings = Vec::new();
    // Each status is followed by a request asked while the same standing held (or a later one).
    let mut standing = String::new();
    for l in lines {
        match l["step"].as_str() {
            Some("status") => {
                standing = l["answer"]["caller"]["standing"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                assert!(
                    standing == "session" || standing == "former_session",
                    "{what}: standing {standing} in {lines:?}"
                );
                standings.push(standing.clone());
            }
            Some("request") => {
                let c = code(&l["answer"]);
                assert!(
                    c == "NOT_ENROLLED" || (c == "NOT_A_SESSION" && standing == "former_session"),
                    "{what}: {c} after standing {standing}: {lines:?}"
                );
            }
            _ => {}
        }
    }
    assert!(
        lines.iter().any(|l| l["step"] == "done"),
        "{what}: stopped short: {lines:?}"
    );
    standings
}

/// What each escaping process asks once it has escaped.
const ASK: &str = "status launcher register request";

/// `ASK` at once, then again once the helper has seen the root exit and ended the session.
const ASK_TWICE: &str =
    "status launcher register request ended status launcher register request done";

/// (1) A process of the session kills the session's root (its parent), is re-parented, and
/// asks.
fn kills_its_root(h: &Helper, seen_first: &str) {
    let lines = h.session(&format!(
        r#"CS_STEPS="{seen_first} killparent {ASK_TWICE}" $ME; true"#
    ));
    let standings = assert_still_inside(&lines, "a process that killed its root");
    assert_eq!(standings.last().map(String::as_str), Some("former_session"));
}

/// (2) A double-forked grandchild: its parent exits (killed by the grandchild, so the order is
/// certain) and it is re-parented, while the root lives on.
fn double_fork(h: &Helper, seen_first: &str) {
    let lines = h.session(&format!(
        r#"sh -c 'CS_STEPS="{seen_first} killparent {ASK} done" $ME; true' &
while ! grep -q '"done"' "$CS_OUT" 2>/dev/null; do sleep 0.05; done"#
    ));
    assert_still_inside(&lines, "a double-forked grandchild");
    assert_eq!(
        answer(&lines, "status")["caller"]["standing"],
        "session",
        "the root lives: {lines:?}"
    );
}

/// (3) A `setsid` child (a new session and process group, as a daemon makes) kills the
/// session's root, and asks.
fn setsid_child(h: &Helper, seen_first: &str) {
    let lines = h.session(&format!(
        r#"setsid sh -c 'CS_STEPS="{seen_first} killroot {ASK_TWICE}" $ME; true' &
wait"#
    ));
    let standings = assert_still_inside(&lines, "a setsid child");
    assert_eq!(standings.last().map(String::as_str), Some("former_session"));
}

/// Whether this machine lets a session cgroup be made (the helper's own probe: a directory
/// made and removed under this process's cgroup v2 directory).
fn cgroups_here() -> bool {
    countersign_launcher_helper::cgroup::Cgroups::detect(Path::new("/proc"), None).is_some()
}

/// Runs `scenario` with session cgroups where they can be made. Where they cannot, a helper
/// told to require them must refuse to start (fail closed), and the scenario runs against
/// `--session-cgroups auto`, which then falls back to process snapshots (so the escaping
/// process asks `status` first, as that mechanism needs): either way something is checked.
/// `COUNTERSIGN_REQUIRE_CGROUP=1` (set by `.ci/run` where its probe makes a cgroup) makes the
/// cgroup mechanism mandatory: the fallback is then a failure.
fn with_cgroups_or_their_fallback(tag: &str, scenario: fn(&Helper, &str)) {
    if cgroups_here() {
        let h = Helper::start(tag, "require")
            .expect("a cgroup can be made here, but the helper with --session-cgroups require did not start");
        println!("mechanism: session cgroups");
        // Nothing asked before escaping: the cgroup alone keeps it inside.
        scenario(&h, "");
        return;
    }
    assert!(
        std::env::var_os("COUNTERSIGN_REQUIRE_CGROUP").is_none(),
        "COUNTERSIGN_REQUIRE_CGROUP is set but no session cgroup can be made here"
    );
    assert!(
        Helper::start(tag, "require").is_none(),
        "with no cgroup to be made, --session-cgroups require must refuse to start"
    );
    println!("mechanism: no cgroup can be made here; the fallback (process snapshots) of auto");
    let h = Helper::start(tag, "auto").expect("the helper with --session-cgroups auto");
    scenario(&h, "status");
}

#[test]
fn with_cgroups_a_process_that_kills_its_root_is_still_inside() {
    with_cgroups_or_their_fallback("cg1", kills_its_root);
}

#[test]
fn with_cgroups_a_double_forked_grandchild_is_still_inside() {
    with_cgroups_or_their_fallback("cg2", double_fork);
}

#[test]
fn with_cgroups_a_setsid_child_is_still_inside() {
    with_cgroups_or_their_fallback("cg3", setsid_child);
}

/// Where a session cgroup can be made, the session's root is moved into one of this helper's
/// (so the tests above checked the cgroup mechanism, not the snapshots).
#[test]
fn with_cgroups_the_session_root_is_in_a_session_cgroup() {
    if !cgroups_here() {
        assert!(
            std::env::var_os("COUNTERSIGN_REQUIRE_CGROUP").is_none(),
            "COUNTERSIGN_REQUIRE_CGROUP is set but no session cgroup can be made here"
        );
        println!("no cgroup can be made here: covered by the fallback runs above");
        return;
    }
    let h = Helper::start("cg4", "require").expect("helper with --session-cgroups require");
    let lines = h.session(r#"cat /proc/$$/cgroup > "$CS_OUT.cgroup"; CS_STEPS="done" $ME; true"#);
    assert!(lines.iter().any(|l| l["step"] == "done"), "{lines:?}");
    let out = std::fs::read_dir(&h.dir)
        .unwrap()
        .filter_map(Result::ok)
        .find(|e| e.file_name().to_string_lossy().ends_with(".cgroup"))
        .expect("the root's /proc/self/cgroup");
    let text = std::fs::read_to_string(out.path()).unwrap();
    let cg = countersign_launcher_helper::cgroup::parse_proc_cgroup(&text).unwrap();
    let last = cg.rsplit('/').next().unwrap_or_default();
    assert!(
        last.starts_with(countersign_launcher_helper::cgroup::PREFIX),
        "the session's root is in {cg:?}, not a session cgroup"
    );
}

#[test]
fn with_snapshots_a_process_that_kills_its_root_is_still_inside() {
    let h = Helper::start("sn1", "off").unwrap();
    kills_its_root(&h, "status");
}

#[test]
fn with_snapshots_a_double_forked_grandchild_is_still_inside() {
    let h = Helper::start("sn2", "off").unwrap();
    double_fork(&h, "status");
}

#[test]
fn with_snapshots_a_setsid_child_is_still_inside() {
    let h = Helper::start("sn3", "off").unwrap();
    setsid_child(&h, "status");
}

/// A process that was never a descendant of a session is outside: the helper signs for it
/// (the credential lets launcher signing through), so the refusals above are the sessions'.
#[test]
fn a_process_never_in_the_session_is_outside() {
    let h = Helper::start("out", "auto").unwrap();
    let lines = h.session(r#"CS_STEPS="status done" $ME; true"#);
    assert_eq!(answer(&lines, "status")["caller"]["standing"], "session");
    let v = Client::new(&h.socket)
        .raw(br#"{"op":"sign_launcher_proof","method":"GET","path":"/v1/operator/machines"}"#)
        .unwrap();
    let v: Value = serde_json::from_slice(&v).unwrap();
    assert_eq!(v["result"], "proof", "{v}");
}
