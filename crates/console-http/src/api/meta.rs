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

/// `GET /api/v1/search`: `q`, `project`, `limit` (1-50, default 20), `offset`.
pub async fn search(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: super::Query,
) -> ApiResult<Response> {
    let text = q
        .one("q")?
        .ok_or_else(|| super::query_err("`q` names what to search for"))?;
    let limit: u32 = q.parsed("limit")?.unwrap_or(20);
    if !(1..=50).contains(&limit) {
        return Err(super::query_err("`limit` is 1 to 50"));
    }
    let offset: u32 = q.parsed("offset")?.unwrap_or(0);
    let project = q.one("project")?;
    let found = if caller.human().is_ok() {
        st.console
            .search_as_person(text, project, limit, offset)
            .await?
    } else {
        st.console.search(text, project, limit, offset).await?
    };
    Ok(ok(found))
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
