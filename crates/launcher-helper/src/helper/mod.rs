//! The helper's state and operations: the launcher credential it holds, a machine login in
//! progress, and the sessions (process trees rooted at registered processes, each with its own
//! key made here). Each operation takes the identified [`Caller`] and decides from where the
//! caller stands ([`Membership`], decided in one place: [`Helper::membership`]) what it may have
//! signed. This module holds the state and the dispatch; the operations are by area in
//! `login`, `credential`, `sessions`, `signing` and `renewal`. Every time read goes through the
//! injected [`Clock`].
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
use std::time::Duration;

use chrono::{DateTime, Utc};

use countersign_broker_client::{Auth, BrokerClient, BrokerError};
use countersign_common::wire;
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
use serde_json::json;
use zeroize::Zeroizing;

use crate::cgroup::Cgroups;
use crate::clock::{Clock, SystemClock, later, remaining};
use crate::keys::{AwsLc, Claims, Keys};
use crate::peer::{Caller, Peer};
use crate::procfs::{ProcId, Procfs, WalkEnd};
use crate::store::{CredentialStore, Stored};
use crate::tracker::{Members, Owner};

mod credential;
mod login;
mod renewal;
mod sessions;
mod signing;

use renewal::{refresh_after, renew_after};

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
    clock: Arc<dyn Clock>,
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
    next_refresh: Option<DateTime<Utc>>,
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
    next_renewal: Option<DateTime<Utc>>,
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
    fn info(&self, now: DateTime<Utc>) -> CredentialInfo {
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
                .and_then(|e| remaining(now, e))
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

/// An instant of a broker answer as the broker writes it: the text the helper keeps, stores
/// and reports.
fn rfc3339(t: countersign_common::Time) -> String {
    wire::rfc3339(&t)
}

impl Helper {
    /// A helper for `cfg`, loading the credential stored for this broker, if any.
    ///
    /// # Errors
    /// When the broker URL is not usable, or a stored credential cannot be read.
    pub fn new(cfg: HelperConfig) -> anyhow::Result<Self> {
        let broker = BrokerClient::new(
            &cfg.broker_url,
            cfg.http_timeout,
            concat!("countersign-launcher/", env!("CARGO_PKG_VERSION")),
        )?;
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
                    // Due at once.
                    next_refresh: token.as_ref().map(|_| DateTime::<Utc>::MIN_UTC),
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
            clock: Arc::new(SystemClock),
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

    /// The same helper reading the time from `clock` instead of this machine's (tests).
    #[must_use]
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// Now, by the helper's clock.
    fn now(&self) -> DateTime<Utc> {
        self.clock.now()
    }

    /// Seconds since the epoch, by the helper's clock.
    fn now_unix(&self) -> i64 {
        self.now().timestamp()
    }

    /// `by` from now, by the helper's clock.
    fn after(&self, by: Duration) -> DateTime<Utc> {
        later(self.now(), by)
    }

    /// Time left until an RFC 3339 instant (zero once passed), by the helper's clock.
    fn remaining(&self, rfc3339: &str) -> Option<Duration> {
        remaining(self.now(), rfc3339)
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
            credential: st.credential.as_ref().map(|h| h.info(self.now())),
            login_pending: st.login.is_some(),
            caller: CallerInfo {
                pid: caller.id.pid,
                standing: m.standing(),
                session,
            },
            sessions,
        }
    }
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
