//! Strict JSON: parsing that refuses a repeated object member at any depth.
//!
//! `serde_json` keeps the last of two members with the same name, silently, both into a
//! [`Value`] and into a derived struct (unless it denies them, which derives do only for known
//! fields). Two parsers that disagree on which copy counts are how signed or checked inputs get
//! smuggled past one of them, so every request body, JWS header and JWS payload this project
//! reads goes through [`from_slice`] (or [`value_from_slice`]) first.

use serde::Deserialize;
use serde::de::{self, DeserializeOwned, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why strict parsing failed.
#[derive(Debug)]
pub enum StrictError {
    /// Not JSON, or JSON that does not fit the target type; the `serde_json` error says where.
    Json(serde_json::Error),
    /// An object (at any depth) names the same member twice.
    DuplicateMember,
}

impl std::fmt::Display for StrictError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Json(e) => e.fmt(f),
            Self::DuplicateMember => f.write_str("an object repeats a member name"),
        }
    }
}

impl std::error::Error for StrictError {}

/// Parses one JSON document into a [`Value`], refusing any object that repeats a member name,
/// at the top level or nested in objects and arrays.
///
/// Everything else is `serde_json`'s: its grammar, its recursion limit, trailing whitespace
/// only.
///
/// # Errors
/// [`StrictError::DuplicateMember`] on a repeated member; [`StrictError::Json`] when the bytes are
/// not one JSON document.
pub fn value_from_slice(bytes: &[u8]) -> Result<Value, StrictError> {
    match serde_json::from_slice::<Strict>(bytes) {
        Ok(Strict(v)) => Ok(v),
        Err(e) if e.to_string().starts_with(DUPLICATE) => Err(StrictError::DuplicateMember),
        Err(e) => Err(StrictError::Json(e)),
    }
}

/// Parses one JSON document into `T` after [`value_from_slice`] accepted it: no object in it,
/// at any depth, repeats a member name.
///
/// # Errors
/// As [`value_from_slice`], then [`StrictError::Json`] if the value does not fit `T`.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, StrictError> {
    serde_json::from_value(value_from_slice(bytes)?).map_err(StrictError::Json)
}

/// The fixed message of a duplicate, recognised in the `serde_json` error it travels in.
const DUPLICATE: &str = "countersign: duplicate JSON object member";

/// A [`Value`] whose objects, at every depth, had unique member names.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Strict;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a JSON value without duplicate object members")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Strict, E> {
        Ok(Strict(Value::Bool(v)))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Strict, E> {
        Ok(Strict(Value::from(v)))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Strict, E> {
        Ok(Strict(Value::from(v)))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Strict, E> {
        // serde_json never yields a non-finite float from text; `from` maps one to null anyway.
        Ok(Strict(Value::from(v)))
    }

    fn visit_str<E>(self, v: &str) -> Result<Strict, E> {
        Ok(Strict(Value::String(v.to_owned())))
    }

    fn visit_string<E>(self, v: String) -> Result<Strict, E> {
        Ok(Strict(Value::String(v)))
    }

    fn visit_unit<E>(self) -> Result<Strict, E> {
        Ok(Strict(Value::Null))
    }

    fn visit_none<E>(self) -> Result<Strict, E> {
        Ok(Strict(Value::Null))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Strict, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element::<Strict>()? {
            items.push(v);
        }
        Ok(Strict(Value::Array(items)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut access: A) -> Result<Strict, A::Error> {
        let mut map = Map::new();
        while let Some(name) = access.next_key::<String>()? {
            let Strict(value) = access.next_value::<Strict>()?;
            if map.insert(name, value).is_some() {
                return Err(de::Error::custom(DUPLICATE));
            }
        }
        Ok(Strict(Value::Object(map)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dup(text: &str) -> bool {
        matches!(
            value_from_slice(text.as_bytes()),
            Err(StrictError::DuplicateMember)
        )
    }

    #[test]
    fn duplicates_refused_at_every_depth() {
        assert!(dup(r#"{"a":1,"a":2}"#));
        assert!(dup(r#"{"a":1,"b":{"c":1,"c":1}}"#));
        assert!(dup(r#"{"a":[{"x":1},{"y":2,"y":3}]}"#));
        assert!(dup(r#"[[{"k":null,"k":null}]]"#));
        // The same name after JSON unescaping is the same member.
        assert!(dup(r#"{"a":1,"\u0061":2}"#));
    }

    #[test]
    fn unique_members_parse_as_serde_json_does() -> Result<(), StrictError> {
        for text in [
            r#"{"a":1,"b":{"a":1},"c":[{"a":1},{"a":2}],"d":-5,"e":1.5,"f":null,"g":true}"#,
            r#"{"big":18446744073709551615,"neg":-9223372036854775808,"s":"\u00e9"}"#,
            "[]",
            "\"x\"",
            "  {}  ",
        ] {
            let strict = value_from_slice(text.as_bytes())?;
            let loose: Value = serde_json::from_str(text).map_err(StrictError::Json)?;
            assert_eq!(strict, loose, "{text}");
        }
        Ok(())
    }

    #[test]
    fn not_json_is_a_json_error() {
        for text in ["", "{", "{\"a\":1} x", "{\"a\":1,}", "nul"] {
            assert!(matches!(
                value_from_slice(text.as_bytes()),
                Err(StrictError::Json(_))
            ));
        }
    }

    #[test]
    fn typed_parse_refuses_duplicates_a_derive_would_take() {
        #[derive(Deserialize)]
        struct T {
            #[allow(dead_code)]
            a: Value,
        }
        // serde_json alone accepts this (the derive ignores the unknown member's repeat).
        assert!(serde_json::from_str::<T>(r#"{"a":1,"b":{"x":1,"x":2}}"#).is_ok());
        assert!(matches!(
            from_slice::<T>(br#"{"a":1,"b":{"x":1,"x":2}}"#),
            Err(StrictError::DuplicateMember)
        ));
        assert!(from_slice::<T>(br#"{"a":1}"#).is_ok());
    }

    #[test]
    fn deep_nesting_is_refused_not_overflowed() {
        let deep = "[".repeat(100_000);
        assert!(matches!(
            value_from_slice(deep.as_bytes()),
            Err(StrictError::Json(_))
        ));
    }
}
