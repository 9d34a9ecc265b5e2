//! # countersign-console-sql
//!
//! The console's [`Storage`] over sqlx's `Any` driver: SQLite (the embedded default, WAL) and
//! PostgreSQL through one SQL text (`$1, $2…` placeholders, TEXT ids, BIGINT unix-millisecond
//! times). Every operation is one statement, so no transaction spans calls; a sign-in attempt
//! is taken with `DELETE … RETURNING`, so each is used at most once even with several console
//! replicas on one PostgreSQL.
//!
//! Tables (created by [`SqlStorage::connect`] through the shared migration runner, versioned in
//! `console_schema_migrations`):
//! - `console_sessions`: browser sessions by SHA-256 of the cookie's token;
//! - `console_sign_in_attempts`: OpenID Connect sign-ins under way, by SHA-256 of `state`;
//! - `console_tokens`: personal agent tokens by id, with the SHA-256 of the token (unique);
//! - `console_people`: who has signed in, by lowercase login;
//! - the work core's tables ([`work`]): `console_projects`, `console_issues` with
//!   `console_issue_labels`, `console_pins` and `console_events`, used in transactions;
//! - the artifacts' tables ([`documents`]): `console_artifacts`, `console_documents`,
//!   `console_artifact_versions`, `console_references`, `console_artifact_unsubscribed` and the
//!   documents' index `console_artifact_text`.

use async_trait::async_trait;
use chrono::{TimeZone, Utc};
use countersign_console_core::clock::Time;
use countersign_console_core::ids::{Login, TokenId};
use countersign_console_core::storage::{
    BrowserSession, Decision, PersonalToken, SignInAttempt, Storage, StorageError,
};
use countersign_console_core::work::WorkTx;
use sqlx::any::AnyRow;
use sqlx::{AnyPool, Row};

mod asks;
mod delivery;
mod documents;
mod messages;
mod notify;
mod witness;
mod work;
mod writer;
pub use notify::Notice;
pub use witness::WitnessRecord;
pub use work::SqlTx;

use countersign_common::sql::{
    Backend, Migration, Schema, begin_err, db_err, migrate, open_pool, redact,
};

/// Version 1: sign-in and personal tokens (the first slice). `IF NOT EXISTS` throughout, so a
/// database the first slice made (which kept its version in `console_schema`) takes it again
/// harmlessly under the shared runner's `console_schema_migrations`.
const MIGRATION_1: &[&str] = &[
    "CREATE TABLE IF NOT EXISTS console_sessions (
        key TEXT PRIMARY KEY,
        login TEXT NOT NULL,
        csrf_token TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        expires_at BIGINT NOT NULL
    )",
    "CREATE INDEX IF NOT EXISTS console_sessions_expires ON console_sessions (expires_at)",
    "CREATE TABLE IF NOT EXISTS console_sign_in_attempts (
        key TEXT PRIMARY KEY,
        nonce TEXT NOT NULL,
        pkce_verifier TEXT NOT NULL,
        return_to TEXT NOT NULL,
        expires_at BIGINT NOT NULL
    )",
    "CREATE TABLE IF NOT EXISTS console_tokens (
        id TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        name TEXT NOT NULL,
        hash TEXT NOT NULL UNIQUE,
        created_at BIGINT NOT NULL,
        revoked_at BIGINT
    )",
    "CREATE INDEX IF NOT EXISTS console_tokens_owner ON console_tokens (owner)",
    "CREATE TABLE IF NOT EXISTS console_people (
        login TEXT PRIMARY KEY,
        first_seen BIGINT NOT NULL,
        last_seen BIGINT NOT NULL
    )",
];

/// Version 3: a personal token's optional expiry (protocol §3.1).
const MIGRATION_3: &[&str] = &["ALTER TABLE console_tokens ADD COLUMN expires_at BIGINT"];

/// The console's storage on SQLite or PostgreSQL. Cloning shares the pool.
#[derive(Clone)]
pub struct SqlStorage {
    pool: AnyPool,
    backend: Backend,
    shown_url: String,
    /// The URL itself (with any password), for the event listener's own connection.
    url: String,
    /// SQLite's group-committing writer (`writer.rs`); PostgreSQL's writers run concurrently.
    writer: Option<writer::Writer>,
}

impl std::fmt::Debug for SqlStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlStorage")
            .field("url", &self.shown_url)
            .finish()
    }
}

fn ms(t: &Time) -> i64 {
    t.timestamp_millis()
}

pub(crate) fn time(ms: i64) -> Result<Time, StorageError> {
    Utc.timestamp_millis_opt(ms)
        .single()
        .ok_or_else(|| StorageError::Other("a stored time is out of range".into()))
}

fn decision_of(r: &AnyRow) -> Result<Decision, StorageError> {
    Ok(Decision {
        login: login(&r.try_get::<String, _>("login").map_err(db_err)?)?,
        record_id: r.try_get("record_id").map_err(db_err)?,
        event: r.try_get("event").map_err(db_err)?,
        at: time(r.try_get("at").map_err(db_err)?)?,
    })
}

pub(crate) fn login(s: &str) -> Result<Login, StorageError> {
    Login::parse(s).ok_or_else(|| StorageError::Other("a stored login does not parse".into()))
}

/// The console's schema, applied at connect by the shared runner.
const SCHEMA: Schema = Schema {
    table: "console_schema_migrations",
    // Fixed, distinct from the broker's, so a console and a broker sharing one PostgreSQL
    // database do not wait on each other.
    lock_key: 7_243_101,
    program: "console",
    migrations: &[
        Migration {
            version: 1,
            name: "sign-in and personal tokens",
            sqlite: MIGRATION_1,
            postgres: MIGRATION_1,
        },
        Migration {
            version: 2,
            name: "the work core: projects, issues, pins, events",
            sqlite: work::MIGRATION_2,
            postgres: work::MIGRATION_2,
        },
        Migration {
            version: 3,
            name: "personal tokens may expire",
            sqlite: MIGRATION_3,
            postgres: MIGRATION_3,
        },
        Migration {
            version: 4,
            name: "read state and unsubscribed sessions",
            sqlite: work::MIGRATION_4,
            postgres: work::MIGRATION_4,
        },
        Migration {
            version: 5,
            name: "the issues' full-text index",
            sqlite: work::MIGRATION_5_SQLITE,
            postgres: work::MIGRATION_5_POSTGRES,
        },
        Migration {
            version: 6,
            name: "repository mappings and people's decisions",
            sqlite: work::MIGRATION_6_SQLITE,
            postgres: work::MIGRATION_6_POSTGRES,
        },
        Migration {
            version: 7,
            name: "delivery and architecture: settings, synced pull requests and runs, session groups, sources",
            sqlite: delivery::MIGRATION_7,
            postgres: delivery::MIGRATION_7,
        },
        Migration {
            version: 8,
            name: "artifacts: documents, files and images, versions, references, their index",
            sqlite: documents::MIGRATION_8_SQLITE,
            postgres: documents::MIGRATION_8_POSTGRES,
        },
        Migration {
            version: 9,
            name: "asks, comments, reviews and the inbox",
            sqlite: asks::MIGRATION_9_SQLITE,
            postgres: asks::MIGRATION_9_POSTGRES,
        },
        Migration {
            version: 10,
            name: "messages, broadcasts, delivery attempts, live sessions, conversation state",
            sqlite: messages::MIGRATION_10_SQLITE,
            postgres: messages::MIGRATION_10_POSTGRES,
        },
        Migration {
            version: 11,
            name: "the person who asked, for the inbox's threads",
            sqlite: asks::MIGRATION_11_SQLITE,
            postgres: asks::MIGRATION_11_POSTGRES,
        },
        Migration {
            version: 12,
            name: "the synced delivery data's generation",
            sqlite: delivery::MIGRATION_12,
            postgres: delivery::MIGRATION_12,
        },
        Migration {
            version: 13,
            name: "SQLite's issue index newest first",
            sqlite: work::MIGRATION_13_SQLITE,
            postgres: work::MIGRATION_13_POSTGRES,
        },
        Migration {
            version: 14,
            name: "the issue lists' orders: by update, creation and priority within a project; a person's issues",
            sqlite: work::MIGRATION_14,
            postgres: work::MIGRATION_14,
        },
        Migration {
            version: 15,
            name: "the broker's audit head, as this console witnessed it",
            sqlite: witness::MIGRATION_15,
            postgres: witness::MIGRATION_15,
        },
        Migration {
            version: 16,
            name: "a project's issues by status, in rank order",
            sqlite: work::MIGRATION_16,
            postgres: work::MIGRATION_16,
        },
        Migration {
            version: 17,
            name: "people's notification preferences and the notices' outbox",
            sqlite: notify::MIGRATION_17,
            postgres: notify::MIGRATION_17,
        },
        Migration {
            version: 18,
            name: "search: the issues' prefix indexes (SQLite), the issues by creation (PostgreSQL)",
            sqlite: work::MIGRATION_18_SQLITE,
            postgres: work::MIGRATION_18_POSTGRES,
        },
        Migration {
            version: 19,
            name: "search: each word's issues in creation order (PostgreSQL)",
            sqlite: work::MIGRATION_19_SQLITE,
            postgres: work::MIGRATION_19_POSTGRES,
        },
    ],
};

impl SqlStorage {
    /// Connects (`sqlite://path?mode=rwc`, `sqlite::memory:`, `postgres://…`) and creates or
    /// checks the tables.
    pub async fn connect(url: &str) -> Result<SqlStorage, StorageError> {
        let sqlite = Backend::of_url(url) == Some(Backend::Sqlite);
        let (pool, backend) = open_pool(url, if sqlite { 4 } else { 8 }).await?;
        let migrated =
            async { migrate(pool.begin().await.map_err(begin_err)?, backend, &SCHEMA).await };
        if let Err(e) = migrated.await {
            // A multi-host pool's watcher holds the pool until it is closed.
            pool.close().await;
            return Err(e);
        }
        let writer = (backend == Backend::Sqlite).then(|| writer::Writer::new(pool.clone()));
        Ok(SqlStorage {
            pool,
            backend,
            shown_url: redact(url),
            url: url.to_owned(),
            writer,
        })
    }

    /// The URL a listener's own connection opens: the configured one, or on a multi-host URL
    /// (`countersign_common::sql::pg_hosts`) the host the pool is on now.
    fn listen_url(&self) -> String {
        match countersign_common::sql::pg_hosts::HostList::parse(&self.url) {
            Ok(Some(_)) => self.pool.connect_options().database_url.to_string(),
            _ => self.url.clone(),
        }
    }

    /// Other replicas' events (PostgreSQL): listens on [`work::EVENTS_CHANNEL`] on a
    /// connection of its own and calls `committed` with each id notified; after the connection
    /// drops and comes back it calls `committed` with the log's highest id, so nothing missed
    /// while it was down is left unread. SQLite is one process: `None`.
    pub fn listen_events(
        &self,
        committed: std::sync::Arc<dyn Fn(i64) + Send + Sync>,
    ) -> Option<tokio::task::JoinHandle<()>> {
        let caught_up = committed.clone();
        self.listen(
            work::EVENTS_CHANNEL,
            "console event listener",
            move |storage| {
                let committed = caught_up.clone();
                async move {
                    if let Ok(mut tx) = storage.read().await
                        && let Ok(id) = tx.events().last_event_id().await
                    {
                        committed(id);
                    }
                }
            },
            move |payload| {
                if let Ok(id) = payload.parse::<i64>() {
                    committed(id);
                }
            },
        )
    }

    /// Listens on `channel` (PostgreSQL) on a connection of its own, to the host the pool is
    /// on, again a second after it drops or fails: `listening` runs each time the `LISTEN` is in
    /// place, `payload` with each notification. SQLite is one process: `None`.
    pub(crate) fn listen<L, F>(
        &self,
        channel: &'static str,
        what: &'static str,
        listening: L,
        payload: impl Fn(&str) + Send + 'static,
    ) -> Option<tokio::task::JoinHandle<()>>
    where
        L: Fn(SqlStorage) -> F + Send + 'static,
        F: std::future::Future<Output = ()> + Send,
    {
        if self.backend != Backend::Postgres {
            return None;
        }
        let storage = self.clone();
        Some(tokio::spawn(async move {
            loop {
                let url = storage.listen_url();
                match sqlx::postgres::PgListener::connect(&url).await {
                    Ok(mut l) => match l.listen(channel).await {
                        Err(e) => tracing::warn!(error = %e, "{what}: LISTEN failed"),
                        Ok(()) => {
                            listening(storage.clone()).await;
                            loop {
                                match l.recv().await {
                                    Ok(n) => payload(n.payload()),
                                    Err(e) => {
                                        tracing::warn!(error = %e, "{what} dropped");
                                        break;
                                    }
                                }
                            }
                        }
                    },
                    Err(e) => tracing::warn!(error = %e, "{what}: connect failed"),
                }
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
        }))
    }

    pub async fn close(&self) {
        self.pool.close().await;
    }
}

fn session_of(r: &AnyRow) -> Result<BrowserSession, StorageError> {
    Ok(BrowserSession {
        key: r.try_get("key").map_err(db_err)?,
        login: login(&r.try_get::<String, _>("login").map_err(db_err)?)?,
        csrf_token: r.try_get("csrf_token").map_err(db_err)?,
        created_at: time(r.try_get("created_at").map_err(db_err)?)?,
        expires_at: time(r.try_get("expires_at").map_err(db_err)?)?,
    })
}

fn token_of(r: &AnyRow) -> Result<PersonalToken, StorageError> {
    let id: String = r.try_get("id").map_err(db_err)?;
    Ok(PersonalToken {
        id: TokenId::parse(&id)
            .ok_or_else(|| StorageError::Other("a stored token id does not parse".into()))?,
        owner: login(&r.try_get::<String, _>("owner").map_err(db_err)?)?,
        name: r.try_get("name").map_err(db_err)?,
        hash: r.try_get("hash").map_err(db_err)?,
        created_at: time(r.try_get("created_at").map_err(db_err)?)?,
        expires_at: r
            .try_get::<Option<i64>, _>("expires_at")
            .map_err(db_err)?
            .map(time)
            .transpose()?,
        revoked_at: r
            .try_get::<Option<i64>, _>("revoked_at")
            .map_err(db_err)?
            .map(time)
            .transpose()?,
    })
}

const TOKEN_COLUMNS: &str = "id, owner, name, hash, created_at, expires_at, revoked_at";

#[async_trait]
impl Storage for SqlStorage {
    async fn put_session(&self, s: &BrowserSession) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_sessions (key, login, csrf_token, created_at, expires_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&s.key)
        .bind(s.login.as_str())
        .bind(&s.csrf_token)
        .bind(ms(&s.created_at))
        .bind(ms(&s.expires_at))
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn get_session(&self, key: &str) -> Result<Option<BrowserSession>, StorageError> {
        sqlx::query(
            "SELECT key, login, csrf_token, created_at, expires_at FROM console_sessions WHERE key = $1",
        )
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(session_of)
        .transpose()
    }

    async fn delete_session(&self, key: &str) -> Result<(), StorageError> {
        sqlx::query("DELETE FROM console_sessions WHERE key = $1")
            .bind(key)
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn put_attempt(&self, a: &SignInAttempt) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_sign_in_attempts (key, nonce, pkce_verifier, return_to, expires_at)
             VALUES ($1, $2, $3, $4, $5)",
        )
        .bind(&a.key)
        .bind(&a.nonce)
        .bind(&a.pkce_verifier)
        .bind(&a.return_to)
        .bind(ms(&a.expires_at))
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn take_attempt(&self, key: &str) -> Result<Option<SignInAttempt>, StorageError> {
        let row = sqlx::query(
            "DELETE FROM console_sign_in_attempts WHERE key = $1
             RETURNING key, nonce, pkce_verifier, return_to, expires_at",
        )
        .bind(key)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_err)?;
        row.map(|r| {
            Ok(SignInAttempt {
                key: r.try_get("key").map_err(db_err)?,
                nonce: r.try_get("nonce").map_err(db_err)?,
                pkce_verifier: r.try_get("pkce_verifier").map_err(db_err)?,
                return_to: r.try_get("return_to").map_err(db_err)?,
                expires_at: time(r.try_get("expires_at").map_err(db_err)?)?,
            })
        })
        .transpose()
    }

    async fn put_token(&self, t: &PersonalToken) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_tokens (id, owner, name, hash, created_at, expires_at, revoked_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
        )
        .bind(t.id.to_string())
        .bind(t.owner.as_str())
        .bind(&t.name)
        .bind(&t.hash)
        .bind(ms(&t.created_at))
        .bind(t.expires_at.as_ref().map(ms))
        .bind(t.revoked_at.as_ref().map(ms))
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn live_tokens(
        &self,
        owner: &Login,
        now: Time,
    ) -> Result<Vec<PersonalToken>, StorageError> {
        sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM console_tokens
             WHERE owner = $1 AND revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)
             ORDER BY created_at, id"
        ))
        .bind(owner.as_str())
        .bind(ms(&now))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?
        .iter()
        .map(token_of)
        .collect()
    }

    async fn token_by_hash(&self, hash: &str) -> Result<Option<PersonalToken>, StorageError> {
        sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM console_tokens WHERE hash = $1"
        ))
        .bind(hash)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(token_of)
        .transpose()
    }

    async fn revoke_token(
        &self,
        owner: &Login,
        id: TokenId,
        at: Time,
    ) -> Result<bool, StorageError> {
        let done = sqlx::query(
            "UPDATE console_tokens SET revoked_at = $1
             WHERE id = $2 AND owner = $3 AND revoked_at IS NULL",
        )
        .bind(ms(&at))
        .bind(id.to_string())
        .bind(owner.as_str())
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(done.rows_affected() > 0)
    }

    async fn has_person(&self, login: &Login) -> Result<bool, StorageError> {
        Ok(
            sqlx::query("SELECT 1 AS one FROM console_people WHERE login = $1")
                .bind(login.as_str())
                .fetch_optional(&self.pool)
                .await
                .map_err(db_err)?
                .is_some(),
        )
    }

    async fn record_decision(&self, d: &Decision) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_decisions (login, record_id, event, at) VALUES ($1, $2, $3, $4)",
        )
        .bind(d.login.as_str())
        .bind(d.record_id.as_str())
        .bind(d.event.as_str())
        .bind(ms(&d.at))
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn decisions_of(&self, l: &Login, limit: u32) -> Result<Vec<Decision>, StorageError> {
        sqlx::query(
            "SELECT login, record_id, event, at FROM console_decisions WHERE login = $1 \
             ORDER BY at DESC LIMIT $2",
        )
        .bind(l.as_str())
        .bind(i64::from(limit))
        .fetch_all(&self.pool)
        .await
        .map_err(db_err)?
        .iter()
        .map(decision_of)
        .collect()
    }

    async fn decision_on(&self, record_id: &str) -> Result<Option<Decision>, StorageError> {
        sqlx::query(
            "SELECT login, record_id, event, at FROM console_decisions WHERE record_id = $1 \
             ORDER BY at DESC LIMIT 1",
        )
        .bind(record_id)
        .fetch_optional(&self.pool)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(decision_of)
        .transpose()
    }

    async fn saw_person(&self, login: &Login, at: Time) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_people (login, first_seen, last_seen) VALUES ($1, $2, $2)
             ON CONFLICT (login) DO UPDATE SET last_seen = excluded.last_seen",
        )
        .bind(login.as_str())
        .bind(ms(&at))
        .execute(&self.pool)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn people(&self) -> Result<Vec<Login>, StorageError> {
        sqlx::query("SELECT login FROM console_people ORDER BY login")
            .fetch_all(&self.pool)
            .await
            .map_err(db_err)?
            .iter()
            .map(|r| login(&r.try_get::<String, _>("login").map_err(db_err)?))
            .collect()
    }

    async fn purge_expired(&self, now: Time) -> Result<u64, StorageError> {
        let a = sqlx::query("DELETE FROM console_sessions WHERE expires_at <= $1")
            .bind(ms(&now))
            .execute(&self.pool)
            .await
            .map_err(db_err)?
            .rows_affected();
        let b = sqlx::query("DELETE FROM console_sign_in_attempts WHERE expires_at <= $1")
            .bind(ms(&now))
            .execute(&self.pool)
            .await
            .map_err(db_err)?
            .rows_affected();
        Ok(a + b)
    }

    async fn ping(&self) -> Result<(), StorageError> {
        // The pool's acquire timeout bounds the wait for a connection.
        sqlx::query("SELECT 1")
            .execute(&self.pool)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn writable(&self) -> Result<(), StorageError> {
        let within = std::time::Duration::from_secs(2);
        countersign_common::sql::pg_hosts::writable(&self.pool, self.backend, within).await
    }

    async fn begin(&self) -> Result<Box<dyn WorkTx>, StorageError> {
        Ok(Box::new(
            SqlTx::begin(&self.pool, self.backend, self.writer.as_ref(), true).await?,
        ))
    }

    async fn read(&self) -> Result<Box<dyn WorkTx>, StorageError> {
        Ok(Box::new(
            SqlTx::begin(&self.pool, self.backend, None, false).await?,
        ))
    }

    /// 1, 2, 4 … ms, at most 64, plus up to as much again drawn from the clock's nanoseconds
    /// (replicas that conflicted together do not retry together).
    async fn back_off(&self, attempt: u32) {
        countersign_common::sql::back_off(attempt).await;
    }

    async fn read_loose(&self) -> Result<Box<dyn WorkTx>, StorageError> {
        Ok(Box::new(SqlTx::loose(&self.pool, self.backend).await?))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn migrations_are_consecutive() {
        assert!(super::SCHEMA.is_consecutive());
    }
}
