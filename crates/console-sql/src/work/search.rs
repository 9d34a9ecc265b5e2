//! The issues' full-text index: [`IssueTx::search_issues`]' hits (SQLite FTS5, PostgreSQL the
//! generated `tsvector` and its GIN index; search words are prefix queries; the newest matches
//! ranked by BM25 in Rust), and what `advice.suggestions` reads (each word's count, the newest
//! candidates).
//!
//! [`IssueTx::search_issues`]: countersign_console_core::work::IssueTx::search_issues

use countersign_common::sql::{Backend, db_err};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::search::{rank_window, snippet};
use countersign_console_core::work::{Candidate, Hit, IssueKey, ProjectKey};
use sqlx::Row;

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
    /// best `limit` of the newest `limit + 1` issues matching every word, and how many match,
    /// counted up to `limit + 1`.
    pub(super) async fn issue_hits(
        &mut self,
        words: &[String],
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError> {
        // Only letters and digits reach here; each word is quoted for FTS5 all the same. One
        // statement reads the newest matches from the index in its own order (SQLite: the FTS
        // table's rowid is the issue's negated; PostgreSQL: the creation index, or the GIN
        // index for rare words, as the planner estimates), with the text each one's index
        // holds, as one row of JSON; they are ranked in Rust (BM25 over the window, the same
        // on both databases). Neither every match's score nor their count is read: at 100,000
        // issues those were most of a search's time (issue 48).
        let mut a = Args::default();
        let sql = match self.backend {
            Backend::Sqlite => sqlite_window(&mut a, words, project, limit),
            // One word: its prefix query walks the creation index (common) or the GIN index
            // (rare) cheaply. Several: their common matches are few, found by the GIN index,
            // which intersects exact words far faster than prefixes.
            Backend::Postgres if words.len() < 2 => {
                let q: Vec<String> = words.iter().map(|w| pg_prefix(w)).collect();
                postgres_window(&mut a, &q.join(" & "), false, project, limit)
            }
            Backend::Postgres => match postgres_expanded(self, words).await? {
                Some(q) => postgres_window(&mut a, &q, true, project, limit),
                None => return Ok((Vec::new(), 0)),
            },
        };
        // PostgreSQL plans it for the words it is given (an unnamed statement): how common
        // the words are decides which index walks least, and a plan kept for every query
        // would walk the creation index to its end for a rare word.
        let found: String = sqlx::query_with(&sql, a.build())
            .persistent(self.backend == Backend::Sqlite)
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("found")
            .map_err(db_err)?;
        // (newest-first place, key, title, project, updated_at, indexed text)
        let mut found: Vec<(i64, String, String, String, i64, String)> =
            json_of(&found, "search window")?;
        found.sort_unstable_by_key(|f| f.0);
        let total = found.len() as i64;
        let window = found
            .into_iter()
            .map(|(_, key, title, project, at, text)| {
                Ok((
                    Hit {
                        issue: IssueKey::parse(&key),
                        artifact: None,
                        broadcast: None,
                        snippet: snippet(&title, words, 16),
                        id: key,
                        title,
                        project: ProjectKey::parse(&project),
                        at: time(at)?,
                        score: 0.0,
                    },
                    text,
                ))
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        let mut hits = rank_window(words, window);
        hits.truncate(limit as usize);
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

/// SQLite's window of a search: the newest `limit + 1` matches in the FTS table's own order
/// (its rowid is the issue's negated: ascending is newest first), which holds the project as
/// a column of its own.
fn sqlite_window(
    a: &mut Args,
    words: &[String],
    project: Option<&ProjectKey>,
    limit: u32,
) -> String {
    let mut m = fts_prefix_words(words);
    if let Some(p) = project {
        m = format!("({m}) AND project : \"{}\"", p.as_str().to_lowercase());
    }
    let m = a.push(m);
    let l = a.push(i64::from(limit) + 1);
    format!(
        "SELECT json_group_array(json_array(f.rowid, i.key, i.title, i.project, i.updated_at, \
           i.title || ' ' || i.labels)) AS found FROM ( \
           SELECT rowid FROM console_issues_fts WHERE console_issues_fts MATCH {m} \
           ORDER BY rowid LIMIT {l}) f \
         JOIN console_issues i ON i.rowid = -f.rowid"
    )
}

/// PostgreSQL's window of a search for `query` (a `tsquery`'s text, `exact`: of quoted
/// lexemes): the newest `limit + 1` matches (migration 18's creation index walked backwards
/// for common words, the GIN index for rare ones).
fn postgres_window(
    a: &mut Args,
    query: &str,
    exact: bool,
    project: Option<&ProjectKey>,
    limit: u32,
) -> String {
    let q = a.push(query.to_owned());
    // Expanded words are the index's own lexemes, quoted: taken as they are, never parsed
    // again.
    let mut filter = if exact {
        format!("search @@ CAST({q} AS tsquery)")
    } else {
        format!("search @@ to_tsquery('simple', {q})")
    };
    if let Some(p) = project {
        filter.push_str(&format!(" AND project = {}", a.push(p.as_str().to_owned())));
    }
    let l = a.push(i64::from(limit) + 1);
    // Several words (`exact`): ordered by an expression, so the creation index cannot give
    // the order and the GIN index finds the matches. At 100,000 issues the planner otherwise
    // walked the creation index past 12,000 issues for two common words' 900 common matches
    // (2.5-3.9 ms, against 1.1-1.3 ms through the GIN index and a sort).
    let at = if exact {
        "created_at + 0"
    } else {
        "created_at"
    };
    format!(
        "SELECT COALESCE(json_agg(json_build_array(n, key, title, project, updated_at, body)), \
           '[]')::text AS found \
         FROM (SELECT key, title, project, updated_at, title || ' ' || labels AS body, \
                 ROW_NUMBER() OVER (ORDER BY {at} DESC, number DESC) AS n \
               FROM console_issues WHERE {filter} \
               ORDER BY {at} DESC, number DESC LIMIT {l}) c"
    )
}

/// Version 18 on SQLite (issue 48): the issues' FTS table gains prefix indexes of two and three
/// characters, so a search for a word's first letters ("de", "dep") reads one doclist in the
/// index's own order instead of merging every word it begins; otherwise as migration 13.
pub(crate) const MIGRATION_18_SQLITE: &[&str] = &[
    "DROP TRIGGER console_issues_insert",
    "DROP TRIGGER console_issues_search",
    "DROP TABLE console_issues_fts",
    "CREATE VIRTUAL TABLE console_issues_fts USING fts5(body, project, \
     tokenize = 'unicode61', prefix = '2 3')",
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
/// Version 18 on PostgreSQL (issue 48): the issues by creation, so a search's newest matches
/// of a common word are read walking this index backwards (the GIN index answers rare words);
/// and every word the issues' index holds (never removed: a word no issue holds any more
/// only finds nothing), kept with the issues' writes, so a search of several words looks up
/// the words each one begins and asks the GIN index for those exactly (a prefix query there
/// reads every posting of every word it begins into a bitmap; exact words are intersected,
/// skipping: about a third of the time at 100,000 issues).
pub(crate) const MIGRATION_18_POSTGRES: &[&str] = &[
    "CREATE INDEX console_issues_created ON console_issues (created_at, number)",
    "CREATE TABLE console_issue_words (word TEXT COLLATE \"C\" PRIMARY KEY)",
    "INSERT INTO console_issue_words (word) \
     SELECT DISTINCT unnest(tsvector_to_array(search)) FROM console_issues",
    "CREATE FUNCTION console_issue_words_add() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
        INSERT INTO console_issue_words (word) SELECT unnest(tsvector_to_array(NEW.search))
            ON CONFLICT DO NOTHING;
        RETURN NULL;
     END $$",
    "CREATE TRIGGER console_issue_words_add AFTER INSERT OR UPDATE OF title, labels \
     ON console_issues FOR EACH ROW EXECUTE FUNCTION console_issue_words_add()",
];

/// How many words one search word may stand for on PostgreSQL before it is asked as a prefix.
const EXPANDED_MAX: usize = 64;

/// PostgreSQL: the `tsquery` of `words`, every one required, each as the words of the issues'
/// index it begins (migration 18's `console_issue_words`), or as a prefix when it begins more
/// than [`EXPANDED_MAX`]; `None` when one begins no word at all (nothing can match).
async fn postgres_expanded(
    tx: &mut SqlTx,
    words: &[String],
) -> Result<Option<String>, StorageError> {
    // Each word's range of the words' index (C order): [word, word with its last character
    // the next one).
    let ranges: Vec<(String, String)> = words
        .iter()
        .map(|w| {
            let mut hi: Vec<char> = w.chars().collect();
            if let Some(last) = hi.last_mut() {
                *last = char::from_u32(*last as u32 + 1).unwrap_or(char::MAX);
            }
            (w.clone(), hi.into_iter().collect())
        })
        .collect();
    let found: String = sqlx::query(
        "SELECT COALESCE(json_agg(json_build_array(w.i, x.word)), '[]')::text AS found \
         FROM jsonb_array_elements(CAST($1 AS jsonb)) WITH ORDINALITY AS w(r, i), \
         LATERAL (SELECT word FROM console_issue_words \
                  WHERE word >= (w.r->>0) COLLATE \"C\" AND word < (w.r->>1) COLLATE \"C\" \
                  ORDER BY word LIMIT $2) x",
    )
    .bind(text(&ranges))
    .bind(EXPANDED_MAX as i64 + 1)
    .fetch_one(&mut *tx.tx)
    .await
    .map_err(db_err)?
    .try_get("found")
    .map_err(db_err)?;
    let found: Vec<(i64, String)> = json_of(&found, "search words")?;
    let lexeme = |w: &str| format!("'{}'", w.replace('\\', "\\\\").replace('\'', "''"));
    let mut terms = Vec::new();
    for (i, w) in words.iter().enumerate() {
        let each: Vec<String> = found
            .iter()
            .filter(|(n, _)| *n == i as i64 + 1)
            .map(|(_, x)| lexeme(x))
            .collect();
        terms.push(match each.len() {
            0 => return Ok(None),
            n if n > EXPANDED_MAX => format!("{}:*", lexeme(w)),
            _ => format!("({})", each.join(" | ")),
        });
    }
    Ok(Some(terms.join(" & ")))
}
