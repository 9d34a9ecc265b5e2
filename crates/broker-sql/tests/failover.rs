//! Multi-host database URLs (`countersign_common::sql::pg_hosts`) under the broker's storage,
//! against real PostgreSQL servers: the test server, and a throwaway cluster beside it
//! (`support/cluster.rs`) that is switched read-only at runtime, as a demoted primary is.
//! Skipped without `COUNTERSIGN_TEST_POSTGRES_URL` unless `COUNTERSIGN_REQUIRE_POSTGRES=1`.

#[path = "support/cluster.rs"]
mod cluster;

use std::time::{Duration, Instant};

use cluster::{
    Cluster, closed_port, create_database, credentials, drop_database, host_of, test_server,
};
use countersign_broker_core::storage::{Storage, StorageError};
use countersign_broker_sql::SqlStorage;
use sqlx::{AnyConnection, Connection};
use uuid::Uuid;

/// The throwaway cluster of this file (console-sql's tests use another name and port).
const CLUSTER: &str = "cs_broker_failover";
const CLUSTER_PORT: u16 = 5451;

/// Creates database `name` on the server `server_url` names (a single-host URL).
/// The policy epoch as database `db` on `host` holds it (read outside the storage).
async fn epoch_on(creds: &str, host: &str, db: &str) -> i64 {
    let mut c = AnyConnection::connect(&format!("postgres://{creds}{host}/{db}"))
        .await
        .expect("connect");
    let v: i64 = sqlx::query_scalar("SELECT value FROM counters WHERE name = 'policy'")
        .fetch_optional(&mut c)
        .await
        .expect("read the epoch")
        .unwrap_or(0);
    let _ = c.close().await;
    v
}

/// Calls `f` until it answers what `done` accepts, for at most `within`.
async fn until<T, F, Fut>(within: Duration, what: &str, mut f: F, done: impl Fn(&T) -> bool) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let deadline = Instant::now() + within;
    loop {
        let v = f().await;
        if done(&v) {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {within:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The form: a first host that refuses connections (a closed port) is skipped, and the
/// storage runs on the second. Before multi-host URLs, sqlx refused the URL ("invalid port
/// number").
#[tokio::test]
async fn a_first_host_that_is_down_is_skipped() {
    let Some(server) = test_server() else { return };
    let db = format!("cs_failover_{}", Uuid::new_v4().simple());
    create_database(&server, &db).await;
    let creds = credentials(&server);
    let main = host_of(&server);
    let down = format!("127.0.0.1:{}", closed_port());
    for (i, url) in [
        format!("postgres://{creds}{down},{main}/{db}?target_session_attrs=read-write"),
        // The query form, one port per host.
        format!(
            "postgres://{creds}/{db}?host={},{}&port={},{}&connect_timeout=2",
            down.split(':').next().unwrap_or_default(),
            main.split(':').next().unwrap_or_default(),
            down.rsplit(':').next().unwrap_or_default(),
            main.rsplit(':').next().unwrap_or_default(),
        ),
    ]
    .into_iter()
    .enumerate()
    {
        let s = SqlStorage::connect(&url).await.expect("connect");
        assert_eq!(s.bump_policy_epoch().await.expect("a write"), i as i64 + 1);
        s.writable().await.expect("writable");
        // The password is not in the storage's Debug form.
        assert!(!format!("{s:?}").contains(":postgres@"), "{s:?}");
        s.close().await;
    }
    assert_eq!(epoch_on(&creds, &main, &db).await, 2);
    drop_database(&server, &db).await;
}

/// On the throwaway cluster, in turn: `read-write` skips a read-only server; a primary
/// demoted at runtime answers writes `Unavailable` (503) and the pool moves to the writable
/// host listed after it; readiness follows a single host going read-only and back.
#[tokio::test]
async fn failovers_on_a_throwaway_cluster() {
    let Some(server) = test_server() else { return };
    let creds = credentials(&server);
    let password = creds
        .trim_end_matches('@')
        .split_once(':')
        .map_or("postgres", |(_, p)| p)
        .to_owned();
    let Some(cluster) = Cluster::create(CLUSTER, CLUSTER_PORT, &password) else {
        return;
    };
    let main = host_of(&server);
    let other = format!("127.0.0.1:{}", cluster.port);
    let db = format!("cs_failover_{}", Uuid::new_v4().simple());
    create_database(&server, &db).await;
    create_database(&format!("postgres://{creds}{other}/postgres"), &db).await;

    read_write_skips_a_read_only_server(&cluster, &creds, &other, &main, &db).await;
    a_demoted_primary_is_left(&cluster, &creds, &other, &main, &db).await;
    readiness_follows_the_only_host(&cluster, &creds, &other, &db).await;

    drop_database(&server, &db).await;
    drop(cluster);
}

async fn read_write_skips_a_read_only_server(
    cluster: &Cluster,
    creds: &str,
    other: &str,
    main: &str,
    db: &str,
) {
    cluster.set_read_only(true);
    // `any` takes the first host, read-only: the migration's writes fail, as an outage.
    let any = format!("postgres://{creds}{other},{main}/{db}?target_session_attrs=any");
    let refused = until(
        Duration::from_secs(5),
        "the cluster read-only",
        || SqlStorage::connect(&any),
        |r| r.is_err(),
    )
    .await;
    assert!(
        matches!(refused, Err(StorageError::Unavailable(_))),
        "{refused:?}"
    );
    // `read-write` skips it and runs on the test server.
    let url = format!("postgres://{creds}{other},{main}/{db}?target_session_attrs=read-write");
    let s = SqlStorage::connect(&url).await.expect("connect read-write");
    assert_eq!(s.bump_policy_epoch().await.expect("a write"), 1);
    s.close().await;
    assert_eq!(epoch_on(creds, main, db).await, 1);
    cluster.set_read_only(false);
}

async fn a_demoted_primary_is_left(
    cluster: &Cluster,
    creds: &str,
    other: &str,
    main: &str,
    db: &str,
) {
    let url = format!("postgres://{creds}{other},{main}/{db}?target_session_attrs=read-write");
    // The cluster takes writes again (the reload may take a moment to reach new sessions).
    let s = until(
        Duration::from_secs(5),
        "the cluster writable",
        || SqlStorage::connect(&url),
        |r| r.is_ok(),
    )
    .await
    .expect("connect");
    assert_eq!(
        s.bump_policy_epoch().await.expect("a write on the cluster"),
        1
    );
    assert_eq!(epoch_on(creds, other, db).await, 1);
    s.writable().await.expect("ready on the cluster");

    // Demoted: writes answer Unavailable (the HTTP layer's 503), never another error...
    cluster.set_read_only(true);
    let failed = until(
        Duration::from_secs(5),
        "a write refused by the demoted primary",
        || s.bump_policy_epoch(),
        |r| r.is_err(),
    )
    .await;
    assert!(
        matches!(failed, Err(StorageError::Unavailable(_))),
        "{failed:?}"
    );
    // ...until the pool has moved to the writable host listed after it (the test server,
    // whose database holds epoch 1 from the first scenario).
    let moved = until(
        Duration::from_secs(10),
        "a write after the failover",
        || s.bump_policy_epoch(),
        |r| r.is_ok(),
    )
    .await;
    assert_eq!(moved.expect("a write"), 2);
    assert_eq!(epoch_on(creds, main, db).await, 2);
    assert_eq!(epoch_on(creds, other, db).await, 1);
    s.writable().await.expect("ready on the new primary");
    // Reads run on the new primary too (kept read connections were handed back).
    assert_eq!(s.policy_epoch().await.expect("read"), 2);
    s.close().await;
    cluster.set_read_only(false);
}

async fn readiness_follows_the_only_host(cluster: &Cluster, creds: &str, other: &str, db: &str) {
    // A single-host URL, as sqlx reads it: readiness checks writability all the same.
    let url = format!("postgres://{creds}{other}/{db}");
    let s = until(
        Duration::from_secs(5),
        "the cluster writable",
        || SqlStorage::connect(&url),
        |r| r.is_ok(),
    )
    .await
    .expect("connect");
    s.writable().await.expect("ready");
    cluster.set_read_only(true);
    let not_ready = until(
        Duration::from_secs(5),
        "not ready on a read-only server",
        || s.writable(),
        |r| r.is_err(),
    )
    .await;
    assert!(
        matches!(not_ready, Err(StorageError::Unavailable(ref m)) if m.contains("read-only")),
        "{not_ready:?}"
    );
    // Still alive: the liveness check answers.
    s.ping().await.expect("ping");
    cluster.set_read_only(false);
    until(
        Duration::from_secs(5),
        "ready again",
        || s.writable(),
        |r| r.is_ok(),
    )
    .await
    .expect("ready");
    s.close().await;
}
