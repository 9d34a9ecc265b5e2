//! PostgreSQL's write transactions in few round trips (issue 50): the `BEGIN` goes with the
//! first statement, the `COMMIT` with the held-back writes (`held.rs`), and the audit log's
//! head, which the chain's next entries hash, is known before it is read.
//!
//! Every appender takes the audit log's advisory lock, held to its commit, and reads the head
//! after it: two round trips with the lock held (the head's answer, then the entries and the
//! `COMMIT`), during which every other appender waits. Under load on two cores a round trip
//! waits for the broker's turn at a core, and the lock was the limit (`docs/benchmarks.md`,
//! "Issue 50"). Here each broker process remembers the head its own appends left ([`Heads`]),
//! and a transaction takes a turn at it (a FIFO async mutex, held to its commit): when the
//! head is known, the core is answered it with no round trip, and the text that commits starts
//! with the lock and `countersign_audit_follows(position, hash)` (a function the schema's
//! version 8 installs), which fails with SQLSTATE `40001` when the head is not that entry any
//! more, before any entry is written. Then the lock is held for one statement's run on the
//! server, not for round trips.
//!
//! - **Another writer** (another replica; `audit` commands of the CLI) moves the head without
//!   this process knowing: the check fails, the transaction rolls back, the core runs it again
//!   (a conflict), and the head is read under the lock from then on, until [`TRUST_AFTER`]
//!   reads in a row found it where this process left it. A replica alone reads it once.
//! - **A turn not had within [`TURN_WAIT`]** (a transaction holding the turn waits on a row lock
//!   the waiting one holds: no deadlock PostgreSQL could see) reads the head under the lock,
//!   as before, without a turn; PostgreSQL's deadlock detector sees both locks then.
//! - **A commit that fails** forgets the head: the next reads it.
//!
//! The turn only spares round trips; what keeps the chain whole is the lock and the check,
//! whichever process appends.

use std::time::Duration;

use tokio::sync::{Mutex, OwnedMutexGuard};

use super::*;

/// Reads under the lock that must find the head where this process left it before the head
/// is answered without reading.
pub(crate) const TRUST_AFTER: u32 = 4;

/// How long a transaction waits for its turn before it reads the head under the lock.
pub(crate) const TURN_WAIT: Duration = Duration::from_millis(200);

/// The audit head this process's appends left, with the turn to append after it.
#[derive(Default)]
pub(crate) struct Heads {
    state: Arc<Mutex<Head>>,
}

/// A transaction's turn: the head it may append after.
pub(crate) type Turn = OwnedMutexGuard<Head>;

#[derive(Default)]
pub(crate) struct Head {
    /// The last entry this process appended or read under the lock; `None` when unknown.
    last: Option<(i64, String)>,
    /// Reads under the lock in a row that found `last` still the head.
    trust: u32,
}

impl Heads {
    async fn turn(&self) -> Option<Turn> {
        tokio::time::timeout(TURN_WAIT, self.state.clone().lock_owned())
            .await
            .ok()
    }
}

/// A PostgreSQL write dropped before it committed: its connection rolls back, on a task of its
/// own, before it goes back to the pool (closed if that fails).
pub(super) fn abandon(mut conn: PoolConnection<Any>, begun: bool) {
    if !begun {
        return;
    }
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        conn.close_on_drop();
        return;
    };
    runtime.spawn(async move {
        let r = sqlx::Executor::execute(&mut *conn, sqlx::raw_sql("ROLLBACK")).await;
        if r.is_err() {
            conn.close_on_drop();
        }
    });
}

impl SqlTx {
    /// A PostgreSQL write on `conn`, nothing sent yet.
    pub(crate) fn pg_write(conn: PoolConnection<Any>, pool: AnyPool, heads: Arc<Heads>) -> Self {
        let mut tx = SqlTx::pooled_conn(conn);
        tx.heads = Some(heads);
        tx.resolving(pool)
    }

    /// Whether a PostgreSQL write's `BEGIN` was sent.
    pub(super) fn pg_begun(&self) -> bool {
        matches!(self.inner, Some(Inner::PgWrite { begun: true, .. }))
    }

    /// Sends `text` (statements without parameters) as one text in the simple query protocol,
    /// with the `BEGIN` ahead of it when not yet sent. Answers the rows of every statement.
    pub(super) async fn pg_text(&mut self, text: &str) -> Result<Vec<AnyRow>, StorageError> {
        let Some(Inner::PgWrite { begun, .. }) = self.inner.as_mut() else {
            return Err(finished());
        };
        let full = if *begun {
            text.to_owned()
        } else {
            *begun = true;
            format!("BEGIN; {text}")
        };
        self.count();
        self.unsettled = true;
        let Some(Inner::PgWrite { conn, .. }) = self.inner.as_mut() else {
            return Err(finished());
        };
        let r = combined::raw_rows(conn, &full).await;
        self.checked(r)
    }

    /// Sends the writes held back (`held.rs`), bound, after the `BEGIN` unless `alone`: then
    /// they are one statement, its own transaction. With a predicted head, the statement that
    /// carries the audit entries checks it first (under the lock).
    pub(super) async fn pg_send_held(&mut self, alone: bool) -> Result<(), StorageError> {
        let follows = match self.held.has_audit() {
            true => self.predicted.take().map(|(p, h)| (p, hash_bytes(&h))),
            false => None,
        };
        for (sql, args) in self.held.take(follows) {
            let conn = if alone {
                self.count();
                self.unsettled = true;
                match self.inner.as_mut() {
                    Some(Inner::PgWrite { conn, .. }) => &mut **conn,
                    _ => return Err(finished()),
                }
            } else {
                self.conn_now().await?
            };
            let r = bind_all(sqlx::query(&sql), args).execute(conn).await;
            self.checked(r)?;
        }
        Ok(())
    }

    /// The audit head, for a PostgreSQL write: from this process's turn when it knows it, else
    /// read under the lock.
    pub(super) async fn pg_audit_head(&mut self) -> Result<Option<(i64, String)>, StorageError> {
        // A second append in one transaction reads the head its first left (held back until
        // now: the read sends it first).
        if self.turn.is_some() || self.heads.is_none() {
            return self.locked_audit_head().await;
        }
        let mut turn = match &self.heads {
            Some(heads) => heads.turn().await,
            None => None,
        };
        if let Some(t) = turn.as_mut()
            && t.trust >= TRUST_AFTER
            && let Some(last) = t.last.clone()
        {
            self.predicted = Some(last.clone());
            self.turn = turn;
            return Ok(Some(last));
        }
        let head = self.locked_audit_head().await?;
        if let Some(t) = turn.as_mut() {
            if t.last.is_some() && t.last == head {
                t.trust = t.trust.saturating_add(1);
            } else {
                t.trust = 0;
                t.last = head.clone();
            }
        }
        self.turn = turn;
        Ok(head)
    }

    /// Ends this transaction's turn, leaving the head at what it appended.
    fn pass_turn(&mut self) {
        let appended = self.resolve.as_ref().and_then(|r| r.appended.clone());
        if let (Some(t), Some(last)) = (self.turn.as_mut(), appended) {
            t.last = Some(last);
        }
        self.turn = None;
    }

    /// Commits a PostgreSQL write: the writes held back (with the head's check), then `COMMIT`.
    /// A write that sent nothing before sends its held writes alone, when they are one
    /// statement: one round trip, its own transaction. A lost answer is resolved by reading
    /// (`commit.rs`).
    pub(super) async fn pg_commit(&mut self) -> Result<(), StorageError> {
        let r = if !self.pg_begun() && self.held.statements() <= 1 {
            self.pg_send_held(true).await
        } else {
            match self.pg_send_held(false).await {
                Ok(()) => {
                    // The entries are written and the lock is held to the COMMIT: the next
                    // appender may go now. Its check waits for the lock, so it reads after
                    // this COMMIT (and finds the head moved if this one fails).
                    self.pass_turn();
                    self.pg_text("COMMIT").await.map(|_| ())
                }
                Err(e) => Err(e),
            }
        };
        if let Err(e) = r {
            // The head is unknown now, whichever way it went; the connection is left to
            // `abandon` (it rolls back, or is closed).
            if let Some(t) = self.turn.as_mut() {
                t.last = None;
                t.trust = 0;
            }
            self.turn = None;
            return super::commit::resolve(e, self.resolve.take()).await;
        }
        self.pass_turn();
        // Committed: the connection is idle again, and goes back to the pool when dropped.
        if let Some(Inner::PgWrite { begun, .. }) = self.inner.as_mut() {
            *begun = false;
        }
        self.unsettled = false;
        Ok(())
    }
}
