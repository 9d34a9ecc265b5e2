//! The schema, as ordered migrations the shared runner (`countersign_common::sql::migrate`)
//! applies at connect.
//!
//! `sqlx::migrate!` wants one migration directory per database type, and through `sqlx::Any`
//! it cannot tell the two backends apart; so the schema lives here instead, as ordered lists
//! of statements, one list per backend (they share the same text wherever the syntax agrees:
//! `TEXT`, `BIGINT`, partial indexes and `ON CONFLICT` all work in both). The applied version
//! is kept in a small `schema_migrations` table and every pending migration runs in one
//! transaction with the version rows, so a failed migration leaves the schema as it was. On
//! PostgreSQL the transaction first takes an advisory lock, so replicas starting together
//! migrate one at a time.
//!
//! A migration, once released, is never edited: add a new one.

use countersign_common::sql::{Migration, Schema};

/// Version 1, the same text on both backends.
///
/// Every aggregate is a table with typed key and index columns (TEXT ids and states, BIGINT
/// unix-millisecond times, a nullable `*_ms` column standing for an optional end) and a `doc`
/// column holding the serde JSON of the whole aggregate. Records, which have no serde form of
/// their own, keep their canonical text and their decision instead.
const V1_INITIAL: &[&str] = &[
    "CREATE TABLE credentials (
        id TEXT PRIMARY KEY,
        thumbprint TEXT NOT NULL,
        issued_at_ms BIGINT NOT NULL,
        expires_at_ms BIGINT NOT NULL,
        revoked_at_ms BIGINT,
        doc TEXT NOT NULL
    )",
    "CREATE INDEX credentials_thumbprint ON credentials (thumbprint)",
    "CREATE INDEX credentials_unrevoked ON credentials (issued_at_ms) WHERE revoked_at_ms IS NULL",
    "CREATE TABLE logins (
        pending_hash TEXT PRIMARY KEY,
        record_id TEXT NOT NULL,
        code TEXT NOT NULL,
        doc TEXT NOT NULL
    )",
    "CREATE INDEX logins_record ON logins (record_id)",
    "CREATE TABLE records (
        id TEXT PRIMARY KEY,
        text TEXT NOT NULL,
        state TEXT NOT NULL,
        decided TEXT,
        code TEXT,
        approver TEXT NOT NULL,
        kind TEXT NOT NULL,
        requested_at_ms BIGINT NOT NULL,
        expires_at_ms BIGINT NOT NULL
    )",
    "CREATE INDEX records_state_expiry ON records (state, expires_at_ms)",
    "CREATE INDEX records_code ON records (code) WHERE code IS NOT NULL",
    "CREATE TABLE enrollments (
        id TEXT PRIMARY KEY,
        credential_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        created_at_ms BIGINT NOT NULL,
        lease_expires_at_ms BIGINT NOT NULL,
        ended_at_ms BIGINT,
        doc TEXT NOT NULL
    )",
    "CREATE INDEX enrollments_credential ON enrollments (credential_id)",
    "CREATE INDEX enrollments_live_lease ON enrollments (lease_expires_at_ms) WHERE ended_at_ms IS NULL",
    "CREATE TABLE requests (
        id TEXT PRIMARY KEY,
        enrollment_id TEXT NOT NULL,
        state TEXT NOT NULL,
        created_at_ms BIGINT NOT NULL,
        doc TEXT NOT NULL
    )",
    "CREATE INDEX requests_enrollment_state ON requests (enrollment_id, state)",
    "CREATE TABLE grants (
        id TEXT PRIMARY KEY,
        enrollment_id TEXT NOT NULL,
        request_id TEXT NOT NULL,
        created_at_ms BIGINT NOT NULL,
        expires_at_ms BIGINT,
        ended_at_ms BIGINT,
        doc TEXT NOT NULL
    )",
    "CREATE INDEX grants_enrollment ON grants (enrollment_id)",
    "CREATE INDEX grants_live_expiry ON grants (expires_at_ms) WHERE ended_at_ms IS NULL",
    "CREATE TABLE once_values (
        scope TEXT NOT NULL,
        value TEXT NOT NULL,
        until_ms BIGINT NOT NULL,
        PRIMARY KEY (scope, value)
    )",
    "CREATE INDEX once_values_until ON once_values (until_ms)",
    "CREATE TABLE outbox (
        id TEXT PRIMARY KEY,
        payload TEXT NOT NULL,
        attempts BIGINT NOT NULL,
        next_attempt_at_ms BIGINT NOT NULL
    )",
    "CREATE INDEX outbox_due ON outbox (next_attempt_at_ms)",
];

/// Version 2: named counters (the policy epoch replicas watch to reload after a reread).
const V2_COUNTERS: &[&str] = &["CREATE TABLE counters (
        name TEXT PRIMARY KEY,
        value BIGINT NOT NULL
    )"];

/// Version 3: the tamper-evident audit log (see `countersign_broker_core::audit`). The seals
/// on credentials and enrollments live in their `doc` (the `seal` field), so they need no
/// column: rows written before this version have none and are refused.
const V3_AUDIT_LOG: &[&str] = &[
    "CREATE TABLE audit_log (
        position BIGINT PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        body TEXT NOT NULL,
        prev_hash TEXT NOT NULL,
        hash TEXT NOT NULL,
        seal TEXT NOT NULL
    )",
    "CREATE INDEX audit_log_subject ON audit_log (subject)",
];

/// The audit entries that end their subject (`countersign_broker_core::audit::END_KINDS`), as
/// the partial index of version 4 and the query it serves both write it.
macro_rules! audit_ends {
    () => {
        "kind IN ('revocation', 'expiry', 'end', 'session_end', 'machine_login_end')"
    };
}
pub const AUDIT_ENDS: &str = audit_ends!();

/// Version 4: only the entries that end a subject are indexed by subject (releasing values looks
/// those up): the decisions and grants every request appends skip the index, which cost the
/// single SQLite writer about a tenth of its automatic-request rate.
const V4_AUDIT_ENDS: &[&str] = &[
    "DROP INDEX audit_log_subject",
    concat!(
        "CREATE INDEX audit_log_ends ON audit_log (subject) WHERE ",
        audit_ends!()
    ),
];

/// Version 5: chain hashes as their 32 bytes (not 64 hex digits), and on SQLite `position` as the
/// table's rowid (`INTEGER PRIMARY KEY`), so an append writes one B-tree, not a table and its
/// primary-key index. Smaller rows and one B-tree fewer per entry are what the audit log cost
/// the single SQLite writer (docs/benchmarks.md). Existing entries are converted in place; a
/// hash that is not hex (a tampered row) stops the migration, loudly.
const V5_AUDIT_COMPACT_SQLITE: &[&str] = &[
    "CREATE TABLE audit_log_v5 (
        position INTEGER PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        kind TEXT NOT NULL,
        subject TEXT NOT NULL,
        body TEXT NOT NULL,
        prev_hash BLOB NOT NULL,
        hash BLOB NOT NULL,
        seal TEXT NOT NULL
    )",
    "INSERT INTO audit_log_v5 (position, at_ms, kind, subject, body, prev_hash, hash, seal)
     SELECT position, at_ms, kind, subject, body, unhex(prev_hash), unhex(hash), seal
     FROM audit_log ORDER BY position",
    "DROP TABLE audit_log",
    "ALTER TABLE audit_log_v5 RENAME TO audit_log",
    concat!(
        "CREATE INDEX audit_log_ends ON audit_log (subject) WHERE ",
        audit_ends!()
    ),
];

const V5_AUDIT_COMPACT_POSTGRES: &[&str] = &["ALTER TABLE audit_log
        ALTER COLUMN prev_hash TYPE BYTEA USING decode(prev_hash, 'hex'),
        ALTER COLUMN hash TYPE BYTEA USING decode(hash, 'hex')"];

/// Version 6: people's passkeys (issue 29). The seal lives in the `doc` (its `seal` field),
/// as the credentials' and enrollments' do.
const V6_PASSKEYS: &[&str] = &[
    "CREATE TABLE passkeys (
        id TEXT PRIMARY KEY,
        person TEXT NOT NULL,
        created_at_ms BIGINT NOT NULL,
        removed_at_ms BIGINT,
        doc TEXT NOT NULL
    )",
    "CREATE INDEX passkeys_person ON passkeys (person, created_at_ms)",
];

/// Version 7: dynamic secrets (issue 49). Issued credentials, one row per grant and secret (the
/// whole row in `doc`, its encrypted value included); the outbox gains a topic, so that the
/// notifier and the destroyer each claim their own messages.
const V7_ISSUED: &[&str] = &[
    "CREATE TABLE issued (
        id TEXT PRIMARY KEY,
        grant_id TEXT NOT NULL,
        state TEXT NOT NULL,
        doc TEXT NOT NULL
    )",
    "CREATE INDEX issued_grant ON issued (grant_id)",
    "CREATE INDEX issued_unsettled ON issued (state) WHERE state <> 'destroyed'",
    "ALTER TABLE outbox ADD COLUMN topic TEXT NOT NULL DEFAULT 'notification'",
    "CREATE INDEX outbox_topic_due ON outbox (topic, next_attempt_at_ms)",
];

/// Every migration, in order. Versions are consecutive from 1.
pub(crate) const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sqlite: V1_INITIAL,
        postgres: V1_INITIAL,
    },
    Migration {
        version: 2,
        name: "counters",
        sqlite: V2_COUNTERS,
        postgres: V2_COUNTERS,
    },
    Migration {
        version: 3,
        name: "audit log",
        sqlite: V3_AUDIT_LOG,
        postgres: V3_AUDIT_LOG,
    },
    Migration {
        version: 4,
        name: "audit log: index ends only",
        sqlite: V4_AUDIT_ENDS,
        postgres: V4_AUDIT_ENDS,
    },
    Migration {
        version: 5,
        name: "audit log: hashes as bytes, SQLite rowid positions",
        sqlite: V5_AUDIT_COMPACT_SQLITE,
        postgres: V5_AUDIT_COMPACT_POSTGRES,
    },
    Migration {
        version: 6,
        name: "passkeys",
        sqlite: V6_PASSKEYS,
        postgres: V6_PASSKEYS,
    },
    Migration {
        version: 7,
        name: "issued credentials; outbox topics",
        sqlite: V7_ISSUED,
        postgres: V7_ISSUED,
    },
];

/// The broker's schema, as the shared migration runner (`countersign_common::sql::migrate`)
/// applies it: versions in `schema_migrations`, replicas serialised on PostgreSQL by an
/// advisory lock (key "csgn", arbitrary and fixed).
pub(crate) const SCHEMA: Schema = Schema {
    table: "schema_migrations",
    lock_key: 0x6373_676e,
    program: "broker",
    migrations: MIGRATIONS,
};

#[cfg(test)]
mod tests {
    use super::MIGRATIONS;
    use countersign_broker_core::audit::{self, GENESIS};
    use countersign_broker_core::seal::Sealer;
    use countersign_broker_core::storage::Storage;
    use sqlx::Connection;

    /// A chain written by version 4 (hashes as hex text) migrates to version 5 and still
    /// verifies, to the same head.
    async fn a_v4_chain_survives_migration_5(url: &str) {
        sqlx::any::install_default_drivers();
        let backend = crate::Backend::of_url(url).expect("backend");
        let mut raw = sqlx::AnyConnection::connect(url).await.expect("connect");
        sqlx::query(
            "CREATE TABLE schema_migrations (version BIGINT PRIMARY KEY, name TEXT NOT NULL)",
        )
        .execute(&mut raw)
        .await
        .expect("table");
        for m in MIGRATIONS.iter().filter(|m| m.version <= 4) {
            for st in m.statements(backend) {
                sqlx::query(st).execute(&mut raw).await.expect(m.name);
            }
            sqlx::query("INSERT INTO schema_migrations (version, name) VALUES ($1, $2)")
                .bind(m.version)
                .bind(m.name)
                .execute(&mut raw)
                .await
                .expect("version");
        }
        let key = zeroize::Zeroizing::new(vec![7u8; 32]);
        let sealer = Sealer::new(&key).expect("sealer");
        let at = chrono::DateTime::from_timestamp_millis(1_900_000_000_000).expect("time");
        let mut prev = GENESIS.to_owned();
        for position in 1..=3i64 {
            let body = format!("{{\"n\":{position}}}");
            let hash = audit::entry_hash(&prev, position, at, "grant", "grant:x", &body);
            sqlx::query(
                "INSERT INTO audit_log (position, at_ms, kind, subject, body, prev_hash, hash, seal) \
                 VALUES ($1, $2, 'grant', 'grant:x', $3, $4, $5, $6)",
            )
            .bind(position)
            .bind(at.timestamp_millis())
            .bind(body)
            .bind(prev.clone())
            .bind(hash.clone())
            .bind(sealer.seal_audit(position, &hash))
            .execute(&mut raw)
            .await
            .expect("v4 entry");
            prev = hash;
        }
        raw.close().await.expect("close");

        let storage = crate::SqlStorage::connect(url).await.expect("migrate to 5");
        let mut tx = storage.read().await.expect("read");
        let walk = audit::verify_all(&mut *tx, &sealer)
            .await
            .expect("read the chain")
            .expect("the migrated chain verifies");
        assert_eq!((walk.position, walk.hash.as_str()), (3, prev.as_str()));
    }

    #[tokio::test]
    async fn v4_chains_migrate_sqlite() {
        let dir = tempfile::tempdir().expect("dir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("v4.db").display());
        a_v4_chain_survives_migration_5(&url).await;
    }

    #[tokio::test]
    async fn v4_chains_migrate_postgres() {
        let Ok(base) = std::env::var("COUNTERSIGN_TEST_POSTGRES_URL") else {
            assert!(
                std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").as_deref() != Ok("1"),
                "COUNTERSIGN_REQUIRE_POSTGRES=1 but COUNTERSIGN_TEST_POSTGRES_URL is unset"
            );
            return;
        };
        sqlx::any::install_default_drivers();
        let name = format!("cs_v4_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::AnyConnection::connect(&base).await.expect("server");
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .expect("create");
        let root = base.split('?').next().unwrap_or(&base);
        let root = root.rsplit_once('/').map(|(r, _)| r).unwrap_or(root);
        a_v4_chain_survives_migration_5(&format!("{root}/{name}")).await;
        sqlx::query(&format!("DROP DATABASE {name} WITH (FORCE)"))
            .execute(&mut admin)
            .await
            .expect("drop");
    }

    #[test]
    fn versions_are_consecutive() {
        for (i, m) in MIGRATIONS.iter().enumerate() {
            assert_eq!(m.version, i as i64 + 1, "{}", m.name);
            assert!(!m.sqlite.is_empty() && !m.postgres.is_empty());
        }
    }

    #[test]
    fn the_ends_index_lists_the_end_kinds() {
        let quoted: Vec<String> = countersign_broker_core::audit::END_KINDS
            .iter()
            .map(|k| format!("'{k}'"))
            .collect();
        assert_eq!(
            super::AUDIT_ENDS,
            format!("kind IN ({})", quoted.join(", "))
        );
    }
}
