//! The helper's state and operations: the launcher credential it holds, a machine login in
//! progress, and the sessions (process trees rooted at registered processes, each with its own
//! key made here). Each operation takes the identified [`Caller`] and decides from where the
//! caller stands ([`Membership`]) what it may have signed.
//!
//! Rules (docs/launcher-helper.md has the whole protocol):
//! - session proofs and secret request objects are signed only for a process inside that
//!   session's tree, and only once its enrollment succeeded (`NOT_A_SESSION`, `NOT_ENROLLED`);
//! - launcher proofs, for the four operator routes only (`BAD_REQUEST`), and like every
//!   launcher-level operation (logins, logout, registering a session) only for a caller outside
//!   every session (`IN_SESSION`), where a caller whose ancestry cannot be followed to the root,
//!   or that was left behind by an ended session, counts as inside;
//! - nothing is signed without a credential (`NO_CREDENTIAL`).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use countersign_launcher_proto::broker::{Auth, BrokerClient, BrokerError};
use countersign_launcher_proto::messages::{
    CallerInfo, CredentialInfo, CredentialKind, LoggedOut, LoginProgress, LoginStart, LoginStarted,
    LoginState, PROTOCOL_VERSION, Register, SessionInfo, SessionState, SignProof, SignRequest,
    SignedProof, SignedRequest, Standing, StatusInfo, TokenLogin, Unregistered,
};
use countersign_launcher_proto::{HelperCode, HelperError, Request, Response, Secret, routes};
use countersign_proto::claims::{
    self, AuthorizationDetail, MachineLoginClaims, ProofClaims, SecretRequestClaims,
    TokenLoginClaims,
};
use countersign_proto::jws::Header;
use countersign_proto::{SigningKey, b64};
use serde::Deserialize;
use serde_json::json;
use zeroize::Zeroizing;

use crate::cgroup::Cgroups;
use crate::keys::{AwsLc, Claims, Keys};
use crate::peer::{Caller, Peer};
use crate::procfs::{ProcId, Procfs, WalkEnd};
use crate::store::{CredentialStore, Stored};
use crate::tracker::{Members, Owner};

/// How the helper is set up.
#[derive(Debug, Clone)]
pub struct HelperConfig {
    /// The broker's public URL.
    pub broker_url: String,
    /// The approval console's address, shown to a person logging in.
    pub console_url: Option<String>,
    /// Where the launcher credential is kept.
    pub state_dir: PathBuf,
    /// Keep the launcher credential in memory only (log in again after every restart).
    pub no_store: bool,
    /// This machine's host name, as logins and runtime ids name it.
    pub host: String,
    /// Each call to the broker is bounded by this.
    pub http_timeout: Duration,
    /// How often roots are checked, leases renewed when due, and a service login refreshed.
    pub tick: Duration,
    /// The `/proc` to read (a test may lay out its own).
    pub procfs: PathBuf,
    /// Whether each session gets its own cgroup v2 directory (see [`SessionCgroups`]).
    pub session_cgroups: SessionCgroups,
    /// Where session cgroups are made [default: the helper's own cgroup v2 directory].
    pub cgroup_dir: Option<PathBuf>,
}

/// Whether the helper puts each session in a cgroup of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SessionCgroups {
    /// Where the helper can make one (it proves it at start); else process snapshots only.
    #[default]
    Auto,
    /// Always: the helper does not start where it cannot make one.
    Require,
    /// Never: process snapshots only.
    Off,
}

impl HelperConfig {
    /// Defaults for a broker and state directory.
    pub fn new(broker_url: &str, state_dir: impl Into<PathBuf>) -> Self {
        Self {
            broker_url: broker_url.to_owned(),
            console_url: None,
            state_dir: state_dir.into(),
            no_store: false,
            host: local_host(),
            http_timeout: Duration::from_secs(20),
            tick: Duration::from_millis(500),
            procfs: PathBuf::from("/proc"),
            session_cgroups: SessionCgroups::Auto,
            cgroup_dir: None,
        }
    }
}

/// This machine's host name.
#[must_use]
pub fn local_host() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_owned())
}

/// Where a caller stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Membership {
    /// Inside the session rooted at this process (the nearest registered ancestor).
    Session(ProcId),
    /// A process that was in a session when it ended (or descends from one).
    Former,
    /// Its whole ancestry is known and no session is in it.
    Outside,
    /// Its ancestry cannot be followed to the root.
    Unknown(WalkEnd),
}

impl Membership {
    fn standing(self) -> Standing {
        match self {
            Membership::Session(_) => Standing::Session,
            Membership::Former => Standing::FormerSession,
            Membership::Outside => Standing::Outside,
            Membership::Unknown(_) => Standing::Unknown,
        }
    }
}

/// The helper.
#[derive(Debug)]
pub struct Helper {
    cfg: HelperConfig,
    broker: BrokerClient,
    procfs: Procfs,
    cgroups: Option<Cgroups>,
    store: CredentialStore,
    uid: u32,
    keys: Arc<dyn Keys>,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    credential: Option<Held>,
    login: Option<PendingLogin>,
    sessions: BTreeMap<ProcId, Session>,
    /// Every process seen inside a session, live or ended (sticky until it exits).
    members: Members,
    /// The cgroups of ended sessions that still hold processes.
    former_cgroups: Vec<String>,
    serial: u64,
}

/// The launcher credential held.
#[derive(Debug, Clone)]
struct Held {
    id: String,
    key: Arc<SigningKey>,
    kind: CredentialKind,
    host: String,
    login: Option<String>,
    service: Option<String>,
    expires_at: Option<String>,
    token: Option<TokenSource>,
    next_refresh: Option<Instant>,
    refreshing: bool,
}

#[derive(Debug, Clone)]
enum TokenSource {
    File(PathBuf),
    Inline(Secret),
}

#[derive(Debug)]
struct PendingLogin {
    key: Arc<SigningKey>,
    pending_id: Zeroizing<String>,
    login: String,
    host: String,
}

#[derive(Debug)]
struct Session {
    root: ProcId,
    /// The session's cgroup (as `/proc/<pid>/cgroup` names it), when it has one.
    cgroup: Option<String>,
    serial: u64,
    key: Arc<SigningKey>,
    runtime_id: String,
    session_id: Option<String>,
    state: SState,
    next_renewal: Option<Instant>,
    renewing: bool,
}

#[derive(Debug, Clone)]
enum SState {
    Enrolling,
    Enrolled {
        enrollment_id: String,
        lease_expires_at: String,
    },
    Failed {
        error: String,
        broker_code: Option<String>,
    },
    Ended {
        enrollment_id: String,
        error: String,
        broker_code: Option<String>,
    },
}

impl Session {
    fn info(&self) -> SessionInfo {
        let (state, enrollment_id, lease, error, broker_code) = match &self.state {
            SState::Enrolling => (SessionState::Enrolling, None, None, None, None),
            SState::Enrolled {
                enrollment_id,
                lease_expires_at,
            } => (
                SessionState::Enrolled,
                Some(enrollment_id.clone()),
                Some(lease_expires_at.clone()),
                None,
                None,
            ),
            SState::Failed { error, broker_code } => (
                SessionState::Failed,
                None,
                None,
                Some(error.clone()),
                broker_code.clone(),
            ),
            SState::Ended {
                enrollment_id,
                error,
                broker_code,
            } => (
                SessionState::Ended,
                Some(enrollment_id.clone()),
                None,
                Some(error.clone()),
                broker_code.clone(),
            ),
        };
        SessionInfo {
            root_pid: self.root.pid,
            runtime_id: self.runtime_id.clone(),
            state,
            enrollment_id,
            lease_expires_at: lease,
            session_id: self.session_id.clone(),
            error,
            broker_code,
        }
    }

    fn enrollment_id(&self) -> Option<&str> {
        match &self.state {
            SState::Enrolled { enrollment_id, .. } => Some(enrollment_id),
            _ => None,
        }
    }
}

impl Held {
    fn info(&self) -> CredentialInfo {
        CredentialInfo {
            credential_id: self.id.clone(),
            kind: self.kind,
            host: self.host.clone(),
            login: self.login.clone(),
            service: self.service.clone(),
            expires_at: self.expires_at.clone(),
            expired: self
                .expires_at
                .as_deref()
                .and_then(remaining)
                .is_some_and(|d| d.is_zero()),
        }
    }
}

fn err(code: HelperCode, msg: impl Into<String>) -> HelperError {
    HelperError::new(code, msg)
}

fn bad(msg: impl Into<String>) -> HelperError {
    err(HelperCode::BadRequest, msg)
}

fn from_broker(code: HelperCode, what: &str, e: &BrokerError) -> HelperError {
    err(code, format!("{what}: {e}")).with_broker_code(e.code.clone())
}

fn sign_err(_: countersign_proto::JwsError) -> HelperError {
    err(HelperCode::Sign, "signing failed")
}

/// Seconds since the epoch.
fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// Time left until an RFC 3339 instant (zero once passed), by this machine's clock.
fn remaining(rfc3339: &str) -> Option<Duration> {
    let at = chrono::DateTime::parse_from_rfc3339(rfc3339).ok()?;
    let left = at.timestamp_millis() - chrono::Utc::now().timestamp_millis();
    Some(Duration::from_millis(
        u64::try_from(left.max(0)).unwrap_or(0),
    ))
}

/// When to renew a lease that has `left` to run: halfway, at least a second from now.
fn renew_after(left: Option<Duration>) -> Duration {
    (left.unwrap_or(Duration::from_secs(60)) / 2).max(Duration::from_secs(1))
}

fn check_bh(bh: Option<&str>) -> Result<(), HelperError> {
    match bh {
        None => Ok(()),
        Some(h) if b64::decode(h).is_ok_and(|d| d.len() == 32) => Ok(()),
        Some(_) => Err(bad(
            "bh must be the base64url SHA-256 (32 bytes) of the request body",
        )),
    }
}

fn valid_secret_name(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_uppercase()
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
}

fn valid_session_id(s: &str) -> bool {
    !s.is_empty()
        && s.chars().count() <= 128
        && !s.chars().any(|c| c.is_whitespace() || c.is_control())
}

fn valid_host(h: &str) -> bool {
    !h.is_empty() && h.len() <= 253 && !h.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A session label reduced to `[A-Za-z0-9._-]`, at most 40 characters.
fn clean_label(l: &str) -> String {
    l.chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(40)
        .collect()
}

#[derive(Deserialize)]
struct Enrolled {
    enrollment_id: String,
    lease_expires_at: String,
}

#[derive(Deserialize)]
struct Renewed {
    lease_expires_at: String,
}

#[derive(Deserialize)]
struct LoginStartAnswer {
    pending_id: String,
    code: String,
}

#[derive(Deserialize)]
struct PollAnswer {
    state: String,
    #[serde(default)]
    credential_id: Option<String>,
    #[serde(default)]
    expires_at: Option<String>,
}

#[derive(Deserialize)]
struct TokenLoginAnswer {
    credential_id: String,
    expires_at: String,
}

impl Helper {
    /// A helper for `cfg`, loading the credential stored for this broker, if any.
    ///
    /// # Errors
    /// When the broker URL is not usable, or a stored credential cannot be read.
    pub fn new(cfg: HelperConfig) -> anyhow::Result<Self> {
        let broker = BrokerClient::new(&cfg.broker_url, cfg.http_timeout)?;
        let store = CredentialStore::new(&cfg.state_dir);
        let mut state = State::default();
        let stored = if cfg.no_store { None } else { store.load()? };
        if let Some(stored) = stored {
            if stored.broker_url.trim_end_matches('/') == broker.base_url() {
                let token = stored
                    .token_file
                    .as_ref()
                    .map(|f| TokenSource::File(PathBuf::from(f)));
                state.credential = Some(Held {
                    id: stored.credential_id.clone(),
                    key: Arc::new(stored.key()?),
                    kind: stored.kind,
                    host: stored.host.clone(),
                    login: stored.login.clone(),
                    service: stored.service.clone(),
                    next_refresh: token.as_ref().map(|_| Instant::now()),
                    expires_at: stored.expires_at.clone(),
                    token,
                    refreshing: false,
                });
                tracing::info!(credential_id = %stored.credential_id, "loaded the stored launcher credential");
            } else {
                tracing::warn!(
                    stored_for = %stored.broker_url,
                    "the stored launcher credential is for another broker; holding none"
                );
            }
        }
        let cgroups = match cfg.session_cgroups {
            SessionCgroups::Off => None,
            mode => {
                let found = Cgroups::detect(&cfg.procfs, cfg.cgroup_dir.as_deref());
                match &found {
                    Some(c) => {
                        tracing::info!(dir = %c.dir().display(), "each session gets a cgroup of its own");
                        // Sessions of an earlier run of the helper: their processes stay out
                        // of launcher signing until they exit.
                        state.former_cgroups = c.existing();
                    }
                    None if mode == SessionCgroups::Require => anyhow::bail!(
                        "no cgroup v2 directory can be made for sessions (--session-cgroups require)"
                    ),
                    None => tracing::info!(
                        "no cgroup v2 directory can be made here: sessions are followed by process snapshots only"
                    ),
                }
                found
            }
        };
        Ok(Self {
            cgroups,
            procfs: Procfs::new(&cfg.procfs),
            uid: nix::unistd::geteuid().as_raw(),
            keys: Arc::new(AwsLc),
            broker,
            store,
            cfg,
            state: Mutex::new(state),
        })
    }

    /// The same helper making its keys and signing through `keys` instead of
    /// [`AwsLc`]. Tests only: a key source that fails shows `KEYGEN` and `SIGN`.
    #[must_use]
    pub fn with_keys(mut self, keys: Arc<dyn Keys>) -> Self {
        self.keys = keys;
        self
    }

    fn generate(&self, what: &str) -> Result<SigningKey, HelperError> {
        self.keys.generate().map_err(|_| {
            err(
                HelperCode::Keygen,
                format!("the {what} key could not be made"),
            )
        })
    }

    fn sign(
        &self,
        key: &SigningKey,
        header: &Header,
        claims: Claims<'_>,
    ) -> Result<String, HelperError> {
        self.keys.sign(key, header, claims).map_err(sign_err)
    }

    fn proof(
        &self,
        key: &SigningKey,
        typ: &str,
        kid: &str,
        method: &str,
        url: &str,
        bh: Option<String>,
    ) -> Result<String, HelperError> {
        let claims = ProofClaims {
            htm: method.to_owned(),
            htu: url.to_owned(),
            iat: now_unix(),
            jti: claims::new_jti().map_err(sign_err)?,
            bh,
        };
        self.sign(key, &Header::with_kid(typ, kid), Claims::Proof(&claims))
    }

    fn st(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &HelperConfig {
        &self.cfg
    }

    /// The `/proc` view in use.
    #[must_use]
    pub fn procfs(&self) -> &Procfs {
        &self.procfs
    }

    /// The helper's own uid (only peers of this uid are served).
    #[must_use]
    pub fn uid(&self) -> u32 {
        self.uid
    }

    /// Answers one request line from `peer`: parse (`BAD_REQUEST`), identify the caller
    /// (`PEER_UNIDENTIFIED`), then the operation.
    pub async fn handle_line(
        self: &Arc<Self>,
        peer: &Result<Peer, HelperError>,
        line: &[u8],
    ) -> Response {
        let req = match Request::parse_line(line) {
            Ok(r) => r,
            Err(e) => return e.into(),
        };
        let caller = match peer {
            Ok(p) => match p.identify(&self.procfs) {
                Ok(c) => c,
                Err(e) => return e.into(),
            },
            Err(e) => return e.clone().into(),
        };
        let op = req.op();
        let answer = self.handle(&caller, req).await;
        match &answer {
            Ok(_) => tracing::debug!(op, pid = caller.id.pid, "answered"),
            Err(e) => {
                tracing::info!(op, pid = caller.id.pid, code = %e.code, error = %e.error, "refused")
            }
        }
        answer.unwrap_or_else(Response::Error)
    }

    /// Runs one request for an identified caller.
    ///
    /// # Errors
    /// The helper's refusal.
    pub async fn handle(
        self: &Arc<Self>,
        caller: &Caller,
        req: Request,
    ) -> Result<Response, HelperError> {
        let m = self.membership(caller);
        match req {
            Request::Status => Ok(Response::Status(Box::new(self.status(caller, m)))),
            Request::LoginStart(a) => self.login_start(m, a).await.map(Response::LoginStarted),
            Request::LoginPoll => self.login_poll(m).await.map(Response::Login),
            Request::TokenLogin(a) => self.token_login(m, a).await.map(Response::Credential),
            Request::Logout => self.logout(m).map(Response::LoggedOut),
            Request::Register(a) => self.register(caller, m, a).await.map(Response::Registered),
            Request::Unregister => self.unregister(m).await.map(Response::Unregistered),
            Request::SignProof(a) => self.sign_session_proof(m, &a).map(Response::Proof),
            Request::SignRequest(a) => self.sign_request(m, a).map(Response::SignedRequest),
            Request::SignLauncherProof(a) => self.sign_launcher_proof(m, &a).map(Response::Proof),
        }
    }

    /// Where `caller` stands: the session it is in, a leftover of an ended session, outside,
    /// or unknown. The one place this is decided. In order: its cgroup (a live session's, or
    /// any session cgroup: a leftover); then its ancestry, nearest first, against the sessions'
    /// roots and every process remembered inside a session. Before answering outside or
    /// unknown, the remembered processes are refreshed from `/proc` and the question asked
    /// again. A caller found inside a live session is remembered (sticky) from then on.
    #[must_use]
    pub fn membership(&self, caller: &Caller) -> Membership {
        match self.decide(caller) {
            m @ (Membership::Session(_) | Membership::Former) => m,
            Membership::Outside | Membership::Unknown(_) => {
                self.refresh_members();
                self.decide(caller)
            }
        }
    }

    fn decide(&self, caller: &Caller) -> Membership {
        let mut st = self.st();
        if let (Some(cg), Some(cgroups)) = (&caller.cgroup, &self.cgroups) {
            if let Some(root) = st.sessions.values().find_map(|s| {
                s.cgroup
                    .as_deref()
                    .filter(|c| Cgroups::within(cg, c))
                    .map(|_| s.root)
            }) {
                st.members.insert(caller.id, Owner::Session(root));
                return Membership::Session(root);
            }
            if cgroups.in_any_session(cg) {
                st.members.insert(caller.id, Owner::Former);
                return Membership::Former;
            }
        }
        for (i, p) in caller.ancestry.chain.iter().enumerate() {
            let found = if st.sessions.contains_key(p) {
                Membership::Session(*p)
            } else {
                match st.members.get(*p) {
                    Some(Owner::Session(root)) if st.sessions.contains_key(&root) => {
                        Membership::Session(root)
                    }
                    Some(_) => Membership::Former,
                    None => continue,
                }
            };
            let owner = match found {
                Membership::Session(root) => Owner::Session(root),
                _ => Owner::Former,
            };
            // What lies between the caller and the member found is inside too.
            for q in caller.ancestry.chain.iter().take(i + 1) {
                st.members.insert(*q, owner);
            }
            return found;
        }
        match caller.ancestry.end {
            WalkEnd::Root => Membership::Outside,
            other => Membership::Unknown(other),
        }
    }

    /// Refreshes the processes remembered inside sessions from a snapshot of `/proc`.
    fn refresh_members(&self) {
        let snapshot = self.procfs.snapshot();
        self.st().members.refresh(&snapshot);
    }

    fn require_outside(m: Membership, what: &str) -> Result<(), HelperError> {
        let why = match m {
            Membership::Outside => return Ok(()),
            Membership::Session(_) => "the caller is inside a registered session's process tree",
            Membership::Former => "the caller was started inside a session that has since ended",
            Membership::Unknown(end) => {
                return Err(err(
                    HelperCode::InSession,
                    format!(
                        "{what} is refused: the caller's ancestry cannot be followed to the root ({}), so it may be inside a session",
                        end.why()
                    ),
                ));
            }
        };
        Err(err(
            HelperCode::InSession,
            format!("{what} is refused: {why}"),
        ))
    }

    fn require_session(m: Membership) -> Result<ProcId, HelperError> {
        match m {
            Membership::Session(root) => Ok(root),
            Membership::Former => Err(err(
                HelperCode::NotASession,
                "the caller's session has ended",
            )),
            Membership::Outside | Membership::Unknown(_) => Err(err(
                HelperCode::NotASession,
                "the caller descends from no registered session",
            )),
        }
    }

    fn held(&self) -> Result<Held, HelperError> {
        self.st().credential.clone().ok_or_else(|| {
            err(
                HelperCode::NoCredential,
                "this helper holds no launcher credential: log the machine in first (`countersign login`)",
            )
        })
    }

    // ----- status -----

    fn status(&self, caller: &Caller, m: Membership) -> StatusInfo {
        let st = self.st();
        let session = match m {
            Membership::Session(root) => st.sessions.get(&root).map(Session::info),
            _ => None,
        };
        let sessions = if m == Membership::Outside {
            st.sessions.values().map(Session::info).collect()
        } else {
            Vec::new()
        };
        StatusInfo {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            protocol: PROTOCOL_VERSION,
            broker_url: self.broker.base_url().to_owned(),
            console_url: self.cfg.console_url.clone(),
            credential: st.credential.as_ref().map(Held::info),
            login_pending: st.login.is_some(),
            caller: CallerInfo {
                pid: caller.id.pid,
                standing: m.standing(),
                session,
            },
            sessions,
        }
    }

    // ----- logins -----

    async fn login_start(&self, m: Membership, a: LoginStart) -> Result<LoginStarted, HelperError> {
        let login = a.login.trim().to_ascii_lowercase();
        if login.len() > 254
            || !login.contains('@')
            || login.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(bad("login must be the person's e-mail address"));
        }
        let host = a.host.unwrap_or_else(|| self.cfg.host.clone());
        if !valid_host(&host) {
            return Err(bad(
                "host must be 1 to 253 characters without whitespace or control characters",
            ));
        }
        Self::require_outside(m, "a machine login")?;
        let key = self.generate("machine")?;
        let iat = now_unix();
        let request = self.sign(
            &key,
            &Header::with_jwk(claims::TYP_MACHINE_LOGIN, key.public_jwk()),
            Claims::MachineLogin(&MachineLoginClaims {
                iat,
                exp: iat + claims::REQUEST_MAX_LIFETIME_SECONDS,
                jti: claims::new_jti().map_err(sign_err)?,
                login_hint: login.clone(),
                host: host.clone(),
                authorization_details: None,
            }),
        )?;
        let body = serde_json::to_vec(&json!({ "request": request }))
            .map_err(|_| err(HelperCode::LoginFailed, "could not build the login body"))?;
        let answer = self
            .broker
            .call("POST", "/v1/launcher-credentials", Some(&body), Auth::None)
            .await
            .map_err(|e| from_broker(HelperCode::LoginFailed, "machine login", &e))?;
        let started: LoginStartAnswer = answer
            .json()
            .map_err(|e| from_broker(HelperCode::LoginFailed, "machine login", &e))?;
        self.st().login = Some(PendingLogin {
            key: Arc::new(key),
            pending_id: Zeroizing::new(started.pending_id),
            login: login.clone(),
            host: host.clone(),
        });
        tracing::info!(%login, %host, "machine login started");
        Ok(LoginStarted {
            code: started.code,
            login,
            host,
            console_url: self.cfg.console_url.clone(),
        })
    }

    async fn login_poll(&self, m: Membership) -> Result<LoginProgress, HelperError> {
        Self::require_outside(m, "a machine login")?;
        let (pending_id, key, login, host) = {
            let st = self.st();
            let p = st.login.as_ref().ok_or_else(|| {
                err(
                    HelperCode::LoginFailed,
                    "no machine login is in progress: start one",
                )
            })?;
            (
                p.pending_id.clone(),
                p.key.clone(),
                p.login.clone(),
                p.host.clone(),
            )
        };
        let answer = self
            .broker
            .call(
                "GET",
                &format!("/v1/launcher-credentials/{}", pending_id.as_str()),
                None,
                Auth::None,
            )
            .await
            .map_err(|e| from_broker(HelperCode::LoginFailed, "machine login poll", &e))?;
        let poll: PollAnswer = answer
            .json()
            .map_err(|e| from_broker(HelperCode::LoginFailed, "machine login poll", &e))?;
        let state = match poll.state.as_str() {
            "pending" => {
                return Ok(LoginProgress {
                    state: LoginState::Pending,
                    credential: None,
                });
            }
            "issued" => LoginState::Issued,
            "denied" => LoginState::Denied,
            "expired" => LoginState::Expired,
            other => {
                return Err(err(
                    HelperCode::LoginFailed,
                    format!("machine login poll: unexpected state {other:?}"),
                ));
            }
        };
        let same = |st: &State| {
            st.login
                .as_ref()
                .is_some_and(|p| p.pending_id.as_str() == pending_id.as_str())
        };
        if state != LoginState::Issued {
            let mut st = self.st();
            if same(&st) {
                st.login = None;
            }
            return Ok(LoginProgress {
                state,
                credential: None,
            });
        }
        let credential_id = poll.credential_id.ok_or_else(|| {
            err(
                HelperCode::LoginFailed,
                "machine login poll: issued without a credential id",
            )
        })?;
        let held = Held {
            id: credential_id,
            key,
            kind: CredentialKind::Person,
            host,
            login: Some(login),
            service: None,
            expires_at: poll.expires_at,
            token: None,
            next_refresh: None,
            refreshing: false,
        };
        self.save(&held).map_err(|e| {
            err(
                HelperCode::LoginFailed,
                format!("storing the credential: {e}"),
            )
        })?;
        let info = held.info();
        {
            let mut st = self.st();
            if same(&st) {
                st.login = None;
            }
            st.credential = Some(held);
        }
        tracing::info!(credential_id = %info.credential_id, "machine login approved; credential stored");
        Ok(LoginProgress {
            state,
            credential: Some(info),
        })
    }

    fn save(&self, held: &Held) -> anyhow::Result<()> {
        if self.cfg.no_store {
            return Ok(());
        }
        self.store.save(&Stored {
            version: 1,
            broker_url: self.broker.base_url().to_owned(),
            credential_id: held.id.clone(),
            kind: held.kind,
            host: held.host.clone(),
            login: held.login.clone(),
            service: held.service.clone(),
            expires_at: held.expires_at.clone(),
            token_file: match &held.token {
                Some(TokenSource::File(p)) => Some(p.display().to_string()),
                _ => None,
            },
            key_pkcs8: Stored::encode_key(&held.key)?,
        })
    }

    async fn token_login(
        &self,
        m: Membership,
        a: TokenLogin,
    ) -> Result<CredentialInfo, HelperError> {
        let service = a.service.trim().to_owned();
        if service.is_empty() || service.len() > 253 {
            return Err(bad("service must name the service"));
        }
        let source = match (a.token_file, a.token) {
            (Some(f), None) if std::path::Path::new(&f).is_absolute() => {
                TokenSource::File(PathBuf::from(f))
            }
            (Some(_), None) => return Err(bad("token_file must be an absolute path")),
            (None, Some(t)) => TokenSource::Inline(t),
            _ => return Err(bad("give exactly one of token_file and token")),
        };
        Self::require_outside(m, "a service login")?;
        // The same key logs in again (the broker extends its credential); another service, or
        // a person's machine, gets a new one.
        let reuse = self.st().credential.as_ref().and_then(|h| {
            (h.kind == CredentialKind::Service && h.service.as_deref() == Some(&service))
                .then(|| h.key.clone())
        });
        let key = match reuse {
            Some(k) => k,
            None => Arc::new(self.generate("machine")?),
        };
        let answer = self.token_login_call(&key, &service, &source).await?;
        let held = Held {
            id: answer.credential_id,
            key,
            kind: CredentialKind::Service,
            host: self.cfg.host.clone(),
            login: None,
            service: Some(service),
            next_refresh: Some(Instant::now() + refresh_after(Some(&answer.expires_at))),
            expires_at: Some(answer.expires_at),
            token: Some(source),
            refreshing: false,
        };
        self.save(&held).map_err(|e| {
            err(
                HelperCode::LoginFailed,
                format!("storing the credential: {e}"),
            )
        })?;
        let info = held.info();
        self.st().credential = Some(held);
        tracing::info!(credential_id = %info.credential_id, "service logged in with its token");
        Ok(info)
    }

    /// Logs a service in with its token file, as the helper's own start-up does.
    ///
    /// # Errors
    /// As the `token_login` operation.
    pub async fn login_with_token_file(
        &self,
        service: &str,
        file: &std::path::Path,
    ) -> Result<CredentialInfo, HelperError> {
        self.token_login(
            Membership::Outside,
            TokenLogin {
                service: service.to_owned(),
                token_file: Some(file.display().to_string()),
                token: None,
            },
        )
        .await
    }

    async fn token_login_call(
        &self,
        key: &SigningKey,
        service: &str,
        source: &TokenSource,
    ) -> Result<TokenLoginAnswer, HelperError> {
        let token = match source {
            TokenSource::Inline(t) => t.clone(),
            TokenSource::File(p) => Secret::new(
                std::fs::read_to_string(p)
                    .map_err(|e| {
                        err(
                            HelperCode::LoginFailed,
                            format!("cannot read the token file {}: {e}", p.display()),
                        )
                    })?
                    .trim()
                    .to_owned(),
            ),
        };
        let iat = now_unix();
        let request = self.sign(
            key,
            &Header::with_jwk(claims::TYP_TOKEN_LOGIN, key.public_jwk()),
            Claims::TokenLogin(&TokenLoginClaims {
                iat,
                exp: iat + claims::REQUEST_MAX_LIFETIME_SECONDS,
                jti: claims::new_jti().map_err(sign_err)?,
                authorization_details: vec![AuthorizationDetail::launcher_credential(service)],
            }),
        )?;
        let body = Zeroizing::new(
            serde_json::to_vec(&json!({ "token": token.expose(), "request": request }))
                .map_err(|_| err(HelperCode::LoginFailed, "could not build the login body"))?,
        );
        let answer = self
            .broker
            .call(
                "POST",
                "/v1/launcher-credentials/token",
                Some(&body),
                Auth::None,
            )
            .await
            .map_err(|e| from_broker(HelperCode::LoginFailed, "token login", &e))?;
        answer
            .json()
            .map_err(|e| from_broker(HelperCode::LoginFailed, "token login", &e))
    }

    fn logout(&self, m: Membership) -> Result<LoggedOut, HelperError> {
        Self::require_outside(m, "logging out")?;
        let held = self.st().credential.take();
        if self.cfg.no_store {
            return Ok(LoggedOut {
                credential_id: held.map(|h| h.id),
            });
        }
        self.store.remove().map_err(|e| {
            err(
                HelperCode::LoginFailed,
                format!("removing the stored credential: {e}"),
            )
        })?;
        Ok(LoggedOut {
            credential_id: held.map(|h| h.id),
        })
    }

    // ----- sessions -----

    async fn register(
        self: &Arc<Self>,
        caller: &Caller,
        m: Membership,
        a: Register,
    ) -> Result<SessionInfo, HelperError> {
        if let Some(s) = &a.session_id
            && !valid_session_id(s)
        {
            return Err(bad(
                "session_id must be at most 128 characters with no whitespace or control character",
            ));
        }
        Self::require_outside(m, "registering a session")?;
        let held = self.held()?;
        let key = self.generate("session")?;
        let root = caller.id;
        let (cgroup, descendants) = self.enclose(root);
        let mut runtime_id = format!("{}/pid-{}-{}", self.cfg.host, root.pid, root.start);
        if let Some(l) = a
            .label
            .as_deref()
            .map(clean_label)
            .filter(|l| !l.is_empty())
        {
            runtime_id.push('/');
            runtime_id.push_str(&l);
        }
        let serial = {
            let mut st = self.st();
            st.serial += 1;
            let serial = st.serial;
            st.members.insert(root, Owner::Session(root));
            for d in descendants {
                st.members.insert(d, Owner::Session(root));
            }
            st.sessions.insert(
                root,
                Session {
                    root,
                    cgroup,
                    serial,
                    key: Arc::new(key),
                    runtime_id,
                    session_id: a.session_id,
                    state: SState::Enrolling,
                    next_renewal: None,
                    renewing: false,
                },
            );
            serial
        };
        tracing::info!(pid = root.pid, "session registered; enrolling its key");
        if !a.wait {
            let me = self.clone();
            tokio::spawn(async move {
                let _ = me.enroll(root, serial, &held).await;
            });
            return self.session_info(root);
        }
        match self.enroll(root, serial, &held).await {
            Ok(info) => Ok(info),
            Err(e) => {
                let mut st = self.st();
                if st.sessions.get(&root).is_some_and(|s| s.serial == serial) {
                    Self::end_session(&mut st, root);
                }
                Err(e)
            }
        }
    }

    /// Puts a new session's root, and what it already runs, in a cgroup of the session's own
    /// where the helper can make one. Answers the cgroup, if made, and the root's descendants.
    fn enclose(&self, root: ProcId) -> (Option<String>, Vec<ProcId>) {
        let descendants = self.procfs.descendants(root);
        let Some(cgroups) = &self.cgroups else {
            return (None, descendants);
        };
        let name = format!("{}{}-{}", crate::cgroup::PREFIX, root.pid, root.start);
        let others: Vec<i32> = descendants.iter().map(|d| d.pid).collect();
        match cgroups.create(&name, root.pid, &others) {
            // The root must still be the process registering (not a reused pid).
            Ok(cg) if self.procfs.alive(root) => (Some(cg), descendants),
            Ok(cg) => {
                let _ = cgroups.remove_if_empty(&cg);
                (None, descendants)
            }
            Err(e) => {
                tracing::warn!(pid = root.pid, error = %e, "could not put the session in a cgroup of its own; following it by process snapshots only");
                (None, descendants)
            }
        }
    }

    /// Ends the session rooted at `root` in the helper: what it runs becomes leftovers of an
    /// ended session, never outside. Answers the session.
    fn end_session(st: &mut State, root: ProcId) -> Option<Session> {
        let s = st.sessions.remove(&root)?;
        st.members.end_session(root);
        if let Some(cg) = &s.cgroup {
            st.former_cgroups.push(cg.clone());
        }
        Some(s)
    }

    fn session_info(&self, root: ProcId) -> Result<SessionInfo, HelperError> {
        self.st()
            .sessions
            .get(&root)
            .map(Session::info)
            .ok_or_else(|| err(HelperCode::NotASession, "the session has ended"))
    }

    /// Enrolls a registered session's key under the launcher credential.
    async fn enroll(
        self: &Arc<Self>,
        root: ProcId,
        serial: u64,
        held: &Held,
    ) -> Result<SessionInfo, HelperError> {
        let body = {
            let st = self.st();
            let s = st
                .sessions
                .get(&root)
                .filter(|s| s.serial == serial)
                .ok_or_else(|| {
                    err(
                        HelperCode::EnrollFailed,
                        "the session ended before enrolling",
                    )
                })?;
            json!({
                "kind": "session",
                "runtime_id": s.runtime_id,
                "thumbprint": s.key.thumbprint(),
                "jwk": s.key.public_jwk(),
                "session_id": s.session_id,
            })
        };
        let result = self.enroll_call(held, &body).await;
        let mut st = self.st();
        let Some(s) = st.sessions.get_mut(&root).filter(|s| s.serial == serial) else {
            // The root exited while enrolling: end the enrollment just made.
            drop(st);
            if let Ok(e) = result {
                let me = self.clone();
                tokio::spawn(async move {
                    let _ = me.unenroll(&e.enrollment_id).await;
                });
            }
            return Err(err(
                HelperCode::EnrollFailed,
                "the session ended while enrolling",
            ));
        };
        match result {
            Ok(e) => {
                s.next_renewal = Some(Instant::now() + renew_after(remaining(&e.lease_expires_at)));
                s.state = SState::Enrolled {
                    enrollment_id: e.enrollment_id,
                    lease_expires_at: e.lease_expires_at,
                };
                tracing::info!(
                    pid = root.pid,
                    enrollment_id = s.enrollment_id().unwrap_or_default(),
                    "session enrolled"
                );
                Ok(s.info())
            }
            Err(e) => {
                s.state = SState::Failed {
                    error: e.error.clone(),
                    broker_code: e.broker_code.clone(),
                };
                tracing::warn!(pid = root.pid, error = %e.error, "session enrollment failed");
                Err(e)
            }
        }
    }

    async fn enroll_call(
        &self,
        held: &Held,
        body: &serde_json::Value,
    ) -> Result<Enrolled, HelperError> {
        let path = "/v1/enrollments";
        let bytes = serde_json::to_vec(body).map_err(|_| {
            err(
                HelperCode::EnrollFailed,
                "could not build the enrollment body",
            )
        })?;
        let p = self.proof(
            &held.key,
            claims::TYP_LAUNCHER_PROOF,
            &held.id,
            "POST",
            &self.broker.url(path),
            Some(claims::body_hash(&bytes)),
        )?;
        let answer = self
            .broker
            .call("POST", path, Some(&bytes), Auth::Proof(&p))
            .await
            .map_err(|e| from_broker(HelperCode::EnrollFailed, "enrollment", &e))?;
        answer
            .json()
            .map_err(|e| from_broker(HelperCode::EnrollFailed, "enrollment", &e))
    }

    /// Ends an enrollment at the broker (DELETE /v1/enrollments/{id}).
    async fn unenroll(&self, enrollment_id: &str) -> Result<(), HelperError> {
        let held = self.st().credential.clone().ok_or_else(|| {
            err(
                HelperCode::UnenrollFailed,
                "no launcher credential to unenroll with; the enrollment ends when its lease lapses",
            )
        })?;
        let path = format!("/v1/enrollments/{enrollment_id}");
        let p = self.proof(
            &held.key,
            claims::TYP_LAUNCHER_PROOF,
            &held.id,
            "DELETE",
            &self.broker.url(&path),
            None,
        )?;
        match self
            .broker
            .call("DELETE", &path, None, Auth::Proof(&p))
            .await
        {
            Ok(_) => {
                tracing::info!(enrollment_id, "session unenrolled");
                Ok(())
            }
            // Already gone at the broker: what unenrolling wanted.
            Err(e) if e.is("NOT_FOUND") => Ok(()),
            Err(e) => {
                tracing::warn!(enrollment_id, error = %e, "unenroll failed");
                Err(from_broker(
                    HelperCode::UnenrollFailed,
                    "unenrolling (the enrollment ends when its lease lapses)",
                    &e,
                ))
            }
        }
    }

    async fn unregister(&self, m: Membership) -> Result<Unregistered, HelperError> {
        let root = Self::require_session(m)?;
        // What the session started and left running stays out of launcher signing.
        self.refresh_members();
        let removed = Self::end_session(&mut self.st(), root);
        let enrollment_id = removed
            .as_ref()
            .and_then(|s| s.enrollment_id().map(str::to_owned));
        tracing::info!(pid = root.pid, "session unregistered");
        if let Some(id) = &enrollment_id {
            self.unenroll(id).await?;
        }
        Ok(Unregistered { enrollment_id })
    }

    /// The caller's enrolled session: its key and enrollment id.
    fn enrolled(&self, m: Membership) -> Result<(Arc<SigningKey>, String), HelperError> {
        let root = Self::require_session(m)?;
        let st = self.st();
        let s = st
            .sessions
            .get(&root)
            .ok_or_else(|| err(HelperCode::NotASession, "the session has ended"))?;
        match &s.state {
            SState::Enrolled { enrollment_id, .. } => Ok((s.key.clone(), enrollment_id.clone())),
            SState::Enrolling => Err(err(
                HelperCode::NotEnrolled,
                "the session's enrollment has not succeeded yet",
            )),
            SState::Failed { error, broker_code } => Err(err(
                HelperCode::NotEnrolled,
                format!("the session's enrollment failed: {error}"),
            )
            .with_broker_code(broker_code.clone())),
            SState::Ended {
                error, broker_code, ..
            } => Err(err(
                HelperCode::NotEnrolled,
                format!("the session's enrollment has ended: {error}"),
            )
            .with_broker_code(broker_code.clone())),
        }
    }

    fn sign_session_proof(&self, m: Membership, a: &SignProof) -> Result<SignedProof, HelperError> {
        if !routes::is_session_route(&a.method, &a.path) {
            return Err(bad(
                "a session proof is signed only for the session routes (see docs/launcher-helper.md)",
            ));
        }
        check_bh(a.bh.as_deref())?;
        let (key, enrollment_id) = self.enrolled(m)?;
        let url = self.broker.url(&a.path);
        let p = self.proof(
            &key,
            claims::TYP_SESSION_PROOF,
            &enrollment_id,
            &a.method,
            &url,
            a.bh.clone(),
        )?;
        Ok(SignedProof {
            proof: p,
            url,
            kid: enrollment_id,
        })
    }

    fn sign_request(&self, m: Membership, a: SignRequest) -> Result<SignedRequest, HelperError> {
        if a.secrets.is_empty() || a.secrets.len() > 100 {
            return Err(bad("secrets must name 1 to 100 secrets"));
        }
        if let Some(n) = a.secrets.iter().find(|n| !valid_secret_name(n)) {
            let shown: String = n.chars().take(40).collect();
            return Err(bad(format!(
                "{shown:?} is not a secret name (upper case, digits and _, starting with a letter)"
            )));
        }
        let reason_len = a.reason.chars().count();
        if a.reason.trim().is_empty() || reason_len > 1000 {
            return Err(bad("reason must be 1 to 1,000 characters"));
        }
        if a.lifetime_seconds == Some(0) {
            return Err(bad("lifetime_seconds must be positive"));
        }
        let (key, enrollment_id) = self.enrolled(m)?;
        let iat = now_unix();
        let request = self.sign(
            &key,
            &Header::with_kid(claims::TYP_SECRET_REQUEST, &enrollment_id),
            Claims::SecretRequest(&SecretRequestClaims {
                iat,
                exp: iat + claims::REQUEST_MAX_LIFETIME_SECONDS,
                jti: claims::new_jti().map_err(sign_err)?,
                aud: self.broker.base_url().to_owned(),
                authorization_details: a
                    .secrets
                    .iter()
                    .map(|n| AuthorizationDetail::agent_secret(n))
                    .collect(),
                reason: a.reason,
                lifetime_seconds: a.lifetime_seconds,
            }),
        )?;
        Ok(SignedRequest {
            request,
            enrollment_id,
            broker_url: self.broker.base_url().to_owned(),
        })
    }

    fn sign_launcher_proof(
        &self,
        m: Membership,
        a: &SignProof,
    ) -> Result<SignedProof, HelperError> {
        if !routes::is_operator_route(&a.method, &a.path) {
            return Err(bad(
                "a launcher proof is signed only for the four operator routes: GET /v1/operator/machines, POST /v1/operator/machines/{id}/revoke, GET /v1/operator/grants, POST /v1/operator/grants/{id}/revoke",
            ));
        }
        check_bh(a.bh.as_deref())?;
        Self::require_outside(m, "launcher signing")?;
        let held = self.held()?;
        let url = self.broker.url(&a.path);
        let p = self.proof(
            &held.key,
            claims::TYP_LAUNCHER_PROOF,
            &held.id,
            &a.method,
            &url,
            a.bh.clone(),
        )?;
        Ok(SignedProof {
            proof: p,
            url,
            kid: held.id,
        })
    }

    // ----- background -----

    /// One round of background work: sessions whose root exited end (and are unenrolled),
    /// leases due are renewed, leftovers of ended sessions that exited are forgotten, and a
    /// service login due is refreshed. Work that calls the broker runs in its own task.
    pub fn tick(self: &Arc<Self>) {
        let now = Instant::now();
        let mut gone = Vec::new();
        let mut due = Vec::new();
        let mut refresh = None;
        let snapshot = self.procfs.snapshot();
        {
            let mut st = self.st();
            // First what the sessions run now (while their roots' children still have them
            // as parent), then the roots that exited.
            st.members.refresh(&snapshot);
            let ended: Vec<ProcId> = st
                .sessions
                .keys()
                .filter(|root| {
                    !snapshot
                        .get(&root.pid)
                        .is_some_and(|s| s.start == root.start && !s.exited())
                })
                .copied()
                .collect();
            for root in ended {
                tracing::info!(pid = root.pid, "session root exited; ending the session");
                if let Some(id) = Self::end_session(&mut st, root)
                    .as_ref()
                    .and_then(Session::enrollment_id)
                {
                    gone.push(id.to_owned());
                }
            }
            if let Some(cgroups) = &self.cgroups {
                st.former_cgroups.retain(|cg| !cgroups.remove_if_empty(cg));
            }
            for s in st.sessions.values_mut() {
                if let (Some(id), Some(at)) = (s.enrollment_id(), s.next_renewal)
                    && at <= now
                    && !s.renewing
                {
                    due.push((s.root, s.serial, s.key.clone(), id.to_owned()));
                    s.renewing = true;
                }
            }
            if let Some(h) = st.credential.as_mut()
                && h.token.is_some()
                && !h.refreshing
                && h.next_refresh.is_some_and(|at| at <= now)
            {
                h.refreshing = true;
                refresh = Some(h.clone());
            }
        }
        for id in gone {
            let me = self.clone();
            tokio::spawn(async move {
                let _ = me.unenroll(&id).await;
            });
        }
        for (root, serial, key, id) in due {
            let me = self.clone();
            tokio::spawn(async move { me.renew(root, serial, key, id).await });
        }
        if let Some(h) = refresh {
            let me = self.clone();
            tokio::spawn(async move { me.refresh(h).await });
        }
    }

    async fn renew(&self, root: ProcId, serial: u64, key: Arc<SigningKey>, id: String) {
        let path = format!("/v1/enrollments/{id}/renew");
        let result = match self.proof(
            &key,
            claims::TYP_SESSION_PROOF,
            &id,
            "POST",
            &self.broker.url(&path),
            None,
        ) {
            Ok(p) => self
                .broker
                .call("POST", &path, None, Auth::Proof(&p))
                .await
                .and_then(|a| a.json::<Renewed>()),
            Err(e) => Err(BrokerError {
                status: None,
                code: None,
                message: e.error,
            }),
        };
        let mut st = self.st();
        let Some(s) = st.sessions.get_mut(&root).filter(|s| s.serial == serial) else {
            return;
        };
        s.renewing = false;
        match result {
            Ok(r) => {
                s.next_renewal = Some(Instant::now() + renew_after(remaining(&r.lease_expires_at)));
                s.state = SState::Enrolled {
                    enrollment_id: id,
                    lease_expires_at: r.lease_expires_at,
                };
            }
            Err(e) if e.is_terminal_renewal() => {
                tracing::warn!(enrollment_id = %id, error = %e, "lease renewal refused for good; the session's enrollment has ended");
                s.next_renewal = None;
                s.state = SState::Ended {
                    enrollment_id: id,
                    error: e.to_string(),
                    broker_code: e.code.clone(),
                };
            }
            Err(e) => {
                tracing::warn!(enrollment_id = %id, error = %e, "lease renewal failed; trying again");
                s.next_renewal = Some(Instant::now() + Duration::from_secs(5));
            }
        }
    }

    async fn refresh(&self, h: Held) {
        let (Some(service), Some(source)) = (h.service.clone(), h.token.clone()) else {
            return;
        };
        let result = self.token_login_call(&h.key, &service, &source).await;
        let updated = {
            let mut st = self.st();
            let Some(cur) = st.credential.as_mut().filter(|c| c.id == h.id) else {
                return;
            };
            cur.refreshing = false;
            match result {
                Ok(a) => {
                    cur.next_refresh = Some(Instant::now() + refresh_after(Some(&a.expires_at)));
                    cur.expires_at = Some(a.expires_at);
                    if a.credential_id != cur.id {
                        cur.id = a.credential_id;
                    }
                    Some(cur.clone())
                }
                Err(e) => {
                    tracing::warn!(error = %e.error, "service login refresh failed; trying again in 30 s");
                    cur.next_refresh = Some(Instant::now() + Duration::from_secs(30));
                    None
                }
            }
        };
        if let Some(h) = updated
            && let Err(e) = self.save(&h)
        {
            tracing::warn!(error = %e, "storing the refreshed credential failed");
        }
    }

    /// Ends every enrolled session at the broker (the helper is stopping and its keys die
    /// with it), each bounded by `grace`.
    pub async fn shutdown(&self, grace: Duration) {
        let ids: Vec<String> = {
            let mut st = self.st();
            let roots: Vec<ProcId> = st.sessions.keys().copied().collect();
            let ids = roots
                .into_iter()
                .filter_map(|root| Self::end_session(&mut st, root))
                .filter_map(|s| s.enrollment_id().map(str::to_owned))
                .collect();
            if let Some(cgroups) = &self.cgroups {
                st.former_cgroups.retain(|cg| !cgroups.remove_if_empty(cg));
            }
            ids
        };
        for id in ids {
            let _ = tokio::time::timeout(grace, self.unenroll(&id)).await;
        }
    }
}

/// When to log a service in again: at two thirds of the credential's remaining life, at least
/// ten seconds from now.
fn refresh_after(expires_at: Option<&str>) -> Duration {
    let left = expires_at
        .and_then(remaining)
        .unwrap_or(Duration::from_secs(300));
    (left * 2 / 3).max(Duration::from_secs(10))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::procfs::Ancestry;

    fn caller(chain: &[(i32, u64)], end: WalkEnd) -> Caller {
        let chain: Vec<ProcId> = chain
            .iter()
            .map(|&(pid, start)| ProcId { pid, start })
            .collect();
        Caller {
            id: chain[0],
            ancestry: Ancestry { chain, end },
            cgroup: None,
        }
    }

    fn helper() -> Arc<Helper> {
        let dir =
            std::env::temp_dir().join(format!("countersign-helper-unit-{}", std::process::id()));
        match Helper::new(HelperConfig::new("http://127.0.0.1:9", dir)) {
            Ok(h) => Arc::new(h),
            Err(e) => panic!("helper: {e}"),
        }
    }

    fn add_session(h: &Helper, root: ProcId, state: SState) {
        let key = SigningKey::generate().map(Arc::new);
        let Ok(key) = key else { panic!("keygen") };
        h.st().sessions.insert(
            root,
            Session {
                root,
                cgroup: None,
                serial: 1,
                key,
                runtime_id: "r".into(),
                session_id: None,
                state,
                next_renewal: None,
                renewing: false,
            },
        );
    }

    fn code<T: std::fmt::Debug>(r: Result<T, HelperError>) -> HelperCode {
        match r {
            Ok(v) => panic!("expected a refusal, got {v:?}"),
            Err(e) => e.code,
        }
    }

    #[tokio::test]
    async fn standing_decides_what_is_signed() {
        let h = helper();
        let root = ProcId { pid: 100, start: 5 };
        add_session(
            &h,
            root,
            SState::Enrolled {
                enrollment_id: "0f8fad5b-d9cb-469f-a165-70867728950e".into(),
                lease_expires_at: "2999-01-01T00:00:00Z".into(),
            },
        );
        let inside = caller(&[(102, 9), (101, 7), (100, 5), (1, 1)], WalkEnd::Root);
        let outside = caller(&[(200, 9), (1, 1)], WalkEnd::Root);
        assert_eq!(h.membership(&inside), Membership::Session(root));
        assert_eq!(h.membership(&outside), Membership::Outside);
        // Same pid, other start time: not the registered root.
        let reused = caller(&[(100, 6), (1, 1)], WalkEnd::Root);
        assert_eq!(h.membership(&reused), Membership::Outside);

        let proof_req = |path: &str| SignProof {
            method: "GET".into(),
            path: path.into(),
            bh: None,
        };
        let ok = h
            .handle(
                &inside,
                Request::SignProof(proof_req("/v1/enrollments/self")),
            )
            .await;
        assert!(matches!(ok, Ok(Response::Proof(_))), "{ok:?}");
        assert_eq!(
            code(
                h.handle(
                    &outside,
                    Request::SignProof(proof_req("/v1/enrollments/self"))
                )
                .await
            ),
            HelperCode::NotASession
        );
        assert_eq!(
            code(
                h.handle(
                    &inside,
                    Request::SignProof(proof_req("/v1/operator/machines"))
                )
                .await
            ),
            HelperCode::BadRequest
        );
        // Launcher signing: inside refused, outside needs a credential, bad route refused.
        assert_eq!(
            code(
                h.handle(
                    &inside,
                    Request::SignLauncherProof(proof_req("/v1/operator/machines"))
                )
                .await
            ),
            HelperCode::InSession
        );
        assert_eq!(
            code(
                h.handle(
                    &outside,
                    Request::SignLauncherProof(proof_req("/v1/operator/machines"))
                )
                .await
            ),
            HelperCode::NoCredential
        );
        assert_eq!(
            code(
                h.handle(
                    &outside,
                    Request::SignLauncherProof(proof_req("/v1/enrollments/self"))
                )
                .await
            ),
            HelperCode::BadRequest
        );
        for end in [WalkEnd::Unreadable, WalkEnd::Loop, WalkEnd::TooDeep] {
            let unknown = caller(&[(300, 9)], end);
            assert_eq!(
                code(
                    h.handle(
                        &unknown,
                        Request::SignLauncherProof(proof_req("/v1/operator/grants"))
                    )
                    .await
                ),
                HelperCode::InSession
            );
            assert_eq!(
                code(
                    h.handle(&unknown, Request::Register(Register::default()))
                        .await
                ),
                HelperCode::InSession
            );
        }
        // Registering from inside a session is launcher-level too.
        assert_eq!(
            code(
                h.handle(&inside, Request::Register(Register::default()))
                    .await
            ),
            HelperCode::InSession
        );
        // No credential: no session.
        assert_eq!(
            code(
                h.handle(&outside, Request::Register(Register::default()))
                    .await
            ),
            HelperCode::NoCredential
        );
    }

    #[tokio::test]
    async fn not_enrolled_until_enrolled() {
        let h = helper();
        let req = || {
            Request::SignRequest(SignRequest {
                secrets: vec!["A_B".into()],
                reason: "r".into(),
                lifetime_seconds: None,
            })
        };
        for (i, state) in [
            SState::Enrolling,
            SState::Failed {
                error: "x".into(),
                broker_code: Some("LAUNCHER_INVALID".into()),
            },
            SState::Ended {
                enrollment_id: "e".into(),
                error: "x".into(),
                broker_code: Some("ENROLLMENT_NOT_LIVE".into()),
            },
        ]
        .into_iter()
        .enumerate()
        {
            let root = ProcId {
                pid: 10 + i as i32,
                start: 1,
            };
            add_session(&h, root, state);
            let c = caller(&[(root.pid, 1), (1, 1)], WalkEnd::Root);
            assert_eq!(code(h.handle(&c, req()).await), HelperCode::NotEnrolled);
        }
        let c = caller(&[(10, 1), (1, 1)], WalkEnd::Root);
        let bad_name = Request::SignRequest(SignRequest {
            secrets: vec!["lower".into()],
            reason: "r".into(),
            lifetime_seconds: None,
        });
        assert_eq!(code(h.handle(&c, bad_name).await), HelperCode::BadRequest);
    }
}
