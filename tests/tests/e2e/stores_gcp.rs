//! The broker over cloud B (Google Secret Manager), end to end: the store crate's Secret Manager
//! REST fake on loopback (one per test), the broker's real `GcpSecretStore` (the real Google
//! client) and the real server over HTTP. No installable emulator implements Secret Manager
//! faithfully (annotations, CMEK, filters), hence the fake (`countersign_store_gcp::fake`).
//! Secrets are changed in the fake as an operator would in the service. The secret-store
//! contract (`stores_contract`) runs here, then what only Google does: a disabled latest
//! version is no current value (older ones are not fallen back on), and a service that hangs.

use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use async_trait::async_trait;
use countersign_broker_core::secrets::SecretStore;
use countersign_e2e::gcp_fake::*;
use countersign_e2e::http::*;
use serde_json::{Value, json};

use crate::stores_common::*;
use crate::stores_contract::contract_suite;

type R = anyhow::Result<()>;

/// Not served: its latest version is disabled (an older one is enabled).
const LATEST_OFF: &str = "LATEST_OFF";

/// The fake (with its server) and the broker's store over it.
struct GcpService {
    gcp: GcpFake,
    store: Arc<dyn SecretStore>,
}

/// `s` as made in the fake: encrypted with [`OTHER_KEY`] where it names another key.
fn made(s: &StoredSecret) -> StoredSecret {
    let mut s = s.clone();
    s.key = s.key.map(|_| OTHER_KEY.to_owned());
    s
}

#[async_trait]
impl Service for GcpService {
    async fn start(secrets: &[StoredSecret], timeout: StdDuration) -> anyhow::Result<Option<Self>> {
        let mut secrets: Vec<StoredSecret> = secrets.iter().map(made).collect();
        secrets.push(StoredSecret::new(LATEST_OFF, ADA, Some("automatic")));
        let gcp = GcpFake::start(&secrets).await?;
        let n = gcp.add_version(LATEST_OFF, "newer");
        gcp.set_state(LATEST_OFF, n, VersionState::Disabled);
        let store = gcp.store(timeout).await?;
        Ok(Some(GcpService { gcp, store }))
    }

    fn store(&self) -> Arc<dyn SecretStore> {
        self.store.clone()
    }

    fn settings(&self) -> Value {
        json!({
            "store": "cloud-b-secret-store",
            "secrets_prefix": GCP_PREFIX,
            "cloud_b_key_name": KEY,
            "cloud_b_project": "123",
        })
    }

    fn own_refused(&self) -> Vec<(&'static str, &'static str)> {
        vec![(LATEST_OFF, "no-current-value")]
    }

    async fn tag(&self, name: &str, key: &str, value: Option<&str>) -> R {
        self.gcp.annotate(name, key, value);
        Ok(())
    }

    async fn create(&self, s: &StoredSecret) -> R {
        self.gcp.create(&made(s));
        Ok(())
    }

    async fn delete(&self, name: &str) -> R {
        self.gcp.delete(name);
        Ok(())
    }

    /// A new latest version.
    async fn rotate(&self, name: &str, value: &str) -> R {
        self.gcp.add_version(name, value);
        Ok(())
    }

    async fn stop(&mut self) -> R {
        self.gcp.stop().await
    }

    /// Rotated meanwhile, the service comes back on the same address with its data.
    async fn come_back(&mut self, name: &str, value: &str) -> anyhow::Result<Comeback> {
        self.gcp.add_version(name, value);
        self.gcp.restart().await?;
        Ok(Comeback::SameNames)
    }

    fn service_calls(&self) -> Option<ServiceCalls> {
        let calls = self.gcp.fake.calls();
        Some(ServiceCalls {
            lists: calls.iter().filter(|c| c.starts_with("list ")).count(),
            value_reads: calls.iter().filter(|c| c.contains(":access")).count(),
        })
    }
}

contract_suite!(GcpService);

async fn world(timeout: StdDuration) -> anyhow::Result<World<GcpService>> {
    World::start(timeout)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the fake always runs"))
}

/// The latest version disabled: no current value to release (the older versions are not
/// fallen back on); enabled again, it is released again.
#[tokio::test]
async fn a_disabled_latest_version_is_not_fallen_back_on() -> R {
    let w = world(StdDuration::from_secs(5)).await?;
    let (tb, gcp) = (&w.tb, &w.svc.gcp);
    let (_m, s) = tb.session_of(ADA).await?;
    let auto = auto_grant(&s, AUTO).await?;
    let latest = gcp.add_version(AUTO, "auto-rotated-2");
    assert_eq!(value_of(&s, &auto, AUTO).await?, "auto-rotated-2");
    let loaded = tb.state.broker.policy_state().loaded_at;

    gcp.set_state(AUTO, latest, VersionState::Disabled);
    s.values(&auto).await?.refused(404, "SECRET_NOT_IN_STORE");
    gcp.set_state(AUTO, latest, VersionState::Enabled);
    assert_eq!(value_of(&s, &auto, AUTO).await?, "auto-rotated-2");

    // No reload or reread was needed for any of it.
    assert_eq!(tb.state.broker.policy_state().loaded_at, loaded);
    Ok(())
}

#[tokio::test]
async fn a_store_that_hangs_never_hangs_a_request() -> R {
    let budget = StdDuration::from_secs(1);
    let w = world(budget).await?;
    let (tb, gcp) = (&w.tb, &w.svc.gcp);
    let (_m, s) = tb.session_of(ADA).await?;
    let auto = auto_grant(&s, AUTO).await?;

    // The service accepts requests and never answers: each call ends within its budget.
    gcp.fake.stall(true);
    let slack = StdDuration::from_millis(1500);
    let t = Instant::now();
    tb.reread(AUTO).await?.refused(503, "REQUEST_ENDED");
    assert!(t.elapsed() < budget + slack, "{:?}", t.elapsed());
    let t = Instant::now();
    s.values(&auto).await?.refused(503, "DATABASE_UNAVAILABLE");
    assert!(t.elapsed() < budget + slack, "{:?}", t.elapsed());
    // Deciding a request asks nothing of the store: it is decided while the store hangs.
    gcp.fake.clear_calls();
    let asked = w.calls.all();
    assert_eq!(decided(&s, AUTO_2).await?, granted());
    assert_eq!(gcp.fake.calls(), Vec::<String>::new());
    assert_eq!(w.calls.all(), asked);

    gcp.fake.stall(false);
    assert_eq!(value_of(&s, &auto, AUTO).await?, w.value(AUTO));
    Ok(())
}
