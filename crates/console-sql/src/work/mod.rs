//! The work storage on SQLite and PostgreSQL: projects, issues (with a label table the list's
//! filter joins), per-person pins and the event log, in transactions.
//!
//! - A write transaction on SQLite is `BEGIN IMMEDIATE` (writers queue at the start, never
//!   fail on upgrading a read); on PostgreSQL an issue read in a write transaction is
//!   `FOR UPDATE`, and the first event append takes a transaction-scoped advisory lock.
//! - Event ids are `MAX(id) + 1` taken under that lock (SQLite: under its one writer), so ids
//!   are in commit order with no gap: a stream that read up to `n` never later meets a newly
//!   committed event below `n`.

//!
//! One module per part: `migration.rs` the tables, `projects.rs` projects and repository
//! mappings, `issues.rs` the issue rows (read state, ranks, subscribers), `list.rs` the issue
//! lists' filters and keyset pages, `search.rs` the issues' full-text index, `events.rs` the
//! event log.

use async_trait::async_trait;
use countersign_common::sql::{Backend, begin_err, db_err};
use countersign_console_core::Time;
use countersign_console_core::ids::{ArtifactId, SessionId};
use countersign_console_core::notify::NoticeTx;
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::{
    Actor, AskTx, AttemptTx, Claim, Components, DeliveryTx, DocumentTx, Event, EventFacts, EventTx,
    Hit, Issue, IssueKey, IssueTx, MessageInboxTx, MessageTx, PresenceTx, ProjectKey, ProjectTx,
    SearchKind, Status, WorkTx,
};
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Arguments, Row, Transaction};

use crate::writer::{Slot, Writer};
use crate::{login, time};

mod events;
mod issues;
mod list;
mod migration;
mod projects;
mod search;

pub(crate) use migration::{
    MIGRATION_2, MIGRATION_4, MIGRATION_5_POSTGRES, MIGRATION_5_SQLITE, MIGRATION_6_POSTGRES,
    MIGRATION_6_SQLITE, MIGRATION_13_POSTGRES, MIGRATION_13_SQLITE, MIGRATION_14, MIGRATION_16,
};
pub(crate) use search::{
    MIGRATION_18_POSTGRES, MIGRATION_18_SQLITE, MIGRATION_19_POSTGRES, MIGRATION_19_SQLITE,
    fts_prefix, pg_prefix,
};

pub(crate) const ISSUE_COLUMNS: &str = "key, project, number, title, status, priority, labels, route, parent, \
     rank, assignee, components, claim, repo, sequence, created_at, updated_at, closed_at";
const EVENT_COLUMNS: &str =
    "id, kind, at, actor, project, issue, artifact, session, data, sequence";

/// One transaction.
pub struct SqlTx {
    /// The connection statements run on (`&mut *self.tx`): a transaction of its own, or a turn
    /// at SQLite's group-committing writer.
    pub(crate) tx: Conn,
    pub(crate) backend: Backend,
    pub(crate) write: bool,
    pub(crate) events_locked: bool,
    /// The last event this transaction appended: PostgreSQL notifies it at commit.
    last_event: Option<i64>,
    /// This transaction wrote synced pull requests or runs: their generation moves at commit.
    pub(crate) delivery_written: bool,
}

/// The PostgreSQL channel event ids are notified on (ids only, never content).
pub const EVENTS_CHANNEL: &str = "countersign_console_events";

impl std::fmt::Debug for SqlTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlTx").field("write", &self.write).finish()
    }
}

impl SqlTx {
    /// ` FOR UPDATE` on a PostgreSQL read inside a write transaction (the row stays locked to
    /// commit); nothing on SQLite, whose write transactions are serial already.
    pub(crate) fn lock_clause(&self) -> &'static str {
        if self.write && self.backend == Backend::Postgres {
            " FOR UPDATE"
        } else {
            ""
        }
    }

    pub(crate) async fn begin(
        pool: &AnyPool,
        backend: Backend,
        writer: Option<&Writer>,
        write: bool,
    ) -> Result<SqlTx, StorageError> {
        let tx = match (writer, write) {
            (Some(w), true) => Conn::Writer(w.begin().await?),
            _ => Conn::Tx(pool.begin().await.map_err(begin_err)?),
        };
        Ok(Self::on(tx, backend, write))
    }

    /// A read with no transaction ([`Conn::Single`]).
    pub(crate) async fn loose(pool: &AnyPool, backend: Backend) -> Result<SqlTx, StorageError> {
        let conn = pool.acquire().await.map_err(begin_err)?;
        Ok(Self::on(Conn::Single(conn), backend, false))
    }

    /// Moves the delivery area's synced data's generation (`console_delivery_state`, at the
    /// commit of a transaction that wrote its pull requests or runs).
    async fn move_delivery_generation(&mut self) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_delivery_state (id, generation) VALUES (1, 1) \
             ON CONFLICT (id) DO UPDATE SET generation = console_delivery_state.generation + 1",
        )
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    fn on(tx: Conn, backend: Backend, write: bool) -> SqlTx {
        SqlTx {
            tx,
            backend,
            write,
            events_locked: false,
            last_event: None,
            delivery_written: false,
        }
    }
}

pub(crate) fn corrupt(what: &str) -> StorageError {
    StorageError::Corrupt(format!("a stored {what} does not parse"))
}

/// A row's id column read back as its kind (`AskId::parse`, …). A stored id that does not
/// parse (every one the console wrote does: it writes them from their types) is a corrupt
/// row, named by the column and the value.
pub(crate) fn id_in<T>(
    r: &AnyRow,
    column: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, StorageError> {
    let s: String = r.try_get(column).map_err(db_err)?;
    id_of(column, &s, parse)
}

/// [`id_in`] of a column that may be null.
pub(crate) fn opt_id_in<T>(
    r: &AnyRow,
    column: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<Option<T>, StorageError> {
    let s: Option<String> = r.try_get(column).map_err(db_err)?;
    s.map(|s| id_of(column, &s, parse)).transpose()
}

/// [`id_in`] of a value already read from column `column`.
pub(crate) fn id_of<T>(
    column: &str,
    value: &str,
    parse: fn(&str) -> Option<T>,
) -> Result<T, StorageError> {
    parse(value).ok_or_else(|| {
        StorageError::Corrupt(format!("a stored id does not parse: {column} {value:?}"))
    })
}

pub(crate) fn json_of<T: serde::de::DeserializeOwned>(
    s: &str,
    what: &str,
) -> Result<T, StorageError> {
    serde_json::from_str(s).map_err(|_| corrupt(what))
}

pub(crate) fn text<T: serde::Serialize>(v: &T) -> String {
    // Serializing these records to JSON cannot fail.
    serde_json::to_string(v).unwrap_or_default()
}

pub(crate) fn issue_of(r: &AnyRow) -> Result<Issue, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    let go = |c: &str| -> Result<Option<String>, StorageError> { r.try_get(c).map_err(db_err) };
    let key = IssueKey::parse(&g("key")?).ok_or_else(|| corrupt("issue key"))?;
    let priority: Option<i64> = r.try_get("priority").map_err(db_err)?;
    Ok(Issue {
        project: key.project(),
        key,
        title: g("title")?,
        status: Status::parse(&g("status")?).ok_or_else(|| corrupt("status"))?,
        priority: priority
            .map(|p| u8::try_from(p).map_err(|_| corrupt("priority")))
            .transpose()?,
        labels: json_of(&g("labels")?, "label list")?,
        route: go("route")?,
        parent: go("parent")?
            .map(|p| IssueKey::parse(&p).ok_or_else(|| corrupt("parent key")))
            .transpose()?,
        rank: g("rank")?,
        assignee: go("assignee")?.map(|a| login(&a)).transpose()?,
        components: json_of::<Components>(&g("components")?, "components")?,
        claim: go("claim")?
            .map(|c| json_of::<StoredClaim>(&c, "claim"))
            .transpose()?
            .map(|c| -> Result<Claim, StorageError> {
                Ok(Claim {
                    holder: c.holder,
                    at: time(c.at)?,
                })
            })
            .transpose()?,
        repo: go("repo")?,
        sequence: r.try_get("sequence").map_err(db_err)?,
        created_at: time(r.try_get("created_at").map_err(db_err)?)?,
        updated_at: time(r.try_get("updated_at").map_err(db_err)?)?,
        closed_at: r
            .try_get::<Option<i64>, _>("closed_at")
            .map_err(db_err)?
            .map(time)
            .transpose()?,
    })
}

/// A claim as the issue row keeps it.
#[derive(serde::Serialize, serde::Deserialize)]
struct StoredClaim {
    holder: Actor,
    at: i64,
}

/// Where a row's event or attempt is: its `project`, `issue` and `artifact` columns.
pub(crate) type Place = (Option<ProjectKey>, Option<IssueKey>, Option<ArtifactId>);

/// [`Place`] read from a row.
pub(crate) fn place_in(r: &AnyRow) -> Result<Place, StorageError> {
    let go = |c: &str| -> Result<Option<String>, StorageError> { r.try_get(c).map_err(db_err) };
    Ok((
        go("project")?
            .map(|p| ProjectKey::parse(&p).ok_or_else(|| corrupt("project key")))
            .transpose()?,
        go("issue")?
            .map(|p| IssueKey::parse(&p).ok_or_else(|| corrupt("issue key")))
            .transpose()?,
        opt_id_in(r, "artifact", ArtifactId::parse)?,
    ))
}

pub(crate) fn event_of(r: &AnyRow) -> Result<Event, StorageError> {
    let (project, issue, artifact) = place_in(r)?;
    Ok(Event {
        id: r.try_get("id").map_err(db_err)?,
        kind: r.try_get("kind").map_err(db_err)?,
        facts: EventFacts {
            at: time(r.try_get("at").map_err(db_err)?)?,
            actor: json_of(&r.try_get::<String, _>("actor").map_err(db_err)?, "actor")?,
            project,
            issue,
            artifact,
            session: opt_id_in(r, "session", SessionId::parse)?,
            data: json_of(&r.try_get::<String, _>("data").map_err(db_err)?, "event")?,
        },
        sequence: r.try_get("sequence").map_err(db_err)?,
    })
}
/// Subscribed sessions from rows of `session` and `since` (the time of its first event).
pub(crate) fn subscribers_of(rows: &[AnyRow]) -> Result<Vec<(SessionId, Time)>, StorageError> {
    rows.iter()
        .map(|r| {
            Ok((
                id_in(r, "session", SessionId::parse)?,
                time(r.try_get("since").map_err(db_err)?)?,
            ))
        })
        .collect()
}

/// A value bound to a query built at run time.
#[derive(Debug, Clone)]
pub(crate) enum Val {
    I(i64),
    S(String),
}

impl From<i64> for Val {
    fn from(v: i64) -> Self {
        Val::I(v)
    }
}

impl From<String> for Val {
    fn from(v: String) -> Self {
        Val::S(v)
    }
}

/// The values of a query built at run time, each pushed where its `$n` goes.
#[derive(Debug, Default)]
pub(crate) struct Args(Vec<Val>);

impl Args {
    pub(crate) fn push(&mut self, v: impl Into<Val>) -> String {
        self.0.push(v.into());
        format!("${}", self.0.len())
    }

    /// A list bound as one JSON array: the subquery `(SELECT …)` of its text values, for
    /// `x IN <it>`. However long the list, the query binds one parameter (SQLite caps them).
    pub(crate) fn list<S: AsRef<str>>(&mut self, backend: Backend, vals: &[S]) -> String {
        let json = serde_json::Value::from(
            vals.iter()
                .map(|v| serde_json::Value::from(v.as_ref()))
                .collect::<Vec<_>>(),
        )
        .to_string();
        let p = self.push(json);
        match backend {
            Backend::Sqlite => format!("(SELECT value FROM json_each({p}))"),
            Backend::Postgres => format!("(SELECT jsonb_array_elements_text(CAST({p} AS jsonb)))"),
        }
    }

    /// [`Args::list`] of integers.
    pub(crate) fn int_list(&mut self, backend: Backend, vals: &[i64]) -> String {
        let p = self.push(serde_json::Value::from(vals.to_vec()).to_string());
        match backend {
            Backend::Sqlite => format!("(SELECT value FROM json_each({p}))"),
            Backend::Postgres => {
                format!("(SELECT CAST(jsonb_array_elements_text(CAST({p} AS jsonb)) AS BIGINT))")
            }
        }
    }

    pub(crate) fn build(&self) -> AnyArguments<'static> {
        let mut out = AnyArguments::default();
        for v in &self.0 {
            // Adding an integer or a string to `AnyArguments` does not fail.
            let _ = match v {
                Val::I(i) => out.add(*i),
                Val::S(s) => out.add(s.clone()),
            };
        }
        out
    }
}

/// One area's store (`tx.issues()`, `tx.asks()`, …): a type of its own over the
/// transaction's one connection, which implements that area's trait and nothing else. It
/// borrows the transaction ([`SqlTx`]: the connection and what the commit does), whose
/// statement helpers (`lock_clause`, the row readers) every store shares.
macro_rules! stores {
    ($($(#[$doc:meta])* $name:ident,)*) => {$(
        $(#[$doc])*
        pub(crate) struct $name<'t>(pub(crate) &'t mut SqlTx);

        impl std::ops::Deref for $name<'_> {
            type Target = SqlTx;

            fn deref(&self) -> &SqlTx {
                self.0
            }
        }

        impl std::ops::DerefMut for $name<'_> {
            fn deref_mut(&mut self) -> &mut SqlTx {
                self.0
            }
        }
    )*};
}

stores! {
    /// Projects and repository mappings (`projects.rs`).
    ProjectStore,
    /// Issues: rows, lists, read state, ranks, subscribers, their search (`issues.rs`,
    /// `list.rs`, `search.rs`).
    IssueStore,
    /// The event log (`events.rs`).
    EventStore,
    /// Asks, comments, reviews and the inbox (the crate's `asks` module).
    AskStore,
    /// Documents, files and their versions (the crate's `documents` module).
    DocumentStore,
    /// Messages, broadcasts, the webhook ids, their search (the crate's `messages` module).
    MessageStore,
    /// Delivery attempts of messages and mentions (the crate's `messages/attempts.rs`).
    AttemptStore,
    /// Live sessions, shared by every replica (the crate's `messages/live.rs`).
    PresenceStore,
    /// The inbox's threads, read marks and per-agent state (the crate's `messages/reads.rs`).
    MessageInboxStore,
    /// The delivery area's synced rows, settings and groups (the crate's `delivery.rs`).
    DeliveryStore,
    /// Notices and preferences (the crate's `notify.rs`).
    NoticeStore,
}

#[async_trait]
impl WorkTx for SqlTx {
    fn projects(&mut self) -> Box<dyn ProjectTx + '_> {
        Box::new(ProjectStore(self))
    }

    fn issues(&mut self) -> Box<dyn IssueTx + '_> {
        Box::new(IssueStore(self))
    }

    fn events(&mut self) -> Box<dyn EventTx + '_> {
        Box::new(EventStore(self))
    }

    fn asks(&mut self) -> Box<dyn AskTx + '_> {
        Box::new(AskStore(self))
    }

    fn documents(&mut self) -> Box<dyn DocumentTx + '_> {
        Box::new(DocumentStore(self))
    }

    fn messages(&mut self) -> Box<dyn MessageTx + '_> {
        Box::new(MessageStore(self))
    }

    fn attempts(&mut self) -> Box<dyn AttemptTx + '_> {
        Box::new(AttemptStore(self))
    }

    fn presence(&mut self) -> Box<dyn PresenceTx + '_> {
        Box::new(PresenceStore(self))
    }

    fn message_inbox(&mut self) -> Box<dyn MessageInboxTx + '_> {
        Box::new(MessageInboxStore(self))
    }

    fn delivery(&mut self) -> Box<dyn DeliveryTx + '_> {
        Box::new(DeliveryStore(self))
    }

    fn notices(&mut self) -> Box<dyn NoticeTx + '_> {
        Box::new(NoticeStore(self))
    }

    async fn commit(mut self: Box<Self>) -> Result<Option<i64>, StorageError> {
        if self.delivery_written {
            self.move_delivery_generation().await?;
        }
        // Delivered to listeners when (and only if) the transaction commits.
        if let (Backend::Postgres, Some(id)) = (self.backend, self.last_event) {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(EVENTS_CHANNEL)
                .bind(id.to_string())
                .execute(&mut *self.tx)
                .await
                .map_err(db_err)?;
        }
        let last_event = self.last_event;
        match self.tx {
            Conn::Tx(t) => t.commit().await.map_err(db_err)?,
            // Nothing to commit: each statement ran on its own (`read_loose` is for reads).
            Conn::Single(_) => {}
            Conn::Writer(slot) => slot.commit().await?,
        }
        Ok(last_event)
    }

    async fn search_kinds(
        &mut self,
        words: &[String],
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<Vec<(SearchKind, Vec<Hit>, i64)>, StorageError> {
        search::kinds_hits(self, words, project, limit).await
    }
}

/// Where a transaction's statements run.
pub(crate) enum Conn {
    /// A transaction of its own (PostgreSQL; reads).
    Tx(Transaction<'static, Any>),
    /// A connection with no transaction: each statement sees the latest commit (a read of
    /// one statement, with no `BEGIN` or `ROLLBACK` round trip).
    Single(PoolConnection<Any>),
    /// A turn at SQLite's writer, in its group-committed transaction.
    Writer(Slot),
}

impl std::ops::Deref for Conn {
    type Target = AnyConnection;

    fn deref(&self) -> &AnyConnection {
        match self {
            Conn::Tx(t) => t,
            Conn::Single(c) => c,
            Conn::Writer(s) => s,
        }
    }
}

impl std::ops::DerefMut for Conn {
    fn deref_mut(&mut self) -> &mut AnyConnection {
        match self {
            Conn::Tx(t) => t,
            Conn::Single(c) => c,
            Conn::Writer(s) => s,
        }
    }
}
