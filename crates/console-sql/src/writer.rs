//! SQLite's single writer, with group commit: the shared writer
//! (`countersign_common::sql_writer`, the broker's too; its module documents how batches form
//! and fail). The console runs its statements on the connection itself (a [`Slot`] is an
//! `AnyConnection`), so a turn sends its `BEGIN IMMEDIATE` / `SAVEPOINT w` at once: one round
//! trip at its begin, none at its commit. A slot dropped without committing (the operation
//! refused, or a statement failed) is undone to its savepoint, and the batch's other members
//! keep their writes. PostgreSQL is not written through here: its writers run concurrently on
//! their own transactions.

use std::ops::{Deref, DerefMut};
use std::sync::Arc;

use countersign_common::sql_writer;
use countersign_console_core::storage::StorageError;
use sqlx::{AnyConnection, AnyPool};

/// SQLite's writer. Cloning shares it.
#[derive(Clone, Debug)]
pub(crate) struct Writer(Arc<sql_writer::Writer>);

impl Writer {
    /// A writer over `pool`, with its flusher task (which ends with the writer). Each batch's
    /// connection goes back to the pool (none is kept, so closing the pool waits for none).
    pub(crate) fn new(pool: AnyPool) -> Self {
        Writer(sql_writer::Writer::start(pool, false))
    }

    /// A turn at the writer: inside the physical transaction (begun if none is open), in a
    /// savepoint of its own.
    pub(crate) async fn begin(&self) -> Result<Slot, StorageError> {
        // Dropped (a failed or cancelled start), the turn ends and undoes itself.
        let mut turn = self.0.begin().await?;
        turn.conn().await?;
        Ok(Slot(turn))
    }
}

/// One logical write transaction's turn at the writer. Dropped without committing (the
/// operation refused, or a statement failed), its writes are undone and the batch's kept.
pub(crate) struct Slot(sql_writer::Slot);

impl Slot {
    /// Keeps this transaction's writes in the batch and waits for the batch to commit.
    pub(crate) async fn commit(self) -> Result<(), StorageError> {
        self.0.commit().await
    }
}

impl Deref for Slot {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        match self.0.conn_ref() {
            Some(c) => c,
            // A slot always holds its turn and the connection until it is committed or
            // dropped; statements are only run in between.
            None => unreachable!("a writer slot without its connection"),
        }
    }
}

impl DerefMut for Slot {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        // Each statement the console runs counts as a write (it does not say which write).
        match self.0.sent_conn() {
            Some(c) => c,
            None => unreachable!("a writer slot without its connection"),
        }
    }
}
