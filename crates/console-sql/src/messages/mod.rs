//! [`countersign_console_core::work::MessageTx`] on SQLite and PostgreSQL: delivery attempts
//! (any kind: messages, comment mentions), and migration 10's tables.
//!
//! - `console_delivery_attempts`: one row per attempt, keyed by `(kind, id, attempt)`; a
//!   pending one keeps the content it is sent with (`content`, dropped when it leaves
//!   `pending`), so that any replica can send it; a partial index finds pending ones by age for
//!   the sweep.
//!
//! One store per part, each implementing its own trait where its statements are (no module
//! forwards to another): `MessageStore` here (messages, broadcasts; `MessageTx`),
//! `attempts.rs` delivery attempts (`AttemptStore`, `AttemptTx`), `live.rs` live sessions and
//! link notices (`PresenceStore`, `PresenceTx`), `reads.rs` conversation state
//! (`MessageInboxStore`, `MessageInboxTx`; and the messages by session and webhook ids
//! `MessageTx` reads there), `search.rs` the messages' full-text search; `migration.rs` the
//! tables.

use async_trait::async_trait;
use countersign_common::sql::{Backend, db_err};
use countersign_console_core::Time;
use countersign_console_core::ids::{BroadcastId, Login, MessageId, SessionId};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::messages::{
    Broadcast, BroadcastRow, Message, MessageTx, Mode, Target,
};
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{Hit, IssueKey, ProjectKey};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::work::{Args, MessageStore, corrupt, id_in, id_of, json_of, text};
use crate::{login, time};

mod attempts;
mod live;
mod migration;
mod reads;
pub(crate) mod search;

pub(crate) use migration::{MIGRATION_10_POSTGRES, MIGRATION_10_SQLITE};

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

/// A message from columns named `<prefix><column>`; a stored id that does not parse is an
/// error naming its column and value (`crate::work::id_of`).
fn message_at(r: &AnyRow, prefix: &str) -> Result<Message, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> {
        r.try_get(format!("{prefix}{c}").as_str()).map_err(db_err)
    };
    let go = |c: &str| -> Result<Option<String>, StorageError> {
        r.try_get(format!("{prefix}{c}").as_str()).map_err(db_err)
    };
    let id = g("id")?;
    let message_id = |c: &str, s: &str| id_of(c, s, MessageId::parse);
    let target = match (go("target_session")?, go("target_role")?) {
        (Some(s), _) => Some(Target::Session(s)),
        (None, Some(r)) => Some(Target::Role(r)),
        (None, None) => None,
    };
    Ok(Message {
        id: message_id("id", &id)?,
        thread_id: message_id("thread_id", &g("thread_id")?)?,
        parent: go("parent")?
            .map(|p| message_id("parent", &p))
            .transpose()?,
        issue: go("issue")?
            .map(|p| IssueKey::parse(&p).ok_or_else(|| corrupt("issue key")))
            .transpose()?,
        broadcast: go("broadcast")?
            .map(|b| id_of("broadcast", &b, BroadcastId::parse))
            .transpose()?,
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
    attempts::opt_time(r, c)
}

fn broadcast_of(r: &AnyRow) -> Result<Broadcast, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    Ok(Broadcast {
        id: id_in(r, "id", BroadcastId::parse)?,
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
impl MessageTx for MessageStore<'_> {
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
        .bind(m.id.to_string())
        .bind(m.thread_id.to_string())
        .bind(m.parent.map(|p| p.to_string()))
        .bind(m.issue.as_ref().map(|k| k.as_str().to_owned()))
        .bind(m.broadcast.map(|b| b.to_string()))
        .bind(ts)
        .bind(tr)
        .bind(m.delivery.map(|d| d.as_str().to_owned()))
        .bind(m.body.as_str())
        .bind(m.notice.as_ref().map(text))
        .bind(text(&m.author))
        .bind(ms(&m.created_at))
        .bind(m.author_login().map(|l| l.as_str().to_owned()))
        .bind(m.author_session().map(SessionId::to_string))
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

    async fn message(&mut self, id: MessageId) -> Result<Option<Message>, StorageError> {
        sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM console_messages WHERE id = $1{}",
            self.lock_clause()
        ))
        .bind(id.to_string())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(message_of)
        .transpose()
    }

    async fn thread_messages(
        &mut self,
        thread_ids: &[MessageId],
    ) -> Result<Vec<Message>, StorageError> {
        if thread_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut a = Args::default();
        let thread_ids: Vec<String> = thread_ids.iter().map(MessageId::to_string).collect();
        let list = a.list(self.backend, &thread_ids);
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
        session: &SessionId,
        limit: u32,
        offset: u32,
    ) -> Result<Vec<Message>, StorageError> {
        sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM console_messages WHERE target_session = $1 \
             OR id IN (SELECT a.id FROM console_delivery_attempts a \
                       WHERE a.kind = 'message' AND a.session_id = $1) \
             ORDER BY seq DESC LIMIT $2 OFFSET $3"
        ))
        .bind(session.as_str())
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
        .bind(b.id.to_string())
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

    async fn broadcast(&mut self, id: BroadcastId) -> Result<Option<Broadcast>, StorageError> {
        sqlx::query(&format!(
            "SELECT {BROADCAST_COLUMNS} FROM console_broadcasts WHERE id = $1"
        ))
        .bind(id.to_string())
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
                    id: id_in(r, "id", BroadcastId::parse)?,
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

    async fn broadcast_messages(&mut self, id: BroadcastId) -> Result<Vec<Message>, StorageError> {
        sqlx::query(&format!(
            "SELECT {MESSAGE_COLUMNS} FROM console_messages WHERE broadcast = $1 ORDER BY seq"
        ))
        .bind(id.to_string())
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(message_of)
        .collect()
    }

    async fn messages_by_session(
        &mut self,
        session: &SessionId,
        ids: &[MessageId],
    ) -> Result<Vec<MessageId>, StorageError> {
        reads::messages_by_session(self, session, ids).await
    }

    async fn insert_webhook(
        &mut self,
        webhook_id: &str,
        message_id: MessageId,
        at: Time,
    ) -> Result<bool, StorageError> {
        reads::insert_webhook(self, webhook_id, message_id, at).await
    }

    async fn search_messages(
        &mut self,
        words: &[String],
        any: bool,
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError> {
        search::search_messages(self, words, any, project, limit).await
    }
}
