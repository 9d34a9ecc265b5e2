//! Version 8 of the console's schema: the artifact tables, the edit log, versions, edges,
//! unsubscribed sessions and the documents' index, on SQLite and PostgreSQL.

/// The statements of version 8 both backends share.
macro_rules! migration_8 {
    ($bytes:literal, $($extra:literal),* $(,)?) => {
        &[
            "CREATE TABLE console_artifacts (
                id TEXT PRIMARY KEY,
                scope TEXT NOT NULL,
                issue TEXT,
                project TEXT,
                session TEXT,
                slug TEXT NOT NULL,
                filename TEXT NOT NULL,
                kind TEXT NOT NULL,
                content_type TEXT NOT NULL,
                size BIGINT NOT NULL,
                token TEXT NOT NULL,
                sequence BIGINT NOT NULL,
                version BIGINT,
                version_name TEXT,
                version_kind TEXT,
                settled BIGINT NOT NULL,
                changed_at BIGINT NOT NULL,
                changed_by TEXT NOT NULL,
                created_by TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL,
                tasks_done BIGINT NOT NULL,
                tasks_total BIGINT NOT NULL,
                log_entry BIGINT NOT NULL,
                log_len BIGINT NOT NULL
            )",
            "CREATE UNIQUE INDEX console_artifacts_slug ON console_artifacts (scope, slug)",
            "CREATE UNIQUE INDEX console_artifacts_filename ON console_artifacts (scope, filename)",
            "CREATE INDEX console_artifacts_scope ON console_artifacts (scope, created_at)",
            "CREATE INDEX console_artifacts_issue ON console_artifacts (issue, created_at)",
            "CREATE TABLE console_documents (
                artifact TEXT PRIMARY KEY,
                markdown TEXT NOT NULL,
                block_ids TEXT NOT NULL
            )",
            "CREATE TABLE console_document_log (
                artifact TEXT NOT NULL,
                entry BIGINT NOT NULL,
                start_at BIGINT NOT NULL,
                end_at BIGINT NOT NULL,
                text TEXT NOT NULL,
                ops TEXT NOT NULL,
                block_ids TEXT NOT NULL,
                token TEXT NOT NULL,
                PRIMARY KEY (artifact, entry)
            )",
            concat!("CREATE TABLE console_artifact_versions (
                artifact TEXT NOT NULL,
                number BIGINT NOT NULL,
                name TEXT,
                kind TEXT NOT NULL,
                token TEXT NOT NULL,
                content_type TEXT NOT NULL,
                size BIGINT NOT NULL,
                markdown TEXT,
                bytes ", $bytes, ",
                by_actor TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                PRIMARY KEY (artifact, number)
            )"),
            "CREATE TABLE console_references (
                from_ref TEXT NOT NULL,
                from_block TEXT NOT NULL,
                from_issue TEXT,
                to_ref TEXT NOT NULL,
                to_block TEXT NOT NULL,
                kind TEXT NOT NULL,
                at BIGINT NOT NULL,
                event_id BIGINT NOT NULL,
                PRIMARY KEY (from_ref, from_block, to_ref, to_block, kind)
            )",
            "CREATE INDEX console_references_to ON console_references (to_ref, to_block)",
            "CREATE INDEX console_references_from_issue ON console_references (from_issue)",
            "CREATE INDEX console_references_kind ON console_references (kind, event_id)",
            "CREATE TABLE console_artifact_unsubscribed (
                artifact TEXT NOT NULL,
                session TEXT NOT NULL,
                through_event BIGINT NOT NULL,
                PRIMARY KEY (artifact, session)
            )",
            "CREATE INDEX console_events_artifact ON console_events (artifact, sequence)",
            $($extra),*
        ]
    };
}

/// Version 8 on SQLite: the artifact tables, and the index as an FTS5 table over
/// `console_artifact_text` (external content: triggers keep it).
pub(crate) const MIGRATION_8_SQLITE: &[&str] = migration_8!(
    "BLOB",
    "CREATE TABLE console_artifact_text (
        id INTEGER PRIMARY KEY,
        artifact TEXT NOT NULL,
        part TEXT NOT NULL,
        body TEXT NOT NULL
    )",
    "CREATE UNIQUE INDEX console_artifact_text_part ON console_artifact_text (artifact, part)",
    "CREATE VIRTUAL TABLE console_artifact_text_fts USING fts5(
        body, content = 'console_artifact_text', content_rowid = 'id', tokenize = 'unicode61')",
    "CREATE TRIGGER console_artifact_text_added AFTER INSERT ON console_artifact_text BEGIN
        INSERT INTO console_artifact_text_fts (rowid, body) VALUES (new.id, new.body);
    END",
    "CREATE TRIGGER console_artifact_text_removed AFTER DELETE ON console_artifact_text BEGIN
        INSERT INTO console_artifact_text_fts (console_artifact_text_fts, rowid, body)
        VALUES ('delete', old.id, old.body);
    END",
);

/// Version 8 on PostgreSQL: the artifact tables, and the index as a generated `tsvector` of
/// the text's runs of letters and digits (what a query's words are, and what FTS5's
/// `unicode61` splits on; PostgreSQL's own parser would keep `chart.png` or a URL whole).
pub(crate) const MIGRATION_8_POSTGRES: &[&str] = migration_8!(
    "BYTEA",
    "CREATE TABLE console_artifact_text (
        artifact TEXT NOT NULL,
        part TEXT NOT NULL,
        body TEXT NOT NULL,
        search tsvector GENERATED ALWAYS AS
            (to_tsvector('simple', regexp_replace(body, '[^[:alnum:]]+', ' ', 'g'))) STORED,
        PRIMARY KEY (artifact, part)
    )",
    "CREATE INDEX console_artifact_text_search ON console_artifact_text USING GIN (search)",
);
