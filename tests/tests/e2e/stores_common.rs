//! What the secret-store contract (`stores_contract`) stands on: a [`Service`] is one store as
//! its operator sees it (AWS Secrets Manager in moto, Google Secret Manager in its REST fake, the
//! local TOML file), changed the way the operator would change it; a [`World`] is that service,
//! the broker's real store over it, and the real broker server over HTTP; the rest is what the
//! tests ask of the broker (a grant made automatically or by an approver, a grant's value, how
//! a new request is decided).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration as StdDuration;

use async_trait::async_trait;
use countersign_broker_core::ids::SecretName;
use countersign_broker_core::policy::PolicyEntry;
use countersign_broker_core::secrets::{
    Inspection, Listing, SecretStore, SecretValue, Settings, StoreError,
};
use countersign_broker_http::limits::Quotas;
use countersign_e2e::http::*;
use serde_json::Value;

/// Not served: encrypted with another key than the store's.
pub const WRONG_KEY: &str = "WRONG_KEY";
/// Not served: a tier nobody knows.
pub const ODD_TIER: &str = "ODD_TIER";
/// Deleted (or scheduled for deletion): absent.
pub const GONE: &str = "GONE_SECRET";
/// Never made.
pub const NEVER: &str = "NEVER_MADE";

/// How a service comes back after [`Service::stop`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Comeback {
    /// With its data, under the same resource names: values are released at once.
    SameNames,
    /// With its data made again under new resource names (moto restarts empty, the ARNs are
    /// new): values are released once a reload has seen them.
    NewNames,
}

/// Calls the service itself saw, where it keeps a log (the Google fake).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ServiceCalls {
    pub lists: usize,
    pub value_reads: usize,
}

/// One secret store under test, as its operator changes it. Secrets are named by their agent
/// names (`AUTO_TOKEN`); a [`StoredSecret`] whose `key` is `Some` is encrypted with another key
/// than the store's.
#[async_trait]
pub trait Service: Sized + Send + Sync {
    /// The service holding `secrets` (and the refused ones of [`Self::own_refused`]), and the
    /// broker's store over it with each call bounded by `timeout`; `None` when the service
    /// cannot run here (moto not installed), and the test is skipped.
    async fn start(secrets: &[StoredSecret], timeout: StdDuration) -> anyhow::Result<Option<Self>>;
    /// The broker's store over the service.
    fn store(&self) -> Arc<dyn SecretStore>;
    /// `GET /v1/settings` as the broker answers it over this store.
    fn settings(&self) -> Value;
    /// Secrets only this kind of store refuses, made by [`Self::start`], with the reason a
    /// reread gives.
    fn own_refused(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
    /// Sets (`Some`) or removes (`None`) tag (annotation, field) `key` (`owner`, `tier`) of
    /// secret `name`.
    async fn tag(&self, name: &str, key: &str, value: Option<&str>) -> anyhow::Result<()>;
    /// Makes one more secret.
    async fn create(&self, s: &StoredSecret) -> anyhow::Result<()>;
    /// Deletes (or schedules the deletion of) secret `name`.
    async fn delete(&self, name: &str) -> anyhow::Result<()>;
    /// Rotates secret `name`: `value` is its new current value.
    async fn rotate(&self, name: &str, value: &str) -> anyhow::Result<()>;
    /// The service goes away: it refuses connections (or its file is gone).
    async fn stop(&mut self) -> anyhow::Result<()>;
    /// The service comes back with its data, secret `name` rotated to `value` meanwhile.
    async fn come_back(&mut self, name: &str, value: &str) -> anyhow::Result<Comeback>;
    /// The calls the service saw so far, where it keeps a log.
    fn service_calls(&self) -> Option<ServiceCalls> {
        None
    }
}

/// The broker's calls to its store, counted: what the broker asks of any store.
#[derive(Debug, Default)]
pub struct StoreCalls {
    pub lists: AtomicUsize,
    pub inspections: AtomicUsize,
    pub value_reads: AtomicUsize,
}

impl StoreCalls {
    pub fn lists(&self) -> usize {
        self.lists.load(Ordering::SeqCst)
    }
    pub fn value_reads(&self) -> usize {
        self.value_reads.load(Ordering::SeqCst)
    }
    pub fn all(&self) -> usize {
        self.lists() + self.inspections.load(Ordering::SeqCst) + self.value_reads()
    }
}

/// A store that counts the broker's calls into [`StoreCalls`] and passes them on.
#[derive(Debug)]
struct Counted {
    inner: Arc<dyn SecretStore>,
    calls: Arc<StoreCalls>,
}

#[async_trait]
impl SecretStore for Counted {
    fn settings(&self) -> Settings {
        self.inner.settings()
    }
    async fn list(&self) -> Result<Listing, StoreError> {
        self.calls.lists.fetch_add(1, Ordering::SeqCst);
        self.inner.list().await
    }
    async fn inspect(&self, name: &SecretName) -> Result<Inspection, StoreError> {
        self.calls.inspections.fetch_add(1, Ordering::SeqCst);
        self.inner.inspect(name).await
    }
    async fn read_value(&self, entry: &PolicyEntry) -> Result<SecretValue, StoreError> {
        self.calls.value_reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read_value(entry).await
    }
}

/// The secrets every contract test starts with: the suite's defaults (each tier, two owners,
/// no owner, no value) and three more that are not served (another key, an unknown tier,
/// deleted).
pub fn contract_secrets() -> Vec<StoredSecret> {
    let mut secrets = default_secrets();
    let mut wrong_key = StoredSecret::new(WRONG_KEY, ADA, Some("automatic"));
    wrong_key.key = Some("other".into());
    let mut gone = StoredSecret::new(GONE, ADA, Some("automatic"));
    gone.deleted = true;
    secrets.extend([
        wrong_key,
        StoredSecret::new(ODD_TIER, ADA, Some("weird")),
        gone,
    ]);
    secrets
}

/// One test's world: the service, what was made in it, the broker over it, and the broker's
/// calls to the store.
pub struct World<S> {
    pub svc: S,
    pub secrets: Vec<StoredSecret>,
    pub tb: TestBroker,
    pub calls: Arc<StoreCalls>,
}

impl<S: Service> World<S> {
    /// The service holding [`contract_secrets`] and the broker over it, each store call bounded
    /// by `timeout`; `None` when the service cannot run here.
    pub async fn start(timeout: StdDuration) -> anyhow::Result<Option<Self>> {
        let secrets = contract_secrets();
        let Some(svc) = S::start(&secrets, timeout).await? else {
            return Ok(None);
        };
        let calls = Arc::new(StoreCalls::default());
        let store = Counted {
            inner: svc.store(),
            calls: calls.clone(),
        };
        let tb = TestBroker::builder()
            .store(Arc::new(store))
            .quotas(Quotas {
                rereads_per_source: 1000,
                rereads_overall: 1000,
                ..Quotas::default()
            })
            .start()
            .await?;
        Ok(Some(World {
            svc,
            secrets,
            tb,
            calls,
        }))
    }

    /// The value `name` was made with.
    pub fn value(&self, name: &str) -> String {
        self.secrets
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.value.clone())
            .unwrap_or_else(|| panic!("no value made for {name}"))
    }
}

/// An automatic grant of `name`: its id.
pub async fn auto_grant(s: &Session, name: &str) -> anyhow::Result<String> {
    let r = s.request(&[name]).await?.expect(200);
    assert_eq!(r.s("state"), "granted", "{name}: {}", r.text);
    Ok(r.s("grant_id"))
}

/// A grant of `name` approved by `approver`: its id.
pub async fn approved_grant(
    tb: &TestBroker,
    s: &Session,
    name: &str,
    approver: &str,
) -> anyhow::Result<String> {
    let r = s.request(&[name]).await?.expect(200);
    assert_eq!(r.s("state"), "pending", "{name}: {}", r.text);
    let a = tb
        .approve(&r.s("record_id"), approver, None)
        .await?
        .expect(200);
    Ok(a.s("grant_id"))
}

/// The value a grant releases for `name`.
pub async fn value_of(s: &Session, grant_id: &str, name: &str) -> anyhow::Result<String> {
    let v = s.values(grant_id).await?.expect(200);
    Ok(v.get("values")[name]
        .as_str()
        .unwrap_or_else(|| panic!("no value of {name}: {}", v.text))
        .to_owned())
}

/// A new request's (state, approver).
pub async fn decided(s: &Session, name: &str) -> anyhow::Result<(String, String)> {
    let r = s.request(&[name]).await?.expect(200);
    let approver = r.get("approver").as_str().unwrap_or("").to_owned();
    Ok((r.s("state"), approver))
}

pub fn pending(approver: &str) -> (String, String) {
    ("pending".into(), approver.into())
}

pub fn granted() -> (String, String) {
    ("granted".into(), String::new())
}
