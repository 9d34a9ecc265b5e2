//! The comments routes (protocol §6.3): comment on an issue (or an ask, or a document quote),
//! list, read with the thread, edit, resolve and reopen, suggestions, mention deliveries and
//! the mentioned session's reply.

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::Response;
use countersign_console_core::Caller;
use countersign_console_core::console::asks::NewComment;
use countersign_console_core::ids::{ArtifactId, CommentId};
use countersign_console_core::work::asks::CommentView;
use serde::Deserialize;

use super::{In, Input, Query, Reading, St, acting, acting_session, created, ok};
use crate::error::ApiResult;

impl Input for NewComment {}

pub async fn issue_create(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
    In(b): In<NewComment>,
) -> ApiResult<Response> {
    let actor = acting(&caller, b.actor.as_deref(), false)?;
    let c = st.console.asks().comment_on_issue(&actor, &key, b).await?;
    Ok(comment_created(c))
}

pub async fn issue_list(
    State(st): St,
    q: Query,
    Path(key): Path<String>,
    _: Reading,
) -> ApiResult<Response> {
    Ok(ok(st
        .console
        .asks()
        .issue_comments(&key, q.one("artifact")?)
        .await?))
}

pub async fn read(State(st): St, Path(id): Path<String>, _: Reading) -> ApiResult<Response> {
    Ok(ok(st
        .console
        .asks()
        .comment(CommentId::named(&id)?)
        .await?))
}

/// `{body}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditBody {
    body: String,
}

impl Input for EditBody {}

pub async fn edit(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(b): In<EditBody>,
) -> ApiResult<Response> {
    let actor = acting(&caller, None, false)?;
    Ok(ok(st
        .console
        .asks()
        .edit_comment(&actor, CommentId::named(&id)?, &b.body)
        .await?))
}

/// `{actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorBody {
    actor: Option<String>,
}

impl Input for ActorBody {}

pub async fn resolve(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(b): In<ActorBody>,
) -> ApiResult<Response> {
    let actor = acting(&caller, b.actor.as_deref(), false)?;
    Ok(ok(st
        .console
        .asks()
        .resolve_thread(&actor, CommentId::named(&id)?, true)
        .await?))
}

/// An empty body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

impl Input for Empty {}

pub async fn reopen(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(_): In<Empty>,
) -> ApiResult<Response> {
    let actor = acting(&caller, None, false)?;
    Ok(ok(st
        .console
        .asks()
        .resolve_thread(&actor, CommentId::named(&id)?, false)
        .await?))
}

pub async fn reject(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(_): In<Empty>,
) -> ApiResult<Response> {
    let actor = acting(&caller, None, false)?;
    Ok(ok(st
        .console
        .asks()
        .reject_suggestion(&actor, CommentId::named(&id)?)
        .await?))
}

/// `{actor, body}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplyBody {
    actor: Option<String>,
    body: String,
}

impl Input for ReplyBody {}

pub async fn reply(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(b): In<ReplyBody>,
) -> ApiResult<Response> {
    let actor = acting_session(&caller, b.actor.as_deref())?;
    let c = st
        .console
        .asks()
        .comment_reply(&actor, CommentId::named(&id)?, &b.body)
        .await?;
    Ok(comment_created(c))
}

/// `{target?, actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryBody {
    target: Option<String>,
    actor: Option<String>,
}

impl Input for RetryBody {}

/// `POST /comments/{id}/deliveries`: 201 with the new attempt(s) (one: a mention retry names
/// one session), as a message retry answers.
pub async fn retry(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(b): In<RetryBody>,
) -> ApiResult<Response> {
    let actor = acting(&caller, b.actor.as_deref(), false)?;
    let attempt = st
        .console
        .asks()
        .retry_mention(&actor, CommentId::named(&id)?, b.target.as_deref())
        .await?;
    Ok(created(vec![attempt], None))
}

pub async fn document_create(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(b): In<NewComment>,
) -> ApiResult<Response> {
    let actor = acting(&caller, b.actor.as_deref(), false)?;
    let c = st
        .console
        .asks()
        .comment_on_document(&actor, ArtifactId::named(&id)?, b)
        .await?;
    Ok(comment_created(c))
}

pub async fn document_list(
    State(st): St,
    Path(id): Path<String>,
    _: Reading,
) -> ApiResult<Response> {
    Ok(ok(st
        .console
        .asks()
        .document_comments(ArtifactId::named(&id)?)
        .await?))
}

pub async fn accept(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(_): In<Empty>,
) -> ApiResult<Response> {
    let actor = acting(&caller, None, false)?;
    Ok(ok(st
        .console
        .asks()
        .accept_suggestion(&actor, CommentId::named(&id)?)
        .await?))
}

/// 201 with a new comment (or reply) and where it is read.
fn comment_created(c: CommentView) -> Response {
    let location = format!("/api/v1/comments/{}", c.comment.id);
    created(c, Some(location))
}
