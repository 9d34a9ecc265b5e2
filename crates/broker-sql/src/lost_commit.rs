//! A COMMIT whose answer was lost (PostgreSQL's group commit, `group.rs`): the connection
//! broke, or the server went away, after the COMMIT was sent, so the physical transaction may
//! have committed or not. It is resolved by
//! reading, never by running it again: the last audit entry the transaction appended is looked
//! up by its position on the server the pool reaches now (after a failover, the new primary),
//! under the audit log's advisory lock, which the lost transaction held until it ended: so the
//! read comes after its COMMIT or its rollback, never before. There with the same hash: it
//! committed, and the caller answers as if the COMMIT had. Absent (or another entry there): it
//! did not, and the caller answers 503, which a client may retry.
//! A transaction that appended nothing, or a server that cannot be read within
//! [`RESOLVE_WITHIN`], stays unknown: 503 too (every write that changes what a client is told,
//! a grant, a decision, an end, appends an entry; what does not, the single-use proof
//! values and the outbox's bookkeeping, is safe to redo).

use std::time::{Duration, Instant};

use countersign_broker_core::storage::StorageError;
use sqlx::Row;

use crate::audit_sql::{PG_AUDIT_LOCK, hash_bytes};

/// How long the outcome is looked for (a failover's new primary may take seconds to answer).
pub(crate) const RESOLVE_WITHIN: Duration = Duration::from_secs(5);

/// Resolves `failed` (the COMMIT's error) on `pool`, by the last audit entry the physical
/// transaction `appended` (position, hash): `Ok` when the transaction is found committed.
pub(crate) async fn resolve(
    failed: StorageError,
    pool: &sqlx::AnyPool,
    appended: Option<(i64, String)>,
) -> Result<(), StorageError> {
    let StorageError::Unavailable(why) = &failed else {
        return Err(failed);
    };
    let Some((position, hash)) = appended else {
        return Err(failed);
    };
    let started = Instant::now();
    let mut attempt = 0;
    loop {
        let read = read_under_lock(pool, position).await;
        match read {
            Ok(row) => {
                let stored = row.map(|r| r.try_get::<Vec<u8>, _>("hash"));
                return match stored {
                    Some(Ok(h)) if h == hash_bytes(&hash) => {
                        tracing::warn!(position, error = %why, "a COMMIT's answer was lost; read back: it committed");
                        Ok(())
                    }
                    _ => {
                        tracing::warn!(position, error = %why, "a COMMIT's answer was lost; read back: it did not commit");
                        Err(StorageError::Unavailable(format!(
                            "the transaction did not commit: {why}"
                        )))
                    }
                };
            }
            Err(e) if started.elapsed() < RESOLVE_WITHIN => {
                tracing::debug!(error = %e, "reading a lost COMMIT's outcome; trying again");
                countersign_common::sql::back_off(attempt).await;
                attempt += 1;
            }
            Err(e) => {
                tracing::error!(position, error = %e, "a COMMIT's outcome could not be read");
                return Err(StorageError::Unavailable(format!(
                    "the transaction's outcome is unknown (the connection broke during COMMIT: {why}; reading it back failed: {e})"
                )));
            }
        }
    }
}

/// The hash stored at `position`, read once the audit log's lock is free (a lost transaction
/// on the same server holds it until it ends; its server notices the broken connection when it
/// next reads or answers).
async fn read_under_lock(
    pool: &sqlx::AnyPool,
    position: i64,
) -> Result<Option<sqlx::any::AnyRow>, sqlx::Error> {
    let mut tx = pool.begin().await?;
    let wait = format!(
        "SET LOCAL lock_timeout = '{}ms'",
        RESOLVE_WITHIN.as_millis()
    );
    sqlx::query(&wait).execute(&mut *tx).await?;
    sqlx::query("SELECT pg_advisory_xact_lock($1)")
        .bind(PG_AUDIT_LOCK)
        .execute(&mut *tx)
        .await?;
    let row = sqlx::query("SELECT hash FROM audit_log WHERE position = $1")
        .bind(position)
        .fetch_optional(&mut *tx)
        .await?;
    tx.rollback().await?;
    Ok(row)
}
