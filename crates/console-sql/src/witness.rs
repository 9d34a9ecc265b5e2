//! The console as a witness of the broker's audit log (the broker's `docs/audit.md`): the
//! highest head of the broker's chain the console has been answered, kept in the console's own
//! database, outside the broker's. One row per broker URL.

use countersign_console_core::storage::StorageError;
use sqlx::Row;

use crate::{SqlStorage, db_err};

/// migration 15: the witness's records.
pub(crate) const MIGRATION_15: &[&str] = &["CREATE TABLE broker_witness (
        broker TEXT PRIMARY KEY,
        position BIGINT NOT NULL,
        hash TEXT NOT NULL,
        accepted BIGINT NOT NULL,
        seen_at BIGINT NOT NULL
    )"];

/// What the console remembers of a broker's chain: the highest head it was answered, and the
/// last position at which an operator accepted a head (`head_accepted`) it had seen then.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WitnessRecord {
    pub position: i64,
    pub hash: String,
    pub accepted: i64,
}

impl SqlStorage {
    /// The record kept for `broker`, if any.
    pub async fn witness_record(
        &self,
        broker: &str,
    ) -> Result<Option<WitnessRecord>, StorageError> {
        let row =
            sqlx::query("SELECT position, hash, accepted FROM broker_witness WHERE broker = $1")
                .bind(broker)
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?;
        row.map(|r| {
            Ok(WitnessRecord {
                position: r.try_get("position").map_err(db_err)?,
                hash: r.try_get("hash").map_err(db_err)?,
                accepted: r.try_get("accepted").map_err(db_err)?,
            })
        })
        .transpose()
    }

    /// Keeps `rec` for `broker` when it is higher than what is kept, or when it carries a later
    /// acceptance (an operator accepted a head since: the broker's answer replaces the record).
    /// Never moves the record back otherwise, whatever order replicas write in.
    pub async fn witness_keep(
        &self,
        broker: &str,
        rec: &WitnessRecord,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO broker_witness (broker, position, hash, accepted, seen_at)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (broker) DO UPDATE SET position = excluded.position,
                 hash = excluded.hash, accepted = excluded.accepted, seen_at = excluded.seen_at
             WHERE excluded.accepted > broker_witness.accepted
                OR (excluded.accepted = broker_witness.accepted
                    AND excluded.position >= broker_witness.position)",
        )
        .bind(broker)
        .bind(rec.position)
        .bind(&rec.hash)
        .bind(rec.accepted)
        .bind(now_ms)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }
}
