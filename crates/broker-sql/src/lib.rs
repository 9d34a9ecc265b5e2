//! # countersign-broker-sql
//!
//! The broker's [`Storage`] over SQL: SQLite (the embedded default) and PostgreSQL, through one
//! code path on `sqlx::Any` with `$1, $2…` placeholders (SQLite accepts them too).
//!
//! ## Layout
//!
//! Each aggregate is a table with typed key and index columns (TEXT ids and states, BIGINT
//! unix-millisecond times) and a `doc` column holding the serde JSON of the whole aggregate:
//! `put_*` upserts (`INSERT … ON CONFLICT (id) DO UPDATE`) the index columns and the doc
//! together, gets decode the doc. A record keeps its canonical text exactly as hashed, its
//! state, its decision (JSON) and its code instead. A row that does not decode is
//! [`StorageError::Corrupt`]. See `schema.rs` for the tables.
//!
//! ## Migrations
//!
//! The schema is not built with `sqlx::migrate!` (one migration directory per database type,
//! which `Any` cannot choose between): it is a short ordered list of migrations, each with its
//! statements per backend, applied at [`SqlStorage::connect`] in one transaction and recorded in
//! a `schema_migrations` table (version, name). On PostgreSQL, replicas starting together
//! serialise on an advisory lock. A database newer than the code is refused.
//!
//! ## Transactions and locking
//!
//! - **PostgreSQL** (READ COMMITTED): write transactions ([`Storage::begin`]) are turns at a
//!   group commit (`group.rs`): one process's run one after another inside a shared physical
//!   transaction, which takes the audit log's advisory lock first and is committed once for
//!   all of them. So replicas' writes take turns a batch at a time, and no writer waits for
//!   another's rows while holding the lock. Every `SELECT` inside a write transaction still
//!   ends in `FOR UPDATE` (the outbox in `FOR UPDATE SKIP LOCKED`), which keeps two
//!   transitions on one row serial against a writer that did not take the lock first (an older
//!   replica during an upgrade). Serialisation failures and deadlocks (`40001`, `40P01`) are
//!   [`StorageError::Conflict`]. Several broker replicas may share one database.
//! - **SQLite** runs in WAL mode with a 5 s busy timeout. Write transactions take turns at
//!   one writer connection (a fair mutex held from `begin` until commit or drop) inside a
//!   physical transaction opened with `BEGIN IMMEDIATE`, so a transaction that reads and then
//!   writes never fails to upgrade its lock; a flusher commits that physical transaction for
//!   every logical one that finished meanwhile (group commit, see `writer.rs`), and each commit
//!   answers once it is durable. **SQLite storage is single-process**: one broker per database
//!   file. Reads ([`Storage::read`]) take no mutex; WAL lets them run beside the writer.
//! - A read transaction takes no locks and is never committed. On PostgreSQL it is a pooled
//!   connection without `BEGIN` (READ COMMITTED gives each statement its own snapshot either
//!   way), and refuses writes.
//! - Single-use values (`remember_once`) are written in batches by a task of their own, one
//!   statement and one commit per batch (`once.rs`). On PostgreSQL the rows a proof-verified
//!   call reads (its enrollment or launcher credential, an enrollment's grants, or an
//!   enrollment with its grants) are read in batches too, one statement per batch (`reads.rs`).
//! - Dropping a transaction without committing rolls it back (on SQLite, a writer's turn that
//!   wrote rolls back its whole batch, whose members answer [`StorageError::Conflict`] and are
//!   run again by the core; one that only read is just released).
//!
//! `sqlite::memory:` is one database per connection, so an in-memory storage has a pool of
//! exactly one connection: a read transaction opened while a write transaction is open waits
//! for it (up to the 3 s acquire timeout). It is meant for tests.

mod audit_sql;
mod batch;
mod error;
mod group;
mod inventory;
mod lost_commit;
mod once;
mod reads;
mod schema;
mod spare;
mod tx;
mod writer;

/// The condition of the audit log's index by subject: the entries that end their subject.
pub use inventory::Inventory;
pub use schema::AUDIT_ENDS;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::error::{begin_err, db_err};
use crate::group::Group;
use crate::once::{OnceBatcher, Target};
use crate::reads::Reads;
use crate::spare::Spares;
use crate::tx::SqlTx;
use crate::writer::Writer;
use async_trait::async_trait;
use countersign_broker_core::clock::Time;
use countersign_broker_core::storage::{Storage, StorageError, Tx};
use sqlx::any::AnyPoolOptions;
use sqlx::{AnyPool, Executor, Row};

/// How long a caller waits for a pooled connection before the database counts as unavailable.
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(3);
/// How long [`Storage::ping`] waits for `SELECT 1`.
const PING_TIMEOUT: Duration = Duration::from_secs(2);
/// SQLite's busy timeout, in milliseconds.
const SQLITE_BUSY_TIMEOUT_MS: u32 = 5000;
/// Pool sizes. PostgreSQL's batchers hold a few at once under load (one `jti` batch, two of
/// each kind of batched read), its group commit one (`group.rs`: every write of the
/// process), and reads outside the batches theirs beside them.
const SQLITE_MAX_CONNECTIONS: u32 = 8;
const POSTGRES_MAX_CONNECTIONS: u32 = 16;
/// Every this many `remember_once` calls (starting with the first), lapsed values are purged.
const ONCE_PURGE_EVERY: u64 = 1000;

/// The database behind a [`SqlStorage`] (the console's storage names it the same way).
pub use countersign_common::sql::Backend;

/// Where a storage's write transactions take their turns: both run them one after another in
/// shared physical transactions committed for all of them (group commit).
#[derive(Clone)]
enum Writes {
    /// SQLite's single writer (`writer.rs`).
    Sqlite(Arc<Writer>),
    /// PostgreSQL's group commit (`group.rs`).
    Postgres(Arc<Group>),
}

/// The broker's storage on SQLite or PostgreSQL. Cloning shares the pool.
#[derive(Clone)]
pub struct SqlStorage {
    pool: AnyPool,
    backend: Backend,
    /// Where write transactions take their turns.
    writes: Writes,
    /// The URL with any password replaced, for `Debug`.
    shown_url: Arc<str>,
    once_calls: Arc<AtomicU64>,
    /// The statements write transactions sent ([`SqlStorage::round_trips`]).
    round_trips: Arc<AtomicU64>,
    /// Read connections kept between reads (`spare.rs`).
    spares: Arc<Spares>,
    /// Single-use values are written in batches by a task of their own (`once.rs`).
    once: OnceBatcher,
    /// PostgreSQL only: the rows proof-verified calls read, read in batches (`reads.rs`).
    reads: Option<Reads>,
}

impl fmt::Debug for SqlStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStorage")
            .field("backend", &self.backend)
            .field("url", &&*self.shown_url)
            .field("connections", &self.pool.size())
            .finish()
    }
}

impl SqlStorage {
    /// Connects and brings the schema up to date.
    ///
    /// Accepts `sqlite://path?mode=rwc` (or `sqlite:path…`), `sqlite::memory:` and
    /// `postgres://…` (`postgresql://…`). A database that cannot be reached is
    /// [`StorageError::Unavailable`].
    pub async fn connect(url: &str) -> Result<SqlStorage, StorageError> {
        sqlx::any::install_default_drivers();
        let (url, synchronous) = take_synchronous(url)?;
        let url = url.as_str();
        let shown_url: Arc<str> = redact_url(url).into();
        let backend = Backend::of_url(url).ok_or_else(|| {
            StorageError::Other(format!(
                "not a sqlite: or postgres: database URL: {shown_url}"
            ))
        })?;
        let options = pool_options(backend, url, synchronous);
        // A multi-host URL (`postgres://h1,h2/db?target_session_attrs=read-write`) is followed
        // through failovers (`countersign_common::sql::pg_hosts`); any other is opened as is.
        let (pool, failover) =
            countersign_common::sql::pg_hosts::connect(options, url, db_err).await?;
        let migrated = async {
            let migration = match backend {
                Backend::Sqlite => pool.begin_with("BEGIN IMMEDIATE").await,
                Backend::Postgres => pool.begin().await,
            }
            .map_err(begin_err)?;
            countersign_common::sql::migrate(migration, backend, &schema::SCHEMA).await
        };
        if let Err(e) = migrated.await {
            // A multi-host pool's watcher holds the pool until it is closed.
            pool.close().await;
            return Err(e);
        }
        let round_trips = Arc::new(AtomicU64::new(0));
        let writes = match backend {
            Backend::Sqlite => Writes::Sqlite(Writer::start(pool.clone(), !is_sqlite_memory(url))),
            Backend::Postgres => Writes::Postgres(Group::start(pool.clone(), round_trips.clone())),
        };
        // Half the pool at most, so that writes always find connections; none when the pool is
        // a single in-memory connection the writer needs.
        let spares = match backend {
            Backend::Sqlite if is_sqlite_memory(url) => 0,
            Backend::Sqlite => SQLITE_MAX_CONNECTIONS / 2,
            Backend::Postgres => POSTGRES_MAX_CONNECTIONS / 2,
        };
        let spares = Arc::new(Spares::new(spares as usize, failover));
        let once = OnceBatcher::start(Target {
            pool: pool.clone(),
            backend,
            writer: match &writes {
                Writes::Sqlite(writer) => Some(writer.clone()),
                Writes::Postgres(_) => None,
            },
            spares: spares.clone(),
        });
        let reads = (backend == Backend::Postgres).then(|| Reads::start(&pool, &spares));
        let storage = SqlStorage {
            writes,
            once,
            reads,
            spares,
            pool,
            backend,
            shown_url,
            once_calls: Arc::new(AtomicU64::new(0)),
            round_trips,
        };
        tracing::debug!(storage = ?storage, "storage connected");
        Ok(storage)
    }

    /// A write transaction: a turn at SQLite's writer, or at PostgreSQL's group commit.
    async fn begin_write(&self) -> Result<SqlTx, StorageError> {
        match &self.writes {
            Writes::Sqlite(writer) => Ok(SqlTx::writer(writer.begin().await?)),
            Writes::Postgres(group) => Ok(SqlTx::grouped(group.begin().await?)),
        }
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// How many statements this storage's write transactions have sent on their connections,
    /// `BEGIN` and `COMMIT` included: on PostgreSQL, each is a round trip to the server. For
    /// tests and measurements (issue 50: an automatic request's count).
    pub fn round_trips(&self) -> u64 {
        self.round_trips.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many write transactions wait now: for their turn at the writer or the group
    /// commit, and on PostgreSQL also this database's sessions waiting for a lock (another
    /// replica's). For diagnostics, and for tests that must see a writer wait before they let
    /// the one ahead of it go.
    pub async fn writers_waiting(&self) -> Result<usize, StorageError> {
        let turns = match &self.writes {
            Writes::Sqlite(writer) => return Ok(writer.waiting()),
            Writes::Postgres(group) => group.waiting(),
        };
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE datname = current_database() AND wait_event_type = 'Lock'",
        )
        .fetch_one(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(turns + usize::try_from(n).unwrap_or(0))
    }

    /// Closes the pool: waits for checked-out connections to come back, then closes them all.
    pub async fn close(&self) {
        self.spares.close();
        match &self.writes {
            Writes::Sqlite(writer) => writer.release().await,
            Writes::Postgres(group) => group.release().await,
        }
        self.pool.close().await;
    }

    /// A write transaction.
    async fn begin_sql(&self) -> Result<SqlTx, StorageError> {
        let tx = self.begin_write().await?;
        Ok(tx.counting(&self.round_trips))
    }

    /// Deletes every lapsed single-use value.
    async fn purge_once_values(&self, now: Time) -> Result<u64, StorageError> {
        let mut tx = self.begin_sql().await?;
        let n = tx.purge_once_values(now).await?;
        Box::new(tx).commit().await?;
        Ok(n)
    }
}

#[async_trait]
impl Storage for SqlStorage {
    // Spans (issue 30): a request's trace shows its time waiting for and committing to the
    // database (`docs/metrics.md`, "Traces").
    #[tracing::instrument(name = "database begin", level = "info", skip_all, fields(otel.kind = "client"))]
    async fn begin(&self) -> Result<Box<dyn Tx>, StorageError> {
        Ok(Box::new(self.begin_sql().await?))
    }

    #[tracing::instrument(name = "database read", level = "info", skip_all, fields(otel.kind = "client"))]
    async fn read(&self) -> Result<Box<dyn Tx>, StorageError> {
        if let Some(reads) = &self.reads {
            return Ok(Box::new(SqlTx::batched(
                self.pool.clone(),
                self.spares.clone(),
                reads.clone(),
            )));
        }
        let conn = self.spares.take(&self.pool).await.map_err(begin_err)?;
        Ok(Box::new(SqlTx::reading(
            conn,
            self.backend,
            self.spares.clone(),
        )))
    }

    async fn snapshot(&self) -> Result<Box<dyn Tx>, StorageError> {
        // SQLite's deferred BEGIN takes its snapshot at the first read; PostgreSQL needs
        // REPEATABLE READ for one snapshot across statements.
        let begin = match self.backend {
            Backend::Sqlite => "BEGIN",
            Backend::Postgres => "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY",
        };
        let tx = self.pool.begin_with(begin).await.map_err(begin_err)?;
        Ok(Box::new(SqlTx::snapshot(tx, self.backend)))
    }

    async fn back_off(&self, attempt: u32) -> Result<(), StorageError> {
        countersign_common::sql::back_off(attempt).await;
        Ok(())
    }

    async fn ping(&self) -> Result<(), StorageError> {
        let pool = self.pool.clone();
        let ping = async move {
            let mut conn = pool.acquire().await?;
            conn.execute("SELECT 1").await?;
            Ok::<_, sqlx::Error>(())
        };
        match tokio::time::timeout(PING_TIMEOUT, ping).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StorageError::Unavailable(e.to_string())),
            Err(_) => Err(StorageError::Unavailable(format!(
                "no answer to SELECT 1 within {PING_TIMEOUT:?}"
            ))),
        }
    }

    async fn writable(&self) -> Result<(), StorageError> {
        countersign_common::sql::pg_hosts::writable(&self.pool, self.backend, PING_TIMEOUT).await
    }

    async fn policy_epoch(&self) -> Result<i64, StorageError> {
        let row = sqlx::query("SELECT value FROM counters WHERE name = 'policy'")
            .fetch_optional(&self.pool)
            .await
            .map_err(db_err)?;
        match row {
            Some(r) => r.try_get::<i64, _>("value").map_err(db_err),
            None => Ok(0),
        }
    }

    async fn bump_policy_epoch(&self) -> Result<i64, StorageError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut tx = self.begin_sql().await?;
            let bumped = match tx.bump_policy_epoch().await {
                Ok(()) => Box::new(tx).commit().await,
                Err(e) => Err(e),
            };
            match bumped {
                Ok(()) => break,
                Err(StorageError::Conflict) if attempts < 10 => continue,
                Err(e) => return Err(e),
            }
        }
        self.policy_epoch().await
    }

    async fn remember_once(
        &self,
        scope: &str,
        value: &str,
        until: Time,
        now: Time,
    ) -> Result<bool, StorageError> {
        if self
            .once_calls
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(ONCE_PURGE_EVERY)
        {
            // Housekeeping in its own transaction: its failure must not refuse the caller.
            match self.purge_once_values(now).await {
                Ok(n) => tracing::debug!(purged = n, "purged lapsed single-use values"),
                Err(e) => tracing::warn!(error = %e, "purging lapsed single-use values failed"),
            }
        }
        // Batched with every other caller's (once.rs): one transaction, one commit for all.
        self.once.remember(scope, value, until, now).await
    }

    async fn remember_all(
        &self,
        values: &[(&str, &str, Time)],
        now: Time,
    ) -> Result<(), StorageError> {
        // One transaction, a statement per thousand values: at shutdown, a busy minute's
        // values cost one commit rather than one turn each.
        let mut tx = self.begin_write().await?;
        for chunk in values.chunks(once::MAX_BATCH) {
            tx.remember_many(chunk, now).await?;
        }
        countersign_broker_core::storage::Tx::commit(Box::new(tx)).await
    }

    async fn at_shutdown(&self, _now: Time) -> Result<(), StorageError> {
        // Everything is in the database already.
        Ok(())
    }

    async fn remembered(&self, scope: &str, now: Time) -> Result<Vec<String>, StorageError> {
        let rows = sqlx::query("SELECT value FROM once_values WHERE scope = $1 AND until_ms >= $2")
            .bind(scope)
            .bind(now.timestamp_millis())
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|r| r.try_get::<String, _>("value").map_err(db_err))
            .collect()
    }
}

/// The pool's options for `backend`: its size, and SQLite's pragmas on every connection.
fn pool_options(backend: Backend, url: &str, synchronous: &'static str) -> AnyPoolOptions {
    let mut options = AnyPoolOptions::new().acquire_timeout(ACQUIRE_TIMEOUT);
    options = match backend {
        Backend::Sqlite if is_sqlite_memory(url) => options
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None),
        // A local file's connection does not go stale: no round trip to test it at every
        // checkout.
        Backend::Sqlite => options
            .max_connections(SQLITE_MAX_CONNECTIONS)
            .test_before_acquire(false),
        Backend::Postgres => options.max_connections(POSTGRES_MAX_CONNECTIONS),
    };
    if backend == Backend::Sqlite {
        options = options.after_connect(move |conn, _meta| {
            Box::pin(async move {
                conn.execute(format!("PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS}").as_str())
                    .await?;
                conn.execute("PRAGMA journal_mode = WAL").await?;
                conn.execute(format!("PRAGMA synchronous = {synchronous}").as_str())
                    .await?;
                // The writer's checkpointer does it, off the commit path (writer.rs).
                conn.execute("PRAGMA wal_autocheckpoint = 0").await?;
                Ok(())
            })
        });
    }
    options
}

/// Takes our own `synchronous=full|normal` parameter off a SQLite URL (sqlx does not know it).
/// `full` (the default) makes every commit durable before it answers; `normal` lets WAL defer
/// the sync to checkpoints: a power loss may forget the last commits, never corrupts the file.
fn take_synchronous(url: &str) -> Result<(String, &'static str), StorageError> {
    let Some((head, query)) = url.split_once('?') else {
        return Ok((url.to_owned(), "FULL"));
    };
    let mut mode = "FULL";
    let mut kept = Vec::new();
    for pair in query.split('&') {
        match pair.strip_prefix("synchronous=") {
            Some(v) if v.eq_ignore_ascii_case("full") => mode = "FULL",
            Some(v) if v.eq_ignore_ascii_case("normal") => mode = "NORMAL",
            Some(_) => {
                return Err(StorageError::Other(
                    "synchronous must be full or normal".into(),
                ));
            }
            None => kept.push(pair),
        }
    }
    let url = if kept.is_empty() {
        head.to_owned()
    } else {
        format!("{head}?{}", kept.join("&"))
    };
    Ok((url, mode))
}

/// Whether a SQLite URL names an in-memory database.
fn is_sqlite_memory(url: &str) -> bool {
    url.contains(":memory:") || url.contains("mode=memory")
}

/// The URL with the password of its user info, and any `password=` query parameter, replaced
/// by `***`.
fn redact_url(url: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, Some(q)),
        None => (url, None),
    };
    let mut out = match head.split_once("://") {
        Some((scheme, rest)) => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            match authority.rsplit_once('@') {
                Some((userinfo, host)) => {
                    let user = userinfo.split_once(':').map_or(userinfo, |(u, _)| u);
                    let hidden = if userinfo.contains(':') { ":***" } else { "" };
                    format!("{scheme}://{user}{hidden}@{host}{path}")
                }
                None => head.to_owned(),
            }
        }
        None => head.to_owned(),
    };
    if let Some(q) = query {
        let params: Vec<String> = q
            .split('&')
            .map(|p| match p.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => p.to_owned(),
            })
            .collect();
        out.push('?');
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("postgres://cs:s3cret@db.example:5432/broker?sslmode=require"),
            "postgres://cs:***@db.example:5432/broker?sslmode=require"
        );
        assert_eq!(
            redact_url("postgres://cs@db/broker?password=s3cret&x=1"),
            "postgres://cs@db/broker?password=***&x=1"
        );
        assert_eq!(redact_url("postgres://a:b:c@h"), "postgres://a:***@h");
        assert_eq!(
            redact_url("sqlite://data/broker.db?mode=rwc"),
            "sqlite://data/broker.db?mode=rwc"
        );
        assert_eq!(redact_url("sqlite::memory:"), "sqlite::memory:");
    }

    #[test]
    fn backends_from_urls() {
        assert_eq!(Backend::of_url("sqlite::memory:"), Some(Backend::Sqlite));
        assert_eq!(Backend::of_url("sqlite://x.db"), Some(Backend::Sqlite));
        assert_eq!(Backend::of_url("postgres://h/db"), Some(Backend::Postgres));
        assert_eq!(
            Backend::of_url("postgresql://h/db"),
            Some(Backend::Postgres)
        );
        assert_eq!(Backend::of_url("mysql://h/db"), None);
        assert_eq!(Backend::of_url("nothing"), None);
        assert!(is_sqlite_memory("sqlite::memory:"));
        assert!(is_sqlite_memory("sqlite://x?mode=memory"));
        assert!(!is_sqlite_memory("sqlite://x.db?mode=rwc"));
    }
}
