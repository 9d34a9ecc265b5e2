//! The meta routes: the route table, who is calling, the people, health.

use axum::Extension;
use axum::response::Response;
use countersign_console_core::Caller;
use serde::Serialize;

use super::{St, ok};
use crate::error::ApiResult;

pub async fn index() -> Response {
    ok(crate::table::describe())
}

pub async fn me(Extension(caller): Extension<Caller>) -> Response {
    ok(caller.identity())
}

pub async fn people(State(st): St) -> ApiResult<Response> {
    Ok(ok(st.console.people().await?))
}

#[derive(Debug, Serialize)]
struct Health {
    status: &'static str,
}

pub async fn health(State(st): St) -> ApiResult<Response> {
    st.console.health().await?;
    Ok(ok(Health { status: "ok" }))
}

use axum::extract::State;
