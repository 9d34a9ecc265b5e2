//! End to end: the real broker, the real helper on a temporary socket, the real `countersign`.
#![allow(clippy::unwrap_used)]

use crate::common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use serde_json::Value;

fn logged_in() -> (Broker, Helper, String) {
    let broker = Broker::start();
    let helper = Helper::start(&broker.url);
    let credential = helper.login(&broker, ADA);
    (broker, helper, credential)
}

#[test]
fn login_then_run_env_prints_an_automatic_secret_and_the_session_ends_with_it() {
    let (broker, helper, credential) = logged_in();
    // The credential is kept at rest, 0600.
    let file = helper.state.join("launcher-credential.json");
    let mode = std::fs::metadata(&file).map(|m| {
        use std::os::unix::fs::PermissionsExt;
        m.permissions().mode() & 0o777
    });
    assert_eq!(mode.ok(), Some(0o600));
    assert!(
        std::fs::read_to_string(&file)
            .unwrap()
            .contains(&credential)
    );

    // --no-mask: the value itself reaches the output (masking has its own tests).
    let out = helper.run(&["run", "--no-mask", "--secret", AUTO, "--", "env"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stdout.contains(&format!("{AUTO}={}", value_of(AUTO))),
        "{}",
        out.stdout
    );
    // The session ended when `env` did: its automatic grant ended with it.
    assert!(
        broker.grants_for(ADA).is_empty(),
        "{:?}",
        broker.grants_for(ADA)
    );

    // The operator sees this machine's login (outside any session).
    let out = helper.run(&["--json", "operator", "machines", "list"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let v: Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(v["credentials"][0]["credential_id"], credential.as_str());
    // The same answers for people, read as the broker's answer types: the login with its
    // expiry as the broker wrote it, no live grant, and the revoke's state.
    let expires = v["credentials"][0]["expires_at"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = helper.run(&["operator", "machines", "list"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(
        out.stdout.starts_with(&credential) && out.stdout.contains(&format!("until {expires}")),
        "{out:?}"
    );
    let out = helper.run(&["operator", "grants", "list"]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert_eq!(out.stdout.trim(), "no live grants", "{out:?}");
    let out = helper.run(&["operator", "machines", "revoke", &credential]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert_eq!(
        out.stdout.trim(),
        format!("machine login {credential}: revoked"),
        "{out:?}"
    );
}

#[test]
fn an_owner_secret_approved_while_run_waits() {
    let (broker, helper, _) = logged_in();
    let mut child = helper
        .cli()
        .args([
            "run",
            "--no-mask",
            "--secret",
            ADA_SECRET,
            "--reason",
            "deploy the docs",
            "--",
            "env",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = collect(child.stdout.take().unwrap());
    let stderr = collect(child.stderr.take().unwrap());
    let record = broker.wait_pending_record(ADA);
    let (_, rec) = broker.console("GET", &format!("/v1/credential-requests/{record}"), None);
    assert_eq!(rec["reason"], "deploy the docs");
    assert_eq!(rec["identifiers"][0], ADA_SECRET);
    broker.decide(&record, ADA, true);
    let status = wait_timeout(&mut child, Duration::from_secs(30));
    let (out, err) = (stdout.join().unwrap(), stderr.join().unwrap());
    assert_eq!(status.code(), Some(0), "{out} {err}");
    assert!(
        out.contains(&format!("{ADA_SECRET}={}", value_of(ADA_SECRET))),
        "{out}"
    );
}

#[test]
fn denial_exits_77() {
    let (broker, helper, _) = logged_in();
    let mut child = helper
        .cli()
        .args(["run", "--secret", ADA_SECRET, "--", "env"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = collect(child.stdout.take().unwrap());
    let record = broker.wait_pending_record(ADA);
    broker.decide(&record, ADA, false);
    let status = wait_timeout(&mut child, Duration::from_secs(30));
    let out = stdout.join().unwrap();
    assert_eq!(status.code(), Some(77), "{out}");
    assert!(!out.contains(&value_of(ADA_SECRET)));
    // A policy denial too.
    let out = helper.run(&["run", "--secret", LOCKED, "--", "env"]);
    assert_eq!(out.code(), Some(77), "{out:?}");
    assert!(
        out.stdout.contains("policy denies LOCKED_SECRET"),
        "{out:?}"
    );
}

#[test]
fn no_wait_pending_exits_75_and_withdraws_the_request() {
    let (broker, helper, _) = logged_in();
    let out = helper.run(&[
        "--json",
        "run",
        "--secret",
        ADA_SECRET,
        "--no-wait",
        "--",
        "env",
    ]);
    assert_eq!(out.code(), Some(75), "{out:?}");
    let v: Value = serde_json::from_str(out.stdout.trim()).unwrap();
    assert_eq!(v["state"], "pending");
    assert!(broker.pending_for(ADA).is_empty());
    // Waiting with a timeout that passes is 75 too.
    let out = helper.run(&[
        "run",
        "--secret",
        ADA_SECRET,
        "--timeout",
        "0.3",
        "--",
        "env",
    ]);
    assert_eq!(out.code(), Some(75), "{out:?}");
}

/// Issue 48: a waiting request has one name. `countersign request` prints the request id and
/// no other id; the broker's console-token read answers that request's record by it, carrying
/// it as `request_id` (what the console shows and searches).
#[test]
fn a_pending_request_is_named_by_its_request_id_alone() {
    let (broker, helper, _) = logged_in();
    let cli = cli_bin();
    let script = format!(
        r#""{}" request --secret {ADA_SECRET} --reason "one name" --no-wait; echo "request=$?""#,
        cli.to_str().unwrap()
    );
    let out = helper.run(&["run", "--", "sh", "-c", &script]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains("request=75"), "{out:?}");
    let line = out
        .stdout
        .lines()
        .find(|l| l.starts_with("pending: request "))
        .unwrap_or_else(|| panic!("no pending line: {out:?}"));
    assert!(!line.contains("record"), "one name, not two: {line}");
    let id = line
        .trim_start_matches("pending: request ")
        .split_whitespace()
        .next()
        .unwrap();
    assert!(uuid_like(id), "{line}");
    let (s, rec) = broker.console("GET", &format!("/v1/credential-requests/{id}"), None);
    assert_eq!(s, 200, "{rec}");
    assert_eq!(rec["request_id"], id, "{rec}");
    assert_eq!(rec["reason"], "one name", "{rec}");
    let record = rec["record_id"].as_str().unwrap();
    let (s, by_record) = broker.console("GET", &format!("/v1/credential-requests/{record}"), None);
    assert_eq!(s, 200, "{by_record}");
    assert_eq!(by_record["request_id"], id, "{by_record}");
    // No such request: NOT_FOUND, as for a record id.
    let (s, v) = broker.console(
        "GET",
        "/v1/credential-requests/00000000-0000-4000-8000-000000000000",
        None,
    );
    assert_eq!((s, v["code"].as_str()), (404, Some("NOT_FOUND")), "{v}");
}

fn uuid_like(s: &str) -> bool {
    s.len() == 36 && s.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

#[test]
fn a_missing_command_exits_127_and_a_non_executable_one_126() {
    let (_broker, helper, _) = logged_in();
    let out = helper.run(&["run", "--", "/definitely/not/here"]);
    assert_eq!(out.code(), Some(127), "{out:?}");
    let out = helper.run(&["run", "--", "no-such-command-countersign"]);
    assert_eq!(out.code(), Some(127), "{out:?}");
    let file = helper.dir.0.join("not-executable");
    std::fs::write(&file, "#!/bin/sh\necho hi\n").unwrap();
    let out = helper.run(&["run", "--", file.to_str().unwrap()]);
    assert_eq!(out.code(), Some(126), "{out:?}");
    // The command's own status comes through.
    let out = helper.run(&["run", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.code(), Some(3), "{out:?}");
    let out = helper.run(&["run", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.code(), Some(143), "{out:?}");
}

#[test]
fn outside_a_session_session_commands_are_not_a_session() {
    let (_broker, helper, _) = logged_in();
    let out = helper.run(&["grants"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    assert!(out.stderr.contains("NOT_A_SESSION"), "{out:?}");
    let out = helper.run(&["--json", "request", "--secret", AUTO, "--reason", "r"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    let err: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(err["code"], "NOT_A_SESSION");
    // And over the raw protocol, from this test process.
    let v = helper.raw(br#"{"op":"sign_proof","method":"GET","path":"/v1/enrollments/self"}"#);
    assert_eq!(v["code"], "NOT_A_SESSION", "{v}");
    let v = helper.raw(br#"{"op":"unregister"}"#);
    assert_eq!(v["code"], "NOT_A_SESSION", "{v}");
}

#[test]
fn inside_a_session_launcher_signing_is_in_session_and_session_commands_work() {
    let (_broker, helper, _) = logged_in();
    let cli = cli_bin();
    let cli = cli.to_str().unwrap();
    let script = format!(
        r#"set -u
"{cli}" --json status
"{cli}" operator machines list; echo "operator=$?"
"{cli}" login --login ada@example.com; echo "login=$?"
"{cli}" run -- true; echo "nested=$?"
"{cli}" --json request --secret {AUTO} --reason "inside" --print-values
"{cli}" grants
"#
    );
    let out = helper.run(&["run", "--", "sh", "-c", &script]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    let status: Value = serde_json::from_str(out.stdout.lines().next().unwrap()).unwrap();
    assert_eq!(status["caller"]["standing"], "session", "{status}");
    assert_eq!(status["caller"]["session"]["state"], "enrolled");
    assert!(out.stdout.contains("operator=1"), "{out:?}");
    assert!(out.stdout.contains("login=1"), "{out:?}");
    assert!(out.stdout.contains("nested=1"), "{out:?}");
    assert_eq!(out.stderr.matches("IN_SESSION").count(), 3, "{out:?}");
    let req: Value = out
        .stdout
        .lines()
        .find_map(|l| {
            serde_json::from_str::<Value>(l)
                .ok()
                .filter(|v| v.get("values").is_some())
        })
        .unwrap();
    assert_eq!(req["state"], "granted");
    assert_eq!(req["values"][AUTO], value_of(AUTO).as_str());
    assert!(out.stdout.contains("approver (policy)"), "{out:?}");
}

#[test]
fn request_cancel_revoke_and_status_inside_a_session() {
    let (broker, helper, _) = logged_in();
    let cli = cli_bin();
    let cli = cli.to_str().unwrap();
    let script = format!(
        r#"set -u
id=$("{cli}" --json request --secret {ADA_SECRET} --reason "later" --no-wait | sed -n 's/.*"request_id":"\([^"]*\)".*/\1/p')
"{cli}" status "$id"; echo "status=$?"
"{cli}" cancel "$id"; echo "cancel=$?"
"{cli}" status "$id"; echo "status2=$?"
grant=$("{cli}" --json request --secret {AUTO} --reason "now" | sed -n 's/.*"grant_id":"\([^"]*\)".*/\1/p')
"{cli}" values "$grant"
"{cli}" revoke "$grant"; echo "revoke=$?"
"{cli}" values "$grant"; echo "values=$?"
"#
    );
    let out = helper.run(&["run", "--", "sh", "-c", &script]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    for want in [
        "status=75",
        "cancel=0",
        "status2=1",
        "revoke=0",
        "values=1",
        &format!("{AUTO}={}", value_of(AUTO)),
    ] {
        assert!(out.stdout.contains(want), "{want}: {out:?}");
    }
    assert!(out.stderr.contains("GRANT_NOT_LIVE"), "{out:?}");
    assert!(broker.pending_for(ADA).is_empty());
}

#[test]
fn the_renewal_worker_exits_76_once_the_machine_login_is_revoked() {
    let (broker, helper, credential) = logged_in();
    let mut child = helper
        .cli()
        .args(["run", "--", cli_bin().to_str().unwrap(), "--socket"])
        .arg(&helper.socket)
        .args(["renew", "--interval", "0.2"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let first = lines.next().unwrap().unwrap();
    assert!(first.starts_with("lease renewed until"), "{first}");
    broker.revoke_machine(&credential, ADA);
    let status = wait_timeout(&mut child, Duration::from_secs(30));
    let err = collect(child.stderr.take().unwrap()).join().unwrap();
    assert_eq!(status.code(), Some(76), "{err}");

    // Once, in a session: renewed.
    let helper2 = Helper::start(&broker.url);
    helper2.login(&broker, ADA);
    let out = helper2.run(&[
        "run",
        "--",
        cli_bin().to_str().unwrap(),
        "--socket",
        helper2.socket.to_str().unwrap(),
        "--json",
        "renew",
        "--once",
    ]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains("lease_expires_at"), "{out:?}");
    // Outside a session: terminal.
    let out = helper2.run(&["renew", "--once"]);
    assert_eq!(out.code(), Some(76), "{out:?}");
}

#[test]
fn leases_are_renewed_in_the_background() {
    let broker = Broker::start_with_lease(Some(4));
    let helper = Helper::start(&broker.url);
    helper.login(&broker, ADA);
    let cli = cli_bin();
    let script = format!("sleep 5; \"{}\" grants", cli.to_str().unwrap());
    let out = helper.run(&["run", "--secret", AUTO, "--", "sh", "-c", &script]);
    assert_eq!(out.code(), Some(0), "{out:?}");
    assert!(out.stdout.contains("approver (policy)"), "{out:?}");
}

#[test]
fn a_revoked_login_cannot_enroll_and_signing_waits_for_enrollment() {
    let (broker, helper, credential) = logged_in();
    broker.revoke_machine(&credential, ADA);
    let out = helper.run(&["--json", "run", "--", "true"]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    let err: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(err["code"], "ENROLL_FAILED", "{err}");

    // This test process registers itself without waiting: until (unless) the enrollment
    // succeeds, signing for it is NOT_ENROLLED; and launcher signing from inside it is
    // IN_SESSION.
    let v = helper.raw(br#"{"op":"register","wait":false}"#);
    assert_eq!(v["result"], "registered", "{v}");
    let v = helper.raw(br#"{"op":"sign_request","secrets":["AUTO_TOKEN"],"reason":"r"}"#);
    assert_eq!(v["code"], "NOT_ENROLLED", "{v}");
    let v = helper
        .raw(br#"{"op":"sign_launcher_proof","method":"GET","path":"/v1/operator/machines"}"#);
    assert_eq!(v["code"], "IN_SESSION", "{v}");
    let v = helper.raw(br#"{"op":"unregister"}"#);
    assert_eq!(v["result"], "unregistered", "{v}");
    // Having been in a session, this process stays out of launcher signing.
    let v = helper
        .raw(br#"{"op":"sign_launcher_proof","method":"GET","path":"/v1/operator/machines"}"#);
    assert_eq!(v["code"], "IN_SESSION", "{v}");
}

#[test]
fn usage_errors_exit_2() {
    let broker = Broker::start();
    let helper = Helper::start(&broker.url);
    for args in [
        vec!["run"],
        vec!["run", "--secret", "lower", "--", "env"],
        vec!["login"],
        vec!["cancel", "nope"],
        vec![
            "login",
            "--service",
            "svc",
            "--token-file",
            "/no/such/token",
        ],
        vec!["--non-interactive", "login", "--service", "svc"],
        vec!["--bogus-flag", "status"],
    ] {
        let out = helper.run(&args);
        assert_eq!(out.code(), Some(2), "{args:?}: {out:?}");
    }
    // No socket anywhere: a required environment value is missing.
    let out = std::process::Command::new(cli_bin())
        .arg("status")
        .env_remove("XDG_RUNTIME_DIR")
        .env_remove("COUNTERSIGN_HELPER_SOCKET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // A helper that is not there is a failure, not a usage error.
    let out = std::process::Command::new(cli_bin())
        .args(["--socket", "/nonexistent/l.sock", "status"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
}

#[test]
fn completions_and_man_page() {
    let out = std::process::Command::new(cli_bin())
        .args(["completions", "bash"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("countersign") && text.contains("operator"),
        "{text}"
    );
    let out = std::process::Command::new(cli_bin())
        .arg("man")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains(".TH countersign"), "{text}");
    let dir = TempDir::new("man");
    let out = std::process::Command::new(cli_bin())
        .args(["man", "--dir"])
        .arg(&dir.0)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(dir.0.join("countersign-run.1").exists());
    let help = std::process::Command::new(cli_bin())
        .args(["run", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&help.stdout).contains("--no-wait"));
}

#[test]
fn a_session_whose_root_is_killed_ends_at_the_broker() {
    let (broker, helper, _) = logged_in();
    let mut child = helper
        .cli()
        .args(["run", "--secret", AUTO, "--", "sleep", "20"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while broker.grants_for(ADA).is_empty() {
        assert!(std::time::Instant::now() < deadline, "no grant");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The root (`countersign run`) dies without unregistering; its `sleep` is orphaned.
    child.kill().unwrap();
    let _ = child.wait();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !broker.grants_for(ADA).is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "the session outlived its root: {}",
            helper.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(helper.log().contains("session root exited"));
}

#[test]
fn unregistering_when_the_broker_is_gone_is_unenroll_failed() {
    let (broker, helper, _) = logged_in();
    let v = helper.raw(br#"{"op":"register"}"#);
    assert_eq!(v["result"], "registered", "{v}");
    assert_eq!(v["state"], "enrolled", "{v}");
    drop(broker);
    let v = helper.raw(br#"{"op":"unregister"}"#);
    assert_eq!(v["code"], "UNENROLL_FAILED", "{v}");
    // The session is over here all the same.
    let v = helper.raw(br#"{"op":"sign_proof","method":"GET","path":"/v1/enrollments/self"}"#);
    assert_eq!(v["code"], "NOT_A_SESSION", "{v}");
}

#[test]
fn a_service_login_the_broker_refuses_is_login_failed() {
    let broker = Broker::start();
    let helper = Helper::start(&broker.url);
    let token = helper.dir.0.join("token");
    std::fs::write(&token, "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln\n").unwrap();
    let out = helper.run(&[
        "--json",
        "login",
        "--service",
        "svc",
        "--token-file",
        token.to_str().unwrap(),
    ]);
    assert_eq!(out.code(), Some(1), "{out:?}");
    let err: Value = serde_json::from_str(out.stderr.trim()).unwrap();
    assert_eq!(err["code"], "LOGIN_FAILED", "{err}");
    assert!(
        err["error"].as_str().unwrap().contains("TOKEN_LOGIN_OFF"),
        "{err}"
    );
}

#[test]
fn an_ancestry_deeper_than_64_processes_is_in_session() {
    let helper = Helper::start("http://127.0.0.1:9");
    let script = helper.dir.0.join("deep.sh");
    std::fs::write(
        &script,
        "n=$1; shift\nif [ \"$n\" -gt 0 ]; then sh \"$0\" $((n - 1)) \"$@\"; exit $?; fi\nexec \"$@\"\n",
    )
    .unwrap();
    let out = std::process::Command::new("sh")
        .arg(&script)
        .arg("70")
        .arg(cli_bin())
        .arg("--socket")
        .arg(&helper.socket)
        .args(["operator", "machines", "list"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("IN_SESSION") && err.contains("deeper than 64"),
        "{err}"
    );
    // Shallow, the same call gets past the session check (and needs a login).
    let out = helper.run(&["operator", "machines", "list"]);
    assert!(out.stderr.contains("NO_CREDENTIAL"), "{out:?}");
}

#[test]
fn with_no_store_nothing_is_written_and_a_restart_needs_a_new_login() {
    let broker = Broker::start();
    let credential = {
        let helper = Helper::start_args(&broker.url, &["--no-store"]);
        let credential = helper.login(&broker, ADA);
        assert!(!helper.state.join("launcher-credential.json").exists());
        // --no-mask: the value itself reaches the output (masking has its own tests).
        let out = helper.run(&["run", "--no-mask", "--secret", AUTO, "--", "env"]);
        assert_eq!(out.code(), Some(0), "{out:?}");
        credential
    };
    // A stored credential survives a restart.
    let helper = Helper::start(&broker.url);
    let again = helper.login(&broker, ADA);
    assert_ne!(again, credential);
    // Stop it and start another helper on a copy of its state.
    let dir = TempDir::new("restart");
    let state = dir.0.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::copy(
        helper.state.join("launcher-credential.json"),
        state.join("launcher-credential.json"),
    )
    .unwrap();
    drop(helper);
    let restarted = std::process::Command::new(helper_bin())
        .args(["--broker", &broker.url, "--socket"])
        .arg(dir.0.join("l.sock"))
        .arg("--state-dir")
        .arg(&state)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut restarted = scopeguard(restarted);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(dir.0.join("l.sock")).is_err() {
        assert!(std::time::Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = std::process::Command::new(cli_bin())
        .arg("--socket")
        .arg(dir.0.join("l.sock"))
        .args(["--json", "status"])
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["credential"]["credential_id"], again.as_str(), "{v}");
    let _ = restarted.0.kill();
    let _ = restarted.0.wait();
}

/// Kills a child when dropped.
struct Guard(std::process::Child);

fn scopeguard(c: std::process::Child) -> Guard {
    Guard(c)
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
