//! A small Google Secret Manager REST server, for tests (cargo feature `fake`).
//!
//! No installable emulator implements Secret Manager faithfully (the known ones drop annotations
//! and CMEK settings and ignore filters), and the store's judging depends on exactly those. The
//! real Google client speaks REST/JSON to an overridden endpoint, so this fake serves the REST
//! API's paths and JSON:
//!
//! - `GET /v1/projects/{p}/secrets`, paged (`pageSize`, `pageToken`, `nextPageToken`; at most
//!   [`PAGE_CAP`] secrets a page whatever the client asks, so that paging is exercised);
//! - `GET /v1/projects/{p}/secrets/{s}`: the secret, with `annotations`, `labels` and
//!   `replication` (automatic or user-managed, each with its `customerManagedEncryption`);
//! - `GET /v1/projects/{p}/secrets/{s}/versions/{v}` (`latest` = the most recently created
//!   version, whatever its state) with `state` and `replicationStatus`, and
//!   `.../versions/{v}:access` with the base64 payload (`FAILED_PRECONDITION` for a version not
//!   enabled);
//!
//! with enums as numbers when the client asks for `$alt=json;enum-encoding=int` (as it does),
//! and errors in Google's JSON error shape
//! (`{"error":{"code":404,"message":..,"status":"NOT_FOUND"}}`). Only project [`PROJECT`]
//! exists; a filter in a listing is refused (the store asks for none).
//!
//! The state is a [`Fake`], shared by the test and the [`Server`]s that serve it: a test edits
//! secrets while the store reads them, stops the server (the store going away) and starts
//! another on the same address with the same state (the store coming back). [`Fake::stall`]
//! makes every request wait without answering (a store that hangs), [`Fake::fail`] answers every
//! request with an error, and [`Fake::calls`] tells what the client asked.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

/// The one project the fake serves (a project number).
pub const PROJECT: &str = "123";

/// The most secrets the fake sends in one page, whatever the client asks for.
pub const PAGE_CAP: usize = 3;

/// Where a secret's (or a version's) replicas are and which key encrypts each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Replication {
    /// Automatic, with this customer-managed key (a Cloud KMS key name) or Google's.
    Automatic(Option<String>),
    /// User-managed: (location, key) per replica.
    UserManaged(Vec<(String, Option<String>)>),
}

impl Replication {
    /// Automatic replication under `key` (`None`: Google-managed encryption).
    pub fn automatic(key: Option<&str>) -> Self {
        Replication::Automatic(key.map(str::to_owned))
    }

    /// User-managed replicas, each (location, key).
    pub fn user_managed(replicas: &[(&str, Option<&str>)]) -> Self {
        Replication::UserManaged(
            replicas
                .iter()
                .map(|(loc, key)| ((*loc).to_owned(), key.map(str::to_owned)))
                .collect(),
        )
    }
}

/// A version's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VersionState {
    Enabled,
    Disabled,
    Destroyed,
}

impl VersionState {
    fn as_str(self) -> &'static str {
        match self {
            VersionState::Enabled => "ENABLED",
            VersionState::Disabled => "DISABLED",
            VersionState::Destroyed => "DESTROYED",
        }
    }

    fn as_int(self) -> u8 {
        match self {
            VersionState::Enabled => 1,
            VersionState::Disabled => 2,
            VersionState::Destroyed => 3,
        }
    }
}

/// One version of a secret.
#[derive(Clone, Debug)]
pub struct Version {
    pub data: Vec<u8>,
    pub state: VersionState,
    /// The secret's replication when the version was added: it is encrypted as that said.
    pub encrypted_as: Replication,
}

/// One secret, named in [`Fake`] by its secret id (the last part of its resource name).
#[derive(Clone, Debug)]
pub struct FakeSecret {
    pub annotations: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub replication: Replication,
    /// Oldest first: version `n` is `versions[n - 1]`.
    pub versions: Vec<Version>,
}

#[derive(Debug)]
struct Inner {
    secrets: BTreeMap<String, FakeSecret>,
    /// Every request: a word for the route, the path's names and the query.
    calls: Vec<String>,
    /// Answer every request with this error (500 gives a body that is not JSON).
    fail: Option<(u16, &'static str)>,
}

/// The fake's state: its secrets and switches. Clones share it.
#[derive(Clone, Debug)]
pub struct Fake {
    inner: Arc<Mutex<Inner>>,
    /// While true, every request waits without answering.
    stall: Arc<watch::Sender<bool>>,
}

impl Default for Fake {
    fn default() -> Self {
        Self {
            inner: Arc::new(Mutex::new(Inner {
                secrets: BTreeMap::new(),
                calls: Vec::new(),
                fail: None,
            })),
            stall: Arc::new(watch::Sender::new(false)),
        }
    }
}

impl Fake {
    /// An empty fake.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Creates (or replaces) secret `id` with these annotations and replication, no versions,
    /// and a label (`team=agents`).
    pub fn put(&self, id: &str, owner: Option<&str>, tier: Option<&str>, replication: Replication) {
        let mut annotations = BTreeMap::new();
        if let Some(o) = owner {
            annotations.insert("owner".to_owned(), o.to_owned());
        }
        if let Some(t) = tier {
            annotations.insert("tier".to_owned(), t.to_owned());
        }
        self.lock().secrets.insert(
            id.to_owned(),
            FakeSecret {
                annotations,
                labels: BTreeMap::from([("team".to_owned(), "agents".to_owned())]),
                replication,
                versions: Vec::new(),
            },
        );
    }

    /// Adds an enabled version, encrypted as the secret's replication now says; answers its
    /// number.
    ///
    /// # Panics
    /// When there is no secret `id`.
    pub fn add_version(&self, id: &str, data: impl Into<Vec<u8>>) -> usize {
        self.with_secret(id, |s| {
            let encrypted_as = s.replication.clone();
            s.versions.push(Version {
                data: data.into(),
                state: VersionState::Enabled,
                encrypted_as,
            });
            s.versions.len()
        })
    }

    /// Sets version `n` (1-based) of `id` to `state`.
    ///
    /// # Panics
    /// When there is no such secret or version.
    pub fn set_state(&self, id: &str, n: usize, state: VersionState) {
        self.with_secret(id, |s| {
            let v = n
                .checked_sub(1)
                .and_then(|i| s.versions.get_mut(i))
                .unwrap_or_else(|| panic!("no version {n} of secret {id}"));
            v.state = state;
        })
    }

    /// Runs `f` on secret `id` (to change its annotations, labels or replication).
    ///
    /// # Panics
    /// When there is no secret `id`.
    pub fn with_secret<T>(&self, id: &str, f: impl FnOnce(&mut FakeSecret) -> T) -> T {
        let mut inner = self.lock();
        let s = inner
            .secrets
            .get_mut(id)
            .unwrap_or_else(|| panic!("no secret {id} in the fake"));
        f(s)
    }

    /// Sets (or, with `None`, removes) annotation `key` of secret `id`.
    pub fn annotate(&self, id: &str, key: &str, value: Option<&str>) {
        self.with_secret(id, |s| match value {
            Some(v) => {
                s.annotations.insert(key.to_owned(), v.to_owned());
            }
            None => {
                s.annotations.remove(key);
            }
        })
    }

    /// A copy of secret `id`, if there is one.
    pub fn secret(&self, id: &str) -> Option<FakeSecret> {
        self.lock().secrets.get(id).cloned()
    }

    /// Deletes secret `id` with its versions (Secret Manager deletes at once).
    pub fn delete(&self, id: &str) {
        self.lock().secrets.remove(id);
    }

    /// Every request so far: `list <project> <query>`, `get <project>/<id> <query>`,
    /// `version <project>/<id>/<version> <query>` (`<version>` ends in `:access` for a value).
    pub fn calls(&self) -> Vec<String> {
        self.lock().calls.clone()
    }

    pub fn clear_calls(&self) {
        self.lock().calls.clear();
    }

    /// While `on`, every request waits without answering; turning it off lets the waiting
    /// requests go on.
    pub fn stall(&self, on: bool) {
        self.stall.send_replace(on);
    }

    /// Answers every request with `(HTTP status, Google status)` as an error in Google's shape
    /// (status 500: a body that is not JSON), until `None`.
    pub fn fail(&self, fail: Option<(u16, &'static str)>) {
        self.lock().fail = fail;
    }
}

fn error(code: u16, status: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"code": code, "message": message.into(), "status": status}});
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    (status, axum::Json(body)).into_response()
}

/// Logs the call; stalls or fails when told to.
async fn gate(fake: &Fake, what: String) -> Option<Response> {
    fake.lock().calls.push(what);
    let mut stall = fake.stall.subscribe();
    // Ends at once when not stalled; a dropped sender cannot happen while `fake` lives.
    let _ = stall.wait_for(|on| !*on).await;
    match fake.lock().fail {
        Some((500, _)) => {
            Some((StatusCode::INTERNAL_SERVER_ERROR, "oops, not JSON").into_response())
        }
        Some((code, status)) => Some(error(code, status, "the fake was told to fail")),
        None => None,
    }
}

fn int_enums(q: &BTreeMap<String, String>) -> bool {
    q.get("$alt")
        .is_some_and(|a| a.contains("enum-encoding=int"))
}

fn query_text(q: &BTreeMap<String, String>) -> String {
    q.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn cmek_config(key: Option<&str>) -> Value {
    match key {
        Some(k) => json!({"customerManagedEncryption": {"kmsKeyName": k}}),
        None => json!({}),
    }
}

fn cmek_status(key: Option<&str>) -> Value {
    match key {
        Some(k) => json!({"customerManagedEncryption": {
            "kmsKeyVersionName": format!("{k}/cryptoKeyVersions/1")
        }}),
        None => json!({}),
    }
}

/// A replication (`status`: a version's replication status) as JSON.
fn replication_json(r: &Replication, status: bool) -> Value {
    let cmek = |k: &Option<String>| {
        if status {
            cmek_status(k.as_deref())
        } else {
            cmek_config(k.as_deref())
        }
    };
    match r {
        Replication::Automatic(k) => json!({"automatic": cmek(k)}),
        Replication::UserManaged(rs) => {
            let replicas: Vec<Value> = rs
                .iter()
                .map(|(loc, k)| {
                    let mut r = cmek(k);
                    r["location"] = json!(loc);
                    r
                })
                .collect();
            json!({"userManaged": {"replicas": replicas}})
        }
    }
}

fn secret_json(id: &str, s: &FakeSecret) -> Value {
    json!({
        "name": format!("projects/{PROJECT}/secrets/{id}"),
        "replication": replication_json(&s.replication, false),
        "createTime": "2025-01-02T03:04:05.678901Z",
        "labels": s.labels,
        "etag": "\"16243b3e0a1b2c\"",
        "annotations": s.annotations,
    })
}

fn version_json(id: &str, n: usize, v: &Version, ints: bool) -> Value {
    let state = if ints {
        json!(v.state.as_int())
    } else {
        json!(v.state.as_str())
    };
    json!({
        "name": format!("projects/{PROJECT}/secrets/{id}/versions/{n}"),
        "createTime": "2025-01-02T03:04:05.678901Z",
        "state": state,
        "replicationStatus": replication_json(&v.encrypted_as, true),
        "etag": "\"16243b3e0a1b2d\"",
    })
}

async fn list_secrets(
    State(fake): State<Fake>,
    Path(project): Path<String>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let what = format!("list {project} {}", query_text(&q));
    if let Some(r) = gate(&fake, what).await {
        return r;
    }
    if project != PROJECT {
        return error(403, "PERMISSION_DENIED", "Permission denied on project");
    }
    // The store asks for every secret; a filter would need the service's filter language.
    if q.get("filter").is_some_and(|f| !f.is_empty()) {
        return error(400, "INVALID_ARGUMENT", "this fake implements no filter");
    }
    let asked = q
        .get("pageSize")
        .and_then(|s| s.parse::<usize>().ok())
        .unwrap_or(0);
    let size = if asked == 0 {
        PAGE_CAP
    } else {
        asked.min(PAGE_CAP)
    };
    let start = match q.get("pageToken").map(String::as_str) {
        None | Some("") => 0,
        Some(t) => match t
            .strip_prefix("after-")
            .and_then(|n| n.parse::<usize>().ok())
        {
            Some(n) => n,
            None => return error(400, "INVALID_ARGUMENT", "Invalid page token"),
        },
    };
    let inner = fake.lock();
    let all: Vec<(&String, &FakeSecret)> = inner.secrets.iter().collect();
    let page: Vec<Value> = all
        .iter()
        .skip(start)
        .take(size)
        .map(|(id, s)| secret_json(id, s))
        .collect();
    let mut body = json!({"secrets": page, "totalSize": all.len()});
    if start + size < all.len() {
        body["nextPageToken"] = json!(format!("after-{}", start + size));
    }
    axum::Json(body).into_response()
}

async fn get_secret(
    State(fake): State<Fake>,
    Path((project, id)): Path<(String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let what = format!("get {project}/{id} {}", query_text(&q));
    if let Some(r) = gate(&fake, what).await {
        return r;
    }
    let inner = fake.lock();
    match inner.secrets.get(&id).filter(|_| project == PROJECT) {
        Some(s) => axum::Json(secret_json(&id, s)).into_response(),
        None => error(
            404,
            "NOT_FOUND",
            format!("Secret [projects/{project}/secrets/{id}] not found."),
        ),
    }
}

async fn version(
    State(fake): State<Fake>,
    Path((project, id, version)): Path<(String, String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    let what = format!("version {project}/{id}/{version} {}", query_text(&q));
    if let Some(r) = gate(&fake, what).await {
        return r;
    }
    let (version, access) = match version.strip_suffix(":access") {
        Some(v) => (v.to_owned(), true),
        None => (version, false),
    };
    let inner = fake.lock();
    let Some(s) = inner.secrets.get(&id).filter(|_| project == PROJECT) else {
        return error(
            404,
            "NOT_FOUND",
            format!("Secret [projects/{project}/secrets/{id}] not found."),
        );
    };
    // `latest` is the most recently created version, whatever its state.
    let n = if version == "latest" {
        s.versions.len()
    } else {
        version.parse::<usize>().unwrap_or(0)
    };
    let Some(v) = n.checked_sub(1).and_then(|i| s.versions.get(i)) else {
        return error(
            404,
            "NOT_FOUND",
            format!(
                "Secret Version [projects/{PROJECT}/secrets/{id}/versions/{version}] not found."
            ),
        );
    };
    if !access {
        return axum::Json(version_json(&id, n, v, int_enums(&q))).into_response();
    }
    if v.state != VersionState::Enabled {
        return error(
            400,
            "FAILED_PRECONDITION",
            format!(
                "Secret Version [projects/{PROJECT}/secrets/{id}/versions/{n}] is in {} state.",
                v.state.as_str()
            ),
        );
    }
    axum::Json(json!({
        "name": format!("projects/{PROJECT}/secrets/{id}/versions/{n}"),
        "payload": {"data": base64::engine::general_purpose::STANDARD.encode(&v.data)},
    }))
    .into_response()
}

async fn unknown_route(uri: axum::http::Uri) -> Response {
    error(404, "NOT_FOUND", format!("no route {uri}"))
}

/// A running fake server over a [`Fake`]'s state. Dropping it without [`Server::stop`] leaves
/// it serving until the runtime ends.
#[derive(Debug)]
pub struct Server {
    addr: SocketAddr,
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Server {
    /// Serves `fake` on `addr` (port 0: any free port). Binding the address a stopped server
    /// just had is retried for up to 5 s.
    pub async fn start(fake: &Fake, addr: SocketAddr) -> std::io::Result<Server> {
        let mut tries = 0;
        let listener = loop {
            match TcpListener::bind(addr).await {
                Ok(l) => break l,
                Err(e) if tries < 50 && e.kind() == std::io::ErrorKind::AddrInUse => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        };
        let addr = listener.local_addr()?;
        let app = Router::new()
            .route("/v1/projects/{project}/secrets", get(list_secrets))
            .route("/v1/projects/{project}/secrets/{secret}", get(get_secret))
            .route(
                "/v1/projects/{project}/secrets/{secret}/versions/{version}",
                get(version),
            )
            .fallback(unknown_route)
            .with_state(fake.clone());
        let (shutdown, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Server {
            addr,
            shutdown,
            task,
        })
    }

    /// The address it serves on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Its endpoint for the client (`http://<addr>`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the server gracefully (requests in flight finish; stalled ones wait for the stall
    /// to end) and waits, up to 10 s, until its port and connections are closed.
    pub async fn stop(self) -> std::io::Result<()> {
        let _ = self.shutdown.send(());
        match tokio::time::timeout(Duration::from_secs(10), self.task).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(std::io::Error::other(e)),
            Err(_) => Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the fake server did not stop within 10 s",
            )),
        }
    }
}
