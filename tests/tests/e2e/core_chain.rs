//! GRANT_CHAIN_INVALID through the storage trait: rows written straight into the database (a
//! grant moved to another session, given an extra secret, another approver, a longer life, a
//! forged or borrowed seal), a record edited after its approval, and an owner or tier changed
//! in the store after the approval. Each tampered grant answers GRANT_CHAIN_INVALID at release;
//! the untouched grants beside them still release. SQLite always; PostgreSQL when
//! `COUNTERSIGN_TEST_POSTGRES_URL` is set.

use countersign_broker_core::Error;
use countersign_broker_core::error::ErrorCode;
use countersign_broker_core::ids::{GrantId, Login, RecordId, SecretName};
use countersign_broker_core::model::{Grant, GrantedBy, RequestState};
use countersign_broker_core::policy::Tier;
use countersign_e2e::core::{CoreFixture, Session, assert_code, login, secret};

const ADA: &str = "ada@x.test";
const BOB: &str = "bob@x.test";
const CY: &str = "cy@x.test";

/// A grant a person approved: its id and record.
async fn approved(fx: &CoreFixture, s: &Session, name: &str, who: &Login) -> (GrantId, RecordId) {
    let c = fx.request(s, &[name], None).await.expect("request");
    assert_eq!(
        c.request.state,
        RequestState::Pending,
        "{name} needs approval"
    );
    let record = c.request.record_id.expect("record");
    let a = fx.approve(&record, who).await.expect("approve");
    (a.grant_id.expect("grant"), record)
}

/// A grant policy made at once.
async fn automatic(fx: &CoreFixture, s: &Session, name: &str) -> GrantId {
    let c = fx.request(s, &[name], None).await.expect("request");
    assert_eq!(
        c.request.state,
        RequestState::Granted,
        "{name} is automatic"
    );
    c.request.grant_id.expect("grant")
}

#[track_caller]
fn releases(r: &Result<Vec<(String, String)>, Error>, name: &str, what: &str) {
    match r {
        Ok(v) => assert!(
            v.iter().any(|(n, _)| n == name),
            "{what}: {name} missing from {v:?}"
        ),
        Err(e) => panic!("{what}: expected values, got {e:?}"),
    }
}

fn broken(r: &Result<Vec<(String, String)>, Error>, what: &str) {
    assert_code(r, ErrorCode::GRANT_CHAIN_INVALID, what);
}

fn names(list: &[&str]) -> Vec<SecretName> {
    let mut v: Vec<SecretName> = list.iter().map(|n| secret(n)).collect();
    v.sort();
    v
}

async fn chain(fx: CoreFixture) {
    let (ada, bob) = (login(ADA), login(BOB));
    fx.store.put("OWN_A", ADA, Tier::Owner, "own-a");
    fx.store.put("OWN_B", BOB, Tier::Owner, "own-b");
    fx.store.put("AUTO_A", BOB, Tier::Automatic, "auto-a");
    fx.store.put("AUTO_B", BOB, Tier::Automatic, "auto-b");
    fx.store.put("SHARED_A", CY, Tier::Shared, "shared-a");
    fx.store.put("CONTROL", ADA, Tier::Owner, "control");
    fx.reload().await;
    let machine = fx.machine_login(&ada, "host").await;
    let s1 = fx.enroll(&machine, "rt-1").await.expect("enroll");
    let s2 = fx.enroll(&machine, "rt-2").await.expect("enroll");

    // The untouched control grant, checked after every tampering.
    let (control, _) = approved(&fx, &s1, "CONTROL", &ada).await;
    let control_ok = || async { releases(&fx.values(&s1, control).await, "CONTROL", "control") };
    control_ok().await;

    // 1. A grant moved to another session.
    let (g, _) = approved(&fx, &s1, "OWN_A", &ada).await;
    releases(&fx.values(&s1, g).await, "OWN_A", "before tampering");
    let mut row = fx.stored_grant(g).await.expect("grant");
    row.enrollment_id = s2.id;
    fx.write_grant(&row).await;
    broken(&fx.values(&s2, g).await, "grant moved to another session");
    assert_code(
        &fx.values(&s1, g).await,
        ErrorCode::NOT_YOURS,
        "the old holder",
    );
    control_ok().await;

    // 2. A grant given an extra secret.
    let (g, _) = approved(&fx, &s1, "OWN_A", &ada).await;
    let mut row = fx.stored_grant(g).await.expect("grant");
    row.names = names(&["OWN_A", "OWN_B"]);
    fx.write_grant(&row).await;
    broken(&fx.values(&s1, g).await, "grant with an extra secret");
    // Also on an automatic grant: an owner's secret slipped in.
    let ga = automatic(&fx, &s1, "AUTO_A").await;
    releases(&fx.values(&s1, ga).await, "AUTO_A", "automatic grant");
    let mut row = fx.stored_grant(ga).await.expect("grant");
    row.names = names(&["AUTO_A", "OWN_A"]);
    fx.write_grant(&row).await;
    broken(
        &fx.values(&s1, ga).await,
        "automatic grant with an owner's secret",
    );
    control_ok().await;

    // 3. A changed approver (the grant alone, then the grant and the record's decision).
    let (g, record) = approved(&fx, &s1, "SHARED_A", &bob).await;
    releases(&fx.values(&s1, g).await, "SHARED_A", "shared grant");
    let mut row = fx.stored_grant(g).await.expect("grant");
    row.approver = Some(ada.clone());
    fx.write_grant(&row).await;
    broken(&fx.values(&s1, g).await, "grant with another approver");
    let mut rec = fx.stored_record(&record).await.expect("record");
    let d = rec.decided.as_mut().expect("decided");
    d.by = ada.to_string();
    fx.write_record(&rec).await;
    broken(
        &fx.values(&s1, g).await,
        "record decision rewritten to match",
    );
    control_ok().await;

    // 4. A longer life: a grant for 60 s made to last until the session ends.
    let c = fx
        .request(&s1, &["OWN_B"], Some(60))
        .await
        .expect("request");
    let a = fx
        .approve(&c.request.record_id.expect("record"), &bob)
        .await
        .expect("approve");
    let g = a.grant_id.expect("grant");
    releases(&fx.values(&s1, g).await, "OWN_B", "short grant");
    let mut row = fx.stored_grant(g).await.expect("grant");
    assert!(row.expires_at.is_some());
    row.expires_at = None;
    fx.write_grant(&row).await;
    broken(&fx.values(&s1, g).await, "grant made to live longer");
    control_ok().await;

    // 5. Forged rows: a random seal, a seal borrowed from another grant, an approved grant
    //    pointing at another request's record, an automatic decision borrowed for an owner's
    //    secret.
    let (g, record) = approved(&fx, &s1, "OWN_A", &ada).await;
    let real = fx.stored_grant(g).await.expect("grant");
    let forged_id = || GrantId(uuid::Uuid::new_v4());
    let mut forged = real.clone();
    forged.id = forged_id();
    forged.seal = countersign_proto::b64::encode(&[7u8; 32]);
    fx.write_grant(&forged).await;
    broken(&fx.values(&s1, forged.id).await, "a row with a forged seal");
    let mut borrowed = real.clone();
    borrowed.id = forged_id();
    fx.write_grant(&borrowed).await;
    broken(
        &fx.values(&s1, borrowed.id).await,
        "a row with a borrowed seal",
    );
    let mut other = real.clone();
    other.id = forged_id();
    other.names = names(&["OWN_B"]);
    other.approver = Some(bob.clone());
    other.record_id = Some(record);
    fx.write_grant(&other).await;
    broken(
        &fx.values(&s1, other.id).await,
        "a row on another secret's record",
    );
    let fresh = automatic(&fx, &s1, "AUTO_A").await;
    let auto = fx.stored_grant(fresh).await.expect("automatic grant");
    assert_eq!(auto.granted, GrantedBy::Automatic);
    let lifted = Grant {
        id: forged_id(),
        names: names(&["OWN_A"]),
        ..auto
    };
    fx.write_grant(&lifted).await;
    broken(
        &fx.values(&s1, lifted.id).await,
        "an automatic decision borrowed",
    );
    // The real grant beside them still releases.
    releases(
        &fx.values(&s1, g).await,
        "OWN_A",
        "the real grant beside forged rows",
    );
    control_ok().await;

    // 6. A record edited after its approval: its reason, then its identifiers.
    let (g, record) = approved(&fx, &s1, "OWN_A", &ada).await;
    let original = fx.stored_record(&record).await.expect("record");
    let mut rec = original.clone();
    rec.body.reason = "a different reason".into();
    rec.text = rec.body.canonical();
    fx.write_record(&rec).await;
    broken(&fx.values(&s1, g).await, "record reason edited");
    let mut rec = original.clone();
    rec.body.identifiers.push("OWN_B".into());
    rec.text = rec.body.canonical();
    fx.write_record(&rec).await;
    broken(&fx.values(&s1, g).await, "record identifiers edited");
    // Put back exactly as it was: the chain holds again.
    fx.write_record(&original).await;
    releases(&fx.values(&s1, g).await, "OWN_A", "record restored");
    control_ok().await;

    // 7. An owner changed in the store after the approval (reload), then changed back.
    let (g, _) = approved(&fx, &s2, "OWN_A", &ada).await;
    releases(
        &fx.values(&s2, g).await,
        "OWN_A",
        "before the owner changes",
    );
    assert!(fx.store.update("OWN_A", Some(BOB), None, None));
    fx.reload().await;
    broken(
        &fx.values(&s2, g).await,
        "owner changed after approval (reload)",
    );
    assert!(fx.store.update("OWN_A", Some(ADA), None, None));
    fx.reload().await;
    releases(&fx.values(&s2, g).await, "OWN_A", "owner changed back");
    control_ok().await;

    // 8. Tier changes seen by a reread: a shared secret now an owner's (the approver is not
    //    its owner), an automatic one now an owner's.
    let (gs, _) = approved(&fx, &s2, "SHARED_A", &bob).await;
    let gauto = automatic(&fx, &s2, "AUTO_B").await;
    releases(&fx.values(&s2, gs).await, "SHARED_A", "shared before");
    releases(&fx.values(&s2, gauto).await, "AUTO_B", "automatic before");
    assert!(fx.store.update("SHARED_A", None, Some(Tier::Owner), None));
    assert!(fx.store.update("AUTO_B", None, Some(Tier::Owner), None));
    assert_eq!(fx.reread("SHARED_A").await, (true, None));
    broken(
        &fx.values(&s2, gs).await,
        "shared secret now an owner's (reread)",
    );
    releases(&fx.values(&s2, gauto).await, "AUTO_B", "not yet reread");
    assert_eq!(fx.reread("AUTO_B").await, (true, None));
    broken(
        &fx.values(&s2, gauto).await,
        "automatic secret now an owner's (reread)",
    );
    control_ok().await;

    // The control grant's row was never touched and its chain still verifies.
    let row = fx.stored_grant(control).await.expect("control");
    let rec = fx
        .record(&row.record_id.expect("record"))
        .await
        .expect("record");
    fx.broker
        .verify_chain(&row, Some(&rec), &fx.caller(&s1).await)
        .expect("control chain");
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_invalid_sqlite() {
    chain(CoreFixture::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_invalid_sqlite_exclusive() {
    chain(CoreFixture::sqlite_exclusive().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chain_invalid_postgres() {
    let Some(fx) = CoreFixture::postgres().await else {
        return;
    };
    chain(fx).await;
}
