//! sqlx's errors as the core's [`IssuerError`]: what is worth retrying (no connection, a server
//! shutting down or out of resources, a serialization failure or deadlock, a timeout) is
//! `Unavailable`; what an operator must fix (a missing privilege or role, a bad admin login) is
//! `Refused`. The text names what failed and the SQLSTATE, never a statement (a statement may
//! hold a password verifier) nor the admin URL.

use countersign_broker_core::issuer::IssuerError;

/// Whether a SQLSTATE says "try again later".
pub fn retryable(code: &str) -> bool {
    code.starts_with("08") // connection exception
        || code.starts_with("53") // insufficient resources (too many connections, disk full)
        || code.starts_with("57P") // admin shutdown, crash shutdown, cannot connect now
        || code == "57014" // query canceled: our statement_timeout
        || code == "55P03" // lock not available
        || code == "40001" // serialization failure
        || code == "40P01" // deadlock detected
}

/// The core's view of `e`, met while doing `what`.
pub fn classify(e: sqlx::Error, what: &str) -> IssuerError {
    use sqlx::Error as E;
    match e {
        E::Database(db) => {
            let code = db.code().map(|c| c.into_owned()).unwrap_or_default();
            let text = format!("{what}: SQLSTATE {code}: {}", db.message());
            if retryable(&code) {
                IssuerError::Unavailable(text)
            } else {
                IssuerError::Refused(text)
            }
        }
        E::PoolTimedOut => {
            IssuerError::Unavailable(format!("{what}: no connection to PostgreSQL in time"))
        }
        E::Io(io) => IssuerError::Unavailable(format!("{what}: connection: {io}")),
        E::Tls(_) => IssuerError::Unavailable(format!("{what}: TLS to PostgreSQL failed")),
        E::PoolClosed | E::WorkerCrashed => {
            IssuerError::Unavailable(format!("{what}: the connection pool is closed"))
        }
        E::Protocol(_) => {
            IssuerError::Unavailable(format!("{what}: PostgreSQL broke the protocol"))
        }
        // The admin URL's options; their text could quote the URL.
        E::Configuration(_) => {
            IssuerError::Refused(format!("{what}: the admin connection settings are invalid"))
        }
        other => IssuerError::Refused(format!("{what}: {}", kind(&other))),
    }
}

/// A short name for the errors that mean a bug or a server we do not understand.
fn kind(e: &sqlx::Error) -> &'static str {
    use sqlx::Error as E;
    match e {
        E::RowNotFound => "no row",
        E::ColumnNotFound(_) | E::ColumnIndexOutOfBounds { .. } => "a column is missing",
        E::ColumnDecode { .. } | E::Decode(_) | E::TypeNotFound { .. } => "an unexpected value",
        _ => "an unexpected failure",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transient_states_are_retryable_and_the_rest_are_not() {
        for code in [
            "08006", "08001", "53300", "57P01", "57P03", "57014", "40001", "40P01",
        ] {
            assert!(retryable(code), "{code}");
        }
        for code in [
            "42501", "42704", "28P01", "3D000", "2BP01", "42939", "XX000", "",
        ] {
            assert!(!retryable(code), "{code}");
        }
    }

    #[test]
    fn transport_failures_are_unavailable() {
        let e = classify(sqlx::Error::PoolTimedOut, "mint");
        assert!(matches!(e, IssuerError::Unavailable(ref m) if m.starts_with("mint: ")));
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert!(matches!(
            classify(sqlx::Error::Io(io), "list"),
            IssuerError::Unavailable(_)
        ));
        assert!(matches!(
            classify(sqlx::Error::RowNotFound, "list"),
            IssuerError::Refused(_)
        ));
    }
}
