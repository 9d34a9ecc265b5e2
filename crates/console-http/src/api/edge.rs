//! What a handler takes already parsed: a path's typed id ([`PathId`]), refused with its
//! type's own refusal, and who acts by a body ([`Acts`]). The extractors keep the order of
//! refusals the handlers always had: a read checks its caller ([`Reading`]) before its id, and
//! a write reads its body (protocol §2), then who acts ([`acting`]), then its id.

use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use countersign_console_core::ids::{
    ArtifactId, AskId, BroadcastId, CommentId, MessageId, SessionGroupId, SessionId, TokenId,
};
use countersign_console_core::work::Actor;
use countersign_console_core::{Caller, Error};

use super::{In, Input, Query, Reading, acting, acting_session};
use crate::error::ApiError;

/// An id a path names, parsed by its type's rule: a malformed one is refused as the type's
/// `named` refuses it (NOT_FOUND "no such ask", …, or INVALID_SESSION_ID).
pub trait PathId: Sized + Send {
    fn named(s: &str) -> Result<Self, Error>;
}

macro_rules! path_ids {
    ($($t:ty),+) => {
        $(impl PathId for $t {
            fn named(s: &str) -> Result<Self, Error> {
                <$t>::named(s)
            }
        })+
    };
}

/// An issue's or a project's key, which the core reads (and refuses) itself: the text.
impl PathId for String {
    fn named(s: &str) -> Result<Self, Error> {
        Ok(s.to_owned())
    }
}

path_ids!(
    ArtifactId,
    AskId,
    BroadcastId,
    CommentId,
    MessageId,
    SessionGroupId,
    SessionId,
    TokenId
);

/// How a write's route takes who acts ([`acting`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who {
    /// The caller, or the session a bearer may name (`required` false).
    Caller,
    /// The route has a session name itself: a shared token or a service account names one.
    Named,
    /// Only a session acts ([`acting_session`]).
    Session,
}

/// A body that says who acts: the session it names in `actor` (none, unless it has one) and
/// how its route takes it. Each body serves one kind of route, so the rule is the body's.
pub trait Acts: Input {
    /// How the route takes who acts.
    const WHO: Who = Who::Caller;

    /// The session the body names in `actor`.
    fn actor(&self) -> Option<&str> {
        None
    }
}

/// `impl Acts` for bodies with an `actor` field: `acts_by_actor!(Who::Caller => A, B)`.
macro_rules! acts_by_actor {
    ($who:expr => $($t:ty),+) => {
        $(impl $crate::api::edge::Acts for $t {
            const WHO: $crate::api::edge::Who = $who;

            fn actor(&self) -> Option<&str> {
                self.actor.as_deref()
            }
        })+
    };
}
pub(crate) use acts_by_actor;

/// The caller the route layer put in the request.
fn caller(parts: &Parts) -> Result<Caller, ApiError> {
    parts
        .extensions
        .get::<Caller>()
        .cloned()
        .ok_or_else(|| Error::new(countersign_console_core::ErrorCode::INTERNAL).into())
}

/// The path's one segment, as text.
async fn segment<S: Send + Sync>(parts: &mut Parts, st: &S) -> Result<String, Response> {
    let Path(s) = Path::<String>::from_request_parts(parts, st)
        .await
        .map_err(IntoResponse::into_response)?;
    Ok(s)
}

fn refused(e: Error) -> Response {
    ApiError::from(e).into_response()
}

/// A read of the record a path's id names: the caller's check ([`Reading`]) first, then the
/// id.
#[derive(Debug)]
pub struct Read<T>(pub T);

impl<S: Send + Sync, T: PathId> FromRequestParts<S> for Read<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, st: &S) -> Result<Self, Response> {
        let raw = segment(parts, st).await?;
        Reading::from_request_parts(parts, st)
            .await
            .map_err(IntoResponse::into_response)?;
        T::named(&raw).map(Read).map_err(refused)
    }
}

/// A write without a body on the record a path's id names: who acts, the caller or the
/// session a bearer names in `?session=` ([`acting`], not required), then the id.
#[derive(Debug)]
pub struct On<T> {
    pub id: T,
    pub actor: Actor,
}

impl<S: Send + Sync, T: PathId> FromRequestParts<S> for On<T> {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, st: &S) -> Result<Self, Response> {
        let raw = segment(parts, st).await?;
        let session = Query::of(&parts.uri);
        let actor = caller(parts)
            .and_then(|c| acting(&c, session.one("session")?, false))
            .map_err(IntoResponse::into_response)?;
        let id = T::named(&raw).map_err(refused)?;
        Ok(On { id, actor })
    }
}

/// Who acts and the body that says so: the body's refusals first, then who acts.
#[derive(Debug)]
pub struct Acting<B> {
    pub actor: Actor,
    pub body: B,
}

impl<S: Send + Sync, B: Acts> FromRequest<S> for Acting<B> {
    type Rejection = ApiError;

    async fn from_request(req: Request, st: &S) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let caller = caller(&parts)?;
        let In(body) = In::<B>::from_request(Request::from_parts(parts, body), st).await?;
        let actor = match B::WHO {
            Who::Caller => acting(&caller, body.actor(), false),
            Who::Named => acting(&caller, body.actor(), true),
            Who::Session => acting_session(&caller, body.actor()),
        }?;
        Ok(Acting { actor, body })
    }
}

/// A write on the record a path's id names: the body, who acts ([`Acting`]), then the id.
#[derive(Debug)]
pub struct Write<T, B> {
    pub id: T,
    pub actor: Actor,
    pub body: B,
}

impl<S: Send + Sync, T: PathId, B: Acts> FromRequest<S> for Write<T, B> {
    type Rejection = Response;

    async fn from_request(req: Request, st: &S) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let raw = segment(&mut parts, st).await?;
        let Acting { actor, body } = Acting::from_request(Request::from_parts(parts, body), st)
            .await
            .map_err(IntoResponse::into_response)?;
        let id = T::named(&raw).map_err(refused)?;
        Ok(Write { id, actor, body })
    }
}
