//! The meta routes: the route table, who is calling, the people, health, readiness and
//! metrics.

use axum::Extension;
use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use countersign_broker_client::{Auth, Failure};
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

/// `GET /metrics`: the process's Prometheus text (in dev mode's one process, the broker's
/// metrics too), with the live-session gauge read at the scrape.
pub async fn metrics_page(State(st): St) -> Response {
    let handle = countersign_common::telemetry::metrics_handle();
    metrics::gauge!("countersign_console_live_sessions").set(st.sessions.len() as f64);
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        handle.render(),
    )
        .into_response()
}

/// `GET /readyz`: 200 when the console can serve: its database answers and, when a broker is
/// configured, the broker answers its own `/readyz` (so a console in front of a broker that
/// cannot serve approvals takes no traffic); otherwise 503 naming what is not ready. The
/// database is ready when a primary takes writes: on PostgreSQL, a read-only server (a standby,
/// a demoted primary) or none reachable is `"database": "unavailable"`. `/healthz` stays the
/// liveness check (the database answers).
pub async fn readyz(State(st): St) -> Response {
    let database = match st.console.ready().await {
        Ok(()) => "ok",
        Err(_) => "unavailable",
    };
    let broker = match &st.broker_readyz {
        None => "not configured",
        Some(client) => match client.call("GET", "/readyz", None, Auth::None).await {
            Ok(_) => "ok",
            Err(e) if e.kind == Failure::Refused => "not ready",
            Err(_) => "unreachable",
        },
    };
    let ready = database == "ok" && matches!(broker, "ok" | "not configured");
    let status = if ready {
        axum::http::StatusCode::OK
    } else {
        axum::http::StatusCode::SERVICE_UNAVAILABLE
    };
    (
        status,
        [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))],
        axum::Json(Readiness {
            broker,
            database,
            status: countersign_common::wire::ready_word(ready),
        }),
    )
        .into_response()
}

/// The console's `/readyz` answer: the broker's `status` words
/// (`countersign_common::wire::ready_word`), and the parts the console waits on, which are not
/// the broker's (its database, and the broker: `ok`, `not ready`, `unreachable` or
/// `not configured`). Fields in alphabetical order, as `json!` wrote them.
#[derive(Debug, serde::Serialize)]
struct Readiness {
    broker: &'static str,
    database: &'static str,
    status: &'static str,
}
