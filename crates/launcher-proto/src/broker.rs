//! The small HTTP client the helper and the CLI use to call the broker: JSON bodies, one
//! credential per call (a `Proof` header or the console bearer token), and the broker's
//! refusals (`{"code","error"}`) as a typed [`BrokerError`].

use std::time::Duration;

use serde::de::DeserializeOwned;
use zeroize::Zeroizing;

/// Broker refusal codes after which a lease renewal must not be tried again: the enrollment
/// is over, or the renewal can never be right.
pub const TERMINAL_RENEWAL_CODES: &[&str] = &[
    "ENROLLMENT_NOT_LIVE",
    "NOT_YOURS",
    "ENROLLMENT_ID_INPUT",
    "INVALID_RENEWAL",
    "POD_TOKEN_REQUIRED",
    "POD_IDENTITY_MISMATCH",
];

/// A call to the broker that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct BrokerError {
    /// The HTTP status, `None` when no answer came.
    pub status: Option<u16>,
    /// The broker's refusal code (`ENROLLMENT_NOT_LIVE`), when it sent one.
    pub code: Option<String>,
    /// The broker's message, or what went wrong on the way.
    pub message: String,
}

impl BrokerError {
    fn transport(message: String) -> Self {
        Self {
            status: None,
            code: None,
            message,
        }
    }

    fn describe(&self) -> String {
        match (&self.code, self.status) {
            (Some(c), _) => format!("broker refused ({c}): {}", self.message),
            (None, Some(s)) => format!("broker answered HTTP {s}: {}", self.message),
            (None, None) => format!("broker unreachable: {}", self.message),
        }
    }

    /// Whether the broker answered with this refusal code.
    #[must_use]
    pub fn is(&self, code: &str) -> bool {
        self.code.as_deref() == Some(code)
    }

    /// Whether trying again later may succeed: no answer, a 5xx, or rate limiting.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self.status {
            None => true,
            Some(s) => s >= 500 || s == 429,
        }
    }

    /// Whether a lease renewal refused so must never be retried.
    #[must_use]
    pub fn is_terminal_renewal(&self) -> bool {
        self.code
            .as_deref()
            .is_some_and(|c| TERMINAL_RENEWAL_CODES.contains(&c))
    }
}

/// How a call is authenticated.
#[derive(Debug, Clone, Copy)]
pub enum Auth<'a> {
    None,
    /// A `Proof` header (session or launcher proof).
    Proof(&'a str),
    /// The console token, as a bearer token.
    Bearer(&'a str),
}

/// A successful answer: status and body. The body is zeroized on drop (it may hold values).
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Zeroizing<Vec<u8>>,
}

impl Answer {
    /// The body as `T`.
    ///
    /// # Errors
    /// When the body is not `T`'s JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, BrokerError> {
        serde_json::from_slice(&self.body).map_err(|e| BrokerError {
            status: Some(self.status),
            code: None,
            message: format!("unexpected answer: {e}"),
        })
    }
}

/// A client of one broker.
#[derive(Debug, Clone)]
pub struct BrokerClient {
    http: reqwest::Client,
    base: String,
}

impl BrokerClient {
    /// A client of the broker at `base_url` (its public URL), each call bounded by `timeout`.
    ///
    /// # Errors
    /// When the URL is not `http://` or `https://`, or the HTTP client cannot be built.
    pub fn new(base_url: &str, timeout: Duration) -> Result<Self, BrokerError> {
        let base = base_url.trim_end_matches('/').to_owned();
        let parsed = reqwest::Url::parse(&base)
            .map_err(|e| BrokerError::transport(format!("broker URL {base:?}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(BrokerError::transport(format!(
                "broker URL {base:?}: not http or https"
            )));
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            .user_agent(concat!("countersign-launcher/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| BrokerError::transport(format!("HTTP client: {e}")))?;
        Ok(Self { http, base })
    }

    /// The broker's public URL, without a trailing `/`.
    #[must_use]
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The full URL of `path` (also a proof's `htu`).
    #[must_use]
    pub fn url(&self, path: &str) -> String {
        countersign_proto::claims::htu(&self.base, path)
    }

    /// Calls `method url` with an optional JSON body. A 2xx is an [`Answer`]; anything else a
    /// [`BrokerError`] carrying the broker's code and message.
    ///
    /// # Errors
    /// When no answer comes, or the broker refuses.
    pub async fn send(
        &self,
        method: &str,
        url: &str,
        body: Option<&[u8]>,
        auth: Auth<'_>,
    ) -> Result<Answer, BrokerError> {
        let m = reqwest::Method::from_bytes(method.as_bytes())
            .map_err(|_| BrokerError::transport(format!("bad method {method:?}")))?;
        let mut req = self.http.request(m, url);
        if let Some(b) = body {
            req = req
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b.to_vec());
        }
        req = match auth {
            Auth::None => req,
            Auth::Proof(p) => req.header("Proof", p),
            Auth::Bearer(t) => req.bearer_auth(t),
        };
        let resp = req
            .send()
            .await
            .map_err(|e| BrokerError::transport(error_chain(&e)))?;
        let status = resp.status().as_u16();
        let bytes = resp
            .bytes()
            .await
            .map_err(|e| BrokerError::transport(error_chain(&e)))?;
        let body = Zeroizing::new(Vec::from(bytes));
        if (200..300).contains(&status) {
            return Ok(Answer { status, body });
        }
        #[derive(serde::Deserialize)]
        struct Refusal {
            code: String,
            error: String,
        }
        Err(match serde_json::from_slice::<Refusal>(&body) {
            Ok(r) => BrokerError {
                status: Some(status),
                code: Some(r.code),
                message: r.error,
            },
            Err(_) => BrokerError {
                status: Some(status),
                code: None,
                message: String::from_utf8_lossy(&body).chars().take(200).collect(),
            },
        })
    }

    /// [`BrokerClient::send`] to a path of this broker.
    ///
    /// # Errors
    /// As [`BrokerClient::send`].
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
        auth: Auth<'_>,
    ) -> Result<Answer, BrokerError> {
        self.send(method, &self.url(path), body, auth).await
    }
}

/// An error with its sources, one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies() {
        let e = |status: Option<u16>, code: Option<&str>| BrokerError {
            status,
            code: code.map(str::to_owned),
            message: "m".into(),
        };
        assert!(e(None, None).is_transient());
        assert!(e(Some(503), Some("DATABASE_UNAVAILABLE")).is_transient());
        assert!(e(Some(429), Some("RATE_LIMITED")).is_transient());
        assert!(!e(Some(401), Some("ENROLLMENT_NOT_LIVE")).is_transient());
        assert!(e(Some(401), Some("ENROLLMENT_NOT_LIVE")).is_terminal_renewal());
        assert!(!e(Some(401), Some("PROOF_INVALID")).is_terminal_renewal());
        assert_eq!(e(Some(401), Some("X")).to_string(), "broker refused (X): m");
        assert!(BrokerClient::new("ftp://x", Duration::from_secs(1)).is_err());
        let c = BrokerClient::new("http://127.0.0.1:1/", Duration::from_secs(1));
        assert_eq!(
            c.map(|c| c.url("/v1/requests")).unwrap_or_default(),
            "http://127.0.0.1:1/v1/requests"
        );
    }
}
