//! The delivery routes end to end, on SQLite and PostgreSQL.
