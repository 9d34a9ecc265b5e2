//! The comments routes (protocol §6.3): comment on an issue (or an ask, or a document quote),
//! list, read with the thread, edit, resolve and reopen, suggestions, mention deliveries and
//! the mentioned session's reply.

use axum::extract::State;
use axum::response::Response;
use countersign_console_core::console::asks::NewComment;
use countersign_console_core::ids::{ArtifactId, CommentId};
use countersign_console_core::work::asks::CommentView;
use serde::Deserialize;

use super::edge::{Acts, Read, Who, Write, acts_by_actor};
use super::{Input, Query, St, created, ok};
use crate::error::ApiResult;

impl Input for NewComment {}

pub async fn issue_create(State(st): St, w: Write<String, NewComment>) -> ApiResult<Response> {
    let asks = st.console.asks();
    let c = asks.comment_on_issue(&w.actor, &w.id, w.body).await?;
    Ok(comment_created(c))
}

pub async fn issue_list(State(st): St, q: Query, Read(key): Read<String>) -> ApiResult<Response> {
    let artifact = q.one("artifact")?;
    Ok(ok(st.console.asks().issue_comments(&key, artifact).await?))
}

pub async fn read(State(st): St, Read(id): Read<CommentId>) -> ApiResult<Response> {
    Ok(ok(st.console.asks().comment(id).await?))
}

/// `{body}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EditBody {
    body: String,
}

impl Input for EditBody {}
impl Acts for EditBody {}

pub async fn edit(State(st): St, w: Write<CommentId, EditBody>) -> ApiResult<Response> {
    let asks = st.console.asks();
    let edit = asks.edit_comment(&w.actor, w.id, &w.body.body).await?;
    Ok(ok(edit))
}

/// `{actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorBody {
    actor: Option<String>,
}

impl Input for ActorBody {}

pub async fn resolve(State(st): St, w: Write<CommentId, ActorBody>) -> ApiResult<Response> {
    let asks = st.console.asks();
    let resolve = asks.resolve_thread(&w.actor, w.id, true).await?;
    Ok(ok(resolve))
}

/// An empty body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

impl Input for Empty {}
impl Acts for Empty {}

pub async fn reopen(State(st): St, w: Write<CommentId, Empty>) -> ApiResult<Response> {
    let asks = st.console.asks();
    let reopen = asks.resolve_thread(&w.actor, w.id, false).await?;
    Ok(ok(reopen))
}

pub async fn reject(State(st): St, w: Write<CommentId, Empty>) -> ApiResult<Response> {
    let asks = st.console.asks();
    Ok(ok(asks.reject_suggestion(&w.actor, w.id).await?))
}

/// `{actor, body}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplyBody {
    actor: Option<String>,
    body: String,
}

impl Input for ReplyBody {}

pub async fn reply(State(st): St, w: Write<CommentId, ReplyBody>) -> ApiResult<Response> {
    let asks = st.console.asks();
    let reply = asks.comment_reply(&w.actor, w.id, &w.body.body).await?;
    Ok(comment_created(reply))
}

/// `{target?, actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryBody {
    target: Option<String>,
    actor: Option<String>,
}

impl Input for RetryBody {}

acts_by_actor!(Who::Caller => NewComment, ActorBody, RetryBody);
acts_by_actor!(Who::Session => ReplyBody);

/// `POST /comments/{id}/deliveries`: 201 with the new attempt(s) (one: a mention retry names
/// one session), as a message retry answers.
pub async fn retry(State(st): St, w: Write<CommentId, RetryBody>) -> ApiResult<Response> {
    let target = w.body.target.as_deref();
    let asks = st.console.asks();
    let attempt = asks.retry_mention(&w.actor, w.id, target).await?;
    Ok(created(vec![attempt], None))
}

pub async fn document_create(
    State(st): St,
    w: Write<ArtifactId, NewComment>,
) -> ApiResult<Response> {
    let asks = st.console.asks();
    let c = asks.comment_on_document(&w.actor, w.id, w.body).await?;
    Ok(comment_created(c))
}

pub async fn document_list(State(st): St, Read(id): Read<ArtifactId>) -> ApiResult<Response> {
    Ok(ok(st.console.asks().document_comments(id).await?))
}

pub async fn accept(State(st): St, w: Write<CommentId, Empty>) -> ApiResult<Response> {
    let asks = st.console.asks();
    Ok(ok(asks.accept_suggestion(&w.actor, w.id).await?))
}

/// 201 with a new comment (or reply) and where it is read.
fn comment_created(c: CommentView) -> Response {
    let location = format!("/api/v1/comments/{}", c.comment.id);
    created(c, Some(location))
}
