//! The console's error catalogue (code, status, message) in one table (the shared
//! [`countersign_common::error_catalogue!`], so clients match typed codes), and the broker's
//! refusals passed through with the broker's own code and status.

pub use countersign_common::code::ErrorCatalogue;
use countersign_common::storage::StorageError;

countersign_common::error_catalogue! {
    /// Every refusal code the console itself gives.
    pub enum ErrorCode {
        UNAUTHENTICATED => 401, "sign in, or present a valid bearer token";
        HUMAN_ONLY => 403, "this route is for a signed-in person; an agent's bearer token is refused";
        AGENT_ONLY => 403, "this route is for an agent's bearer token";
        CSRF_REJECTED => 403, "cross-site request refused: the request lacks this page's CSRF token or comes from another site";
        SIGN_IN_FAILED => 401, "sign-in failed";
        LOCAL_SIGN_IN_OFF => 404, "local sign-in is only for dev mode";
        SIGN_IN_OFF => 404, "no identity provider is configured";
        LOGIN_INPUT => 400, "a login is an e-mail address";
        INVALID_QUERY => 400, "invalid query";
        TOKEN_INPUT => 400, "body must be one JSON object with an optional `name` of 1 to 100 characters";
        TOKEN_LIMIT => 409, "a person may hold at most 50 live personal tokens; revoke one first";
        INVALID_DECISION => 400, "body must be one valid JSON object";
        INVALID_LOOKUP => 400, "body must be one valid JSON object";
        NOT_FOUND => 404, "not found";
        BROKER_NOT_CONFIGURED => 404, "no broker is configured for this console";
        BROKER_UNAVAILABLE => 503, "the broker could not be reached";
        DATABASE_UNAVAILABLE => 503, "the console's database is unavailable";
        REQUEST_TOO_LARGE => 413, "request body exceeds a byte limit";
        INVALID_BODY => 400, "the body is malformed, mistyped, misses a field or has an unknown one";
        INVALID_PROJECT => 400, "not a project key, or an invalid project name";
        INVALID_SESSION_ID => 400, "a session id is 1 to 128 characters without whitespace, control characters or any of / ? # < > \" ' ` [ ] \\ |";
        INVALID_STATE => 400, "invalid state";
        CAP_EXCEEDED => 400, "a text or list is over its cap";
        ASSIGNEE_NOT_ALLOWED => 400, "an assignee is the e-mail of a person who has signed in";
        SESSION_FORBIDDEN => 403, "a bearer acts only for its own session here";
        METHOD_NOT_ALLOWED => 405, "this path does not take this method";
        UNSUPPORTED_MEDIA_TYPE => 415, "a JSON body is application/json";
        PROJECT_EXISTS => 409, "a project has this key";
        ISSUE_CHANGED => 409, "the issue changed since expected_sequence";
        ISSUE_CLAIMED => 409, "another holder claims the issue";
        CLAIM_CONTENDED => 409, "the claim changed hands twice during the request; read the issue and retry";
        ISSUE_CLOSED => 409, "a closed issue changes only its status and components";
        // ----- documents (protocol §6.2) -----
        ARTIFACT_INPUT => 400, "an upload or document body is malformed or not allowed here";
        TARGET_NOT_FOUND => 404, "the document has no such block, row or column";
        DOCUMENT_CHANGED => 409, "the document changed since the token given; nothing was applied";
        QUOTE_NOT_FOUND => 409, "the quote matches nothing in its scope";
        QUOTE_AMBIGUOUS => 409, "the quote matches more than once in its scope";
        DOCUMENT_LIVE => 409, "the document loads and is live: nothing to rebuild";
        DOCUMENT_LOADS => 409, "the document's history loads: nothing to rebuild";
        // ----- asks and comments (protocol §6.3) -----
        ASK_STATE => 409, "the ask is not in a state that allows this";
        SUGGESTION_STATE => 409, "the suggestion was decided already, or there is none";
        // ----- messages, broadcasts, inbox (protocol §6.4) -----
        MESSAGE_INPUT => 400, "the message body is malformed or has an unknown field";
        THREAD_ID_INPUT => 400, "a thread id is a UUID";
        THREAD_FORBIDDEN => 403, "this session neither is the thread's target nor replied in it";
        ACCEPT_FORBIDDEN => 403, "a session accepts only its own delivery attempts";
        BROADCAST_KEY_REUSED => 409, "this idempotency_key named another broadcast request";
        ACCEPT_NOT_DIRECT => 409, "only a direct message to this session on no issue can be accepted";
        ACCEPT_NOT_WRITTEN_BY_PERSON => 409, "only a message a person wrote can be accepted";
        ACCEPT_NOT_ASIDE_OR_STEER => 409, "only a message sent as aside or steer can be accepted";
        ACCEPT_SUPERSEDED => 409, "only the message's latest attempt can be accepted";
        ACCEPT_ALREADY_ACCEPTED => 409, "an attempt of this message was accepted already";
        ACCEPT_NOT_REQUESTED_BY_PERSON => 409, "only an attempt a person requested can be accepted";
        ACCEPT_NOT_REQUESTED_BY_AUTHOR => 409, "only an attempt the message's author requested can be accepted";
        ACCEPT_FAILED => 409, "a failed attempt cannot be accepted";
        ACCEPT_STALE => 409, "an attempt can be accepted within a minute of it";
        WEBHOOK_INVALID => 401, "the webhook's signature, timestamp or headers do not verify";
        // ----- delivery and architecture (protocol §6.5, §9) -----
        RUN_ID_INPUT => 400, "a run id is a positive integer";
        SESSION_GROUP_INPUT => 400, "a session group body is malformed: a name and one session at least";
        DELIVERY_NOT_CONFIGURED => 404, "no delivery settings are configured";
        SOURCE_NOT_FOUND => 404, "the project has no architecture source";
        SESSION_IN_GROUP => 409, "another session group holds this session";
        SESSION_GROUP_NAME_TAKEN => 409, "another session group has this name";
        SESSION_GROUP_NAME_IS_SESSION_TITLE => 409, "this name is the title of a session outside the group";
        SOURCE_ACCESS => 409, "the code-hosting integration cannot read this repository or branch";
        DELIVERY_SETTINGS_ACCESS => 409, "the code-hosting integration cannot read the deploy repository";
        CODE_HOST_UNAVAILABLE => 503, "the code-hosting service could not be reached";
        // ----- projects and mappings -----
        MAPPING_IN_USE => 409, "an issue names this repository as its repo";
        INTERNAL => 500, "internal error";
    }
}

/// Whose code a refusal carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Code {
    /// One of the console's own codes.
    Console(ErrorCode),
    /// A refusal of the broker, passed through: its code and HTTP status.
    Broker { code: String, status: u16 },
}

/// A refusal: a code and a message that never carries a token, a value or key material.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}: {message}", self.code_str())]
pub struct Error {
    pub code: Code,
    pub message: String,
    /// Named detail fields some codes add to the body (protocol §10), e.g. ISSUE_CHANGED's
    /// `sequence`.
    pub details: serde_json::Map<String, serde_json::Value>,
    /// A write conflict the storage reported (another transaction won): the whole transaction
    /// may run again. Its wire code is DATABASE_UNAVAILABLE (a retryable 503) should the
    /// retries run out.
    conflict: bool,
}

impl Error {
    pub fn new(code: ErrorCode) -> Self {
        Self {
            code: Code::Console(code),
            message: code.message().to_owned(),
            details: Default::default(),
            conflict: false,
        }
    }

    pub fn with_message(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code: Code::Console(code),
            message: message.into(),
            details: Default::default(),
            conflict: false,
        }
    }

    /// A broker refusal passed through. A status outside 400..=599 is taken as 502.
    pub fn broker(code: impl Into<String>, status: u16, message: impl Into<String>) -> Self {
        let status = if (400..=599).contains(&status) {
            status
        } else {
            502
        };
        Self {
            code: Code::Broker {
                code: code.into(),
                status,
            },
            message: message.into(),
            details: Default::default(),
            conflict: false,
        }
    }

    /// Adds a detail field to the refusal's body.
    pub fn with_detail(mut self, name: &str, value: impl serde::Serialize) -> Self {
        self.details.insert(
            name.to_owned(),
            serde_json::to_value(value).unwrap_or(serde_json::Value::Null),
        );
        self
    }

    /// The wire code, e.g. `"HUMAN_ONLY"` or the broker's `"NOT_APPROVER"`.
    pub fn code_str(&self) -> &str {
        match &self.code {
            Code::Console(c) => c.as_str(),
            Code::Broker { code, .. } => code,
        }
    }

    pub fn status(&self) -> u16 {
        match &self.code {
            Code::Console(c) => c.status(),
            Code::Broker { status, .. } => *status,
        }
    }

    /// Whether this refusal carries `code` (the console's).
    pub fn is(&self, code: ErrorCode) -> bool {
        self.code == Code::Console(code)
    }

    /// Whether this is a write conflict (see [`StorageError::Conflict`]): the
    /// one error a transaction's retry can help.
    pub fn is_conflict(&self) -> bool {
        self.conflict
    }
}

impl From<ErrorCode> for Error {
    fn from(c: ErrorCode) -> Self {
        Error::new(c)
    }
}

impl From<StorageError> for Error {
    fn from(e: StorageError) -> Self {
        match e {
            StorageError::Unavailable(m) => {
                tracing::warn!(error = %m, "console database unavailable");
                Error::new(ErrorCode::DATABASE_UNAVAILABLE)
            }
            StorageError::Conflict => Error {
                conflict: true,
                ..Error::new(ErrorCode::DATABASE_UNAVAILABLE)
            },
            StorageError::Corrupt(m) | StorageError::Other(m) => {
                tracing::error!(error = %m, "console database failure");
                Error::with_message(ErrorCode::INTERNAL, "database failure")
            }
        }
    }
}
