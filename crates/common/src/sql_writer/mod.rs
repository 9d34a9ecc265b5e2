//! SQLite's single writer, with group commit: the one writer of the broker's and the console's
//! SQLite storage (issue 51; there were two, `broker-sql/src/writer.rs` and
//! `console-sql/src/writer.rs`, which failed differently).
//!
//! SQLite takes one writer at a time, and with `synchronous=FULL` every `COMMIT` waits for the
//! disk. One physical transaction per logical one made the write lock the bottleneck. Here
//! logical write transactions ("members") run one after another (a FIFO-fair async mutex)
//! inside one physical transaction on one connection, each in a savepoint of its own, and a
//! flusher task commits the physical transaction for all of them at once:
//!
//! - [`Writer::begin`] takes the mutex and, when no physical transaction is open, takes the
//!   connection the last batch kept (or one from the pool) and holds `BEGIN IMMEDIATE` back;
//!   then it holds back `RELEASE w` (the last member's savepoint, if one is open) and
//!   `SAVEPOINT w`. Held-back statements travel with the next statement sent, as one text
//!   ([`Deferred`]): a turn costs no round trip of its own.
//! - A member that wrote commits by putting itself on the batch, releasing the mutex, waking the
//!   flusher and waiting for the physical `COMMIT`: its caller hears "committed" only once it
//!   is durable. One that wrote nothing answers at once.
//! - The flusher queues on the same mutex. Being fair, it gets it after the writers already
//!   waiting, which join the batch; it then writes what the batch has pending ([`Pending`]: the
//!   broker's audit entries), commits, and answers every member with the result.
//!
//! Failure (one behaviour for both servers):
//!
//! - **A member's own failure costs only that member**, when it can be told apart: a member
//!   dropped without committing, or whose statement failed, after a text holding its
//!   `SAVEPOINT` was answered, runs `ROLLBACK TO w; RELEASE w`; the batch's other members keep
//!   their writes and commit. A member that sent nothing forgets what it held back. (The
//!   console's writer did this; the broker's rolled the whole batch back.)
//! - **Otherwise the whole batch runs again**: a text that failed while it carried earlier
//!   members' held-back statements (or its own `SAVEPOINT`), a text cancelled before it answered
//!   whose savepoint was never confirmed, a `ROLLBACK TO` that failed (SQLite rolled the whole
//!   transaction back), or a failed `COMMIT`: the physical transaction rolls back and every
//!   member waiting on it answers [`StorageError::Conflict`], so the cores run them again.
//! - **An outage is not a conflict**: a failure the driver reports as the database being
//!   unavailable (and a `COMMIT` that does not end within [`END_TIMEOUT`], and a writer that
//!   stopped before committing) answers [`StorageError::Unavailable`], which the servers answer
//!   503 at once instead of retrying. (The broker's writer did this; the console's answered
//!   every failed commit `Conflict`.)
//!
//! With a database file ([`Writer::start`]'s `file`), the connection of a committed batch is
//! kept for the next one (back in the pool, sqlx would test it with a round trip on its
//! return; [`Writer::release`] gives it back before the pool closes), and a task of its own
//! checkpoints the write-ahead log once a second with `wal_checkpoint(PASSIVE)`, beside the
//! writer instead of inside whichever `COMMIT` crossed the threshold.
//!
//! Members of a batch see each other's writes before they are durable, as if they had run one
//! after another, and they commit together. Readers on other connections see them only after
//! the `COMMIT`.

pub mod held;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Executor};
use tokio::sync::{Mutex, Notify, OwnedMutexGuard, oneshot};

pub use held::{Arg, Deferred, HeldMark, bind_all};

use crate::sql::{begin_err, db_err};
use crate::storage::StorageError;

/// How long ending a physical transaction may take before its connection is closed instead.
pub const END_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the write-ahead log is checkpointed.
const CHECKPOINT_EVERY: Duration = Duration::from_secs(1);

/// Each member's savepoint (one is open at a time).
const SAVEPOINT: &str = "SAVEPOINT w";
/// Keeps the last member's writes in the physical transaction.
const RELEASE: &str = "RELEASE w";
/// Undoes a member's writes and closes its savepoint.
const UNDO: &str = "ROLLBACK TO w; RELEASE w";

type Answer = oneshot::Sender<Result<(), StorageError>>;

/// What a batch's members leave to be written just before its `COMMIT` (the broker's audit
/// entries; nothing, `()`, for the console).
pub trait Pending: Default + Send + 'static {
    /// Where a member's additions start.
    type Mark: Send + 'static;
    /// Taken at a member's turn.
    fn mark(&self) -> Self::Mark;
    /// The member rolled back to its savepoint: forget what it added since `mark`.
    fn undo(&mut self, mark: Self::Mark);
    /// The physical transaction rolled back, or its `COMMIT` failed: forget everything.
    fn forget(&mut self);
    /// Just before the `COMMIT`: hold back the statements writing what is pending.
    fn flush(&mut self, held: &mut Deferred);
}

impl Pending for () {
    type Mark = ();
    fn mark(&self) {}
    fn undo(&mut self, _: ()) {}
    fn forget(&mut self) {}
    fn flush(&mut self, _: &mut Deferred) {}
}

/// The physical transaction, when one is open, and the members waiting for its `COMMIT`.
struct Batch<P> {
    conn: Option<PoolConnection<Any>>,
    /// The connection of the last batch that committed, kept for the next one.
    idle: Option<PoolConnection<Any>>,
    waiting: Vec<Answer>,
    pending: P,
    /// The physical transaction's `BEGIN` and the statements whose answer nobody reads, held
    /// back to go with the next statement sent (or with the `COMMIT`).
    deferred: Deferred,
    /// Whether anything was sent in this physical transaction (its `BEGIN` at least).
    begun: bool,
    /// A member's savepoint is open with writes to keep: the next member's turn (or the
    /// `COMMIT`) releases it.
    unreleased: bool,
}

impl<P: Default> Default for Batch<P> {
    fn default() -> Self {
        Batch {
            conn: None,
            idle: None,
            waiting: Vec::new(),
            pending: P::default(),
            deferred: Deferred::default(),
            begun: false,
            unreleased: false,
        }
    }
}

impl<P> Drop for Batch<P> {
    fn drop(&mut self) {
        // Only when the writer goes away mid-batch (a runtime shutting down): never hand a
        // connection inside a transaction back to the pool; closing it rolls back.
        if let Some(conn) = self.conn.as_mut() {
            conn.close_on_drop();
        }
    }
}

struct Shared<P> {
    batch: Arc<Mutex<Batch<P>>>,
    flush: Notify,
    closed: AtomicBool,
    /// Whether a committed batch's connection is kept for the next.
    keep: bool,
    /// Set by [`Writer::release`]: no connection is kept any more.
    released: AtomicBool,
    /// Write transactions waiting for their turn ([`Writer::waiting`]).
    waiting: AtomicUsize,
}

/// The writer of one SQLite storage. Dropping the last handle lets the flusher commit what is
/// left and stop.
pub struct Writer<P: Pending = ()> {
    shared: Arc<Shared<P>>,
    pool: AnyPool,
}

impl<P: Pending> std::fmt::Debug for Writer<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer").finish_non_exhaustive()
    }
}

impl<P: Pending> Drop for Writer<P> {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.flush.notify_one();
    }
}

impl<P: Pending> Writer<P> {
    /// Starts the flusher on the current Tokio runtime; for a database `file` (not an
    /// in-memory database, whose one connection readers need too), keeps each committed
    /// batch's connection for the next and starts the checkpointer.
    pub fn start(pool: AnyPool, file: bool) -> Arc<Self> {
        let shared = Arc::new(Shared {
            batch: Arc::new(Mutex::new(Batch::default())),
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

    /// Waits for the write mutex, opens the physical transaction if none is open, and holds
    /// this member's savepoint back.
    pub async fn begin(self: &Arc<Self>) -> Result<Slot<P>, StorageError> {
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
            batch.unreleased = false;
            batch.deferred.clear();
            batch.deferred.push("BEGIN IMMEDIATE", Vec::new());
        }
        let held = batch.deferred.mark();
        let unreleased = std::mem::take(&mut batch.unreleased);
        if unreleased {
            batch.deferred.push(RELEASE, Vec::new());
        }
        batch.deferred.push(SAVEPOINT, Vec::new());
        let mark = batch.pending.mark();
        Ok(Slot(Some(Turn {
            batch,
            writer: self.clone(),
            wrote: false,
            failed: false,
            carrying: false,
            sent: false,
            confirmed: false,
            held,
            unreleased,
            mark,
        })))
    }

    /// How many write transactions wait for their turn now.
    pub fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Acquire)
    }

    /// Gives the kept connection back to the pool, and keeps none from then on (before the
    /// pool is closed, which waits for every checked-out connection). The flag is set before
    /// the batch's lock is taken and read under it, so a batch committing meanwhile keeps none.
    pub async fn release(&self) {
        self.shared.released.store(true, Ordering::Release);
        let idle = self.shared.batch.lock().await.idle.take();
        drop(idle);
    }
}

/// Counts a write transaction as waiting for its turn until dropped (also when the wait is
/// cancelled). PostgreSQL's group commit in the broker counts its waiters with it too.
#[derive(Debug)]
pub struct Queued<'a>(&'a AtomicUsize);

impl<'a> Queued<'a> {
    pub fn on(waiting: &'a AtomicUsize) -> Self {
        waiting.fetch_add(1, Ordering::AcqRel);
        Queued(waiting)
    }
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// One member's turn at the writer. End it with [`Slot::commit`]; dropped (or
/// [`Slot::abandon`]ed) without committing, its writes are undone.
pub struct Slot<P: Pending = ()>(Option<Turn<P>>);

/// A [`Slot`]'s state until it ends.
struct Turn<P: Pending> {
    batch: OwnedMutexGuard<Batch<P>>,
    writer: Arc<Writer<P>>,
    wrote: bool,
    failed: bool,
    /// A text was sent and has not answered. Dropped then (its caller cancelled), the turn
    /// cannot know which of its statements ran (sqlx's worker stops a text at its first
    /// result nobody receives).
    carrying: bool,
    /// A text holding this member's `SAVEPOINT` was sent.
    sent: bool,
    /// ... and answered: the savepoint is open, and everything after it is this member's.
    confirmed: bool,
    /// Where what is held back ended before this member's turn.
    held: HeldMark,
    /// Whether the last member's savepoint was open with writes to keep at this turn.
    unreleased: bool,
    mark: P::Mark,
}

impl<P: Pending> std::fmt::Debug for Slot<P> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut d = f.debug_struct("Slot");
        if let Some(t) = &self.0 {
            d.field("wrote", &t.wrote)
                .field("failed", &t.failed)
                .field("confirmed", &t.confirmed);
        }
        d.finish_non_exhaustive()
    }
}

impl<P: Pending> Drop for Slot<P> {
    fn drop(&mut self) {
        if let Some(turn) = self.0.take() {
            turn.abandon();
        }
    }
}

impl<P: Pending> Slot<P> {
    fn turn(&mut self) -> &mut Turn<P> {
        match self.0.as_mut() {
            Some(t) => t,
            // Only `commit` and `abandon`, which take the slot, end the turn.
            None => unreachable!("a writer slot after its turn"),
        }
    }

    fn turn_ref(&self) -> &Turn<P> {
        match self.0.as_ref() {
            Some(t) => t,
            None => unreachable!("a writer slot after its turn"),
        }
    }

    /// The connection, inside the physical transaction, with nothing held back: what was is
    /// sent first, on its own.
    pub async fn conn(&mut self) -> Result<&mut AnyConnection, StorageError> {
        self.turn().conn().await
    }

    /// The connection with nothing held back, when nothing is (a caller that runs its
    /// statements on a plain connection, after [`Slot::conn`]); each use counts as a write.
    pub fn sent_conn(&mut self) -> Option<&mut AnyConnection> {
        self.turn().sent_conn()
    }

    /// The connection to read through (what is held back stays held back).
    pub fn conn_ref(&self) -> Option<&AnyConnection> {
        self.turn_ref().batch.conn.as_deref()
    }

    /// The connection, and `sql` preceded by what is held back as one text, whose arguments
    /// `args` becomes (`None`, and `args` untouched, when nothing is held back). A failure of
    /// the whole is [`held_back_failed`]'s. Call [`Slot::answered`] once it answers, and
    /// [`Slot::failed`] if it failed.
    pub fn with_held_back(
        &mut self,
        sql: &str,
        args: &mut Vec<Arg>,
    ) -> Result<(&mut AnyConnection, Option<String>), StorageError> {
        self.turn().with_held_back(sql, args)
    }

    /// The statement [`Slot::with_held_back`] gave has answered.
    pub fn answered(&mut self) {
        self.turn().carrying = false;
    }

    /// Holds back a write whose answer nobody reads: it is sent with the next statement, or
    /// with the batch's `COMMIT`.
    pub fn defer(&mut self, sql: &str, args: Vec<Arg>) {
        let t = self.turn();
        t.wrote = true;
        t.batch.deferred.push(sql, args);
    }

    /// What the batch has pending.
    pub fn pending(&self) -> &P {
        &self.turn_ref().batch.pending
    }

    /// What the batch has pending, to add to (a write).
    pub fn pending_mut(&mut self) -> &mut P {
        let t = self.turn();
        t.wrote = true;
        &mut t.batch.pending
    }

    /// Call before a statement that may change the database.
    pub fn writing(&mut self) {
        self.turn().wrote = true;
    }

    /// Call when a statement failed.
    pub fn failed(&mut self) {
        self.turn().failed = true;
    }

    /// Commits: answers once the physical transaction holding this member's writes is
    /// committed. A member whose statement failed is undone and answers `Conflict`.
    pub async fn commit(mut self) -> Result<(), StorageError> {
        match self.0.take() {
            Some(turn) => turn.commit().await,
            None => Err(StorageError::Conflict),
        }
    }

    /// Ends the turn without committing (what dropping the slot does): this member's writes
    /// are undone.
    pub fn abandon(mut self) {
        if let Some(turn) = self.0.take() {
            turn.abandon();
        }
    }
}

impl<P: Pending> Turn<P> {
    /// A text sent before, with no failure noted since, was answered.
    fn settle(&mut self) {
        if self.sent && !self.failed && !self.carrying {
            self.confirmed = true;
        }
    }

    /// The connection, inside the physical transaction, with nothing held back: what was is
    /// sent first, on its own.
    async fn conn(&mut self) -> Result<&mut AnyConnection, StorageError> {
        self.settle();
        if let Some((sql, args)) = self.batch.deferred.take() {
            self.batch.begun = true;
            self.sent = true;
            let conn = self.batch.conn.as_deref_mut().ok_or_else(ended)?;
            self.carrying = true;
            let r = bind_all(sqlx::query(&sql), args).execute(&mut *conn).await;
            self.carrying = false;
            if let Err(e) = r {
                self.failed = true;
                return Err(held_back_failed(e));
            }
            self.confirmed = true;
        }
        self.batch.conn.as_deref_mut().ok_or_else(ended)
    }

    /// The connection with nothing held back, when nothing is (a caller that runs its
    /// statements on a plain connection, after [`Slot::conn`]); each use counts as a write.
    fn sent_conn(&mut self) -> Option<&mut AnyConnection> {
        if self.batch.deferred.statements() > 0 {
            return None;
        }
        self.wrote = true;
        self.batch.conn.as_deref_mut()
    }

    /// The connection, and `sql` preceded by what is held back as one text, whose arguments
    /// `args` becomes (`None`, and `args` untouched, when nothing is held back). A failure of
    /// the whole is [`held_back_failed`]'s. Call [`Slot::answered`] once it answers, and
    /// [`Slot::failed`] if it failed.
    fn with_held_back(
        &mut self,
        sql: &str,
        args: &mut Vec<Arg>,
    ) -> Result<(&mut AnyConnection, Option<String>), StorageError> {
        self.settle();
        let batch = &mut *self.batch;
        let combined = batch.deferred.then(sql, args);
        if combined.is_some() {
            batch.begun = true;
            self.sent = true;
            self.carrying = true;
        }
        let conn = batch.conn.as_deref_mut().ok_or_else(ended)?;
        Ok((conn, combined))
    }

    /// Commits: answers once the physical transaction holding this member's writes is
    /// committed. A member whose statement failed is undone and answers `Conflict`.
    async fn commit(mut self) -> Result<(), StorageError> {
        if self.failed || self.carrying {
            let writer = self.writer.clone();
            self.undo("a statement failed").await;
            writer.shared.flush.notify_one();
            return Err(StorageError::Conflict);
        }
        self.settle();
        let Turn {
            mut batch,
            writer,
            wrote,
            sent,
            held,
            unreleased,
            ..
        } = self;
        if !wrote {
            keep_read_only(&mut batch, sent, held, unreleased);
            drop(batch);
            writer.shared.flush.notify_one();
            return Ok(());
        }
        batch.unreleased = true;
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

    /// Ends the turn without committing (called on drop, outside async code): this member's
    /// writes are undone.
    fn abandon(mut self) {
        self.settle();
        if !self.wrote && !self.failed && !self.carrying {
            let writer = self.writer.clone();
            keep_read_only(&mut self.batch, self.sent, self.held, self.unreleased);
            drop(self);
            writer.shared.flush.notify_one();
            return;
        }
        if !self.sent {
            // Nothing of this member's reached the database: forget what it held back.
            let writer = self.writer.clone();
            self.forget_unsent();
            drop(self);
            writer.shared.flush.notify_one();
            return;
        }
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                handle.spawn(async move {
                    let writer = self.writer.clone();
                    self.undo("a transaction that wrote was dropped").await;
                    writer.shared.flush.notify_one();
                });
            }
            Err(_) => {
                // No runtime to roll back on: close the connection, which rolls back, rather
                // than return it to the pool inside a transaction.
                let batch = &mut *self.batch;
                batch.pending.forget();
                batch.deferred.clear();
                batch.unreleased = false;
                if let Some(mut conn) = batch.conn.take() {
                    conn.close_on_drop();
                }
                for w in batch.waiting.drain(..) {
                    let _ = w.send(Err(StorageError::Conflict));
                }
            }
        }
    }

    /// This member sent nothing: what it held back goes, as if its turn had not been.
    fn forget_unsent(&mut self) {
        let batch = &mut *self.batch;
        batch.deferred.truncate(self.held);
        batch.unreleased = self.unreleased;
        let mark = std::mem::replace(&mut self.mark, batch.pending.mark());
        batch.pending.undo(mark);
    }

    /// Undoes this member's writes: its savepoint's when it is known to hold only them, else
    /// the whole physical transaction (its members answer `Conflict`).
    async fn undo(mut self, why: &str) {
        if !self.sent && !self.carrying {
            self.forget_unsent();
            return;
        }
        if self.confirmed {
            let batch = &mut *self.batch;
            // Held back since the savepoint was confirmed: this member's only.
            batch.deferred.clear();
            let undone = match batch.conn.as_mut() {
                Some(conn) => tokio::time::timeout(END_TIMEOUT, conn.execute(UNDO)).await,
                None => return,
            };
            if matches!(undone, Ok(Ok(_))) {
                batch.unreleased = false;
                let mark = std::mem::replace(&mut self.mark, batch.pending.mark());
                batch.pending.undo(mark);
                tracing::debug!(reason = why, "a write transaction undone to its savepoint");
                return;
            }
        }
        let Turn { batch, .. } = self;
        roll_back(batch, why).await;
    }
}

/// A member that wrote nothing leaves: one that sent nothing takes back what it held back;
/// one that did leaves its (empty) savepoint open for the next turn to release.
fn keep_read_only<P: Pending>(batch: &mut Batch<P>, sent: bool, held: HeldMark, unreleased: bool) {
    if sent {
        batch.unreleased = true;
    } else {
        batch.deferred.truncate(held);
        batch.unreleased = unreleased;
    }
}

/// Rolls the physical transaction back; its batch's members answer `Conflict`.
async fn roll_back<P: Pending>(mut batch: OwnedMutexGuard<Batch<P>>, why: &str) {
    batch.pending.forget();
    batch.deferred.clear();
    batch.unreleased = false;
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
async fn commit_batch<P: Pending>(batch: &mut Batch<P>, keep: bool) {
    let Some(mut conn) = batch.conn.take() else {
        return;
    };
    batch.unreleased = false;
    let Batch {
        pending, deferred, ..
    } = batch;
    pending.flush(deferred);
    if !batch.begun && batch.deferred.statements() == 1 {
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
    // What is held back, what is pending and the COMMIT go as one text.
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
        batch.pending.forget();
        let _ = tokio::time::timeout(END_TIMEOUT, conn.execute("ROLLBACK")).await;
        conn.close_on_drop();
    } else if keep {
        batch.idle = Some(conn);
    }
    for w in batch.waiting.drain(..) {
        let _ = w.send(result.clone());
    }
}

async fn flusher<P: Pending>(shared: Arc<Shared<P>>) {
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
async fn checkpointer<P: Pending>(shared: std::sync::Weak<Shared<P>>, pool: AnyPool) {
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

/// A statement sent with what was held back failed: the failure may be an earlier member's
/// held-back write as well as this one's statement. The physical transaction rolls back, and
/// every member runs again ([`StorageError::Conflict`], the cause logged) unless the database
/// is unavailable.
pub fn held_back_failed(e: sqlx::Error) -> StorageError {
    match db_err(e) {
        StorageError::Unavailable(why) => StorageError::Unavailable(why),
        other => {
            tracing::warn!(error = %other, "a write batch's statements failed; its transactions run again");
            StorageError::Conflict
        }
    }
}

#[cfg(test)]
mod tests;
