//! # countersign-code-host
//!
//! The console's code-hosting client: the GitHub REST API, version 2022-11-28, as protocol §9
//! uses it. A [`GitHub`] holds the API URL, the token file's path and an HTTP client; each
//! sync or access proof opens a [`Session`] ([`GitHub::session`]), which reads the token file
//! again, so a rotated token needs no restart.
//!
//! - Every request sends `Authorization: Bearer`, `Accept: application/vnd.github+json`
//!   (`application/vnd.github.raw+json` for file contents), `X-GitHub-Api-Version:
//!   2022-11-28` and `User-Agent: countersign-console`.
//! - Lists follow `Link: rel="next"` (RFC 8288, [`link`]), and only to the API's own origin
//!   (the token never goes elsewhere). Run lists are asked for by `created` date range and a
//!   range over GitHub's 1,000-result cap is split in two until each part is under it.
//! - Rate limits: `x-ratelimit-remaining: 0` holds further requests until
//!   `x-ratelimit-reset`; a 403 or 429 with `retry-after`, or with the remaining count at 0,
//!   waits and tries again (GitHub's documented rule; a 429 with neither waits a minute). A wait
//!   longer than [`GitHub::max_wait`] is [`Error::RateLimited`] instead.
//! - [`Error`] separates "no access" (no token file, 401, a 403 that is no rate limit, a 404 for
//!   the repository, branch or workflow) from "unavailable" (unreachable, 5xx, rate limited,
//!   an answer that does not parse), which the console answers differently (409 vs 503).
//! - [`catalog`]: the Backstage descriptors of `catalog-info.yaml`.
//! - [`standin`] (feature `standin`): the recorded stand-in tests serve GitHub from.

pub mod catalog;
pub mod link;
#[cfg(feature = "standin")]
pub mod standin;
pub mod types;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, AUTHORIZATION, HeaderMap, HeaderValue, USER_AGENT};
use serde::de::DeserializeOwned;
use zeroize::Zeroizing;

pub use types::*;

/// The REST API version every request names.
pub const API_VERSION: &str = "2022-11-28";
/// The `User-Agent` every request sends.
pub const USER_AGENT_VALUE: &str = "countersign-console";
/// The public API's URL, the default `api_url`.
pub const DEFAULT_API_URL: &str = "https://api.github.com";
/// GitHub answers at most this many results to a filtered list.
pub const RESULT_CAP: i64 = 1000;
/// A page's size.
pub const PER_PAGE: u32 = 100;
const JSON: &str = "application/vnd.github+json";
const RAW: &str = "application/vnd.github.raw+json";
/// Tries of one request through rate-limit waits.
const TRIES: u32 = 4;

/// What a call failed on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// The token cannot read it: no token file, 401, a 403 that is no rate limit, or a 404 for
    /// the repository, branch or workflow.
    #[error("no access: {0}")]
    NoAccess(String),
    /// GitHub has no such thing (a run, an issue), where that is no access problem.
    #[error("not found")]
    NotFound,
    /// GitHub could not be reached or failed (5xx, a timeout).
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Rate limited longer than the client waits.
    #[error("rate limited until {0}")]
    RateLimited(DateTime<Utc>),
    /// An answer that does not parse as GitHub's documented shape.
    #[error("unexpected answer: {0}")]
    Malformed(String),
}

impl Error {
    /// A credential, repository or branch problem (protocol §9: 409 on a PUT or sync).
    pub fn is_no_access(&self) -> bool {
        matches!(self, Error::NoAccess(_))
    }

    /// GitHub down, failing, rate limited or answering nonsense (503 on a PUT; `last_error`
    /// on a sync).
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Error::Unavailable(_) | Error::RateLimited(_) | Error::Malformed(_)
        )
    }
}

/// Time and waiting, injected so that tests see the waits without sleeping.
#[async_trait]
pub trait Pacer: Send + Sync + std::fmt::Debug {
    fn now(&self) -> SystemTime;
    async fn sleep(&self, d: Duration);
}

/// The system clock and tokio's timer.
#[derive(Debug, Default)]
pub struct SystemPacer;

#[async_trait]
impl Pacer for SystemPacer {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }
    async fn sleep(&self, d: Duration) {
        tokio::time::sleep(d).await
    }
}

/// An `owner/repo` name, checked against GitHub's characters so that no input steers a
/// request to another path.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoName {
    pub owner: String,
    pub name: String,
}

impl RepoName {
    /// `owner/repo`: an owner of 1 to 39 letters, digits and inner hyphens; a repository of 1
    /// to 100 letters, digits, `.`, `_`, `-`, not `.` or `..`.
    pub fn parse(s: &str) -> Option<Self> {
        let (owner, name) = s.split_once('/')?;
        let ob = owner.as_bytes();
        let owner_ok = (1..=39).contains(&ob.len())
            && ob.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'-')
            && !owner.starts_with('-')
            && !owner.ends_with('-');
        let nb = name.as_bytes();
        let name_ok = (1..=100).contains(&nb.len())
            && nb
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(c))
            && name != "."
            && name != "..";
        (owner_ok && name_ok).then(|| Self {
            owner: owner.to_owned(),
            name: name.to_owned(),
        })
    }
}

impl std::fmt::Display for RepoName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.owner, self.name)
    }
}

/// The run list's filters (protocol §9): `branch`, `event`, completed runs created in
/// `[from, to]` (both ends whole seconds, inclusive as GitHub's `created` range is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFilter {
    pub branch: Option<String>,
    /// `push` or `pull_request`.
    pub event: Option<String>,
    pub from: DateTime<Utc>,
    pub to: DateTime<Utc>,
}

/// The GitHub client. Clones share the rate-limit hold.
#[derive(Clone)]
pub struct GitHub {
    http: reqwest::Client,
    base: url::Url,
    token_file: Option<PathBuf>,
    pacer: Arc<dyn Pacer>,
    max_wait: Duration,
    /// Requests wait until then (the rate limit's reset after a response said 0 remain).
    held_until: Arc<Mutex<Option<SystemTime>>>,
}

impl std::fmt::Debug for GitHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GitHub")
            .field("api_url", &self.base.as_str())
            .field("token_file", &self.token_file)
            .finish_non_exhaustive()
    }
}

impl GitHub {
    /// A client of `api_url` (`https://api.github.com`, or `https://<host>/api/v3`) reading its
    /// token from `token_file` at each [`GitHub::session`].
    pub fn new(api_url: &str, token_file: Option<PathBuf>) -> Result<Self, String> {
        let base = url::Url::parse(api_url).map_err(|e| format!("api_url: {e}"))?;
        if base.cannot_be_a_base() || !matches!(base.scheme(), "http" | "https") {
            return Err("api_url must be an http:// or https:// URL".into());
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .connect_timeout(Duration::from_secs(10))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("HTTP client: {e}"))?;
        Ok(Self {
            http,
            base,
            token_file,
            pacer: Arc::new(SystemPacer),
            max_wait: Duration::from_secs(60),
            held_until: Arc::new(Mutex::new(None)),
        })
    }

    /// Waits through `pacer` (tests record the waits instead of sleeping).
    pub fn with_pacer(mut self, pacer: Arc<dyn Pacer>) -> Self {
        self.pacer = pacer;
        self
    }

    /// The longest rate-limit wait; beyond it a call fails with [`Error::RateLimited`].
    pub fn with_max_wait(mut self, d: Duration) -> Self {
        self.max_wait = d;
        self
    }

    pub fn max_wait(&self) -> Duration {
        self.max_wait
    }

    pub fn api_url(&self) -> &str {
        self.base.as_str()
    }

    /// Opens a session: reads the token file (no file, an unreadable or empty one:
    /// [`Error::NoAccess`]).
    pub fn session(&self) -> Result<Session, Error> {
        let path = self
            .token_file
            .as_ref()
            .ok_or_else(|| Error::NoAccess("no [code_hosting] token_file is configured".into()))?;
        let text = Zeroizing::new(std::fs::read_to_string(path).map_err(|e| {
            Error::NoAccess(format!(
                "the code-hosting token file {} cannot be read ({})",
                path.display(),
                e.kind()
            ))
        })?);
        let token = text.trim();
        if token.is_empty() || token.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(Error::NoAccess(
                "the code-hosting token file holds no token".into(),
            ));
        }
        let mut auth = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Error::NoAccess("the code-hosting token is not a header value".into()))?;
        auth.set_sensitive(true);
        Ok(Session {
            gh: self.clone(),
            auth,
        })
    }

    fn url(&self, segments: &[&str]) -> url::Url {
        let mut u = self.base.clone();
        if let Ok(mut p) = u.path_segments_mut() {
            p.pop_if_empty().extend(segments);
        }
        u
    }

    /// Whether `u` is under the API's URL (same origin, path below the base's).
    fn is_ours(&self, u: &url::Url) -> bool {
        u.origin() == self.base.origin()
            && u.path().starts_with(self.base.path().trim_end_matches('/'))
    }

    fn held(&self) -> Option<SystemTime> {
        self.held_until.lock().ok().and_then(|h| *h)
    }

    fn hold_until(&self, t: Option<SystemTime>) {
        if let Ok(mut h) = self.held_until.lock() {
            *h = t;
        }
    }

    /// Waits `d`, unless it exceeds the longest wait.
    async fn wait(&self, d: Duration, until: SystemTime) -> Result<(), Error> {
        if d > self.max_wait {
            return Err(Error::RateLimited(DateTime::<Utc>::from(until)));
        }
        tracing::info!(seconds = d.as_secs(), "code host rate limit: waiting");
        self.pacer.sleep(d).await;
        Ok(())
    }
}

/// One answer: status, headers, body.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    body: Vec<u8>,
}

fn header<'a>(h: &'a HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok()).map(str::trim)
}

/// GitHub's error message in a refusal body, if it has one.
fn message_of(body: &[u8]) -> String {
    #[derive(serde::Deserialize)]
    struct M {
        message: String,
    }
    serde_json::from_slice::<M>(body)
        .map(|m| m.message.chars().take(200).collect())
        .unwrap_or_default()
}

/// How a 404 reads for the thing asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// The repository, branch or workflow: the token cannot see it (GitHub answers 404 for a
    /// private repository the token may not read).
    NoAccess,
    /// A run, an issue, a file: it does not exist.
    NotFound,
}

/// A client session with the token read for it.
pub struct Session {
    gh: GitHub,
    auth: HeaderValue,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session").finish_non_exhaustive()
    }
}

fn repo_path<'a>(repo: &'a RepoName, rest: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["repos", repo.owner.as_str(), repo.name.as_str()];
    v.extend_from_slice(rest);
    v
}

/// `YYYY-MM-DDTHH:MM:SSZ`.
fn stamp(t: &DateTime<Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

impl Session {
    /// One request through the rate-limit rules: waits while held, and on a rate-limited 403
    /// or 429 waits and tries again.
    async fn send(&self, url: &url::Url, accept: &'static str) -> Result<Answer, Error> {
        let gh = &self.gh;
        for _ in 0..TRIES {
            if let Some(until) = gh.held() {
                let now = gh.pacer.now();
                if let Ok(d) = until.duration_since(now)
                    && !d.is_zero()
                {
                    gh.wait(d, until).await?;
                }
                gh.hold_until(None);
            }
            let resp = gh
                .http
                .get(url.clone())
                .header(AUTHORIZATION, self.auth.clone())
                .header(ACCEPT, accept)
                .header("X-GitHub-Api-Version", API_VERSION)
                .header(USER_AGENT, USER_AGENT_VALUE)
                .send()
                .await
                .map_err(|e| {
                    tracing::warn!(error = %e.without_url(), "code host unreachable");
                    Error::Unavailable("the code-hosting service could not be reached".into())
                })?;
            let status = resp.status();
            let headers = resp.headers().clone();
            let body = resp
                .bytes()
                .await
                .map_err(|_| Error::Unavailable("the code host's answer was cut short".into()))?
                .to_vec();
            let remaining =
                header(&headers, "x-ratelimit-remaining").and_then(|v| v.parse::<i64>().ok());
            let reset = header(&headers, "x-ratelimit-reset")
                .and_then(|v| v.parse::<u64>().ok())
                .map(|s| SystemTime::UNIX_EPOCH + Duration::from_secs(s));
            if remaining == Some(0)
                && let Some(r) = reset
            {
                gh.hold_until(Some(r));
            }
            if status == StatusCode::FORBIDDEN || status == StatusCode::TOO_MANY_REQUESTS {
                let retry_after =
                    header(&headers, "retry-after").and_then(|v| v.parse::<u64>().ok());
                let now = gh.pacer.now();
                let wait = match (retry_after, remaining, reset) {
                    (Some(s), _, _) => Some(Duration::from_secs(s)),
                    (None, Some(0), Some(r)) => Some(r.duration_since(now).unwrap_or_default()),
                    (None, _, _) if status == StatusCode::TOO_MANY_REQUESTS => {
                        Some(Duration::from_secs(60))
                    }
                    _ => None,
                };
                if let Some(d) = wait {
                    gh.hold_until(None);
                    gh.wait(d, now + d).await?;
                    continue;
                }
            }
            return Ok(Answer {
                status,
                headers,
                body,
            });
        }
        Err(Error::RateLimited(DateTime::<Utc>::from(gh.pacer.now())))
    }

    /// The answer's body when it is a success; refusals mapped to [`Error`].
    async fn get(
        &self,
        url: &url::Url,
        accept: &'static str,
        missing: Missing,
    ) -> Result<Answer, Error> {
        let a = self.send(url, accept).await?;
        let s = a.status;
        if s.is_success() {
            return Ok(a);
        }
        let msg = message_of(&a.body);
        Err(match s.as_u16() {
            401 => Error::NoAccess(format!("GitHub refused the token (401 {msg})")),
            403 => Error::NoAccess(format!("the token may not read this (403 {msg})")),
            404 => match missing {
                Missing::NoAccess => Error::NoAccess(format!(
                    "GitHub has no such repository, branch or workflow the token can see (404 {msg})"
                )),
                Missing::NotFound => Error::NotFound,
            },
            500..=599 => Error::Unavailable(format!("GitHub failed ({s})")),
            _ => Error::Malformed(format!("GitHub answered {s} {msg}")),
        })
    }

    async fn json<T: DeserializeOwned>(
        &self,
        url: &url::Url,
        missing: Missing,
    ) -> Result<(T, HeaderMap), Error> {
        let a = self.get(url, JSON, missing).await?;
        let v = serde_json::from_slice(&a.body)
            .map_err(|e| Error::Malformed(format!("{} does not parse: {e}", url.path())))?;
        Ok((v, a.headers))
    }

    /// The next page's URL, when the answer links one on the API's own origin.
    fn next(&self, headers: &HeaderMap) -> Result<Option<url::Url>, Error> {
        let Some(v) = header(headers, "link") else {
            return Ok(None);
        };
        let Some(n) = link::next(v) else {
            return Ok(None);
        };
        let u = url::Url::parse(&n)
            .map_err(|_| Error::Malformed("a Link target does not parse".into()))?;
        if !self.gh.is_ours(&u) {
            return Err(Error::Malformed(
                "a Link target is outside the API's URL".into(),
            ));
        }
        Ok(Some(u))
    }

    /// Every page of a list whose pages are arrays, following `Link: rel="next"`; `keep`
    /// decides per page whether to go on (false stops after this page).
    async fn pages<T: DeserializeOwned>(
        &self,
        first: url::Url,
        missing: Missing,
        mut keep: impl FnMut(&[T]) -> bool,
    ) -> Result<Vec<T>, Error> {
        let mut out = Vec::new();
        let mut url = Some(first);
        while let Some(u) = url.take() {
            let (page, headers): (Vec<T>, _) = self.json(&u, missing).await?;
            let go_on = keep(&page);
            out.extend(page);
            if go_on {
                url = self.next(&headers)?;
            }
        }
        Ok(out)
    }

    /// `GET /repos/{owner}/{repo}`; 404 is no access.
    pub async fn repository(&self, repo: &RepoName) -> Result<Repository, Error> {
        let u = self.gh.url(&repo_path(repo, &[]));
        Ok(self.json(&u, Missing::NoAccess).await?.0)
    }

    /// `GET /repos/{owner}/{repo}/branches/{branch}`; 404 is no access.
    pub async fn branch(&self, repo: &RepoName, branch: &str) -> Result<Branch, Error> {
        if branch.is_empty() {
            return Err(Error::NoAccess("a branch name is not empty".into()));
        }
        let mut segs = repo_path(repo, &["branches"]);
        segs.extend(branch.split('/'));
        let u = self.gh.url(&segs);
        Ok(self.json(&u, Missing::NoAccess).await?.0)
    }

    /// `GET /repos/{owner}/{repo}/actions/workflows/{file}` (the file name of
    /// `.github/workflows/<file>`); 404 is no access.
    pub async fn workflow(&self, repo: &RepoName, file: &str) -> Result<Workflow, Error> {
        let u = self
            .gh
            .url(&repo_path(repo, &["actions", "workflows", file]));
        Ok(self.json(&u, Missing::NoAccess).await?.0)
    }

    /// Completed runs of a workflow created in the filter's range, newest first as GitHub
    /// lists them: `GET /actions/workflows/{file}/runs?branch=&event=&status=completed&
    /// created=FROM..TO&per_page=100`, every page. A range whose `total_count` is over the
    /// 1,000-result cap is split at its middle second, each half asked for alone.
    pub async fn workflow_runs(
        &self,
        repo: &RepoName,
        file: &str,
        f: &RunFilter,
    ) -> Result<Vec<WorkflowRun>, Error> {
        let mut out = Vec::new();
        // Ranges still to list, newest first so that the answer stays newest first.
        let mut todo = vec![(f.from, f.to)];
        while let Some((from, to)) = todo.pop() {
            let mut u = self
                .gh
                .url(&repo_path(repo, &["actions", "workflows", file, "runs"]));
            {
                let mut q = u.query_pairs_mut();
                if let Some(b) = &f.branch {
                    q.append_pair("branch", b);
                }
                if let Some(e) = &f.event {
                    q.append_pair("event", e);
                }
                q.append_pair("status", "completed");
                q.append_pair("created", &format!("{}..{}", stamp(&from), stamp(&to)));
                q.append_pair("per_page", &PER_PAGE.to_string());
            }
            let (page, headers): (RunPage, _) = self.json(&u, Missing::NoAccess).await?;
            let span = (to - from).num_seconds();
            if page.total_count > RESULT_CAP && span >= 1 {
                let mid = from + chrono::Duration::seconds(span / 2);
                // Older half first on the stack's bottom: the newer half is listed first.
                todo.push((from, mid));
                todo.push((mid + chrono::Duration::seconds(1), to));
                continue;
            }
            if page.total_count > RESULT_CAP {
                tracing::warn!(
                    total = page.total_count,
                    "over 1,000 runs in one second: GitHub lists the first 1,000"
                );
            }
            out.extend(page.workflow_runs);
            let mut next = self.next(&headers)?;
            while let Some(n) = next.take() {
                let (p, h): (RunPage, _) = self.json(&n, Missing::NoAccess).await?;
                out.extend(p.workflow_runs);
                next = self.next(&h)?;
            }
        }
        Ok(out)
    }

    /// `GET /repos/{owner}/{repo}/actions/runs/{id}`; 404 is [`Error::NotFound`].
    pub async fn run(&self, repo: &RepoName, id: i64) -> Result<WorkflowRun, Error> {
        let id = id.to_string();
        let u = self.gh.url(&repo_path(repo, &["actions", "runs", &id]));
        Ok(self.json(&u, Missing::NotFound).await?.0)
    }

    /// `GET /repos/{owner}/{repo}/actions/runs/{id}/jobs?filter=latest&per_page=100`, every
    /// page, with their steps.
    pub async fn jobs(&self, repo: &RepoName, run_id: i64) -> Result<Vec<Job>, Error> {
        let id = run_id.to_string();
        let mut u = self
            .gh
            .url(&repo_path(repo, &["actions", "runs", &id, "jobs"]));
        u.query_pairs_mut()
            .append_pair("filter", "latest")
            .append_pair("per_page", &PER_PAGE.to_string());
        let mut out = Vec::new();
        let mut next = Some(u);
        while let Some(n) = next.take() {
            let (p, h): (JobPage, _) = self.json(&n, Missing::NotFound).await?;
            out.extend(p.jobs);
            next = self.next(&h)?;
        }
        Ok(out)
    }

    /// Merged pull requests into `base`, most recently updated first: `GET /pulls?state=closed&
    /// base=&sort=updated&direction=desc&per_page=100`, paging until a page's last pull request
    /// was updated before `since` (none: every page). Closed-unmerged ones are left out.
    pub async fn merged_pulls(
        &self,
        repo: &RepoName,
        base: &str,
        since: Option<DateTime<Utc>>,
    ) -> Result<Vec<PullRequest>, Error> {
        let mut u = self.gh.url(&repo_path(repo, &["pulls"]));
        u.query_pairs_mut()
            .append_pair("state", "closed")
            .append_pair("base", base)
            .append_pair("sort", "updated")
            .append_pair("direction", "desc")
            .append_pair("per_page", &PER_PAGE.to_string());
        let all: Vec<PullRequest> = self
            .pages(u, Missing::NoAccess, |page: &[PullRequest]| match since {
                Some(s) => page.last().is_some_and(|p| p.updated_at >= s),
                None => true,
            })
            .await?;
        Ok(all
            .into_iter()
            .filter(|p| p.merged_at.is_some() && since.is_none_or(|s| p.updated_at >= s))
            .collect())
    }

    /// `GET /repos/{owner}/{repo}/pulls/{n}/commits?per_page=100`, every page, oldest first.
    pub async fn pull_commits(&self, repo: &RepoName, number: i64) -> Result<Vec<Commit>, Error> {
        let n = number.to_string();
        let mut u = self.gh.url(&repo_path(repo, &["pulls", &n, "commits"]));
        u.query_pairs_mut()
            .append_pair("per_page", &PER_PAGE.to_string());
        self.pages(u, Missing::NotFound, |_: &[Commit]| true).await
    }

    /// `GET /repos/{owner}/{repo}/compare/{base}...{head}?per_page=100&page=1`, every page
    /// joined: the commits `head` has that `base` lacks, oldest first.
    pub async fn compare(
        &self,
        repo: &RepoName,
        base: &str,
        head: &str,
    ) -> Result<Comparison, Error> {
        let range = format!("{base}...{head}");
        let mut u = self.gh.url(&repo_path(repo, &["compare", &range]));
        u.query_pairs_mut()
            .append_pair("per_page", &PER_PAGE.to_string())
            .append_pair("page", "1");
        let (mut first, h): (Comparison, _) = self.json(&u, Missing::NotFound).await?;
        let mut next = self.next(&h)?;
        while let Some(n) = next.take() {
            let (p, h): (Comparison, _) = self.json(&n, Missing::NotFound).await?;
            first.commits.extend(p.commits);
            next = self.next(&h)?;
        }
        Ok(first)
    }

    /// `GET /repos/{owner}/{repo}/issues/{n}`: an issue or a pull request (an `owner/repo#n`
    /// ref); 404 (and 410, a deleted issue) is [`Error::NotFound`].
    pub async fn issue(&self, repo: &RepoName, number: i64) -> Result<Issue, Error> {
        let n = number.to_string();
        let u = self.gh.url(&repo_path(repo, &["issues", &n]));
        match self.json(&u, Missing::NotFound).await {
            Err(Error::Malformed(m)) if m.starts_with("GitHub answered 410") => {
                Err(Error::NotFound)
            }
            r => Ok(r?.0),
        }
    }

    /// `catalog-info.yaml` at `branch`, raw (`Accept: application/vnd.github.raw+json`); `None`
    /// when the file is missing (a 404 for the file alone is no access problem).
    pub async fn catalog_file(
        &self,
        repo: &RepoName,
        branch: &str,
    ) -> Result<Option<String>, Error> {
        let mut u = self
            .gh
            .url(&repo_path(repo, &["contents", "catalog-info.yaml"]));
        u.query_pairs_mut().append_pair("ref", branch);
        match self.get(&u, RAW, Missing::NotFound).await {
            Ok(a) => String::from_utf8(a.body)
                .map(Some)
                .map_err(|_| Error::Malformed("catalog-info.yaml is not UTF-8".into())),
            Err(Error::NotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_names() {
        let r = RepoName::parse("acme/shop.web_1").expect("valid");
        assert_eq!((r.owner.as_str(), r.name.as_str()), ("acme", "shop.web_1"));
        for bad in [
            "acme", "/shop", "acme/", "-acme/x", "acme-/x", "ac me/x", "acme/..", "acme/.",
            "acme/a/b", "acme/a?b",
        ] {
            assert!(RepoName::parse(bad).is_none(), "{bad}");
        }
        assert!(RepoName::parse(&format!("{}/x", "a".repeat(40))).is_none());
    }
}
