//! The messages routes end to end, on SQLite and PostgreSQL.
