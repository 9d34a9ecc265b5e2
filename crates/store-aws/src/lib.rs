//! The cloud A secret store: AWS Secrets Manager, through the official SDK
//! (`aws-sdk-secretsmanager`, with its default HTTPS client: hyper 1 and rustls over aws-lc).
//! It implements the core's [`SecretStore`] with the rules of protocol.md §5, judged exactly as
//! the local file store judges them.
//!
//! # Mapping
//!
//! | core | Secrets Manager |
//! |---|---|
//! | stored name | the secret's `Name`: `secrets_prefix` + [`SecretName::stored_suffix`] |
//! | owner | tag `owner` (an e-mail, stored lower-cased) |
//! | tier | tag `tier` (`automatic`, `owner`, `shared`, `locked`; no tag = `owner`) |
//! | encryption key | `KmsKeyId`, compared for string equality with `cloud_a_key_arn` |
//! | current value | a version carrying the `AWSCURRENT` stage |
//! | scheduled for deletion | `DeletedDate` present |
//! | resource name | the secret's full `ARN` |
//!
//! # Judging
//!
//! A secret under the prefix is judged in this order, the first failing check giving the reason
//! (the same order as the local store):
//!
//! 1. `DeletedDate` set (scheduled for deletion) → `absent`; a listing omits it.
//! 2. tag `owner` missing or not an e-mail → `owner-tag-missing`.
//! 3. no version staged `AWSCURRENT` → `no-current-value`.
//! 4. `KmsKeyId` not exactly `cloud_a_key_arn` → `wrong-encryption-key`. The comparison is plain
//!    string equality on the full key ARN: a secret on the default `aws/secretsmanager` key (no
//!    `KmsKeyId`), or one whose `KmsKeyId` is a key id, an alias or an alias ARN, is refused even
//!    when it names the same key. Create and update agent secrets with
//!    `--kms-key-id <the full key ARN>`; configure `cloud_a_key_arn` as that key ARN, not an alias.
//! 5. tag `tier` present and unknown → `tier-unknown`.
//!
//! Otherwise the secret is served, with its ARN as the resource name.
//!
//! # Calls
//!
//! - [`SecretStore::list`]: `ListSecrets` through the SDK paginator, with `IncludePlannedDeletion`
//!   and a server-side `name` filter on the prefix (a case-sensitive prefix match; left out when
//!   the prefix is not a valid filter value). Every name is checked against the prefix again on
//!   this side; names whose remainder is not a valid stored suffix are ignored. The stages come
//!   from the listing's `SecretVersionsToStages`; an entry without that map (a secret with no
//!   version at all) is described with `DescribeSecret` before it is judged.
//! - [`SecretStore::inspect`]: `DescribeSecret` on the stored name; `ResourceNotFoundException`
//!   means `absent`.
//! - [`SecretStore::read_value`]: `GetSecretValue` on the resource name (the ARN) with stage
//!   `AWSCURRENT`, on every call: nothing is cached. A secret gone, recreated (new ARN), scheduled
//!   for deletion (`InvalidRequestException`) or without a current version is
//!   [`StoreError::NotFound`]. Only `SecretString` is served: a secret holding only
//!   `SecretBinary` is listed by its metadata like any other but its value read answers
//!   [`StoreError::NotFound`] (no current string value).
//!
//! Values are never logged; the SDK's own `Debug` of the response redacts them, and the value is
//! moved into a [`Zeroizing`] string.
//!
//! # Failures
//!
//! Every call has an explicit per-call budget ([`AwsStoreConfig::timeout`]): connect, read, each
//! attempt and the whole operation including retries (standard mode, 3 attempts, short backoff).
//! A timeout, a connection failure, an unreadable response, throttling or a server-side error is
//! [`StoreError::Unavailable`]; a refusal such as access denied or a decryption failure is
//! [`StoreError::Other`]. Error texts go to logs only and never hold a value.

#[cfg(feature = "moto")]
pub mod moto;

use std::collections::HashMap;
use std::time::Duration;

use async_trait::async_trait;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_secretsmanager::Client;
use aws_sdk_secretsmanager::config::Credentials;
use aws_sdk_secretsmanager::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_secretsmanager::operation::describe_secret::DescribeSecretOutput;
use aws_sdk_secretsmanager::types::{Filter, FilterNameStringType, SecretListEntry, Tag};
use countersign_broker_core::ids::{Login, SecretName};
use countersign_broker_core::policy::{PolicyEntry, Refusal, Tier};
use countersign_broker_core::secrets::{
    Inspection, Listing, SecretStore, SecretValue, Settings, StoreError,
};
use zeroize::Zeroizing;

/// The store's name in settings.
pub const STORE_NAME: &str = "cloud-a-secret-store";

/// The per-call budget when none is configured.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// `ListSecrets` page size when none is configured (the service's largest).
pub const DEFAULT_PAGE_SIZE: i32 = 100;

/// The stage naming a secret's current version.
const CURRENT_STAGE: &str = "AWSCURRENT";

/// Static credentials (an access key), used instead of the SDK's default chain.
#[derive(Clone)]
pub struct StaticCredentials {
    pub access_key_id: String,
    pub secret_access_key: Zeroizing<String>,
    pub session_token: Option<Zeroizing<String>>,
}

impl std::fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

/// How to reach the store and what it must hold.
#[derive(Debug, Clone)]
pub struct AwsStoreConfig {
    /// Name prefix of agent secrets, ending in `/` (settings `secrets_prefix`).
    pub secrets_prefix: String,
    /// The full ARN of the KMS key every agent secret must be encrypted with (`cloud_a_key_arn`).
    pub key_arn: String,
    /// The account the secrets live in (`cloud_a_account_id`); shown in settings.
    pub account_id: String,
    /// The region the secrets live in (`cloud_a_region`).
    pub region: String,
    /// An endpoint to use instead of the region's (an emulator, a VPC endpoint).
    pub endpoint_url: Option<String>,
    /// Static credentials; `None` uses the SDK's default chain (environment, profile, web
    /// identity, container and instance credentials).
    pub credentials: Option<StaticCredentials>,
    /// Budget of each call, retries included.
    pub timeout: Duration,
    /// `ListSecrets` page size, 1 to 100.
    pub page_size: i32,
}

impl AwsStoreConfig {
    /// A configuration with the defaults: the region's endpoint, the default credential chain,
    /// a 5 s budget per call and pages of 100.
    pub fn new(
        secrets_prefix: impl Into<String>,
        key_arn: impl Into<String>,
        account_id: impl Into<String>,
        region: impl Into<String>,
    ) -> Self {
        Self {
            secrets_prefix: secrets_prefix.into(),
            key_arn: key_arn.into(),
            account_id: account_id.into(),
            region: region.into(),
            endpoint_url: None,
            credentials: None,
            timeout: DEFAULT_TIMEOUT,
            page_size: DEFAULT_PAGE_SIZE,
        }
    }

    /// Checks the configuration's shape; the text names the offending key.
    pub fn validate(&self) -> Result<(), StoreError> {
        let bad = |m: &str| Err(StoreError::Other(format!("cloud A store config: {m}")));
        if self.secrets_prefix.len() < 2 || !self.secrets_prefix.ends_with('/') {
            return bad("secrets_prefix must be a non-empty name prefix ending in '/'");
        }
        if !self.key_arn.starts_with("arn:") || !self.key_arn.contains(":key/") {
            return bad("cloud_a_key_arn must be a full KMS key ARN (arn:...:key/...)");
        }
        if self.account_id.is_empty() {
            return bad("cloud_a_account_id is empty");
        }
        if self.region.is_empty() {
            return bad("cloud_a_region is empty");
        }
        if let Some(url) = &self.endpoint_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return bad("endpoint_url must be an http:// or https:// URL");
        }
        if self.timeout.is_zero() {
            return bad("timeout must be positive");
        }
        if !(1..=100).contains(&self.page_size) {
            return bad("page_size must be 1 to 100");
        }
        Ok(())
    }
}

/// AWS Secrets Manager as a [`SecretStore`].
#[derive(Clone)]
pub struct AwsSecretStore {
    client: Client,
    config: AwsStoreConfig,
}

impl std::fmt::Debug for AwsSecretStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AwsSecretStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl AwsSecretStore {
    /// Builds the SDK client. Makes no call: an unreachable store shows on the first call.
    pub async fn new(config: AwsStoreConfig) -> Result<Self, StoreError> {
        config.validate()?;
        let mut loader = sdk_loader(
            &config.region,
            config.endpoint_url.as_deref(),
            config.timeout,
        );
        if let Some(c) = &config.credentials {
            loader = loader.credentials_provider(Credentials::new(
                c.access_key_id.clone(),
                c.secret_access_key.to_string(),
                c.session_token.as_ref().map(|s| s.to_string()),
                None,
                "countersign-static",
            ));
        }
        let sdk = loader.load().await;
        Ok(Self {
            client: Client::new(&sdk),
            config,
        })
    }

    /// The configuration the store was built with.
    pub fn config(&self) -> &AwsStoreConfig {
        &self.config
    }

    /// The server-side name filter, when the prefix is a valid filter value (the service's
    /// pattern; a leading `!` would negate it).
    fn name_filter(&self) -> Option<Filter> {
        let p = &self.config.secrets_prefix;
        let valid = p.len() <= 512
            && !p.starts_with('!')
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || " :_@/+=.-!".contains(c));
        valid.then(|| {
            Filter::builder()
                .key(FilterNameStringType::Name)
                .values(p.clone())
                .build()
        })
    }

    /// The agent name a stored name stands for, if it is one under the prefix.
    fn agent_name(&self, stored: &str) -> Option<SecretName> {
        let suffix = stored.strip_prefix(&self.config.secrets_prefix)?;
        SecretName::from_stored_suffix(suffix)
    }

    /// `DescribeSecret` on a name or ARN; `None` when there is no such secret.
    async fn describe(&self, id: &str) -> Result<Option<DescribeSecretOutput>, StoreError> {
        match self.client.describe_secret().secret_id(id).send().await {
            Ok(out) => Ok(Some(out)),
            Err(e) => match classify("DescribeSecret", e) {
                Failure::NotFound => Ok(None),
                Failure::Store(e) => Err(e),
            },
        }
    }
}

/// What a store call's failure means here.
enum Failure {
    /// The secret is not there (or, for a value read, cannot be read as it stands).
    NotFound,
    Store(StoreError),
}

/// The SDK's configuration as every AWS client of ours loads it (this store's, the IAM
/// issuer's): `region`, an `endpoint` instead of AWS's (an emulator), `timeout` for the
/// connection, each attempt and the whole call, and three attempts 50-500 ms apart.
pub fn sdk_loader(
    region: &str,
    endpoint: Option<&str>,
    timeout: Duration,
) -> aws_config::ConfigLoader {
    let timeouts = TimeoutConfig::builder()
        .connect_timeout(timeout)
        .read_timeout(timeout)
        .operation_attempt_timeout(timeout)
        .operation_timeout(timeout)
        .build();
    let retries = RetryConfig::standard()
        .with_max_attempts(3)
        .with_initial_backoff(Duration::from_millis(50))
        .with_max_backoff(Duration::from_millis(500));
    let loader = aws_config::defaults(BehaviorVersion::latest())
        .region(Region::new(region.to_owned()))
        .timeout_config(timeouts)
        .retry_config(retries);
    match endpoint {
        Some(url) => loader.endpoint_url(url),
        None => loader,
    }
}

/// The Display texts of an error's sources, joined. Never the `Debug` of an SDK error: that
/// holds the raw HTTP response, whose body could be a value.
pub fn sources(e: &dyn std::error::Error) -> String {
    let mut text = String::new();
    let mut next = e.source();
    while let Some(s) = next {
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&s.to_string());
        next = s.source();
    }
    text
}

fn classify<E>(op: &str, err: SdkError<E>) -> Failure
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let unavailable = |m: String| Failure::Store(StoreError::Unavailable(format!("{op}: {m}")));
    let other = |m: String| Failure::Store(StoreError::Other(format!("{op}: {m}")));
    match &err {
        SdkError::TimeoutError(_) => unavailable("no answer within the call's budget".into()),
        SdkError::DispatchFailure(_) => unavailable(format!("not reached: {}", sources(&err))),
        // The parse error could quote the body: say only that it did not parse.
        SdkError::ResponseError(_) => unavailable("unreadable answer".into()),
        SdkError::ServiceError(s) => {
            let status = s.raw().status().as_u16();
            let code = s.err().code().unwrap_or("unknown");
            let text = format!(
                "{code} (HTTP {status}): {}",
                s.err().message().unwrap_or_default()
            );
            match code {
                "ResourceNotFoundException" => Failure::NotFound,
                "InternalServiceError"
                | "InternalFailure"
                | "ServiceUnavailable"
                | "ThrottlingException"
                | "RequestLimitExceeded" => unavailable(text),
                _ if status >= 500 || status == 429 => unavailable(text),
                _ => other(text),
            }
        }
        _ => other(format!("request not made: {}", sources(&err))),
    }
}

/// Whether a secret has a current version, as far as the answer tells.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Current {
    Yes,
    No,
    /// The answer carried no stage map (a listing entry may leave it out): ask `DescribeSecret`.
    Unknown,
}

fn current(stages: Option<&HashMap<String, Vec<String>>>, absent: Current) -> Current {
    match stages {
        None => absent,
        Some(m) if m.values().any(|s| s.iter().any(|s| s == CURRENT_STAGE)) => Current::Yes,
        Some(_) => Current::No,
    }
}

fn tag<'a>(tags: &'a [Tag], key: &str) -> Option<&'a str> {
    tags.iter()
        .find(|t| t.key() == Some(key))
        .map(|t| t.value().unwrap_or(""))
}

/// The policy facts of one secret, from a listing entry or a description.
#[derive(Debug, Clone, Copy)]
struct Facts<'a> {
    arn: Option<&'a str>,
    deleted: bool,
    owner: Option<&'a str>,
    tier: Option<&'a str>,
    kms_key_id: Option<&'a str>,
    current: Current,
}

impl<'a> Facts<'a> {
    fn of_entry(e: &'a SecretListEntry) -> Self {
        Self {
            arn: e.arn(),
            deleted: e.deleted_date().is_some(),
            owner: tag(e.tags(), "owner"),
            tier: tag(e.tags(), "tier"),
            kms_key_id: e.kms_key_id(),
            current: current(e.secret_versions_to_stages(), Current::Unknown),
        }
    }

    fn of_description(d: &'a DescribeSecretOutput) -> Self {
        Self {
            arn: d.arn(),
            deleted: d.deleted_date().is_some(),
            owner: tag(d.tags(), "owner"),
            tier: tag(d.tags(), "tier"),
            kms_key_id: d.kms_key_id(),
            // A description without the map has no version at all.
            current: current(d.version_ids_to_stages(), Current::No),
        }
    }
}

/// A judgement, or the need to describe the secret first.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Judged {
    Done(Inspection),
    NeedsDescription,
}

/// The rules, in the local store's order: deleted, owner, current value, key, tier.
fn judge(f: &Facts<'_>, key_arn: &str, name: SecretName) -> Result<Judged, StoreError> {
    let refused = |r| Ok(Judged::Done(Inspection::Refused(r)));
    if f.deleted {
        return refused(Refusal::Absent);
    }
    let Some(owner) = f.owner.and_then(Login::parse) else {
        return refused(Refusal::OwnerTagMissing);
    };
    match f.current {
        Current::Yes => {}
        Current::No => return refused(Refusal::NoCurrentValue),
        Current::Unknown => return Ok(Judged::NeedsDescription),
    }
    if f.kms_key_id != Some(key_arn) {
        return refused(Refusal::WrongEncryptionKey);
    }
    let Some(tier) = Tier::from_tag(f.tier) else {
        return refused(Refusal::TierUnknown);
    };
    let arn = f
        .arn
        .ok_or_else(|| StoreError::Other(format!("the store answered no ARN for secret {name}")))?;
    Ok(Judged::Done(Inspection::Served(PolicyEntry {
        name,
        owner,
        tier,
        resource_name: arn.to_owned(),
        issuer: None,
    })))
}

impl AwsSecretStore {
    async fn judge_entry(
        &self,
        e: &SecretListEntry,
        name: SecretName,
    ) -> Result<Inspection, StoreError> {
        let key = &self.config.key_arn;
        match judge(&Facts::of_entry(e), key, name.clone())? {
            Judged::Done(i) => Ok(i),
            Judged::NeedsDescription => {
                // By ARN: exactly the secret listed.
                let id = e.arn().or(e.name()).unwrap_or_default();
                match self.describe(id).await? {
                    // Gone between the listing and the description.
                    None => Ok(Inspection::Refused(Refusal::Absent)),
                    Some(d) => self.judge_description(&d, name),
                }
            }
        }
    }

    fn judge_description(
        &self,
        d: &DescribeSecretOutput,
        name: SecretName,
    ) -> Result<Inspection, StoreError> {
        match judge(&Facts::of_description(d), &self.config.key_arn, name)? {
            Judged::Done(i) => Ok(i),
            // A description always tells the stages.
            Judged::NeedsDescription => Ok(Inspection::Refused(Refusal::NoCurrentValue)),
        }
    }
}

#[async_trait]
impl SecretStore for AwsSecretStore {
    fn settings(&self) -> Settings {
        Settings {
            store: STORE_NAME.into(),
            secrets_prefix: self.config.secrets_prefix.clone(),
            cloud_a_key_arn: Some(self.config.key_arn.clone()),
            cloud_a_account_id: Some(self.config.account_id.clone()),
            cloud_a_region: Some(self.config.region.clone()),
            ..Settings::default()
        }
    }

    async fn list(&self) -> Result<Listing, StoreError> {
        let mut pages = self
            .client
            .list_secrets()
            .include_planned_deletion(true)
            .set_filters(self.name_filter().map(|f| vec![f]))
            .max_results(self.config.page_size)
            .into_paginator()
            .send();
        let mut listing = Listing::default();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| match classify("ListSecrets", e) {
                Failure::NotFound => StoreError::Other("ListSecrets: not found".into()),
                Failure::Store(e) => e,
            })?;
            for entry in page.secret_list() {
                let Some(name) = entry.name().and_then(|n| self.agent_name(n)) else {
                    continue;
                };
                match self.judge_entry(entry, name.clone()).await? {
                    Inspection::Served(e) => listing.served.push(e),
                    Inspection::Refused(Refusal::Absent) => {}
                    Inspection::Refused(r) => listing.refused.push((name, r)),
                }
            }
        }
        tracing::debug!(
            served = listing.served.len(),
            refused = listing.refused.len(),
            "listed cloud A secrets"
        );
        Ok(listing)
    }

    async fn inspect(&self, name: &SecretName) -> Result<Inspection, StoreError> {
        let stored = format!("{}{}", self.config.secrets_prefix, name.stored_suffix());
        match self.describe(&stored).await? {
            // A name the service resolved to another secret (say, as a partial ARN) is not ours.
            Some(d) if d.name() == Some(stored.as_str()) => {
                self.judge_description(&d, name.clone())
            }
            _ => Ok(Inspection::Refused(Refusal::Absent)),
        }
    }

    async fn read_value(&self, entry: &PolicyEntry) -> Result<SecretValue, StoreError> {
        let answer = self
            .client
            .get_secret_value()
            .secret_id(&entry.resource_name)
            .version_stage(CURRENT_STAGE)
            .send()
            .await;
        let mut out = match answer {
            Ok(out) => out,
            Err(e) => {
                let scheduled_for_deletion = matches!(
                    &e,
                    SdkError::ServiceError(s) if s.err().is_invalid_request_exception()
                );
                return Err(match classify("GetSecretValue", e) {
                    Failure::NotFound => StoreError::NotFound,
                    // The service's answer for a secret scheduled for deletion.
                    Failure::Store(_) if scheduled_for_deletion => StoreError::NotFound,
                    Failure::Store(e) => e,
                });
            }
        };
        match out.secret_string.take() {
            Some(s) => Ok(SecretValue::new(Zeroizing::new(s))),
            // Binary only: no current string value to serve.
            None => Err(StoreError::NotFound),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "arn:aws:kms:eu-west-1:111122223333:key/k1";

    fn name(s: &str) -> SecretName {
        SecretName::from_stored_suffix(s).unwrap_or_else(|| panic!("bad suffix {s}"))
    }

    fn good() -> Facts<'static> {
        Facts {
            arn: Some("arn:aws:secretsmanager:eu-west-1:111122223333:secret:agents/a-AbCdEf"),
            deleted: false,
            owner: Some("Ada@Example.com"),
            tier: Some("automatic"),
            kms_key_id: Some(KEY),
            current: Current::Yes,
        }
    }

    fn reason(f: Facts<'_>) -> Option<Refusal> {
        match judge(&f, KEY, name("a")) {
            Ok(Judged::Done(Inspection::Refused(r))) => Some(r),
            Ok(Judged::Done(Inspection::Served(_))) => None,
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn judges_in_order() {
        assert_eq!(reason(good()), None);
        let deleted = Facts {
            deleted: true,
            owner: None,
            ..good()
        };
        assert_eq!(reason(deleted), Some(Refusal::Absent));
        let no_owner = Facts {
            owner: None,
            current: Current::No,
            ..good()
        };
        assert_eq!(reason(no_owner), Some(Refusal::OwnerTagMissing));
        let bad_owner = Facts {
            owner: Some("nobody"),
            ..good()
        };
        assert_eq!(reason(bad_owner), Some(Refusal::OwnerTagMissing));
        let no_value = Facts {
            current: Current::No,
            kms_key_id: None,
            ..good()
        };
        assert_eq!(reason(no_value), Some(Refusal::NoCurrentValue));
        let other_key = Facts {
            kms_key_id: Some("arn:aws:kms:eu-west-1:111122223333:alias/k1"),
            tier: Some("weird"),
            ..good()
        };
        assert_eq!(reason(other_key), Some(Refusal::WrongEncryptionKey));
        let default_key = Facts {
            kms_key_id: None,
            ..good()
        };
        assert_eq!(reason(default_key), Some(Refusal::WrongEncryptionKey));
        let odd_tier = Facts {
            tier: Some("Automatic"),
            ..good()
        };
        assert_eq!(reason(odd_tier), Some(Refusal::TierUnknown));
    }

    #[test]
    fn serves_with_the_arn_and_a_lower_cased_owner() {
        let f = Facts {
            tier: None,
            ..good()
        };
        let Ok(Judged::Done(Inspection::Served(e))) = judge(&f, KEY, name("a")) else {
            panic!("not served");
        };
        assert_eq!(e.owner.as_str(), "ada@example.com");
        assert_eq!(e.tier, Tier::Owner);
        assert_eq!(e.resource_name, good().arn.unwrap_or_default());
        let unknown = Facts {
            current: Current::Unknown,
            ..good()
        };
        assert_eq!(
            judge(&unknown, KEY, name("a")).ok(),
            Some(Judged::NeedsDescription)
        );
    }

    #[test]
    fn stages_tell_the_current_version() {
        let mut m = HashMap::new();
        m.insert("v1".to_owned(), vec!["AWSPREVIOUS".to_owned()]);
        assert_eq!(current(Some(&m), Current::Unknown), Current::No);
        m.insert("v2".to_owned(), vec!["AWSCURRENT".to_owned()]);
        assert_eq!(current(Some(&m), Current::Unknown), Current::Yes);
        assert_eq!(current(None, Current::No), Current::No);
    }

    #[test]
    fn config_is_checked() {
        let ok = AwsStoreConfig::new("agents/", KEY, "111122223333", "eu-west-1");
        assert!(ok.validate().is_ok());
        let cases = [
            AwsStoreConfig {
                secrets_prefix: "agents".into(),
                ..ok.clone()
            },
            AwsStoreConfig {
                key_arn: "alias/k1".into(),
                ..ok.clone()
            },
            AwsStoreConfig {
                endpoint_url: Some("localhost:4566".into()),
                ..ok.clone()
            },
            AwsStoreConfig {
                timeout: Duration::ZERO,
                ..ok.clone()
            },
            AwsStoreConfig {
                page_size: 101,
                ..ok.clone()
            },
        ];
        for c in cases {
            assert!(c.validate().is_err(), "{c:?}");
        }
        let creds = StaticCredentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Zeroizing::new("very-secret".into()),
            session_token: None,
        };
        assert!(!format!("{creds:?}").contains("very-secret"));
    }
}
