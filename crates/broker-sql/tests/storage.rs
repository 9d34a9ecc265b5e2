//! The storage suite, written once and run against SQLite (a fresh temporary file per test) and
//! against PostgreSQL (a fresh database per test) when `COUNTERSIGN_TEST_POSTGRES_URL` names a
//! server to create databases on. Without it the PostgreSQL tests print a line and pass, unless
//! `COUNTERSIGN_REQUIRE_POSTGRES=1`, which makes them fail.

use std::collections::BTreeSet;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use countersign_broker_core::Time;
use countersign_broker_core::ids::{
    Approver, ConfirmationCode, CredentialId, EnrollmentId, GrantId, Login, RecordId, RequestId,
    SecretName, SessionId, Slot,
};
use countersign_broker_core::model::{
    DecisionBy, Ended, Enrollment, EnrollmentKind, EnrollmentSummary, Grant, GrantEnd, GrantedBy,
    LauncherCredential, Passkey, PendingLogin, Record, RecordDecision, RecordKind, RecordState,
    RecordText, Request, RequestState, SessionIds,
};
use countersign_broker_core::policy::SecretDecision;
use countersign_broker_core::storage::{Due, OutboxItem, Storage, StorageError};
use countersign_broker_sql::{Backend, SqlStorage};
use countersign_proto::{PublicJwk, SigningKey};
use sqlx::{Connection, Executor};
use tokio::sync::Barrier;
use tokio::task::JoinSet;
use uuid::Uuid;

// ---------------------------------------------------------------------------------------------
// Harness
// ---------------------------------------------------------------------------------------------

const PG_URL_VAR: &str = "COUNTERSIGN_TEST_POSTGRES_URL";
const PG_REQUIRE_VAR: &str = "COUNTERSIGN_REQUIRE_POSTGRES";

/// Waits until `n` write transactions wait (for the writer's turn, or for a lock): what a test
/// must see before it lets the one ahead go, instead of guessing a time.
async fn until_waiting(s: &SqlStorage, n: usize) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while s.writers_waiting().await.expect("waiting writers") < n {
        assert!(
            std::time::Instant::now() < deadline,
            "no writer came to wait within 10 s"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A storage on a database of its own, removed again by [`TestDb::finish`] (a failing test
/// leaves it behind for inspection).
struct TestDb {
    storage: SqlStorage,
    url: String,
    cleanup: Cleanup,
}

enum Cleanup {
    File(PathBuf),
    PgDatabase { admin_url: String, name: String },
}

impl Deref for TestDb {
    type Target = SqlStorage;
    fn deref(&self) -> &SqlStorage {
        &self.storage
    }
}

impl TestDb {
    async fn sqlite() -> TestDb {
        let path =
            std::env::temp_dir().join(format!("countersign-test-{}.db", Uuid::new_v4().simple()));
        let url = format!("sqlite://{}?mode=rwc", path.display());
        let storage = SqlStorage::connect(&url).await.expect("connect sqlite");
        assert_eq!(storage.backend(), Backend::Sqlite);
        TestDb {
            storage,
            url,
            cleanup: Cleanup::File(path),
        }
    }

    /// `None` (after saying so) when no PostgreSQL server is configured.
    async fn postgres() -> Option<TestDb> {
        let admin_url = match std::env::var(PG_URL_VAR) {
            Ok(u) if !u.is_empty() => u,
            _ => {
                if std::env::var(PG_REQUIRE_VAR).is_ok_and(|v| v == "1") {
                    panic!("{PG_REQUIRE_VAR}=1 but {PG_URL_VAR} is not set");
                }
                println!("skipped: {PG_URL_VAR} not set");
                return None;
            }
        };
        sqlx::any::install_default_drivers();
        let name = format!("cs_test_{}", Uuid::new_v4().simple());
        let mut admin = sqlx::AnyConnection::connect(&admin_url)
            .await
            .expect("connect to the PostgreSQL admin URL");
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create test database");
        admin.close().await.expect("close admin connection");
        let url = with_database(&admin_url, &name);
        let storage = SqlStorage::connect(&url).await.expect("connect postgres");
        assert_eq!(storage.backend(), Backend::Postgres);
        Some(TestDb {
            storage,
            url,
            cleanup: Cleanup::PgDatabase { admin_url, name },
        })
    }

    async fn finish(self) {
        self.storage.close().await;
        match self.cleanup {
            Cleanup::File(path) => {
                for suffix in ["", "-wal", "-shm"] {
                    let mut p = path.clone().into_os_string();
                    p.push(suffix);
                    let _ = std::fs::remove_file(p);
                }
            }
            Cleanup::PgDatabase { admin_url, name } => {
                let mut admin = sqlx::AnyConnection::connect(&admin_url)
                    .await
                    .expect("connect admin");
                admin
                    .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                    .await
                    .expect("drop test database");
                let _ = admin.close().await;
            }
        }
    }

    /// A plain connection to the same database, beside the storage.
    async fn raw(&self) -> sqlx::AnyConnection {
        sqlx::AnyConnection::connect(&self.url)
            .await
            .expect("raw connection")
    }
}

/// The URL with its database (path) replaced.
fn with_database(url: &str, name: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = head.find("://").map_or(0, |i| i + 3);
    let base = match head[scheme_end..].find('/') {
        Some(i) => &head[..scheme_end + i],
        None => head,
    };
    format!("{base}/{name}{query}")
}

/// Runs each suite function against both backends: `sqlite::<name>` and `postgres::<name>`.
macro_rules! suite {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let db = super::TestDb::sqlite().await;
                    super::$name(&db).await;
                    db.finish().await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $name() {
                    let Some(db) = super::TestDb::postgres().await else { return };
                    super::$name(&db).await;
                    db.finish().await;
                }
            )*
        }
    };
}

suite!(
    credentials_round_trip,
    logins_round_trip,
    records_round_trip,
    enrollments_round_trip,
    requests_round_trip,
    grants_round_trip,
    passkeys_round_trip,
    remember_once_replay_and_lapse,
    remember_once_concurrent_callers,
    remember_once_batches_answer_each_caller,
    remember_once_failed_batch_answers_every_caller_with_an_error,
    due_lists_stored_live_rows_past_their_time,
    outbox_take_reschedule_delete,
    outbox_take_skips_rows_another_transaction_took,
    outbox_topics_are_taken_apart,
    issued_round_trip_and_unsettled,
    dropped_transactions_roll_back,
    second_writer_waits_and_sees_the_first,
    reads_do_not_wait_for_writers,
    concurrent_reads_each_hear_their_own_rows,
    a_snapshot_sees_one_state_a_read_sees_the_latest,
    kept_read_connections_go_back_before_the_pool_closes,
    race_has_one_winner_per_round,
    undecodable_rows_are_corrupt,
    reconnecting_keeps_data_and_schema,
    ping_and_debug,
    the_ends_lookup_uses_its_partial_index,
    audit_log_appends_chain_and_serialise,
    an_append_rolled_back_leaves_no_head_behind,
    the_follower_sweeps_below_its_head_in_bounded_rounds,
);

// ---------------------------------------------------------------------------------------------
// Values
// ---------------------------------------------------------------------------------------------

const BASE_MS: i64 = 1_767_225_600_123;

/// `BASE + offset` seconds, at millisecond precision.
fn at(offset_s: i64) -> Time {
    DateTime::<Utc>::from_timestamp_millis(BASE_MS + offset_s * 1000).expect("in range")
}

fn jwk() -> PublicJwk {
    SigningKey::generate().expect("generate key").public_jwk()
}

fn login(s: &str) -> Login {
    Login::parse(s).expect("login")
}

fn name(s: &str) -> SecretName {
    SecretName::parse(s).expect("secret name")
}

fn credential(
    key: &PublicJwk,
    thumbprint: &str,
    issued: i64,
    revoked: Option<i64>,
) -> LauncherCredential {
    LauncherCredential {
        id: CredentialId(Uuid::new_v4()),
        thumbprint: thumbprint.to_owned(),
        jwk: key.clone(),
        host: "ada-laptop".into(),
        service: None,
        subject: None,
        operator: Some(login("ada@example.com")),
        approved_by: "ada@example.com".into(),
        issued_at: at(issued),
        expires_at: at(issued + 86_400),
        revoked_at: revoked.map(at),
        record_id: Some(RecordId::of_text("some record")),
        seal: String::new(),
    }
}

fn record(key: &PublicJwk, nonce: &str, expires: i64, code: Option<&str>) -> Record {
    let body = RecordText {
        version: 1,
        kind: RecordKind::LauncherCredential,
        approver: Approver::Person(login("ada@example.com")),
        enrollment: Some(EnrollmentSummary {
            kind: "session".into(),
            runtime_id: "claude-1".into(),
            operator: "ada@example.com".into(),
            slot: None,
        }),
        session: SessionIds {
            request: Some("r-1".into()),
            enrollment: None,
        },
        identifiers: vec!["ada-laptop".into()],
        service: None,
        reason: "log in \"ada-laptop\" — ünïcode".into(),
        lifetime_seconds: Some(3600),
        rules_version: "rules-1".into(),
        expires_at: at(expires),
        requested_at: at(0),
        enrollment_id: None,
        request_id: None,
        thumbprint: Some("thumb".into()),
        jwk: Some(key.clone()),
        nonce: nonce.to_owned(),
    };
    let text = body.canonical();
    Record {
        id: RecordId::of_text(&text),
        text,
        body,
        state: RecordState::Pending,
        decided: None,
        code: code.map(|c| ConfirmationCode::parse(c).expect("code")),
    }
}

fn decision(event: RecordState, by: &str, at_s: i64) -> RecordDecision {
    RecordDecision {
        event,
        at: at(at_s),
        by: by.to_owned(),
        credential_id: Some(CredentialId(Uuid::new_v4())),
        countersignature: None,
        seal: "seal".into(),
    }
}

fn enrollment(
    key: &PublicJwk,
    credential_id: CredentialId,
    created: i64,
    lease: i64,
) -> Enrollment {
    Enrollment {
        id: EnrollmentId(Uuid::new_v4()),
        credential_id,
        kind: EnrollmentKind::Session,
        runtime_id: "claude-1".into(),
        slot: Some(Slot::parse("web-1").expect("slot")),
        operator: Some(login("ada@example.com")),
        thumbprint: "session-thumb".into(),
        jwk: key.clone(),
        session_id: Some(SessionId::parse("sess-1").expect("session id")),
        lease_expires_at: at(lease),
        created_at: at(created),
        ended: None,
        pod_token_seen: true,
        pod_account: Some("ns/sa".into()),
        withheld: BTreeSet::from([name("GITHUB_TOKEN")]),
        seal: String::new(),
    }
}

fn request(enrollment_id: EnrollmentId, created: i64, state: RequestState) -> Request {
    Request {
        id: RequestId(Uuid::new_v4()),
        enrollment_id,
        state,
        secrets: vec![
            (name("GITHUB_TOKEN"), SecretDecision::Approval),
            (name("NPM_TOKEN"), SecretDecision::Automatic),
        ],
        grant_id: None,
        record_id: Some(RecordId::of_text("x")),
        approver: Some(Approver::Anyone),
        lifetime_seconds: Some(600),
        session_id: None,
        stated_id: Some("req-7".into()),
        reason: "deploy".into(),
        created_at: at(created),
        decided_at: None,
        decision: None,
        expires_at: Some(at(created + 300)),
    }
}

fn grant(enrollment_id: EnrollmentId, created: i64, expires: Option<i64>) -> Grant {
    Grant {
        id: GrantId(Uuid::new_v4()),
        request_id: RequestId(Uuid::new_v4()),
        enrollment_id,
        names: vec![name("A_TOKEN"), name("B_TOKEN")],
        granted: GrantedBy::Approval,
        record_id: Some(RecordId::of_text("y")),
        approver: Some(login("bob@example.com")),
        expires_at: expires.map(at),
        created_at: at(created),
        rules_version: "rules-1".into(),
        end: None,
        seal: "grant-seal".into(),
        decision_seal: None,
    }
}

fn outbox_item(id: &str, next: i64) -> OutboxItem {
    OutboxItem {
        topic: "notification".into(),
        id: id.into(),
        payload: format!("{{\"id\":\"{id}\"}}"),
        attempts: 0,
        next_attempt_at: at(next),
    }
}

fn sorted<T: Clone, K: Ord>(mut v: Vec<T>, key: impl Fn(&T) -> K) -> Vec<T> {
    v.sort_by_key(|x| key(x));
    v
}

// ---------------------------------------------------------------------------------------------
// The suite
// ---------------------------------------------------------------------------------------------

async fn credentials_round_trip(s: &SqlStorage) {
    let key = jwk();
    let a = credential(&key, "thumb-a", 0, None);
    let b = credential(&key, "thumb-a", 10, Some(20));
    let c = credential(&key, "thumb-c", 5, None);
    let mut tx = s.begin().await.expect("begin");
    for x in [&a, &b, &c] {
        tx.put_credential(x).await.expect("put");
    }
    tx.commit().await.expect("commit");

    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.get_credential(a.id).await.expect("get").as_ref(),
        Some(&a)
    );
    assert_eq!(
        tx.get_credential(b.id).await.expect("get").as_ref(),
        Some(&b)
    );
    assert_eq!(
        tx.get_credential(CredentialId(Uuid::new_v4()))
            .await
            .expect("get"),
        None
    );
    assert_eq!(
        tx.credentials_by_thumbprint("thumb-a")
            .await
            .expect("by thumbprint"),
        vec![a.clone(), b.clone()]
    );
    assert_eq!(
        tx.credentials_by_thumbprint("nope")
            .await
            .expect("by thumbprint"),
        vec![]
    );
    assert_eq!(
        tx.list_credentials().await.expect("list"),
        vec![a.clone(), c.clone()]
    );
    drop(tx);

    // A put replaces the whole row, index columns included.
    let mut a2 = a.clone();
    a2.revoked_at = Some(at(30));
    a2.thumbprint = "thumb-z".into();
    let mut tx = s.begin().await.expect("begin");
    tx.put_credential(&a2).await.expect("put");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.get_credential(a.id).await.expect("get"),
        Some(a2.clone())
    );
    assert_eq!(tx.list_credentials().await.expect("list"), vec![c.clone()]);
    assert_eq!(
        tx.credentials_by_thumbprint("thumb-a")
            .await
            .expect("by thumbprint"),
        vec![b]
    );
    assert_eq!(
        tx.credentials_by_thumbprint("thumb-z")
            .await
            .expect("by thumbprint"),
        vec![a2]
    );
}

async fn logins_round_trip(s: &SqlStorage) {
    let key = jwk();
    let rec = record(&key, "login", 600, Some("BCDF-GHJK"));
    let l = PendingLogin {
        pending_hash: "ab".repeat(32),
        record_id: rec.id,
        code: ConfirmationCode::parse("BCDFGHJK").expect("code"),
    };
    let mut tx = s.begin().await.expect("begin");
    tx.put_login(&l).await.expect("put");
    tx.put_login(&l).await.expect("put again (upsert)");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    assert_eq!(tx.get_login(&l.pending_hash).await.expect("get"), Some(l));
    assert_eq!(tx.get_login(&"cd".repeat(32)).await.expect("get"), None);
}

async fn records_round_trip(s: &SqlStorage) {
    let key = jwk();
    let pending = record(&key, "one", 600, Some("BCDF-GHJK"));
    let other = record(&key, "two", 300, None);
    let mut done = record(&key, "three", 100, None);
    done.state = RecordState::Denied;
    done.decided = Some(decision(RecordState::Denied, "bob@example.com", 50));
    assert_ne!(pending.id, other.id);

    let mut tx = s.begin().await.expect("begin");
    for r in [&pending, &other, &done] {
        tx.put_record(r).await.expect("put");
    }
    tx.commit().await.expect("commit");

    let mut tx = s.read().await.expect("read");
    let got = tx
        .get_record(&pending.id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(got, pending);
    assert_eq!(
        got.text, pending.text,
        "the canonical text comes back byte for byte"
    );
    assert!(got.text_verifies());
    assert_eq!(
        tx.get_record(&done.id).await.expect("get"),
        Some(done.clone())
    );
    assert_eq!(
        tx.get_record(&RecordId::of_text("absent"))
            .await
            .expect("get"),
        None
    );
    let code = ConfirmationCode::parse("bcdfghjk").expect("code");
    assert_eq!(
        tx.record_by_code(&code).await.expect("by code"),
        Some(pending.clone())
    );
    assert_eq!(
        tx.record_by_code(&ConfirmationCode::parse("ZZZZZZZZ").expect("code"))
            .await
            .expect("by code"),
        None
    );
    // Ordered by expiry.
    assert_eq!(
        tx.pending_records().await.expect("pending"),
        vec![other.clone(), pending.clone()]
    );
    drop(tx);

    // Approving takes it out of the pending lists; the code no longer finds it.
    let mut approved = pending.clone();
    approved.state = RecordState::Approved;
    approved.decided = Some(decision(RecordState::Approved, "ada@example.com", 60));
    let mut tx = s.begin().await.expect("begin");
    tx.put_record(&approved).await.expect("put");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.get_record(&pending.id).await.expect("get"),
        Some(approved.clone())
    );
    assert_eq!(
        tx.record_by_code(&code).await.expect("by code"),
        None,
        "only pending records answer a code"
    );
    assert_eq!(tx.pending_records().await.expect("pending"), vec![other]);
}

async fn enrollments_round_trip(s: &SqlStorage) {
    let key = jwk();
    let cred = CredentialId(Uuid::new_v4());
    let a = enrollment(&key, cred, 0, 600);
    let b = enrollment(&key, cred, 10, 600);
    let mut ended = enrollment(&key, cred, 5, 600);
    ended.ended = Some(Ended {
        at: at(20),
        by: "launcher:x".into(),
    });
    let elsewhere = enrollment(&key, CredentialId(Uuid::new_v4()), 0, 600);
    let mut tx = s.begin().await.expect("begin");
    for e in [&a, &b, &ended, &elsewhere] {
        tx.put_enrollment(e).await.expect("put");
    }
    tx.commit().await.expect("commit");

    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.get_enrollment(ended.id).await.expect("get"),
        Some(ended.clone())
    );
    assert_eq!(
        tx.get_enrollment(EnrollmentId(Uuid::new_v4()))
            .await
            .expect("get"),
        None
    );
    assert_eq!(
        tx.enrollments_by_credential(cred)
            .await
            .expect("by credential"),
        vec![a.clone(), b.clone()]
    );
    drop(tx);

    let mut b2 = b.clone();
    b2.ended = Some(Ended {
        at: at(30),
        by: "broker".into(),
    });
    let mut tx = s.begin().await.expect("begin");
    tx.put_enrollment(&b2).await.expect("put");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.enrollments_by_credential(cred)
            .await
            .expect("by credential"),
        vec![a]
    );
    assert_eq!(tx.get_enrollment(b.id).await.expect("get"), Some(b2));
}

async fn requests_round_trip(s: &SqlStorage) {
    let enr = EnrollmentId(Uuid::new_v4());
    let a = request(enr, 0, RequestState::Pending);
    let b = request(enr, 5, RequestState::Pending);
    let mut granted = request(enr, 2, RequestState::Granted);
    granted.grant_id = Some(GrantId(Uuid::new_v4()));
    granted.decided_at = Some(at(3));
    granted.decision = Some(DecisionBy {
        by: "bob@example.com".into(),
        at: at(3),
    });
    let other = request(EnrollmentId(Uuid::new_v4()), 0, RequestState::Pending);
    let mut tx = s.begin().await.expect("begin");
    for r in [&a, &b, &granted, &other] {
        tx.put_request(r).await.expect("put");
    }
    tx.commit().await.expect("commit");

    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.get_request(granted.id).await.expect("get"),
        Some(granted.clone())
    );
    assert_eq!(
        tx.get_request(RequestId(Uuid::new_v4()))
            .await
            .expect("get"),
        None
    );
    assert_eq!(
        tx.pending_requests(enr).await.expect("pending"),
        vec![a.clone(), b.clone()]
    );
    drop(tx);

    let mut a2 = a.clone();
    a2.state = RequestState::Cancelled;
    let mut tx = s.begin().await.expect("begin");
    tx.put_request(&a2).await.expect("put");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    assert_eq!(tx.pending_requests(enr).await.expect("pending"), vec![b]);
    assert_eq!(tx.get_request(a.id).await.expect("get"), Some(a2));
}

async fn grants_round_trip(s: &SqlStorage) {
    let enr = EnrollmentId(Uuid::new_v4());
    let a = grant(enr, 0, Some(600));
    let b = grant(enr, 5, None);
    let mut ended = grant(enr, 2, Some(600));
    ended.end = Some((GrantEnd::Revoked, at(4)));
    ended.decision_seal = Some("decision-seal".into());
    let other = grant(EnrollmentId(Uuid::new_v4()), 1, None);
    let mut tx = s.begin().await.expect("begin");
    for g in [&a, &b, &ended, &other] {
        tx.put_grant(g).await.expect("put");
    }
    tx.commit().await.expect("commit");

    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.get_grant(ended.id).await.expect("get"),
        Some(ended.clone())
    );
    assert_eq!(
        tx.get_grant(GrantId(Uuid::new_v4())).await.expect("get"),
        None
    );
    assert_eq!(
        tx.grants_by_enrollment(enr).await.expect("by enrollment"),
        vec![a.clone(), ended.clone(), b.clone()]
    );
    assert_eq!(
        sorted(tx.live_grants().await.expect("live"), |g| g.id),
        sorted(vec![a.clone(), b.clone(), other.clone()], |g| g.id)
    );
    drop(tx);

    let mut b2 = b.clone();
    b2.end = Some((GrantEnd::Ended, at(9)));
    let mut tx = s.begin().await.expect("begin");
    tx.put_grant(&b2).await.expect("put");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    assert_eq!(
        sorted(tx.live_grants().await.expect("live"), |g| g.id),
        sorted(vec![a.clone(), other], |g| g.id)
    );
    assert_eq!(
        tx.grants_by_enrollment(enr).await.expect("by enrollment"),
        vec![a, ended, b2]
    );
}

fn passkey(id: &str, person: &str, created_s: i64) -> Passkey {
    Passkey {
        id: id.into(),
        person: Login::parse(person).expect("login"),
        name: format!("key {id}"),
        key: "es256:AAAA".into(),
        aaguid: "00".repeat(16),
        backup_eligible: true,
        sign_count: 3,
        created_at: at(created_s),
        removed_at: None,
        enrolled_by: "code".into(),
        seal: "seal".into(),
    }
}

async fn passkeys_round_trip(s: &SqlStorage) {
    let (a, b) = (
        passkey("a", "ada@example.com", 2),
        passkey("b", "ada@example.com", 1),
    );
    let bob = passkey("c", "bob@example.com", 0);
    let mut tx = s.begin().await.expect("begin");
    for p in [&a, &b, &bob] {
        tx.put_passkey(p).await.expect("put");
    }
    tx.commit().await.expect("commit");
    let mut removed = a.clone();
    removed.removed_at = Some(at(9));
    removed.sign_count = 4;
    let mut tx = s.begin().await.expect("begin");
    tx.put_passkey(&removed).await.expect("put");
    tx.commit().await.expect("commit");

    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.get_passkey("a").await.expect("get"),
        Some(removed.clone())
    );
    assert_eq!(tx.get_passkey("zz").await.expect("get"), None);
    let ada = Login::parse("ada@example.com").expect("login");
    assert_eq!(
        tx.passkeys_of(&ada).await.expect("of"),
        vec![b.clone(), removed.clone()],
        "oldest first, removed ones too"
    );
    assert_eq!(tx.list_passkeys().await.expect("all").len(), 3);
}

async fn remember_once_replay_and_lapse(s: &SqlStorage) {
    // First sight, then a replay before it lapses (until == now is not lapsed).
    assert!(
        s.remember_once("proof", "jti-1", at(60), at(0))
            .await
            .expect("remember")
    );
    assert!(
        !s.remember_once("proof", "jti-1", at(120), at(30))
            .await
            .expect("replay")
    );
    assert!(
        !s.remember_once("proof", "jti-1", at(120), at(60))
            .await
            .expect("replay at until")
    );
    // Scopes are separate.
    assert!(
        s.remember_once("request", "jti-1", at(60), at(0))
            .await
            .expect("other scope")
    );
    // Once lapsed it may be used again, and is then remembered anew.
    assert!(
        s.remember_once("proof", "jti-1", at(200), at(61))
            .await
            .expect("after lapse")
    );
    assert!(
        !s.remember_once("proof", "jti-1", at(300), at(150))
            .await
            .expect("replay of the new")
    );
    // Many values; a later lapse purge keeps the live ones.
    for i in 0..50 {
        assert!(
            s.remember_once("bulk", &format!("v{i}"), at(i), at(0))
                .await
                .expect("remember")
        );
    }
    for i in 0..50 {
        let fresh = s
            .remember_once("bulk", &format!("v{i}"), at(1000), at(25))
            .await
            .expect("again");
        assert_eq!(fresh, i < 25, "v{i}");
    }
}

async fn remember_once_concurrent_callers(s: &SqlStorage) {
    const CALLERS: usize = 12;
    for round in 0..10 {
        let barrier = Arc::new(Barrier::new(CALLERS));
        let mut set = JoinSet::new();
        for _ in 0..CALLERS {
            let (s, barrier) = (s.clone(), barrier.clone());
            set.spawn(async move {
                barrier.wait().await;
                loop {
                    match s
                        .remember_once("proof", &format!("race-{round}"), at(60), at(0))
                        .await
                    {
                        Err(StorageError::Conflict) => continue,
                        other => return other.expect("remember"),
                    }
                }
            });
        }
        let fresh = set.join_all().await.into_iter().filter(|f| *f).count();
        assert_eq!(
            fresh, 1,
            "round {round}: exactly one caller sees the value first"
        );
    }
}

/// Many callers at once, so that their values share batches (`once.rs`): per value, exactly one
/// caller hears "fresh", whether its repeats fall in its batch or a later one; a value stored
/// and lapsed is fresh again.
async fn remember_once_batches_answer_each_caller(s: &SqlStorage) {
    const VALUES: usize = 40;
    const REPEATS: usize = 5;
    assert!(
        s.remember_once("proof", "batch-lapsed-3", at(5), at(0))
            .await
            .expect("remember")
    );
    let barrier = Arc::new(Barrier::new(VALUES * REPEATS));
    let mut set = JoinSet::new();
    for i in 0..VALUES * REPEATS {
        let (s, barrier) = (s.clone(), barrier.clone());
        set.spawn(async move {
            barrier.wait().await;
            let v = i % VALUES;
            let name = if v == 3 {
                "batch-lapsed-3".to_owned()
            } else {
                format!("batch-{v}")
            };
            let fresh = s
                .remember_once("proof", &name, at(60), at(10))
                .await
                .expect("remember");
            (v, fresh)
        });
    }
    let mut fresh_per_value = [0usize; VALUES];
    for (v, fresh) in set.join_all().await {
        fresh_per_value[v] += usize::from(fresh);
    }
    assert_eq!(fresh_per_value, [1; VALUES], "one fresh caller per value");
    for v in [0, 3, VALUES - 1] {
        let name = if v == 3 {
            "batch-lapsed-3".to_owned()
        } else {
            format!("batch-{v}")
        };
        assert!(
            !s.remember_once("proof", &name, at(60), at(20))
                .await
                .expect("replay")
        );
    }
}

/// A batch whose transaction fails (PostgreSQL: at `COMMIT`, by a deferred constraint trigger;
/// SQLite: at its statement, by a trigger) answers each of its callers with the error, and none
/// "fresh"; nothing of it is stored, so the same values are fresh once the fault is gone.
async fn remember_once_failed_batch_answers_every_caller_with_an_error(db: &TestDb) {
    let mut raw = db.raw().await;
    match db.backend() {
        Backend::Postgres => {
            raw.execute(
                "CREATE FUNCTION cs_refuse() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'refused at commit'; END $$",
            )
            .await
            .expect("function");
            raw.execute(
                "CREATE CONSTRAINT TRIGGER cs_refuse AFTER INSERT OR UPDATE ON once_values \
                 DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION cs_refuse()",
            )
            .await
            .expect("trigger");
        }
        Backend::Sqlite => {
            raw.execute(
                "CREATE TRIGGER cs_refuse BEFORE INSERT ON once_values \
                 BEGIN SELECT RAISE(ABORT, 'refused'); END",
            )
            .await
            .expect("trigger");
        }
    }
    const CALLERS: usize = 24;
    let barrier = Arc::new(Barrier::new(CALLERS));
    let mut set = JoinSet::new();
    for i in 0..CALLERS {
        let (s, barrier) = (db.storage.clone(), barrier.clone());
        set.spawn(async move {
            barrier.wait().await;
            s.remember_once("proof", &format!("doomed-{}", i % 6), at(60), at(0))
                .await
        });
    }
    for answer in set.join_all().await {
        assert!(answer.is_err(), "a failed batch answered {answer:?}");
    }
    let drop_trigger = match db.backend() {
        Backend::Postgres => "DROP TRIGGER cs_refuse ON once_values",
        Backend::Sqlite => "DROP TRIGGER cs_refuse",
    };
    raw.execute(drop_trigger).await.expect("drop trigger");
    for i in 0..6 {
        assert!(
            db.remember_once("proof", &format!("doomed-{i}"), at(60), at(0))
                .await
                .expect("remember"),
            "doomed-{i} was not stored"
        );
    }
}

async fn due_lists_stored_live_rows_past_their_time(s: &SqlStorage) {
    let key = jwk();
    let now = at(100);
    let r_due = record(&key, "due", 100, None); // expires exactly now: due
    let r_later = record(&key, "later", 101, None);
    let mut r_done = record(&key, "done", 10, None);
    r_done.state = RecordState::Expired;
    let cred = CredentialId(Uuid::new_v4());
    let e_due = enrollment(&key, cred, 0, 50);
    let e_live = enrollment(&key, cred, 0, 500);
    let mut e_ended = enrollment(&key, cred, 0, 50);
    e_ended.ended = Some(Ended {
        at: at(40),
        by: "broker".into(),
    });
    let g_due = grant(e_live.id, 0, Some(99));
    let g_forever = grant(e_live.id, 0, None);
    let g_later = grant(e_live.id, 0, Some(1000));
    let mut g_ended = grant(e_live.id, 0, Some(10));
    g_ended.end = Some((GrantEnd::Expired, at(10)));

    let mut tx = s.begin().await.expect("begin");
    for r in [&r_due, &r_later, &r_done] {
        tx.put_record(r).await.expect("put");
    }
    for e in [&e_due, &e_live, &e_ended] {
        tx.put_enrollment(e).await.expect("put");
    }
    for g in [&g_due, &g_forever, &g_later, &g_ended] {
        tx.put_grant(g).await.expect("put");
    }
    tx.commit().await.expect("commit");

    let mut tx = s.read().await.expect("read");
    let due = tx.due(now, 100).await.expect("due");
    assert_eq!(
        due,
        Due {
            records: vec![r_due.id],
            enrollments: vec![e_due.id],
            grants: vec![g_due.id]
        }
    );
    assert_eq!(tx.due(at(0), 100).await.expect("due"), Due::default());
    drop(tx);

    // In a write transaction too (locking on PostgreSQL), and bounded by the limit per kind.
    let mut more = Vec::new();
    let mut tx = s.begin().await.expect("begin");
    for i in 0..5 {
        let r = record(&key, &format!("more-{i}"), 90 + i, None);
        tx.put_record(&r).await.expect("put");
        more.push(r);
    }
    tx.commit().await.expect("commit");
    let mut tx = s.begin().await.expect("begin");
    let due = tx.due(now, 3).await.expect("due");
    assert_eq!(
        due.records,
        vec![more[0].id, more[1].id, more[2].id],
        "earliest first"
    );
    assert_eq!(due.enrollments, vec![e_due.id]);
    assert_eq!(due.grants, vec![g_due.id]);
}

async fn outbox_topics_are_taken_apart(s: &SqlStorage) {
    let mut tx = s.begin().await.expect("begin");
    tx.push_outbox(&outbox_item("n1", 5)).await.expect("push");
    let d1 = OutboxItem {
        topic: "destroy".into(),
        ..outbox_item("d1", 1)
    };
    tx.push_outbox(&d1).await.expect("push");
    tx.commit().await.expect("commit");
    let mut tx = s.begin().await.expect("begin");
    assert_eq!(
        tx.take_outbox("destroy", at(20), 10).await.expect("take"),
        vec![d1],
        "a destroyer takes destroys only"
    );
    assert_eq!(
        tx.take_outbox("notification", at(20), 10)
            .await
            .expect("take"),
        vec![outbox_item("n1", 5)],
        "a notifier takes notifications only"
    );
}

async fn issued_round_trip_and_unsettled(s: &SqlStorage) {
    use countersign_broker_core::issuer::{Issued, IssuedState};
    let g1 = GrantId(uuid::Uuid::from_u128(1));
    let g2 = GrantId(uuid::Uuid::from_u128(2));
    let row = |g: GrantId, secret: &str, state: IssuedState| Issued {
        grant_id: g,
        secret: SecretName::parse(secret).expect("name"),
        issuer: "postgres".into(),
        name: format!("cs_{}", g.0.simple()),
        state,
        claimed_until: Some(at(30)),
        sealed_value: None,
        expires_at: Some(at(3600)),
        created_at: at(0),
        destroyed_at: None,
        attempts: 0,
        last_error: None,
        next_attempt_at: None,
    };
    let a = row(g1, "DB_A", IssuedState::Minting);
    let b = row(g1, "DB_B", IssuedState::Live);
    let c = row(g2, "DB_A", IssuedState::Destroyed);
    let mut tx = s.begin().await.expect("begin");
    for r in [&a, &b, &c] {
        tx.put_issued(r).await.expect("put");
    }
    tx.commit().await.expect("commit");
    let mut tx = s.begin().await.expect("begin");
    assert_eq!(
        tx.issued_of(g1).await.expect("read"),
        vec![a.clone(), b.clone()]
    );
    assert_eq!(tx.issued_of(g2).await.expect("read"), vec![c.clone()]);
    let mut a2 = a.clone();
    a2.state = IssuedState::Destroying;
    a2.last_error = Some("issuer unavailable: timeout".into());
    tx.put_issued(&a2).await.expect("replace");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    assert_eq!(
        tx.unsettled_issued(10).await.expect("unsettled"),
        vec![a2, b],
        "every credential not destroyed, the replaced row as written"
    );
}

async fn outbox_take_reschedule_delete(s: &SqlStorage) {
    let mut tx = s.begin().await.expect("begin");
    for (id, next) in [("m1", 10), ("m2", 5), ("m3", 50)] {
        tx.push_outbox(&outbox_item(id, next)).await.expect("push");
    }
    tx.commit().await.expect("commit");

    let mut tx = s.begin().await.expect("begin");
    let taken = tx
        .take_outbox("notification", at(20), 10)
        .await
        .expect("take");
    assert_eq!(
        taken,
        vec![outbox_item("m2", 5), outbox_item("m1", 10)],
        "due ones, earliest first"
    );
    assert_eq!(
        tx.take_outbox("notification", at(20), 1)
            .await
            .expect("take")
            .len(),
        1,
        "limit"
    );
    tx.delete_outbox("m2").await.expect("delete");
    tx.reschedule_outbox("m1", 3, at(40))
        .await
        .expect("reschedule");
    tx.commit().await.expect("commit");

    let mut tx = s.begin().await.expect("begin");
    assert_eq!(
        tx.take_outbox("notification", at(20), 10)
            .await
            .expect("take"),
        vec![]
    );
    let m1 = OutboxItem {
        attempts: 3,
        ..outbox_item("m1", 40)
    };
    assert_eq!(
        tx.take_outbox("notification", at(60), 10)
            .await
            .expect("take"),
        vec![m1, outbox_item("m3", 50)]
    );
    tx.delete_outbox("absent")
        .await
        .expect("deleting nothing is fine");
    drop(tx);
}

/// A second writer waits for the first, then skips nothing it should not: on SQLite for the
/// writer's turn; on PostgreSQL, from another replica, for the audit log's lock, which every
/// physical write transaction takes first (`group.rs`); so it takes the message the first left.
async fn outbox_take_skips_rows_another_transaction_took(db: &TestDb) {
    let s = &db.storage;
    let mut tx = s.begin().await.expect("begin");
    tx.push_outbox(&outbox_item("a", 1)).await.expect("push");
    tx.push_outbox(&outbox_item("b", 2)).await.expect("push");
    tx.commit().await.expect("commit");

    let mut first = s.begin().await.expect("begin");
    assert_eq!(
        first
            .take_outbox("notification", at(10), 1)
            .await
            .expect("take"),
        vec![outbox_item("a", 1)]
    );
    let s2 = match s.backend() {
        Backend::Postgres => SqlStorage::connect(&db.url).await.expect("another replica"),
        Backend::Sqlite => s.clone(),
    };
    let replica = s2.clone();
    let second = tokio::spawn(async move {
        let mut tx = replica.begin().await.expect("begin");
        let got = tx
            .take_outbox("notification", at(10), 10)
            .await
            .expect("take");
        tx.commit().await.expect("commit");
        got
    });
    until_waiting(&s2, 1).await;
    assert!(!second.is_finished(), "the second writer waits");
    first.delete_outbox("a").await.expect("delete");
    first.commit().await.expect("commit");
    assert_eq!(second.await.expect("task"), vec![outbox_item("b", 2)]);
    if s.backend() == Backend::Postgres {
        s2.close().await;
    }
}

async fn dropped_transactions_roll_back(s: &SqlStorage) {
    let key = jwk();
    let c = credential(&key, "t", 0, None);
    let mut tx = s.begin().await.expect("begin");
    tx.put_credential(&c).await.expect("put");
    tx.push_outbox(&outbox_item("dropped", 0))
        .await
        .expect("push");
    assert_eq!(
        tx.get_credential(c.id).await.expect("own write visible"),
        Some(c.clone())
    );
    drop(tx);

    // The next writer starts at once and sees nothing of it.
    let mut tx = s.begin().await.expect("begin after drop");
    assert_eq!(tx.get_credential(c.id).await.expect("get"), None);
    assert_eq!(
        tx.take_outbox("notification", at(10), 10)
            .await
            .expect("take"),
        vec![]
    );
    // Failing half-way (an error surfacing to the caller) and dropping also rolls back.
    tx.put_credential(&c).await.expect("put");
    tx.push_outbox(&outbox_item("dup", 0)).await.expect("push");
    assert!(
        tx.push_outbox(&outbox_item("dup", 0)).await.is_err(),
        "duplicate outbox id"
    );
    drop(tx);

    // A read transaction's writes (a misuse) are never committed either.
    let mut tx = s.read().await.expect("read");
    let _ = tx.put_credential(&c).await;
    drop(tx);
    let mut tx = s.read().await.expect("read");
    assert_eq!(tx.get_credential(c.id).await.expect("get"), None);
    drop(tx);

    let mut tx = s.begin().await.expect("begin");
    tx.put_credential(&c).await.expect("put");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    assert_eq!(tx.get_credential(c.id).await.expect("get"), Some(c));
}

/// The first writer reads a row; the second, reading it too, waits until the first commits and
/// then sees its write (row locks on PostgreSQL, the write mutex on SQLite).
async fn second_writer_waits_and_sees_the_first(s: &SqlStorage) {
    let key = jwk();
    let rec = record(&key, "contended", 600, Some("BCDFGHJK"));
    let mut tx = s.begin().await.expect("begin");
    tx.put_record(&rec).await.expect("put");
    tx.commit().await.expect("commit");

    let mut first = s.begin().await.expect("begin");
    assert_eq!(
        first
            .get_record(&rec.id)
            .await
            .expect("get")
            .map(|r| r.state),
        Some(RecordState::Pending)
    );

    let (s2, id) = (s.clone(), rec.id);
    let second = tokio::spawn(async move {
        let mut tx = s2.begin().await.expect("begin");
        let seen = tx.get_record(&id).await.expect("get").map(|r| r.state);
        drop(tx);
        seen
    });
    until_waiting(s, 1).await;
    assert!(
        !second.is_finished(),
        "the second writer waits for the first"
    );

    let mut approved = rec.clone();
    approved.state = RecordState::Approved;
    approved.decided = Some(decision(RecordState::Approved, "ada@example.com", 1));
    approved.code = None;
    first.put_record(&approved).await.expect("put");
    first.commit().await.expect("commit");
    assert_eq!(second.await.expect("task"), Some(RecordState::Approved));
}

async fn reads_do_not_wait_for_writers(s: &SqlStorage) {
    let key = jwk();
    let c = credential(&key, "t", 0, None);
    let mut tx = s.begin().await.expect("begin");
    tx.put_credential(&c).await.expect("put");
    tx.commit().await.expect("commit");

    let mut writer = s.begin().await.expect("begin");
    assert!(writer.get_credential(c.id).await.expect("get").is_some());
    let mut c2 = c.clone();
    c2.host = "changed".into();
    writer.put_credential(&c2).await.expect("put");

    let read = tokio::time::timeout(Duration::from_secs(2), async {
        let mut r = s.read().await.expect("read");
        r.get_credential(c.id).await.expect("get")
    })
    .await
    .expect("a read does not wait for the writer");
    assert_eq!(read, Some(c), "and does not see its uncommitted write");
    writer.commit().await.expect("commit");
    let mut r = s.read().await.expect("read");
    assert_eq!(r.get_credential(c2.id).await.expect("get"), Some(c2));
}

/// Many reads at once, of distinct and of the same keys, each hear their own rows, in order:
/// on PostgreSQL they are read in batches, one statement for many keys (`reads.rs`), and a
/// mix-up of keys, of a key asked twice in one batch, or of a key with no rows shows here.
async fn concurrent_reads_each_hear_their_own_rows(s: &SqlStorage) {
    let key = jwk();
    let mut tx = s.begin().await.expect("begin");
    let mut expected = Vec::new();
    for i in 0..24_i64 {
        let c = credential(&key, &format!("t{i}"), 0, None);
        tx.put_credential(&c).await.expect("put credential");
        let e = enrollment(&key, c.id, i, 600);
        tx.put_enrollment(&e).await.expect("put enrollment");
        // 0 to 3 grants, created out of order: the batch keeps each enrollment's order.
        let grants: Vec<Grant> = (0..i % 4).map(|g| grant(e.id, 10 - g, None)).collect();
        for g in &grants {
            tx.put_grant(g).await.expect("put grant");
        }
        expected.push((c, e, sorted(grants, |g| (g.created_at, g.id))));
    }
    tx.commit().await.expect("commit");
    let expected = Arc::new(expected);
    let start = Arc::new(Barrier::new(96));
    let mut reads = JoinSet::new();
    for n in 0..96_usize {
        let (s, expected, start) = (s.clone(), expected.clone(), start.clone());
        reads.spawn(async move {
            // Every key is read by four callers, most of them at once.
            let (c, e, grants) = &expected[n % expected.len()];
            start.wait().await;
            let mut r = s.read().await.expect("read");
            assert_eq!(
                r.get_enrollment(e.id).await.expect("enrollment").as_ref(),
                Some(e)
            );
            assert_eq!(&r.grants_by_enrollment(e.id).await.expect("grants"), grants);
            // The pair in one statement (PostgreSQL: both tables, `UNION ALL`).
            assert_eq!(
                r.enrollment_with_grants(e.id).await.expect("both"),
                (Some(e.clone()), grants.clone())
            );
            assert_eq!(
                r.get_credential(c.id).await.expect("credential").as_ref(),
                Some(c)
            );
            let unknown = EnrollmentId(Uuid::new_v4());
            assert_eq!(r.get_enrollment(unknown).await.expect("unknown"), None);
            assert!(
                r.grants_by_enrollment(unknown)
                    .await
                    .expect("none")
                    .is_empty()
            );
            assert_eq!(
                r.enrollment_with_grants(unknown)
                    .await
                    .expect("unknown pair"),
                (None, Vec::new())
            );
        });
    }
    while let Some(done) = reads.join_next().await {
        done.expect("a read task");
    }
}

/// A snapshot's statements all see the database as at its first one (an audit walk checks rows
/// against the chain in one); a read's each see the latest commit (reads keep their
/// connection between them, `spare.rs`, and must not keep a stale view with it).
async fn a_snapshot_sees_one_state_a_read_sees_the_latest(s: &SqlStorage) {
    let key = jwk();
    let c = credential(&key, "t", 0, None);
    let mut snapshot = s.snapshot().await.expect("snapshot");
    assert_eq!(snapshot.get_credential(c.id).await.expect("get"), None);
    let mut read = s.read().await.expect("read");
    assert_eq!(read.get_credential(c.id).await.expect("get"), None);

    let mut tx = s.begin().await.expect("begin");
    tx.put_credential(&c).await.expect("put");
    tx.commit().await.expect("commit");

    assert_eq!(
        snapshot.get_credential(c.id).await.expect("get"),
        None,
        "a snapshot does not see a commit after its first statement"
    );
    assert_eq!(
        read.get_credential(c.id).await.expect("get"),
        Some(c.clone()),
        "each statement of a read sees the latest commit"
    );
    drop(read);
    // The kept connection, taken again, sees it too.
    for _ in 0..3 {
        let mut r = s.read().await.expect("read");
        assert_eq!(r.get_credential(c.id).await.expect("get"), Some(c.clone()));
    }
}

/// Reads keep their connections between them; closing the storage hands them back first, so
/// that the pool's close (which waits for every checked-out connection) returns.
async fn kept_read_connections_go_back_before_the_pool_closes(s: &SqlStorage) {
    let key = jwk();
    let c = credential(&key, "t", 0, None);
    let mut tx = s.begin().await.expect("begin");
    tx.put_credential(&c).await.expect("put");
    tx.commit().await.expect("commit");
    // Several reads at once, so that several connections are kept.
    let read = || async {
        let mut r = s.read().await.expect("read");
        r.get_credential(c.id).await.expect("get")
    };
    let got = tokio::join!(read(), read(), read(), read());
    for got in [got.0, got.1, got.2, got.3] {
        assert_eq!(got, Some(c.clone()));
    }
    let clone = s.clone();
    tokio::time::timeout(Duration::from_secs(10), clone.close())
        .await
        .expect("the pool closes with read connections kept");
}

/// Many concurrent transitions on one record: each reads it and approves it if still pending.
/// Exactly one may win each round.
async fn race_has_one_winner_per_round(s: &SqlStorage) {
    const TASKS: usize = 16;
    const ROUNDS: usize = 20;
    let key = jwk();
    for round in 0..ROUNDS {
        let rec = record(&key, &format!("race-{round}"), 600, None);
        let mut tx = s.begin().await.expect("begin");
        tx.put_record(&rec).await.expect("put");
        tx.commit().await.expect("commit");

        let barrier = Arc::new(Barrier::new(TASKS));
        let mut set = JoinSet::new();
        for task in 0..TASKS {
            let (s, barrier, id) = (s.clone(), barrier.clone(), rec.id);
            set.spawn(async move {
                barrier.wait().await;
                let mut conflicts = 0;
                loop {
                    match try_approve(&s, &id, task).await {
                        Ok(won) => return won.then_some(task),
                        Err(StorageError::Conflict) if conflicts < 20 => conflicts += 1,
                        Err(e) => panic!("task {task}: {e}"),
                    }
                }
            });
        }
        let winners: Vec<usize> = set.join_all().await.into_iter().flatten().collect();
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        let mut tx = s.read().await.expect("read");
        let stored = tx.get_record(&rec.id).await.expect("get").expect("stored");
        assert_eq!(stored.state, RecordState::Approved);
        assert_eq!(
            stored.decided.map(|d| d.by),
            Some(format!("task-{}", winners[0]))
        );
    }
}

async fn try_approve(s: &SqlStorage, id: &RecordId, task: usize) -> Result<bool, StorageError> {
    let mut tx = s.begin().await?;
    let mut r = tx.get_record(id).await?.expect("record exists");
    if r.state != RecordState::Pending {
        return Ok(false);
    }
    // Widen the window between the read and the write.
    tokio::task::yield_now().await;
    r.state = RecordState::Approved;
    r.decided = Some(decision(RecordState::Approved, &format!("task-{task}"), 1));
    tx.put_record(&r).await?;
    tx.commit().await?;
    Ok(true)
}

async fn undecodable_rows_are_corrupt(db: &TestDb) {
    let key = jwk();
    let c = credential(&key, "t", 0, None);
    let r = record(&key, "corrupt", 600, None);
    let mut tx = db.begin().await.expect("begin");
    tx.put_credential(&c).await.expect("put");
    tx.put_record(&r).await.expect("put");
    tx.commit().await.expect("commit");

    let mut raw = db.raw().await;
    raw.execute(
        format!(
            "UPDATE credentials SET doc = '{{\"id\": 1}}' WHERE id = '{}'",
            c.id
        )
        .as_str(),
    )
    .await
    .expect("corrupt the doc");
    raw.execute(format!("UPDATE records SET state = 'limbo' WHERE id = '{}'", r.id).as_str())
        .await
        .expect("corrupt the state");
    raw.close().await.expect("close");

    let mut tx = db.read().await.expect("read");
    assert!(matches!(
        tx.get_credential(c.id).await,
        Err(StorageError::Corrupt(_))
    ));
    assert!(matches!(
        tx.list_credentials().await,
        Err(StorageError::Corrupt(_))
    ));
    assert!(matches!(
        tx.get_record(&r.id).await,
        Err(StorageError::Corrupt(_))
    ));
}

async fn reconnecting_keeps_data_and_schema(db: &TestDb) {
    let key = jwk();
    let c = credential(&key, "t", 0, None);
    let mut tx = db.begin().await.expect("begin");
    tx.put_credential(&c).await.expect("put");
    tx.commit().await.expect("commit");

    // Connecting again runs no migration twice and finds the data.
    let again = SqlStorage::connect(&db.url).await.expect("reconnect");
    let mut tx = again.read().await.expect("read");
    assert_eq!(tx.get_credential(c.id).await.expect("get"), Some(c));
    drop(tx);
    again.close().await;

    let mut raw = db.raw().await;
    let rows = sqlx::query("SELECT version FROM schema_migrations ORDER BY version")
        .fetch_all(&mut raw)
        .await
        .expect("versions");
    // Each migration is recorded once: the second connect applied none again.
    let versions: Vec<i64> = rows
        .iter()
        .map(|r| sqlx::Row::try_get::<i64, _>(r, "version").expect("version"))
        .collect();
    assert_eq!(versions, (1..=versions.len() as i64).collect::<Vec<_>>());
    assert_eq!(versions.len(), 7, "the migrations this broker knows");
    raw.close().await.expect("close");
}

/// Appenders in concurrent transactions serialise on the head: every position once, one
/// chain that verifies; entries read back by position, by subject and counted.
async fn audit_log_appends_chain_and_serialise(s: &SqlStorage) {
    use countersign_broker_core::audit::{self, AuditEvent};
    let sealer = Arc::new(
        countersign_broker_core::seal::Sealer::new(&zeroize::Zeroizing::new(vec![3u8; 32]))
            .expect("key"),
    );
    let storage = Arc::new(s.clone());
    let mut tasks = JoinSet::new();
    for i in 0..8 {
        let (storage, sealer) = (storage.clone(), sealer.clone());
        tasks.spawn(async move {
            loop {
                let mut tx = storage.begin().await.expect("begin");
                let events = [
                    AuditEvent {
                        kind: "grant",
                        subject: format!("grant:{i}"),
                        body: serde_json::json!({ "i": i }).to_string(),
                    },
                    AuditEvent {
                        kind: "revocation",
                        subject: format!("grant:{i}"),
                        body: serde_json::json!({}).to_string(),
                    },
                ];
                match audit::append(&mut *tx, &sealer, at(i), &events).await {
                    Ok(_) => {}
                    Err(StorageError::Conflict) => continue,
                    Err(e) => panic!("append: {e}"),
                }
                match tx.commit().await {
                    Ok(()) => break,
                    Err(StorageError::Conflict) => continue,
                    Err(e) => panic!("commit: {e}"),
                }
            }
        });
    }
    while let Some(r) = tasks.join_next().await {
        r.expect("task");
    }
    let mut tx = s.read().await.expect("read");
    let walk = audit::verify_all(&mut *tx, &sealer)
        .await
        .expect("read")
        .expect("the chain verifies");
    assert_eq!(walk.position, 16);
    assert_eq!(tx.audit_count(10).await.expect("count"), (10, 16));
    let ends = tx.audit_ends("grant:3").await.expect("ends");
    assert_eq!(
        ends.iter().map(|e| e.kind.as_str()).collect::<Vec<_>>(),
        ["revocation"]
    );
    let around = tx
        .audit_entries(ends[0].position - 2, 2)
        .await
        .expect("entries");
    assert_eq!(
        (around[0].kind.as_str(), around[0].subject.as_str()),
        ("grant", "grant:3"),
        "one transaction's entries are adjacent"
    );
    let page = tx.audit_entries(14, 10).await.expect("entries");
    assert_eq!(
        page.iter().map(|e| e.position).collect::<Vec<_>>(),
        [15, 16]
    );
    assert_eq!(tx.audit_head().await.expect("head"), Some((16, walk.hash)));
}

/// An append whose transaction rolls back leaves no trace in the head the next append builds
/// on (SQLite's writer remembers the head its appends left, and must forget a rolled-back one).
async fn an_append_rolled_back_leaves_no_head_behind(s: &SqlStorage) {
    use countersign_broker_core::audit::{self, AuditEvent};
    let sealer =
        countersign_broker_core::seal::Sealer::new(&zeroize::Zeroizing::new(vec![4u8; 32]))
            .expect("key");
    let event = |kind: &'static str| AuditEvent {
        kind,
        subject: "grant:1".into(),
        body: serde_json::json!({}).to_string(),
    };
    let mut tx = s.begin().await.expect("begin");
    audit::append(
        &mut *tx,
        &sealer,
        at(1),
        &[event("grant"), event("release")],
    )
    .await
    .expect("append");
    tx.commit().await.expect("commit");

    let mut tx = s.begin().await.expect("begin");
    audit::append(&mut *tx, &sealer, at(2), &[event("revocation")])
        .await
        .expect("append");
    drop(tx);

    let mut tx = s.begin().await.expect("begin");
    let (position, _) = audit::append(&mut *tx, &sealer, at(3), &[event("end")])
        .await
        .expect("append")
        .expect("a head");
    tx.commit().await.expect("commit");
    assert_eq!(
        position, 3,
        "the rolled-back entry's position is taken again"
    );

    let mut tx = s.read().await.expect("read");
    let walk = audit::verify_all(&mut *tx, &sealer)
        .await
        .expect("read")
        .expect("the chain verifies");
    assert_eq!(walk.position, 3);
    let kinds: Vec<String> = tx
        .audit_entries(0, 10)
        .await
        .expect("entries")
        .into_iter()
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, ["grant", "release", "end"]);
}

/// The follower re-verifies the chain below its head a bounded number of entries a round: an
/// entry removed, then one edited, below the head is found within `head / budget` rounds, and
/// a deleted tail at once.
async fn the_follower_sweeps_below_its_head_in_bounded_rounds(db: &TestDb) {
    use countersign_broker_core::audit::{self, AuditEvent, BreakReason, Follower};
    use sqlx::Executor as _;
    let sealer =
        countersign_broker_core::seal::Sealer::new(&zeroize::Zeroizing::new(vec![6u8; 32]))
            .expect("key");
    let events: Vec<AuditEvent> = (0..23)
        .map(|i| AuditEvent {
            kind: "release",
            subject: format!("grant:{i}"),
            body: serde_json::json!({ "i": i }).to_string(),
        })
        .collect();
    let mut tx = db.begin().await.expect("begin");
    audit::append(&mut *tx, &sealer, at(1), &events)
        .await
        .expect("append");
    tx.commit().await.expect("commit");

    async fn round(
        db: &TestDb,
        sealer: &countersign_broker_core::seal::Sealer,
        f: &Follower,
        full: bool,
    ) -> countersign_broker_core::audit::FollowerState {
        let mut tx = db.read().await.expect("read");
        f.step(&mut *tx, sealer, full).await.expect("step")
    }
    let saved = {
        let mut tx = db.read().await.expect("read");
        tx.audit_entries(0, 100).await.expect("entries")
    };
    // Each case on a follower that has seen the whole chain, sweeping 5 entries a round.
    for (sql, position, reason) in [
        (
            "DELETE FROM audit_log WHERE position = 7",
            7,
            BreakReason::Gap,
        ),
        (
            "UPDATE audit_log SET body = '{}' WHERE position = 12",
            12,
            BreakReason::Hash,
        ),
    ] {
        let f = Follower::with_sweep(None, 5);
        assert_eq!(round(db, &sealer, &f, true).await.head.position, 23);
        assert!(round(db, &sealer, &f, false).await.broken.is_none());
        let mut raw = db.raw().await;
        raw.execute(sql).await.expect("tamper");
        let mut found = None;
        for _ in 0..(23 / 5 + 1) {
            if let Some(b) = round(db, &sealer, &f, false).await.broken {
                found = Some((b.position, b.reason));
                break;
            }
        }
        assert_eq!(found, Some((position, reason)), "{sql}");
        assert!(
            round(db, &sealer, &f, false).await.broken.is_some(),
            "a break is sticky"
        );
        // Put the chain back as it was for the next case.
        raw.execute("DELETE FROM audit_log").await.expect("clear");
        let mut tx = db.begin().await.expect("begin");
        tx.append_audit(&saved).await.expect("restore");
        tx.commit().await.expect("commit");
    }

    // A deleted tail is found in the next round, whatever the sweep's budget.
    let f = Follower::with_sweep(None, 1);
    assert_eq!(round(db, &sealer, &f, true).await.head.position, 23);
    let mut raw = db.raw().await;
    raw.execute("DELETE FROM audit_log WHERE position > 20")
        .await
        .expect("tamper");
    let b = round(db, &sealer, &f, false).await.broken.expect("found");
    assert_eq!((b.position, b.reason), (23, BreakReason::Gap));
}

async fn ping_and_debug(db: &TestDb) {
    db.ping().await.expect("ping");
    let shown = format!("{:?}", db.storage);
    assert!(shown.contains("SqlStorage"), "{shown}");
    if let Some(password) = password_of(&db.url) {
        assert!(
            !shown.contains(&format!(":{password}@")),
            "Debug shows the password: {shown}"
        );
    }
}

fn password_of(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let userinfo = rest.split('/').next()?.rsplit_once('@')?.0;
    userinfo
        .split_once(':')
        .map(|(_, p)| p.to_owned())
        .filter(|p| !p.is_empty())
}

// ---------------------------------------------------------------------------------------------
// Outside the suite
// ---------------------------------------------------------------------------------------------

// SQLite's writer: group commit (writer.rs).

/// Many writers at once: every commit answers Ok, each write is visible to a read as soon as
/// its commit answered, and another storage opened on the file afterwards sees them all.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_group_commit_answers_every_writer_after_its_write_is_committed() {
    let db = TestDb::sqlite().await;
    let key = jwk();
    let mut tasks = JoinSet::new();
    for i in 0..64 {
        let (s, key) = (db.storage.clone(), key.clone());
        tasks.spawn(async move {
            let c = credential(&key, &format!("t{i}"), i, None);
            let mut tx = s.begin().await.expect("begin");
            tx.put_credential(&c).await.expect("put");
            tx.commit().await.expect("commit");
            let mut r = s.read().await.expect("read");
            assert_eq!(r.get_credential(c.id).await.expect("get"), Some(c.clone()));
            c.id
        });
    }
    let mut ids = BTreeSet::new();
    while let Some(id) = tasks.join_next().await {
        ids.insert(id.expect("task").0);
    }
    assert_eq!(ids.len(), 64);
    let other = SqlStorage::connect(&db.url).await.expect("reopen");
    let mut r = other.read().await.expect("read");
    let seen: BTreeSet<_> = r
        .list_credentials()
        .await
        .expect("list")
        .into_iter()
        .map(|c| c.id.0)
        .collect();
    assert_eq!(seen, ids);
    drop(r);
    other.close().await;
    db.finish().await;
}

/// A writer that wrote and is then dropped takes back its own writes only (issue 51: the
/// shared writer undoes it to its savepoint, or forgets what it held back when it sent
/// nothing): the writer that committed before it in that batch commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_dropped_writer_takes_back_only_its_own_writes() {
    for sent in [false, true] {
        let db = TestDb::sqlite().await;
        let key = jwk();
        let first = credential(&key, "first", 0, None);
        let dropped = credential(&key, "dropped", 0, None);

        let mut a = db.begin().await.expect("begin");
        a.put_credential(&first).await.expect("put");
        // B queues for the writer while A holds it, so it joins A's batch ahead of the flusher.
        let (s, d) = (db.storage.clone(), dropped.clone());
        let b = tokio::spawn(async move {
            let mut tx = s.begin().await.expect("begin");
            tx.put_credential(&d).await.expect("put");
            if sent {
                // Sends what is held back (A's write, B's savepoint and write) with a read.
                let seen = tx.get_credential(d.id).await.expect("get");
                assert_eq!(seen, Some(d.clone()));
            }
            drop(tx);
        });
        until_waiting(&db, 1).await;
        a.commit().await.expect("commit");
        b.await.expect("task");
        let mut r = db.read().await.expect("read");
        assert_eq!(
            r.get_credential(first.id).await.expect("get"),
            Some(first.clone()),
            "sent: {sent}"
        );
        assert_eq!(
            r.get_credential(dropped.id).await.expect("get"),
            None,
            "sent: {sent}"
        );
        drop(r);
        db.finish().await;
    }
}

/// A writer that only read and is dropped, or whose commit had nothing to write, leaves the
/// batch it joined alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_writer_that_only_read_leaves_its_batch_alone() {
    let db = TestDb::sqlite().await;
    let c = credential(&jwk(), "kept", 0, None);
    let mut a = db.begin().await.expect("begin");
    a.put_credential(&c).await.expect("put");
    let (s, id) = (db.storage.clone(), c.id);
    let readers = tokio::spawn(async move {
        let mut tx = s.begin().await.expect("begin");
        let seen = tx.get_credential(id).await.expect("get");
        drop(tx);
        let mut tx = s.begin().await.expect("begin");
        tx.get_credential(id).await.expect("get");
        tx.commit().await.expect("a commit with nothing written");
        seen
    });
    until_waiting(&db, 1).await;
    a.commit().await.expect("commit");
    // The reader ran inside the batch, after A: it saw A's write.
    assert_eq!(readers.await.expect("task"), Some(c.clone()));
    let mut r = db.read().await.expect("read");
    assert_eq!(r.get_credential(c.id).await.expect("get"), Some(c));
    drop(r);
    db.finish().await;
}

/// SQLite's writer holds a write whose answer nobody reads back and sends it with the next
/// statement (or the batch's `COMMIT`): when it fails there, the transaction whose statement
/// carried it and the one that wrote it both hear `Conflict` (the core runs them again), and
/// nothing of the batch is committed; the writer then goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_held_back_write_that_fails_runs_its_batch_again() {
    let db = TestDb::sqlite().await;
    let mut raw = db.raw().await;
    raw.execute(
        "CREATE TRIGGER refuse_cursed BEFORE INSERT ON credentials WHEN NEW.doc LIKE '%cursed%' \
         BEGIN SELECT RAISE(ABORT, 'refused'); END",
    )
    .await
    .expect("trigger");
    let key = jwk();
    let cursed = credential(&key, "cursed", 0, None);
    let fine = credential(&key, "fine", 0, None);

    // A's write is held back; it commits and waits for the batch.
    let mut a = db.begin().await.expect("begin");
    a.put_credential(&cursed)
        .await
        .expect("a held-back write answers at once");
    let (s, fine2) = (db.storage.clone(), fine.clone());
    let b = tokio::spawn(async move {
        let mut tx = s.begin().await.expect("begin");
        tx.put_credential(&fine2).await.expect("held back");
        // This read carries A's write and B's own: A's fails, so B's read fails.
        let read = tx.get_credential(fine2.id).await;
        drop(tx);
        read
    });
    until_waiting(&db, 1).await;
    let a_result = a.commit().await;
    let b_result = b.await.expect("task");
    assert!(
        matches!(b_result, Err(StorageError::Conflict)),
        "the statement that carried the failed write: {b_result:?}"
    );
    assert!(
        matches!(a_result, Err(StorageError::Conflict)),
        "the transaction whose write failed: {a_result:?}"
    );
    let mut r = db.read().await.expect("read");
    assert_eq!(r.get_credential(cursed.id).await.expect("get"), None);
    assert_eq!(r.get_credential(fine.id).await.expect("get"), None);
    drop(r);

    // Failing at the COMMIT it travels with: the batch's members hear Conflict too.
    let mut a = db.begin().await.expect("begin");
    a.put_credential(&cursed).await.expect("held back");
    assert!(matches!(a.commit().await, Err(StorageError::Conflict)));

    // The writer goes on, and a write that can succeed does.
    let mut a = db.begin().await.expect("begin");
    a.put_credential(&fine).await.expect("put");
    assert_eq!(
        a.get_credential(fine.id).await.expect("own write"),
        Some(fine.clone())
    );
    a.commit().await.expect("commit");
    let mut r = db.read().await.expect("read");
    assert_eq!(r.get_credential(fine.id).await.expect("get"), Some(fine));
    drop(r);
    drop(raw);
    db.finish().await;
}

/// A statement that carries held-back writes, cancelled while it runs (its caller gone), leaves
/// the batch not knowing which of them ran (sqlx's worker stops a text at the first result
/// nobody receives): the batch rolls back and its members hear `Conflict`. Never is a member
/// told its writes committed while some were not.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_a_cancelled_statement_carrying_held_back_writes_rolls_its_batch_back() {
    let db = TestDb::sqlite().await;
    let mut raw = db.raw().await;
    // Inserting a credential whose document says "slow" takes a while (a count to 2 million).
    raw.execute(
        "CREATE TRIGGER slow_insert BEFORE INSERT ON credentials WHEN NEW.doc LIKE '%slow%' \
         BEGIN SELECT count(*) FROM (WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL \
         SELECT x + 1 FROM c WHERE x < 2000000) SELECT x FROM c); END",
    )
    .await
    .expect("trigger");
    let key = jwk();
    let slow = credential(&key, "slow", 0, None);
    let after = credential(&key, "after", 0, None);
    let mut a = db.begin().await.expect("begin");
    a.put_credential(&slow).await.expect("held back");
    a.put_credential(&after).await.expect("held back");
    let (s, id) = (db.storage.clone(), after.id);
    let b = tokio::spawn(async move {
        let mut tx = s.begin().await.expect("begin");
        // The read carries A's two writes; its caller goes away while the first runs.
        let read = tokio::time::timeout(Duration::from_millis(20), tx.get_credential(id)).await;
        assert!(read.is_err(), "cancelled while the slow insert ran");
        drop(tx);
    });
    until_waiting(&db, 1).await;
    let committed = a.commit().await;
    b.await.expect("task");
    let mut r = db.read().await.expect("read");
    let stored = (
        r.get_credential(slow.id).await.expect("get"),
        r.get_credential(after.id).await.expect("get"),
    );
    drop(r);
    assert!(
        matches!(committed, Err(StorageError::Conflict)),
        "the batch rolls back: {committed:?}, stored {:?}",
        (stored.0.is_some(), stored.1.is_some())
    );
    assert_eq!(stored, (None, None), "nothing of the batch is stored");
    drop(raw);
    db.finish().await;
}

/// `Exclusive` over `db`, with an enrollment committed and read once, so that its cache holds
/// it.
async fn exclusive_with_a_cached_enrollment(
    db: &TestDb,
) -> (
    Arc<countersign_broker_core::exclusive::Exclusive<SqlStorage>>,
    Enrollment,
) {
    let ex = Arc::new(countersign_broker_core::exclusive::Exclusive::new(
        db.storage.clone(),
    ));
    let e = enrollment(&jwk(), CredentialId(Uuid::new_v4()), 0, 600);
    let mut tx = ex.begin().await.expect("begin");
    tx.put_enrollment(&e).await.expect("put");
    tx.commit().await.expect("commit");
    let mut r = ex.read().await.expect("read");
    assert_eq!(r.get_enrollment(e.id).await.expect("get"), Some(e.clone()));
    (ex, e)
}

/// `Exclusive`'s write transactions answer an enrollment from its cache, except one a write
/// transaction that has not ended wrote: a later member of the writer's open batch sees the
/// earlier member's uncommitted write, not the cached row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exclusive_write_transactions_see_the_batch_not_the_cache() {
    let db = TestDb::sqlite().await;
    let (ex, e) = exclusive_with_a_cached_enrollment(&db).await;
    // A write transaction answered from the cache sees the committed row.
    let mut w = ex.begin().await.expect("begin");
    assert_eq!(w.get_enrollment(e.id).await.expect("get"), Some(e.clone()));
    drop(w);

    // A ends the enrollment and commits: it waits for the batch, which B joins.
    let mut ended = e.clone();
    ended.runtime_id = "ended-by-a".into();
    let mut a = ex.begin().await.expect("begin");
    a.put_enrollment(&ended).await.expect("put");
    let (ex2, id) = (ex.clone(), e.id);
    let b = tokio::spawn(async move {
        let mut tx = ex2.begin().await.expect("begin");
        let seen = tx.get_enrollment(id).await.expect("get");
        drop(tx);
        seen
    });
    until_waiting(&db, 1).await;
    a.commit().await.expect("commit");
    assert_eq!(
        b.await.expect("task").map(|e| e.runtime_id),
        Some("ended-by-a".into()),
        "B ran in A's batch, before its commit, and saw A's write"
    );
    let mut r = ex.read().await.expect("read");
    assert_eq!(r.get_enrollment(e.id).await.expect("get"), Some(ended));
    drop(r);
    db.finish().await;
}

/// A write transaction whose caller goes away while its commit is pending: the batch commits
/// its write all the same, and `Exclusive`'s cache must not go on answering the row as it was
/// (a revocation whose client hung up would otherwise stay unseen).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exclusive_forgets_what_a_cancelled_commit_wrote() {
    let db = TestDb::sqlite().await;
    let (ex, e) = exclusive_with_a_cached_enrollment(&db).await;

    let mut ended = e.clone();
    ended.runtime_id = "ended".into();
    let mut a = ex.begin().await.expect("begin");
    a.put_enrollment(&ended).await.expect("put");
    // C queues for the writer behind A, and holds its turn until told: the batch with A's
    // write stays uncommitted meanwhile.
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let ex2 = ex.clone();
    let c = tokio::spawn(async move {
        let tx = ex2.begin().await.expect("begin");
        let _ = wait.await;
        drop(tx);
    });
    until_waiting(&db, 1).await;
    // A's commit is asked for, then its caller goes away.
    let _ = tokio::time::timeout(Duration::ZERO, a.commit()).await;
    // Reads meanwhile see the row as committed before A, and must not keep it.
    for _ in 0..5 {
        let mut r = ex.read().await.expect("read");
        assert_eq!(r.get_enrollment(e.id).await.expect("get"), Some(e.clone()));
    }
    let _ = go.send(());
    c.await.expect("task");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let mut r = ex.read().await.expect("read");
        let seen = r.get_enrollment(e.id).await.expect("get");
        drop(r);
        if seen.as_ref().map(|e| e.runtime_id.as_str()) == Some("ended") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the committed write is never seen: the cache kept the row as it was"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // And it stays seen: a read does not fill the cache with anything older.
    for _ in 0..20 {
        let mut r = ex.read().await.expect("read");
        assert_eq!(
            r.get_enrollment(e.id)
                .await
                .expect("get")
                .map(|e| e.runtime_id),
            Some("ended".into())
        );
    }
    db.finish().await;
}

/// The in-memory single-use values of `Exclusive` (the broker's SQLite setting): a replay is
/// refused while remembered, a lapsed value is accepted again, and lapsed values are forgotten
/// a few at a time by later calls, so memory follows the live values.
#[tokio::test]
async fn exclusive_forgets_lapsed_single_use_values_as_it_goes() {
    use countersign_broker_core::exclusive::Exclusive;
    let db = TestDb::sqlite().await;
    let ex = Exclusive::new(db.storage.clone());
    for i in 0..1000 {
        assert!(
            ex.remember_once("proof", &format!("old{i}"), at(10), at(0))
                .await
                .expect("remember")
        );
    }
    assert!(
        !ex.remember_once("proof", "old7", at(10), at(5))
            .await
            .expect("replay")
    );
    assert_eq!(ex.remembered_values(), 1000);
    // Past their time, new values: each call forgets up to 8 lapsed ones of its shard (one of
    // 64, by hash), so a few thousand calls forget all thousand.
    for i in 0..3000 {
        assert!(
            ex.remember_once("proof", &format!("new{i}"), at(100), at(20))
                .await
                .expect("remember")
        );
    }
    assert_eq!(ex.remembered_values(), 3000);
    assert!(
        ex.remember_once("proof", "old999", at(100), at(20))
            .await
            .expect("lapsed, so fresh")
    );
    assert!(
        !ex.remember_once("proof", "new5", at(100), at(20))
            .await
            .expect("live, so a replay")
    );
    db.finish().await;
}

/// `Exclusive` writes a value new to its memory through to the database and answers what the
/// database answers: a value stored before (as by a process before a restart) is a replay, and a
/// value whose write failed is not kept in memory, so that trying it again is not refused as one.
#[tokio::test]
async fn exclusive_asks_the_database_about_values_new_to_it() {
    use countersign_broker_core::exclusive::Exclusive;
    let db = TestDb::sqlite().await;
    assert!(
        db.remember_once("proof", "before-restart", at(60), at(0))
            .await
            .expect("remember")
    );
    let ex = Exclusive::new(db.storage.clone());
    assert!(
        !ex.remember_once("proof", "before-restart", at(60), at(1))
            .await
            .expect("replay")
    );
    let mut raw = db.raw().await;
    raw.execute(
        "CREATE TRIGGER cs_refuse BEFORE INSERT ON once_values \
         BEGIN SELECT RAISE(ABORT, 'refused'); END",
    )
    .await
    .expect("trigger");
    assert!(
        ex.remember_once("proof", "unwritten", at(60), at(1))
            .await
            .is_err()
    );
    raw.execute("DROP TRIGGER cs_refuse").await.expect("drop");
    assert!(
        ex.remember_once("proof", "unwritten", at(60), at(2))
            .await
            .expect("fresh once written")
    );
    assert!(
        db.remember_once("proof", "unwritten", at(60), at(3))
            .await
            .is_ok_and(|fresh| !fresh),
        "written through to the database"
    );
    db.finish().await;
}

/// A proof's `jti` at `now_s`, dated `iat_s` (offsets from the tests' epoch), with a 60 s skew.
/// Refused as undecided: dated at or before the floor, and not in the database (503 to the
/// client: it may be an honest proof signed before the restart).
fn undecided(r: Result<bool, StorageError>) -> bool {
    matches!(r, Err(StorageError::Unavailable(m)) if m == countersign_broker_core::exclusive::UNDECIDED)
}

/// Refused either way: a replay the database knows, or undecided.
fn refused(r: Result<bool, StorageError>) -> bool {
    matches!(r, Ok(false)) || undecided(r)
}

fn proof_use<'a>(
    jti: &'a str,
    iat_s: i64,
    now_s: i64,
) -> countersign_broker_core::storage::ProofUse<'a> {
    countersign_broker_core::storage::ProofUse {
        scope: "session:x",
        jti,
        iat: at(iat_s).timestamp(),
        skew: 60,
        until: at(now_s + 420),
        now: at(now_s),
    }
}

/// `Exclusive`'s proof horizon: proof `jti`s stay in memory (none reaches the database), and a
/// second `Exclusive` over the same database (a restarted process) refuses what the first may
/// have accepted on memory alone (dated at or before its horizon), asks the database about
/// what is dated within the skew after it, and keeps the rest in memory again.
#[tokio::test]
async fn exclusive_keeps_proof_jtis_in_memory_behind_a_durable_horizon() {
    use countersign_broker_core::exclusive::{Exclusive, HORIZON_SCOPE};
    let db = TestDb::sqlite().await;
    let stored = |s: &'static str, now: i64| {
        let st = db.storage.clone();
        async move { st.remembered(s, at(now)).await.expect("remembered") }
    };
    let first = Exclusive::new(db.storage.clone());
    assert!(
        first
            .remember_proof(proof_use("a", 100, 100))
            .await
            .expect("a")
    );
    assert!(
        !first
            .remember_proof(proof_use("a", 100, 100))
            .await
            .expect("a again")
    );
    assert!(
        first
            .remember_proof(proof_use("b", 101, 101))
            .await
            .expect("b")
    );
    // Dated 40 s ahead of the clock: past the horizon, so written through.
    assert!(
        first
            .remember_proof(proof_use("ahead", 141, 101))
            .await
            .expect("ahead")
    );
    assert_eq!(stored("session:x", 101).await, vec!["ahead".to_owned()]);
    let horizon = first.proof_horizon().expect("a horizon");
    // The clock's second and the next, recorded at the first call (the second call's second
    // was covered).
    assert_eq!(horizon, at(101).timestamp());
    assert!(
        stored(HORIZON_SCOPE, 101)
            .await
            .contains(&horizon.to_string())
    );

    // The restart.
    let second = Exclusive::new(db.storage.clone());
    assert!(undecided(
        second.remember_proof(proof_use("a", 100, 103)).await
    ));
    assert!(undecided(
        second.remember_proof(proof_use("b", 101, 103)).await
    ));
    // Fresh, but signed in the horizon's second: refused all the same.
    assert!(undecided(
        second.remember_proof(proof_use("c", 101, 103)).await
    ));
    // Past the floor, within the skew after it: the database decides (and keeps it), even
    // where this process's own horizon would have kept the value in memory.
    assert!(
        !second
            .remember_proof(proof_use("ahead", 141, 141))
            .await
            .expect("ahead replayed")
    );
    assert!(
        second
            .remember_proof(proof_use("d", 141, 141))
            .await
            .expect("d")
    );
    assert!(stored("session:x", 141).await.contains(&"d".to_owned()));
    // Past the skew after the floor: memory alone again.
    assert!(
        second
            .remember_proof(proof_use("e", 170, 170))
            .await
            .expect("e")
    );
    assert!(!stored("session:x", 170).await.contains(&"e".to_owned()));
    assert!(
        !second
            .remember_proof(proof_use("e", 170, 171))
            .await
            .expect("e again")
    );

    // And a third process refuses what the second kept in memory.
    let third = Exclusive::new(db.storage.clone());
    assert!(undecided(
        third.remember_proof(proof_use("e", 170, 172)).await
    ));
    db.finish().await;
}

/// A graceful stop releases the horizon: the values held in memory are written through at
/// shutdown, so the successor refuses their replay from the database and accepts honest proofs
/// signed in the horizon's second (which a crash makes it refuse). What a crash before the
/// released process left unknown stays refused.
#[tokio::test]
async fn exclusive_releases_its_horizon_at_a_graceful_stop() {
    use countersign_broker_core::exclusive::{Exclusive, RELEASED_SCOPE};
    let db = TestDb::sqlite().await;
    // A first process crashes after keeping "old" in memory alone.
    let crashed = Exclusive::new(db.storage.clone());
    assert!(
        crashed
            .remember_proof(proof_use("old", 90, 90))
            .await
            .expect("old")
    );
    drop(crashed);

    // The second refuses below the crashed one's horizon, keeps "a" and "b" in memory, and
    // stops gracefully.
    let first = Exclusive::new(db.storage.clone());
    assert!(undecided(
        first.remember_proof(proof_use("c0", 91, 92)).await
    ));
    assert!(
        first
            .remember_proof(proof_use("a", 160, 160))
            .await
            .expect("a")
    );
    assert!(
        first
            .remember_proof(proof_use("b", 161, 161))
            .await
            .expect("b")
    );
    let horizon = first.proof_horizon().expect("a horizon");
    first.at_shutdown(at(161)).await.expect("release");
    let released = db
        .storage
        .remembered(RELEASED_SCOPE, at(161))
        .await
        .expect("released");
    assert_eq!(released, vec![format!("{horizon}:{}", at(91).timestamp())]);
    // After the release began, even a proof within the horizon is written through.
    assert!(
        first
            .remember_proof(proof_use("late", 161, 161))
            .await
            .expect("late")
    );
    assert!(
        db.storage
            .remembered("session:x", at(161))
            .await
            .expect("stored")
            .contains(&"late".to_owned())
    );

    // The successor: honest proofs signed in the released horizon's second pass; the values the
    // first held in memory are refused by the database; the crashed process's floor holds.
    let second = Exclusive::new(db.storage.clone());
    assert!(
        second
            .remember_proof(proof_use("c", 161, 162))
            .await
            .expect("c")
    );
    assert!(
        !second
            .remember_proof(proof_use("a", 160, 162))
            .await
            .expect("a replayed")
    );
    assert!(refused(
        second.remember_proof(proof_use("b", 161, 162)).await
    ));
    assert!(refused(
        second.remember_proof(proof_use("old", 90, 140)).await
    ));

    // A crash of the successor: its own horizon is not released, so a third refuses below it.
    drop(second);
    let third = Exclusive::new(db.storage.clone());
    assert!(undecided(
        third.remember_proof(proof_use("d", 162, 163)).await
    ));
    db.finish().await;
}

#[tokio::test]
async fn sqlite_in_memory_is_one_shared_database() {
    let s = SqlStorage::connect("sqlite::memory:")
        .await
        .expect("connect");
    assert_eq!(s.backend(), Backend::Sqlite);
    let c = credential(&jwk(), "t", 0, None);
    let mut tx = s.begin().await.expect("begin");
    tx.put_credential(&c).await.expect("put");
    tx.commit().await.expect("commit");
    let mut tx = s.read().await.expect("read");
    assert_eq!(tx.list_credentials().await.expect("list"), vec![c]);
    drop(tx);
    s.ping().await.expect("ping");
    assert!(
        s.remember_once("a", "b", at(1), at(0))
            .await
            .expect("remember")
    );
    assert!(
        !s.remember_once("a", "b", at(1), at(0))
            .await
            .expect("replay")
    );
}

#[tokio::test]
async fn unreachable_postgres_is_unavailable_quickly() {
    let started = std::time::Instant::now();
    let err = SqlStorage::connect("postgres://cs:hunter2@127.0.0.1:1/broker")
        .await
        .expect_err("nothing listens on port 1");
    assert!(matches!(err, StorageError::Unavailable(_)), "{err:?}");
    assert!(!err.to_string().contains("hunter2"), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn unsupported_urls_are_refused() {
    let err = SqlStorage::connect("mysql://u:secret@h/db")
        .await
        .expect_err("mysql is not supported");
    assert!(matches!(err, StorageError::Other(_)), "{err:?}");
    assert!(!err.to_string().contains("secret"), "{err}");
}

#[test]
fn database_urls_are_rewritten() {
    assert_eq!(
        with_database("postgres://u:p@127.0.0.1:5432/postgres", "cs_test_1"),
        "postgres://u:p@127.0.0.1:5432/cs_test_1"
    );
    assert_eq!(
        with_database("postgres://u:p@h/postgres?sslmode=disable", "x"),
        "postgres://u:p@h/x?sslmode=disable"
    );
    assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
    assert_eq!(password_of("postgres://u:p@h/x").as_deref(), Some("p"));
    assert_eq!(password_of("sqlite:///tmp/x.db"), None);
}

/// Releasing values looks up the entries that end a grant or session by subject: the query
/// states the partial index's condition as written, so both planners use the index (a drift
/// between the two would make every release scan the whole log).
async fn the_ends_lookup_uses_its_partial_index(db: &TestDb) {
    let mut raw = db.raw().await;
    let query = format!(
        "SELECT position FROM audit_log WHERE subject = 'grant:x' AND {}",
        countersign_broker_sql::AUDIT_ENDS
    );
    let plan: Vec<String> = match db.backend() {
        Backend::Sqlite => sqlx::query(&format!("EXPLAIN QUERY PLAN {query}"))
            .fetch_all(&mut raw)
            .await
            .expect("plan")
            .iter()
            .map(|r| sqlx::Row::try_get::<String, _>(r, "detail").expect("detail"))
            .collect(),
        Backend::Postgres => {
            // An empty table is scanned whatever its indexes: ask for the index's plan.
            sqlx::query("SET enable_seqscan = off")
                .execute(&mut raw)
                .await
                .expect("set");
            sqlx::query(&format!("EXPLAIN {query}"))
                .fetch_all(&mut raw)
                .await
                .expect("plan")
                .iter()
                .map(|r| sqlx::Row::try_get::<String, _>(r, 0).expect("line"))
                .collect()
        }
    };
    assert!(
        plan.iter().any(|l| l.contains("audit_log_ends")),
        "the lookup does not use the ends index: {plan:?}"
    );
    raw.close().await.expect("close");
}
