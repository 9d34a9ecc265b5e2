//! `countersign-broker audit verify|export|accept-head`, the real binary on a real SQLite
//! database: a chain that verifies is reported with its head; an entry edited by a database
//! writer is reported at its exact position with exit status 1; export prints JSON lines.

use std::process::{Command, Output};

use countersign_broker_core::Storage;
use countersign_broker_core::audit::{self, AuditEvent};
use countersign_broker_core::seal::Sealer;
use countersign_broker_sql::SqlStorage;
use sqlx::{Connection, Executor};
use zeroize::Zeroizing;

fn run(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_countersign-broker"))
        .args(args)
        .env_remove("COUNTERSIGN_CONFIG")
        .output()
        .expect("run countersign-broker")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[tokio::test]
async fn verify_reports_the_head_then_the_edited_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let key = Zeroizing::new(vec![5u8; 32]);
    let key_file = dir.path().join("seal.key");
    std::fs::write(&key_file, countersign_proto::b64::encode(&key)).expect("write key");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("b.db").display());
    let sealer = Sealer::new(&key).expect("sealer");
    let storage = SqlStorage::connect(&url).await.expect("connect");
    let events: Vec<AuditEvent> = (0..5)
        .map(|i| AuditEvent {
            kind: "release",
            subject: format!("session:{i}"),
            body: serde_json::json!({ "names": [format!("SECRET_{i}")] }).to_string(),
        })
        .collect();
    let mut tx = storage.begin().await.expect("begin");
    let now = chrono::Utc::now();
    let (_, head) = audit::append(&mut *tx, &sealer, now, &events)
        .await
        .expect("append")
        .expect("a head");
    tx.commit().await.expect("commit");
    storage.close().await;
    let db = ["--database-url", &url, "--seal-key-file"];
    let key_arg = key_file.to_str().expect("utf-8 path");

    let ok = run(&[&["audit", "verify"][..], &db, &[key_arg]].concat());
    assert!(ok.status.success(), "{ok:?}");
    assert_eq!(stdout(&ok).trim(), format!("ok: 5 entries, head {head}"));

    let exported = run(&[&["audit", "export", "--since", "3"][..], &db, &[key_arg]].concat());
    assert!(exported.status.success(), "{exported:?}");
    let lines: Vec<serde_json::Value> = stdout(&exported)
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    assert_eq!(
        lines
            .iter()
            .map(|l| l["position"].clone())
            .collect::<Vec<_>>(),
        [3, 4, 5]
    );
    assert_eq!(lines[0]["body"]["names"][0], "SECRET_2");

    let state = dir.path().join("audit-state.json");
    let state_arg = state.to_str().expect("utf-8 path");
    let accepted = run(&[
        &["audit", "accept-head", "--state-file", state_arg][..],
        &db,
        &[key_arg],
    ]
    .concat());
    assert!(accepted.status.success(), "{accepted:?}");
    let remembered: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&state).expect("state file")).expect("json");
    // The acceptance is an entry of its own, after the five.
    assert_eq!(remembered["position"], 6);
    assert_ne!(remembered["hash"], head.as_str());

    sqlx::any::install_default_drivers();
    let mut c = sqlx::AnyConnection::connect(&url).await.expect("raw");
    c.execute("UPDATE audit_log SET body = '{\"names\":[]}' WHERE position = 4")
        .await
        .expect("edit");
    c.close().await.expect("close");

    let broken = run(&[&["audit", "verify"][..], &db, &[key_arg]].concat());
    assert_eq!(broken.status.code(), Some(1), "{broken:?}");
    let stderr = String::from_utf8_lossy(&broken.stderr);
    assert!(
        stderr
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("position 4: hash:")),
        "{stderr}"
    );
    let refused = run(&[
        &["audit", "accept-head", "--state-file", state_arg][..],
        &db,
        &[key_arg],
    ]
    .concat());
    assert_eq!(
        refused.status.code(),
        Some(1),
        "a broken chain is not accepted"
    );
}
