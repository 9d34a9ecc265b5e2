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

/// The one retry policy of a write transaction that meets a conflict, the broker's and the
/// console's: run it again up to this many times in all, each time after [`conflict_backoff`];
/// then answer 503 DATABASE_UNAVAILABLE (with `Retry-After`), never 500.
pub const TRANSACT_ATTEMPTS: u32 = 10;

/// How long to wait before attempt `attempt + 1` of a transaction that met a conflict on attempt
/// `attempt` (1-based): 1 ms doubling to 64 ms, plus up to as much again drawn from `jitter`
/// (any number; its value modulo the base is used), so that racing writers spread out.
pub fn conflict_backoff(attempt: u32, jitter: u64) -> std::time::Duration {
    let base_us = 1000u64 << attempt.saturating_sub(1).min(6);
    std::time::Duration::from_micros(base_us + jitter % base_us)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_backoff_doubles_to_64_ms_with_jitter_below_the_base() {
        let ms = |a, j| conflict_backoff(a, j).as_micros();
        assert_eq!(ms(1, 0), 1000);
        assert_eq!(ms(2, 0), 2000);
        assert_eq!(ms(7, 0), 64_000);
        assert_eq!(ms(20, 0), 64_000, "capped");
        assert_eq!(ms(1, 999), 1999);
        assert_eq!(ms(1, 1000), 1000, "jitter stays below the base");
    }
}
