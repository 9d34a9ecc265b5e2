//! The issues' full-text index: [`IssueTx::search_issues`]' hits (SQLite FTS5 ranked by
//! `bm25()`, PostgreSQL `ts_rank` over the generated `tsvector`; search words are prefix
//! queries), and what `advice.suggestions` reads (each word's count, the newest candidates).
//!
//! [`IssueTx::search_issues`]: countersign_console_core::work::IssueTx::search_issues

use countersign_common::sql::{Backend, db_err};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::search::snippet;
use countersign_console_core::work::{Candidate, Hit, IssueKey, ProjectKey};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{Args, SqlTx, corrupt, json_of, text};
use crate::time;

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

impl SqlTx {
    /// [`IssueTx::search_issues`](countersign_console_core::work::IssueTx::search_issues): the
    /// best `limit` issues matching every word, and how many match in all.
    pub(super) async fn issue_hits(
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
            Backend::Sqlite => sqlite_search(&mut a, words, project, limit),
            Backend::Postgres => postgres_search(&mut a, words, project, limit),
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
            .map(|r| hit_of(r, words))
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok((hits, total))
    }

    /// [`IssueTx::word_counts`](countersign_console_core::work::IssueTx::word_counts): each
    /// word's count of matching issues, in the order of `words`.
    pub(super) async fn index_word_counts(
        &mut self,
        words: &[String],
    ) -> Result<Vec<i64>, StorageError> {
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

    /// [`IssueTx::similar_candidates`](countersign_console_core::work::IssueTx::similar_candidates):
    /// the newest issues matching any word, with the text the index holds of each.
    pub(super) async fn newest_candidates(
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
}

/// SQLite's count and top statements of a search: over the FTS table, which holds the project
/// as a column of its own.
fn sqlite_search(
    a: &mut Args,
    words: &[String],
    project: Option<&ProjectKey>,
    limit: u32,
) -> (String, String) {
    let mut m = fts_prefix_words(words);
    if let Some(p) = project {
        m = format!("({m}) AND project : \"{}\"", p.as_str().to_lowercase());
    }
    let m = a.push(m);
    (
        format!("SELECT COUNT(*) AS n FROM console_issues_fts WHERE console_issues_fts MATCH {m}"),
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

/// PostgreSQL's count and top statements of a search: over the GIN index.
fn postgres_search(
    a: &mut Args,
    words: &[String],
    project: Option<&ProjectKey>,
    limit: u32,
) -> (String, String) {
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

/// A search's hit from its row, the snippet made from the title.
fn hit_of(r: &AnyRow, words: &[String]) -> Result<Hit, StorageError> {
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
}
