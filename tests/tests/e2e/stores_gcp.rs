//! The broker over cloud B (Google Secret Manager), end to end: the store crate's Secret Manager
//! REST fake on loopback (one per test), the broker's real `GcpSecretStore` (the real Google
//! client) and the real server over HTTP. No installable emulator implements Secret Manager
//! faithfully (annotations, CMEK, filters), hence the fake (`countersign_store_gcp::fake`).
//! Secrets are changed in the fake as an operator would in the service; the broker sees them
//! through its listing (at start, then every five minutes on its clock, which the tests move),
//! its reread route, and its value reads at every release.

use std::time::{Duration as StdDuration, Instant};

use chrono::Duration;
use countersign_broker_http::limits::Quotas;
use countersign_e2e::gcp_fake::*;
use countersign_e2e::http::*;

use crate::stores_common::*;
use serde_json::json;

type R = anyhow::Result<()>;

/// Not served: encrypted with another Cloud KMS key.
const WRONG_KEY: &str = "WRONG_KEY";
/// Not served: a tier nobody knows.
const ODD_TIER: &str = "ODD_TIER";
/// Not served: its latest version is disabled (an older one is enabled).
const LATEST_OFF: &str = "LATEST_OFF";
/// Deleted: absent.
const GONE: &str = "GONE_SECRET";
/// Never made.
const NEVER: &str = "NEVER_MADE";

/// How long a change may take to show once the broker's clock says a reload is due (the
/// server's loop looks every second).
const RELOAD: StdDuration = StdDuration::from_secs(5);

/// One test's world: the fake, what was made in it, and the broker over it.
struct World {
    gcp: GcpFake,
    secrets: Vec<StoredSecret>,
    tb: TestBroker,
}

impl World {
    /// The fake holding the suite's default secrets and four refused ones, and the broker over
    /// it with each store call bounded by `timeout`.
    async fn start(timeout: StdDuration) -> anyhow::Result<World> {
        let mut secrets = default_secrets();
        let mut wrong_key = StoredSecret::new(WRONG_KEY, ADA, Some("automatic"));
        wrong_key.key = Some(OTHER_KEY.into());
        let mut gone = StoredSecret::new(GONE, ADA, Some("automatic"));
        gone.deleted = true;
        secrets.extend([
            wrong_key,
            StoredSecret::new(ODD_TIER, ADA, Some("weird")),
            StoredSecret::new(LATEST_OFF, ADA, Some("automatic")),
            gone,
        ]);
        let gcp = GcpFake::start(&secrets).await?;
        let n = gcp.add_version(LATEST_OFF, "newer");
        gcp.set_state(LATEST_OFF, n, VersionState::Disabled);
        let tb = TestBroker::builder()
            .store(gcp.store(timeout).await?)
            .quotas(Quotas {
                rereads_per_source: 1000,
                rereads_overall: 1000,
                ..Quotas::default()
            })
            .start()
            .await?;
        Ok(World { gcp, secrets, tb })
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
    let w = World::start(StdDuration::from_secs(5)).await?;
    let tb = &w.tb;
    let settings = tb.open("GET", "/v1/settings", None).await?.expect(200);
    assert_eq!(
        settings.body,
        json!({
            "store": "cloud-b-secret-store",
            "secrets_prefix": "projects/123/secrets/agents-",
            "cloud_b_key_name": "projects/kms-prj/locations/global/keyRings/countersign/cryptoKeys/agents",
            "cloud_b_project": "123",
        })
    );

    // Served, each as its tier says; values come from Secret Manager.
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
    for name in [
        NO_OWNER, NO_VALUE, LATEST_OFF, WRONG_KEY, ODD_TIER, GONE, NEVER,
    ] {
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
        (LATEST_OFF, "no-current-value"),
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
    // Judging read metadata only: the one value read per release, none for listing or rereads.
    let accesses = w
        .gcp
        .fake
        .calls()
        .into_iter()
        .filter(|c| c.contains(":access"))
        .count();
    assert_eq!(accesses, 4, "{:?}", w.gcp.fake.calls());
    Ok(())
}

#[tokio::test]
async fn a_reload_five_minutes_on_picks_up_new_owners_and_tiers() -> R {
    let w = World::start(StdDuration::from_secs(5)).await?;
    let (tb, gcp) = (&w.tb, &w.gcp);
    let (_m, s) = tb.session_of(ADA).await?;
    let approved = approved_grant(tb, &s, ADA_SECRET, ADA).await?;
    let auto_2 = auto_grant(&s, AUTO_2).await?;

    // In the store: AUTO becomes owner tier, ADA_SECRET Bob's, AUTO_2 loses its owner.
    gcp.annotate(AUTO, "tier", Some("owner"));
    gcp.annotate(ADA_SECRET, "owner", Some(BOB));
    gcp.annotate(AUTO_2, "owner", None);

    // Four minutes on the broker's clock: a pass of the policy loop does not reload yet.
    let loaded = tb.state.broker.policy_state();
    gcp.fake.clear_calls();
    tb.advance(Duration::minutes(4));
    tb.state.loops.policy.turn().await;
    assert_eq!(tb.state.broker.policy_state().loaded_at, loaded.loaded_at);
    assert!(
        gcp.fake.calls().iter().all(|c| !c.starts_with("list ")),
        "{:?}",
        gcp.fake.calls()
    );
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
    let w = World::start(StdDuration::from_secs(5)).await?;
    let (tb, gcp) = (&w.tb, &w.gcp);
    let (m, s) = tb.session_of(ADA).await?;
    let auto_2 = auto_grant(&s, AUTO_2).await?;

    // Two secrets change in the store; only the one reread changes in the broker, at once.
    gcp.annotate(AUTO, "tier", Some("owner"));
    gcp.annotate(UNTIERED, "tier", Some("automatic"));
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
    gcp.annotate(AUTO_2, "owner", None);
    assert_eq!(value_of(&s, &auto_2, AUTO_2).await?, w.value(AUTO_2));
    assert_eq!(
        tb.reread(AUTO_2).await?.expect(200).body,
        json!({ "name": AUTO_2, "served": false, "reason": "owner-tag-missing" })
    );
    s.values(&auto_2).await?.refused(404, "SECRET_NOT_IN_STORE");
    s.request(&[AUTO_2]).await?.refused(400, "UNKNOWN_SECRET");
    // Served again: the same grant releases again.
    gcp.annotate(AUTO_2, "owner", Some(ADA));
    tb.reread(AUTO_2).await?.expect(200);
    assert_eq!(value_of(&s, &auto_2, AUTO_2).await?, w.value(AUTO_2));

    // A new secret is unknown until it is reread (or the next reload).
    let brand_new = StoredSecret::new("BRAND_NEW", ADA, Some("automatic"));
    gcp.create(&brand_new);
    s.request(&["BRAND_NEW"])
        .await?
        .refused(400, "UNKNOWN_SECRET");
    assert_eq!(
        tb.reread("BRAND_NEW").await?.expect(200).body,
        json!({ "name": "BRAND_NEW", "served": true })
    );
    let g = auto_grant(&s, "BRAND_NEW").await?;
    assert_eq!(Some(value_of(&s, &g, "BRAND_NEW").await?), brand_new.value);

    // Deleted: absent.
    gcp.delete(ADA_SECRET_2);
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
    let w = World::start(StdDuration::from_secs(5)).await?;
    let (tb, gcp) = (&w.tb, &w.gcp);
    let (_m, s) = tb.session_of(ADA).await?;
    let auto = auto_grant(&s, AUTO).await?;
    let approved = approved_grant(tb, &s, ADA_SECRET, ADA).await?;
    assert_eq!(value_of(&s, &auto, AUTO).await?, w.value(AUTO));
    assert_eq!(
        value_of(&s, &approved, ADA_SECRET).await?,
        w.value(ADA_SECRET)
    );
    let loaded = tb.state.broker.policy_state().loaded_at;

    // A new version is the latest: the same grants release it at once.
    let mut latest = 0;
    for i in 1..=2 {
        latest = gcp.add_version(AUTO, &format!("auto-rotated-{i}"));
        assert_eq!(
            value_of(&s, &auto, AUTO).await?,
            format!("auto-rotated-{i}")
        );
    }
    gcp.add_version(ADA_SECRET, "ada-rotated");
    assert_eq!(value_of(&s, &approved, ADA_SECRET).await?, "ada-rotated");

    // The latest version disabled: no current value to release (the older versions are not
    // fallen back on); enabled again, it is released again.
    gcp.set_state(AUTO, latest, VersionState::Disabled);
    s.values(&auto).await?.refused(404, "SECRET_NOT_IN_STORE");
    gcp.set_state(AUTO, latest, VersionState::Enabled);
    assert_eq!(value_of(&s, &auto, AUTO).await?, "auto-rotated-2");

    // No reload or reread was needed for any of it.
    assert_eq!(tb.state.broker.policy_state().loaded_at, loaded);
    Ok(())
}

#[tokio::test]
async fn the_store_going_away_and_coming_back() -> R {
    let budget = StdDuration::from_secs(1);
    let mut w = World::start(budget).await?;
    let (_m, s) = w.tb.session_of(ADA).await?;
    let auto = auto_grant(&s, AUTO).await?;
    let approved = approved_grant(&w.tb, &s, ADA_SECRET, ADA).await?;
    assert_eq!(value_of(&s, &auto, AUTO).await?, w.value(AUTO));

    // The service goes away.
    w.gcp.stop().await?;
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

    // Rotated meanwhile, the service comes back on the same address with its data: values are
    // released again, fresh, and the reload, due since it failed, runs without the clock moving
    // again.
    w.gcp.add_version(AUTO, "auto-after-outage");
    w.gcp.restart().await?;
    assert_eq!(value_of(&s, &auto, AUTO).await?, "auto-after-outage");
    assert_eq!(
        value_of(&s, &approved, ADA_SECRET).await?,
        w.value(ADA_SECRET)
    );
    eventually("the reload after the outage", RELOAD, || {
        let before = &before;
        async move {
            let now = tb.state.broker.policy_state();
            Ok((now.loaded_at > before.loaded_at).then_some(()))
        }
    })
    .await?;
    assert_eq!(
        tb.reread(AUTO).await?.expect(200).body,
        json!({ "name": AUTO, "served": true })
    );
    Ok(())
}

#[tokio::test]
async fn a_store_that_hangs_never_hangs_a_request() -> R {
    let budget = StdDuration::from_secs(1);
    let w = World::start(budget).await?;
    let (tb, gcp) = (&w.tb, &w.gcp);
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
    assert_eq!(decided(&s, AUTO_2).await?, granted());
    assert_eq!(gcp.fake.calls(), Vec::<String>::new());

    gcp.fake.stall(false);
    assert_eq!(value_of(&s, &auto, AUTO).await?, w.value(AUTO));
    Ok(())
}
