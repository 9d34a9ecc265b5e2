//! The transaction: the [`Tx`] methods as SQL.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use countersign_broker_core::audit::AuditEntry;
use countersign_broker_core::clock::Time;
use countersign_broker_core::ids::{
    ConfirmationCode, CredentialId, EnrollmentId, GrantId, Login, RecordId, RequestId,
};
use countersign_broker_core::model::{
    Enrollment, Grant, LauncherCredential, Passkey, PendingLogin, Record, RecordDecision,
    RecordState, RecordText, Request, RequestState,
};
use countersign_broker_core::storage::{Due, OutboxItem, StorageError, Tx};
use serde::de::DeserializeOwned;
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::pool::PoolConnection;
use sqlx::query::Query;
use sqlx::{Any, AnyConnection, AnyPool, Row, Transaction};

use crate::Backend;
use crate::error::db_err;
use crate::reads::Reads;
use crate::spare::Spares;
use crate::writer::Slot;

/// A bound parameter.
enum Arg {
    Text(String),
    Int(i64),
    Bytes(Vec<u8>),
    NullText,
    NullInt,
}

impl From<&str> for Arg {
    fn from(s: &str) -> Self {
        Arg::Text(s.to_owned())
    }
}

impl From<String> for Arg {
    fn from(s: String) -> Self {
        Arg::Text(s)
    }
}

impl From<Vec<u8>> for Arg {
    fn from(b: Vec<u8>) -> Self {
        Arg::Bytes(b)
    }
}

impl From<i64> for Arg {
    fn from(i: i64) -> Self {
        Arg::Int(i)
    }
}

impl From<Option<String>> for Arg {
    fn from(s: Option<String>) -> Self {
        s.map_or(Arg::NullText, Arg::Text)
    }
}

impl From<Option<i64>> for Arg {
    fn from(i: Option<i64>) -> Self {
        i.map_or(Arg::NullInt, Arg::Int)
    }
}

macro_rules! args {
    ($($a:expr),* $(,)?) => { vec![$(Arg::from($a)),*] };
}

fn bind_all<'q>(
    mut q: Query<'q, Any, AnyArguments<'q>>,
    args: Vec<Arg>,
) -> Query<'q, Any, AnyArguments<'q>> {
    for a in args {
        q = match a {
            Arg::Text(s) => q.bind(s),
            Arg::Int(i) => q.bind(i),
            Arg::Bytes(b) => q.bind(b),
            Arg::NullText => q.bind(None::<String>),
            Arg::NullInt => q.bind(None::<i64>),
        };
    }
    q
}

/// How a `SELECT` in a write transaction locks the rows it reads (PostgreSQL only).
#[derive(Clone, Copy)]
enum Lock {
    /// `FOR UPDATE`.
    Update,
    /// `FOR UPDATE SKIP LOCKED`.
    SkipLocked,
}

/// Unix milliseconds.
fn ms(t: Time) -> i64 {
    t.timestamp_millis()
}

fn from_ms(ms: i64) -> Result<Time, StorageError> {
    DateTime::<Utc>::from_timestamp_millis(ms)
        .ok_or_else(|| StorageError::Corrupt(format!("time out of range: {ms} ms")))
}

fn to_doc<T: serde::Serialize>(what: &str, v: &T) -> Result<String, StorageError> {
    serde_json::to_string(v).map_err(|e| StorageError::Other(format!("encoding {what}: {e}")))
}

fn from_doc<T: DeserializeOwned>(what: &str, row: &AnyRow) -> Result<T, StorageError> {
    let doc: String = row.try_get("doc").map_err(db_err)?;
    decode(what, &doc)
}

fn decode<T: DeserializeOwned>(what: &str, doc: &str) -> Result<T, StorageError> {
    serde_json::from_str(doc).map_err(|e| StorageError::Corrupt(format!("{what}: {e}")))
}

fn decode_some<T: DeserializeOwned>(
    what: &str,
    doc: Option<String>,
) -> Result<Option<T>, StorageError> {
    doc.map(|d| decode(what, &d)).transpose()
}

fn from_docs<T: DeserializeOwned>(what: &str, rows: &[AnyRow]) -> Result<Vec<T>, StorageError> {
    rows.iter().map(|r| from_doc(what, r)).collect()
}

/// `INSERT … ON CONFLICT (key) DO UPDATE SET` every other column.
fn upsert_sql(table: &str, key: &str, columns: &[&str]) -> String {
    let placeholders: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
    let updates: Vec<String> = columns
        .iter()
        .filter(|c| **c != key)
        .map(|c| format!("{c} = excluded.{c}"))
        .collect();
    format!(
        "INSERT INTO {table} ({}) VALUES ({}) ON CONFLICT ({key}) DO UPDATE SET {}",
        columns.join(", "),
        placeholders.join(", "),
        updates.join(", ")
    )
}

const RECORD_COLUMNS: &str = "id, text, state, decided, code";

fn record_from_row(row: &AnyRow) -> Result<Record, StorageError> {
    let id: String = row.try_get("id").map_err(db_err)?;
    let id = RecordId::parse(&id)
        .map_err(|_| StorageError::Corrupt(format!("record id {id:?} is not 64 hex digits")))?;
    let text: String = row.try_get("text").map_err(db_err)?;
    let body: RecordText = serde_json::from_str(&text)
        .map_err(|e| StorageError::Corrupt(format!("record {id} text: {e}")))?;
    let state: String = row.try_get("state").map_err(db_err)?;
    let state: RecordState = serde_json::from_value(serde_json::Value::String(state.clone()))
        .map_err(|_| StorageError::Corrupt(format!("record {id} state {state:?}")))?;
    let decided: Option<String> = row.try_get("decided").map_err(db_err)?;
    let decided = decided
        .map(|d| serde_json::from_str::<RecordDecision>(&d))
        .transpose()
        .map_err(|e| StorageError::Corrupt(format!("record {id} decision: {e}")))?;
    let code: Option<String> = row.try_get("code").map_err(db_err)?;
    let code = code
        .map(|c| {
            ConfirmationCode::parse(&c)
                .ok_or_else(|| StorageError::Corrupt(format!("record {id} code {c:?}")))
        })
        .transpose()?;
    Ok(Record {
        id,
        text,
        body,
        state,
        decided,
        code,
    })
}

fn outbox_from_row(row: &AnyRow) -> Result<OutboxItem, StorageError> {
    let attempts: i64 = row.try_get("attempts").map_err(db_err)?;
    Ok(OutboxItem {
        id: row.try_get("id").map_err(db_err)?,
        payload: row.try_get("payload").map_err(db_err)?,
        attempts: u32::try_from(attempts)
            .map_err(|_| StorageError::Corrupt(format!("outbox attempts {attempts}")))?,
        next_attempt_at: from_ms(row.try_get("next_attempt_at_ms").map_err(db_err)?)?,
    })
}

use crate::schema::AUDIT_ENDS;

const AUDIT_COLUMNS: &str = "position, at_ms, kind, subject, body, prev_hash, hash, seal";

/// Inserts audit entries, at most [`AUDIT_ROWS_PER_INSERT`] a statement.
pub(crate) async fn insert_audit(
    conn: &mut AnyConnection,
    entries: &[AuditEntry],
) -> Result<(), sqlx::Error> {
    for chunk in entries.chunks(AUDIT_ROWS_PER_INSERT) {
        let mut sql = format!("INSERT INTO audit_log ({AUDIT_COLUMNS}) VALUES ");
        let mut args = Vec::with_capacity(chunk.len() * 8);
        for (i, e) in chunk.iter().enumerate() {
            let n = i * 8;
            if i > 0 {
                sql.push_str(", ");
            }
            sql.push_str(&format!(
                "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${})",
                n + 1,
                n + 2,
                n + 3,
                n + 4,
                n + 5,
                n + 6,
                n + 7,
                n + 8
            ));
            args.extend(args![
                e.position,
                ms(e.at),
                e.kind.as_str(),
                e.subject.as_str(),
                e.body.as_str(),
                hash_bytes(&e.prev_hash),
                hash_bytes(&e.hash),
                e.seal.as_str(),
            ]);
        }
        bind_all(sqlx::query(&sql), args)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Rows per audit `INSERT` (8 parameters each, well under either backend's limit).
const AUDIT_ROWS_PER_INSERT: usize = 256;

/// The advisory lock appenders to the audit log hold until commit (PostgreSQL): "csau".
const PG_AUDIT_LOCK: i64 = 0x6373_6175;

/// A chain hash as stored: its 32 bytes (schema version 5), not its 64 hex digits. The chain
/// is defined over the hex text, which reading restores exactly.
fn hash_bytes(hex_text: &str) -> Vec<u8> {
    // The core computes every hash as lowercase hex; anything else is stored as it came, and
    // fails verification when read back.
    hex::decode(hex_text).unwrap_or_else(|_| hex_text.as_bytes().to_vec())
}

fn audit_from_row(row: &AnyRow) -> Result<AuditEntry, StorageError> {
    Ok(AuditEntry {
        position: row.try_get("position").map_err(db_err)?,
        at: from_ms(row.try_get("at_ms").map_err(db_err)?)?,
        kind: row.try_get("kind").map_err(db_err)?,
        subject: row.try_get("subject").map_err(db_err)?,
        body: row.try_get("body").map_err(db_err)?,
        prev_hash: hex::encode(row.try_get::<Vec<u8>, _>("prev_hash").map_err(db_err)?),
        hash: hex::encode(row.try_get::<Vec<u8>, _>("hash").map_err(db_err)?),
        seal: row.try_get("seal").map_err(db_err)?,
    })
}

fn ids<T>(
    rows: &[AnyRow],
    parse: impl Fn(&str) -> Result<T, countersign_broker_core::Error>,
) -> Result<Vec<T>, StorageError> {
    rows.iter()
        .map(|r| {
            let id: String = r.try_get("id").map_err(db_err)?;
            parse(&id).map_err(|_| StorageError::Corrupt(format!("id {id:?}")))
        })
        .collect()
}

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
}

/// Where the statements run.
enum Inner {
    /// A transaction of its own on a pooled connection: reads, and PostgreSQL's writes.
    Pool(Transaction<'static, Any>),
    /// SQLite's writes: a turn at the single writer, inside its group-committed transaction.
    Writer(Slot),
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
    pub(crate) fn pooled(tx: Transaction<'static, Any>, backend: Backend, write: bool) -> Self {
        SqlTx {
            inner: Some(Inner::Pool(tx)),
            backend,
            write,
            unsettled: false,
            spares: None,
            reads: None,
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
        }
    }

    /// The connection for the next statement, which [`SqlTx::checked`] settles. A read on
    /// PostgreSQL takes its connection here, at its first statement that is not batched.
    async fn conn(&mut self) -> Result<&mut AnyConnection, StorageError> {
        if let (Some(Inner::Lazy(pool)), Some(spares)) = (&self.inner, &self.spares) {
            let conn = spares.take(pool).await.map_err(crate::error::begin_err)?;
            self.inner = Some(Inner::Conn(conn));
        }
        self.unsettled = true;
        match self.inner.as_mut() {
            Some(Inner::Pool(tx)) => Ok(&mut **tx),
            Some(Inner::Conn(c)) => Ok(&mut **c),
            Some(Inner::Writer(slot)) => slot.conn(),
            Some(Inner::Lazy(_)) => Err(StorageError::Other(
                "a read without its connection's spares".into(),
            )),
            None => Err(finished()),
        }
    }

    /// Before a statement that may change the database.
    fn writing(&mut self) {
        if let Some(Inner::Writer(slot)) = self.inner.as_mut() {
            slot.writing();
        }
    }

    /// Notes a failed statement (the writer's physical transaction may be gone).
    fn checked<T>(&mut self, r: Result<T, sqlx::Error>) -> Result<T, StorageError> {
        self.unsettled = r.is_err();
        if r.is_err() {
            match (self.inner.as_mut(), &self.spares) {
                (Some(Inner::Writer(slot)), _) => slot.failed(),
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
        let conn = self.conn().await?;
        let r = bind_all(sqlx::query(&sql), args).fetch_all(conn).await;
        self.checked(r)
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
        let conn = self.conn().await?;
        let r = bind_all(sqlx::query(&sql), args).fetch_optional(conn).await;
        self.checked(r)
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
        let conn = self.conn().await?;
        let r = bind_all(sqlx::query(&sql), args).fetch_all(conn).await;
        let rows = self.checked(r)?;
        fresh_pairs(&rows)
    }
}

/// Remembers many single-use values (see `once.rs`) in one statement on `conn`, outside any
/// transaction: the statement is its own transaction, committed (durably, with PostgreSQL's
/// default `synchronous_commit`) before it answers, in one round trip. Inserts each value, or
/// replaces one lapsed before `now`; answers the `(scope, value)` pairs it wrote: the fresh ones.
/// The primary key on (scope, value) decides between concurrent callers, in this process or
/// another. Values must be distinct (one statement may not touch a row twice).
pub(crate) async fn remember_many(
    conn: &mut AnyConnection,
    values: &[(&str, &str, Time)],
    now: Time,
) -> Result<Vec<(String, String)>, StorageError> {
    if values.is_empty() {
        return Ok(Vec::new());
    }
    let (sql, args) = remember_many_sql(values, now);
    let rows = bind_all(sqlx::query(&sql), args)
        .fetch_all(conn)
        .await
        .map_err(db_err)?;
    fresh_pairs(&rows)
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

#[async_trait]
impl Tx for SqlTx {
    #[tracing::instrument(name = "database commit", level = "info", skip_all, fields(otel.kind = "client"))]
    async fn commit(mut self: Box<Self>) -> Result<(), StorageError> {
        match self.inner.take().ok_or_else(finished)? {
            Inner::Pool(tx) => tx.commit().await.map_err(db_err),
            Inner::Writer(slot) => slot.commit().await,
            Inner::Conn(_) | Inner::Lazy(_) => Ok(()),
        }
    }

    async fn get_credential(
        &mut self,
        id: CredentialId,
    ) -> Result<Option<LauncherCredential>, StorageError> {
        if let Some(reads) = &self.reads {
            return decode_some("credential", reads.credential(id.to_string()).await?);
        }
        self.get_doc(
            "credential",
            "SELECT doc FROM credentials WHERE id = $1",
            args![id.to_string()],
        )
        .await
    }

    async fn credentials_by_thumbprint(
        &mut self,
        thumbprint: &str,
    ) -> Result<Vec<LauncherCredential>, StorageError> {
        // `FOR UPDATE` locks only rows that exist: two transactions minting the first credential
        // for one key would both find none and both insert. On PostgreSQL a write transaction
        // first takes an advisory lock on the key (held to commit), so they serialise and the
        // second reads the first's credential. SQLite's write transactions are serial already.
        if self.backend == Backend::Postgres && self.write {
            self.execute(
                "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
                args![format!("countersign:credential-key:{thumbprint}")],
            )
            .await?;
        }
        self.get_docs(
            "credential",
            "SELECT doc FROM credentials WHERE thumbprint = $1 ORDER BY issued_at_ms, id",
            args![thumbprint],
        )
        .await
    }

    async fn list_credentials(&mut self) -> Result<Vec<LauncherCredential>, StorageError> {
        self.get_docs(
            "credential",
            "SELECT doc FROM credentials WHERE revoked_at_ms IS NULL ORDER BY issued_at_ms, id",
            args![],
        )
        .await
    }

    async fn put_credential(&mut self, c: &LauncherCredential) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "credentials",
            "id",
            &[
                "id",
                "thumbprint",
                "issued_at_ms",
                "expires_at_ms",
                "revoked_at_ms",
                "doc",
            ],
        );
        let doc = to_doc("credential", c)?;
        self.execute(
            &sql,
            args![
                c.id.to_string(),
                c.thumbprint.as_str(),
                ms(c.issued_at),
                ms(c.expires_at),
                c.revoked_at.map(ms),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_passkey(&mut self, id: &str) -> Result<Option<Passkey>, StorageError> {
        self.get_doc(
            "passkey",
            "SELECT doc FROM passkeys WHERE id = $1",
            args![id],
        )
        .await
    }

    async fn passkeys_of(&mut self, person: &Login) -> Result<Vec<Passkey>, StorageError> {
        self.get_docs(
            "passkey",
            "SELECT doc FROM passkeys WHERE person = $1 ORDER BY created_at_ms, id",
            args![person.as_str()],
        )
        .await
    }

    async fn list_passkeys(&mut self) -> Result<Vec<Passkey>, StorageError> {
        self.get_docs(
            "passkey",
            "SELECT doc FROM passkeys ORDER BY created_at_ms, id",
            args![],
        )
        .await
    }

    async fn put_passkey(&mut self, p: &Passkey) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "passkeys",
            "id",
            &["id", "person", "created_at_ms", "removed_at_ms", "doc"],
        );
        let doc = to_doc("passkey", p)?;
        self.execute(
            &sql,
            args![
                p.id.as_str(),
                p.person.as_str(),
                ms(p.created_at),
                p.removed_at.map(ms),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_login(
        &mut self,
        pending_hash: &str,
    ) -> Result<Option<PendingLogin>, StorageError> {
        self.get_doc(
            "login",
            "SELECT doc FROM logins WHERE pending_hash = $1",
            args![pending_hash],
        )
        .await
    }

    async fn put_login(&mut self, l: &PendingLogin) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "logins",
            "pending_hash",
            &["pending_hash", "record_id", "code", "doc"],
        );
        let doc = to_doc("login", l)?;
        self.execute(
            &sql,
            args![
                l.pending_hash.as_str(),
                l.record_id.to_string(),
                l.code.as_str(),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_record(&mut self, id: &RecordId) -> Result<Option<Record>, StorageError> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM records WHERE id = $1");
        match self.fetch_optional(&sql, args![id.to_string()]).await? {
            Some(row) => record_from_row(&row).map(Some),
            None => Ok(None),
        }
    }

    async fn record_by_code(
        &mut self,
        code: &ConfirmationCode,
    ) -> Result<Option<Record>, StorageError> {
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM records WHERE code = $1 AND state = 'pending' \
             ORDER BY expires_at_ms DESC, id LIMIT 1"
        );
        match self.fetch_optional(&sql, args![code.as_str()]).await? {
            Some(row) => record_from_row(&row).map(Some),
            None => Ok(None),
        }
    }

    async fn pending_records(&mut self) -> Result<Vec<Record>, StorageError> {
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM records WHERE state = 'pending' \
             ORDER BY expires_at_ms, id"
        );
        let rows = self.fetch_all(&sql, args![]).await?;
        rows.iter().map(record_from_row).collect()
    }

    async fn put_record(&mut self, r: &Record) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "records",
            "id",
            &[
                "id",
                "text",
                "state",
                "decided",
                "code",
                "approver",
                "kind",
                "requested_at_ms",
                "expires_at_ms",
            ],
        );
        let decided = r
            .decided
            .as_ref()
            .map(|d| to_doc("record decision", d))
            .transpose()?;
        self.execute(
            &sql,
            args![
                r.id.to_string(),
                r.text.as_str(),
                r.state.as_str(),
                decided,
                r.code.as_ref().map(|c| c.as_str().to_owned()),
                r.body.approver.as_str(),
                r.body.kind.as_str(),
                ms(r.body.requested_at),
                ms(r.body.expires_at),
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_enrollment(
        &mut self,
        id: EnrollmentId,
    ) -> Result<Option<Enrollment>, StorageError> {
        if let Some(reads) = &self.reads {
            return decode_some("enrollment", reads.enrollment(id.to_string()).await?);
        }
        self.get_doc(
            "enrollment",
            "SELECT doc FROM enrollments WHERE id = $1",
            args![id.to_string()],
        )
        .await
    }

    async fn enrollments_by_credential(
        &mut self,
        id: CredentialId,
    ) -> Result<Vec<Enrollment>, StorageError> {
        self.get_docs(
            "enrollment",
            "SELECT doc FROM enrollments WHERE credential_id = $1 AND ended_at_ms IS NULL \
             ORDER BY created_at_ms, id",
            args![id.to_string()],
        )
        .await
    }

    async fn put_enrollment(&mut self, e: &Enrollment) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "enrollments",
            "id",
            &[
                "id",
                "credential_id",
                "kind",
                "created_at_ms",
                "lease_expires_at_ms",
                "ended_at_ms",
                "doc",
            ],
        );
        let doc = to_doc("enrollment", e)?;
        self.execute(
            &sql,
            args![
                e.id.to_string(),
                e.credential_id.to_string(),
                e.kind.as_str(),
                ms(e.created_at),
                ms(e.lease_expires_at),
                e.ended.as_ref().map(|x| ms(x.at)),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_request(&mut self, id: RequestId) -> Result<Option<Request>, StorageError> {
        self.get_doc(
            "request",
            "SELECT doc FROM requests WHERE id = $1",
            args![id.to_string()],
        )
        .await
    }

    async fn pending_requests(
        &mut self,
        enrollment: EnrollmentId,
    ) -> Result<Vec<Request>, StorageError> {
        self.get_docs(
            "request",
            "SELECT doc FROM requests WHERE enrollment_id = $1 AND state = $2 \
             ORDER BY created_at_ms, id",
            args![enrollment.to_string(), RequestState::Pending.as_str()],
        )
        .await
    }

    async fn put_request(&mut self, r: &Request) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "requests",
            "id",
            &["id", "enrollment_id", "state", "created_at_ms", "doc"],
        );
        let doc = to_doc("request", r)?;
        self.execute(
            &sql,
            args![
                r.id.to_string(),
                r.enrollment_id.to_string(),
                r.state.as_str(),
                ms(r.created_at),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn get_grant(&mut self, id: GrantId) -> Result<Option<Grant>, StorageError> {
        self.get_doc(
            "grant",
            "SELECT doc FROM grants WHERE id = $1",
            args![id.to_string()],
        )
        .await
    }

    async fn grants_by_enrollment(
        &mut self,
        enrollment: EnrollmentId,
    ) -> Result<Vec<Grant>, StorageError> {
        if let Some(reads) = &self.reads {
            let docs = reads.grants_of(enrollment.to_string()).await?;
            return docs.iter().map(|d| decode("grant", d)).collect();
        }
        self.get_docs(
            "grant",
            "SELECT doc FROM grants WHERE enrollment_id = $1 ORDER BY created_at_ms, id",
            args![enrollment.to_string()],
        )
        .await
    }

    async fn live_grants(&mut self) -> Result<Vec<Grant>, StorageError> {
        self.get_docs(
            "grant",
            "SELECT doc FROM grants WHERE ended_at_ms IS NULL ORDER BY created_at_ms, id",
            args![],
        )
        .await
    }

    async fn put_grant(&mut self, g: &Grant) -> Result<(), StorageError> {
        let sql = upsert_sql(
            "grants",
            "id",
            &[
                "id",
                "enrollment_id",
                "request_id",
                "created_at_ms",
                "expires_at_ms",
                "ended_at_ms",
                "doc",
            ],
        );
        let doc = to_doc("grant", g)?;
        self.execute(
            &sql,
            args![
                g.id.to_string(),
                g.enrollment_id.to_string(),
                g.request_id.to_string(),
                ms(g.created_at),
                g.expires_at.map(ms),
                g.end.map(|(_, at)| ms(at)),
                doc,
            ],
        )
        .await?;
        Ok(())
    }

    async fn due(&mut self, now: Time, limit: u32) -> Result<Due, StorageError> {
        let (now, limit) = (ms(now), i64::from(limit));
        let records = self
            .fetch_all(
                "SELECT id FROM records WHERE state = 'pending' AND expires_at_ms <= $1 \
                 ORDER BY expires_at_ms, id LIMIT $2",
                args![now, limit],
            )
            .await?;
        let enrollments = self
            .fetch_all(
                "SELECT id FROM enrollments WHERE ended_at_ms IS NULL AND lease_expires_at_ms <= $1 \
                 ORDER BY lease_expires_at_ms, id LIMIT $2",
                args![now, limit],
            )
            .await?;
        let grants = self
            .fetch_all(
                "SELECT id FROM grants WHERE ended_at_ms IS NULL AND expires_at_ms IS NOT NULL \
                 AND expires_at_ms <= $1 ORDER BY expires_at_ms, id LIMIT $2",
                args![now, limit],
            )
            .await?;
        Ok(Due {
            records: ids(&records, RecordId::parse)?,
            enrollments: ids(&enrollments, EnrollmentId::parse)?,
            grants: ids(&grants, GrantId::parse)?,
        })
    }

    async fn push_outbox(&mut self, item: &OutboxItem) -> Result<(), StorageError> {
        self.execute(
            "INSERT INTO outbox (id, payload, attempts, next_attempt_at_ms) \
             VALUES ($1, $2, $3, $4)",
            args![
                item.id.as_str(),
                item.payload.as_str(),
                i64::from(item.attempts),
                ms(item.next_attempt_at),
            ],
        )
        .await?;
        Ok(())
    }

    async fn take_outbox(
        &mut self,
        now: Time,
        limit: u32,
    ) -> Result<Vec<OutboxItem>, StorageError> {
        let rows = self
            .fetch_all_locked(
                "SELECT id, payload, attempts, next_attempt_at_ms FROM outbox \
                 WHERE next_attempt_at_ms <= $1 ORDER BY next_attempt_at_ms, id LIMIT $2",
                args![ms(now), i64::from(limit)],
                Lock::SkipLocked,
            )
            .await?;
        rows.iter().map(outbox_from_row).collect()
    }

    async fn delete_outbox(&mut self, id: &str) -> Result<(), StorageError> {
        self.execute("DELETE FROM outbox WHERE id = $1", args![id])
            .await?;
        Ok(())
    }

    async fn reschedule_outbox(
        &mut self,
        id: &str,
        attempts: u32,
        next_attempt_at: Time,
    ) -> Result<(), StorageError> {
        self.execute(
            "UPDATE outbox SET attempts = $2, next_attempt_at_ms = $3 WHERE id = $1",
            args![id, i64::from(attempts), ms(next_attempt_at)],
        )
        .await?;
        Ok(())
    }

    async fn audit_head(&mut self) -> Result<Option<(i64, String)>, StorageError> {
        // Appenders serialise on an advisory lock held to commit (PostgreSQL); SQLite's write
        // transactions are serial already. Taken last in a transaction (lock order: … → audit
        // head), so it is held only for the appends and the commit.
        if self.backend == Backend::Postgres && self.write {
            self.execute("SELECT pg_advisory_xact_lock($1)", args![PG_AUDIT_LOCK])
                .await?;
        }
        // SQLite's writer remembers the head its own appends left (nothing else writes there).
        if let Some(Inner::Writer(slot)) = self.inner.as_ref()
            && let Some(head) = slot.audit_head()
        {
            return Ok(Some(head));
        }
        let conn = self.conn().await?;
        let r = sqlx::query("SELECT position, hash FROM audit_log ORDER BY position DESC LIMIT 1")
            .fetch_optional(conn)
            .await;
        match self.checked(r)? {
            None => Ok(None),
            Some(row) => Ok(Some((
                row.try_get("position").map_err(db_err)?,
                hex::encode(row.try_get::<Vec<u8>, _>("hash").map_err(db_err)?),
            ))),
        }
    }

    async fn append_audit(&mut self, entries: &[AuditEntry]) -> Result<(), StorageError> {
        // SQLite: the writer inserts the entries of every transaction of its batch in one
        // statement just before the batch's COMMIT (an INSERT per transaction cost the
        // automatic request a fifth of its rate). PostgreSQL: now, in this transaction.
        if let Some(Inner::Writer(slot)) = self.inner.as_mut() {
            slot.append_audit(entries);
            return Ok(());
        }
        if matches!(self.inner, Some(Inner::Conn(_))) {
            return Err(StorageError::Other("write in a read transaction".into()));
        }
        let conn = self.conn().await?;
        let r = insert_audit(conn, entries).await;
        self.checked(r)
    }

    async fn audit_entries(
        &mut self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StorageError> {
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit_log WHERE position > $1 ORDER BY position LIMIT $2"
        );
        let conn = self.conn().await?;
        let r = bind_all(sqlx::query(&sql), args![after, i64::from(limit)])
            .fetch_all(conn)
            .await;
        self.checked(r)?.iter().map(audit_from_row).collect()
    }

    async fn audit_ends(&mut self, subject: &str) -> Result<Vec<AuditEntry>, StorageError> {
        // The condition is the partial index's, word for word (SQLite uses a partial index
        // only for a query whose WHERE contains its condition as written).
        let sql = format!(
            "SELECT {AUDIT_COLUMNS} FROM audit_log WHERE subject = $1 AND {AUDIT_ENDS} \
             ORDER BY position"
        );
        let conn = self.conn().await?;
        let r = bind_all(sqlx::query(&sql), args![subject])
            .fetch_all(conn)
            .await;
        self.checked(r)?.iter().map(audit_from_row).collect()
    }

    async fn audit_count(&mut self, upto: i64) -> Result<(i64, i64), StorageError> {
        let conn = self.conn().await?;
        let r = sqlx::query(
            "SELECT (SELECT COUNT(*) FROM audit_log WHERE position <= $1) AS n, \
             (SELECT COALESCE(MAX(position), 0) FROM audit_log) AS m",
        )
        .bind(upto)
        .fetch_one(conn)
        .await;
        let row = self.checked(r)?;
        Ok((
            row.try_get("n").map_err(db_err)?,
            row.try_get("m").map_err(db_err)?,
        ))
    }
}
