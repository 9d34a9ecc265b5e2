//! Projects: list and create.

use axum::Extension;
use axum::extract::State;
use axum::response::Response;
use countersign_console_core::{Caller, ErrorCode};
use serde::Deserialize;

use super::{In, Input, St, acting, created, ok};
use crate::error::ApiResult;

/// `{key, name, actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateProject {
    key: String,
    name: String,
    actor: Option<String>,
}

impl Input for CreateProject {
    const CODE: ErrorCode = ErrorCode::INVALID_PROJECT;
}

pub async fn list(State(st): St) -> ApiResult<Response> {
    Ok(ok(st.console.projects().await?))
}

pub async fn create(
    State(st): St,
    Extension(caller): Extension<Caller>,
    In(b): In<CreateProject>,
) -> ApiResult<Response> {
    // The spec has a bearer name its session here.
    let actor = acting(&caller, b.actor.as_deref(), true)?;
    let p = st.console.create_project(&actor, &b.key, &b.name).await?;
    Ok(created(p, None))
}
