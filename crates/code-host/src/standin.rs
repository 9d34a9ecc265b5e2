//! The recorded stand-in (protocol §9): GitHub answers kept as fixtures, keyed by method,
//! path and query, served on 127.0.0.1 port 0. A request no fixture records is answered 599,
//! remembered, and fails the test: [`StandIn::assert_no_misses`], and dropping a stand-in
//! that missed panics (unless the test is already panicking). A request lacking the headers
//! GitHub's API version asks for (`X-GitHub-Api-Version: 2022-11-28`, the `Accept` media
//! type, `User-Agent`) is a miss too; a bearer other than the accepted token is answered
//! 401 "Bad credentials", as GitHub does.
//!
//! Fixtures live in a directory with an `index.json`: an array of
//! `{"request": "GET /path?query", "status": 200, "headers": {…}, "body": "file.json"}`
//! (`body` a file beside the index, or absent for none). `{base}` in a header value (a `Link`
//! target) is replaced by the stand-in's URL. Query parameters match in any order, decoded.

use std::collections::{BTreeMap, VecDeque};
use std::path::Path;
use std::sync::{Arc, Mutex};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use serde::Deserialize;

/// One recorded answer.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Recorded {
    /// A JSON answer with GitHub's usual headers (a full rate-limit budget).
    pub fn json(status: u16, body: &serde_json::Value) -> Self {
        Self {
            status,
            headers: vec![
                ("x-ratelimit-limit".into(), "5000".into()),
                ("x-ratelimit-remaining".into(), "4999".into()),
                ("x-ratelimit-reset".into(), "1893456000".into()),
                ("x-ratelimit-resource".into(), "core".into()),
            ],
            body: serde_json::to_vec(body).unwrap_or_default(),
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> Self {
        self.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
        self.headers
            .push((name.to_ascii_lowercase(), value.to_owned()));
        self
    }
}

/// A request's key: method, decoded path, decoded query pairs in order of name.
fn key_of(method: &str, path_and_query: &str) -> String {
    let (path, query) = path_and_query
        .split_once('?')
        .unwrap_or((path_and_query, ""));
    let path = url::form_urlencoded::parse(format!("p={}", path.replace('+', "%2B")).as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default();
    let mut pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect();
    pairs.sort();
    let q: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    if q.is_empty() {
        format!("{} {path}", method.to_ascii_uppercase())
    } else {
        format!("{} {path}?{}", method.to_ascii_uppercase(), q.join("&"))
    }
}

#[derive(Debug, Deserialize)]
struct IndexRow {
    request: String,
    status: u16,
    #[serde(default)]
    headers: BTreeMap<String, String>,
    #[serde(default)]
    body: Option<String>,
}

/// The month of `acme/shop` in `fixtures/month` (see `fixtures/month.py` for its story).
pub fn month_dir() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/month")
}

/// A [`crate::Pacer`] for tests: a clock that only the waits move, and the waits recorded.
#[derive(Debug)]
pub struct TestPacer {
    now: Mutex<std::time::SystemTime>,
    slept: Mutex<Vec<std::time::Duration>>,
}

impl TestPacer {
    pub fn at(now: std::time::SystemTime) -> Self {
        Self {
            now: Mutex::new(now),
            slept: Mutex::new(Vec::new()),
        }
    }

    /// The waits, in order.
    pub fn slept(&self) -> Vec<std::time::Duration> {
        self.slept.lock().map(|s| s.clone()).unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl crate::Pacer for TestPacer {
    fn now(&self) -> std::time::SystemTime {
        self.now.lock().map(|n| *n).unwrap_or(std::time::UNIX_EPOCH)
    }
    async fn sleep(&self, d: std::time::Duration) {
        if let Ok(mut s) = self.slept.lock() {
            s.push(d);
        }
        if let Ok(mut n) = self.now.lock() {
            *n += d;
        }
    }
}

/// A set of recorded answers.
#[derive(Debug, Clone, Default)]
pub struct Fixtures {
    /// Each request's answers: all but the last are served once each, in order; the last
    /// answers every later request.
    map: BTreeMap<String, VecDeque<Recorded>>,
}

impl Fixtures {
    /// Reads `dir/index.json` and the bodies it names.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let index = std::fs::read_to_string(dir.join("index.json"))
            .map_err(|e| format!("{}: {e}", dir.join("index.json").display()))?;
        let rows: Vec<IndexRow> =
            serde_json::from_str(&index).map_err(|e| format!("index.json: {e}"))?;
        let mut f = Fixtures::default();
        for r in rows {
            let (method, target) = r
                .request
                .split_once(' ')
                .ok_or_else(|| format!("`{}` is not `METHOD /path`", r.request))?;
            let body = match &r.body {
                Some(b) => std::fs::read(dir.join(b))
                    .map_err(|e| format!("{}: {e}", dir.join(b).display()))?,
                None => Vec::new(),
            };
            f.map.insert(
                key_of(method, target),
                VecDeque::from([Recorded {
                    status: r.status,
                    headers: r.headers.into_iter().collect(),
                    body,
                }]),
            );
        }
        Ok(f)
    }

    /// Records (or replaces) the answer to `request` (`"GET /path?query"`).
    pub fn put(&mut self, request: &str, answer: Recorded) {
        let (m, t) = request.split_once(' ').unwrap_or(("GET", request));
        self.map.insert(key_of(m, t), VecDeque::from([answer]));
    }

    /// Answers `request` once with `answer` before whatever it answers now.
    pub fn once(&mut self, request: &str, answer: Recorded) {
        let (m, t) = request.split_once(' ').unwrap_or(("GET", request));
        self.map.entry(key_of(m, t)).or_default().push_front(answer);
    }

    pub fn len(&self) -> usize {
        self.map.len()
    }

    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[derive(Debug, Default)]
struct Shared {
    fixtures: Mutex<Fixtures>,
    misses: Mutex<Vec<String>>,
    served: Mutex<Vec<String>>,
    token: Mutex<Option<String>>,
    base: Mutex<String>,
}

/// A running stand-in.
#[derive(Debug)]
pub struct StandIn {
    pub url: String,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl StandIn {
    /// Serves `fixtures` on 127.0.0.1, port 0, accepting the bearer `token` (any when `None`).
    pub async fn start(fixtures: Fixtures, token: Option<&str>) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let shared = Arc::new(Shared {
            fixtures: Mutex::new(fixtures),
            token: Mutex::new(token.map(str::to_owned)),
            base: Mutex::new(url.clone()),
            ..Default::default()
        });
        let app = Router::new().fallback(answer).with_state(shared.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, shared, task })
    }

    /// Records (or replaces) an answer while running.
    pub fn put(&self, request: &str, answer: Recorded) {
        if let Ok(mut f) = self.shared.fixtures.lock() {
            f.put(request, answer);
        }
    }

    /// Answers `request` once with `answer`, then as before.
    pub fn once(&self, request: &str, answer: Recorded) {
        if let Ok(mut f) = self.shared.fixtures.lock() {
            f.once(request, answer);
        }
    }

    /// Changes the bearer token the stand-in accepts (a rotated token).
    pub fn accept_token(&self, token: Option<&str>) {
        if let Ok(mut t) = self.shared.token.lock() {
            *t = token.map(str::to_owned);
        }
    }

    /// Requests no fixture recorded (or lacking GitHub's headers).
    pub fn misses(&self) -> Vec<String> {
        self.shared
            .misses
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// Every request answered from a fixture, by key, in order.
    pub fn served(&self) -> Vec<String> {
        self.shared
            .served
            .lock()
            .map(|m| m.clone())
            .unwrap_or_default()
    }

    /// How many times `request` (`"GET /path?query"`) was answered.
    pub fn count(&self, request: &str) -> usize {
        let (m, t) = request.split_once(' ').unwrap_or(("GET", request));
        let k = key_of(m, t);
        self.served().iter().filter(|s| **s == k).count()
    }

    /// Fails the test when any request went unrecorded.
    #[track_caller]
    pub fn assert_no_misses(&self) {
        let m = self.misses();
        assert!(
            m.is_empty(),
            "unrecorded requests to the GitHub stand-in: {m:#?}"
        );
    }
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
        let m = self.misses();
        if !m.is_empty() && !std::thread::panicking() {
            panic!("unrecorded requests to the GitHub stand-in: {m:#?}");
        }
    }
}

fn respond(status: u16, headers: &[(String, String)], body: Vec<u8>, base: &str) -> Response {
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = r.headers_mut();
    h.insert(
        "content-type",
        HeaderValue::from_static("application/json; charset=utf-8"),
    );
    h.insert(
        "x-github-api-version-selected",
        HeaderValue::from_static("2022-11-28"),
    );
    for (n, v) in headers {
        if let (Ok(n), Ok(v)) = (
            axum::http::HeaderName::from_bytes(n.as_bytes()),
            HeaderValue::from_str(&v.replace("{base}", base)),
        ) {
            h.insert(n, v);
        }
    }
    r
}

async fn answer(State(s): State<Arc<Shared>>, req: Request) -> Response {
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_default();
    let key = key_of(req.method().as_str(), &target);
    let base = s.base.lock().map(|b| b.clone()).unwrap_or_default();
    let h = req.headers();
    let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).unwrap_or("");
    let accept_ok = matches!(
        get("accept"),
        "application/vnd.github+json" | "application/vnd.github.raw+json"
    );
    let fault = if get("x-github-api-version") != "2022-11-28" {
        Some("no X-GitHub-Api-Version: 2022-11-28")
    } else if !accept_ok {
        Some("Accept is not a GitHub media type")
    } else if get("user-agent") != "countersign-console" {
        Some("User-Agent is not countersign-console")
    } else {
        None
    };
    if let Some(f) = fault {
        if let Ok(mut m) = s.misses.lock() {
            m.push(format!("{key} ({f})"));
        }
        return respond(
            599,
            &[],
            br#"{"message":"request lacks GitHub's headers"}"#.to_vec(),
            &base,
        );
    }
    let bearer = get("authorization").strip_prefix("Bearer ").unwrap_or("");
    let wanted = s.token.lock().ok().and_then(|t| t.clone());
    if bearer.is_empty() || wanted.as_deref().is_some_and(|w| w != bearer) {
        return respond(
            401,
            &[],
            br#"{"message":"Bad credentials","documentation_url":"https://docs.github.com/rest","status":"401"}"#
                .to_vec(),
            &base,
        );
    }
    let found = s.fixtures.lock().ok().and_then(|mut f| {
        let q = f.map.get_mut(&key)?;
        if q.len() > 1 {
            q.pop_front()
        } else {
            q.front().cloned()
        }
    });
    match found {
        Some(r) => {
            if let Ok(mut v) = s.served.lock() {
                v.push(key);
            }
            respond(r.status, &r.headers, r.body, &base)
        }
        None => {
            tracing::error!(request = %key, "unrecorded request to the GitHub stand-in");
            if let Ok(mut m) = s.misses.lock() {
                m.push(key);
            }
            respond(
                599,
                &[],
                br#"{"message":"no fixture records this request"}"#.to_vec(),
                &base,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_ignore_query_order_and_encoding() {
        assert_eq!(
            key_of(
                "get",
                "/repos/a/b/runs?per_page=100&created=2026-01-01T00%3A00%3A00Z..2026-01-02T00:00:00Z"
            ),
            "GET /repos/a/b/runs?created=2026-01-01T00:00:00Z..2026-01-02T00:00:00Z&per_page=100"
        );
        assert_eq!(key_of("GET", "/repos/a/b"), "GET /repos/a/b");
        assert_eq!(
            key_of("GET", "/repos/a/b/compare/x%2E%2E%2Ey"),
            "GET /repos/a/b/compare/x...y"
        );
    }
}
