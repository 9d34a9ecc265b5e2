//! The audit follower and the broker's own appends: entries this process appended and committed
//! move its follower's head at once, without reading them back; when an entry of another writer
//! (another replica) came between, they do not, and the follower's next round verifies from the
//! database. SQLite always; PostgreSQL when `COUNTERSIGN_TEST_POSTGRES_URL` is set.

use countersign_broker_core::audit::{self, AuditEvent, Walk};
use countersign_broker_core::model::RequestState;
use countersign_broker_core::policy::Tier;
use countersign_broker_core::storage::Storage;
use countersign_e2e::core::{CoreFixture, login};

const ADA: &str = "ada@x.test";

async fn db_head(fx: &CoreFixture) -> Walk {
    let mut tx = fx.sql.read().await.expect("read");
    let (position, hash) = tx.audit_head().await.expect("head").expect("a head");
    Walk { position, hash }
}

async fn own_appends(fx: CoreFixture) {
    fx.store.put("AUTO", ADA, Tier::Automatic, "auto");
    fx.reload().await;
    let m = fx.machine_login(&login(ADA), "laptop").await;
    let s = fx.enroll(&m, "rt-1").await.expect("enroll");
    let c = fx.request(&s, &["AUTO"], None).await.expect("request");
    assert_eq!(c.request.state, RequestState::Granted);

    // No follower round has run: the head moved with the broker's own commits.
    let follower = fx.broker.audit_follower();
    let head = db_head(&fx).await;
    assert!(head.position >= 2, "login, enrollment and grant are logged");
    assert_eq!(
        follower.state().head,
        head,
        "own appends advance the follower"
    );

    // Another writer appends an entry (sealed with the same key, as a second replica would).
    let mut tx = fx.sql.begin().await.expect("begin");
    let other = AuditEvent {
        kind: "grant",
        subject: "grant:other-replica".into(),
        body: "{}".to_owned(),
    };
    audit::append(&mut *tx, fx.broker.sealer(), fx.now(), &[other])
        .await
        .expect("append");
    tx.commit().await.expect("commit");

    // The broker's next append chains to that entry, not to the follower's head: it stays.
    let c = fx.request(&s, &["AUTO"], None).await.expect("request");
    assert_eq!(c.request.state, RequestState::Granted);
    assert_eq!(
        follower.state().head,
        head,
        "a foreign entry in between stops the shortcut"
    );
    let newer = db_head(&fx).await;
    assert!(newer.position > head.position + 1);

    // The follower's round verifies the rest from the database and catches up.
    let st = fx.broker.follow_audit(false).await.expect("round");
    assert_eq!(st.head, newer);
    assert!(st.broken.is_none());
    // And from there the broker's own appends advance it again.
    fx.request(&s, &["AUTO"], None).await.expect("request");
    assert_eq!(follower.state().head, db_head(&fx).await);
    fx.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_appends_advance_the_follower_sqlite() {
    own_appends(CoreFixture::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_appends_advance_the_follower_postgres() {
    let Some(fx) = CoreFixture::postgres().await else {
        return;
    };
    own_appends(fx).await;
}
