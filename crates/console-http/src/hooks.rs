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

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use countersign_console_core::work::messages::ExpiryNotice;
use countersign_console_core::{Error, ErrorCode};
use serde::Deserialize;
use zeroize::Zeroizing;

use crate::api::St;
use crate::error::ApiResult;

/// The webhook's body limit (protocol §2).
pub const LIMIT: usize = 64 * 1024;
/// How far `webhook-timestamp` may be from the console's clock.
const TOLERANCE_SECONDS: i64 = 5 * 60;

/// The broker's signing secret.
pub struct WebhookSecret(Zeroizing<Vec<u8>>);

impl std::fmt::Debug for WebhookSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WebhookSecret(..)")
    }
}

/// Standard base64, padding optional (Standard Webhooks secrets are written both ways).
const STANDARD_LENIENT: base64::engine::GeneralPurpose = base64::engine::GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    base64::engine::GeneralPurposeConfig::new()
        .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
);

impl WebhookSecret {
    /// The shortest key accepted (Standard Webhooks: 24 to 64 bytes).
    pub const MIN_BYTES: usize = 24;

    /// `whsec_<base64>`, or else the text's bytes; surrounding whitespace is ignored.
    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let text = text.trim();
        let key =
            match text.strip_prefix("whsec_") {
                Some(b64) => Zeroizing::new(STANDARD_LENIENT.decode(b64).map_err(|_| {
                    anyhow::anyhow!("a whsec_ secret must be base64 after the prefix")
                })?),
                None => Zeroizing::new(text.as_bytes().to_vec()),
            };
        anyhow::ensure!(
            key.len() >= Self::MIN_BYTES,
            "the webhook secret must hold at least {} bytes of key",
            Self::MIN_BYTES
        );
        Ok(Self(key))
    }

    /// HMAC-SHA256 of `<id>.<timestamp>.<body>`.
    fn mac(&self, id: &str, timestamp: &str, body: &[u8]) -> Vec<u8> {
        let key = aws_lc_rs::hmac::Key::new(aws_lc_rs::hmac::HMAC_SHA256, &self.0);
        let mut ctx = aws_lc_rs::hmac::Context::with_key(&key);
        ctx.update(id.as_bytes());
        ctx.update(b".");
        ctx.update(timestamp.as_bytes());
        ctx.update(b".");
        ctx.update(body);
        ctx.sign().as_ref().to_vec()
    }

    /// Whether one of the `v1,<base64>` entries of `signatures` is the body's signature
    /// (each compared in constant time).
    pub fn verifies(&self, id: &str, timestamp: &str, body: &[u8], signatures: &str) -> bool {
        let expected = self.mac(id, timestamp, body);
        let mut ok = false;
        for entry in signatures.split(' ') {
            let Some(b64) = entry.strip_prefix("v1,") else {
                continue;
            };
            let Ok(given) = base64::engine::general_purpose::STANDARD.decode(b64) else {
                continue;
            };
            // Every entry is compared: the time taken does not say which matched.
            ok |= countersign_console_core::clock::ct_eq(&given, &expected);
        }
        ok
    }
}

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
    if p.kind != "request.expired" {
        return Ok(done());
    }
    let notice = match serde_json::from_value::<ExpiryNotice>(p.rest) {
        Ok(n) if crate::api::is_session_id(&n.session_id) => n,
        _ => {
            tracing::warn!(webhook = %id, "an expiry notice without a valid session id, dropped");
            return Ok(done());
        }
    };
    let made = st.console.broker_expired(id, notice).await?;
    if !made {
        tracing::debug!(webhook = %id, "a broker notification seen before");
    }
    Ok(done())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures() {
        let s = WebhookSecret::parse("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")
            .unwrap_or_else(|e| panic!("{e}"));
        let mac = s.mac("msg_1", "1700000000", b"{}");
        let sig = format!(
            "v0,zzz v1,{}",
            base64::engine::general_purpose::STANDARD.encode(&mac)
        );
        assert!(s.verifies("msg_1", "1700000000", b"{}", &sig));
        assert!(!s.verifies("msg_1", "1700000001", b"{}", &sig));
        assert!(!s.verifies("msg_1", "1700000000", b"{} ", &sig));
        assert!(!s.verifies("msg_1", "1700000000", b"{}", "v1,AAAA"));
        assert!(WebhookSecret::parse("short").is_err());
    }
}
