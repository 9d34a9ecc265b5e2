//! Live sessions (which replica holds each session's link, its roles and heartbeat), and the
//! link notices replicas send each other (PostgreSQL `LISTEN`/`NOTIFY` on [`LINKS_CHANNEL`]).
//! [`PresenceTx`] on its own store, `PresenceStore` (`tx.presence()`).

use countersign_common::sql::{Backend, db_err};
use countersign_console_core::Time;
use countersign_console_core::ids::SessionId;
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::messages::LiveSession;
use countersign_console_core::work::store::ms;
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::work::{PresenceStore, id_in, json_of, text};
use crate::{login, time};
use async_trait::async_trait;
use countersign_console_core::work::PresenceTx;

/// The PostgreSQL channel link notices go on (ids and replica names, never content).
pub const LINKS_CHANNEL: &str = "countersign_console_links";

const LIVE_COLUMNS: &str = "session_id, replica, link, title, roles, capabilities, modes, owner, \
     service, live_since, last_activity_at";

fn live_of(r: &AnyRow) -> Result<LiveSession, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    let go = |c: &str| -> Result<Option<String>, StorageError> { r.try_get(c).map_err(db_err) };
    Ok(LiveSession {
        session_id: id_in(r, "session_id", SessionId::parse)?,
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

impl PresenceStore<'_> {
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
        self.listen(
            LINKS_CHANNEL,
            "console link listener",
            |_| async {},
            move |payload| notice(payload.to_owned()),
        )
    }
}

#[async_trait]
impl PresenceTx for PresenceStore<'_> {
    async fn put_live(&mut self, s: &LiveSession) -> Result<Option<(String, i64)>, StorageError> {
        let prev = sqlx::query(&format!(
            "SELECT replica, link FROM console_live_sessions WHERE session_id = $1{}",
            self.lock_clause()
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
        session: &SessionId,
        replica: &str,
        link: i64,
    ) -> Result<Option<LiveSession>, StorageError> {
        let gone = sqlx::query(&format!(
        "DELETE FROM console_live_sessions WHERE session_id = $1 AND replica = $2 AND link = $3 \
         RETURNING {LIVE_COLUMNS}"
    ))
    .bind(session.as_str())
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
                .bind(session.as_str())
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
        session: &SessionId,
        replica: &str,
        fresh_after: Time,
    ) -> Result<Option<LiveSession>, StorageError> {
        sqlx::query(&format!(
            "SELECT {LIVE_COLUMNS} FROM console_live_sessions \
         WHERE session_id = $1 AND (replica = $2 OR heartbeat_at > $3)"
        ))
        .bind(session.as_str())
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
    ) -> Result<Vec<SessionId>, StorageError> {
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
        .map(|r| id_in(r, "session_id", SessionId::parse))
        .collect()
    }

    async fn heartbeat(
        &mut self,
        replica: &str,
        at: Time,
        activity: &[(SessionId, Time)],
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
}
