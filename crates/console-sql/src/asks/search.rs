//! The asks' and comments' full-text search ([`SqlTx::search_text`]): SQLite FTS5 tables
//! keyed by the row's rowid, scored by `bm25()`; PostgreSQL a generated `tsvector`, scored by
//! `ts_rank`. Search words are prefix queries; the newest matches are scored and ranked.

use countersign_common::sql::{Backend, db_err};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::{Hit, ProjectKey, search};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::rows::issue_key;
use crate::time;
use crate::work::{Args, AskStore, fts_prefix, pg_prefix};

/// A search's statement parts on one backend: what it selects from, its match condition,
/// and the expressions of a row's score and snippet.
struct Matching {
    from: String,
    matches: String,
    score: String,
    snippet: String,
    /// The order of insertion, newest last.
    newest: String,
}

impl AskStore<'_> {
    /// A full-text search of asks' questions or comments' bodies ([`asks_search`],
    /// [`comments_search`]): hits best first, at most `limit`, and how many match, counted up
    /// to `limit + 1`.
    pub(super) async fn search_text(
        &mut self,
        s: &TextSearch<'_>,
        words: &[String],
        any: bool,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError> {
        let mut a = Args::default();
        let sql = text_statement(self.backend, &mut a, s, words, any, limit);
        let rows = self.rows(&sql, &a).await?;
        text_hits(&rows, limit)
    }
}

/// What a full-text search of asks or comments reads: `table`'s `column`, its time `at`, and
/// `extra` conditions (a column, its value).
pub(crate) struct TextSearch<'a> {
    pub(crate) table: &'a str,
    pub(crate) column: &'a str,
    pub(crate) at: &'a str,
    pub(crate) extra: &'a [(&'a str, String)],
}

/// The asks' search: their questions, by update, with `extra` conditions (project, state).
pub(crate) fn asks_search<'a>(extra: &'a [(&'a str, String)]) -> TextSearch<'a> {
    TextSearch {
        table: "console_asks",
        column: "question",
        at: "updated_at",
        extra,
    }
}

/// The comments' search: their bodies, by creation, with `extra` conditions (project).
pub(crate) fn comments_search<'a>(extra: &'a [(&'a str, String)]) -> TextSearch<'a> {
    TextSearch {
        table: "console_comments",
        column: "body",
        at: "created_at",
        extra,
    }
}

/// The statement of [`SqlTx::search_text`], its values pushed to `a`, as search's rows:
/// `id`, `title` (the whole text), `project`, `issue`, `artifact`, `broadcast` (none), `at`,
/// `score`, `snippet`; [`text_hits`] reads them.
pub(crate) fn text_statement(
    backend: Backend,
    a: &mut Args,
    s: &TextSearch<'_>,
    words: &[String],
    any: bool,
    limit: u32,
) -> String {
    let Matching {
        from,
        matches,
        score,
        snippet,
        newest,
    } = match backend {
        Backend::Sqlite => sqlite_matching(a, s.table, words, any),
        Backend::Postgres => postgres_matching(a, s.table, s.column, words, any),
    };
    let mut filter = format!("WHERE {matches}");
    for (cond, v) in s.extra {
        filter.push_str(&format!(" AND t.{cond} = {}", a.push(v.clone())));
    }
    // Every word (the search route): the newest `limit + 1` matches in the index's
    // order, scored, and ranked here; neither every match's score nor their count is read
    // (issue 48). Any word (similar asks, a few): the best of every match.
    let l = a.push(i64::from(limit) + 1);
    let (column, at) = (s.column, s.at);
    let order = if any {
        format!("score DESC, t.{at} DESC, t.id")
    } else {
        format!("{newest} DESC")
    };
    format!(
        "SELECT t.id AS id, t.{column} AS title, t.project AS project, t.issue AS issue, \
         t.artifact AS artifact, CAST(NULL AS TEXT) AS broadcast, t.{at} AS at, \
         {score} AS score, {snippet} AS snippet FROM {from} {filter} \
         ORDER BY {order} LIMIT {l}"
    )
}

/// [`text_statement`]'s rows as hits, best first, at most `limit`, and how many there were.
pub(crate) fn text_hits(rows: &[AnyRow], limit: u32) -> Result<(Vec<Hit>, i64), StorageError> {
    let mut hits = rows
        .iter()
        .map(hit_of)
        .collect::<Result<Vec<_>, StorageError>>()?;
    let total = hits.len() as i64;
    search::by_score(&mut hits);
    hits.truncate(limit as usize);
    Ok((hits, total))
}

/// SQLite's parts: the FTS5 table `<table>_fts` joined to the rows by rowid.
fn sqlite_matching(a: &mut Args, table: &str, words: &[String], any: bool) -> Matching {
    let fts = format!("{table}_fts");
    let joined = words
        .iter()
        .map(|w| fts_prefix(w))
        .collect::<Vec<_>>()
        .join(if any { " OR " } else { " " });
    Matching {
        from: format!("{fts} f JOIN {table} t ON t.rowid = f.rowid"),
        matches: format!("{fts} MATCH {}", a.push(joined)),
        score: format!("-bm25({fts})"),
        snippet: format!("snippet({fts}, 0, '', '', '…', 16)"),
        newest: "f.rowid".to_owned(),
    }
}

/// PostgreSQL's parts: the rows' generated `search` column.
fn postgres_matching(
    a: &mut Args,
    table: &str,
    column: &str,
    words: &[String],
    any: bool,
) -> Matching {
    let joined = words
        .iter()
        .map(|w| pg_prefix(w))
        .collect::<Vec<_>>()
        .join(if any { " | " } else { " & " });
    let q = a.push(joined);
    Matching {
        from: format!("{table} t"),
        matches: format!("t.search @@ to_tsquery('simple', {q})"),
        score: format!("ts_rank(t.search, to_tsquery('simple', {q}))::float8"),
        snippet: format!(
            "ts_headline('simple', t.{column}, to_tsquery('simple', {q}), \
             'StartSel=\"\",StopSel=\"\",MaxWords=24,MinWords=8')"
        ),
        newest: "t.seq".to_owned(),
    }
}

/// A search's hit from its row.
fn hit_of(r: &AnyRow) -> Result<Hit, StorageError> {
    let project: String = r.try_get("project").map_err(db_err)?;
    let title: String = r.try_get("title").map_err(db_err)?;
    Ok(Hit {
        id: r.try_get("id").map_err(db_err)?,
        issue: issue_key(r.try_get("issue").map_err(db_err)?)?,
        artifact: r.try_get("artifact").map_err(db_err)?,
        broadcast: None,
        title: first_line(&title),
        snippet: r.try_get("snippet").map_err(db_err)?,
        project: ProjectKey::parse(&project),
        at: time(r.try_get("at").map_err(db_err)?)?,
        score: r.try_get("score").map_err(db_err)?,
    })
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
