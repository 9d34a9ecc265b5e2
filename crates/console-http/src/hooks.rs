//! `POST /hooks/broker` (protocol §8, outside the 131): the broker's expiry notifications,
//! verified as [Standard Webhooks](https://www.standardwebhooks.com/) and turned into a message
//! to the named session.
//!
//! - No credential: the signature is. Without `[broker] webhook_secret_file` the route is 404.
//! - The three headers present; `webhook-timestamp` within 5 minutes of the console's clock;
//!   one of the space-separated `v1,<base64>` entries of `webhook-signature` equal, compared in
//!   constant time, to the HMAC-SHA256 of `<id>.<timestamp>.<raw body>` under the secret
//!   (`whsec_<base64>` decoded, else the file's text; at least 24 bytes). Else 401
//!   WEBHOOK_INVALID, and the broker retries.
//! - A `webhook-id` seen before: 204, nothing made (kept with its message, in the message's
//!   own transaction). Another `type`, or a `session_id` §4.1 refuses: 204, dropped.
//! - `record.pending` (a record waits for its approver, issue 29): queued as notices for the
//!   people who asked to hear (`notify.rs`), once per item, channel and person, before the 204.

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use countersign_console_core::work::messages::ExpiryNotice;
use countersign_console_core::{Error, ErrorCode};
use serde::Deserialize;

use crate::api::St;
use crate::error::ApiResult;

/// The webhook's body limit (protocol §2).
pub const LIMIT: usize = 64 * 1024;
/// How far `webhook-timestamp` may be from the console's clock.
const TOLERANCE_SECONDS: i64 = 5 * 60;

pub use countersign_common::webhook::WebhookSecret;

/// The notification's body: its `type`, and for `request.expired` the notice.
#[derive(Debug, Deserialize)]
struct Payload {
    #[serde(rename = "type")]
    kind: String,
    #[serde(flatten)]
    rest: serde_json::Value,
}

fn invalid(message: &str) -> Error {
    Error::with_message(ErrorCode::WEBHOOK_INVALID, message)
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Result<&'a str, Error> {
    h.get(name)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
        .ok_or_else(|| invalid("a Standard Webhooks header is missing"))
}

/// `POST /hooks/broker`.
pub async fn broker(State(st): St, headers: HeaderMap, body: Body) -> ApiResult<Response> {
    let Some(secret) = st.webhook_secret.as_ref() else {
        return Err(Error::with_message(
            ErrorCode::NOT_FOUND,
            "no broker webhook secret is configured",
        )
        .into());
    };
    let body = axum::body::to_bytes(body, LIMIT)
        .await
        .map_err(|_| Error::new(ErrorCode::REQUEST_TOO_LARGE))?;
    let id = header(&headers, "webhook-id")?;
    let timestamp = header(&headers, "webhook-timestamp")?;
    let signatures = header(&headers, "webhook-signature")?;
    let at: i64 = timestamp
        .parse()
        .map_err(|_| invalid("webhook-timestamp is Unix seconds"))?;
    if (st.console.now().timestamp() - at).abs() > TOLERANCE_SECONDS {
        return Err(
            invalid("webhook-timestamp is more than 5 minutes from the console's clock").into(),
        );
    }
    if !secret.verifies(id, timestamp, &body, signatures) {
        return Err(invalid("no webhook-signature entry verifies").into());
    }
    let done = || StatusCode::NO_CONTENT.into_response();
    let Ok(p) = serde_json::from_slice::<Payload>(&body) else {
        tracing::warn!(webhook = %id, "a signed broker notification that does not parse, dropped");
        return Ok(done());
    };
    if p.kind == "record.pending" {
        // A record waits for its approver: queued for the people who asked to hear, in the
        // console's database, before the broker is answered (it sends again until it is).
        if st.notifier.is_none() {
            return Ok(done());
        }
        let waiting =
            serde_json::from_value::<countersign_console_core::notify::RecordPending>(p.rest)
                .ok()
                .and_then(|r| countersign_console_core::notify::Waiting::of_record(&r));
        match waiting {
            Some(w) => {
                let made = st.console.notify_waiting(&w).await?;
                tracing::debug!(webhook = %id, notices = made, "record pending: notices queued");
            }
            None => {
                tracing::warn!(webhook = %id, "a record.pending notice that does not parse, dropped")
            }
        }
        return Ok(done());
    }
    if p.kind != "request.expired" {
        return Ok(done());
    }
    // A notice whose `session_id` is not one by §4.1 does not parse.
    let notice = match serde_json::from_value::<ExpiryNotice>(p.rest) {
        Ok(n) => n,
        Err(_) => {
            tracing::warn!(webhook = %id, "an expiry notice without a valid session id, dropped");
            return Ok(done());
        }
    };
    let made = st.console.messages().broker_expired(id, notice).await?;
    if !made {
        tracing::debug!(webhook = %id, "a broker notification seen before");
    }
    Ok(done())
}
