//! The transaction: [`SqlTx`] and its connection (`mod.rs`), the [`Tx`] methods as SQL
//! ([`queries`]), and the rows' encoding ([`rows`]).

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use countersign_broker_core::audit::AuditEntry;
use countersign_broker_core::clock::Time;
use countersign_broker_core::ids::{
    ConfirmationCode, CredentialId, EnrollmentId, GrantId, Login, RecordId, RequestId,
};
use countersign_broker_core::issuer::Issued;
use countersign_broker_core::model::{
    Enrollment, Grant, LauncherCredential, Passkey, PendingLogin, Record, RecordDecision,
    RecordState, RecordText, Request, RequestState,
};
use countersign_broker_core::storage::{Due, OutboxItem, StorageError, Tx};
use serde::de::DeserializeOwned;
use sqlx::any::AnyRow;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Row, Transaction};

use crate::Backend;
use crate::error::db_err;
use crate::group::Turn;
use crate::reads::Reads;
use crate::schema::AUDIT_ENDS;
use crate::spare::Spares;
use crate::writer::{AuditSlot, Slot, held_back_failed};

/// Parameters to bind, in order: `args![id, ms(now)]`.
macro_rules! args {
    ($($a:expr),* $(,)?) => { vec![$(Arg::from($a)),*] };
}

mod combined;
mod held;
mod locked;
mod queries;
mod rows;

use held::Held;
use locked::{Locked, Remembered};

use rows::*;
pub(crate) use rows::{Arg, bind_all};

/// A transaction on either backend.
pub(crate) struct SqlTx {
    /// `None` once committed.
    inner: Option<Inner>,
    backend: Backend,
    /// A write transaction (rows read are locked on PostgreSQL).
    write: bool,
    /// A statement started and has not ended well (failed, or still running when the
    /// transaction was dropped): the connection's state is unknown.
    unsettled: bool,
    /// A read's connection goes back here when it ends settled (`spare.rs`).
    spares: Option<Arc<Spares>>,
    /// PostgreSQL's reads: the rows a proof-verified call reads come through batches
    /// (`reads.rs`).
    reads: Option<Reads>,
    /// PostgreSQL's write: the writes held back, to go as one statement (`held.rs`).
    held: Held,
    /// PostgreSQL's write: the rows it read by key (locked) or wrote (`locked.rs`).
    locked: Locked,
    /// Counts the statements this transaction sends on its connection, `BEGIN` and `COMMIT`
    /// included (the storage's [`round_trips`](crate::SqlStorage::round_trips)).
    sent: Option<Arc<AtomicU64>>,
}

/// Where the statements run.
enum Inner {
    /// A transaction of its own on a pooled connection: a snapshot read.
    Pool(Transaction<'static, Any>),
    /// SQLite's writes: a turn at the single writer, inside its group-committed transaction.
    Writer(Slot),
    /// PostgreSQL's writes: a turn at the group commit (`group.rs`).
    Group(Turn),
    /// Reads: a connection with no `BEGIN`, each statement its own snapshot (under PostgreSQL's
    /// READ COMMITTED that is so inside a transaction too, and SQLite's reads are all one
    /// statement or need no more), so the round trips of `BEGIN` and `ROLLBACK` bought nothing.
    Conn(PoolConnection<Any>),
    /// PostgreSQL's reads before their first statement that is not batched (`reads.rs`): no
    /// connection yet; that statement takes one from the spares, as [`Inner::Conn`].
    Lazy(AnyPool),
}

impl fmt::Debug for SqlTx {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlTx")
            .field("backend", &self.backend)
            .field("write", &self.write)
            .field("open", &self.inner.is_some())
            .finish()
    }
}

impl Drop for SqlTx {
    fn drop(&mut self) {
        // A pooled transaction rolls back when its connection is next used or is back in the
        // pool; a writer's turn must end (and maybe roll back) before the next writer's.
        match self.inner.take() {
            Some(Inner::Writer(slot)) => slot.abandon(),
            Some(Inner::Group(turn)) => turn.abandon(self.unsettled),
            Some(Inner::Conn(conn)) if !self.unsettled => {
                if let Some(spares) = &self.spares {
                    spares.put(conn);
                }
            }
            _ => {}
        }
    }
}

impl SqlTx {
    /// Counts its statements on `sent`.
    pub(crate) fn counting(mut self, sent: &Arc<AtomicU64>) -> Self {
        self.sent = Some(sent.clone());
        self
    }

    /// One more statement sent.
    fn count(&self) {
        if let Some(sent) = &self.sent {
            sent.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether this transaction holds its writes back (`held.rs`): PostgreSQL's writes, which
    /// are turns at the group commit.
    fn holds(&self) -> bool {
        matches!(self.inner, Some(Inner::Group(_)))
    }

    /// The physical transaction's opening, when this is a turn at the group commit whose
    /// transaction has not opened: to send before, or with, its next statement.
    fn opening(&self) -> Option<String> {
        match self.inner.as_ref() {
            Some(Inner::Group(turn)) => turn.opening(),
            _ => None,
        }
    }

    /// The row `key` of `T`'s table, if this write transaction read (and locked) or wrote it.
    fn remembered<T: Remembered>(&self, key: &str) -> Option<T> {
        if !self.holds() {
            return None;
        }
        self.locked.get(key)
    }

    /// Remembers a row read by key (locked) or written, in a write transaction that holds its
    /// writes back.
    fn remember<T: Remembered>(&mut self, key: String, v: &T) {
        if self.holds() {
            self.locked.put(key, v);
        }
    }

    /// Sends what is held back, as one statement (or a few, for very many parameters).
    async fn flush(&mut self) -> Result<(), StorageError> {
        if self.held.is_empty() {
            return Ok(());
        }
        self.writing();
        for (sql, args) in self.held.take() {
            let conn = self.conn_now().await?;
            let r = bind_all(sqlx::query(&sql), args).execute(conn).await;
            self.checked(r)?;
        }
        Ok(())
    }

    /// A read whose statements share one snapshot ([`Storage::snapshot`]).
    ///
    /// [`Storage::snapshot`]: countersign_broker_core::storage::Storage::snapshot
    pub(crate) fn snapshot(tx: Transaction<'static, Any>, backend: Backend) -> Self {
        SqlTx {
            inner: Some(Inner::Pool(tx)),
            backend,
            write: false,
            unsettled: false,
            spares: None,
            reads: None,
            held: Held::default(),
            locked: Locked::default(),
            sent: None,
        }
    }

    /// A read on a connection without a transaction, given back to `spares` when it ends
    /// settled.
    pub(crate) fn reading(
        conn: PoolConnection<Any>,
        backend: Backend,
        spares: Arc<Spares>,
    ) -> Self {
        SqlTx {
            inner: Some(Inner::Conn(conn)),
            backend,
            write: false,
            unsettled: false,
            spares: Some(spares),
            reads: None,
            held: Held::default(),
            locked: Locked::default(),
            sent: None,
        }
    }

    /// A read on PostgreSQL: the rows of proof-verified calls come through `reads`' batches,
    /// and any other statement takes a connection (kept in `spares`, as [`SqlTx::reading`]).
    pub(crate) fn batched(pool: AnyPool, spares: Arc<Spares>, reads: Reads) -> Self {
        SqlTx {
            inner: Some(Inner::Lazy(pool)),
            backend: Backend::Postgres,
            write: false,
            unsettled: false,
            spares: Some(spares),
            reads: Some(reads),
            held: Held::default(),
            locked: Locked::default(),
            sent: None,
        }
    }

    /// A PostgreSQL write: a turn at the group commit (`group.rs`).
    pub(crate) fn grouped(turn: Turn) -> Self {
        SqlTx {
            inner: Some(Inner::Group(turn)),
            backend: Backend::Postgres,
            write: true,
            unsettled: false,
            spares: None,
            reads: None,
            held: Held::default(),
            locked: Locked::default(),
            sent: None,
        }
    }

    pub(crate) fn writer(slot: Slot) -> Self {
        SqlTx {
            inner: Some(Inner::Writer(slot)),
            backend: Backend::Sqlite,
            write: true,
            unsettled: false,
            spares: None,
            reads: None,
            held: Held::default(),
            locked: Locked::default(),
            sent: None,
        }
    }

    /// The connection for the next statement, which [`SqlTx::checked`] settles, once the
    /// writes held back have gone before it (so it sees them, and they run in order).
    async fn conn(&mut self) -> Result<&mut AnyConnection, StorageError> {
        self.flush().await?;
        self.conn_now().await
    }

    /// The connection for the next statement, with the writes still held back. A read on
    /// PostgreSQL takes its connection here, at its first statement that is not batched.
    async fn conn_now(&mut self) -> Result<&mut AnyConnection, StorageError> {
        self.open().await?;
        self.conn_bare().await
    }

    /// A PostgreSQL write's physical transaction, opened (`group.rs`): its opening is sent
    /// alone when no statement carried it.
    async fn open(&mut self) -> Result<(), StorageError> {
        match self.opening() {
            Some(text) => self.text_in_turn(&text, true).await.map(|_| ()),
            None => Ok(()),
        }
    }

    /// The connection for the next statement, as it is (a PostgreSQL write's physical
    /// transaction maybe not opened yet: the statement carries the opening).
    async fn conn_bare(&mut self) -> Result<&mut AnyConnection, StorageError> {
        self.count();
        if let (Some(Inner::Lazy(pool)), Some(spares)) = (&self.inner, &self.spares) {
            let conn = spares.take(pool).await.map_err(crate::error::begin_err)?;
            self.inner = Some(Inner::Conn(conn));
        }
        self.unsettled = true;
        match self.inner.as_mut() {
            Some(Inner::Pool(tx)) => Ok(&mut **tx),
            Some(Inner::Conn(c)) => Ok(&mut **c),
            Some(Inner::Writer(slot)) => slot.conn().await,
            Some(Inner::Group(turn)) => turn.conn(),
            Some(Inner::Lazy(_)) => Err(StorageError::Other(
                "a read without its connection's spares".into(),
            )),
            None => Err(finished()),
        }
    }

    /// Before a statement that may change the database.
    fn writing(&mut self) {
        match self.inner.as_mut() {
            Some(Inner::Writer(slot)) => slot.writing(),
            Some(Inner::Group(turn)) => turn.writing(),
            _ => {}
        }
    }

    /// Notes a failed statement (the writer's physical transaction may be gone).
    fn checked<T>(&mut self, r: Result<T, sqlx::Error>) -> Result<T, StorageError> {
        self.unsettled = r.is_err();
        if r.is_err() {
            match (self.inner.as_mut(), &self.spares) {
                (Some(Inner::Writer(slot)), _) => slot.failed(),
                (Some(Inner::Group(turn)), _) => turn.failed(),
                // The others kept beside this connection have likely met its fate (a database
                // restarted): back to the pool, which tests them, with this one.
                (Some(Inner::Conn(_)), Some(spares)) => spares.clear(),
                _ => {}
            }
        }
        r.map_err(db_err)
    }

    /// The query with the row-lock clause this transaction needs.
    fn locking(&self, sql: &str, lock: Lock) -> String {
        match (self.backend, self.write, lock) {
            (Backend::Postgres, true, Lock::Update) => format!("{sql} FOR UPDATE"),
            (Backend::Postgres, true, Lock::SkipLocked) => format!("{sql} FOR UPDATE SKIP LOCKED"),
            _ => sql.to_owned(),
        }
    }

    async fn fetch_all_locked(
        &mut self,
        sql: &str,
        args: Vec<Arg>,
        lock: Lock,
    ) -> Result<Vec<AnyRow>, StorageError> {
        let sql = self.locking(sql, lock);
        self.fetch_rows(&sql, args, Rows::All).await
    }

    async fn fetch_all(&mut self, sql: &str, args: Vec<Arg>) -> Result<Vec<AnyRow>, StorageError> {
        self.fetch_all_locked(sql, args, Lock::Update).await
    }

    async fn fetch_optional(
        &mut self,
        sql: &str,
        args: Vec<Arg>,
    ) -> Result<Option<AnyRow>, StorageError> {
        let sql = self.locking(sql, Lock::Update);
        let rows = self.fetch_rows(&sql, args, Rows::First).await?;
        Ok(rows.into_iter().next())
    }

    /// Runs a statement that answers rows. On SQLite's writer, what is held back goes with it,
    /// as one text: one trip to the connection's thread.
    async fn fetch_rows(
        &mut self,
        sql: &str,
        mut args: Vec<Arg>,
        rows: Rows,
    ) -> Result<Vec<AnyRow>, StorageError> {
        if let Some(Inner::Writer(slot)) = self.inner.as_mut() {
            let (conn, combined) = slot.with_held_back(sql, &mut args)?;
            let r = match combined.as_deref() {
                // For one row, sqlx's `Any` driver on SQLite reads only the text's first result
                // (a held-back statement's, no row) and drops the rest, which stops the text
                // there: ask for all (the rows are the last statement's; a caller that wants
                // one reads the first).
                Some(text) => fetch(conn, text, args, Rows::All).await,
                None => fetch(conn, sql, args, rows).await,
            };
            slot.answered();
            return match r {
                Ok(rows) => Ok(rows),
                Err(e) => {
                    slot.failed();
                    Err(match combined {
                        Some(_) => held_back_failed(e),
                        None => db_err(e),
                    })
                }
            };
        }
        let conn = self.conn().await?;
        let r = fetch(conn, sql, args, rows).await;
        self.checked(r)
    }

    /// A write whose answer nobody reads (an upsert of the row `row`, table and key): on
    /// SQLite's writer it is held back, to go with the next statement or the batch's `COMMIT`;
    /// on PostgreSQL with the transaction's other writes, as one statement (`held.rs`).
    async fn put(
        &mut self,
        row: (&'static str, String),
        sql: &str,
        args: Vec<Arg>,
    ) -> Result<(), StorageError> {
        if let Some(Inner::Writer(slot)) = self.inner.as_mut() {
            slot.defer(sql, args);
            return Ok(());
        }
        if self.holds() {
            self.held.put(row, sql, args);
            return Ok(());
        }
        self.execute(sql, args).await.map(|_| ())
    }

    async fn execute(&mut self, sql: &str, args: Vec<Arg>) -> Result<u64, StorageError> {
        if matches!(self.inner, Some(Inner::Conn(_) | Inner::Lazy(_))) {
            // Outside a transaction a write would commit at once: a read never writes.
            return Err(StorageError::Other("write in a read transaction".into()));
        }
        self.writing();
        let conn = self.conn().await?;
        let r = bind_all(sqlx::query(sql), args).execute(conn).await;
        self.checked(r).map(|r| r.rows_affected())
    }

    async fn get_doc<T: DeserializeOwned>(
        &mut self,
        what: &str,
        sql: &str,
        args: Vec<Arg>,
    ) -> Result<Option<T>, StorageError> {
        match self.fetch_optional(sql, args).await? {
            Some(row) => from_doc(what, &row).map(Some),
            None => Ok(None),
        }
    }

    /// A row by key, locked: from what this transaction read or wrote when it has (`locked.rs`).
    async fn get_locked<T: Remembered + DeserializeOwned>(
        &mut self,
        what: &str,
        sql: &str,
        key: String,
    ) -> Result<Option<T>, StorageError> {
        if let Some(v) = self.remembered::<T>(&key) {
            return Ok(Some(v));
        }
        let v: Option<T> = self.get_doc(what, sql, args![key.clone()]).await?;
        if let Some(v) = &v {
            self.remember(key, v);
        }
        Ok(v)
    }

    async fn get_docs<T: DeserializeOwned>(
        &mut self,
        what: &str,
        sql: &str,
        args: Vec<Arg>,
    ) -> Result<Vec<T>, StorageError> {
        let rows = self.fetch_all(sql, args).await?;
        from_docs(what, &rows)
    }

    /// Adds one to the policy epoch.
    pub(crate) async fn bump_policy_epoch(&mut self) -> Result<(), StorageError> {
        self.execute(
            "INSERT INTO counters (name, value) VALUES ('policy', 1) \
             ON CONFLICT (name) DO UPDATE SET value = counters.value + 1",
            Vec::new(),
        )
        .await
        .map(|_| ())
    }

    /// Deletes every single-use value lapsed before `now`.
    pub(crate) async fn purge_once_values(&mut self, now: Time) -> Result<u64, StorageError> {
        self.execute(
            "DELETE FROM once_values WHERE until_ms < $1",
            args![ms(now)],
        )
        .await
    }

    /// Remembers many single-use values in one statement (see [`remember_many`]), inside this
    /// transaction.
    pub(crate) async fn remember_many(
        &mut self,
        values: &[(&str, &str, Time)],
        now: Time,
    ) -> Result<Vec<(String, String)>, StorageError> {
        if values.is_empty() {
            return Ok(Vec::new());
        }
        let (sql, args) = remember_many_sql(values, now);
        self.writing();
        let rows = self.fetch_rows(&sql, args, Rows::All).await?;
        fresh_pairs(&rows)
    }
}

/// How many of a statement's rows are wanted.
#[derive(Clone, Copy)]
enum Rows {
    All,
    First,
}

async fn fetch(
    conn: &mut AnyConnection,
    sql: &str,
    args: Vec<Arg>,
    rows: Rows,
) -> Result<Vec<AnyRow>, sqlx::Error> {
    let q = bind_all(sqlx::query(sql), args);
    match rows {
        Rows::All => q.fetch_all(conn).await,
        Rows::First => Ok(q.fetch_optional(conn).await?.into_iter().collect()),
    }
}

/// Remembers many single-use values (see `once.rs`) on PostgreSQL in one statement on `conn`,
/// outside any transaction: the statement is its own transaction, committed (durably, with
/// PostgreSQL's default `synchronous_commit`) before it answers, in one round trip. Inserts each
/// value, or replaces one lapsed before `now`; answers the `(scope, value)` pairs it wrote: the
/// fresh ones. The primary key on (scope, value) decides between concurrent callers, in this
/// process or another. Values must be distinct (one statement may not touch a row twice).
///
/// The values travel as one JSON array, so that the statement's text is the same for every
/// batch: the connection prepares it once, where a `VALUES` list of the batch's length was a
/// statement of its own for each length (parsed and planned again whenever the connection's
/// cache had not seen that length).
pub(crate) async fn remember_many(
    conn: &mut AnyConnection,
    values: &[(&str, &str, Time)],
    now: Time,
) -> Result<Vec<(String, String)>, StorageError> {
    if values.is_empty() {
        return Ok(Vec::new());
    }
    let rows = sqlx::query(REMEMBER_MANY_POSTGRES)
        .bind(remembered_json(values))
        .bind(ms(now))
        .fetch_all(conn)
        .await
        .map_err(db_err)?;
    fresh_pairs(&rows)
}

/// `remember_many`'s statement: the rows in (scope, value) order, so that two replicas' batches
/// lock shared keys in the same order.
const REMEMBER_MANY_POSTGRES: &str = "INSERT INTO once_values (scope, value, until_ms) \
     SELECT scope, value, until_ms FROM json_to_recordset($1::json) \
     AS v(scope text, value text, until_ms bigint) ORDER BY scope, value \
     ON CONFLICT (scope, value) DO UPDATE SET until_ms = excluded.until_ms \
     WHERE once_values.until_ms < $2 RETURNING scope, value";

/// The values as `[{"scope":…,"value":…,"until_ms":…},…]`.
fn remembered_json(values: &[(&str, &str, Time)]) -> String {
    let rows: Vec<serde_json::Value> = values
        .iter()
        .map(|(scope, value, until)| {
            serde_json::json!({ "scope": scope, "value": value, "until_ms": ms(*until) })
        })
        .collect();
    serde_json::Value::Array(rows).to_string()
}

fn remember_many_sql(values: &[(&str, &str, Time)], now: Time) -> (String, Vec<Arg>) {
    let mut sql = String::from("INSERT INTO once_values (scope, value, until_ms) VALUES ");
    let mut args = Vec::with_capacity(values.len() * 3 + 1);
    for (i, (scope, value, until)) in values.iter().enumerate() {
        if i > 0 {
            sql.push(',');
        }
        let n = i * 3;
        sql.push_str(&format!("(${}, ${}, ${})", n + 1, n + 2, n + 3));
        args.push(Arg::from(*scope));
        args.push(Arg::from(*value));
        args.push(Arg::from(ms(*until)));
    }
    sql.push_str(&format!(
        " ON CONFLICT (scope, value) DO UPDATE SET until_ms = excluded.until_ms \
         WHERE once_values.until_ms < ${} RETURNING scope, value",
        values.len() * 3 + 1
    ));
    args.push(Arg::from(ms(now)));
    (sql, args)
}

fn fresh_pairs(rows: &[AnyRow]) -> Result<Vec<(String, String)>, StorageError> {
    rows.iter()
        .map(|row| {
            Ok((
                row.try_get::<String, _>("scope").map_err(db_err)?,
                row.try_get::<String, _>("value").map_err(db_err)?,
            ))
        })
        .collect()
}

fn finished() -> StorageError {
    StorageError::Other("transaction already finished".into())
}
