//! How many round trips PostgreSQL's write transactions take (issue 50), counted by the storage
//! ([`SqlStorage::round_trips`]: every statement a write sends, `BEGIN` and `COMMIT` included),
//! for the calls the core's three hot writes make, in the core's order, through the core's own
//! decorator ([`Guarded`]: seals, and the audit log appended at commit):
//!
//! - an automatic secret request (`Broker::create_request`): the enrollment and its pending
//!   requests, then the grant and the request; the decision's audit entry at commit;
//! - a release's audit entry (`Broker::release_values`);
//! - a denial (`Broker::deny`) and an approval (`Broker::approve`): the decision's rows
//!   prefetched, the session's locks, the record, the request, then the request and the record
//!   (and the grant) written; their entries at commit.
//!
//! And what holding the writes back must keep: a read in the transaction sees its own writes,
//! two writes of one row commit the last, the chain is whole. Then the group commit
//! (`group.rs`): writes waiting for their turn share one physical transaction, and a member
//! that fails takes its batch with it.

#[path = "support/cluster.rs"]
mod cluster;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use chrono::Utc;
use countersign_broker_core::audit::{self, AuditEvent, Follower};
use countersign_broker_core::broker::guard::Guarded;
use countersign_broker_core::clock::SystemClock;
use countersign_broker_core::ids::{
    Approver, CredentialId, EnrollmentId, GrantId, Login, RecordId, RequestId, SecretName,
};
use countersign_broker_core::model::{
    DecisionBy, Enrollment, EnrollmentKind, Grant, GrantedBy, Record, RecordDecision, RecordKind,
    RecordState, RecordText, Request, RequestState, SessionIds,
};
use countersign_broker_core::policy::SecretDecision;
use countersign_broker_core::seal::Sealer;
use countersign_broker_core::storage::{Storage, StorageError, Tx};
use countersign_broker_sql::SqlStorage;
use countersign_proto::SigningKey;
use uuid::Uuid;
use zeroize::Zeroizing;

fn name(s: &str) -> SecretName {
    SecretName::parse(s).expect("name")
}

fn enrollment() -> Enrollment {
    let now = Utc::now();
    Enrollment {
        id: EnrollmentId(Uuid::new_v4()),
        credential_id: CredentialId(Uuid::new_v4()),
        kind: EnrollmentKind::Session,
        runtime_id: "claude-1".into(),
        slot: None,
        operator: Some(Login::parse("ada@example.com").expect("login")),
        thumbprint: "session-thumb".into(),
        jwk: SigningKey::generate().expect("key").public_jwk(),
        session_id: None,
        lease_expires_at: now + chrono::Duration::hours(1),
        created_at: now,
        ended: None,
        pod_token_seen: true,
        pod_account: None,
        withheld: BTreeSet::new(),
        seal: String::new(),
    }
}

fn request(e: EnrollmentId, state: RequestState) -> Request {
    Request {
        id: RequestId(Uuid::new_v4()),
        enrollment_id: e,
        state,
        secrets: vec![(name("NPM_TOKEN"), SecretDecision::Automatic)],
        grant_id: None,
        record_id: None,
        approver: None,
        lifetime_seconds: Some(600),
        session_id: None,
        stated_id: None,
        reason: "deploy".into(),
        created_at: Utc::now(),
        decided_at: None,
        decision: None,
        expires_at: None,
    }
}

fn grant(r: &Request) -> Grant {
    Grant {
        id: GrantId(Uuid::new_v4()),
        request_id: r.id,
        enrollment_id: r.enrollment_id,
        names: vec![name("NPM_TOKEN")],
        granted: GrantedBy::Automatic,
        record_id: None,
        approver: None,
        expires_at: Some(Utc::now() + chrono::Duration::minutes(10)),
        created_at: Utc::now(),
        rules_version: "rules-1".into(),
        end: None,
        seal: "grant-seal".into(),
        decision_seal: None,
    }
}

fn record(r: &Request) -> Record {
    let body = RecordText {
        version: 1,
        kind: RecordKind::AgentSecret,
        approver: Approver::Anyone,
        enrollment: None,
        session: SessionIds {
            request: None,
            enrollment: None,
        },
        identifiers: vec![],
        service: None,
        reason: "deploy".into(),
        lifetime_seconds: Some(600),
        rules_version: "rules-1".into(),
        expires_at: Utc::now() + chrono::Duration::minutes(5),
        requested_at: Utc::now(),
        enrollment_id: Some(r.enrollment_id),
        request_id: Some(r.id),
        thumbprint: None,
        jwk: None,
        nonce: Uuid::new_v4().to_string(),
    };
    let text = body.canonical();
    Record {
        id: RecordId::of_text(&text),
        text,
        body,
        state: RecordState::Pending,
        decided: None,
        code: None,
    }
}

/// A pending request of `e` and its record, stored.
async fn awaiting_decision(guarded: &Guarded, e: EnrollmentId) -> (Request, Record) {
    let mut r = request(e, RequestState::Pending);
    let rec = record(&r);
    r.record_id = Some(rec.id);
    let mut tx = guarded.begin().await.expect("begin");
    tx.put_request(&r).await.expect("put");
    tx.put_record(&rec).await.expect("put");
    tx.commit().await.expect("commit");
    (r, rec)
}

/// Ada's decision `event`, now.
fn decided(event: RecordState) -> RecordDecision {
    RecordDecision {
        event,
        at: Utc::now(),
        by: "ada@example.com".into(),
        credential_id: None,
        countersignature: None,
        seal: "seal".into(),
    }
}

/// What a decision reads, in the core's order: its rows prefetched, the session's locks, the
/// record, then the request and enrollment again as it settles the record.
async fn decision_reads(tx: &mut dyn Tx, e: EnrollmentId, r: RequestId, rec: &RecordId) {
    tx.prefetch_decision(Some((e, r)), rec)
        .await
        .expect("prefetch");
    tx.get_enrollment(e).await.expect("lock");
    tx.get_request(r).await.expect("lock");
    tx.get_record(rec).await.expect("record");
    tx.get_request(r).await.expect("settle");
    tx.get_enrollment(e).await.expect("settle");
}

/// A storage on a new database of the test server (`None` when no server is configured), with
/// what [`cluster::drop_database`] needs to remove it.
async fn fresh_storage(prefix: &str) -> Option<(String, String, SqlStorage)> {
    let admin = cluster::test_server()?;
    let db = format!("{prefix}_{}", Uuid::new_v4().simple());
    cluster::create_database(&admin, &db).await;
    let url = match admin.rsplit_once('/') {
        Some((base, _)) => format!("{base}/{db}"),
        None => panic!("the test URL names a database"),
    };
    let storage = SqlStorage::connect(&url).await.expect("connect");
    Some((admin, db, storage))
}

/// The round trips `body`'s transaction takes, commit included.
macro_rules! counted {
    ($storage:expr, $guarded:expr, |$tx:ident| $body:expr) => {{
        let before = $storage.round_trips();
        let mut $tx = $guarded.begin().await.expect("begin");
        $body;
        $tx.commit().await.expect("commit");
        $storage.round_trips() - before
    }};
}

#[tokio::test]
async fn hot_writes_take_few_round_trips() {
    let Some((admin, db, storage)) = fresh_storage("cs_trips").await else {
        return;
    };
    let key = Zeroizing::new(vec![7u8; 32]);
    let sealer = Sealer::new(&key).expect("sealer");
    let guarded = Guarded::new(
        Arc::new(storage.clone()),
        sealer.clone(),
        Arc::new(SystemClock),
        Arc::new(Follower::new(None)),
        Arc::new(AtomicBool::new(false)),
    );

    let e = enrollment();
    let _ = counted!(storage, guarded, |tx| tx
        .put_enrollment(&e)
        .await
        .expect("put"));
    let other = request(e.id, RequestState::Pending);
    let _ = counted!(storage, guarded, |tx| tx
        .put_request(&other)
        .await
        .expect("put"));

    // An automatic request: the opening (BEGIN, the audit log's lock and head) with the
    // enrollment and its pending requests; the grant + request + entry; COMMIT.
    let mut r = request(e.id, RequestState::Pending);
    let g = grant(&r);
    let trips = counted!(storage, guarded, |tx| {
        let (found, pending) = tx.enrollment_with_pending(e.id).await.expect("read");
        assert_eq!(found.map(|f| f.id), Some(e.id), "the sealed enrollment");
        assert_eq!(pending.iter().map(|p| p.id).collect::<Vec<_>>(), [other.id]);
        tx.put_grant(&g).await.expect("grant");
        r.state = RequestState::Granted;
        r.grant_id = Some(g.id);
        r.decided_at = Some(Utc::now());
        tx.put_request(&r).await.expect("request");
    });
    println!("automatic request: {trips} round trips");
    assert_eq!(trips, 3, "an automatic request's round trips");

    // A release's entry: the opening, the entry, COMMIT.
    let event = AuditEvent {
        kind: "release",
        subject: format!("grant:{}", g.id),
        body: "{}".into(),
    };
    let trips = counted!(storage, guarded, |tx| {
        audit::append(&mut *tx, &sealer, Utc::now(), std::slice::from_ref(&event))
            .await
            .expect("append");
    });
    println!("release: {trips} round trips");
    assert_eq!(trips, 3, "a release's round trips");

    // A denial, as `Broker::deny` reads and writes: the opening with its rows (prefetched in
    // its lock order; the core's reads of them answered from what was read); the request +
    // record + entries; COMMIT.
    let (mut pending, mut rec) = awaiting_decision(&guarded, e.id).await;
    let trips = counted!(storage, guarded, |tx| {
        decision_reads(&mut *tx, e.id, pending.id, &rec.id).await;
        tx.get_request(pending.id).await.expect("request");
        pending.state = RequestState::Denied;
        pending.decided_at = Some(Utc::now());
        pending.decision = Some(DecisionBy {
            by: "ada@example.com".into(),
            at: Utc::now(),
        });
        tx.put_request(&pending).await.expect("request");
        rec.state = RecordState::Denied;
        rec.decided = Some(decided(RecordState::Denied));
        tx.put_record(&rec).await.expect("record");
    });
    println!("denial: {trips} round trips");
    assert_eq!(trips, 3, "a denial's round trips");

    // An approval, as `Broker::approve` reads and writes: as the denial, with the grant.
    let (mut asked, mut approved) = awaiting_decision(&guarded, e.id).await;
    let trips = counted!(storage, guarded, |tx| {
        decision_reads(&mut *tx, e.id, asked.id, &approved.id).await;
        approved.state = RecordState::Approved;
        approved.decided = Some(decided(RecordState::Approved));
        tx.put_record(&approved).await.expect("record");
        let g = grant(&asked);
        tx.put_grant(&g).await.expect("grant");
        asked.state = RequestState::Granted;
        asked.grant_id = Some(g.id);
        asked.decided_at = Some(Utc::now());
        tx.put_request(&asked).await.expect("request");
    });
    println!("approval: {trips} round trips");
    assert_eq!(trips, 3, "an approval's round trips");

    // Held back, still read back in the transaction; two writes of a row commit the last.
    let mut twice = request(e.id, RequestState::Pending);
    let _ = counted!(storage, guarded, |tx| {
        tx.put_request(&twice).await.expect("first");
        let read = tx.get_request(twice.id).await.expect("read");
        assert_eq!(
            read.map(|x| x.state),
            Some(RequestState::Pending),
            "its own write"
        );
        twice.state = RequestState::Cancelled;
        tx.put_request(&twice).await.expect("second");
        twice.reason = "the last".into();
        tx.put_request(&twice).await.expect("third");
    });
    let mut tx = storage.read().await.expect("read");
    let stored = tx
        .get_request(twice.id)
        .await
        .expect("get")
        .expect("stored");
    assert_eq!(
        (stored.state, stored.reason.as_str()),
        (RequestState::Cancelled, "the last")
    );
    let stored = tx.get_grant(g.id).await.expect("get");
    assert_eq!(stored.map(|x| x.id), Some(g.id));
    drop(tx);

    // The chain the held-back entries made is whole and sealed.
    let mut tx = storage.read().await.expect("read");
    let walk = audit::verify_all(&mut *tx, &sealer)
        .await
        .expect("walk")
        .expect("an unbroken chain");
    // The automatic request's two (grant, decision), the release's, the denial's two (request,
    // record), the approval's three (record, grant, request), the cancellation's.
    assert_eq!(walk.position, 9, "every entry, in one unbroken chain");
    drop(tx);

    storage.close().await;
    cluster::drop_database(&admin, &db).await;
}

/// Write transactions that wait for their turn while one runs join its physical transaction:
/// one opening and one `COMMIT` for all of them (`group.rs`), where each alone takes three
/// round trips; and every one of them is committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn waiting_writes_share_one_physical_transaction() {
    let Some((admin, db, storage)) = fresh_storage("cs_group").await else {
        return;
    };
    let e = enrollment();
    let mut tx = storage.begin().await.expect("begin");
    tx.put_enrollment(&e).await.expect("put");
    tx.commit().await.expect("commit");

    const N: usize = 16;
    let before = storage.round_trips();
    let mut first = storage.begin().await.expect("begin");
    let head = request(e.id, RequestState::Pending);
    first.put_request(&head).await.expect("put");
    let mut tasks = tokio::task::JoinSet::new();
    let mut ids = vec![head.id];
    for _ in 1..N {
        let r = request(e.id, RequestState::Pending);
        ids.push(r.id);
        let s = storage.clone();
        tasks.spawn(async move {
            let mut tx = s.begin().await.expect("begin");
            tx.put_request(&r).await.expect("put");
            tx.commit().await.expect("commit");
        });
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while storage.writers_waiting().await.expect("waiting") < N - 1 {
        assert!(std::time::Instant::now() < deadline, "the writers queue");
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    first.commit().await.expect("commit");
    while let Some(done) = tasks.join_next().await {
        done.expect("task");
    }
    let trips = storage.round_trips() - before;
    println!("{N} waiting writes: {trips} round trips");
    // The opening, each one's write, and at most two COMMITs (the first's flusher may commit
    // before the others join).
    assert!(
        trips <= N as u64 + 3,
        "{trips} round trips for {N} writes: they did not share a physical transaction"
    );
    let mut tx = storage.read().await.expect("read");
    for id in ids {
        assert!(
            tx.get_request(id).await.expect("get").is_some(),
            "committed"
        );
    }
    drop(tx);
    storage.close().await;
    cluster::drop_database(&admin, &db).await;
}

/// A member whose statement fails loses its physical transaction: the member before it, which
/// committed into the same batch, hears `Conflict` (the core runs it again) and nothing of the
/// batch is stored; the next write opens a new physical transaction and commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_member_runs_its_batch_again() {
    let Some((admin, db, storage)) = fresh_storage("cs_group").await else {
        return;
    };
    let e = enrollment();
    let kept = request(e.id, RequestState::Pending);

    let mut first = storage.begin().await.expect("begin");
    first.put_enrollment(&e).await.expect("put");
    let s = storage.clone();
    let failing = tokio::spawn(async move {
        let mut tx = s.begin().await.expect("begin");
        let item = countersign_broker_core::storage::OutboxItem {
            topic: "notification".into(),
            id: "twice".into(),
            payload: "{}".into(),
            attempts: 0,
            next_attempt_at: Utc::now(),
        };
        tx.push_outbox(&item).await.expect("push");
        tx.push_outbox(&item)
            .await
            .expect_err("a duplicate outbox id fails");
    });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while storage.writers_waiting().await.expect("waiting") < 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "the second writer queues"
        );
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
    assert_eq!(
        first.commit().await,
        Err(StorageError::Conflict),
        "the batch was lost with the failing member"
    );
    failing.await.expect("task");
    let mut tx = storage.read().await.expect("read");
    assert_eq!(tx.get_enrollment(e.id).await.expect("get"), None);
    drop(tx);

    let mut tx = storage.begin().await.expect("begin");
    tx.put_enrollment(&e).await.expect("put");
    tx.put_request(&kept).await.expect("put");
    tx.commit()
        .await
        .expect("a new physical transaction commits");
    let mut tx = storage.read().await.expect("read");
    assert!(tx.get_enrollment(e.id).await.expect("get").is_some());
    assert!(tx.get_request(kept.id).await.expect("get").is_some());
    drop(tx);
    storage.close().await;
    cluster::drop_database(&admin, &db).await;
}
