//! The asks routes (protocol §6.3): open on an issue, read, list in a scope or on an issue,
//! reword, answer, close, recipients, followers; and the inbox (§6.4): whose turn, snooze,
//! the caller's answers.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use countersign_console_core::console::asks::{
    AnswerIn, ApprovalIn, AskPatch, AskSuggestion, CloseIn, NewAsk, ReviewIn,
};
use countersign_console_core::ids::{ArtifactId, AskId, SessionId};
use countersign_console_core::work::asks::{AskState, AskView};
use countersign_console_core::{Caller, Error, ErrorCode};
use serde::{Deserialize, Serialize};

use super::edge::{Acts, Read, Who, Write, acts_by_actor};
use super::{In, Input, Query, Reading, St, acting_session, created, ok, query_err};
use crate::error::ApiResult;

impl Input for NewAsk {}
impl Input for AskPatch {}
impl Input for AnswerIn {}
impl Input for CloseIn {}
impl Acts for AnswerIn {}
acts_by_actor!(Who::Caller => NewAsk, CloseIn, ApprovalIn);
acts_by_actor!(Who::Named => AskPatch);

/// `advice` on a new ask: answered asks that may settle it.
#[derive(Debug, Serialize)]
struct Advice {
    suggestions: Vec<AskSuggestion>,
}

/// The open answer: the ask and `advice`.
#[derive(Debug, Serialize)]
struct OpenedAsk {
    #[serde(flatten)]
    ask: AskView,
    advice: Advice,
}

/// 201 with the ask, its `Location`, and advice read after the write committed (it never
/// slows or blocks the write).
pub(crate) async fn opened(st: &crate::AppState, ask: AskView) -> Response {
    let location = format!("/api/v1/asks/{}", ask.head.id);
    let suggestions = st.console.asks().ask_advice(&ask).await;
    created(
        OpenedAsk {
            ask,
            advice: Advice { suggestions },
        },
        Some(location),
    )
}

pub async fn issue_open(State(st): St, w: Write<String, NewAsk>) -> ApiResult<Response> {
    let asks = st.console.asks();
    let ask = asks.open_issue_ask(&w.actor, &w.id, w.body).await?;
    Ok(opened(&st, ask).await)
}

/// The `ask.answered` link message (outside protocol §4.2's table: v1 grows by link
/// messages).
#[derive(Serialize)]
struct AnsweredFrame<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    ask: &'a AskView,
}

/// After an answer committed: the ask, answered, to each of its recipients (author's session,
/// followers, subscribers) whose link is open to this replica. Fire and forget: the answer
/// is in the ask and on the event stream for any session that misses it.
pub(crate) async fn tell_answered(st: &crate::AppState, ask: &AskView) {
    let recipients = match st.console.asks().recipients(ask.head.id).await {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(code = e.code_str(), "an answer's recipients not read");
            return;
        }
    };
    let frame = serde_json::to_string(&AnsweredFrame {
        kind: "ask.answered",
        ask,
    })
    .unwrap_or_default();
    for r in recipients {
        if st.sessions.send_frame(&r.session_id, frame.clone()) {
            tracing::debug!(session = %r.session_id, ask = %ask.head.id, "answer sent on the link");
        }
    }
}

/// `?state=` (repeatable).
pub(crate) fn states(q: &Query) -> ApiResult<Vec<AskState>> {
    q.all("state")
        .into_iter()
        .map(|s| {
            AskState::parse(s)
                .ok_or_else(|| query_err("`state` is open, answered, retracted or resolved"))
        })
        .collect()
}

pub async fn issue_list(State(st): St, q: Query, Read(key): Read<String>) -> ApiResult<Response> {
    Ok(ok(st.console.asks().issue_asks(&key, states(&q)?).await?))
}

pub async fn scope(State(st): St, q: Query, _: Reading) -> ApiResult<Response> {
    Ok(ok(st
        .console
        .asks()
        .scope_asks(q.one("author_session")?, q.one("project")?)
        .await?))
}

pub async fn read(State(st): St, Read(id): Read<AskId>) -> ApiResult<Response> {
    Ok(ok(st.console.asks().ask(id).await?))
}

pub async fn reword(State(st): St, w: Write<AskId, AskPatch>) -> ApiResult<Response> {
    let asks = st.console.asks();
    Ok(ok(asks.reword_ask(&w.actor, w.id, w.body).await?))
}

pub async fn answer(State(st): St, w: Write<AskId, AnswerIn>) -> ApiResult<Response> {
    let ask = st.console.asks().answer_ask(&w.actor, w.id, w.body).await?;
    tell_answered(&st, &ask).await;
    Ok(ok(ask))
}

pub async fn close(State(st): St, w: Write<AskId, CloseIn>) -> ApiResult<Response> {
    let asks = st.console.asks();
    Ok(ok(asks.close_ask(&w.actor, w.id, w.body).await?))
}

pub async fn recipients(State(st): St, Read(id): Read<AskId>) -> ApiResult<Response> {
    Ok(ok(st.console.asks().recipients(id).await?))
}

async fn set_follow(
    st: &crate::AppState,
    caller: &Caller,
    q: &Query,
    id: &str,
    session: &str,
    follow: bool,
) -> ApiResult<Response> {
    let session = SessionId::named(session)?;
    let actor = acting_session(caller, q.one("session")?)?;
    st.console
        .asks()
        .follow_ask(&actor, AskId::named(id)?, &session, follow)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn follow(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
    Path((id, session)): Path<(String, String)>,
) -> ApiResult<Response> {
    set_follow(&st, &caller, &q, &id, &session, true).await
}

pub async fn unfollow(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
    Path((id, session)): Path<(String, String)>,
) -> ApiResult<Response> {
    set_follow(&st, &caller, &q, &id, &session, false).await
}

// ----- the inbox -----

pub async fn inbox(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let inbox = st
        .console
        .asks()
        .inbox_asks(h, q.one("project")?, q.one("assignee")?)
        .await?;
    // The answer's JSON is made once per answer read (a person's inbox may be large).
    Ok((
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, "no-store"),
        ],
        axum::body::Bytes::from_owner(inbox.json()),
    )
        .into_response())
}

pub async fn answers(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let limit: u32 = q.parsed("limit")?.unwrap_or(50);
    if !(1..=200).contains(&limit) {
        return Err(query_err("`limit` is 1 to 200"));
    }
    let offset: u32 = q.parsed("offset")?.unwrap_or(0);
    Ok(ok(st.console.asks().my_answers(h, limit, offset).await?))
}

/// `{snoozed_until}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SnoozeBody {
    snoozed_until: String,
}

impl Input for SnoozeBody {}

pub async fn snooze(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(b): In<SnoozeBody>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let until = chrono::DateTime::parse_from_rfc3339(&b.snoozed_until)
        .map_err(|_| {
            Error::with_message(ErrorCode::INVALID_BODY, "snoozed_until is an RFC 3339 time")
        })?
        .with_timezone(&chrono::Utc);
    Ok(ok(st
        .console
        .asks()
        .snooze(h, AskId::named(&id)?, until)
        .await?))
}

pub async fn unsnooze(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    st.console.asks().unsnooze(h, AskId::named(&id)?).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- documents: asks, approval requests, reviews -----

impl Input for ApprovalIn {}
impl Input for ReviewIn {}
impl Acts for ReviewIn {}

pub async fn document_open(State(st): St, w: Write<ArtifactId, NewAsk>) -> ApiResult<Response> {
    let asks = st.console.asks();
    let ask = asks.open_document_ask(&w.actor, w.id, w.body).await?;
    Ok(opened(&st, ask).await)
}

pub async fn document_list(
    State(st): St,
    q: Query,
    Path(id): Path<String>,
    _: Reading,
) -> ApiResult<Response> {
    let states = states(&q)?;
    Ok(ok(st
        .console
        .asks()
        .document_asks(ArtifactId::named(&id)?, states)
        .await?))
}

/// `POST /artifacts/{id}/approval-requests`: 201 with a new approval ask, or 200 with the open
/// one handed back to a person.
pub async fn request_approval(
    State(st): St,
    w: Write<ArtifactId, ApprovalIn>,
) -> ApiResult<Response> {
    let asks = st.console.asks();
    let r = asks.request_approval(&w.actor, w.id, w.body).await?;
    if r.created {
        let location = format!("/api/v1/asks/{}", r.ask.head.id);
        Ok(created(r.ask, Some(location)))
    } else {
        Ok(ok(r.ask))
    }
}

pub async fn review(State(st): St, w: Write<ArtifactId, ReviewIn>) -> ApiResult<Response> {
    let (review, answered) = st.console.asks().review(&w.actor, w.id, w.body).await?;
    if let Some(ask) = &answered {
        tell_answered(&st, ask).await;
    }
    Ok(created(review, None))
}

pub async fn reviews(State(st): St, Read(id): Read<ArtifactId>) -> ApiResult<Response> {
    Ok(ok(st.console.asks().reviews(id).await?))
}
