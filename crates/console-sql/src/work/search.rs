//! The issues' full-text index: [`IssueTx::search_issues`]' hits (SQLite FTS5; PostgreSQL each
//! word's issues in creation order, migration 19, with the generated `tsvector` and its GIN
//! index where they do not serve; search words are prefix queries; the newest matches ranked
//! by BM25 in Rust), what `advice.suggestions` reads (each word's count, the newest
//! candidates), and every kind of a search read together ([`kinds_hits`]).
//!
//! [`IssueTx::search_issues`]: countersign_console_core::work::IssueTx::search_issues

use countersign_common::sql::{Backend, db_err};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::search::{rank_window, snippet};
use countersign_console_core::work::{Candidate, Hit, IssueKey, ProjectKey, SearchKind};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{
    Args, AskStore, DocumentStore, IssueStore, MessageStore, SqlTx, corrupt, json_of, text,
};
use crate::time;
use crate::{asks::search as asks, documents::search as documents, messages::search as messages};

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

impl IssueStore<'_> {
    /// [`IssueTx::search_issues`](countersign_console_core::work::IssueTx::search_issues): the
    /// best `limit` of the newest `limit + 1` issues matching every word, and how many match,
    /// counted up to `limit + 1`.
    pub(super) async fn issue_hits(
        &mut self,
        words: &[String],
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError> {
        // One statement reads the newest matches (SQLite: from the FTS table, whose rowid is
        // the issue's negated; PostgreSQL: from migration 19's postings, see
        // [`postgres_window`]), with the text each one's index holds; they are ranked in Rust
        // (BM25 over the window, the same on both databases). Neither every match's score nor
        // their count is read: at 100,000 issues those were most of a search's time (issue 48).
        let found = match self.backend {
            Backend::Sqlite => self.sqlite_found(words, project, limit).await?,
            Backend::Postgres => self.postgres_found(words, project, limit).await?,
        };
        ranked(words, found, limit)
    }

    /// SQLite's window: the newest `limit + 1` matches, newest first, each as (key, title,
    /// project, updated_at, the text its index holds); one row of JSON (each row would be a
    /// hand-over between SQLite's thread and ours).
    async fn sqlite_found(
        &mut self,
        words: &[String],
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<Vec<Found>, StorageError> {
        let mut a = Args::default();
        let sql = sqlite_window(&mut a, words, project, limit);
        let found: String = sqlx::query_with(&sql, a.build())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("found")
            .map_err(db_err)?;
        // (newest-first place, key, title, project, updated_at, indexed text)
        let mut found: Vec<(i64, String, String, String, i64, String)> =
            json_of(&found, "search window")?;
        found.sort_unstable_by_key(|f| f.0);
        Ok(found
            .into_iter()
            .map(|(_, key, title, project, at, text)| (key, title, project, at, text))
            .collect())
    }

    /// PostgreSQL's window ([`postgres_window`]), as [`SqlTx::sqlite_found`]'s.
    async fn postgres_found(
        &mut self,
        words: &[String],
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<Vec<Found>, StorageError> {
        let rows = sqlx::query(&postgres_window(limit))
            .bind(text(&word_ranges(words)))
            .bind(project.map_or(String::new(), |p| p.as_str().to_owned()))
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?;
        rows_found(&rows)
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

/// A window of matches, newest first, ranked (BM25 over the window, the same on both
/// databases): the best `limit`, and how many there were.
fn ranked(
    words: &[String],
    found: Vec<Found>,
    limit: u32,
) -> Result<(Vec<Hit>, i64), StorageError> {
    let total = found.len() as i64;
    let window = found
        .into_iter()
        .map(|(key, title, project, at, text)| {
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

/// [`postgres_window`]'s rows, newest first (the order the statement chose them in).
fn rows_found(rows: &[AnyRow]) -> Result<Vec<Found>, StorageError> {
    let mut found = rows
        .iter()
        .map(|r| {
            let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
            let n = |c: &str| -> Result<i64, StorageError> { r.try_get(c).map_err(db_err) };
            let (title, labels) = (g("title")?, g("labels")?);
            let text = format!("{title} {labels}");
            Ok((
                (n("created_at")?, n("number")?, g("id")?),
                (title, g("project")?, n("at")?, text),
            ))
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
    found.sort_unstable_by(|a, b| b.0.cmp(&a.0));
    Ok(found
        .into_iter()
        .map(|((_, _, key), (title, project, at, text))| (key, title, project, at, text))
        .collect())
}

/// [`WorkTx::search_kinds`](countersign_console_core::work::WorkTx::search_kinds): issues,
/// documents, asks, comments and messages matching every word. PostgreSQL reads them in one
/// statement, each kind's own statement a part of a `UNION ALL` (issue 48: six statements,
/// each a round trip, where four found nothing and cost about 0.08 ms of the server's CPU
/// each); SQLite asks each kind (its statements are calls into the same process).
pub(super) async fn kinds_hits(
    tx: &mut SqlTx,
    words: &[String],
    project: Option<&ProjectKey>,
    limit: u32,
) -> Result<Vec<(SearchKind, Vec<Hit>, i64)>, StorageError> {
    use countersign_console_core::work::{AskTx, DocumentTx, MessageTx};
    const KINDS: [SearchKind; 5] = [
        SearchKind::Document,
        SearchKind::Ask,
        SearchKind::Comment,
        SearchKind::Message,
        SearchKind::Issue,
    ];
    if words.is_empty() {
        return Ok(KINDS.into_iter().map(|k| (k, Vec::new(), 0)).collect());
    }
    if tx.backend == Backend::Sqlite {
        let d = DocumentStore(tx)
            .search_documents(words, false, project, limit)
            .await?;
        let a = AskStore(tx)
            .search_asks(words, false, project, false, limit)
            .await?;
        let c = AskStore(tx).search_comments(words, project, limit).await?;
        let m = MessageStore(tx)
            .search_messages(words, false, project, limit)
            .await?;
        let i = IssueStore(tx).issue_hits(words, project, limit).await?;
        return Ok(KINDS
            .into_iter()
            .zip([d, a, c, m, i])
            .map(|(k, (hits, n))| (k, hits, n))
            .collect());
    }
    let mut a = Args::default();
    let sql = kinds_statement(&mut a, words, project, limit);
    let rows = sqlx::query_with(&sql, a.build())
        .fetch_all(&mut *tx.tx)
        .await
        .map_err(db_err)?;
    let mut each: [Vec<AnyRow>; 5] = Default::default();
    for r in rows {
        let k: i64 = r.try_get("kind").map_err(db_err)?;
        each.get_mut(usize::try_from(k).unwrap_or(usize::MAX))
            .ok_or_else(|| corrupt("search kind"))?
            .push(r);
    }
    let [d, asked, c, m, i] = each;
    let found = [
        documents::document_hits_of(&d, limit)?,
        asks::text_hits(&asked, limit)?,
        asks::text_hits(&c, limit)?,
        messages::message_hits(&m, limit)?,
        ranked(words, rows_found(&i)?, limit)?,
    ];
    Ok(KINDS
        .into_iter()
        .zip(found)
        .map(|(k, (hits, n))| (k, hits, n))
        .collect())
}

/// PostgreSQL's statement of [`kinds_hits`], its values pushed to `a`: each kind's own
/// statement a subquery, which keeps its order and limit, its rows marked with the kind's place
/// (documents 0, asks 1, comments 2, messages 3, issues 4: [`postgres_window`], whose values
/// are the first two), in the columns of the other kinds' rows and the issues' own.
fn kinds_statement(
    a: &mut Args,
    words: &[String],
    project: Option<&ProjectKey>,
    limit: u32,
) -> String {
    let b = Backend::Postgres;
    a.push(text(&word_ranges(words)));
    a.push(project.map_or(String::new(), |p| p.as_str().to_owned()));
    let extra: Vec<(&str, String)> = project
        .map(|p| ("project", p.as_str().to_owned()))
        .into_iter()
        .collect();
    let (asked, commented) = (asks::asks_search(&extra), asks::comments_search(&extra));
    let parts = [
        documents::document_statement(b, a, words, false, project, limit),
        asks::text_statement(b, a, &asked, words, false, limit),
        asks::text_statement(b, a, &commented, words, false, limit),
        messages::message_statement(b, a, words, false, project, limit),
    ];
    let none = "CAST(NULL AS TEXT)";
    let issues = format!(
        "SELECT CAST(4 AS BIGINT) AS kind, w.id, w.title, w.project, {none} AS issue, \
         {none} AS artifact, {none} AS broadcast, w.at, CAST(NULL AS FLOAT8) AS score, \
         {none} AS snippet, w.created_at, w.number, w.labels FROM ({}) w",
        postgres_window(limit)
    );
    parts
        .iter()
        .enumerate()
        .map(|(k, part)| {
            format!(
                "SELECT CAST({k} AS BIGINT) AS kind, s.*, CAST(NULL AS BIGINT) AS created_at, \
                 CAST(NULL AS BIGINT) AS number, {none} AS labels FROM ({part}) s"
            )
        })
        .chain([issues])
        .collect::<Vec<_>>()
        .join(" UNION ALL ")
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

/// Version 19 on SQLite: nothing (its FTS table reads a word's newest matches in order
/// already).
pub(crate) const MIGRATION_19_SQLITE: &[&str] = &["SELECT 1"];
/// Version 19 on PostgreSQL (issue 48): each word of each issue's index with the issue's
/// place in creation order (`console_issue_postings`: the word, `created_at`, `number`,
/// `key`, all in the key), so a search's newest matches of a word are read from one index
/// range newest first, and two words' are merged, without reading an issue row that does not
/// match ([`postgres_window`]). One trigger function keeps it and migration 18's words with
/// the issues' writes: on insert, on a change of the words (not of every update, which sets
/// the title and labels whether or not they changed), on delete.
pub(crate) const MIGRATION_19_POSTGRES: &[&str] = &[
    "CREATE TABLE console_issue_postings (
        word TEXT COLLATE \"C\" NOT NULL,
        created_at BIGINT NOT NULL,
        number BIGINT NOT NULL,
        key TEXT NOT NULL
    )",
    "INSERT INTO console_issue_postings (word, created_at, number, key) \
     SELECT unnest(tsvector_to_array(search)), created_at, number, key FROM console_issues",
    // The key after the rows: built by one sort, its pages full.
    "ALTER TABLE console_issue_postings ADD PRIMARY KEY (word, created_at, number, key)",
    // Read by index-only scans, which read the row too where the page is not marked all
    // visible: vacuumed after 1 % new rows, not 20 % (at 100,000 issues, 20,000 new issues'
    // postings unmarked made half of a search's entries a heap read, +50-80 µs).
    "ALTER TABLE console_issue_postings SET (autovacuum_vacuum_insert_scale_factor = 0.01)",
    "DROP TRIGGER console_issue_words_add ON console_issues",
    "DROP FUNCTION console_issue_words_add()",
    "CREATE FUNCTION console_issue_search_words() RETURNS trigger LANGUAGE plpgsql AS $$
     BEGIN
        IF TG_OP <> 'INSERT' THEN
            DELETE FROM console_issue_postings
                WHERE word = ANY (tsvector_to_array(OLD.search)) AND created_at = OLD.created_at
                AND number = OLD.number AND key = OLD.key;
        END IF;
        IF TG_OP <> 'DELETE' THEN
            INSERT INTO console_issue_words (word) SELECT unnest(tsvector_to_array(NEW.search))
                ON CONFLICT DO NOTHING;
            INSERT INTO console_issue_postings (word, created_at, number, key)
                SELECT unnest(tsvector_to_array(NEW.search)), NEW.created_at, NEW.number, NEW.key;
        END IF;
        RETURN NULL;
     END $$",
    "CREATE TRIGGER console_issue_search_insert AFTER INSERT ON console_issues \
     FOR EACH ROW EXECUTE FUNCTION console_issue_search_words()",
    "CREATE TRIGGER console_issue_search_update AFTER UPDATE OF title, labels ON console_issues \
     FOR EACH ROW WHEN (OLD.search IS DISTINCT FROM NEW.search) \
     EXECUTE FUNCTION console_issue_search_words()",
    "CREATE TRIGGER console_issue_search_delete AFTER DELETE ON console_issues \
     FOR EACH ROW EXECUTE FUNCTION console_issue_search_words()",
];

/// A match of a search's window: (key, title, project, updated_at, the text its index holds).
type Found = (String, String, String, i64, String);

/// How many words one search word may stand for on PostgreSQL before it is asked as a prefix.
const EXPANDED_MAX: usize = 64;

/// How many search words, each standing for one word, PostgreSQL merges the postings of;
/// more are asked of the GIN index. A third word's postings cost more than the GIN index's
/// intersection when few issues hold all three (three common words at 100,000 issues: 13 ms
/// merged, 41 matches, where their intersection is about 1 ms).
const MERGED_MAX: usize = 2;

/// Each search word's range of the words' index (C order): [word, word with its last
/// character the next one), the words it begins.
fn word_ranges(words: &[String]) -> Vec<(String, String)> {
    words
        .iter()
        .map(|w| {
            let mut hi: Vec<char> = w.chars().collect();
            if let Some(last) = hi.last_mut() {
                *last = char::from_u32(*last as u32 + 1).unwrap_or(char::MAX);
            }
            (w.clone(), hi.into_iter().collect())
        })
        .collect()
}

/// SQL text of `x` quoted as a `tsquery` lexeme (`'…'`, backslashes and quotes escaped).
fn lexeme_sql(x: &str) -> String {
    format!("'''' || replace(replace({x}, '\\', '\\\\'), '''', '''''') || ''''")
}

/// PostgreSQL's window of a search (issue 48): the newest `limit + 1` issues holding every
/// word (each a prefix), with what ranking reads. `$1` is [`word_ranges`] as JSON, `$2` the
/// project key or empty. One statement, its text the same for every search, planned once for
/// all (the values reach the plan through a materialized CTE, so no plan is made for one
/// search's words; each path below runs only when its condition, a value of the CTE `s`,
/// holds):
///
/// - each word's words are looked up in migration 18's `console_issue_words` (up to
///   [`EXPANDED_MAX`]); one that begins none finds nothing;
/// - one word: the newest `limit + 1` postings (migration 19) of each word it begins, their
///   newest `limit + 1` (index-only scans: about 100 index entries a word, where walking the
///   creation index read every issue until 101 matched, ~1,150 rows for a common word);
/// - two words ([`MERGED_MAX`]), each beginning one word: their postings merged newest
///   first, stopping at `limit + 1` (two common words: ~1,200 index entries each, where the
///   GIN index found their ~750 common matches and the heap was read for each; two that no
///   issue holds together: both read to their ends, 0.7 ms for 5,000 each);
/// - otherwise the GIN index, each word as the words it begins, or as a prefix when it begins
///   more than [`EXPANDED_MAX`] (one such word alone: the creation index walked backwards,
///   since so many words make it common).
///
/// Then the issue rows of the window, by the creation index.
fn postgres_window(limit: u32) -> String {
    let l = i64::from(limit) + 1;
    let issue =
        "i.created_at, i.number, i.key AS id, i.title, i.project, i.updated_at AS at, i.labels";
    let project = "((SELECT p FROM a) IS NULL OR i.project = (SELECT p FROM a))";
    // So many words begin it that it is common: the creation index walked (a function, not
    // the operator, so the GIN index is not used).
    let walked = format!(
        "(SELECT {issue} FROM console_issues i WHERE (SELECT words = 1 AND most > {EXPANDED_MAX} FROM s) \
         AND ts_match_vq(i.search, (SELECT CAST({} || ':*' AS tsquery) FROM n)) AND {project} \
         ORDER BY i.created_at DESC, i.number DESC LIMIT {l})",
        lexeme_sql("n.lo")
    );
    // The GIN index: each word as the words it begins, or its prefix; ordered by an
    // expression so that the planner does not walk the creation index instead (for two
    // common words it read 12,000 issues for 101).
    let each = format!(
        "CASE WHEN n.n > {EXPANDED_MAX} THEN {} || ':*' ELSE '(' || (SELECT string_agg({}, ' | ') \
         FROM e WHERE e.i = n.i) || ')' END",
        lexeme_sql("n.lo"),
        lexeme_sql("e.word")
    );
    let indexed = format!(
        "(SELECT {issue} FROM console_issues i \
         WHERE (SELECT words >= 2 AND every AND NOT (words = {MERGED_MAX} AND single) FROM s) \
         AND i.search @@ (SELECT CAST(string_agg({each}, ' & ' ORDER BY n.i) AS tsquery) FROM n) \
         AND {project} ORDER BY i.created_at + 0 DESC, i.number DESC LIMIT {l})"
    );
    format!(
        "WITH a AS MATERIALIZED (SELECT CAST($1 AS jsonb) AS r, NULLIF(CAST($2 AS TEXT), '') AS p), \
         r AS MATERIALIZED (SELECT w.i, w.r->>0 AS lo, w.r->>1 AS hi \
           FROM jsonb_array_elements((SELECT r FROM a)) WITH ORDINALITY AS w(r, i)), \
         e AS MATERIALIZED (SELECT r.i, x.word FROM r, LATERAL (SELECT word FROM console_issue_words \
           WHERE word >= r.lo COLLATE \"C\" AND word < r.hi COLLATE \"C\" ORDER BY word LIMIT {}) x), \
         n AS MATERIALIZED (SELECT r.i, r.lo, COUNT(e.word) AS n FROM r LEFT JOIN e ON e.i = r.i \
           GROUP BY r.i, r.lo), \
         s AS MATERIALIZED (SELECT COUNT(*) AS words, MAX(n) AS most, bool_and(n = 1) AS single, \
           bool_and(n >= 1) AS every FROM n), \
         hits AS ({}) \
         SELECT {issue} FROM hits h JOIN console_issues i ON i.created_at = h.created_at \
         AND i.number = h.number AND i.key = h.key UNION ALL {walked} UNION ALL {indexed}",
        EXPANDED_MAX + 1,
        postings_hits(l)
    )
}

/// [`postgres_window`]'s windows read from the postings alone, `l` of them: one word's (each
/// word it begins, the newest `l` of each), or two words' each beginning one (merged).
fn postings_hits(l: i64) -> String {
    let in_project = |key: &str| {
        format!("((SELECT p FROM a) IS NULL OR starts_with({key}, (SELECT p FROM a) || '-'))")
    };
    let newest = "created_at DESC, number DESC, key DESC";
    let word = |i: usize| format!("(SELECT word FROM e WHERE i = {i} LIMIT 1)");
    // The second word's part a subquery kept whole (OFFSET 0), in the postings' order: merged
    // with the first word's, never probed once for each of its rows.
    format!(
        "(SELECT DISTINCT p.created_at, p.number, p.key FROM e, LATERAL ( \
           SELECT created_at, number, key FROM console_issue_postings \
           WHERE word = e.word AND {} ORDER BY {newest} LIMIT {l}) p \
         WHERE (SELECT words = 1 AND most <= {EXPANDED_MAX} FROM s) ORDER BY {newest} LIMIT {l}) \
         UNION ALL \
         (SELECT p1.created_at, p1.number, p1.key FROM console_issue_postings p1 \
         JOIN (SELECT created_at, number, key FROM console_issue_postings \
           WHERE word = {} ORDER BY {newest} OFFSET 0) p2 \
         ON p2.created_at = p1.created_at AND p2.number = p1.number AND p2.key = p1.key \
         WHERE p1.word = {} AND (SELECT words = {MERGED_MAX} AND single FROM s) AND {} \
         ORDER BY p1.created_at DESC, p1.number DESC, p1.key DESC LIMIT {l})",
        in_project("key"),
        word(2),
        word(1),
        in_project("p1.key")
    )
}

#[cfg(test)]
mod tests {
    use super::{Args, kinds_statement};

    /// PostgreSQL plans a search's statement once a connection (a prepared statement, kept):
    /// its text is the same whatever the words, one, two or five, so no search of another
    /// number of words plans it again.
    #[test]
    fn one_statement_text_for_any_words() {
        let text = |words: &[&str]| {
            let words: Vec<String> = words.iter().map(|w| (*w).to_owned()).collect();
            kinds_statement(&mut Args::default(), &words, None, 100)
        };
        let one = text(&["deploy"]);
        assert_eq!(one, text(&["deploy", "payment"]));
        assert_eq!(one, text(&["a", "b", "c", "d", "e"]));
    }
}
