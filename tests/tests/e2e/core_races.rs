//! Race tests of the broker's domain core on real storage: many concurrent deciders on one
//! record, concurrent identical requests from one session, and concurrent approvals of machine
//! logins with the same key. SQLite always (bare, and behind the broker's in-memory cache);
//! PostgreSQL when `COUNTERSIGN_TEST_POSTGRES_URL` is set.
//!
//! Callers authenticate before the start line (as the HTTP layer does before a route runs), so
//! that the clock moved by an expiring contender does not skew their proofs.

use std::collections::BTreeMap;
use std::sync::Arc;

use chrono::Duration;
use countersign_broker_core::error::ErrorCode;
use countersign_broker_core::ids::{Login, RecordId, RequestId};
use countersign_broker_core::model::{Enrollment, RecordState, RequestState};
use countersign_broker_core::policy::Tier;
use countersign_e2e::core::{CoreFixture, Session, login};
use countersign_proto::SigningKey;
use tokio::sync::Barrier;

const ADA: &str = "ada@x.test";
const BOB: &str = "bob@x.test";
const CY: &str = "cy@x.test";

/// A pending request waits this long: shorter than the 15-minute lease, so that an expiry
/// contender expires the request rather than lapsing its session.
const REQUEST_TTL_MINUTES: i64 = 5;

async fn sqlite() -> Arc<CoreFixture> {
    Arc::new(
        CoreFixture::sqlite_with(|c| c.request_ttl = Duration::minutes(REQUEST_TTL_MINUTES)).await,
    )
}

async fn sqlite_exclusive() -> Arc<CoreFixture> {
    Arc::new(
        CoreFixture::sqlite_exclusive_with(|c| {
            c.request_ttl = Duration::minutes(REQUEST_TTL_MINUTES)
        })
        .await,
    )
}

async fn postgres() -> Option<Arc<CoreFixture>> {
    CoreFixture::postgres_with(|c| c.request_ttl = Duration::minutes(REQUEST_TTL_MINUTES))
        .await
        .map(Arc::new)
}

async fn finish(fx: Arc<CoreFixture>) {
    match Arc::try_unwrap(fx) {
        Ok(fx) => fx.finish().await,
        Err(_) => panic!("a task still holds the fixture"),
    }
}

async fn secrets(fx: &CoreFixture) {
    fx.store.put("SHARED_A", CY, Tier::Shared, "shared-value");
    fx.store.put("OWN_A", ADA, Tier::Owner, "own-value");
    fx.reload().await;
}

// ---------------------------------------------------------------------------------------------
// Deciders on one record
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Contender {
    Approve(Login),
    Deny(Login),
    Cancel,
    /// Moves the clock past the record's expiry and sweeps.
    Expire,
    /// The session's launcher ends the enrollment.
    Unenroll,
    /// The approver revokes the machine login, ending its sessions.
    RevokeMachine,
}

#[derive(Debug)]
enum Outcome {
    Approved,
    Denied,
    Cancelled,
    /// Expire, Unenroll, RevokeMachine: they always succeed; whether they won is read from
    /// the final state.
    Done,
}

/// The round's contenders: always two approvers, two deniers and the session's cancel, and
/// three more drawn from every kind by the round number.
fn contenders(round: usize, deciders: [&Login; 3]) -> Vec<Contender> {
    let [a, b, c] = deciders;
    let mut v = vec![
        Contender::Approve(a.clone()),
        Contender::Approve(b.clone()),
        Contender::Deny(c.clone()),
        Contender::Deny(a.clone()),
        Contender::Cancel,
    ];
    let extra = [
        Contender::Expire,
        Contender::Unenroll,
        Contender::Approve(c.clone()),
        Contender::RevokeMachine,
        Contender::Deny(b.clone()),
        Contender::Cancel,
    ];
    for i in 0..3 {
        v.push(extra[(round * 5 + i * 2) % extra.len()].clone());
    }
    // Vary who starts first.
    v.rotate_left(round % 8);
    v
}

async fn deciders_race(fx: Arc<CoreFixture>, rounds: usize) {
    secrets(&fx).await;
    let (ada, bob, cy) = (login(ADA), login(BOB), login(CY));
    let mut wins: BTreeMap<&'static str, usize> = BTreeMap::new();
    for round in 0..rounds {
        // Even rounds: a shared secret anyone decides; odd rounds: an owner's, decided by the
        // owner from several consoles at once.
        let (secret, deciders) = if round % 2 == 0 {
            ("SHARED_A", [&ada, &bob, &cy])
        } else {
            ("OWN_A", [&ada, &ada, &ada])
        };
        let machine = fx.machine_login(&ada, &format!("host-{round}")).await;
        let session = fx
            .enroll(&machine, &format!("rt-{round}"))
            .await
            .expect("enroll");
        let created = fx
            .request(&session, &[secret], None)
            .await
            .expect("request");
        assert_eq!(created.request.state, RequestState::Pending);
        let request_id = created.request.id;
        let record_id = created.request.record_id.expect("record");
        let expires_at = created.request.expires_at.expect("expiry");
        // Authenticated before the start line.
        let caller = fx
            .authenticate(
                &session,
                "POST",
                &format!("/v1/requests/{request_id}/cancel"),
            )
            .await
            .expect("session proof");
        let launcher = fx
            .launcher(
                &machine,
                "DELETE",
                &format!("/v1/enrollments/{}", session.id),
            )
            .await
            .expect("launcher proof");

        let lineup = contenders(round, deciders);
        let barrier = Arc::new(Barrier::new(lineup.len()));
        let mut tasks = Vec::new();
        for c in lineup.clone() {
            let (fx, barrier, caller, launcher) = (
                fx.clone(),
                barrier.clone(),
                caller.clone(),
                launcher.clone(),
            );
            let session_id = session.id;
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let r = match &c {
                    Contender::Approve(who) => fx.approve(&record_id, who).await.map(|a| {
                        assert!(a.grant_id.is_some(), "an approval makes a grant");
                        Outcome::Approved
                    }),
                    Contender::Deny(who) => fx.deny(&record_id, who).await.map(|s| {
                        assert_eq!(s, "denied");
                        Outcome::Denied
                    }),
                    Contender::Cancel => fx
                        .broker
                        .cancel_own_request(&caller, request_id)
                        .await
                        .map(|s| {
                            assert_eq!(s, RequestState::Cancelled);
                            Outcome::Cancelled
                        }),
                    Contender::Expire => {
                        let past = expires_at + Duration::seconds(1);
                        if fx.now() < past {
                            fx.set_time(past);
                        }
                        fx.sweep().await;
                        Ok(Outcome::Done)
                    }
                    Contender::Unenroll => fx
                        .broker
                        .unenroll(&launcher, session_id)
                        .await
                        .map(|()| Outcome::Done),
                    Contender::RevokeMachine => fx
                        .revoke_machine_by_approver(&login(ADA), launcher.id)
                        .await
                        .map(|_| Outcome::Done),
                };
                (c, r)
            }));
        }
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.expect("task"));
        }
        let winner = judge(&fx, round, &session, request_id, &record_id, &results).await;
        *wins.entry(winner).or_default() += 1;
    }
    println!("{rounds} rounds; winners: {wins:?}");
}

/// Checks one round: exactly one winner, every loser refused with the spec's code, and the
/// request, the record and the grant agree. Answers the winner's kind.
async fn judge(
    fx: &CoreFixture,
    round: usize,
    session: &Session,
    request_id: RequestId,
    record_id: &RecordId,
    results: &[(Contender, Result<Outcome, countersign_broker_core::Error>)],
) -> &'static str {
    let ctx = format!("round {round}: {results:?}");
    let mut decided = Vec::new();
    for (c, r) in results {
        match (c, r) {
            (Contender::Approve(_) | Contender::Deny(_), Err(e)) => {
                assert_eq!(
                    e.code,
                    ErrorCode::RECORD_TERMINAL,
                    "a losing decider: {ctx}"
                );
            }
            (Contender::Cancel, Err(e)) => {
                assert_eq!(
                    e.code,
                    ErrorCode::REQUEST_TERMINAL,
                    "a losing cancel: {ctx}"
                );
            }
            (Contender::Expire | Contender::Unenroll | Contender::RevokeMachine, Err(e)) => {
                panic!("{c:?} failed with {e:?}: {ctx}");
            }
            (_, Ok(Outcome::Done)) => {}
            (_, Ok(o)) => decided.push(o),
        }
    }
    let e: Enrollment = fx.caller(session).await;
    let request = fx
        .broker
        .get_request(&e, request_id)
        .await
        .expect("read request");
    let record = fx.record(record_id).await.expect("read record");
    let grants: Vec<_> = fx
        .stored_grants_of(session.id)
        .await
        .into_iter()
        .filter(|g| g.request_id == request_id)
        .collect();
    let by = request.decision.as_ref().map(|d| d.by.clone());
    let record_by = record.decided.as_ref().map(|d| d.by.clone());
    let winner = match (request.state, record.state) {
        (RequestState::Granted, RecordState::Approved) => {
            assert!(
                matches!(decided.as_slice(), [Outcome::Approved]),
                "one approval: {ctx}"
            );
            assert_eq!(grants.len(), 1, "one grant: {ctx}");
            assert_eq!(request.grant_id, Some(grants[0].id), "{ctx}");
            assert_eq!(grants[0].record_id, Some(*record_id), "{ctx}");
            "approve"
        }
        (RequestState::Denied, RecordState::Denied) => {
            assert!(
                matches!(decided.as_slice(), [Outcome::Denied]),
                "one denial: {ctx}"
            );
            "deny"
        }
        (RequestState::Cancelled, RecordState::Cancelled)
            if by.as_deref() == Some(format!("session:{}", session.id).as_str()) =>
        {
            assert!(
                matches!(decided.as_slice(), [Outcome::Cancelled]),
                "one cancel: {ctx}"
            );
            "cancel"
        }
        (RequestState::Cancelled, RecordState::Cancelled) => {
            assert!(
                decided.is_empty(),
                "a decider won after the session ended: {ctx}"
            );
            assert_eq!(
                by.as_deref(),
                Some(format!("launcher:{}", session.credential_id).as_str()),
                "{ctx}"
            );
            assert!(
                results
                    .iter()
                    .any(|(c, _)| matches!(c, Contender::Unenroll | Contender::RevokeMachine)),
                "{ctx}"
            );
            "session end"
        }
        (RequestState::Expired, RecordState::Expired) => {
            assert!(decided.is_empty(), "a decider won after expiry: {ctx}");
            assert!(request.decision.is_none(), "{ctx}");
            assert!(
                results.iter().any(|(c, _)| matches!(c, Contender::Expire)),
                "{ctx}"
            );
            "expiry"
        }
        (r, rec) => panic!("request {r:?} and record {rec:?} disagree: {ctx}"),
    };
    if winner != "approve" {
        assert!(grants.is_empty(), "a grant without an approval: {ctx}");
        assert!(request.grant_id.is_none(), "{ctx}");
    }
    if winner != "expiry" {
        assert_eq!(
            by, record_by,
            "request and record name the same decider: {ctx}"
        );
    }
    if !e.is_live(fx.now()) {
        assert!(
            fx.broker.own_grants(&e).await.expect("grants").is_empty(),
            "a live grant on an ended session: {ctx}"
        );
    }
    winner
}

// ---------------------------------------------------------------------------------------------
// Identical requests from one session
// ---------------------------------------------------------------------------------------------

async fn identical_requests_race(fx: Arc<CoreFixture>, rounds: usize) {
    secrets(&fx).await;
    let ada = login(ADA);
    let machine = fx.machine_login(&ada, "host").await;
    for round in 0..rounds {
        let session = fx
            .enroll(&machine, &format!("rt-{round}"))
            .await
            .expect("enroll");
        let caller = fx.caller(&session).await;
        // Four identical requests; on odd rounds two more for the same secret with another
        // lifetime (not identical: REQUEST_PENDING unless first).
        let mut objects = Vec::new();
        for _ in 0..4 {
            objects.push((fx.sign_request(&session, &["OWN_A"], None), true));
        }
        if round % 2 == 1 {
            for _ in 0..2 {
                objects.push((fx.sign_request(&session, &["OWN_A"], Some(600)), false));
            }
        }
        let barrier = Arc::new(Barrier::new(objects.len()));
        let mut tasks = Vec::new();
        for (token, plain) in objects {
            let (fx, barrier, caller) = (fx.clone(), barrier.clone(), caller.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                (plain, fx.broker.create_request(&caller, &token, None).await)
            }));
        }
        let mut created: BTreeMap<RequestId, (bool, usize)> = BTreeMap::new();
        let mut refused = Vec::new();
        for t in tasks {
            let (plain, r) = t.await.expect("task");
            match r {
                Ok(c) => {
                    assert_eq!(c.request.state, RequestState::Pending);
                    let entry = created.entry(c.request.id).or_insert((plain, 0));
                    assert_eq!(entry.0, plain, "joined a request with another lifetime");
                    if !c.coalesced {
                        entry.1 += 1;
                    }
                }
                Err(e) => {
                    assert_eq!(e.code, ErrorCode::REQUEST_PENDING, "round {round}");
                    refused.push(plain);
                }
            }
        }
        assert_eq!(
            created.len(),
            1,
            "round {round}: one pending request, got {created:?}"
        );
        let (_, (made_plain, makers)) = created.iter().next().expect("one");
        assert_eq!(
            *makers, 1,
            "round {round}: exactly one request is made, others join"
        );
        // Refused: exactly those with the other lifetime.
        assert!(
            refused.iter().all(|p| p != made_plain),
            "round {round}: an identical request was refused"
        );
        // Never two pending requests (or records) for the same secret.
        let records: Vec<_> = fx
            .pending_for(&ada)
            .await
            .into_iter()
            .filter(|r| r.body.enrollment_id == Some(session.id))
            .collect();
        assert_eq!(
            records.len(),
            1,
            "round {round}: pending records {records:?}"
        );
        fx.unenroll(&machine, &session).await.expect("unenroll");
    }
}

// ---------------------------------------------------------------------------------------------
// Machine-login approvals with the same key
// ---------------------------------------------------------------------------------------------

async fn same_key_logins_race(fx: Arc<CoreFixture>, rounds: usize) {
    let ada = login(ADA);
    for round in 0..rounds {
        let key = Arc::new(SigningKey::generate().expect("key"));
        let mut pendings = Vec::new();
        for i in 0..4 {
            pendings.push(
                fx.start_machine_login_with(key.clone(), &ada, &format!("host-{round}-{i}"))
                    .await
                    .expect("start machine login"),
            );
        }
        let barrier = Arc::new(Barrier::new(pendings.len()));
        let mut tasks = Vec::new();
        for p in pendings {
            let (fx, barrier, ada) = (fx.clone(), barrier.clone(), ada.clone());
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                fx.approve_machine_login(&p, &ada).await
            }));
        }
        let mut minted = 0;
        for t in tasks {
            match t.await.expect("task") {
                Ok(_) => minted += 1,
                Err(e) => assert_eq!(
                    e.code,
                    ErrorCode::KEY_HOLDS_LIVE_CREDENTIAL,
                    "round {round}: a losing approval"
                ),
            }
        }
        let now = fx.now();
        let live = fx
            .credentials_by_thumbprint(&key.thumbprint())
            .await
            .into_iter()
            .filter(|c| c.is_live(now))
            .count();
        assert_eq!(
            minted, 1,
            "round {round}: approvals minted {minted} credentials"
        );
        assert_eq!(
            live, 1,
            "round {round}: {live} live credentials for one key"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deciders_on_one_record_sqlite() {
    let fx = sqlite().await;
    deciders_race(fx.clone(), 50).await;
    finish(fx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deciders_on_one_record_postgres() {
    let Some(fx) = postgres().await else { return };
    deciders_race(fx.clone(), 30).await;
    finish(fx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identical_requests_sqlite() {
    let fx = sqlite().await;
    identical_requests_race(fx.clone(), 30).await;
    finish(fx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identical_requests_postgres() {
    let Some(fx) = postgres().await else { return };
    identical_requests_race(fx.clone(), 20).await;
    finish(fx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_key_machine_logins_sqlite() {
    let fx = sqlite().await;
    same_key_logins_race(fx.clone(), 30).await;
    finish(fx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_key_machine_logins_postgres() {
    let Some(fx) = postgres().await else { return };
    same_key_logins_race(fx.clone(), 20).await;
    finish(fx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deciders_on_one_record_sqlite_exclusive() {
    let fx = sqlite_exclusive().await;
    deciders_race(fx.clone(), 50).await;
    finish(fx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn identical_requests_sqlite_exclusive() {
    let fx = sqlite_exclusive().await;
    identical_requests_race(fx.clone(), 30).await;
    finish(fx).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn same_key_machine_logins_sqlite_exclusive() {
    let fx = sqlite_exclusive().await;
    same_key_logins_race(fx.clone(), 30).await;
    finish(fx).await;
}
