//! SQLite's single writer, with group commit: the shared writer
//! (`countersign_common::sql_writer`, the console's too), whose batches carry the broker's
//! audit log entries.
//!
//! Audit log entries are the exception to "statements run in the transaction's turn": each
//! transaction's entries are computed in its turn (on the head the writer remembers) and
//! queued on the batch ([`Audit`]), and the flusher inserts the whole batch's entries in one
//! statement just before the `COMMIT`, so they commit with the rows they record, or fail with
//! them. No write transaction reads the audit log, so none misses a queued entry. A transaction
//! undone to its savepoint takes its entries back, and the head it found is the head again.
//!
//! Statements whose answer nobody reads are held back, and travel with the next statement
//! sent on the connection, as one text: the physical transaction's `BEGIN`, each turn's
//! savepoint, and the upserts of `put_*` (`Deferred`). The batch's `COMMIT` takes what is still
//! held back, with the audit entries. sqlx runs each statement of a SQLite connection on that
//! connection's own thread, and every statement sent was a round trip to it, with a wake-up at
//! each end; an automatic request's turn and commit were six of them, and are three (two when
//! `Exclusive` answers its enrollment from its cache). A held-back write that fails does so in
//! whichever statement carried it, maybe another transaction's: that statement answers
//! [`StorageError::Conflict`](countersign_broker_core::storage::StorageError) (unless the
//! database is unavailable), the physical transaction rolls back, and every member of the batch
//! runs again. (sqlx's SQLite driver runs a text of several statements with parameters, one
//! statement after another; sqlx calls this behaviour deprecated, without a date for its
//! removal. A test in `tests/storage.rs` fails if it stops running them all.)

use countersign_broker_core::audit::AuditEntry;
use countersign_common::sql_writer::{self, Deferred, Pending};

pub(crate) use countersign_common::sql_writer::held_back_failed;

use crate::audit_sql::defer_audit;

/// The writer of the broker's SQLite storage.
pub(crate) type Writer = sql_writer::Writer<Audit>;
/// One write transaction's turn at it.
pub(crate) type Slot = sql_writer::Slot<Audit>;

/// The audit entries a batch's transactions appended, and the head (position, hash) they
/// left: valid while every transaction since it was set commits; forgotten on any rollback of
/// the batch or failed commit, and then read from the database again. This process is
/// SQLite's only writer, so the database's head changes only through it (a tampered tail is
/// the follower's to find).
#[derive(Default)]
pub(crate) struct Audit {
    head: Option<(i64, String)>,
    entries: Vec<AuditEntry>,
}

impl Pending for Audit {
    type Mark = (Option<(i64, String)>, usize);

    fn mark(&self) -> Self::Mark {
        (self.head.clone(), self.entries.len())
    }

    fn undo(&mut self, (head, len): Self::Mark) {
        self.head = head;
        self.entries.truncate(len);
    }

    fn forget(&mut self) {
        self.head = None;
        self.entries.clear();
    }

    fn flush(&mut self, held: &mut Deferred) {
        let entries = std::mem::take(&mut self.entries);
        defer_audit(held, &entries);
    }
}

/// The audit log through a turn at the writer.
pub(crate) trait AuditSlot {
    /// The audit log head this writer's appends left, if still known.
    fn audit_head(&self) -> Option<(i64, String)>;
    /// Appends audit entries: they are inserted with the batch, just before its COMMIT, and
    /// their head is remembered (both forgotten if the physical transaction fails).
    fn append_audit(&mut self, entries: &[AuditEntry]);
}

impl AuditSlot for Slot {
    fn audit_head(&self) -> Option<(i64, String)> {
        self.pending().head.clone()
    }

    fn append_audit(&mut self, entries: &[AuditEntry]) {
        let Some(last) = entries.last() else {
            return;
        };
        let audit = self.pending_mut();
        audit.head = Some((last.position, last.hash.clone()));
        audit.entries.extend_from_slice(entries);
    }
}
