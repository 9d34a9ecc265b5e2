//! The secret-store contract, written once and run against every store: AWS Secrets Manager
//! (moto), Google Secret Manager (its REST fake) and the local TOML file. Each test is generic
//! over a [`Service`] (`stores_common`): the store as its operator changes it, the broker's real
//! store over it (the core's `SecretStore`), and the real server over HTTP. The broker sees the
//! store through its listing (at start, then every five minutes on its clock, which the tests
//! move), its reread route, and its value reads at every release.
//!
//! [`contract_suite!`] makes the tests of one store (in `stores_aws`, `stores_gcp`,
//! `stores_local`, beside that store's own tests).

use std::collections::BTreeSet;
use std::time::{Duration as StdDuration, Instant};

use chrono::Duration;
use countersign_broker_core::ids::SecretName;
use countersign_broker_core::secrets::Inspection;
use countersign_e2e::http::*;
use serde_json::json;

use crate::stores_common::*;

type R = anyhow::Result<()>;

/// How long a change may take to show once the broker's clock says a reload is due (the
/// server's loop looks every second).
pub const RELOAD: StdDuration = StdDuration::from_secs(5);

/// The contract's tests for the store of `$service` (a [`Service`]), as module `contract`.
macro_rules! contract_suite {
    ($service:ty) => {
        /// The secret-store contract (`stores_contract`), run against this store.
        mod contract {
            use super::*;
            use crate::stores_contract as c;

            #[tokio::test]
            async fn the_store_lists_inspects_and_reads_by_the_rules() -> anyhow::Result<()> {
                c::the_store_lists_inspects_and_reads_by_the_rules::<$service>().await
            }

            #[tokio::test]
            async fn serves_and_refuses_secrets_with_every_reason() -> anyhow::Result<()> {
                c::serves_and_refuses_secrets_with_every_reason::<$service>().await
            }

            #[tokio::test]
            async fn a_reload_five_minutes_on_picks_up_new_owners_and_tiers() -> anyhow::Result<()>
            {
                c::a_reload_five_minutes_on_picks_up_new_owners_and_tiers::<$service>().await
            }

            #[tokio::test]
            async fn a_reread_applies_one_secrets_change_at_once() -> anyhow::Result<()> {
                c::a_reread_applies_one_secrets_change_at_once::<$service>().await
            }

            #[tokio::test]
            async fn values_are_read_fresh_after_a_rotation() -> anyhow::Result<()> {
                c::values_are_read_fresh_after_a_rotation::<$service>().await
            }

            #[tokio::test]
            async fn the_store_going_away_and_coming_back() -> anyhow::Result<()> {
                c::the_store_going_away_and_coming_back::<$service>().await
            }
        }
    };
}
pub(crate) use contract_suite;

/// The secrets the contract's store serves.
const SERVED: [&str; 8] = [
    AUTO,
    AUTO_2,
    ADA_SECRET,
    ADA_SECRET_2,
    BOB_SECRET,
    SHARED,
    LOCKED,
    UNTIERED,
];

/// The secrets the contract's store refuses (beside a service's own), with the reason.
const REFUSED: [(&str, &str); 6] = [
    (NEVER, "absent"),
    (GONE, "absent"),
    (NO_OWNER, "owner-tag-missing"),
    (NO_VALUE, "no-current-value"),
    (WRONG_KEY, "wrong-encryption-key"),
    (ODD_TIER, "tier-unknown"),
];

fn name(s: &str) -> anyhow::Result<SecretName> {
    SecretName::parse(s).map_err(|e| anyhow::anyhow!("{s}: {e}"))
}

/// The store alone, through the core's `SecretStore`: its listing serves each secret with its
/// owner and tier and refuses the rest with their reasons (an absent one is not listed), an
/// inspection agrees with the listing, and a served secret's value is the one it was made with.
pub async fn the_store_lists_inspects_and_reads_by_the_rules<S: Service>() -> R {
    let secrets = contract_secrets();
    let Some(svc) = S::start(&secrets, StdDuration::from_secs(5)).await? else {
        return Ok(());
    };
    let store = svc.store();
    let refused: Vec<(&str, &str)> = REFUSED.into_iter().chain(svc.own_refused()).collect();
    let listing = store.list().await?;
    let served: BTreeSet<&str> = listing.served.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(served, SERVED.into_iter().collect(), "{listing:?}");
    let listed_refused: BTreeSet<(&str, &str)> = listing
        .refused
        .iter()
        .map(|(n, r)| (n.as_str(), r.as_str()))
        .collect();
    let want_refused = refused.iter().filter(|(_, r)| *r != "absent").copied();
    assert_eq!(listed_refused, want_refused.collect(), "{listing:?}");
    for e in &listing.served {
        let made = secrets.iter().find(|s| s.name == e.name.as_str());
        let made = made.ok_or_else(|| anyhow::anyhow!("{} was not made", e.name))?;
        assert_eq!(Some(e.owner.as_str()), made.owner.as_deref(), "{e:?}");
        let tier = made.tier.as_deref().unwrap_or("owner");
        assert_eq!(e.tier.as_str(), tier, "{e:?}");
        assert_eq!(store.inspect(&e.name).await?, Inspection::Served(e.clone()));
        let value = store.read_value(e).await?;
        assert_eq!(Some(value.expose()), made.value.as_deref(), "{}", e.name);
    }
    for (n, reason) in refused {
        match store.inspect(&name(n)?).await? {
            Inspection::Refused(r) => assert_eq!(r.as_str(), reason, "{n}"),
            other => panic!("{n}: {other:?}"),
        }
    }
    Ok(())
}

/// Settings name the store; every secret is served as its tier says, with the value the
/// store holds, or refused, alone or beside a served one; a reread says why, for each reason,
/// and changes nothing that was served; the broker reads a value once per release and never to
/// list or reread.
pub async fn serves_and_refuses_secrets_with_every_reason<S: Service>() -> R {
    let Some(w) = World::<S>::start(StdDuration::from_secs(5)).await? else {
        return Ok(());
    };
    let tb = &w.tb;
    let settings = tb.open("GET", "/v1/settings", None).await?.expect(200);
    assert_eq!(settings.body, w.svc.settings());

    // Served, each as its tier says; values come from the store.
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

    refuses_with_every_reason(&w, &s).await?;

    // The rereads changed nothing that was served.
    assert_eq!(decided(&s, AUTO).await?, granted());
    assert_eq!(
        value_of(&s, &approved, ADA_SECRET).await?,
        w.value(ADA_SECRET)
    );
    // Judging reads metadata only: one value read per secret released (two, one, one), none
    // for the listing or the rereads; the service saw the same.
    assert_eq!(w.calls.value_reads(), 4);
    if let Some(seen) = w.svc.service_calls() {
        assert_eq!(seen.value_reads, 4, "{seen:?}");
    }
    Ok(())
}

/// The refused secrets: no agent secret has the name, alone or beside a served one; a reread
/// says why; the served ones reread as served.
async fn refuses_with_every_reason<S: Service>(w: &World<S>, s: &Session) -> R {
    let tb = &w.tb;
    let refused: Vec<(&str, &str)> = REFUSED.into_iter().chain(w.svc.own_refused()).collect();
    for &(name, _) in &refused {
        s.request(&[name]).await?.refused(400, "UNKNOWN_SECRET");
        s.request(&[AUTO, name])
            .await?
            .refused(400, "UNKNOWN_SECRET");
    }
    for (name, reason) in refused {
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
    Ok(())
}

/// Four minutes on the broker's clock change nothing (nothing is listed); at five the server
/// reloads on its own and applies a new tier, a new owner and a lost owner.
pub async fn a_reload_five_minutes_on_picks_up_new_owners_and_tiers<S: Service>() -> R {
    let Some(w) = World::<S>::start(StdDuration::from_secs(5)).await? else {
        return Ok(());
    };
    let (tb, svc) = (&w.tb, &w.svc);
    let (_m, s) = tb.session_of(ADA).await?;
    let approved = approved_grant(tb, &s, ADA_SECRET, ADA).await?;
    let auto_2 = auto_grant(&s, AUTO_2).await?;

    // In the store: AUTO becomes owner tier, ADA_SECRET Bob's, AUTO_2 loses its owner.
    svc.tag(AUTO, "tier", Some("owner")).await?;
    svc.tag(ADA_SECRET, "owner", Some(BOB)).await?;
    svc.tag(AUTO_2, "owner", None).await?;

    // Four minutes on the broker's clock: a pass of the policy loop does not reload yet, nor
    // list the store.
    let loaded = tb.state.broker.policy_state();
    let (lists, seen) = (w.calls.lists(), svc.service_calls());
    tb.advance(Duration::minutes(4));
    tb.state.loops.policy.turn().await;
    assert_eq!(tb.state.broker.policy_state().loaded_at, loaded.loaded_at);
    assert_eq!(w.calls.lists(), lists);
    assert_eq!(svc.service_calls().map(|c| c.lists), seen.map(|c| c.lists));
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

/// A reread applies one secret's change at once and only that one: a new tier, a lost and
/// regained owner, a new secret, a deletion.
pub async fn a_reread_applies_one_secrets_change_at_once<S: Service>() -> R {
    let Some(w) = World::<S>::start(StdDuration::from_secs(5)).await? else {
        return Ok(());
    };
    let (tb, svc) = (&w.tb, &w.svc);
    let (m, s) = tb.session_of(ADA).await?;
    let auto_2 = auto_grant(&s, AUTO_2).await?;

    // Two secrets change in the store; only the one reread changes in the broker, at once.
    svc.tag(AUTO, "tier", Some("owner")).await?;
    svc.tag(UNTIERED, "tier", Some("automatic")).await?;
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
    svc.tag(AUTO_2, "owner", None).await?;
    assert_eq!(value_of(&s, &auto_2, AUTO_2).await?, w.value(AUTO_2));
    assert_eq!(
        tb.reread(AUTO_2).await?.expect(200).body,
        json!({ "name": AUTO_2, "served": false, "reason": "owner-tag-missing" })
    );
    s.values(&auto_2).await?.refused(404, "SECRET_NOT_IN_STORE");
    s.request(&[AUTO_2]).await?.refused(400, "UNKNOWN_SECRET");
    // Served again: the same grant releases again.
    svc.tag(AUTO_2, "owner", Some(ADA)).await?;
    tb.reread(AUTO_2).await?.expect(200);
    assert_eq!(value_of(&s, &auto_2, AUTO_2).await?, w.value(AUTO_2));

    // A new secret is unknown until it is reread (or the next reload).
    let brand_new = StoredSecret::new("BRAND_NEW", ADA, Some("automatic"));
    svc.create(&brand_new).await?;
    s.request(&["BRAND_NEW"])
        .await?
        .refused(400, "UNKNOWN_SECRET");
    assert_eq!(
        tb.reread("BRAND_NEW").await?.expect(200).body,
        json!({ "name": "BRAND_NEW", "served": true })
    );
    let g = auto_grant(&s, "BRAND_NEW").await?;
    assert_eq!(Some(value_of(&s, &g, "BRAND_NEW").await?), brand_new.value);

    // Deleted (or scheduled for deletion): absent.
    svc.delete(ADA_SECRET_2).await?;
    assert_eq!(
        tb.reread(ADA_SECRET_2).await?.expect(200).body,
        json!({ "name": ADA_SECRET_2, "served": false, "reason": "absent" })
    );
    s.request(&[ADA_SECRET_2])
        .await?
        .refused(400, "UNKNOWN_SECRET");
    Ok(())
}

/// A rotation (a new current value) is released at once by the same grants, without a reload
/// or a reread.
pub async fn values_are_read_fresh_after_a_rotation<S: Service>() -> R {
    let Some(w) = World::<S>::start(StdDuration::from_secs(5)).await? else {
        return Ok(());
    };
    let (tb, svc) = (&w.tb, &w.svc);
    let (_m, s) = tb.session_of(ADA).await?;
    let auto = auto_grant(&s, AUTO).await?;
    let approved = approved_grant(tb, &s, ADA_SECRET, ADA).await?;
    assert_eq!(value_of(&s, &auto, AUTO).await?, w.value(AUTO));
    assert_eq!(
        value_of(&s, &approved, ADA_SECRET).await?,
        w.value(ADA_SECRET)
    );
    let loaded = tb.state.broker.policy_state().loaded_at;

    for i in 1..=2 {
        svc.rotate(AUTO, &format!("auto-rotated-{i}")).await?;
        assert_eq!(
            value_of(&s, &auto, AUTO).await?,
            format!("auto-rotated-{i}")
        );
    }
    svc.rotate(ADA_SECRET, "ada-rotated").await?;
    assert_eq!(value_of(&s, &approved, ADA_SECRET).await?, "ada-rotated");

    // No reload or reread was needed for any of it.
    assert_eq!(tb.state.broker.policy_state().loaded_at, loaded);
    Ok(())
}

/// The store goes away: rereads and values fail within the store's time budget, requests are
/// still decided by the last good policy, also once the five-minute reload has failed. It
/// comes back, rotated meanwhile: the fresh values are released again and the policy reloaded.
pub async fn the_store_going_away_and_coming_back<S: Service>() -> R {
    let budget = StdDuration::from_secs(1);
    let Some(mut w) = World::<S>::start(budget).await? else {
        return Ok(());
    };
    let (_m, s) = w.tb.session_of(ADA).await?;
    let auto = auto_grant(&s, AUTO).await?;
    let approved = approved_grant(&w.tb, &s, ADA_SECRET, ADA).await?;
    assert_eq!(value_of(&s, &auto, AUTO).await?, w.value(AUTO));

    w.svc.stop().await?;
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

    let comeback = w.svc.come_back(AUTO, "auto-after-outage").await?;
    let tb = &w.tb;
    match comeback {
        Comeback::SameNames => {
            // Released again at once, fresh; the reload, due since it failed, runs without the
            // clock moving again.
            assert_eq!(value_of(&s, &auto, AUTO).await?, "auto-after-outage");
            eventually("the reload after the outage", RELOAD, || {
                let before = &before;
                async move {
                    let now = tb.state.broker.policy_state();
                    Ok((now.loaded_at > before.loaded_at).then_some(()))
                }
            })
            .await?;
        }
        Comeback::NewNames => released_after_a_reload(tb, &s, &auto, &approved).await?,
    }
    assert_eq!(value_of(&s, &auto, AUTO).await?, "auto-after-outage");
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

/// Waits until both grants release again, once a reload has seen the store's new resource
/// names. The reload, due since it failed, may have run while the data was half made (one
/// retrying the failed reload), so the clock moves on at each look until the next reload has
/// seen all of it.
async fn released_after_a_reload(tb: &TestBroker, s: &Session, auto: &str, approved: &str) -> R {
    let mut looks = 0u32;
    eventually("values released again", RELOAD, || {
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
            Ok((r.status == 200 && other.status == 200).then_some(()))
        }
    })
    .await
}
