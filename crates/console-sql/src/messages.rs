//! [`countersign_console_core::work::MessageTx`] on SQLite and PostgreSQL: delivery attempts
//! (any kind: messages, comment mentions), and migration 9's tables.
//!
//! - `console_delivery_attempts`: one row per attempt, keyed by `(kind, id, attempt)`; a
//!   pending one keeps the content it is sent with (`content`, dropped when it leaves
//!   `pending`), so that any replica can send it; a partial index finds pending ones by age for
//!   the sweep.

use async_trait::async_trait;
use countersign_common::sql::{Backend, db_err, is_unique_violation};
use countersign_console_core::Time;
use countersign_console_core::ids::Login;
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::messages::{
    Attempt, AttemptState, Broadcast, BroadcastRow, DeliveryContent, DeliveryKind, Finish, Message,
    MessageTx, Mode, Scope, Target,
};
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{IssueKey, ProjectKey};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::SqlTx;
use crate::work::{Args, corrupt, json_of, text};
use crate::{login, time};

const ATTEMPTS: &str = "CREATE TABLE console_delivery_attempts (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    session_id TEXT NOT NULL,
    mode TEXT NOT NULL,
    state TEXT NOT NULL,
    requested_by TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    sent_at BIGINT,
    accepted_at BIGINT,
    accepted_as TEXT,
    error TEXT,
    project TEXT,
    issue TEXT,
    artifact TEXT,
    content TEXT,
    PRIMARY KEY (kind, id, attempt)
)";
const ATTEMPTS_PENDING: &str = "CREATE INDEX console_delivery_attempts_pending \
    ON console_delivery_attempts (created_at) WHERE state = 'pending'";
const ATTEMPTS_SESSION: &str = "CREATE INDEX console_delivery_attempts_session ON console_delivery_attempts (session_id, state)";

/// The messages' columns after `seq` (SQLite's rowid, PostgreSQL's identity: the order they
/// were written in, which breaks ties of time).
macro_rules! messages_table {
    ($seq:literal) => {
        concat!(
            "CREATE TABLE console_messages (",
            $seq,
            ",
            id TEXT NOT NULL UNIQUE,
            thread_id TEXT NOT NULL,
            parent TEXT,
            issue TEXT,
            broadcast TEXT,
            target_session TEXT,
            target_role TEXT,
            delivery TEXT,
            body TEXT NOT NULL,
            notice TEXT,
            author TEXT NOT NULL,
            author_login TEXT,
            author_session TEXT,
            created_at BIGINT NOT NULL
        )"
        )
    };
}
const MESSAGES_THREAD: &str =
    "CREATE INDEX console_messages_thread ON console_messages (thread_id, created_at)";
const MESSAGES_TARGET: &str =
    "CREATE INDEX console_messages_target ON console_messages (target_session, seq)";
const MESSAGES_BROADCAST: &str =
    "CREATE INDEX console_messages_broadcast ON console_messages (broadcast, seq)";
const MESSAGES_AUTHOR: &str =
    "CREATE INDEX console_messages_author ON console_messages (author_login, created_at)";
const MESSAGES_ISSUE: &str = "CREATE INDEX console_messages_issue ON console_messages (issue)";
const BROADCASTS: &str = "CREATE TABLE console_broadcasts (
    id TEXT PRIMARY KEY,
    login TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    mode TEXT NOT NULL,
    body TEXT NOT NULL,
    by_actor TEXT NOT NULL,
    excluded TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    UNIQUE (login, idempotency_key)
)";
const BROADCASTS_CREATED: &str =
    "CREATE INDEX console_broadcasts_created ON console_broadcasts (created_at)";

/// Version 9 on SQLite: messages, broadcasts, delivery attempts, live sessions, conversation
/// state (issue 14). The messages' full-text index is an FTS5 table keyed by `seq` (the rowid).
pub(crate) const MIGRATION_9_SQLITE: &[&str] = &[
    ATTEMPTS,
    ATTEMPTS_PENDING,
    ATTEMPTS_SESSION,
    messages_table!("seq INTEGER PRIMARY KEY"),
    MESSAGES_THREAD,
    MESSAGES_TARGET,
    MESSAGES_BROADCAST,
    MESSAGES_AUTHOR,
    MESSAGES_ISSUE,
    "CREATE VIRTUAL TABLE console_messages_fts USING fts5(body, tokenize = 'unicode61')",
    BROADCASTS,
    BROADCASTS_CREATED,
];

/// Version 9 on PostgreSQL; the messages' full-text index is a generated `tsvector`.
pub(crate) const MIGRATION_9_POSTGRES: &[&str] = &[
    ATTEMPTS,
    ATTEMPTS_PENDING,
    ATTEMPTS_SESSION,
    messages_table!("seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY"),
    MESSAGES_THREAD,
    MESSAGES_TARGET,
    MESSAGES_BROADCAST,
    MESSAGES_AUTHOR,
    MESSAGES_ISSUE,
    "ALTER TABLE console_messages ADD COLUMN search tsvector
        GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED",
    "CREATE INDEX console_messages_search ON console_messages USING GIN (search)",
    BROADCASTS,
    BROADCASTS_CREATED,
];

const ATTEMPT_COLUMNS: &str = "kind, id, attempt, session_id, mode, state, requested_by, \
     created_at, sent_at, accepted_at, accepted_as, error, project, issue, artifact";

impl SqlTx {
    /// ` FOR UPDATE` on PostgreSQL in a write transaction (SQLite's writers are serial).
    pub(crate) fn lock(&self) -> &'static str {
        if self.write && self.backend == Backend::Postgres {
            " FOR UPDATE"
        } else {
            ""
        }
    }
}

fn opt_time(r: &AnyRow, c: &str) -> Result<Option<Time>, StorageError> {
    r.try_get::<Option<i64>, _>(c)
        .map_err(db_err)?
        .map(time)
        .transpose()
}

fn attempt_of(r: &AnyRow) -> Result<Attempt, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    let go = |c: &str| -> Result<Option<String>, StorageError> { r.try_get(c).map_err(db_err) };
    Ok(Attempt {
        kind: DeliveryKind::parse(&g("kind")?).ok_or_else(|| corrupt("delivery kind"))?,
        id: g("id")?,
        attempt: r.try_get("attempt").map_err(db_err)?,
        session_id: g("session_id")?,
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
            project: go("project")?
                .map(|p| ProjectKey::parse(&p).ok_or_else(|| corrupt("project key")))
                .transpose()?,
            issue: go("issue")?
                .map(|p| IssueKey::parse(&p).ok_or_else(|| corrupt("issue key")))
                .transpose()?,
            artifact: go("artifact")?,
        },
    })
}

const MESSAGE_COLUMNS: &str = "id, thread_id, parent, issue, broadcast, target_session, \
     target_role, delivery, body, notice, author, created_at";

fn message_of(r: &AnyRow) -> Result<Message, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    let go = |c: &str| -> Result<Option<String>, StorageError> { r.try_get(c).map_err(db_err) };
    let target = match (go("target_session")?, go("target_role")?) {
        (Some(s), _) => Some(Target::Session(s)),
        (None, Some(r)) => Some(Target::Role(r)),
        (None, None) => None,
    };
    Ok(Message {
        id: g("id")?,
        thread_id: g("thread_id")?,
        parent: go("parent")?,
        issue: go("issue")?
            .map(|p| IssueKey::parse(&p).ok_or_else(|| corrupt("issue key")))
            .transpose()?,
        broadcast: go("broadcast")?,
        target,
        delivery: go("delivery")?
            .map(|m| Mode::parse(&m).ok_or_else(|| corrupt("mode")))
            .transpose()?,
        body: g("body")?,
        notice: go("notice")?.map(|n| json_of(&n, "notice")).transpose()?,
        author: json_of(&g("author")?, "actor")?,
        created_at: time(r.try_get("created_at").map_err(db_err)?)?,
    })
}

fn broadcast_of(r: &AnyRow) -> Result<Broadcast, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    Ok(Broadcast {
        id: g("id")?,
        login: login(&g("login")?)?,
        idempotency_key: g("idempotency_key")?,
        fingerprint: g("fingerprint")?,
        mode: Mode::parse(&g("mode")?).ok_or_else(|| corrupt("mode"))?,
        body: g("body")?,
        by: json_of(&g("by_actor")?, "actor")?,
        excluded: json_of(&g("excluded")?, "excluded list")?,
        created_at: time(r.try_get("created_at").map_err(db_err)?)?,
    })
}

const BROADCAST_COLUMNS: &str =
    "id, login, idempotency_key, fingerprint, mode, body, by_actor, excluded, created_at";

#[async_trait]
impl MessageTx for SqlTx {
    async fn next_attempt(&mut self, kind: DeliveryKind, id: &str) -> Result<i64, StorageError> {
        sqlx::query(
            "SELECT COALESCE(MAX(attempt), 0) + 1 AS n FROM console_delivery_attempts \
             WHERE kind = $1 AND id = $2",
        )
        .bind(kind.as_str())
        .bind(id)
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
        .bind(a.kind.as_str())
        .bind(a.id.as_str())
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
        .bind(a.scope.artifact.clone())
        .bind(content.map(text))
        .execute(&mut *self.tx)
        .await
        .map_err(|e| {
            // Two attempts of one number: concurrent retries; the transaction runs again.
            if is_unique_violation(&e) {
                StorageError::Conflict
            } else {
                db_err(e)
            }
        })?;
        Ok(())
    }

    async fn attempt(
        &mut self,
        kind: DeliveryKind,
        id: &str,
        attempt: i64,
    ) -> Result<Option<Attempt>, StorageError> {
        sqlx::query(&format!(
            "SELECT {ATTEMPT_COLUMNS} FROM console_delivery_attempts \
             WHERE kind = $1 AND id = $2 AND attempt = $3{}",
            self.lock()
        ))
        .bind(kind.as_str())
        .bind(id)
        .bind(attempt)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(attempt_of)
        .transpose()
    }

    async fn attempts(
        &mut self,
        kind: DeliveryKind,
        ids: &[String],
    ) -> Result<Vec<Attempt>, StorageError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut a = Args::default();
        let k = a.push(kind.as_str().to_owned());
        let list: Vec<String> = ids.iter().map(|i| a.push(i.clone())).collect();
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM console_delivery_attempts \
             WHERE kind = {k} AND id IN ({}) ORDER BY id, attempt{}",
            list.join(", "),
            self.lock()
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
        kind: DeliveryKind,
        id: &str,
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
            format!("kind = {}", a.push(kind.as_str().to_owned())),
            format!("id = {}", a.push(id.to_owned())),
            format!("attempt = {}", a.push(attempt)),
            "state = 'pending'".to_owned(),
        ];
        if let Some(s) = f.session {
            conds.push(format!("session_id = {}", a.push(s.to_owned())));
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
        session: Option<&str>,
        limit: u32,
    ) -> Result<Vec<Attempt>, StorageError> {
        let mut a = Args::default();
        let mut conds = vec!["state = 'pending'".to_owned()];
        if let Some(t) = &before {
            conds.push(format!("created_at <= {}", a.push(ms(t))));
        }
        if let Some(s) = session {
            conds.push(format!("session_id = {}", a.push(s.to_owned())));
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
        kind: DeliveryKind,
        id: &str,
        attempt: i64,
    ) -> Result<Option<(String, DeliveryContent)>, StorageError> {
        let row = sqlx::query(
            "SELECT session_id, content FROM console_delivery_attempts \
             WHERE kind = $1 AND id = $2 AND attempt = $3 AND state = 'pending'",
        )
        .bind(kind.as_str())
        .bind(id)
        .bind(attempt)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        let Some(r) = row else { return Ok(None) };
        let session: String = r.try_get("session_id").map_err(db_err)?;
        let content: Option<String> = r.try_get("content").map_err(db_err)?;
        match content {
            Some(c) => Ok(Some((session, json_of(&c, "delivery content")?))),
            None => Ok(None),
        }
    }

    async fn accept_attempt(
        &mut self,
        kind: DeliveryKind,
        id: &str,
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
        .bind(kind.as_str())
        .bind(id)
        .bind(attempt)
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn bump_issue_sequence(&mut self, key: &IssueKey) -> Result<Option<i64>, StorageError> {
        let row = sqlx::query(
            "UPDATE console_issues SET sequence = sequence + 1 WHERE key = $1 RETURNING sequence",
        )
        .bind(key.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        row.map(|r| r.try_get("sequence").map_err(db_err))
            .transpose()
    }

    async fn insert_message(&mut self, m: &Message) -> Result<(), StorageError> {
        let (ts, tr) = match &m.target {
            Some(Target::Session(s)) => (Some(s.clone()), None),
            Some(Target::Role(r)) => (None, Some(r.clone())),
            None => (None, None),
        };
        let seq: i64 = sqlx::query(&format!(
            "INSERT INTO console_messages ({MESSAGE_COLUMNS}, author_login, author_session) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14) RETURNING seq"
        ))
        .bind(m.id.as_str())
        .bind(m.thread_id.as_str())
        .bind(m.parent.clone())
        .bind(m.issue.as_ref().map(|k| k.as_str().to_owned()))
        .bind(m.broadcast.clone())
        .bind(ts)
        .bind(tr)
        .bind(m.delivery.map(|d| d.as_str().to_owned()))
        .bind(m.body.as_str())
        .bind(m.notice.as_ref().map(text))
        .bind(text(&m.author))
        .bind(ms(&m.created_at))
        .bind(m.author_login().map(|l| l.as_str().to_owned()))
        .bind(m.author_session().map(str::to_owned))
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?
        .try_get("seq")
        .map_err(db_err)?;
        if self.backend == Backend::Sqlite {
            sqlx::query("INSERT INTO console_messages_fts (rowid, body) VALUES ($1, $2)")
                .bind(seq)
                .bind(m.body.as_str())
                .execute(&mut *self.tx)
                .await
                .map_err(db_err)?;
        }
        Ok(())
    }

    async fn message(&mut self, id: &str) -> Result<Option<Message>, StorageError> {
        sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM console_messages WHERE id = $1{}",
            self.lock()
        ))
        .bind(id)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(message_of)
        .transpose()
    }

    async fn thread_messages(
        &mut self,
        thread_ids: &[String],
    ) -> Result<Vec<Message>, StorageError> {
        if thread_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut a = Args::default();
        let list: Vec<String> = thread_ids.iter().map(|i| a.push(i.clone())).collect();
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM console_messages WHERE thread_id IN ({}) \
             ORDER BY created_at, seq",
            list.join(", ")
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(message_of)
            .collect()
    }

    async fn session_messages(
        &mut self,
        session: &str,
        limit: u32,
        offset: u32,
    ) -> Result<Vec<Message>, StorageError> {
        sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM console_messages WHERE target_session = $1 \
             OR id IN (SELECT a.id FROM console_delivery_attempts a \
                       WHERE a.kind = 'message' AND a.session_id = $1) \
             ORDER BY seq DESC LIMIT $2 OFFSET $3"
        ))
        .bind(session)
        .bind(i64::from(limit))
        .bind(i64::from(offset))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(message_of)
        .collect()
    }

    async fn insert_broadcast(&mut self, b: &Broadcast) -> Result<bool, StorageError> {
        let r = sqlx::query(&format!(
            "INSERT INTO console_broadcasts ({BROADCAST_COLUMNS}) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (login, idempotency_key) DO NOTHING"
        ))
        .bind(b.id.as_str())
        .bind(b.login.as_str())
        .bind(b.idempotency_key.as_str())
        .bind(b.fingerprint.as_str())
        .bind(b.mode.as_str())
        .bind(b.body.as_str())
        .bind(text(&b.by))
        .bind(text(&b.excluded))
        .bind(ms(&b.created_at))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(r.rows_affected() == 1)
    }

    async fn broadcast(&mut self, id: &str) -> Result<Option<Broadcast>, StorageError> {
        sqlx::query(&format!(
            "SELECT {BROADCAST_COLUMNS} FROM console_broadcasts WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(broadcast_of)
        .transpose()
    }

    async fn broadcast_by_key(
        &mut self,
        login: &Login,
        key: &str,
    ) -> Result<Option<Broadcast>, StorageError> {
        sqlx::query(&format!(
            "SELECT {BROADCAST_COLUMNS} FROM console_broadcasts \
             WHERE login = $1 AND idempotency_key = $2"
        ))
        .bind(login.as_str())
        .bind(key)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(broadcast_of)
        .transpose()
    }

    async fn broadcasts(
        &mut self,
        limit: u32,
        offset: u32,
    ) -> Result<Vec<BroadcastRow>, StorageError> {
        let rows = sqlx::query(
            "SELECT b.id AS id, b.idempotency_key AS idempotency_key, b.mode AS mode, \
             b.body AS body, b.by_actor AS by_actor, b.created_at AS created_at, \
             (SELECT COUNT(*) FROM console_messages m WHERE m.broadcast = b.id) AS recipient_count, \
             (SELECT COUNT(*) FROM console_messages r WHERE r.parent IS NOT NULL AND r.thread_id IN \
                 (SELECT m.id FROM console_messages m WHERE m.broadcast = b.id)) AS reply_count \
             FROM console_broadcasts b ORDER BY b.created_at DESC, b.id DESC LIMIT $1 OFFSET $2",
        )
        .bind(i64::from(limit))
        .bind(i64::from(offset))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
                Ok(BroadcastRow {
                    id: g("id")?,
                    idempotency_key: g("idempotency_key")?,
                    mode: Mode::parse(&g("mode")?).ok_or_else(|| corrupt("mode"))?,
                    body: g("body")?,
                    by: json_of(&g("by_actor")?, "actor")?,
                    created_at: time(r.try_get("created_at").map_err(db_err)?)?,
                    recipient_count: r.try_get("recipient_count").map_err(db_err)?,
                    reply_count: r.try_get("reply_count").map_err(db_err)?,
                })
            })
            .collect()
    }

    async fn broadcast_messages(&mut self, id: &str) -> Result<Vec<Message>, StorageError> {
        sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM console_messages WHERE broadcast = $1 ORDER BY seq"
        ))
        .bind(id)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(message_of)
        .collect()
    }
}
