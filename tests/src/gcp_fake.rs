//! Cloud B (Google Secret Manager) fixtures: the store crate's Secret Manager REST fake
//! ([`countersign_store_gcp::fake`]) served on loopback, secrets made in it, and the broker's
//! [`GcpSecretStore`] (the real Google client) pointed at it.
//!
//! No installable emulator implements Secret Manager faithfully (annotations, CMEK, filters),
//! so the store crate keeps a small fake of its REST API; these tests and the store's own use
//! that one fake.
//!
//! Secrets are described as the local store's [`StoredSecret`]s: secret id `agents-<name
//! lower-cased, _ as ->` in project [`PROJECT`], annotations `owner` and `tier`, automatic
//! replication under `key` (`None` = [`KEY`], the store's), the value as its one enabled version
//! (none: no version); a `deleted` secret is not made (Secret Manager deletes at once: absent).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use countersign_broker_core::ids::SecretName;
pub use countersign_store_gcp::fake::{
    Fake, FakeSecret, PROJECT, Replication, Server, VersionState,
};
use countersign_store_gcp::{GcpCredentials, GcpSecretStore, GcpStoreConfig};

use crate::http::StoredSecret;

/// The store's prefix: `projects/<PROJECT>/secrets/agents-`.
pub const GCP_PREFIX: &str = "projects/123/secrets/agents-";
/// The store's key (`cloud_b_key_name`).
pub const KEY: &str = "projects/kms-prj/locations/global/keyRings/countersign/cryptoKeys/agents";
/// Another key.
pub const OTHER_KEY: &str =
    "projects/kms-prj/locations/global/keyRings/countersign/cryptoKeys/other";

/// The secret id of an agent secret (`AUTO_TOKEN` → `agents-auto-token`).
pub fn secret_id(name: &str) -> String {
    let suffix = SecretName::parse(name)
        .map(|n| n.stored_suffix())
        .unwrap_or_else(|_| name.to_ascii_lowercase().replace('_', "-"));
    format!("agents-{suffix}")
}

/// Makes `s` in the fake (nothing for a deleted one).
pub fn create(fake: &Fake, s: &StoredSecret) {
    if s.deleted {
        return;
    }
    let id = secret_id(&s.name);
    fake.put(
        &id,
        s.owner.as_deref(),
        s.tier.as_deref(),
        Replication::automatic(Some(s.key.as_deref().unwrap_or(KEY))),
    );
    if let Some(v) = &s.value {
        fake.add_version(&id, v.as_bytes());
    }
}

/// The fake and its server: what the test changes, and what the broker's store reads.
#[derive(Debug)]
pub struct GcpFake {
    pub fake: Fake,
    server: Option<Server>,
    addr: SocketAddr,
}

impl GcpFake {
    /// Serves a fake holding `secrets` on a free loopback port.
    pub async fn start(secrets: &[StoredSecret]) -> anyhow::Result<Self> {
        let fake = Fake::new();
        for s in secrets {
            create(&fake, s);
        }
        let server = Server::start(&fake, SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .context("start the Secret Manager fake")?;
        Ok(Self {
            fake,
            addr: server.addr(),
            server: Some(server),
        })
    }

    /// The broker's store over the fake, each call bounded by `timeout`.
    pub async fn store(&self, timeout: Duration) -> anyhow::Result<Arc<GcpSecretStore>> {
        let mut config = GcpStoreConfig::new(GCP_PREFIX, KEY);
        config.endpoint = Some(format!("http://{}", self.addr));
        config.credentials = GcpCredentials::Anonymous;
        config.timeout = timeout;
        let store = GcpSecretStore::new(config)
            .await
            .map_err(|e| anyhow::anyhow!("cloud B store: {e}"))?;
        Ok(Arc::new(store))
    }

    /// Makes (or replaces) one more secret.
    pub fn create(&self, s: &StoredSecret) {
        create(&self.fake, s);
    }

    /// A new latest version of agent secret `name` (a rotation); answers its number.
    pub fn add_version(&self, name: &str, value: &str) -> usize {
        self.fake.add_version(&secret_id(name), value.as_bytes())
    }

    /// Sets (or, with `None`, removes) annotation `key` of agent secret `name`.
    pub fn annotate(&self, name: &str, key: &str, value: Option<&str>) {
        self.fake.annotate(&secret_id(name), key, value);
    }

    /// Deletes agent secret `name`.
    pub fn delete(&self, name: &str) {
        self.fake.delete(&secret_id(name));
    }

    /// Sets version `n` of agent secret `name` to `state`.
    pub fn set_state(&self, name: &str, n: usize, state: VersionState) {
        self.fake.set_state(&secret_id(name), n, state);
    }

    /// Stops the server (the store going away): its port refuses connections until
    /// [`Self::restart`].
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        if let Some(s) = self.server.take() {
            s.stop().await.context("stop the Secret Manager fake")?;
        }
        Ok(())
    }

    /// Serves the same state again on the same address (the store coming back).
    pub async fn restart(&mut self) -> anyhow::Result<()> {
        self.stop().await?;
        let server = Server::start(&self.fake, self.addr)
            .await
            .context("restart the Secret Manager fake")?;
        anyhow::ensure!(server.addr() == self.addr, "restarted on another address");
        self.server = Some(server);
        Ok(())
    }
}
