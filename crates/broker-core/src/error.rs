//! The broker's error catalogue: every code of the spec, its HTTP status and its message, in one
//! table. Every refusal the broker gives goes through [`Error`]; the HTTP layer only renders it.

use std::fmt;

pub use countersign_common::code::{ErrorCatalogue, WireCode};

countersign_common::error_catalogue! {
    /// Every refusal code of the broker API (spec, "Errors").
    pub enum ErrorCode {
        ACCOUNT_NOT_LISTED => 403, "the ServiceAccount does not log in as this service";
        ALREADY_ENROLLED => 409, "this runtime is already enrolled and live";
        APPROVER_REQUIRED => 400, "approver is required";
        CODE_MISMATCH => 403, "confirmation code does not match";
        CODE_REQUIRED => 400, "code is required";
        CREDENTIAL_ID_INPUT => 400, "launcher credential ids are UUIDs";
        DATABASE_UNAVAILABLE => 503, "a dependency the broker needs is unavailable";
        ENROLLMENT_ID_INPUT => 400, "enrollment ids are UUIDs";
        ENROLLMENT_NOT_LIVE => 401, "enrollment is not live";
        GRANT_CHAIN_INVALID => 403, "the grant's approval chain no longer verifies";
        GRANT_ID_INPUT => 400, "grant ids are UUIDs";
        GRANT_NOT_LIVE => 403, "grant is expired, revoked, or its session ended";
        INTERNAL => 500, "internal error";
        INVALID_DECISION => 400, "body must be one valid JSON object";
        INVALID_ENROLLMENT => 400, "body must be one valid JSON object";
        INVALID_LOOKUP => 400, "body must be one valid JSON object";
        INVALID_PASSKEY => 400, "body must be one valid JSON object";
        INVALID_RENEWAL => 400, "body must be one valid JSON object";
        INVALID_REQUEST => 400, "body must be one valid JSON object";
        INVALID_REVOKE => 400, "body must be one valid JSON object";
        ISSUER_UNAVAILABLE => 503, "the issuer that makes this secret's credential is unavailable";
        INVALID_KIND => 400, "kind must be `session` or `pod`";
        INVALID_SLOT => 400, "a slot is only for a pod enrollment and must match the slot pattern";
        KEY_HOLDS_LIVE_CREDENTIAL => 409, "this machine login's key already holds a live launcher credential";
        LAUNCHER_INVALID => 401, "the launcher credential is not valid";
        MIXED_APPROVERS => 400, "the requested secrets need different approvers; request them separately";
        NOT_APPROVER => 403, "only the record's approver may decide it";
        NOT_ENROLLING_CREDENTIAL => 403, "only the machine login that enrolled a pod may end its enrollment";
        NOT_FOUND => 404, "not found";
        NOT_YOURS => 403, "this belongs to another session";
        PASSKEY_ENROLLMENT_REQUIRED => 403, "a first passkey needs an operator's enrollment code, a later one an assertion from a passkey already registered";
        PASSKEY_EXISTS => 409, "this passkey is already registered";
        PASSKEY_INVALID => 403, "the passkey countersignature does not verify";
        PASSKEY_REQUIRED => 403, "this approval needs the approver's passkey countersignature";
        PASSKEYS_OFF => 404, "this broker has no [passkeys] settings: no passkey is registered or required";
        NO_SUCH_CODE => 404, "no pending machine login has this code";
        OPERATOR_MISMATCH => 403, "this launcher credential enrols a different operator";
        POD_IDENTITY_MISMATCH => 403, "the projected token does not identify this pod";
        POD_TOKEN_EXPIRED => 403, "the projected token has expired";
        POD_TOKEN_REQUIRED => 403, "a pod enrollment's renewal must carry its projected token";
        PROOF_INVALID => 401, "proof invalid";
        RATE_LIMITED => 429, "too many requests; try again later";
        RECORD_ID_INPUT => 400, "record ids are lowercase-hex sha256 hashes";
        RECORD_TERMINAL => 409, "request is already decided";
        REQUEST_ENDED => 503, "the request ended before the reread finished; send it again";
        REQUEST_ID_INPUT => 400, "request ids are UUIDs";
        REQUEST_INVALID => 400, "request object invalid";
        REQUEST_PENDING => 409, "a request for one or more of these secrets is already pending";
        REQUEST_TERMINAL => 409, "request is already decided";
        REQUEST_TOO_LARGE => 413, "request body exceeds a byte limit";
        SECRET_NAME_INVALID => 400, "not an agent secret name";
        SECRET_NOT_IN_STORE => 404, "secret is not in the secrets store";
        SERVICE_CREDENTIAL => 403, "a service's machine login has no operator; machine and grant commands are a person's";
        SERVICE_LOGS_IN_WITH_TOKEN => 400, "a service logs in with its ServiceAccount token at POST /v1/launcher-credentials/token, never through a code a person approves";
        SESSION_ID_INPUT => 400, "session id must be at most 128 characters with no whitespace or control character";
        TOKEN_EXPIRED => 401, "the ServiceAccount token has expired";
        TOKEN_INVALID => 401, "the ServiceAccount token does not verify";
        TOKEN_LOGIN_OFF => 404, "this broker trusts no token issuer, so no service logs in with a token";
        TOKEN_TOO_LONG_LIVED => 401, "the ServiceAccount token lives longer than an hour from its issue";
        UI_INVALID => 401, "the console bearer token is not valid";
        UNKNOWN_SECRET => 400, "no agent secret has this name";
    }
}

/// A refusal: a catalogue code and the message a client sees.
///
/// The message is the catalogue's, or a more specific one chosen at the refusal site (the spec
/// lets a message vary). It never holds a secret value, a token or key material: sites that wrap
/// lower-level failures pass a fixed step name, and the cause goes to the log only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error {
    pub code: ErrorCode,
    message: std::borrow::Cow<'static, str>,
}

impl Error {
    /// The code with the catalogue's message.
    pub fn new(code: ErrorCode) -> Self {
        Self {
            code,
            message: code.message().into(),
        }
    }

    /// The code with a message chosen at the refusal site.
    pub fn with_message(
        code: ErrorCode,
        message: impl Into<std::borrow::Cow<'static, str>>,
    ) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// An INTERNAL error naming the step that failed ("create request failed").
    pub fn internal(step: &'static str) -> Self {
        Self::with_message(ErrorCode::INTERNAL, step)
    }

    /// The message a client sees.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The HTTP status for this refusal.
    pub fn status(&self) -> u16 {
        self.code.status()
    }
}

impl From<ErrorCode> for Error {
    fn from(code: ErrorCode) -> Self {
        Self::new(code)
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl std::error::Error for Error {}

/// Shorthand for results of core operations.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn catalogue_names_round_trip_and_statuses_are_http() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            assert!(seen.insert(code.as_str()));
            assert!((400..600).contains(&code.status()), "{code}");
            assert!(!code.message().is_empty());
        }
        assert_eq!(ErrorCode::ALL.len(), 61);
    }
}
