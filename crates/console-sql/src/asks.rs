//! [`countersign_console_core::work::AskTx`] on SQLite and PostgreSQL: asks with their edit
//! and answers histories, per-person snoozes, comments and reviews (migration 9; 11 adds the
//! person who asked), and the inbox's comment and ask threads.
//!
//! - An ask's current answer, followers and turn are in its row, so the inbox is one indexed
//!   query joined to the issue's assignee and the person's snooze.
//! - Asks and comments have their own full-text indexes, as issues do (SQLite FTS5 tables
//!   keyed by the row's rowid, written in the row's transaction; PostgreSQL a generated
//!   `tsvector` with a GIN index).
//! - In a write transaction an ask or comment read on PostgreSQL is `FOR UPDATE`.

use std::borrow::Cow;
use std::collections::HashMap;

use async_trait::async_trait;
use countersign_common::sql::{Backend, db_err};
use countersign_console_core::Time;
use countersign_console_core::ids::Login;
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::asks::{
    Answer, AnswerEntry, Ask, AskFilter, AskKind, AskOption, AskState, AskWrite, AssigneeFilter,
    Comment, CommentFilter, InboxAsk, InboxEntry, InboxFilter, InboxScope, PastAnswer, Review,
    ReviewOutcome, ThreadState, Turn, Wording,
};
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{Actor, AskTx, Hit, IssueKey, ProjectKey};
use serde_json::value::RawValue;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::work::{Args, corrupt, fts_prefix, json_of, pg_prefix, text};
use crate::{SqlTx, time};

/// Version 9's tables, then the backend's full-text statements.
macro_rules! migration_9 {
    ($($extra:literal),* $(,)?) => {
        &[
            "CREATE TABLE console_asks (
                id TEXT PRIMARY KEY,
                kind TEXT NOT NULL,
                project TEXT NOT NULL,
                issue TEXT,
                artifact TEXT,
                block TEXT,
                question TEXT NOT NULL,
                options TEXT NOT NULL,
                state TEXT NOT NULL,
                answer TEXT,
                closed TEXT,
                approval TEXT,
                followers TEXT NOT NULL,
                author TEXT NOT NULL,
                author_session TEXT,
                worded_by TEXT NOT NULL,
                worded_at BIGINT NOT NULL,
                turn TEXT,
                turn_since BIGINT NOT NULL,
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL,
                seq BIGINT NOT NULL
            )",
            "CREATE INDEX console_asks_seq ON console_asks (seq)",
            "CREATE INDEX console_asks_issue ON console_asks (issue, seq)",
            "CREATE INDEX console_asks_artifact ON console_asks (artifact, seq)",
            "CREATE INDEX console_asks_project ON console_asks (project, state, seq)",
            "CREATE INDEX console_asks_session ON console_asks (author_session, state)",
            "CREATE INDEX console_asks_turn ON console_asks (turn, turn_since)",
            "CREATE TABLE console_ask_wordings (
                ask TEXT NOT NULL,
                n BIGINT NOT NULL,
                question TEXT NOT NULL,
                options TEXT NOT NULL,
                by_actor TEXT NOT NULL,
                at BIGINT NOT NULL,
                PRIMARY KEY (ask, n)
            )",
            "CREATE TABLE console_ask_answers (
                ask TEXT NOT NULL,
                n BIGINT NOT NULL,
                options TEXT NOT NULL,
                text TEXT,
                by_actor TEXT NOT NULL,
                by_login TEXT,
                at BIGINT NOT NULL,
                current BIGINT NOT NULL,
                seq BIGINT NOT NULL,
                PRIMARY KEY (ask, n)
            )",
            "CREATE INDEX console_ask_answers_seq ON console_ask_answers (seq)",
            "CREATE INDEX console_ask_answers_by ON console_ask_answers (by_login, at)",
            "CREATE TABLE console_ask_snoozes (
                login TEXT NOT NULL,
                ask TEXT NOT NULL,
                until BIGINT NOT NULL,
                PRIMARY KEY (login, ask)
            )",
            "CREATE TABLE console_comments (
                id TEXT PRIMARY KEY,
                thread_id TEXT NOT NULL,
                parent TEXT,
                project TEXT NOT NULL,
                issue TEXT,
                artifact TEXT,
                ask TEXT,
                quote TEXT,
                block TEXT,
                body TEXT NOT NULL,
                author TEXT NOT NULL,
                author_login TEXT,
                suggestion TEXT,
                mentions TEXT NOT NULL,
                thread_state TEXT,
                created_at BIGINT NOT NULL,
                edited_at BIGINT,
                seq BIGINT NOT NULL
            )",
            "CREATE INDEX console_comments_seq ON console_comments (seq)",
            "CREATE INDEX console_comments_issue ON console_comments (issue, seq)",
            "CREATE INDEX console_comments_artifact ON console_comments (artifact, seq)",
            "CREATE INDEX console_comments_ask ON console_comments (ask, seq)",
            "CREATE INDEX console_comments_thread ON console_comments (thread_id, seq)",
            "CREATE INDEX console_comments_author ON console_comments (author_login, created_at)",
            "CREATE TABLE console_reviews (
                id TEXT PRIMARY KEY,
                artifact TEXT NOT NULL,
                version BIGINT NOT NULL,
                outcome TEXT NOT NULL,
                body TEXT,
                by_actor TEXT NOT NULL,
                at BIGINT NOT NULL,
                ask TEXT
            )",
            "CREATE INDEX console_reviews_artifact ON console_reviews (artifact, at)",
            $($extra),*
        ]
    };
}

/// Version 9 on SQLite: the tables and FTS5 indexes of questions and comment bodies.
pub(crate) const MIGRATION_9_SQLITE: &[&str] = migration_9!(
    "CREATE VIRTUAL TABLE console_asks_fts USING fts5(body, tokenize = 'unicode61')",
    "CREATE VIRTUAL TABLE console_comments_fts USING fts5(body, tokenize = 'unicode61')",
);

/// Version 9 on PostgreSQL: the tables and generated `tsvector`s with GIN indexes.
pub(crate) const MIGRATION_9_POSTGRES: &[&str] = migration_9!(
    "ALTER TABLE console_asks ADD COLUMN search tsvector
        GENERATED ALWAYS AS (to_tsvector('simple', question)) STORED",
    "CREATE INDEX console_asks_search ON console_asks USING GIN (search)",
    "ALTER TABLE console_comments ADD COLUMN search tsvector
        GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED",
    "CREATE INDEX console_comments_search ON console_comments USING GIN (search)",
);

/// Version 11 on SQLite: the person who asked, as a column (the inbox's threads find the asks
/// a person wrote in by it), filled in for the asks there are.
pub(crate) const MIGRATION_11_SQLITE: &[&str] = &[
    "ALTER TABLE console_asks ADD COLUMN author_login TEXT",
    "UPDATE console_asks SET author_login = json_extract(author, '$.login') \
     WHERE json_extract(author, '$.kind') = 'user'",
    "CREATE INDEX console_asks_author ON console_asks (author_login)",
];

/// Version 11 on PostgreSQL.
pub(crate) const MIGRATION_11_POSTGRES: &[&str] = &[
    "ALTER TABLE console_asks ADD COLUMN author_login TEXT",
    "UPDATE console_asks SET author_login = CAST(author AS jsonb) ->> 'login' \
     WHERE CAST(author AS jsonb) ->> 'kind' = 'user'",
    "CREATE INDEX console_asks_author ON console_asks (author_login)",
];

const ASK_COLUMNS: &str = "id, kind, project, issue, artifact, block, question, options, state, \
     answer, closed, approval, followers, author, author_session, worded_by, worded_at, turn, \
     turn_since, created_at, updated_at";

/// The next `seq` of comments and answers: one count over both, so that a person's answers
/// and replies (`GET /inbox/answers`) are in the order they were made, even within one
/// millisecond.
const NEXT_SEQ: &str = "(SELECT COALESCE(MAX(m), 0) + 1 FROM (\
     SELECT MAX(seq) AS m FROM console_comments UNION ALL SELECT MAX(seq) AS m FROM console_ask_answers) s)";

const COMMENT_COLUMNS: &str = "id, thread_id, parent, project, issue, artifact, ask, quote, block, \
     body, author, suggestion, mentions, thread_state, created_at, edited_at";

fn project_of(s: &str) -> Result<ProjectKey, StorageError> {
    ProjectKey::parse(s).ok_or_else(|| corrupt("project key"))
}

fn issue_key(s: Option<String>) -> Result<Option<IssueKey>, StorageError> {
    s.map(|k| IssueKey::parse(&k).ok_or_else(|| corrupt("issue key")))
        .transpose()
}

fn ask_of(r: &AnyRow) -> Result<Ask, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    let go = |c: &str| -> Result<Option<String>, StorageError> { r.try_get(c).map_err(db_err) };
    let gi = |c: &str| -> Result<i64, StorageError> { r.try_get(c).map_err(db_err) };
    Ok(Ask {
        id: g("id")?,
        kind: AskKind::parse(&g("kind")?).ok_or_else(|| corrupt("ask kind"))?,
        project: project_of(&g("project")?)?,
        issue: issue_key(go("issue")?)?,
        artifact: go("artifact")?,
        block: go("block")?,
        question: g("question")?,
        options: json_of(&g("options")?, "ask options")?,
        state: AskState::parse(&g("state")?).ok_or_else(|| corrupt("ask state"))?,
        answer: go("answer")?.map(|a| json_of(&a, "answer")).transpose()?,
        closed: go("closed")?.map(|a| json_of(&a, "close")).transpose()?,
        approval: go("approval")?
            .map(|a| json_of(&a, "approval"))
            .transpose()?,
        followers: json_of(&g("followers")?, "followers")?,
        author: json_of(&g("author")?, "actor")?,
        worded_by: json_of(&g("worded_by")?, "actor")?,
        worded_at: time(gi("worded_at")?)?,
        turn: go("turn")?
            .map(|t| Turn::parse(&t).ok_or_else(|| corrupt("turn")))
            .transpose()?,
        turn_since: time(gi("turn_since")?)?,
        created_at: time(gi("created_at")?)?,
        updated_at: time(gi("updated_at")?)?,
    })
}

fn comment_of(r: &AnyRow) -> Result<Comment, StorageError> {
    comment_at(r, "")
}

/// The columns of `list` (comma-separated) of table alias `alias`, each named
/// `<prefix><column>`.
fn columns_as(list: &str, alias: &str, prefix: &str) -> String {
    list.split(',')
        .map(str::trim)
        .map(|c| format!("{alias}.{c} AS {prefix}{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A comment from columns named `<prefix><column>`.
fn comment_at(r: &AnyRow, prefix: &str) -> Result<Comment, StorageError> {
    let col = |c: &str| format!("{prefix}{c}");
    let g =
        |c: &str| -> Result<String, StorageError> { r.try_get(col(c).as_str()).map_err(db_err) };
    let go = |c: &str| -> Result<Option<String>, StorageError> {
        r.try_get(col(c).as_str()).map_err(db_err)
    };
    Ok(Comment {
        id: g("id")?,
        thread_id: g("thread_id")?,
        parent: go("parent")?,
        project: project_of(&g("project")?)?,
        issue: issue_key(go("issue")?)?,
        artifact: go("artifact")?,
        ask: go("ask")?,
        quote: go("quote")?.map(|q| json_of(&q, "quote")).transpose()?,
        block: go("block")?,
        body: g("body")?,
        author: json_of(&g("author")?, "actor")?,
        suggestion: go("suggestion")?
            .map(|s| json_of(&s, "suggestion"))
            .transpose()?,
        mentions: json_of(&g("mentions")?, "mentions")?,
        thread_state: go("thread_state")?
            .map(|s| match s.as_str() {
                "open" => Ok(ThreadState::Open),
                "resolved" => Ok(ThreadState::Resolved),
                _ => Err(corrupt("thread state")),
            })
            .transpose()?,
        created_at: time(r.try_get(col("created_at").as_str()).map_err(db_err)?)?,
        edited_at: r
            .try_get::<Option<i64>, _>(col("edited_at").as_str())
            .map_err(db_err)?
            .map(time)
            .transpose()?,
    })
}

/// One inbox row as stored, less its options and author (see [`inbox_entry`]).
struct StoredInboxRow<'a> {
    id: String,
    kind: &'a str,
    project: &'a str,
    issue: Option<String>,
    artifact: Option<String>,
    block: Option<String>,
    question: String,
    state: &'a str,
    answer: Option<Answer>,
    turn: Option<&'a str>,
    turn_since: i64,
    created_at: i64,
    snoozed_until: Option<i64>,
}

fn inbox_entry(
    r: StoredInboxRow<'_>,
    options: Vec<AskOption>,
    author: Actor,
) -> Result<InboxEntry, StorageError> {
    Ok(InboxEntry {
        ask: InboxAsk {
            id: r.id,
            kind: AskKind::parse(r.kind).ok_or_else(|| corrupt("ask kind"))?,
            project: project_of(r.project)?,
            issue: issue_key(r.issue)?,
            artifact: r.artifact,
            block: r.block,
            question: r.question,
            options,
            state: AskState::parse(r.state).ok_or_else(|| corrupt("ask state"))?,
            answer: r.answer,
            author,
            turn: r
                .turn
                .map(|t| Turn::parse(t).ok_or_else(|| corrupt("turn")))
                .transpose()?,
            turn_since: time(r.turn_since)?,
            created_at: time(r.created_at)?,
        },
        snoozed_until: r.snoozed_until.map(time).transpose()?,
        seq: 0,
    })
}

/// One inbox row as SQLite writes it in the inbox's JSON array: an array of these, in this
/// order. Options and author are the stored JSON text as a JSON string, kept as written: an
/// inbox repeats a few of each (the same options, the same agents), each distinct one read
/// once.
#[derive(serde::Deserialize)]
struct SqliteInboxRow<'a> {
    id: String,
    #[serde(borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow)]
    project: Cow<'a, str>,
    issue: Option<String>,
    artifact: Option<String>,
    block: Option<String>,
    question: String,
    #[serde(borrow)]
    options: &'a RawValue,
    #[serde(borrow)]
    state: Cow<'a, str>,
    answer: Option<Answer>,
    #[serde(borrow)]
    author: &'a RawValue,
    #[serde(borrow)]
    turn: Option<Cow<'a, str>>,
    turn_since: i64,
    created_at: i64,
    snoozed_until: Option<i64>,
    seq: i64,
}

/// The inbox's rows from SQLite's JSON array, each with its `turn_since` and `seq`.
fn sqlite_inbox_rows(json: &str) -> Result<Vec<(i64, i64, InboxEntry)>, StorageError> {
    let rows: Vec<SqliteInboxRow<'_>> = json_borrowed(json, "inbox rows")?;
    let mut options: HashMap<&str, Vec<AskOption>> = HashMap::new();
    let mut authors: HashMap<&str, Actor> = HashMap::new();
    rows.into_iter()
        .map(|r| {
            let o = match options.get(r.options.get()) {
                Some(o) => o.clone(),
                None => {
                    let o: Vec<AskOption> = json_of(&json_text(r.options)?, "ask options")?;
                    options.insert(r.options.get(), o.clone());
                    o
                }
            };
            let by = match authors.get(r.author.get()) {
                Some(a) => a.clone(),
                None => {
                    let a: Actor = json_of(&json_text(r.author)?, "actor")?;
                    authors.insert(r.author.get(), a.clone());
                    a
                }
            };
            let (turn_since, seq) = (r.turn_since, r.seq);
            let entry = inbox_entry(
                StoredInboxRow {
                    id: r.id,
                    kind: &r.kind,
                    project: &r.project,
                    issue: r.issue,
                    artifact: r.artifact,
                    block: r.block,
                    question: r.question,
                    state: &r.state,
                    answer: r.answer,
                    turn: r.turn.as_deref(),
                    turn_since,
                    created_at: r.created_at,
                    snoozed_until: r.snoozed_until,
                },
                o,
                by,
            )?;
            Ok((turn_since, seq, entry))
        })
        .collect()
}

/// The text of a JSON string.
fn json_text(s: &RawValue) -> Result<String, StorageError> {
    json_borrowed(s.get(), "inbox row")
}

fn json_borrowed<'a, T: serde::Deserialize<'a>>(s: &'a str, what: &str) -> Result<T, StorageError> {
    serde_json::from_str(s).map_err(|_| corrupt(what))
}

fn login_of(a: &Actor) -> Option<String> {
    match a {
        Actor::User { login } => Some(login.as_str().to_owned()),
        _ => None,
    }
}

fn thread_state_text(s: Option<ThreadState>) -> Option<String> {
    s.map(|s| {
        match s {
            ThreadState::Open => "open",
            ThreadState::Resolved => "resolved",
        }
        .to_owned()
    })
}

impl SqlTx {
    /// Rows of a query built with [`Args`].
    async fn rows(&mut self, sql: &str, a: &Args) -> Result<Vec<AnyRow>, StorageError> {
        sqlx::query_with(sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)
    }

    /// A full-text search of `table`'s `column` (asks' questions, comments' bodies): hits
    /// with `title` from `title_sql`, and how many match in all.
    #[allow(clippy::too_many_arguments)]
    async fn search_text(
        &mut self,
        table: &str,
        column: &str,
        words: &[String],
        any: bool,
        extra: &[(&str, String)],
        at: &str,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError> {
        let mut a = Args::default();
        let fts = format!("{table}_fts");
        let (from, matches, score, snippet) = match self.backend {
            Backend::Sqlite => {
                let joined = words
                    .iter()
                    .map(|w| fts_prefix(w))
                    .collect::<Vec<_>>()
                    .join(if any { " OR " } else { " " });
                (
                    format!("{fts} f JOIN {table} t ON t.rowid = f.rowid"),
                    format!("{fts} MATCH {}", a.push(joined)),
                    format!("-bm25({fts})"),
                    format!("snippet({fts}, 0, '', '', '…', 16)"),
                )
            }
            Backend::Postgres => {
                let joined = words
                    .iter()
                    .map(|w| pg_prefix(w))
                    .collect::<Vec<_>>()
                    .join(if any { " | " } else { " & " });
                let q = a.push(joined);
                (
                    format!("{table} t"),
                    format!("t.search @@ to_tsquery('simple', {q})"),
                    format!("ts_rank(t.search, to_tsquery('simple', {q}))::float8"),
                    format!(
                        "ts_headline('simple', t.{column}, to_tsquery('simple', {q}), \
                         'StartSel=\"\",StopSel=\"\",MaxWords=24,MinWords=8')"
                    ),
                )
            }
        };
        let mut filter = format!("WHERE {matches}");
        for (cond, v) in extra {
            filter.push_str(&format!(" AND t.{cond} = {}", a.push(v.clone())));
        }
        let total: i64 = sqlx::query_with(
            &format!("SELECT COUNT(*) AS n FROM {from} {filter}"),
            a.build(),
        )
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?
        .try_get("n")
        .map_err(db_err)?;
        let l = a.push(i64::from(limit));
        let sql = format!(
            "SELECT t.id AS id, t.{column} AS title, t.project AS project, t.{at} AS at, \
             t.issue AS issue, t.artifact AS artifact, \
             {score} AS score, {snippet} AS snippet FROM {from} {filter} \
             ORDER BY score DESC, t.{at} DESC, t.id LIMIT {l}"
        );
        let rows = self.rows(&sql, &a).await?;
        let hits = rows
            .iter()
            .map(|r| {
                let project: String = r.try_get("project").map_err(db_err)?;
                let title: String = r.try_get("title").map_err(db_err)?;
                Ok(Hit {
                    id: r.try_get("id").map_err(db_err)?,
                    issue: issue_key(r.try_get("issue").map_err(db_err)?)?,
                    artifact: r.try_get("artifact").map_err(db_err)?,
                    title: first_line(&title),
                    snippet: r.try_get("snippet").map_err(db_err)?,
                    project: ProjectKey::parse(&project),
                    at: time(r.try_get("at").map_err(db_err)?)?,
                    score: r.try_get("score").map_err(db_err)?,
                })
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok((hits, total))
    }
}

/// A search row's title: the text's first line, at most 200 characters.
fn first_line(t: &str) -> String {
    let line = t.lines().next().unwrap_or("");
    let mut out: String = line.chars().take(200).collect();
    if line.chars().count() > 200 {
        out.push('…');
    }
    out
}

#[async_trait]
impl AskTx for SqlTx {
    async fn insert_ask(&mut self, a: &Ask) -> Result<(), StorageError> {
        // `seq` orders asks made in one millisecond as they were made.
        sqlx::query(&format!(
            "INSERT INTO console_asks ({ASK_COLUMNS}, author_login, seq) SELECT \
             $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, \
             $22, COALESCE(MAX(seq), 0) + 1 FROM console_asks"
        ))
        .bind(a.id.as_str())
        .bind(a.kind.as_str())
        .bind(a.project.as_str())
        .bind(a.issue.as_ref().map(|k| k.as_str().to_owned()))
        .bind(a.artifact.clone())
        .bind(a.block.clone())
        .bind(a.question.as_str())
        .bind(text(&a.options))
        .bind(a.state.as_str())
        .bind(a.answer.as_ref().map(text))
        .bind(a.closed.as_ref().map(text))
        .bind(a.approval.as_ref().map(text))
        .bind(text(&a.followers))
        .bind(text(&a.author))
        .bind(a.author_session().map(str::to_owned))
        .bind(text(&a.worded_by))
        .bind(ms(&a.worded_at))
        .bind(a.turn.map(|t| t.as_str()))
        .bind(ms(&a.turn_since))
        .bind(ms(&a.created_at))
        .bind(ms(&a.updated_at))
        .bind(login_of(&a.author))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        if self.backend == Backend::Sqlite {
            sqlx::query(
                "INSERT INTO console_asks_fts (rowid, body) \
                 SELECT rowid, question FROM console_asks WHERE id = $1",
            )
            .bind(a.id.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn ask(&mut self, id: &str) -> Result<Option<Ask>, StorageError> {
        let lock = self.lock();
        sqlx::query(&format!(
            "SELECT {ASK_COLUMNS} FROM console_asks WHERE id = $1{lock}"
        ))
        .bind(id)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(ask_of)
        .transpose()
    }

    async fn update_ask(&mut self, a: &Ask) -> Result<(), StorageError> {
        let done = sqlx::query(
            "UPDATE console_asks SET question = $2, options = $3, state = $4, answer = $5, \
             closed = $6, approval = $7, followers = $8, worded_by = $9, worded_at = $10, \
             turn = $11, turn_since = $12, updated_at = $13, block = $14 WHERE id = $1",
        )
        .bind(a.id.as_str())
        .bind(a.question.as_str())
        .bind(text(&a.options))
        .bind(a.state.as_str())
        .bind(a.answer.as_ref().map(text))
        .bind(a.closed.as_ref().map(text))
        .bind(a.approval.as_ref().map(text))
        .bind(text(&a.followers))
        .bind(text(&a.worded_by))
        .bind(ms(&a.worded_at))
        .bind(a.turn.map(|t| t.as_str()))
        .bind(ms(&a.turn_since))
        .bind(ms(&a.updated_at))
        .bind(a.block.clone())
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        if done.rows_affected() == 0 {
            return Err(StorageError::Other("no such ask".into()));
        }
        if self.backend == Backend::Sqlite {
            sqlx::query(
                "UPDATE console_asks_fts SET body = $2 \
                 WHERE rowid = (SELECT rowid FROM console_asks WHERE id = $1) AND body <> $2",
            )
            .bind(a.id.as_str())
            .bind(a.question.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn asks(&mut self, f: &AskFilter) -> Result<Vec<Ask>, StorageError> {
        let mut a = Args::default();
        let mut conds: Vec<String> = Vec::new();
        if let Some(p) = &f.project {
            conds.push(format!("project = {}", a.push(p.as_str().to_owned())));
        }
        if let Some(k) = &f.issue {
            conds.push(format!("issue = {}", a.push(k.as_str().to_owned())));
        }
        if let Some(x) = &f.artifact {
            conds.push(format!("artifact = {}", a.push(x.clone())));
        }
        if let Some(s) = &f.author_session {
            conds.push(format!("author_session = {}", a.push(s.clone())));
        }
        if !f.states.is_empty() {
            let list: Vec<String> = f
                .states
                .iter()
                .map(|s| a.push(s.as_str().to_owned()))
                .collect();
            conds.push(format!("state IN ({})", list.join(", ")));
        }
        let filter = if conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conds.join(" AND "))
        };
        let sql = format!("SELECT {ASK_COLUMNS} FROM console_asks{filter} ORDER BY seq");
        self.rows(&sql, &a).await?.iter().map(ask_of).collect()
    }

    async fn asks_by_id(&mut self, ids: &[String]) -> Result<Vec<Ask>, StorageError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut a = Args::default();
        let list = a.list(self.backend, ids);
        let sql = format!("SELECT {ASK_COLUMNS} FROM console_asks WHERE id IN {list}");
        self.rows(&sql, &a).await?.iter().map(ask_of).collect()
    }

    async fn open_asks_of(&mut self, issues: &[IssueKey]) -> Result<Vec<Ask>, StorageError> {
        if issues.is_empty() {
            return Ok(Vec::new());
        }
        let mut a = Args::default();
        let keys: Vec<&str> = issues.iter().map(IssueKey::as_str).collect();
        let list = a.list(self.backend, &keys);
        let sql = format!(
            "SELECT {ASK_COLUMNS} FROM console_asks WHERE issue IN {list} AND state = 'open' \
             ORDER BY seq"
        );
        self.rows(&sql, &a).await?.iter().map(ask_of).collect()
    }

    async fn open_ask_counts(
        &mut self,
        sessions: &[String],
    ) -> Result<Vec<(String, i64)>, StorageError> {
        if sessions.is_empty() {
            return Ok(Vec::new());
        }
        let mut a = Args::default();
        let list = a.list(self.backend, sessions);
        let sql = format!(
            "SELECT author_session AS s, COUNT(*) AS n FROM console_asks \
             WHERE author_session IN {list} AND state = 'open' GROUP BY author_session"
        );
        self.rows(&sql, &a)
            .await?
            .iter()
            .map(|r| {
                Ok((
                    r.try_get("s").map_err(db_err)?,
                    r.try_get("n").map_err(db_err)?,
                ))
            })
            .collect()
    }

    async fn add_wording(&mut self, ask: &str, w: &Wording) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_ask_wordings (ask, n, question, options, by_actor, at) \
             SELECT $1, COALESCE(MAX(n), 0) + 1, $2, $3, $4, $5 FROM console_ask_wordings WHERE ask = $1",
        )
        .bind(ask)
        .bind(w.question.as_str())
        .bind(text(&w.options))
        .bind(text(&w.by))
        .bind(ms(&w.at))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn wordings(&mut self, ask: &str) -> Result<Vec<Wording>, StorageError> {
        sqlx::query(
            "SELECT question, options, by_actor, at FROM console_ask_wordings WHERE ask = $1 ORDER BY n",
        )
        .bind(ask)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            Ok(Wording {
                question: r.try_get("question").map_err(db_err)?,
                options: json_of(
                    &r.try_get::<String, _>("options").map_err(db_err)?,
                    "ask options",
                )?,
                by: json_of(&r.try_get::<String, _>("by_actor").map_err(db_err)?, "actor")?,
                at: time(r.try_get("at").map_err(db_err)?)?,
            })
        })
        .collect()
    }

    async fn add_answer(&mut self, ask: &str, w: &Answer) -> Result<(), StorageError> {
        sqlx::query("UPDATE console_ask_answers SET current = 0 WHERE ask = $1 AND current = 1")
            .bind(ask)
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        sqlx::query(&format!(
            "INSERT INTO console_ask_answers (ask, n, options, text, by_actor, by_login, at, current, seq) \
             SELECT $1, COALESCE(MAX(n), 0) + 1, $2, $3, $4, $5, $6, 1, {NEXT_SEQ} \
             FROM console_ask_answers WHERE ask = $1"
        ))
        .bind(ask)
        .bind(text(&w.options))
        .bind(w.text.clone())
        .bind(text(&w.by))
        .bind(login_of(&w.by))
        .bind(ms(&w.at))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn answers(&mut self, ask: &str) -> Result<Vec<PastAnswer>, StorageError> {
        sqlx::query(
            "SELECT options, text, by_actor, at, current FROM console_ask_answers WHERE ask = $1 ORDER BY n",
        )
        .bind(ask)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(past_answer_of)
        .collect()
    }

    async fn inbox(
        &mut self,
        f: &InboxFilter,
        within: Option<&InboxScope>,
    ) -> Result<Vec<InboxEntry>, StorageError> {
        let mut a = Args::default();
        let me = a.push(f.login.as_str().to_owned());
        let mut conds = vec!["a.turn IS NOT NULL".to_owned()];
        if let Some(w) = within {
            // Each list as one JSON array parameter.
            let mut any = Vec::new();
            for (column, values) in [
                ("a.id", &w.asks),
                ("a.issue", &w.issues),
                ("a.artifact", &w.artifacts),
            ] {
                if values.is_empty() {
                    continue;
                }
                let p = a.push(text(values));
                any.push(match self.backend {
                    Backend::Sqlite => format!("{column} IN (SELECT value FROM json_each({p}))"),
                    Backend::Postgres => {
                        format!("{column} IN (SELECT jsonb_array_elements_text({p}::jsonb))")
                    }
                });
            }
            if any.is_empty() {
                return Ok(Vec::new());
            }
            conds.push(format!("({})", any.join(" OR ")));
        }
        if let Some(p) = &f.project {
            conds.push(format!("a.project = {}", a.push(p.as_str().to_owned())));
        }
        match &f.assignee {
            AssigneeFilter::MineAndUnassigned(l) => conds.push(format!(
                "(i.assignee = {} OR i.assignee IS NULL)",
                a.push(l.as_str().to_owned())
            )),
            AssigneeFilter::Person(l) => {
                conds.push(format!("i.assignee = {}", a.push(l.as_str().to_owned())))
            }
            AssigneeFilter::Unassigned => conds.push("i.assignee IS NULL".to_owned()),
        }
        let from = format!(
            "FROM console_asks a \
             LEFT JOIN console_issues i ON i.key = a.issue \
             LEFT JOIN console_ask_snoozes s ON s.ask = a.id AND s.login = {me} \
             WHERE {}",
            conds.join(" AND ")
        );
        // Each row with its order (`turn_since`, then `seq`), sorted here.
        let mut rows: Vec<(i64, i64, InboxEntry)> = match self.backend {
            // SQLite: one row holding every inbox row as a JSON array made by the database.
            // A person's inbox may hold thousands of asks, and the driver hands SQLite's rows
            // over one at a time through a channel from its worker thread, a wake-up each.
            // Each row is an array (no keys to write and match), its options and author as
            // the stored text (not parsed and written again), unordered (an ordered aggregate
            // sorts the rows' JSON through a temporary table).
            Backend::Sqlite => {
                let sql = format!(
                    "SELECT json_group_array(json_array(a.id, a.kind, a.project, a.issue, \
                     a.artifact, a.block, a.question, a.options, a.state, json(a.answer), a.author, \
                     a.turn, a.turn_since, a.created_at, s.until, a.seq)) \
                     AS rows {from}"
                );
                let rows: Option<String> = sqlx::query_with(&sql, a.build())
                    .fetch_one(&mut *self.tx)
                    .await
                    .map_err(db_err)?
                    .try_get("rows")
                    .map_err(db_err)?;
                match rows {
                    Some(r) => sqlite_inbox_rows(&r)?,
                    None => Vec::new(),
                }
            }
            // PostgreSQL streams rows over its socket; building JSON there costs more than
            // reading them.
            Backend::Postgres => {
                let sql = format!(
                    "SELECT a.id, a.kind, a.project, a.issue, a.artifact, a.block, a.question, \
                     a.options, a.state, a.answer, a.author, a.turn, a.turn_since, a.created_at, \
                     s.until AS snoozed_until, a.seq {from}"
                );
                self.rows(&sql, &a)
                    .await?
                    .iter()
                    .map(|r| {
                        let g = |c: &str| -> Result<String, StorageError> {
                            r.try_get(c).map_err(db_err)
                        };
                        let go = |c: &str| -> Result<Option<String>, StorageError> {
                            r.try_get(c).map_err(db_err)
                        };
                        let turn_since: i64 = r.try_get("turn_since").map_err(db_err)?;
                        let seq: i64 = r.try_get("seq").map_err(db_err)?;
                        let entry = inbox_entry(
                            StoredInboxRow {
                                id: g("id")?,
                                kind: &g("kind")?,
                                project: &g("project")?,
                                issue: go("issue")?,
                                artifact: go("artifact")?,
                                block: go("block")?,
                                question: g("question")?,
                                state: &g("state")?,
                                answer: go("answer")?.map(|x| json_of(&x, "answer")).transpose()?,
                                turn: go("turn")?.as_deref(),
                                turn_since,
                                created_at: r.try_get("created_at").map_err(db_err)?,
                                snoozed_until: r.try_get("snoozed_until").map_err(db_err)?,
                            },
                            json_of(&g("options")?, "ask options")?,
                            json_of(&g("author")?, "actor")?,
                        )?;
                        Ok((turn_since, seq, entry))
                    })
                    .collect::<Result<_, StorageError>>()?
            }
        };
        // Oldest turn first (`seq` orders asks made in one millisecond as they were made).
        rows.sort_unstable_by_key(|(turn_since, seq, _)| (*turn_since, *seq));
        Ok(rows
            .into_iter()
            .map(|(_, seq, mut e)| {
                e.seq = seq;
                e
            })
            .collect())
    }

    async fn snooze(&mut self, login: &Login, ask: &str, until: Time) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_ask_snoozes (login, ask, until) VALUES ($1, $2, $3) \
             ON CONFLICT (login, ask) DO UPDATE SET until = $3",
        )
        .bind(login.as_str())
        .bind(ask)
        .bind(ms(&until))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn unsnooze(&mut self, login: &Login, ask: &str) -> Result<(), StorageError> {
        sqlx::query("DELETE FROM console_ask_snoozes WHERE login = $1 AND ask = $2")
            .bind(login.as_str())
            .bind(ask)
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn snoozed_until(
        &mut self,
        login: &Login,
        ask: &str,
    ) -> Result<Option<Time>, StorageError> {
        sqlx::query("SELECT until FROM console_ask_snoozes WHERE login = $1 AND ask = $2")
            .bind(login.as_str())
            .bind(ask)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(db_err)?
            .map(|r| time(r.try_get("until").map_err(db_err)?))
            .transpose()
    }

    async fn answers_by(
        &mut self,
        login: &Login,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<AnswerEntry>, i64), StorageError> {
        let total: i64 = sqlx::query(
            "SELECT (SELECT COUNT(*) FROM console_ask_answers WHERE by_login = $1) + \
             (SELECT COUNT(*) FROM console_comments WHERE author_login = $1 AND ask IS NOT NULL) AS n",
        )
        .bind(login.as_str())
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?
        .try_get("n")
        .map_err(db_err)?;
        let rows = sqlx::query(
            "SELECT kind, at, ask, options, text, by_actor, current, comment_id, body FROM ( \
               SELECT CAST('answer' AS TEXT) AS kind, at, ask, options, text, by_actor, current, \
                 CAST(NULL AS TEXT) AS comment_id, CAST(NULL AS TEXT) AS body, seq \
               FROM console_ask_answers WHERE by_login = $1 \
               UNION ALL \
               SELECT CAST('reply' AS TEXT) AS kind, created_at AS at, ask, CAST(NULL AS TEXT) AS options, \
                 CAST(NULL AS TEXT) AS text, CAST(NULL AS TEXT) AS by_actor, CAST(0 AS BIGINT) AS current, \
                 id AS comment_id, body, seq \
               FROM console_comments WHERE author_login = $1 AND ask IS NOT NULL \
             ) r ORDER BY at DESC, seq DESC LIMIT $2 OFFSET $3",
        )
        .bind(login.as_str())
        .bind(i64::from(limit))
        .bind(i64::from(offset))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?;
        let mut ids: Vec<String> = Vec::new();
        for r in &rows {
            let id: String = r.try_get("ask").map_err(db_err)?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        let asks = self.asks_by_id(&ids).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let id: String = r.try_get("ask").map_err(db_err)?;
            let ask = asks
                .iter()
                .find(|a| a.id == id)
                .cloned()
                .ok_or_else(|| corrupt("answer's ask"))?;
            let kind: String = r.try_get("kind").map_err(db_err)?;
            out.push(if kind == "answer" {
                AnswerEntry::Answer {
                    ask,
                    answer: past_answer_of(r)?,
                }
            } else {
                AnswerEntry::Reply {
                    ask,
                    comment_id: r.try_get("comment_id").map_err(db_err)?,
                    body: r.try_get("body").map_err(db_err)?,
                    at: time(r.try_get("at").map_err(db_err)?)?,
                }
            });
        }
        Ok((out, total))
    }

    async fn search_asks(
        &mut self,
        words: &[String],
        any: bool,
        project: Option<&ProjectKey>,
        answered: bool,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError> {
        let mut extra: Vec<(&str, String)> = Vec::new();
        if let Some(p) = project {
            extra.push(("project", p.as_str().to_owned()));
        }
        if answered {
            extra.push(("state", AskState::Answered.as_str().to_owned()));
        }
        self.search_text(
            "console_asks",
            "question",
            words,
            any,
            &extra,
            "updated_at",
            limit,
        )
        .await
    }

    async fn insert_comment(&mut self, c: &Comment) -> Result<(), StorageError> {
        sqlx::query(&format!(
            "INSERT INTO console_comments ({COMMENT_COLUMNS}, author_login, seq) SELECT \
             $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, {NEXT_SEQ}"
        ))
        .bind(c.id.as_str())
        .bind(c.thread_id.as_str())
        .bind(c.parent.clone())
        .bind(c.project.as_str())
        .bind(c.issue.as_ref().map(|k| k.as_str().to_owned()))
        .bind(c.artifact.clone())
        .bind(c.ask.clone())
        .bind(c.quote.as_ref().map(text))
        .bind(c.block.clone())
        .bind(c.body.as_str())
        .bind(text(&c.author))
        .bind(c.suggestion.as_ref().map(text))
        .bind(text(&c.mentions))
        .bind(thread_state_text(c.thread_state))
        .bind(ms(&c.created_at))
        .bind(c.edited_at.as_ref().map(ms))
        .bind(login_of(&c.author))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        if self.backend == Backend::Sqlite {
            sqlx::query(
                "INSERT INTO console_comments_fts (rowid, body) \
                 SELECT rowid, body FROM console_comments WHERE id = $1",
            )
            .bind(c.id.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn comment(&mut self, id: &str) -> Result<Option<Comment>, StorageError> {
        let lock = self.lock();
        sqlx::query(&format!(
            "SELECT {COMMENT_COLUMNS} FROM console_comments WHERE id = $1{lock}"
        ))
        .bind(id)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(comment_of)
        .transpose()
    }

    async fn update_comment(&mut self, c: &Comment) -> Result<(), StorageError> {
        sqlx::query(
            "UPDATE console_comments SET body = $2, suggestion = $3, mentions = $4, \
             thread_state = $5, edited_at = $6 WHERE id = $1",
        )
        .bind(c.id.as_str())
        .bind(c.body.as_str())
        .bind(c.suggestion.as_ref().map(text))
        .bind(text(&c.mentions))
        .bind(thread_state_text(c.thread_state))
        .bind(c.edited_at.as_ref().map(ms))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        if self.backend == Backend::Sqlite {
            sqlx::query(
                "UPDATE console_comments_fts SET body = $2 \
                 WHERE rowid = (SELECT rowid FROM console_comments WHERE id = $1) AND body <> $2",
            )
            .bind(c.id.as_str())
            .bind(c.body.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn comments(&mut self, f: &CommentFilter) -> Result<Vec<Comment>, StorageError> {
        let mut a = Args::default();
        let mut conds: Vec<String> = Vec::new();
        if let Some(k) = &f.issue {
            conds.push(format!("issue = {}", a.push(k.as_str().to_owned())));
        }
        if let Some(x) = &f.artifact {
            conds.push(format!("artifact = {}", a.push(x.clone())));
        }
        if let Some(x) = &f.ask {
            conds.push(format!("ask = {}", a.push(x.clone())));
        }
        if let Some(x) = &f.thread {
            conds.push(format!("thread_id = {}", a.push(x.clone())));
        }
        let filter = if conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conds.join(" AND "))
        };
        let sql = format!("SELECT {COMMENT_COLUMNS} FROM console_comments{filter} ORDER BY seq");
        self.rows(&sql, &a).await?.iter().map(comment_of).collect()
    }

    async fn search_comments(
        &mut self,
        words: &[String],
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError> {
        let extra: Vec<(&str, String)> = project
            .map(|p| ("project", p.as_str().to_owned()))
            .into_iter()
            .collect();
        self.search_text(
            "console_comments",
            "body",
            words,
            false,
            &extra,
            "created_at",
            limit,
        )
        .await
    }

    async fn unread_comment_threads(
        &mut self,
        login: &Login,
        issue: Option<&IssueKey>,
        artifact: Option<&str>,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<(Comment, Comment)>, i64), StorageError> {
        let mut a = Args::default();
        let me = a.push(login.as_str().to_owned());
        let mut filter = String::new();
        if let Some(k) = issue {
            filter = format!(" AND root.issue = {}", a.push(k.as_str().to_owned()));
        }
        if let Some(x) = artifact {
            filter.push_str(&format!(" AND root.artifact = {}", a.push(x.to_owned())));
        }
        // From the person's own comments (by author): each thread's last one (`seq` orders
        // within a millisecond), then the thread's newest comment by someone else, later than
        // that and than the read mark.
        let from = format!(
            "FROM (SELECT thread_id, MAX(seq) AS last_seq FROM console_comments \
                   WHERE author_login = {me} AND ask IS NULL GROUP BY thread_id) w \
             JOIN console_comments root ON root.id = w.thread_id \
             JOIN console_comments nr ON nr.id = (SELECT r.id FROM console_comments r \
                 WHERE r.thread_id = w.thread_id AND (r.author_login IS NULL OR r.author_login <> {me}) \
                 ORDER BY r.created_at DESC, r.seq DESC LIMIT 1) \
             LEFT JOIN console_thread_reads tr ON tr.login = {me} AND tr.thread_id = w.thread_id \
             WHERE nr.seq > w.last_seq{filter} \
             AND (tr.read_through IS NULL OR nr.created_at > tr.read_through)"
        );
        let total: i64 = sqlx::query_with(&format!("SELECT COUNT(*) AS n {from}"), a.build())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)?;
        let l = a.push(i64::from(limit));
        let o = a.push(i64::from(offset));
        let sql = format!(
            "SELECT {}, {} {from} ORDER BY nr.created_at DESC, root.id LIMIT {l} OFFSET {o}",
            columns_as(COMMENT_COLUMNS, "root", "t_"),
            columns_as(COMMENT_COLUMNS, "nr", "n_"),
        );
        let threads = self
            .rows(&sql, &a)
            .await?
            .iter()
            .map(|r| Ok((comment_at(r, "t_")?, comment_at(r, "n_")?)))
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok((threads, total))
    }

    async fn unread_ask_threads(
        &mut self,
        login: &Login,
        issue: Option<&IssueKey>,
        artifact: Option<&str>,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<(Ask, AskWrite)>, i64), StorageError> {
        let mut a = Args::default();
        let me = a.push(login.as_str().to_owned());
        // Less the open asks the person's inbox lists (`inbox` with no filter: someone's turn,
        // on an issue assigned to them or to nobody, or on a document with no issue).
        let mut filter = format!(
            "NOT (a.state = 'open' AND a.turn IS NOT NULL \
             AND (i.assignee IS NULL OR i.assignee = {me}))"
        );
        if let Some(k) = issue {
            filter.push_str(&format!(" AND a.issue = {}", a.push(k.as_str().to_owned())));
        }
        if let Some(x) = artifact {
            filter.push_str(&format!(" AND a.artifact = {}", a.push(x.to_owned())));
        }
        // `w`: the asks the person wrote in, with the `seq` of their last reply or answer (one
        // count over both; 0 when they only asked). `u`: with each ask's newest reply and
        // newest answer by someone else. `v`: the newer of the two.
        let newer = "(n.ask IS NULL OR (c.id IS NOT NULL AND (c.created_at > n.at \
             OR (c.created_at = n.at AND c.seq > n.seq))))";
        let from = format!(
            "FROM (SELECT u.ask AS ask, u.last_seq AS last_seq, u.c_id AS c_id, u.a_n AS a_n, \
                 CASE WHEN {newer} THEN c.created_at ELSE n.at END AS nr_at, \
                 CASE WHEN {newer} THEN c.seq ELSE n.seq END AS nr_seq, \
                 CASE WHEN {newer} THEN 'reply' ELSE 'answer' END AS nr_kind \
               FROM (SELECT w.ask AS ask, w.last_seq AS last_seq, \
                   (SELECT r.id FROM console_comments r WHERE r.ask = w.ask \
                      AND (r.author_login IS NULL OR r.author_login <> {me}) \
                      ORDER BY r.created_at DESC, r.seq DESC LIMIT 1) AS c_id, \
                   (SELECT x.n FROM console_ask_answers x WHERE x.ask = w.ask \
                      AND (x.by_login IS NULL OR x.by_login <> {me}) \
                      ORDER BY x.at DESC, x.seq DESC LIMIT 1) AS a_n \
                 FROM (SELECT mine.ask AS ask, MAX(mine.seq) AS last_seq FROM ( \
                     SELECT id AS ask, CAST(0 AS BIGINT) AS seq FROM console_asks \
                       WHERE author_login = {me} \
                     UNION ALL SELECT ask, seq FROM console_comments \
                       WHERE author_login = {me} AND ask IS NOT NULL \
                     UNION ALL SELECT ask, seq FROM console_ask_answers WHERE by_login = {me} \
                   ) mine GROUP BY mine.ask) w \
                 JOIN console_asks a ON a.id = w.ask \
                 LEFT JOIN console_issues i ON i.key = a.issue \
                 WHERE {filter}) u \
               LEFT JOIN console_comments c ON c.id = u.c_id \
               LEFT JOIN console_ask_answers n ON n.ask = u.ask AND n.n = u.a_n) v \
             JOIN console_asks a ON a.id = v.ask \
             LEFT JOIN console_comments c ON c.id = v.c_id \
             LEFT JOIN console_ask_answers n ON n.ask = v.ask AND n.n = v.a_n \
             LEFT JOIN console_thread_reads tr ON tr.login = {me} AND tr.thread_id = v.ask \
             WHERE v.nr_seq > v.last_seq \
             AND (tr.read_through IS NULL OR v.nr_at > tr.read_through)"
        );
        let total: i64 = sqlx::query_with(&format!("SELECT COUNT(*) AS n {from}"), a.build())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)?;
        let l = a.push(i64::from(limit));
        let o = a.push(i64::from(offset));
        let sql = format!(
            "SELECT {}, {}, n.options AS a_options, n.text AS a_text, n.by_actor AS a_by_actor, \
             n.at AS a_at, v.nr_kind AS nr_kind {from} \
             ORDER BY v.nr_at DESC, v.ask LIMIT {l} OFFSET {o}",
            columns_as(ASK_COLUMNS, "a", ""),
            columns_as(COMMENT_COLUMNS, "c", "c_"),
        );
        let threads = self
            .rows(&sql, &a)
            .await?
            .iter()
            .map(|r| {
                let kind: String = r.try_get("nr_kind").map_err(db_err)?;
                let write = if kind == "reply" {
                    AskWrite::Reply(Box::new(comment_at(r, "c_")?))
                } else {
                    AskWrite::Answer(Answer {
                        options: json_of(
                            &r.try_get::<String, _>("a_options").map_err(db_err)?,
                            "answer options",
                        )?,
                        text: r.try_get("a_text").map_err(db_err)?,
                        by: json_of(
                            &r.try_get::<String, _>("a_by_actor").map_err(db_err)?,
                            "actor",
                        )?,
                        at: time(r.try_get("a_at").map_err(db_err)?)?,
                    })
                };
                Ok((ask_of(r)?, write))
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok((threads, total))
    }

    async fn wrote_in_comment_thread(
        &mut self,
        login: &Login,
        thread_id: &str,
    ) -> Result<bool, StorageError> {
        let row = sqlx::query(
            "SELECT 1 AS x FROM console_comments \
             WHERE thread_id = $1 AND author_login = $2 AND ask IS NULL LIMIT 1",
        )
        .bind(thread_id)
        .bind(login.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(row.is_some())
    }

    async fn wrote_in_ask(&mut self, login: &Login, ask: &str) -> Result<bool, StorageError> {
        let row = sqlx::query(
            "SELECT 1 AS x FROM console_asks WHERE id = $1 AND author_login = $2 \
             UNION ALL SELECT 1 AS x FROM console_comments WHERE ask = $1 AND author_login = $2 \
             UNION ALL SELECT 1 AS x FROM console_ask_answers WHERE ask = $1 AND by_login = $2 \
             LIMIT 1",
        )
        .bind(ask)
        .bind(login.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(row.is_some())
    }

    async fn insert_review(&mut self, r: &Review) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_reviews (id, artifact, version, outcome, body, by_actor, at, ask) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(r.id.as_str())
        .bind(r.artifact.as_str())
        .bind(r.version)
        .bind(r.outcome.as_str())
        .bind(r.body.clone())
        .bind(text(&r.by))
        .bind(ms(&r.at))
        .bind(r.ask.clone())
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn reviews(&mut self, artifact: &str) -> Result<Vec<Review>, StorageError> {
        sqlx::query(
            "SELECT id, artifact, version, outcome, body, by_actor, at, ask FROM console_reviews \
             WHERE artifact = $1 ORDER BY at, id",
        )
        .bind(artifact)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            Ok(Review {
                id: r.try_get("id").map_err(db_err)?,
                artifact: r.try_get("artifact").map_err(db_err)?,
                version: r.try_get("version").map_err(db_err)?,
                outcome: ReviewOutcome::parse(&r.try_get::<String, _>("outcome").map_err(db_err)?)
                    .ok_or_else(|| corrupt("review outcome"))?,
                body: r.try_get("body").map_err(db_err)?,
                by: json_of(
                    &r.try_get::<String, _>("by_actor").map_err(db_err)?,
                    "actor",
                )?,
                at: time(r.try_get("at").map_err(db_err)?)?,
                ask: r.try_get("ask").map_err(db_err)?,
            })
        })
        .collect()
    }

    async fn next_issue_sequence(&mut self, key: &IssueKey, at: Time) -> Result<i64, StorageError> {
        sqlx::query(
            "UPDATE console_issues SET sequence = sequence + 1, updated_at = $2 WHERE key = $1 \
             RETURNING sequence",
        )
        .bind(key.as_str())
        .bind(ms(&at))
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .ok_or_else(|| StorageError::Other("no such issue".into()))?
        .try_get("sequence")
        .map_err(db_err)
    }
}

fn past_answer_of(r: &AnyRow) -> Result<PastAnswer, StorageError> {
    Ok(PastAnswer {
        options: json_of(
            &r.try_get::<String, _>("options").map_err(db_err)?,
            "answer options",
        )?,
        text: r.try_get("text").map_err(db_err)?,
        by: json_of(
            &r.try_get::<String, _>("by_actor").map_err(db_err)?,
            "actor",
        )?,
        at: time(r.try_get("at").map_err(db_err)?)?,
        current: r.try_get::<i64, _>("current").map_err(db_err)? != 0,
    })
}
