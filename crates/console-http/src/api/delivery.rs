//! The delivery and architecture routes (protocol §1.3, §6.5, §9): delivery settings, the
//! timeline, measures, pipeline page and one run; session groups; architecture sources and the
//! component tree. A PUT of settings or a source starts a sync without waiting for it; the
//! [`background`] task syncs delivery data every 5 minutes and architecture sources hourly.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use countersign_console_core::console::{NewSessionGroup, SessionGroupPatch};
use countersign_console_core::ids::SessionGroupId;
use countersign_console_core::work::delivery::DeliverySettings;
use countersign_console_core::work::delivery::compute::{FACETS, Filters, NO_PRIORITY, Window};
use countersign_console_core::{Caller, Error, ErrorCode};
use serde::Deserialize;

use super::edge::{Acting, On, Read, Who, Write, acts_by_actor};
use super::{In, Input, Query, St, acting, created, ok, query_err};
use crate::AppState;
use crate::error::ApiResult;

/// Delivery data syncs this often.
pub const DELIVERY_EVERY: Duration = Duration::from_secs(5 * 60);
/// Architecture sources import this often.
pub const ARCHITECTURE_EVERY: Duration = Duration::from_secs(60 * 60);

/// The periodic syncs (started by the server beside its housekeeping).
pub async fn background(st: Arc<AppState>) {
    let mut delivery = st.loops.delivery_sync.ticks();
    let mut architecture = st.loops.architecture_sync.ticks();
    loop {
        tokio::select! {
            _pass = delivery.next() => {
                if let Err(e) = st.console.delivery().sync().await {
                    tracing::warn!(code = e.code_str(), error = %e.message, "delivery sync failed");
                }
            }
            _pass = architecture.next() => {
                if let Err(e) = st.console.delivery().sync_architecture_all().await {
                    tracing::warn!(code = e.code_str(), error = %e.message, "architecture sync failed");
                }
            }
        }
    }
}

/// The settings PUT body: the settings and, for a bearer, `actor`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SettingsBody {
    deploy_repository: String,
    workflow_paths: Vec<String>,
    production_jobs: Vec<String>,
    #[serde(default)]
    production_apply_step: Option<String>,
    population_authors: Vec<String>,
    #[serde(default)]
    excluded_repositories: Vec<String>,
    #[serde(default)]
    staging_e2e_job: Option<String>,
    #[serde(default)]
    staging_deploy_job: Option<String>,
    #[serde(default)]
    pr_checks_rollup_job: Option<String>,
    actor: Option<String>,
}

impl Input for SettingsBody {}

impl Input for NewSessionGroup {
    const CODE: ErrorCode = ErrorCode::SESSION_GROUP_INPUT;
}

impl Input for SessionGroupPatch {
    const CODE: ErrorCode = ErrorCode::SESSION_GROUP_INPUT;
}

/// `{repo, branch, actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceBody {
    repo: String,
    branch: String,
    actor: Option<String>,
}

impl Input for SourceBody {}

/// `{actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ActorBody {
    actor: Option<String>,
}

impl Input for ActorBody {}
acts_by_actor!(Who::Caller => NewSessionGroup, SessionGroupPatch, SourceBody, ActorBody);

pub async fn get_settings(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
) -> ApiResult<Response> {
    acting(&caller, q.one("session")?, false)?;
    Ok(ok(st.console.delivery().settings().await?))
}

pub async fn put_settings(
    State(st): St,
    Extension(caller): Extension<Caller>,
    In(b): In<SettingsBody>,
) -> ApiResult<Response> {
    let actor = acting(&caller, b.actor.as_deref(), false)?;
    let s = DeliverySettings {
        deploy_repository: b.deploy_repository,
        workflow_paths: b.workflow_paths,
        production_jobs: b.production_jobs,
        production_apply_step: b.production_apply_step,
        population_authors: b.population_authors,
        excluded_repositories: b.excluded_repositories,
        staging_e2e_job: b.staging_e2e_job,
        staging_deploy_job: b.staging_deploy_job,
        pr_checks_rollup_job: b.pr_checks_rollup_job,
    };
    let saved = st.console.delivery().put_settings(&actor, s).await?;
    let bg = st.clone();
    tokio::spawn(async move {
        if let Err(e) = bg.console.delivery().sync().await {
            tracing::warn!(code = e.code_str(), error = %e.message, "delivery sync failed");
        }
    });
    Ok(ok(saved))
}

/// A time query value: RFC 3339, or a full-date (its UTC midnight).
fn time_param(v: &str) -> Option<countersign_console_core::Time> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Some(t.with_timezone(&chrono::Utc));
    }
    countersign_console_core::console::full_date(v)
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

/// The window and filters of the timeline and measures.
pub(crate) fn window_and_filters(st: &AppState, q: &Query) -> ApiResult<(Window, Filters)> {
    let t = |name: &str| -> ApiResult<Option<countersign_console_core::Time>> {
        q.one(name)?
            .map(|v| {
                time_param(v).ok_or_else(|| {
                    query_err(format!("`{name}` is an RFC 3339 time or a full-date"))
                })
            })
            .transpose()
    };
    let w = st.console.delivery().window(t("from")?, t("to")?)?;
    let text = q.one("q")?.map(str::trim).filter(|s| !s.is_empty());
    if text.is_some_and(|s| s.chars().count() > 1000) {
        return Err(
            Error::with_message(ErrorCode::CAP_EXCEEDED, "`q` is at most 1000 characters").into(),
        );
    }
    let mut facets = BTreeMap::new();
    for name in FACETS {
        let values: Vec<String> = q.all(name).into_iter().map(str::to_owned).collect();
        for v in &values {
            let ok = match name {
                "priority" => matches!(v.as_str(), "P0" | "P1" | "P2" | "P3") || v == NO_PRIORITY,
                "rework" => v == "true" || v == "false",
                "deployed" => matches!(v.as_str(), "deployed" | "waiting" | "not_tracked"),
                _ => !v.is_empty(),
            };
            if !ok {
                return Err(query_err(format!(
                    "`{name}` does not take `{}`",
                    v.chars().take(64).collect::<String>()
                )));
            }
        }
        if !values.is_empty() {
            facets.insert(name.to_owned(), values);
        }
    }
    Ok((
        w,
        Filters {
            q: text.map(str::to_owned),
            facets,
        },
    ))
}

pub async fn timeline(State(st): St, q: Query) -> ApiResult<Response> {
    let (w, f) = window_and_filters(&st, &q)?;
    Ok(ok(st.console.delivery().timeline(w, &f).await?))
}

pub async fn measures(State(st): St, q: Query) -> ApiResult<Response> {
    let (w, f) = window_and_filters(&st, &q)?;
    Ok(ok(st.console.delivery().measures(w, &f).await?))
}

pub async fn pipeline(State(st): St, q: Query) -> ApiResult<Response> {
    let at = q
        .one("at")?
        .map(|v| {
            countersign_console_core::console::full_date(v)
                .ok_or_else(|| query_err("`at` is a full-date (YYYY-MM-DD)"))
        })
        .transpose()?;
    Ok(ok(st.console.delivery().pipeline(at).await?))
}

pub async fn run(State(st): St, Path(id): Path<String>) -> ApiResult<Response> {
    let id = id
        .parse::<i64>()
        .ok()
        .filter(|n| *n > 0 && id.bytes().all(|c| c.is_ascii_digit()))
        .ok_or_else(|| Error::new(ErrorCode::RUN_ID_INPUT))?;
    Ok(ok(st.console.delivery().run(id).await?))
}

/// Every live session's id and title, on whichever replica its link is.
async fn live_titles(st: &AppState) -> ApiResult<Vec<(String, String)>> {
    Ok(st
        .console
        .messages()
        .live_sessions()
        .await?
        .into_iter()
        .map(|s| (s.session_id.into_string(), s.title))
        .collect())
}

pub async fn create_group(State(st): St, a: Acting<NewSessionGroup>) -> ApiResult<Response> {
    let (b, live) = (a.body, live_titles(&st).await?);
    let groups = st.console.delivery();
    let g = groups.create_session_group(&a.actor, &b.name, &b.sessions, &live);
    Ok(created(g.await?, None))
}

/// A session group's change. Its id is read with the body, before the live sessions are.
pub async fn update_group(
    State(st): St,
    w: Write<SessionGroupId, SessionGroupPatch>,
) -> ApiResult<Response> {
    let live = live_titles(&st).await?;
    let groups = st.console.delivery();
    Ok(ok(groups
        .update_session_group(&w.actor, w.id, &w.body, &live)
        .await?))
}

pub async fn delete_group(State(st): St, on: On<SessionGroupId>) -> ApiResult<Response> {
    let groups = st.console.delivery();
    groups.delete_session_group(&on.actor, on.id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- architecture -----

pub async fn get_source(State(st): St, Read(key): Read<String>) -> ApiResult<Response> {
    Ok(ok(st.console.delivery().architecture_source(&key).await?))
}

pub async fn put_source(State(st): St, w: Write<String, SourceBody>) -> ApiResult<Response> {
    let (key, b) = (w.id, w.body);
    let sources = st.console.delivery();
    let src = sources.put_architecture_source(&w.actor, &key, &b.repo, &b.branch);
    let src = src.await?;
    let bg = st.clone();
    tokio::spawn(async move {
        if let Err(e) = bg.console.delivery().sync_architecture(None, &key).await {
            tracing::warn!(code = e.code_str(), error = %e.message, "architecture sync failed");
        }
    });
    Ok(ok(src))
}

pub async fn delete_source(State(st): St, on: On<String>) -> ApiResult<Response> {
    let sources = st.console.delivery();
    sources
        .delete_architecture_source(&on.actor, &on.id)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn sync_source(State(st): St, w: Write<String, ActorBody>) -> ApiResult<Response> {
    let sources = st.console.delivery();
    Ok(ok(sources.sync_architecture(Some(&w.actor), &w.id).await?))
}

pub async fn list_sources(State(st): St) -> ApiResult<Response> {
    Ok(ok(st.console.delivery().architecture_sources().await?))
}

pub async fn components(State(st): St, Read(key): Read<String>) -> ApiResult<Response> {
    Ok(ok(st.console.delivery().component_tree(&key).await?))
}
