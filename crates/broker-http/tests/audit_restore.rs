//! Ends no replica forgets: the real `countersign-broker` binary, on SQLite and on PostgreSQL,
//! stopped by SIGTERM and by SIGKILL right after each kind of end (a grant's revocation, a
//! session's end, a machine login's revocation, a withholding, an expiry), then started on a
//! copy of its database taken before the end. Nothing ended comes back: the broker answers 503
//! with an `audit log:` error (its state file, `fsync`ed before the end was answered, remembers
//! a head the database no longer holds) until an operator runs `audit accept-head`.

use std::path::{Path, PathBuf};
use std::time::Duration;

mod common;

use anyhow::bail;
use common::client::{Client, Machine, Session, s};
use common::process::Stop;
use reqwest::Method as M;
use serde_json::{Value, json};
use sqlx::{Connection, Executor};

type R = anyhow::Result<()>;

const ADA: &str = "ada@example.com";
/// The automatic secret every grant is of.
const AUTO: &str = "AUTO_SECRET";

/// The session revokes its grant. It runs right after a graceful restart: the previous
/// process released its proof horizon at shutdown (`exclusive.rs`), so nothing honest is refused.
async fn revoke(c: &Client, se: &Session, grant: &str) -> R {
    let path = format!("/v1/grants/{grant}/revoke");
    match se.post(c, &path, None).await? {
        (200, _) => Ok(()),
        (status, v) => bail!("{path}: {status} {v}"),
    }
}

/// A deployment under test (the harness's), and its database: a SQLite file or a PostgreSQL
/// database, which can be copied and put back with the broker stopped.
struct Deployment {
    d: common::process::Deployment,
    db: Db,
}

impl std::ops::Deref for Deployment {
    type Target = common::process::Deployment;
    fn deref(&self) -> &common::process::Deployment {
        &self.d
    }
}

enum Db {
    Sqlite(PathBuf),
    Postgres { admin: String, name: String },
}

/// Copies a SQLite database `from` (with its `-wal` and `-shm` files) over `to`.
fn copy_sqlite(from: &Path, to: &Path) -> R {
    for ext in ["", "-wal", "-shm"] {
        let from = PathBuf::from(format!("{}{ext}", from.display()));
        let to = PathBuf::from(format!("{}{ext}", to.display()));
        let _ = std::fs::remove_file(&to);
        if from.exists() {
            std::fs::copy(&from, &to)?;
        }
    }
    Ok(())
}

impl Deployment {
    async fn new(postgres: bool) -> anyhow::Result<Option<Self>> {
        let mut files =
            common::process::Deployment::builder().secret(AUTO, "ops@example.com", "automatic");
        let db = if postgres {
            let Ok(admin) = std::env::var("COUNTERSIGN_TEST_POSTGRES_URL") else {
                if std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").is_ok_and(|v| v == "1") {
                    bail!(
                        "COUNTERSIGN_REQUIRE_POSTGRES=1 but COUNTERSIGN_TEST_POSTGRES_URL is unset"
                    );
                }
                eprintln!("skipped: COUNTERSIGN_TEST_POSTGRES_URL is unset");
                return Ok(None);
            };
            let name = format!("cs_restore_{}", uuid::Uuid::new_v4().simple());
            pg(&admin, &format!("CREATE DATABASE {name}")).await?;
            files = files.database_url(&with_database(&admin, &name));
            Some(Db::Postgres { admin, name })
        } else {
            None
        };
        let d = files.create()?;
        let db = db.unwrap_or_else(|| Db::Sqlite(d.path("broker.db")));
        Ok(Some(Self { d, db }))
    }

    /// A copy of the database as it is now (the broker stopped).
    async fn snapshot(&self, tag: &str) -> R {
        match &self.db {
            Db::Sqlite(f) => copy_sqlite(f, &self.path(&format!("{tag}.db"))),
            Db::Postgres { admin, name } => {
                pg(admin, &format!("DROP DATABASE IF EXISTS {name}_{tag}")).await?;
                pg(
                    admin,
                    &format!("CREATE DATABASE {name}_{tag} TEMPLATE {name}"),
                )
                .await
            }
        }
    }

    /// Puts the copy back in place of the database (the broker stopped).
    async fn restore(&self, tag: &str) -> R {
        match &self.db {
            Db::Sqlite(f) => copy_sqlite(&self.path(&format!("{tag}.db")), f),
            Db::Postgres { admin, name } => {
                pg(admin, &format!("DROP DATABASE {name}")).await?;
                pg(
                    admin,
                    &format!("CREATE DATABASE {name} TEMPLATE {name}_{tag}"),
                )
                .await
            }
        }
    }

    async fn drop_databases(&self, tags: &[&str]) {
        if let Db::Postgres { admin, name } = &self.db {
            for t in tags {
                let _ = pg(admin, &format!("DROP DATABASE IF EXISTS {name}_{t}")).await;
            }
            let _ = pg(admin, &format!("DROP DATABASE IF EXISTS {name}")).await;
        }
    }
}

fn with_database(admin: &str, name: &str) -> String {
    let (head, _) = admin.rsplit_once('/').unwrap_or((admin, ""));
    format!("{head}/{name}")
}

/// Runs `sql` on the admin database; retried for a few seconds while a stopped broker's
/// connections are still closing (a database in use cannot be copied or dropped).
async fn pg(admin: &str, sql: &str) -> R {
    sqlx::any::install_default_drivers();
    let mut last = None;
    for _ in 0..100 {
        let mut c = sqlx::AnyConnection::connect(admin).await?;
        let r = c.execute(sql).await;
        c.close().await?;
        match r {
            Ok(_) => return Ok(()),
            Err(e) if e.to_string().contains("being accessed by other users") => {
                last = Some(e);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
    bail!("{sql}: {last:?}")
}

/// The ends, each with what must not come back.
#[derive(Clone, Copy, Debug)]
enum End {
    Revocation,
    SessionEnded,
    MachineLoginRevocation,
    Withholding,
    Expiry,
}

const ENDS: [End; 5] = [
    End::Revocation,
    End::SessionEnded,
    End::MachineLoginRevocation,
    End::Withholding,
    End::Expiry,
];

/// 503 with an `audit log:` error.
fn closed(status: u16, body: &Value) -> bool {
    status == 503 && s(body, "error").starts_with("audit log:")
}

/// Acts `end` on machine `m`, its session `se` and the session's grant `g`.
async fn act(d: &Deployment, c: &Client, m: &Machine, se: &Session, g: &str, end: End) -> R {
    let (path, (status, v)) = match end {
        End::Revocation => return revoke(c, se, g).await,
        End::SessionEnded => {
            let path = format!("/v1/enrollments/{}", se.enrollment);
            let done = m.call(c, M::DELETE, &path, None).await?;
            (path, done)
        }
        End::MachineLoginRevocation => {
            let path = format!(
                "/v1/launcher-credentials/{}/revoke-by-approver",
                m.credential
            );
            let body = json!({ "approver": ADA });
            let done = c.send(M::POST, &path, &c.bearer(), Some(&body)).await?;
            (path, done)
        }
        End::Withholding => {
            let path = format!("/v1/operator/grants/{g}/revoke");
            let done = m.call(c, M::POST, &path, None).await?;
            (path, done)
        }
        End::Expiry => return expired(d, c, se, g).await,
    };
    let want = if matches!(end, End::SessionEnded) {
        204
    } else {
        200
    };
    if status != want {
        bail!("{path}: expected {want}, got {status}: {v}");
    }
    Ok(())
}

/// The sweep writes the expiry of `g` (every 2 s): waits until its values are refused and the
/// state file has moved past the copy's head.
async fn expired(d: &Deployment, c: &Client, se: &Session, g: &str) -> R {
    let state = d.path("state/audit-state.json");
    let before = std::fs::read_to_string(&state)?;
    for _ in 0..400 {
        let now = std::fs::read_to_string(&state)?;
        let (status, _) = se.values(c, g).await?;
        if status == 403 && now != before {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    bail!("the expiry was not written")
}

async fn scenario(postgres: bool, stop: Stop) -> R {
    let Some(d) = Deployment::new(postgres).await? else {
        return Ok(());
    };
    let c = d.client();
    let mut tags = Vec::new();
    let result = async {
        for (i, end) in ENDS.into_iter().enumerate() {
            // What this end acts on, made and then copied with the broker stopped.
            let b = d.start().await?;
            let m = Machine::login(&c, ADA, &format!("host-{i}")).await?;
            let se = m.session(&c, &format!("rt-{i}")).await?;
            let lifetime = matches!(end, End::Expiry).then_some(6);
            let g = se.grant(&c, AUTO, lifetime).await?;
            let (status, v) = se.values(&c, &g).await?;
            if status != 200 {
                bail!("{end:?}: values before the end: {status} {v}");
            }
            b.stop(Stop::Term)?;
            let tag = format!("before{i}");
            d.snapshot(&tag).await?;
            tags.push(tag.clone());

            // The end, then the broker stops at once.
            let b = d.start().await?;
            act(&d, &c, &m, &se, &g, end).await?;
            b.stop(stop)?;

            // The copy from before the end comes back; the broker starts on it.
            d.restore(&tag).await?;
            let b = d.start().await?;
            let (status, v) = se.values(&c, &g).await?;
            if !closed(status, &v) {
                bail!("{end:?} ({stop:?}): values after the restore: {status} {v}");
            }
            if matches!(end, End::MachineLoginRevocation | End::SessionEnded) {
                let (status, v, _) = m.enroll(&c, &format!("rt-again-{i}")).await?;
                if !closed(status, &v) {
                    bail!("{end:?} ({stop:?}): enroll after the restore: {status} {v}");
                }
                // Every route the launcher's proof authenticates refuses it, operator routes
                // included: the replica cannot vouch that this machine login was not revoked.
                let (status, v) = m.call(&c, M::GET, "/v1/operator/machines", None).await?;
                if !closed(status, &v) {
                    bail!("{end:?} ({stop:?}): operator machines after the restore: {status} {v}");
                }
            }
            // Still closed after a whole round of the follower (its rounds do not reopen it).
            common::whole_pass(&d.base, "broker.audit").await?;
            let (status, v) = se.values(&c, &g).await?;
            if !closed(status, &v) {
                bail!("{end:?} ({stop:?}): values a round later: {status} {v}");
            }
            b.stop(Stop::Term)?;
            // Until an operator acts.
            let out = d.cli(&["audit", "accept-head"])?;
            if !out.status.success() {
                bail!("accept-head: {out:?}");
            }
            let b = d.start().await?;
            let (status, v) = se.values(&c, &g).await?;
            if closed(status, &v) {
                bail!("{end:?}: still closed after accept-head: {v}");
            }
            b.stop(Stop::Term)?;
        }
        Ok(())
    }
    .await;
    let tag_refs: Vec<&str> = tags.iter().map(|t| t.as_str()).collect();
    d.drop_databases(&tag_refs).await;
    if let Err(e) = result {
        bail!("{e:#}\nbroker log:\n{}", d.log_text());
    }
    Ok(())
}

#[tokio::test]
async fn sqlite_sigterm_after_each_end() -> R {
    scenario(false, Stop::Term).await
}

#[tokio::test]
async fn sqlite_sigkill_after_each_end() -> R {
    scenario(false, Stop::Kill).await
}

#[tokio::test]
async fn postgres_sigterm_after_each_end() -> R {
    scenario(true, Stop::Term).await
}

#[tokio::test]
async fn postgres_sigkill_after_each_end() -> R {
    scenario(true, Stop::Kill).await
}

/// Runs `audit verify` on a SQLite file with the test's seal key (and a state file).
fn verify(d: &Deployment, db: &Path, state: Option<&Path>) -> anyhow::Result<std::process::Output> {
    let url = format!("sqlite://{}?mode=rw", db.display());
    let mut cmd =
        common::process::command(["audit", "verify", "--database-url", &url, "--seal-key-file"]);
    cmd.arg(d.path("seal.key"));
    if let Some(s) = state {
        cmd.arg("--state-file").arg(s);
    }
    Ok(cmd.output()?)
}

/// `audit verify` names each kind of tampering: an edited record, decision, grant, credential
/// and enrollment, and a deleted tail (given the state file); an untampered copy passes.
#[tokio::test]
async fn verify_names_each_tampering() -> R {
    let Some(d) = Deployment::new(false).await? else {
        return Ok(());
    };
    let c = d.client();
    let b = d.start().await?;
    let m = Machine::login(&c, ADA, "laptop").await?;
    let se = m.session(&c, "rt-verify").await?;
    let g = se.grant(&c, AUTO, None).await?;
    let (status, _) = se.values(&c, &g).await?;
    assert_eq!(status, 200);
    b.stop(Stop::Term)?;
    let Db::Sqlite(db) = &d.db else {
        bail!("sqlite")
    };
    let state = d.path("state/audit-state.json");

    let ok = verify(&d, db, Some(&state))?;
    assert!(ok.status.success(), "an untampered copy passes: {ok:?}");
    assert!(
        String::from_utf8_lossy(&ok.stdout).starts_with("ok: "),
        "{ok:?}"
    );

    let record_id = {
        sqlx::any::install_default_drivers();
        let url = format!("sqlite://{}?mode=rw", db.display());
        let mut conn = sqlx::AnyConnection::connect(&url).await?;
        let row: (String,) = sqlx::query_as("SELECT id FROM records LIMIT 1")
            .fetch_one(&mut conn)
            .await?;
        conn.close().await?;
        row.0
    };
    let cases: Vec<(&str, String, String)> = vec![
        (
            "record",
            "UPDATE records SET text = text || ' '".into(),
            format!("records {record_id}: text"),
        ),
        (
            "decision",
            "UPDATE records SET decided = json_set(decided, '$.by', 'mallory@example.com')".into(),
            format!("records {record_id}: decision seal"),
        ),
        (
            "grant",
            "UPDATE grants SET doc = json_set(doc, '$.rules_version', 'forged')".into(),
            format!("grants {g}: seal"),
        ),
        (
            "credential",
            "UPDATE credentials SET doc = json_set(doc, '$.approved_by', 'mallory@example.com')"
                .into(),
            format!("credentials {}: seal", m.credential),
        ),
        (
            "enrollment",
            "UPDATE enrollments SET doc = json_set(doc, '$.runtime_id', 'rt-forged')".into(),
            format!("enrollments {}: seal", se.enrollment),
        ),
        (
            "tail",
            "DELETE FROM audit_log WHERE position > (SELECT MAX(position) - 2 FROM audit_log)"
                .into(),
            "the database is behind the state file".into(),
        ),
    ];
    for (what, sql, expected) in cases {
        let copy = d.path(&format!("tampered-{what}.db"));
        copy_sqlite(db, &copy)?;
        let url = format!("sqlite://{}?mode=rw", copy.display());
        let mut conn = sqlx::AnyConnection::connect(&url).await?;
        let done = conn.execute(sql.as_str()).await?;
        assert!(done.rows_affected() > 0, "{what}: the edit changed nothing");
        conn.close().await?;
        let out = verify(&d, &copy, Some(&state))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{what}: {out:?}");
        assert!(
            stderr.lines().any(|l| l.contains(&expected)),
            "{what}: expected a finding naming {expected:?}, got:\n{stderr}"
        );
    }
    Ok(())
}

/// Presents the console's record until the broker answers (it refuses until its first full
/// walk since the start).
async fn witness_round(
    w: &countersign_console_http::witness::Witness,
) -> anyhow::Result<countersign_console_http::witness::Round> {
    use countersign_console_http::witness::Round;
    for _ in 0..200 {
        match w.round().await? {
            Round::Refused(503, m) if m.contains("still being verified") => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            r => return Ok(r),
        }
    }
    bail!("the broker never answered the witness")
}

/// The console as a witness: the database and the replica's state file both rolled back (a
/// whole-machine restore) go unnoticed by the broker itself, but not by the console, which
/// remembers a later head in its own database: the broker fails closed on its next round, until
/// an operator accepts the head, which the witness then takes.
#[tokio::test]
async fn a_witness_catches_a_rollback_of_database_and_state_file() -> R {
    use countersign_console_http::witness::{Round, Witness};
    let Some(d) = Deployment::new(false).await? else {
        return Ok(());
    };
    let c = d.client();
    let console_db = format!("sqlite://{}?mode=rwc", d.path("console.db").display());
    let storage = countersign_console_sql::SqlStorage::connect(&console_db)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let w = Witness::new(
        storage.clone(),
        &d.base,
        zeroize::Zeroizing::new(common::process::CONSOLE_TOKEN.to_owned()),
        Duration::from_secs(10),
    )?;
    let state = d.path("state/audit-state.json");
    let saved_state = d.path("saved-state.json");

    let b = d.start().await?;
    let m = Machine::login(&c, ADA, "laptop").await?;
    let se = m.session(&c, "rt-witness").await?;
    let g = se.grant(&c, AUTO, None).await?;
    let Round::Kept(first) = witness_round(&w).await? else {
        bail!("the first round was refused");
    };
    assert!(first.position > 0);
    b.stop(Stop::Term)?;
    d.snapshot("machine").await?;
    std::fs::copy(&state, &saved_state)?;

    // The grant is revoked; the witness sees the later head.
    let b = d.start().await?;
    revoke(&c, &se, &g).await?;
    let Round::Kept(later) = witness_round(&w).await? else {
        bail!("refused after the revocation");
    };
    assert!(later.position > first.position, "{later:?} after {first:?}");
    b.stop(Stop::Kill)?;

    // The whole machine comes back from the copy: database and state file.
    d.restore("machine").await?;
    std::fs::copy(&saved_state, &state)?;
    let b = d.start().await?;
    match witness_round(&w).await? {
        Round::Refused(503, m) if m.starts_with("audit log:") && m.contains("witness") => {}
        other => bail!("the witness's round: {other:?}"),
    }
    let (status, v) = se.values(&c, &g).await?;
    assert!(
        closed(status, &v),
        "values after the witness's round: {status} {v}"
    );
    let (status, v, _) = m.enroll(&c, "rt-witness-2").await?;
    assert!(
        closed(status, &v),
        "enroll after the witness's round: {status} {v}"
    );
    // The console kept its record.
    let kept = storage
        .witness_record(&d.base)
        .await
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    assert_eq!(kept.map(|k| k.position), Some(later.position));
    b.stop(Stop::Term)?;

    // The operator accepts the head; the witness takes it.
    let out = d.cli(&["audit", "accept-head"])?;
    assert!(out.status.success(), "{out:?}");
    let b = d.start().await?;
    let Round::Kept(taken) = witness_round(&w).await? else {
        bail!("refused after accept-head");
    };
    assert!(taken.accepted > 0, "{taken:?}");
    assert_ne!(taken.hash, later.hash, "{taken:?} replaced {later:?}");
    b.stop(Stop::Term)?;
    storage.close().await;
    Ok(())
}
