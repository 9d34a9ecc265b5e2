//! The helper's requests and answers.
//!
//! A request is one JSON object with an `op` member naming the operation, and the operation's
//! fields beside it: `{"op":"sign_proof","method":"GET","path":"/v1/enrollments/self"}`. Fields a
//! request does not use are ignored, so an older helper accepts a newer client's extras.
//!
//! An answer is one JSON object with a `result` member naming its kind and the kind's fields
//! beside it: `{"result":"proof","proof":"eyJ…","url":"https://…","kid":"…"}`. A refusal is
//! `{"result":"error","code":"NOT_A_SESSION","error":"…"}`, with `broker_code` when the broker's
//! own refusal caused it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Secret;

/// The protocol version a helper announces in [`StatusInfo::protocol`].
pub const PROTOCOL_VERSION: u32 = 1;

/// One request to the helper.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// The helper's state as the caller may see it.
    Status,
    /// Starts a person's machine login (a new machine key; the person approves the code).
    LoginStart(LoginStart),
    /// Asks the broker once how the machine login in progress stands.
    LoginPoll,
    /// Logs a service in with its ServiceAccount token.
    TokenLogin(TokenLogin),
    /// Forgets the launcher credential this helper holds.
    Logout,
    /// Registers the calling process as the root of a new session, makes its key and enrolls it.
    Register(Register),
    /// Ends the caller's session (unenrolls its key).
    Unregister,
    /// Signs a session proof for one of the session routes.
    SignProof(SignProof),
    /// Signs a secret request object.
    SignRequest(SignRequest),
    /// Signs a launcher proof for one of the four operator routes.
    SignLauncherProof(SignProof),
}

/// Every `op` a helper of this version knows.
pub const OPS: &[&str] = &[
    "status",
    "login_start",
    "login_poll",
    "token_login",
    "logout",
    "register",
    "unregister",
    "sign_proof",
    "sign_request",
    "sign_launcher_proof",
];

impl Request {
    /// The request's `op`.
    #[must_use]
    pub fn op(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::LoginStart(_) => "login_start",
            Request::LoginPoll => "login_poll",
            Request::TokenLogin(_) => "token_login",
            Request::Logout => "logout",
            Request::Register(_) => "register",
            Request::Unregister => "unregister",
            Request::SignProof(_) => "sign_proof",
            Request::SignRequest(_) => "sign_request",
            Request::SignLauncherProof(_) => "sign_launcher_proof",
        }
    }

    /// Parses one line (without its newline) into a request. Every failure is `BAD_REQUEST`,
    /// with a message naming what is wrong (never quoting a value).
    ///
    /// # Errors
    /// `BAD_REQUEST` for a line that is not UTF-8, not one JSON object, has no string `op`,
    /// names an unknown op, or lacks or mistypes a field the op needs.
    pub fn parse_line(line: &[u8]) -> Result<Request, HelperError> {
        let bad = |m: String| HelperError::new(HelperCode::BadRequest, m);
        let text =
            std::str::from_utf8(line).map_err(|_| bad("the line is not UTF-8".to_owned()))?;
        let value: Value = serde_json::from_str(text).map_err(|e| {
            bad(format!(
                "the line is not one JSON object (column {})",
                e.column()
            ))
        })?;
        let Some(obj) = value.as_object() else {
            return Err(bad("the line is not one JSON object".to_owned()));
        };
        let op = match obj.get("op") {
            Some(Value::String(op)) => op.clone(),
            Some(_) => return Err(bad("`op` must be a string".to_owned())),
            None => return Err(bad("the request has no `op`".to_owned())),
        };
        if !OPS.contains(&op.as_str()) {
            let shown: String = op.chars().take(40).collect();
            return Err(bad(format!(
                "unknown op {shown:?}; known ops: {}",
                OPS.join(", ")
            )));
        }
        serde_json::from_value(value).map_err(|e| bad(format!("{op}: {}", field_error(&e))))
    }
}

/// A serde error's description, without the value serde may quote.
fn field_error(e: &serde_json::Error) -> String {
    let s = e.to_string();
    // serde's messages: "missing field `x`", "invalid type: string \"…\", expected u64", …
    if s.starts_with("missing field") {
        return s.split(" at line").next().unwrap_or(&s).to_owned();
    }
    if let Some((_, expected)) = s.split_once(", expected ") {
        let expected = expected.split(" at line").next().unwrap_or(expected);
        return format!("a field has the wrong type (expected {expected})");
    }
    "a field is not valid".to_owned()
}

/// `login_start`: the person who alone may approve, and optionally the machine's host name.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LoginStart {
    /// The person's e-mail (their console login).
    pub login: String,
    /// The host name shown to the approver; the helper's own when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
}

/// `token_login`: a service's name and its ServiceAccount token, by file (which the helper
/// rereads at each later login) or inline.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct TokenLogin {
    pub service: String,
    /// An absolute path to the token file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<String>,
    /// The token itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<Secret>,
}

/// `register`: options of the new session.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Register {
    /// The notification session told when a pending request of this session expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// Answer only once the enrollment succeeded or failed (default); with `false`, answer as
    /// soon as the key exists and enroll in the background.
    #[serde(default = "yes")]
    pub wait: bool,
    /// A short name for the session, part of its runtime id (e.g. the command it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

impl Default for Register {
    fn default() -> Self {
        Self {
            session_id: None,
            wait: true,
            label: None,
        }
    }
}

fn yes() -> bool {
    true
}

/// `sign_proof` / `sign_launcher_proof`: the HTTP request the proof is for.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SignProof {
    /// `GET`, `POST`, `DELETE` (upper case).
    pub method: String,
    /// The request path, e.g. `/v1/requests`; no query.
    pub path: String,
    /// base64url SHA-256 of the exact body bytes; absent for a request without a body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bh: Option<String>,
}

/// `sign_request`: the secret request object's contents.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SignRequest {
    /// Agent secret names (`GITHUB_TOKEN`).
    pub secrets: Vec<String>,
    /// Why, 1 to 1,000 characters, shown to the approver.
    pub reason: String,
    /// How long the grant should last; until the session ends when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime_seconds: Option<u64>,
}

/// One answer from the helper.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    Status(Box<StatusInfo>),
    LoginStarted(LoginStarted),
    Login(LoginProgress),
    Credential(CredentialInfo),
    LoggedOut(LoggedOut),
    Registered(SessionInfo),
    Unregistered(Unregistered),
    Proof(SignedProof),
    SignedRequest(SignedRequest),
    Error(HelperError),
}

impl Response {
    /// The answer's `result` name.
    #[must_use]
    pub fn kind(&self) -> &'static str {
        match self {
            Response::Status(_) => "status",
            Response::LoginStarted(_) => "login_started",
            Response::Login(_) => "login",
            Response::Credential(_) => "credential",
            Response::LoggedOut(_) => "logged_out",
            Response::Registered(_) => "registered",
            Response::Unregistered(_) => "unregistered",
            Response::Proof(_) => "proof",
            Response::SignedRequest(_) => "signed_request",
            Response::Error(_) => "error",
        }
    }
}

impl From<HelperError> for Response {
    fn from(e: HelperError) -> Self {
        Response::Error(e)
    }
}

/// `status`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct StatusInfo {
    /// The helper's version.
    pub version: String,
    /// [`PROTOCOL_VERSION`].
    pub protocol: u32,
    /// The broker's public URL (proofs' `htu` base, requests' `aud`).
    pub broker_url: String,
    /// The approval console's address, when the helper was told it.
    #[serde(default)]
    pub console_url: Option<String>,
    /// The launcher credential the helper holds.
    #[serde(default)]
    pub credential: Option<CredentialInfo>,
    /// Whether a person's machine login is in progress.
    pub login_pending: bool,
    /// Who the helper sees calling.
    pub caller: CallerInfo,
    /// Every session, for a caller outside all sessions; empty for one inside.
    #[serde(default)]
    pub sessions: Vec<SessionInfo>,
}

/// Where the caller stands.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CallerInfo {
    pub pid: i32,
    pub standing: Standing,
    /// The session the caller is in.
    #[serde(default)]
    pub session: Option<SessionInfo>,
}

/// A caller's standing, which decides what the helper signs for it.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Standing {
    /// Outside every session: may ask for launcher signing.
    Outside,
    /// Inside a registered session's process tree.
    Session,
    /// Left behind by a session that has ended (a process it started): neither session nor
    /// launcher signing.
    FormerSession,
    /// Its ancestry could not be followed to the root (unreadable, a loop, or deeper than 64).
    Unknown,
}

/// The launcher credential a helper holds (never its key).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct CredentialInfo {
    pub credential_id: String,
    pub kind: CredentialKind,
    /// The machine's host name as the broker records it.
    pub host: String,
    /// A person's machine: the person (the sessions' operator).
    #[serde(default)]
    pub login: Option<String>,
    /// A service's login: the service.
    #[serde(default)]
    pub service: Option<String>,
    /// RFC 3339, when the broker stops honouring it for enrollment.
    #[serde(default)]
    pub expires_at: Option<String>,
    /// Whether `expires_at` has passed by the helper's clock.
    pub expired: bool,
}

/// Whose credential.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum CredentialKind {
    Person,
    Service,
}

/// `login_start`'s answer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LoginStarted {
    /// The confirmation code (`XXXX-XXXX`) the person types in the console.
    pub code: String,
    pub login: String,
    pub host: String,
    #[serde(default)]
    pub console_url: Option<String>,
}

/// How a machine login stands.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LoginState {
    Pending,
    Issued,
    Denied,
    Expired,
}

/// `login_poll`'s answer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LoginProgress {
    pub state: LoginState,
    /// Once issued, the credential now held.
    #[serde(default)]
    pub credential: Option<CredentialInfo>,
}

/// `logout`'s answer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct LoggedOut {
    /// The credential forgotten, if one was held.
    #[serde(default)]
    pub credential_id: Option<String>,
}

/// A session as the helper keeps it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SessionInfo {
    /// The registered root process.
    pub root_pid: i32,
    pub runtime_id: String,
    pub state: SessionState,
    #[serde(default)]
    pub enrollment_id: Option<String>,
    /// RFC 3339, as the broker last answered.
    #[serde(default)]
    pub lease_expires_at: Option<String>,
    #[serde(default)]
    pub session_id: Option<String>,
    /// Why the enrollment failed or ended.
    #[serde(default)]
    pub error: Option<String>,
    /// The broker's refusal code behind `error`, if any.
    #[serde(default)]
    pub broker_code: Option<String>,
}

/// A session's enrollment.
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum SessionState {
    /// Key made; enrollment not answered yet.
    Enrolling,
    /// Enrolled and live; its lease is renewed in the background.
    Enrolled,
    /// The broker refused, or could not be asked, to enroll it.
    Failed,
    /// It was enrolled and has ended (lease lapsed, revoked): a terminal state.
    Ended,
}

/// `unregister`'s answer.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Unregistered {
    #[serde(default)]
    pub enrollment_id: Option<String>,
}

/// A signed `Proof` header value.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SignedProof {
    /// The compact JWS to send as the `Proof` header.
    pub proof: String,
    /// The full URL the proof is bound to (`htu`): send the request there.
    pub url: String,
    /// The key the proof names: the enrollment id or the launcher credential id.
    pub kid: String,
}

/// A signed secret request object.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct SignedRequest {
    /// The compact JWS, the `request` member of `POST /v1/requests`.
    pub request: String,
    pub enrollment_id: String,
    /// The broker's public URL, where to send it.
    pub broker_url: String,
}

/// The helper's refusal codes (spec, "Launcher helper codes").
#[derive(Serialize, Deserialize, Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum HelperCode {
    BadRequest,
    EnrollFailed,
    InSession,
    Keygen,
    LoginFailed,
    NotASession,
    NotEnrolled,
    NoCredential,
    PeerUnidentified,
    Sign,
    UnenrollFailed,
    /// A code this version does not know (from a newer helper).
    #[serde(other)]
    Other,
}

impl HelperCode {
    /// The code as it appears on the wire.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            HelperCode::BadRequest => "BAD_REQUEST",
            HelperCode::EnrollFailed => "ENROLL_FAILED",
            HelperCode::InSession => "IN_SESSION",
            HelperCode::Keygen => "KEYGEN",
            HelperCode::LoginFailed => "LOGIN_FAILED",
            HelperCode::NotASession => "NOT_A_SESSION",
            HelperCode::NotEnrolled => "NOT_ENROLLED",
            HelperCode::NoCredential => "NO_CREDENTIAL",
            HelperCode::PeerUnidentified => "PEER_UNIDENTIFIED",
            HelperCode::Sign => "SIGN",
            HelperCode::UnenrollFailed => "UNENROLL_FAILED",
            HelperCode::Other => "OTHER",
        }
    }
}

impl std::fmt::Display for HelperCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A refusal: `{"result":"error","code":…,"error":…}`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{code}: {error}")]
pub struct HelperError {
    pub code: HelperCode,
    /// A message for people; never carries a key, token or secret value.
    pub error: String,
    /// The broker's refusal code, when the broker's answer caused this refusal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker_code: Option<String>,
}

impl HelperError {
    #[must_use]
    pub fn new(code: HelperCode, error: impl Into<String>) -> Self {
        Self {
            code,
            error: error.into(),
            broker_code: None,
        }
    }

    #[must_use]
    pub fn with_broker_code(mut self, code: Option<String>) -> Self {
        self.broker_code = code;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bad(line: &str) -> String {
        match Request::parse_line(line.as_bytes()) {
            Err(e) => {
                assert_eq!(e.code, HelperCode::BadRequest, "{line}");
                e.error
            }
            Ok(r) => panic!("{line} parsed as {r:?}"),
        }
    }

    #[test]
    fn parses_every_op() {
        let lines = [
            (r#"{"op":"status"}"#, Request::Status),
            (
                r#"{"op":"login_start","login":"a@b.c"}"#,
                Request::LoginStart(LoginStart {
                    login: "a@b.c".into(),
                    host: None,
                }),
            ),
            (r#"{"op":"login_poll","extra":1}"#, Request::LoginPoll),
            (
                r#"{"op":"register"}"#,
                Request::Register(Register::default()),
            ),
            (
                r#"{"op":"sign_proof","method":"GET","path":"/v1/enrollments/self"}"#,
                Request::SignProof(SignProof {
                    method: "GET".into(),
                    path: "/v1/enrollments/self".into(),
                    bh: None,
                }),
            ),
            (
                r#"{"op":"sign_request","secrets":["A"],"reason":"r","lifetime_seconds":60}"#,
                Request::SignRequest(SignRequest {
                    secrets: vec!["A".into()],
                    reason: "r".into(),
                    lifetime_seconds: Some(60),
                }),
            ),
        ];
        for (line, want) in lines {
            let got = Request::parse_line(line.as_bytes());
            assert_eq!(got.as_ref().ok(), Some(&want), "{line}");
            // And back.
            let again = serde_json::to_string(&want).unwrap_or_default();
            assert_eq!(
                Request::parse_line(again.as_bytes()).ok(),
                Some(want.clone())
            );
            assert!(OPS.contains(&want.op()));
        }
    }

    #[test]
    fn refuses_with_bad_request() {
        assert!(bad("not json").contains("not one JSON object"));
        assert!(bad("[1,2]").contains("not one JSON object"));
        assert!(bad(r#"{"opx":"status"}"#).contains("no `op`"));
        assert!(bad(r#"{"op":7}"#).contains("must be a string"));
        assert!(bad(r#"{"op":"launch_missiles"}"#).contains("unknown op"));
        assert!(bad(r#"{"op":"sign_request","secrets":["A"]}"#).contains("missing field `reason`"));
        let typed = bad(r#"{"op":"sign_request","secrets":"sekrit-value","reason":"r"}"#);
        assert!(!typed.contains("sekrit"), "{typed}");
        assert!(
            Request::parse_line(&[0xff, 0xfe])
                .err()
                .is_some_and(|e| e.error.contains("UTF-8"))
        );
    }

    #[test]
    fn answers_are_tagged() {
        let e = Response::Error(HelperError::new(HelperCode::NotASession, "no"));
        assert_eq!(
            serde_json::to_value(&e).unwrap_or_default(),
            json!({"result": "error", "code": "NOT_A_SESSION", "error": "no"})
        );
        let p = Response::Proof(SignedProof {
            proof: "p".into(),
            url: "u".into(),
            kid: "k".into(),
        });
        assert_eq!(
            serde_json::to_value(&p).unwrap_or_default(),
            json!({"result": "proof", "proof": "p", "url": "u", "kid": "k"})
        );
        let unknown: HelperError =
            serde_json::from_value(json!({"code": "NEW_THING", "error": "x"}))
                .unwrap_or_else(|_| HelperError::new(HelperCode::Sign, ""));
        assert_eq!(unknown.code, HelperCode::Other);
    }

    #[test]
    fn token_is_not_debug_printed() {
        let r = Request::TokenLogin(TokenLogin {
            service: "svc".into(),
            token_file: None,
            token: Some(Secret::new("eyJ.secret.token".into())),
        });
        assert!(!format!("{r:?}").contains("secret"));
    }
}
