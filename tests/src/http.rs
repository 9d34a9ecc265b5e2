//! HTTP fixtures: the real broker server on a port the OS picks, in the style of zero2prod's
//! `spawn_app` and omicron's `nexus/test-utils`.
//!
//! [`TestBroker::start`] (or [`TestBroker::builder`]) wires the real router and background work
//! (`countersign_broker_http::server::serve_listener`) over:
//! - a [`ManualClock`] shared with the test, so that tests move time instead of sleeping (the
//!   proofs and request objects the helpers sign read the same clock, and so do the rate limits);
//! - a fresh SQLite database in a temporary directory (or the database a test names, e.g. from
//!   `COUNTERSIGN_TEST_POSTGRES_URL`), behind a [`FaultyStorage`] whose [`Faults`] switch lets a
//!   test make the database unavailable or broken;
//! - a local TOML secret store with secrets of every tier ([`default_secrets`]), which a test may
//!   rewrite with [`TestBroker::edit_store`], or a store the test injects with
//!   [`TestBrokerBuilder::store`] (AWS over moto, Google over its REST fake);
//! - a console token.
//!
//! The public URL is the real bound address (`http://127.0.0.1:<port>`): the listener is bound
//! first, then the broker is built for it.
//!
//! Typed helpers speak the protocol with real ES256 keys: [`TestBroker::machine_login`] runs the
//! whole machine login (start, lookup by code, approve with the code typed again, poll) and
//! answers a [`Machine`]; [`Machine::enroll_session`] answers a [`Session`]; both sign their
//! `Proof` headers and expose the pieces ([`ProofSpec`], claims) so that a test can build a
//! deliberately broken proof. Every call answers a [`Resp`]: status, headers and parsed JSON.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use async_trait::async_trait;
use chrono::TimeZone;
use countersign_broker_core::broker::Parts;
use countersign_broker_core::clock::Time;
use countersign_broker_core::seal::Sealer;
use countersign_broker_core::storage::StorageError;
use countersign_broker_core::{
    Broker, BrokerConfig, ErrorCode, ManualClock, SecretStore, Storage, SystemEntropy, Tx,
};
use countersign_broker_http::AppState;
use countersign_broker_http::limits::Quotas;
use countersign_broker_http::server::Running;
use countersign_proto::claims::{
    self, AuthorizationDetail, MachineLoginClaims, ProofClaims, SecretRequestClaims,
};
use countersign_proto::jws::{self, Header};
use countersign_proto::{SigningKey, b64};
use countersign_store_local::LocalFileStore;
use reqwest::header::HeaderMap;
use serde_json::{Value, json};
use zeroize::Zeroizing;

/// A person who owns secrets and operates machines.
pub const ADA: &str = "ada@example.com";
/// Another person, owner of other secrets.
pub const BOB: &str = "bob@example.com";
/// A person who owns nothing.
pub const CAROL: &str = "carol@example.com";

/// Tier `automatic`, owner Ada.
pub const AUTO: &str = "AUTO_TOKEN";
/// A second automatic secret, owner Ada.
pub const AUTO_2: &str = "AUTO_OTHER";
/// Tier `owner`, owner Ada.
pub const ADA_SECRET: &str = "ADA_SECRET";
/// A second owner-tier secret of Ada's.
pub const ADA_SECRET_2: &str = "ADA_OTHER";
/// Tier `owner`, owner Bob.
pub const BOB_SECRET: &str = "BOB_SECRET";
/// Tier `shared`, owner Bob: anyone approves.
pub const SHARED: &str = "SHARED_SECRET";
/// Tier `locked`.
pub const LOCKED: &str = "LOCKED_SECRET";
/// No tier tag: `owner`, owner Ada.
pub const UNTIERED: &str = "UNTIERED_SECRET";
/// In the store without an owner: not served (`owner-tag-missing`).
pub const NO_OWNER: &str = "NO_OWNER";
/// In the store without a value: not served (`no-current-value`).
pub const NO_VALUE: &str = "NO_VALUE";

/// The prefix of the test store.
pub const PREFIX: &str = "agents/";

/// Where every test broker's clock starts.
pub fn start_time() -> Time {
    chrono::Utc
        .with_ymd_and_hms(2031, 3, 4, 5, 6, 7)
        .single()
        .unwrap_or_default()
}

// ----- the secret store -----

/// One secret of the local file store, named by its agent name (`GITHUB_TOKEN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSecret {
    pub name: String,
    pub owner: Option<String>,
    pub tier: Option<String>,
    pub value: Option<String>,
    /// The encryption key it names; `None` = the store's.
    pub key: Option<String>,
    pub deleted: bool,
}

impl StoredSecret {
    pub fn new(name: &str, owner: &str, tier: Option<&str>) -> Self {
        Self {
            name: name.to_owned(),
            owner: Some(owner.to_owned()),
            tier: tier.map(str::to_owned),
            value: Some(format!(
                "{}-value-{}",
                name.to_ascii_lowercase(),
                uuid::Uuid::new_v4().simple()
            )),
            key: None,
            deleted: false,
        }
    }

    /// The stored name: prefix + lower case with `-`.
    pub fn stored_name(&self) -> String {
        format!(
            "{PREFIX}{}",
            self.name.to_ascii_lowercase().replace('_', "-")
        )
    }
}

/// The secrets every test broker starts with: each tier, two owners, and two not served.
pub fn default_secrets() -> Vec<StoredSecret> {
    let mut v = vec![
        StoredSecret::new(AUTO, ADA, Some("automatic")),
        StoredSecret::new(AUTO_2, ADA, Some("automatic")),
        StoredSecret::new(ADA_SECRET, ADA, Some("owner")),
        StoredSecret::new(ADA_SECRET_2, ADA, Some("owner")),
        StoredSecret::new(BOB_SECRET, BOB, Some("owner")),
        StoredSecret::new(SHARED, BOB, Some("shared")),
        StoredSecret::new(LOCKED, BOB, Some("locked")),
        StoredSecret::new(UNTIERED, ADA, None),
    ];
    let mut no_owner = StoredSecret::new(NO_OWNER, ADA, Some("automatic"));
    no_owner.owner = None;
    let mut no_value = StoredSecret::new(NO_VALUE, ADA, Some("automatic"));
    no_value.value = None;
    v.push(no_owner);
    v.push(no_value);
    v
}

/// A TOML basic string: JSON string escaping is valid TOML.
fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

fn store_toml(secrets: &[StoredSecret]) -> String {
    let mut out = format!("prefix = {}\nkey = \"local\"\n", toml_str(PREFIX));
    for s in secrets {
        out.push_str("\n[[secret]]\n");
        out.push_str(&format!("name = {}\n", toml_str(&s.stored_name())));
        if let Some(o) = &s.owner {
            out.push_str(&format!("owner = {}\n", toml_str(o)));
        }
        if let Some(t) = &s.tier {
            out.push_str(&format!("tier = {}\n", toml_str(t)));
        }
        if let Some(v) = &s.value {
            out.push_str(&format!("value = {}\n", toml_str(v)));
        }
        if let Some(k) = &s.key {
            out.push_str(&format!("key = {}\n", toml_str(k)));
        }
        if s.deleted {
            out.push_str("deleted = true\n");
        }
    }
    out
}

/// Writes the store file atomically (the broker may read it at any moment).
fn write_store(path: &std::path::Path, secrets: &[StoredSecret]) -> anyhow::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4().simple()));
    std::fs::write(&tmp, store_toml(secrets)).context("write store file")?;
    std::fs::rename(&tmp, path).context("replace store file")?;
    Ok(())
}

// ----- a temporary directory -----

/// A directory removed on drop.
#[derive(Debug)]
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new() -> anyhow::Result<Self> {
        let p =
            std::env::temp_dir().join(format!("countersign-e2e-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&p).with_context(|| format!("create {}", p.display()))?;
        Ok(Self(p))
    }

    pub fn path(&self) -> &std::path::Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ----- storage with a fault switch -----

/// A storage failure to inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `StorageError::Unavailable`: clients see DATABASE_UNAVAILABLE.
    Unavailable,
    /// `StorageError::Other`: clients see INTERNAL naming the step.
    Broken,
    /// `StorageError::Conflict` on every attempt: the retries run out, clients see
    /// DATABASE_UNAVAILABLE.
    Conflict,
}

/// Which storage operations fail, switchable while the broker runs.
#[derive(Debug, Default)]
pub struct Faults {
    reads: AtomicU8,
    writes: AtomicU8,
    ping: AtomicU8,
    once: AtomicU8,
}

fn fault_byte(f: Option<Fault>) -> u8 {
    match f {
        None => 0,
        Some(Fault::Unavailable) => 1,
        Some(Fault::Broken) => 2,
        Some(Fault::Conflict) => 3,
    }
}

fn check_fault(a: &AtomicU8) -> Result<(), StorageError> {
    match a.load(Ordering::SeqCst) {
        1 => Err(StorageError::Unavailable("injected by the test".into())),
        2 => Err(StorageError::Other("injected by the test".into())),
        3 => Err(StorageError::Conflict),
        _ => Ok(()),
    }
}

impl Faults {
    /// Read transactions (credential checks, reads, lists).
    pub fn reads(&self, f: Option<Fault>) {
        self.reads.store(fault_byte(f), Ordering::SeqCst);
    }
    /// Write transactions (every state change).
    pub fn writes(&self, f: Option<Fault>) {
        self.writes.store(fault_byte(f), Ordering::SeqCst);
    }
    /// The health check's ping.
    pub fn ping(&self, f: Option<Fault>) {
        self.ping.store(fault_byte(f), Ordering::SeqCst);
    }
    /// The single-use (`jti`) memory.
    pub fn once(&self, f: Option<Fault>) {
        self.once.store(fault_byte(f), Ordering::SeqCst);
    }
    /// Every operation.
    pub fn all(&self, f: Option<Fault>) {
        self.reads(f);
        self.writes(f);
        self.ping(f);
        self.once(f);
    }
}

/// The broker's storage, failing on demand.
#[derive(Debug)]
pub struct FaultyStorage {
    pub inner: Arc<dyn Storage>,
    pub faults: Arc<Faults>,
}

#[async_trait]
impl Storage for FaultyStorage {
    async fn begin(&self) -> Result<Box<dyn Tx>, StorageError> {
        check_fault(&self.faults.writes)?;
        self.inner.begin().await
    }
    async fn read(&self) -> Result<Box<dyn Tx>, StorageError> {
        check_fault(&self.faults.reads)?;
        self.inner.read().await
    }
    async fn ping(&self) -> Result<(), StorageError> {
        check_fault(&self.faults.ping)?;
        self.inner.ping().await
    }
    async fn policy_epoch(&self) -> Result<i64, StorageError> {
        check_fault(&self.faults.reads)?;
        self.inner.policy_epoch().await
    }
    async fn bump_policy_epoch(&self) -> Result<i64, StorageError> {
        check_fault(&self.faults.writes)?;
        self.inner.bump_policy_epoch().await
    }
    async fn remember_once(
        &self,
        scope: &str,
        value: &str,
        until: Time,
        now: Time,
    ) -> Result<bool, StorageError> {
        check_fault(&self.faults.once)?;
        self.inner.remember_once(scope, value, until, now).await
    }
    async fn remember_proof(
        &self,
        use_: countersign_broker_core::storage::ProofUse<'_>,
    ) -> Result<bool, StorageError> {
        check_fault(&self.faults.once)?;
        self.inner.remember_proof(use_).await
    }
    async fn remembered(&self, scope: &str, now: Time) -> Result<Vec<String>, StorageError> {
        check_fault(&self.faults.reads)?;
        self.inner.remembered(scope, now).await
    }

    async fn remember_all(
        &self,
        values: &[(&str, &str, Time)],
        now: Time,
    ) -> Result<(), StorageError> {
        self.inner.remember_all(values, now).await
    }

    async fn at_shutdown(&self, now: Time) -> Result<(), StorageError> {
        self.inner.at_shutdown(now).await
    }
}

// ----- answers -----

/// Every success answer a test gets is the one the OpenAPI document says its route answers
/// (its schema, generated from the answer's type in `countersign_common::wire`): an answer
/// that drifts from its type fails the test that got it.
fn answer_documented(method: &str, path: &str, status: u16, text: &str) -> anyhow::Result<()> {
    static DOCUMENT: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    let doc = DOCUMENT.get_or_init(countersign_broker_http::openapi::document);
    countersign_broker_http::answer_check::check_answer(doc, method, path, status, text).map_err(
        |e| anyhow::anyhow!("an answer the OpenAPI document does not describe: {e}\n{text}"),
    )
}

/// An HTTP answer: status, headers, the body as text and as JSON (`Null` when not JSON).
#[derive(Debug, Clone)]
pub struct Resp {
    pub status: u16,
    pub headers: HeaderMap,
    pub text: String,
    pub body: Value,
}

impl Resp {
    /// The refusal code, or "".
    pub fn code(&self) -> &str {
        self.body.get("code").and_then(Value::as_str).unwrap_or("")
    }

    /// The refusal message, or "".
    pub fn error(&self) -> &str {
        self.body.get("error").and_then(Value::as_str).unwrap_or("")
    }

    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// Asserts the status (showing the body on failure) and answers the response.
    #[track_caller]
    pub fn expect(self, status: u16) -> Self {
        assert_eq!(
            self.status, status,
            "expected {status}, got {}: {}",
            self.status, self.text
        );
        self
    }

    /// Asserts a refusal: the status, the code, the code's catalogue status, and a body that is
    /// exactly `{"code","error"}` with a non-empty message.
    #[track_caller]
    pub fn refused(&self, status: u16, code: &str) -> &Self {
        assert_eq!(
            (self.status, self.code()),
            (status, code),
            "expected {status} {code}, got {}: {}",
            self.status,
            self.text
        );
        let catalogue = ErrorCode::ALL
            .iter()
            .find(|c| c.as_str() == code)
            .map(|c| c.status());
        assert_eq!(catalogue, Some(status), "{code} is not in the catalogue");
        let obj = self
            .body
            .as_object()
            .expect("refusal body is a JSON object");
        assert_eq!(
            obj.len(),
            2,
            "refusal body has exactly code and error: {}",
            self.text
        );
        assert!(
            !self.error().is_empty(),
            "refusal has a message: {}",
            self.text
        );
        self
    }

    /// A string field (panics with the body when absent).
    #[track_caller]
    pub fn s(&self, field: &str) -> String {
        match self.body.get(field).and_then(Value::as_str) {
            Some(s) => s.to_owned(),
            None => panic!("no string field {field:?} in {}", self.text),
        }
    }

    /// A field (`Null` when absent).
    pub fn get(&self, field: &str) -> &Value {
        self.body.get(field).unwrap_or(&Value::Null)
    }
}

// ----- proofs -----

/// The pieces of a `Proof` header before signing: change any of them to break it on purpose.
#[derive(Debug, Clone)]
pub struct ProofSpec {
    pub header: Header,
    pub claims: ProofClaims,
}

impl ProofSpec {
    /// A correct proof for `method path` with `body`, named by `kid`, at `iat`.
    pub fn new(
        typ: &str,
        kid: &str,
        public_url: &str,
        method: &str,
        path: &str,
        body: &[u8],
        iat: i64,
    ) -> Self {
        Self {
            header: Header::with_kid(typ, kid),
            claims: ProofClaims {
                htm: method.to_owned(),
                htu: claims::htu(public_url, path),
                iat,
                jti: new_jti(),
                bh: (!body.is_empty()).then(|| claims::body_hash(body)),
            },
        }
    }

    /// Signs it with `key`.
    pub fn sign(&self, key: &SigningKey) -> String {
        jws::sign(key, &self.header, &self.claims).expect("sign proof")
    }
}

/// A fresh `jti`.
pub fn new_jti() -> String {
    claims::new_jti().expect("jti")
}

/// A compact JWS with any header and payload and an arbitrary 64-byte signature (for `alg:
/// none` and other tokens no signer would make).
pub fn forged_token(header: &Value, payload: &Value) -> String {
    format!(
        "{}.{}.{}",
        b64::encode(header.to_string().as_bytes()),
        b64::encode(payload.to_string().as_bytes()),
        b64::encode(&[7u8; 64])
    )
}

/// A fresh P-256 key.
pub fn new_key() -> SigningKey {
    SigningKey::generate().expect("generate key")
}

/// The enrollment body's `jwk` for a key.
pub fn jwk_value(key: &SigningKey) -> Value {
    serde_json::to_value(key.public_jwk()).expect("jwk")
}

// ----- the connection every helper shares -----

/// What every helper needs to reach the broker and sign for it.
#[derive(Debug, Clone)]
pub struct Conn {
    pub client: reqwest::Client,
    /// Where the test reaches the broker.
    pub base_url: String,
    /// The broker's configured public URL (`htu`, `aud`); equal to `base_url` here.
    pub public_url: String,
    pub clock: Arc<ManualClock>,
    pub console_token: String,
}

/// Method names.
fn method(m: &str) -> reqwest::Method {
    reqwest::Method::from_bytes(m.as_bytes()).expect("HTTP method")
}

impl Conn {
    /// The clock's time in seconds (for `iat`).
    pub fn now_secs(&self) -> i64 {
        use countersign_broker_core::Clock;
        self.clock.now().timestamp()
    }

    /// `path` as it goes on the wire (percent-encoded the way the client sends it), which is
    /// what the broker binds a proof's `htu` to.
    pub fn wire_path(&self, path: &str) -> String {
        reqwest::Url::parse(&format!("{}{path}", self.base_url))
            .map(|u| u.path().to_owned())
            .unwrap_or_else(|_| path.to_owned())
    }

    /// Sends a request with any headers and body through `client`.
    pub async fn send_with(
        &self,
        client: &reqwest::Client,
        m: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<Resp> {
        let mut rb = client.request(method(m), format!("{}{path}", self.base_url));
        for (k, v) in headers {
            rb = rb.header(*k, *v);
        }
        if let Some(b) = body {
            rb = rb
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(b);
        }
        let r = rb.send().await.with_context(|| format!("{m} {path}"))?;
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let text = r.text().await.context("read answer")?;
        if (200..300).contains(&status) {
            answer_documented(m, path, status, &text)?;
        }
        let body = serde_json::from_str(&text).unwrap_or(Value::Null);
        Ok(Resp {
            status,
            headers,
            text,
            body,
        })
    }

    /// Sends a request with any headers and body.
    pub async fn send(
        &self,
        m: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<Resp> {
        self.send_with(&self.client, m, path, headers, body).await
    }

    /// A request with no credential.
    pub async fn open(&self, m: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Resp> {
        self.send(m, path, &[], body.map(json_bytes)).await
    }

    /// A request carrying `proof` (if any) and raw body bytes (empty = no body).
    pub async fn with_proof(
        &self,
        m: &str,
        path: &str,
        proof: Option<&str>,
        body: &[u8],
    ) -> anyhow::Result<Resp> {
        let headers: Vec<(&str, &str)> = proof.map(|p| ("proof", p)).into_iter().collect();
        let body = (!body.is_empty()).then(|| body.to_vec());
        self.send(m, path, &headers, body).await
    }

    /// A console-token request.
    pub async fn console(&self, m: &str, path: &str, body: Option<&Value>) -> anyhow::Result<Resp> {
        self.console_raw(m, path, body.map(json_bytes)).await
    }

    /// A console-token request with raw body bytes.
    pub async fn console_raw(
        &self,
        m: &str,
        path: &str,
        body: Option<Vec<u8>>,
    ) -> anyhow::Result<Resp> {
        let auth = format!("Bearer {}", self.console_token);
        self.send(m, path, &[("authorization", &auth)], body).await
    }

    // --- console routes ---

    pub async fn pending(&self, approver: &str) -> anyhow::Result<Resp> {
        self.console("GET", &format!("/v1/pending?approver={approver}"), None)
            .await
    }

    pub async fn record(&self, record_id: &str) -> anyhow::Result<Resp> {
        self.console("GET", &format!("/v1/credential-requests/{record_id}"), None)
            .await
    }

    pub async fn approve(
        &self,
        record_id: &str,
        approver: &str,
        code: Option<&str>,
    ) -> anyhow::Result<Resp> {
        self.console(
            "POST",
            &format!("/v1/credential-requests/{record_id}/approve"),
            Some(&json!({ "approver": approver, "code": code })),
        )
        .await
    }

    pub async fn deny(
        &self,
        record_id: &str,
        approver: &str,
        code: Option<&str>,
    ) -> anyhow::Result<Resp> {
        self.console(
            "POST",
            &format!("/v1/credential-requests/{record_id}/deny"),
            Some(&json!({ "approver": approver, "code": code })),
        )
        .await
    }

    pub async fn lookup(&self, code: &str) -> anyhow::Result<Resp> {
        self.console(
            "POST",
            "/v1/machine-logins/lookup",
            Some(&json!({ "code": code })),
        )
        .await
    }

    pub async fn credentials(&self, approver: &str) -> anyhow::Result<Resp> {
        self.console(
            "GET",
            &format!("/v1/launcher-credentials?approver={approver}"),
            None,
        )
        .await
    }

    pub async fn revoke_credential(
        &self,
        credential_id: &str,
        approver: &str,
    ) -> anyhow::Result<Resp> {
        self.console(
            "POST",
            &format!("/v1/launcher-credentials/{credential_id}/revoke-by-approver"),
            Some(&json!({ "approver": approver })),
        )
        .await
    }

    pub async fn grants(&self, approver: &str) -> anyhow::Result<Resp> {
        self.console("GET", &format!("/v1/grants?approver={approver}"), None)
            .await
    }

    pub async fn revoke_grant_as(&self, grant_id: &str, approver: &str) -> anyhow::Result<Resp> {
        self.console(
            "POST",
            &format!("/v1/grants/{grant_id}/revoke-by-approver"),
            Some(&json!({ "approver": approver })),
        )
        .await
    }

    // --- open routes ---

    pub async fn reread(&self, name: &str) -> anyhow::Result<Resp> {
        self.open("POST", &format!("/v1/secrets/{name}/reread"), None)
            .await
    }

    pub async fn poll_login(&self, pending_id: &str) -> anyhow::Result<Resp> {
        self.open(
            "GET",
            &format!("/v1/launcher-credentials/{pending_id}"),
            None,
        )
        .await
    }

    // --- machine logins ---

    /// The claims of a person's machine-login object, valid now.
    pub fn machine_login_claims(&self, person: &str, host: &str) -> MachineLoginClaims {
        let now = self.now_secs();
        MachineLoginClaims {
            iat: now,
            exp: now + 120,
            jti: new_jti(),
            login_hint: person.to_owned(),
            host: host.to_owned(),
            authorization_details: None,
        }
    }

    /// A signed machine-login object (the key in its own `jwk` header).
    pub fn sign_machine_login(&self, key: &SigningKey, c: &MachineLoginClaims) -> String {
        jws::sign(
            key,
            &Header::with_jwk(claims::TYP_MACHINE_LOGIN, key.public_jwk()),
            c,
        )
        .expect("sign machine login")
    }

    /// POST /v1/launcher-credentials with a signed login object.
    pub async fn start_login_with(&self, request: &str) -> anyhow::Result<Resp> {
        self.open(
            "POST",
            "/v1/launcher-credentials",
            Some(&json!({ "request": request })),
        )
        .await
    }

    /// Starts a person's machine login for `key`.
    pub async fn start_login(
        &self,
        key: &SigningKey,
        person: &str,
        host: &str,
    ) -> anyhow::Result<Resp> {
        let c = self.machine_login_claims(person, host);
        self.start_login_with(&self.sign_machine_login(key, &c))
            .await
    }

    /// The whole machine login for `key`: start, lookup by code, approve with the code typed
    /// again, poll until issued.
    pub async fn machine_login_with_key(
        &self,
        key: SigningKey,
        person: &str,
        host: &str,
    ) -> anyhow::Result<Machine> {
        let started = self.start_login(&key, person, host).await?.expect(202);
        let (pending_id, code) = (started.s("pending_id"), started.s("code"));
        let record = self.lookup(&code).await?.expect(200);
        let record_id = record.s("record_id");
        self.approve(&record_id, person, Some(&code))
            .await?
            .expect(200);
        for _ in 0..20 {
            let poll = self.poll_login(&pending_id).await?.expect(200);
            match poll.s("state").as_str() {
                "issued" => {
                    return Ok(Machine {
                        key,
                        credential_id: poll.s("credential_id"),
                        person: person.to_owned(),
                        host: host.to_owned(),
                        conn: self.clone(),
                    });
                }
                "pending" => tokio::task::yield_now().await,
                other => bail!("machine login ended {other}"),
            }
        }
        bail!("machine login not issued")
    }

    /// A machine of `person`'s, logged in with a fresh key.
    pub async fn machine_login(&self, person: &str) -> anyhow::Result<Machine> {
        let host = format!("host-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
        self.machine_login_with_key(new_key(), person, &host).await
    }

    /// A machine of `person`'s with one enrolled session.
    pub async fn session_of(&self, person: &str) -> anyhow::Result<(Machine, Session)> {
        let m = self.machine_login(person).await?;
        let s = m
            .enroll_session(&format!("rt-{}", uuid::Uuid::new_v4()))
            .await?;
        Ok((m, s))
    }
}

fn json_bytes(v: &Value) -> Vec<u8> {
    serde_json::to_vec(v).unwrap_or_default()
}

// ----- machines -----

/// A logged-in machine: the key its launcher credential is bound to.
#[derive(Debug)]
pub struct Machine {
    pub key: SigningKey,
    pub credential_id: String,
    pub person: String,
    pub host: String,
    pub conn: Conn,
}

/// An enrollment body, before the key is added.
#[derive(Debug, Clone)]
pub struct EnrollSpec {
    pub kind: String,
    pub runtime_id: String,
    pub slot: Option<String>,
    pub operator: Option<String>,
    pub session_id: Option<String>,
    pub pod_token: Option<String>,
}

impl EnrollSpec {
    pub fn session(runtime_id: &str) -> Self {
        Self {
            kind: "session".into(),
            runtime_id: runtime_id.into(),
            slot: None,
            operator: None,
            session_id: None,
            pod_token: None,
        }
    }

    pub fn pod(runtime_id: &str, slot: Option<&str>) -> Self {
        Self {
            kind: "pod".into(),
            slot: slot.map(str::to_owned),
            ..Self::session(runtime_id)
        }
    }

    /// The body for `key`: `jwk` and its `thumbprint` added.
    pub fn body(&self, key: &SigningKey) -> Value {
        let mut v = json!({
            "kind": self.kind,
            "runtime_id": self.runtime_id,
            "thumbprint": key.thumbprint(),
            "jwk": jwk_value(key),
        });
        if let Some(obj) = v.as_object_mut() {
            for (k, val) in [
                ("slot", &self.slot),
                ("operator", &self.operator),
                ("session_id", &self.session_id),
                ("pod_token", &self.pod_token),
            ] {
                if let Some(val) = val {
                    obj.insert(k.into(), Value::String(val.clone()));
                }
            }
        }
        v
    }
}

impl Machine {
    /// A correct launcher proof's pieces for `method path` with `body`.
    pub fn proof_spec(&self, method: &str, path: &str, body: &[u8]) -> ProofSpec {
        ProofSpec::new(
            claims::TYP_LAUNCHER_PROOF,
            &self.credential_id,
            &self.conn.public_url,
            method,
            &self.conn.wire_path(path),
            body,
            self.conn.now_secs(),
        )
    }

    /// A correct launcher proof.
    pub fn launcher_proof(&self, method: &str, path: &str, body: &[u8]) -> String {
        self.proof_spec(method, path, body).sign(&self.key)
    }

    /// A launcher-proved request with raw body bytes (empty = none).
    pub async fn call_raw(&self, method: &str, path: &str, body: &[u8]) -> anyhow::Result<Resp> {
        let proof = self.launcher_proof(method, path, body);
        self.conn.with_proof(method, path, Some(&proof), body).await
    }

    /// A launcher-proved request with a JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Resp> {
        let bytes = body.map(json_bytes).unwrap_or_default();
        self.call_raw(method, path, &bytes).await
    }

    /// POST /v1/enrollments with `spec` for `key`.
    pub async fn enroll(&self, spec: &EnrollSpec, key: &SigningKey) -> anyhow::Result<Resp> {
        self.call("POST", "/v1/enrollments", Some(&spec.body(key)))
            .await
    }

    /// Enrolls with `spec` and a fresh key, answering the session.
    pub async fn enroll_with(&self, spec: &EnrollSpec) -> anyhow::Result<Session> {
        let key = new_key();
        let r = self.enroll(spec, &key).await?.expect(201);
        Ok(Session {
            key,
            enrollment_id: r.s("enrollment_id"),
            credential_id: self.credential_id.clone(),
            conn: self.conn.clone(),
        })
    }

    /// Enrolls a session (kind `session`) with a fresh key.
    pub async fn enroll_session(&self, runtime_id: &str) -> anyhow::Result<Session> {
        self.enroll_with(&EnrollSpec::session(runtime_id)).await
    }

    /// Enrolls a pod with a fresh key.
    pub async fn enroll_pod(
        &self,
        runtime_id: &str,
        slot: Option<&str>,
    ) -> anyhow::Result<Session> {
        self.enroll_with(&EnrollSpec::pod(runtime_id, slot)).await
    }

    /// DELETE /v1/enrollments/{id}.
    pub async fn unenroll(&self, enrollment_id: &str) -> anyhow::Result<Resp> {
        self.call("DELETE", &format!("/v1/enrollments/{enrollment_id}"), None)
            .await
    }

    pub async fn operator_machines(&self) -> anyhow::Result<Resp> {
        self.call("GET", "/v1/operator/machines", None).await
    }

    pub async fn operator_revoke_machine(&self, credential_id: &str) -> anyhow::Result<Resp> {
        self.call(
            "POST",
            &format!("/v1/operator/machines/{credential_id}/revoke"),
            None,
        )
        .await
    }

    pub async fn operator_grants(&self) -> anyhow::Result<Resp> {
        self.call("GET", "/v1/operator/grants", None).await
    }

    pub async fn operator_revoke_grant(&self, grant_id: &str) -> anyhow::Result<Resp> {
        self.call(
            "POST",
            &format!("/v1/operator/grants/{grant_id}/revoke"),
            None,
        )
        .await
    }
}

// ----- sessions -----

/// An enrolled session (or pod): its key and enrollment id.
#[derive(Debug)]
pub struct Session {
    pub key: SigningKey,
    pub enrollment_id: String,
    /// The machine login that enrolled it.
    pub credential_id: String,
    pub conn: Conn,
}

impl Session {
    /// A correct session proof's pieces.
    pub fn proof_spec(&self, method: &str, path: &str, body: &[u8]) -> ProofSpec {
        ProofSpec::new(
            claims::TYP_SESSION_PROOF,
            &self.enrollment_id,
            &self.conn.public_url,
            method,
            &self.conn.wire_path(path),
            body,
            self.conn.now_secs(),
        )
    }

    /// A correct session proof.
    pub fn proof(&self, method: &str, path: &str, body: &[u8]) -> String {
        self.proof_spec(method, path, body).sign(&self.key)
    }

    /// A session-proved request with raw body bytes (empty = none).
    pub async fn call_raw(&self, method: &str, path: &str, body: &[u8]) -> anyhow::Result<Resp> {
        let proof = self.proof(method, path, body);
        self.conn.with_proof(method, path, Some(&proof), body).await
    }

    /// A session-proved request with a JSON body.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<Resp> {
        let bytes = body.map(json_bytes).unwrap_or_default();
        self.call_raw(method, path, &bytes).await
    }

    /// The claims of a secret request object, valid now.
    pub fn request_claims(
        &self,
        names: &[&str],
        reason: &str,
        lifetime_seconds: Option<u64>,
    ) -> SecretRequestClaims {
        let now = self.conn.now_secs();
        SecretRequestClaims {
            iat: now,
            exp: now + 120,
            jti: new_jti(),
            aud: self.conn.public_url.clone(),
            authorization_details: names
                .iter()
                .map(|n| AuthorizationDetail::agent_secret(n))
                .collect(),
            reason: reason.to_owned(),
            lifetime_seconds,
        }
    }

    /// Signs request claims with the session's key, named by its enrollment id.
    pub fn sign_request(&self, c: &impl serde::Serialize) -> String {
        jws::sign(
            &self.key,
            &Header::with_kid(claims::TYP_SECRET_REQUEST, &self.enrollment_id),
            c,
        )
        .expect("sign request")
    }

    /// A signed secret request object.
    pub fn secret_request(
        &self,
        names: &[&str],
        reason: &str,
        lifetime_seconds: Option<u64>,
    ) -> String {
        self.sign_request(&self.request_claims(names, reason, lifetime_seconds))
    }

    /// POST /v1/requests with a body as given.
    pub async fn post_request(&self, body: &Value) -> anyhow::Result<Resp> {
        self.call("POST", "/v1/requests", Some(body)).await
    }

    /// Requests `names` for a grant lasting until the session ends.
    pub async fn request(&self, names: &[&str]) -> anyhow::Result<Resp> {
        self.request_with(names, None, None).await
    }

    /// Requests `names` with a lifetime and a notification session id.
    pub async fn request_with(
        &self,
        names: &[&str],
        lifetime_seconds: Option<u64>,
        session_id: Option<&str>,
    ) -> anyhow::Result<Resp> {
        let mut body = json!({
            "request": self.secret_request(names, "end-to-end test", lifetime_seconds),
        });
        if let (Some(sid), Some(obj)) = (session_id, body.as_object_mut()) {
            obj.insert("session_id".into(), Value::String(sid.to_owned()));
        }
        self.post_request(&body).await
    }

    pub async fn get_request(&self, request_id: &str) -> anyhow::Result<Resp> {
        self.call("GET", &format!("/v1/requests/{request_id}"), None)
            .await
    }

    pub async fn cancel(&self, request_id: &str) -> anyhow::Result<Resp> {
        self.call("POST", &format!("/v1/requests/{request_id}/cancel"), None)
            .await
    }

    pub async fn values(&self, grant_id: &str) -> anyhow::Result<Resp> {
        self.call("POST", &format!("/v1/grants/{grant_id}/values"), None)
            .await
    }

    pub async fn revoke(&self, grant_id: &str) -> anyhow::Result<Resp> {
        self.call("POST", &format!("/v1/grants/{grant_id}/revoke"), None)
            .await
    }

    /// GET /v1/enrollments/self.
    pub async fn describe(&self) -> anyhow::Result<Resp> {
        self.call("GET", "/v1/enrollments/self", None).await
    }

    /// Renews its own enrollment.
    pub async fn renew(&self) -> anyhow::Result<Resp> {
        self.renew_id(&self.enrollment_id).await
    }

    /// POST /v1/enrollments/{id}/renew for any id.
    pub async fn renew_id(&self, enrollment_id: &str) -> anyhow::Result<Resp> {
        self.call(
            "POST",
            &format!("/v1/enrollments/{enrollment_id}/renew"),
            None,
        )
        .await
    }
}

// ----- the broker -----

/// An adjustment of the core's configuration.
type Configure = Box<dyn FnOnce(&mut BrokerConfig) + Send>;

/// Options for a test broker.
pub struct TestBrokerBuilder {
    secrets: Vec<StoredSecret>,
    quotas: Quotas,
    body_limit: Option<usize>,
    console_token: Option<String>,
    database_url: Option<String>,
    tokens: Option<Arc<dyn countersign_broker_core::TokenVerifier>>,
    store: Option<Arc<dyn SecretStore>>,
    configure: Vec<Configure>,
    adjust: Vec<Adjust>,
    tls: Option<countersign_broker_http::config::Tls>,
    replica: Option<Replica>,
}

/// An adjustment of the server's state (read timeout, connection cap).
type Adjust = Box<dyn FnOnce(&mut AppState) + Send>;

/// What a replica shares with the broker it replicates: the public URL (one load balancer in
/// front of both), the sealing key, the store, the database, the console token and the clock.
#[derive(Debug, Clone)]
struct Replica {
    public_url: String,
    seal_key: Zeroizing<Vec<u8>>,
    store_path: PathBuf,
    database_url: String,
    clock: Arc<ManualClock>,
}

impl std::fmt::Debug for TestBrokerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestBrokerBuilder")
            .field("secrets", &self.secrets.len())
            .field("quotas", &self.quotas)
            .field("database_url", &self.database_url.is_some())
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl TestBrokerBuilder {
    /// Replaces the store's secrets.
    pub fn secrets(mut self, secrets: Vec<StoredSecret>) -> Self {
        self.secrets = secrets;
        self
    }

    /// Rate-limit quotas (default: protocol.md §6).
    pub fn quotas(mut self, q: Quotas) -> Self {
        self.quotas = q;
        self
    }

    /// The request body limit (default 64 KiB).
    pub fn body_limit(mut self, bytes: usize) -> Self {
        self.body_limit = Some(bytes);
        self
    }

    /// No console token configured: every console route refuses.
    pub fn no_console_token(mut self) -> Self {
        self.console_token = None;
        self
    }

    /// A database other than a fresh SQLite file (e.g. PostgreSQL).
    pub fn database_url(mut self, url: &str) -> Self {
        self.database_url = Some(url.to_owned());
        self
    }

    /// A ServiceAccount token verifier (default none: token login answers TOKEN_LOGIN_OFF).
    pub fn tokens(mut self, verifier: Arc<dyn countersign_broker_core::TokenVerifier>) -> Self {
        self.tokens = Some(verifier);
        self
    }

    /// A secret store other than the local file (a cloud store against its emulator). The
    /// local file is still written from [`Self::secrets`] but not read: [`TestBroker::edit_store`]
    /// and [`TestBroker::value_of`] do not apply; edit the store itself.
    pub fn store(mut self, store: Arc<dyn SecretStore>) -> Self {
        self.store = Some(store);
        self
    }

    /// Adjusts the core's configuration (durations, service logins).
    pub fn configure(mut self, f: impl FnOnce(&mut BrokerConfig) + Send + 'static) -> Self {
        self.configure.push(Box::new(f));
        self
    }

    /// Adjusts the server's state before it serves (read timeout, connection cap).
    pub fn server(mut self, f: impl FnOnce(&mut AppState) + Send + 'static) -> Self {
        self.adjust.push(Box::new(f));
        self
    }

    /// Serves HTTPS with this certificate and key (PEM files); the test client trusts the
    /// certificate as a root.
    pub fn tls(mut self, cert: PathBuf, key: PathBuf) -> Self {
        self.tls = Some(countersign_broker_http::config::Tls { cert, key });
        self
    }

    /// A second replica of `other`: same database, store, sealing key, console token, clock and
    /// public URL, its own process state and listener.
    pub fn replica_of(mut self, other: &TestBroker) -> Self {
        self.replica = Some(Replica {
            public_url: other.conn.public_url.clone(),
            seal_key: other.seal_key.clone(),
            store_path: other.store_path.clone(),
            database_url: other.database_url.clone(),
            clock: other.conn.clock.clone(),
        });
        self.console_token = Some(other.conn.console_token.clone());
        self
    }

    /// Builds and serves the broker.
    pub async fn start(self) -> anyhow::Result<TestBroker> {
        let dir = TempDir::new()?;
        let replica = self.replica.clone();
        let store_path = match &replica {
            Some(r) => r.store_path.clone(),
            None => {
                let p = dir.path().join("secrets.toml");
                write_store(&p, &self.secrets)?;
                p
            }
        };
        let database_url = replica
            .as_ref()
            .map(|r| r.database_url.clone())
            .or(self.database_url.clone())
            .unwrap_or_else(|| {
                format!(
                    "sqlite://{}?mode=rwc",
                    dir.path().join("broker.db").display()
                )
            });

        // Bind first: the public URL names the real port.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind")?;
        let addr = listener.local_addr()?;
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let base_url = format!("{scheme}://{addr}");
        let public_url = replica
            .as_ref()
            .map(|r| r.public_url.clone())
            .unwrap_or_else(|| base_url.clone());

        let clock = match &replica {
            Some(r) => r.clock.clone(),
            None => Arc::new(ManualClock::new(start_time())),
        };
        let sql = countersign_broker_sql::SqlStorage::connect(&database_url)
            .await
            .map_err(|e| anyhow::anyhow!("database: {e}"))?;
        // As `server::build` wires it (SQLite behind the core's `Exclusive` decorator,
        // PostgreSQL as is); the fault switch goes outermost.
        let inner: Arc<dyn Storage> = countersign_broker_http::server::storage_for(sql);
        let faults = Arc::new(Faults::default());
        let storage = Arc::new(FaultyStorage {
            inner,
            faults: faults.clone(),
        });
        let store: Arc<dyn SecretStore> = match self.store {
            Some(s) => s,
            None => Arc::new(
                LocalFileStore::open(&store_path)
                    .await
                    .map_err(|e| anyhow::anyhow!("store: {e}"))?,
            ),
        };
        let seal_key = match &replica {
            Some(r) => r.seal_key.clone(),
            None => {
                let mut k = Zeroizing::new(vec![0u8; 32]);
                countersign_broker_core::Entropy::fill(&SystemEntropy, &mut k);
                k
            }
        };
        let sealer = Sealer::new(&seal_key).context("sealer")?;
        let mut config = BrokerConfig::new(&public_url);
        for f in self.configure {
            f(&mut config);
        }
        let parts = Parts {
            storage,
            store,
            clock: clock.clone(),
            entropy: Arc::new(SystemEntropy),
            tokens: self.tokens,
        };
        let broker = Arc::new(Broker::new(parts, sealer, config));
        broker
            .reload_policy()
            .await
            .map_err(|e| anyhow::anyhow!("policy: {e}"))?;
        let mut state = AppState::new(broker, self.console_token.as_deref(), self.quotas);
        if let Some(limit) = self.body_limit {
            state.body_limit = limit;
        }
        for f in self.adjust {
            f(&mut state);
        }
        let state = Arc::new(state);
        let running = countersign_broker_http::server::serve_listener(
            state.clone(),
            listener,
            self.tls.as_ref(),
            chrono::Duration::minutes(5),
        )
        .await?;
        let mut client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30));
        if let Some(t) = &self.tls {
            let pem = std::fs::read(&t.cert).context("read the test certificate")?;
            client = client.add_root_certificate(reqwest::Certificate::from_pem(&pem)?);
        }
        let client = client.build()?;
        Ok(TestBroker {
            conn: Conn {
                client,
                base_url,
                public_url,
                clock,
                console_token: self.console_token.unwrap_or_default(),
            },
            state,
            faults,
            store_path,
            database_url,
            secrets: Mutex::new(self.secrets),
            running: Some(running),
            seal_key,
            _dir: dir,
        })
    }
}

/// A running broker for one test.
#[derive(Debug)]
pub struct TestBroker {
    pub conn: Conn,
    /// The server's shared state (the broker itself: `state.broker`).
    pub state: Arc<AppState>,
    /// The storage fault switch.
    pub faults: Arc<Faults>,
    pub store_path: PathBuf,
    pub database_url: String,
    secrets: Mutex<Vec<StoredSecret>>,
    running: Option<Running>,
    seal_key: Zeroizing<Vec<u8>>,
    _dir: TempDir,
}

impl std::ops::Deref for TestBroker {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        &self.conn
    }
}

impl TestBroker {
    pub fn builder() -> TestBrokerBuilder {
        TestBrokerBuilder {
            secrets: default_secrets(),
            quotas: Quotas::default(),
            body_limit: None,
            console_token: Some(format!("cs-test-console-{}", uuid::Uuid::new_v4().simple())),
            database_url: None,
            tokens: None,
            store: None,
            configure: Vec::new(),
            adjust: Vec::new(),
            tls: None,
            replica: None,
        }
    }

    /// A broker with the defaults.
    pub async fn start() -> anyhow::Result<TestBroker> {
        Self::builder().start().await
    }

    /// Moves the broker's clock.
    pub fn advance(&self, d: chrono::Duration) {
        self.clock.advance(d);
    }

    /// The store's current secrets.
    pub fn secrets(&self) -> Vec<StoredSecret> {
        self.secrets
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// A secret's current value in the store.
    pub fn value_of(&self, name: &str) -> String {
        self.secrets()
            .into_iter()
            .find(|s| s.name == name)
            .and_then(|s| s.value)
            .unwrap_or_else(|| panic!("no value for {name} in the store"))
    }

    /// Rewrites the store file after `f` edits its secrets.
    pub fn edit_store(&self, f: impl FnOnce(&mut Vec<StoredSecret>)) -> anyhow::Result<()> {
        let mut g = self.secrets.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut g);
        write_store(&self.store_path, &g)
    }

    /// Edits one secret of the store.
    pub fn edit_secret(&self, name: &str, f: impl FnOnce(&mut StoredSecret)) -> anyhow::Result<()> {
        self.edit_store(|v| {
            if let Some(s) = v.iter_mut().find(|s| s.name == name) {
                f(s);
            }
        })
    }

    /// Writes arbitrary text as the store file.
    pub fn write_store_text(&self, text: &str) -> anyhow::Result<()> {
        std::fs::write(&self.store_path, text).context("write store file")
    }

    /// The broker's sealer (for what an operator's command makes with the key: enrollment
    /// codes).
    pub fn sealer(&self) -> Sealer {
        Sealer::new(&self.seal_key).expect("seal key")
    }

    /// An operator's enrollment code for `person`'s first passkey
    /// (`countersign-broker passkeys enroll-code`), on the broker's clock.
    pub fn enroll_code(&self, person: &str) -> String {
        use countersign_broker_core::Clock;
        let login = countersign_broker_core::ids::Login::parse(person).expect("login");
        countersign_broker_core::passkey::enroll_code(
            &self.sealer(),
            &SystemEntropy,
            &login,
            self.clock.now(),
            chrono::Duration::minutes(15),
        )
        .expect("code")
        .value
    }

    /// A second connection to the broker's database, as someone with database access but not
    /// the sealing key would have.
    pub async fn open_db(&self) -> anyhow::Result<countersign_broker_sql::SqlStorage> {
        countersign_broker_sql::SqlStorage::connect(&self.database_url)
            .await
            .map_err(|e| anyhow::anyhow!("database: {e}"))
    }

    /// A service's machine login, written straight into storage as a token login would mint
    /// it (no token issuer exists yet to mint one over HTTP): `host` `<ns>/<name>`, `subject`
    /// `system:serviceaccount:<ns>:<name>`, no operator, expiring in an hour.
    pub async fn service_machine(&self, service: &str, account: &str) -> anyhow::Result<Machine> {
        use countersign_broker_core::ids::CredentialId;
        use countersign_broker_core::model::LauncherCredential;
        let key = new_key();
        let now = self.state.broker.now();
        let (ns, name) = account.split_once('/').context("account is <ns>/<name>")?;
        let c = LauncherCredential {
            id: CredentialId::parse(&random_uuid()).map_err(|e| anyhow::anyhow!("{e}"))?,
            thumbprint: key.thumbprint(),
            jwk: key.public_jwk(),
            host: account.to_owned(),
            service: Some(service.to_owned()),
            subject: Some(format!("system:serviceaccount:{ns}:{name}")),
            operator: None,
            approved_by: String::new(),
            issued_at: now,
            expires_at: now + chrono::Duration::hours(1),
            revoked_at: None,
            record_id: None,
            // Sealed as it is written (through the broker's storage).
            seal: String::new(),
        };
        let mut tx = self.state.broker.storage().begin().await?;
        tx.put_credential(&c).await?;
        tx.commit().await?;
        Ok(Machine {
            key,
            credential_id: c.id.to_string(),
            person: String::new(),
            host: account.to_owned(),
            conn: self.conn.clone(),
        })
    }

    /// A client whose connections come from `source` (a loopback address), for per-source
    /// rate limits.
    pub fn client_from(&self, source: IpAddr) -> anyhow::Result<reqwest::Client> {
        Ok(reqwest::Client::builder()
            .no_proxy()
            .local_address(source)
            .timeout(Duration::from_secs(30))
            .build()?)
    }

    /// Stops the server (as [`Self::shutdown`]) but keeps its files, so that a broker started
    /// with [`TestBrokerBuilder::replica_of`] this one afterwards is this broker restarted.
    pub async fn stop(&mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown(Duration::from_secs(5)).await;
        }
    }

    /// Stops the server as a crash would (nothing released, no audit head kept) but keeps its files: a broker
    /// started with [`TestBrokerBuilder::replica_of`] this one afterwards inherits only what
    /// was durable before the crash.
    pub async fn crash(&mut self) {
        if let Some(r) = self.running.take() {
            r.abort().await;
        }
    }

    /// Stops the server: in-flight requests finish, background work stops.
    pub async fn shutdown(mut self) {
        if let Some(r) = self.running.take() {
            r.shutdown(Duration::from_secs(5)).await;
        }
    }
}

/// `COUNTERSIGN_TEST_POSTGRES_URL`, when a test may also run on PostgreSQL.
pub fn postgres_url() -> Option<String> {
    std::env::var("COUNTERSIGN_TEST_POSTGRES_URL")
        .ok()
        .filter(|s| !s.is_empty())
}

/// A fresh database of its own on the configured PostgreSQL server, dropped by [`PgDatabase::drop_now`].
/// Tests never use the server's own database: other runs (and other schema versions) share the
/// server.
#[derive(Debug)]
pub struct PgDatabase {
    /// The server's admin URL (`COUNTERSIGN_TEST_POSTGRES_URL`).
    pub admin: String,
    /// The fresh database's name.
    pub name: String,
    /// The URL of the fresh database.
    pub url: String,
}

impl PgDatabase {
    /// A fresh database named `{prefix}_{uuid}`, or `None` (after printing `skipped: …`) when no
    /// server is configured and `COUNTERSIGN_REQUIRE_POSTGRES` is not `1` (then: an error).
    pub async fn create(prefix: &str) -> anyhow::Result<Option<PgDatabase>> {
        use sqlx::{Connection as _, Executor as _};
        let Some(admin) = postgres_url() else {
            if std::env::var("COUNTERSIGN_REQUIRE_POSTGRES").as_deref() == Ok("1") {
                bail!(
                    "COUNTERSIGN_REQUIRE_POSTGRES=1 but COUNTERSIGN_TEST_POSTGRES_URL is not set"
                );
            }
            println!("skipped: COUNTERSIGN_TEST_POSTGRES_URL not set");
            return Ok(None);
        };
        sqlx::any::install_default_drivers();
        let name = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
        let mut conn = sqlx::AnyConnection::connect(&admin).await?;
        conn.execute(format!("CREATE DATABASE {name}").as_str())
            .await?;
        conn.close().await?;
        let (base, _) = admin
            .rsplit_once('/')
            .context("COUNTERSIGN_TEST_POSTGRES_URL names no database")?;
        let url = format!("{base}/{name}");
        Ok(Some(PgDatabase { admin, name, url }))
    }

    /// Drops the database (best effort: a leftover one only costs disk on a test server).
    pub async fn drop_now(self) {
        use sqlx::{Connection as _, Executor as _};
        if let Ok(mut conn) = sqlx::AnyConnection::connect(&self.admin).await {
            let _ = conn
                .execute(format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name).as_str())
                .await;
        }
    }
}

/// A random UUID in its hyphenated form (an id nobody holds).
pub fn random_uuid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// A random record id (64 lowercase hex digits nobody holds).
pub fn random_record_id() -> String {
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Calls `f` until it answers `Some`, every 50 ms for at most `within` (real time: for what the
/// server's background work does on its own, such as a policy reload once the broker's clock
/// has moved). Fails naming `what`; an error from `f` ends it at once.
pub async fn eventually<T, F, Fut>(what: &str, within: Duration, mut f: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if let Some(v) = f().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{what}: not seen within {within:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ----- passkeys (docs/passkeys.md) -----

/// Where the test console is, as the passkey settings name it.
pub const RP_ID: &str = "console.example";
/// The test console's origin.
pub const ORIGIN: &str = "https://console.example";

/// Passkeys on, with these `[[approval]]` rules.
pub fn passkey_settings(
    rules: Vec<countersign_broker_core::passkey::ApprovalRule>,
) -> countersign_broker_core::passkey::PasskeySettings {
    countersign_broker_core::passkey::PasskeySettings {
        rp_id: RP_ID.into(),
        origins: vec![ORIGIN.into()],
        rules,
    }
}

/// A rule: approving `secret` needs a passkey.
pub fn passkey_for_secret(secret: &str) -> countersign_broker_core::passkey::ApprovalRule {
    countersign_broker_core::passkey::ApprovalRule {
        covers: countersign_broker_core::passkey::Covers::Secret(
            countersign_broker_core::ids::SecretName::parse(secret).expect("name"),
        ),
        requirement: Default::default(),
    }
}

pub use countersign_proto::webauthn::soft::Soft;

impl Conn {
    /// `POST /v1/passkeys/challenge` for `person`.
    pub async fn passkey_challenge(&self, person: &str) -> anyhow::Result<Resp> {
        self.console(
            "POST",
            "/v1/passkeys/challenge",
            Some(&json!({ "approver": person })),
        )
        .await
    }

    /// Registers `soft` for `person` over a fresh challenge, with an enrollment code or an
    /// endorsement by `by` (a registered passkey of theirs).
    pub async fn register_passkey(
        &self,
        person: &str,
        soft: &Soft,
        code: Option<&str>,
        by: Option<&mut Soft>,
    ) -> anyhow::Result<Resp> {
        let offer = self.passkey_challenge(person).await?.expect(200);
        let challenge = b64::decode(&offer.s("challenge")).context("challenge")?;
        let (client, object) = soft.create(&challenge, "none");
        let mut body = json!({
            "approver": person,
            "name": "test key",
            "nonce": offer.s("nonce"),
            "client_data": b64::encode(&client),
            "attestation_object": b64::encode(&object),
            "enroll_code": code,
        });
        if let Some(by) = by {
            body["endorsement"] = assertion(by, &challenge, &offer.s("nonce"));
        }
        self.console("POST", "/v1/passkeys", Some(&body)).await
    }

    /// `POST /v1/credential-requests/{record}/statement` for `approver`.
    pub async fn statement(&self, record: &str, approver: &str) -> anyhow::Result<Resp> {
        self.console(
            "POST",
            &format!("/v1/credential-requests/{record}/statement"),
            Some(&json!({ "approver": approver })),
        )
        .await
    }

    /// Approves `record` as `approver`, countersigned with `soft` over a fresh statement.
    pub async fn approve_with_passkey(
        &self,
        record: &str,
        approver: &str,
        code: Option<&str>,
        soft: &mut Soft,
    ) -> anyhow::Result<Resp> {
        let st = self.statement(record, approver).await?.expect(200);
        let challenge = b64::decode(&st.s("challenge")).context("challenge")?;
        self.approve_countersigned(
            record,
            approver,
            code,
            assertion(soft, &challenge, &st.s("nonce")),
        )
        .await
    }

    /// Approves `record` with the countersignature given as is.
    pub async fn approve_countersigned(
        &self,
        record: &str,
        approver: &str,
        code: Option<&str>,
        countersignature: Value,
    ) -> anyhow::Result<Resp> {
        self.console(
            "POST",
            &format!("/v1/credential-requests/{record}/approve"),
            Some(&json!({ "approver": approver, "code": code, "countersignature": countersignature })),
        )
        .await
    }
}

/// `soft`'s assertion over `challenge`, as the countersignature body (with `nonce`).
pub fn assertion(soft: &mut Soft, challenge: &[u8], nonce: &str) -> Value {
    let (client, auth, sig) = soft.get(challenge);
    json!({
        "credential": soft.id_text(),
        "nonce": nonce,
        "client_data": b64::encode(&client),
        "authenticator_data": b64::encode(&auth),
        "signature": b64::encode(&sig),
    })
}
