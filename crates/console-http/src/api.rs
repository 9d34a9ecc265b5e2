//! The JSON routes: one handler each; the caller comes from the route's class ([`crate::auth`]).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Extension;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use countersign_console_core::{Caller, Error, ErrorCatalogue, ErrorCode};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::AppState;
use crate::error::ApiResult;

type St = State<Arc<AppState>>;

/// The largest JSON body a route reads.
pub const BODY_LIMIT: usize = 16 * 1024;

fn ok(v: impl serde::Serialize) -> Response {
    let mut r = (StatusCode::OK, axum::Json(v)).into_response();
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Reads a JSON body into the route's shape (an empty body is the default); a malformed one
/// is `code`, with a message giving the position, never a value.
async fn body_json<T: DeserializeOwned + Default>(body: Body, code: ErrorCode) -> ApiResult<T> {
    let bytes = axum::body::to_bytes(body, BODY_LIMIT)
        .await
        .map_err(|_| Error::new(ErrorCode::REQUEST_TOO_LARGE))?;
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&bytes).map_err(|e| {
        Error::with_message(
            code,
            format!(
                "{} (line {}, column {})",
                code.message(),
                e.line(),
                e.column()
            ),
        )
        .into()
    })
}

/// `?approver=me`, the only value these lists take.
fn approver_me(q: &HashMap<String, String>) -> ApiResult<()> {
    match q.get("approver").map(String::as_str) {
        Some("me") => Ok(()),
        _ => Err(Error::with_message(ErrorCode::INVALID_QUERY, "approver must be `me`").into()),
    }
}

pub async fn index() -> Response {
    ok(crate::table::describe())
}

pub async fn me(Extension(caller): Extension<Caller>) -> Response {
    ok(caller.identity())
}

pub async fn people(State(st): St, Extension(caller): Extension<Caller>) -> ApiResult<Response> {
    caller.human()?;
    Ok(ok(st.console.people().await?))
}

pub async fn health(State(st): St) -> ApiResult<Response> {
    st.console.health().await?;
    Ok(ok(json!({ "status": "ok" })))
}

// ----- personal tokens -----

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MintBody {
    #[serde(default)]
    name: Option<String>,
}

pub async fn list_tokens(
    State(st): St,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    Ok(ok(st.console.tokens(h).await?))
}

pub async fn mint_token(
    State(st): St,
    Extension(caller): Extension<Caller>,
    body: Body,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let b: MintBody = body_json(body, ErrorCode::TOKEN_INPUT).await?;
    let m = st.console.mint_token(h, b.name.as_deref()).await?;
    let mut v = serde_json::to_value(&m.info).unwrap_or(Value::Null);
    if let Some(o) = v.as_object_mut() {
        o.insert("token".into(), Value::String(m.token.to_string()));
    }
    let mut r = ok(v);
    *r.status_mut() = StatusCode::CREATED;
    Ok(r)
}

pub async fn revoke_token(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    st.console.revoke_token(h, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- the broker front -----

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DecisionBody {
    #[serde(default)]
    code: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct LookupBody {
    #[serde(default)]
    code: Option<String>,
}

pub async fn list_requests(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Query(q): Query<HashMap<String, String>>,
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
    body: Body,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let b: LookupBody = body_json(body, ErrorCode::INVALID_LOOKUP).await?;
    Ok(ok(st
        .console
        .lookup_machine_login(h, b.code.as_deref().unwrap_or(""))
        .await?))
}

pub async fn approve(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Body,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let b: DecisionBody = body_json(body, ErrorCode::INVALID_DECISION).await?;
    let a = st.console.approve(h, &id, b.code.as_deref()).await?;
    st.history.record(&h.login, &id, true, st.console.now());
    Ok(ok(a))
}

pub async fn deny(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    body: Body,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let b: DecisionBody = body_json(body, ErrorCode::INVALID_DECISION).await?;
    let state = st.console.deny(h, &id, b.code.as_deref()).await?;
    st.history.record(&h.login, &id, false, st.console.now());
    Ok(ok(json!({ "state": state })))
}

pub async fn list_grants(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Query(q): Query<HashMap<String, String>>,
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
    Ok(ok(json!({ "state": state })))
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
    Ok(ok(json!({ "state": state })))
}
