//! The issuer's side, read from PostgreSQL directly and never through the broker: the login
//! roles under the run's prefix (`pg_roles`), sampled every [`SAMPLE`] by a watcher that keeps
//! when each role was last seen and when it was first found gone; and, at the end, the roles
//! left over, dropped so that a run leaves nothing on the server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sqlx::Connection;

/// How often the watcher lists the roles.
pub const SAMPLE: Duration = Duration::from_millis(50);

/// The roles under `prefix` now.
pub async fn list(c: &mut sqlx::PgConnection, prefix: &str) -> anyhow::Result<BTreeSet<String>> {
    let rows: Vec<(String,)> =
        sqlx::query_as("SELECT rolname::text FROM pg_roles WHERE starts_with(rolname, $1)")
            .bind(prefix)
            .fetch_all(c)
            .await?;
    Ok(rows.into_iter().map(|(r,)| r).collect())
}

/// Ends the sessions of and drops every role under `prefix` (they own nothing: the issued
/// secret is declared with no roles to join); answers how many there were.
pub async fn drop_all(server: &str, prefix: &str) -> anyhow::Result<usize> {
    let mut c = sqlx::PgConnection::connect(server).await?;
    let left = list(&mut c, prefix).await?;
    for role in &left {
        sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1")
            .bind(role)
            .execute(&mut c)
            .await?;
        sqlx::query(&format!("DROP ROLE IF EXISTS \"{role}\""))
            .execute(&mut c)
            .await?;
    }
    let _ = c.close().await;
    Ok(left.len())
}

/// When one role was seen, in milliseconds since the Unix epoch.
#[derive(Debug, Clone, Copy)]
pub struct Seen {
    pub last_seen_ms: i64,
    /// The first sample that found it gone after it was seen; `None` while it exists.
    pub gone_ms: Option<i64>,
    /// Times it was found again after it was gone (a credential made again under its name).
    pub returned: u32,
}

#[derive(Default)]
struct Book {
    roles: BTreeMap<String, Seen>,
    samples: u64,
    failures: u64,
}

/// Samples the roles under a prefix until dropped.
pub struct Watcher {
    book: Arc<Mutex<Book>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watcher {
    pub async fn start(server: &str, prefix: &str) -> anyhow::Result<Self> {
        let mut c = sqlx::PgConnection::connect(server).await?;
        let book = Arc::new(Mutex::new(Book::default()));
        let (b, prefix) = (book.clone(), prefix.to_owned());
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(SAMPLE);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let found = list(&mut c, &prefix).await;
                let now = crate::now_ms();
                let mut book = b.lock().unwrap_or_else(|e| e.into_inner());
                match found {
                    Ok(found) => note(&mut book, &found, now),
                    Err(_) => book.failures += 1,
                }
            }
        });
        Ok(Self { book, task })
    }

    /// What it saw so far: each role's record, samples taken, samples that failed.
    pub fn seen(&self) -> (BTreeMap<String, Seen>, u64, u64) {
        let b = self.book.lock().unwrap_or_else(|e| e.into_inner());
        (b.roles.clone(), b.samples, b.failures)
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn note(book: &mut Book, found: &BTreeSet<String>, now: i64) {
    book.samples += 1;
    for name in found {
        let s = book.roles.entry(name.clone()).or_insert(Seen {
            last_seen_ms: now,
            gone_ms: None,
            returned: 0,
        });
        if s.gone_ms.take().is_some() {
            s.returned += 1;
        }
        s.last_seen_ms = now;
    }
    for (name, s) in book.roles.iter_mut() {
        if s.gone_ms.is_none() && !found.contains(name) {
            s.gone_ms = Some(now);
        }
    }
}
