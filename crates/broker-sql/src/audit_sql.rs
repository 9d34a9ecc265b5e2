//! The audit log's rows as statements (`INSERT`s of entries, the stored form of a hash, the
//! lock appenders hold on PostgreSQL): what both a transaction (`tx/`) and SQLite's writer
//! (`writer.rs`) write, below both.

use countersign_broker_core::audit::AuditEntry;
use countersign_common::sql_writer::{Arg, Deferred};

pub(crate) const AUDIT_COLUMNS: &str =
    "position, at_ms, kind, subject, body, prev_hash, hash, seal";

pub(crate) const AUDIT_ROWS_PER_INSERT: usize = 256;

/// The advisory lock every physical write transaction takes first and holds until it ends
/// (PostgreSQL, `group.rs`): "csau".
pub(crate) const PG_AUDIT_LOCK: i64 = 0x6373_6175;

/// Holds the statements inserting `entries` back in `deferred` (SQLite's writer).
pub(crate) fn defer_audit(deferred: &mut Deferred, entries: &[AuditEntry]) {
    for chunk in entries.chunks(AUDIT_ROWS_PER_INSERT) {
        let (sql, args) = audit_insert(chunk);
        deferred.push(&sql, args);
    }
}

/// One multi-row `INSERT` of `chunk`.
pub(crate) fn audit_insert(chunk: &[AuditEntry]) -> (String, Vec<Arg>) {
    let mut sql = format!("INSERT INTO audit_log ({AUDIT_COLUMNS}) VALUES ");
    let mut args = Vec::with_capacity(chunk.len() * 8);
    for (i, e) in chunk.iter().enumerate() {
        let n = i * 8;
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!(
            "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
            n + 1,
            n + 2,
            n + 3,
            n + 4,
            n + 5,
            n + 6,
            n + 7,
            n + 8
        ));
        args.extend([
            Arg::Int(e.position),
            Arg::Int(e.at.timestamp_millis()),
            Arg::Text(e.kind.clone()),
            Arg::Text(e.subject.clone()),
            Arg::Text(e.body.clone()),
            Arg::Bytes(hash_bytes(&e.prev_hash)),
            Arg::Bytes(hash_bytes(&e.hash)),
            Arg::Text(e.seal.clone()),
        ]);
    }
    (sql, args)
}

/// A chain hash as stored: its 32 bytes (schema version 5), not its 64 hex digits. The chain
/// is defined over the hex text, which reading restores exactly.
pub(crate) fn hash_bytes(hex_text: &str) -> Vec<u8> {
    // The core computes every hash as lowercase hex; anything else is stored as it came, and
    // fails verification when read back.
    hex::decode(hex_text).unwrap_or_else(|_| hex_text.as_bytes().to_vec())
}
