//! Rendering refusals: every refusal is the core's [`Error`], answered as its status and
//! `{"code","error"}`; RATE_LIMITED carries `Retry-After`, and so does every 503 (a dependency
//! the broker needs is unavailable: the database, a store, an issuer), `Retry-After: 1`, so that
//! a client backs off and asks again instead of giving up. One answer is the transport's, not the
//! catalogue's: a request body that did not arrive within the read timeout is `408` with
//! `{"code":"REQUEST_TIMEOUT",...}` and `Connection: close` (docs/decisions.md).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use countersign_broker_core::{Error, ErrorCode};

/// A refusal on its way to the client.
#[derive(Debug)]
pub struct ApiError {
    pub error: Error,
    pub retry_after: Option<u64>,
    /// The body did not arrive in time: answered 408 and the connection closed.
    pub body_timed_out: bool,
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        Self {
            error,
            retry_after: None,
            body_timed_out: false,
        }
    }
}

impl From<ErrorCode> for ApiError {
    fn from(code: ErrorCode) -> Self {
        Error::new(code).into()
    }
}

impl ApiError {
    pub fn rate_limited(message: &'static str, retry_after_secs: u64) -> Self {
        Self {
            error: Error::with_message(ErrorCode::RATE_LIMITED, message),
            retry_after: Some(retry_after_secs.max(1)),
            body_timed_out: false,
        }
    }

    /// The request body did not arrive within the read timeout.
    pub fn body_timeout() -> Self {
        Self {
            error: Error::with_message(
                ErrorCode::INTERNAL,
                "the request body did not arrive within the read timeout",
            ),
            retry_after: None,
            body_timed_out: true,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.body_timed_out {
            tracing::debug!("request body timed out");
            let body = refusal("REQUEST_TIMEOUT", self.error.message());
            let mut resp = (StatusCode::REQUEST_TIMEOUT, Json(body)).into_response();
            resp.headers_mut()
                .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            resp.headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
            return resp;
        }
        let status =
            StatusCode::from_u16(self.error.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::warn!(code = %self.error.code, error = self.error.message(), "request failed");
        } else {
            tracing::debug!(code = %self.error.code, error = self.error.message(), "request refused");
        }
        let body = refusal(self.error.code.as_str(), self.error.message());
        let mut resp = (status, Json(body)).into_response();
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        // A 503 is worth asking again, shortly.
        let retry_after = self.retry_after.or_else(|| {
            (status == StatusCode::SERVICE_UNAVAILABLE).then_some(UNAVAILABLE_RETRY_AFTER)
        });
        if let Some(secs) = retry_after
            && let Ok(v) = HeaderValue::from_str(&secs.to_string())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, v);
        }
        resp
    }
}

/// A refusal's body, `{"code","error"}`: the one shape both servers' refusals and the broker
/// client's reader share (`countersign_common::Refusal`).
fn refusal(code: &str, error: &str) -> countersign_common::Refusal {
    countersign_common::Refusal {
        code: code.to_owned(),
        error: error.to_owned(),
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

/// `Retry-After` of a 503 that names no other: a second.
pub const UNAVAILABLE_RETRY_AFTER: u64 = 1;
