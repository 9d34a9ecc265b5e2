//! The storage failure adapters map driver errors into; its text goes to logs, never to
//! clients.

/// A storage failure.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The database cannot be reached: clients see DATABASE_UNAVAILABLE.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The transaction lost a race the backend could not serialise; run it again.
    #[error("transaction conflict")]
    Conflict,
    /// A stored row does not decode.
    #[error("stored row does not decode: {0}")]
    Corrupt(String),
    #[error("storage failure: {0}")]
    Other(String),
}
