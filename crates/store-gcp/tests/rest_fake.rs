//! The store, with the real Google client, against the small Secret Manager REST server of
//! [`countersign_store_gcp::fake`] (feature `fake`).
//!
//! No installable emulator implements Secret Manager faithfully (the known ones drop annotations
//! and CMEK settings and ignore filters), and the store's judging depends on exactly those. The
//! client speaks REST/JSON to an overridden endpoint, so the fake serves the REST API's paths
//! and JSON: `GET /v1/projects/{p}/secrets` (paged), `GET /v1/projects/{p}/secrets/{s}`,
//! `GET /v1/projects/{p}/secrets/{s}/versions/{v}` and `.../versions/{v}:access`, with enums as
//! numbers when the client asks for `$alt=json;enum-encoding=int` (as it does), and errors in
//! Google's JSON error shape.

use std::collections::BTreeMap;
use std::error::Error;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use countersign_broker_core::ids::SecretName;
use countersign_broker_core::policy::{PolicyEntry, Refusal, Tier};
use countersign_broker_core::secrets::{Inspection, SecretStore, StoreError};
use countersign_store_gcp::fake::{Fake, Replication, Server, VersionState};
use countersign_store_gcp::{GcpCredentials, GcpSecretStore, GcpStoreConfig, STORE_NAME};
use serde_json::json;

type TestResult = Result<(), Box<dyn Error>>;

const PREFIX: &str = "projects/123/secrets/agents-";
const KEY: &str = "projects/kms-prj/locations/global/keyRings/countersign/cryptoKeys/agents";
const OTHER_KEY: &str = "projects/kms-prj/locations/global/keyRings/countersign/cryptoKeys/other";

// ---------------------------------------------------------------------------------------------
// Helpers

async fn store_at(addr: SocketAddr, timeout: Duration) -> Result<GcpSecretStore, Box<dyn Error>> {
    let mut config = GcpStoreConfig::new(PREFIX, KEY);
    config.endpoint = Some(format!("http://{addr}"));
    config.credentials = GcpCredentials::Anonymous;
    config.timeout = timeout;
    Ok(GcpSecretStore::new(config).await?)
}

fn n(s: &str) -> SecretName {
    SecretName::parse(s).expect("a valid secret name")
}

fn served(i: &Inspection) -> Option<&PolicyEntry> {
    match i {
        Inspection::Served(e) => Some(e),
        Inspection::Refused(_) => None,
    }
}

/// A served secret `id` with one version `value`.
fn seed_served(fake: &Fake, id: &str, value: &str) {
    fake.put(
        id,
        Some("ada@example.com"),
        Some("automatic"),
        Replication::automatic(Some(KEY)),
    );
    fake.add_version(id, value);
}

fn entry(name: &str, owner: &str, tier: Tier) -> PolicyEntry {
    PolicyEntry {
        name: n(name),
        owner: countersign_broker_core::ids::Login::parse(owner).expect("login"),
        tier,
        resource_name: format!("{PREFIX}{}", n(name).stored_suffix()),
        issuer: None,
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

/// Every refusal reason, the order of the checks, what is ignored, and that list and inspect
/// agree; listing reads no value.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_and_refuses_by_the_rules() -> TestResult {
    let fake = Fake::default();
    let auto = Replication::automatic;
    let owner = Some("Ada@Example.com");

    fake.put("agents-good", owner, Some("automatic"), auto(Some(KEY)));
    fake.add_version("agents-good", "v1");
    fake.put("agents-shared-one", owner, Some("shared"), auto(Some(KEY)));
    fake.add_version("agents-shared-one", "s");
    fake.put("agents-no-tier", owner, None, auto(Some(KEY)));
    fake.add_version("agents-no-tier", "t");
    fake.put(
        "agents-regional",
        owner,
        Some("locked"),
        Replication::user_managed(&[("us-east1", Some(KEY))]),
    );
    fake.add_version("agents-regional", "r");

    // owner-tag-missing: none, only a label, not an e-mail; before the value check.
    fake.put("agents-no-owner", None, None, auto(Some(KEY)));
    fake.add_version("agents-no-owner", "x");
    fake.put("agents-owner-label", None, None, auto(Some(KEY)));
    fake.with_secret("agents-owner-label", |s| {
        s.labels.insert("owner".into(), "ada_example_com".into());
    });
    fake.add_version("agents-owner-label", "x");
    fake.put("agents-bad-owner", Some("ada"), None, auto(Some(KEY)));
    fake.add_version("agents-bad-owner", "x");
    fake.put("agents-no-owner-no-value", None, None, auto(None));

    // no-current-value: no version, latest disabled (an older one enabled), destroyed; before
    // the key check.
    fake.put("agents-no-value", owner, None, auto(Some(KEY)));
    fake.put("agents-latest-disabled", owner, None, auto(Some(KEY)));
    fake.add_version("agents-latest-disabled", "old");
    fake.add_version("agents-latest-disabled", "new");
    fake.set_state("agents-latest-disabled", 2, VersionState::Disabled);
    fake.put("agents-destroyed", owner, None, auto(Some(KEY)));
    fake.add_version("agents-destroyed", "x");
    fake.set_state("agents-destroyed", 1, VersionState::Destroyed);
    fake.put(
        "agents-no-value-other-key",
        owner,
        None,
        auto(Some(OTHER_KEY)),
    );

    // wrong-encryption-key: another key, Google's, a version written before CMEK was set, one
    // replica of two on another key; before the tier check.
    fake.put("agents-other-key", owner, None, auto(Some(OTHER_KEY)));
    fake.add_version("agents-other-key", "x");
    fake.put("agents-google-managed", owner, None, auto(None));
    fake.add_version("agents-google-managed", "x");
    fake.put("agents-old-version", owner, None, auto(None));
    fake.add_version("agents-old-version", "x");
    fake.with_secret("agents-old-version", |s| s.replication = auto(Some(KEY)));
    fake.put(
        "agents-mixed-replicas",
        owner,
        None,
        Replication::user_managed(&[("us-east1", Some(KEY)), ("us-west1", Some(OTHER_KEY))]),
    );
    fake.add_version("agents-mixed-replicas", "x");
    fake.put(
        "agents-other-key-odd-tier",
        owner,
        Some("weird"),
        auto(Some(OTHER_KEY)),
    );
    fake.add_version("agents-other-key-odd-tier", "x");

    // tier-unknown.
    fake.put("agents-odd-tier", owner, Some("Automatic"), auto(Some(KEY)));
    fake.add_version("agents-odd-tier", "x");

    // Not under the prefix, or not a stored name: ignored.
    for id in [
        "other-app-token",
        "agentsx-token",
        "agents-Upper",
        "agents-under_score",
    ] {
        seed_served(&fake, id, "x");
    }

    let server = Server::start(&fake, ([127, 0, 0, 1], 0).into()).await?;
    let store = store_at(server.addr(), Duration::from_secs(5)).await?;

    let want: Vec<(&str, Option<Refusal>)> = vec![
        ("GOOD", None),
        ("SHARED_ONE", None),
        ("NO_TIER", None),
        ("REGIONAL", None),
        ("NO_OWNER", Some(Refusal::OwnerTagMissing)),
        ("OWNER_LABEL", Some(Refusal::OwnerTagMissing)),
        ("BAD_OWNER", Some(Refusal::OwnerTagMissing)),
        ("NO_OWNER_NO_VALUE", Some(Refusal::OwnerTagMissing)),
        ("NO_VALUE", Some(Refusal::NoCurrentValue)),
        ("LATEST_DISABLED", Some(Refusal::NoCurrentValue)),
        ("DESTROYED", Some(Refusal::NoCurrentValue)),
        ("NO_VALUE_OTHER_KEY", Some(Refusal::NoCurrentValue)),
        ("OTHER_KEY", Some(Refusal::WrongEncryptionKey)),
        ("GOOGLE_MANAGED", Some(Refusal::WrongEncryptionKey)),
        ("OLD_VERSION", Some(Refusal::WrongEncryptionKey)),
        ("MIXED_REPLICAS", Some(Refusal::WrongEncryptionKey)),
        ("OTHER_KEY_ODD_TIER", Some(Refusal::WrongEncryptionKey)),
        ("ODD_TIER", Some(Refusal::TierUnknown)),
        ("NEVER", Some(Refusal::Absent)),
    ];

    let listing = store.list().await?;
    let mut served_names: Vec<&str> = listing.served.iter().map(|e| e.name.as_str()).collect();
    served_names.sort_unstable();
    assert_eq!(served_names, ["GOOD", "NO_TIER", "REGIONAL", "SHARED_ONE"]);
    let good = listing
        .served
        .iter()
        .find(|e| e.name.as_str() == "GOOD")
        .expect("GOOD served");
    assert_eq!(good, &entry("GOOD", "ada@example.com", Tier::Automatic));
    assert_eq!(good.resource_name, "projects/123/secrets/agents-good");
    let tiers: BTreeMap<&str, Tier> = listing
        .served
        .iter()
        .map(|e| (e.name.as_str(), e.tier))
        .collect();
    assert_eq!(tiers["SHARED_ONE"], Tier::Shared);
    assert_eq!(tiers["NO_TIER"], Tier::Owner);
    assert_eq!(tiers["REGIONAL"], Tier::Locked);
    let refused: BTreeMap<String, Refusal> = listing
        .refused
        .iter()
        .map(|(n, r)| (n.to_string(), *r))
        .collect();
    let want_refused: BTreeMap<String, Refusal> = want
        .iter()
        .filter_map(|(n, r)| {
            r.filter(|r| *r != Refusal::Absent)
                .map(|r| (n.to_string(), r))
        })
        .collect();
    assert_eq!(refused, want_refused);

    // 22 secrets in pages of at most 3; and no value was read to list.
    let calls = fake.calls();
    assert_eq!(calls.iter().filter(|c| c.starts_with("list ")).count(), 8);
    assert!(
        calls.iter().all(|c| !c.contains(":access")),
        "listing read a value: {calls:?}"
    );
    assert!(
        calls
            .iter()
            .all(|c| c.contains("$alt=json;enum-encoding=int")),
        "{calls:?}"
    );

    for (name, want) in &want {
        let got = store.inspect(&n(name)).await?;
        match (&got, want) {
            (Inspection::Served(e), None) => {
                assert_eq!(Some(e), listing.served.iter().find(|s| s.name == e.name));
            }
            (Inspection::Refused(r), Some(w)) => assert_eq!(r, w, "{name}"),
            _ => panic!("{name}: got {got:?}, want {want:?}"),
        }
    }
    Ok(server.stop().await?)
}

/// A listing follows page tokens to the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_every_page() -> TestResult {
    let fake = Fake::default();
    for i in 0..10 {
        seed_served(&fake, &format!("agents-token-{i}"), "v");
    }
    let server = Server::start(&fake, ([127, 0, 0, 1], 0).into()).await?;
    let store = store_at(server.addr(), Duration::from_secs(5)).await?;
    let listing = store.list().await?;
    assert_eq!(listing.served.len(), 10);
    assert!(listing.refused.is_empty());
    let lists: Vec<String> = fake
        .calls()
        .into_iter()
        .filter(|c| c.starts_with("list "))
        .collect();
    assert_eq!(lists.len(), 4, "{lists:?}");
    assert!(lists[0].ends_with("pageToken="), "{lists:?}");
    assert!(lists[1].contains("pageToken=after-3"), "{lists:?}");
    assert!(lists[3].contains("pageToken=after-9"), "{lists:?}");
    assert!(
        lists.iter().all(|c| c.contains("pageSize=500")),
        "{lists:?}"
    );
    Ok(server.stop().await?)
}

/// Values are read at every call, from `latest`: a new version is seen at once; a disabled,
/// deleted or non-UTF-8 value is NotFound; a reread sees a change at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_values_fresh() -> TestResult {
    let fake = Fake::default();
    seed_served(&fake, "agents-github-token", "ghp_one");
    let server = Server::start(&fake, ([127, 0, 0, 1], 0).into()).await?;
    let store = store_at(server.addr(), Duration::from_secs(5)).await?;
    let listing = store.list().await?;
    let e = listing.served.first().expect("served").clone();
    assert_eq!(e.resource_name, "projects/123/secrets/agents-github-token");

    fake.clear_calls();
    let v = store.read_value(&e).await?;
    assert_eq!(v.expose(), "ghp_one");
    assert_eq!(format!("{v:?}"), "SecretValue(..)");
    fake.add_version("agents-github-token", "ghp_two");
    assert_eq!(store.read_value(&e).await?.expose(), "ghp_two");
    assert_eq!(store.read_value(&e).await?.expose(), "ghp_two");
    let accesses: Vec<String> = fake
        .calls()
        .into_iter()
        .filter(|c| c.contains(":access"))
        .collect();
    assert_eq!(accesses.len(), 3, "{accesses:?}");
    assert!(accesses[0].contains("agents-github-token/latest:access"));

    // A value that is not UTF-8 is not handed out.
    fake.add_version("agents-github-token", vec![0xff, 0xfe, 0x00]);
    assert!(matches!(
        store.read_value(&e).await,
        Err(StoreError::NotFound)
    ));
    fake.add_version("agents-github-token", "ghp_three");
    assert_eq!(store.read_value(&e).await?.expose(), "ghp_three");

    // The latest disabled: no current value, nothing read, and a reread refuses it.
    fake.set_state("agents-github-token", 4, VersionState::Disabled);
    assert!(matches!(
        store.read_value(&e).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        store.inspect(&n("GITHUB_TOKEN")).await?,
        Inspection::Refused(Refusal::NoCurrentValue)
    );
    fake.set_state("agents-github-token", 4, VersionState::Enabled);
    assert_eq!(served(&store.inspect(&n("GITHUB_TOKEN")).await?), Some(&e));

    // A changed owner is seen by a reread at once.
    fake.with_secret("agents-github-token", |s| {
        s.annotations
            .insert("owner".into(), "bob@example.com".into());
    });
    let now = store.inspect(&n("GITHUB_TOKEN")).await?;
    assert_eq!(
        served(&now).map(|e| e.owner.as_str()),
        Some("bob@example.com")
    );

    // Deleted: absent, and its value NotFound.
    fake.delete("agents-github-token");
    assert!(matches!(
        store.read_value(&e).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(
        store.inspect(&n("GITHUB_TOKEN")).await?,
        Inspection::Refused(Refusal::Absent)
    );
    assert!(store.list().await?.served.is_empty());

    // Never a read outside the prefix.
    let mut outside = e.clone();
    outside.resource_name = "projects/123/secrets/other-github-token".into();
    seed_served(&fake, "other-github-token", "not yours");
    assert!(matches!(
        store.read_value(&outside).await,
        Err(StoreError::Other(_))
    ));
    Ok(server.stop().await?)
}

/// The settings answer, and the configurations `new` refuses.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_and_config() -> TestResult {
    let store = store_at(([127, 0, 0, 1], 9).into(), Duration::from_secs(5)).await?;
    let s = store.settings();
    assert_eq!(s.store, STORE_NAME);
    assert_eq!(
        serde_json::to_value(&s)?,
        json!({
            "store": "cloud-b-secret-store",
            "secrets_prefix": "projects/123/secrets/agents-",
            "cloud_b_key_name": KEY,
            "cloud_b_project": "123",
        })
    );

    let config = GcpStoreConfig::new(PREFIX, KEY);
    assert_eq!(config.timeout, Duration::from_secs(5));
    assert_eq!(config.credentials, GcpCredentials::ApplicationDefault);
    assert_eq!(config.endpoint, None);

    for (prefix, key) in [
        ("projects/my-project/secrets/agents-", KEY),
        ("projects/123/secrets/agents", KEY),
        ("projects/123/secrets/", KEY),
        ("agents/", KEY),
        ("projects/123/locations/us-east1/secrets/agents-", KEY),
        (PREFIX, "agents"),
        (PREFIX, ""),
    ] {
        let mut c = GcpStoreConfig::new(prefix, key);
        c.credentials = GcpCredentials::Anonymous;
        c.endpoint = Some("http://127.0.0.1:9".into());
        assert!(
            matches!(GcpSecretStore::new(c).await, Err(StoreError::Other(_))),
            "{prefix} {key}"
        );
    }
    Ok(())
}

/// Errors in Google's shape: refusals are Other, transient failures Unavailable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_errors() -> TestResult {
    let fake = Fake::default();
    seed_served(&fake, "agents-good", "v");
    let server = Server::start(&fake, ([127, 0, 0, 1], 0).into()).await?;
    let timeout = Duration::from_secs(2);
    let store = store_at(server.addr(), timeout).await?;
    let e = entry("GOOD", "ada@example.com", Tier::Automatic);

    fake.fail(Some((403, "PERMISSION_DENIED")));
    assert!(matches!(store.list().await, Err(StoreError::Other(_))));
    assert!(matches!(
        store.read_value(&e).await,
        Err(StoreError::Other(_))
    ));

    for fail in [(503, "UNAVAILABLE"), (500, "not JSON")] {
        fake.fail(Some(fail));
        let t = Instant::now();
        let got = store.inspect(&n("GOOD")).await;
        assert!(
            matches!(got, Err(StoreError::Unavailable(_))),
            "{fail:?}: {got:?}"
        );
        assert!(t.elapsed() < timeout + Duration::from_secs(1), "{fail:?}");
    }

    fake.fail(None);
    assert_eq!(store.read_value(&e).await?.expose(), "v");
    Ok(server.stop().await?)
}

/// The store going away (the server stopped) is Unavailable within the timeout; it coming back
/// on the same port works again, with the same client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_goes_away_and_comes_back() -> TestResult {
    let fake = Fake::default();
    seed_served(&fake, "agents-good", "v1");
    let server = Server::start(&fake, ([127, 0, 0, 1], 0).into()).await?;
    let addr = server.addr();
    let timeout = Duration::from_secs(1);
    let store = store_at(addr, timeout).await?;
    let listing = store.list().await?;
    assert_eq!(listing.served.len(), 1);
    let e = listing.served[0].clone();
    assert_eq!(store.read_value(&e).await?.expose(), "v1");

    server.stop().await?;
    let t = Instant::now();
    let got = store.list().await;
    assert!(matches!(got, Err(StoreError::Unavailable(_))), "{got:?}");
    let got = store.inspect(&n("GOOD")).await;
    assert!(matches!(got, Err(StoreError::Unavailable(_))), "{got:?}");
    let got = store.read_value(&e).await;
    assert!(matches!(got, Err(StoreError::Unavailable(_))), "{got:?}");
    assert!(
        t.elapsed() < 3 * (timeout + Duration::from_millis(500)),
        "{:?}",
        t.elapsed()
    );

    let server = Server::start(&fake, addr).await?;
    assert_eq!(server.addr(), addr);
    fake.add_version("agents-good", "v2");
    assert_eq!(store.list().await?, listing);
    assert_eq!(store.read_value(&e).await?.expose(), "v2");
    Ok(server.stop().await?)
}

/// A store that accepts but never answers is Unavailable within the timeout, never a hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_store_times_out() -> TestResult {
    let fake = Fake::default();
    seed_served(&fake, "agents-good", "v1");
    let server = Server::start(&fake, ([127, 0, 0, 1], 0).into()).await?;
    let timeout = Duration::from_secs(1);
    let store = store_at(server.addr(), timeout).await?;
    let e = entry("GOOD", "ada@example.com", Tier::Automatic);

    fake.stall(true);
    for what in ["list", "inspect", "read"] {
        let t = Instant::now();
        let got = match what {
            "list" => store.list().await.map(|_| ()),
            "inspect" => store.inspect(&n("GOOD")).await.map(|_| ()),
            _ => store.read_value(&e).await.map(|_| ()),
        };
        let took = t.elapsed();
        assert!(
            matches!(got, Err(StoreError::Unavailable(_))),
            "{what}: {got:?}"
        );
        assert!(
            took >= timeout - Duration::from_millis(100),
            "{what}: {took:?}"
        );
        assert!(
            took < timeout + Duration::from_millis(1500),
            "{what}: {took:?}"
        );
    }

    fake.stall(false);
    assert_eq!(store.read_value(&e).await?.expose(), "v1");
    // The stall over, the requests that waited end too: the server stops gracefully.
    Ok(server.stop().await?)
}
