//! `countersign-link-demo` as a process: what it refuses before it connects. (The console's
//! end-to-end tests run it against a real console; this target also makes `cargo test
//! --workspace` build it, so that those tests find it built with the workspace's features.)

use std::process::{Command, Output};

fn demo(args: &[&str], token: Option<&str>) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_countersign-link-demo"));
    c.args(args).env_remove("COUNTERSIGN_AGENT_TOKEN");
    if let Some(t) = token {
        c.env("COUNTERSIGN_AGENT_TOKEN", t);
    }
    c.output().expect("the demo runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_names_every_option() {
    let o = demo(&["--help"], None);
    assert!(o.status.success(), "{}", stderr(&o));
    let help = String::from_utf8_lossy(&o.stdout);
    for option in [
        "--console",
        "--session",
        "--title",
        "--role",
        "--mode",
        "--relay",
        "--reply",
    ] {
        assert!(help.contains(option), "{option} missing from:\n{help}");
    }
}

#[test]
fn without_a_token_it_says_where_the_token_goes() {
    let o = demo(
        &["--console", "http://127.0.0.1:9", "--session", "s1"],
        None,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("COUNTERSIGN_AGENT_TOKEN"),
        "{}",
        stderr(&o)
    );
    assert!(o.stdout.is_empty(), "it said something before failing");
}

#[test]
fn an_unknown_mode_is_refused_by_name() {
    let o = demo(
        &[
            "--console",
            "http://127.0.0.1:9",
            "--session",
            "s1",
            "--mode",
            "shout",
        ],
        Some("cs-agent-test"),
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(stderr(&o).contains("unknown mode shout"), "{}", stderr(&o));
}

#[test]
fn a_console_that_is_not_there_fails_without_a_live_line() {
    // A port that was just free: nothing listens on it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let o = demo(
        &["--console", &url, "--session", "s1"],
        Some("cs-agent-test"),
    );
    assert!(!o.status.success(), "it connected to nothing");
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("\"live\""),
        "it said it was live"
    );
}
