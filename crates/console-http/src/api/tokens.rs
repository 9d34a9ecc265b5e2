//! Personal agent tokens: list, mint (shown once), revoke.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use countersign_console_core::ids::TokenId;
use countersign_console_core::{Caller, Error, ErrorCode};
use serde::{Deserialize, Serialize};

use super::{In, Input, SMALL_LIMIT, St, created, ok};
use crate::error::ApiResult;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MintBody {
    #[serde(default)]
    name: Option<String>,
    /// RFC 3339; at most 365 days ahead.
    #[serde(default)]
    expires_at: Option<String>,
}

impl Input for MintBody {
    const CODE: ErrorCode = ErrorCode::TOKEN_INPUT;
    const LIMIT: usize = SMALL_LIMIT;
}

/// The mint answer: the token's facts and the token, shown this once.
#[derive(Debug, Serialize)]
struct Minted<'a> {
    #[serde(flatten)]
    info: &'a countersign_console_core::console::TokenInfo,
    token: &'a str,
}

pub async fn list(State(st): St, Extension(caller): Extension<Caller>) -> ApiResult<Response> {
    let h = caller.human()?;
    Ok(ok(st.console.tokens(h).await?))
}

pub async fn mint(
    State(st): St,
    Extension(caller): Extension<Caller>,
    In(b): In<MintBody>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    let expires_at = match b.expires_at.as_deref() {
        None => None,
        Some(t) => Some(
            chrono::DateTime::parse_from_rfc3339(t)
                .map_err(|_| {
                    Error::with_message(ErrorCode::TOKEN_INPUT, "expires_at is an RFC 3339 time")
                })?
                .with_timezone(&chrono::Utc),
        ),
    };
    let m = st
        .console
        .mint_token(h, b.name.as_deref(), expires_at)
        .await?;
    Ok(created(
        Minted {
            info: &m.info,
            token: &m.token,
        },
        None,
    ))
}

pub async fn revoke(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> ApiResult<Response> {
    let h = caller.human()?;
    st.console.revoke_token(h, TokenId::named(&id)?).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
