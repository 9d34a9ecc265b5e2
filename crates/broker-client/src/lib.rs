//! # countersign-broker-client
//!
//! The one HTTP client of the broker, for every program that calls it: the `countersign` CLI
//! and the launcher helper (session and launcher proofs the helper signs, or no credential for
//! a machine login) and the console (its console token, as a bearer token). It owns the
//! transport (reqwest over rustls, a timeout per call and a shorter one to connect, no
//! redirects), the JSON bodies, one credential per call ([`Auth`]), and the broker's refusals
//! (`{"code","error"}`) as one typed [`BrokerError`]. What a caller makes of an answer is the
//! caller's: the helper and the CLI read their routes' answers, the console maps refusals into
//! its core's errors (`console-http`'s `broker_client.rs`).
//!
//! Proofs are not signed here: the helper signs them (it holds the keys) and the CLI asks the
//! helper, so this crate holds no key.

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

/// Where a call to the broker failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    /// No answer came (connection, TLS, timeout), or the call could not be made (its URL).
    NoAnswer,
    /// An answer began but its body was cut short.
    CutShort,
    /// The broker answered with a status other than 2xx.
    Refused,
    /// A 2xx answer whose body is not what the caller asked for.
    Unexpected,
}

/// Runs `once` (one call, signing a fresh proof each time: a proof is single-use) until its
/// answer is not a 503 worth sending again ([`BrokerError::retry_delay`]), waiting between
/// attempts. `once`'s own error (the proof could not be signed) ends it at once.
///
/// # Errors
/// `once`'s error; the broker's answer is the inner `Result`.
pub async fn retrying<T, E, Fut>(mut once: impl FnMut() -> Fut) -> Result<Result<T, BrokerError>, E>
where
    Fut: Future<Output = Result<Result<T, BrokerError>, E>>,
{
    let mut attempt = 1;
    loop {
        match once().await? {
            Err(e) => match e.retry_delay(attempt) {
                Some(wait) => {
                    attempt += 1;
                    tokio::time::sleep(wait).await;
                }
                None => return Ok(Err(e)),
            },
            answer => return Ok(answer),
        }
    }
}

/// How many times in all a call the broker answers 503 is sent ([`BrokerError::retry_delay`]).
pub const RETRY_ATTEMPTS: u32 = 6;

/// A call to the broker that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct BrokerError {
    /// Where the call failed.
    pub kind: Failure,
    /// The HTTP status, `None` when no whole answer came.
    pub status: Option<u16>,
    /// The broker's refusal code (`ENROLLMENT_NOT_LIVE`), when it sent one.
    pub code: Option<String>,
    /// The broker's message, or what went wrong on the way.
    pub message: String,
}

impl BrokerError {
    /// No answer: `message` says why (also a call that could not be made).
    #[must_use]
    pub fn no_answer(message: String) -> Self {
        Self {
            kind: Failure::NoAnswer,
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

    /// How long to wait before sending a call refused so once more, as attempt `attempt + 1`
    /// (`attempt` from 1), or `None` when it is not worth it: the broker answered 503 (a
    /// dependency unavailable: the database in a failover, a store, an issuer; or a proof it
    /// cannot decide yet after a restart), and fewer than [`RETRY_ATTEMPTS`] attempts were made.
    /// The wait: 250 ms doubling to 4 s. The caller signs a fresh proof for the next attempt (a
    /// proof is single-use).
    #[must_use]
    pub fn retry_delay(&self, attempt: u32) -> Option<Duration> {
        if self.status != Some(503) || attempt >= RETRY_ATTEMPTS {
            return None;
        }
        let ms = 250u64 << attempt.saturating_sub(1).min(4);
        Some(Duration::from_millis(ms))
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
            kind: Failure::Unexpected,
            status: Some(self.status),
            code: None,
            message: format!("unexpected answer: {e}"),
        })
    }
}

/// Headers that carry the caller's trace context (W3C `traceparent`), asked for each call.
pub type TraceContext = fn() -> Vec<(&'static str, String)>;

/// A client of one broker.
#[derive(Debug, Clone)]
pub struct BrokerClient {
    http: reqwest::Client,
    /// The public URL without a trailing `/` (proofs' `htu` start with it).
    base: String,
    /// The same, parsed, under which [`BrokerClient::url_of`] puts path segments.
    parsed: reqwest::Url,
    trace_context: Option<TraceContext>,
}

impl BrokerClient {
    /// A client of the broker at `base_url` (its public URL), each call bounded by `timeout`
    /// and sent as `user_agent`.
    ///
    /// # Errors
    /// When the URL is not `http://` or `https://`, or the HTTP client cannot be built.
    pub fn new(
        base_url: &str,
        timeout: Duration,
        user_agent: &'static str,
    ) -> Result<Self, BrokerError> {
        let base = base_url.trim_end_matches('/').to_owned();
        let parsed = reqwest::Url::parse(&base)
            .map_err(|e| BrokerError::no_answer(format!("broker URL {base:?}: {e}")))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(BrokerError::no_answer(format!(
                "broker URL {base:?}: not http or https"
            )));
        }
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout.min(Duration::from_secs(10)))
            // The broker never redirects; a proof is bound to the URL it was signed for.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(user_agent)
            .build()
            .map_err(|e| BrokerError::no_answer(format!("HTTP client: {e}")))?;
        Ok(Self {
            http,
            base,
            parsed,
            trace_context: None,
        })
    }

    /// This client, sending the headers `trace_context` gives with every call.
    #[must_use]
    pub fn with_trace_context(mut self, trace_context: TraceContext) -> Self {
        self.trace_context = Some(trace_context);
        self
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

    /// The URL of these path segments under the broker's URL, each percent-encoded as one
    /// segment (an id taken from a caller cannot reach another route).
    #[must_use]
    pub fn url_of(&self, segments: &[&str]) -> reqwest::Url {
        let mut u = self.parsed.clone();
        if let Ok(mut p) = u.path_segments_mut() {
            p.pop_if_empty().extend(segments);
        }
        u
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
            .map_err(|_| BrokerError::no_answer(format!("bad method {method:?}")))?;
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
        for (name, value) in self.trace_context.map(|f| f()).unwrap_or_default() {
            req = req.header(name, value);
        }
        let resp = req
            .send()
            .await
            .map_err(|e| BrokerError::no_answer(error_chain(&e)))?;
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.map_err(|e| BrokerError {
            kind: Failure::CutShort,
            ..BrokerError::no_answer(error_chain(&e))
        })?;
        let body = Zeroizing::new(Vec::from(bytes));
        if (200..300).contains(&status) {
            return Ok(Answer { status, body });
        }
        Err(refusal(status, &body))
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

/// A refusal's body (`{"code","error"}`) as a [`BrokerError`]; another body keeps its first 200
/// characters as the message.
fn refusal(status: u16, body: &[u8]) -> BrokerError {
    #[derive(serde::Deserialize)]
    struct Refusal {
        code: String,
        #[serde(default)]
        error: String,
    }
    let (code, message) = match serde_json::from_slice::<Refusal>(body) {
        Ok(r) => (Some(r.code), r.error),
        Err(_) => (
            None,
            String::from_utf8_lossy(body).chars().take(200).collect(),
        ),
    };
    BrokerError {
        kind: Failure::Refused,
        status: Some(status),
        code,
        message,
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

    const AGENT: &str = "countersign-test";

    #[test]
    fn classifies() {
        let e = |status: Option<u16>, code: Option<&str>| BrokerError {
            kind: Failure::Refused,
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
        assert!(BrokerClient::new("ftp://x", Duration::from_secs(1), AGENT).is_err());
        let c = BrokerClient::new("http://127.0.0.1:1/", Duration::from_secs(1), AGENT);
        assert_eq!(
            c.map(|c| c.url("/v1/requests")).unwrap_or_default(),
            "http://127.0.0.1:1/v1/requests"
        );
    }

    #[test]
    fn a_503_is_retried_with_backoff_and_nothing_else_is() {
        let e = |status: Option<u16>| BrokerError {
            kind: Failure::Refused,
            status,
            code: None,
            message: "m".into(),
        };
        let waits: Vec<_> = (1..=RETRY_ATTEMPTS)
            .map(|a| e(Some(503)).retry_delay(a).map(|d| d.as_millis()))
            .collect();
        assert_eq!(
            waits,
            [
                Some(250),
                Some(500),
                Some(1000),
                Some(2000),
                Some(4000),
                None
            ]
        );
        assert_eq!(
            e(Some(500)).retry_delay(1),
            None,
            "an internal error is answered"
        );
        assert_eq!(e(Some(401)).retry_delay(1), None);
        assert_eq!(
            e(None).retry_delay(1),
            None,
            "no answer: the caller decides"
        );
    }

    #[tokio::test]
    async fn retrying_sends_a_503_again_and_nothing_else() {
        let refused = |status: u16| BrokerError {
            kind: Failure::Refused,
            status: Some(status),
            code: None,
            message: "m".into(),
        };
        let calls = std::cell::Cell::new(0u32);
        let r: Result<Result<u32, BrokerError>, ()> = retrying(|| {
            calls.set(calls.get() + 1);
            let n = calls.get();
            async move { Ok(if n == 1 { Err(refused(503)) } else { Ok(n) }) }
        })
        .await;
        assert_eq!(r, Ok(Ok(2)), "a 503, then the answer");
        calls.set(0);
        let r: Result<Result<u32, BrokerError>, ()> = retrying(|| {
            calls.set(calls.get() + 1);
            async { Ok(Err(refused(401))) }
        })
        .await;
        assert_eq!(r, Ok(Err(refused(401))));
        assert_eq!(calls.get(), 1, "a 401 is answered at once");
    }

    #[test]
    fn reads_refusals() {
        let r = refusal(409, br#"{"code":"NOT_PENDING","error":"decided"}"#);
        assert_eq!(r.code.as_deref(), Some("NOT_PENDING"));
        assert_eq!((r.kind, r.status), (Failure::Refused, Some(409)));
        assert_eq!(r.message, "decided");
        let r = refusal(502, b"<html>bad gateway</html>");
        assert_eq!(r.code, None);
        assert_eq!(r.message, "<html>bad gateway</html>");
        assert_eq!(
            r.to_string(),
            "broker answered HTTP 502: <html>bad gateway</html>"
        );
    }

    #[test]
    fn segments_stay_segments() {
        let c = BrokerClient::new("http://127.0.0.1:9/base/", Duration::from_secs(1), AGENT)
            .expect("client");
        assert_eq!(
            c.url_of(&["v1", "credential-requests", "../x y"]).as_str(),
            "http://127.0.0.1:9/base/v1/credential-requests/..%2Fx%20y"
        );
        assert_eq!(c.base_url(), "http://127.0.0.1:9/base");
    }
}
