//! Kubernetes fixtures: a ServiceAccount token issuer and a broker that trusts it.
//!
//! - [`Issuer`] serves OIDC discovery (`/.well-known/openid-configuration`) and its JWKS
//!   (`/openid/v1/jwks`) over HTTP on loopback (axum, port 0), as kube-apiserver does, and counts
//!   the fetches. Keys ([`IssuerKey`]) are real RS256 (aws-lc-rs RSA-2048) or ES256 (P-256) keys;
//!   a test publishes, rotates and retires them while the issuer runs, or takes the issuer down.
//! - [`TokenSpec`] lays out a token's claims as kube-apiserver writes them (`aud`, `exp`, `iat`,
//!   `iss`, `jti`, `kubernetes.io` with `namespace`, `node`, `pod`, `serviceaccount`, `nbf`,
//!   `sub`), for a projected token with the broker's audience or a default-mounted one (a year,
//!   the API server's audience, `warnafter`); [`IssuerKey::mint`] signs it.
//! - [`K8sBroker`] starts the real broker from a real configuration file (`Config::load`, then
//!   `server::build` and `serve_listener`, port 0) with `[token_issuer]`, `service_logins` and
//!   optionally `[notifications]`, on a [`ManualClock`] the tests move. It hands out the
//!   [`http`](crate::http) helpers (`Conn`, `Machine`, `Session`) for everything after the login.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use aws_lc_rs::rsa::KeySize;
use aws_lc_rs::signature::{KeyPair as _, RSA_PKCS1_SHA256};
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use countersign_broker_core::{Clock, ManualClock};
use countersign_broker_http::AppState;
use countersign_broker_http::server::Running;
use countersign_proto::claims::{self, AuthorizationDetail, TokenLoginClaims};
use countersign_proto::jws::{self, Header};
use countersign_proto::{SigningKey, b64};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::http::{Conn, Machine, Resp, TempDir, new_jti, start_time};

/// The audience the broker is configured with.
pub const AUDIENCE: &str = "countersign-test";
/// The API server's audience: what a default-mounted token carries.
pub const API_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";
/// The console token of every [`K8sBroker`].
pub const CONSOLE_TOKEN: &str = "k8s-test-console-token-0123456789";

// ----- keys -----

enum KeyInner {
    Rsa(aws_lc_rs::rsa::KeyPair),
    Ec(SigningKey),
}

/// One of the issuer's signing keys, with its `kid`.
pub struct IssuerKey {
    kid: String,
    inner: KeyInner,
}

impl std::fmt::Debug for IssuerKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuerKey")
            .field("kid", &self.kid)
            .field("alg", &self.alg())
            .finish()
    }
}

fn random_kid() -> String {
    let mut b = [0u8; 32];
    countersign_broker_core::Entropy::fill(&countersign_broker_core::SystemEntropy, &mut b);
    b64::encode(&b)
}

impl IssuerKey {
    /// A fresh RSA-2048 key (RS256), named as kube-apiserver names its keys.
    pub fn rsa() -> Self {
        let kp = aws_lc_rs::rsa::KeyPair::generate(KeySize::Rsa2048).expect("RSA key generation");
        Self {
            kid: random_kid(),
            inner: KeyInner::Rsa(kp),
        }
    }

    /// A fresh P-256 key (ES256).
    pub fn ec() -> Self {
        Self {
            kid: random_kid(),
            inner: KeyInner::Ec(SigningKey::generate().expect("P-256 key generation")),
        }
    }

    /// The same key material under another `kid`.
    pub fn with_kid(mut self, kid: &str) -> Self {
        self.kid = kid.to_owned();
        self
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    pub fn alg(&self) -> &'static str {
        match self.inner {
            KeyInner::Rsa(_) => "RS256",
            KeyInner::Ec(_) => "ES256",
        }
    }

    /// The public JWK as the issuer's JWKS lists it.
    pub fn jwk(&self) -> Value {
        match &self.inner {
            KeyInner::Rsa(kp) => {
                let pk = kp.public_key();
                json!({
                    "use": "sig",
                    "kty": "RSA",
                    "kid": self.kid,
                    "alg": "RS256",
                    "n": b64::encode(pk.modulus().big_endian_without_leading_zero()),
                    "e": b64::encode(pk.exponent().big_endian_without_leading_zero()),
                })
            }
            KeyInner::Ec(k) => {
                let mut v = serde_json::to_value(k.public_jwk()).expect("jwk");
                v["kid"] = json!(self.kid);
                v["use"] = json!("sig");
                v["alg"] = json!("ES256");
                v
            }
        }
    }

    /// Signs `claims` under `header` as given (any `alg`, any `kid`).
    pub fn sign_raw(&self, header: &Value, claims: &Value) -> String {
        let input = format!(
            "{}.{}",
            b64::encode(header.to_string().as_bytes()),
            b64::encode(claims.to_string().as_bytes())
        );
        let sig = match &self.inner {
            KeyInner::Rsa(kp) => {
                let mut sig = vec![0u8; kp.public_modulus_len()];
                kp.sign(
                    &RSA_PKCS1_SHA256,
                    &aws_lc_rs::rand::SystemRandom::new(),
                    input.as_bytes(),
                    &mut sig,
                )
                .expect("RSA sign");
                sig
            }
            KeyInner::Ec(k) => k.sign(input.as_bytes()).expect("ES256 sign").to_vec(),
        };
        format!("{input}.{}", b64::encode(&sig))
    }

    /// A token as kube-apiserver signs it: header `{"alg","kid"}` (no `typ`).
    pub fn mint(&self, spec: &TokenSpec) -> String {
        self.sign_raw(
            &json!({ "alg": self.alg(), "kid": self.kid }),
            &spec.claims(),
        )
    }
}

// ----- tokens -----

/// A stable UID for an account (the same ServiceAccount keeps its UID across tokens).
fn account_uid(account: &str) -> String {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, account.as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&d.as_ref()[..16]);
    uuid::Uuid::from_bytes(b).to_string()
}

/// A pod a token is bound to.
#[derive(Debug, Clone)]
pub struct Pod {
    pub name: String,
    pub uid: String,
}

impl Pod {
    /// A pod with a fresh UID.
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            uid: uuid::Uuid::new_v4().to_string(),
        }
    }
}

/// The claims of a ServiceAccount token.
#[derive(Debug, Clone)]
pub struct TokenSpec {
    pub iss: String,
    pub aud: Vec<String>,
    pub namespace: String,
    pub name: String,
    pub sa_uid: String,
    pub pod: Option<Pod>,
    pub iat: i64,
    pub exp: i64,
    pub nbf: i64,
    /// `kubernetes.io.warnafter` (default-mounted tokens).
    pub warnafter: Option<i64>,
}

impl TokenSpec {
    /// A projected token for `<namespace>/<name>` with the broker's audience, issued at `now`,
    /// living ten minutes.
    pub fn projected(iss: &str, account: &str, now: i64) -> Self {
        let (namespace, name) = account.split_once('/').expect("<namespace>/<name>");
        Self {
            iss: iss.to_owned(),
            aud: vec![AUDIENCE.to_owned()],
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            sa_uid: account_uid(account),
            pod: None,
            iat: now,
            exp: now + 600,
            nbf: now,
            warnafter: None,
        }
    }

    /// The token kubelet mounts by default: a year long, the API server's audience, bound to
    /// a pod, with `warnafter`.
    pub fn default_mounted(iss: &str, account: &str, pod: Pod, now: i64) -> Self {
        Self {
            aud: vec![API_AUDIENCE.to_owned()],
            exp: now + 365 * 24 * 3600,
            warnafter: Some(now + 3607),
            ..Self::projected(iss, account, now).for_pod(pod)
        }
    }

    /// Bound to `pod`.
    pub fn for_pod(mut self, pod: Pod) -> Self {
        self.pod = Some(pod);
        self
    }

    /// Issued at `iat`, expiring `lifetime` seconds later.
    pub fn at(mut self, iat: i64, lifetime: i64) -> Self {
        self.iat = iat;
        self.nbf = iat;
        self.exp = iat + lifetime;
        self
    }

    pub fn claims(&self) -> Value {
        let mut k8s = json!({
            "namespace": self.namespace,
            "node": { "name": "kind-worker", "uid": "6e1b9c52-7d4f-4a3e-9f8a-0c1d2e3f4a5b" },
            "serviceaccount": { "name": self.name, "uid": self.sa_uid },
        });
        if let Some(p) = &self.pod {
            k8s["pod"] = json!({ "name": p.name, "uid": p.uid });
        }
        if let Some(w) = self.warnafter {
            k8s["warnafter"] = json!(w);
        }
        json!({
            "aud": self.aud,
            "exp": self.exp,
            "iat": self.iat,
            "iss": self.iss,
            "jti": uuid::Uuid::new_v4().to_string(),
            "kubernetes.io": k8s,
            "nbf": self.nbf,
            "sub": format!("system:serviceaccount:{}:{}", self.namespace, self.name),
        })
    }
}

// ----- the issuer -----

#[derive(Debug, Default)]
struct IssuerState {
    url: String,
    published: Mutex<Vec<Value>>,
    discovery_fetches: AtomicUsize,
    jwks_fetches: AtomicUsize,
    down: AtomicBool,
    /// When set, fetches must carry `Authorization: Bearer <this>`.
    bearer: Mutex<Option<String>>,
}

impl IssuerState {
    /// Down, or a bearer token required and not shown: the status to answer.
    fn refuse(&self, headers: &HeaderMap) -> Option<StatusCode> {
        if self.down.load(Ordering::SeqCst) {
            return Some(StatusCode::SERVICE_UNAVAILABLE);
        }
        let want = self.bearer.lock().ok().and_then(|b| b.clone())?;
        let shown = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        (shown != Some(want.as_str())).then_some(StatusCode::UNAUTHORIZED)
    }
}

/// A token issuer serving OIDC discovery and its JWKS on loopback.
#[derive(Debug)]
pub struct Issuer {
    pub url: String,
    state: Arc<IssuerState>,
    task: JoinHandle<()>,
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn discovery(State(st): State<Arc<IssuerState>>, headers: HeaderMap) -> Response {
    st.discovery_fetches.fetch_add(1, Ordering::SeqCst);
    if let Some(status) = st.refuse(&headers) {
        return status.into_response();
    }
    Json(json!({
        "issuer": st.url,
        "jwks_uri": format!("{}/openid/v1/jwks", st.url),
        "response_types_supported": ["id_token"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
    }))
    .into_response()
}

async fn jwks(State(st): State<Arc<IssuerState>>, headers: HeaderMap) -> Response {
    st.jwks_fetches.fetch_add(1, Ordering::SeqCst);
    if let Some(status) = st.refuse(&headers) {
        return status.into_response();
    }
    let keys = st.published.lock().map(|k| k.clone()).unwrap_or_default();
    Json(json!({ "keys": keys })).into_response()
}

impl Issuer {
    /// Starts an issuer publishing `keys`.
    pub async fn start(keys: &[&IssuerKey]) -> anyhow::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}", listener.local_addr()?);
        let state = Arc::new(IssuerState {
            url: url.clone(),
            published: Mutex::new(keys.iter().map(|k| k.jwk()).collect()),
            ..Default::default()
        });
        let app = axum::Router::new()
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/openid/v1/jwks", get(jwks))
            .with_state(state.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Self { url, state, task })
    }

    pub fn jwks_url(&self) -> String {
        format!("{}/openid/v1/jwks", self.url)
    }

    /// The JWKS document as served now.
    pub fn jwks_document(&self) -> Value {
        json!({ "keys": self.state.published.lock().map(|k| k.clone()).unwrap_or_default() })
    }

    /// Adds a key to the JWKS.
    pub fn publish(&self, key: &IssuerKey) {
        if let Ok(mut k) = self.state.published.lock() {
            k.push(key.jwk());
        }
    }

    /// Removes a key from the JWKS.
    pub fn retire(&self, key: &IssuerKey) {
        if let Ok(mut k) = self.state.published.lock() {
            k.retain(|j| j["kid"] != json!(key.kid()));
        }
    }

    /// Answers 503 to everything while `down`.
    pub fn set_down(&self, down: bool) {
        self.state.down.store(down, Ordering::SeqCst);
    }

    /// Requires `Authorization: Bearer <token>` on every fetch (as an API server that does not
    /// serve its keys anonymously).
    pub fn require_bearer(&self, token: Option<&str>) {
        if let Ok(mut b) = self.state.bearer.lock() {
            *b = token.map(str::to_owned);
        }
    }

    /// JWKS documents served so far.
    pub fn jwks_fetches(&self) -> usize {
        self.state.jwks_fetches.load(Ordering::SeqCst)
    }

    pub fn discovery_fetches(&self) -> usize {
        self.state.discovery_fetches.load(Ordering::SeqCst)
    }

    /// A projected token for `account` issued at `now`.
    pub fn projected(&self, account: &str, now: i64) -> TokenSpec {
        TokenSpec::projected(&self.url, account, now)
    }
}

/// A TCP server that accepts connections and never answers (for timeouts). Answers its URL.
pub async fn black_hole() -> anyhow::Result<(String, JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let task = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((sock, _)) = listener.accept().await {
            held.push(sock);
        }
    });
    Ok((url, task))
}

// ----- the broker -----

/// What a [`K8sBroker`] is configured with, as TOML fragments.
#[derive(Debug, Clone, Default)]
pub struct K8sConfig {
    /// The `[token_issuer]` section's body (without the header).
    pub token_issuer: Option<String>,
    /// `service_logins` entries: service → accounts.
    pub service_logins: Vec<(String, Vec<String>)>,
    /// The `[notifications]` section's body.
    pub notifications: Option<String>,
    /// The `[durations]` section's body.
    pub durations: Option<String>,
    /// Secrets of the local store: (agent name, owner, tier).
    pub secrets: Vec<(String, String, String)>,
    /// A database URL other than a fresh SQLite file.
    pub database_url: Option<String>,
    /// The seal key (replicas sharing a database share it); none: a fresh one.
    pub seal_key: Option<[u8; 32]>,
}

/// The broker, started from a configuration file, trusting a token issuer.
#[derive(Debug)]
pub struct K8sBroker {
    pub conn: Conn,
    pub state: Arc<AppState>,
    pub clock: Arc<ManualClock>,
    pub database_url: String,
    running: Option<Running>,
    pub dir: TempDir,
}

impl Drop for K8sBroker {
    fn drop(&mut self) {
        if let Some(r) = self.running.take() {
            r.handle.shutdown();
        }
    }
}

fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

impl K8sBroker {
    /// Writes the configuration (with the seal key, console token and store files) into a
    /// fresh directory, loads it as `countersign-broker serve` does, and serves it on port 0.
    pub async fn start(c: K8sConfig) -> anyhow::Result<Self> {
        let dir = TempDir::new()?;
        let p = dir.path();
        let mut seal = [0u8; 32];
        countersign_broker_core::Entropy::fill(&countersign_broker_core::SystemEntropy, &mut seal);
        let seal = c.seal_key.unwrap_or(seal);
        std::fs::write(p.join("seal.key"), b64::encode(&seal))?;
        std::fs::write(p.join("console-token"), CONSOLE_TOKEN)?;
        let mut store = "prefix = \"agents/\"\nkey = \"local\"\n".to_owned();
        for (name, owner, tier) in &c.secrets {
            store.push_str(&format!(
                "\n[[secret]]\nname = {}\nowner = {}\ntier = {}\nvalue = \"v-{}\"\n",
                toml_str(&format!(
                    "agents/{}",
                    name.to_ascii_lowercase().replace('_', "-")
                )),
                toml_str(owner),
                toml_str(tier),
                uuid::Uuid::new_v4().simple()
            ));
        }
        std::fs::write(p.join("secrets.toml"), store)?;

        let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind")?;
        let addr: SocketAddr = listener.local_addr()?;
        let database_url = c
            .database_url
            .clone()
            .unwrap_or_else(|| format!("sqlite://{}?mode=rwc", p.join("broker.db").display()));
        let mut text = format!(
            "listen = {}\npublic_url = {}\ndatabase_url = {}\nseal_key_file = {}\nconsole_token_file = {}\naudit_state_file = {}\n",
            toml_str(&addr.to_string()),
            toml_str(&format!("http://{addr}")),
            toml_str(&database_url),
            toml_str(&p.join("seal.key").display().to_string()),
            toml_str(&p.join("console-token").display().to_string()),
            toml_str(&p.join("audit-state.json").display().to_string()),
        );
        text.push_str("\n[service_logins]\n");
        for (service, accounts) in &c.service_logins {
            let list: Vec<String> = accounts.iter().map(|a| toml_str(a)).collect();
            text.push_str(&format!("{} = [{}]\n", toml_str(service), list.join(", ")));
        }
        text.push_str(&format!(
            "\n[store]\nkind = \"local\"\npath = {}\n",
            toml_str(&p.join("secrets.toml").display().to_string())
        ));
        for (section, body) in [
            ("token_issuer", &c.token_issuer),
            ("notifications", &c.notifications),
            ("durations", &c.durations),
        ] {
            if let Some(body) = body {
                text.push_str(&format!("\n[{section}]\n{body}\n"));
            }
        }
        let path = p.join("broker.toml");
        std::fs::write(&path, &text)?;
        let config = countersign_broker_http::Config::load(&path)?;

        let clock = Arc::new(ManualClock::new(start_time()));
        let state = countersign_broker_http::server::build(&config, clock.clone()).await?;
        let running = countersign_broker_http::server::serve_listener(
            state.clone(),
            listener,
            None,
            chrono::Duration::minutes(5),
        )
        .await?;
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(30))
            .build()?;
        Ok(Self {
            conn: Conn {
                client,
                base_url: format!("http://{addr}"),
                public_url: format!("http://{addr}"),
                clock: clock.clone(),
                console_token: CONSOLE_TOKEN.to_owned(),
            },
            state,
            clock,
            database_url,
            running: Some(running),
            dir,
        })
    }

    /// The clock's time, in seconds.
    pub fn now(&self) -> i64 {
        self.clock.now().timestamp()
    }

    /// Moves the clock.
    pub fn advance(&self, seconds: i64) {
        self.clock.advance(chrono::Duration::seconds(seconds));
    }

    /// A signed token-login object for `service`, bound to `key`.
    pub fn token_login_request(&self, key: &SigningKey, service: &str) -> String {
        let now = self.now();
        jws::sign(
            key,
            &Header::with_jwk(claims::TYP_TOKEN_LOGIN, key.public_jwk()),
            &TokenLoginClaims {
                iat: now,
                exp: now + 120,
                jti: new_jti(),
                authorization_details: vec![AuthorizationDetail::launcher_credential(service)],
            },
        )
        .expect("sign token login")
    }

    /// POST /v1/launcher-credentials/token.
    pub async fn token_login(
        &self,
        token: &str,
        key: &SigningKey,
        service: &str,
    ) -> anyhow::Result<Resp> {
        let body = json!({ "token": token, "request": self.token_login_request(key, service) });
        self.conn
            .open("POST", "/v1/launcher-credentials/token", Some(&body))
            .await
    }

    /// Logs `key` in with `token` and answers the service's machine (for launcher calls).
    pub async fn service_machine(
        &self,
        token: &str,
        key: SigningKey,
        service: &str,
    ) -> anyhow::Result<Machine> {
        let r = self.token_login(token, &key, service).await?.expect(200);
        Ok(Machine {
            key,
            credential_id: r.s("credential_id"),
            person: String::new(),
            host: String::new(),
            conn: self.conn.clone(),
        })
    }
}

/// `[token_issuer]` trusting `issuer` through OIDC discovery with [`AUDIENCE`].
pub fn discovery_section(issuer: &Issuer) -> String {
    format!(
        "issuer = {}\naudience = {}\ndiscovery = true\ntimeout_seconds = 2",
        toml_str(&issuer.url),
        toml_str(AUDIENCE)
    )
}
