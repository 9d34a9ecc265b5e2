//! Several broker replicas on one PostgreSQL (design notes, "Several broker replicas"): a proof
//! replayed to another replica is refused, a revocation on one is seen by the other at once, a
//! reread on one reaches the other within seconds, and a database that goes away answers 503 and
//! recovers by itself.

use std::time::{Duration, Instant};

use countersign_e2e::http::*;
use countersign_proto::SigningKey;
use sqlx::Executor;

type R = anyhow::Result<()>;

fn on(conn: &Conn, s: &Session) -> anyhow::Result<Session> {
    Ok(Session {
        key: SigningKey::from_pkcs8(&s.key.to_pkcs8()?)?,
        enrollment_id: s.enrollment_id.clone(),
        credential_id: s.credential_id.clone(),
        conn: conn.clone(),
    })
}

#[tokio::test]
async fn replay_revocation_and_rereads_reach_every_replica() -> R {
    let Some(db) = PgDatabase::create("cs_replicas").await? else {
        return Ok(());
    };
    let a = TestBroker::builder().database_url(&db.url).start().await?;
    let b = TestBroker::builder().replica_of(&a).start().await?;

    // A machine logs in through replica A; its session enrolls there.
    let (machine, session_a) = a.session_of(ADA).await?;
    let session_b = on(&b.conn, &session_a)?;

    // The same proof, sent to A then replayed to B: B refuses it.
    let proof = session_a.proof("GET", "/v1/enrollments/self", b"");
    let headers = [("proof", proof.as_str())];
    let first = a
        .conn
        .send_with(
            &a.conn.client,
            "GET",
            "/v1/enrollments/self",
            &headers,
            None,
        )
        .await?;
    first.expect(200);
    let replayed = b
        .conn
        .send_with(
            &b.conn.client,
            "GET",
            "/v1/enrollments/self",
            &headers,
            None,
        )
        .await?;
    replayed.refused(401, "PROOF_INVALID");
    assert!(
        replayed.error().contains("replayed"),
        "{}",
        replayed.error()
    );

    // Both replicas serve the session.
    session_b.describe().await?.expect(200);
    let granted = session_b.request(&[AUTO]).await?.expect(200);
    let grant = granted.s("grant_id");
    session_a.values(&grant).await?.expect(200);

    // A revocation through A is seen by B at once.
    a.revoke_credential(&machine.credential_id, ADA)
        .await?
        .expect(200);
    session_b.describe().await?.refused(401, "PROOF_INVALID");
    session_b
        .values(&grant)
        .await?
        .refused(401, "PROOF_INVALID");

    // A reread on A reaches B within seconds: AUTO_2 becomes locked.
    let (_m2, s2a) = a.session_of(ADA).await?;
    let s2b = on(&b.conn, &s2a)?;
    a.edit_secret(AUTO_2, |s| s.tier = Some("locked".into()))?;
    a.reread(AUTO_2).await?.expect(200);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let r = s2b.request(&[AUTO_2]).await?.expect(200);
        if r.s("state") == "denied" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replica B still grants AUTO_2 10 s after the reread on A"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    a.shutdown().await;
    b.shutdown().await;
    db.drop_now().await;
    Ok(())
}

#[tokio::test]
async fn a_database_that_goes_away_answers_503_and_recovers_by_itself() -> R {
    let Some(db) = PgDatabase::create("cs_replicas").await? else {
        return Ok(());
    };
    let a = TestBroker::builder().database_url(&db.url).start().await?;
    let (_machine, session) = a.session_of(ADA).await?;
    let name = db.name.clone();
    let mut admin_conn = <sqlx::AnyConnection as sqlx::Connection>::connect(&db.admin).await?;

    // The database refuses connections and drops the broker's.
    admin_conn
        .execute(format!("ALTER DATABASE {name} ALLOW_CONNECTIONS false").as_str())
        .await?;
    admin_conn
        .execute(
            format!(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{name}'"
            )
            .as_str(),
        )
        .await?;
    a.open("GET", "/healthz", None)
        .await?
        .refused(503, "DATABASE_UNAVAILABLE");
    session
        .describe()
        .await?
        .refused(503, "DATABASE_UNAVAILABLE");

    // It comes back: the broker recovers with no restart.
    admin_conn
        .execute(format!("ALTER DATABASE {name} ALLOW_CONNECTIONS true").as_str())
        .await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if a.open("GET", "/healthz", None).await?.status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the broker did not recover within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    session.describe().await?.expect(200);
    a.shutdown().await;
    db.drop_now().await;
    Ok(())
}
