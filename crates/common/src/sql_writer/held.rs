//! Statements held back to travel with the next one sent on the writer's connection, and the
//! parameters they bind (moved here from the broker's `tx/rows.rs` with the writer, issue 51).

use sqlx::Any;
use sqlx::any::AnyArguments;
use sqlx::query::Query;

/// A bound parameter.
pub enum Arg {
    Text(String),
    Int(i64),
    Bytes(Vec<u8>),
    NullText,
    NullInt,
}

/// Without the values (a bound value may be a secret's hash, a token's, ...).
impl std::fmt::Debug for Arg {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Arg::Text(_) => "Text(..)",
            Arg::Int(_) => "Int(..)",
            Arg::Bytes(_) => "Bytes(..)",
            Arg::NullText => "NullText",
            Arg::NullInt => "NullInt",
        })
    }
}

impl From<&str> for Arg {
    fn from(s: &str) -> Self {
        Arg::Text(s.to_owned())
    }
}

impl From<String> for Arg {
    fn from(s: String) -> Self {
        Arg::Text(s)
    }
}

impl From<Vec<u8>> for Arg {
    fn from(b: Vec<u8>) -> Self {
        Arg::Bytes(b)
    }
}

impl From<i64> for Arg {
    fn from(i: i64) -> Self {
        Arg::Int(i)
    }
}

impl From<Option<String>> for Arg {
    fn from(s: Option<String>) -> Self {
        s.map_or(Arg::NullText, Arg::Text)
    }
}

impl From<Option<i64>> for Arg {
    fn from(i: Option<i64>) -> Self {
        i.map_or(Arg::NullInt, Arg::Int)
    }
}

pub fn bind_all<'q>(
    mut q: Query<'q, Any, AnyArguments<'q>>,
    args: Vec<Arg>,
) -> Query<'q, Any, AnyArguments<'q>> {
    for a in args {
        q = match a {
            Arg::Text(s) => q.bind(s),
            Arg::Int(i) => q.bind(i),
            Arg::Bytes(b) => q.bind(b),
            Arg::NullText => q.bind(None::<String>),
            Arg::NullInt => q.bind(None::<i64>),
        };
    }
    q
}

/// Statements held back to travel with the next one sent on the same connection: SQLite's
/// writer sends a transaction's `BEGIN` and its writes whose answer nobody reads with the
/// statement after them, in one trip to the connection's worker thread (see the writer, [`super`]).
///
/// The statements are joined into one text, which sqlx's SQLite driver prepares and runs one
/// statement after another. It binds a `$N` to the text's N-th argument, so each statement's
/// placeholders are renumbered past the arguments of those before it.
#[derive(Default)]
pub struct Deferred {
    sql: String,
    args: Vec<Arg>,
    statements: usize,
}

impl std::fmt::Debug for Deferred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deferred")
            .field("statements", &self.statements)
            .finish_non_exhaustive()
    }
}

impl Deferred {
    /// Holds `sql` (one statement, without its `;`) back.
    pub fn push(&mut self, sql: &str, args: Vec<Arg>) {
        renumbered(sql, self.args.len(), &mut self.sql);
        self.sql.push_str(";\n");
        self.args.extend(args);
        self.statements += 1;
    }

    /// How many statements are held back.
    pub fn statements(&self) -> usize {
        self.statements
    }

    /// Where what is held back ends now, for [`Deferred::truncate`].
    pub fn mark(&self) -> HeldMark {
        HeldMark {
            sql: self.sql.len(),
            args: self.args.len(),
            statements: self.statements,
        }
    }

    /// Forgets what was held back after `m` (taken while nothing was sent since).
    pub fn truncate(&mut self, m: HeldMark) {
        if m.statements <= self.statements && m.sql <= self.sql.len() && m.args <= self.args.len() {
            self.sql.truncate(m.sql);
            self.args.truncate(m.args);
            self.statements = m.statements;
        }
    }

    /// Forgets what is held back.
    pub fn clear(&mut self) {
        *self = Deferred::default();
    }

    /// What is held back, then `sql`, as one text, whose arguments `args` becomes; `None`, and
    /// `args` untouched, when nothing is held back. Nothing is held back after.
    pub fn then(&mut self, sql: &str, args: &mut Vec<Arg>) -> Option<String> {
        if self.statements == 0 {
            return None;
        }
        let Deferred {
            sql: mut text,
            args: mut all,
            ..
        } = std::mem::take(self);
        renumbered(sql, all.len(), &mut text);
        all.append(args);
        *args = all;
        Some(text)
    }

    /// Everything held back as one text and its arguments (`None` when nothing is).
    pub fn take(&mut self) -> Option<(String, Vec<Arg>)> {
        if self.statements == 0 {
            return None;
        }
        let Deferred { sql, args, .. } = std::mem::take(self);
        Some((sql, args))
    }
}

/// A place in what is held back ([`Deferred::mark`]).
#[derive(Debug, Clone, Copy)]
pub struct HeldMark {
    sql: usize,
    args: usize,
    statements: usize,
}

/// Appends `sql` to `out` with each placeholder `$N` written as `$(N + by)`. The broker's
/// statements are its own constant texts, whose only `$` are placeholders (no `$` appears in a
/// literal or an identifier of theirs); data never enters the text.
fn renumbered(sql: &str, by: usize, out: &mut String) {
    if by == 0 {
        out.push_str(sql);
        return;
    }
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..=at]);
        rest = &rest[at + 1..];
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        match rest[..digits].parse::<usize>() {
            Ok(n) => {
                use std::fmt::Write;
                let _ = write!(out, "{}", n + by);
            }
            Err(_) => out.push_str(&rest[..digits]),
        }
        rest = &rest[digits..];
    }
    out.push_str(rest);
}

/// `Vec<Arg>` from a list of values convertible into [`Arg`].
#[cfg(test)]
macro_rules! args {
    ($($a:expr),* $(,)?) => { vec![$(Arg::from($a)),*] };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn held_back_statements_are_renumbered_past_the_arguments_before_them() {
        let mut d = Deferred::default();
        assert!(d.take().is_none(), "nothing held back");
        d.push("BEGIN IMMEDIATE", Vec::new());
        d.push("INSERT INTO t (a, b) VALUES ($1, $2)", args![1i64, "x"]);
        d.push("UPDATE t SET a = $2 WHERE b = $1", args!["y", 2i64]);
        assert_eq!(d.statements(), 3);
        let mut args = args!["z"];
        let text = d.then("SELECT a FROM t WHERE b = $1", &mut args);
        assert_eq!(
            text.as_deref(),
            Some(
                "BEGIN IMMEDIATE;\nINSERT INTO t (a, b) VALUES ($1, $2);\n\
                 UPDATE t SET a = $4 WHERE b = $3;\nSELECT a FROM t WHERE b = $5"
            )
        );
        let kinds: Vec<String> = args
            .iter()
            .map(|a| match a {
                Arg::Text(s) => s.clone(),
                Arg::Int(i) => i.to_string(),
                _ => "?".into(),
            })
            .collect();
        assert_eq!(kinds, ["1", "x", "y", "2", "z"]);
        assert_eq!(d.statements(), 0, "nothing is held back after");
        let mut untouched = args!["w"];
        assert_eq!(d.then("SELECT 1", &mut untouched), None);
        assert_eq!(untouched.len(), 1);
    }

    #[test]
    fn truncating_forgets_what_came_after_a_mark() {
        let mut d = Deferred::default();
        d.push("BEGIN IMMEDIATE", Vec::new());
        let m = d.mark();
        d.push("SAVEPOINT w", Vec::new());
        d.push("INSERT INTO t (a) VALUES ($1)", args![1i64]);
        d.truncate(m);
        assert_eq!(d.statements(), 1);
        let Some((sql, args)) = d.take() else {
            panic!("the BEGIN is still held back")
        };
        assert_eq!((sql.as_str(), args.len()), ("BEGIN IMMEDIATE;\n", 0));
    }

    #[test]
    fn renumbering_reads_every_digit_and_leaves_other_text() {
        let mut out = String::new();
        renumbered("VALUES ($9, $10, $123) -- $", 7, &mut out);
        assert_eq!(out, "VALUES ($16, $17, $130) -- $");
    }
}
