//! PostgreSQL's group commit (issue 50): one process's write transactions ("members") run one
//! after another inside one physical transaction on one connection, and a flusher task commits
//! it for all of them at once, as SQLite's writer does (`writer.rs`).
//!
//! Each physical transaction at PostgreSQL cost a `BEGIN`, the audit log's advisory lock and
//! head, and a `COMMIT` with its WAL flush; and since the lock is held to the end of the
//! `COMMIT`, appenders serialised on one flush each: a replica's write rate was one disk sync
//! plus three round trips at most. Here:
//!
//! - A physical transaction opens with one text ([`OPENING`]: `BEGIN`, the lock, the head),
//!   sent with its first member's first statement when that is a text of its own (the
//!   enrollment with its pending requests, `tx/combined.rs`), else alone. Every physical
//!   transaction takes the lock first, in every replica, so two replicas' transactions never
//!   wait for each other's rows while holding the lock (no deadlock between them), and the head
//!   it reads stays the head until its `COMMIT`: members take it from memory (the last
//!   member's appends), never from the database, and never guess.
//! - A member's turn is a fair async mutex, held from [`Group::begin`] until it commits or is
//!   dropped. Its writes go as one statement before it commits (`tx/held.rs`).
//! - A member that ran in an open physical transaction commits by joining its batch and
//!   waiting for the flusher's `COMMIT`: its caller hears "committed" only once it is durable,
//!   and a member that only read waits too (it may have read an earlier member's writes). One
//!   that sent nothing answers at once.
//! - The flusher queues on the same mutex. Being fair, it gets it after the members already
//!   waiting, which join the batch; it then commits and answers every member with the result.
//!   A `COMMIT` whose answer is lost is resolved by reading the batch's last audit entry
//!   (`lost_commit.rs`), for all its members at once. The connection of a committed batch is
//!   kept for the next one (the pool would test it with a round trip at each checkout).
//!
//! Failure: a member's statement that fails, or is cut off by its caller going away, or a
//! member dropped after sending a write, leaves the physical transaction unusable (PostgreSQL
//! aborts a transaction at its first error; there are no savepoints, which cost a round trip a
//! member): its connection is closed, which rolls it back, and every member waiting on it
//! answers [`StorageError::Conflict`], so the core runs it again (with back-off). A failure to
//! open (a standby refuses the lock, the server is gone) is [`StorageError::Unavailable`].
//!
//! Several replicas each have their own group; their physical transactions take turns at the
//! advisory lock, a batch at a time.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use countersign_broker_core::storage::StorageError;
use countersign_common::sql_writer::{END_TIMEOUT, Queued};
use sqlx::any::AnyRow;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Executor, Row};
use tokio::sync::{Mutex, Notify, OwnedMutexGuard, oneshot};

use crate::audit_sql::PG_AUDIT_LOCK;
use crate::error::begin_err;
use crate::spare::IDLE_TEST;

/// Opens a physical transaction: `BEGIN`, the audit log's lock (held to its end), then its
/// head, read after the lock (each statement of a text takes its own snapshot under READ
/// COMMITTED, so the head is the one the lock's last holder committed).
pub(crate) fn opening() -> String {
    format!(
        "BEGIN; SELECT pg_advisory_xact_lock({PG_AUDIT_LOCK})::text AS locked; \
         SELECT position AS head_position, hash AS head_hash FROM audit_log \
         ORDER BY position DESC LIMIT 1; "
    )
}

type Answer = oneshot::Sender<Result<(), StorageError>>;

/// The physical transaction, when one is open, and the members waiting for its `COMMIT`.
#[derive(Default)]
struct Batch {
    conn: Option<PoolConnection<Any>>,
    /// The connection of the last batch that committed, and when.
    idle: Option<(PoolConnection<Any>, Instant)>,
    /// The opening was answered: the lock is held and `head` is the audit log's head, with
    /// the appends of the members so far.
    opened: bool,
    head: Option<(i64, String)>,
    /// The last entry appended in this physical transaction: how a lost `COMMIT` is resolved.
    appended: Option<(i64, String)>,
    waiting: Vec<Answer>,
}

impl Drop for Batch {
    fn drop(&mut self) {
        // Only when the group goes away mid-batch: never hand a connection inside a
        // transaction back to the pool; closing it rolls back.
        if let Some(conn) = self.conn.as_mut() {
            conn.close_on_drop();
        }
    }
}

impl Batch {
    /// The physical transaction is lost: close its connection (the server rolls it back) and
    /// tell every member waiting on it to run again.
    fn abort(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            conn.close_on_drop();
        }
        self.opened = false;
        self.head = None;
        self.appended = None;
        for w in self.waiting.drain(..) {
            let _ = w.send(Err(StorageError::Conflict));
        }
    }
}

struct Shared {
    batch: Arc<Mutex<Batch>>,
    flush: Notify,
    closed: AtomicBool,
    /// Set by [`Group::release`]: no connection is kept any more.
    released: AtomicBool,
    /// Write transactions waiting for their turn.
    waiting: AtomicUsize,
    pool: AnyPool,
    /// The storage's count of statements sent by write transactions (the opening sent alone,
    /// and the `COMMIT`, are counted here).
    sent: Arc<AtomicU64>,
}

/// The group commit of one PostgreSQL storage. Dropping the last handle lets the flusher
/// commit what is left and stop.
pub(crate) struct Group {
    shared: Arc<Shared>,
}

impl Drop for Group {
    fn drop(&mut self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.flush.notify_one();
    }
}

impl Group {
    /// Starts the flusher on the current Tokio runtime.
    pub(crate) fn start(pool: AnyPool, sent: Arc<AtomicU64>) -> Arc<Group> {
        let shared = Arc::new(Shared {
            batch: Arc::new(Mutex::new(Batch::default())),
            flush: Notify::new(),
            closed: AtomicBool::new(false),
            released: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            pool,
            sent,
        });
        tokio::spawn(flusher(shared.clone()));
        Arc::new(Group { shared })
    }

    /// Waits for the turn, and takes a connection when no physical transaction is open.
    pub(crate) async fn begin(self: &Arc<Self>) -> Result<Turn, StorageError> {
        let queued = Queued::on(&self.shared.waiting);
        let mut batch = self.shared.batch.clone().lock_owned().await;
        drop(queued);
        if batch.conn.is_none() {
            let conn = match batch.idle.take() {
                Some((conn, at)) if at.elapsed() < IDLE_TEST => conn,
                // Idle too long to trust untested: back to the pool, which tests it.
                _ => self.shared.pool.acquire().await.map_err(begin_err)?,
            };
            batch.conn = Some(conn);
        }
        Ok(Turn {
            batch,
            group: self.clone(),
            wrote: false,
            broken: false,
            head: None,
        })
    }

    /// How many write transactions wait for their turn now.
    pub(crate) fn waiting(&self) -> usize {
        self.shared.waiting.load(Ordering::Acquire)
    }

    /// Gives the kept connection back to the pool, and keeps none from then on (before the
    /// pool is closed, which waits for every checked-out connection).
    pub(crate) async fn release(&self) {
        self.shared.released.store(true, Ordering::Release);
        let idle = self.shared.batch.lock().await.idle.take();
        drop(idle);
    }
}

/// One member's turn. End it with [`Turn::commit`]; dropped without committing after it wrote,
/// its physical transaction is lost (see the module's doc).
pub(crate) struct Turn {
    batch: OwnedMutexGuard<Batch>,
    group: Arc<Group>,
    /// A statement that may change the database was sent.
    wrote: bool,
    /// A statement failed or was cut off: the physical transaction is unusable.
    broken: bool,
    /// The audit head after this member's appends (written with its held-back writes).
    head: Option<(i64, String)>,
}

impl Turn {
    /// The opening text, to send before (or with) this member's first statement, if the
    /// physical transaction has not opened yet.
    pub(crate) fn opening(&self) -> Option<String> {
        (!self.batch.opened).then(opening)
    }

    /// The rows of a text that began with the opening: notes the head (the row with
    /// `head_position`) and answers the rest.
    pub(crate) fn opened(&mut self, rows: Vec<AnyRow>) -> Result<Vec<AnyRow>, StorageError> {
        let mut rest = Vec::with_capacity(rows.len());
        let mut head = None;
        for row in rows {
            if row.try_get_raw("locked").is_ok() {
                continue;
            }
            if row.try_get_raw("head_position").is_ok() {
                head = Some((
                    row.try_get("head_position").map_err(begin_err)?,
                    hex::encode(row.try_get::<Vec<u8>, _>("head_hash").map_err(begin_err)?),
                ));
                continue;
            }
            rest.push(row);
        }
        self.batch.opened = true;
        self.batch.head = head;
        Ok(rest)
    }

    /// The opening failed: nothing of the physical transaction is usable, and the database
    /// cannot take writes now (a standby refuses the lock; a server gone).
    pub(crate) fn opening_failed(&mut self, e: sqlx::Error) -> StorageError {
        self.broken = true;
        countersign_common::sql::pg_hosts::suspect_all();
        begin_err(e)
    }

    /// The connection, inside the physical transaction.
    pub(crate) fn conn(&mut self) -> Result<&mut AnyConnection, StorageError> {
        match self.batch.conn.as_mut() {
            Some(c) => Ok(&mut **c),
            None => Err(StorageError::Unavailable(
                "the write transaction's connection is gone".into(),
            )),
        }
    }

    /// The audit log's head as this member sees it (after its own appends); `None` for an
    /// empty log. Only once opened.
    pub(crate) fn head(&self) -> Option<(i64, String)> {
        self.head.clone().or_else(|| self.batch.head.clone())
    }

    /// This member appended entries ending at `last`.
    pub(crate) fn appended(&mut self, last: (i64, String)) {
        self.head = Some(last);
    }

    /// Before a statement that may change the database.
    pub(crate) fn writing(&mut self) {
        self.wrote = true;
    }

    /// A statement failed, or is being sent and may be cut off.
    pub(crate) fn failed(&mut self) {
        self.broken = true;
    }

    /// Commits: waits for the physical transaction's `COMMIT` when this member ran inside
    /// one. Its held-back writes were sent before.
    pub(crate) async fn commit(mut self) -> Result<(), StorageError> {
        if self.broken {
            self.batch.abort();
            return Err(StorageError::Conflict);
        }
        if !self.batch.opened {
            return Ok(());
        }
        if let Some(head) = self.head.take() {
            self.batch.head = Some(head.clone());
            self.batch.appended = Some(head);
        }
        let (answer, answered) = oneshot::channel();
        self.batch.waiting.push(answer);
        let shared = self.group.shared.clone();
        drop(self);
        shared.flush.notify_one();
        answered.await.unwrap_or_else(|_| {
            Err(StorageError::Unavailable(
                "the write transaction's batch ended without an answer".into(),
            ))
        })
    }

    /// Ends the turn without committing: a member that wrote, or whose statement failed or
    /// was cut off (`unsettled`), loses the physical transaction.
    pub(crate) fn abandon(mut self, unsettled: bool) {
        if self.broken || self.wrote || unsettled {
            self.batch.abort();
        } else if self.batch.opened {
            // What it read stays locked until the batch ends: let the flusher end it.
            self.group.shared.flush.notify_one();
        }
    }
}

/// Commits each batch once its members have had their turns.
async fn flusher(shared: Arc<Shared>) {
    loop {
        shared.flush.notified().await;
        let mut batch = shared.batch.clone().lock_owned().await;
        end(&shared, &mut batch).await;
        if shared.closed.load(Ordering::Acquire) {
            batch.idle = None;
            return;
        }
    }
}

/// Commits the open physical transaction and answers its members.
async fn end(shared: &Shared, batch: &mut Batch) {
    let Some(mut conn) = batch.conn.take() else {
        return;
    };
    let keep = |batch: &mut Batch, conn| {
        if !shared.released.load(Ordering::Acquire) {
            batch.idle = Some((conn, Instant::now()));
        }
    };
    if !batch.opened {
        // Taken, never used.
        keep(batch, conn);
        return;
    }
    let waiting = std::mem::take(&mut batch.waiting);
    let appended = batch.appended.take();
    batch.opened = false;
    batch.head = None;
    shared.sent.fetch_add(1, Ordering::Relaxed);
    let failed = match tokio::time::timeout(END_TIMEOUT, conn.execute("COMMIT")).await {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(crate::error::db_err(e)),
        Err(_) => Some(StorageError::Unavailable(format!(
            "COMMIT did not finish within {END_TIMEOUT:?}"
        ))),
    };
    let result = match failed {
        None => {
            keep(batch, conn);
            Ok(())
        }
        Some(failed) => {
            // The outcome is unknown: resolved by reading, under the lock the transaction
            // held until it ended (`lost_commit.rs`).
            conn.close_on_drop();
            drop(conn);
            crate::lost_commit::resolve(failed, &shared.pool, appended).await
        }
    };
    for w in waiting {
        let _ = w.send(result.clone());
    }
}
