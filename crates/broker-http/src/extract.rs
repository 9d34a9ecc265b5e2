//! Reading a request: the body under the byte limit (REQUEST_TOO_LARGE), JSON into the route's
//! body shape (its INVALID_* code, with a message that never quotes a value; a repeated member at
//! any depth is refused), the `Proof` header, path ids and the `approver` query; and the
//! extractors that check a route's credential before its handler runs ([`Console`],
//! [`ConsoleApprover`], [`Proved`], and [`ProvedOn`] with the path's id after it), so that a
//! handler states only what is its own.

use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, FromRequestParts, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, Uri, header};
use countersign_broker_core::broker::ProofTarget;
use countersign_broker_core::ids::Login;
use countersign_broker_core::model::{Enrollment, Grant, LauncherCredential};
use countersign_broker_core::{Error, ErrorCode};
use countersign_proto::json::StrictError;
use serde::de::DeserializeOwned;

use crate::AppState;
use crate::error::ApiError;

/// The default body limit (protocol.md §6).
pub const DEFAULT_BODY_LIMIT: usize = 64 * 1024;

/// A request read whole: method, path, headers, body.
#[derive(Debug)]
pub struct Raw {
    pub method: Method,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Raw {
    pub async fn read(
        method: Method,
        uri: &Uri,
        headers: HeaderMap,
        body: Body,
        limit: usize,
        timeout: std::time::Duration,
    ) -> Result<Self, ApiError> {
        let too_large = || {
            ApiError::from(Error::with_message(
                ErrorCode::REQUEST_TOO_LARGE,
                format!("request body exceeds a byte limit of {limit}"),
            ))
        };
        if let Some(len) = headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<usize>().ok())
            && len > limit
        {
            return Err(too_large());
        }
        // The whole body within the read timeout: a body trickled or never finished holds a
        // connection (and its slot under the cap) no longer than that.
        let body = tokio::time::timeout(timeout, axum::body::to_bytes(body, limit))
            .await
            .map_err(|_| ApiError::body_timeout())?
            .map_err(|_| too_large())?;
        Ok(Self {
            method,
            path: uri.path().to_owned(),
            headers,
            body,
        })
    }

    /// The `Proof` header, if present and text.
    pub fn proof(&self) -> Option<&str> {
        self.headers.get("proof").and_then(|v| v.to_str().ok())
    }

    pub fn target(&self) -> ProofTarget<'_> {
        ProofTarget {
            method: self.method.as_str(),
            path: &self.path,
            body: &self.body,
        }
    }

    /// The body as the route's JSON shape; refusals use `code`.
    pub fn json<T: DeserializeOwned>(&self, code: ErrorCode) -> Result<T, ApiError> {
        parse_json(&self.body, code)
    }

    /// The body as JSON, or the default when there is no body.
    pub fn json_or_default<T: DeserializeOwned + Default>(
        &self,
        code: ErrorCode,
    ) -> Result<T, ApiError> {
        if self.body.iter().all(u8::is_ascii_whitespace) {
            Ok(T::default())
        } else {
            self.json(code)
        }
    }
}

/// Parses one JSON object into `T`, refusing with `code` and a message that names what is wrong
/// but never quotes the input.
/// An object (at any depth) that repeats a member name is refused: `serde_json` alone would keep
/// the last copy silently.
pub fn parse_json<T: DeserializeOwned>(body: &[u8], code: ErrorCode) -> Result<T, ApiError> {
    let value = countersign_proto::json::value_from_slice(body).map_err(|e| match e {
        StrictError::Json(e) => shape(code, &e),
        StrictError::DuplicateMember => Error::with_message(
            code,
            "body must be one valid JSON object: an object repeats a member name",
        )
        .into(),
    })?;
    if !value.is_object() {
        return Err(
            Error::with_message(code, "body must be one valid JSON object: not an object").into(),
        );
    }
    serde_json::from_value(value).map_err(|e| shape(code, &e))
}

fn shape(code: ErrorCode, e: &serde_json::Error) -> ApiError {
    let text = e.to_string();
    let detail = if text.starts_with("missing field")
        || text.starts_with("unknown field")
        || text.starts_with("duplicate field")
    {
        text.split(" at line")
            .next()
            .unwrap_or("invalid")
            .split(", expected")
            .next()
            .unwrap_or("invalid")
            .chars()
            .take(80)
            .collect::<String>()
    } else if e.is_syntax() || e.is_eof() {
        format!("not JSON (line {}, column {})", e.line(), e.column())
    } else {
        "a field has the wrong type or value".to_owned()
    };
    Error::with_message(
        code,
        format!("body must be one valid JSON object: {detail}"),
    )
    .into()
}

/// A path parameter that never rejects: a segment that does not decode (invalid UTF-8) reads
/// as empty, which the route's own check then refuses with the route's code (…_ID_INPUT,
/// NOT_FOUND, SECRET_NAME_INVALID), after the credential check and as `{"code","error"}`.
#[derive(Debug)]
pub struct PathParam(pub String);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for PathParam {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        state: &S,
    ) -> Result<Self, Self::Rejection> {
        Ok(Self(
            axum::extract::Path::<String>::from_request_parts(parts, state)
                .await
                .map(|axum::extract::Path(s)| s)
                .unwrap_or_default(),
        ))
    }
}

/// The console token check: SHA-256 of the presented bearer, compared in constant time.
pub fn console(st: &AppState, headers: &HeaderMap) -> Result<(), ApiError> {
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(crate::sha256);
    match (presented, st.console_token_hash) {
        (Some(p), Some(h)) if countersign_broker_core::broker::ct_eq(&p, &h) => Ok(()),
        _ => Err(ErrorCode::UI_INVALID.into()),
    }
}

/// A console-token route's caller: the token checked before anything else is read.
#[derive(Debug)]
pub struct Console;

impl FromRequestParts<Arc<AppState>> for Console {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &Arc<AppState>) -> Result<Self, ApiError> {
        console(st, &parts.headers).map(|()| Self)
    }
}

/// A console-token route's caller and the person it acts for, from the `approver` query: the
/// token first, then the approver. A query that does not parse (a repeated `approver`, say)
/// reads as none, which [`approver`] refuses with APPROVER_REQUIRED.
#[derive(Debug)]
pub struct ConsoleApprover(pub Login);

impl FromRequestParts<Arc<AppState>> for ConsoleApprover {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, st: &Arc<AppState>) -> Result<Self, ApiError> {
        console(st, &parts.headers)?;
        let q = Query::<crate::wire::ApproverQuery>::from_request_parts(parts, st)
            .await
            .ok()
            .and_then(|Query(q)| q.approver);
        approver(q.as_deref()).map(Self)
    }
}

/// A request read whole under the server's body limit and read timeout.
impl FromRequest<Arc<AppState>> for Raw {
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &Arc<AppState>) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        Self::read(
            parts.method,
            &parts.uri,
            parts.headers,
            body,
            st.body_limit,
            st.read_timeout,
        )
        .await
    }
}

/// What a request's `Proof` header proves: a machine credential or a session's enrollment.
pub trait Proven: Sized {
    fn authenticate(st: &AppState, r: &Raw) -> impl Future<Output = Result<Self, Error>> + Send;
}

impl Proven for LauncherCredential {
    fn authenticate(st: &AppState, r: &Raw) -> impl Future<Output = Result<Self, Error>> + Send {
        st.broker.authenticate_launcher(r.proof(), r.target())
    }
}

impl Proven for Enrollment {
    fn authenticate(st: &AppState, r: &Raw) -> impl Future<Output = Result<Self, Error>> + Send {
        st.broker.authenticate_session(r.proof(), r.target())
    }
}

/// A session's enrollment with its live grants, read with the enrollment the proof names
/// (`GET /v1/enrollments/self`: one read where the storage can).
impl Proven for (Enrollment, Vec<Grant>) {
    fn authenticate(st: &AppState, r: &Raw) -> impl Future<Output = Result<Self, Error>> + Send {
        st.broker
            .authenticate_session_with_grants(r.proof(), r.target())
    }
}

/// A request whose `Proof` was checked (the core's refusals, in the spec's order: the database,
/// then the proof), with the request for the body still to parse.
#[derive(Debug)]
pub struct Proved<T>(pub T, pub Raw);

impl<T: Proven> FromRequest<Arc<AppState>> for Proved<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &Arc<AppState>) -> Result<Self, ApiError> {
        let r = Raw::from_request(req, st).await?;
        Ok(Self(T::authenticate(st, &r).await?, r))
    }
}

/// An id a path names, parsed by its type's rule and refused with the route's code for it.
pub trait PathId: Sized {
    fn parse(s: &str) -> Result<Self, Error>;
}

macro_rules! path_ids {
    ($($t:ident),*) => {$(
        impl PathId for countersign_broker_core::ids::$t {
            fn parse(s: &str) -> Result<Self, Error> {
                Self::parse(s)
            }
        }
    )*};
}

path_ids!(CredentialId, EnrollmentId, GrantId, RecordId, RequestId);

/// A request under a credential on the record its path's id names: the credential checked
/// first ([`Proved`]), then the id ([`PathParam`]: a segment that does not decode reads as
/// empty, which the id refuses).
#[derive(Debug)]
pub struct ProvedOn<T, I> {
    /// What the credential proved: a machine credential or a session's enrollment.
    pub by: T,
    pub id: I,
}

impl<T: Proven, I: PathId> FromRequest<Arc<AppState>> for ProvedOn<T, I> {
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &Arc<AppState>) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let Ok(PathParam(id)) = PathParam::from_request_parts(&mut parts, st).await;
        let Proved(by, _) = Proved::<T>::from_request(Request::from_parts(parts, body), st).await?;
        Ok(Self {
            by,
            id: I::parse(&id)?,
        })
    }
}

/// A console-token request on the record its path's id names: the token first ([`Console`]),
/// then the body read whole, then the id; the body's shape is the handler's to parse.
#[derive(Debug)]
pub struct ConsoleOn<I> {
    pub id: I,
    pub raw: Raw,
}

impl<I: PathId> FromRequest<Arc<AppState>> for ConsoleOn<I> {
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &Arc<AppState>) -> Result<Self, ApiError> {
        let (mut parts, body) = req.into_parts();
        let Ok(PathParam(id)) = PathParam::from_request_parts(&mut parts, st).await;
        Console::from_request_parts(&mut parts, st).await?;
        let raw = Raw::from_request(Request::from_parts(parts, body), st).await?;
        Ok(Self {
            id: I::parse(&id)?,
            raw,
        })
    }
}

/// A console route's body that names the person it acts for.
pub trait Approving: DeserializeOwned {
    fn approver(&self) -> Option<&str>;
}

macro_rules! approving {
    ($($t:ty),*) => {$(
        impl Approving for $t {
            fn approver(&self) -> Option<&str> {
                self.approver.as_deref()
            }
        }
    )*};
}

approving!(
    crate::wire::DecisionBody,
    crate::wire::RevokeBody,
    crate::wire::PasskeyBody,
    crate::wire::PasskeyRenameBody
);

impl Raw {
    /// The body as a console route's shape (refused with `code`), and its approver (then
    /// APPROVER_REQUIRED).
    pub fn approving<T: Approving>(&self, code: ErrorCode) -> Result<(T, Login), ApiError> {
        let b: T = self.json(code)?;
        let who = approver(b.approver())?;
        Ok((b, who))
    }

    /// The approver of a console route whose body names nothing else.
    pub fn approver(&self, code: ErrorCode) -> Result<Login, ApiError> {
        self.approving::<crate::wire::RevokeBody>(code)
            .map(|(_, who)| who)
    }
}

/// The `approver` of a query or body: required, a login.
pub fn approver(value: Option<&str>) -> Result<Login, ApiError> {
    let v = value
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .ok_or(ErrorCode::APPROVER_REQUIRED)?;
    Login::parse(v).ok_or_else(|| {
        Error::with_message(
            ErrorCode::APPROVER_REQUIRED,
            "approver is required: a console login (e-mail form)",
        )
        .into()
    })
}
