//! [`K8sTokenVerifier`]: the issuer's keys fetched, cached and refreshed; tokens checked against
//! them.
//!
//! - The keys come from a JWKS URL, from OIDC discovery (`<issuer>/.well-known/openid-configuration`
//!   names `jwks_uri`; its `issuer` must be the configured one), or from a file.
//! - They are fetched on first use (or by [`K8sTokenVerifier::refresh`] at start), again when a
//!   token names a `kid` the cache does not hold (a rotated signing key), and when the cache is
//!   older than `max_age` (so a retired key stops verifying). Fetches are at most one per
//!   `min_refresh_interval` (10 s) on the broker's clock, whatever the cause, so tokens naming
//!   made-up `kid`s cannot make the broker hammer the issuer. A failed refresh keeps the keys
//!   it had.
//! - Each HTTP request has a timeout and a body limit (1 MiB).
//! - Time is the caller's `now` (the core's clock), for expiry checks and the refresh limit.
//!
//! A fetch that is needed and fails (no keys yet, or an unknown `kid` whose refresh failed)
//! answers 503 DATABASE_UNAVAILABLE ("token issuer keys: ..."): the token may be good, and the
//! client should try again. The cause goes to the log.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use async_trait::async_trait;
use countersign_broker_core::clock::Time;
use countersign_broker_core::identity::{ServiceAccountToken, TokenVerifier};
use countersign_broker_core::{Error, ErrorCode};
use serde::Deserialize;

use crate::jwks::{JwksError, KeySet};
use crate::token::{self, Expect, invalid};

/// The largest discovery or JWKS document read.
pub const MAX_BODY: usize = 1024 * 1024;

/// Where the issuer's keys are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JwksSource {
    /// A JWKS document at this URL.
    Url(String),
    /// OIDC discovery under the issuer URL, whose `jwks_uri` names the JWKS.
    Discovery,
    /// A JWKS document in a file, reread on every refresh.
    File(PathBuf),
}

/// How to trust one issuer.
#[derive(Debug, Clone)]
pub struct VerifierConfig {
    /// The issuer URL, exactly as tokens carry it in `iss`.
    pub issuer: String,
    /// The audience the broker's tokens are minted for.
    pub audience: String,
    pub jwks: JwksSource,
    /// Timeout of each HTTP request (connect included).
    pub timeout: Duration,
    /// Refreshes are at most this frequent.
    pub min_refresh_interval: chrono::Duration,
    /// Keys older than this are fetched again before use.
    pub max_age: chrono::Duration,
    /// PEM certificates trusted for the issuer's HTTPS, besides the built-in roots (a
    /// cluster's CA, e.g. `/var/run/secrets/kubernetes.io/serviceaccount/ca.crt`).
    pub ca_file: Option<PathBuf>,
    /// A bearer token sent with the fetches, reread each time (the broker's own projected
    /// token, when the API server does not serve its keys anonymously).
    pub bearer_token_file: Option<PathBuf>,
}

impl VerifierConfig {
    /// An issuer with the defaults: 5 s timeout, refresh at most every 10 s, keys kept 1 h.
    pub fn new(issuer: &str, audience: &str, jwks: JwksSource) -> Self {
        Self {
            issuer: issuer.to_owned(),
            audience: audience.to_owned(),
            jwks,
            timeout: Duration::from_secs(5),
            min_refresh_interval: chrono::Duration::seconds(10),
            max_age: chrono::Duration::hours(1),
            ca_file: None,
            bearer_token_file: None,
        }
    }
}

/// A configuration that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("token issuer: {0} must be an http:// or https:// URL")]
    NotUrl(&'static str),
    #[error("token issuer: audience must not be empty")]
    NoAudience,
    #[error("token issuer: CA file {path}: {cause}")]
    Ca { path: String, cause: String },
    #[error("token issuer: HTTP client: {0}")]
    Client(String),
}

/// Why the keys could not be fetched (logged; clients see 503).
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("GET {url}: {cause}")]
    Http { url: String, cause: String },
    #[error("GET {url}: HTTP {status}")]
    Status { url: String, status: u16 },
    #[error("GET {url}: body larger than {MAX_BODY} bytes")]
    TooLarge { url: String },
    #[error("discovery document {url}: {why}")]
    Discovery { url: String, why: &'static str },
    #[error("JWKS from {from}: {source}")]
    Jwks { from: String, source: JwksError },
    #[error("read {path}: {cause}")]
    File { path: String, cause: String },
    #[error("keys were fetched less than the minimum refresh interval ago")]
    TooSoon,
}

#[derive(Debug, Default)]
struct Cached {
    keys: KeySet,
    fetched_at: Option<Time>,
}

/// Verifies Kubernetes ServiceAccount tokens of one issuer (protocol.md §7).
#[derive(Debug)]
pub struct K8sTokenVerifier {
    config: VerifierConfig,
    client: reqwest::Client,
    cache: RwLock<Arc<Cached>>,
    /// When a fetch was last started; held while fetching, so fetches never overlap.
    last_attempt: tokio::sync::Mutex<Option<Time>>,
    /// Whether the last fetch failed (a kid it could not look up is then no verdict).
    last_failed: AtomicBool,
}

fn http_url(s: &str) -> bool {
    s.starts_with("https://") || s.starts_with("http://")
}

fn unavailable() -> Error {
    Error::with_message(
        ErrorCode::DATABASE_UNAVAILABLE,
        format!(
            "token issuer keys: {}",
            ErrorCode::DATABASE_UNAVAILABLE.message()
        ),
    )
}

#[derive(Deserialize)]
struct Discovery {
    issuer: String,
    jwks_uri: String,
}

impl K8sTokenVerifier {
    /// A verifier for `config`; nothing is fetched yet.
    pub fn new(config: VerifierConfig) -> Result<Self, ConfigError> {
        if !http_url(&config.issuer) {
            return Err(ConfigError::NotUrl("issuer"));
        }
        if let JwksSource::Url(u) = &config.jwks
            && !http_url(u)
        {
            return Err(ConfigError::NotUrl("jwks_url"));
        }
        if config.audience.trim().is_empty() {
            return Err(ConfigError::NoAudience);
        }
        let mut builder = reqwest::Client::builder()
            .timeout(config.timeout)
            .connect_timeout(config.timeout)
            .redirect(reqwest::redirect::Policy::limited(3))
            .user_agent(concat!("countersign-broker/", env!("CARGO_PKG_VERSION")));
        if let Some(path) = &config.ca_file {
            let ca_err = |cause: String| ConfigError::Ca {
                path: path.display().to_string(),
                cause,
            };
            let pem = std::fs::read(path).map_err(|e| ca_err(e.to_string()))?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| ca_err(e.to_string()))?;
            if certs.is_empty() {
                return Err(ca_err("no PEM certificate".into()));
            }
            for c in certs {
                builder = builder.add_root_certificate(c);
            }
        }
        let client = builder
            .build()
            .map_err(|e| ConfigError::Client(e.to_string()))?;
        Ok(Self {
            config,
            client,
            cache: RwLock::new(Arc::new(Cached::default())),
            last_attempt: tokio::sync::Mutex::new(None),
            last_failed: AtomicBool::new(false),
        })
    }

    pub fn config(&self) -> &VerifierConfig {
        &self.config
    }

    /// How many usable keys are cached.
    pub fn key_count(&self) -> usize {
        self.cached().keys.len()
    }

    fn cached(&self) -> Arc<Cached> {
        self.cache.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Fetches the keys now, whatever the refresh limit (at start). Answers how many are usable.
    pub async fn refresh(&self, now: Time) -> Result<usize, FetchError> {
        let mut last = self.last_attempt.lock().await;
        *last = Some(now);
        self.fetch_and_store(now).await
    }

    /// Refreshes unless the keys changed since `seen` (another task refreshed: use those) or a
    /// fetch started less than the minimum interval ago.
    async fn refresh_limited(&self, seen: &Arc<Cached>, now: Time) -> Result<(), FetchError> {
        let mut last = self.last_attempt.lock().await;
        if !Arc::ptr_eq(seen, &self.cached()) {
            return Ok(());
        }
        if let Some(t) = *last
            && (now - t).abs() < self.config.min_refresh_interval
        {
            return Err(FetchError::TooSoon);
        }
        *last = Some(now);
        self.fetch_and_store(now).await.map(|_| ())
    }

    async fn fetch_and_store(&self, now: Time) -> Result<usize, FetchError> {
        let fetched = self.fetch().await;
        self.last_failed.store(fetched.is_err(), Ordering::Relaxed);
        let keys = fetched?;
        let n = keys.len();
        *self.cache.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(Cached {
            keys,
            fetched_at: Some(now),
        });
        tracing::info!(keys = n, issuer = %self.config.issuer, "token issuer keys fetched");
        Ok(n)
    }

    async fn fetch(&self) -> Result<KeySet, FetchError> {
        let (from, bytes) = match &self.config.jwks {
            JwksSource::File(path) => {
                let bytes = tokio::fs::read(path).await.map_err(|e| FetchError::File {
                    path: path.display().to_string(),
                    cause: e.to_string(),
                })?;
                (path.display().to_string(), bytes)
            }
            JwksSource::Url(url) => (url.clone(), self.get(url).await?),
            JwksSource::Discovery => {
                let url = format!(
                    "{}/.well-known/openid-configuration",
                    self.config.issuer.trim_end_matches('/')
                );
                let doc: Discovery =
                    serde_json::from_slice(&self.get(&url).await?).map_err(|_| {
                        FetchError::Discovery {
                            url: url.clone(),
                            why: "not a JSON object with issuer and jwks_uri",
                        }
                    })?;
                if doc.issuer != self.config.issuer {
                    return Err(FetchError::Discovery {
                        url,
                        why: "its issuer is not the configured issuer",
                    });
                }
                if !http_url(&doc.jwks_uri) {
                    return Err(FetchError::Discovery {
                        url,
                        why: "jwks_uri is not an http(s) URL",
                    });
                }
                let bytes = self.get(&doc.jwks_uri).await?;
                (doc.jwks_uri, bytes)
            }
        };
        KeySet::parse(&bytes).map_err(|source| FetchError::Jwks { from, source })
    }

    /// GET with the timeout, the optional bearer token and the body limit; 2xx only.
    async fn get(&self, url: &str) -> Result<Vec<u8>, FetchError> {
        let http = |e: reqwest::Error| FetchError::Http {
            url: url.to_owned(),
            cause: e.without_url().to_string(),
        };
        let mut req = self
            .client
            .get(url)
            .header(reqwest::header::ACCEPT, "application/json");
        if let Some(path) = &self.config.bearer_token_file {
            let token = tokio::fs::read_to_string(path)
                .await
                .map_err(|e| FetchError::File {
                    path: path.display().to_string(),
                    cause: e.to_string(),
                })?;
            req = req.bearer_auth(token.trim());
        }
        let mut resp = req.send().await.map_err(http)?;
        if !resp.status().is_success() {
            return Err(FetchError::Status {
                url: url.to_owned(),
                status: resp.status().as_u16(),
            });
        }
        let too_large = || FetchError::TooLarge {
            url: url.to_owned(),
        };
        if resp.content_length().is_some_and(|n| n > MAX_BODY as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(http)? {
            if body.len() + chunk.len() > MAX_BODY {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body)
    }

    /// Verifies `token` at `now` (see the crate doc for the rules and their codes).
    pub async fn verify_token(&self, token: &str, now: Time) -> Result<ServiceAccountToken, Error> {
        let parsed = token::parse(token)?;
        let kid = parsed.kid.as_deref();
        let mut cached = self.cached();
        let stale = match cached.fetched_at {
            None => true,
            Some(at) => (now - at).abs() >= self.config.max_age,
        };
        if stale {
            match self.refresh_limited(&cached, now).await {
                Ok(()) | Err(FetchError::TooSoon) => {}
                Err(e) => tracing::warn!(error = %e, "token issuer keys: refresh failed"),
            }
            cached = self.cached();
            if cached.keys.is_empty() {
                return Err(unavailable());
            }
        }
        if !cached.keys.knows(kid, parsed.alg) {
            // A rotated signing key: fetch again (rate-limited) before refusing.
            match self.refresh_limited(&cached, now).await {
                Ok(()) => cached = self.cached(),
                // Looked up recently: a verdict, unless that lookup failed.
                Err(FetchError::TooSoon) if self.last_failed.load(Ordering::Relaxed) => {
                    return Err(unavailable());
                }
                Err(FetchError::TooSoon) => {}
                Err(e) => {
                    tracing::warn!(error = %e, "token issuer keys: refresh for an unknown kid failed");
                    return Err(unavailable());
                }
            }
        }
        let signed = cached
            .keys
            .candidates(kid, parsed.alg)
            .any(|k| k.verifies(&parsed.signing_input, &parsed.signature));
        if !signed {
            return Err(if cached.keys.knows(kid, parsed.alg) {
                invalid("signature does not verify")
            } else {
                invalid("signed by a key the issuer does not publish")
            });
        }
        token::check_claims(
            &parsed.payload,
            &Expect {
                issuer: &self.config.issuer,
                audience: &self.config.audience,
            },
            now,
        )
    }
}

#[async_trait]
impl TokenVerifier for K8sTokenVerifier {
    async fn verify(&self, token: &str, now: Time) -> Result<ServiceAccountToken, Error> {
        self.verify_token(token, now).await
    }
}
