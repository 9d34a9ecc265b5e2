//! Rendering refusals: every refusal is the core's [`Error`], answered as its status and
//! `{"code","error"}` (a broker refusal keeps the broker's code and status).

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use countersign_console_core::{Error, ErrorCode};

/// A refusal on its way to the client.
#[derive(Debug)]
pub struct ApiError(pub Error);

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        Self(e)
    }
}

impl From<ErrorCode> for ApiError {
    fn from(c: ErrorCode) -> Self {
        Self(Error::new(c))
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::BAD_GATEWAY);
        if status.is_server_error() {
            tracing::warn!(code = self.0.code_str(), error = %self.0.message, "request failed");
        } else {
            tracing::debug!(code = self.0.code_str(), error = %self.0.message, "request refused");
        }
        let body = serde_json::json!({ "code": self.0.code_str(), "error": self.0.message });
        let mut resp = (status, Json(body)).into_response();
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
