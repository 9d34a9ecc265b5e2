//! Single-use values (proof and request-object `jti`s) remembered in batches: group commit for
//! [`Storage::remember_once`](countersign_broker_core::Storage::remember_once).
//!
//! On PostgreSQL every proof-verified call remembers its `jti`, durably, before it is answered
//! (replicas share no memory); on SQLite only login request objects and the values that
//! `Exclusive`'s proof horizon cannot keep in memory come here (`broker-core`'s
//! `exclusive.rs`). One
//! transaction per value made each call wait for a commit of its own (on PostgreSQL a
//! synchronous WAL flush per read). Here callers queue their value, and one task writes what
//! has queued, up to [`MAX_BATCH`] values, with one multi-row `INSERT … ON CONFLICT (scope,
//! value) DO UPDATE … WHERE lapsed RETURNING scope, value`; when it commits, each caller hears
//! whether its value was fresh. On PostgreSQL the statement runs alone, as its own transaction
//! (one round trip, committed with the server's `synchronous_commit`, durable by default); on
//! SQLite it is a turn at the single writer and rides its group commit (`writer.rs`).
//!
//! Up to [`SQLITE_IN_FLIGHT`] batches on SQLite, or one on PostgreSQL, are written at once (the
//! loop is `batch.rs`'s); while they are, values queue for the next, so under load a batch grows
//! to the number of callers waiting and costs one commit, and alone a caller waits for one
//! commit as before. Two batches holding the same value do not both hear
//! "fresh": SQLite's writer runs them one after the other (the second sees the first's row), and
//! on PostgreSQL the second's insert waits for the first's commit.
//!
//! - Within a batch a value is written once: its first caller hears what the database said,
//!   later callers of the same value in the batch hear "replay".
//! - Rows are written in (scope, value) order, so that two replicas' batches lock shared keys in
//!   the same order (no deadlock between them); a conflict the database still reports runs the
//!   batch again, up to [`ATTEMPTS`] times.
//! - A batch that fails (its statement or its commit) answers every caller with the error: none
//!   hears "fresh" for a value that may not be stored.
//! - A lapsed row (`until_ms` before the batch's earliest `now`) is replaced. Using the earliest
//!   `now` of the batch can only count a value as live that one caller would have counted as
//!   lapsed by a few milliseconds: a refusal, never an accepted replay.
//!
//! The task ends when the last handle of the storage is dropped (its queue closes).

use std::collections::HashSet;
use std::sync::Arc;

use countersign_broker_core::clock::Time;
use countersign_broker_core::storage::StorageError;
use sqlx::AnyPool;
use tokio::sync::{mpsc, oneshot};

use crate::Backend;
use crate::error::begin_err;
use crate::spare::Spares;
use crate::writer::Writer;

/// At most this many values in one statement (three parameters each; PostgreSQL takes 65,535).
pub(crate) const MAX_BATCH: usize = 1000;
/// How many batches are written at once on SQLite. One at a time made every batch wait for the
/// previous one's commit and its disk sync, which capped the rate at one batch per sync; a few
/// at once let SQLite's writer fold them into one group commit.
const SQLITE_IN_FLIGHT: usize = 4;
/// How many on PostgreSQL: one. Each batch there is a statement and a commit of its own, and
/// the database server's work (a backend woken, a WAL flush) is per statement, not per value:
/// four at once split the waiting callers into four smaller batches and cost the broker and the
/// server about a fifth more CPU per read than one at a time (`docs/benchmarks.md`, "Issue 28:
/// PostgreSQL's `jti` batches"). A lone caller still waits for one statement.
const POSTGRES_IN_FLIGHT: usize = 1;
/// How many times a batch that hit a conflict runs again.
const ATTEMPTS: u32 = 10;

/// Where a batch is written: SQLite's single writer (inside its group commit) or a PostgreSQL
/// connection kept between statements (`spare.rs`), as the batched reads use.
pub(crate) struct Target {
    pub(crate) pool: AnyPool,
    pub(crate) backend: Backend,
    pub(crate) writer: Option<Arc<Writer>>,
    pub(crate) spares: Arc<Spares>,
}

struct Pending {
    scope: String,
    value: String,
    until: Time,
    now: Time,
    answer: oneshot::Sender<Result<bool, StorageError>>,
}

/// The queue of the batching task.
#[derive(Clone)]
pub(crate) struct OnceBatcher {
    queue: mpsc::UnboundedSender<Pending>,
}

impl OnceBatcher {
    /// Starts the task on the current Tokio runtime.
    pub(crate) fn start(target: Target) -> OnceBatcher {
        let in_flight = match target.backend {
            Backend::Sqlite => SQLITE_IN_FLIGHT,
            Backend::Postgres => POSTGRES_IN_FLIGHT,
        };
        let target = Arc::new(target);
        let queue = crate::batch::start(MAX_BATCH, in_flight, move |values| {
            let target = target.clone();
            async move { flush(&target, values).await }
        });
        OnceBatcher { queue }
    }

    /// Queues a value and waits for its batch's commit.
    pub(crate) async fn remember(
        &self,
        scope: &str,
        value: &str,
        until: Time,
        now: Time,
    ) -> Result<bool, StorageError> {
        let (answer, answered) = oneshot::channel();
        self.queue
            .send(Pending {
                scope: scope.to_owned(),
                value: value.to_owned(),
                until,
                now,
                answer,
            })
            .map_err(|_| StorageError::Unavailable("the storage is closing".into()))?;
        answered.await.unwrap_or_else(|_| {
            Err(StorageError::Unavailable(
                "the single-use value batch ended without an answer".into(),
            ))
        })
    }
}

/// Writes one batch and answers its callers.
async fn flush(target: &Target, batch: Vec<Pending>) {
    let mut distinct: Vec<(&str, &str, Time)> = Vec::with_capacity(batch.len());
    let mut seen = HashSet::with_capacity(batch.len());
    for p in &batch {
        if seen.insert((p.scope.as_str(), p.value.as_str())) {
            distinct.push((&p.scope, &p.value, p.until));
        }
    }
    distinct.sort_unstable_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)));
    let Some(now) = batch.iter().map(|p| p.now).min() else {
        return;
    };
    let mut attempts = 0;
    let written = loop {
        attempts += 1;
        match write(target, &distinct, now).await {
            Err(StorageError::Conflict) if attempts < ATTEMPTS => continue,
            other => break other,
        }
    };
    let answers: Vec<Result<bool, StorageError>> = match written {
        Ok(fresh) => {
            let fresh: HashSet<(&str, &str)> = fresh
                .iter()
                .map(|(s, v)| (s.as_str(), v.as_str()))
                .collect();
            let mut answered = HashSet::with_capacity(batch.len());
            batch
                .iter()
                .map(|p| {
                    let key = (p.scope.as_str(), p.value.as_str());
                    let first = answered.insert(key);
                    Ok(first && fresh.contains(&key))
                })
                .collect()
        }
        Err(e) => {
            tracing::warn!(error = %e, values = batch.len(), "remembering single-use values failed");
            batch.iter().map(|_| Err(e.clone())).collect()
        }
    };
    for (p, a) in batch.into_iter().zip(answers) {
        // The receiver may be gone (its caller was cancelled): nothing to tell it.
        let _ = p.answer.send(a);
    }
}

/// One attempt. PostgreSQL: the batch's statement alone, its own transaction (one round trip).
/// SQLite: a turn at the single writer, inside its group commit.
async fn write(
    target: &Target,
    values: &[(&str, &str, Time)],
    now: Time,
) -> Result<Vec<(String, String)>, StorageError> {
    let Some(writer) = target.writer.as_ref() else {
        // A kept connection, with no test on its way in or out: a pooled one cost a test round
        // trip at checkout and another at its return, two more than the statement itself.
        let mut conn = target.spares.take(&target.pool).await.map_err(begin_err)?;
        let mut fresh = Vec::with_capacity(values.len());
        for chunk in values.chunks(MAX_BATCH) {
            match crate::tx::remember_many(&mut conn, chunk, now).await {
                Ok(rows) => fresh.extend(rows),
                Err(e) => {
                    // As for a failed read: this connection and the kept ones go back to the
                    // pool, which tests them.
                    target.spares.clear();
                    return Err(e);
                }
            }
        }
        target.spares.put(conn);
        return Ok(fresh);
    };
    let mut tx = crate::tx::SqlTx::writer(writer.begin().await?);
    let mut fresh = Vec::with_capacity(values.len());
    for chunk in values.chunks(MAX_BATCH) {
        fresh.extend(tx.remember_many(chunk, now).await?);
    }
    countersign_broker_core::storage::Tx::commit(Box::new(tx)).await?;
    Ok(fresh)
}
