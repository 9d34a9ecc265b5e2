//! The broker front: the console asks the broker, naming the signed-in person; the broker's
//! refusals pass through with its code and status.

use axum::Extension;
use axum::extract::{FromRequest, FromRequestParts, Path, Request, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use countersign_console_core::broker::{Countersignature, PasskeyRegistration};
use countersign_console_core::{Caller, Error, ErrorCode, Human};
use serde::{Deserialize, Serialize};

use super::{In, Input, Query, SMALL_LIMIT, St, ok};
use crate::error::ApiResult;

/// The signed-in person a route acts for; an agent is refused HUMAN_ONLY.
#[derive(Debug)]
pub struct Person(Human);

/// The signed-in person and the route's body, read in that order of refusals: the body's
/// first, then HUMAN_ONLY.
#[derive(Debug)]
pub struct PersonIn<T>(Human, T);

fn human(caller: &Caller) -> ApiResult<Human> {
    Ok(caller.human()?.clone())
}

impl<S: Send + Sync> FromRequestParts<S> for Person {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, st: &S) -> Result<Self, Response> {
        let Extension(caller) = Extension::<Caller>::from_request_parts(parts, st)
            .await
            .map_err(IntoResponse::into_response)?;
        human(&caller)
            .map(Person)
            .map_err(IntoResponse::into_response)
    }
}

impl<S: Send + Sync, T: Input> FromRequest<S> for PersonIn<T> {
    type Rejection = Response;

    async fn from_request(req: Request, st: &S) -> Result<Self, Response> {
        let (mut parts, body) = req.into_parts();
        let Extension(caller) = Extension::<Caller>::from_request_parts(&mut parts, st)
            .await
            .map_err(IntoResponse::into_response)?;
        let In(b) = In::<T>::from_request(Request::from_parts(parts, body), st)
            .await
            .map_err(IntoResponse::into_response)?;
        human(&caller)
            .map(|h| PersonIn(h, b))
            .map_err(IntoResponse::into_response)
    }
}

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
    /// The person's passkey assertion over the statement (docs/passkeys.md).
    #[serde(default)]
    countersignature: Option<Countersignature>,
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

pub async fn list_requests(State(st): St, q: Query, Person(h): Person) -> ApiResult<Response> {
    approver_me(&q)?;
    Ok(ok(st.console.inbox(&h).await?))
}

pub async fn get_request(
    State(st): St,
    Path(id): Path<String>,
    Person(h): Person,
) -> ApiResult<Response> {
    Ok(ok(st.console.record(&h, &id).await?))
}

pub async fn machine_lookup(
    State(st): St,
    PersonIn(h, b): PersonIn<LookupBody>,
) -> ApiResult<Response> {
    Ok(ok(st
        .console
        .lookup_machine_login(&h, b.code.as_deref().unwrap_or(""))
        .await?))
}

pub async fn approve(
    State(st): St,
    Path(id): Path<String>,
    PersonIn(h, b): PersonIn<DecisionBody>,
) -> ApiResult<Response> {
    let a = st
        .console
        .approve(&h, &id, b.code.as_deref(), b.countersignature.as_ref())
        .await?;
    Ok(ok(a))
}

pub async fn deny(
    State(st): St,
    Path(id): Path<String>,
    PersonIn(h, b): PersonIn<DecisionBody>,
) -> ApiResult<Response> {
    let state = st.console.deny(&h, &id, b.code.as_deref()).await?;
    Ok(ok(NewState { state }))
}

pub async fn list_grants(State(st): St, q: Query, Person(h): Person) -> ApiResult<Response> {
    approver_me(&q)?;
    Ok(ok(st.console.grants(&h).await?))
}

pub async fn revoke_grant(
    State(st): St,
    Path(id): Path<String>,
    Person(h): Person,
) -> ApiResult<Response> {
    let state = st.console.revoke_grant(&h, &id).await?;
    Ok(ok(NewState { state }))
}

pub async fn list_machines(State(st): St, Person(h): Person) -> ApiResult<Response> {
    Ok(ok(st.console.machine_logins(&h).await?))
}

pub async fn revoke_machine(
    State(st): St,
    Path(id): Path<String>,
    Person(h): Person,
) -> ApiResult<Response> {
    let state = st.console.revoke_machine_login(&h, &id).await?;
    Ok(ok(NewState { state }))
}

// ----- passkeys (docs/passkeys.md) -----

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Empty {}

impl Input for Empty {
    const CODE: ErrorCode = ErrorCode::INVALID_BODY;
    const LIMIT: usize = SMALL_LIMIT;
}

impl Input for PasskeyRegistration {
    const CODE: ErrorCode = ErrorCode::INVALID_BODY;
    const LIMIT: usize = SMALL_LIMIT;
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RenameBody {
    name: String,
}

impl Input for RenameBody {
    const CODE: ErrorCode = ErrorCode::INVALID_BODY;
    const LIMIT: usize = SMALL_LIMIT;
}

pub async fn statement(
    State(st): St,
    Path(id): Path<String>,
    PersonIn(h, _): PersonIn<Empty>,
) -> ApiResult<Response> {
    Ok(ok(st.console.statement(&h, &id).await?))
}

pub async fn list_passkeys(State(st): St, Person(h): Person) -> ApiResult<Response> {
    Ok(ok(st.console.passkeys(&h).await?))
}

pub async fn passkey_challenge(
    State(st): St,
    PersonIn(h, _): PersonIn<Empty>,
) -> ApiResult<Response> {
    Ok(ok(st.console.passkey_offer(&h).await?))
}

pub async fn register_passkey(
    State(st): St,
    PersonIn(h, b): PersonIn<PasskeyRegistration>,
) -> ApiResult<Response> {
    Ok(super::created(
        st.console.register_passkey(&h, &b).await?,
        None,
    ))
}

pub async fn rename_passkey(
    State(st): St,
    Path(id): Path<String>,
    PersonIn(h, b): PersonIn<RenameBody>,
) -> ApiResult<Response> {
    Ok(ok(st.console.rename_passkey(&h, &id, &b.name).await?))
}

pub async fn remove_passkey(
    State(st): St,
    Path(id): Path<String>,
    Person(h): Person,
) -> ApiResult<Response> {
    let state = st.console.remove_passkey(&h, &id).await?;
    Ok(ok(NewState { state }))
}

// ----- notification preferences (issue 29) -----

fn notifier(st: &crate::AppState) -> ApiResult<&crate::notify::Notifier> {
    st.notifier.as_deref().ok_or_else(|| {
        Error::with_message(
            ErrorCode::NOT_FOUND,
            "this console sends no notifications: its configuration has no [notifications]",
        )
        .into()
    })
}

#[derive(Debug, Serialize)]
struct PreferencesAnswer {
    #[serde(flatten)]
    preferences: countersign_console_core::notify::Preferences,
    /// The channels this console can send on.
    available: Vec<&'static str>,
}

impl Input for countersign_console_core::notify::Preferences {
    const CODE: ErrorCode = ErrorCode::INVALID_BODY;
    const LIMIT: usize = SMALL_LIMIT;
}

pub async fn get_notification_preferences(State(st): St, Person(h): Person) -> ApiResult<Response> {
    let n = notifier(&st)?;
    Ok(ok(PreferencesAnswer {
        preferences: n.prefs(&h.login).await.map_err(Error::from)?,
        available: n.available(),
    }))
}

pub async fn put_notification_preferences(
    State(st): St,
    PersonIn(h, b): PersonIn<countersign_console_core::notify::Preferences>,
) -> ApiResult<Response> {
    let n = notifier(&st)?;
    n.set_prefs(&h.login, &b).await?;
    Ok(ok(PreferencesAnswer {
        preferences: b,
        available: n.available(),
    }))
}
