//! A person's inbox ([`AskTx::inbox`]: the asks whose turn it is, on issues assigned to them
//! or to nobody, with their snoozes) and their answers and replies
//! ([`AskTx::answers_by`]).
//!
//! [`AskTx::inbox`]: countersign_console_core::work::AskTx::inbox
//! [`AskTx::answers_by`]: countersign_console_core::work::AskTx::answers_by

use std::borrow::Cow;
use std::collections::HashMap;

use countersign_common::sql::{Backend, db_err};
use countersign_console_core::ids::{ArtifactId, AskId, CommentId, Login};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::asks::{
    Answer, AnswerEntry, AskHead, AskKind, AskOption, AskState, AssigneeFilter, InboxAsk,
    InboxEntry, InboxFilter, InboxScope, Turn,
};
use countersign_console_core::work::{Actor, AskTx};
use serde_json::value::RawValue;
use sqlx::Row;
use sqlx::any::AnyRow;

use super::rows::{issue_key, past_answer_of, project_of};
use crate::time;
use crate::work::{Args, AskStore, corrupt, id_in, id_of, json_of, text};

/// An inbox row with its order: its `turn_since`, then its `seq`.
type Ordered = (i64, i64, InboxEntry);

impl AskStore<'_> {
    /// [`AskTx::inbox`](countersign_console_core::work::AskTx::inbox): the asks whose turn it
    /// is that the filter (and `within`, when given) selects, oldest turn first.
    pub(super) async fn inbox_entries(
        &mut self,
        f: &InboxFilter,
        within: Option<&InboxScope>,
    ) -> Result<Vec<InboxEntry>, StorageError> {
        let mut a = Args::default();
        let me = a.push(f.login.as_str().to_owned());
        let mut conds = vec!["a.turn IS NOT NULL".to_owned()];
        if let Some(w) = within {
            let Some(cond) = within_cond(&mut a, self.backend, w) else {
                return Ok(Vec::new());
            };
            conds.push(cond);
        }
        if let Some(p) = &f.project {
            conds.push(format!("a.project = {}", a.push(p.as_str().to_owned())));
        }
        conds.push(assignee_cond(&mut a, &f.assignee));
        let from = format!(
            "FROM console_asks a \
             LEFT JOIN console_issues i ON i.key = a.issue \
             LEFT JOIN console_ask_snoozes s ON s.ask = a.id AND s.login = {me} \
             WHERE {}",
            conds.join(" AND ")
        );
        // Each row with its order (`turn_since`, then `seq`), sorted here.
        let mut rows = match self.backend {
            Backend::Sqlite => self.sqlite_inbox(&from, &a).await?,
            Backend::Postgres => self.postgres_inbox(&from, &a).await?,
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

    /// SQLite: one row holding every inbox row as a JSON array made by the database.
    /// A person's inbox may hold thousands of asks, and the driver hands SQLite's rows
    /// over one at a time through a channel from its worker thread, a wake-up each.
    /// Each row is an array (no keys to write and match), its options and author as
    /// the stored text (not parsed and written again), unordered (an ordered aggregate
    /// sorts the rows' JSON through a temporary table).
    async fn sqlite_inbox(&mut self, from: &str, a: &Args) -> Result<Vec<Ordered>, StorageError> {
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
            Some(r) => sqlite_inbox_rows(&r),
            None => Ok(Vec::new()),
        }
    }

    /// PostgreSQL streams rows over its socket; building JSON there costs more than
    /// reading them.
    async fn postgres_inbox(&mut self, from: &str, a: &Args) -> Result<Vec<Ordered>, StorageError> {
        let sql = format!(
            "SELECT a.id, a.kind, a.project, a.issue, a.artifact, a.block, a.question, \
             a.options, a.state, a.answer, a.author, a.turn, a.turn_since, a.created_at, \
             s.until AS snoozed_until, a.seq {from}"
        );
        self.rows(&sql, a)
            .await?
            .iter()
            .map(postgres_inbox_row)
            .collect::<Result<_, StorageError>>()
    }

    /// [`AskTx::answers_by`](countersign_console_core::work::AskTx::answers_by): a person's
    /// answers and replies, newest first, and how many there are.
    pub(super) async fn answer_entries(
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
        let mut ids: Vec<AskId> = Vec::new();
        for r in &rows {
            let id = id_in(r, "ask", AskId::parse)?;
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        let asks = self.asks_by_id(&ids).await?;
        let mut out = Vec::with_capacity(rows.len());
        for r in &rows {
            let id = id_in(r, "ask", AskId::parse)?;
            let ask = asks
                .iter()
                .find(|a| a.head.id == id)
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
                    comment_id: id_in(r, "comment_id", CommentId::parse)?,
                    body: r.try_get("body").map_err(db_err)?,
                    at: time(r.try_get("at").map_err(db_err)?)?,
                }
            });
        }
        Ok((out, total))
    }
}

/// The condition of an inbox narrowed to some asks, issues and documents (each list as one
/// JSON array parameter): one of them matches. `None` when all are empty, so nothing can.
fn within_cond(a: &mut Args, backend: Backend, w: &InboxScope) -> Option<String> {
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
        any.push(match backend {
            Backend::Sqlite => format!("{column} IN (SELECT value FROM json_each({p}))"),
            Backend::Postgres => {
                format!("{column} IN (SELECT jsonb_array_elements_text({p}::jsonb))")
            }
        });
    }
    if any.is_empty() {
        return None;
    }
    Some(format!("({})", any.join(" OR ")))
}

/// The condition of an inbox's assignee filter, on the ask's issue.
fn assignee_cond(a: &mut Args, f: &AssigneeFilter) -> String {
    match f {
        AssigneeFilter::MineAndUnassigned(l) => format!(
            "(i.assignee = {} OR i.assignee IS NULL)",
            a.push(l.as_str().to_owned())
        ),
        AssigneeFilter::Person(l) => format!("i.assignee = {}", a.push(l.as_str().to_owned())),
        AssigneeFilter::Unassigned => "i.assignee IS NULL".to_owned(),
    }
}

/// One of PostgreSQL's inbox rows, with its order.
fn postgres_inbox_row(r: &AnyRow) -> Result<Ordered, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    let go = |c: &str| -> Result<Option<String>, StorageError> { r.try_get(c).map_err(db_err) };
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
            head: AskHead {
                id: id_of("id", &r.id, AskId::parse)?,
                kind: AskKind::parse(r.kind).ok_or_else(|| corrupt("ask kind"))?,
                project: project_of(r.project)?,
                issue: issue_key(r.issue)?,
                artifact: r
                    .artifact
                    .map(|a| id_of("artifact", &a, ArtifactId::parse))
                    .transpose()?,
                block: r.block,
                question: r.question,
                options,
                state: AskState::parse(r.state).ok_or_else(|| corrupt("ask state"))?,
                answer: r.answer,
            },
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
fn sqlite_inbox_rows(json: &str) -> Result<Vec<Ordered>, StorageError> {
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
