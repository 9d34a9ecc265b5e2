//! The messages' full-text search ([`MessageTx::search_messages`]): SQLite an FTS5 table keyed
//! by the message's `seq`, scored by `bm25()`; PostgreSQL a generated `tsvector`, scored by
//! `ts_rank`. Search words are prefix queries; the newest matches are scored and ranked; a
//! broadcast's copies are one match.
//!
//! [`MessageTx::search_messages`]: countersign_console_core::work::messages::MessageTx::search_messages

use countersign_common::sql::{Backend, db_err};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::{Hit, IssueKey, ProjectKey};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::time;
use crate::work::{Args, MessageStore, fts_prefix, pg_prefix};

/// A search's statement parts on one backend: what it selects from, its match condition,
/// and the expressions of a row's score and snippet.
struct Matching {
    from: String,
    matches: String,
    score: String,
    snippet: String,
}

pub(super) async fn search_messages(
    tx: &mut MessageStore<'_>,
    words: &[String],
    any: bool,
    project: Option<&ProjectKey>,
    limit: u32,
) -> Result<(Vec<Hit>, i64), StorageError> {
    let mut a = Args::default();
    let sql = message_statement(tx.backend, &mut a, words, any, project, limit);
    let rows = sqlx::query_with(&sql, a.build())
        .fetch_all(&mut *tx.tx)
        .await
        .map_err(db_err)?;
    message_hits(&rows, limit)
}

/// The statement of [`search_messages`], its values pushed to `a`, as search's rows: `id`,
/// `title` (the whole body), `project` (none: the issue's), `issue`, `artifact` (none),
/// `broadcast`, `at`, `score`, `snippet`; [`message_hits`] reads them.
pub(crate) fn message_statement(
    backend: Backend,
    a: &mut Args,
    words: &[String],
    any: bool,
    project: Option<&ProjectKey>,
    limit: u32,
) -> String {
    let Matching {
        from,
        matches,
        score,
        snippet,
    } = match backend {
        Backend::Sqlite => sqlite_matching(a, words, any),
        Backend::Postgres => postgres_matching(a, words, any),
    };
    let mut filter = format!("WHERE {matches}");
    if let Some(p) = project {
        filter.push_str(&format!(
            " AND m.issue LIKE {}",
            a.push(format!("{}-%", p.as_str()))
        ));
    }
    // A broadcast's copies (one to each session) are one match: its first copy stands for
    // them (the broadcast index finds it).
    filter.push_str(
        " AND (m.broadcast IS NULL OR m.seq = \
         (SELECT MIN(b.seq) FROM console_messages b WHERE b.broadcast = m.broadcast))",
    );
    // Every word (the search route): the newest `limit + 1` matches in the index's order,
    // scored, ranked here; neither every match's score nor their count is read (issue 48).
    let l = a.push(i64::from(limit) + 1);
    let order = if any {
        "score DESC, m.created_at DESC, m.id"
    } else {
        "m.seq DESC"
    };
    format!(
        "SELECT m.id AS id, m.body AS title, CAST(NULL AS TEXT) AS project, m.issue AS issue, \
         CAST(NULL AS TEXT) AS artifact, m.broadcast AS broadcast, m.created_at AS at, \
         {score} AS score, {snippet} AS snippet FROM {from} {filter} \
         ORDER BY {order} LIMIT {l}"
    )
}

/// [`message_statement`]'s rows as hits, best first, at most `limit`, and how many there
/// were.
pub(crate) fn message_hits(rows: &[AnyRow], limit: u32) -> Result<(Vec<Hit>, i64), StorageError> {
    let mut hits = rows
        .iter()
        .map(hit_of)
        .collect::<Result<Vec<_>, StorageError>>()?;
    let total = hits.len() as i64;
    countersign_console_core::work::search::by_score(&mut hits);
    hits.truncate(limit as usize);
    Ok((hits, total))
}

/// SQLite's parts: the FTS5 table joined to the messages by `seq`.
fn sqlite_matching(a: &mut Args, words: &[String], any: bool) -> Matching {
    let joined = words
        .iter()
        .map(|w| fts_prefix(w))
        .collect::<Vec<_>>()
        .join(if any { " OR " } else { " " });
    Matching {
        from: "console_messages_fts f JOIN console_messages m ON m.seq = f.rowid".to_owned(),
        matches: format!("console_messages_fts MATCH {}", a.push(joined)),
        score: "-bm25(console_messages_fts)".to_owned(),
        snippet: "snippet(console_messages_fts, 0, '', '', '…', 16)".to_owned(),
    }
}

/// PostgreSQL's parts: the messages' generated `search` column.
fn postgres_matching(a: &mut Args, words: &[String], any: bool) -> Matching {
    let joined = words
        .iter()
        .map(|w| pg_prefix(w))
        .collect::<Vec<_>>()
        .join(if any { " | " } else { " & " });
    let q = a.push(joined);
    Matching {
        from: "console_messages m".to_owned(),
        matches: format!("m.search @@ to_tsquery('simple', {q})"),
        score: format!("ts_rank(m.search, to_tsquery('simple', {q}))::float8"),
        snippet: format!(
            "ts_headline('simple', m.body, to_tsquery('simple', {q}), \
             'StartSel=\"\",StopSel=\"\",MaxWords=24,MinWords=8')"
        ),
    }
}

/// A search's hit from its row: the title is the message's first line that is not blank.
fn hit_of(r: &AnyRow) -> Result<Hit, StorageError> {
    let body: String = r.try_get("title").map_err(db_err)?;
    let issue: Option<String> = r.try_get("issue").map_err(db_err)?;
    Ok(Hit {
        id: r.try_get("id").map_err(db_err)?,
        issue: issue.as_deref().and_then(IssueKey::parse),
        artifact: None,
        broadcast: r.try_get("broadcast").map_err(db_err)?,
        title: body
            .lines()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim()
            .chars()
            .take(120)
            .collect(),
        snippet: r.try_get("snippet").map_err(db_err)?,
        project: issue
            .as_deref()
            .and_then(IssueKey::parse)
            .map(|k| k.project()),
        at: time(r.try_get("at").map_err(db_err)?)?,
        score: r.try_get("score").map_err(db_err)?,
    })
}
