//! PostgreSQL's proof-verified reads in batches.
//!
//! Every proof-verified call reads the row its proof names (an enrollment, or a launcher
//! credential) before it can verify, and `GET /v1/enrollments/self` then reads the enrollment's
//! grants: on PostgreSQL each was a round trip of its own, and under load the reads queued for
//! the pool's connections and spent the database server's share of the two cores on one
//! statement each. Here callers queue the key they read, and one task reads every key queued
//! in one statement (`WHERE key IN ($1, …)`), up to [`MAX_BATCH`] keys, with up to
//! [`IN_FLIGHT`] statements at once (`batch.rs`). `GET /v1/enrollments/self` reads an
//! enrollment and its grants with one statement of both tables (`UNION ALL`), where it was two.
//!
//! A read transaction on PostgreSQL has no `BEGIN`: each statement is its own snapshot, taken
//! when the statement starts (READ COMMITTED). A batch's statement starts after every caller in
//! it queued its key, so each caller sees everything committed before it asked, as its own
//! statement would have: a revocation answered before a read began is seen by that read.
//! SQLite's reads do not come here (the broker's `Exclusive` answers them from memory).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use countersign_broker_core::storage::StorageError;
use sqlx::{AnyPool, Row};
use tokio::sync::{mpsc, oneshot};

use crate::error::{begin_err, db_err};
use crate::spare::Spares;

/// At most this many keys in one statement.
const MAX_BATCH: usize = 512;
/// How many statements of one kind run at once (the pool's size counts them).
const IN_FLIGHT: usize = 2;

/// A row read: which part of the kind's statement it came from (0, or for the enrollment with
/// its grants: 0 the enrollment, 1 a grant), and its `doc`.
type Part = (i32, String);

/// One caller's read: the key, and where its rows go.
struct Ask {
    key: String,
    answer: oneshot::Sender<Result<Vec<Part>, StorageError>>,
}

/// A kind of keyed read: its statement for a list of placeholders, whose rows are
/// (`batch_key`, `part`, `doc`), in the order a caller hears them.
#[derive(Clone, Copy)]
struct Kind {
    /// For the log.
    name: &'static str,
    sql: fn(&str) -> String,
}

const ENROLLMENTS: Kind = Kind {
    name: "enrollments",
    sql: |list| {
        format!("SELECT id AS batch_key, 0 AS part, doc FROM enrollments WHERE id IN ({list})")
    },
};

const CREDENTIALS: Kind = Kind {
    name: "credentials",
    sql: |list| {
        format!("SELECT id AS batch_key, 0 AS part, doc FROM credentials WHERE id IN ({list})")
    },
};

const GRANTS: Kind = Kind {
    name: "grants",
    sql: |list| {
        format!(
            "SELECT enrollment_id AS batch_key, 0 AS part, doc FROM grants \
             WHERE enrollment_id IN ({list}) ORDER BY created_at_ms, id"
        )
    },
};

/// The enrollments and their grants in one statement (one snapshot): the enrollment first,
/// then its grants in [`GRANTS`]' order. The list's placeholders are used twice.
const ENROLLMENTS_WITH_GRANTS: Kind = Kind {
    name: "enrollments with grants",
    sql: |list| {
        format!(
            "SELECT id AS batch_key, 0 AS part, doc, 0 AS created_at_ms, id AS row_id \
             FROM enrollments WHERE id IN ({list}) \
             UNION ALL SELECT enrollment_id, 1, doc, created_at_ms, id FROM grants \
             WHERE enrollment_id IN ({list}) ORDER BY part, created_at_ms, row_id"
        )
    },
};

/// The batched reads of one storage.
#[derive(Clone)]
pub(crate) struct Reads {
    enrollments: mpsc::UnboundedSender<Ask>,
    credentials: mpsc::UnboundedSender<Ask>,
    grants: mpsc::UnboundedSender<Ask>,
    enrollments_with_grants: mpsc::UnboundedSender<Ask>,
}

impl Reads {
    /// Starts the tasks on the current Tokio runtime. Their statements run on connections kept
    /// between reads (`spare.rs`), as a read's own would.
    pub(crate) fn start(pool: &AnyPool, spares: &Arc<Spares>) -> Reads {
        let reader = |kind: Kind| {
            let (pool, spares) = (pool.clone(), spares.clone());
            crate::batch::start(MAX_BATCH, IN_FLIGHT, move |asks| {
                let (pool, spares) = (pool.clone(), spares.clone());
                async move { flush(&pool, &spares, kind, asks).await }
            })
        };
        Reads {
            enrollments: reader(ENROLLMENTS),
            credentials: reader(CREDENTIALS),
            grants: reader(GRANTS),
            enrollments_with_grants: reader(ENROLLMENTS_WITH_GRANTS),
        }
    }

    /// The `doc` of the enrollment `id`, if it exists.
    pub(crate) async fn enrollment(&self, id: String) -> Result<Option<String>, StorageError> {
        Ok(docs(ask(&self.enrollments, id).await?).next())
    }

    /// The `doc` of the launcher credential `id`, if it exists.
    pub(crate) async fn credential(&self, id: String) -> Result<Option<String>, StorageError> {
        Ok(docs(ask(&self.credentials, id).await?).next())
    }

    /// The `doc`s of the enrollment's grants, oldest first.
    pub(crate) async fn grants_of(&self, enrollment: String) -> Result<Vec<String>, StorageError> {
        Ok(docs(ask(&self.grants, enrollment).await?).collect())
    }

    /// The `doc` of the enrollment `id`, if it exists, and the `doc`s of its grants, oldest
    /// first (none when it does not exist), from one snapshot.
    pub(crate) async fn enrollment_with_grants(
        &self,
        id: String,
    ) -> Result<(Option<String>, Vec<String>), StorageError> {
        let mut enrollment = None;
        let mut grants = Vec::new();
        for (part, doc) in ask(&self.enrollments_with_grants, id).await? {
            match part {
                0 => enrollment = Some(doc),
                _ => grants.push(doc),
            }
        }
        if enrollment.is_none() {
            grants.clear();
        }
        Ok((enrollment, grants))
    }
}

fn docs(rows: Vec<Part>) -> impl Iterator<Item = String> {
    rows.into_iter().map(|(_, doc)| doc)
}

async fn ask(queue: &mpsc::UnboundedSender<Ask>, key: String) -> Result<Vec<Part>, StorageError> {
    let (answer, answered) = oneshot::channel();
    queue
        .send(Ask { key, answer })
        .map_err(|_| StorageError::Unavailable("the storage is closing".into()))?;
    answered.await.unwrap_or_else(|_| {
        Err(StorageError::Unavailable(
            "the batched read ended without an answer".into(),
        ))
    })
}

/// Reads one batch and answers its callers: each hears the rows of its own key (none when
/// there are none), or, when the statement failed, the error.
async fn flush(pool: &AnyPool, spares: &Spares, kind: Kind, asks: Vec<Ask>) {
    let mut keys: Vec<&str> = Vec::with_capacity(asks.len());
    let mut seen = HashSet::with_capacity(asks.len());
    for a in &asks {
        if seen.insert(a.key.as_str()) {
            keys.push(&a.key);
        }
    }
    let answer = read(pool, spares, kind, &keys).await;
    let docs = match answer {
        Ok(docs) => docs,
        Err(e) => {
            tracing::warn!(error = %e, keys = keys.len(), kind = kind.name, "a batched read failed");
            for a in asks {
                // The receiver may be gone (its caller was cancelled): nothing to tell it.
                let _ = a.answer.send(Err(e.clone()));
            }
            return;
        }
    };
    for a in asks {
        // A key asked twice in one batch: each caller hears the same rows.
        let rows = docs.get(&a.key).cloned().unwrap_or_default();
        let _ = a.answer.send(Ok(rows));
    }
}

/// One statement for every key of the batch: the rows by key, in the kind's order.
async fn read(
    pool: &AnyPool,
    spares: &Spares,
    kind: Kind,
    keys: &[&str],
) -> Result<HashMap<String, Vec<Part>>, StorageError> {
    if keys.is_empty() {
        return Ok(HashMap::new());
    }
    // The list is padded to a power of two (the last key again), so that the connection's
    // prepared statements are a handful of sizes, not one per batch size.
    let width = keys.len().next_power_of_two();
    let placeholders: Vec<String> = (1..=width).map(|i| format!("${i}")).collect();
    let sql = (kind.sql)(&placeholders.join(", "));
    let mut query = sqlx::query(&sql);
    for i in 0..width {
        query = query.bind(keys[i.min(keys.len() - 1)]);
    }
    let mut conn = spares.take(pool).await.map_err(begin_err)?;
    let rows = match query.fetch_all(&mut *conn).await {
        Ok(rows) => rows,
        Err(e) => {
            // The kept connections have likely met this one's fate (a database restarted): back
            // to the pool with it, which tests them (`spare.rs`).
            spares.clear();
            return Err(db_err(e));
        }
    };
    spares.put(conn);
    let mut docs: HashMap<String, Vec<Part>> = HashMap::with_capacity(keys.len());
    for row in rows {
        let key: String = row.try_get("batch_key").map_err(db_err)?;
        let part: i32 = row.try_get("part").map_err(db_err)?;
        let doc: String = row.try_get("doc").map_err(db_err)?;
        docs.entry(key).or_default().push((part, doc));
    }
    Ok(docs)
}
