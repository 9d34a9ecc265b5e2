//! Cloud B's secret store: Google Secret Manager, through the official client
//! (`google-cloud-secretmanager-v1`, which speaks Secret Manager's REST/JSON API). It implements
//! the core's [`SecretStore`] with the rules of protocol.md §5, in the same order as the local
//! file store:
//!
//! 1. `absent`: no secret `<prefix><suffix>` (Secret Manager deletes at once; there is no
//!    scheduled deletion of a secret).
//! 2. `owner-tag-missing`: the `owner` annotation is missing or not an e-mail. Policy facts are
//!    *annotations*, not labels, because a label value cannot hold an e-mail.
//! 3. `no-current-value`: the secret's `latest` version does not exist or is not `ENABLED`.
//!    The check is a GetSecretVersion of `<secret>/versions/latest` (metadata only, so listing
//!    reads no value and leaves no access in the audit log). `latest` is the most recently
//!    created version whatever its state, and it is what [`SecretStore::read_value`] reads: a
//!    secret whose newest version is disabled is refused even when an older version is enabled,
//!    so that what is served is always what would be released.
//! 4. `wrong-encryption-key`: the secret is not configured with customer-managed encryption
//!    under [`GcpStoreConfig::key_name`] (automatic replication's `kmsKeyName`, or every
//!    user-managed replica's), **or** the latest version's replication status does not show it
//!    encrypted with a version of that key. Secret Manager applies a changed encryption setting
//!    only to versions added afterwards, so the secret's setting alone does not say how its
//!    current value is encrypted.
//! 5. `tier-unknown`: a `tier` annotation other than `automatic`, `owner`, `shared`, `locked`
//!    (absent = `owner`).
//!
//! Otherwise the secret is served with its full resource name
//! (`projects/<number>/secrets/<id>`) as `resource_name`.
//!
//! Listing asks for every secret of the project (no server-side `filter`) and keeps those whose
//! id starts with the prefix and whose rest is a valid stored name. A filter could not be tested
//! here against the real service, and a filter that matched less than intended would silently
//! empty the policy; a project with many other secrets costs a few more pages instead.
//!
//! Every call to the service is bounded by [`GcpStoreConfig::timeout`] (the client's own retry
//! of transient failures included); a timeout or transport failure is
//! [`StoreError::Unavailable`]. Values are read fresh on every [`SecretStore::read_value`],
//! never cached and never logged: the store refuses to start when
//! `GOOGLE_CLOUD_RUST_LOGGING=true` would make the client trace its responses, payloads
//! included. A value that is not UTF-8 is treated as [`StoreError::NotFound`]: it cannot be
//! handed out as a string, and it is refused the same way as a value that is gone.
//!
//! # Tests
//!
//! The tests (`tests/rest_fake.rs`) run the real Google client against a small Secret Manager
//! REST server, the `fake` module (cargo feature `fake`; the end-to-end tests that run the
//! broker over this store use it too). No installable emulator implements Secret Manager
//! faithfully: the known ones drop annotations and CMEK settings and ignore filters, and this
//! store's judging depends on exactly those. The client speaks HTTP/JSON to an overridden
//! endpoint, so the fake serves Secret Manager's REST paths and JSON shapes, including Google's
//! error shape (`{"error":{"code":404,"message":..,"status":"NOT_FOUND"}}`).

use std::time::Duration;

use async_trait::async_trait;
use countersign_broker_core::ids::{Login, SecretName};
use countersign_broker_core::policy::{PolicyEntry, Refusal, Tier};
use countersign_broker_core::secrets::{
    Inspection, Listing, SecretStore, SecretValue, Settings, StoreError,
};
use futures::{StreamExt as _, TryStreamExt as _};
use google_cloud_gax::error::rpc::Code;
use google_cloud_gax::exponential_backoff::ExponentialBackoffBuilder;
use google_cloud_gax::retry_policy::{Aip194Strict, RetryPolicyExt as _};
use google_cloud_secretmanager_v1::client::SecretManagerService;
use google_cloud_secretmanager_v1::model::{Secret, SecretVersion, secret_version};
use zeroize::{Zeroize, Zeroizing};

#[cfg(feature = "fake")]
pub mod fake;

/// The store's name in settings.
pub const STORE_NAME: &str = "cloud-b-secret-store";

/// The default bound on each call to Secret Manager.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// The annotation naming a secret's owner (an e-mail).
pub const OWNER_ANNOTATION: &str = "owner";
/// The annotation naming a secret's tier.
pub const TIER_ANNOTATION: &str = "tier";

/// How many secrets a listing asks for per page (the service may send fewer).
const PAGE_SIZE: i32 = 500;
/// How many `latest` version checks a listing runs at once.
const LIST_CONCURRENCY: usize = 8;
/// At most this many pages in one listing (a guard against a service that never stops paging).
const MAX_PAGES: usize = 10_000;

/// How the store authenticates to Secret Manager.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GcpCredentials {
    /// Application Default Credentials (the environment, a credentials file, or the metadata
    /// server). The production choice.
    #[default]
    ApplicationDefault,
    /// No credentials at all: for tests against a local fake or an emulator.
    Anonymous,
}

/// The store's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcpStoreConfig {
    /// `projects/<project number>/secrets/<secret-id prefix>-`.
    pub secrets_prefix: String,
    /// `cloud_b_key_name`: the Cloud KMS key every agent secret must be encrypted with,
    /// `projects/<p>/locations/<l>/keyRings/<r>/cryptoKeys/<k>`.
    pub key_name: String,
    /// The service's address, when not Google's (`http://127.0.0.1:8085` for a local fake).
    pub endpoint: Option<String>,
    /// The bound on each call to the service.
    pub timeout: Duration,
    pub credentials: GcpCredentials,
}

impl GcpStoreConfig {
    /// A configuration with Google's endpoint, the default timeout and Application Default
    /// Credentials.
    pub fn new(secrets_prefix: impl Into<String>, key_name: impl Into<String>) -> Self {
        Self {
            secrets_prefix: secrets_prefix.into(),
            key_name: key_name.into(),
            endpoint: None,
            timeout: DEFAULT_TIMEOUT,
            credentials: GcpCredentials::ApplicationDefault,
        }
    }
}

/// The parts of a valid prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Prefix {
    /// `projects/<n>/secrets/<id prefix>-`
    full: String,
    /// `<n>`
    project: String,
}

impl Prefix {
    fn parse(s: &str) -> Option<Prefix> {
        let rest = s.strip_prefix("projects/")?;
        let (project, rest) = rest.split_once('/')?;
        let id_prefix = rest.strip_prefix("secrets/")?;
        let ok = !project.is_empty()
            && project.bytes().all(|b| b.is_ascii_digit())
            && id_prefix.len() >= 2
            && id_prefix.len() < 255
            && id_prefix.ends_with('-')
            && id_prefix
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        ok.then(|| Prefix {
            full: s.to_owned(),
            project: project.to_owned(),
        })
    }

    fn parent(&self) -> String {
        format!("projects/{}", self.project)
    }
}

/// The variable by which the Google client turns its own request tracing on, whatever its
/// builder says. Its debug events record each response, `AccessSecretVersion`'s payload
/// included, so the store refuses to start with it on.
const CLIENT_LOGGING_VAR: &str = "GOOGLE_CLOUD_RUST_LOGGING";

/// Whether the Google client would trace (it does for exactly `true`).
fn client_logging_on(value: Option<&str>) -> bool {
    value == Some("true")
}

/// Whether `s` has the shape `projects/*/locations/*/keyRings/*/cryptoKeys/*`.
fn is_key_name(s: &str) -> bool {
    let parts: Vec<&str> = s.split('/').collect();
    parts.len() == 8
        && parts[0] == "projects"
        && parts[2] == "locations"
        && parts[4] == "keyRings"
        && parts[6] == "cryptoKeys"
        && parts.iter().all(|p| !p.is_empty())
}

/// A secret store in Google Secret Manager (cloud B).
#[derive(Debug, Clone)]
pub struct GcpSecretStore {
    client: SecretManagerService,
    prefix: Prefix,
    key_name: String,
    timeout: Duration,
}

impl GcpSecretStore {
    /// Builds the client. Refuses a prefix not of the form
    /// `projects/<digits>/secrets/<id-prefix>-` and a key name not of the form
    /// `projects/*/locations/*/keyRings/*/cryptoKeys/*`. Makes no call to the service (with
    /// Application Default Credentials from a metadata server, the client asks that server for
    /// its universe domain, within the timeout).
    pub async fn new(config: GcpStoreConfig) -> Result<Self, StoreError> {
        let prefix = Prefix::parse(&config.secrets_prefix).ok_or_else(|| {
            StoreError::Other(format!(
                "secrets prefix {:?} is not projects/<project number>/secrets/<secret-id prefix>-",
                config.secrets_prefix
            ))
        })?;
        if !is_key_name(&config.key_name) {
            return Err(StoreError::Other(format!(
                "key name {:?} is not projects/*/locations/*/keyRings/*/cryptoKeys/*",
                config.key_name
            )));
        }
        if client_logging_on(std::env::var(CLIENT_LOGGING_VAR).ok().as_deref()) {
            return Err(StoreError::Other(format!(
                "{CLIENT_LOGGING_VAR}=true makes the Google client log responses, secret values \
                 included: unset it"
            )));
        }
        if config.timeout.is_zero() {
            return Err(StoreError::Other("the store's timeout is zero".into()));
        }
        let mut builder = SecretManagerService::builder()
            .with_attempt_timeout(config.timeout)
            .with_retry_policy(
                Aip194Strict
                    .with_attempt_limit(3)
                    .with_time_limit(config.timeout),
            )
            .with_backoff_policy(
                ExponentialBackoffBuilder::new()
                    .with_initial_delay(Duration::from_millis(100))
                    .with_maximum_delay(Duration::from_secs(1))
                    .clamp(),
            );
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint.clone());
        }
        if config.credentials == GcpCredentials::Anonymous {
            builder = builder.with_credentials(
                google_cloud_auth::credentials::anonymous::Builder::new().build(),
            );
        }
        // With Application Default Credentials from the metadata server, building asks it for
        // the universe domain: bound that too.
        let client = tokio::time::timeout(config.timeout, builder.build())
            .await
            .map_err(|_| {
                StoreError::Unavailable(format!(
                    "secret manager client: not built within {:?}",
                    config.timeout
                ))
            })?
            .map_err(|e| StoreError::Other(format!("secret manager client: {e}")))?;
        Ok(Self {
            client,
            prefix,
            key_name: config.key_name,
            timeout: config.timeout,
        })
    }

    /// Runs one call to the service within the timeout.
    async fn call<T>(
        &self,
        what: &str,
        fut: impl Future<Output = google_cloud_secretmanager_v1::Result<T>>,
    ) -> Result<T, Failure> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(Failure::from_gax(what, &e)),
            Err(_) => Err(Failure::Store(StoreError::Unavailable(format!(
                "{what}: no answer within {:?}",
                self.timeout
            )))),
        }
    }

    /// The metadata of `<secret>/versions/latest`, or `None` when there is no version.
    async fn latest_version(&self, secret: &str) -> Result<Option<SecretVersion>, StoreError> {
        let name = format!("{secret}/versions/latest");
        let got = self
            .call(
                "get latest version",
                self.client.get_secret_version().set_name(name).send(),
            )
            .await;
        match got {
            Ok(v) => Ok(Some(v)),
            Err(Failure::Code(Code::NotFound | Code::FailedPrecondition, _)) => Ok(None),
            Err(f) => Err(f.into_store()),
        }
    }

    /// Whether the secret is configured to encrypt with the store's key (every replica).
    fn secret_uses_key(&self, s: &Secret) -> bool {
        let Some(r) = s.replication.as_ref() else {
            return false;
        };
        if let Some(a) = r.automatic() {
            return a
                .customer_managed_encryption
                .as_ref()
                .is_some_and(|c| c.kms_key_name == self.key_name);
        }
        if let Some(u) = r.user_managed() {
            return !u.replicas.is_empty()
                && u.replicas.iter().all(|rep| {
                    rep.customer_managed_encryption
                        .as_ref()
                        .is_some_and(|c| c.kms_key_name == self.key_name)
                });
        }
        false
    }

    /// Whether a version's status shows it encrypted with a version of the store's key (every
    /// replica).
    fn version_uses_key(&self, v: &SecretVersion) -> bool {
        let under_key = |version_name: &str| {
            version_name
                .strip_prefix(self.key_name.as_str())
                .and_then(|rest| rest.strip_prefix('/'))
                .is_some_and(|rest| !rest.is_empty())
        };
        let Some(r) = v.replication_status.as_ref() else {
            return false;
        };
        if let Some(a) = r.automatic() {
            return a
                .customer_managed_encryption
                .as_ref()
                .is_some_and(|c| under_key(&c.kms_key_version_name));
        }
        if let Some(u) = r.user_managed() {
            return !u.replicas.is_empty()
                && u.replicas.iter().all(|rep| {
                    rep.customer_managed_encryption
                        .as_ref()
                        .is_some_and(|c| under_key(&c.kms_key_version_name))
                });
        }
        false
    }

    /// Judges one secret under the prefix, in the order of protocol.md §5.
    async fn judge(&self, s: &Secret, name: SecretName) -> Result<Inspection, StoreError> {
        let Some(owner) = s
            .annotations
            .get(OWNER_ANNOTATION)
            .and_then(|o| Login::parse(o))
        else {
            return Ok(Inspection::Refused(Refusal::OwnerTagMissing));
        };
        let version = match self.latest_version(&s.name).await? {
            Some(v) if v.state == secret_version::State::Enabled => v,
            _ => return Ok(Inspection::Refused(Refusal::NoCurrentValue)),
        };
        if !self.secret_uses_key(s) || !self.version_uses_key(&version) {
            return Ok(Inspection::Refused(Refusal::WrongEncryptionKey));
        }
        let Some(tier) = Tier::from_tag(s.annotations.get(TIER_ANNOTATION).map(String::as_str))
        else {
            return Ok(Inspection::Refused(Refusal::TierUnknown));
        };
        Ok(Inspection::Served(PolicyEntry {
            name,
            owner,
            tier,
            resource_name: s.name.clone(),
            issuer: None,
        }))
    }

    /// The agent name of a secret of the project, when it is under the prefix.
    fn name_of(&self, s: &Secret) -> Option<SecretName> {
        self.name_of_resource(&s.name)
    }

    /// The agent name of a full resource name under the prefix.
    fn name_of_resource(&self, resource: &str) -> Option<SecretName> {
        SecretName::from_stored_suffix(resource.strip_prefix(&self.prefix.full)?)
    }

    /// Every secret of the project, page by page.
    async fn list_all(&self) -> Result<Vec<Secret>, StoreError> {
        let mut all = Vec::new();
        let mut token = String::new();
        for _ in 0..MAX_PAGES {
            let page = self
                .call(
                    "list secrets",
                    self.client
                        .list_secrets()
                        .set_parent(self.prefix.parent())
                        .set_page_size(PAGE_SIZE)
                        .set_page_token(token.clone())
                        .send(),
                )
                .await
                .map_err(Failure::into_store)?;
            all.extend(page.secrets);
            if page.next_page_token.is_empty() {
                return Ok(all);
            }
            if page.next_page_token == token {
                return Err(StoreError::Other(
                    "list secrets: the service repeated a page token".into(),
                ));
            }
            token = page.next_page_token;
        }
        Err(StoreError::Other(format!(
            "list secrets: more than {MAX_PAGES} pages"
        )))
    }
}

/// A failed call: a status from the service, or a store error already classified.
enum Failure {
    Code(Code, String),
    Store(StoreError),
}

impl Failure {
    fn from_gax(what: &str, e: &google_cloud_gax::error::Error) -> Failure {
        // A deserialization error's text can quote the response (a value): never keep it.
        let text = if e.is_deserialization() {
            "the response did not parse".to_owned()
        } else {
            e.to_string()
        };
        let text = format!("{what}: {text}");
        if let Some(status) = e.status() {
            return Failure::Code(status.code, text);
        }
        let unavailable = e.is_timeout()
            || e.is_exhausted()
            || e.is_io()
            || e.is_connect()
            || e.is_transport()
            || e.is_authentication()
            || e.http_status_code().is_some_and(|c| c >= 500 || c == 429);
        Failure::Store(if unavailable {
            StoreError::Unavailable(text)
        } else {
            StoreError::Other(text)
        })
    }

    fn into_store(self) -> StoreError {
        match self {
            Failure::Store(e) => e,
            Failure::Code(Code::NotFound, _) => StoreError::NotFound,
            Failure::Code(
                Code::Unavailable
                | Code::DeadlineExceeded
                | Code::ResourceExhausted
                | Code::Internal
                | Code::Unknown
                | Code::Aborted
                | Code::Cancelled,
                text,
            ) => StoreError::Unavailable(text),
            Failure::Code(_, text) => StoreError::Other(text),
        }
    }
}

/// A payload as a string, without leaving a copy of it behind where that can be helped.
fn payload_string(data: bytes::Bytes) -> Option<Zeroizing<String>> {
    let bytes: Vec<u8> = match data.try_into_mut() {
        Ok(unique) => unique.into(),
        Err(shared) => shared.to_vec(),
    };
    match String::from_utf8(bytes) {
        Ok(s) => Some(Zeroizing::new(s)),
        Err(e) => {
            e.into_bytes().zeroize();
            None
        }
    }
}

#[async_trait]
impl SecretStore for GcpSecretStore {
    fn settings(&self) -> Settings {
        Settings {
            store: STORE_NAME.into(),
            secrets_prefix: self.prefix.full.clone(),
            cloud_b_key_name: Some(self.key_name.clone()),
            cloud_b_project: Some(self.prefix.project.clone()),
            ..Settings::default()
        }
    }

    async fn list(&self) -> Result<Listing, StoreError> {
        let secrets = self.list_all().await?;
        let candidates: Vec<(SecretName, Secret)> = secrets
            .into_iter()
            .filter_map(|s| self.name_of(&s).map(|n| (n, s)))
            .collect();
        let judged: Vec<(SecretName, Inspection)> = futures::stream::iter(candidates)
            .map(|(name, s)| async move {
                let i = self.judge(&s, name.clone()).await?;
                Ok::<_, StoreError>((name, i))
            })
            .buffered(LIST_CONCURRENCY)
            .try_collect()
            .await?;
        let mut listing = Listing::default();
        for (name, i) in judged {
            match i {
                Inspection::Served(e) => listing.served.push(e),
                Inspection::Refused(Refusal::Absent) => {}
                Inspection::Refused(r) => listing.refused.push((name, r)),
            }
        }
        Ok(listing)
    }

    async fn inspect(&self, name: &SecretName) -> Result<Inspection, StoreError> {
        let resource = format!("{}{}", self.prefix.full, name.stored_suffix());
        let got = self
            .call(
                "get secret",
                self.client.get_secret().set_name(resource.clone()).send(),
            )
            .await;
        let secret = match got {
            Ok(s) => s,
            Err(Failure::Code(Code::NotFound, _)) => {
                return Ok(Inspection::Refused(Refusal::Absent));
            }
            Err(f) => return Err(f.into_store()),
        };
        if secret.name != resource {
            return Err(StoreError::Other(format!(
                "get secret {resource}: the service answered for {}",
                secret.name
            )));
        }
        self.judge(&secret, name.clone()).await
    }

    async fn read_value(&self, entry: &PolicyEntry) -> Result<SecretValue, StoreError> {
        if self.name_of_resource(&entry.resource_name).is_none() {
            return Err(StoreError::Other(format!(
                "{} is not a secret under the prefix",
                entry.resource_name
            )));
        }
        let name = format!("{}/versions/latest", entry.resource_name);
        let got = self
            .call(
                "access latest version",
                self.client.access_secret_version().set_name(name).send(),
            )
            .await;
        let response = match got {
            Ok(r) => r,
            // No version, or the latest one disabled or destroyed: no current value.
            Err(Failure::Code(Code::NotFound | Code::FailedPrecondition, _)) => {
                return Err(StoreError::NotFound);
            }
            Err(f) => return Err(f.into_store()),
        };
        let data = response.payload.map(|p| p.data).unwrap_or_default();
        let value = payload_string(data).ok_or(StoreError::NotFound)?;
        Ok(SecretValue::new(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let p = Prefix::parse("projects/123/secrets/agents-");
        assert_eq!(
            p.as_ref().map(|p| (p.project.as_str(), p.parent())),
            Some(("123", "projects/123".to_owned()))
        );
        for bad in [
            "",
            "projects/123/secrets/agents",
            "projects/123/secrets/-",
            "projects/abc/secrets/agents-",
            "projects//secrets/agents-",
            "projects/my-project/secrets/agents-",
            "projects/123/locations/x/secrets/agents-",
            "projects/123/secrets/agents/x-",
            "agents/",
        ] {
            assert_eq!(Prefix::parse(bad), None, "{bad}");
        }
        assert!(is_key_name(
            "projects/p/locations/global/keyRings/r/cryptoKeys/k"
        ));
        assert!(!is_key_name(
            "projects/p/locations/global/keyRings/r/cryptoKeys/"
        ));
        assert!(!is_key_name(
            "projects/p/locations/global/keyRings/r/cryptoKeys/k/cryptoKeyVersions/1"
        ));
    }

    #[test]
    fn client_logging() {
        assert!(client_logging_on(Some("true")));
        assert!(!client_logging_on(Some("false")));
        assert!(!client_logging_on(None));
    }

    #[test]
    fn payloads() {
        let s = payload_string(bytes::Bytes::from(b"v1".to_vec()));
        assert_eq!(s.as_deref().map(String::as_str), Some("v1"));
        assert!(payload_string(bytes::Bytes::from_static(&[0xff, 0xfe])).is_none());
    }
}
