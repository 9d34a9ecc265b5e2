//! Personal agent tokens: list, mint (shown once), revoke.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use countersign_console_core::{Caller, ErrorCode};
use serde::{Deserialize, Serialize};

use super::{In, Input, SMALL_LIMIT, St, created, ok};
use crate::error::ApiResult;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MintBody {
    #[serde(default)]
    name: Option<String>,
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
    let m = st.console.mint_token(h, b.name.as_deref()).await?;
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
    st.console.revoke_token(h, &id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
