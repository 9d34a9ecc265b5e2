//! Multi-host database URLs (`countersign_common::sql::pg_hosts`) under the console's storage,
//! against the test server and a throwaway cluster switched read-only at runtime (a demoted
//! primary). Skipped without `COUNTERSIGN_TEST_POSTGRES_URL` unless
//! `COUNTERSIGN_REQUIRE_POSTGRES=1`.

#[path = "../../broker-sql/tests/support/cluster.rs"]
mod cluster;

use std::time::{Duration, Instant};

use chrono::Utc;
use cluster::{
    Cluster, closed_port, create_database, credentials, drop_database, host_of, test_server,
};
use countersign_common::storage::StorageError;
use countersign_console_core::ids::Login;
use countersign_console_core::storage::Storage;
use countersign_console_sql::SqlStorage;

const CLUSTER: &str = "cs_console_failover";
const CLUSTER_PORT: u16 = 5452;

/// Whether database `db` on `host` knows `who` (read outside the storage).
async fn knows(creds: &str, host: &str, db: &str, who: &Login) -> bool {
    let s = SqlStorage::connect(&format!("postgres://{creds}{host}/{db}"))
        .await
        .expect("connect");
    let known = s.has_person(who).await.expect("has_person");
    s.close().await;
    known
}

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

fn person(tag: &str) -> Login {
    let tail = uuid::Uuid::new_v4().simple().to_string();
    Login::parse(&format!("{tag}-{tail}@example.com")).unwrap_or_else(|| panic!("login {tag}"))
}

/// A first host that refuses connections is skipped (both URL forms).
#[tokio::test]
async fn a_first_host_that_is_down_is_skipped() {
    let Some(server) = test_server() else { return };
    let db = format!("cs_console_failover_{}", uuid::Uuid::new_v4().simple());
    create_database(&server, &db).await;
    let creds = credentials(&server);
    let main = host_of(&server);
    let (main_host, main_port) = main.rsplit_once(':').unwrap_or((&main, "5432"));
    let down = closed_port();
    for url in [
        format!("postgres://{creds}127.0.0.1:{down},{main}/{db}?target_session_attrs=read-write"),
        format!("postgres://{creds}/{db}?host=127.0.0.1,{main_host}&port={down},{main_port}"),
    ] {
        let s = SqlStorage::connect(&url).await.expect("connect");
        let ada = person("ada");
        s.saw_person(&ada, Utc::now()).await.expect("a write");
        assert!(s.has_person(&ada).await.expect("a read"));
        s.writable().await.expect("ready");
        s.close().await;
    }
    drop_database(&server, &db).await;
}

/// A primary demoted at runtime: writes answer `Unavailable` (503), then the pool moves to the
/// writable host listed after it; readiness on a single read-only host says not ready, and
/// ready again once it takes writes.
#[tokio::test]
async fn a_demoted_primary_is_left_and_readiness_follows() {
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
    let db = format!("cs_console_failover_{}", uuid::Uuid::new_v4().simple());
    create_database(&server, &db).await;
    create_database(&format!("postgres://{creds}{other}/postgres"), &db).await;
    // The schema on the test server's database too (the hosts do not replicate).
    SqlStorage::connect(&format!("postgres://{creds}{main}/{db}"))
        .await
        .expect("migrate")
        .close()
        .await;

    let url = format!("postgres://{creds}{other},{main}/{db}?target_session_attrs=read-write");
    let s = SqlStorage::connect(&url).await.expect("connect");
    let ada = person("ada");
    s.saw_person(&ada, Utc::now())
        .await
        .expect("a write on the cluster");
    cluster.set_read_only(true);
    let bob = person("bob");
    let failed = until(
        Duration::from_secs(5),
        "a write refused by the demoted primary",
        || s.saw_person(&bob, Utc::now()),
        |r| r.is_err(),
    )
    .await;
    assert!(
        matches!(failed, Err(StorageError::Unavailable(_))),
        "{failed:?}"
    );
    until(
        Duration::from_secs(10),
        "a write after the failover",
        || s.saw_person(&bob, Utc::now()),
        |r| r.is_ok(),
    )
    .await
    .expect("a write");
    s.writable().await.expect("ready on the new primary");
    s.close().await;
    assert!(knows(&creds, &main, &db, &bob).await);
    assert!(!knows(&creds, &main, &db, &ada).await);

    // The cluster alone, read-only: alive, not ready; ready again once it takes writes.
    let only = format!("postgres://{creds}{other}/{db}?target_session_attrs=read-write");
    let refused = SqlStorage::connect(&only).await;
    assert!(
        matches!(refused, Err(StorageError::Unavailable(_))),
        "{refused:?}"
    );
    cluster.set_read_only(false);
    let s = until(
        Duration::from_secs(5),
        "the cluster writable",
        || SqlStorage::connect(&only),
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
        matches!(not_ready, Err(StorageError::Unavailable(_))),
        "{not_ready:?}"
    );
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
    drop_database(&server, &db).await;
    drop(cluster);
}
