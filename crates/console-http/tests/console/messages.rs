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
