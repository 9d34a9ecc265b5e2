//! The work storage on SQLite and PostgreSQL: projects, issues (with a label table the list's
//! filter joins), per-person pins and the event log, in transactions.
//!
//! - A write transaction on SQLite is `BEGIN IMMEDIATE` (writers queue at the start, never
//!   fail on upgrading a read); on PostgreSQL an issue read in a write transaction is
//!   `FOR UPDATE`, and the first event append takes a transaction-scoped advisory lock.
//! - Event ids are `MAX(id) + 1` taken under that lock (SQLite: under its one writer), so ids
//!   are in commit order with no gap: a stream that read up to `n` never later meets a newly
//!   committed event below `n`.

use async_trait::async_trait;
use countersign_common::sql::{Backend, begin_err, db_err, is_unique_violation};
use countersign_console_core::Time;
use countersign_console_core::ids::Login;
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::search::snippet;
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{
    Actor, Candidate, Claim, Components, Event, EventPage, EventTx, Hit, Issue, IssueAssignee,
    IssueFilter, IssueKey, IssueListQuery, IssueSort, IssueTx, NewEvent, Project, ProjectKey,
    ProjectTx, ReadState, RepoMapping, RepoName, RouteFilter, Status, WorkTx,
};
use sqlx::any::{AnyArguments, AnyRow};
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyConnection, AnyPool, Arguments, Row, Transaction};

use crate::writer::{Slot, Writer};

use crate::{login, time};

/// Version 2: the work core.
pub(crate) const MIGRATION_2: &[&str] = &[
    "CREATE TABLE console_projects (
        key TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        next_issue BIGINT NOT NULL
    )",
    "CREATE TABLE console_issues (
        key TEXT PRIMARY KEY,
        project TEXT NOT NULL REFERENCES console_projects (key),
        number BIGINT NOT NULL,
        title TEXT NOT NULL,
        status TEXT NOT NULL,
        is_open BIGINT NOT NULL,
        priority BIGINT,
        labels TEXT NOT NULL,
        route TEXT,
        parent TEXT,
        rank TEXT NOT NULL,
        assignee TEXT,
        components TEXT NOT NULL,
        claim TEXT,
        repo TEXT,
        sequence BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        closed_at BIGINT
    )",
    "CREATE UNIQUE INDEX console_issues_number ON console_issues (project, number)",
    "CREATE INDEX console_issues_rank ON console_issues (project, rank)",
    "CREATE INDEX console_issues_parent ON console_issues (parent)",
    "CREATE INDEX console_issues_updated ON console_issues (updated_at)",
    "CREATE INDEX console_issues_status ON console_issues (status)",
    "CREATE TABLE console_issue_labels (
        label TEXT NOT NULL,
        issue TEXT NOT NULL,
        PRIMARY KEY (label, issue)
    )",
    "CREATE TABLE console_pins (
        login TEXT NOT NULL,
        issue TEXT NOT NULL,
        PRIMARY KEY (login, issue)
    )",
    "CREATE TABLE console_events (
        id BIGINT PRIMARY KEY,
        kind TEXT NOT NULL,
        at BIGINT NOT NULL,
        actor TEXT NOT NULL,
        project TEXT,
        issue TEXT,
        artifact TEXT,
        session TEXT,
        data TEXT NOT NULL,
        sequence BIGINT
    )",
    "CREATE INDEX console_events_issue ON console_events (issue, sequence)",
];

/// Version 4: per-person read state (the pins it replaces, with the sequence read), and
/// sessions unsubscribed from an issue (up to which event).
pub(crate) const MIGRATION_4: &[&str] = &[
    "CREATE TABLE console_read_state (
        login TEXT NOT NULL,
        issue TEXT NOT NULL,
        read_sequence BIGINT NOT NULL,
        pinned BIGINT NOT NULL,
        PRIMARY KEY (login, issue)
    )",
    "INSERT INTO console_read_state (login, issue, read_sequence, pinned)
     SELECT login, issue, 0, 1 FROM console_pins",
    "DROP TABLE console_pins",
    "CREATE TABLE console_unsubscribed (
        issue TEXT NOT NULL,
        session TEXT NOT NULL,
        through_event BIGINT NOT NULL,
        PRIMARY KEY (issue, session)
    )",
];

/// Version 5: the issues' full-text index. SQLite: an FTS5 table keyed by the issue row's
/// rowid, kept by the issue writes; PostgreSQL: a generated `tsvector` with a GIN index.
pub(crate) const MIGRATION_5_SQLITE: &[&str] = &[
    "CREATE VIRTUAL TABLE console_issues_fts USING fts5(body, tokenize = 'unicode61')",
    "INSERT INTO console_issues_fts (rowid, body) SELECT rowid, title || ' ' || labels FROM console_issues",
];
pub(crate) const MIGRATION_5_POSTGRES: &[&str] = &[
    "ALTER TABLE console_issues ADD COLUMN search tsvector
        GENERATED ALWAYS AS (to_tsvector('simple', title || ' ' || labels)) STORED",
    "CREATE INDEX console_issues_search ON console_issues USING GIN (search)",
];

/// Version 6: repositories mapped to projects, and the decisions people made through the
/// console (the history page; kept here so a restart or another replica sees them). On
/// SQLite, triggers keep an issue's full-text row and label rows with the issue's own write
/// (one statement instead of three or more, each a round trip to SQLite's worker thread while
/// the one write lock is held); PostgreSQL's full-text column is generated already.
pub(crate) const MIGRATION_6_SQLITE: &[&str] = &[
    // An issue's labels, each row carrying what a list filters and orders by (project,
    // status, rank, number), so a list by label within a project and status is one index range
    // (counted without reading an issue), kept with the issue's own writes.
    "CREATE TABLE console_issue_labels_v6 (
        label TEXT NOT NULL,
        issue TEXT NOT NULL,
        project TEXT NOT NULL,
        status TEXT NOT NULL,
        rank TEXT NOT NULL,
        number BIGINT NOT NULL,
        PRIMARY KEY (label, issue)
    )",
    "INSERT INTO console_issue_labels_v6 (label, issue, project, status, rank, number)
     SELECT l.label, l.issue, i.project, i.status, i.rank, i.number
     FROM console_issue_labels l JOIN console_issues i ON i.key = l.issue",
    "DROP TABLE console_issue_labels",
    "ALTER TABLE console_issue_labels_v6 RENAME TO console_issue_labels",
    "CREATE INDEX console_issue_labels_list ON console_issue_labels (label, project, status, rank, number)",
    "CREATE INDEX console_issue_labels_issue ON console_issue_labels (issue)",
    // The full-text table gains the project, so a search within a project is answered by the
    // index alone (no join to the issues for every match).
    "DROP TABLE console_issues_fts",
    "CREATE VIRTUAL TABLE console_issues_fts USING fts5(body, project, tokenize = 'unicode61')",
    "INSERT INTO console_issues_fts (rowid, body, project) \
     SELECT rowid, title || ' ' || labels, project FROM console_issues",
    "CREATE TABLE console_repo_projects (
        repo TEXT PRIMARY KEY,
        project TEXT NOT NULL REFERENCES console_projects (key),
        is_default BIGINT NOT NULL
    )",
    "CREATE INDEX console_repo_projects_project ON console_repo_projects (project)",
    // One issue per imported ref (NULLs, native issues, are distinct).
    "CREATE UNIQUE INDEX console_issues_repo ON console_issues (repo)",
    "CREATE TABLE console_decisions (
        login TEXT NOT NULL,
        record_id TEXT NOT NULL,
        event TEXT NOT NULL,
        at BIGINT NOT NULL
    )",
    "CREATE INDEX console_decisions_login ON console_decisions (login, at)",
    "CREATE INDEX console_decisions_record ON console_decisions (record_id, at)",
    "CREATE TRIGGER console_issues_insert AFTER INSERT ON console_issues BEGIN
        INSERT INTO console_issues_fts (rowid, body, project)
            VALUES (new.rowid, new.title || ' ' || new.labels, new.project);
        INSERT INTO console_issue_labels (label, issue, project, status, rank, number)
            SELECT value, new.key, new.project, new.status, new.rank, new.number
            FROM json_each(new.labels);
    END",
    "CREATE TRIGGER console_issues_search AFTER UPDATE OF title, labels ON console_issues
        WHEN old.title IS NOT new.title OR old.labels IS NOT new.labels BEGIN
        DELETE FROM console_issues_fts WHERE rowid = old.rowid;
        INSERT INTO console_issues_fts (rowid, body, project)
            VALUES (new.rowid, new.title || ' ' || new.labels, new.project);
    END",
    "CREATE TRIGGER console_issues_labels AFTER UPDATE OF labels ON console_issues
        WHEN old.labels IS NOT new.labels BEGIN
        DELETE FROM console_issue_labels WHERE issue = old.key;
        INSERT INTO console_issue_labels (label, issue, project, status, rank, number)
            SELECT value, new.key, new.project, new.status, new.rank, new.number
            FROM json_each(new.labels);
    END",
    "CREATE TRIGGER console_issues_label_order AFTER UPDATE OF status, rank ON console_issues
        WHEN (old.status IS NOT new.status OR old.rank IS NOT new.rank)
         AND old.labels IS new.labels BEGIN
        UPDATE console_issue_labels SET status = new.status, rank = new.rank WHERE issue = new.key;
    END",
];
/// SQLite's issue index keyed by the issue's rowid negated, so that its own (ascending) order
/// is newest first: `advice.suggestions` reads the newest matches, and FTS5 walks a posting
/// list backwards only by first reading each page of it whole. PostgreSQL's index is a GIN
/// over a generated column, unchanged.
pub(crate) const MIGRATION_13_SQLITE: &[&str] = &[
    "DROP TRIGGER console_issues_insert",
    "DROP TRIGGER console_issues_search",
    "DROP TABLE console_issues_fts",
    "CREATE VIRTUAL TABLE console_issues_fts USING fts5(body, project, tokenize = 'unicode61')",
    "INSERT INTO console_issues_fts (rowid, body, project) \
     SELECT -rowid, title || ' ' || labels, project FROM console_issues",
    "CREATE TRIGGER console_issues_insert AFTER INSERT ON console_issues BEGIN
        INSERT INTO console_issues_fts (rowid, body, project)
            VALUES (-new.rowid, new.title || ' ' || new.labels, new.project);
        INSERT INTO console_issue_labels (label, issue, project, status, rank, number)
            SELECT value, new.key, new.project, new.status, new.rank, new.number
            FROM json_each(new.labels);
    END",
    "CREATE TRIGGER console_issues_search AFTER UPDATE OF title, labels ON console_issues
        WHEN old.title IS NOT new.title OR old.labels IS NOT new.labels BEGIN
        DELETE FROM console_issues_fts WHERE rowid = -old.rowid;
        INSERT INTO console_issues_fts (rowid, body, project)
            VALUES (-new.rowid, new.title || ' ' || new.labels, new.project);
    END",
];
/// PostgreSQL's index is unchanged: a statement that changes nothing (a migration has one at
/// least).
pub(crate) const MIGRATION_13_POSTGRES: &[&str] = &["SELECT 1"];
/// The console's issue lists (issue 27): each order within a project, and a person's issues,
/// one index range each (a page of 50 reads 51 rows, not the project's).
pub(crate) const MIGRATION_14: &[&str] = &[
    "CREATE INDEX console_issues_project_updated ON console_issues (project, updated_at)",
    "CREATE INDEX console_issues_project_created ON console_issues (project, created_at)",
    "CREATE INDEX console_issues_project_priority ON console_issues \
     (project, (COALESCE(priority, 4)), number)",
    "CREATE INDEX console_issues_assignee ON console_issues (assignee, updated_at)",
];
/// A project's issues in one status (issue 27's `?status=` lists and the board): the count and
/// a page by rank are one index range each. With the status index alone, counting a status of
/// 90,000 issues read each row for its project (p99 107 ms at 100,000 issues).
pub(crate) const MIGRATION_16: &[&str] = &[
    "CREATE INDEX console_issues_project_status ON console_issues (project, status, rank, number)",
];
pub(crate) const MIGRATION_6_POSTGRES: &[&str] = &[
    // An issue's labels, each row carrying what a list filters and orders by (project,
    // status, rank, number), so a list by label within a project and status is one index range
    // (counted without reading an issue), kept with the issue's own writes.
    "CREATE TABLE console_issue_labels_v6 (
        label TEXT NOT NULL,
        issue TEXT NOT NULL,
        project TEXT NOT NULL,
        status TEXT NOT NULL,
        rank TEXT NOT NULL,
        number BIGINT NOT NULL,
        PRIMARY KEY (label, issue)
    )",
    "INSERT INTO console_issue_labels_v6 (label, issue, project, status, rank, number)
     SELECT l.label, l.issue, i.project, i.status, i.rank, i.number
     FROM console_issue_labels l JOIN console_issues i ON i.key = l.issue",
    "DROP TABLE console_issue_labels",
    "ALTER TABLE console_issue_labels_v6 RENAME TO console_issue_labels",
    "CREATE INDEX console_issue_labels_list ON console_issue_labels (label, project, status, rank, number)",
    "CREATE INDEX console_issue_labels_issue ON console_issue_labels (issue)",
    "CREATE TABLE console_repo_projects (
        repo TEXT PRIMARY KEY,
        project TEXT NOT NULL REFERENCES console_projects (key),
        is_default BIGINT NOT NULL
    )",
    "CREATE INDEX console_repo_projects_project ON console_repo_projects (project)",
    // One issue per imported ref (NULLs, native issues, are distinct).
    "CREATE UNIQUE INDEX console_issues_repo ON console_issues (repo)",
    "CREATE TABLE console_decisions (
        login TEXT NOT NULL,
        record_id TEXT NOT NULL,
        event TEXT NOT NULL,
        at BIGINT NOT NULL
    )",
    "CREATE INDEX console_decisions_login ON console_decisions (login, at)",
    "CREATE INDEX console_decisions_record ON console_decisions (record_id, at)",
];

/// A search word as an FTS5 prefix query: `"safar"*` finds "Safari" (issue 27). Search words
/// are runs of letters and digits ([`countersign_console_core::work::search::words`]);
/// quoted all the same.
pub(crate) fn fts_prefix(w: &str) -> String {
    format!("\"{}\"*", w.replace('"', ""))
}

/// A search word as a PostgreSQL `tsquery` prefix term: `safar:*`. Search words are runs of
/// letters and digits; anything else is dropped all the same.
pub(crate) fn pg_prefix(w: &str) -> String {
    let w: String = w.chars().filter(|c| c.is_alphanumeric()).collect();
    format!("{w}:*")
}

/// The FTS5 query of the search route's `words` in the issue index's `body` column: every
/// word, each a prefix.
fn fts_prefix_words(words: &[String]) -> String {
    words
        .iter()
        .map(|w| format!("body : {}", fts_prefix(w)))
        .collect::<Vec<_>>()
        .join(" AND ")
}

/// An FTS5 query of `words` in the issue index's `body` column, each quoted, joined by `op`.
fn fts_words(words: &[String], op: &str) -> String {
    words
        .iter()
        .map(|w| format!("body : \"{}\"", w.replace('"', "")))
        .collect::<Vec<_>>()
        .join(op)
}

/// The advisory lock PostgreSQL event appends take (distinct from the migration lock).
const PG_EVENTS_LOCK: i64 = 7_243_102;

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

fn project_of(r: &AnyRow) -> Result<Project, StorageError> {
    let key: String = r.try_get("key").map_err(db_err)?;
    Ok(Project {
        key: ProjectKey::parse(&key).ok_or_else(|| corrupt("project key"))?,
        name: r.try_get("name").map_err(db_err)?,
        created_at: time(r.try_get("created_at").map_err(db_err)?)?,
    })
}

fn mapping_of(r: &AnyRow) -> Result<RepoMapping, StorageError> {
    let repo: String = r.try_get("repo").map_err(db_err)?;
    let project: String = r.try_get("project").map_err(db_err)?;
    let default: i64 = r.try_get("is_default").map_err(db_err)?;
    Ok(RepoMapping {
        repo: RepoName::parse(&repo).ok_or_else(|| corrupt("repository"))?,
        project: ProjectKey::parse(&project).ok_or_else(|| corrupt("project key"))?,
        default: default != 0,
    })
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

pub(crate) fn event_of(r: &AnyRow) -> Result<Event, StorageError> {
    let go = |c: &str| -> Result<Option<String>, StorageError> { r.try_get(c).map_err(db_err) };
    Ok(Event {
        id: r.try_get("id").map_err(db_err)?,
        kind: r.try_get("kind").map_err(db_err)?,
        at: time(r.try_get("at").map_err(db_err)?)?,
        actor: json_of(&r.try_get::<String, _>("actor").map_err(db_err)?, "actor")?,
        project: go("project")?
            .map(|p| ProjectKey::parse(&p).ok_or_else(|| corrupt("project key")))
            .transpose()?,
        issue: go("issue")?
            .map(|p| IssueKey::parse(&p).ok_or_else(|| corrupt("issue key")))
            .transpose()?,
        artifact: go("artifact")?,
        session: go("session")?,
        data: json_of(&r.try_get::<String, _>("data").map_err(db_err)?, "event")?,
        sequence: r.try_get("sequence").map_err(db_err)?,
    })
}

/// The `WHERE` of the label rows a filter selects: the labels given (`labels`, their
/// placeholders), narrowed by the project and the statuses (`status` and `open` together) the
/// rows carry themselves.
fn label_rows_where(a: &mut Args, f: &IssueFilter, labels: &[String]) -> String {
    let mut w = format!("label IN ({})", labels.join(", "));
    if let Some(p) = &f.project {
        w.push_str(&format!(" AND project = {}", a.push(p.as_str().to_owned())));
    }
    let statuses: Vec<String> = Status::ALL
        .iter()
        .filter(|s| f.status.is_empty() || f.status.contains(s))
        .filter(|s| f.open.is_none_or(|o| s.is_open() == o))
        .map(|s| a.push(s.as_str().to_owned()))
        .collect();
    if statuses.is_empty() {
        w.push_str(" AND 1 = 0");
    } else if statuses.len() < Status::ALL.len() {
        w.push_str(&format!(" AND status IN ({})", statuses.join(", ")));
    }
    w
}

/// The `WHERE` conditions of an issue list query's filters (`with_status`: its status
/// filter too; a board's counts leave it out).
fn list_conds(
    a: &mut Args,
    backend: Backend,
    q: &IssueListQuery,
    with_status: bool,
) -> Vec<String> {
    let mut conds: Vec<String> = Vec::new();
    if let Some(p) = &q.project {
        conds.push(format!("project = {}", a.push(p.as_str().to_owned())));
    }
    if with_status && !q.status.is_empty() {
        let list: Vec<&str> = q.status.iter().map(|s| s.as_str()).collect();
        conds.push(format!("status IN {}", a.list(backend, &list)));
    }
    match &q.assignee {
        None => {}
        Some(IssueAssignee::Person(l)) => {
            conds.push(format!("assignee = {}", a.push(l.as_str().to_owned())))
        }
        Some(IssueAssignee::Nobody) => conds.push("assignee IS NULL".into()),
    }
    if !q.priority.is_empty() {
        let vals: Vec<i64> = q.priority.iter().flatten().map(|p| i64::from(*p)).collect();
        let mut alts: Vec<String> = Vec::new();
        if !vals.is_empty() {
            alts.push(format!("priority IN {}", a.int_list(backend, &vals)));
        }
        if q.priority.iter().any(Option::is_none) {
            alts.push("priority IS NULL".into());
        }
        conds.push(format!("({})", alts.join(" OR ")));
    }
    if !q.labels.is_empty() {
        let list = a.list(backend, &q.labels);
        conds.push(format!(
            "key IN (SELECT issue FROM console_issue_labels WHERE label IN {list})"
        ));
    }
    if let Some(open) = q.open {
        conds.push(format!("is_open = {}", a.push(i64::from(open))));
    }
    conds
}

/// An issue list's order: the sort expression and its direction (the project and number
/// follow it in the same direction).
fn list_order(sort: IssueSort) -> (&'static str, &'static str) {
    match sort {
        IssueSort::Rank => ("rank", "ASC"),
        IssueSort::Updated => ("updated_at", "DESC"),
        IssueSort::Created => ("created_at", "DESC"),
        IssueSort::Priority => ("COALESCE(priority, 4)", "ASC"),
    }
}

/// What an issue update does to PostgreSQL's label rows.
enum LabelRows {
    Keep,
    Rewrite,
    Reorder,
}

fn r_text(r: &AnyRow, column: &str) -> Result<String, StorageError> {
    r.try_get(column).map_err(db_err)
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

impl SqlTx {
    /// Keeps SQLite's FTS5 index of the issue (PostgreSQL's is a generated column).
    /// The issue's label rows, on PostgreSQL (SQLite's triggers keep them, and its full-text
    /// rows; PostgreSQL's full-text column is generated). `replace`: an update's, whose old
    /// rows go first.
    async fn write_labels(&mut self, i: &Issue, replace: bool) -> Result<(), StorageError> {
        if self.backend == Backend::Sqlite {
            return Ok(());
        }
        if replace {
            sqlx::query("DELETE FROM console_issue_labels WHERE issue = $1")
                .bind(i.key.as_str())
                .execute(&mut *self.tx)
                .await
                .map_err(db_err)?;
        }
        if !i.labels.is_empty() {
            sqlx::query(
                "INSERT INTO console_issue_labels (label, issue, project, status, rank, number) \
                 SELECT jsonb_array_elements_text(CAST($1 AS jsonb)), $2, $3, $4, $5, $6",
            )
            .bind(text(&i.labels))
            .bind(i.key.as_str())
            .bind(i.project.as_str())
            .bind(i.status.as_str())
            .bind(i.rank.as_str())
            .bind(i.key.number())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    fn claim_text(i: &Issue) -> Option<String> {
        i.claim.as_ref().map(|c| {
            text(&StoredClaim {
                holder: c.holder.clone(),
                at: ms(&c.at),
            })
        })
    }
}

#[async_trait]
impl ProjectTx for SqlTx {
    async fn insert_project(&mut self, p: &Project) -> Result<bool, StorageError> {
        // ON CONFLICT, not a caught unique violation: on PostgreSQL a failed statement aborts
        // the whole transaction.
        let r = sqlx::query(
            "INSERT INTO console_projects (key, name, created_at, next_issue) VALUES ($1, $2, $3, 1) \
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(p.key.as_str())
        .bind(p.name.as_str())
        .bind(ms(&p.created_at))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(r.rows_affected() == 1)
    }

    async fn project(&mut self, key: &ProjectKey) -> Result<Option<Project>, StorageError> {
        sqlx::query("SELECT key, name, created_at FROM console_projects WHERE key = $1")
            .bind(key.as_str())
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(db_err)?
            .as_ref()
            .map(project_of)
            .transpose()
    }

    async fn projects(&mut self) -> Result<Vec<Project>, StorageError> {
        sqlx::query("SELECT key, name, created_at FROM console_projects ORDER BY key")
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(project_of)
            .collect()
    }

    async fn take_issue_number(
        &mut self,
        key: &ProjectKey,
    ) -> Result<Option<(i64, Option<String>)>, StorageError> {
        let Some(row) = sqlx::query(
            "UPDATE console_projects SET next_issue = next_issue + 1 WHERE key = $1 \
             RETURNING next_issue - 1 AS n, \
             (SELECT MAX(rank) FROM console_issues WHERE project = $1) AS last_rank",
        )
        .bind(key.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        else {
            return Ok(None);
        };
        Ok(Some((
            row.try_get("n").map_err(db_err)?,
            row.try_get("last_rank").map_err(db_err)?,
        )))
    }

    async fn put_mapping(&mut self, m: &RepoMapping) -> Result<(), StorageError> {
        if m.default {
            sqlx::query(
                "UPDATE console_repo_projects SET is_default = 0 WHERE project = $1 AND repo <> $2",
            )
            .bind(m.project.as_str())
            .bind(m.repo.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        sqlx::query(
            "INSERT INTO console_repo_projects (repo, project, is_default) VALUES ($1, $2, $3) \
             ON CONFLICT (repo) DO UPDATE SET project = $2, is_default = $3",
        )
        .bind(m.repo.as_str())
        .bind(m.project.as_str())
        .bind(i64::from(m.default))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn mapping(&mut self, repo: &RepoName) -> Result<Option<RepoMapping>, StorageError> {
        let lock = self.lock_clause();
        sqlx::query(&format!(
            "SELECT repo, project, is_default FROM console_repo_projects WHERE repo = $1{lock}"
        ))
        .bind(repo.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(mapping_of)
        .transpose()
    }

    async fn mappings(&mut self) -> Result<Vec<RepoMapping>, StorageError> {
        sqlx::query("SELECT repo, project, is_default FROM console_repo_projects ORDER BY repo")
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(mapping_of)
            .collect()
    }

    async fn delete_mapping(&mut self, repo: &RepoName) -> Result<bool, StorageError> {
        let r = sqlx::query("DELETE FROM console_repo_projects WHERE repo = $1")
            .bind(repo.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(r.rows_affected() > 0)
    }

    async fn issues_of_repo(&mut self, repo: &RepoName) -> Result<Vec<IssueKey>, StorageError> {
        // A prefix compare, not LIKE: repository names hold `_`, which LIKE reads as a wildcard.
        let prefix = format!("{repo}#");
        sqlx::query(
            "SELECT key FROM console_issues WHERE repo IS NOT NULL \
             AND substr(repo, 1, CAST($2 AS INTEGER)) = $1 ORDER BY project, number",
        )
        .bind(prefix.as_str())
        .bind(prefix.len() as i64)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            let k: String = r.try_get("key").map_err(db_err)?;
            IssueKey::parse(&k).ok_or_else(|| corrupt("issue key"))
        })
        .collect()
    }
}

#[async_trait]
impl IssueTx for SqlTx {
    async fn insert_issue(&mut self, i: &Issue) -> Result<(), StorageError> {
        sqlx::query(&format!(
            "INSERT INTO console_issues ({ISSUE_COLUMNS}, is_open) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19)"
        ))
        .bind(i.key.as_str())
        .bind(i.project.as_str())
        .bind(i.key.number())
        .bind(i.title.as_str())
        .bind(i.status.as_str())
        .bind(i.priority.map(i64::from))
        .bind(text(&i.labels))
        .bind(i.route.clone())
        .bind(i.parent.as_ref().map(|p| p.as_str().to_owned()))
        .bind(i.rank.as_str())
        .bind(i.assignee.as_ref().map(|a| a.as_str().to_owned()))
        .bind(text(&i.components))
        .bind(Self::claim_text(i))
        .bind(i.repo.clone())
        .bind(i.sequence)
        .bind(ms(&i.created_at))
        .bind(ms(&i.updated_at))
        .bind(i.closed_at.as_ref().map(ms))
        .bind(i64::from(i.status.is_open()))
        .execute(&mut *self.tx)
        .await
        .map_err(|e| {
            // Another transaction imported the same ref first (PostgreSQL waits for it,
            // then refuses): run again, and find its issue.
            if is_unique_violation(&e) {
                StorageError::Conflict
            } else {
                db_err(e)
            }
        })?;
        self.write_labels(i, false).await
    }

    async fn issue_by_repo(&mut self, r: &str) -> Result<Option<Issue>, StorageError> {
        sqlx::query(&format!(
            "SELECT {ISSUE_COLUMNS} FROM console_issues WHERE repo = $1"
        ))
        .bind(r)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(issue_of)
        .transpose()
    }

    async fn issue(&mut self, key: &IssueKey) -> Result<Option<Issue>, StorageError> {
        let lock = self.lock_clause();
        sqlx::query(&format!(
            "SELECT {ISSUE_COLUMNS} FROM console_issues WHERE key = $1{lock}"
        ))
        .bind(key.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(issue_of)
        .transpose()
    }

    async fn assignee_of(&mut self, key: &IssueKey) -> Result<Option<Login>, StorageError> {
        let row = sqlx::query("SELECT assignee FROM console_issues WHERE key = $1")
            .bind(key.as_str())
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(db_err)?;
        let assignee: Option<String> = match row {
            Some(r) => r.try_get("assignee").map_err(db_err)?,
            None => None,
        };
        assignee.as_deref().map(login).transpose()
    }

    async fn update_issue(&mut self, i: &Issue) -> Result<(), StorageError> {
        // SQLite's triggers keep the label rows; PostgreSQL's are written here: all of them
        // when the labels change, else their status and rank when those do.
        let labels = if self.backend == Backend::Postgres {
            let row = sqlx::query("SELECT labels, status, rank FROM console_issues WHERE key = $1")
                .bind(i.key.as_str())
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(db_err)?
                .ok_or_else(|| StorageError::Other("no such issue".into()))?;
            let was = |c: &str| r_text(&row, c);
            if was("labels")? != text(&i.labels) {
                LabelRows::Rewrite
            } else if was("status")? != i.status.as_str() || was("rank")? != i.rank {
                LabelRows::Reorder
            } else {
                LabelRows::Keep
            }
        } else {
            LabelRows::Keep
        };
        sqlx::query(
            "UPDATE console_issues SET title = $2, status = $3, is_open = $4, priority = $5, \
             labels = $6, route = $7, parent = $8, rank = $9, assignee = $10, components = $11, \
             claim = $12, repo = $13, sequence = $14, updated_at = $15, closed_at = $16 \
             WHERE key = $1",
        )
        .bind(i.key.as_str())
        .bind(i.title.as_str())
        .bind(i.status.as_str())
        .bind(i64::from(i.status.is_open()))
        .bind(i.priority.map(i64::from))
        .bind(text(&i.labels))
        .bind(i.route.clone())
        .bind(i.parent.as_ref().map(|p| p.as_str().to_owned()))
        .bind(i.rank.as_str())
        .bind(i.assignee.as_ref().map(|a| a.as_str().to_owned()))
        .bind(text(&i.components))
        .bind(Self::claim_text(i))
        .bind(i.repo.clone())
        .bind(i.sequence)
        .bind(ms(&i.updated_at))
        .bind(i.closed_at.as_ref().map(ms))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        match labels {
            LabelRows::Rewrite => self.write_labels(i, true).await?,
            LabelRows::Reorder => {
                sqlx::query(
                    "UPDATE console_issue_labels SET status = $2, rank = $3 WHERE issue = $1",
                )
                .bind(i.key.as_str())
                .bind(i.status.as_str())
                .bind(i.rank.as_str())
                .execute(&mut *self.tx)
                .await
                .map_err(db_err)?;
            }
            LabelRows::Keep => {}
        }
        Ok(())
    }

    async fn issues(&mut self, f: &IssueFilter) -> Result<(Vec<Issue>, i64), StorageError> {
        // A page of one label within a project and statuses: the label rows answer the count
        // and the page's keys from one index range, without reading an issue not shown.
        if let ([label], Some(limit)) = (f.labels.as_slice(), f.limit)
            && f.parent.is_none()
            && f.priority.is_empty()
            && f.updated_since.is_none()
            && f.pinned_by.is_none()
            && f.route.is_none()
        {
            let mut a = Args::default();
            let l = a.push(label.clone());
            let sub = label_rows_where(&mut a, f, &[l]);
            let total: i64 = sqlx::query_with(
                &format!("SELECT COUNT(*) AS n FROM console_issue_labels WHERE {sub}"),
                a.build(),
            )
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)?;
            let (l, o) = (a.push(i64::from(limit)), a.push(i64::from(f.offset)));
            let rows = sqlx::query_with(
                &format!(
                    "SELECT {ISSUE_COLUMNS} FROM console_issues WHERE key IN \
                     (SELECT issue FROM console_issue_labels WHERE {sub} \
                      ORDER BY project, rank, number LIMIT {l} OFFSET {o}) \
                     ORDER BY project, rank, number"
                ),
                a.build(),
            )
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?;
            let issues = rows.iter().map(issue_of).collect::<Result<Vec<_>, _>>()?;
            return Ok((issues, total));
        }
        let mut a = Args::default();
        let mut conds: Vec<String> = Vec::new();
        if let Some(p) = &f.project {
            conds.push(format!("project = {}", a.push(p.as_str().to_owned())));
        }
        if !f.status.is_empty() {
            let list: Vec<String> = f
                .status
                .iter()
                .map(|s| a.push(s.as_str().to_owned()))
                .collect();
            conds.push(format!("status IN ({})", list.join(", ")));
        }
        if let Some(p) = &f.parent {
            conds.push(format!("parent = {}", a.push(p.as_str().to_owned())));
        }
        if !f.labels.is_empty() {
            // The label rows narrowed by the project and statuses they carry themselves.
            let list: Vec<String> = f.labels.iter().map(|l| a.push(l.clone())).collect();
            let sub = label_rows_where(&mut a, f, &list);
            conds.push(format!(
                "key IN (SELECT issue FROM console_issue_labels WHERE {sub})"
            ));
        }
        if !f.priority.is_empty() {
            let mut alts: Vec<String> = Vec::new();
            let vals: Vec<String> = f
                .priority
                .iter()
                .flatten()
                .map(|p| a.push(i64::from(*p)))
                .collect();
            if !vals.is_empty() {
                alts.push(format!("priority IN ({})", vals.join(", ")));
            }
            if f.priority.iter().any(Option::is_none) {
                alts.push("priority IS NULL".into());
            }
            conds.push(format!("({})", alts.join(" OR ")));
        }
        if let Some(open) = f.open {
            conds.push(format!("is_open = {}", a.push(i64::from(open))));
        }
        if let Some(t) = &f.updated_since {
            conds.push(format!("updated_at >= {}", a.push(ms(t))));
        }
        if let Some(l) = &f.pinned_by {
            conds.push(format!(
                "key IN (SELECT issue FROM console_read_state WHERE pinned = 1 AND login = {})",
                a.push(l.as_str().to_owned())
            ));
        }
        match &f.route {
            None => {}
            Some(RouteFilter::NoRoute) => conds.push("is_open = 1 AND route IS NULL".into()),
            Some(RouteFilter::In(roles)) if roles.is_empty() => conds.push("1 = 0".into()),
            Some(RouteFilter::In(roles)) => {
                let list: Vec<String> = roles.iter().map(|r| a.push(r.clone())).collect();
                conds.push(format!("is_open = 1 AND route IN ({})", list.join(", ")));
            }
            Some(RouteFilter::NotIn(roles)) if roles.is_empty() => {
                conds.push("is_open = 1 AND route IS NOT NULL".into())
            }
            Some(RouteFilter::NotIn(roles)) => {
                let list: Vec<String> = roles.iter().map(|r| a.push(r.clone())).collect();
                conds.push(format!(
                    "is_open = 1 AND route IS NOT NULL AND route NOT IN ({})",
                    list.join(", ")
                ));
            }
        }
        let filter = if conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conds.join(" AND "))
        };
        // The total first, with the same arguments (a second copy: the page adds two).
        let count_sql = format!("SELECT COUNT(*) AS n FROM console_issues{filter}");
        let total: i64 = sqlx::query_with(&count_sql, a.build())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)?;
        let page = match f.limit {
            Some(limit) => {
                let l = a.push(i64::from(limit));
                let o = a.push(i64::from(f.offset));
                format!(" LIMIT {l} OFFSET {o}")
            }
            None => String::new(),
        };
        let sql = format!(
            "SELECT {ISSUE_COLUMNS} FROM console_issues{filter} ORDER BY project, rank, number{page}"
        );
        let rows = sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?;
        let issues = rows.iter().map(issue_of).collect::<Result<Vec<_>, _>>()?;
        Ok((issues, total))
    }

    async fn issue_page(
        &mut self,
        q: &IssueListQuery,
        limit: u32,
    ) -> Result<Vec<Issue>, StorageError> {
        let mut a = Args::default();
        let mut conds = list_conds(&mut a, self.backend, q, true);
        let (expr, dir) = list_order(q.sort);
        // The rank order is within a project: a list across projects goes project by
        // project; the other orders put the project after the sort value.
        let cols: [&str; 3] = if q.sort == IssueSort::Rank {
            ["project", expr, "number"]
        } else {
            [expr, "project", "number"]
        };
        if let Some(c) = &q.after {
            let v = match q.sort {
                IssueSort::Rank => a.push(c.value.clone()),
                _ => a.push(c.value.parse::<i64>().unwrap_or(0)),
            };
            let p = a.push(c.project.as_str().to_owned());
            let n = a.push(c.number);
            let cmp = if dir == "ASC" { ">" } else { "<" };
            let vals = if q.sort == IssueSort::Rank {
                format!("{p}, {v}, {n}")
            } else {
                format!("{v}, {p}, {n}")
            };
            conds.push(format!("({}) {cmp} ({vals})", cols.join(", ")));
        }
        let filter = if conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conds.join(" AND "))
        };
        let order = cols
            .iter()
            .map(|c| format!("{c} {dir}"))
            .collect::<Vec<_>>()
            .join(", ");
        let l = a.push(i64::from(limit));
        let sql = format!(
            "SELECT {ISSUE_COLUMNS} FROM console_issues{filter} ORDER BY {order} LIMIT {l}"
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(issue_of)
            .collect()
    }

    async fn issue_page_total(&mut self, q: &IssueListQuery) -> Result<i64, StorageError> {
        let mut a = Args::default();
        let conds = list_conds(&mut a, self.backend, q, true);
        let filter = if conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conds.join(" AND "))
        };
        sqlx::query_with(
            &format!("SELECT COUNT(*) AS n FROM console_issues{filter}"),
            a.build(),
        )
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?
        .try_get("n")
        .map_err(db_err)
    }

    async fn status_counts(
        &mut self,
        q: &IssueListQuery,
    ) -> Result<Vec<(Status, i64)>, StorageError> {
        let mut a = Args::default();
        let conds = list_conds(&mut a, self.backend, q, false);
        let filter = if conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conds.join(" AND "))
        };
        sqlx::query_with(
            &format!("SELECT status, COUNT(*) AS n FROM console_issues{filter} GROUP BY status"),
            a.build(),
        )
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            let s: String = r.try_get("status").map_err(db_err)?;
            Ok((
                Status::parse(&s).ok_or_else(|| corrupt("status"))?,
                r.try_get("n").map_err(db_err)?,
            ))
        })
        .collect()
    }

    async fn child_progress(
        &mut self,
        parents: &[IssueKey],
    ) -> Result<Vec<(IssueKey, i64, i64)>, StorageError> {
        if parents.is_empty() {
            return Ok(Vec::new());
        }
        let mut a = Args::default();
        let keys: Vec<&str> = parents.iter().map(IssueKey::as_str).collect();
        let list = a.list(self.backend, &keys);
        let sql = format!(
            "SELECT parent, SUM(CASE WHEN is_open = 0 THEN 1 ELSE 0 END) AS done, \
             COUNT(*) AS total FROM console_issues WHERE parent IN {list} GROUP BY parent"
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(|r| {
                let p: String = r.try_get("parent").map_err(db_err)?;
                Ok((
                    IssueKey::parse(&p).ok_or_else(|| corrupt("issue key"))?,
                    r.try_get("done").map_err(db_err)?,
                    r.try_get("total").map_err(db_err)?,
                ))
            })
            .collect()
    }

    async fn children(&mut self, key: &IssueKey) -> Result<Vec<(IssueKey, Status)>, StorageError> {
        let rows = sqlx::query(
            "SELECT key, status FROM console_issues WHERE parent = $1 ORDER BY project, number",
        )
        .bind(key.as_str())
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                let k: String = r.try_get("key").map_err(db_err)?;
                let s: String = r.try_get("status").map_err(db_err)?;
                Ok((
                    IssueKey::parse(&k).ok_or_else(|| corrupt("issue key"))?,
                    Status::parse(&s).ok_or_else(|| corrupt("status"))?,
                ))
            })
            .collect()
    }

    async fn children_of(
        &mut self,
        parents: &[IssueKey],
    ) -> Result<Vec<(IssueKey, IssueKey, Status)>, StorageError> {
        if parents.is_empty() {
            return Ok(Vec::new());
        }
        let mut a = Args::default();
        let keys: Vec<&str> = parents.iter().map(IssueKey::as_str).collect();
        let list = a.list(self.backend, &keys);
        let sql = format!(
            "SELECT parent, key, status FROM console_issues WHERE parent IN {list} \
             ORDER BY project, number"
        );
        let rows = sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                let p: String = r.try_get("parent").map_err(db_err)?;
                let k: String = r.try_get("key").map_err(db_err)?;
                let s: String = r.try_get("status").map_err(db_err)?;
                Ok((
                    IssueKey::parse(&p).ok_or_else(|| corrupt("issue key"))?,
                    IssueKey::parse(&k).ok_or_else(|| corrupt("issue key"))?,
                    Status::parse(&s).ok_or_else(|| corrupt("status"))?,
                ))
            })
            .collect()
    }

    async fn last_rank(&mut self, project: &ProjectKey) -> Result<Option<String>, StorageError> {
        let row = sqlx::query("SELECT MAX(rank) AS r FROM console_issues WHERE project = $1")
            .bind(project.as_str())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?;
        row.try_get("r").map_err(db_err)
    }

    async fn rank_after(&mut self, key: &IssueKey) -> Result<Option<String>, StorageError> {
        let row = sqlx::query(
            "SELECT MIN(rank) AS r FROM console_issues WHERE project = $1 AND rank > \
             (SELECT rank FROM console_issues WHERE key = $2)",
        )
        .bind(key.project().as_str().to_owned())
        .bind(key.as_str())
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?;
        row.try_get("r").map_err(db_err)
    }

    async fn rank_before(&mut self, key: &IssueKey) -> Result<Option<String>, StorageError> {
        let row = sqlx::query(
            "SELECT MAX(rank) AS r FROM console_issues WHERE project = $1 AND rank < \
             (SELECT rank FROM console_issues WHERE key = $2)",
        )
        .bind(key.project().as_str().to_owned())
        .bind(key.as_str())
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?;
        row.try_get("r").map_err(db_err)
    }

    async fn read_state(
        &mut self,
        login: &Login,
        key: &IssueKey,
    ) -> Result<Option<(i64, bool)>, StorageError> {
        let row = sqlx::query(
            "SELECT read_sequence, pinned FROM console_read_state WHERE login = $1 AND issue = $2",
        )
        .bind(login.as_str())
        .bind(key.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        row.map(|r| -> Result<(i64, bool), StorageError> {
            Ok((
                r.try_get("read_sequence").map_err(db_err)?,
                r.try_get::<i64, _>("pinned").map_err(db_err)? != 0,
            ))
        })
        .transpose()
    }

    async fn put_read_state(
        &mut self,
        login: &Login,
        key: &IssueKey,
        read_sequence: i64,
        pinned: bool,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_read_state (login, issue, read_sequence, pinned) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (login, issue) DO UPDATE SET read_sequence = $3, pinned = $4",
        )
        .bind(login.as_str())
        .bind(key.as_str())
        .bind(read_sequence)
        .bind(i64::from(pinned))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn read_states(&mut self, login: &Login) -> Result<Vec<ReadState>, StorageError> {
        let rows = sqlx::query(
            "SELECT r.issue AS issue, r.read_sequence AS read_sequence, r.pinned AS pinned, \
             i.sequence AS last_sequence FROM console_read_state r \
             JOIN console_issues i ON i.key = r.issue WHERE r.login = $1 \
             ORDER BY i.project, i.number",
        )
        .bind(login.as_str())
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                let key: String = r.try_get("issue").map_err(db_err)?;
                let read: i64 = r.try_get("read_sequence").map_err(db_err)?;
                let last: i64 = r.try_get("last_sequence").map_err(db_err)?;
                Ok(ReadState {
                    key: IssueKey::parse(&key).ok_or_else(|| corrupt("issue key"))?,
                    read_sequence: read,
                    last_sequence: last,
                    unread: read < last,
                    pinned: r.try_get::<i64, _>("pinned").map_err(db_err)? != 0,
                })
            })
            .collect()
    }

    async fn search_issues(
        &mut self,
        words: &[String],
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError> {
        // Only letters and digits reach here; each word is quoted for FTS5 all the same. The
        // total and the best `limit` are read from the index alone (SQLite: the FTS table,
        // which holds the project as a column of its own; PostgreSQL: the GIN index), and the
        // rows of those alone are read after, with their snippets made in Rust: scoring every
        // match is the cost, and it stays the only per-match work.
        let mut a = Args::default();
        let (count_sql, top_sql) = match self.backend {
            Backend::Sqlite => {
                let mut m = fts_prefix_words(words);
                if let Some(p) = project {
                    m = format!("({m}) AND project : \"{}\"", p.as_str().to_lowercase());
                }
                let m = a.push(m);
                (
                    format!(
                        "SELECT COUNT(*) AS n FROM console_issues_fts WHERE console_issues_fts MATCH {m}"
                    ),
                    // The index's rowid is the issue's negated (migration 13): ascending is
                    // newest first.
                    format!(
                        "SELECT i.key AS key, i.title AS title, i.project AS project, \
                         i.updated_at AS at, t.score AS score FROM ( \
                           SELECT rowid, -bm25(console_issues_fts, 1.0, 0.0) AS score \
                           FROM console_issues_fts WHERE console_issues_fts MATCH {m} \
                           ORDER BY score DESC, rowid LIMIT {l}) t \
                         JOIN console_issues i ON i.rowid = -t.rowid \
                         ORDER BY t.score DESC, i.updated_at DESC, i.key",
                        l = a.push(i64::from(limit))
                    ),
                )
            }
            Backend::Postgres => {
                let q = a.push(
                    words
                        .iter()
                        .map(|w| pg_prefix(w))
                        .collect::<Vec<_>>()
                        .join(" & "),
                );
                let mut filter = format!("search @@ to_tsquery('simple', {q})");
                if let Some(p) = project {
                    filter.push_str(&format!(" AND project = {}", a.push(p.as_str().to_owned())));
                }
                (
                    format!("SELECT COUNT(*) AS n FROM console_issues WHERE {filter}"),
                    format!(
                        "SELECT key, title, project, updated_at AS at, \
                         ts_rank(search, to_tsquery('simple', {q}))::float8 AS score \
                         FROM console_issues WHERE {filter} \
                         ORDER BY score DESC, updated_at DESC, key LIMIT {l}",
                        l = a.push(i64::from(limit))
                    ),
                )
            }
        };
        let total: i64 = sqlx::query_with(&count_sql, a.build())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)?;
        if total == 0 {
            return Ok((Vec::new(), 0));
        }
        let rows = sqlx::query_with(&top_sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?;
        let hits = rows
            .iter()
            .map(|r| {
                let project: String = r.try_get("project").map_err(db_err)?;
                let title: String = r.try_get("title").map_err(db_err)?;
                let key: String = r.try_get("key").map_err(db_err)?;
                Ok(Hit {
                    issue: IssueKey::parse(&key),
                    artifact: None,
                    id: key,
                    snippet: snippet(&title, words, 16),
                    title,
                    project: ProjectKey::parse(&project),
                    at: time(r.try_get("at").map_err(db_err)?)?,
                    score: r.try_get("score").map_err(db_err)?,
                })
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok((hits, total))
    }

    async fn word_counts(&mut self, words: &[String]) -> Result<Vec<i64>, StorageError> {
        if words.is_empty() {
            return Ok(Vec::new());
        }
        // A count per word from the index (SQLite: the FTS table's posting list of the word;
        // PostgreSQL: the GIN index), each with its place in `words`: one row.
        let sql = match self.backend {
            Backend::Sqlite => {
                "SELECT json_group_array(json_array(w.key, (SELECT COUNT(*) FROM console_issues_fts \
                   WHERE console_issues_fts MATCH 'body : \"' || replace(w.value, '\"', '') || '\"'))) \
                 AS counts FROM json_each($1) w"
            }
            Backend::Postgres => {
                "SELECT COALESCE(json_agg(json_build_array(w.i - 1, (SELECT COUNT(*) FROM console_issues \
                   WHERE search @@ to_tsquery('simple', w.word)))), '[]')::text AS counts \
                 FROM jsonb_array_elements_text(CAST($1 AS jsonb)) WITH ORDINALITY AS w(word, i)"
            }
        };
        let counts: String = sqlx::query(sql)
            .bind(text(&words))
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("counts")
            .map_err(db_err)?;
        let mut counts: Vec<(i64, i64)> = json_of(&counts, "word counts")?;
        counts.sort_unstable();
        if counts.len() != words.len() {
            return Err(corrupt("word counts"));
        }
        Ok(counts.into_iter().map(|(_, n)| n).collect())
    }

    async fn issue_count(&mut self) -> Result<i64, StorageError> {
        sqlx::query("SELECT COUNT(*) AS n FROM console_issues")
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)
    }

    async fn similar_candidates(
        &mut self,
        words: &[String],
        limit: u32,
    ) -> Result<Vec<Candidate>, StorageError> {
        if words.is_empty() {
            return Ok(Vec::new());
        }
        // The newest matches from the index (SQLite: its rowid is the issue's negated, so its
        // own ascending order is newest first, by insertion), with the text it indexes (title
        // and labels, read from the issue row, not the FTS table's copy: one seek less each);
        // nothing is scored here. One row of JSON, not a row each: each row is a hand-over
        // between SQLite's thread and ours. Each match carries its place, newer higher (an
        // aggregate's input order is not an order to rely on).
        let (sql, q) = match self.backend {
            Backend::Sqlite => (
                "SELECT json_group_array(json_array(-f.rowid, i.key, i.title, i.title || ' ' || i.labels)) \
                 AS found FROM ( \
                   SELECT rowid FROM console_issues_fts WHERE console_issues_fts MATCH $1 \
                   ORDER BY rowid LIMIT $2) f \
                 JOIN console_issues i ON i.rowid = -f.rowid",
                fts_words(words, " OR "),
            ),
            Backend::Postgres => (
                "SELECT COALESCE(json_agg(json_build_array(-n, key, title, body)), '[]')::text AS found \
                 FROM (SELECT key, title, title || ' ' || labels AS body, \
                         ROW_NUMBER() OVER (ORDER BY created_at DESC, number DESC) AS n \
                       FROM console_issues WHERE search @@ to_tsquery('simple', $1) \
                       ORDER BY created_at DESC, number DESC LIMIT $2) c",
                words.join(" | "),
            ),
        };
        let found: String = sqlx::query(sql)
            .bind(q)
            .bind(i64::from(limit))
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("found")
            .map_err(db_err)?;
        let mut found: Vec<(i64, String, String, String)> = json_of(&found, "candidate list")?;
        found.sort_unstable_by_key(|c| std::cmp::Reverse(c.0));
        Ok(found
            .into_iter()
            .map(|(_, key, title, text)| Candidate { key, title, text })
            .collect())
    }

    async fn subscribers(&mut self, key: &IssueKey) -> Result<Vec<(String, Time)>, StorageError> {
        let rows = sqlx::query(
            "SELECT e.session AS session, MIN(e.at) AS since FROM console_events e \
             LEFT JOIN console_unsubscribed u ON u.issue = e.issue AND u.session = e.session \
             WHERE e.issue = $1 AND e.session IS NOT NULL \
             AND (u.through_event IS NULL OR e.id > u.through_event) \
             GROUP BY e.session ORDER BY MIN(e.at), e.session",
        )
        .bind(key.as_str())
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("session").map_err(db_err)?,
                    time(r.try_get("since").map_err(db_err)?)?,
                ))
            })
            .collect()
    }

    async fn unsubscribe(&mut self, key: &IssueKey, session: &str) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_unsubscribed (issue, session, through_event) \
             SELECT $1, $2, COALESCE(MAX(id), 0) FROM console_events WHERE true \
             ON CONFLICT (issue, session) DO UPDATE SET through_event = excluded.through_event",
        )
        .bind(key.as_str())
        .bind(session)
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }
}

#[async_trait]
impl EventTx for SqlTx {
    async fn append_event(
        &mut self,
        e: &NewEvent,
        sequence: Option<i64>,
    ) -> Result<Event, StorageError> {
        if !self.write {
            return Err(StorageError::Other(
                "an append in a read transaction".into(),
            ));
        }
        if self.backend == Backend::Postgres && !self.events_locked {
            sqlx::query("SELECT pg_advisory_xact_lock($1)")
                .bind(PG_EVENTS_LOCK)
                .execute(&mut *self.tx)
                .await
                .map_err(db_err)?;
            self.events_locked = true;
        }
        let row = sqlx::query(
            "INSERT INTO console_events (id, kind, at, actor, project, issue, artifact, session, data, sequence) \
             SELECT COALESCE(MAX(id), 0) + 1, $1, $2, $3, $4, $5, $6, $7, $8, $9 FROM console_events \
             RETURNING id",
        )
        .bind(e.kind)
        .bind(ms(&e.at))
        .bind(text(&e.actor))
        .bind(e.project.as_ref().map(|p| p.as_str().to_owned()))
        .bind(e.issue.as_ref().map(|p| p.as_str().to_owned()))
        .bind(e.artifact.clone())
        .bind(e.session.clone())
        .bind(text(&e.data))
        .bind(sequence)
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?;
        let id: i64 = row.try_get("id").map_err(db_err)?;
        self.last_event = Some(id);
        Ok(Event {
            id,
            kind: e.kind.to_owned(),
            at: e.at,
            actor: e.actor.clone(),
            project: e.project.clone(),
            issue: e.issue.clone(),
            artifact: e.artifact.clone(),
            session: e.session.clone(),
            data: e.data.clone(),
            sequence,
        })
    }

    async fn events_after(&mut self, after: i64, limit: u32) -> Result<Vec<Event>, StorageError> {
        sqlx::query(&format!(
            "SELECT {EVENT_COLUMNS} FROM console_events WHERE id > $1 ORDER BY id LIMIT $2"
        ))
        .bind(after)
        .bind(i64::from(limit))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            let mut e = event_of(r)?;
            e.sequence = None;
            Ok(e)
        })
        .collect()
    }

    async fn issue_events(
        &mut self,
        key: &IssueKey,
        page: &EventPage,
    ) -> Result<Vec<Event>, StorageError> {
        let mut a = Args::default();
        // A document's events name its issue too, with the document's own sequence: the
        // issue's log is the events about the issue itself.
        let mut conds = vec![
            format!("issue = {}", a.push(key.as_str().to_owned())),
            "artifact IS NULL".to_owned(),
        ];
        if let Some(x) = page.after {
            conds.push(format!("sequence > {}", a.push(x)));
        }
        if let Some(x) = page.before {
            conds.push(format!("sequence < {}", a.push(x)));
        }
        if !page.ids.is_empty() {
            conds.push(format!("id IN {}", a.int_list(self.backend, &page.ids)));
        }
        let order = if page.descending { "DESC" } else { "ASC" };
        let limit = a.push(i64::from(page.limit));
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM console_events WHERE {} ORDER BY sequence {order} LIMIT {limit}",
            conds.join(" AND ")
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(event_of)
            .collect()
    }

    async fn last_event_id(&mut self) -> Result<i64, StorageError> {
        sqlx::query("SELECT COALESCE(MAX(id), 0) AS n FROM console_events")
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)
    }
}

/// The asks area's view of a transaction (its traits are all implemented above and in the
/// areas' modules).
impl countersign_console_core::work::AsksWork for SqlTx {}

/// The work area's view of a transaction.
impl countersign_console_core::work::IssuesWork for SqlTx {}

/// The delivery area's view of a transaction.
impl countersign_console_core::work::DeliveryWork for SqlTx {}

#[async_trait]
impl WorkTx for SqlTx {
    async fn commit(mut self: Box<Self>) -> Result<(), StorageError> {
        if self.delivery_written {
            crate::delivery::move_generation(&mut self).await?;
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
        match self.tx {
            Conn::Tx(t) => t.commit().await.map_err(db_err),
            // Nothing to commit: each statement ran on its own (`read_loose` is for reads).
            Conn::Single(_) => Ok(()),
            Conn::Writer(slot) => slot.commit().await,
        }
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
