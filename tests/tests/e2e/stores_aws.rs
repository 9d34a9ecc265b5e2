//! The broker over cloud A (AWS Secrets Manager), end to end: moto's server mode as the store
//! (one per test, on a free port), the broker's real `AwsSecretStore` and the real server over
//! HTTP. Secrets are made and changed with the AWS SDK, as an operator would with the CLI.
//! The secret-store contract (`stores_contract`) runs here, then what only AWS does: a version
//! staged `AWSPENDING` is not current.
//!
//! Without `moto_server` on `PATH` each test prints `skipped: moto_server not installed` and
//! passes, unless `COUNTERSIGN_REQUIRE_MOTO=1`.

use std::sync::Arc;
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use countersign_broker_core::secrets::SecretStore;
use countersign_e2e::http::*;
use countersign_e2e::moto::*;
use serde_json::{Value, json};

use crate::stores_common::*;
use crate::stores_contract::contract_suite;

type R = anyhow::Result<()>;

/// moto, the SDK as the operator's CLI, the store's key, what was made, and the broker's store.
struct AwsService {
    moto: Moto,
    aws: Aws,
    key: String,
    other_key: String,
    secrets: Vec<StoredSecret>,
    store: Arc<dyn SecretStore>,
}

/// `s` as made in moto: encrypted with `other_key` where it names another key.
fn made(s: &StoredSecret, other_key: &str) -> StoredSecret {
    let mut s = s.clone();
    s.key = s.key.map(|_| other_key.to_owned());
    s
}

#[async_trait]
impl Service for AwsService {
    async fn start(secrets: &[StoredSecret], timeout: StdDuration) -> anyhow::Result<Option<Self>> {
        let Some(bin) = moto_or_skip() else {
            return Ok(None);
        };
        let moto = Moto::start(bin).await.map_err(anyhow::Error::msg)?;
        let aws = Aws::new(&moto).await;
        let key = aws.key().await?;
        anyhow::ensure!(
            key.starts_with(&format!("arn:aws:kms:{REGION}:{ACCOUNT}:key/")),
            "{key}"
        );
        let other_key = aws.key().await?;
        let secrets: Vec<StoredSecret> = secrets.iter().map(|s| made(s, &other_key)).collect();
        aws.seed(&secrets, &key).await?;
        let store = Arc::new(aws.store(&key, timeout).await?);
        Ok(Some(AwsService {
            moto,
            aws,
            key,
            other_key,
            secrets,
            store,
        }))
    }

    fn store(&self) -> Arc<dyn SecretStore> {
        self.store.clone()
    }

    fn settings(&self) -> Value {
        json!({
            "store": "cloud-a-secret-store",
            "secrets_prefix": "agents/",
            "cloud_a_key_arn": self.key,
            "cloud_a_account_id": ACCOUNT,
            "cloud_a_region": REGION,
        })
    }

    async fn tag(&self, name: &str, key: &str, value: Option<&str>) -> R {
        match value {
            Some(v) => self.aws.tag(name, key, v).await,
            None => self.aws.untag(name, key).await,
        }
    }

    async fn create(&self, s: &StoredSecret) -> R {
        self.aws
            .create(&made(s, &self.other_key), &self.key)
            .await
            .map(drop)
    }

    async fn delete(&self, name: &str) -> R {
        self.aws.schedule_deletion(name).await
    }

    /// `PutSecretValue`: a new `AWSCURRENT` version.
    async fn rotate(&self, name: &str, value: &str) -> R {
        self.aws.put_value(name, value).await.map(drop)
    }

    async fn stop(&mut self) -> R {
        self.moto.stop();
        Ok(())
    }

    /// moto comes back on the same port, empty: its data is made again, `name` with `value`
    /// (new ARNs).
    async fn come_back(&mut self, name: &str, value: &str) -> anyhow::Result<Comeback> {
        self.moto.restart().await.map_err(anyhow::Error::msg)?;
        for s in self.secrets.iter_mut().filter(|s| s.name == name) {
            s.value = Some(value.to_owned());
        }
        self.aws.seed(&self.secrets, &self.key).await?;
        Ok(Comeback::NewNames)
    }
}

contract_suite!(AwsService);

/// A rotation in progress (a version staged `AWSPENDING`) is not current: the value released
/// stays until the new version is promoted to `AWSCURRENT`.
#[tokio::test]
async fn a_pending_version_is_released_once_promoted() -> R {
    let Some(w) = World::<AwsService>::start(StdDuration::from_secs(5)).await? else {
        return Ok(());
    };
    let (tb, aws) = (&w.tb, &w.svc.aws);
    let (_m, s) = tb.session_of(ADA).await?;
    let auto = auto_grant(&s, AUTO).await?;
    let current = aws.put_value(AUTO, "auto-rotated-2").await?;
    assert_eq!(value_of(&s, &auto, AUTO).await?, "auto-rotated-2");
    let loaded = tb.state.broker.policy_state().loaded_at;

    let next = aws
        .sm
        .put_secret_value()
        .secret_id(stored_name(AUTO))
        .secret_string("auto-rotated-3")
        .version_stages("AWSPENDING")
        .send()
        .await?;
    assert_eq!(value_of(&s, &auto, AUTO).await?, "auto-rotated-2");
    aws.sm
        .update_secret_version_stage()
        .secret_id(stored_name(AUTO))
        .version_stage("AWSCURRENT")
        .move_to_version_id(next.version_id().unwrap_or_default())
        .remove_from_version_id(current)
        .send()
        .await?;
    assert_eq!(value_of(&s, &auto, AUTO).await?, "auto-rotated-3");

    // No reload or reread was needed for any of it.
    assert_eq!(tb.state.broker.policy_state().loaded_at, loaded);
    Ok(())
}
