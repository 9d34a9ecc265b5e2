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
//!
//! One module per part: `migration.rs` the tables, `rows.rs` the rows' values, `inbox.rs` a
//! person's inbox and answers, `threads.rs` the unread threads a person wrote in, `search.rs`
//! the asks' and comments' full-text search.

use async_trait::async_trait;
use countersign_common::sql::{Backend, db_err};
use countersign_console_core::Time;
use countersign_console_core::ids::{ArtifactId, AskId, CommentId, Login, ReviewId, SessionId};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::asks::{
    Answer, AnswerEntry, Ask, AskFilter, AskState, AskWrite, Comment, CommentFilter, InboxEntry,
    InboxFilter, InboxScope, PastAnswer, Review, ReviewOutcome, UnreadThreads, Wording,
};
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{AskTx, Hit, IssueKey, ProjectKey};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::time;
use crate::work::AskStore;
use crate::work::{Args, corrupt, id_in, json_of, opt_id_in, text};
use rows::{ask_of, comment_of, login_of, past_answer_of, thread_state_text};

mod inbox;
mod migration;
mod rows;
pub(crate) mod search;
mod threads;

pub(crate) use migration::{
    MIGRATION_9_POSTGRES, MIGRATION_9_SQLITE, MIGRATION_11_POSTGRES, MIGRATION_11_SQLITE,
};

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

impl AskStore<'_> {
    /// Rows of a query built with [`Args`].
    async fn rows(&mut self, sql: &str, a: &Args) -> Result<Vec<AnyRow>, StorageError> {
        sqlx::query_with(sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)
    }
}

#[async_trait]
impl AskTx for AskStore<'_> {
    async fn insert_ask(&mut self, a: &Ask) -> Result<(), StorageError> {
        // `seq` orders asks made in one millisecond as they were made.
        sqlx::query(&format!(
            "INSERT INTO console_asks ({ASK_COLUMNS}, author_login, seq) SELECT \
             $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20, $21, \
             $22, COALESCE(MAX(seq), 0) + 1 FROM console_asks"
        ))
        .bind(a.head.id.to_string())
        .bind(a.head.kind.as_str())
        .bind(a.head.project.as_str())
        .bind(a.head.issue.as_ref().map(|k| k.as_str().to_owned()))
        .bind(a.head.artifact.map(|x| x.to_string()))
        .bind(a.head.block.clone())
        .bind(a.head.question.as_str())
        .bind(text(&a.head.options))
        .bind(a.head.state.as_str())
        .bind(a.head.answer.as_ref().map(text))
        .bind(a.closed.as_ref().map(text))
        .bind(a.approval.as_ref().map(text))
        .bind(text(&a.followers))
        .bind(text(&a.author))
        .bind(a.author_session().map(SessionId::to_string))
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
            .bind(a.head.id.to_string())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn ask(&mut self, id: AskId) -> Result<Option<Ask>, StorageError> {
        let lock = self.lock_clause();
        sqlx::query(&format!(
            "SELECT {ASK_COLUMNS} FROM console_asks WHERE id = $1{lock}"
        ))
        .bind(id.to_string())
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
        .bind(a.head.id.to_string())
        .bind(a.head.question.as_str())
        .bind(text(&a.head.options))
        .bind(a.head.state.as_str())
        .bind(a.head.answer.as_ref().map(text))
        .bind(a.closed.as_ref().map(text))
        .bind(a.approval.as_ref().map(text))
        .bind(text(&a.followers))
        .bind(text(&a.worded_by))
        .bind(ms(&a.worded_at))
        .bind(a.turn.map(|t| t.as_str()))
        .bind(ms(&a.turn_since))
        .bind(ms(&a.updated_at))
        .bind(a.head.block.clone())
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
            .bind(a.head.id.to_string())
            .bind(a.head.question.as_str())
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
            conds.push(format!("artifact = {}", a.push(x.to_string())));
        }
        if let Some(s) = &f.author_session {
            conds.push(format!("author_session = {}", a.push(s.to_string())));
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

    async fn asks_by_id(&mut self, ids: &[AskId]) -> Result<Vec<Ask>, StorageError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut a = Args::default();
        let ids: Vec<String> = ids.iter().map(AskId::to_string).collect();
        let list = a.list(self.backend, &ids);
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
        sessions: &[SessionId],
    ) -> Result<Vec<(SessionId, i64)>, StorageError> {
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
                    id_in(r, "s", SessionId::parse)?,
                    r.try_get("n").map_err(db_err)?,
                ))
            })
            .collect()
    }

    async fn add_wording(&mut self, ask: AskId, w: &Wording) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_ask_wordings (ask, n, question, options, by_actor, at) \
             SELECT $1, COALESCE(MAX(n), 0) + 1, $2, $3, $4, $5 FROM console_ask_wordings WHERE ask = $1",
        )
        .bind(ask.to_string())
        .bind(w.question.as_str())
        .bind(text(&w.options))
        .bind(text(&w.by))
        .bind(ms(&w.at))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn wordings(&mut self, ask: AskId) -> Result<Vec<Wording>, StorageError> {
        sqlx::query(
            "SELECT question, options, by_actor, at FROM console_ask_wordings WHERE ask = $1 ORDER BY n",
        )
        .bind(ask.to_string())
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

    async fn add_answer(&mut self, ask: AskId, w: &Answer) -> Result<(), StorageError> {
        sqlx::query("UPDATE console_ask_answers SET current = 0 WHERE ask = $1 AND current = 1")
            .bind(ask.to_string())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        sqlx::query(&format!(
            "INSERT INTO console_ask_answers (ask, n, options, text, by_actor, by_login, at, current, seq) \
             SELECT $1, COALESCE(MAX(n), 0) + 1, $2, $3, $4, $5, $6, 1, {NEXT_SEQ} \
             FROM console_ask_answers WHERE ask = $1"
        ))
        .bind(ask.to_string())
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

    async fn answers(&mut self, ask: AskId) -> Result<Vec<PastAnswer>, StorageError> {
        sqlx::query(
            "SELECT options, text, by_actor, at, current FROM console_ask_answers WHERE ask = $1 ORDER BY n",
        )
        .bind(ask.to_string())
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
        self.inbox_entries(f, within).await
    }

    async fn snooze(&mut self, login: &Login, ask: AskId, until: Time) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_ask_snoozes (login, ask, until) VALUES ($1, $2, $3) \
             ON CONFLICT (login, ask) DO UPDATE SET until = $3",
        )
        .bind(login.as_str())
        .bind(ask.to_string())
        .bind(ms(&until))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn unsnooze(&mut self, login: &Login, ask: AskId) -> Result<(), StorageError> {
        sqlx::query("DELETE FROM console_ask_snoozes WHERE login = $1 AND ask = $2")
            .bind(login.as_str())
            .bind(ask.to_string())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn snoozed_until(
        &mut self,
        login: &Login,
        ask: AskId,
    ) -> Result<Option<Time>, StorageError> {
        sqlx::query("SELECT until FROM console_ask_snoozes WHERE login = $1 AND ask = $2")
            .bind(login.as_str())
            .bind(ask.to_string())
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
        self.answer_entries(login, limit, offset).await
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
        self.search_text(&search::asks_search(&extra), words, any, limit)
            .await
    }

    async fn insert_comment(&mut self, c: &Comment) -> Result<(), StorageError> {
        sqlx::query(&format!(
            "INSERT INTO console_comments ({COMMENT_COLUMNS}, author_login, seq) SELECT \
             $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, {NEXT_SEQ}"
        ))
        .bind(c.id.to_string())
        .bind(c.thread_id.to_string())
        .bind(c.parent.map(|x| x.to_string()))
        .bind(c.project.as_str())
        .bind(c.issue.as_ref().map(|k| k.as_str().to_owned()))
        .bind(c.artifact.map(|x| x.to_string()))
        .bind(c.ask.map(|x| x.to_string()))
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
            .bind(c.id.to_string())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn comment(&mut self, id: CommentId) -> Result<Option<Comment>, StorageError> {
        let lock = self.lock_clause();
        sqlx::query(&format!(
            "SELECT {COMMENT_COLUMNS} FROM console_comments WHERE id = $1{lock}"
        ))
        .bind(id.to_string())
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
        .bind(c.id.to_string())
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
            .bind(c.id.to_string())
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
            conds.push(format!("artifact = {}", a.push(x.to_string())));
        }
        if let Some(x) = &f.ask {
            conds.push(format!("ask = {}", a.push(x.to_string())));
        }
        if let Some(x) = &f.thread {
            conds.push(format!("thread_id = {}", a.push(x.to_string())));
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
        self.search_text(&search::comments_search(&extra), words, false, limit)
            .await
    }

    async fn unread_comment_threads(
        &mut self,
        within: &UnreadThreads<'_>,
    ) -> Result<(Vec<(Comment, Comment)>, i64), StorageError> {
        self.unread_comments(within).await
    }

    async fn unread_ask_threads(
        &mut self,
        within: &UnreadThreads<'_>,
    ) -> Result<(Vec<(Ask, AskWrite)>, i64), StorageError> {
        self.unread_asks(within).await
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
        .bind(ask.to_string())
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
        .bind(r.id.to_string())
        .bind(r.artifact.to_string())
        .bind(r.version)
        .bind(r.outcome.as_str())
        .bind(r.body.clone())
        .bind(text(&r.by))
        .bind(ms(&r.at))
        .bind(r.ask.map(|x| x.to_string()))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn reviews(&mut self, artifact: ArtifactId) -> Result<Vec<Review>, StorageError> {
        sqlx::query(
            "SELECT id, artifact, version, outcome, body, by_actor, at, ask FROM console_reviews \
             WHERE artifact = $1 ORDER BY at, id",
        )
        .bind(artifact.to_string())
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            Ok(Review {
                id: id_in(r, "id", ReviewId::parse)?,
                artifact: id_in(r, "artifact", ArtifactId::parse)?,
                version: r.try_get("version").map_err(db_err)?,
                outcome: ReviewOutcome::parse(&r.try_get::<String, _>("outcome").map_err(db_err)?)
                    .ok_or_else(|| corrupt("review outcome"))?,
                body: r.try_get("body").map_err(db_err)?,
                by: json_of(
                    &r.try_get::<String, _>("by_actor").map_err(db_err)?,
                    "actor",
                )?,
                at: time(r.try_get("at").map_err(db_err)?)?,
                ask: opt_id_in(r, "ask", AskId::parse)?,
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
