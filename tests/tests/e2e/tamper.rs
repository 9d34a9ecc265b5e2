//! Tampering with the database under a real broker over HTTP, on SQLite and on PostgreSQL
//! (`docs/audit.md`): someone who can write the database but does not hold the seal key swaps
//! an enrollment's key, inserts a launcher credential row, clears a revoked grant's end,
//! deletes the tail of the audit log, or edits an entry. Each is refused or detected, with the
//! code and the log line `docs/audit.md` names.
//!
//! Logs are captured per test: `#[tokio::test]` runs the server's tasks on the test's own
//! thread, so a thread-local subscriber sees them.

use std::sync::{Arc, Mutex};

use countersign_broker_core::audit::BreakReason;
use countersign_e2e::http::*;
use serde_json::{Value, json};
use sqlx::{AnyConnection, Connection, Executor, Row};
use tracing_subscriber::util::SubscriberInitExt;

type R = anyhow::Result<()>;

/// Log lines written while the guard lives.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Capture {
    type Writer = Capture;
    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }

    /// The first line holding every one of `parts`.
    fn line_with(&self, parts: &[&str]) -> Option<String> {
        self.text()
            .lines()
            .find(|l| parts.iter().all(|p| l.contains(p)))
            .map(str::to_owned)
    }
}

fn capture() -> (Capture, impl Drop) {
    let c = Capture::default();
    let guard = tracing_subscriber::fmt()
        .with_writer(c.clone())
        .with_ansi(false)
        .with_max_level(tracing_subscriber::filter::LevelFilter::INFO)
        .finish()
        .set_default();
    (c, guard)
}

#[derive(Clone, Copy)]
enum Db {
    Sqlite,
    Postgres,
}

/// A broker on a fresh database of the kind asked, and a raw connection to that database as
/// someone without the seal key would have.
struct Env {
    tb: TestBroker,
    pg: Option<PgDatabase>,
}

impl Env {
    async fn start(db: Db) -> anyhow::Result<Option<Env>> {
        Self::start_with(db, |b| b).await
    }

    /// With the builder adjusted (passkey settings).
    async fn start_with(
        db: Db,
        adjust: impl FnOnce(TestBrokerBuilder) -> TestBrokerBuilder,
    ) -> anyhow::Result<Option<Env>> {
        let pg = match db {
            Db::Sqlite => None,
            Db::Postgres => match PgDatabase::create("cs_tamper").await? {
                Some(p) => Some(p),
                None => return Ok(None),
            },
        };
        let mut b = adjust(TestBroker::builder());
        if let Some(db) = &pg {
            b = b.database_url(&db.url);
        }
        Ok(Some(Env {
            tb: b.start().await?,
            pg,
        }))
    }

    async fn raw(&self) -> anyhow::Result<AnyConnection> {
        sqlx::any::install_default_drivers();
        Ok(AnyConnection::connect(&self.tb.database_url).await?)
    }

    async fn doc(&self, table: &str, id: &str) -> anyhow::Result<Value> {
        let mut c = self.raw().await?;
        let row = sqlx::query(&format!("SELECT doc FROM {table} WHERE id = $1"))
            .bind(id)
            .fetch_one(&mut c)
            .await?;
        let doc: String = row.try_get("doc")?;
        c.close().await?;
        Ok(serde_json::from_str(&doc)?)
    }

    async fn exec(&self, sql: &str) -> anyhow::Result<u64> {
        let mut c = self.raw().await?;
        let n = c.execute(sql).await?.rows_affected();
        c.close().await?;
        Ok(n)
    }

    async fn finish(self) {
        let Env { tb, pg } = self;
        tb.shutdown().await;
        if let Some(db) = pg {
            db.drop_now().await;
        }
    }
}

fn sql_text(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

macro_rules! on_both {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test]
                async fn $name() -> super::R {
                    super::$name(super::Db::Sqlite).await
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test]
                async fn $name() -> super::R {
                    super::$name(super::Db::Postgres).await
                }
            )*
        }
    };
}

on_both!(
    a_swapped_enrollment_key_is_refused,
    an_inserted_credential_row_is_refused,
    a_revoked_grant_whose_end_is_cleared_stays_ended,
    a_deleted_audit_tail_fails_closed,
    an_edited_audit_entry_is_found,
    an_inserted_passkey_row_is_refused,
);

/// A passkey row inserted for the attacker's authenticator (a copy of Ada's real one, seal and
/// all, with the attacker's credential id and key): its countersignature is refused
/// (PASSKEY_INVALID), logged as tampering, and `audit verify` names the row; Ada's own passkey
/// still approves.
async fn an_inserted_passkey_row_is_refused(db: Db) -> R {
    let Some(env) = Env::start_with(db, |b| {
        b.configure(|c| c.passkeys = Some(passkey_settings(vec![passkey_for_secret(ADA_SECRET)])))
    })
    .await?
    else {
        return Ok(());
    };
    let (logs, _g) = capture();
    let tb = &env.tb;
    let mut real = Soft::p256(RP_ID, ORIGIN);
    tb.register_passkey(ADA, &real, Some(&tb.enroll_code(ADA)), None)
        .await?
        .expect(201);
    let mut attacker = Soft::p256(RP_ID, ORIGIN);
    let mut doc = env.doc("passkeys", &real.id_text()).await?;
    let key = countersign_proto::webauthn::CredentialKey::from_cose(&attacker.cose())?;
    doc["id"] = json!(attacker.id_text());
    doc["key"] = json!(key.to_text());
    env.exec(&format!(
        "INSERT INTO passkeys (id, person, created_at_ms, removed_at_ms, doc) VALUES ({}, {}, 0, NULL, {})",
        sql_text(&attacker.id_text()),
        sql_text(ADA),
        sql_text(&doc.to_string())
    ))
    .await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let record = s.request(&[ADA_SECRET]).await?.expect(200).s("record_id");
    let st = tb.statement(&record, ADA).await?.expect(200);
    assert_eq!(
        st.get("passkeys").as_array().map(Vec::len),
        Some(1),
        "the inserted row is not offered"
    );
    tb.approve_with_passkey(&record, ADA, None, &mut attacker)
        .await?
        .refused(403, "PASSKEY_INVALID");
    logs.line_with(&["tampering detected", "passkeys", &attacker.id_text()])
        .ok_or_else(|| anyhow::anyhow!("no tamper line in:\n{}", logs.text()))?;
    let storage = tb.open_db().await?;
    let found = countersign_broker_http::audit::inspect(&storage, &tb.sealer(), None, None).await?;
    storage.close().await;
    let text: Vec<String> = found.findings.iter().map(|f| f.to_string()).collect();
    assert!(
        text.iter()
            .any(|f| f.contains(&format!("passkeys {}", attacker.id_text())) && f.contains("seal")),
        "{text:?}"
    );
    tb.approve_with_passkey(&record, ADA, None, &mut real)
        .await?
        .expect(200);
    env.finish().await;
    Ok(())
}

/// The enrollment's key swapped for the attacker's: proofs signed with it are refused
/// (PROOF_INVALID), and so is the row for everyone, with `tampering detected`.
async fn a_swapped_enrollment_key_is_refused(db: Db) -> R {
    let Some(env) = Env::start(db).await? else {
        return Ok(());
    };
    let (logs, _g) = capture();
    let (_m, s) = env.tb.session_of(ADA).await?;
    let attacker = new_key();
    let mut doc = env.doc("enrollments", &s.enrollment_id).await?;
    doc["thumbprint"] = json!(attacker.thumbprint());
    doc["jwk"] = jwk_value(&attacker);
    env.exec(&format!(
        "UPDATE enrollments SET doc = {} WHERE id = {}",
        sql_text(&doc.to_string()),
        sql_text(&s.enrollment_id)
    ))
    .await?;
    let forged = Session {
        key: attacker,
        enrollment_id: s.enrollment_id.clone(),
        credential_id: s.credential_id.clone(),
        conn: s.conn.clone(),
    };
    forged.describe().await?.refused(401, "PROOF_INVALID");
    let line = logs
        .line_with(&["tampering detected", "enrollments", &s.enrollment_id])
        .ok_or_else(|| anyhow::anyhow!("no tamper line in:\n{}", logs.text()))?;
    assert!(line.contains("ERROR"), "{line}");
    env.finish().await;
    Ok(())
}

/// A launcher credential row inserted for the attacker's key (a copy of a real one, seal and
/// all): its launcher proofs are refused (LAUNCHER_INVALID), the real machine still works.
async fn an_inserted_credential_row_is_refused(db: Db) -> R {
    let Some(env) = Env::start(db).await? else {
        return Ok(());
    };
    let (logs, _g) = capture();
    let m = env.tb.machine_login(ADA).await?;
    let attacker = new_key();
    let id = random_uuid();
    let mut doc = env.doc("credentials", &m.credential_id).await?;
    doc["id"] = json!(id);
    doc["thumbprint"] = json!(attacker.thumbprint());
    doc["jwk"] = jwk_value(&attacker);
    env.exec(&format!(
        "INSERT INTO credentials (id, thumbprint, issued_at_ms, expires_at_ms, revoked_at_ms, doc) \
         SELECT {}, {}, issued_at_ms, expires_at_ms, NULL, {} FROM credentials WHERE id = {}",
        sql_text(&id),
        sql_text(&attacker.thumbprint()),
        sql_text(&doc.to_string()),
        sql_text(&m.credential_id),
    ))
    .await?;
    let forged = Machine {
        key: attacker,
        credential_id: id.clone(),
        person: ADA.into(),
        host: m.host.clone(),
        conn: m.conn.clone(),
    };
    forged
        .operator_machines()
        .await?
        .refused(401, "LAUNCHER_INVALID");
    forged
        .enroll(&EnrollSpec::session("rt-forged"), &new_key())
        .await?
        .refused(401, "LAUNCHER_INVALID");
    logs.line_with(&["tampering detected", "credentials", &id])
        .ok_or_else(|| anyhow::anyhow!("no tamper line in:\n{}", logs.text()))?;
    m.operator_machines().await?.expect(200);
    env.finish().await;
    Ok(())
}

/// A revoked grant whose row's end is cleared: its end is in the audit log, so its values are
/// still refused (GRANT_NOT_LIVE), with `tampering detected` on the grant.
async fn a_revoked_grant_whose_end_is_cleared_stays_ended(db: Db) -> R {
    let Some(env) = Env::start(db).await? else {
        return Ok(());
    };
    let (logs, _g) = capture();
    let (_m, s) = env.tb.session_of(ADA).await?;
    let g = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    s.values(&g).await?.expect(200);
    s.revoke(&g).await?;
    s.values(&g).await?.refused(403, "GRANT_NOT_LIVE");
    let mut doc = env.doc("grants", &g).await?;
    doc["end"] = Value::Null;
    env.exec(&format!(
        "UPDATE grants SET ended_at_ms = NULL, doc = {} WHERE id = {}",
        sql_text(&doc.to_string()),
        sql_text(&g)
    ))
    .await?;
    s.values(&g).await?.refused(403, "GRANT_NOT_LIVE");
    logs.line_with(&["tampering detected", "grants", &g])
        .ok_or_else(|| anyhow::anyhow!("no tamper line in:\n{}", logs.text()))?;
    env.finish().await;
    Ok(())
}

/// The tail of the audit log deleted (with whatever it recorded): the follower, which had
/// seen it, fails closed: values, requests and decisions answer 503 DATABASE_UNAVAILABLE
/// (`audit log: …`), with `audit chain broken` in the log, and so does every route a launcher
/// or session proof authenticates (the deleted tail may have held its credential's end).
async fn a_deleted_audit_tail_fails_closed(db: Db) -> R {
    let Some(env) = Env::start(db).await? else {
        return Ok(());
    };
    let (logs, _g) = capture();
    let broker = env.tb.state.broker.clone();
    let (m, s) = env.tb.session_of(ADA).await?;
    m.operator_machines().await?.expect(200);
    s.describe().await?.expect(200);
    let g = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    let pending = s.request(&[ADA_SECRET]).await?.expect(200).s("record_id");
    s.values(&g).await?.expect(200);
    let st = broker.follow_audit(false).await?;
    assert!(st.broken.is_none() && st.head.position >= 3, "{st:?}");
    let head = st.head.position;
    let deleted = env
        .exec(&format!("DELETE FROM audit_log WHERE position = {head}"))
        .await?;
    assert_eq!(deleted, 1);
    let st = broker.follow_audit(false).await?;
    let b = st.broken.ok_or_else(|| anyhow::anyhow!("not detected"))?;
    assert_eq!((b.position, b.reason), (head, BreakReason::Gap));
    let r = s.values(&g).await?;
    r.refused(503, "DATABASE_UNAVAILABLE");
    assert!(r.error().starts_with("audit log"), "{}", r.error());
    s.request(&[AUTO_2])
        .await?
        .refused(503, "DATABASE_UNAVAILABLE");
    env.tb
        .approve(&pending, ADA, None)
        .await?
        .refused(503, "DATABASE_UNAVAILABLE");
    for r in [m.operator_machines().await?, s.describe().await?] {
        r.refused(503, "DATABASE_UNAVAILABLE");
        assert!(r.error().starts_with("audit log"), "{}", r.error());
    }
    logs.line_with(&["audit chain broken", &format!("position={head}"), "gap"])
        .ok_or_else(|| anyhow::anyhow!("no chain-broken line in:\n{}", logs.text()))?;
    env.finish().await;
    Ok(())
}

/// An entry in the middle of the chain edited: the follower's full walk finds it and fails
/// closed, and `audit verify` (the library function the subcommand runs) names its position.
async fn an_edited_audit_entry_is_found(db: Db) -> R {
    let Some(env) = Env::start(db).await? else {
        return Ok(());
    };
    let broker = env.tb.state.broker.clone();
    let (_m, s) = env.tb.session_of(ADA).await?;
    let g = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    s.values(&g).await?.expect(200);
    s.values(&g).await?.expect(200);
    let st = broker.follow_audit(false).await?;
    assert!(st.broken.is_none() && st.head.position >= 3, "{st:?}");
    let edited = env
        .exec("UPDATE audit_log SET body = '{\"names\":[]}' WHERE position = 2")
        .await?;
    assert_eq!(edited, 1);
    let storage = env.tb.open_db().await?;
    let found = countersign_broker_http::audit::verify(&storage, broker.sealer()).await?;
    let b = found
        .err()
        .ok_or_else(|| anyhow::anyhow!("verify passed"))?;
    assert_eq!((b.position, b.reason), (2, BreakReason::Hash));
    storage.close().await;
    let st = broker.follow_audit(true).await?;
    assert_eq!(
        st.broken.map(|b| (b.position, b.reason)),
        Some((2, BreakReason::Hash))
    );
    s.values(&g).await?.refused(503, "DATABASE_UNAVAILABLE");
    env.finish().await;
    Ok(())
}
