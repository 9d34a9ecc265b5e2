//! The issue rows ([`IssueTx`]): inserts and updates (with PostgreSQL's label rows; SQLite's
//! triggers keep its own), children and ranks, per-person read state and the sessions
//! subscribed to an issue. The lists are `list.rs`'s, the full-text index `search.rs`'s.

use async_trait::async_trait;
use countersign_common::sql::{Backend, conflict_if_unique, db_err};
use countersign_console_core::Time;
use countersign_console_core::ids::{Login, SessionId};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{
    Candidate, Hit, Issue, IssueFilter, IssueKey, IssueListQuery, IssueTx, ProjectKey, ReadState,
    Status,
};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{
    Args, ISSUE_COLUMNS, IssueStore, StoredClaim, corrupt, issue_of, subscribers_of, text,
};
use crate::login;

/// What an issue update does to PostgreSQL's label rows.
enum LabelRows {
    Keep,
    Rewrite,
    Reorder,
}

fn r_text(r: &AnyRow, column: &str) -> Result<String, StorageError> {
    r.try_get(column).map_err(db_err)
}

impl IssueStore<'_> {
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
impl IssueTx for IssueStore<'_> {
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
        // Another transaction imported the same ref first (PostgreSQL waits for it,
        // then refuses): run again, and find its issue.
        .map_err(conflict_if_unique)?;
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
        self.filtered_issues(f).await
    }

    async fn issue_page(
        &mut self,
        q: &IssueListQuery,
        limit: u32,
    ) -> Result<Vec<Issue>, StorageError> {
        self.keyset_page(q, limit).await
    }

    async fn issue_page_total(&mut self, q: &IssueListQuery) -> Result<i64, StorageError> {
        self.keyset_total(q).await
    }

    async fn status_counts(
        &mut self,
        q: &IssueListQuery,
    ) -> Result<Vec<(Status, i64)>, StorageError> {
        self.counts_by_status(q).await
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
        self.issue_hits(words, project, limit).await
    }

    async fn word_counts(&mut self, words: &[String]) -> Result<Vec<i64>, StorageError> {
        self.index_word_counts(words).await
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
        self.newest_candidates(words, limit).await
    }

    async fn subscribers(
        &mut self,
        key: &IssueKey,
    ) -> Result<Vec<(SessionId, Time)>, StorageError> {
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
        subscribers_of(&rows)
    }

    async fn unsubscribe(
        &mut self,
        key: &IssueKey,
        session: &SessionId,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_unsubscribed (issue, session, through_event) \
             SELECT $1, $2, COALESCE(MAX(id), 0) FROM console_events WHERE true \
             ON CONFLICT (issue, session) DO UPDATE SET through_event = excluded.through_event",
        )
        .bind(key.as_str())
        .bind(session.as_str())
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }
}
