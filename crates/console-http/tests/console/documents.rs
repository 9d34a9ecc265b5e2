//! The documents routes end to end, on SQLite and PostgreSQL.
