//! The messages' migration, version 10: messages, broadcasts, delivery attempts, live
//! sessions, conversation state (issue 14), and the messages' full-text index.

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
