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
use countersign_console_core::{Clock, ManualClock};
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

fn id_of(r: &Resp) -> String {
    r.json["id"].as_str().unwrap_or_default().to_owned()
}

/// Messages on an issue, to a session or to a role (one attempt per live session holding it);
/// reading one; the session's replies with the `follow_up` rules; retries; the refusals of
/// each route; the events in the issue's log, bodies included.
async fn issue_messages_and_replies(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    ada.post(
        "/api/v1/projects",
        json!({"key": "MSG", "name": "Messages"}),
    )
    .await?;
    ada.post(
        "/api/v1/issues",
        json!({"project": "MSG", "title": "flaky"}),
    )
    .await?;
    let mut s1 = session(
        &console,
        "s1",
        &["reviewer"],
        &[Mode::Send, Mode::Steer],
        true,
    )
    .await?;
    let _s2 = session(&console, "s2", &["reviewer"], &[Mode::Send], true).await?;
    let _s3 = session(&console, "s3", &["builder"], &[Mode::Send], true).await?;

    // To a session.
    let r = ada
        .post(
            "/api/v1/issues/MSG-1/messages",
            json!({"body": "can you look?", "target": {"session": "s1"}}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let m1 = id_of(&r);
    assert_eq!(
        r.location().as_deref(),
        Some(format!("/api/v1/issues/MSG-1/messages/{m1}").as_str())
    );
    assert_eq!(r.json["issue"], "MSG-1");
    assert_eq!(r.json["delivery"], "send");
    assert_eq!(r.json["broadcast"], Value::Null);
    assert_eq!(r.json["parent"], Value::Null);
    let d = delivery(&mut s1).await?;
    assert_eq!(d.issue.as_deref(), Some("MSG-1"));
    assert_eq!(d.mode, Mode::Send);

    // To a role: one attempt per live session advertising it; one that does not advertise the
    // mode fails, the session without the role gets none.
    let r = agent
        .post(
            "/api/v1/issues/MSG-1/messages",
            json!({"body": "steer: rerun it", "target": {"role": "reviewer"}, "delivery": "steer", "actor": "s3"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let role_msg = id_of(&r);
    let attempts: Vec<(String, String)> = r.json["deliveries"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|x| {
                    (
                        x["session_id"].as_str().unwrap_or_default().to_owned(),
                        x["state"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(
        attempts,
        [
            ("s1".to_owned(), "pending".to_owned()),
            ("s2".to_owned(), "failed".to_owned())
        ]
    );
    assert_eq!(r.json["deliveries"][1]["error"], "mode_not_advertised");
    assert_eq!(r.json["author"]["session"], "s3");
    assert_eq!(delivery(&mut s1).await?.mode, Mode::Steer);
    // A role nobody live holds: stored, no attempt (a retry later reaches its holders).
    let r = ada
        .post(
            "/api/v1/issues/MSG-1/messages",
            json!({"body": "anyone?", "target": {"role": "oncall"}}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["deliveries"], json!([]));

    // The route's refusals.
    for (body, status, code) in [
        (
            json!({"body": "x", "target": {"session": "s1"}, "colour": 1}),
            400,
            "MESSAGE_INPUT",
        ),
        (json!({"body": "x"}), 400, "MESSAGE_INPUT"),
        (
            json!({"body": "x", "target": {"session": "s1", "role": "r"}}),
            400,
            "MESSAGE_INPUT",
        ),
        (
            json!({"body": "x", "target": {"role": "Not A Role"}}),
            400,
            "MESSAGE_INPUT",
        ),
        (
            json!({"body": "  ", "target": {"session": "s1"}}),
            400,
            "MESSAGE_INPUT",
        ),
        (
            json!({"body": "x", "target": {"session": "s1"}, "delivery": "shout"}),
            400,
            "MESSAGE_INPUT",
        ),
        (
            json!({"body": "x".repeat(65_537), "target": {"session": "s1"}}),
            400,
            "CAP_EXCEEDED",
        ),
        (
            json!({"body": "x", "target": {"session": "a b"}}),
            400,
            "INVALID_SESSION_ID",
        ),
        (
            json!({"body": "x", "target": {"session": "s1"}, "actor": "s1"}),
            400,
            "INVALID_BODY",
        ),
    ] {
        refused(
            &ada.post("/api/v1/issues/MSG-1/messages", body).await?,
            status,
            code,
        );
    }
    refused(
        &agent
            .post(
                "/api/v1/issues/MSG-1/messages",
                json!({"body": "x", "target": {"session": "s1"}, "actor": "a/b"}),
            )
            .await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &ada.post(
            "/api/v1/issues/MSG-9/messages",
            json!({"body": "x", "target": {"session": "s1"}}),
        )
        .await?,
        404,
        "NOT_FOUND",
    );
    let r = ada
        .post(
            "/api/v1/issues/MSG-1/messages",
            json!({"body": "é".repeat(65_536), "target": {"session": "s9"}}),
        )
        .await?;
    assert_eq!(r.status, 201, "65,536 characters (not bytes) are taken");

    // Replies: the first posts; again posts nothing (duplicate) unless follow_up with other
    // text, which threads under the first reply.
    let replies = format!("/api/v1/messages/{m1}/replies");
    let r = agent
        .post(&replies, json!({"actor": "s1", "body": "on it"}))
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let first = id_of(&r);
    assert_eq!(r.json["parent"], m1.as_str());
    assert_eq!(r.json["thread_id"], m1.as_str());
    assert_eq!(r.json["issue"], "MSG-1");
    assert_eq!(r.json["author"]["session"], "s1");
    assert!(r.json.get("duplicate").is_none());
    assert_eq!(
        r.location().as_deref(),
        Some(format!("/api/v1/issues/MSG-1/messages/{first}").as_str())
    );
    for (q, body) in [
        ("", "on it"),
        ("", "something else"),
        ("?follow_up=false", "other"),
        ("?follow_up=true", "on it"),
    ] {
        let r = agent
            .post(
                &format!("{replies}{q}"),
                json!({"actor": "s1", "body": body}),
            )
            .await?;
        assert_eq!(r.status, 200, "{q} {body}: {}", r.text);
        assert_eq!(r.json["duplicate"], true);
        assert_eq!(id_of(&r), first);
    }
    let r = agent
        .post(
            &format!("{replies}?follow_up=true"),
            json!({"actor": "s1", "body": "found it: a race"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let follow = id_of(&r);
    assert_eq!(r.json["parent"], first.as_str());
    // The follow-up's text again: the stored follow-up, marked duplicate.
    let r = agent
        .post(
            &format!("{replies}?follow_up=true"),
            json!({"actor": "s1", "body": "found it: a race"}),
        )
        .await?;
    assert_eq!((r.status, id_of(&r)), (200, follow.clone()));
    assert_eq!(r.json["duplicate"], true);
    refused(
        &agent
            .post(
                &format!("{replies}?follow_up=yes"),
                json!({"actor": "s1", "body": "x"}),
            )
            .await?,
        400,
        "MESSAGE_INPUT",
    );
    refused(
        &agent
            .post(&replies, json!({"actor": "s3", "body": "me too"}))
            .await?,
        403,
        "SESSION_FORBIDDEN",
    );
    refused(
        &agent.post(&replies, json!({"body": "who am i"})).await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &agent
            .post(&replies, json!({"actor": "s1", "body": "x", "mood": "ok"}))
            .await?,
        400,
        "MESSAGE_INPUT",
    );
    refused(
        &agent
            .post(&replies, json!({"actor": "s1", "body": ""}))
            .await?,
        400,
        "MESSAGE_INPUT",
    );
    refused(
        &ada.post(&replies, json!({"body": "x"})).await?,
        403,
        "AGENT_ONLY",
    );
    refused(
        &agent
            .post(
                "/api/v1/messages/00000000-0000-4000-8000-000000000000/replies",
                json!({"actor": "s1", "body": "x"}),
            )
            .await?,
        404,
        "NOT_FOUND",
    );

    // One message with its deliveries and replies (a follow-up under its first reply).
    let r = agent
        .get(&format!("/api/v1/issues/MSG-1/messages/{m1}"))
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["replies"][0]["id"], first.as_str());
    assert_eq!(r.json["replies"][0]["replies"][0]["id"], follow.as_str());
    assert_eq!(r.json["deliveries"][0]["session_id"], "s1");
    refused(
        &ada.get(&format!("/api/v1/issues/MSG-2/messages/{m1}"))
            .await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.get("/api/v1/issues/MSG-1/messages/not-a-uuid").await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &agent
            .get(&format!("/api/v1/issues/MSG-1/messages/{m1}?session=a%20b"))
            .await?,
        400,
        "INVALID_SESSION_ID",
    );

    // Retries: a role message reaches its live holders again; a reply is no targeted message.
    let r = ada
        .post(
            &format!("/api/v1/messages/{role_msg}/deliveries"),
            json!({}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let n: Vec<i64> = r
        .json
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["attempt"].as_i64()).collect())
        .unwrap_or_default();
    assert_eq!(n, [3, 4]);
    refused(
        &ada.post(&format!("/api/v1/messages/{first}/deliveries"), json!({}))
            .await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.post("/api/v1/messages/nope/deliveries", json!({}))
            .await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.post(
            &format!("/api/v1/messages/{m1}/deliveries"),
            json!({"x": 1}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );

    // The issue's log holds the messages' events (bodies included); the messaged session is
    // subscribed.
    let log = agent.get("/api/v1/issues/MSG-1/events?limit=200").await?;
    let kinds: Vec<&str> = log
        .json
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["kind"].as_str()).collect())
        .unwrap_or_default();
    assert!(kinds.contains(&"message.sent"), "{kinds:?}");
    assert!(kinds.contains(&"message.replied"), "{kinds:?}");
    assert!(kinds.contains(&"delivery.attempt"), "{kinds:?}");
    let sent = log
        .json
        .as_array()
        .and_then(|a| a.iter().find(|e| e["kind"] == "message.sent"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(sent["data"]["body"], "can you look?");
    let seqs: Vec<i64> = log
        .json
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["sequence"].as_i64()).collect())
        .unwrap_or_default();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    let issue = agent.get("/api/v1/issues/MSG-1").await?;
    assert_eq!(issue.json["sequence"], json!(seqs.last()));
    let subs = ada.get("/api/v1/issues/MSG-1/subscribers").await?;
    assert!(subs.text.contains("\"s1\""), "{}", subs.text);
    console.stop().await;
    Ok(())
}
on_both_databases!(
    issue_messages_and_replies,
    issue_messages_and_replies_sqlite,
    issue_messages_and_replies_postgres
);

/// Direct threads (issue-less): read by any message id, oldest first; a bearer names its
/// session and reads only a thread whose root targets it or that it replied in
/// (THREAD_FORBIDDEN); a session's messages newest first, paged; the session-message routes'
/// refusals.
async fn threads_and_session_messages(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let _s1 = session(&console, "s1", &["reviewer"], &[Mode::Send], true).await?;
    let r = ada
        .post("/api/v1/sessions/s1/messages", json!({"body": "first"}))
        .await?;
    let root = id_of(&r);
    let reply = agent
        .post(
            &format!("/api/v1/messages/{root}/replies"),
            json!({"actor": "s1", "body": "hello back"}),
        )
        .await?;
    let reply_id = id_of(&reply);

    // By any message id, oldest first.
    for id in [&root, &reply_id] {
        let t = ada.get(&format!("/api/v1/messages/{id}/thread")).await?;
        assert_eq!(t.status, 200, "{}", t.text);
        assert_eq!(t.json["root"]["id"], root.as_str());
        assert_eq!(t.json["root"]["deliveries"][0]["session_id"], "s1");
        assert_eq!(t.json["replies"][0]["id"], reply_id.as_str());
        assert_eq!(t.json["replies"][0]["body"], "hello back");
    }
    let path = format!("/api/v1/messages/{root}/thread");
    // A bearer on a direct thread: names its session, the target or one that replied.
    refused(&agent.get(&path).await?, 400, "INVALID_SESSION_ID");
    refused(
        &agent.get(&format!("{path}?session=s9")).await?,
        403,
        "THREAD_FORBIDDEN",
    );
    assert_eq!(agent.get(&format!("{path}?session=s1")).await?.status, 200);
    refused(
        &ada.get(&format!("{path}?session=s1")).await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &agent.get("/api/v1/messages/nope/thread?session=s1").await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &agent.get(&format!("{path}?session=s1&x=1")).await?,
        400,
        "INVALID_QUERY",
    );
    // A session that replied in a thread it was not the target of (a role message's holder
    // reads an issue thread without naming itself, too).
    ada.post("/api/v1/projects", json!({"key": "THR", "name": "Threads"}))
        .await?;
    ada.post("/api/v1/issues", json!({"project": "THR", "title": "t"}))
        .await?;
    let r = ada
        .post(
            "/api/v1/issues/THR-1/messages",
            json!({"body": "role call", "target": {"role": "reviewer"}}),
        )
        .await?;
    let on_issue = id_of(&r);
    assert_eq!(
        agent
            .get(&format!("/api/v1/messages/{on_issue}/thread"))
            .await?
            .status,
        200
    );

    // A session's messages, newest first (its role messages too), paged.
    ada.post("/api/v1/sessions/s1/messages", json!({"body": "second"}))
        .await?;
    let l = ada.get("/api/v1/sessions/s1/messages").await?;
    let bodies: Vec<&str> = l
        .json
        .as_array()
        .map(|a| a.iter().filter_map(|m| m["body"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(bodies, ["second", "role call", "first"], "{}", l.text);
    assert_eq!(l.json[2]["replies"][0]["body"], "hello back");
    let l = ada
        .get("/api/v1/sessions/s1/messages?limit=1&offset=1")
        .await?;
    assert_eq!(l.json[0]["body"], "role call");
    assert_eq!(l.json.as_array().map(Vec::len), Some(1));
    for q in ["limit=0", "limit=201", "limit=x", "offset=-1", "page=2"] {
        refused(
            &ada.get(&format!("/api/v1/sessions/s1/messages?{q}"))
                .await?,
            400,
            "INVALID_QUERY",
        );
    }
    refused(
        &ada.get("/api/v1/sessions/a%20b/messages").await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &agent.get("/api/v1/sessions/s1/messages").await?,
        403,
        "HUMAN_ONLY",
    );
    // The session-message route's refusals.
    refused(
        &ada.post("/api/v1/sessions/a%20b/messages", json!({"body": "x"}))
            .await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &agent
            .post("/api/v1/sessions/s1/messages", json!({"body": "x"}))
            .await?,
        403,
        "HUMAN_ONLY",
    );
    for body in [
        json!({}),
        json!({"body": "x", "target": {"session": "s1"}}),
        json!({"body": 3}),
    ] {
        refused(
            &ada.post("/api/v1/sessions/s1/messages", body).await?,
            400,
            "MESSAGE_INPUT",
        );
    }
    refused(
        &ada.post(
            "/api/v1/sessions/s1/messages",
            json!({"body": "y".repeat(65_537)}),
        )
        .await?,
        400,
        "CAP_EXCEEDED",
    );
    console.stop().await;
    Ok(())
}
on_both_databases!(
    threads_and_session_messages,
    threads_and_session_messages_sqlite,
    threads_and_session_messages_postgres
);

/// A console whose broker webhook is configured (the broker itself is not needed): answers it
/// and the secret's text.
async fn console_with_webhook(
    db: Option<String>,
    clock: Arc<dyn countersign_console_core::Clock>,
) -> anyhow::Result<(TestConsole, String)> {
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".to_owned();
    let s = secret.clone();
    let console = TestConsole::start_with(
        ConsoleOptions {
            local_sign_in: true,
            shared_token: true,
            database_url: db,
            ..Default::default()
        },
        clock,
        move |c, dir| {
            let (token, file) = (dir.join("console-token"), dir.join("webhook-secret"));
            let _ = std::fs::write(&token, CONSOLE_TOKEN);
            let _ = std::fs::write(&file, &s);
            c.broker = Some(countersign_console_http::config::BrokerConfig {
                url: "http://127.0.0.1:9".into(),
                console_token_file: Some(token),
                timeout_seconds: 1,
                webhook_secret_file: Some(file),
            });
        },
    )
    .await?;
    Ok((console, secret))
}

/// POSTs a Standard Webhooks message to the console's `/hooks/broker`, signed with `secret`
/// at `at` (Unix seconds).
async fn webhook(
    console: &TestConsole,
    secret: &str,
    id: &str,
    at: i64,
    body: &Value,
) -> anyhow::Result<Resp> {
    let raw = serde_json::to_vec(body)?;
    let sig = countersign_broker_http::notify::WebhookSecret::parse(secret)?.sign(id, at, &raw);
    Resp::read(
        reqwest::Client::new()
            .post(format!("{}/hooks/broker", console.url))
            .header("webhook-id", id)
            .header("webhook-timestamp", at.to_string())
            .header("webhook-signature", sig)
            .header("content-type", "application/json")
            .body(raw)
            .send()
            .await?,
    )
    .await
}

fn expired(session: &str) -> Value {
    json!({
        "type": "request.expired",
        "session_id": session,
        "request_id": "req-1",
        "record_id": "rec-1",
        "identifiers": ["DEPLOY_KEY", "DB_URL"],
        "expired_at": "2031-01-02T03:04:05Z",
    })
}

/// The accept rules (spec, "Message accept rules"): one case per condition, each making that
/// condition the one that fails; another session's attempt is ACCEPT_FORBIDDEN; the answer
/// and `message.accepted`; concurrent accepts of one attempt accept it once.
async fn accept_rules(db: Option<String>) -> anyhow::Result<()> {
    let clock = Arc::new(ManualClock::new(start()));
    let (console, secret) = console_with_webhook(db, clock.clone()).await?;
    let ada = Who::person(&console, ADA).await?;
    let bob = Who::person(&console, BOB).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let mut s1 = session(
        &console,
        "s1",
        &["reviewer"],
        &[Mode::Send, Mode::Aside, Mode::Steer],
        true,
    )
    .await?;
    let _s2 = session(&console, "s2", &[], &[Mode::Send], true).await?;

    // A direct steer from Ada, delivered: s1 accepts it (as the attempt's mode).
    let send = |who: Who, session: &'static str, body: &'static str, mode: &'static str| async move {
        let r = who
            .post(
                &format!("/api/v1/sessions/{session}/messages"),
                json!({"body": body, "delivery": mode}),
            )
            .await?;
        anyhow::ensure!(r.status == 201, "{}", r.text);
        Ok::<String, anyhow::Error>(id_of(&r))
    };
    let accept = |id: &str, attempt: i64, body: Value| {
        let agent = agent.clone();
        let path = format!("/api/v1/messages/{id}/deliveries/{attempt}/accept");
        async move { agent.post(&path, body).await }
    };
    let ok_id = send(ada.clone(), "s1", "stop and rebase", "steer").await?;
    delivery(&mut s1).await?;
    let r = accept(&ok_id, 1, json!({"actor": "s1"})).await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["attempt"], 1);
    assert_eq!(r.json["session_id"], "s1");
    assert_eq!(r.json["accepted_as"], "steer");
    assert!(r.json["accepted_at"].is_string());
    assert_eq!(r.json["body"], "stop and rebase");
    // Accepting it again: ACCEPT_ALREADY_ACCEPTED (everything else still holds).
    refused(
        &accept(&ok_id, 1, json!({"actor": "s1"})).await?,
        409,
        "ACCEPT_ALREADY_ACCEPTED",
    );
    // `as`: aside or steer.
    let aside = send(ada.clone(), "s1", "note this", "steer").await?;
    delivery(&mut s1).await?;
    refused(
        &accept(&aside, 1, json!({"actor": "s1", "as": "send"})).await?,
        400,
        "MESSAGE_INPUT",
    );
    let r = accept(&aside, 1, json!({"actor": "s1", "as": "aside"})).await?;
    assert_eq!(r.json["accepted_as"], "aside", "{}", r.text);

    // Another session's attempt: 403.
    let other = send(ada.clone(), "s1", "for s1", "steer").await?;
    delivery(&mut s1).await?;
    refused(
        &accept(&other, 1, json!({"actor": "s2"})).await?,
        403,
        "ACCEPT_FORBIDDEN",
    );

    // 1. Not direct: on an issue.
    ada.post("/api/v1/projects", json!({"key": "ACC", "name": "Accept"}))
        .await?;
    ada.post("/api/v1/issues", json!({"project": "ACC", "title": "a"}))
        .await?;
    let r = ada
        .post(
            "/api/v1/issues/ACC-1/messages",
            json!({"body": "steer", "target": {"session": "s1"}, "delivery": "steer"}),
        )
        .await?;
    delivery(&mut s1).await?;
    refused(
        &accept(&id_of(&r), 1, json!({"actor": "s1"})).await?,
        409,
        "ACCEPT_NOT_DIRECT",
    );
    // … or a broadcast's copy.
    let r = ada
        .post(
            "/api/v1/broadcasts",
            json!({"idempotency_key": "acc-1", "sessions": ["s1"], "mode": "steer", "body": "all stop"}),
        )
        .await?;
    let copy = r.json["broadcast"]["recipients"][0]["message"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    delivery(&mut s1).await?;
    refused(
        &accept(&copy, 1, json!({"actor": "s1"})).await?,
        409,
        "ACCEPT_NOT_DIRECT",
    );

    // 2. Not written by a person: the broker's notice (a `send`, requested by the broker: the
    // conditions after it fail too, and the first that fails is the answer).
    let now = clock.now().timestamp();
    assert_eq!(
        webhook(&console, &secret, "wh-accept", now, &expired("s1"))
            .await?
            .status,
        204
    );
    let from_broker = delivery(&mut s1).await?;
    refused(
        &accept(&from_broker.delivery.id, 1, json!({"actor": "s1"})).await?,
        409,
        "ACCEPT_NOT_WRITTEN_BY_PERSON",
    );

    // 3. Sent as `send`.
    let plain = send(ada.clone(), "s1", "when you can", "send").await?;
    delivery(&mut s1).await?;
    refused(
        &accept(&plain, 1, json!({"actor": "s1"})).await?,
        409,
        "ACCEPT_NOT_ASIDE_OR_STEER",
    );

    // 4. Not the latest attempt.
    let twice = send(ada.clone(), "s1", "again", "steer").await?;
    delivery(&mut s1).await?;
    ada.post(&format!("/api/v1/messages/{twice}/deliveries"), json!({}))
        .await?;
    delivery(&mut s1).await?;
    refused(
        &accept(&twice, 1, json!({"actor": "s1"})).await?,
        409,
        "ACCEPT_SUPERSEDED",
    );
    assert_eq!(accept(&twice, 2, json!({"actor": "s1"})).await?.status, 200);

    // 6. The latest attempt requested by an agent.
    let by_agent = send(ada.clone(), "s1", "agent retried", "steer").await?;
    delivery(&mut s1).await?;
    agent
        .post(
            &format!("/api/v1/messages/{by_agent}/deliveries"),
            json!({"actor": "s2"}),
        )
        .await?;
    delivery(&mut s1).await?;
    refused(
        &accept(&by_agent, 2, json!({"actor": "s1"})).await?,
        409,
        "ACCEPT_NOT_REQUESTED_BY_PERSON",
    );

    // 7. Requested by a person who did not write it.
    let by_bob = send(ada.clone(), "s1", "bob retried", "steer").await?;
    delivery(&mut s1).await?;
    bob.post(&format!("/api/v1/messages/{by_bob}/deliveries"), json!({}))
        .await?;
    delivery(&mut s1).await?;
    refused(
        &accept(&by_bob, 2, json!({"actor": "s1"})).await?,
        409,
        "ACCEPT_NOT_REQUESTED_BY_AUTHOR",
    );

    // 8. A failed attempt (s2 does not advertise steer).
    let failed = send(ada.clone(), "s2", "steer s2", "steer").await?;
    refused(
        &accept(&failed, 1, json!({"actor": "s2"})).await?,
        409,
        "ACCEPT_FAILED",
    );
    // A pending one is taken (not acknowledged yet).
    let mut s3 = session(&console, "s3", &[], &[Mode::Steer], false).await?;
    let pending = send(ada.clone(), "s3", "pending steer", "steer").await?;
    delivery(&mut s3).await?;
    assert_eq!(
        accept(&pending, 1, json!({"actor": "s3"})).await?.status,
        200
    );

    // Concurrent accepts of one attempt: one accepts, the others find it accepted.
    let race = send(ada.clone(), "s1", "race", "steer").await?;
    delivery(&mut s1).await?;
    let tries: Vec<_> = (0..5)
        .map(|_| accept(&race, 1, json!({"actor": "s1"})))
        .collect();
    let mut codes: Vec<u16> = futures_util::future::join_all(tries)
        .await
        .into_iter()
        .map(|r| r.map(|r| r.status).unwrap_or(0))
        .collect();
    codes.sort_unstable();
    assert_eq!(codes, [200, 409, 409, 409, 409]);

    // 9. More than a minute old.
    let stale = send(ada.clone(), "s1", "old news", "steer").await?;
    delivery(&mut s1).await?;
    attempt_becomes(&ada, &format!("/api/v1/messages/{stale}/thread"), 1, "sent").await?;
    clock.advance(chrono::Duration::seconds(61));
    refused(
        &accept(&stale, 1, json!({"actor": "s1"})).await?,
        409,
        "ACCEPT_STALE",
    );

    // The route's other refusals.
    refused(
        &accept(&stale, 9, json!({"actor": "s1"})).await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &agent
            .post(
                &format!("/api/v1/messages/{stale}/deliveries/x/accept"),
                json!({"actor": "s1"}),
            )
            .await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &accept(
            "00000000-0000-4000-8000-000000000000",
            1,
            json!({"actor": "s1"}),
        )
        .await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &accept(&stale, 1, json!({})).await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &accept(&stale, 1, json!({"actor": "s1", "please": true})).await?,
        400,
        "MESSAGE_INPUT",
    );
    refused(
        &ada.post(
            &format!("/api/v1/messages/{stale}/deliveries/1/accept"),
            json!({}),
        )
        .await?,
        403,
        "AGENT_ONLY",
    );

    // `message.accepted` for each acceptance.
    let events = events_since(&agent, 0, 500, 3).await?;
    let accepted: Vec<&Value> = events
        .iter()
        .filter(|e| e.1 == "message.accepted")
        .map(|e| &e.2["data"])
        .collect();
    assert_eq!(accepted.len(), 5, "{accepted:?}");
    assert_eq!(accepted[0]["message"], ok_id.as_str());
    assert_eq!(accepted[0]["attempt"], 1);
    assert_eq!(accepted[0]["session_id"], "s1");
    assert_eq!(accepted[0]["accepted_as"], "steer");
    assert!(accepted[0]["accepted_at"].is_string());
    console.stop().await;
    Ok(())
}
on_both_databases!(accept_rules, accept_rules_sqlite, accept_rules_postgres);
