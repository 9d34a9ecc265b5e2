//! How driver errors become [`StorageError`]s.

use countersign_broker_core::storage::StorageError;
use sqlx::error::DatabaseError;

/// Maps a driver error:
///
/// - PostgreSQL serialisation failures (`40001`) and deadlocks (`40P01`), and SQLite's
///   `BUSY`/`LOCKED`, are [`StorageError::Conflict`]: the core runs the transaction again;
/// - anything that means the database cannot be reached or used at all (I/O, TLS, a pool that
///   timed out or closed, PostgreSQL's connection-exception class `08`, shutdowns `57P0x`,
///   too many connections, refused authentication, a missing database; SQLite's `CANTOPEN`
///   and `IOERR`) is [`StorageError::Unavailable`];
/// - a column that does not decode is [`StorageError::Corrupt`];
/// - everything else is [`StorageError::Other`].
pub(crate) fn db_err(e: sqlx::Error) -> StorageError {
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

fn database_err(d: &dyn DatabaseError, e: &sqlx::Error) -> StorageError {
    if let Some(pg) = d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>() {
        let code = pg.code();
        return match code {
            "40001" | "40P01" => StorageError::Conflict,
            "53300" | "57P01" | "57P02" | "57P03" | "3D000" | "28000" | "28P01" => {
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
            // SQLITE_BUSY, SQLITE_LOCKED
            Some(5 | 6) => StorageError::Conflict,
            // SQLITE_IOERR, SQLITE_CANTOPEN
            Some(10 | 14) => StorageError::Unavailable(e.to_string()),
            _ => StorageError::Other(e.to_string()),
        };
    }
    StorageError::Other(e.to_string())
}

/// Maps a failure to start a transaction. Starting one needs a connection: any database error
/// there (a database not accepting connections, one being shut down, refused logins) means the
/// database cannot be used now, whatever its code; SQLite's `BUSY` stays a conflict.
pub(crate) fn begin_err(e: sqlx::Error) -> StorageError {
    match db_err(e) {
        StorageError::Other(msg) | StorageError::Corrupt(msg) => StorageError::Unavailable(msg),
        other => other,
    }
}
