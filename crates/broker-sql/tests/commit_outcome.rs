//! A COMMIT whose answer is lost (issue 50): the connection to PostgreSQL breaks after the
//! COMMIT left the broker. A proxy between the storage and the real server cuts the connection
//! either just after passing the COMMIT on (the server commits, the answer never comes back) or
//! instead of passing it on (the server rolls back). The storage resolves each by reading the
//! transaction's last audit entry: committed is answered as committed, the other as
//! unavailable (503, safe for a client to retry), never by running the transaction again.

#[path = "support/cluster.rs"]
mod cluster;

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use countersign_broker_core::audit::AuditEntry;
use countersign_broker_core::storage::{Storage, StorageError};
use countersign_broker_sql::SqlStorage;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const IDLE: u8 = 0;
/// Pass the next COMMIT on, then cut the connection before its answer comes back.
const DELIVER: u8 = 1;
/// Cut the connection instead of passing the next COMMIT on.
const LOSE: u8 = 2;

/// A TCP proxy to `upstream` that cuts a connection at its next COMMIT when armed.
async fn proxy(upstream: String, armed: Arc<AtomicU8>) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let Ok(server) = TcpStream::connect(&upstream).await else {
                continue;
            };
            tokio::spawn(pipe(client, server, armed.clone()));
        }
    });
    port
}

async fn pipe(client: TcpStream, server: TcpStream, armed: Arc<AtomicU8>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let back = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut sr, &mut cw).await;
    });
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match cr.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        // sqlx sends COMMIT as a simple query: 'Q', its length, "COMMIT\0".
        let commit = chunk.windows(7).any(|w| w == b"COMMIT\0");
        if commit {
            match armed.swap(IDLE, Ordering::SeqCst) {
                DELIVER => {
                    let _ = sw.write_all(chunk).await;
                    let _ = sw.flush().await;
                    back.abort();
                    tokio::time::sleep(Duration::from_millis(300)).await;
                    return;
                }
                LOSE => {
                    back.abort();
                    return;
                }
                _ => {}
            }
        }
        if sw.write_all(chunk).await.is_err() {
            break;
        }
    }
    back.abort();
}

fn entry(position: i64) -> AuditEntry {
    let hash = format!("{:064x}", position * 7919 + 17);
    AuditEntry {
        position,
        at: chrono::Utc::now(),
        kind: "revocation".into(),
        subject: format!("grant:{}", uuid::Uuid::new_v4()),
        body: "{}".into(),
        prev_hash: "0".repeat(64),
        hash,
        seal: "test".into(),
    }
}

async fn appended(storage: &SqlStorage, e: &AuditEntry) -> bool {
    let mut tx = storage.read().await.expect("read");
    tx.audit_entries(e.position - 1, 1)
        .await
        .expect("entries")
        .first()
        .is_some_and(|got| got.hash == e.hash)
}

/// Appends `e` in a write and commits through the proxy, armed with `mode`.
async fn commit_cut(
    storage: &SqlStorage,
    armed: &AtomicU8,
    mode: u8,
    e: &AuditEntry,
) -> Result<(), StorageError> {
    let mut tx = storage.begin().await.expect("begin");
    // As the core appends: the head first, under the audit log's lock.
    tx.audit_head().await.expect("head");
    tx.append_audit(std::slice::from_ref(e))
        .await
        .expect("append");
    armed.store(mode, Ordering::SeqCst);
    tx.commit().await
}

#[tokio::test]
async fn a_lost_commit_is_resolved_by_reading() {
    let Some(admin) = cluster::test_server() else {
        return;
    };
    let name = format!("cs_commit_{}", uuid::Uuid::new_v4().simple());
    cluster::create_database(&admin, &name).await;
    let armed = Arc::new(AtomicU8::new(IDLE));
    let port = proxy("127.0.0.1:5432".into(), armed.clone()).await;
    let (creds, _) = admin.split_once("@").expect("the test URL names its user");
    let url = format!("{creds}@127.0.0.1:{port}/{name}");
    let storage = SqlStorage::connect(&url).await.expect("connect");

    let delivered = entry(1);
    let r = commit_cut(&storage, &armed, DELIVER, &delivered).await;
    assert!(
        r.is_ok(),
        "the server committed; the storage read it back: {r:?}"
    );
    assert!(appended(&storage, &delivered).await);

    let lost = entry(2);
    let r = commit_cut(&storage, &armed, LOSE, &lost).await;
    match r {
        Err(StorageError::Unavailable(m)) => assert!(m.contains("did not commit"), "{m}"),
        other => panic!("a COMMIT the server never saw: {other:?}"),
    }
    assert!(
        !appended(&storage, &lost).await,
        "not committed, and not run again"
    );

    storage.close().await;
    cluster::drop_database(&admin, &name).await;
}
