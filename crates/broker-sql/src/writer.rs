//! SQLite's single writer, with group commit.
//!
//! SQLite takes one writer at a time, and with `synchronous=FULL` every `COMMIT` waits for the
//! disk. One physical transaction per logical one made the write lock the broker's bottleneck:
//! each logical transaction paid a pool checkout, `BEGIN IMMEDIATE`, `COMMIT` and an fsync while
//! every other writer queued behind it. Here logical write transactions run one after another
//! (a FIFO-fair async mutex) inside one physical transaction on one connection, and a flusher
//! task commits that physical transaction for all of them at once:
//!
//! - [`Writer::begin`] takes the mutex and, when no physical transaction is open, runs
//!   `BEGIN IMMEDIATE` on the connection the last batch kept (or on one from the pool).
//! - A logical commit that wrote something puts itself on the batch, releases the mutex, wakes
//!   the flusher and waits for the physical `COMMIT`: its caller hears "committed" only once it
//!   is durable. One that wrote nothing answers at once.
//! - The flusher queues on the same mutex. Being fair, it gets it after the writers already
//!   waiting, which join the batch; it then commits and answers every member with the result.
//! - A logical transaction that wrote and then is dropped without committing (or whose statement
//!   failed, which in SQLite may have rolled the whole transaction back) rolls the physical
//!   transaction back, and the batch's members answer [`StorageError::Conflict`]: nothing of
//!   theirs was committed, and the core runs them again. One that only read is simply released.
//!
//! The write-ahead log is checkpointed by a task of its own, once a second, with
//! `wal_checkpoint(PASSIVE)`, which copies committed pages into the database beside the writer
//! without blocking it; the connections' automatic checkpoints are off (see `lib.rs`), since
//! they ran inside whichever `COMMIT` crossed the threshold and stalled every writer queued
//! behind it for the copy and its sync.
//!
//! Audit log entries are the exception to "statements run in the transaction's turn": each
//! transaction's entries are computed in its turn (on the head the writer remembers) and
//! queued on the batch, and the flusher inserts the whole batch's entries in one statement
//! just before the `COMMIT`, so they commit with the rows they record, or fail with them. No
//! write transaction reads the audit log, so none misses a queued entry.
//!
//! Statements whose answer nobody reads are held back, and travel with the next statement
//! sent on the connection, as one text: the physical transaction's `BEGIN`, and the upserts of
//! `put_*` (`Deferred` in `tx/rows.rs`). The batch's `COMMIT` takes what is still held back,
//! with the audit entries. sqlx runs each statement of a SQLite connection on that connection's
//! own thread, and every statement sent was a round trip to it, with a wake-up at each end; an
//! automatic request's turn and commit were six of them, and are three (two when
//! `Exclusive` answers its enrollment from its cache). A held-back write that
//! fails does so in whichever statement carried it, maybe another transaction's: that statement
//! answers [`StorageError::Conflict`] (unless the database is unavailable), the physical
//! transaction rolls back, and every member of the batch runs again, as when any statement of a
//! batch fails. (sqlx's SQLite driver runs a text of several statements with parameters, one
//! statement after another; sqlx calls this behaviour deprecated, without a date for its
//! removal. A test in `tests/storage.rs` fails if it stops running them all.)
//!
//! Members of a batch see each other's writes before they are durable, as if they had run one
//! after another, and they commit or fail together. Readers on other connections see them only
//! after the `COMMIT`, as before.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use countersign_broker_core::audit::AuditEntry;
use countersign_broker_core::storage::StorageError;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Executor};
use tokio::sync::{Mutex, Notify, OwnedMutexGuard, oneshot};

use crate::error::{begin_err, db_err};
use crate::tx::{Arg, Deferred, bind_all, defer_audit};

/// How long ending a physical transaction may take before its connection is closed instead.
const END_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the write-ahead log is checkpointed.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

type Answer = oneshot::Sender<Result<(), StorageError>>;

/// The physical transaction, when one is open, and the logical commits waiting for it.
#[derive(Default)]
pub(crate) struct Batch {
    conn: Option<PoolConnection<Any>>,
    /// The connection of the last batch that committed, kept for the next one: back in the
    /// pool, sqlx would test it with a round trip on its return and the next batch would check
    /// it out again. Given back by [`Writer::release`].
    idle: Option<PoolConnection<Any>>,
    waiting: Vec<Answer>,
    /// The audit log head (position, hash) the appends of this writer left, valid while every
    /// transaction since it was set commits; forgotten on any rollback or failed commit, and
    /// then read from the database again. This process is SQLite's only writer, so the
    /// database's head changes only through it (a tampered tail is the follower's to find).
    audit_head: Option<(i64, String)>,
    /// Audit entries the batch's transactions appended, inserted just before its COMMIT.
    audit_pending: Vec<AuditEntry>,
    /// The physical transaction's `BEGIN` and the writes whose answer nobody reads, held back
    /// to go with the next statement sent (or with the `COMMIT`).
    deferred: Deferred,
    /// Whether the physical transaction's `BEGIN` was sent (it is held back with `deferred`
    /// until then).
    begun: bool,
}

impl Drop for Batch {
    fn drop(&mut self) {
        // Only when the writer goes away mid-batch (a runtime shutting down): never hand a
        // connection inside a transaction back to the pool; closing it rolls back.
        if let Some(conn) = self.conn.as_mut() {
            conn.close_on_drop();
        }
    }
}

struct Shared {
    batch: Arc<Mutex<Batch>>,
    flush: Notify,
    closed: AtomicBool,
    /// Whether a committed batch's connection is kept for the next (not when the pool's one
    /// connection is an in-memory database's, which readers need too).
    keep: bool,
    /// Set by [`Writer::release`]: no connection is kept any more.
    released: AtomicBool,
    /// Write transactions waiting for their turn ([`Writer::waiting`]).
    waiting: AtomicUsize,
}

/// The writer of one SQLite storage. Dropping the last handle lets the flusher commit what is
/// left and stop.
pub(crate) struct Writer {
    shared: Arc<Shared>,
    pool: AnyPool,
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.flush.notify_one();
    }
}

impl Writer {
    /// Starts the flusher, and for a database `file` the checkpointer, on the current Tokio
    /// runtime.
    pub(crate) fn start(pool: AnyPool, file: bool) -> Arc<Writer> {
        let shared = Arc::new(Shared {
            batch: Arc::default(),
            flush: Notify::new(),
            closed: AtomicBool::new(false),
            keep: file,
            released: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
        });
        tokio::spawn(flusher(shared.clone()));
        if file {
            tokio::spawn(checkpointer(Arc::downgrade(&shared), pool.clone()));
        }
        Arc::new(Writer { shared, pool })
    }

    /// Waits for the write mutex and opens the physical transaction if none is open.
    pub(crate) async fn begin(self: &Arc<Self>) -> Result<Slot, StorageError> {
        let queued = Queued::on(&self.shared.waiting);
        let mut batch = self.shared.batch.clone().lock_owned().await;
        drop(queued);
        if batch.conn.is_none() {
            let conn = match batch.idle.take() {
                Some(conn) => conn,
                None => self.pool.acquire().await.map_err(begin_err)?,
            };
            batch.conn = Some(conn);
            batch.begun = false;
            batch.deferred.clear();
            batch.deferred.push("BEGIN IMMEDIATE", Vec::new());
        }
        Ok(Slot {
            batch,
            writer: self.clone(),
            wrote: false,
            failed: false,
            carrying: false,
        })
    }
}

impl Writer {
    /// How many write transactions wait for their turn now.
    pub(crate) fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Acquire)
    }

    /// Gives the kept connection back to the pool, and keeps none from then on (before the
    /// pool is closed, which waits for every checked-out connection). The flag is set before
    /// the batch's lock is taken and read under it, so a batch committing meanwhile keeps none.
    pub(crate) async fn release(&self) {
        self.shared.released.store(true, Ordering::Release);
        let idle = self.shared.batch.lock().await.idle.take();
        drop(idle);
    }
}

/// Counts a write transaction as waiting for its turn until dropped (also when the wait is
/// cancelled).
struct Queued<'a>(&'a AtomicUsize);

impl<'a> Queued<'a> {
    fn on(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::AcqRel);
        Queued(waiting)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One logical write transaction's turn at the writer.
pub(crate) struct Slot {
    batch: OwnedMutexGuard<Batch>,
    writer: Arc<Writer>,
    wrote: bool,
    failed: bool,
    /// A statement carrying held-back ones was sent and has not answered. Dropped then (its
    /// caller cancelled), the turn cannot know which of them ran (sqlx's worker stops a text
    /// at its first result nobody receives), so the batch rolls back.
    carrying: bool,
}

impl Slot {
    /// The connection, inside the physical transaction, with nothing held back: what was is
    /// sent first, on its own.
    pub(crate) async fn conn(&mut self) -> Result<&mut AnyConnection, StorageError> {
        if let Some((sql, args)) = self.batch.deferred.take() {
            self.batch.begun = true;
            let conn = self.batch.conn.as_deref_mut().ok_or_else(ended)?;
            self.carrying = true;
            let r = bind_all(sqlx::query(&sql), args).execute(&mut *conn).await;
            self.carrying = false;
            if let Err(e) = r {
                self.failed = true;
                return Err(held_back_failed(e));
            }
        }
        self.batch.conn.as_deref_mut().ok_or_else(ended)
    }

    /// The connection, and `sql` preceded by what is held back as one text, whose arguments
    /// `args` becomes (`None`, and `args` untouched, when nothing is held back). A failure of
    /// the whole is [`held_back_failed`]'s.
    pub(crate) fn with_held_back(
        &mut self,
        sql: &str,
        args: &mut Vec<Arg>,
    ) -> Result<(&mut AnyConnection, Option<String>), StorageError> {
        let batch = &mut *self.batch;
        let combined = batch.deferred.then(sql, args);
        if combined.is_some() {
            batch.begun = true;
            self.carrying = true;
        }
        let conn = batch.conn.as_deref_mut().ok_or_else(ended)?;
        Ok((conn, combined))
    }

    /// The statement [`Slot::with_held_back`] gave has answered.
    pub(crate) fn answered(&mut self) {
        self.carrying = false;
    }

    /// Holds back a write whose answer nobody reads: it is sent with the next statement, or
    /// with the batch's `COMMIT`.
    pub(crate) fn defer(&mut self, sql: &str, args: Vec<Arg>) {
        self.wrote = true;
        self.batch.deferred.push(sql, args);
    }

    /// The audit log head this writer's appends left, if still known.
    pub(crate) fn audit_head(&self) -> Option<(i64, String)> {
        self.batch.audit_head.clone()
    }

    /// Appends audit entries: they are inserted with the batch, just before its COMMIT, and
    /// their head is remembered (both forgotten if the physical transaction fails).
    pub(crate) fn append_audit(&mut self, entries: &[AuditEntry]) {
        let Some(last) = entries.last() else {
            return;
        };
        self.wrote = true;
        self.batch.audit_head = Some((last.position, last.hash.clone()));
        self.batch.audit_pending.extend_from_slice(entries);
    }

    /// Call before a statement that may change the database.
    pub(crate) fn writing(&mut self) {
        self.wrote = true;
    }

    /// Call when a statement failed: the physical transaction may be gone.
    pub(crate) fn failed(&mut self) {
        self.failed = true;
    }

    /// Commits: answers once the physical transaction holding this one's writes is committed.
    pub(crate) async fn commit(self) -> Result<(), StorageError> {
        let Slot {
            mut batch,
            writer,
            wrote,
            failed,
            carrying,
        } = self;
        if failed || carrying {
            roll_back(batch, "a statement failed").await;
            return Err(StorageError::Conflict);
        }
        if !wrote {
            drop(batch);
            writer.shared.flush.notify_one();
            return Ok(());
        }
        let (answer, committed) = oneshot::channel();
        batch.waiting.push(answer);
        drop(batch);
        writer.shared.flush.notify_one();
        let result = committed.await.unwrap_or_else(|_| {
            Err(StorageError::Unavailable(
                "the writer stopped before committing".into(),
            ))
        });
        drop(writer);
        result
    }

    /// Ends the turn without committing (called on drop, outside async code).
    pub(crate) fn abandon(self) {
        let Slot {
            batch,
            writer,
            wrote,
            failed,
            carrying,
        } = self;
        if !wrote && !failed && !carrying {
            drop(batch);
            writer.shared.flush.notify_one();
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    roll_back(batch, "a transaction that wrote was dropped").await;
                    drop(writer);
                });
            }
            Err(_) => {
                // No runtime to roll back on: close the connection, which rolls back, rather
                // than return it to the pool inside a transaction.
                let mut batch = batch;
                batch.audit_head = None;
                batch.audit_pending.clear();
                batch.deferred.clear();
                if let Some(mut conn) = batch.conn.take() {
                    conn.close_on_drop();
                }
                for w in batch.waiting.drain(..) {
                    let _ = w.send(Err(StorageError::Conflict));
                }
            }
        }
    }
}

/// Rolls the physical transaction back; its batch's members answer `Conflict`.
async fn roll_back(mut batch: OwnedMutexGuard<Batch>, why: &str) {
    batch.audit_head = None;
    batch.audit_pending.clear();
    batch.deferred.clear();
    if !batch.begun {
        // Nothing was sent, not even the `BEGIN`: nothing to roll back, and the connection
        // goes back to the pool as it was.
        batch.conn = None;
    } else if let Some(mut conn) = batch.conn.take() {
        let rolled = tokio::time::timeout(END_TIMEOUT, conn.execute("ROLLBACK")).await;
        if !matches!(rolled, Ok(Ok(_))) {
            // SQLite may have rolled back already (then ROLLBACK fails harmlessly); if not,
            // closing the connection does it.
            conn.close_on_drop();
        }
    }
    let n = batch.waiting.len();
    for w in batch.waiting.drain(..) {
        let _ = w.send(Err(StorageError::Conflict));
    }
    if n > 0 {
        tracing::debug!(members = n, reason = why, "write batch rolled back");
    }
}

/// Commits the open physical transaction and answers its batch.
async fn commit_batch(batch: &mut Batch, keep: bool) {
    let Some(mut conn) = batch.conn.take() else {
        return;
    };
    let pending = std::mem::take(&mut batch.audit_pending);
    if !batch.begun && batch.deferred.statements() == 1 && pending.is_empty() {
        // Only the held-back `BEGIN`: no statement ran, nothing to commit.
        batch.deferred.clear();
        if keep {
            batch.idle = Some(conn);
        }
        for w in batch.waiting.drain(..) {
            let _ = w.send(Ok(()));
        }
        return;
    }
    // What is held back, the batch's audit entries and the COMMIT go as one text.
    defer_audit(&mut batch.deferred, &pending);
    batch.deferred.push("COMMIT", Vec::new());
    let (sql, args) = batch.deferred.take().unwrap_or_default();
    batch.begun = true;
    let result = match tokio::time::timeout(END_TIMEOUT, async {
        bind_all(sqlx::query(&sql), args).execute(&mut *conn).await
    })
    .await
    {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(held_back_failed(e)),
        Err(_) => Err(StorageError::Unavailable(format!(
            "COMMIT did not finish within {END_TIMEOUT:?}"
        ))),
    };
    if result.is_err() {
        batch.audit_head = None;
        let _ = tokio::time::timeout(END_TIMEOUT, conn.execute("ROLLBACK")).await;
        conn.close_on_drop();
    } else if keep {
        batch.idle = Some(conn);
    }
    for w in batch.waiting.drain(..) {
        let _ = w.send(result.clone());
    }
}

async fn flusher(shared: Arc<Shared>) {
    loop {
        shared.flush.notified().await;
        let mut batch = shared.batch.lock().await;
        let keep = shared.keep && !shared.released.load(Ordering::Acquire);
        commit_batch(&mut batch, keep).await;
        drop(batch);
        if shared.closed.load(Ordering::Acquire) {
            return;
        }
    }
}

/// Checkpoints the write-ahead log every [`CHECKPOINT_EVERY`] until the writer is dropped.
async fn checkpointer(shared: std::sync::Weak<Shared>, pool: AnyPool) {
    let mut tick = tokio::time::interval(CHECKPOINT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match shared.upgrade() {
            Some(s) if !s.closed.load(Ordering::Acquire) && !pool.is_closed() => {}
            _ => return,
        }
        let done = tokio::time::timeout(END_TIMEOUT, async {
            let mut conn = pool.acquire().await?;
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").await
        })
        .await;
        match done {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "checkpointing the SQLite log failed"),
            Err(_) => tracing::warn!("checkpointing the SQLite log did not finish in time"),
        }
    }
}

fn ended() -> StorageError {
    StorageError::Other("the write transaction was ended".into())
}

/// A statement sent with what was held back failed: the failure may be an earlier
/// transaction's held-back write as well as this one's statement. The physical transaction
/// rolls back, and every member runs again ([`StorageError::Conflict`], the cause logged)
/// unless the database is unavailable.
pub(crate) fn held_back_failed(e: sqlx::Error) -> StorageError {
    match db_err(e) {
        StorageError::Unavailable(why) => StorageError::Unavailable(why),
        other => {
            tracing::warn!(error = %other, "a write batch's statements failed; its transactions run again");
            StorageError::Conflict
        }
    }
}
