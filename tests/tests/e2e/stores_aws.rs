//! The broker over cloud A (AWS Secrets Manager), end to end: moto's server mode as the store
//! (one per test, on a free port), the broker's real `AwsSecretStore` and the real server over
//! HTTP. Secrets are made and changed with the AWS SDK, as an operator would with the CLI; the
//! broker sees them through its listing (at start, then every five minutes on its clock, which
//! the tests move), its reread route, and its value reads at every release.
//!
//! Without `moto_server` on `PATH` each test prints `skipped: moto_server not installed` and
//! passes, unless `COUNTERSIGN_REQUIRE_MOTO=1`.

use std::sync::Arc;
use std::time::{Duration as StdDuration, Instant};

use chrono::Duration;
use countersign_broker_http::limits::Quotas;
use countersign_e2e::http::*;
use countersign_e2e::moto::*;

use crate::stores_common::*;
use serde_json::json;

type R = anyhow::Result<()>;

/// Not served: encrypted with another KMS key.
const WRONG_KEY: &str = "WRONG_KEY";
/// Not served: a tier nobody knows.
const ODD_TIER: &str = "ODD_TIER";
/// Scheduled for deletion: absent.
const GONE: &str = "GONE_SECRET";
/// Never made.
const NEVER: &str = "NEVER_MADE";

/// How long a change may take to show once the broker's clock says a reload is due (the
/// server's loop looks every second).
const RELOAD: StdDuration = StdDuration::from_secs(5);

/// One test's world: moto, the SDK, the store's key, what was made, and the broker over it.
struct World {
    moto: Moto,
    aws: Aws,
    key: String,
    secrets: Vec<StoredSecret>,
    tb: TestBroker,
}

impl World {
    /// moto holding the suite's default secrets and three refused ones, and the broker over it
    /// with each store call bounded by `timeout`; `None` when moto is not installed.
    async fn start(timeout: StdDuration) -> anyhow::Result<Option<World>> {
        let Some(bin) = moto_or_skip() else {
            return Ok(None);
        };
        let moto = Moto::start(bin).await.map_err(anyhow::Error::msg)?;
        let aws = Aws::new(&moto).await;
        let key = aws.key().await?;
        let other_key = aws.key().await?;
        let mut secrets = default_secrets();
        let mut wrong_key = StoredSecret::new(WRONG_KEY, ADA, Some("automatic"));
        wrong_key.key = Some(other_key);
        let mut gone = StoredSecret::new(GONE, ADA, Some("automatic"));
        gone.deleted = true;
        secrets.extend([
            wrong_key,
            StoredSecret::new(ODD_TIER, ADA, Some("weird")),
            gone,
        ]);
        aws.seed(&secrets, &key).await?;
        let store = aws.store(&key, timeout).await?;
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
            moto,
            aws,
            key,
            secrets,
            tb,
        }))
    }

    /// The value `name` was made with.
    fn value(&self, name: &str) -> String {
        self.secrets
            .iter()
            .find(|s| s.name == name)
            .and_then(|s| s.value.clone())
            .unwrap_or_else(|| panic!("no value made for {name}"))
    }
}

#[tokio::test]
async fn serves_and_refuses_secrets_with_every_reason() -> R {
    let Some(w) = World::start(StdDuration::from_secs(5)).await? else {
        return Ok(());
    };
    let tb = &w.tb;
    assert!(
        w.key
            .starts_with(&format!("arn:aws:kms:{REGION}:{ACCOUNT}:key/")),
        "{}",
        w.key
    );
    let settings = tb.open("GET", "/v1/settings", None).await?.expect(200);
    assert_eq!(
        settings.body,
        json!({
            "store": "cloud-a-secret-store",
            "secrets_prefix": "agents/",
            "cloud_a_key_arn": w.key,
            "cloud_a_account_id": ACCOUNT,
            "cloud_a_region": REGION,
        })
    );

    // Served, each as its tier says; values come from Secrets Manager.
    let (_m, s) = tb.session_of(ADA).await?;
    let g = s.request(&[AUTO, AUTO_2]).await?.expect(200);
    assert_eq!(g.s("state"), "granted");
    let v = s.values(&g.s("grant_id")).await?.expect(200);
    assert_eq!(
        v.body,
        json!({ "expires_at": null, "values": { AUTO: w.value(AUTO), AUTO_2: w.value(AUTO_2) } })
    );
    for (name, approver) in [
        (UNTIERED, ADA),
        (BOB_SECRET, BOB),
        (SHARED, "anyone"),
        (ADA_SECRET_2, ADA),
    ] {
        assert_eq!(decided(&s, name).await?, pending(approver), "{name}");
    }
    assert_eq!(decided(&s, LOCKED).await?.0, "denied");
    let approved = approved_grant(tb, &s, ADA_SECRET, ADA).await?;
    assert_eq!(
        value_of(&s, &approved, ADA_SECRET).await?,
        w.value(ADA_SECRET)
    );

    // Refused or absent: no agent secret has the name, alone or beside a served one.
    for name in [NO_OWNER, NO_VALUE, WRONG_KEY, ODD_TIER, GONE, NEVER] {
        s.request(&[name]).await?.refused(400, "UNKNOWN_SECRET");
        s.request(&[AUTO, name])
            .await?
            .refused(400, "UNKNOWN_SECRET");
    }

    // A reread says why, for each reason.
    for (name, reason) in [
        (NEVER, "absent"),
        (GONE, "absent"),
        (NO_OWNER, "owner-tag-missing"),
        (NO_VALUE, "no-current-value"),
        (WRONG_KEY, "wrong-encryption-key"),
        (ODD_TIER, "tier-unknown"),
    ] {
        assert_eq!(
            tb.reread(name).await?.expect(200).body,
            json!({ "name": name, "served": false, "reason": reason }),
            "{name}"
        );
        s.request(&[name]).await?.refused(400, "UNKNOWN_SECRET");
    }
    for name in [AUTO, ADA_SECRET, BOB_SECRET, SHARED, LOCKED, UNTIERED] {
        assert_eq!(
            tb.reread(name).await?.expect(200).body,
            json!({ "name": name, "served": true }),
            "{name}"
        );
    }
    // The rereads changed nothing that was served.
    assert_eq!(decided(&s, AUTO).await?, granted());
    assert_eq!(
        value_of(&s, &approved, ADA_SECRET).await?,
        w.value(ADA_SECRET)
    );
    Ok(())
}

#[tokio::test]
async fn a_reload_five_minutes_on_picks_up_new_owners_and_tiers() -> R {
    let Some(w) = World::start(StdDuration::from_secs(5)).await? else {
        return Ok(());
    };
    let (tb, aws) = (&w.tb, &w.aws);
    let (_m, s) = tb.session_of(ADA).await?;
    let approved = approved_grant(tb, &s, ADA_SECRET, ADA).await?;
    let auto_2 = auto_grant(&s, AUTO_2).await?;

    // In the store: AUTO becomes owner tier, ADA_SECRET Bob's, AUTO_2 loses its owner.
    aws.tag(AUTO, "tier", "owner").await?;
    aws.tag(ADA_SECRET, "owner", BOB).await?;
    aws.untag(AUTO_2, "owner").await?;

    // Four minutes on the broker's clock: a pass of the policy loop does not reload yet.
    let loaded = tb.state.broker.policy_state();
    tb.advance(Duration::minutes(4));
    tb.state.loops.policy.turn().await;
    assert_eq!(tb.state.broker.policy_state().loaded_at, loaded.loaded_at);
    assert_eq!(decided(&s, AUTO).await?, granted());
    value_of(&s, &approved, ADA_SECRET).await?;
    value_of(&s, &auto_2, AUTO_2).await?;

    // Five: the server reloads the policy on its own.
    tb.advance(Duration::minutes(1));
    let now_pending = eventually("AUTO turning owner tier", RELOAD, || {
        let s = &s;
        async move {
            let d = decided(s, AUTO).await?;
            Ok((d.0 == "pending").then_some(d))
        }
    })
    .await?;
    assert_eq!(now_pending, pending(ADA));
    let reloaded = tb.state.broker.policy_state();
    assert!(reloaded.loaded_at > loaded.loaded_at);
    assert_ne!(
        reloaded.policy.rules_version(),
        loaded.policy.rules_version()
    );

    // ADA_SECRET is Bob's now: Ada's approval no longer stands, and he approves a new request.
    s.values(&approved)
        .await?
        .refused(403, "GRANT_CHAIN_INVALID");
    assert_eq!(decided(&s, ADA_SECRET).await?, pending(BOB));
    // AUTO_2 is no longer served: its live grant releases nothing, a new request is refused.
    s.values(&auto_2).await?.refused(404, "SECRET_NOT_IN_STORE");
    s.request(&[AUTO_2]).await?.refused(400, "UNKNOWN_SECRET");
    Ok(())
}

#[tokio::test]
async fn a_reread_applies_one_secrets_change_at_once() -> R {
    let Some(w) = World::start(StdDuration::from_secs(5)).await? else {
        return Ok(());
    };
    let (tb, aws) = (&w.tb, &w.aws);
    let (m, s) = tb.session_of(ADA).await?;
    let auto_2 = auto_grant(&s, AUTO_2).await?;

    // Two secrets change in the store; only the one reread changes in the broker, at once.
    aws.tag(AUTO, "tier", "owner").await?;
    aws.tag(UNTIERED, "tier", "automatic").await?;
    assert_eq!(decided(&s, AUTO).await?, granted());
    let t = Instant::now();
    assert_eq!(
        tb.reread(AUTO).await?.expect(200).body,
        json!({ "name": AUTO, "served": true })
    );
    assert!(t.elapsed() < StdDuration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(decided(&s, AUTO).await?, pending(ADA));
    let other = m.enroll_session("rt-other").await?;
    assert_eq!(decided(&other, UNTIERED).await?, pending(ADA));
    tb.reread(UNTIERED).await?.expect(200);
    assert_eq!(decided(&s, UNTIERED).await?, granted());

    // No longer served after a reread: the live grant releases nothing, a request is refused.
    aws.untag(AUTO_2, "owner").await?;
    assert_eq!(value_of(&s, &auto_2, AUTO_2).await?, w.value(AUTO_2));
    assert_eq!(
        tb.reread(AUTO_2).await?.expect(200).body,
        json!({ "name": AUTO_2, "served": false, "reason": "owner-tag-missing" })
    );
    s.values(&auto_2).await?.refused(404, "SECRET_NOT_IN_STORE");
    s.request(&[AUTO_2]).await?.refused(400, "UNKNOWN_SECRET");
    // Served again: the same grant releases again.
    aws.tag(AUTO_2, "owner", ADA).await?;
    tb.reread(AUTO_2).await?.expect(200);
    assert_eq!(value_of(&s, &auto_2, AUTO_2).await?, w.value(AUTO_2));

    // A new secret is unknown until it is reread (or the next reload).
    let brand_new = StoredSecret::new("BRAND_NEW", ADA, Some("automatic"));
    aws.create(&brand_new, &w.key).await?;
    s.request(&["BRAND_NEW"])
        .await?
        .refused(400, "UNKNOWN_SECRET");
    assert_eq!(
        tb.reread("BRAND_NEW").await?.expect(200).body,
        json!({ "name": "BRAND_NEW", "served": true })
    );
    let g = auto_grant(&s, "BRAND_NEW").await?;
    assert_eq!(Some(value_of(&s, &g, "BRAND_NEW").await?), brand_new.value);

    // Scheduled for deletion: absent.
    aws.schedule_deletion(ADA_SECRET_2).await?;
    assert_eq!(
        tb.reread(ADA_SECRET_2).await?.expect(200).body,
        json!({ "name": ADA_SECRET_2, "served": false, "reason": "absent" })
    );
    s.request(&[ADA_SECRET_2])
        .await?
        .refused(400, "UNKNOWN_SECRET");
    Ok(())
}

#[tokio::test]
async fn values_are_read_fresh_after_a_rotation() -> R {
    let Some(w) = World::start(StdDuration::from_secs(5)).await? else {
        return Ok(());
    };
    let (tb, aws) = (&w.tb, &w.aws);
    let (_m, s) = tb.session_of(ADA).await?;
    let auto = auto_grant(&s, AUTO).await?;
    let approved = approved_grant(tb, &s, ADA_SECRET, ADA).await?;
    assert_eq!(value_of(&s, &auto, AUTO).await?, w.value(AUTO));
    assert_eq!(
        value_of(&s, &approved, ADA_SECRET).await?,
        w.value(ADA_SECRET)
    );
    let loaded = tb.state.broker.policy_state().loaded_at;

    // PutSecretValue makes a new AWSCURRENT version: the same grants release it at once.
    let mut current = String::new();
    for i in 1..=2 {
        current = aws.put_value(AUTO, &format!("auto-rotated-{i}")).await?;
        assert_eq!(
            value_of(&s, &auto, AUTO).await?,
            format!("auto-rotated-{i}")
        );
    }
    aws.put_value(ADA_SECRET, "ada-rotated").await?;
    assert_eq!(value_of(&s, &approved, ADA_SECRET).await?, "ada-rotated");

    // A rotation in progress (a version staged AWSPENDING) is not current: the value stays
    // until the new version is promoted to AWSCURRENT.
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

#[tokio::test]
async fn the_store_going_away_and_coming_back() -> R {
    let budget = StdDuration::from_secs(1);
    let Some(mut w) = World::start(budget).await? else {
        return Ok(());
    };
    let (_m, s) = w.tb.session_of(ADA).await?;
    let auto = auto_grant(&s, AUTO).await?;
    let approved = approved_grant(&w.tb, &s, ADA_SECRET, ADA).await?;
    assert_eq!(value_of(&s, &auto, AUTO).await?, w.value(AUTO));

    // moto goes away.
    w.moto.stop();
    let tb = &w.tb;
    let t = Instant::now();
    tb.reread(AUTO).await?.refused(503, "REQUEST_ENDED");
    // Values need the store: a dependency the broker needs is unavailable.
    s.values(&auto).await?.refused(503, "DATABASE_UNAVAILABLE");
    s.values(&approved)
        .await?
        .refused(503, "DATABASE_UNAVAILABLE");
    assert!(
        t.elapsed() < 3 * (budget + StdDuration::from_millis(1500)),
        "{:?}",
        t.elapsed()
    );
    // The last good policy is kept: requests are still decided by it...
    assert_eq!(decided(&s, AUTO_2).await?, granted());
    assert_eq!(decided(&s, BOB_SECRET).await?, pending(BOB));
    s.request(&[NO_OWNER]).await?.refused(400, "UNKNOWN_SECRET");
    // ...also once the five-minute reload has failed.
    let before = tb.state.broker.policy_state();
    tb.advance(Duration::minutes(5));
    tb.state.loops.policy.turn().await;
    let after = tb.state.broker.policy_state();
    assert_eq!(after.loaded_at, before.loaded_at);
    assert_eq!(after.policy.rules_version(), before.policy.rules_version());
    assert_eq!(decided(&s, AUTO).await?, granted());
    assert_eq!(decided(&s, SHARED).await?, pending("anyone"));

    // moto comes back on the same port, empty: its data is made again (new ARNs). The reload,
    // due since it failed, picks it up. A reload may have run while the data was half made
    // (one retrying the failed reload), so the clock moves on at each look until the next
    // reload has seen all of it.
    w.moto.restart().await.map_err(anyhow::Error::msg)?;
    w.aws.seed(&w.secrets, &w.key).await?;
    let mut looks = 0u32;
    let released = eventually("values released again", RELOAD, || {
        let s = &s;
        let auto = &auto;
        let approved = &approved;
        // Every half second (the looks are 50 ms apart), the first one included, with a
        // renewal first so that the session's lease outlives the moves.
        let advance = looks.is_multiple_of(10);
        looks += 1;
        async move {
            if advance {
                s.renew().await?.expect(200);
                tb.advance(Duration::minutes(5));
            }
            let r = s.values(auto).await?;
            let other = s.values(approved).await?;
            Ok((r.status == 200 && other.status == 200).then_some(r))
        }
    })
    .await?;
    assert_eq!(released.get("values")[AUTO], json!(w.value(AUTO)));
    assert_eq!(
        value_of(&s, &approved, ADA_SECRET).await?,
        w.value(ADA_SECRET)
    );
    assert_eq!(
        tb.reread(AUTO).await?.expect(200).body,
        json!({ "name": AUTO, "served": true })
    );
    Ok(())
}
