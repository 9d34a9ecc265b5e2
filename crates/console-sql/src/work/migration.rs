//! The work tables' migrations: projects, issues and their labels, read state, the event log,
//! the issues' full-text index (SQLite FTS5, PostgreSQL `tsvector`) and the lists' indexes.

/// Version 2: the work core.
pub(crate) const MIGRATION_2: &[&str] = &[
    "CREATE TABLE console_projects (
        key TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        created_at BIGINT NOT NULL,
        next_issue BIGINT NOT NULL
    )",
    "CREATE TABLE console_issues (
        key TEXT PRIMARY KEY,
        project TEXT NOT NULL REFERENCES console_projects (key),
        number BIGINT NOT NULL,
        title TEXT NOT NULL,
        status TEXT NOT NULL,
        is_open BIGINT NOT NULL,
        priority BIGINT,
        labels TEXT NOT NULL,
        route TEXT,
        parent TEXT,
        rank TEXT NOT NULL,
        assignee TEXT,
        components TEXT NOT NULL,
        claim TEXT,
        repo TEXT,
        sequence BIGINT NOT NULL,
        created_at BIGINT NOT NULL,
        updated_at BIGINT NOT NULL,
        closed_at BIGINT
    )",
    "CREATE UNIQUE INDEX console_issues_number ON console_issues (project, number)",
    "CREATE INDEX console_issues_rank ON console_issues (project, rank)",
    "CREATE INDEX console_issues_parent ON console_issues (parent)",
    "CREATE INDEX console_issues_updated ON console_issues (updated_at)",
    "CREATE INDEX console_issues_status ON console_issues (status)",
    "CREATE TABLE console_issue_labels (
        label TEXT NOT NULL,
        issue TEXT NOT NULL,
        PRIMARY KEY (label, issue)
    )",
    "CREATE TABLE console_pins (
        login TEXT NOT NULL,
        issue TEXT NOT NULL,
        PRIMARY KEY (login, issue)
    )",
    "CREATE TABLE console_events (
        id BIGINT PRIMARY KEY,
        kind TEXT NOT NULL,
        at BIGINT NOT NULL,
        actor TEXT NOT NULL,
        project TEXT,
        issue TEXT,
        artifact TEXT,
        session TEXT,
        data TEXT NOT NULL,
        sequence BIGINT
    )",
    "CREATE INDEX console_events_issue ON console_events (issue, sequence)",
];

/// Version 4: per-person read state (the pins it replaces, with the sequence read), and
/// sessions unsubscribed from an issue (up to which event).
pub(crate) const MIGRATION_4: &[&str] = &[
    "CREATE TABLE console_read_state (
        login TEXT NOT NULL,
        issue TEXT NOT NULL,
        read_sequence BIGINT NOT NULL,
        pinned BIGINT NOT NULL,
        PRIMARY KEY (login, issue)
    )",
    "INSERT INTO console_read_state (login, issue, read_sequence, pinned)
     SELECT login, issue, 0, 1 FROM console_pins",
    "DROP TABLE console_pins",
    "CREATE TABLE console_unsubscribed (
        issue TEXT NOT NULL,
        session TEXT NOT NULL,
        through_event BIGINT NOT NULL,
        PRIMARY KEY (issue, session)
    )",
];

/// Version 5: the issues' full-text index. SQLite: an FTS5 table keyed by the issue row's
/// rowid, kept by the issue writes; PostgreSQL: a generated `tsvector` with a GIN index.
pub(crate) const MIGRATION_5_SQLITE: &[&str] = &[
    "CREATE VIRTUAL TABLE console_issues_fts USING fts5(body, tokenize = 'unicode61')",
    "INSERT INTO console_issues_fts (rowid, body) SELECT rowid, title || ' ' || labels FROM console_issues",
];
pub(crate) const MIGRATION_5_POSTGRES: &[&str] = &[
    "ALTER TABLE console_issues ADD COLUMN search tsvector
        GENERATED ALWAYS AS (to_tsvector('simple', title || ' ' || labels)) STORED",
    "CREATE INDEX console_issues_search ON console_issues USING GIN (search)",
];

/// Version 6: repositories mapped to projects, and the decisions people made through the
/// console (the history page; kept here so a restart or another replica sees them). On
/// SQLite, triggers keep an issue's full-text row and label rows with the issue's own write
/// (one statement instead of three or more, each a round trip to SQLite's worker thread while
/// the one write lock is held); PostgreSQL's full-text column is generated already.
pub(crate) const MIGRATION_6_SQLITE: &[&str] = &[
    // An issue's labels, each row carrying what a list filters and orders by (project,
    // status, rank, number), so a list by label within a project and status is one index range
    // (counted without reading an issue), kept with the issue's own writes.
    "CREATE TABLE console_issue_labels_v6 (
        label TEXT NOT NULL,
        issue TEXT NOT NULL,
        project TEXT NOT NULL,
        status TEXT NOT NULL,
        rank TEXT NOT NULL,
        number BIGINT NOT NULL,
        PRIMARY KEY (label, issue)
    )",
    "INSERT INTO console_issue_labels_v6 (label, issue, project, status, rank, number)
     SELECT l.label, l.issue, i.project, i.status, i.rank, i.number
     FROM console_issue_labels l JOIN console_issues i ON i.key = l.issue",
    "DROP TABLE console_issue_labels",
    "ALTER TABLE console_issue_labels_v6 RENAME TO console_issue_labels",
    "CREATE INDEX console_issue_labels_list ON console_issue_labels (label, project, status, rank, number)",
    "CREATE INDEX console_issue_labels_issue ON console_issue_labels (issue)",
    // The full-text table gains the project, so a search within a project is answered by the
    // index alone (no join to the issues for every match).
    "DROP TABLE console_issues_fts",
    "CREATE VIRTUAL TABLE console_issues_fts USING fts5(body, project, tokenize = 'unicode61')",
    "INSERT INTO console_issues_fts (rowid, body, project) \
     SELECT rowid, title || ' ' || labels, project FROM console_issues",
    "CREATE TABLE console_repo_projects (
        repo TEXT PRIMARY KEY,
        project TEXT NOT NULL REFERENCES console_projects (key),
        is_default BIGINT NOT NULL
    )",
    "CREATE INDEX console_repo_projects_project ON console_repo_projects (project)",
    // One issue per imported ref (NULLs, native issues, are distinct).
    "CREATE UNIQUE INDEX console_issues_repo ON console_issues (repo)",
    "CREATE TABLE console_decisions (
        login TEXT NOT NULL,
        record_id TEXT NOT NULL,
        event TEXT NOT NULL,
        at BIGINT NOT NULL
    )",
    "CREATE INDEX console_decisions_login ON console_decisions (login, at)",
    "CREATE INDEX console_decisions_record ON console_decisions (record_id, at)",
    "CREATE TRIGGER console_issues_insert AFTER INSERT ON console_issues BEGIN
        INSERT INTO console_issues_fts (rowid, body, project)
            VALUES (new.rowid, new.title || ' ' || new.labels, new.project);
        INSERT INTO console_issue_labels (label, issue, project, status, rank, number)
            SELECT value, new.key, new.project, new.status, new.rank, new.number
            FROM json_each(new.labels);
    END",
    "CREATE TRIGGER console_issues_search AFTER UPDATE OF title, labels ON console_issues
        WHEN old.title IS NOT new.title OR old.labels IS NOT new.labels BEGIN
        DELETE FROM console_issues_fts WHERE rowid = old.rowid;
        INSERT INTO console_issues_fts (rowid, body, project)
            VALUES (new.rowid, new.title || ' ' || new.labels, new.project);
    END",
    "CREATE TRIGGER console_issues_labels AFTER UPDATE OF labels ON console_issues
        WHEN old.labels IS NOT new.labels BEGIN
        DELETE FROM console_issue_labels WHERE issue = old.key;
        INSERT INTO console_issue_labels (label, issue, project, status, rank, number)
            SELECT value, new.key, new.project, new.status, new.rank, new.number
            FROM json_each(new.labels);
    END",
    "CREATE TRIGGER console_issues_label_order AFTER UPDATE OF status, rank ON console_issues
        WHEN (old.status IS NOT new.status OR old.rank IS NOT new.rank)
         AND old.labels IS new.labels BEGIN
        UPDATE console_issue_labels SET status = new.status, rank = new.rank WHERE issue = new.key;
    END",
];
/// SQLite's issue index keyed by the rowid negated, so that its own (ascending) order
/// is newest first: `advice.suggestions` reads the newest matches, and FTS5 walks a posting
/// list backwards only by first reading each page of it whole. PostgreSQL's index is a GIN
/// over a generated column, unchanged.
pub(crate) const MIGRATION_13_SQLITE: &[&str] = &[
    "DROP TRIGGER console_issues_insert",
    "DROP TRIGGER console_issues_search",
    "DROP TABLE console_issues_fts",
    "CREATE VIRTUAL TABLE console_issues_fts USING fts5(body, project, tokenize = 'unicode61')",
    "INSERT INTO console_issues_fts (rowid, body, project) \
     SELECT -rowid, title || ' ' || labels, project FROM console_issues",
    "CREATE TRIGGER console_issues_insert AFTER INSERT ON console_issues BEGIN
        INSERT INTO console_issues_fts (rowid, body, project)
            VALUES (-new.rowid, new.title || ' ' || new.labels, new.project);
        INSERT INTO console_issue_labels (label, issue, project, status, rank, number)
            SELECT value, new.key, new.project, new.status, new.rank, new.number
            FROM json_each(new.labels);
    END",
    "CREATE TRIGGER console_issues_search AFTER UPDATE OF title, labels ON console_issues
        WHEN old.title IS NOT new.title OR old.labels IS NOT new.labels BEGIN
        DELETE FROM console_issues_fts WHERE rowid = -old.rowid;
        INSERT INTO console_issues_fts (rowid, body, project)
            VALUES (-new.rowid, new.title || ' ' || new.labels, new.project);
    END",
];
/// PostgreSQL's index is unchanged: a statement that changes nothing (a migration has one at
/// least).
pub(crate) const MIGRATION_13_POSTGRES: &[&str] = &["SELECT 1"];
/// The console's issue lists (issue 27): each order within a project, and a person's issues,
/// one index range each (a page of 50 reads 51 rows, not the project's).
pub(crate) const MIGRATION_14: &[&str] = &[
    "CREATE INDEX console_issues_project_updated ON console_issues (project, updated_at)",
    "CREATE INDEX console_issues_project_created ON console_issues (project, created_at)",
    "CREATE INDEX console_issues_project_priority ON console_issues \
     (project, (COALESCE(priority, 4)), number)",
    "CREATE INDEX console_issues_assignee ON console_issues (assignee, updated_at)",
];
/// A project's issues in one status (issue 27's `?status=` lists and the board): the count and
/// a page by rank are one index range each. With the status index alone, counting a status of
/// 90,000 issues read each row for its project (p99 107 ms at 100,000 issues).
pub(crate) const MIGRATION_16: &[&str] = &[
    "CREATE INDEX console_issues_project_status ON console_issues (project, status, rank, number)",
];
pub(crate) const MIGRATION_6_POSTGRES: &[&str] = &[
    // An issue's labels, each row carrying what a list filters and orders by (project,
    // status, rank, number), so a list by label within a project and status is one index range
    // (counted without reading an issue), kept with the issue's own writes.
    "CREATE TABLE console_issue_labels_v6 (
        label TEXT NOT NULL,
        issue TEXT NOT NULL,
        project TEXT NOT NULL,
        status TEXT NOT NULL,
        rank TEXT NOT NULL,
        number BIGINT NOT NULL,
        PRIMARY KEY (label, issue)
    )",
    "INSERT INTO console_issue_labels_v6 (label, issue, project, status, rank, number)
     SELECT l.label, l.issue, i.project, i.status, i.rank, i.number
     FROM console_issue_labels l JOIN console_issues i ON i.key = l.issue",
    "DROP TABLE console_issue_labels",
    "ALTER TABLE console_issue_labels_v6 RENAME TO console_issue_labels",
    "CREATE INDEX console_issue_labels_list ON console_issue_labels (label, project, status, rank, number)",
    "CREATE INDEX console_issue_labels_issue ON console_issue_labels (issue)",
    "CREATE TABLE console_repo_projects (
        repo TEXT PRIMARY KEY,
        project TEXT NOT NULL REFERENCES console_projects (key),
        is_default BIGINT NOT NULL
    )",
    "CREATE INDEX console_repo_projects_project ON console_repo_projects (project)",
    // One issue per imported ref (NULLs, native issues, are distinct).
    "CREATE UNIQUE INDEX console_issues_repo ON console_issues (repo)",
    "CREATE TABLE console_decisions (
        login TEXT NOT NULL,
        record_id TEXT NOT NULL,
        event TEXT NOT NULL,
        at BIGINT NOT NULL
    )",
    "CREATE INDEX console_decisions_login ON console_decisions (login, at)",
    "CREATE INDEX console_decisions_record ON console_decisions (record_id, at)",
];
