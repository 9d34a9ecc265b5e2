//! Delivery attempts (any kind: messages, comment mentions): one row per attempt, keyed by
//! `(kind, id, attempt)`; a pending one keeps the content it is sent with, so that any
//! replica can send it, until it leaves `pending`. [`AttemptTx`] on its own store,
//! `AttemptStore` (`tx.attempts()`).

use countersign_common::sql::{conflict_if_unique, db_err};
use countersign_console_core::Time;
use countersign_console_core::ids::{CommentId, MessageId, SessionId};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::messages::{
    Attempt, AttemptState, Deliverable, DeliveryContent, DeliveryKind, Finish, Mode, Scope,
};
use countersign_console_core::work::store::ms;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::time;
use crate::work::{Args, AttemptStore, corrupt, id_in, id_of, json_of, place_in, text};
use async_trait::async_trait;
use countersign_console_core::work::AttemptTx;

const ATTEMPT_COLUMNS: &str = "kind, id, attempt, session_id, mode, state, requested_by, \
     created_at, sent_at, accepted_at, accepted_as, error, project, issue, artifact";

pub(super) fn opt_time(r: &AnyRow, c: &str) -> Result<Option<Time>, StorageError> {
    r.try_get::<Option<i64>, _>(c)
        .map_err(db_err)?
        .map(time)
        .transpose()
}

/// What a row's `kind` and `id` name.
fn item_of(r: &AnyRow) -> Result<Deliverable, StorageError> {
    let kind: String = r.try_get("kind").map_err(db_err)?;
    let id: String = r.try_get("id").map_err(db_err)?;
    match DeliveryKind::parse(&kind).ok_or_else(|| corrupt("delivery kind"))? {
        DeliveryKind::Message => id_of("id", &id, MessageId::parse).map(Deliverable::Message),
        DeliveryKind::Mention => id_of("id", &id, CommentId::parse).map(Deliverable::Mention),
    }
}

pub(super) fn attempt_of(r: &AnyRow) -> Result<Attempt, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    let go = |c: &str| -> Result<Option<String>, StorageError> { r.try_get(c).map_err(db_err) };
    let (project, issue, artifact) = place_in(r)?;
    Ok(Attempt {
        item: item_of(r)?,
        attempt: r.try_get("attempt").map_err(db_err)?,
        session_id: id_in(r, "session_id", SessionId::parse)?,
        mode: Mode::parse(&g("mode")?).ok_or_else(|| corrupt("mode"))?,
        state: AttemptState::parse(&g("state")?).ok_or_else(|| corrupt("attempt state"))?,
        requested_by: json_of(&g("requested_by")?, "actor")?,
        created_at: time(r.try_get("created_at").map_err(db_err)?)?,
        sent_at: opt_time(r, "sent_at")?,
        accepted_at: opt_time(r, "accepted_at")?,
        accepted_as: go("accepted_as")?
            .map(|m| Mode::parse(&m).ok_or_else(|| corrupt("mode")))
            .transpose()?,
        error: go("error")?,
        scope: Scope {
            project,
            issue,
            artifact,
        },
    })
}

#[async_trait]
impl AttemptTx for AttemptStore<'_> {
    async fn next_attempt(&mut self, item: Deliverable) -> Result<i64, StorageError> {
        sqlx::query(
            "SELECT COALESCE(MAX(attempt), 0) + 1 AS n FROM console_delivery_attempts \
         WHERE kind = $1 AND id = $2",
        )
        .bind(item.kind().as_str())
        .bind(item.to_string())
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?
        .try_get("n")
        .map_err(db_err)
    }

    async fn insert_attempt(
        &mut self,
        a: &Attempt,
        content: Option<&DeliveryContent>,
    ) -> Result<(), StorageError> {
        sqlx::query(&format!(
            "INSERT INTO console_delivery_attempts ({ATTEMPT_COLUMNS}, content) VALUES \
         ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)"
        ))
        .bind(a.item.kind().as_str())
        .bind(a.item.to_string())
        .bind(a.attempt)
        .bind(a.session_id.as_str())
        .bind(a.mode.as_str())
        .bind(a.state.as_str())
        .bind(text(&a.requested_by))
        .bind(ms(&a.created_at))
        .bind(a.sent_at.as_ref().map(ms))
        .bind(a.accepted_at.as_ref().map(ms))
        .bind(a.accepted_as.map(|m| m.as_str().to_owned()))
        .bind(a.error.clone())
        .bind(a.scope.project.as_ref().map(|p| p.as_str().to_owned()))
        .bind(a.scope.issue.as_ref().map(|p| p.as_str().to_owned()))
        .bind(a.scope.artifact.map(|x| x.to_string()))
        .bind(content.map(text))
        .execute(&mut *self.tx)
        .await
        // Two attempts of one number: concurrent retries; the transaction runs again.
        .map_err(conflict_if_unique)?;
        Ok(())
    }

    async fn attempt(
        &mut self,
        item: Deliverable,
        attempt: i64,
    ) -> Result<Option<Attempt>, StorageError> {
        sqlx::query(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM console_delivery_attempts \
         WHERE kind = $1 AND id = $2 AND attempt = $3{}",
            self.lock_clause()
        ))
        .bind(item.kind().as_str())
        .bind(item.to_string())
        .bind(attempt)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(attempt_of)
        .transpose()
    }

    async fn attempts(&mut self, items: &[Deliverable]) -> Result<Vec<Attempt>, StorageError> {
        let mut a = Args::default();
        let mut any = Vec::new();
        for kind in [DeliveryKind::Message, DeliveryKind::Mention] {
            let ids: Vec<String> = items
                .iter()
                .filter(|i| i.kind() == kind)
                .map(Deliverable::to_string)
                .collect();
            if !ids.is_empty() {
                let k = a.push(kind.as_str().to_owned());
                let list = a.list(self.backend, &ids);
                any.push(format!("(kind = {k} AND id IN {list})"));
            }
        }
        if any.is_empty() {
            return Ok(Vec::new());
        }
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM console_delivery_attempts \
         WHERE {} ORDER BY kind, id, attempt{}",
            any.join(" OR "),
            self.lock_clause()
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(attempt_of)
            .collect()
    }

    async fn finish_attempt(
        &mut self,
        item: Deliverable,
        attempt: i64,
        f: &Finish<'_>,
    ) -> Result<Option<Attempt>, StorageError> {
        let mut a = Args::default();
        let to = a.push(f.to.as_str().to_owned());
        let at = a.push(ms(&f.at));
        let sent_at = if f.to == AttemptState::Sent {
            at.clone()
        } else {
            "sent_at".to_owned()
        };
        let error = match f.error {
            Some(e) => a.push(e.to_owned()),
            None => "error".to_owned(),
        };
        let mut conds = vec![
            format!("kind = {}", a.push(item.kind().as_str().to_owned())),
            format!("id = {}", a.push(item.to_string())),
            format!("attempt = {}", a.push(attempt)),
            "state = 'pending'".to_owned(),
        ];
        if let Some(s) = f.session {
            conds.push(format!("session_id = {}", a.push(s.to_string())));
        }
        if let Some(t) = &f.created_after {
            conds.push(format!("created_at > {}", a.push(ms(t))));
        }
        let sql = format!(
            "UPDATE console_delivery_attempts SET state = {to}, sent_at = {sent_at}, \
         error = {error}, content = NULL WHERE {} RETURNING {ATTEMPT_COLUMNS}",
            conds.join(" AND ")
        );
        sqlx::query_with(&sql, a.build())
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(db_err)?
            .as_ref()
            .map(attempt_of)
            .transpose()
    }

    async fn pending_attempts(
        &mut self,
        before: Option<Time>,
        session: Option<&SessionId>,
        limit: u32,
    ) -> Result<Vec<Attempt>, StorageError> {
        let mut a = Args::default();
        let mut conds = vec!["state = 'pending'".to_owned()];
        if let Some(t) = &before {
            conds.push(format!("created_at <= {}", a.push(ms(t))));
        }
        if let Some(s) = session {
            conds.push(format!("session_id = {}", a.push(s.to_string())));
        }
        let l = a.push(i64::from(limit));
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM console_delivery_attempts WHERE {} \
         ORDER BY created_at, kind, id, attempt LIMIT {l}",
            conds.join(" AND ")
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(attempt_of)
            .collect()
    }

    async fn pending_content(
        &mut self,
        item: Deliverable,
        attempt: i64,
    ) -> Result<Option<(SessionId, DeliveryContent)>, StorageError> {
        let row = sqlx::query(
            "SELECT session_id, content FROM console_delivery_attempts \
         WHERE kind = $1 AND id = $2 AND attempt = $3 AND state = 'pending'",
        )
        .bind(item.kind().as_str())
        .bind(item.to_string())
        .bind(attempt)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        let Some(r) = row else { return Ok(None) };
        let session = id_in(&r, "session_id", SessionId::parse)?;
        let content: Option<String> = r.try_get("content").map_err(db_err)?;
        match content {
            Some(c) => Ok(Some((session, json_of(&c, "delivery content")?))),
            None => Ok(None),
        }
    }

    async fn accept_attempt(
        &mut self,
        item: Deliverable,
        attempt: i64,
        at: Time,
        accepted_as: Mode,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "UPDATE console_delivery_attempts SET accepted_at = $1, accepted_as = $2 \
         WHERE kind = $3 AND id = $4 AND attempt = $5",
        )
        .bind(ms(&at))
        .bind(accepted_as.as_str())
        .bind(item.kind().as_str())
        .bind(item.to_string())
        .bind(attempt)
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }
}
