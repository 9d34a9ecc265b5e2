//! `countersign-broker audit verify|export|accept-head`, the real binary on a real SQLite
//! database: a chain that verifies is reported with its head; an entry edited by a database
//! writer is reported at its exact position with exit status 1; export prints JSON lines.

use std::process::Output;

mod common;

use common::audit_db::AuditDb;
use common::process::run;
use sqlx::{Connection, Executor};

type R = anyhow::Result<()>;

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// `audit <args>` on `db`.
fn audit(db: &AuditDb, args: &[&str]) -> anyhow::Result<Output> {
    let mut all: Vec<String> = ["audit"]
        .iter()
        .chain(args)
        .map(|a| a.to_string())
        .collect();
    all.extend(db.args());
    run(&all)
}

#[tokio::test]
async fn verify_reports_the_head_then_the_edited_entry() -> R {
    let db = AuditDb::new()?;
    let head = db.append(0, 5).await?;

    let ok = audit(&db, &["verify"])?;
    assert!(ok.status.success(), "{ok:?}");
    assert_eq!(stdout(&ok).trim(), format!("ok: 5 entries, head {head}"));

    let exported = audit(&db, &["export", "--since", "3"])?;
    assert!(exported.status.success(), "{exported:?}");
    let lines: Vec<serde_json::Value> = stdout(&exported)
        .lines()
        .map(serde_json::from_str)
        .collect::<Result<_, _>>()?;
    assert_eq!(
        lines
            .iter()
            .map(|l| l["position"].clone())
            .collect::<Vec<_>>(),
        [3, 4, 5]
    );
    assert_eq!(lines[0]["body"]["names"][0], "SECRET_2");

    let state = db.dir.path().join("audit-state.json");
    let state_arg = state.to_str().unwrap_or_default();
    let accepted = audit(&db, &["accept-head", "--state-file", state_arg])?;
    assert!(accepted.status.success(), "{accepted:?}");
    let remembered: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state)?)?;
    // The acceptance is an entry of its own, after the five.
    assert_eq!(remembered["position"], 6);
    assert_ne!(remembered["hash"], head.as_str());

    sqlx::any::install_default_drivers();
    let mut c = sqlx::AnyConnection::connect(&db.url).await?;
    c.execute("UPDATE audit_log SET body = '{\"names\":[]}' WHERE position = 4")
        .await?;
    c.close().await?;

    let broken = audit(&db, &["verify"])?;
    assert_eq!(broken.status.code(), Some(1), "{broken:?}");
    let stderr = String::from_utf8_lossy(&broken.stderr);
    assert!(
        stderr
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("position 4: hash:")),
        "{stderr}"
    );
    let refused = audit(&db, &["accept-head", "--state-file", state_arg])?;
    assert_eq!(
        refused.status.code(),
        Some(1),
        "a broken chain is not accepted"
    );
    Ok(())
}
