//! Conversation state: the message threads a person wrote in and has not read, read marks of
//! threads and agent conversations, replies read ([`MessageInboxTx`] on its own store,
//! `MessageInboxStore`, `tx.message_inbox()`); messages by session, and webhook ids seen
//! (`MessageTx`'s).

use countersign_common::sql::db_err;
use countersign_console_core::Time;
use countersign_console_core::ids::{Login, MessageId, SessionId};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::IssueKey;
use countersign_console_core::work::messages::Message;
use countersign_console_core::work::store::ms;
use sqlx::Row;

use crate::time;
use crate::work::{Args, MessageInboxStore, MessageStore, id_in};
use async_trait::async_trait;
use countersign_console_core::work::MessageInboxTx;

use super::{message_at, message_columns, opt_ms};

pub(super) async fn messages_by_session(
    tx: &mut MessageStore<'_>,
    session: &SessionId,
    ids: &[MessageId],
) -> Result<Vec<MessageId>, StorageError> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let mut a = Args::default();
    let s = a.push(session.to_string());
    let ids: Vec<String> = ids.iter().map(MessageId::to_string).collect();
    let list = a.list(tx.backend, &ids);
    let sql = format!(
        "SELECT id FROM console_messages WHERE author_session = {s} AND id IN {list} ORDER BY id"
    );
    sqlx::query_with(&sql, a.build())
        .fetch_all(&mut *tx.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| id_in(r, "id", MessageId::parse))
        .collect()
}

pub(super) async fn insert_webhook(
    tx: &mut MessageStore<'_>,
    webhook_id: &str,
    message_id: MessageId,
    at: Time,
) -> Result<bool, StorageError> {
    let r = sqlx::query(
        "INSERT INTO console_webhooks (webhook_id, message_id, received_at) VALUES ($1, $2, $3) \
         ON CONFLICT (webhook_id) DO NOTHING",
    )
    .bind(webhook_id)
    .bind(message_id.to_string())
    .bind(ms(&at))
    .execute(&mut *tx.tx)
    .await
    .map_err(db_err)?;
    Ok(r.rows_affected() == 1)
}

#[async_trait]
impl MessageInboxTx for MessageInboxStore<'_> {
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
        thread_id: MessageId,
    ) -> Result<bool, StorageError> {
        let row = sqlx::query(
        "SELECT 1 AS x FROM console_messages WHERE thread_id = $1 AND author_login = $2 LIMIT 1",
    )
    .bind(thread_id.to_string())
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
            self.lock_clause()
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
    ) -> Result<Vec<(SessionId, Option<Time>, Option<Time>)>, StorageError> {
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
                    id_in(r, "session_id", SessionId::parse)?,
                    opt_ms(r, "cleared_before")?,
                    opt_ms(r, "read_through")?,
                ))
            })
            .collect()
    }

    async fn agent_state(
        &mut self,
        login: &Login,
        session: &SessionId,
    ) -> Result<Option<(Option<Time>, Option<Time>)>, StorageError> {
        let row = sqlx::query(&format!(
            "SELECT cleared_before, read_through FROM console_agent_state \
         WHERE login = $1 AND session_id = $2{}",
            self.lock_clause()
        ))
        .bind(login.as_str())
        .bind(session.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        row.map(|r| Ok((opt_ms(&r, "cleared_before")?, opt_ms(&r, "read_through")?)))
            .transpose()
    }

    async fn put_agent_state(
        &mut self,
        login: &Login,
        session: &SessionId,
        cleared_before: Option<Time>,
        read_through: Option<Time>,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_agent_state (login, session_id, cleared_before, read_through) \
         VALUES ($1, $2, $3, $4) ON CONFLICT (login, session_id) DO UPDATE \
         SET cleared_before = excluded.cleared_before, read_through = excluded.read_through",
        )
        .bind(login.as_str())
        .bind(session.as_str())
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
        session: Option<&SessionId>,
    ) -> Result<Vec<(SessionId, MessageId)>, StorageError> {
        let mut a = Args::default();
        let me = a.push(login.as_str().to_owned());
        let mut filter = String::new();
        if let Some(s) = session {
            filter = format!(" AND root.target_session = {}", a.push(s.to_string()));
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
                let id = id_in(r, "id", MessageId::parse)?;
                Ok((id_in(r, "session_id", SessionId::parse)?, id))
            })
            .collect()
    }

    async fn read_replies(&mut self, login: &Login, ids: &[MessageId]) -> Result<(), StorageError> {
        for id in ids {
            sqlx::query(
                "INSERT INTO console_read_replies (login, message_id) VALUES ($1, $2) \
             ON CONFLICT (login, message_id) DO NOTHING",
            )
            .bind(login.as_str())
            .bind(id.to_string())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }
}
