//! The tamper-evident audit log: every decision, grant, release (names, never values),
//! revocation, end, withholding and expiry, as entries at consecutive positions from 1, each
//! hash-chained to the one before it and sealed with the broker's key.
//!
//! - `hash = hex SHA-256(prev_hash ‖ position ‖ at ‖ kind ‖ subject ‖ body)`, each field
//!   length-prefixed (8 bytes, big-endian), `prev_hash` of the first entry being [`GENESIS`].
//! - `seal = HMAC-SHA-256(key, "audit/v1" ‖ position ‖ hash)` (see [`crate::seal::Sealer`]).
//!
//! A writer without the key can neither forge an entry nor edit one (its hash changes and the
//! seal no longer verifies), nor splice the chain (the next entry's `prev_hash` breaks). Deleting
//! the tail leaves a valid shorter chain: only a reader that remembers a higher position sees
//! it, which is what [`Follower`] is for (each replica remembers its head outside the database).
//!
//! Entries are appended by [`append`] inside the transaction of the change they record, so the
//! row and its entry commit together; the backend's `audit_head` serialises appenders.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::clock::Time;
use crate::model::{Enrollment, Grant, LauncherCredential, Record};
use crate::seal::Sealer;
use crate::storage::{StorageError, Tx};

/// The `prev_hash` of the first entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// What one entry records, before it has a place in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    pub kind: &'static str,
    pub subject: String,
    /// The body as JSON text (names and ids, never values).
    pub body: String,
}

/// Kinds that end their subject: an entry of one of these ends the grant (or session,
/// credential) it names, whatever its row says.
pub const END_KINDS: &[&str] = &[
    "revocation",
    "expiry",
    "end",
    "session_end",
    "machine_login_end",
];

/// Kinds whose commit is made durable in this replica's memory of the head (its
/// [`HeadKeeper`]) before the change is answered: whatever ends something. An end a replica has
/// acknowledged is then never forgotten by it, whatever happens to the database afterwards.
pub const DURABLE_KINDS: &[&str] = &[
    "revocation",
    "expiry",
    "end",
    "session_end",
    "machine_login_end",
    "withholding",
];

/// The kind of the entry `audit accept-head` appends: an operator accepted the chain as it was
/// (its subject is [`ACCEPT_SUBJECT`]). A witness whose record is no longer in the chain but
/// predates such an entry takes the broker's head instead of failing it closed.
pub const ACCEPT_KIND: &str = "head_accepted";

/// The subject of an [`ACCEPT_KIND`] entry.
pub const ACCEPT_SUBJECT: &str = "audit:head";

/// Where a replica keeps the head it has verified outside the database (the server: a state
/// file, written and `fsync`ed). [`Follower::keep`] calls it before an end is answered.
#[async_trait::async_trait]
pub trait HeadKeeper: Send + Sync + std::fmt::Debug {
    /// Makes `head` (or a later one) durable. Never moves backwards: a lower head than one
    /// already kept is already kept.
    async fn keep(&self, head: &Walk) -> Result<(), String>;
}

/// The chained hash of an entry's content.
pub fn entry_hash(
    prev_hash: &str,
    position: i64,
    at: Time,
    kind: &str,
    subject: &str,
    body: &str,
) -> String {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    let (p, t) = (position.to_string(), at.timestamp_millis().to_string());
    for f in [
        prev_hash.as_bytes(),
        p.as_bytes(),
        t.as_bytes(),
        kind.as_bytes(),
        subject.as_bytes(),
        body.as_bytes(),
    ] {
        ctx.update(&(f.len() as u64).to_be_bytes());
        ctx.update(f);
    }
    hex::encode(ctx.finish().as_ref())
}

/// Why a chain does not verify at an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakReason {
    /// The seal does not verify over the entry's position and hash.
    Seal,
    /// The stored hash is not the hash of the entry's content.
    Hash,
    /// A position is missing (or the chain is shorter than remembered).
    Gap,
    /// The entry does not link to the one before it.
    PrevHash,
    /// The entry at the remembered position is not the one remembered.
    Rewritten,
    /// A witness outside the database (the console) has seen an entry the chain no longer has.
    Witness,
}

impl BreakReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Seal => "seal",
            Self::Hash => "hash",
            Self::Gap => "gap",
            Self::PrevHash => "prev_hash",
            Self::Rewritten => "rewritten",
            Self::Witness => "witness",
        }
    }
}

/// Where and why a chain breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainBreak {
    pub position: i64,
    pub reason: BreakReason,
}

impl std::fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "position {}: {}", self.position, self.reason.as_str())
    }
}

/// Checks one entry on its own: its hash over its content and its seal.
pub fn check_entry(sealer: &Sealer, e: &AuditEntry) -> Result<(), BreakReason> {
    if entry_hash(&e.prev_hash, e.position, e.at, &e.kind, &e.subject, &e.body) != e.hash {
        return Err(BreakReason::Hash);
    }
    if !sealer.verify_audit(e.position, &e.hash, &e.seal) {
        return Err(BreakReason::Seal);
    }
    Ok(())
}

/// A chain walked in order: the last verified (position, hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    pub position: i64,
    pub hash: String,
}

impl Default for Walk {
    fn default() -> Self {
        Self {
            position: 0,
            hash: GENESIS.to_owned(),
        }
    }
}

impl Walk {
    /// Verifies the next entry: at the next position, linked, hashed and sealed.
    pub fn step(&mut self, sealer: &Sealer, e: &AuditEntry) -> Result<(), ChainBreak> {
        let brk = |reason| ChainBreak {
            position: e.position,
            reason,
        };
        if e.position != self.position + 1 {
            return Err(ChainBreak {
                position: self.position + 1,
                reason: BreakReason::Gap,
            });
        }
        check_entry(sealer, e).map_err(brk)?;
        if e.prev_hash != self.hash {
            return Err(brk(BreakReason::PrevHash));
        }
        self.position = e.position;
        self.hash = e.hash.clone();
        Ok(())
    }
}

/// Appends `events` at the end of the chain, in `tx`: takes the head (which the backend locks
/// until commit), then writes one sealed entry per event, all in one call. Call it last in a transaction, after
/// the rows the events record, so the head lock is held briefly. Answers the new head.
pub async fn append(
    tx: &mut dyn Tx,
    sealer: &Sealer,
    at: Time,
    events: &[AuditEvent],
) -> Result<Option<(i64, String)>, StorageError> {
    if events.is_empty() {
        return Ok(None);
    }
    let (mut position, mut prev) = tx
        .audit_head()
        .await?
        .unwrap_or_else(|| (0, GENESIS.to_owned()));
    let mut entries = Vec::with_capacity(events.len());
    for ev in events {
        position += 1;
        let body = ev.body.clone();
        let hash = entry_hash(&prev, position, at, ev.kind, &ev.subject, &body);
        let entry = AuditEntry {
            position,
            at,
            kind: ev.kind.to_owned(),
            subject: ev.subject.clone(),
            body,
            prev_hash: prev,
            seal: sealer.seal_audit(position, &hash),
            hash: hash.clone(),
        };
        entries.push(entry);
        prev = hash;
    }
    tx.append_audit(&entries).await?;
    Ok(Some((position, prev)))
}

/// Walks the whole chain from the first entry, `batch` entries per read. Answers the number of
/// entries and the head, or the first break.
pub async fn verify_all(
    tx: &mut dyn Tx,
    sealer: &Sealer,
) -> Result<Result<Walk, ChainBreak>, StorageError> {
    let mut walk = Walk::default();
    loop {
        let batch = tx.audit_entries(walk.position, 1000).await?;
        if batch.is_empty() {
            return Ok(Ok(walk));
        }
        for e in &batch {
            if let Err(b) = walk.step(sealer, e) {
                return Ok(Err(b));
            }
        }
    }
}

/// Whether a verified entry ends its subject.
pub fn ends(e: &AuditEntry) -> bool {
    END_KINDS.contains(&e.kind.as_str())
}

pub(crate) mod entry;
mod follower;
mod inspection;

pub use entry::AuditEntry;
pub use follower::{Follower, FollowerState, PENDING_MAX, SWEEP_PER_ROUND, Witnessed};
pub use inspection::{Finding, Inspection};

#[cfg(test)]
mod tests;
