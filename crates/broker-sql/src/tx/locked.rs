//! The rows a PostgreSQL write transaction read by key, or wrote (issue 50). A write
//! transaction's reads by key lock the row (`FOR UPDATE`) until it ends, so no other
//! transaction changes it meanwhile: reading it again answers what was read, or what this
//! transaction wrote since, without a round trip. The core reads a decision's enrollment and
//! request up to three times (its locks in order, the record's settling, the decision).
//! A key that read no row is not remembered (nothing was locked: another transaction may
//! insert it).

use std::collections::HashMap;

use countersign_broker_core::model::{Enrollment, Grant, Record, Request};

/// The rows, by table and key.
#[derive(Default)]
pub(crate) struct Locked {
    rows: HashMap<(&'static str, String), Row>,
}

pub(crate) enum Row {
    Enrollment(Enrollment),
    Request(Request),
    Record(Box<Record>),
    Grant(Grant),
}

/// A row kind remembered here.
pub(crate) trait Remembered: Clone {
    const TABLE: &'static str;
    fn row(self) -> Row;
    fn of(row: &Row) -> Option<&Self>;
}

macro_rules! remembered {
    ($($ty:ident => $table:literal),* $(,)?) => {$(
        impl Remembered for $ty {
            const TABLE: &'static str = $table;
            fn row(self) -> Row {
                Row::$ty(self)
            }
            fn of(row: &Row) -> Option<&Self> {
                match row {
                    Row::$ty(v) => Some(v),
                    _ => None,
                }
            }
        }
    )*};
}

remembered! {
    Enrollment => "enrollments",
    Request => "requests",
    Grant => "grants",
}

/// Boxed: a record is the largest row by far.
impl Remembered for Record {
    const TABLE: &'static str = "records";
    fn row(self) -> Row {
        Row::Record(Box::new(self))
    }
    fn of(row: &Row) -> Option<&Self> {
        match row {
            Row::Record(v) => Some(v),
            _ => None,
        }
    }
}

impl Locked {
    /// The row of `T`'s table with key `key`, if read or written.
    pub(crate) fn get<T: Remembered>(&self, key: &str) -> Option<T> {
        self.rows
            .get(&(T::TABLE, key.to_owned()))
            .and_then(T::of)
            .cloned()
    }

    /// Remembers `v` as the row with key `key`.
    pub(crate) fn put<T: Remembered>(&mut self, key: String, v: &T) {
        self.rows.insert((T::TABLE, key), v.clone().row());
    }
}
