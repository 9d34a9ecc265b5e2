//! Cloud A (AWS Secrets Manager) fixtures: moto's server mode, a real AWS API emulator, started
//! by each test as a child process on a free port and killed when the test ends; secrets made in
//! it with the AWS SDK; and the broker's [`AwsSecretStore`] pointed at it.
//!
//! Without `moto_server` on `PATH`, [`moto_or_skip`] prints `skipped: moto_server not installed`
//! and the test passes, unless `COUNTERSIGN_REQUIRE_MOTO=1` (CI), when it fails.
//!
//! Secrets are described as the local store's [`StoredSecret`]s, so the cloud tests use the same
//! names and tiers as the rest of the suite: stored name `agents/<name lower-cased, _ as ->`, tags
//! `owner` and `tier`, the value as `SecretString` (none: a secret with no version), `key`
//! `None` = the store's key ARN (else that `KmsKeyId`), `deleted` = scheduled for deletion.

use std::time::Duration;

use anyhow::Context;
use aws_config::{BehaviorVersion, Region};
use aws_sdk_secretsmanager::config::Credentials;
use aws_sdk_secretsmanager::types::Tag;
use countersign_broker_core::ids::SecretName;
use countersign_store_aws::{AwsSecretStore, AwsStoreConfig, StaticCredentials};
use zeroize::Zeroizing;

use crate::http::{PREFIX, StoredSecret};

/// moto's default account.
pub const ACCOUNT: &str = "123456789012";
/// The region the tests use.
pub const REGION: &str = "eu-west-1";

pub use countersign_store_aws::moto::{Moto, moto_binary, moto_or_skip};

/// The stored name of an agent secret: `agents/` + its stored suffix (`AUTO_TOKEN` →
/// `agents/auto-token`).
pub fn stored_name(name: &str) -> String {
    let suffix = SecretName::parse(name)
        .map(|n| n.stored_suffix())
        .unwrap_or_else(|_| name.to_ascii_lowercase().replace('_', "-"));
    format!("{PREFIX}{suffix}")
}

/// SDK clients for moto, as an operator with the AWS CLI would change the store.
#[derive(Debug, Clone)]
pub struct Aws {
    pub sm: aws_sdk_secretsmanager::Client,
    pub kms: aws_sdk_kms::Client,
    endpoint: String,
}

impl Aws {
    pub async fn new(moto: &Moto) -> Self {
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(REGION))
            .endpoint_url(moto.endpoint())
            .credentials_provider(Credentials::new("testing", "testing", None, None, "test"))
            .load()
            .await;
        Self {
            sm: aws_sdk_secretsmanager::Client::new(&sdk),
            kms: aws_sdk_kms::Client::new(&sdk),
            endpoint: moto.endpoint(),
        }
    }

    /// A new KMS key's ARN.
    pub async fn key(&self) -> anyhow::Result<String> {
        let out = self.kms.create_key().send().await.context("CreateKey")?;
        let meta = out.key_metadata().context("no key metadata")?;
        Ok(meta.arn().context("no key ARN")?.to_owned())
    }

    /// Makes `s` in the store (its key: `s.key`, else `key_arn`); answers its ARN.
    pub async fn create(&self, s: &StoredSecret, key_arn: &str) -> anyhow::Result<String> {
        let name = stored_name(&s.name);
        let mut req = self
            .sm
            .create_secret()
            .name(&name)
            .kms_key_id(s.key.as_deref().unwrap_or(key_arn));
        if let Some(v) = &s.value {
            req = req.secret_string(v);
        }
        for (k, v) in [("owner", &s.owner), ("tier", &s.tier)] {
            if let Some(v) = v {
                req = req.tags(Tag::builder().key(k).value(v).build());
            }
        }
        let out = req
            .send()
            .await
            .with_context(|| format!("CreateSecret {name}"))?;
        if s.deleted {
            self.schedule_deletion(&s.name).await?;
        }
        Ok(out.arn().context("no secret ARN")?.to_owned())
    }

    /// Makes every secret of `secrets`.
    pub async fn seed(&self, secrets: &[StoredSecret], key_arn: &str) -> anyhow::Result<()> {
        for s in secrets {
            self.create(s, key_arn).await?;
        }
        Ok(())
    }

    /// A new current version (`PutSecretValue`): the rotation of agent secret `name`.
    pub async fn put_value(&self, name: &str, value: &str) -> anyhow::Result<String> {
        let out = self
            .sm
            .put_secret_value()
            .secret_id(stored_name(name))
            .secret_string(value)
            .send()
            .await
            .context("PutSecretValue")?;
        Ok(out.version_id().context("no version id")?.to_owned())
    }

    /// Sets tag `key` of agent secret `name`.
    pub async fn tag(&self, name: &str, key: &str, value: &str) -> anyhow::Result<()> {
        self.sm
            .tag_resource()
            .secret_id(stored_name(name))
            .tags(Tag::builder().key(key).value(value).build())
            .send()
            .await
            .context("TagResource")?;
        Ok(())
    }

    /// Removes tag `key` of agent secret `name`.
    pub async fn untag(&self, name: &str, key: &str) -> anyhow::Result<()> {
        self.sm
            .untag_resource()
            .secret_id(stored_name(name))
            .tag_keys(key)
            .send()
            .await
            .context("UntagResource")?;
        Ok(())
    }

    /// Schedules agent secret `name` for deletion (a 7-day recovery window).
    pub async fn schedule_deletion(&self, name: &str) -> anyhow::Result<()> {
        self.sm
            .delete_secret()
            .secret_id(stored_name(name))
            .recovery_window_in_days(7)
            .send()
            .await
            .context("DeleteSecret")?;
        Ok(())
    }

    /// The broker's store over moto: prefix `agents/`, `key_arn`, each call bounded by `timeout`.
    pub async fn store(&self, key_arn: &str, timeout: Duration) -> anyhow::Result<AwsSecretStore> {
        let mut config = AwsStoreConfig::new(PREFIX, key_arn, ACCOUNT, REGION);
        config.endpoint_url = Some(self.endpoint.clone());
        config.credentials = Some(StaticCredentials {
            access_key_id: "testing".into(),
            secret_access_key: Zeroizing::new("testing".into()),
            session_token: None,
        });
        config.timeout = timeout;
        AwsSecretStore::new(config)
            .await
            .map_err(|e| anyhow::anyhow!("cloud A store: {e}"))
    }
}
