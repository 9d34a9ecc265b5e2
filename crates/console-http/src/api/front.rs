//! The broker front: the console asks the broker, naming the signed-in person; the broker's
//! refusals pass through with its code and status.

use axum::Extension;
use axum::extract::{Path, State};
use axum::response::Response;
use countersign_console_core::{Caller, Error, ErrorCode};
use serde::{Deserialize, Serialize};

use super::{In, Input, Query, SMALL_LIMIT, St, ok};
use crate::error::ApiResult;

/// `?approver=me`, the only value these lists take.
fn approver_me(q: &Query) -> ApiResult<()> {
    match q.one("approver")? {
        Some("me") => Ok(()),
        _ => Err(Error::with_message(ErrorCode::INVALID_QUERY, "approver must be `me`").into()),
    }
}

/// A decision's or revocation's answer: the record's or grant's new state.
#[derive(Debug, Serialize)]
struct NewState {
    state: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecisionBody {
    #[serde(default)]
    code: Option<String>,
}

impl Input for DecisionBody {
    const CODE: ErrorCode = ErrorCode::INVALID_DECISION;
    const LIMIT: usize = SMALL_LIMIT;
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LookupBody {
    #[serde(default)]
    code: Option<String>,
}

impl Input for LookupBody {
    const CODE: ErrorCode = ErrorCode::INVALID_LOOKUP;
    const LIMIT: usize = SMALL_LIMIT;
}

pub async fn list_requests(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
) -> ApiResult<Response> {
    let h = caller.human()?;
    approver_me(&q)?;
    Ok(ok(st.console.inbox(h).await?))
}

pub async fn get_request(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    Ok(ok(st.console.record(h, &id).await?))
}

pub async fn machine_lookup(
    State(st): St,
    Extension(caller): Extension<Caller>,
    In(b): In<LookupBody>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    Ok(ok(st
        .console
        .lookup_machine_login(h, b.code.as_deref().unwrap_or(""))
        .await?))
}

pub async fn approve(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(b): In<DecisionBody>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let a = st.console.approve(h, &id, b.code.as_deref()).await?;
    Ok(ok(a))
}

pub async fn deny(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    In(b): In<DecisionBody>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let state = st.console.deny(h, &id, b.code.as_deref()).await?;
    Ok(ok(NewState { state }))
}

pub async fn list_grants(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
) -> ApiResult<Response> {
    let h = caller.human()?;
    approver_me(&q)?;
    Ok(ok(st.console.grants(h).await?))
}

pub async fn revoke_grant(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let state = st.console.revoke_grant(h, &id).await?;
    Ok(ok(NewState { state }))
}

pub async fn list_machines(
    State(st): St,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    Ok(ok(st.console.machine_logins(h).await?))
}

pub async fn revoke_machine(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let state = st.console.revoke_machine_login(h, &id).await?;
    Ok(ok(NewState { state }))
}
