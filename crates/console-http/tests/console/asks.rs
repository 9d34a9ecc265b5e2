//! The asks routes end to end, on SQLite and PostgreSQL.
