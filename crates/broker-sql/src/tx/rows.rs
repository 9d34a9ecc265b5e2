//! Binding parameters, and a row's columns to and from the model (documents, times, hashes).

use super::*;

// Bound parameters and held-back statements are the shared writer's
// (`countersign_common::sql_writer`, issue 51).
pub(crate) use countersign_common::sql_writer::{Arg, Deferred, bind_all};
// The audit log's rows as statements: below both the transaction and SQLite's writer.
pub(crate) use crate::audit_sql::{AUDIT_COLUMNS, AUDIT_ROWS_PER_INSERT, audit_insert};

/// How a `SELECT` in a write transaction locks the rows it reads (PostgreSQL only).
#[derive(Clone, Copy)]
pub(super) enum Lock {
    /// `FOR UPDATE`.
    Update,
    /// `FOR UPDATE SKIP LOCKED`.
    SkipLocked,
}

/// Unix milliseconds.
pub(super) fn ms(t: Time) -> i64 {
    t.timestamp_millis()
}

pub(super) fn from_ms(ms: i64) -> Result<Time, StorageError> {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .ok_or_else(|| StorageError::Corrupt(format!("time out of range: {ms} ms")))
}

pub(super) fn to_doc<T: serde::Serialize>(what: &str, v: &T) -> Result<String, StorageError> {
    serde_json::to_string(v).map_err(|e| StorageError::Other(format!("encoding {what}: {e}")))
}

pub(super) fn from_doc<T: DeserializeOwned>(what: &str, row: &AnyRow) -> Result<T, StorageError> {
    let doc: String = row.try_get("doc").map_err(db_err)?;
    decode(what, &doc)
}

pub(super) fn decode<T: DeserializeOwned>(what: &str, doc: &str) -> Result<T, StorageError> {
    serde_json::from_str(doc).map_err(|e| StorageError::Corrupt(format!("{what}: {e}")))
}

pub(super) fn decode_some<T: DeserializeOwned>(
    what: &str,
    doc: Option<String>,
) -> Result<Option<T>, StorageError> {
    doc.map(|d| decode(what, &d)).transpose()
}

pub(super) fn from_docs<T: DeserializeOwned>(
    what: &str,
    rows: &[AnyRow],
) -> Result<Vec<T>, StorageError> {
    rows.iter().map(|r| from_doc(what, r)).collect()
}

/// `INSERT … ON CONFLICT (key) DO UPDATE SET` every other column.
pub(super) fn upsert_sql(table: &str, key: &str, columns: &[&str]) -> String {
    let placeholders: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
    let updates: Vec<String> = columns
        .iter()
        .filter(|c| **c != key)
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    format!(
        "INSERT INTO {table} ({}) VALUES ({}) ON CONFLICT ({key}) DO UPDATE SET {}",
        columns.join(", "),
        placeholders.join(", "),
        updates.join(", ")
    )
}

pub(super) const RECORD_COLUMNS: &str = "id, text, state, decided, code";

pub(super) fn record_from_row(row: &AnyRow) -> Result<Record, StorageError> {
    let id: String = row.try_get("id").map_err(db_err)?;
    let id = RecordId::parse(&id)
        .map_err(|_| StorageError::Corrupt(format!("record id {id:?} is not 64 hex digits")))?;
    let text: String = row.try_get("text").map_err(db_err)?;
    let body: RecordText = serde_json::from_str(&text)
        .map_err(|e| StorageError::Corrupt(format!("record {id} text: {e}")))?;
    let state: String = row.try_get("state").map_err(db_err)?;
    let state: RecordState = serde_json::from_value(serde_json::Value::String(state.clone()))
        .map_err(|_| StorageError::Corrupt(format!("record {id} state {state:?}")))?;
    let decided: Option<String> = row.try_get("decided").map_err(db_err)?;
    let decided = decided
        .map(|d| serde_json::from_str::<RecordDecision>(&d))
        .transpose()
        .map_err(|e| StorageError::Corrupt(format!("record {id} decision: {e}")))?;
    let code: Option<String> = row.try_get("code").map_err(db_err)?;
    let code = code
        .map(|c| {
            ConfirmationCode::parse(&c)
                .ok_or_else(|| StorageError::Corrupt(format!("record {id} code {c:?}")))
        })
        .transpose()?;
    Ok(Record {
        id,
        text,
        body,
        state,
        decided,
        code,
    })
}

pub(super) fn outbox_from_row(row: &AnyRow) -> Result<OutboxItem, StorageError> {
    let attempts: i64 = row.try_get("attempts").map_err(db_err)?;
    Ok(OutboxItem {
        id: row.try_get("id").map_err(db_err)?,
        topic: row.try_get("topic").map_err(db_err)?,
        payload: row.try_get("payload").map_err(db_err)?,
        attempts: u32::try_from(attempts)
            .map_err(|_| StorageError::Corrupt(format!("outbox attempts {attempts}")))?,
        next_attempt_at: from_ms(row.try_get("next_attempt_at_ms").map_err(db_err)?)?,
    })
}

pub(super) fn audit_from_row(row: &AnyRow) -> Result<AuditEntry, StorageError> {
    Ok(AuditEntry {
        position: row.try_get("position").map_err(db_err)?,
        at: from_ms(row.try_get("at_ms").map_err(db_err)?)?,
        kind: row.try_get("kind").map_err(db_err)?,
        subject: row.try_get("subject").map_err(db_err)?,
        body: row.try_get("body").map_err(db_err)?,
        prev_hash: hex::encode(row.try_get::<Vec<u8>, _>("prev_hash").map_err(db_err)?),
        hash: hex::encode(row.try_get::<Vec<u8>, _>("hash").map_err(db_err)?),
        seal: row.try_get("seal").map_err(db_err)?,
    })
}

pub(super) fn ids<T>(
    rows: &[AnyRow],
    parse: impl Fn(&str) -> Result<T, countersign_broker_core::Error>,
) -> Result<Vec<T>, StorageError> {
    rows.iter()
        .map(|r| {
            let id: String = r.try_get("id").map_err(db_err)?;
            parse(&id).map_err(|_| StorageError::Corrupt(format!("id {id:?}")))
        })
        .collect()
}

/// An audit head's row: its position and hash (as hex).
pub(super) fn head_of(row: &AnyRow) -> Result<(i64, String), StorageError> {
    Ok((
        row.try_get("position").map_err(db_err)?,
        hex::encode(row.try_get::<Vec<u8>, _>("hash").map_err(db_err)?),
    ))
}
