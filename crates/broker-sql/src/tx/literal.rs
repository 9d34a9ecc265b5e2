//! Parameters written into a statement's text as PostgreSQL literals (issue 50), for the texts a
//! write transaction sends in the simple query protocol: several statements in one round trip
//! (its held-back writes with its `COMMIT`), which that protocol allows and the extended one
//! (parameters bound) does not, and sqlx does not pipeline.
//!
//! Every value becomes a literal whose meaning does not depend on the server's settings:
//! - text: an escape string `E'…'`, each `\` and `'` doubled, so nothing in it ends the
//!   literal or forms an escape (`standard_conforming_strings` plays no part in an `E''`
//!   string); a NUL, which PostgreSQL's text cannot hold, is refused (as binding it would be);
//! - bytes: `decode('<hex>', 'hex')`, a `bytea`;
//! - integers: their digits, a negative one in parentheses (`x - -1` would open a comment);
//! - nulls: `NULL::text`, `NULL::bigint`.
//!
//! Placeholders are `$1`, `$2`, … as in the bound statement; the text is read once, left to
//! right, so a `$` inside a value already written is never read as one. The broker's statement
//! texts hold no `$` of their own (no dollar quoting).

use std::fmt::Write;

use countersign_broker_core::storage::StorageError;

use super::rows::Arg;

/// `sql` with each `$n` replaced by `args[n - 1]` as a literal.
pub(crate) fn inline(sql: &str, args: &[Arg]) -> Result<String, StorageError> {
    let mut out = String::with_capacity(sql.len() + args.len() * 16);
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return Err(StorageError::Other(
                "a statement with a `$` that is not a parameter".into(),
            ));
        }
        let n: usize = after[..digits]
            .parse()
            .map_err(|_| StorageError::Other("a parameter number out of range".into()))?;
        let arg = n
            .checked_sub(1)
            .and_then(|i| args.get(i))
            .ok_or_else(|| StorageError::Other(format!("parameter ${n} is not bound")))?;
        literal(&mut out, arg)?;
        rest = &after[digits..];
    }
    out.push_str(rest);
    Ok(out)
}

/// Writes `arg` as a literal.
fn literal(out: &mut String, arg: &Arg) -> Result<(), StorageError> {
    match arg {
        Arg::Text(s) => {
            if s.contains('\0') {
                return Err(StorageError::Other("a text value holds a NUL".into()));
            }
            out.push_str("E'");
            for c in s.chars() {
                match c {
                    '\'' => out.push_str("''"),
                    '\\' => out.push_str("\\\\"),
                    c => out.push(c),
                }
            }
            out.push('\'');
        }
        Arg::Int(i) if *i < 0 => {
            let _ = write!(out, "({i})");
        }
        Arg::Int(i) => {
            let _ = write!(out, "{i}");
        }
        Arg::Bytes(b) => {
            out.push_str("decode('");
            out.push_str(&hex::encode(b));
            out.push_str("', 'hex')");
        }
        Arg::NullText => out.push_str("NULL::text"),
        Arg::NullInt => out.push_str("NULL::bigint"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_kind_of_value_is_written_as_its_literal() {
        let sql = "INSERT INTO t VALUES ($1, $2, $3, $4, $5, $6, $10)";
        let mut args = vec![
            Arg::Text("it's a \\ test".into()),
            Arg::Int(-7),
            Arg::Int(42),
            Arg::Bytes(vec![0xde, 0xad]),
            Arg::NullText,
            Arg::NullInt,
        ];
        args.extend((7..=10).map(Arg::Int));
        assert_eq!(
            inline(sql, &args).expect("inline"),
            "INSERT INTO t VALUES (E'it''s a \\\\ test', (-7), 42, decode('dead', 'hex'), \
             NULL::text, NULL::bigint, 10)"
        );
    }

    #[test]
    fn a_dollar_in_a_value_is_not_a_placeholder() {
        let args = vec![Arg::Text("$2".into()), Arg::Text("x".into())];
        assert_eq!(
            inline("SELECT $1, $2", &args).expect("inline"),
            "SELECT E'$2', E'x'"
        );
    }

    #[test]
    fn what_cannot_be_written_is_refused() {
        assert!(inline("SELECT $2", &[Arg::Int(1)]).is_err(), "unbound");
        assert!(inline("SELECT $0", &[Arg::Int(1)]).is_err(), "no $0");
        assert!(inline("SELECT $$x$$", &[]).is_err(), "dollar quoting");
        assert!(
            inline("SELECT $1", &[Arg::Text("a\0b".into())]).is_err(),
            "NUL"
        );
    }
}
