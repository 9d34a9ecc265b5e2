//! People's notification preferences and the notices' durable outbox (issue 29; the console's
//! `notify.rs` sends them). One row per item, channel and person: a notification the broker
//! sends again, or a second replica's, adds nothing.

use async_trait::async_trait;
use countersign_console_core::Login;
pub use countersign_console_core::notify::Notice;
use countersign_console_core::notify::{Channel, NoticeTx, Preferences};
use countersign_console_core::storage::StorageError;
use sqlx::any::AnyRow;
use sqlx::{Any, Executor, Row};

use crate::work::NoticeStore;
use crate::{SqlStorage, db_err};

/// migration 17: preferences and notices.
pub(crate) const MIGRATION_17: &[&str] = &[
    "CREATE TABLE notify_prefs (
        login TEXT PRIMARY KEY,
        doc TEXT NOT NULL
    )",
    "CREATE TABLE notify_outbox (
        id TEXT PRIMARY KEY,
        login TEXT NOT NULL,
        channel TEXT NOT NULL,
        item TEXT NOT NULL,
        title TEXT NOT NULL,
        path TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        next_at BIGINT NOT NULL,
        attempts BIGINT NOT NULL,
        sent_at BIGINT,
        UNIQUE (item, channel, login)
    )",
    "CREATE INDEX notify_outbox_due ON notify_outbox (next_at) WHERE sent_at IS NULL",
];

fn notice_of(r: &AnyRow) -> Result<Notice, StorageError> {
    let login: String = r.try_get("login").map_err(db_err)?;
    let channel: String = r.try_get("channel").map_err(db_err)?;
    Ok(Notice {
        id: r.try_get("id").map_err(db_err)?,
        login: Login::parse(&login)
            .ok_or_else(|| StorageError::Corrupt(format!("notice login {login:?}")))?,
        channel: Channel::parse(&channel)
            .ok_or_else(|| StorageError::Corrupt(format!("notice channel {channel:?}")))?,
        item: r.try_get("item").map_err(db_err)?,
        title: r.try_get("title").map_err(db_err)?,
        path: r.try_get("path").map_err(db_err)?,
        created_at: r.try_get("created_at").map_err(db_err)?,
        next_at: r.try_get("next_at").map_err(db_err)?,
        attempts: r.try_get("attempts").map_err(db_err)?,
    })
}

const NOTICE_COLUMNS: &str = "id, login, channel, item, title, path, created_at, next_at, attempts";

async fn prefs_of<'c, E: Executor<'c, Database = Any>>(
    e: E,
    login: &Login,
) -> Result<Option<Preferences>, StorageError> {
    let row = sqlx::query("SELECT doc FROM notify_prefs WHERE login = $1")
        .bind(login.as_str())
        .fetch_optional(e)
        .await
        .map_err(db_err)?;
    row.map(|r| {
        let doc: String = r.try_get("doc").map_err(db_err)?;
        serde_json::from_str(&doc)
            .map_err(|e| StorageError::Corrupt(format!("notification preferences: {e}")))
    })
    .transpose()
}

async fn people(tx: &mut NoticeStore<'_>) -> Result<Vec<(Login, Preferences)>, StorageError> {
    let rows = sqlx::query("SELECT login, doc FROM notify_prefs ORDER BY login")
        .fetch_all(&mut *tx.tx)
        .await
        .map_err(db_err)?;
    let mut out = Vec::with_capacity(rows.len());
    for r in rows {
        let login: String = r.try_get("login").map_err(db_err)?;
        let doc: String = r.try_get("doc").map_err(db_err)?;
        if let (Some(l), Ok(p)) = (Login::parse(&login), serde_json::from_str(&doc)) {
            out.push((l, p));
        }
    }
    Ok(out)
}

#[async_trait]
impl NoticeTx for NoticeStore<'_> {
    async fn notify_prefs_of(
        &mut self,
        login: &Login,
    ) -> Result<Option<Preferences>, StorageError> {
        prefs_of(&mut *self.tx, login).await
    }

    async fn notify_people_all(&mut self) -> Result<Vec<(Login, Preferences)>, StorageError> {
        people(self).await
    }

    async fn notify_everyone(&mut self) -> Result<Vec<(Login, Option<Preferences>)>, StorageError> {
        let rows = sqlx::query(
            "SELECT p.login AS login, n.doc AS doc FROM console_people p \
             LEFT JOIN notify_prefs n ON n.login = p.login ORDER BY p.login",
        )
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let login: String = r.try_get("login").map_err(db_err)?;
            let doc: Option<String> = r.try_get("doc").map_err(db_err)?;
            if let Some(l) = Login::parse(&login) {
                out.push((l, doc.and_then(|d| serde_json::from_str(&d).ok())));
            }
        }
        Ok(out)
    }

    async fn queue_notice(&mut self, n: &Notice) -> Result<bool, StorageError> {
        let done = sqlx::query(
            "INSERT INTO notify_outbox (id, login, channel, item, title, path, created_at, next_at, attempts)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0)
             ON CONFLICT (item, channel, login) DO NOTHING",
        )
        .bind(&n.id)
        .bind(n.login.as_str())
        .bind(n.channel.as_str())
        .bind(&n.item)
        .bind(&n.title)
        .bind(&n.path)
        .bind(n.created_at)
        .bind(n.next_at)
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(done.rows_affected() == 1)
    }
}

impl SqlStorage {
    /// A person's preferences, if they set any.
    pub async fn notify_prefs(&self, login: &Login) -> Result<Option<Preferences>, StorageError> {
        prefs_of(&self.pool, login).await
    }

    pub async fn put_notify_prefs(
        &self,
        login: &Login,
        prefs: &Preferences,
    ) -> Result<(), StorageError> {
        let doc = serde_json::to_string(prefs)
            .map_err(|e| StorageError::Other(format!("notification preferences: {e}")))?;
        sqlx::query(
            "INSERT INTO notify_prefs (login, doc) VALUES ($1, $2)
             ON CONFLICT (login) DO UPDATE SET doc = excluded.doc",
        )
        .bind(login.as_str())
        .bind(doc)
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    /// Claims up to `limit` unsent notices due at `now`: each is leased until `lease_until`
    /// (a claim moves its `next_at`, and only the claimer's update matches the old value), so
    /// two replicas, or a loop and a restart, never send one notice at once.
    pub async fn claim_notices(
        &self,
        now: i64,
        lease_until: i64,
        limit: u32,
    ) -> Result<Vec<Notice>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {NOTICE_COLUMNS} FROM notify_outbox WHERE sent_at IS NULL AND next_at <= $1 \
             ORDER BY next_at, id LIMIT $2"
        ))
        .bind(now)
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        self.claim(&rows, lease_until).await
    }

    /// Leases each of `rows` until `lease_until`: only the claimer whose update matches the
    /// `next_at` it read gets a notice.
    async fn claim(&self, rows: &[AnyRow], lease_until: i64) -> Result<Vec<Notice>, StorageError> {
        let mut out = Vec::new();
        for r in rows {
            let mut n = notice_of(r)?;
            let claimed = sqlx::query(
                "UPDATE notify_outbox SET next_at = $1 WHERE id = $2 AND next_at = $3 AND sent_at IS NULL",
            )
            .bind(lease_until)
            .bind(&n.id)
            .bind(n.next_at)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
            if claimed.rows_affected() == 1 {
                n.next_at = lease_until;
                out.push(n);
            }
        }
        Ok(out)
    }

    /// A person's other unsent notices on a channel (what a digest gathers), claimed the same
    /// way.
    pub async fn claim_notices_of(
        &self,
        login: &Login,
        channel: Channel,
        lease_until: i64,
    ) -> Result<Vec<Notice>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {NOTICE_COLUMNS} FROM notify_outbox \
             WHERE sent_at IS NULL AND login = $1 AND channel = $2 AND next_at < $3 ORDER BY created_at, id"
        ))
        .bind(login.as_str())
        .bind(channel.as_str())
        .bind(lease_until)
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?;
        self.claim(&rows, lease_until).await
    }

    /// Marks notices sent: they are never sent again.
    pub async fn notices_sent(&self, ids: &[String], at: i64) -> Result<(), StorageError> {
        for id in ids {
            sqlx::query("UPDATE notify_outbox SET sent_at = $1 WHERE id = $2")
                .bind(at)
                .bind(id)
                .execute(&self.pool)
                .await
                .map_err(db_err)?;
        }
        Ok(())
    }

    /// A failed attempt: due again at `next_at`.
    pub async fn notice_retry(
        &self,
        id: &str,
        attempts: i64,
        next_at: i64,
    ) -> Result<(), StorageError> {
        sqlx::query("UPDATE notify_outbox SET attempts = $1, next_at = $2 WHERE id = $3")
            .bind(attempts)
            .bind(next_at)
            .bind(id)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    /// Gives a notice up (too many attempts): marked sent, so it is not tried again.
    pub async fn notice_given_up(&self, id: &str, at: i64) -> Result<(), StorageError> {
        self.notices_sent(&[id.to_owned()], at).await
    }
}
