//! Core fixtures: the broker's domain core ([`Broker`]) on real storage (a fresh SQLite file in a
//! temporary directory, or a fresh PostgreSQL database), with a [`ManualClock`] and an in-memory
//! [`SecretStore`] double ([`MemoryStore`]), and helpers that drive the core as a client would:
//! signed machine-login objects, launcher and session proofs, signed secret requests, console
//! decisions, revocations, the clock and the sweep.
//!
//! PostgreSQL: [`CoreFixture::postgres`] creates a database on the server named by
//! `COUNTERSIGN_TEST_POSTGRES_URL`. Without it, it prints `skipped: …` and answers `None`, unless
//! `COUNTERSIGN_REQUIRE_POSTGRES=1`, when it panics so that CI fails.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Duration, Utc};
use countersign_broker_core::Broker;
use countersign_broker_core::broker::GrantListItem;
use countersign_broker_core::broker::{
    Approved, CreatedRequest, EnrollInput, Parts, ProofTarget, SweepReport,
};
use countersign_broker_core::clock::{Entropy, ManualClock, SystemEntropy, Time};
use countersign_broker_core::config::BrokerConfig;
use countersign_broker_core::error::{Error, ErrorCode};
use countersign_broker_core::exclusive::Exclusive;
use countersign_broker_core::ids::{
    ConfirmationCode, CredentialId, EnrollmentId, GrantId, Login, RecordId, RequestId, SecretName,
};
use countersign_broker_core::model::{
    Enrollment, Grant, LauncherCredential, Record, Request, RequestState,
};
use countersign_broker_core::policy::{PolicyEntry, Refusal, Tier};
use countersign_broker_core::seal::Sealer;
use countersign_broker_core::secrets::{
    Inspection, Listing, SecretStore, SecretValue, Settings, StoreError,
};
use countersign_broker_core::storage::Storage;
use countersign_broker_sql::{Backend, SqlStorage};
use countersign_proto::claims::{self, MachineLoginClaims, ProofClaims, SecretRequestClaims};
use countersign_proto::jws::{self, Header};
use countersign_proto::{AuthorizationDetail, SigningKey};
use sqlx::{Connection, Executor};
use zeroize::Zeroizing;

/// The broker's public URL in every core fixture (`aud` of secret requests, `htu` of proofs).
pub const PUBLIC_URL: &str = "https://broker.test";
/// Names the PostgreSQL server the fixtures create databases on.
pub const PG_URL_VAR: &str = "COUNTERSIGN_TEST_POSTGRES_URL";
/// `1` makes a missing [`PG_URL_VAR`] a failure instead of a skip.
pub const PG_REQUIRE_VAR: &str = "COUNTERSIGN_REQUIRE_POSTGRES";

/// A login from a string known to be one (panics otherwise).
pub fn login(s: &str) -> Login {
    Login::parse(s).unwrap_or_else(|| panic!("not a login: {s}"))
}

/// A secret name from a string known to be one (panics otherwise).
pub fn secret(s: &str) -> SecretName {
    SecretName::parse(s).unwrap_or_else(|_| panic!("not a secret name: {s}"))
}

// ---------------------------------------------------------------------------------------------
// The secret store double
// ---------------------------------------------------------------------------------------------

/// One secret of the [`MemoryStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSecret {
    pub owner: String,
    pub tier: Tier,
    pub value: String,
}

/// An in-memory stand-in for a cloud secret store: a map of name → (owner, tier, value). Every
/// present secret is served (the stores' own refusal rules have their own tests); an absent one
/// is `absent`. Values are read afresh at each release.
#[derive(Debug, Default)]
pub struct MemoryStore {
    secrets: Mutex<BTreeMap<SecretName, StoredSecret>>,
}

impl MemoryStore {
    fn map(&self) -> std::sync::MutexGuard<'_, BTreeMap<SecretName, StoredSecret>> {
        self.secrets.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Adds or replaces a secret.
    pub fn put(&self, name: &str, owner: &str, tier: Tier, value: &str) {
        self.map().insert(
            secret(name),
            StoredSecret {
                owner: owner.to_owned(),
                tier,
                value: value.to_owned(),
            },
        );
    }

    /// Changes a present secret's owner, tier or value (`None` keeps it). Answers whether the
    /// secret was present.
    pub fn update(
        &self,
        name: &str,
        owner: Option<&str>,
        tier: Option<Tier>,
        value: Option<&str>,
    ) -> bool {
        let mut map = self.map();
        let Some(s) = map.get_mut(&secret(name)) else {
            return false;
        };
        if let Some(o) = owner {
            s.owner = o.to_owned();
        }
        if let Some(t) = tier {
            s.tier = t;
        }
        if let Some(v) = value {
            s.value = v.to_owned();
        }
        true
    }

    /// Removes a secret (the store no longer has it).
    pub fn remove(&self, name: &str) -> Option<StoredSecret> {
        self.map().remove(&secret(name))
    }

    pub fn get(&self, name: &str) -> Option<StoredSecret> {
        self.map().get(&secret(name)).cloned()
    }

    fn entry(name: &SecretName, s: &StoredSecret) -> PolicyEntry {
        PolicyEntry {
            name: name.clone(),
            owner: login(&s.owner),
            tier: s.tier,
            resource_name: format!("agents/{}", name.stored_suffix()),
            issuer: None,
        }
    }
}

#[async_trait]
impl SecretStore for MemoryStore {
    fn settings(&self) -> Settings {
        Settings {
            store: "memory-test-store".into(),
            secrets_prefix: "agents/".into(),
            ..Settings::default()
        }
    }

    async fn list(&self) -> Result<Listing, StoreError> {
        Ok(Listing {
            served: self.map().iter().map(|(n, s)| Self::entry(n, s)).collect(),
            refused: Vec::new(),
        })
    }

    async fn inspect(&self, name: &SecretName) -> Result<Inspection, StoreError> {
        Ok(match self.map().get(name) {
            Some(s) => Inspection::Served(Self::entry(name, s)),
            None => Inspection::Refused(Refusal::Absent),
        })
    }

    async fn read_value(&self, entry: &PolicyEntry) -> Result<SecretValue, StoreError> {
        let map = self.map();
        let s = map.get(&entry.name).ok_or(StoreError::NotFound)?;
        Ok(SecretValue::new(Zeroizing::new(s.value.clone())))
    }
}

// ---------------------------------------------------------------------------------------------
// Client-side handles
// ---------------------------------------------------------------------------------------------

/// A machine holding a launcher credential (a person's machine login, approved).
#[derive(Debug, Clone)]
pub struct Machine {
    pub key: Arc<SigningKey>,
    pub credential_id: CredentialId,
    pub operator: Login,
}

/// A machine login started and waiting for its person.
#[derive(Debug, Clone)]
pub struct PendingMachineLogin {
    pub key: Arc<SigningKey>,
    pub pending_id: String,
    pub code: ConfirmationCode,
    pub record_id: RecordId,
    pub person: Login,
}

/// An enrolled session: its key and enrollment.
#[derive(Debug, Clone)]
pub struct Session {
    pub id: EnrollmentId,
    pub key: Arc<SigningKey>,
    pub credential_id: CredentialId,
    pub runtime_id: String,
}

// ---------------------------------------------------------------------------------------------
// The fixture
// ---------------------------------------------------------------------------------------------

enum Cleanup {
    Dir(#[allow(dead_code)] tempfile::TempDir),
    PgDatabase { admin_url: String, name: String },
}

/// The core on real storage, with a manual clock and a [`MemoryStore`].
pub struct CoreFixture {
    pub broker: Arc<Broker>,
    pub clock: Arc<ManualClock>,
    pub store: Arc<MemoryStore>,
    /// The storage the broker runs on (the database, or the in-memory cache in front of it).
    pub storage: Arc<dyn Storage>,
    /// The database itself: writes here bypass the broker, as a database writer's would.
    pub sql: SqlStorage,
    pub backend: Backend,
    /// Whether the broker runs on [`Exclusive`] (the broker's SQLite setting).
    pub exclusive: bool,
    cleanup: Cleanup,
}

impl std::fmt::Debug for CoreFixture {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CoreFixture")
            .field("backend", &self.backend)
            .field("exclusive", &self.exclusive)
            .finish_non_exhaustive()
    }
}

/// Whether PostgreSQL tests can run: `false` (after printing `skipped: …`) when
/// `COUNTERSIGN_TEST_POSTGRES_URL` is unset; panics instead when `COUNTERSIGN_REQUIRE_POSTGRES=1`.
pub fn postgres_configured() -> bool {
    if std::env::var(PG_URL_VAR).is_ok_and(|u| !u.is_empty()) {
        return true;
    }
    if std::env::var(PG_REQUIRE_VAR).is_ok_and(|v| v == "1") {
        panic!("{PG_REQUIRE_VAR}=1 but {PG_URL_VAR} is not set");
    }
    println!("skipped: {PG_URL_VAR} not set");
    false
}

/// Where every fixture's clock starts.
pub fn start_time() -> Time {
    DateTime::<Utc>::from_timestamp(1_900_000_000, 0).expect("start time")
}

impl CoreFixture {
    /// The core on a fresh SQLite file, with the default configuration.
    pub async fn sqlite() -> CoreFixture {
        Self::sqlite_with(|_| {}).await
    }

    /// The core on a fresh SQLite file, with the configuration adjusted by `tune`.
    pub async fn sqlite_with(tune: impl FnOnce(&mut BrokerConfig)) -> CoreFixture {
        Self::sqlite_file(false, tune).await
    }

    /// The core on a fresh SQLite file behind [`Exclusive`], as the broker serves SQLite (hot
    /// reads and single-use values in memory).
    pub async fn sqlite_exclusive() -> CoreFixture {
        Self::sqlite_exclusive_with(|_| {}).await
    }

    /// As [`CoreFixture::sqlite_exclusive`], with the configuration adjusted by `tune`.
    pub async fn sqlite_exclusive_with(tune: impl FnOnce(&mut BrokerConfig)) -> CoreFixture {
        Self::sqlite_file(true, tune).await
    }

    async fn sqlite_file(exclusive: bool, tune: impl FnOnce(&mut BrokerConfig)) -> CoreFixture {
        let dir = tempfile::Builder::new()
            .prefix("countersign-core-")
            .tempdir()
            .expect("temporary directory");
        let url = format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("broker.db").display()
        );
        let storage = SqlStorage::connect(&url).await.expect("connect sqlite");
        Self::build(storage, exclusive, Cleanup::Dir(dir), tune).await
    }

    /// The core on a fresh PostgreSQL database, or `None` (after printing `skipped: …`) when no
    /// server is configured.
    pub async fn postgres() -> Option<CoreFixture> {
        Self::postgres_with(|_| {}).await
    }

    /// As [`CoreFixture::postgres`], with the configuration adjusted by `tune`.
    pub async fn postgres_with(tune: impl FnOnce(&mut BrokerConfig)) -> Option<CoreFixture> {
        if !postgres_configured() {
            return None;
        }
        let admin_url = std::env::var(PG_URL_VAR).expect("checked above");
        sqlx::any::install_default_drivers();
        let name = format!("cs_core_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::AnyConnection::connect(&admin_url)
            .await
            .expect("connect to the PostgreSQL admin URL");
        admin
            .execute(format!("CREATE DATABASE {name}").as_str())
            .await
            .expect("create test database");
        admin.close().await.expect("close admin connection");
        let storage = SqlStorage::connect(&with_database(&admin_url, &name))
            .await
            .expect("connect postgres");
        Some(
            Self::build(
                storage,
                false,
                Cleanup::PgDatabase { admin_url, name },
                tune,
            )
            .await,
        )
    }

    async fn build(
        sql: SqlStorage,
        exclusive: bool,
        cleanup: Cleanup,
        tune: impl FnOnce(&mut BrokerConfig),
    ) -> CoreFixture {
        let backend = sql.backend();
        let storage: Arc<dyn Storage> = if exclusive {
            Arc::new(Exclusive::new(sql.clone()))
        } else {
            Arc::new(sql.clone())
        };
        let clock = Arc::new(ManualClock::new(start_time()));
        let store = Arc::new(MemoryStore::default());
        let mut key = Zeroizing::new(vec![0u8; 32]);
        SystemEntropy.fill(&mut key);
        let sealer = Sealer::new(&key).expect("sealer");
        let mut config = BrokerConfig::new(PUBLIC_URL);
        tune(&mut config);
        let broker = Broker::new(
            Parts {
                storage: storage.clone(),
                store: store.clone(),
                clock: clock.clone(),
                entropy: Arc::new(SystemEntropy),
                tokens: None,
            },
            sealer,
            config,
        );
        broker.reload_policy().await.expect("load policy");
        CoreFixture {
            broker: Arc::new(broker),
            clock,
            store,
            storage,
            sql,
            backend,
            exclusive,
            cleanup,
        }
    }

    /// Closes the storage and removes the database (file or PostgreSQL database). A test that
    /// panics before this leaves a PostgreSQL database behind for inspection.
    pub async fn finish(self) {
        self.sql.close().await;
        match self.cleanup {
            Cleanup::Dir(dir) => drop(dir),
            Cleanup::PgDatabase { admin_url, name } => {
                let mut admin = sqlx::AnyConnection::connect(&admin_url)
                    .await
                    .expect("connect admin");
                admin
                    .execute(format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)").as_str())
                    .await
                    .expect("drop test database");
                let _ = admin.close().await;
            }
        }
    }

    // --- time, policy, sweep ------------------------------------------------------------------

    /// The broker's time.
    pub fn now(&self) -> Time {
        self.broker.now()
    }

    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    pub fn set_time(&self, t: Time) {
        self.clock.set(t);
    }

    /// Writes every due transition.
    pub async fn sweep(&self) -> SweepReport {
        self.broker.sweep(10_000).await.expect("sweep")
    }

    /// Reloads the whole policy from the store.
    pub async fn reload(&self) {
        self.broker.reload_policy().await.expect("reload policy");
    }

    /// Rereads one secret (the reread route).
    pub async fn reread(&self, name: &str) -> (bool, Option<Refusal>) {
        self.broker.reread(&secret(name)).await.expect("reread")
    }

    /// Adds a secret to the store and reloads the policy.
    pub async fn add_secret(&self, name: &str, owner: &str, tier: Tier) {
        self.store
            .put(name, owner, tier, &format!("value-of-{name}"));
        self.reload().await;
    }

    // --- signing ------------------------------------------------------------------------------

    fn window(&self) -> (i64, i64) {
        let iat = self.now().timestamp();
        (iat, iat + 120)
    }

    fn jti() -> String {
        claims::new_jti().expect("jti")
    }

    fn proof(&self, typ: &str, kid: &str, key: &SigningKey, method: &str, path: &str) -> String {
        let c = ProofClaims {
            htm: method.to_owned(),
            htu: claims::htu(PUBLIC_URL, path),
            iat: self.now().timestamp(),
            jti: Self::jti(),
            bh: None,
        };
        jws::sign(key, &Header::with_kid(typ, kid), &c).expect("sign proof")
    }

    /// A signed secret request object of `s`.
    pub fn sign_request(&self, s: &Session, names: &[&str], lifetime: Option<u64>) -> String {
        let (iat, exp) = self.window();
        let c = SecretRequestClaims {
            iat,
            exp,
            jti: Self::jti(),
            aud: PUBLIC_URL.to_owned(),
            authorization_details: names
                .iter()
                .map(|n| AuthorizationDetail::agent_secret(n))
                .collect(),
            reason: "property and race tests".into(),
            lifetime_seconds: lifetime,
        };
        jws::sign(
            &s.key,
            &Header::with_kid(claims::TYP_SECRET_REQUEST, &s.id.to_string()),
            &c,
        )
        .expect("sign secret request")
    }

    // --- machine logins -----------------------------------------------------------------------

    /// Starts a person's machine login with a fresh key.
    pub async fn start_machine_login(
        &self,
        person: &Login,
        host: &str,
    ) -> Result<PendingMachineLogin, Error> {
        let key = Arc::new(SigningKey::generate().expect("key"));
        self.start_machine_login_with(key, person, host).await
    }

    /// Starts a person's machine login signed by `key`.
    pub async fn start_machine_login_with(
        &self,
        key: Arc<SigningKey>,
        person: &Login,
        host: &str,
    ) -> Result<PendingMachineLogin, Error> {
        let (iat, exp) = self.window();
        let c = MachineLoginClaims {
            iat,
            exp,
            jti: Self::jti(),
            login_hint: person.to_string(),
            host: host.to_owned(),
            authorization_details: None,
        };
        let token = jws::sign(
            &key,
            &Header::with_jwk(claims::TYP_MACHINE_LOGIN, key.public_jwk()),
            &c,
        )
        .expect("sign machine login");
        let started = self.broker.start_machine_login(&token).await?;
        let record = self
            .broker
            .lookup_machine_login(&started.code.display())
            .await?;
        Ok(PendingMachineLogin {
            key,
            pending_id: started.pending_id,
            code: started.code,
            record_id: record.id,
            person: person.clone(),
        })
    }

    /// Approves a pending machine login as `approver`, typing its code, and answers the machine.
    pub async fn approve_machine_login(
        &self,
        p: &PendingMachineLogin,
        approver: &Login,
    ) -> Result<Machine, Error> {
        let approved = self
            .broker
            .approve(&p.record_id, approver, Some(&p.code.display()), None)
            .await?;
        let credential_id = approved
            .credential_id
            .expect("an approved machine login mints a credential");
        Ok(Machine {
            key: p.key.clone(),
            credential_id,
            operator: p.person.clone(),
        })
    }

    /// A full machine login: start, look up by code, approve with the code by the person.
    pub async fn machine_login(&self, person: &Login, host: &str) -> Machine {
        let p = self
            .start_machine_login(person, host)
            .await
            .expect("start machine login");
        self.approve_machine_login(&p, person)
            .await
            .expect("approve machine login")
    }

    /// Authenticates a launcher proof of `m` (as every machine-credential route does).
    pub async fn launcher(
        &self,
        m: &Machine,
        method: &str,
        path: &str,
    ) -> Result<LauncherCredential, Error> {
        let proof = self.proof(
            claims::TYP_LAUNCHER_PROOF,
            &m.credential_id.to_string(),
            &m.key,
            method,
            path,
        );
        self.broker
            .authenticate_launcher(
                Some(&proof),
                ProofTarget {
                    method,
                    path,
                    body: b"",
                },
            )
            .await
    }

    // --- enrollment ---------------------------------------------------------------------------

    /// Enrolls a fresh session key under `m` as `kind: session`.
    pub async fn enroll(&self, m: &Machine, runtime_id: &str) -> Result<Session, Error> {
        let credential = self.launcher(m, "POST", "/v1/enrollments").await?;
        let key = Arc::new(SigningKey::generate().expect("key"));
        let jwk = serde_json::to_value(key.public_jwk()).expect("jwk");
        let e = self
            .broker
            .enroll(
                &credential,
                EnrollInput {
                    kind: "session".into(),
                    runtime_id: runtime_id.to_owned(),
                    thumbprint: key.thumbprint(),
                    jwk,
                    ..EnrollInput::default()
                },
            )
            .await?;
        Ok(Session {
            id: e.id,
            key,
            credential_id: credential.id,
            runtime_id: runtime_id.to_owned(),
        })
    }

    /// Authenticates a session proof of `s` (as every session route does).
    pub async fn authenticate(
        &self,
        s: &Session,
        method: &str,
        path: &str,
    ) -> Result<Enrollment, Error> {
        let proof = self.proof(
            claims::TYP_SESSION_PROOF,
            &s.id.to_string(),
            &s.key,
            method,
            path,
        );
        self.broker
            .authenticate_session(
                Some(&proof),
                ProofTarget {
                    method,
                    path,
                    body: b"",
                },
            )
            .await
    }

    /// The enrollment as stored, settled against the clock (no proof: for checks, and for
    /// callers that authenticated before a race).
    pub async fn enrollment(&self, id: EnrollmentId) -> Option<Enrollment> {
        let now = self.now();
        let mut tx = self.storage.read().await.expect("read transaction");
        tx.get_enrollment(id)
            .await
            .expect("read enrollment")
            .map(|e| e.settled(now))
    }

    /// [`CoreFixture::enrollment`] of a session known to exist.
    pub async fn caller(&self, s: &Session) -> Enrollment {
        self.enrollment(s.id).await.expect("enrollment exists")
    }

    /// Renews `s`'s lease through the renewal proof.
    pub async fn renew(&self, s: &Session) -> Result<Time, Error> {
        let path = format!("/v1/enrollments/{}/renew", s.id);
        let proof = self.proof(
            claims::TYP_SESSION_PROOF,
            &s.id.to_string(),
            &s.key,
            "POST",
            &path,
        );
        let caller = self
            .broker
            .authenticate_renewal(
                Some(&proof),
                ProofTarget {
                    method: "POST",
                    path: &path,
                    body: b"",
                },
            )
            .await?;
        self.broker.renew(&caller, s.id, None).await
    }

    /// Ends `s`'s enrollment through `m`'s launcher proof.
    pub async fn unenroll(&self, m: &Machine, s: &Session) -> Result<(), Error> {
        let c = self
            .launcher(m, "DELETE", &format!("/v1/enrollments/{}", s.id))
            .await?;
        self.broker.unenroll(&c, s.id).await
    }

    // --- requests and grants (session routes) -------------------------------------------------

    /// Makes a secret request as `s` (proof, then the signed request object).
    pub async fn request(
        &self,
        s: &Session,
        names: &[&str],
        lifetime: Option<u64>,
    ) -> Result<CreatedRequest, Error> {
        let caller = self.authenticate(s, "POST", "/v1/requests").await?;
        let token = self.sign_request(s, names, lifetime);
        self.broker.create_request(&caller, &token, None).await
    }

    /// Reads one of `s`'s requests through its proof.
    pub async fn get_request(&self, s: &Session, id: RequestId) -> Result<Request, Error> {
        let caller = self
            .authenticate(s, "GET", &format!("/v1/requests/{id}"))
            .await?;
        self.broker.get_request(&caller, id).await
    }

    /// Cancels one of `s`'s requests through its proof.
    pub async fn cancel(&self, s: &Session, id: RequestId) -> Result<RequestState, Error> {
        let caller = self
            .authenticate(s, "POST", &format!("/v1/requests/{id}/cancel"))
            .await?;
        self.broker.cancel_own_request(&caller, id).await
    }

    /// Releases a grant's values to `s` through its proof: (name, value) pairs.
    pub async fn values(&self, s: &Session, id: GrantId) -> Result<Vec<(String, String)>, Error> {
        let caller = self
            .authenticate(s, "POST", &format!("/v1/grants/{id}/values"))
            .await?;
        self.values_as(&caller, id).await
    }

    /// Releases a grant's values to an already authenticated caller.
    pub async fn values_as(
        &self,
        caller: &Enrollment,
        id: GrantId,
    ) -> Result<Vec<(String, String)>, Error> {
        let released = self.broker.release_values(caller, id).await?;
        Ok(released
            .values
            .iter()
            .map(|(n, v)| (n.to_string(), v.expose().to_owned()))
            .collect())
    }

    /// `s`'s live grants through its proof.
    pub async fn own_grants(&self, s: &Session) -> Result<Vec<Grant>, Error> {
        let caller = self.authenticate(s, "GET", "/v1/enrollments/self").await?;
        self.broker.own_grants(&caller).await
    }

    /// Revokes a grant as its holder, through the session's proof.
    pub async fn revoke_by_holder(&self, s: &Session, id: GrantId) -> Result<&'static str, Error> {
        let caller = self
            .authenticate(s, "POST", &format!("/v1/grants/{id}/revoke"))
            .await?;
        self.broker.revoke_own_grant(&caller, id).await
    }

    // --- console (approver) routes ------------------------------------------------------------

    pub async fn approve(&self, id: &RecordId, approver: &Login) -> Result<Approved, Error> {
        self.broker.approve(id, approver, None, None).await
    }

    pub async fn deny(&self, id: &RecordId, approver: &Login) -> Result<&'static str, Error> {
        self.broker
            .deny(id, approver, None)
            .await
            .map(|s| s.as_str())
    }

    pub async fn record(&self, id: &RecordId) -> Result<Record, Error> {
        self.broker.record(id).await
    }

    pub async fn pending_for(&self, who: &Login) -> Vec<Record> {
        self.broker.pending_for(who).await.expect("pending list")
    }

    pub async fn grants_for(&self, who: &Login) -> Vec<GrantListItem> {
        self.broker.grants_for(who).await.expect("grant list")
    }

    pub async fn revoke_by_approver(
        &self,
        who: &Login,
        id: GrantId,
    ) -> Result<&'static str, Error> {
        self.broker.revoke_grant_as(who, id, false).await
    }

    pub async fn revoke_machine_by_approver(
        &self,
        who: &Login,
        id: CredentialId,
    ) -> Result<&'static str, Error> {
        self.broker.revoke_credential_by_approver(who, id).await
    }

    // --- operator routes (launcher proof) -----------------------------------------------------

    pub async fn revoke_by_operator(
        &self,
        m: &Machine,
        id: GrantId,
    ) -> Result<&'static str, Error> {
        let c = self
            .launcher(m, "POST", &format!("/v1/operator/grants/{id}/revoke"))
            .await?;
        self.broker.operator_revoke_grant(&c, id).await
    }

    pub async fn revoke_machine_by_operator(
        &self,
        m: &Machine,
        id: CredentialId,
    ) -> Result<&'static str, Error> {
        let c = self
            .launcher(m, "POST", &format!("/v1/operator/machines/{id}/revoke"))
            .await?;
        self.broker.operator_revoke_machine(&c, id).await
    }

    // --- storage, for checks and tampering ----------------------------------------------------

    /// Every launcher credential bound to a key thumbprint, as stored.
    pub async fn credentials_by_thumbprint(&self, thumbprint: &str) -> Vec<LauncherCredential> {
        let mut tx = self.storage.read().await.expect("read transaction");
        tx.credentials_by_thumbprint(thumbprint)
            .await
            .expect("read credentials")
    }

    /// A grant as stored.
    pub async fn stored_grant(&self, id: GrantId) -> Option<Grant> {
        let mut tx = self.storage.read().await.expect("read transaction");
        tx.get_grant(id).await.expect("read grant")
    }

    /// Every grant of an enrollment as stored, ended or not.
    pub async fn stored_grants_of(&self, id: EnrollmentId) -> Vec<Grant> {
        let mut tx = self.storage.read().await.expect("read transaction");
        tx.grants_by_enrollment(id).await.expect("read grants")
    }

    /// A record as stored.
    pub async fn stored_record(&self, id: &RecordId) -> Option<Record> {
        let mut tx = self.storage.read().await.expect("read transaction");
        tx.get_record(id).await.expect("read record")
    }

    /// Writes a grant row straight into the database (as a database writer could).
    pub async fn write_grant(&self, g: &Grant) {
        let mut tx = self.sql.begin().await.expect("write transaction");
        tx.put_grant(g).await.expect("write grant");
        tx.commit().await.expect("commit");
    }

    /// Writes a record row straight into the database (as a database writer could).
    pub async fn write_record(&self, r: &Record) {
        let mut tx = self.sql.begin().await.expect("write transaction");
        tx.put_record(r).await.expect("write record");
        tx.commit().await.expect("commit");
    }
}

/// Asserts that `r` is a refusal with `code`, naming `what` otherwise.
#[track_caller]
pub fn assert_code<T: std::fmt::Debug>(r: &Result<T, Error>, code: ErrorCode, what: &str) {
    match r {
        Err(e) if e.code == code => {}
        other => panic!("{what}: expected {}, got {other:?}", code.as_str()),
    }
}

/// The URL with its database (path) replaced.
fn with_database(url: &str, name: &str) -> String {
    let (head, query) = match url.split_once('?') {
        Some((h, q)) => (h, format!("?{q}")),
        None => (url, String::new()),
    };
    let scheme_end = head.find("://").map_or(0, |i| i + 3);
    let base = match head[scheme_end..].find('/') {
        Some(i) => &head[..scheme_end + i],
        None => head,
    };
    format!("{base}/{name}{query}")
}
