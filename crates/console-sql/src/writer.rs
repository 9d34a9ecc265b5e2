//! SQLite's single writer, with group commit (as the broker's `broker-sql/src/writer.rs`, with
//! savepoints so a failed member costs only itself).
//!
//! SQLite takes one writer at a time, and every physical commit writes each page it changed to
//! the write-ahead log (an issue's row, its indexes, its label rows, a new full-text segment).
//! One physical transaction per logical one made the write lock the console's bottleneck. Here
//! logical write transactions take turns (a FIFO-fair async mutex) inside one physical
//! transaction on one connection, each inside a `SAVEPOINT`, and a flusher task commits the
//! physical transaction for all of them at once:
//!
//! - [`Writer::begin`] takes the mutex and, when no physical transaction is open, checks a
//!   connection out of the pool and runs `BEGIN IMMEDIATE` on it; then `SAVEPOINT w`. Only
//!   one savepoint is ever open.
//! - [`Slot::commit`] leaves its savepoint to be released by the next member's begin (`RELEASE
//!   w; SAVEPOINT w`, one round trip) or by the `COMMIT`, puts itself on the batch, releases
//!   the mutex, wakes the flusher and waits for the physical `COMMIT`: its caller hears
//!   "committed" only once the batch committed. Every statement the writer waits on holds
//!   every other writer, so a transaction's begin is one round trip (`BEGIN IMMEDIATE;
//!   SAVEPOINT w` when it opens the batch) and its commit none.
//! - The flusher queues on the same mutex. Being fair, it gets it after the writers already
//!   waiting, which join the batch; it then commits and answers every member with the result
//!   (a failed `COMMIT`: [`StorageError::Conflict`], so the core runs them again).
//! - A slot dropped without committing (the operation refused, or a statement failed) rolls
//!   back to its savepoint, so the batch's other members keep their writes; if even that fails,
//!   the physical transaction is rolled back and the members waiting on it answer `Conflict`.
//!
//! Members of a batch see each other's writes before they commit, as if they had run one after
//! another, and they commit together. Readers on other connections see them only after the
//! `COMMIT`. PostgreSQL is not written through here: its writers run concurrently on their own
//! transactions.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Weak};
use std::time::Duration;

use countersign_common::sql::{begin_err, db_err};
use countersign_console_core::storage::StorageError;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Executor};
use tokio::sync::{Mutex, Notify, OwnedMutexGuard, oneshot};

/// How long ending a physical transaction may take before its connection is closed instead.
const END_TIMEOUT: Duration = Duration::from_secs(10);

type Answer = oneshot::Sender<Result<(), StorageError>>;

/// The physical transaction, when one is open, and the logical commits waiting for it.
#[derive(Default)]
struct Batch {
    conn: Option<PoolConnection<Any>>,
    waiting: Vec<Answer>,
    /// The last member committed, and its savepoint is not released yet: the next member's
    /// `SAVEPOINT` releases it in the same round trip, and `COMMIT` releases every one.
    unreleased: bool,
}

impl Batch {
    /// Ends the physical transaction: `COMMIT` (or `ROLLBACK`), the connection back to the
    /// pool (closed instead when ending it failed), and every waiting member answered.
    async fn end(&mut self, commit: bool) {
        self.unreleased = false;
        let result = match self.conn.as_mut() {
            None => Ok(()),
            Some(conn) => {
                let sql = if commit { "COMMIT" } else { "ROLLBACK" };
                match tokio::time::timeout(END_TIMEOUT, conn.execute(sql)).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(db_err(e)),
                    Err(_) => Err(StorageError::Unavailable(
                        "SQLite did not end a write".into(),
                    )),
                }
            }
        };
        if let Some(mut conn) = self.conn.take()
            && result.is_err()
        {
            // Never hand a connection that may still be inside a transaction back to the pool.
            conn.close_on_drop();
        }
        let answer = match (commit, &result) {
            (true, Ok(())) => Ok(()),
            (true, Err(e)) => {
                tracing::warn!(error = %e, "a group commit failed; its writes run again");
                Err(StorageError::Conflict)
            }
            (false, _) => Err(StorageError::Conflict),
        };
        for w in self.waiting.drain(..) {
            let _ = w.send(answer.clone());
        }
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        // Only when the writer goes away mid-batch (a runtime shutting down): closing the
        // connection rolls its transaction back.
        if let Some(conn) = self.conn.as_mut() {
            conn.close_on_drop();
        }
    }
}

struct Inner {
    pool: AnyPool,
    batch: Arc<Mutex<Batch>>,
    flush: Arc<Notify>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The flusher wakes, finds the writer gone, and ends.
        self.flush.notify_one();
    }
}

/// SQLite's writer. Cloning shares it.
#[derive(Clone)]
pub(crate) struct Writer(Arc<Inner>);

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

impl Writer {
    /// A writer over `pool`, with its flusher task (which ends with the writer).
    pub(crate) fn new(pool: AnyPool) -> Self {
        let flush = Arc::new(Notify::new());
        let w = Writer(Arc::new(Inner {
            pool,
            batch: Arc::new(Mutex::new(Batch::default())),
            flush: flush.clone(),
        }));
        let weak: Weak<Inner> = Arc::downgrade(&w.0);
        tokio::spawn(async move {
            loop {
                // A member's notify before this wait is kept as a permit, never lost.
                flush.notified().await;
                let Some(batch) = weak.upgrade().map(|i| i.batch.clone()) else {
                    return;
                };
                // Commit whatever joined: the writers that queued on the mutex before this
                // task run first (the mutex is fair) and join the batch.
                let mut batch = batch.lock_owned().await;
                if !batch.waiting.is_empty() {
                    batch.end(true).await;
                }
            }
        });
        w
    }

    /// A turn at the writer: inside the physical transaction (begun if none is open), in a
    /// savepoint of its own.
    pub(crate) async fn begin(&self) -> Result<Slot, StorageError> {
        let mut batch = self.0.batch.clone().lock_owned().await;
        if batch.conn.is_none() {
            let mut conn = self.0.pool.acquire().await.map_err(begin_err)?;
            // One round trip for both: each one the writer waits on holds every other writer.
            if let Err(e) = conn.execute("BEGIN IMMEDIATE; SAVEPOINT w").await {
                // Never hand back a connection that may be inside a transaction.
                conn.close_on_drop();
                return Err(begin_err(e));
            }
            batch.conn = Some(conn);
            return Ok(Slot {
                batch: Some(batch),
                writer: self.0.clone(),
            });
        }
        let sql = if batch.unreleased {
            "RELEASE w; SAVEPOINT w"
        } else {
            "SAVEPOINT w"
        };
        let started = match batch.conn.as_mut() {
            Some(conn) => conn.execute(sql).await.map_err(db_err),
            None => Err(StorageError::Unavailable("no write connection".into())),
        };
        batch.unreleased = false;
        if let Err(e) = started {
            batch.end(false).await;
            return Err(e);
        }
        Ok(Slot {
            batch: Some(batch),
            writer: self.0.clone(),
        })
    }
}

/// One logical write transaction's turn at the writer.
pub(crate) struct Slot {
    batch: Option<OwnedMutexGuard<Batch>>,
    writer: Arc<Inner>,
}

impl Slot {
    /// Keeps this transaction's writes in the batch and waits for the batch to commit.
    pub(crate) async fn commit(mut self) -> Result<(), StorageError> {
        let Some(mut batch) = self.batch.take() else {
            return Err(StorageError::Conflict);
        };
        if batch.conn.is_none() {
            return Err(StorageError::Conflict);
        }
        // Released by the next member's `SAVEPOINT` or by the `COMMIT`, not in a round trip
        // of its own.
        batch.unreleased = true;
        let (tx, rx) = oneshot::channel();
        batch.waiting.push(tx);
        drop(batch);
        self.writer.flush.notify_one();
        rx.await.unwrap_or(Err(StorageError::Conflict))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        // Dropped without committing: undo this transaction's writes, keep the batch's. The
        // guard goes with the task, so the next writer waits until it is done.
        if let Some(mut batch) = self.batch.take() {
            let Ok(runtime) = tokio::runtime::Handle::try_current() else {
                // No runtime left to run the rollback on (shutting down): the batch's
                // connection is closed, which rolls its transaction back.
                if let Some(conn) = batch.conn.as_mut() {
                    conn.close_on_drop();
                }
                batch.conn = None;
                for w in batch.waiting.drain(..) {
                    let _ = w.send(Err(StorageError::Conflict));
                }
                return;
            };
            runtime.spawn(async move {
                let undone = match batch.conn.as_mut() {
                    Some(conn) => match conn.execute("ROLLBACK TO w").await {
                        Ok(_) => conn.execute("RELEASE w").await.map(|_| ()),
                        Err(e) => Err(e),
                    },
                    None => Ok(()),
                };
                if let Err(e) = undone {
                    tracing::warn!(error = %e, "a savepoint could not be rolled back; the batch runs again");
                    batch.end(false).await;
                } else if batch.waiting.is_empty() {
                    // No member waits on the physical transaction: end it now, so the write
                    // lock is not held for nothing (other connections' writes wait on it).
                    batch.end(true).await;
                }
            });
        }
    }
}

impl Deref for Slot {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        match self.batch.as_ref().and_then(|b| b.conn.as_ref()) {
            Some(c) => c,
            // A slot always holds the batch and its connection until it is committed or
            // dropped; statements are only run in between.
            None => unreachable!("a writer slot without its connection"),
        }
    }
}

impl DerefMut for Slot {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        match self.batch.as_mut().and_then(|b| b.conn.as_mut()) {
            Some(c) => c,
            None => unreachable!("a writer slot without its connection"),
        }
    }
}
