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
        let mut body = self.0.details.clone();
        body.insert("code".into(), self.0.code_str().into());
        body.insert("error".into(), self.0.message.clone().into());
        let mut resp = (status, Json(serde_json::Value::Object(body))).into_response();
        resp.headers_mut()
            .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        if self.0.is(ErrorCode::UNAUTHENTICATED) {
            // RFC 9110 §11.6.1, RFC 6750 §3; the route layer adds `error="invalid_token"`
            // when a bearer came.
            resp.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer realm=\"countersign\""),
            );
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
