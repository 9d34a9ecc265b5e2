//! Searching the documents' index ([`countersign_console_core::work::DocumentTx::
//! search_documents`]): a document matches when its parts hold every word between them (or
//! one, with `any`); its score and snippet are its best part's. SQLite ranks with FTS5's
//! `bm25()`, PostgreSQL with `ts_rank` over the generated `tsvector`.

use countersign_common::sql::{Backend, db_err};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::{Hit, IssueKey, ProjectKey, search};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::time;
use crate::work::{Args, DocumentStore};

/// A search's statement parts on one backend: the `WITH` that ranks each artifact's best
/// part, what a page selects from, the snippet's expression, and one condition per word when
/// every word must match.
struct Ranked {
    with: String,
    from_page: String,
    snippet: String,
    each_word: Vec<String>,
}

impl DocumentStore<'_> {
    /// The documents (not an agent conversation's artifacts) whose parts hold `words`, best
    /// first, at most `limit`, and how many match, counted up to `limit + 1`.
    pub(super) async fn document_hits(
        &mut self,
        words: &[String],
        any: bool,
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError> {
        if words.is_empty() {
            return Ok((Vec::new(), 0));
        }
        let mut a = Args::default();
        let sql = document_statement(self.backend, &mut a, words, any, project, limit);
        let rows = sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?;
        document_hits_of(&rows, limit)
    }
}

/// [`document_statement`]'s rows as hits, best first (its order), at most `limit`, and how
/// many there were.
pub(crate) fn document_hits_of(
    rows: &[AnyRow],
    limit: u32,
) -> Result<(Vec<Hit>, i64), StorageError> {
    let mut hits = rows.iter().map(hit_of).collect::<Result<Vec<_>, _>>()?;
    let total = hits.len() as i64;
    // The statement's order, kept when its rows come through another's (a `UNION ALL`).
    search::by_score(&mut hits);
    hits.truncate(limit as usize);
    Ok((hits, total))
}

/// The statement of [`SqlTx::document_hits`] (`words` not empty), its values pushed to `a`:
/// the best `limit + 1` documents, best first, as search's rows ([`crate::work::search_union`]
/// takes it as its documents' part): `id`, `title` (the file name), `project`, `issue`,
/// `artifact` (the document), `broadcast` (none), `at`, `score`, `snippet`.
pub(crate) fn document_statement(
    backend: Backend,
    a: &mut Args,
    words: &[String],
    any: bool,
    project: Option<&ProjectKey>,
    limit: u32,
) -> String {
    let every = !(any || words.len() == 1);
    let Ranked {
        with,
        from_page,
        snippet,
        each_word,
    } = match backend {
        Backend::Sqlite => sqlite_ranked(a, words, every),
        // Whatever the number of words, for one text (one word: the condition holds).
        Backend::Postgres => postgres_ranked(a, words, !any),
    };
    let mut conds = each_word;
    conds.push("a.session IS NULL".to_owned());
    if let Some(p) = project {
        conds.push(format!("a.project = {}", a.push(p.as_str().to_owned())));
    }
    let filter = format!("WHERE {}", conds.join(" AND "));
    // One statement: the best `limit + 1`, so the count stops there (issue 48).
    let l = a.push(i64::from(limit) + 1);
    format!(
        "{with} SELECT a.id AS id, a.filename AS title, a.project AS project, \
         a.issue AS issue, a.id AS artifact, CAST(NULL AS TEXT) AS broadcast, \
         a.updated_at AS at, best.score AS score, {snippet} AS snippet FROM {from_page} \
         {filter} ORDER BY score DESC, a.updated_at DESC, a.id LIMIT {l}"
    )
}

/// SQLite: FTS5 matches any word (each a prefix: "safar" finds "Safari"), ranked by
/// `bm25()`, the snippet FTS5's; `every`: one condition per word.
fn sqlite_ranked(a: &mut Args, words: &[String], every: bool) -> Ranked {
    // Only letters and digits reach here; each word is quoted for FTS5 all the same.
    let quoted = |w: &String| crate::work::fts_prefix(w);
    let q = a.push(words.iter().map(quoted).collect::<Vec<_>>().join(" OR "));
    // MATERIALIZED: flattened into the grouping below, bm25() and snippet() would be out of
    // their FTS5 query's context.
    let with = format!(
        "WITH m AS MATERIALIZED (SELECT t.artifact AS artifact, \
         -bm25(console_artifact_text_fts) AS score, \
         snippet(console_artifact_text_fts, 0, '', '', '…', 16) AS snip \
         FROM console_artifact_text_fts \
         JOIN console_artifact_text t ON t.id = console_artifact_text_fts.rowid \
         WHERE console_artifact_text_fts MATCH {q}), \
         best AS (SELECT artifact, MAX(score) AS score, snip FROM m GROUP BY artifact)"
    );
    let each_word = if every {
        words
            .iter()
            .map(|w| {
                format!(
                    "a.id IN (SELECT t.artifact FROM console_artifact_text_fts \
                     JOIN console_artifact_text t \
                     ON t.id = console_artifact_text_fts.rowid \
                     WHERE console_artifact_text_fts MATCH {})",
                    a.push(quoted(w))
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    Ranked {
        with,
        from_page: "best JOIN console_artifacts a ON a.id = best.artifact".to_owned(),
        snippet: "best.snip".to_owned(),
        each_word,
    }
}

/// PostgreSQL: the `tsvector` matches any word (each a prefix), ranked by `ts_rank`, the
/// snippet `ts_headline` of the best part; `every`: one condition that each word is in some
/// part.
fn postgres_ranked(a: &mut Args, words: &[String], every: bool) -> Ranked {
    let prefixed: Vec<String> = words.iter().map(|w| crate::work::pg_prefix(w)).collect();
    let q = a.push(prefixed.join(" | "));
    let with = format!(
        "WITH best AS (SELECT DISTINCT ON (t.artifact) t.artifact AS artifact, \
         t.part AS part, ts_rank(t.search, to_tsquery('simple', {q}))::float8 AS score \
         FROM console_artifact_text t WHERE t.search @@ to_tsquery('simple', {q}) \
         ORDER BY t.artifact, score DESC, t.part)"
    );
    // Every word in some part: one condition over the words as a JSON array, so that the
    // statement's text is the same for any number of words (one word: always true of a match).
    let each_word = if every {
        let each: Vec<String> = words.iter().map(|w| crate::work::pg_prefix(w)).collect();
        vec![format!(
            "NOT EXISTS (SELECT 1 FROM jsonb_array_elements_text(CAST({} AS jsonb)) AS w(q) \
             WHERE NOT EXISTS (SELECT 1 FROM console_artifact_text x \
             WHERE x.artifact = a.id AND x.search @@ to_tsquery('simple', w.q)))",
            a.push(crate::work::text(&each))
        )]
    } else {
        Vec::new()
    };
    Ranked {
        with,
        from_page: "best JOIN console_artifacts a ON a.id = best.artifact \
                    JOIN console_artifact_text bt ON bt.artifact = best.artifact \
                    AND bt.part = best.part"
            .to_owned(),
        snippet: format!(
            "ts_headline('simple', bt.body, to_tsquery('simple', {q}), \
             'StartSel=\"\",StopSel=\"\",MaxWords=24,MinWords=8')"
        ),
        each_word,
    }
}

/// A search row as a hit.
fn hit_of(r: &AnyRow) -> Result<Hit, StorageError> {
    let project: Option<String> = r.try_get("project").map_err(db_err)?;
    let issue: Option<String> = r.try_get("issue").map_err(db_err)?;
    let id: String = r.try_get("id").map_err(db_err)?;
    Ok(Hit {
        issue: issue.as_deref().and_then(IssueKey::parse),
        artifact: Some(id.clone()),
        broadcast: None,
        id,
        title: r.try_get("title").map_err(db_err)?,
        snippet: r.try_get("snippet").map_err(db_err)?,
        project: project.as_deref().and_then(ProjectKey::parse),
        at: time(r.try_get("at").map_err(db_err)?)?,
        score: r.try_get("score").map_err(db_err)?,
    })
}
