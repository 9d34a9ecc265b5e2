//! The messages storage's contract on SQLite and on PostgreSQL when
//! `COUNTERSIGN_TEST_POSTGRES_URL` names a server (`COUNTERSIGN_REQUIRE_POSTGRES=1` makes it
//! mandatory): attempts move only from `pending` (and only for their session, within their
//! time), broadcast keys are unique per person, and live-session rows belong to the link that
//! wrote them; a replica's own rows never go stale to it.

use chrono::{Duration, Utc};
use countersign_console_core::Storage;
use countersign_console_core::ids::{BroadcastId, Login, MessageId, SessionId};
use countersign_console_core::work::Actor;
use countersign_console_core::work::messages::{
    Attempt, AttemptState, Broadcast, Deliverable, DeliveryContent, Finish, LiveSession, Mode,
    Scope,
};
use countersign_console_sql::SqlStorage;

fn now() -> countersign_console_core::Time {
    chrono::DateTime::from_timestamp_millis(Utc::now().timestamp_millis()).unwrap_or_default()
}

fn fresh(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4().simple())
}

fn session(s: &str) -> SessionId {
    SessionId::parse(s).expect("a session id")
}

fn ada() -> Actor {
    Actor::User {
        login: Login::parse("ada@example.com").expect("login"),
    }
}

async fn contract(s: &SqlStorage) {
    let t0 = now();
    let id = Deliverable::Message(MessageId(uuid::Uuid::new_v4()));
    let session = self::session(&fresh("s"));
    let content = DeliveryContent {
        thread_id: id.to_string(),
        issue: None,
        mode: Mode::Steer,
        author: ada(),
        body: "turn".into(),
        notice: None,
    };
    let attempt = |n: i64| Attempt {
        item: id,
        attempt: n,
        session_id: session.clone(),
        mode: Mode::Steer,
        state: AttemptState::Pending,
        requested_by: ada(),
        created_at: t0,
        sent_at: None,
        accepted_at: None,
        accepted_as: None,
        error: None,
        scope: Scope::default(),
    };

    // Attempts: numbered from 1; a number taken twice conflicts (the transaction reruns).
    let mut tx = s.begin().await.expect("begin");
    assert_eq!(tx.attempts().next_attempt(id).await.expect("n"), 1);
    tx.attempts()
        .insert_attempt(&attempt(1), Some(&content))
        .await
        .expect("insert");
    assert_eq!(tx.attempts().next_attempt(id).await.expect("n"), 2);
    assert!(matches!(
        tx.attempts().insert_attempt(&attempt(1), None).await,
        Err(countersign_console_core::StorageError::Conflict)
    ));
    drop(tx);
    let mut tx = s.begin().await.expect("begin");
    tx.attempts()
        .insert_attempt(&attempt(1), Some(&content))
        .await
        .expect("insert");
    tx.attempts()
        .insert_attempt(&attempt(2), Some(&content))
        .await
        .expect("insert");
    tx.commit().await.expect("commit");

    let (elsewhere, x) = (self::session("someone-else"), self::session("x"));
    let sent = |session| Finish {
        to: AttemptState::Sent,
        at: t0,
        error: None,
        session: Some(session),
        created_after: None,
    };
    let mut tx = s.begin().await.expect("begin");
    // Another session's, or one past its time: nothing moves.
    assert_eq!(
        tx.attempts()
            .finish_attempt(id, 1, &sent(&elsewhere))
            .await
            .expect("finish"),
        None
    );
    let late = Finish {
        created_after: Some(t0 + Duration::seconds(1)),
        session: None,
        ..sent(&x)
    };
    assert_eq!(
        tx.attempts()
            .finish_attempt(id, 1, &late)
            .await
            .expect("finish"),
        None
    );
    assert_eq!(
        tx.attempts().pending_content(id, 1).await.expect("content"),
        Some((session.clone(), content.clone()))
    );
    // Its own, in time: sent once, and its content dropped.
    let own = Finish {
        session: Some(&session),
        ..sent(&x)
    };
    let done = tx
        .attempts()
        .finish_attempt(id, 1, &own)
        .await
        .expect("finish")
        .expect("moved");
    assert_eq!((done.state, done.sent_at), (AttemptState::Sent, Some(t0)));
    assert_eq!(
        tx.attempts()
            .finish_attempt(id, 1, &own)
            .await
            .expect("finish"),
        None
    );
    assert_eq!(
        tx.attempts().pending_content(id, 1).await.expect("content"),
        None
    );
    // The sweep's view: pending ones by age, or by session.
    let due = tx
        .attempts()
        .pending_attempts(Some(t0), Some(&session), 10)
        .await
        .expect("pending");
    assert_eq!(due.iter().map(|a| a.attempt).collect::<Vec<_>>(), [2]);
    let failed = Finish {
        to: AttemptState::Failed,
        error: Some("not_acknowledged"),
        session: None,
        ..sent(&x)
    };
    let f = tx
        .attempts()
        .finish_attempt(id, 2, &failed)
        .await
        .expect("finish")
        .expect("moved");
    assert_eq!(
        (f.state, f.error.as_deref(), f.sent_at),
        (AttemptState::Failed, Some("not_acknowledged"), None)
    );
    tx.attempts()
        .accept_attempt(id, 1, t0, Mode::Aside)
        .await
        .expect("accept");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    let all = tx
        .attempts()
        .attempts(std::slice::from_ref(&id))
        .await
        .expect("attempts");
    assert_eq!(all.len(), 2);
    assert_eq!(
        (all[0].accepted_at, all[0].accepted_as),
        (Some(t0), Some(Mode::Aside))
    );
    drop(tx);

    // Broadcast keys: one per person.
    let login = Login::parse(&format!("{}@example.com", fresh("p"))).expect("login");
    let b = Broadcast {
        id: BroadcastId(uuid::Uuid::new_v4()),
        login: login.clone(),
        idempotency_key: "k".into(),
        fingerprint: "f".into(),
        mode: Mode::Send,
        body: "b".into(),
        by: ada(),
        excluded: vec![],
        created_at: t0,
    };
    let mut tx = s.begin().await.expect("begin");
    assert!(tx.messages().insert_broadcast(&b).await.expect("insert"));
    let again = Broadcast {
        id: BroadcastId(uuid::Uuid::new_v4()),
        ..b.clone()
    };
    assert!(
        !tx.messages()
            .insert_broadcast(&again)
            .await
            .expect("insert")
    );
    assert_eq!(
        tx.messages()
            .broadcast_by_key(&login, "k")
            .await
            .expect("read"),
        Some(b.clone())
    );
    tx.commit().await.expect("commit");

    // Live sessions: the link that wrote a row owns it.
    let (me, other) = (fresh("r"), fresh("r"));
    let sid = self::session(&fresh("live"));
    let role = format!("r{}", uuid::Uuid::new_v4().simple());
    let live = |replica: &str, link: i64, heartbeat: countersign_console_core::Time| LiveSession {
        session_id: sid.clone(),
        title: "t".into(),
        roles: vec![role.clone()],
        capabilities: vec!["relay".into()],
        modes: vec![Mode::Send],
        owner: None,
        service: None,
        live_since: heartbeat,
        last_activity_at: heartbeat,
        open_asks: 0,
        replica: replica.to_owned(),
        link,
    };
    let old = t0 - Duration::minutes(5);
    let mut tx = s.begin().await.expect("begin");
    assert_eq!(
        tx.presence()
            .put_live(&live(&other, 1, old))
            .await
            .expect("put"),
        None
    );
    // Stale to me: not live, and mine to remove.
    assert_eq!(
        tx.presence()
            .live_session(&sid, &me, t0 - Duration::minutes(1))
            .await
            .expect("read"),
        None
    );
    // Its own replica still sees it.
    assert!(
        tx.presence()
            .live_session(&sid, &other, t0 - Duration::minutes(1))
            .await
            .expect("read")
            .is_some()
    );
    // A newer link (mine) takes it, and names the older.
    assert_eq!(
        tx.presence()
            .put_live(&live(&me, 7, t0))
            .await
            .expect("put"),
        Some((other.clone(), 1))
    );
    assert!(
        tx.presence()
            .role_holders(&role, &me, t0 - Duration::minutes(1))
            .await
            .expect("holders")
            .contains(&sid)
    );
    assert!(
        tx.presence()
            .remove_live(&sid, &other, 1)
            .await
            .expect("remove")
            .is_none(),
        "the older link removes nothing"
    );
    // My rows never go stale to me, nor are mine removed by my own sweep.
    assert!(
        tx.presence()
            .remove_stale(&me, t0 + Duration::minutes(10), 100)
            .await
            .expect("stale")
            .iter()
            .all(|l| l.session_id != sid)
    );
    let gone = tx
        .presence()
        .remove_stale(&other, t0 + Duration::minutes(10), 100)
        .await
        .expect("stale");
    assert!(
        gone.iter().any(|l| l.session_id == sid),
        "another replica removes a silent one's rows"
    );
    assert!(
        tx.presence()
            .role_holders(&role, &me, t0 - Duration::minutes(1))
            .await
            .expect("holders")
            .is_empty()
    );
    tx.commit().await.expect("commit");
}

#[tokio::test]
async fn sqlite() {
    let dir = tempfile::tempdir().expect("tempdir");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("m.db").display());
    let s = SqlStorage::connect(&url).await.expect("connect");
    contract(&s).await;
}

#[tokio::test]
async fn postgres() {
    let Ok(url) = std::env::var("COUNTERSIGN_TEST_POSTGRES_URL") else {
        assert!(
            std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").as_deref() != Ok("1"),
            "COUNTERSIGN_REQUIRE_POSTGRES=1 but COUNTERSIGN_TEST_POSTGRES_URL is unset"
        );
        println!("skipped: COUNTERSIGN_TEST_POSTGRES_URL is not set");
        return;
    };
    // A database of its own: migrating the server's shared one to this branch's schema would
    // stop every other schema's tests there ("newer than this console knows").
    use sqlx::Connection;
    let name = format!("cs_console_{}", uuid::Uuid::new_v4().simple());
    let mut conn = sqlx::PgConnection::connect(&url).await.expect("server");
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut conn)
        .await
        .expect("create database");
    let base = url.split('?').next().unwrap_or(&url);
    let base = base.rsplit_once('/').map(|(b, _)| b).unwrap_or(base);
    let s = SqlStorage::connect(&format!("{base}/{name}"))
        .await
        .expect("connect");
    contract(&s).await;
    // Dropped once the contract passed (a failed one leaves it for inspection).
    drop(s);
    let _ = sqlx::query(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
        .execute(&mut conn)
        .await;
}
