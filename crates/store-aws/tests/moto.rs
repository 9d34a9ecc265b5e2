//! The AWS store against moto's server mode, a real AWS API emulator started by each test as a
//! child process on a free port (and killed when the test ends). Fixtures are made with the SDK
//! itself: KMS keys, secrets with tags and keys, rotations, deletions.
//!
//! Without `moto_server` on `PATH` each test prints `skipped: moto_server not installed` and
//! passes, unless `COUNTERSIGN_REQUIRE_MOTO=1`, when it fails.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use aws_config::{BehaviorVersion, Region};
use aws_sdk_secretsmanager::config::Credentials;
use aws_sdk_secretsmanager::primitives::Blob;
use aws_sdk_secretsmanager::types::Tag;
use countersign_broker_core::ids::SecretName;
use countersign_broker_core::policy::{PolicyEntry, Refusal, Tier};
use countersign_broker_core::secrets::{Inspection, SecretStore, Settings, StoreError};
use countersign_store_aws::moto::{Moto, moto_or_skip};
use countersign_store_aws::{AwsSecretStore, AwsStoreConfig, StaticCredentials};
use zeroize::Zeroizing;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// moto's default account.
const ACCOUNT: &str = "123456789012";

// ---------------------------------------------------------------------------------------------
// moto as a child process

// ---------------------------------------------------------------------------------------------
// Fixtures, made with the SDK

struct Aws {
    sm: aws_sdk_secretsmanager::Client,
    kms: aws_sdk_kms::Client,
    region: String,
    endpoint: String,
}

impl Aws {
    async fn new(moto: &Moto, region: &str) -> Self {
        let sdk = aws_config::defaults(BehaviorVersion::latest())
            .region(Region::new(region.to_owned()))
            .endpoint_url(moto.endpoint())
            .credentials_provider(Credentials::new("testing", "testing", None, None, "test"))
            .load()
            .await;
        Self {
            sm: aws_sdk_secretsmanager::Client::new(&sdk),
            kms: aws_sdk_kms::Client::new(&sdk),
            region: region.to_owned(),
            endpoint: moto.endpoint(),
        }
    }

    /// A new KMS key: (ARN, key id).
    async fn key(&self) -> Result<(String, String), Box<dyn std::error::Error>> {
        let out = self.kms.create_key().send().await?;
        let meta = out.key_metadata().ok_or("no key metadata")?;
        let arn = meta.arn().ok_or("no key ARN")?.to_owned();
        Ok((arn, meta.key_id().to_owned()))
    }

    /// A new secret; returns its ARN.
    async fn secret(
        &self,
        name: &str,
        value: Option<&str>,
        key: Option<&str>,
        tags: &[(&str, &str)],
    ) -> Result<String, Box<dyn std::error::Error>> {
        let mut req = self.sm.create_secret().name(name);
        if let Some(v) = value {
            req = req.secret_string(v);
        }
        if let Some(k) = key {
            req = req.kms_key_id(k);
        }
        for (k, v) in tags {
            req = req.tags(Tag::builder().key(*k).value(*v).build());
        }
        let out = req.send().await?;
        Ok(out.arn().ok_or("no secret ARN")?.to_owned())
    }

    async fn put_value(&self, name: &str, value: &str) -> TestResult {
        self.sm
            .put_secret_value()
            .secret_id(name)
            .secret_string(value)
            .send()
            .await?;
        Ok(())
    }

    /// Schedules a deletion with a recovery window.
    async fn schedule_deletion(&self, name: &str) -> TestResult {
        self.sm
            .delete_secret()
            .secret_id(name)
            .recovery_window_in_days(7)
            .send()
            .await?;
        Ok(())
    }

    async fn store(&self, prefix: &str, key_arn: &str) -> Result<AwsSecretStore, StoreError> {
        self.store_with(prefix, key_arn, |_| {}).await
    }

    async fn store_with(
        &self,
        prefix: &str,
        key_arn: &str,
        tweak: impl FnOnce(&mut AwsStoreConfig),
    ) -> Result<AwsSecretStore, StoreError> {
        let mut config = AwsStoreConfig::new(prefix, key_arn, ACCOUNT, self.region.clone());
        config.endpoint_url = Some(self.endpoint.clone());
        config.credentials = Some(test_credentials());
        tweak(&mut config);
        AwsSecretStore::new(config).await
    }
}

fn test_credentials() -> StaticCredentials {
    StaticCredentials {
        access_key_id: "testing".into(),
        secret_access_key: Zeroizing::new("testing".into()),
        session_token: None,
    }
}

fn name(s: &str) -> SecretName {
    SecretName::parse(s).unwrap_or_else(|e| panic!("bad name {s}: {e:?}"))
}

fn reason(i: &Inspection) -> Option<Refusal> {
    match i {
        Inspection::Served(_) => None,
        Inspection::Refused(r) => Some(*r),
    }
}

fn served(i: Inspection) -> PolicyEntry {
    match i {
        Inspection::Served(e) => e,
        Inspection::Refused(r) => panic!("refused: {r:?}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Tests

#[tokio::test]
async fn serves_and_refuses_by_the_rules() -> TestResult {
    let Some(bin) = moto_or_skip() else {
        return Ok(());
    };
    let moto = Moto::start(bin).await.expect("start moto_server");
    let aws = Aws::new(&moto, "eu-west-1").await;
    let (key, key_id) = aws.key().await?;
    let (other_key, _) = aws.key().await?;
    let owner = ("owner", "Ada@Example.com");

    let good = aws
        .secret(
            "agents/good",
            Some("v1"),
            Some(&key),
            &[owner, ("tier", "automatic")],
        )
        .await?;
    let untiered = aws
        .secret("agents/untiered", Some("v"), Some(&key), &[owner])
        .await?;
    let shared = aws
        .secret(
            "agents/shared-one",
            Some("v"),
            Some(&key),
            &[owner, ("tier", "shared")],
        )
        .await?;
    aws.secret(
        "agents/no-owner",
        Some("v"),
        Some(&key),
        &[("tier", "owner")],
    )
    .await?;
    aws.secret(
        "agents/bad-owner",
        Some("v"),
        Some(&key),
        &[("owner", "nobody")],
    )
    .await?;
    // Each of these fails two rules: the earlier rule gives the reason.
    aws.secret(
        "agents/no-owner-other-key",
        Some("v"),
        Some(&other_key),
        &[],
    )
    .await?;
    aws.secret("agents/no-value", None, Some(&key), &[owner])
        .await?;
    aws.secret(
        "agents/no-value-other-key",
        None,
        Some(&other_key),
        &[owner],
    )
    .await?;
    aws.secret(
        "agents/other-key-odd-tier",
        Some("v"),
        Some(&other_key),
        &[owner, ("tier", "weird")],
    )
    .await?;
    aws.secret("agents/other-key", Some("v"), Some(&other_key), &[owner])
        .await?;
    aws.secret("agents/default-key", Some("v"), None, &[owner])
        .await?;
    // The right key named by its id rather than its ARN: refused (equality on the full ARN).
    aws.secret("agents/key-by-id", Some("v"), Some(&key_id), &[owner])
        .await?;
    aws.secret(
        "agents/odd-tier",
        Some("v"),
        Some(&key),
        &[owner, ("tier", "Automatic")],
    )
    .await?;
    aws.secret("agents/gone", Some("v"), Some(&key), &[owner])
        .await?;
    aws.schedule_deletion("agents/gone").await?;
    // Not agent secrets under the prefix: ignored.
    for n in [
        "other/good",
        "Agents/good",
        "agentsgood",
        "agents/Upper",
        "agents/nested/one",
        "agents/-lead",
        "agents/under_score",
    ] {
        aws.secret(n, Some("v"), Some(&key), &[owner]).await?;
    }

    let store = aws.store("agents/", &key).await?;
    let listing = store.list().await?;
    let got_served: BTreeMap<_, _> = listing
        .served
        .iter()
        .map(|e| {
            (
                e.name.as_str(),
                (e.owner.as_str(), e.tier, e.resource_name.as_str()),
            )
        })
        .collect();
    let want_served = BTreeMap::from([
        ("GOOD", ("ada@example.com", Tier::Automatic, good.as_str())),
        (
            "SHARED_ONE",
            ("ada@example.com", Tier::Shared, shared.as_str()),
        ),
        (
            "UNTIERED",
            ("ada@example.com", Tier::Owner, untiered.as_str()),
        ),
    ]);
    assert_eq!(got_served, want_served);

    let want_refused = BTreeMap::from([
        ("BAD_OWNER", Refusal::OwnerTagMissing),
        ("DEFAULT_KEY", Refusal::WrongEncryptionKey),
        ("KEY_BY_ID", Refusal::WrongEncryptionKey),
        ("NO_OWNER", Refusal::OwnerTagMissing),
        ("NO_OWNER_OTHER_KEY", Refusal::OwnerTagMissing),
        ("NO_VALUE", Refusal::NoCurrentValue),
        ("NO_VALUE_OTHER_KEY", Refusal::NoCurrentValue),
        ("ODD_TIER", Refusal::TierUnknown),
        ("OTHER_KEY", Refusal::WrongEncryptionKey),
        ("OTHER_KEY_ODD_TIER", Refusal::WrongEncryptionKey),
    ]);
    let got_refused: BTreeMap<_, _> = listing
        .refused
        .iter()
        .map(|(n, r)| (n.as_str(), *r))
        .collect();
    assert_eq!(got_refused, want_refused);

    // A reread judges one secret the same way; a scheduled deletion or no secret is absent.
    for (n, want) in want_refused.iter().map(|(n, r)| (*n, Some(*r))).chain([
        ("GOOD", None),
        ("SHARED_ONE", None),
        ("UNTIERED", None),
        ("GONE", Some(Refusal::Absent)),
        ("NEVER", Some(Refusal::Absent)),
        ("UPPER", Some(Refusal::Absent)),
    ]) {
        assert_eq!(reason(&store.inspect(&name(n)).await?), want, "{n}");
    }
    let entry = served(store.inspect(&name("GOOD")).await?);
    assert_eq!(
        Some(&entry),
        listing.served.iter().find(|e| e.name == entry.name)
    );

    let v = store.read_value(&entry).await?;
    assert_eq!(v.expose(), "v1");
    assert_eq!(format!("{v:?}"), "SecretValue(..)");
    Ok(())
}

#[tokio::test]
async fn values_are_read_fresh_and_deletions_are_absent() -> TestResult {
    let Some(bin) = moto_or_skip() else {
        return Ok(());
    };
    let moto = Moto::start(bin).await.expect("start moto_server");
    let aws = Aws::new(&moto, "eu-central-1").await;
    let (key, _) = aws.key().await?;
    let owner = ("owner", "ops@example.com");
    aws.secret("team/rotating", Some("v1"), Some(&key), &[owner])
        .await?;
    let store = aws.store("team/", &key).await?;
    let entry = served(store.inspect(&name("ROTATING")).await?);

    assert_eq!(store.read_value(&entry).await?.expose(), "v1");
    aws.put_value("team/rotating", "v2").await?;
    assert_eq!(store.read_value(&entry).await?.expose(), "v2");
    aws.put_value("team/rotating", "v3").await?;
    assert_eq!(store.read_value(&entry).await?.expose(), "v3");

    // Scheduled for deletion: absent everywhere, and its value is not read.
    aws.schedule_deletion("team/rotating").await?;
    assert_eq!(
        reason(&store.inspect(&name("ROTATING")).await?),
        Some(Refusal::Absent)
    );
    assert!(store.list().await?.served.is_empty());
    assert!(store.list().await?.refused.is_empty());
    assert!(matches!(
        store.read_value(&entry).await,
        Err(StoreError::NotFound)
    ));

    // Restored: served again, with the same ARN and the current value.
    aws.sm
        .restore_secret()
        .secret_id("team/rotating")
        .send()
        .await?;
    assert_eq!(served(store.inspect(&name("ROTATING")).await?), entry);
    assert_eq!(store.read_value(&entry).await?.expose(), "v3");

    // Deleted for good and made again under the same name: a new ARN, so the old entry's value
    // is gone and the new one is served under its own ARN.
    aws.sm
        .delete_secret()
        .secret_id("team/rotating")
        .force_delete_without_recovery(true)
        .send()
        .await?;
    assert!(matches!(
        store.read_value(&entry).await,
        Err(StoreError::NotFound)
    ));
    let again = aws
        .secret("team/rotating", Some("w1"), Some(&key), &[owner])
        .await?;
    let fresh = served(store.inspect(&name("ROTATING")).await?);
    assert_eq!(fresh.resource_name, again);
    assert_ne!(fresh.resource_name, entry.resource_name);
    assert!(matches!(
        store.read_value(&entry).await,
        Err(StoreError::NotFound)
    ));
    assert_eq!(store.read_value(&fresh).await?.expose(), "w1");

    // A binary-only secret is judged by its metadata, but has no string value to serve.
    aws.sm
        .create_secret()
        .name("team/binary")
        .secret_binary(Blob::new(b"\x00\x01".to_vec()))
        .kms_key_id(&key)
        .tags(Tag::builder().key("owner").value("ops@example.com").build())
        .send()
        .await?;
    let binary = served(store.inspect(&name("BINARY")).await?);
    assert!(matches!(
        store.read_value(&binary).await,
        Err(StoreError::NotFound)
    ));

    // A secret that had no value gets one: served from then on.
    aws.secret("team/late", None, Some(&key), &[owner]).await?;
    assert_eq!(
        reason(&store.inspect(&name("LATE")).await?),
        Some(Refusal::NoCurrentValue)
    );
    aws.put_value("team/late", "l1").await?;
    let late = served(store.inspect(&name("LATE")).await?);
    assert_eq!(store.read_value(&late).await?.expose(), "l1");
    Ok(())
}

#[tokio::test]
async fn lists_across_pages() -> TestResult {
    let Some(bin) = moto_or_skip() else {
        return Ok(());
    };
    let moto = Moto::start(bin).await.expect("start moto_server");
    let aws = Aws::new(&moto, "us-west-2").await;
    let (key, _) = aws.key().await?;
    let owner = ("owner", "pat@example.com");
    for i in 0..30 {
        aws.secret(&format!("paged/s{i:02}"), Some("v"), Some(&key), &[owner])
            .await?;
        if i % 3 == 0 {
            // Interleaved secrets outside the prefix, which the name filter leaves out.
            aws.secret(&format!("noise/s{i:02}"), Some("v"), Some(&key), &[owner])
                .await?;
        }
    }
    for i in 0..4 {
        aws.secret(&format!("paged/r{i}"), Some("v"), Some(&key), &[])
            .await?;
    }
    // One page of 7 does not hold them all: the listing has to follow the pages.
    let first = aws
        .sm
        .list_secrets()
        .max_results(7)
        .filters(
            aws_sdk_secretsmanager::types::Filter::builder()
                .key(aws_sdk_secretsmanager::types::FilterNameStringType::Name)
                .values("paged/")
                .build(),
        )
        .send()
        .await?;
    assert_eq!(first.secret_list().len(), 7);
    assert!(first.next_token().is_some());
    let store = aws.store_with("paged/", &key, |c| c.page_size = 7).await?;
    let listing = store.list().await?;
    let mut got: Vec<_> = listing.served.iter().map(|e| e.name.to_string()).collect();
    got.sort();
    let want: Vec<_> = (0..30).map(|i| format!("S{i:02}")).collect();
    assert_eq!(got, want);
    assert_eq!(listing.refused.len(), 4);
    assert!(
        listing
            .refused
            .iter()
            .all(|(_, r)| *r == Refusal::OwnerTagMissing)
    );
    Ok(())
}

#[tokio::test]
async fn settings_name_the_cloud_a_store() -> TestResult {
    let key = "arn:aws:kms:ap-southeast-2:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab";
    let mut config = AwsStoreConfig::new("agents/", key, ACCOUNT, "ap-southeast-2");
    config.endpoint_url = Some("http://127.0.0.1:9".into());
    config.credentials = Some(test_credentials());
    let store = AwsSecretStore::new(config).await?;
    let s = store.settings();
    assert_eq!(
        s,
        Settings {
            store: "cloud-a-secret-store".into(),
            secrets_prefix: "agents/".into(),
            cloud_a_key_arn: Some(key.into()),
            cloud_a_account_id: Some(ACCOUNT.into()),
            cloud_a_region: Some("ap-southeast-2".into()),
            cloud_b_key_name: None,
            cloud_b_project: None,
        }
    );
    let json = serde_json::to_value(&s)?;
    assert_eq!(
        json,
        serde_json::json!({
            "store": "cloud-a-secret-store",
            "secrets_prefix": "agents/",
            "cloud_a_key_arn": key,
            "cloud_a_account_id": ACCOUNT,
            "cloud_a_region": "ap-southeast-2",
        })
    );
    // A prefix without the trailing slash is refused at construction.
    let bad = AwsStoreConfig::new("agents", key, ACCOUNT, "ap-southeast-2");
    assert!(matches!(
        AwsSecretStore::new(bad).await,
        Err(StoreError::Other(_))
    ));
    Ok(())
}

/// Every call of the store, each checked to fail `Unavailable` within the budget.
async fn assert_unavailable(store: &AwsSecretStore, entry: &PolicyEntry, budget: Duration) {
    let slack = Duration::from_millis(1500);
    let t = Instant::now();
    let r = store.list().await;
    assert!(matches!(r, Err(StoreError::Unavailable(_))), "list: {r:?}");
    assert!(t.elapsed() < budget + slack, "list took {:?}", t.elapsed());
    let t = Instant::now();
    let r = store.inspect(&entry.name).await;
    assert!(
        matches!(r, Err(StoreError::Unavailable(_))),
        "inspect: {r:?}"
    );
    assert!(
        t.elapsed() < budget + slack,
        "inspect took {:?}",
        t.elapsed()
    );
    let t = Instant::now();
    let r = store.read_value(entry).await;
    assert!(
        matches!(r, Err(StoreError::Unavailable(_))),
        "read_value: {r:?}"
    );
    assert!(
        t.elapsed() < budget + slack,
        "read_value took {:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn the_store_going_away_and_coming_back() -> TestResult {
    let Some(bin) = moto_or_skip() else {
        return Ok(());
    };
    let mut moto = Moto::start(bin).await.expect("start moto_server");
    let aws = Aws::new(&moto, "ca-central-1").await;
    let (key, _) = aws.key().await?;
    let owner = ("owner", "sre@example.com");
    aws.secret("svc/db-password", Some("p1"), Some(&key), &[owner])
        .await?;
    let budget = Duration::from_secs(1);
    let store = aws.store_with("svc/", &key, |c| c.timeout = budget).await?;
    let entry = served(store.inspect(&name("DB_PASSWORD")).await?);
    assert_eq!(store.read_value(&entry).await?.expose(), "p1");

    moto.stop();
    assert_unavailable(&store, &entry, budget).await;

    // Back on the same port. moto keeps its state in memory, so the secret is made again, with
    // the same key ARN (moto's Secrets Manager does not check the key exists).
    moto.restart().await.expect("restart moto_server");
    aws.secret("svc/db-password", Some("p2"), Some(&key), &[owner])
        .await?;
    let listing = store.list().await?;
    assert_eq!(listing.served.len(), 1);
    let back = served(store.inspect(&name("DB_PASSWORD")).await?);
    assert_eq!(store.read_value(&back).await?.expose(), "p2");
    Ok(())
}

#[tokio::test]
async fn a_silent_store_times_out() -> TestResult {
    // A listener that accepts connections and never answers: every call must end within its
    // budget, as Unavailable, rather than hang.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            held.push(conn);
        }
    });
    let budget = Duration::from_millis(800);
    let key = "arn:aws:kms:sa-east-1:123456789012:key/silent";
    let mut config = AwsStoreConfig::new("agents/", key, ACCOUNT, "sa-east-1");
    config.endpoint_url = Some(format!("http://{addr}"));
    config.credentials = Some(test_credentials());
    config.timeout = budget;
    let store = AwsSecretStore::new(config).await?;
    let entry = PolicyEntry {
        name: name("SILENT"),
        owner: countersign_broker_core::ids::Login::parse("a@example.com").ok_or("login")?,
        tier: Tier::Automatic,
        resource_name: "arn:aws:secretsmanager:sa-east-1:123456789012:secret:agents/silent-AbCdEf"
            .into(),
        issuer: None,
    };
    assert_unavailable(&store, &entry, budget).await;
    hold.abort();
    Ok(())
}
