//! The JSON routes, one module per area, and what every handler shares: the answer helpers,
//! the JSON body reader (protocol §2: size, media type, unknown fields), the query reader
//! (repeatable filters), and naming the session a bearer acts for (protocol §4.1).

pub mod asks;
pub mod comments;
pub mod delivery;
pub mod documents;
pub mod edge;
pub mod events;
pub mod front;
pub mod issues;
pub mod messages;
pub mod meta;
pub mod projects;
pub mod tokens;

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use countersign_console_core::ids::SessionId;
use countersign_console_core::work::{Actor, EventPage};
use countersign_console_core::{Caller, Error, ErrorCode};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::AppState;
use crate::error::{ApiError, ApiResult};

pub(crate) type St = State<Arc<AppState>>;

/// The largest JSON body (protocol §2); personal-token and broker-front bodies are smaller.
pub const JSON_LIMIT: usize = 1024 * 1024;
/// Personal-token and broker-front bodies.
pub const SMALL_LIMIT: usize = 16 * 1024;

/// 200 with a JSON answer, not stored by caches.
pub fn ok(v: impl Serialize) -> Response {
    with_status(StatusCode::OK, v)
}

/// A JSON answer with `status`.
pub fn with_status(status: StatusCode, v: impl Serialize) -> Response {
    let mut r = (status, axum::Json(v)).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// 201 with the new record and, when it has a read route, its `Location`.
pub fn created(v: impl Serialize, location: Option<String>) -> Response {
    let mut r = with_status(StatusCode::CREATED, v);
    if let Some(l) = location.and_then(|l| HeaderValue::from_str(&l).ok()) {
        r.headers_mut().insert(header::LOCATION, l);
    }
    r
}

/// What a JSON body is read as: its shape refuses unknown fields (`deny_unknown_fields`), and
/// a malformed, mistyped or unknown-field body is refused with `CODE`.
pub trait Input: DeserializeOwned {
    /// The route's input code (protocol §2, "Unknown JSON fields").
    const CODE: ErrorCode = ErrorCode::INVALID_BODY;
    /// The body's byte limit.
    const LIMIT: usize = JSON_LIMIT;
}

/// A JSON body read by the rules of protocol §2: over the limit 413, another media type 415,
/// an empty body is `{}`, and anything malformed the route's input code.
#[derive(Debug)]
pub struct In<T>(pub T);

impl<S: Send + Sync, T: Input> FromRequest<S> for In<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _: &S) -> Result<Self, ApiError> {
        let is_json = req
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| {
                v.split(';')
                    .next()
                    .unwrap_or("")
                    .trim()
                    .eq_ignore_ascii_case("application/json")
            });
        let bytes = axum::body::to_bytes(req.into_body(), T::LIMIT)
            .await
            .map_err(|_| Error::new(ErrorCode::REQUEST_TOO_LARGE))?;
        let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            if is_json != Some(true) {
                return Err(ErrorCode::UNSUPPORTED_MEDIA_TYPE.into());
            }
            &bytes
        };
        serde_json::from_slice(text).map(In).map_err(|e| {
            Error::with_message(T::CODE, format!("{} ({e})", T::CODE.message())).into()
        })
    }
}

/// The raw body, for routes that read it themselves (kept for the size limit).
pub async fn small_body(body: Body) -> ApiResult<axum::body::Bytes> {
    axum::body::to_bytes(body, SMALL_LIMIT)
        .await
        .map_err(|_| Error::new(ErrorCode::REQUEST_TOO_LARGE).into())
}

/// A request's query as pairs, percent-decoded; the route layer has already refused names the
/// route does not take.
#[derive(Debug, Default)]
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn of(uri: &axum::http::Uri) -> Self {
        Self(
            url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes())
                .into_owned()
                .collect(),
        )
    }

    /// A parameter given at most once.
    pub fn one(&self, name: &str) -> ApiResult<Option<&str>> {
        let mut it = self.0.iter().filter(|(k, _)| k == name);
        let first = it.next().map(|(_, v)| v.as_str());
        if it.next().is_some() {
            return Err(query_err(format!("`{name}` is given once")));
        }
        Ok(first)
    }

    /// A repeatable parameter's values.
    pub fn all(&self, name: &str) -> Vec<&str> {
        self.0
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    }

    /// A parameter given at most once, parsed.
    pub fn parsed<T: std::str::FromStr>(&self, name: &str) -> ApiResult<Option<T>> {
        self.one(name)?
            .map(|v| {
                v.parse()
                    .map_err(|_| query_err(format!("`{name}` does not parse")))
            })
            .transpose()
    }

    /// A boolean: `true` or `false`.
    pub fn flag(&self, name: &str) -> ApiResult<Option<bool>> {
        match self.one(name)? {
            None => Ok(None),
            Some("true") => Ok(Some(true)),
            Some("false") => Ok(Some(false)),
            Some(_) => Err(query_err(format!("`{name}` is true or false"))),
        }
    }
}

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Query {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, ApiError> {
        Ok(Query::of(&parts.uri))
    }
}

/// A read route's check of its caller, run before its handler: the `?session=` it names, if
/// any, is a session the caller may act as ([`acting`], not required). The read routes take
/// it (or [`edge::Read`], which runs it) instead of each calling `acting` itself.
#[derive(Debug)]
pub struct Reading;

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Reading {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _: &S,
    ) -> Result<Self, ApiError> {
        let caller = parts
            .extensions
            .get::<Caller>()
            .ok_or_else(|| ApiError::from(Error::new(ErrorCode::INTERNAL)))?;
        acting(caller, Query::of(&parts.uri).one("session")?, false)?;
        Ok(Reading)
    }
}

/// An event page's query (protocol §7): `after`, `before`, `ids`, `order`, `limit`.
pub(crate) fn event_page(q: &Query) -> ApiResult<EventPage> {
    let mut ids = Vec::new();
    for i in q.all("ids") {
        ids.push(i.parse().map_err(|_| query_err("`ids` are event ids"))?);
    }
    let limit: u32 = q.parsed("limit")?.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(query_err("`limit` is 1 to 200"));
    }
    Ok(EventPage {
        after: q.parsed("after")?,
        before: q.parsed("before")?,
        ids,
        descending: match q.one("order")? {
            None | Some("asc") => false,
            Some("desc") => true,
            Some(_) => return Err(query_err("`order` is asc or desc")),
        },
        limit,
    })
}

pub fn query_err(message: impl Into<String>) -> ApiError {
    Error::with_message(ErrorCode::INVALID_QUERY, message).into()
}

/// Who acts: the caller, and for a bearer the session it names (in the body's `actor` or
/// `?session=`). A browser names none: for it those are unknown fields. A person's own
/// personal token naming no session acts as that person (issue 27: history credits the
/// person; naming a session acts as that session of theirs). `required`: the route has a
/// session name itself, so the shared token and a service account must name one
/// (INVALID_SESSION_ID when they do not).
pub fn acting(caller: &Caller, session: Option<&str>, required: bool) -> ApiResult<Actor> {
    if let (
        Caller::Agent {
            owner: Some(login),
            service: None,
        },
        None,
    ) = (caller, session)
    {
        return Ok(Actor::User {
            login: login.clone(),
        });
    }
    acting_inner(caller, session, required)
}

/// Who acts where only a session can: the session link, a session's replies and accepts,
/// following as a session. Every bearer names its session (INVALID_SESSION_ID otherwise).
pub fn acting_session(caller: &Caller, session: Option<&str>) -> ApiResult<Actor> {
    acting_inner(caller, session, true)
}

fn acting_inner(caller: &Caller, session: Option<&str>, required: bool) -> ApiResult<Actor> {
    match caller {
        Caller::Human(h) => match session {
            Some(_) => Err(Error::with_message(
                ErrorCode::INVALID_BODY,
                "a person acts as themself: `actor` and `?session=` are for agents",
            )
            .into()),
            None => Ok(Actor::User {
                login: h.login.clone(),
            }),
        },
        Caller::Agent { owner, service } => {
            let session = match session {
                Some(s) => Some(SessionId::named(s)?),
                None if required => {
                    return Err(Error::with_message(
                        ErrorCode::INVALID_SESSION_ID,
                        "name the session you act for: `actor` in the body, or `?session=`",
                    )
                    .into());
                }
                None => None,
            };
            Ok(Actor::Agent {
                owner: owner.clone(),
                service: service.clone(),
                session,
            })
        }
    }
}
