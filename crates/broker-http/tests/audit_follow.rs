//! `countersign-broker audit export --follow` for a log shipper, the real binary on a real
//! SQLite database: it writes what is there, then each entry as it is appended; with a cursor
//! file it resumes after the last entry written; a chain rolled back below the cursor is an
//! error, not a silent gap.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use countersign_broker_core::Storage;
use countersign_broker_core::audit::{self, AuditEvent};
use countersign_broker_core::seal::Sealer;
use countersign_broker_sql::SqlStorage;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};
use zeroize::Zeroizing;

struct Db {
    _dir: tempfile::TempDir,
    url: String,
    key_file: String,
    cursor: std::path::PathBuf,
    sealer: Sealer,
}

impl Db {
    fn new() -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let key = Zeroizing::new(vec![7u8; 32]);
        let key_file = dir.path().join("seal.key");
        std::fs::write(&key_file, countersign_proto::b64::encode(&key)).expect("write key");
        Db {
            url: format!("sqlite://{}?mode=rwc", dir.path().join("b.db").display()),
            key_file: key_file.to_str().expect("utf-8").to_owned(),
            cursor: dir.path().join("audit.cursor"),
            sealer: Sealer::new(&key).expect("sealer"),
            _dir: dir,
        }
    }

    /// Appends `n` release entries numbered from `from`.
    async fn append(&self, from: usize, n: usize) {
        let storage = SqlStorage::connect(&self.url).await.expect("connect");
        let events: Vec<AuditEvent> = (from..from + n)
            .map(|i| AuditEvent {
                kind: "release",
                subject: format!("grant:{i}"),
                body: serde_json::json!({ "names": [format!("SECRET_{i}")] }).to_string(),
            })
            .collect();
        let mut tx = storage.begin().await.expect("begin");
        audit::append(&mut *tx, &self.sealer, chrono::Utc::now(), &events)
            .await
            .expect("append");
        tx.commit().await.expect("commit");
        storage.close().await;
    }

    fn follow(&self, cursor: Option<&Path>) -> (Child, Lines<BufReader<ChildStdout>>) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_countersign-broker"));
        cmd.args(["audit", "export", "--follow", "--poll-ms", "50"])
            .args([
                "--database-url",
                &self.url,
                "--seal-key-file",
                &self.key_file,
            ])
            .env_remove("COUNTERSIGN_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(c) = cursor {
            cmd.arg("--cursor-file").arg(c);
        }
        let mut child = cmd.spawn().expect("run countersign-broker");
        let out = child.stdout.take().expect("stdout");
        (child, BufReader::new(out).lines())
    }
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
    let db = Db::new();
    db.append(1, 3).await;

    let (mut child, mut lines) = db.follow(Some(&db.cursor));
    for want in 1..=3 {
        assert_eq!(next_position(&mut lines).await, want);
    }
    cursor_reaches(&db.cursor, 3).await;
    // Appended while it follows: written as they come.
    db.append(4, 2).await;
    assert_eq!(next_position(&mut lines).await, 4);
    assert_eq!(next_position(&mut lines).await, 5);
    cursor_reaches(&db.cursor, 5).await;
    child.kill().await.expect("kill");

    // Appended while it is down; a restart resumes after the cursor, nothing repeated.
    db.append(6, 1).await;
    let (mut child, mut lines) = db.follow(Some(&db.cursor));
    assert_eq!(next_position(&mut lines).await, 6);
    cursor_reaches(&db.cursor, 6).await;
    child.kill().await.expect("kill");

    // Without a cursor it starts from --since (1).
    let (mut child, mut lines) = db.follow(None);
    assert_eq!(next_position(&mut lines).await, 1);
    child.kill().await.expect("kill");
}

#[tokio::test]
async fn a_cursor_the_chain_no_longer_holds_is_an_error() {
    let db = Db::new();
    db.append(1, 2).await;
    // A cursor from a longer (or another) chain: rolled back below it.
    std::fs::write(&db.cursor, r#"{"position":9,"hash":"00"}"#).expect("write cursor");
    let (child, _lines) = db.follow(Some(&db.cursor));
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("exits within 20 s")
        .expect("wait");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rolled back"), "{err}");

    // A cursor naming an entry whose hash is not the chain's: rewritten.
    std::fs::write(&db.cursor, r#"{"position":1,"hash":"00"}"#).expect("write cursor");
    let (child, _lines) = db.follow(Some(&db.cursor));
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("exits within 20 s")
        .expect("wait");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rewritten"), "{err}");
}
