//! Messages, broadcasts and conversation state (spec "Broadcasts and session messages",
//! "Message accept rules", "Inbox and read state"; protocol §6.4): read the request, call the
//! core, answer. Message, reply, accept and broadcast bodies are refused with MESSAGE_INPUT
//! (protocol §2).

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use countersign_console_core::console::NewBroadcast;
use countersign_console_core::ids::{BroadcastId, MessageId, SessionId};
use countersign_console_core::work::messages::{Mode, Target};
use countersign_console_core::{Caller, Error, ErrorCode};
use serde::Deserialize;

use super::edge::{On, Who, Write, acts_by_actor};
use super::{In, Input, Query, St, acting, acting_session, created, ok, query_err, with_status};
use crate::error::ApiResult;

/// `limit` (1 to 200, default 50) and `offset` of a list that grows without end.
pub(crate) fn page(q: &Query) -> ApiResult<(u32, u32)> {
    let limit = q.parsed::<u32>("limit")?.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(query_err("`limit` is 1 to 200"));
    }
    let offset = q.parsed::<u32>("offset")?.unwrap_or(0);
    Ok((limit, offset))
}

/// `POST /issues/{key}/messages`: `{body, target, delivery?, actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssueMessageBody {
    body: String,
    target: Target,
    delivery: Option<Mode>,
    actor: Option<String>,
}

impl Input for IssueMessageBody {
    const CODE: ErrorCode = ErrorCode::MESSAGE_INPUT;
}

/// `POST /sessions/{session_id}/messages`: `{body, delivery?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionMessageBody {
    body: String,
    delivery: Option<Mode>,
}

impl Input for SessionMessageBody {
    const CODE: ErrorCode = ErrorCode::MESSAGE_INPUT;
}

/// `POST /messages/{id}/deliveries`: `{actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryBody {
    actor: Option<String>,
}

impl Input for RetryBody {}
acts_by_actor!(Who::Caller => RetryBody);

/// `POST /messages/{id}/replies`: `{actor, body}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReplyBody {
    actor: Option<String>,
    body: String,
}

impl Input for ReplyBody {
    const CODE: ErrorCode = ErrorCode::MESSAGE_INPUT;
}

/// `POST /messages/{id}/deliveries/{attempt}/accept`: `{actor, as?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceptBody {
    actor: Option<String>,
    #[serde(rename = "as")]
    accepted_as: Option<Mode>,
}

impl Input for AcceptBody {
    const CODE: ErrorCode = ErrorCode::MESSAGE_INPUT;
}

/// `POST /broadcasts`: `{idempotency_key, sessions, mode, body}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BroadcastBody {
    idempotency_key: String,
    sessions: Vec<String>,
    mode: Mode,
    body: String,
}

impl Input for BroadcastBody {
    const CODE: ErrorCode = ErrorCode::MESSAGE_INPUT;
}

fn location_of_message(issue: Option<&str>, id: &MessageId) -> String {
    match issue {
        Some(k) => format!("/api/v1/issues/{k}/messages/{id}"),
        None => format!("/api/v1/messages/{id}/thread"),
    }
}

pub async fn post_issue_message(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
    In(b): In<IssueMessageBody>,
) -> ApiResult<Response> {
    let actor = acting(&caller, b.actor.as_deref(), false)?;
    let m = st
        .console
        .messages()
        .post_on_issue(&actor, &key, &b.body, b.target, b.delivery)
        .await?;
    let location = location_of_message(Some(&key), &m.id);
    Ok(created(m, Some(location)))
}

pub async fn get_issue_message(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
    Path((key, id)): Path<(String, String)>,
) -> ApiResult<Response> {
    acting(&caller, q.one("session")?, false)?;
    Ok(ok(st
        .console
        .messages()
        .on_issue(&key, MessageId::named(&id)?)
        .await?))
}

pub async fn post_session_message(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(session): Path<String>,
    In(b): In<SessionMessageBody>,
) -> ApiResult<Response> {
    let human = caller.human()?;
    let m = st
        .console
        .messages()
        .send_to_session(human, &SessionId::named(&session)?, &b.body, b.delivery)
        .await?;
    let location = location_of_message(None, &m.id);
    Ok(created(m, Some(location)))
}

pub async fn session_messages(
    State(st): St,
    q: Query,
    Path(session): Path<String>,
) -> ApiResult<Response> {
    let (limit, offset) = page(&q)?;
    Ok(ok(st
        .console
        .messages()
        .of_session(&SessionId::named(&session)?, limit, offset)
        .await?))
}

pub async fn thread(State(st): St, on: On<MessageId>) -> ApiResult<Response> {
    Ok(ok(st.console.messages().thread(&on.actor, on.id).await?))
}

pub async fn retry(State(st): St, w: Write<MessageId, RetryBody>) -> ApiResult<Response> {
    let attempts = st.console.messages().retry(&w.actor, w.id).await?;
    Ok(created(attempts, None))
}

pub async fn reply(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
    Path(id): Path<String>,
    In(b): In<ReplyBody>,
) -> ApiResult<Response> {
    let follow_up = match q.all("follow_up").as_slice() {
        [] | ["false"] => false,
        ["true"] => true,
        _ => {
            return Err(Error::with_message(
                ErrorCode::MESSAGE_INPUT,
                "`follow_up` is true or false",
            )
            .into());
        }
    };
    let actor = acting_session(&caller, b.actor.as_deref())?;
    let (m, is_new) = st
        .console
        .messages()
        .reply(&actor, MessageId::named(&id)?, &b.body, follow_up)
        .await?;
    if is_new {
        let location = location_of_message(m.issue.as_ref().map(|k| k.as_str()), &m.id);
        Ok(created(m, Some(location)))
    } else {
        Ok(ok(m))
    }
}

pub async fn accept(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path((id, attempt)): Path<(String, String)>,
    In(b): In<AcceptBody>,
) -> ApiResult<Response> {
    let actor = acting_session(&caller, b.actor.as_deref())?;
    Ok(ok(st
        .console
        .messages()
        .accept(&actor, MessageId::named(&id)?, &attempt, b.accepted_as)
        .await?))
}

pub async fn list_broadcasts(State(st): St, q: Query) -> ApiResult<Response> {
    let (limit, offset) = page(&q)?;
    Ok(ok(st
        .console
        .messages()
        .recent_broadcasts(limit, offset)
        .await?))
}

pub async fn send_broadcast(
    State(st): St,
    Extension(caller): Extension<Caller>,
    In(b): In<BroadcastBody>,
) -> ApiResult<Response> {
    let human = caller.human()?;
    let (sent, is_new) = st
        .console
        .messages()
        .broadcast(
            human,
            NewBroadcast {
                idempotency_key: b.idempotency_key,
                sessions: b.sessions,
                mode: b.mode,
                body: b.body,
            },
        )
        .await?;
    let location = format!("/api/v1/broadcasts/{}", sent.broadcast.id);
    if is_new {
        Ok(created(sent, Some(location)))
    } else {
        Ok(with_status(axum::http::StatusCode::OK, sent))
    }
}

pub async fn get_broadcast(State(st): St, Path(id): Path<String>) -> ApiResult<Response> {
    Ok(ok(st
        .console
        .messages()
        .broadcast_by_id(BroadcastId::named(&id)?)
        .await?))
}

// ----- the inbox's conversation parts -----

/// A time in a body: RFC 3339, any offset.
fn time_of(v: &str, field: &str) -> ApiResult<countersign_console_core::Time> {
    chrono::DateTime::parse_from_rfc3339(v)
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|_| {
            Error::with_message(
                ErrorCode::INVALID_BODY,
                format!("`{field}` is an RFC 3339 time"),
            )
            .into()
        })
}

/// `POST /inbox/threads/{id}/read`: `{read_through}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadMarkBody {
    read_through: String,
}

impl Input for ReadMarkBody {}

/// `PATCH /inbox/agents/{session_id}`: `{cleared_before?, read_through?, read_replies?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentStateBody {
    cleared_before: Option<String>,
    read_through: Option<String>,
    #[serde(default)]
    read_replies: Vec<String>,
}

impl Input for AgentStateBody {}

pub async fn inbox_threads(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
) -> ApiResult<Response> {
    let human = caller.human()?;
    let (limit, offset) = page(&q)?;
    Ok(ok(st
        .console
        .messages()
        .inbox_threads(human, q.one("issue")?, q.one("artifact")?, limit, offset)
        .await?))
}

pub async fn mark_thread_read(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(b): In<ReadMarkBody>,
) -> ApiResult<Response> {
    let human = caller.human()?;
    let at = time_of(&b.read_through, "read_through")?;
    st.console
        .messages()
        .mark_thread_read(human, &id, at)
        .await?;
    Ok(axum::http::StatusCode::NO_CONTENT.into_response())
}

pub async fn agent_states(
    State(st): St,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Response> {
    let human = caller.human()?;
    Ok(ok(st.console.messages().agent_states(human).await?))
}

pub async fn update_agent_state(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(session): Path<String>,
    In(b): In<AgentStateBody>,
) -> ApiResult<Response> {
    let human = caller.human()?;
    let patch = countersign_console_core::console::AgentPatch {
        cleared_before: b
            .cleared_before
            .as_deref()
            .map(|t| time_of(t, "cleared_before"))
            .transpose()?,
        read_through: b
            .read_through
            .as_deref()
            .map(|t| time_of(t, "read_through"))
            .transpose()?,
        read_replies: b.read_replies,
    };
    Ok(ok(st
        .console
        .messages()
        .update_agent_state(human, &SessionId::named(&session)?, patch)
        .await?))
}
