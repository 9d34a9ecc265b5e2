//! What rows a database holds, for `countersign-broker audit verify`: the ids of every sealed
//! row (credentials, enrollments, grants, records), read once, offline. Each row is then read
//! through the ordinary [`Tx`](countersign_broker_core::Tx) reads, so it decodes as the broker
//! decodes it.

use countersign_broker_core::storage::StorageError;
use sqlx::Row;

use crate::SqlStorage;
use crate::error::db_err;

/// The ids of every sealed row, by table, in id order.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Inventory {
    pub credentials: Vec<String>,
    pub enrollments: Vec<String>,
    pub grants: Vec<String>,
    pub records: Vec<String>,
}

impl SqlStorage {
    /// Lists the ids of every credential, enrollment, grant and record.
    pub async fn inventory(&self) -> Result<Inventory, StorageError> {
        let mut out = Inventory::default();
        for (table, into) in [
            ("credentials", &mut out.credentials),
            ("enrollments", &mut out.enrollments),
            ("grants", &mut out.grants),
            ("records", &mut out.records),
        ] {
            let rows = sqlx::query(&format!("SELECT id FROM {table} ORDER BY id"))
                .fetch_all(&self.pool)
                .await
                .map_err(db_err)?;
            for r in rows {
                into.push(r.try_get::<String, _>("id").map_err(db_err)?);
            }
        }
        Ok(out)
    }
}
