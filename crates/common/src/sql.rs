//! sqlx plumbing for SQLite and PostgreSQL through the `Any` driver: opening a pool,
//! versioned migrations, and mapping driver errors to [`StorageError`].
//!
//! `sqlx::migrate!` wants one migration directory per database type, and through `sqlx::Any` it
//! cannot tell the two backends apart; so a schema is an ordered list of [`Migration`]s, each
//! with its statements per backend. [`migrate`] keeps the applied versions in a table the caller
//! names and runs every pending migration in one transaction with its version rows, so a failed
//! migration leaves the schema as it was. On PostgreSQL the transaction first takes an advisory
//! lock, so replicas starting together migrate one at a time. A released migration is never
//! edited: add a new one.

use std::time::Duration;

use sqlx::any::AnyPoolOptions;
use sqlx::error::DatabaseError;
use sqlx::{Any, AnyPool, Executor, Row, Transaction};

use crate::storage::StorageError;

/// Multi-host PostgreSQL URLs, as libpq reads them (`target_session_attrs`, failover).
#[path = "pg_hosts.rs"]
pub mod pg_hosts;

/// Which database a URL names (the broker's and the console's storage both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// `sqlite:…` or `postgres:`/`postgresql:…`, the scheme in any case; else `None`.
    pub fn of_url(url: &str) -> Option<Backend> {
        let scheme = url.split_once(':').map(|(s, _)| s.to_ascii_lowercase())?;
        match scheme.as_str() {
            "sqlite" => Some(Backend::Sqlite),
            "postgres" | "postgresql" => Some(Backend::Postgres),
            _ => None,
        }
    }
}

/// One schema step: its statements for each backend, run in order.
#[derive(Debug)]
pub struct Migration {
    pub version: i64,
    pub name: &'static str,
    pub sqlite: &'static [&'static str],
    pub postgres: &'static [&'static str],
}

impl Migration {
    /// Its statements for `backend`, in order.
    pub fn statements(&self, backend: Backend) -> &'static [&'static str] {
        match backend {
            Backend::Sqlite => self.sqlite,
            Backend::Postgres => self.postgres,
        }
    }
}

/// Where [`migrate`] keeps its bookkeeping and whom it names in errors.
#[derive(Debug, Clone, Copy)]
pub struct Schema {
    /// The versions table, e.g. `console_schema_migrations` (a fixed identifier, never input).
    pub table: &'static str,
    /// The PostgreSQL advisory lock key that serialises replicas' migrations.
    pub lock_key: i64,
    /// Who runs it, for the "newer than this … knows" error.
    pub program: &'static str,
    pub migrations: &'static [Migration],
}

impl Schema {
    /// The version of the last migration.
    pub fn latest(&self) -> i64 {
        self.migrations.last().map_or(0, |m| m.version)
    }

    /// Whether versions run 1, 2, 3… and each has statements on both backends.
    pub fn is_consecutive(&self) -> bool {
        self.migrations.iter().enumerate().all(|(i, m)| {
            m.version == i as i64 + 1 && !m.sqlite.is_empty() && !m.postgres.is_empty()
        })
    }
}

/// Opens a pool on `url` (`sqlite://path?mode=rwc`, `sqlite::memory:`, `postgres://…`).
/// SQLite gets WAL (`synchronous = NORMAL`), a 5 s busy timeout, a memory map, a 64 MiB
/// page cache and temporary files (savepoints' journals) in memory; `:memory:` one connection
/// kept for the pool's life
/// (each connection would be its own database). A multi-host PostgreSQL URL
/// (`postgres://h1:p1,h2:p2/db?target_session_attrs=read-write`) is opened by [`pg_hosts`],
/// which follows a failover for the pool's life.
pub async fn open_pool(
    url: &str,
    max_connections: u32,
) -> Result<(AnyPool, Backend), StorageError> {
    sqlx::any::install_default_drivers();
    let backend = Backend::of_url(url).ok_or_else(|| {
        StorageError::Other("the database URL is neither sqlite: nor postgres:".into())
    })?;
    let mut options = AnyPoolOptions::new().acquire_timeout(Duration::from_secs(5));
    if url.contains(":memory:") {
        options = options
            .max_connections(1)
            .min_connections(1)
            .idle_timeout(None)
            .max_lifetime(None);
    } else {
        options = options.max_connections(max_connections.max(1));
    }
    if backend == Backend::Sqlite {
        options = options.after_connect(|conn, _| {
            Box::pin(async move {
                conn.execute("PRAGMA busy_timeout = 5000").await?;
                conn.execute("PRAGMA journal_mode = WAL").await?;
                conn.execute("PRAGMA foreign_keys = ON").await?;
                // WAL with NORMAL: a commit survives the process crashing; an OS crash or power
                // loss may lose the last commits, never consistency (docs/decisions.md).
                conn.execute("PRAGMA synchronous = NORMAL").await?;
                // Pages read through a memory map and a 64 MiB cache per connection, not a
                // system call per page.
                conn.execute("PRAGMA mmap_size = 1073741824").await?;
                conn.execute("PRAGMA cache_size = -65536").await?;
                // Savepoints' sub-journals in memory, not spilled to temporary files: a
                // group-committed writer opens a savepoint per transaction, and the pages each
                // one changes are journalled there.
                conn.execute("PRAGMA temp_store = MEMORY").await?;
                Ok(())
            })
        });
    }
    let (pool, _failover) = pg_hosts::connect(options, url, begin_err).await?;
    Ok((pool, backend))
}

/// Brings the schema up to its latest version, in `tx`, and commits.
pub async fn migrate(
    mut tx: Transaction<'static, Any>,
    backend: Backend,
    schema: &Schema,
) -> Result<(), StorageError> {
    if backend == Backend::Postgres {
        sqlx::query("SELECT pg_advisory_xact_lock($1)")
            .bind(schema.lock_key)
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
    }
    let table = schema.table;
    sqlx::query(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (version BIGINT PRIMARY KEY, name TEXT NOT NULL)"
    ))
    .execute(&mut *tx)
    .await
    .map_err(db_err)?;
    let current: i64 = sqlx::query(&format!(
        "SELECT COALESCE(MAX(version), 0) AS v FROM {table}"
    ))
    .fetch_one(&mut *tx)
    .await
    .map_err(db_err)?
    .try_get("v")
    .map_err(db_err)?;
    let latest = schema.latest();
    if current > latest {
        return Err(StorageError::Other(format!(
            "the database schema is at version {current}, newer than this {} knows ({latest})",
            schema.program
        )));
    }
    for m in schema.migrations.iter().filter(|m| m.version > current) {
        for statement in m.statements(backend) {
            sqlx::query(statement)
                .execute(&mut *tx)
                .await
                .map_err(|e| {
                    StorageError::Other(format!("migration {} ({}): {e}", m.version, m.name))
                })?;
        }
        sqlx::query(&format!(
            "INSERT INTO {table} (version, name) VALUES ($1, $2)"
        ))
        .bind(m.version)
        .bind(m.name)
        .execute(&mut *tx)
        .await
        .map_err(db_err)?;
        tracing::info!(
            version = m.version,
            name = m.name,
            "applied schema migration"
        );
    }
    tx.commit().await.map_err(db_err)
}

/// Waits out [`crate::storage::conflict_backoff`] before a transaction's next attempt.
pub async fn back_off(attempt: u32) {
    let jitter = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::from(d.subsec_nanos()));
    tokio::time::sleep(crate::storage::conflict_backoff(attempt, jitter)).await;
}

/// Maps a driver error:
///
/// - PostgreSQL serialisation failures (`40001`) and deadlocks (`40P01`), and SQLite's
///   `BUSY`/`LOCKED`, are [`StorageError::Conflict`]: the caller runs the transaction again;
/// - anything that means the database cannot be reached or used at all (I/O, TLS, a pool that
///   timed out or closed, PostgreSQL's class `08`, shutdowns `57P0x`, too many connections,
///   refused authentication, a missing database, a write on a read-only server (`25006`: a
///   primary demoted by a failover, or a standby reached instead of the primary); SQLite's
///   `CANTOPEN` and `IOERR`) is [`StorageError::Unavailable`];
/// - a column that does not decode is [`StorageError::Corrupt`];
/// - everything else is [`StorageError::Other`].
pub fn db_err(e: sqlx::Error) -> StorageError {
    let mapped = map_err(e);
    if matches!(mapped, StorageError::Unavailable(_)) {
        // An outage may be a failover: multi-host pools check their host (rate-limited).
        pg_hosts::suspect_all();
    }
    mapped
}

fn map_err(e: sqlx::Error) -> StorageError {
    use sqlx::Error as E;
    match &e {
        E::Io(_) | E::Tls(_) | E::PoolTimedOut | E::PoolClosed | E::WorkerCrashed => {
            StorageError::Unavailable(e.to_string())
        }
        E::Database(d) => database_err(d.as_ref(), &e),
        E::ColumnDecode { .. } | E::Decode(_) | E::ColumnNotFound(_) => {
            StorageError::Corrupt(e.to_string())
        }
        _ => StorageError::Other(e.to_string()),
    }
}

/// Whether a driver error is a unique-constraint violation (PostgreSQL `23505`, SQLite's
/// `SQLITE_CONSTRAINT_UNIQUE`/`PRIMARYKEY`).
pub fn is_unique_violation(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(d) => matches!(d.kind(), sqlx::error::ErrorKind::UniqueViolation),
        _ => false,
    }
}

/// Maps a write's error where a unique violation means another transaction took the key
/// first: [`StorageError::Conflict`] (the caller runs the transaction again and finds its
/// row); anything else as [`db_err`].
pub fn conflict_if_unique(e: sqlx::Error) -> StorageError {
    if is_unique_violation(&e) {
        StorageError::Conflict
    } else {
        db_err(e)
    }
}

fn database_err(d: &dyn DatabaseError, e: &sqlx::Error) -> StorageError {
    if let Some(pg) = d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        return match pg.code() {
            "40001" | "40P01" => StorageError::Conflict,
            "53300" | "57P01" | "57P02" | "57P03" | "3D000" | "28000" | "28P01" | "25006" => {
                StorageError::Unavailable(e.to_string())
            }
            c if c.starts_with("08") => StorageError::Unavailable(e.to_string()),
            _ => StorageError::Other(e.to_string()),
        };
    }
    if let Some(lite) = d.try_downcast_ref::<sqlx::sqlite::SqliteError>() {
        // The extended result code; its low byte is the primary code.
        let primary = lite
            .code()
            .and_then(|c| c.parse::<i32>().ok())
            .map(|c| c & 0xff);
        return match primary {
            Some(5 | 6) => StorageError::Conflict,
            Some(10 | 14) => StorageError::Unavailable(e.to_string()),
            _ => StorageError::Other(e.to_string()),
        };
    }
    StorageError::Other(e.to_string())
}

/// Maps a failure to open a pool or start a transaction: any error there means the database
/// cannot be used now, whatever its code; SQLite's `BUSY` stays a conflict.
pub fn begin_err(e: sqlx::Error) -> StorageError {
    match db_err(e) {
        StorageError::Other(msg) | StorageError::Corrupt(msg) => StorageError::Unavailable(msg),
        other => other,
    }
}

/// The URL with any password replaced, for logs and `Debug`.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.split_once(':') {
                Some((user, _)) => format!("{}{user}:***{}", &url[..s + 3], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &[&str] = &["CREATE TABLE t (id BIGINT PRIMARY KEY)"];
    const V2: &[&str] = &["CREATE TABLE u (id BIGINT PRIMARY KEY)"];
    const TWO: &[Migration] = &[
        Migration {
            version: 1,
            name: "t",
            sqlite: V1,
            postgres: V1,
        },
        Migration {
            version: 2,
            name: "u",
            sqlite: V2,
            postgres: V2,
        },
    ];
    const BAD: &[&str] = &["CREATE TABLE v (id BIGINT PRIMARY KEY)", "NOT SQL"];

    fn schema(migrations: &'static [Migration]) -> Schema {
        Schema {
            table: "test_migrations",
            lock_key: 1,
            program: "test",
            migrations,
        }
    }

    #[test]
    fn redacts_passwords() {
        assert_eq!(redact("postgres://u:secret@db/x"), "postgres://u:***@db/x");
        assert_eq!(redact("sqlite://a.db"), "sqlite://a.db");
    }

    #[tokio::test]
    async fn migrations_apply_once_and_a_failed_one_changes_nothing() -> Result<(), StorageError> {
        let dir = tempfile::tempdir().map_err(|e| StorageError::Other(e.to_string()))?;
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("m.db").display());
        let (pool, backend) = open_pool(&url, 2).await?;
        let s = schema(TWO);
        assert!(s.is_consecutive());
        migrate(pool.begin().await.map_err(begin_err)?, backend, &s).await?;
        // Again: nothing pending, nothing fails.
        migrate(pool.begin().await.map_err(begin_err)?, backend, &s).await?;
        let n: i64 = sqlx::query("SELECT COUNT(*) AS n FROM test_migrations")
            .fetch_one(&pool)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)?;
        assert_eq!(n, 2);

        // A third migration whose second statement fails leaves no table `v` and version 2.
        static THREE: [Migration; 3] = [
            Migration {
                version: 1,
                name: "t",
                sqlite: V1,
                postgres: V1,
            },
            Migration {
                version: 2,
                name: "u",
                sqlite: V2,
                postgres: V2,
            },
            Migration {
                version: 3,
                name: "bad",
                sqlite: BAD,
                postgres: BAD,
            },
        ];
        let err = migrate(
            pool.begin().await.map_err(begin_err)?,
            backend,
            &schema(&THREE),
        )
        .await;
        assert!(matches!(err, Err(StorageError::Other(ref m)) if m.contains("migration 3")));
        assert!(
            sqlx::query("SELECT * FROM v")
                .fetch_all(&pool)
                .await
                .is_err()
        );

        // An older program refuses a newer schema.
        static ONE: [Migration; 1] = [Migration {
            version: 1,
            name: "t",
            sqlite: V1,
            postgres: V1,
        }];
        let err = migrate(
            pool.begin().await.map_err(begin_err)?,
            backend,
            &schema(&ONE),
        )
        .await;
        assert!(matches!(err, Err(StorageError::Other(ref m)) if m.contains("newer")));
        Ok(())
    }

    #[tokio::test]
    async fn unique_violations_and_unavailable_databases_are_told_apart() -> Result<(), StorageError>
    {
        let (pool, _) = open_pool("sqlite::memory:", 1).await?;
        sqlx::query("CREATE TABLE k (id BIGINT PRIMARY KEY)")
            .execute(&pool)
            .await
            .map_err(db_err)?;
        sqlx::query("INSERT INTO k (id) VALUES (1)")
            .execute(&pool)
            .await
            .map_err(db_err)?;
        let dup = sqlx::query("INSERT INTO k (id) VALUES (1)")
            .execute(&pool)
            .await;
        assert!(matches!(dup, Err(ref e) if is_unique_violation(e)));
        let gone = open_pool("sqlite:///nonexistent-dir/x.db", 1).await;
        assert!(matches!(gone, Err(StorageError::Unavailable(_))));
        Ok(())
    }

    /// A write on a read-only PostgreSQL (a demoted primary, a standby) is an outage, not an
    /// internal error: SQLSTATE 25006 maps to `Unavailable`. Needs the test server.
    #[tokio::test]
    async fn a_write_on_a_read_only_server_is_unavailable() -> Result<(), StorageError> {
        let Ok(url) = std::env::var("COUNTERSIGN_TEST_POSTGRES_URL") else {
            assert!(
                std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "COUNTERSIGN_REQUIRE_POSTGRES=1 but COUNTERSIGN_TEST_POSTGRES_URL is not set"
            );
            println!("skipped: COUNTERSIGN_TEST_POSTGRES_URL not set");
            return Ok(());
        };
        let (pool, _) = open_pool(&url, 1).await?;
        let mut tx = pool.begin().await.map_err(begin_err)?;
        sqlx::query("SET TRANSACTION READ ONLY")
            .execute(&mut *tx)
            .await
            .map_err(db_err)?;
        let write = sqlx::query("CREATE TEMPORARY TABLE cs_read_only_probe (id BIGINT)")
            .execute(&mut *tx)
            .await
            .map_err(db_err);
        assert!(
            matches!(write, Err(StorageError::Unavailable(_))),
            "{write:?}"
        );
        Ok(())
    }
}
