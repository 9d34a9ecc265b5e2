//! Issues: create, read, list with filters and paging, update, resolve a ref, claims, and the
//! issue's event log.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use countersign_console_core::ids::SessionId;
use countersign_console_core::work::{
    IssueFilter, IssueKey, IssueView, ProjectKey, RouteStatus, Status,
};
use countersign_console_core::{Caller, Error, ErrorCode, IssuePatch, Login, NewIssue};
use serde::{Deserialize, Serialize};

use super::edge::{Read, Who, Write, acts_by_actor};
use super::{In, Input, Query, St, acting, created, event_page, ok, query_err};
use crate::error::ApiResult;

impl Input for NewIssue {}
impl Input for IssuePatch {}

/// `{force?, actor?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimBody {
    #[serde(default)]
    force: bool,
    actor: Option<String>,
}

impl Input for ClaimBody {}
acts_by_actor!(Who::Caller => IssuePatch);
acts_by_actor!(Who::Named => ClaimBody);

/// A paged issue list.
#[derive(Debug, Serialize)]
struct IssuePage {
    issues: Vec<IssueView>,
    total: i64,
    limit: u32,
    offset: u32,
}

/// `advice` on a new issue: the most similar existing items.
#[derive(Debug, Serialize)]
struct Advice {
    suggestions: Vec<countersign_console_core::console::Suggestion>,
}

/// The create answer: the issue and `advice`.
#[derive(Debug, Serialize)]
struct CreatedIssue {
    #[serde(flatten)]
    issue: IssueView,
    advice: Advice,
}

/// `GET /issues/resolve`.
#[derive(Debug, Serialize)]
struct Resolved {
    key: IssueKey,
}

pub async fn create(
    State(st): St,
    Extension(caller): Extension<Caller>,
    In(b): In<NewIssue>,
) -> ApiResult<Response> {
    let actor = acting(&caller, b.actor.as_deref(), false)?;
    let (issue, new) = st.console.issues().create_issue(&actor, b).await?;
    if !new {
        // A ref imported already: the original (protocol §1.2).
        return Ok(ok(issue));
    }
    let location = format!("/api/v1/issues/{}", issue.key);
    // After the write committed: it never slows or blocks the write.
    let suggestions = st
        .console
        .issues()
        .similar_to(&issue.key, &issue.title)
        .await;
    Ok(created(
        CreatedIssue {
            issue,
            advice: Advice { suggestions },
        },
        Some(location),
    ))
}

pub async fn read(State(st): St, Read(key): Read<String>) -> ApiResult<Response> {
    Ok(ok(st.console.issues().issue(&key).await?))
}

pub async fn resolve(State(st): St, q: Query) -> ApiResult<Response> {
    let r = q
        .one("ref")?
        .ok_or_else(|| query_err("`ref` names an issue key"))?;
    Ok(ok(Resolved {
        key: st.console.issues().resolve(r).await?,
    }))
}

/// A time query value: RFC 3339, or a full-date (its UTC midnight).
fn time_param(v: &str) -> Option<countersign_console_core::Time> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(v) {
        return Some(t.with_timezone(&chrono::Utc));
    }
    chrono::NaiveDate::parse_from_str(v, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

pub async fn list(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
) -> ApiResult<Response> {
    acting(&caller, q.one("session")?, false)?;
    if q.one("cursor")?.is_some() {
        return Err(query_err(
            "issues page by `limit` and `offset`, not `cursor`",
        ));
    }
    let mut f = IssueFilter::default();
    if let Some(p) = q.one("project")? {
        f.project =
            Some(ProjectKey::parse(p).ok_or_else(|| query_err("`project` is a project key"))?);
    }
    for s in q.all("status") {
        f.status
            .push(Status::parse(s).ok_or_else(|| query_err("`status` is an issue status"))?);
    }
    if let Some(p) = q.one("parent")? {
        f.parent = Some(IssueKey::parse(p).ok_or_else(|| query_err("`parent` is an issue key"))?);
    }
    f.labels = q.all("label").into_iter().map(str::to_owned).collect();
    for p in q.all("priority") {
        f.priority.push(match p {
            "none" => None,
            "0" | "1" | "2" | "3" => p.parse().ok(),
            _ => return Err(query_err("`priority` is 0 to 3, or none")),
        });
    }
    f.open = q.flag("open")?;
    if let Some(t) = q.one("updated_since")? {
        f.updated_since =
            Some(time_param(t).ok_or_else(|| query_err("`updated_since` is an RFC 3339 time"))?);
    }
    let route_status = match q.one("route_status")? {
        None => None,
        Some("live") => Some(RouteStatus::Live),
        Some("no_holder") => Some(RouteStatus::NoHolder),
        Some("unknown") => Some(RouteStatus::Unknown),
        Some(_) => return Err(query_err("`route_status` is live, no_holder or unknown")),
    };
    if q.flag("pinned")? == Some(true) {
        let h = caller.human().map_err(|_| {
            Error::with_message(
                ErrorCode::HUMAN_ONLY,
                "`pinned=true` is a person's own list",
            )
        })?;
        f.pinned_by = Some(Login::clone(&h.login));
    }
    let limit: Option<u32> = q.parsed("limit")?;
    let offset: Option<u32> = q.parsed("offset")?;
    if limit.is_some_and(|l| !(1..=250).contains(&l)) {
        return Err(query_err("`limit` is 1 to 250"));
    }
    let paged = limit.is_some() || offset.is_some();
    if paged {
        f.limit = Some(limit.unwrap_or(50));
        f.offset = offset.unwrap_or(0);
    }
    let (issues, total) = st.console.issues().list(f.clone(), route_status).await?;
    if paged {
        Ok(ok(IssuePage {
            issues,
            total,
            limit: f.limit.unwrap_or(50),
            offset: f.offset,
        }))
    } else {
        Ok(ok(issues))
    }
}

pub async fn update(State(st): St, w: Write<String, IssuePatch>) -> ApiResult<Response> {
    let issues = st.console.issues();
    let update = issues.update_issue(&w.actor, &w.id, w.body).await?;
    Ok(ok(update))
}

pub async fn claim(State(st): St, w: Write<String, ClaimBody>) -> ApiResult<Response> {
    let issues = st.console.issues();
    let claim = issues.claim(&w.actor, &w.id, w.body.force).await?;
    Ok(ok(claim))
}

pub async fn release(
    State(st): St,
    Extension(caller): Extension<Caller>,
    q: Query,
    Path(key): Path<String>,
) -> ApiResult<Response> {
    let actor = acting(&caller, q.one("session")?, true)?;
    st.console.issues().release(&actor, &key).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn events(State(st): St, q: Query, Read(key): Read<String>) -> ApiResult<Response> {
    let page = event_page(&q)?;
    Ok(ok(st.console.issues().issue_events(&key, &page).await?))
}

/// `{read_sequence?, pinned?}`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReadStateBody {
    read_sequence: Option<i64>,
    pinned: Option<bool>,
}

impl Input for ReadStateBody {}

pub async fn read_states(
    State(st): St,
    Extension(caller): Extension<Caller>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    Ok(ok(st.console.issues().read_states(h).await?))
}

pub async fn update_read_state(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
    In(b): In<ReadStateBody>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    Ok(ok(st
        .console
        .issues()
        .update_read_state(h, &key, b.read_sequence, b.pinned)
        .await?))
}

pub async fn subscribers(State(st): St, Path(key): Path<String>) -> ApiResult<Response> {
    Ok(ok(st.console.issues().subscribers(&key).await?))
}

pub async fn unsubscribe(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path((key, session)): Path<(String, String)>,
) -> ApiResult<Response> {
    let session = SessionId::named(&session)?;
    let actor = acting(&caller, None, false)?;
    st.console
        .issues()
        .unsubscribe(&actor, &key, &session)
        .await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
