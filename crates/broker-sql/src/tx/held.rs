//! PostgreSQL's held-back writes: a write transaction's upserts and audit entries, whose answer
//! nobody reads, are kept here and sent as one statement (issue 50), just before its `COMMIT`
//! or before any other statement it runs (so a read sees the transaction's own writes, and
//! statements run in the order they were made). The lock and head of the audit log are the one
//! read that goes ahead of them: it reads only the audit log, which no upsert writes.
//!
//! The statement joins the writes as data-modifying CTEs (`WITH w0 AS (INSERT …), w1 AS (…)
//! SELECT 1`), each of which PostgreSQL runs to completion. They all see the statement's one
//! snapshot, and one statement may not change a row twice: a second write of the same row
//! replaces the first in its place (each write is a whole row, so the last one is the row),
//! and two different rows' writes never read each other's (no foreign keys, no triggers).
//! A transaction with more parameters than [`MAX_ARGS`] is sent as several such statements.

use countersign_broker_core::audit::AuditEntry;

use super::rows::{AUDIT_ROWS_PER_INSERT, Arg, Deferred, audit_insert};

/// PostgreSQL binds at most 65,535 parameters a statement; stay well below.
const MAX_ARGS: usize = 30_000;

/// What a write transaction holds back.
#[derive(Default)]
pub(crate) struct Held {
    writes: Vec<Write>,
}

/// One held-back statement and the row it writes.
struct Write {
    /// (table, key): a later write of the same row replaces this one. `None`: never merged.
    row: Option<(&'static str, String)>,
    sql: String,
    args: Vec<Arg>,
}

impl Held {
    pub(crate) fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }

    /// Holds the write of `row` (table, key) back, replacing an earlier write of that row.
    pub(crate) fn put(&mut self, row: (&'static str, String), sql: &str, args: Vec<Arg>) {
        if let Some(w) = self
            .writes
            .iter_mut()
            .find(|w| w.row.as_ref() == Some(&row))
        {
            w.sql = sql.to_owned();
            w.args = args;
            return;
        }
        self.writes.push(Write {
            row: Some(row),
            sql: sql.to_owned(),
            args,
        });
    }

    /// Holds the insert of `entries` back (positions are new rows: never merged).
    pub(crate) fn audit(&mut self, entries: &[AuditEntry]) {
        for chunk in entries.chunks(AUDIT_ROWS_PER_INSERT) {
            let (sql, args) = audit_insert(chunk);
            self.writes.push(Write {
                row: None,
                sql,
                args,
            });
        }
    }

    /// Takes what is held back as statements of CTEs, in the order the writes were made.
    pub(crate) fn take(&mut self) -> Vec<(String, Vec<Arg>)> {
        let writes = std::mem::take(&mut self.writes);
        let mut out = Vec::new();
        let mut group = Deferred::default();
        let mut bound = 0;
        for w in writes {
            if bound > 0 && bound + w.args.len() > MAX_ARGS {
                out.extend(joined(&mut group));
                bound = 0;
            }
            bound += w.args.len();
            group.push(&w.sql, w.args);
        }
        out.extend(joined(&mut group));
        out
    }
}

/// The statements held in `group` as one statement of CTEs.
fn joined(group: &mut Deferred) -> Option<(String, Vec<Arg>)> {
    let (text, args) = group.take()?;
    let mut sql = String::from("WITH ");
    for (i, s) in statements(&text).enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&format!("w{i} AS ({s})"));
    }
    sql.push_str(" SELECT 1");
    Some((sql, args))
}

/// The statements of a [`Deferred`]'s text (each ends with `;\n`; the broker's statement texts
/// hold no `;`).
fn statements(text: &str) -> impl Iterator<Item = &str> {
    text.split(";\n").filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_write_of_a_row_replaces_the_first_in_its_place() {
        let mut h = Held::default();
        h.put(
            ("t", "a".into()),
            "INSERT INTO t (k, v) VALUES ($1, $2)",
            args!["a", 1i64],
        );
        h.put(
            ("u", "a".into()),
            "INSERT INTO u (k) VALUES ($1)",
            args!["a"],
        );
        h.put(
            ("t", "a".into()),
            "INSERT INTO t (k, v) VALUES ($1, $2)",
            args!["a", 2i64],
        );
        let out = h.take();
        assert_eq!(out.len(), 1);
        let (sql, args) = &out[0];
        assert_eq!(
            sql,
            "WITH w0 AS (INSERT INTO t (k, v) VALUES ($1, $2)), \
             w1 AS (INSERT INTO u (k) VALUES ($3)) SELECT 1"
        );
        assert!(matches!(args[1], Arg::Int(2)), "the last write of the row");
        assert!(h.is_empty() && h.take().is_empty());
    }

    #[test]
    fn many_parameters_are_sent_as_several_statements_in_order() {
        let mut h = Held::default();
        for i in 0..(MAX_ARGS / 2 + 1) {
            h.put(
                ("t", i.to_string()),
                "INSERT INTO t (k, v) VALUES ($1, $2)",
                args![i.to_string(), 0i64],
            );
        }
        let out = h.take();
        assert_eq!(out.len(), 2);
        assert_eq!(out[0].1.len(), MAX_ARGS);
        assert_eq!(out[1].1.len(), 2);
        assert!(
            out[1]
                .0
                .starts_with("WITH w0 AS (INSERT INTO t (k, v) VALUES ($1, $2))")
        );
    }
}
