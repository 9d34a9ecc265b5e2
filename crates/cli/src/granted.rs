//! A grant's released values as a command's environment, and what its output masks (issue 49).
//!
//! The broker's release answer (`POST /v1/grants/{id}/values`) holds each secret's value and,
//! when some secret is issued (a credential made for this grant alone: a PostgreSQL role, an
//! AWS access key), `parts`: that credential as the environment variables its tools read
//! (`PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`, `PGPASSWORD`; `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY`), per secret, in the grant's order. A command gets every value under
//! its secret's name and every part under its variable's name:
//!
//! - two secrets' parts that name the same variable (two PostgreSQL secrets both give
//!   `PGPASSWORD`): the first secret in the order the broker answered them (the grant's) wins,
//!   and a [`Clash`] names the variable and both secrets (the caller warns on standard error);
//! - a part named like a granted secret: the secret's value wins, with a [`Clash`] too.
//!
//! Masking covers every value and every part, a part a clash left out of the environment too
//! (the value of an issued secret, a URL, holds it), except the parts the broker names as not
//! secret (`public_parts`: `PGHOST`, `PGPORT`, `PGDATABASE`, `PGUSER`), which a command's output
//! shows as they are (a port or a database name masked everywhere would hide what it is read
//! for). An answer without `parts` (no issued
//! secret, or an earlier broker) gives the values alone, as before; fields this program does
//! not know are ignored.

use std::collections::BTreeMap;
use std::fmt;

use countersign_launcher_proto::Secret;
use serde::de::{MapAccess, Visitor};
use serde::ser::SerializeMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// One secret's parts: environment variable names and values, in the broker's order.
pub type Vars = Vec<(String, Secret)>;

/// Each issued secret's parts, in the order the broker answered them (a JSON object whose
/// order is kept, which a `BTreeMap` would lose).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Parts(pub Vec<(String, Vars)>);

impl Parts {
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The parts of `secret`, if it has any.
    #[must_use]
    pub fn of(&self, secret: &str) -> Option<&Vars> {
        self.0.iter().find(|(s, _)| s == secret).map(|(_, v)| v)
    }
}

/// A JSON object read into a `Vec` of its members, in order.
struct Ordered<T>(Vec<(String, T)>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Ordered<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = Ordered<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut out = Vec::with_capacity(map.size_hint().unwrap_or(0));
                while let Some((k, v)) = map.next_entry::<String, T>()? {
                    out.push((k, v));
                }
                Ok(Ordered(out))
            }
        }
        d.deserialize_map(V(std::marker::PhantomData))
    }
}

impl<'de> Deserialize<'de> for Parts {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let outer = Ordered::<Ordered<Secret>>::deserialize(d)?;
        Ok(Parts(outer.0.into_iter().map(|(k, v)| (k, v.0)).collect()))
    }
}

/// An ordered list of members written as a JSON object.
struct AsObject<'a, T>(&'a [(String, T)]);

impl<T: Serialize> Serialize for AsObject<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in self.0 {
            m.serialize_entry(k, v)?;
        }
        m.end()
    }
}

impl Serialize for Parts {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (secret, vars) in &self.0 {
            m.serialize_entry(secret, &AsObject(vars))?;
        }
        m.end()
    }
}

/// A variable set once, though more than one source gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Clash {
    /// The variable.
    pub var: String,
    /// The secret whose part sets it; `None` when it is a granted secret's own name.
    pub kept: Option<String>,
    /// The secret whose part is left out.
    pub dropped: String,
}

impl Clash {
    /// The warning line (names only, never a value).
    #[must_use]
    pub fn warning(&self) -> String {
        match &self.kept {
            Some(k) => format!(
                "{} is a part of both {k} and {}: {k}'s is used (the first in the grant)",
                self.var, self.dropped
            ),
            None => format!(
                "{} is a granted secret and a part of {}: the secret's value is used",
                self.var, self.dropped
            ),
        }
    }
}

/// What a command runs with.
#[derive(Debug, Default)]
pub struct Granted {
    /// Its environment variables: each value under its secret's name, then the parts.
    pub env: Vec<(String, Secret)>,
    /// Every value and every part, labelled by name (`APP_DB`, `APP_DB's PGPASSWORD`): what its output
    /// masks.
    pub masked: Vec<(String, Secret)>,
    /// The variables more than one source gave.
    pub clashes: Vec<Clash>,
}

/// Each issued secret's parts that are not secret, by secret (the answer's `public_parts`).
pub type Public = BTreeMap<String, Vec<String>>;

/// The environment and the masked values of `values` (secret name and value) and `parts`
/// (secret name and its parts, the first secret winning a variable two of them give); the
/// parts `public` names are not masked.
#[must_use]
pub fn compose<'a>(
    values: impl IntoIterator<Item = (&'a str, &'a Secret)>,
    parts: impl IntoIterator<Item = (&'a str, &'a Vars)>,
    public: &Public,
) -> Granted {
    let mut g = Granted::default();
    // Who set each variable: `None` for a secret's own value.
    let mut set_by: BTreeMap<String, Option<String>> = BTreeMap::new();
    for (name, value) in values {
        g.env.push((name.to_owned(), value.clone()));
        g.masked.push((name.to_owned(), value.clone()));
        set_by.insert(name.to_owned(), None);
    }
    for (secret, vars) in parts {
        let open = public.get(secret);
        for (var, value) in vars {
            if !open.is_some_and(|o| o.contains(var)) {
                g.masked.push((format!("{secret}'s {var}"), value.clone()));
            }
            match set_by.get(var) {
                Some(kept) => {
                    // A secret's parts naming one variable twice is not a clash of two secrets.
                    if kept.as_deref() != Some(secret) {
                        g.clashes.push(Clash {
                            var: var.clone(),
                            kept: kept.clone(),
                            dropped: secret.to_owned(),
                        });
                    }
                }
                None => {
                    set_by.insert(var.clone(), Some(secret.to_owned()));
                    g.env.push((var.clone(), value.clone()));
                }
            }
        }
    }
    g
}

/// [`compose`] of one release: its values (by name) and all its parts (the grant's order).
#[must_use]
pub fn of_release(values: &BTreeMap<String, Secret>, parts: &Parts, public: &Public) -> Granted {
    compose(
        values.iter().map(|(k, v)| (k.as_str(), v)),
        parts.0.iter().map(|(k, v)| (k.as_str(), v)),
        public,
    )
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests;
