//! Exit statuses (spec, "Command-line client exit codes") and the one error type commands
//! return.

use countersign_broker_client::BrokerError;
use countersign_launcher_proto::{ClientError, HelperCode};

pub const SUCCESS: u8 = 0;
pub const FAILURE: u8 = 1;
/// Invalid flag, argument, token file or required environment value (clap's own code too).
pub const USAGE: u8 = 2;
/// A request (or machine login) is still waiting for a person.
pub const PENDING: u8 = 75;
/// A lease renewal reached a terminal refusal; its worker must not be restarted.
pub const RENEWAL_TERMINAL: u8 = 76;
/// The request (or machine login) was denied.
pub const DENIED: u8 = 77;
/// The command of `run` exists but could not be executed.
pub const CANNOT_EXECUTE: u8 = 126;
/// The command of `run` was not found.
pub const NOT_FOUND: u8 = 127;

/// The exit status for a signal received at the secret prompt: 128 + its number
/// (SIGHUP 129, SIGINT 130, SIGQUIT 131, SIGTERM 143).
#[must_use]
pub fn for_signal(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(FAILURE)
}

/// Why a command stopped: the exit status, a message, and the refusal code behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fail {
    pub exit: u8,
    pub message: String,
    /// The helper's or broker's refusal code.
    pub code: Option<String>,
}

impl Fail {
    pub fn new(exit: u8, message: impl Into<String>) -> Self {
        Self {
            exit,
            message: message.into(),
            code: None,
        }
    }

    pub fn failure(message: impl Into<String>) -> Self {
        Self::new(FAILURE, message)
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }

    #[must_use]
    pub fn with_code(mut self, code: Option<String>) -> Self {
        self.code = code;
        self
    }
}

impl From<ClientError> for Fail {
    fn from(e: ClientError) -> Self {
        match &e {
            ClientError::Refused(r) => {
                let hint = match r.code {
                    HelperCode::NoCredential => {
                        " (log this machine in: countersign login --login EMAIL)"
                    }
                    HelperCode::NotASession => {
                        " (run this inside a session: countersign run -- COMMAND)"
                    }
                    HelperCode::InSession => " (operator and login commands run outside sessions)",
                    _ => "",
                };
                Fail::failure(format!(
                    "launcher helper refused ({}): {}{hint}",
                    r.code, r.error
                ))
                .with_code(Some(r.code.as_str().to_owned()))
            }
            _ => Fail::failure(e.to_string()),
        }
    }
}

impl From<BrokerError> for Fail {
    fn from(e: BrokerError) -> Self {
        Fail::failure(e.to_string()).with_code(e.code.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use countersign_broker_client::Failure;

    /// An issuer that cannot make or answer a credential is an unavailable dependency, like the
    /// broker's database: the spec's exit codes give both 1, with the code kept for --json.
    #[test]
    fn an_unavailable_issuer_exits_as_an_unavailable_database() {
        let refused = |code: &str| {
            Fail::from(BrokerError {
                kind: Failure::Refused,
                status: Some(503),
                code: Some(code.to_owned()),
                message: "unavailable".into(),
            })
        };
        let issuer = refused("ISSUER_UNAVAILABLE");
        assert_eq!(issuer.exit, refused("DATABASE_UNAVAILABLE").exit);
        assert_eq!(issuer.exit, FAILURE);
        assert_eq!(issuer.code.as_deref(), Some("ISSUER_UNAVAILABLE"));
    }
}
