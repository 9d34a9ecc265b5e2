//! [`countersign_console_core::work::MessageTx`] on SQLite and PostgreSQL: delivery attempts
//! (any kind: messages, comment mentions), and migration 10's tables.
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
    Attempt, AttemptState, Broadcast, BroadcastRow, DeliveryContent, DeliveryKind, Finish,
    LiveSession, Message, MessageTx, Mode, Scope, Target,
};
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{Hit, IssueKey, ProjectKey};
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

const LIVE: &str = "CREATE TABLE console_live_sessions (
    session_id TEXT PRIMARY KEY,
    replica TEXT NOT NULL,
    link BIGINT NOT NULL,
    title TEXT NOT NULL,
    roles TEXT NOT NULL,
    capabilities TEXT NOT NULL,
    modes TEXT NOT NULL,
    owner TEXT,
    service TEXT,
    live_since BIGINT NOT NULL,
    last_activity_at BIGINT NOT NULL,
    heartbeat_at BIGINT NOT NULL
)";
const LIVE_REPLICA: &str =
    "CREATE INDEX console_live_sessions_replica ON console_live_sessions (replica)";
const LIVE_HEARTBEAT: &str =
    "CREATE INDEX console_live_sessions_heartbeat ON console_live_sessions (heartbeat_at)";
const LIVE_ROLES: &str = "CREATE TABLE console_live_roles (
    role TEXT NOT NULL,
    session_id TEXT NOT NULL,
    PRIMARY KEY (role, session_id)
)";

const INBOX: [&str; 5] = [
    "CREATE TABLE console_thread_reads (
        login TEXT NOT NULL,
        thread_id TEXT NOT NULL,
        read_through BIGINT NOT NULL,
        PRIMARY KEY (login, thread_id)
    )",
    "CREATE TABLE console_agent_state (
        login TEXT NOT NULL,
        session_id TEXT NOT NULL,
        cleared_before BIGINT,
        read_through BIGINT,
        PRIMARY KEY (login, session_id)
    )",
    "CREATE TABLE console_read_replies (
        login TEXT NOT NULL,
        message_id TEXT NOT NULL,
        PRIMARY KEY (login, message_id)
    )",
    "CREATE TABLE console_webhooks (
        webhook_id TEXT PRIMARY KEY,
        message_id TEXT NOT NULL,
        received_at BIGINT NOT NULL
    )",
    "CREATE INDEX console_messages_author_session ON console_messages (author_session, created_at)",
];

/// Version 10 on SQLite: messages, broadcasts, delivery attempts, live sessions, conversation
/// state (issue 14). The messages' full-text index is an FTS5 table keyed by `seq` (the rowid).
pub(crate) const MIGRATION_10_SQLITE: &[&str] = &[
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
    LIVE,
    LIVE_REPLICA,
    LIVE_HEARTBEAT,
    LIVE_ROLES,
    INBOX[0],
    INBOX[1],
    INBOX[2],
    INBOX[3],
    INBOX[4],
];

/// Version 10 on PostgreSQL; the messages' full-text index is a generated `tsvector`.
pub(crate) const MIGRATION_10_POSTGRES: &[&str] = &[
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
    LIVE,
    LIVE_REPLICA,
    LIVE_HEARTBEAT,
    LIVE_ROLES,
    INBOX[0],
    INBOX[1],
    INBOX[2],
    INBOX[3],
    INBOX[4],
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
    message_at(r, "")
}

/// The message columns of table alias `alias`, each named `<prefix><column>`.
fn message_columns(alias: &str, prefix: &str) -> String {
    MESSAGE_COLUMNS
        .split(", ")
        .map(|c| format!("{alias}.{c} AS {prefix}{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A message from columns named `<prefix><column>`.
fn message_at(r: &AnyRow, prefix: &str) -> Result<Message, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> {
        r.try_get(format!("{prefix}{c}").as_str()).map_err(db_err)
    };
    let go = |c: &str| -> Result<Option<String>, StorageError> {
        r.try_get(format!("{prefix}{c}").as_str()).map_err(db_err)
    };
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
        created_at: time(
            r.try_get(format!("{prefix}created_at").as_str())
                .map_err(db_err)?,
        )?,
    })
}

fn opt_ms(r: &AnyRow, c: &str) -> Result<Option<Time>, StorageError> {
    opt_time(r, c)
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

/// The PostgreSQL channel link notices go on (ids and replica names, never content).
pub const LINKS_CHANNEL: &str = "countersign_console_links";

const LIVE_COLUMNS: &str = "session_id, replica, link, title, roles, capabilities, modes, owner, \
     service, live_since, last_activity_at";

fn live_of(r: &AnyRow) -> Result<LiveSession, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    let go = |c: &str| -> Result<Option<String>, StorageError> { r.try_get(c).map_err(db_err) };
    Ok(LiveSession {
        session_id: g("session_id")?,
        replica: g("replica")?,
        link: r.try_get("link").map_err(db_err)?,
        title: g("title")?,
        roles: json_of(&g("roles")?, "roles")?,
        capabilities: json_of(&g("capabilities")?, "capabilities")?,
        modes: json_of(&g("modes")?, "modes")?,
        owner: go("owner")?.map(|o| login(&o)).transpose()?,
        service: go("service")?,
        live_since: time(r.try_get("live_since").map_err(db_err)?)?,
        last_activity_at: time(r.try_get("last_activity_at").map_err(db_err)?)?,
        open_asks: 0,
    })
}

impl SqlTx {
    async fn write_live_roles(&mut self, s: &LiveSession) -> Result<(), StorageError> {
        sqlx::query("DELETE FROM console_live_roles WHERE session_id = $1")
            .bind(s.session_id.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        for role in &s.roles {
            sqlx::query(
                "INSERT INTO console_live_roles (role, session_id) VALUES ($1, $2) \
                 ON CONFLICT (role, session_id) DO NOTHING",
            )
            .bind(role.as_str())
            .bind(s.session_id.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }
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
        let list = a.list(self.backend, ids);
        let sql = format!(
            "SELECT {ATTEMPT_COLUMNS} FROM console_delivery_attempts \
             WHERE kind = {k} AND id IN {list} ORDER BY id, attempt{}",
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
        let list = a.list(self.backend, thread_ids);
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM console_messages WHERE thread_id IN {list} \
             ORDER BY created_at, seq"
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

    async fn put_live(&mut self, s: &LiveSession) -> Result<Option<(String, i64)>, StorageError> {
        let prev = sqlx::query(&format!(
            "SELECT replica, link FROM console_live_sessions WHERE session_id = $1{}",
            self.lock()
        ))
        .bind(s.session_id.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .map(|r| -> Result<(String, i64), StorageError> {
            Ok((
                r.try_get("replica").map_err(db_err)?,
                r.try_get("link").map_err(db_err)?,
            ))
        })
        .transpose()?;
        sqlx::query(&format!(
            "INSERT INTO console_live_sessions ({LIVE_COLUMNS}, heartbeat_at) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) \
             ON CONFLICT (session_id) DO UPDATE SET replica = excluded.replica, \
             link = excluded.link, title = excluded.title, roles = excluded.roles, \
             capabilities = excluded.capabilities, modes = excluded.modes, \
             owner = excluded.owner, service = excluded.service, \
             live_since = excluded.live_since, last_activity_at = excluded.last_activity_at, \
             heartbeat_at = excluded.heartbeat_at"
        ))
        .bind(s.session_id.as_str())
        .bind(s.replica.as_str())
        .bind(s.link)
        .bind(s.title.as_str())
        .bind(text(&s.roles))
        .bind(text(&s.capabilities))
        .bind(text(&s.modes))
        .bind(s.owner.as_ref().map(|o| o.as_str().to_owned()))
        .bind(s.service.clone())
        .bind(ms(&s.live_since))
        .bind(ms(&s.last_activity_at))
        .bind(ms(&s.last_activity_at))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        self.write_live_roles(s).await?;
        Ok(prev.filter(|(r, l)| (r.as_str(), *l) != (s.replica.as_str(), s.link)))
    }

    async fn update_live(&mut self, s: &LiveSession) -> Result<bool, StorageError> {
        let r = sqlx::query(
            "UPDATE console_live_sessions SET title = $1, roles = $2, capabilities = $3, \
             modes = $4, last_activity_at = $5 WHERE session_id = $6 AND replica = $7 AND link = $8",
        )
        .bind(s.title.as_str())
        .bind(text(&s.roles))
        .bind(text(&s.capabilities))
        .bind(text(&s.modes))
        .bind(ms(&s.last_activity_at))
        .bind(s.session_id.as_str())
        .bind(s.replica.as_str())
        .bind(s.link)
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        if r.rows_affected() == 0 {
            return Ok(false);
        }
        self.write_live_roles(s).await?;
        Ok(true)
    }

    async fn remove_live(
        &mut self,
        session: &str,
        replica: &str,
        link: i64,
    ) -> Result<Option<LiveSession>, StorageError> {
        let gone = sqlx::query(&format!(
            "DELETE FROM console_live_sessions WHERE session_id = $1 AND replica = $2 AND link = $3 \
             RETURNING {LIVE_COLUMNS}"
        ))
        .bind(session)
        .bind(replica)
        .bind(link)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(live_of)
        .transpose()?;
        if gone.is_some() {
            sqlx::query("DELETE FROM console_live_roles WHERE session_id = $1")
                .bind(session)
                .execute(&mut *self.tx)
                .await
                .map_err(db_err)?;
        }
        Ok(gone)
    }

    async fn live_sessions(
        &mut self,
        replica: &str,
        fresh_after: Time,
    ) -> Result<Vec<LiveSession>, StorageError> {
        sqlx::query(&format!(
            "SELECT {LIVE_COLUMNS} FROM console_live_sessions \
             WHERE replica = $1 OR heartbeat_at > $2 ORDER BY session_id"
        ))
        .bind(replica)
        .bind(ms(&fresh_after))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(live_of)
        .collect()
    }

    async fn live_session(
        &mut self,
        session: &str,
        replica: &str,
        fresh_after: Time,
    ) -> Result<Option<LiveSession>, StorageError> {
        sqlx::query(&format!(
            "SELECT {LIVE_COLUMNS} FROM console_live_sessions \
             WHERE session_id = $1 AND (replica = $2 OR heartbeat_at > $3)"
        ))
        .bind(session)
        .bind(replica)
        .bind(ms(&fresh_after))
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(live_of)
        .transpose()
    }

    async fn live_roles(
        &mut self,
        replica: &str,
        fresh_after: Time,
    ) -> Result<Vec<String>, StorageError> {
        sqlx::query(
            "SELECT DISTINCT r.role AS role FROM console_live_roles r \
             JOIN console_live_sessions s ON s.session_id = r.session_id \
             WHERE s.replica = $1 OR s.heartbeat_at > $2 ORDER BY r.role",
        )
        .bind(replica)
        .bind(ms(&fresh_after))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| r.try_get("role").map_err(db_err))
        .collect()
    }

    async fn role_holders(
        &mut self,
        role: &str,
        replica: &str,
        fresh_after: Time,
    ) -> Result<Vec<String>, StorageError> {
        sqlx::query(
            "SELECT r.session_id AS session_id FROM console_live_roles r \
             JOIN console_live_sessions s ON s.session_id = r.session_id \
             WHERE r.role = $1 AND (s.replica = $2 OR s.heartbeat_at > $3) ORDER BY r.session_id",
        )
        .bind(role)
        .bind(replica)
        .bind(ms(&fresh_after))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| r.try_get("session_id").map_err(db_err))
        .collect()
    }

    async fn heartbeat(
        &mut self,
        replica: &str,
        at: Time,
        activity: &[(String, Time)],
    ) -> Result<(), StorageError> {
        sqlx::query("UPDATE console_live_sessions SET heartbeat_at = $1 WHERE replica = $2")
            .bind(ms(&at))
            .bind(replica)
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        for (session, t) in activity {
            sqlx::query(
                "UPDATE console_live_sessions SET last_activity_at = $1 \
                 WHERE session_id = $2 AND replica = $3 AND last_activity_at < $1",
            )
            .bind(ms(t))
            .bind(session.as_str())
            .bind(replica)
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn any_stale(&mut self, replica: &str, before: Time) -> Result<bool, StorageError> {
        let row = sqlx::query(
            "SELECT 1 AS x FROM console_live_sessions WHERE heartbeat_at <= $1 AND replica <> $2 LIMIT 1",
        )
        .bind(ms(&before))
        .bind(replica)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(row.is_some())
    }

    async fn remove_stale(
        &mut self,
        replica: &str,
        before: Time,
        limit: u32,
    ) -> Result<Vec<LiveSession>, StorageError> {
        let gone: Vec<LiveSession> = sqlx::query(&format!(
            "DELETE FROM console_live_sessions WHERE session_id IN \
             (SELECT session_id FROM console_live_sessions \
              WHERE replica <> $1 AND heartbeat_at <= $2 ORDER BY session_id LIMIT $3) \
             AND replica <> $1 AND heartbeat_at <= $2 RETURNING {LIVE_COLUMNS}"
        ))
        .bind(replica)
        .bind(ms(&before))
        .bind(i64::from(limit))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(live_of)
        .collect::<Result<_, _>>()?;
        for s in &gone {
            sqlx::query("DELETE FROM console_live_roles WHERE session_id = $1")
                .bind(s.session_id.as_str())
                .execute(&mut *self.tx)
                .await
                .map_err(db_err)?;
        }
        Ok(gone)
    }

    async fn notify_links(&mut self, payload: &str) -> Result<(), StorageError> {
        if self.backend == Backend::Postgres {
            sqlx::query("SELECT pg_notify($1, $2)")
                .bind(LINKS_CHANNEL)
                .bind(payload)
                .execute(&mut *self.tx)
                .await
                .map_err(db_err)?;
        }
        Ok(())
    }
    async fn unread_message_threads(
        &mut self,
        login: &Login,
        issue: Option<&IssueKey>,
        limit: u32,
        offset: u32,
    ) -> Result<(Vec<(Message, Message)>, i64), StorageError> {
        let mut a = Args::default();
        let me = a.push(login.as_str().to_owned());
        let mut filter = String::new();
        if let Some(k) = issue {
            filter = format!(" AND root.issue = {}", a.push(k.as_str().to_owned()));
        }
        let from = format!(
            "FROM console_messages root \
             JOIN console_messages nr ON nr.seq = (SELECT r.seq FROM console_messages r \
                 WHERE r.thread_id = root.id AND (r.author_login IS NULL OR r.author_login <> {me}) \
                 ORDER BY r.created_at DESC, r.seq DESC LIMIT 1) \
             LEFT JOIN console_thread_reads tr ON tr.login = {me} AND tr.thread_id = root.id \
             WHERE root.id = root.thread_id AND root.issue IS NOT NULL AND root.author_login = {me}{filter} \
             AND (tr.read_through IS NULL OR nr.created_at > tr.read_through)"
        );
        let total: i64 = sqlx::query_with(&format!("SELECT COUNT(*) AS n {from}"), a.build())
            .fetch_one(&mut *self.tx)
            .await
            .map_err(db_err)?
            .try_get("n")
            .map_err(db_err)?;
        let l = a.push(i64::from(limit));
        let o = a.push(i64::from(offset));
        let sql = format!(
            "SELECT {}, {} {from} ORDER BY nr.created_at DESC, root.id LIMIT {l} OFFSET {o}",
            message_columns("root", "t_"),
            message_columns("nr", "n_"),
        );
        let rows = sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?;
        let threads = rows
            .iter()
            .map(|r| Ok((message_at(r, "t_")?, message_at(r, "n_")?)))
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok((threads, total))
    }

    async fn wrote_in_message_thread(
        &mut self,
        login: &Login,
        thread_id: &str,
    ) -> Result<bool, StorageError> {
        let row = sqlx::query(
            "SELECT 1 AS x FROM console_messages WHERE thread_id = $1 AND author_login = $2 LIMIT 1",
        )
        .bind(thread_id)
        .bind(login.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(row.is_some())
    }

    async fn thread_read(
        &mut self,
        login: &Login,
        thread_id: &str,
    ) -> Result<Option<Time>, StorageError> {
        let row = sqlx::query(&format!(
            "SELECT read_through FROM console_thread_reads WHERE login = $1 AND thread_id = $2{}",
            self.lock()
        ))
        .bind(login.as_str())
        .bind(thread_id)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        row.map(|r| time(r.try_get("read_through").map_err(db_err)?))
            .transpose()
    }

    async fn put_thread_read(
        &mut self,
        login: &Login,
        thread_id: &str,
        read_through: Time,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_thread_reads (login, thread_id, read_through) VALUES ($1, $2, $3) \
             ON CONFLICT (login, thread_id) DO UPDATE SET read_through = excluded.read_through",
        )
        .bind(login.as_str())
        .bind(thread_id)
        .bind(ms(&read_through))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn agent_states(
        &mut self,
        login: &Login,
    ) -> Result<Vec<(String, Option<Time>, Option<Time>)>, StorageError> {
        let rows = sqlx::query(
            "SELECT x.session_id AS session_id, st.cleared_before AS cleared_before, \
             st.read_through AS read_through FROM \
             (SELECT target_session AS session_id FROM console_messages \
                WHERE author_login = $1 AND issue IS NULL AND target_session IS NOT NULL \
              UNION SELECT session_id FROM console_agent_state WHERE login = $1) x \
             LEFT JOIN console_agent_state st ON st.login = $1 AND st.session_id = x.session_id \
             ORDER BY x.session_id",
        )
        .bind(login.as_str())
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("session_id").map_err(db_err)?,
                    opt_ms(r, "cleared_before")?,
                    opt_ms(r, "read_through")?,
                ))
            })
            .collect()
    }

    async fn agent_state(
        &mut self,
        login: &Login,
        session: &str,
    ) -> Result<Option<(Option<Time>, Option<Time>)>, StorageError> {
        let row = sqlx::query(&format!(
            "SELECT cleared_before, read_through FROM console_agent_state \
             WHERE login = $1 AND session_id = $2{}",
            self.lock()
        ))
        .bind(login.as_str())
        .bind(session)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        row.map(|r| Ok((opt_ms(&r, "cleared_before")?, opt_ms(&r, "read_through")?)))
            .transpose()
    }

    async fn put_agent_state(
        &mut self,
        login: &Login,
        session: &str,
        cleared_before: Option<Time>,
        read_through: Option<Time>,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_agent_state (login, session_id, cleared_before, read_through) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (login, session_id) DO UPDATE \
             SET cleared_before = excluded.cleared_before, read_through = excluded.read_through",
        )
        .bind(login.as_str())
        .bind(session)
        .bind(cleared_before.as_ref().map(ms))
        .bind(read_through.as_ref().map(ms))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn unread_replies(
        &mut self,
        login: &Login,
        session: Option<&str>,
    ) -> Result<Vec<(String, String)>, StorageError> {
        let mut a = Args::default();
        let me = a.push(login.as_str().to_owned());
        let mut filter = String::new();
        if let Some(s) = session {
            filter = format!(" AND root.target_session = {}", a.push(s.to_owned()));
        }
        let sql = format!(
            "SELECT root.target_session AS session_id, r.id AS id FROM console_messages r \
             JOIN console_messages root ON root.id = r.thread_id \
             LEFT JOIN console_agent_state st ON st.login = {me} AND st.session_id = root.target_session \
             WHERE root.author_login = {me} AND root.issue IS NULL AND root.target_session IS NOT NULL{filter} \
             AND r.author_session = root.target_session AND r.id <> root.id \
             AND (st.cleared_before IS NULL OR r.created_at > st.cleared_before) \
             AND (st.read_through IS NULL OR r.created_at > st.read_through) \
             AND NOT EXISTS (SELECT 1 FROM console_read_replies rr \
                             WHERE rr.login = {me} AND rr.message_id = r.id) \
             ORDER BY r.created_at DESC, r.seq DESC"
        );
        let rows = sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("session_id").map_err(db_err)?,
                    r.try_get("id").map_err(db_err)?,
                ))
            })
            .collect()
    }

    async fn read_replies(&mut self, login: &Login, ids: &[String]) -> Result<(), StorageError> {
        for id in ids {
            sqlx::query(
                "INSERT INTO console_read_replies (login, message_id) VALUES ($1, $2) \
                 ON CONFLICT (login, message_id) DO NOTHING",
            )
            .bind(login.as_str())
            .bind(id.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn messages_by_session(
        &mut self,
        session: &str,
        ids: &[String],
    ) -> Result<Vec<String>, StorageError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut a = Args::default();
        let s = a.push(session.to_owned());
        let list = a.list(self.backend, ids);
        let sql = format!(
            "SELECT id FROM console_messages WHERE author_session = {s} AND id IN {list} ORDER BY id"
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(|r| r.try_get("id").map_err(db_err))
            .collect()
    }

    async fn insert_webhook(
        &mut self,
        webhook_id: &str,
        message_id: &str,
        at: Time,
    ) -> Result<bool, StorageError> {
        let r = sqlx::query(
            "INSERT INTO console_webhooks (webhook_id, message_id, received_at) VALUES ($1, $2, $3) \
             ON CONFLICT (webhook_id) DO NOTHING",
        )
        .bind(webhook_id)
        .bind(message_id)
        .bind(ms(&at))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(r.rows_affected() == 1)
    }

    async fn search_messages(
        &mut self,
        words: &[String],
        any: bool,
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError> {
        let mut a = Args::default();
        let (from, matches, score, snippet) = match self.backend {
            Backend::Sqlite => {
                let joined = words
                    .iter()
                    .map(|w| crate::work::fts_prefix(w))
                    .collect::<Vec<_>>()
                    .join(if any { " OR " } else { " " });
                (
                    "console_messages_fts f JOIN console_messages m ON m.seq = f.rowid".to_owned(),
                    format!("console_messages_fts MATCH {}", a.push(joined)),
                    "-bm25(console_messages_fts)".to_owned(),
                    "snippet(console_messages_fts, 0, '', '', '…', 16)".to_owned(),
                )
            }
            Backend::Postgres => {
                let joined = words
                    .iter()
                    .map(|w| crate::work::pg_prefix(w))
                    .collect::<Vec<_>>()
                    .join(if any { " | " } else { " & " });
                let q = a.push(joined);
                (
                    "console_messages m".to_owned(),
                    format!("m.search @@ to_tsquery('simple', {q})"),
                    format!("ts_rank(m.search, to_tsquery('simple', {q}))::float8"),
                    format!(
                        "ts_headline('simple', m.body, to_tsquery('simple', {q}), \
                         'StartSel=\"\",StopSel=\"\",MaxWords=24,MinWords=8')"
                    ),
                )
            }
        };
        let mut filter = format!("WHERE {matches}");
        if let Some(p) = project {
            filter.push_str(&format!(
                " AND m.issue LIKE {}",
                a.push(format!("{}-%", p.as_str()))
            ));
        }
        let total: i64 = sqlx::query_with(
            &format!("SELECT COUNT(*) AS n FROM {from} {filter}"),
            a.build(),
        )
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?
        .try_get("n")
        .map_err(db_err)?;
        let l = a.push(i64::from(limit));
        let sql = format!(
            "SELECT m.id AS id, m.body AS body, m.issue AS issue, m.created_at AS at, \
             {score} AS score, {snippet} AS snippet FROM {from} {filter} \
             ORDER BY score DESC, m.created_at DESC, m.id LIMIT {l}"
        );
        let rows = sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?;
        let hits = rows
            .iter()
            .map(|r| {
                let body: String = r.try_get("body").map_err(db_err)?;
                let issue: Option<String> = r.try_get("issue").map_err(db_err)?;
                Ok(Hit {
                    id: r.try_get("id").map_err(db_err)?,
                    issue: issue.as_deref().and_then(IssueKey::parse),
                    artifact: None,
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
            })
            .collect::<Result<Vec<_>, StorageError>>()?;
        Ok((hits, total))
    }
}

impl crate::SqlStorage {
    /// Link notices from every replica (PostgreSQL): listens on [`LINKS_CHANNEL`] on a
    /// connection of its own, reconnecting when it drops, and calls `notice` with each
    /// payload. A notice missed while the connection was down is not replayed: a delivery it
    /// announced fails after its 30 s, and a retry is a new attempt. SQLite is one process:
    /// `None`.
    pub fn listen_links(
        &self,
        notice: std::sync::Arc<dyn Fn(String) + Send + Sync>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        if self.backend != Backend::Postgres {
            return None;
        }
        let url = self.url.clone();
        Some(tokio::spawn(async move {
            loop {
                match sqlx::postgres::PgListener::connect(&url).await {
                    Ok(mut l) => {
                        if let Err(e) = l.listen(LINKS_CHANNEL).await {
                            tracing::warn!(error = %e, "console link listener: LISTEN failed");
                        } else {
                            loop {
                                match l.recv().await {
                                    Ok(n) => notice(n.payload().to_owned()),
                                    Err(e) => {
                                        tracing::warn!(error = %e, "console link listener dropped");
                                        break;
                                    }
                                }
                            }
                        }
                    }
                    Err(e) => tracing::warn!(error = %e, "console link listener: connect failed"),
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }))
    }
}
