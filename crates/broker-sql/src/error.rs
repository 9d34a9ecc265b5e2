//! How driver errors become [`StorageError`](countersign_broker_core::storage::StorageError)s:
//! the mapping the console's adapter uses too ([`countersign_common::sql`]).

pub(crate) use countersign_common::sql::{begin_err, db_err};
