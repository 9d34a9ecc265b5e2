//! Messages, broadcasts and conversations with live sessions (issue 14) over real HTTP and real
//! session links (the workspace's link client), on SQLite and PostgreSQL: the delivery
//! machinery (pending → sent on `delivered`, failed when not live, mode not advertised or not
//! acknowledged in 30 s of the console's clock), targeted messages, replies and their
//! `follow_up` rules, threads, the accept rules one condition at a time, broadcasts and their
//! idempotency keys, the relay, inbox threads, read marks and per-agent state, the broker's
//! webhook, and search.

use std::sync::Arc;
use std::time::Duration;

use crate::on_both_databases;
use countersign_console_core::ManualClock;
use countersign_link_client::{Advert, Event, Link, Mode, Options};
use serde_json::{Value, json};

use crate::common::*;

/// A session linked to `console` advertising `modes` (and `roles`), acknowledging each
/// delivery itself when `auto_ack`.
async fn session(
    console: &TestConsole,
    id: &str,
    roles: &[&str],
    modes: &[Mode],
    auto_ack: bool,
) -> anyhow::Result<Link> {
    let mut o = Options::new(
        &console.url,
        SHARED_TOKEN,
        id,
        Advert::new(&format!("session {id}"))
            .roles(roles)
            .capabilities(&["relay"])
            .modes(modes),
    );
    o.auto_ack = auto_ack;
    let link = Link::connect(o).await?;
    // Live once the console lists it (its hello is recorded before the list reads it).
    let agent = Who::agent(console, SHARED_TOKEN);
    let id = id.to_owned();
    eventually(10, || {
        let agent = agent.clone();
        let id = id.clone();
        async move {
            let l = agent.get("/api/v1/sessions").await?;
            Ok(l.json
                .as_array()
                .is_some_and(|a| a.iter().any(|s| s["session_id"] == id.as_str()))
                .then_some(()))
        }
    })
    .await?;
    Ok(link)
}

/// The next delivery on a link (other events skipped), within 10 s.
async fn delivery(link: &mut Link) -> anyhow::Result<countersign_link_client::Delivery> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), link.next()).await? {
            Some(Event::Delivery(d)) => return Ok(d),
            Some(Event::Closed { code, reason }) => anyhow::bail!("closed {code:?} {reason}"),
            Some(_) => continue,
            None => anyhow::bail!("the link ended"),
        }
    }
}

/// Nothing arrives on the link for a moment.
async fn quiet(link: &mut Link) -> anyhow::Result<()> {
    match tokio::time::timeout(Duration::from_millis(300), link.next()).await {
        Err(_) => Ok(()),
        Ok(e) => anyhow::bail!("expected nothing, got {e:?}"),
    }
}

/// A message's attempt `n` (from 1) once its state is `state`.
async fn attempt_becomes(
    who: &Who,
    thread_path: &str,
    n: usize,
    state: &str,
) -> anyhow::Result<Value> {
    eventually(10, || async {
        let t = who.get(thread_path).await?;
        let a = t.json["root"]["deliveries"][n - 1].clone();
        Ok((a["state"] == state).then_some(a))
    })
    .await
}

fn start() -> chrono::DateTime<chrono::Utc> {
    chrono::Utc::now()
}

/// The delivery machinery (protocol §4.2): an attempt is `pending` until the session's
/// `delivered` makes it `sent`; it fails at once when the session is not live or does not
/// advertise the mode, and after 30 s of the console's clock with no `delivered`; a late
/// `delivered` changes nothing; a retry is a new attempt; a link that closes fails what it
/// held; each new attempt and state change appends `delivery.attempt`.
async fn delivery_attempts(db: Option<String>) -> anyhow::Result<()> {
    let clock = Arc::new(ManualClock::new(start()));
    let console = console_with_clock(db, clock.clone()).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let mut s1 = session(&console, "s1", &[], &[Mode::Send, Mode::Steer], true).await?;

    // Sent on the session's acknowledgement.
    let r = ada
        .post(
            "/api/v1/sessions/s1/messages",
            json!({"body": "please look at the flaky test", "delivery": "steer"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(r.json["thread_id"], id.as_str());
    assert_eq!(r.json["target"], json!({"session": "s1"}));
    assert_eq!(r.json["delivery"], "steer");
    assert_eq!(r.json["author"], json!({"kind": "user", "login": ADA}));
    assert_eq!(r.json["deliveries"][0]["attempt"], 1);
    assert_eq!(r.json["deliveries"][0]["state"], "pending");
    assert_eq!(
        r.location().as_deref(),
        Some(format!("/api/v1/messages/{id}/thread").as_str())
    );
    let d = delivery(&mut s1).await?;
    assert_eq!(
        (
            d.delivery.kind.as_str(),
            d.delivery.id.as_str(),
            d.delivery.attempt
        ),
        ("message", id.as_str(), 1)
    );
    assert_eq!(d.body, "please look at the flaky test");
    assert_eq!(d.mode, Mode::Steer);
    assert_eq!(d.thread_id, id);
    assert_eq!(d.issue, None);
    assert_eq!(d.author, json!({"kind": "user", "login": ADA}));
    let thread = format!("/api/v1/messages/{id}/thread");
    let a = attempt_becomes(&ada, &thread, 1, "sent").await?;
    assert!(a["sent_at"].is_string(), "{a}");
    assert_eq!(a["requested_by"], json!({"kind": "user", "login": ADA}));

    // A mode the session does not advertise: failed at once, nothing sent.
    let r = ada
        .post(
            "/api/v1/sessions/s1/messages",
            json!({"body": "fyi", "delivery": "aside"}),
        )
        .await?;
    assert_eq!(r.json["deliveries"][0]["state"], "failed", "{}", r.text);
    assert_eq!(r.json["deliveries"][0]["error"], "mode_not_advertised");
    quiet(&mut s1).await?;
    // A session with no live link: failed at once.
    let r = ada
        .post("/api/v1/sessions/s9/messages", json!({"body": "anyone?"}))
        .await?;
    assert_eq!(r.json["deliveries"][0]["state"], "failed", "{}", r.text);
    assert_eq!(r.json["deliveries"][0]["error"], "not_live");

    // No `delivered` within 30 s of the console's clock: failed.
    let mut s2 = session(&console, "s2", &[], &[Mode::Send], false).await?;
    let r = ada
        .post(
            "/api/v1/sessions/s2/messages",
            json!({"body": "are you there"}),
        )
        .await?;
    let late = r.json["id"].as_str().unwrap_or_default().to_owned();
    let d = delivery(&mut s2).await?;
    clock.advance(chrono::Duration::seconds(29));
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let thread2 = format!("/api/v1/messages/{late}/thread");
    assert_eq!(
        ada.get(&thread2).await?.json["root"]["deliveries"][0]["state"],
        "pending"
    );
    clock.advance(chrono::Duration::seconds(2));
    let a = attempt_becomes(&ada, &thread2, 1, "failed").await?;
    assert_eq!(a["error"], "not_acknowledged");
    // A late acknowledgement changes nothing.
    s2.handle().ack(&d.delivery)?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        ada.get(&thread2).await?.json["root"]["deliveries"][0]["state"],
        "failed"
    );

    // A retry is a new attempt (by a bearer here), acknowledged in time.
    let r = agent
        .post(
            &format!("/api/v1/messages/{late}/deliveries"),
            json!({"actor": "s7"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json[0]["attempt"], 2);
    assert_eq!(r.json[0]["state"], "pending");
    assert_eq!(r.json[0]["requested_by"]["session"], "s7");
    let d = delivery(&mut s2).await?;
    assert_eq!(d.delivery.attempt, 2);
    s2.handle().ack(&d.delivery)?;
    attempt_becomes(&ada, &thread2, 2, "sent").await?;

    // A link that closes fails what it still held.
    let r = ada
        .post("/api/v1/sessions/s2/messages", json!({"body": "one more"}))
        .await?;
    let held = r.json["id"].as_str().unwrap_or_default().to_owned();
    delivery(&mut s2).await?;
    s2.handle().close();
    let a = attempt_becomes(
        &ada,
        &format!("/api/v1/messages/{held}/thread"),
        1,
        "failed",
    )
    .await?;
    assert_eq!(a["error"], "not_live");

    // Each new attempt and state change appended `delivery.attempt`.
    let events = events_since(&agent, 0, 200, 3).await?;
    let attempts: Vec<(String, i64, String)> = events
        .iter()
        .filter(|e| e.1 == "delivery.attempt" && e.2["data"]["id"] == late.as_str())
        .map(|e| {
            (
                e.2["data"]["session_id"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
                e.2["data"]["attempt"].as_i64().unwrap_or_default(),
                e.2["data"]["state"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        attempts,
        [
            ("s2".into(), 1, "pending".into()),
            ("s2".into(), 1, "failed".into()),
            ("s2".into(), 2, "pending".into()),
            ("s2".into(), 2, "sent".into()),
        ]
    );
    let first = events
        .iter()
        .find(|e| e.1 == "delivery.attempt" && e.2["data"]["id"] == id.as_str())
        .map(|e| e.2["data"].clone())
        .unwrap_or_default();
    assert_eq!(
        first,
        json!({"kind": "message", "id": id, "attempt": 1, "session_id": "s1", "state": "pending",
               "requested_by": {"kind": "user", "login": ADA}})
    );
    drop(s1);
    console.stop().await;
    Ok(())
}
on_both_databases!(
    delivery_attempts,
    delivery_attempts_sqlite,
    delivery_attempts_postgres
);

/// Presence is shared by consoles on one PostgreSQL: a session linked to one is live for the
/// other (its list, `route_status`, claims, deliveries requested there reach the link through
/// the first); a newer link on the other closes the older with 4409; the sessions of a replica
/// that stopped heartbeating expire (`session.gone`), and deliveries to them fail.
#[tokio::test]
async fn presence_across_replicas() -> anyhow::Result<()> {
    let Some(db) = fresh_postgres().await? else {
        return Ok(());
    };
    let one = console_on(Some(db.clone())).await?;
    let two = console_on(Some(db.clone())).await?;
    let ada_two = Who::person(&two, ADA).await?;
    let agent_two = Who::agent(&two, SHARED_TOKEN);
    let mut s1 = session(&one, "s1", &["reviewer"], &[Mode::Send, Mode::Steer], true).await?;

    let l = agent_two.get("/api/v1/sessions").await?;
    assert_eq!(l.json[0]["session_id"], "s1", "{}", l.text);
    assert_eq!(l.json[0]["roles"], json!(["reviewer"]));
    assert_eq!(l.json[0]["modes"], json!(["send", "steer"]));
    ada_two
        .post(
            "/api/v1/projects",
            json!({"key": "REP", "name": "Replicas"}),
        )
        .await?;
    ada_two
        .post(
            "/api/v1/issues",
            json!({"project": "REP", "title": "two replicas", "route": "reviewer"}),
        )
        .await?;
    assert_eq!(
        agent_two.get("/api/v1/issues/REP-1").await?.json["route_status"],
        "live"
    );
    agent_two
        .post("/api/v1/issues/REP-1/claim", json!({"actor": "s1"}))
        .await?;
    refused(
        &agent_two
            .post("/api/v1/issues/REP-1/claim", json!({"actor": "s2"}))
            .await?,
        409,
        "ISSUE_CLAIMED",
    );

    // A delivery requested on two reaches the link on one, and is acknowledged.
    let r = ada_two
        .post(
            "/api/v1/sessions/s1/messages",
            json!({"body": "from the other replica", "delivery": "steer"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();
    let d = delivery(&mut s1).await?;
    assert_eq!(d.body, "from the other replica");
    attempt_becomes(
        &ada_two,
        &format!("/api/v1/messages/{id}/thread"),
        1,
        "sent",
    )
    .await?;
    // A role message on an issue, from two: one attempt to the holder on one.
    let r = ada_two
        .post(
            "/api/v1/issues/REP-1/messages",
            json!({"body": "reviewers?", "target": {"role": "reviewer"}}),
        )
        .await?;
    assert_eq!(r.json["deliveries"][0]["session_id"], "s1", "{}", r.text);
    assert_eq!(delivery(&mut s1).await?.issue.as_deref(), Some("REP-1"));

    // A newer link on two closes the older on one with 4409; the session stays live.
    let mut again = session(&two, "s1", &["reviewer"], &[Mode::Send], true).await?;
    let code = loop {
        match tokio::time::timeout(Duration::from_secs(10), s1.next()).await? {
            Some(Event::Closed { code, .. }) => break code,
            Some(_) => continue,
            None => anyhow::bail!("the older link ended without a close"),
        }
    };
    assert_eq!(code, Some(4409));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let l = Who::agent(&one, SHARED_TOKEN)
        .get("/api/v1/sessions")
        .await?;
    assert_eq!(l.json[0]["modes"], json!(["send"]), "{}", l.text);
    let r = Who::person(&one, ADA)
        .await?
        .post(
            "/api/v1/sessions/s1/messages",
            json!({"body": "now on two"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(delivery(&mut again).await?.body, "now on two");

    // A replica that stopped heartbeating: its session is not live, and expires.
    {
        use sqlx::Connection;
        let mut c = sqlx::PgConnection::connect(&db).await?;
        let old = chrono::Utc::now().timestamp_millis() - 120_000;
        sqlx::query(
            "INSERT INTO console_live_sessions (session_id, replica, link, title, roles, \
             capabilities, modes, owner, service, live_since, last_activity_at, heartbeat_at) \
             VALUES ('ghost', 'dead-replica', 1, 'ghost', '[\"reviewer\"]', '[]', '[\"send\"]', \
             NULL, NULL, $1, $1, $1)",
        )
        .bind(old)
        .execute(&mut c)
        .await?;
        sqlx::query(
            "INSERT INTO console_live_roles (role, session_id) VALUES ('reviewer', 'ghost')",
        )
        .execute(&mut c)
        .await?;
    }
    let listed = agent_two.get("/api/v1/sessions").await?;
    assert!(
        !listed.text.contains("ghost"),
        "a stale session is listed: {}",
        listed.text
    );
    let r = ada_two
        .post("/api/v1/sessions/ghost/messages", json!({"body": "hello?"}))
        .await?;
    assert_eq!(r.json["deliveries"][0]["error"], "not_live", "{}", r.text);
    let gone = eventually(10, || async {
        let events = events_since(&agent_two, 0, 500, 2).await?;
        Ok(events
            .into_iter()
            .find(|e| e.1 == "session.gone" && e.2["data"]["session_id"] == "ghost"))
    })
    .await?;
    assert_eq!(
        gone.2["actor"],
        json!({"kind": "system", "name": "console"})
    );

    // The link closing on two: gone for both.
    again.handle().close();
    eventually(10, || async {
        let l = Who::agent(&one, SHARED_TOKEN)
            .get("/api/v1/sessions")
            .await?;
        Ok(l.json.as_array().is_some_and(Vec::is_empty).then_some(()))
    })
    .await?;
    one.stop().await;
    two.stop().await;
    Ok(())
}
