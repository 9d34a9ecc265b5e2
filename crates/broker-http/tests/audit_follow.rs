//! `countersign-broker audit export --follow` for a log shipper, the real binary on a real
//! SQLite database: it writes what is there, then each entry as it is appended; with a cursor
//! file it resumes after the last entry written; a chain rolled back below the cursor is an
//! error, not a silent gap.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

mod common;

use common::audit_db::AuditDb;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// `audit export --follow` on `db` (every 50 ms), resuming from `cursor` if any; killed on
/// drop.
fn follow(db: &AuditDb, cursor: Option<&Path>) -> (Child, Lines<BufReader<ChildStdout>>) {
    let mut cmd = Command::from(common::process::command(
        ["audit", "export", "--follow", "--poll-ms", "50"]
            .iter()
            .map(|a| a.to_string())
            .chain(db.args()),
    ));
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    if let Some(c) = cursor {
        cmd.arg("--cursor-file").arg(c);
    }
    let mut child = cmd.spawn().expect("run countersign-broker");
    let out = child.stdout.take().expect("stdout");
    (child, BufReader::new(out).lines())
}

/// The cursor file of `db`.
fn cursor(db: &AuditDb) -> std::path::PathBuf {
    db.dir.path().join("audit.cursor")
}

/// Follows from `cursor` and waits (20 s) for the command to end, as it must.
async fn follow_to_its_end(db: &AuditDb) -> Output {
    let (child, _lines) = follow(db, Some(&cursor(db)));
    tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("exits within 20 s")
        .expect("wait")
}

/// The next exported line's position (deadline 20 s).
async fn next_position(lines: &mut Lines<BufReader<ChildStdout>>) -> i64 {
    let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("a line within 20 s")
        .expect("read")
        .expect("a line, not the end");
    let v: serde_json::Value = serde_json::from_str(&line).expect("a JSON line");
    assert_eq!(v["kind"], "release");
    v["position"].as_i64().expect("a position")
}

/// The cursor file's position once it reaches `want` (deadline 20 s).
async fn cursor_reaches(path: &Path, want: i64) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let at = countersign_broker_http::audit::read_cursor(path)
            .expect("cursor readable")
            .map(|c| c.position);
        if at == Some(want) {
            return;
        }
        assert!(Instant::now() < deadline, "cursor at {at:?}, not {want}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn follow_writes_new_entries_and_resumes_from_its_cursor() {
    let db = AuditDb::new().expect("database");
    let cursor = cursor(&db);
    db.append(1, 3).await.expect("append");

    let (mut child, mut lines) = follow(&db, Some(&cursor));
    for want in 1..=3 {
        assert_eq!(next_position(&mut lines).await, want);
    }
    cursor_reaches(&cursor, 3).await;
    // Appended while it follows: written as they come.
    db.append(4, 2).await.expect("append");
    assert_eq!(next_position(&mut lines).await, 4);
    assert_eq!(next_position(&mut lines).await, 5);
    cursor_reaches(&cursor, 5).await;
    child.kill().await.expect("kill");

    // Appended while it is down; a restart resumes after the cursor, nothing repeated.
    db.append(6, 1).await.expect("append");
    let (mut child, mut lines) = follow(&db, Some(&cursor));
    assert_eq!(next_position(&mut lines).await, 6);
    cursor_reaches(&cursor, 6).await;
    child.kill().await.expect("kill");

    // Without a cursor it starts from --since (1).
    let (mut child, mut lines) = follow(&db, None);
    assert_eq!(next_position(&mut lines).await, 1);
    child.kill().await.expect("kill");
}

#[tokio::test]
async fn a_cursor_the_chain_no_longer_holds_is_an_error() {
    let db = AuditDb::new().expect("database");
    db.append(1, 2).await.expect("append");
    // A cursor from a longer (or another) chain: rolled back below it.
    std::fs::write(cursor(&db), r#"{"position":9,"hash":"00"}"#).expect("write cursor");
    let out = follow_to_its_end(&db).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rolled back"), "{err}");

    // A cursor naming an entry whose hash is not the chain's: rewritten.
    std::fs::write(cursor(&db), r#"{"position":1,"hash":"00"}"#).expect("write cursor");
    let out = follow_to_its_end(&db).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rewritten"), "{err}");
}
