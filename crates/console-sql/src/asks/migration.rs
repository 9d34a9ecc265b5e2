//! The asks' migrations: version 9's tables (asks, wordings, answers, snoozes, comments,
//! reviews) and full-text indexes, and version 11's column of who asked.

/// Version 9's tables, then the backend's full-text statements.
macro_rules! migration_9 {
    ($($extra:literal),* $(,)?) => {
        &[
            "CREATE TABLE console_asks (
                id TEXT PRIMARY KEY,
                kind TEXT NOT NULL,
                project TEXT NOT NULL,
                issue TEXT,
                artifact TEXT,
                block TEXT,
                question TEXT NOT NULL,
                options TEXT NOT NULL,
                state TEXT NOT NULL,
                answer TEXT,
                closed TEXT,
                approval TEXT,
                followers TEXT NOT NULL,
                author TEXT NOT NULL,
                author_session TEXT,
                worded_by TEXT NOT NULL,
                worded_at BIGINT NOT NULL,
                turn TEXT,
                turn_since BIGINT NOT NULL,
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL,
                seq BIGINT NOT NULL
            )",
            "CREATE INDEX console_asks_seq ON console_asks (seq)",
            "CREATE INDEX console_asks_issue ON console_asks (issue, seq)",
            "CREATE INDEX console_asks_artifact ON console_asks (artifact, seq)",
            "CREATE INDEX console_asks_project ON console_asks (project, state, seq)",
            "CREATE INDEX console_asks_session ON console_asks (author_session, state)",
            "CREATE INDEX console_asks_turn ON console_asks (turn, turn_since)",
            "CREATE TABLE console_ask_wordings (
                ask TEXT NOT NULL,
                n BIGINT NOT NULL,
                question TEXT NOT NULL,
                options TEXT NOT NULL,
                by_actor TEXT NOT NULL,
                at BIGINT NOT NULL,
                PRIMARY KEY (ask, n)
            )",
            "CREATE TABLE console_ask_answers (
                ask TEXT NOT NULL,
                n BIGINT NOT NULL,
                options TEXT NOT NULL,
                text TEXT,
                by_actor TEXT NOT NULL,
                by_login TEXT,
                at BIGINT NOT NULL,
                current BIGINT NOT NULL,
                seq BIGINT NOT NULL,
                PRIMARY KEY (ask, n)
            )",
            "CREATE INDEX console_ask_answers_seq ON console_ask_answers (seq)",
            "CREATE INDEX console_ask_answers_by ON console_ask_answers (by_login, at)",
            "CREATE TABLE console_ask_snoozes (
                login TEXT NOT NULL,
                ask TEXT NOT NULL,
                until BIGINT NOT NULL,
                PRIMARY KEY (login, ask)
            )",
            "CREATE TABLE console_comments (
                id TEXT PRIMARY KEY,
                thread_id TEXT NOT NULL,
                parent TEXT,
                project TEXT NOT NULL,
                issue TEXT,
                artifact TEXT,
                ask TEXT,
                quote TEXT,
                block TEXT,
                body TEXT NOT NULL,
                author TEXT NOT NULL,
                author_login TEXT,
                suggestion TEXT,
                mentions TEXT NOT NULL,
                thread_state TEXT,
                created_at BIGINT NOT NULL,
                edited_at BIGINT,
                seq BIGINT NOT NULL
            )",
            "CREATE INDEX console_comments_seq ON console_comments (seq)",
            "CREATE INDEX console_comments_issue ON console_comments (issue, seq)",
            "CREATE INDEX console_comments_artifact ON console_comments (artifact, seq)",
            "CREATE INDEX console_comments_ask ON console_comments (ask, seq)",
            "CREATE INDEX console_comments_thread ON console_comments (thread_id, seq)",
            "CREATE INDEX console_comments_author ON console_comments (author_login, created_at)",
            "CREATE TABLE console_reviews (
                id TEXT PRIMARY KEY,
                artifact TEXT NOT NULL,
                version BIGINT NOT NULL,
                outcome TEXT NOT NULL,
                body TEXT,
                by_actor TEXT NOT NULL,
                at BIGINT NOT NULL,
                ask TEXT
            )",
            "CREATE INDEX console_reviews_artifact ON console_reviews (artifact, at)",
            $($extra),*
        ]
    };
}

/// Version 9 on SQLite: the tables and FTS5 indexes of questions and comment bodies.
pub(crate) const MIGRATION_9_SQLITE: &[&str] = migration_9!(
    "CREATE VIRTUAL TABLE console_asks_fts USING fts5(body, tokenize = 'unicode61')",
    "CREATE VIRTUAL TABLE console_comments_fts USING fts5(body, tokenize = 'unicode61')",
);

/// Version 9 on PostgreSQL: the tables and generated `tsvector`s with GIN indexes.
pub(crate) const MIGRATION_9_POSTGRES: &[&str] = migration_9!(
    "ALTER TABLE console_asks ADD COLUMN search tsvector
        GENERATED ALWAYS AS (to_tsvector('simple', question)) STORED",
    "CREATE INDEX console_asks_search ON console_asks USING GIN (search)",
    "ALTER TABLE console_comments ADD COLUMN search tsvector
        GENERATED ALWAYS AS (to_tsvector('simple', body)) STORED",
    "CREATE INDEX console_comments_search ON console_comments USING GIN (search)",
);

/// Version 11 on SQLite: the person who asked, as a column (the inbox's threads find the asks
/// a person wrote in by it), filled in for the asks there are.
pub(crate) const MIGRATION_11_SQLITE: &[&str] = &[
    "ALTER TABLE console_asks ADD COLUMN author_login TEXT",
    "UPDATE console_asks SET author_login = json_extract(author, '$.login') \
     WHERE json_extract(author, '$.kind') = 'user'",
    "CREATE INDEX console_asks_author ON console_asks (author_login)",
];

/// Version 11 on PostgreSQL.
pub(crate) const MIGRATION_11_POSTGRES: &[&str] = &[
    "ALTER TABLE console_asks ADD COLUMN author_login TEXT",
    "UPDATE console_asks SET author_login = CAST(author AS jsonb) ->> 'login' \
     WHERE CAST(author AS jsonb) ->> 'kind' = 'user'",
    "CREATE INDEX console_asks_author ON console_asks (author_login)",
];
