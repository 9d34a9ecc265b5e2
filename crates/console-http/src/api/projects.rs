//! Projects (list, create) and repository mappings (list, set, remove).

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use countersign_console_core::{Caller, ErrorCode};
use serde::Deserialize;

use super::{In, Input, Query, St, acting, created, ok};
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
    Ok(ok(st.console.issues().projects().await?))
}

pub async fn create(
    State(st): St,
    Extension(caller): Extension<Caller>,
    In(b): In<CreateProject>,
) -> ApiResult<Response> {
    // The spec has a bearer name its session here.
    let actor = acting(&caller, b.actor.as_deref(), true)?;
    let p = st
        .console
        .issues()
        .create_project(&actor, &b.key, &b.name)
        .await?;
    Ok(created(p, None))
}

/// `PUT /settings/repo-projects/{owner}/{repo}`: `{project, default?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PutMapping {
    project: String,
    #[serde(default)]
    default: bool,
}

impl Input for PutMapping {}

pub async fn mappings(State(st): St) -> ApiResult<Response> {
    Ok(ok(st.console.repo_mappings().await?))
}

pub async fn put_mapping(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path((owner, repo)): Path<(String, String)>,
    In(b): In<PutMapping>,
) -> ApiResult<Response> {
    let actor = acting(&caller, None, false)?;
    Ok(ok(st
        .console
        .put_repo_mapping(&actor, &owner, &repo, &b.project, b.default)
        .await?))
}

pub async fn delete_mapping(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
    Path((owner, repo)): Path<(String, String)>,
) -> ApiResult<Response> {
    let actor = acting(&caller, q.one("session")?, false)?;
    st.console
        .delete_repo_mapping(&actor, &owner, &repo)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
