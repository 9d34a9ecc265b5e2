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
    console.state.loops.link_sweep.turn().await;
    let thread2 = format!("/api/v1/messages/{late}/thread");
    assert_eq!(
        ada.get(&thread2).await?.json["root"]["deliveries"][0]["state"],
        "pending"
    );
    clock.advance(chrono::Duration::seconds(2));
    let a = attempt_becomes(&ada, &thread2, 1, "failed").await?;
    assert_eq!(a["error"], "not_acknowledged");
    // A late acknowledgement changes nothing (checked below, once an acknowledgement sent
    // after it on the same link has been recorded).
    s2.handle().ack(&d.delivery)?;

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
    // The link's acknowledgements are recorded in order: the late one is in, and changed
    // nothing.
    assert_eq!(
        ada.get(&thread2).await?.json["root"]["deliveries"][0]["state"],
        "failed"
    );

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
    on_fresh_postgres(presence_across_replicas_on).await
}

async fn presence_across_replicas_on(db: String) -> anyhow::Result<()> {
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
    // One hears of the newer link through the database's notice: its list shows that link.
    let on_one = Who::agent(&one, SHARED_TOKEN);
    let l = eventually(10, || async {
        let l = on_one.get("/api/v1/sessions").await?;
        Ok((l.json[0]["modes"] == json!(["send"])).then_some(l))
    })
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
    // The issue's sequence is its log's last: read both until no delivery attempt (moved by
    // the delivery task on its own time) lands between the two reads.
    eventually(10, || async {
        let log = agent.get("/api/v1/issues/MSG-1/events?limit=200").await?;
        let seqs: Vec<i64> = log
            .json
            .as_array()
            .map(|a| a.iter().filter_map(|e| e["sequence"].as_i64()).collect())
            .unwrap_or_default();
        assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
        let issue = agent.get("/api/v1/issues/MSG-1").await?;
        Ok((issue.json["sequence"] == json!(seqs.last())).then_some(()))
    })
    .await?;
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

    // Direct-conversation text reaches every authenticated caller through the event stream.
    let events = events_since(&agent, 0, 50, 2).await?;
    let text = |kind: &str| {
        events
            .iter()
            .find(|e| e.1 == kind)
            .map(|e| e.2["data"]["body"].clone())
            .unwrap_or_default()
    };
    assert_eq!(text("message.sent"), "first");
    assert_eq!(text("message.replied"), "hello back");
    let bob = Who::person(&console, BOB).await?;
    let seen = events_since(&bob, 0, 50, 2).await?;
    assert!(
        seen.iter()
            .any(|e| e.1 == "message.replied" && e.2["data"]["body"] == "hello back")
    );

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

fn broadcast_body(key: &str, sessions: &[&str], mode: &str, body: &str) -> Value {
    json!({"idempotency_key": key, "sessions": sessions, "mode": mode, "body": body})
}

/// Broadcasts: one copy per recipient; sessions not live or not advertising the mode excluded
/// and named, never moved to another mode; the same key and request answer the original
/// (200), another request under the key is BROADCAST_KEY_REUSED naming it and sends nothing;
/// concurrent sends with one key send once; recent broadcasts with counts; one broadcast with
/// every recipient's attempts and replies; the refusals.
async fn broadcasts(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let bob = Who::person(&console, BOB).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let mut s1 = session(&console, "s1", &[], &[Mode::Send, Mode::Steer], true).await?;
    let mut s2 = session(&console, "s2", &[], &[Mode::Send], true).await?;

    let body = broadcast_body("release-1", &["s1", "s2", "s3"], "steer", "freeze merges");
    let r = ada.post("/api/v1/broadcasts", body.clone()).await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let b = r.json["broadcast"].clone();
    let id = b["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        r.location().as_deref(),
        Some(format!("/api/v1/broadcasts/{id}").as_str())
    );
    assert_eq!(b["idempotency_key"], "release-1");
    assert_eq!(b["mode"], "steer");
    assert_eq!(b["by"], json!({"kind": "user", "login": ADA}));
    assert_eq!(b["recipient_count"], 1);
    assert_eq!(b["recipients"][0]["session_id"], "s1");
    let copy = b["recipients"][0]["message"].clone();
    assert_eq!(copy["broadcast"], id.as_str());
    assert_eq!(copy["target"], json!({"session": "s1"}));
    assert_eq!(copy["delivery"], "steer");
    assert_eq!(
        r.json["excluded"],
        json!([
            {"session_id": "s2", "reason": "mode_not_advertised"},
            {"session_id": "s3", "reason": "not_live"}
        ])
    );
    let d = delivery(&mut s1).await?;
    assert_eq!((d.body.as_str(), d.mode), ("freeze merges", Mode::Steer));
    quiet(&mut s2).await?;

    // The same key and request: the original, 200, nothing sent.
    let again = ada.post("/api/v1/broadcasts", body.clone()).await?;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.json["broadcast"]["id"], id.as_str());
    assert_eq!(again.json["excluded"], r.json["excluded"]);
    quiet(&mut s1).await?;
    // The key for another request (sessions in another order, another body, another mode).
    for other in [
        broadcast_body("release-1", &["s2", "s1", "s3"], "steer", "freeze merges"),
        broadcast_body("release-1", &["s1", "s2", "s3"], "steer", "thaw merges"),
        broadcast_body("release-1", &["s1", "s2", "s3"], "send", "freeze merges"),
    ] {
        let x = ada.post("/api/v1/broadcasts", other).await?;
        refused(&x, 409, "BROADCAST_KEY_REUSED");
        assert_eq!(x.json["broadcast"], id.as_str());
    }
    quiet(&mut s1).await?;
    quiet(&mut s2).await?;
    // Keys are per person.
    let bobs = bob.post("/api/v1/broadcasts", body.clone()).await?;
    assert_eq!(bobs.status, 201, "{}", bobs.text);
    assert_ne!(bobs.json["broadcast"]["id"], id.as_str());
    delivery(&mut s1).await?;

    // Concurrent sends with one key: one sends, the others answer it.
    let same = broadcast_body("release-2", &["s1", "s2"], "send", "one only");
    let sends: Vec<_> = (0..6)
        .map(|_| {
            let ada = ada.clone();
            let same = same.clone();
            async move { ada.post("/api/v1/broadcasts", same).await }
        })
        .collect();
    let answers: Vec<Resp> = futures_util::future::join_all(sends)
        .await
        .into_iter()
        .collect::<anyhow::Result<_>>()?;
    let mut statuses: Vec<u16> = answers.iter().map(|a| a.status).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 201]);
    let ids: std::collections::HashSet<&str> = answers
        .iter()
        .filter_map(|a| a.json["broadcast"]["id"].as_str())
        .collect();
    assert_eq!(ids.len(), 1);
    assert_eq!(delivery(&mut s1).await?.body, "one only");
    assert_eq!(delivery(&mut s2).await?.body, "one only");
    quiet(&mut s1).await?;
    quiet(&mut s2).await?;
    // Concurrent sends with one key and different bodies: one sends, the others are refused.
    let sends: Vec<_> = (0..4)
        .map(|i| {
            let ada = ada.clone();
            async move {
                ada.post(
                    "/api/v1/broadcasts",
                    broadcast_body("release-3", &["s2"], "send", &format!("body {i}")),
                )
                .await
            }
        })
        .collect();
    let mut statuses: Vec<(u16, String)> = futures_util::future::join_all(sends)
        .await
        .into_iter()
        .map(|r| {
            r.map(|r| (r.status, r.code().to_owned()))
                .unwrap_or_default()
        })
        .collect();
    statuses.sort();
    assert_eq!(
        statuses,
        [
            (201, String::new()),
            (409, "BROADCAST_KEY_REUSED".into()),
            (409, "BROADCAST_KEY_REUSED".into()),
            (409, "BROADCAST_KEY_REUSED".into())
        ]
    );
    delivery(&mut s2).await?;
    quiet(&mut s2).await?;

    // Replies count; one broadcast answers every recipient's attempts and replies.
    let copy_id = copy["id"].as_str().unwrap_or_default().to_owned();
    agent
        .post(
            &format!("/api/v1/messages/{copy_id}/replies"),
            json!({"actor": "s1", "body": "frozen"}),
        )
        .await?;
    let one = ada.get(&format!("/api/v1/broadcasts/{id}")).await?;
    assert_eq!(one.status, 200, "{}", one.text);
    assert_eq!(one.json["recipients"][0]["session_id"], "s1");
    assert_eq!(
        one.json["recipients"][0]["message"]["deliveries"][0]["state"],
        "sent"
    );
    assert_eq!(
        one.json["recipients"][0]["message"]["replies"][0]["body"],
        "frozen"
    );
    assert_eq!(one.json["reply_count"], 1);
    let list = ada.get("/api/v1/broadcasts").await?;
    let rows = list.json.as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 4, "{}", list.text);
    let row = rows
        .iter()
        .find(|x| x["id"] == id.as_str())
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (row["recipient_count"].clone(), row["reply_count"].clone()),
        (json!(1), json!(1))
    );
    assert_eq!(rows[0]["idempotency_key"], "release-3", "newest first");
    let page = ada.get("/api/v1/broadcasts?limit=1&offset=1").await?;
    assert_eq!(page.json[0]["idempotency_key"], "release-2");
    // `broadcast.sent` names its recipients' messages.
    let events = events_since(&agent, 0, 300, 3).await?;
    let sent: Vec<&Value> = events
        .iter()
        .filter(|e| e.1 == "broadcast.sent")
        .map(|e| &e.2["data"])
        .collect();
    assert_eq!(sent.len(), 4);
    assert_eq!(sent[0]["id"], id.as_str());
    assert_eq!(sent[0]["recipients"][0]["message"], copy_id.as_str());

    // The refusals.
    for (b, status, code) in [
        (
            json!({"idempotency_key": "k", "sessions": ["s1"], "mode": "send"}),
            400,
            "MESSAGE_INPUT",
        ),
        (
            json!({"idempotency_key": "k", "sessions": ["s1"], "mode": "send", "body": "x", "to": 1}),
            400,
            "MESSAGE_INPUT",
        ),
        (broadcast_body("k", &[], "send", "x"), 400, "MESSAGE_INPUT"),
        (
            broadcast_body("k", &["s1", "s1"], "send", "x"),
            400,
            "MESSAGE_INPUT",
        ),
        (
            broadcast_body("", &["s1"], "send", "x"),
            400,
            "MESSAGE_INPUT",
        ),
        (
            broadcast_body("a key", &["s1"], "send", "x"),
            400,
            "MESSAGE_INPUT",
        ),
        (
            broadcast_body("k", &["s1"], "yell", "x"),
            400,
            "MESSAGE_INPUT",
        ),
        (
            broadcast_body("k", &["s1"], "send", ""),
            400,
            "MESSAGE_INPUT",
        ),
        (
            broadcast_body(&"k".repeat(256), &["s1"], "send", "x"),
            400,
            "CAP_EXCEEDED",
        ),
        (
            broadcast_body("k", &["s1"], "send", &"x".repeat(65_537)),
            400,
            "CAP_EXCEEDED",
        ),
        (
            broadcast_body("k", &["a b"], "send", "x"),
            400,
            "INVALID_SESSION_ID",
        ),
    ] {
        refused(&ada.post("/api/v1/broadcasts", b).await?, status, code);
    }
    let many: Vec<String> = (0..501).map(|i| format!("s-{i}")).collect();
    refused(
        &ada.post(
            "/api/v1/broadcasts",
            json!({"idempotency_key": "many", "sessions": many, "mode": "send", "body": "x"}),
        )
        .await?,
        400,
        "CAP_EXCEEDED",
    );
    let k255 = "k".repeat(255);
    assert_eq!(
        ada.post(
            "/api/v1/broadcasts",
            broadcast_body(&k255, &["s9"], "send", "x")
        )
        .await?
        .status,
        201
    );
    for (path, status, code) in [
        ("/api/v1/broadcasts/not-a-uuid", 404, "NOT_FOUND"),
        (
            "/api/v1/broadcasts/00000000-0000-4000-8000-000000000000",
            404,
            "NOT_FOUND",
        ),
        ("/api/v1/broadcasts?limit=0", 400, "INVALID_QUERY"),
        ("/api/v1/broadcasts?cursor=x", 400, "INVALID_QUERY"),
    ] {
        refused(&ada.get(path).await?, status, code);
    }
    refused(
        &agent.post("/api/v1/broadcasts", body.clone()).await?,
        403,
        "HUMAN_ONLY",
    );
    refused(&agent.get("/api/v1/broadcasts").await?, 403, "HUMAN_ONLY");
    refused(
        &agent.get(&format!("/api/v1/broadcasts/{id}")).await?,
        403,
        "HUMAN_ONLY",
    );
    console.stop().await;
    Ok(())
}
on_both_databases!(broadcasts, broadcasts_sqlite, broadcasts_postgres);

/// Reads server-sent events from an open response: `(event, data)` pairs, up to `n`, giving
/// up after `secs`.
async fn sse(
    resp: &mut reqwest::Response,
    buf: &mut String,
    n: usize,
    secs: u64,
) -> anyhow::Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while out.len() < n {
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let (mut kind, mut data) = (None, None);
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("event:") {
                    kind = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("data:") {
                    data = serde_json::from_str::<Value>(v.trim()).ok();
                }
            }
            if let (Some(k), Some(d)) = (kind, data) {
                out.push((k, d));
                if out.len() == n {
                    return Ok(out);
                }
            }
        }
        match tokio::time::timeout_at(deadline, resp.chunk()).await {
            Ok(Ok(Some(c))) => buf.push_str(&String::from_utf8_lossy(&c)),
            _ => break,
        }
    }
    Ok(out)
}

/// The next relay request on a link.
async fn relay_event(link: &mut Link) -> anyhow::Result<Event> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), link.next()).await? {
            Some(e @ (Event::RelayOpen { .. } | Event::RelayClose { .. })) => return Ok(e),
            Some(Event::Closed { .. }) | None => anyhow::bail!("the link ended"),
            Some(_) => continue,
        }
    }
}

fn frame(seq: u64, text: &str) -> countersign_link_client::Frame {
    countersign_link_client::Frame {
        seq,
        kind: countersign_link_client::FrameKind::Turn,
        at: "2031-01-02T03:04:05.000Z".into(),
        data: json!({"text": text}),
    }
}

/// The relay (protocol §6.6): `relay.open` on the link, the session's `replay` first, then its
/// frames above the replay's last, never stored; `relay.close` when the viewer leaves; `end`
/// when the link closes; 404 for a session not live or without the `relay` capability.
async fn relay(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let mut s1 = session(&console, "s1", &[], &[Mode::Send], true).await?;
    let _plain = Link::connect(Options::new(
        &console.url,
        SHARED_TOKEN,
        "plain",
        Advert::new("no relay"),
    ))
    .await?;

    let mut resp = ada
        .http
        .get(format!("{}/api/v1/sessions/s1/relay", console.url))
        .send()
        .await?;
    assert_eq!(resp.status(), 200);
    assert!(
        resp.headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"))
    );
    let Event::RelayOpen { viewer } = relay_event(&mut s1).await? else {
        anyhow::bail!("expected relay.open");
    };
    let h = s1.handle();
    // A frame before this viewer's replay is not sent to it (the replay holds it).
    h.frame(&frame(2, "two"))?;
    h.replay(&viewer, &[frame(1, "one"), frame(2, "two")])?;
    h.frame(&frame(2, "two again"))?;
    h.frame(&frame(3, "three"))?;
    let mut buf = String::new();
    let got = sse(&mut resp, &mut buf, 2, 10).await?;
    assert_eq!(got[0].0, "replay");
    assert_eq!(got[0].1["frames"][1]["data"]["text"], "two");
    assert_eq!(got[0].1["frames"][0]["seq"], 1);
    assert_eq!(got[1].0, "frame");
    assert_eq!(
        got[1].1,
        json!({"seq": 3, "kind": "turn", "at": "2031-01-02T03:04:05.000Z", "data": {"text": "three"}})
    );
    // The viewer leaves: relay.close.
    drop(resp);
    assert_eq!(relay_event(&mut s1).await?, Event::RelayClose { viewer });
    // Nothing was stored: a new viewer starts from a fresh replay.
    let mut resp = ada
        .http
        .get(format!("{}/api/v1/sessions/s1/relay", console.url))
        .send()
        .await?;
    let Event::RelayOpen { viewer } = relay_event(&mut s1).await? else {
        anyhow::bail!("expected relay.open");
    };
    h.replay(&viewer, &[])?;
    let mut buf = String::new();
    let got = sse(&mut resp, &mut buf, 1, 10).await?;
    assert_eq!(got[0], ("replay".to_owned(), json!({"frames": []})));
    // The link closes: `end`.
    h.close();
    let got = sse(&mut resp, &mut buf, 1, 10).await?;
    assert_eq!(
        got[0],
        ("end".to_owned(), json!({"reason": "session_gone"}))
    );

    refused(
        &ada.get("/api/v1/sessions/s1/relay").await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.get("/api/v1/sessions/plain/relay").await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &ada.get("/api/v1/sessions/a%20b/relay").await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &agent.get("/api/v1/sessions/plain/relay").await?,
        403,
        "HUMAN_ONLY",
    );
    console.stop().await;
    Ok(())
}
on_both_databases!(relay, relay_sqlite, relay_postgres);

fn rfc(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// Inbox threads (issue message threads the person wrote in with a reply since their read
/// mark, newest reply first, narrowed by issue; never on a document), read marks (forward
/// only, a minute ahead at most, THREAD_ID_INPUT), and per-agent state (`cleared_before`,
/// `read_through`, replies read by id).
async fn inbox_threads_and_agent_state(db: Option<String>) -> anyhow::Result<()> {
    let clock = Arc::new(ManualClock::new(start()));
    let console = console_with_clock(db, clock.clone()).await?;
    let ada = Who::person(&console, ADA).await?;
    let bob = Who::person(&console, BOB).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let _s1 = session(&console, "s1", &[], &[Mode::Send], true).await?;
    ada.post("/api/v1/projects", json!({"key": "INB", "name": "Inbox"}))
        .await?;
    for t in ["one", "two"] {
        ada.post("/api/v1/issues", json!({"project": "INB", "title": t}))
            .await?;
    }
    let tick = |s: i64| clock.advance(chrono::Duration::seconds(s));
    let r = ada
        .post(
            "/api/v1/issues/INB-1/messages",
            json!({"body": "Why is CI red?\nDetails follow.", "target": {"session": "s1"}}),
        )
        .await?;
    let t1 = id_of(&r);
    let r = ada
        .post(
            "/api/v1/issues/INB-2/messages",
            json!({"body": "Second question", "target": {"session": "s1"}}),
        )
        .await?;
    let t2 = id_of(&r);
    let threads = |q: &'static str| {
        let ada = ada.clone();
        async move { ada.get(&format!("/api/v1/inbox/threads{q}")).await }
    };
    // Nobody else wrote yet.
    assert_eq!(threads("").await?.json["total"], 0);
    tick(1);
    agent
        .post(
            &format!("/api/v1/messages/{t1}/replies"),
            json!({"actor": "s1", "body": "A flaky test.\nMore later."}),
        )
        .await?;
    tick(1);
    agent
        .post(
            &format!("/api/v1/messages/{t2}/replies"),
            json!({"actor": "s1", "body": "Answer two"}),
        )
        .await?;
    let p = threads("").await?;
    assert_eq!(p.status, 200, "{}", p.text);
    assert_eq!(
        (
            p.json["total"].clone(),
            p.json["limit"].clone(),
            p.json["offset"].clone()
        ),
        (json!(2), json!(50), json!(0))
    );
    assert_eq!(
        p.json["rows"][0]["thread"],
        json!({"kind": "message", "id": t2})
    );
    let row = &p.json["rows"][1];
    assert_eq!(row["thread"], json!({"kind": "message", "id": t1}));
    assert_eq!(row["owner"], json!({"kind": "user", "login": ADA}));
    assert_eq!(row["subject"], "Why is CI red?");
    assert_eq!(row["link"], format!("countersign://message/{t1}"));
    assert_eq!(row["newest_reply"]["author"]["session"], "s1");
    assert_eq!(row["newest_reply"]["first_line"], "A flaky test.");
    assert!(row["newest_reply"]["at"].is_string());
    let p = threads("?issue=INB-1").await?;
    assert_eq!(p.json["rows"].as_array().map(Vec::len), Some(1));
    assert_eq!(p.json["total"], 1);
    let p = threads("?artifact=00000000-0000-4000-8000-000000000000").await?;
    assert_eq!(p.json["total"], 0);
    let p = threads("?limit=1&offset=1").await?;
    assert_eq!(p.json["rows"][0]["thread"]["id"], t1.as_str());
    assert_eq!(p.json["total"], 2);
    // Bob wrote in neither.
    assert_eq!(bob.get("/api/v1/inbox/threads").await?.json["total"], 0);
    for q in [
        "?issue=INB-1&artifact=x",
        "?limit=0",
        "?limit=201",
        "?since=1",
        "?issue=nope",
    ] {
        refused(&threads(q).await?, 400, "INVALID_QUERY");
    }
    refused(
        &agent.get("/api/v1/inbox/threads").await?,
        403,
        "HUMAN_ONLY",
    );

    // Read marks: only forward, at most a minute ahead, stored no later than now.
    let read = |id: String, at: String| {
        let ada = ada.clone();
        async move {
            ada.post(
                &format!("/api/v1/inbox/threads/{id}/read"),
                json!({"read_through": at}),
            )
            .await
        }
    };
    let now = clock.now();
    let r = read(t1.clone(), rfc(now)).await?;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(threads("").await?.json["total"], 1);
    // An earlier mark leaves it.
    assert_eq!(
        read(t1.clone(), rfc(now - chrono::Duration::hours(1)))
            .await?
            .status,
        204
    );
    assert_eq!(threads("").await?.json["total"], 1);
    // Up to a minute ahead is taken (stored as now); a later reply shows again.
    assert_eq!(
        read(t2.clone(), rfc(now + chrono::Duration::seconds(59)))
            .await?
            .status,
        204
    );
    assert_eq!(threads("").await?.json["total"], 0);
    tick(1);
    agent
        .post(
            &format!("/api/v1/messages/{t2}/replies?follow_up=true"),
            json!({"actor": "s1", "body": "One more thing"}),
        )
        .await?;
    let p = threads("").await?;
    assert_eq!(
        p.json["rows"][0]["newest_reply"]["first_line"],
        "One more thing"
    );
    refused(
        &read(t1.clone(), rfc(clock.now() + chrono::Duration::seconds(61))).await?,
        400,
        "INVALID_STATE",
    );
    refused(
        &read("nope".into(), rfc(now)).await?,
        400,
        "THREAD_ID_INPUT",
    );
    refused(
        &read(t1.clone(), "yesterday".into()).await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.post(
            &format!("/api/v1/inbox/threads/{t1}/read"),
            json!({"read_through": rfc(now), "x": 1}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    // A thread the caller never wrote in: 204, nothing written.
    assert_eq!(
        bob.post(
            &format!("/api/v1/inbox/threads/{t1}/read"),
            json!({"read_through": rfc(now)}),
        )
        .await?
        .status,
        204
    );
    refused(
        &agent
            .post(
                &format!("/api/v1/inbox/threads/{t1}/read"),
                json!({"read_through": rfc(now)}),
            )
            .await?,
        403,
        "HUMAN_ONLY",
    );

    // Per-agent state: the session's replies to Ada's direct messages.
    let d = ada
        .post("/api/v1/sessions/s1/messages", json!({"body": "direct"}))
        .await?;
    let direct = id_of(&d);
    tick(1);
    let r1 = id_of(
        &agent
            .post(
                &format!("/api/v1/messages/{direct}/replies"),
                json!({"actor": "s1", "body": "r1"}),
            )
            .await?,
    );
    tick(1);
    let r2 = id_of(
        &agent
            .post(
                &format!("/api/v1/messages/{direct}/replies?follow_up=true"),
                json!({"actor": "s1", "body": "r2"}),
            )
            .await?,
    );
    let states = ada.get("/api/v1/inbox/agents").await?;
    assert_eq!(
        states.json,
        json!([{"session_id": "s1", "cleared_before": null, "read_through": null, "unread_replies": [r2, r1]}]),
        "{}",
        states.text
    );
    assert_eq!(bob.get("/api/v1/inbox/agents").await?.json, json!([]));
    let patch = |body: Value| {
        let ada = ada.clone();
        async move { ada.patch("/api/v1/inbox/agents/s1", body).await }
    };
    let s = patch(json!({"read_replies": [r1]})).await?;
    assert_eq!(s.status, 200, "{}", s.text);
    assert_eq!(s.json["unread_replies"], json!([r2]));
    let mark_at = clock.now();
    let s = patch(json!({"read_through": rfc(mark_at)})).await?;
    assert_eq!(s.json["unread_replies"], json!([]));
    assert_eq!(s.json["read_through"], rfc(mark_at));
    // Forward only.
    let s = patch(json!({"read_through": rfc(mark_at - chrono::Duration::hours(1))})).await?;
    assert_eq!(s.json["read_through"], rfc(mark_at));
    tick(1);
    let r3 = id_of(
        &agent
            .post(
                &format!("/api/v1/messages/{direct}/replies?follow_up=true"),
                json!({"actor": "s1", "body": "r3"}),
            )
            .await?,
    );
    assert_eq!(
        ada.get("/api/v1/inbox/agents").await?.json[0]["unread_replies"],
        json!([r3])
    );
    // Clearing hides the exchanges at or before it.
    let s = patch(json!({"cleared_before": rfc(clock.now())})).await?;
    assert_eq!(s.json["unread_replies"], json!([]));
    assert_eq!(s.json["cleared_before"], rfc(clock.now()));
    for (body, status, code) in [
        (
            json!({"read_through": rfc(clock.now() + chrono::Duration::minutes(2))}),
            400,
            "INVALID_STATE",
        ),
        (
            json!({"cleared_before": rfc(clock.now() + chrono::Duration::minutes(2))}),
            400,
            "INVALID_STATE",
        ),
        (json!({"read_replies": ["nope"]}), 400, "INVALID_BODY"),
        (json!({"read_replies": [direct]}), 400, "INVALID_BODY"),
        (json!({"read_through": "soon"}), 400, "INVALID_BODY"),
        (json!({"pinned": true}), 400, "INVALID_BODY"),
    ] {
        refused(&patch(body).await?, status, code);
    }
    refused(
        &ada.patch("/api/v1/inbox/agents/a%20b", json!({})).await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(&agent.get("/api/v1/inbox/agents").await?, 403, "HUMAN_ONLY");
    refused(
        &agent.patch("/api/v1/inbox/agents/s1", json!({})).await?,
        403,
        "HUMAN_ONLY",
    );
    console.stop().await;
    Ok(())
}
on_both_databases!(
    inbox_threads_and_agent_state,
    inbox_threads_and_agent_state_sqlite,
    inbox_threads_and_agent_state_postgres
);

/// The broker's expiry webhook (protocol §8): verified (headers, timestamp within 5 minutes,
/// a `v1` signature), replay-safe by `webhook-id`, a message to the named session from the
/// broker; another type or a bad session id is taken and dropped; no secret: 404.
async fn broker_webhook(db: Option<String>) -> anyhow::Result<()> {
    let clock = Arc::new(ManualClock::new(start()));
    let (console, secret) = console_with_webhook(db, clock.clone()).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let mut s1 = session(&console, "s1", &[], &[Mode::Send], true).await?;
    let now = clock.now().timestamp();

    let r = webhook(&console, &secret, "msg_1", now, &expired("s1")).await?;
    assert_eq!(r.status, 204, "{}", r.text);
    let d = delivery(&mut s1).await?;
    assert_eq!(
        d.body,
        "Credential request req-1 for DEPLOY_KEY, DB_URL expired undecided at 2031-01-02T03:04:05Z."
    );
    assert_eq!(d.author, json!({"kind": "system", "name": "broker"}));
    assert_eq!(d.mode, Mode::Send);
    assert_eq!(
        d.notice,
        Some(
            json!({"session_id": "s1", "request_id": "req-1", "record_id": "rec-1",
                    "identifiers": ["DEPLOY_KEY", "DB_URL"], "expired_at": "2031-01-02T03:04:05Z"})
        )
    );
    // The same webhook-id again (the broker retries): nothing more.
    assert_eq!(
        webhook(&console, &secret, "msg_1", now, &expired("s1"))
            .await?
            .status,
        204
    );
    quiet(&mut s1).await?;
    let l = ada.get("/api/v1/sessions/s1/messages").await?;
    assert_eq!(l.json.as_array().map(Vec::len), Some(1), "{}", l.text);
    assert_eq!(l.json[0]["author"]["name"], "broker");
    // It takes replies.
    assert_eq!(
        agent
            .post(
                &format!("/api/v1/messages/{}/replies", d.delivery.id),
                json!({"actor": "s1", "body": "asking again"}),
            )
            .await?
            .status,
        201
    );
    // A session not live: the message stays in its list with a failed attempt.
    webhook(&console, &secret, "msg_2", now, &expired("s9")).await?;
    let l = ada.get("/api/v1/sessions/s9/messages").await?;
    assert_eq!(
        l.json[0]["deliveries"][0]["error"], "not_live",
        "{}",
        l.text
    );

    // Taken and dropped: another type, a session id §4.1 refuses, a body that is no notice.
    for (id, body) in [
        (
            "msg_3",
            json!({"type": "request.decided", "session_id": "s1"}),
        ),
        ("msg_4", expired("a b")),
        ("msg_5", json!({"type": "request.expired"})),
    ] {
        assert_eq!(
            webhook(&console, &secret, id, now, &body).await?.status,
            204
        );
    }
    quiet(&mut s1).await?;

    // Refused: a bad signature, another secret, a stale or future timestamp, a header missing.
    let other = "whsec_QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=";
    refused(
        &webhook(&console, other, "msg_6", now, &expired("s1")).await?,
        401,
        "WEBHOOK_INVALID",
    );
    for at in [now - 301, now + 301] {
        refused(
            &webhook(&console, &secret, "msg_7", at, &expired("s1")).await?,
            401,
            "WEBHOOK_INVALID",
        );
    }
    let raw = serde_json::to_vec(&expired("s1"))?;
    let sig =
        countersign_broker_http::notify::WebhookSecret::parse(&secret)?.sign("msg_8", now, &raw);
    let post = |headers: Vec<(&'static str, String)>, body: Vec<u8>| {
        let mut req = reqwest::Client::new()
            .post(format!("{}/hooks/broker", console.url))
            .header("content-type", "application/json")
            .body(body);
        for (k, v) in headers {
            req = req.header(k, v);
        }
        async move { Resp::read(req.send().await?).await }
    };
    refused(
        &post(
            vec![
                ("webhook-id", "msg_8".into()),
                ("webhook-signature", sig.clone()),
            ],
            raw.clone(),
        )
        .await?,
        401,
        "WEBHOOK_INVALID",
    );
    // Tampered body under a good signature.
    let mut tampered = raw.clone();
    tampered.extend_from_slice(b" ");
    refused(
        &post(
            vec![
                ("webhook-id", "msg_8".into()),
                ("webhook-timestamp", now.to_string()),
                ("webhook-signature", sig.clone()),
            ],
            tampered,
        )
        .await?,
        401,
        "WEBHOOK_INVALID",
    );
    // Several signatures: one that verifies is enough.
    let r = post(
        vec![
            ("webhook-id", "msg_8".into()),
            ("webhook-timestamp", now.to_string()),
            ("webhook-signature", format!("v1,AAAA {sig}")),
        ],
        raw.clone(),
    )
    .await?;
    assert_eq!(r.status, 204, "{}", r.text);
    refused(
        &post(
            vec![
                ("webhook-id", "msg_9".into()),
                ("webhook-timestamp", now.to_string()),
                ("webhook-signature", "v1,AAAA".into()),
            ],
            vec![b' '; 65 * 1024],
        )
        .await?,
        413,
        "REQUEST_TOO_LARGE",
    );
    // Without a secret the route is not there.
    let plain = console_on(None).await?;
    let r = webhook(
        &plain,
        &secret,
        "msg_1",
        chrono::Utc::now().timestamp(),
        &expired("s1"),
    )
    .await?;
    refused(&r, 404, "NOT_FOUND");
    plain.stop().await;
    console.stop().await;
    Ok(())
}
on_both_databases!(
    broker_webhook,
    broker_webhook_sqlite,
    broker_webhook_postgres
);

/// Messages join search (their own index, kind `message`, fused with issues).
async fn messages_in_search(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    for (k, n) in [("SRC", "Search"), ("OTH", "Other")] {
        ada.post("/api/v1/projects", json!({"key": k, "name": n}))
            .await?;
        ada.post(
            "/api/v1/issues",
            json!({"project": k, "title": "zebra migration plan"}),
        )
        .await?;
    }
    let r = ada
        .post(
            "/api/v1/issues/SRC-1/messages",
            json!({"body": "Please check the zebra crossing logs\nthanks", "target": {"session": "s1"}}),
        )
        .await?;
    let m = id_of(&r);
    ada.post(
        "/api/v1/sessions/s2/messages",
        json!({"body": "zebra stripes, direct"}),
    )
    .await?;
    let s = agent.get("/api/v1/search?q=zebra").await?;
    assert_eq!(s.status, 200, "{}", s.text);
    let kinds: Vec<&str> = s.json["rows"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["kind"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        kinds.iter().filter(|k| **k == "message").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(
        kinds.iter().filter(|k| **k == "issue").count(),
        2,
        "{kinds:?}"
    );
    assert_eq!(s.json["total"], 4);
    let s = agent.get("/api/v1/search?q=crossing%20logs").await?;
    assert_eq!(s.json["rows"][0]["kind"], "message", "{}", s.text);
    assert_eq!(s.json["rows"][0]["id"], m.as_str());
    assert_eq!(
        s.json["rows"][0]["ref"],
        format!("countersign://message/{m}")
    );
    assert_eq!(
        s.json["rows"][0]["title"],
        "Please check the zebra crossing logs"
    );
    assert_eq!(s.json["rows"][0]["project"], "SRC");
    let s = agent.get("/api/v1/search?q=zebra&project=SRC").await?;
    let ids: Vec<&str> = s.json["rows"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids.len(), 2, "{}", s.text);
    assert!(ids.contains(&m.as_str()) && ids.contains(&"SRC-1"));
    console.stop().await;
    Ok(())
}
on_both_databases!(
    messages_in_search,
    messages_in_search_sqlite,
    messages_in_search_postgres
);

/// `GET /api/v1` lists this area's routes with their protocol purposes, and the link and the
/// webhook under `other_routes`.
#[tokio::test]
async fn route_table_lists_the_message_routes() -> anyhow::Result<()> {
    let console = console_on(None).await?;
    let t = Resp::read(reqwest::get(format!("{}/api/v1", console.url)).await?).await?;
    let has = |field: &str, method: &str, path: &str| {
        t.json[field]
            .as_array()
            .is_some_and(|a| a.iter().any(|r| r["method"] == method && r["path"] == path))
    };
    for (m, p) in [
        ("POST", "/api/v1/issues/{key}/messages"),
        ("GET", "/api/v1/issues/{key}/messages/{id}"),
        ("GET", "/api/v1/broadcasts"),
        ("POST", "/api/v1/broadcasts"),
        ("GET", "/api/v1/broadcasts/{id}"),
        ("GET", "/api/v1/sessions"),
        ("GET", "/api/v1/sessions/{session_id}/messages"),
        ("POST", "/api/v1/sessions/{session_id}/messages"),
        ("GET", "/api/v1/sessions/{session_id}/relay"),
        ("GET", "/api/v1/messages/{id}/thread"),
        ("POST", "/api/v1/messages/{id}/deliveries"),
        ("POST", "/api/v1/messages/{id}/deliveries/{attempt}/accept"),
        ("POST", "/api/v1/messages/{id}/replies"),
        ("GET", "/api/v1/inbox/threads"),
        ("POST", "/api/v1/inbox/threads/{id}/read"),
        ("GET", "/api/v1/inbox/agents"),
        ("PATCH", "/api/v1/inbox/agents/{session_id}"),
    ] {
        assert!(has("routes", m, p), "{m} {p} not listed");
    }
    assert!(has("other_routes", "POST", "/hooks/broker"));
    assert!(has("other_routes", "GET", "/link/v1/sessions/{session_id}"));
    assert!(!has("routes", "POST", "/hooks/broker"));
    console.stop().await;
    Ok(())
}

/// Dev mode wires the broker's expiry notifications to the console: a request left to expire
/// reaches its session's link as a message from the broker.
#[tokio::test]
async fn dev_mode_expiry_reaches_the_session() -> anyhow::Result<()> {
    use countersign_dev::{self as dev, DEV_PERSON, DevOptions};
    let dir = tempfile::tempdir()?;
    let d = dev::start_with(
        &dir.path().join("state"),
        0,
        0,
        DevOptions {
            request_pending_seconds: Some(2),
            ..Default::default()
        },
    )
    .await?;
    assert!(dir.path().join("state/webhook-secret").exists());
    let mut person = Person::at(&d.console_url)?;
    anyhow::ensure!(person.sign_in_local(DEV_PERSON).await?.status == 303);
    let minted = person
        .post("/api/v1/agent-tokens", json!({"name": "dev agent"}))
        .await?;
    let token = minted.json["token"].as_str().unwrap_or_default().to_owned();
    let broker = TestBroker::at(&d.broker_url)?;
    let login = start_machine_login(&broker, DEV_PERSON, "dev-laptop").await?;
    let facts = person
        .post(
            "/api/v1/credential-requests/machine-lookup",
            json!({"code": login.code}),
        )
        .await?;
    let record = facts.json["record_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let approved = person
        .post(
            &format!("/api/v1/credential-requests/{record}/approve"),
            json!({"code": login.code}),
        )
        .await?;
    assert_eq!(approved.status, 200, "{}", approved.text);
    let machine = login.machine(&broker).await?;
    let enrolled = machine.enroll(&broker, "rt1").await?;
    // The enrolled session (its id `notify-rt1`) holds the console link.
    let mut link = Link::connect(Options::new(
        &d.console_url,
        &token,
        "notify-rt1",
        Advert::new("a dev agent"),
    ))
    .await?;
    let req = enrolled
        .request(&broker, &["DEMO_OWNER"], "deploy the demo", None)
        .await?;
    assert_eq!(req["state"], "pending", "{req}");
    let got = loop {
        match tokio::time::timeout(Duration::from_secs(60), link.next()).await? {
            Some(Event::Delivery(x)) => break x,
            Some(Event::Closed { code, reason }) => anyhow::bail!("closed {code:?} {reason}"),
            Some(_) => continue,
            None => anyhow::bail!("the link ended"),
        }
    };
    assert_eq!(got.author, json!({"kind": "system", "name": "broker"}));
    let notice = got.notice.clone().unwrap_or_default();
    assert_eq!(notice["record_id"], req["record_id"], "{notice}");
    assert_eq!(notice["request_id"], req["request_id"], "{notice}");
    assert_eq!(notice["session_id"], "notify-rt1");
    assert_eq!(notice["identifiers"], json!(["DEMO_OWNER"]));
    assert!(
        got.body.starts_with("Credential request ")
            && got.body.contains("DEMO_OWNER expired undecided at "),
        "{}",
        got.body
    );
    d.shutdown(Duration::from_secs(2)).await;
    Ok(())
}

/// The conversation pages render what the API holds, escaping the text they print.
async fn conversation_pages(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let _s1 = session(
        &console,
        "s1",
        &["reviewer"],
        &[Mode::Send, Mode::Steer],
        true,
    )
    .await?;
    let r = ada
        .post(
            "/api/v1/sessions/s1/messages",
            json!({"body": "<b>bold</b> & more", "delivery": "steer"}),
        )
        .await?;
    let id = id_of(&r);
    agent
        .post(
            &format!("/api/v1/messages/{id}/replies"),
            json!({"actor": "s1", "body": "a reply <i>here</i>"}),
        )
        .await?;
    let b = ada
        .post(
            "/api/v1/broadcasts",
            broadcast_body("pages-1", &["s1", "s9"], "send", "to everyone"),
        )
        .await?;
    let bid = b.json["broadcast"]["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let get = |p: String| {
        let ada = ada.clone();
        async move { ada.get(&p).await }
    };
    let p = get("/sessions".into()).await?;
    assert_eq!(p.status, 200);
    assert!(p.text.contains("href=\"/sessions/s1\"") && p.text.contains("/sessions/s1/relay"));
    let p = get("/sessions/s1".into()).await?;
    assert_eq!(p.status, 200, "{}", p.text);
    assert!(
        p.text.contains("&#60;b&#62;bold&#60;/b&#62; &#38; more"),
        "escaped body: {}",
        p.text
    );
    assert!(!p.text.contains("<b>bold</b>"));
    assert!(p.text.contains("a reply &#60;i&#62;here&#60;/i&#62;"));
    assert!(
        p.text.contains("class=\"badge new\""),
        "the unread reply is marked"
    );
    assert!(p.text.contains("data-state=\"sent\"") || p.text.contains("data-state=\"pending\""));
    assert!(p.text.contains("id=\"send-mode\""));
    assert!(p.text.contains("/assets/messages.js"));
    let p = get("/sessions/s1/relay".into()).await?;
    assert!(p.status == 200 && p.text.contains("data-relay=\"s1\""));
    let p = get("/broadcasts".into()).await?;
    assert!(p.status == 200 && p.text.contains(&format!("/broadcasts/{bid}")));
    assert!(p.text.contains("value=\"s1\""), "live sessions to pick");
    let p = get(format!("/broadcasts/{bid}")).await?;
    assert!(
        p.status == 200 && p.text.contains("data-recipient=\"s1\""),
        "{}",
        p.text
    );
    let p = get(format!("/messages/{id}")).await?;
    assert_eq!(p.status, 303);
    assert_eq!(p.location(), Some(format!("/sessions/s1#m-{id}")));
    let js = Resp::read(reqwest::get(format!("{}/assets/messages.js", console.url)).await?).await?;
    assert!(js.status == 200 && js.text.contains("data-conversation"));
    let css =
        Resp::read(reqwest::get(format!("{}/assets/messages.css", console.url)).await?).await?;
    assert_eq!(css.status, 200);
    // Pages are for people.
    assert_eq!(agent.get("/sessions/s1").await?.status, 403);
    console.stop().await;
    Ok(())
}
on_both_databases!(
    conversation_pages,
    conversation_pages_sqlite,
    conversation_pages_postgres
);

/// The `countersign-link-demo` binary, beside this test's own target directory, built first
/// when missing or older than its sources.
fn demo_bin() -> anyhow::Result<std::path::PathBuf> {
    use std::path::Path;
    let exe = std::env::current_exe()?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| anyhow::anyhow!("test binary outside target/<profile>/deps"))?;
    let bin = profile_dir.join("countersign-link-demo");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../link-client/src");
    let newest = |p: &Path| -> Option<std::time::SystemTime> {
        fn walk(p: &Path) -> Option<std::time::SystemTime> {
            let m = std::fs::metadata(p).ok()?;
            if !m.is_dir() {
                return m.modified().ok();
            }
            std::fs::read_dir(p)
                .ok()?
                .flatten()
                .filter_map(|e| walk(&e.path()))
                .max()
        }
        walk(p)
    };
    let built = std::fs::metadata(&bin).and_then(|m| m.modified()).ok();
    if matches!((built, newest(&src)), (Some(b), Some(n)) if b >= n) {
        return Ok(bin);
    }
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = std::process::Command::new(cargo);
    build.args([
        "build",
        "--quiet",
        "-p",
        "countersign-link-client",
        "--bin",
        "countersign-link-demo",
    ]);
    if let Some(p) = profile_dir.file_name().and_then(|n| n.to_str())
        && p != "debug"
    {
        build.args(["--profile", p]);
    }
    let status = build.current_dir(env!("CARGO_MANIFEST_DIR")).status()?;
    anyhow::ensure!(
        status.success() || bin.exists(),
        "could not build the link demo"
    );
    Ok(bin)
}

/// A real session process (`countersign-link-demo`) receives a steer a person sends from the
/// conversation page, acknowledges it and replies; the person sees the reply and the sent
/// attempt without a reload; the relay page shows the frames the session sends as it sends
/// them; the broadcast form shows each recipient's result.
#[tokio::test]
async fn conversation_in_the_browser() -> anyhow::Result<()> {
    use crate::common::webdriver::{Driver, browser_or_skip};
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let idp = crate::common::idp::TestIdp::start().await?;
    let console = TestConsole::start(ConsoleOptions {
        idp: Some(&idp),
        shared_token: true,
        ..Default::default()
    })
    .await?;
    let mut child = tokio::process::Command::new(demo_bin()?)
        .args([
            "--console",
            &console.url,
            "--session",
            "demo-1",
            "--title",
            "fixing the build",
            "--mode",
            "send",
            "--mode",
            "steer",
            "--relay",
            "--reply",
            "on it: {body}",
        ])
        .env("COUNTERSIGN_AGENT_TOKEN", SHARED_TOKEN)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().ok_or_else(|| anyhow::anyhow!("stdin"))?;
    let mut out = tokio::io::BufReader::new(
        child
            .stdout
            .take()
            .ok_or_else(|| anyhow::anyhow!("stdout"))?,
    )
    .lines();
    type Out = tokio::io::Lines<tokio::io::BufReader<tokio::process::ChildStdout>>;
    async fn said_on(out: &mut Out, event: &str) -> anyhow::Result<Value> {
        loop {
            let line = tokio::time::timeout(Duration::from_secs(20), out.next_line())
                .await??
                .ok_or_else(|| anyhow::anyhow!("the demo ended"))?;
            let v: Value = serde_json::from_str(&line)?;
            if v["event"] == event {
                return Ok(v);
            }
        }
    }
    macro_rules! said {
        ($e:expr) => {
            said_on(&mut out, $e)
        };
    }
    said!("live").await?;

    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let ada = driver
        .browser(&chromium, &profiles.path().join("ada"))
        .await?;
    let url = |p: &str| format!("{}{p}", console.url);
    idp.set_next_login(ADA);
    ada.goto(&url("/sessions/demo-1")).await?;
    ada.click("#oidc").await?;
    ada.wait_text("#session-state", "fixing the build", 10)
        .await?;
    ada.execute("document.body.setAttribute('data-not-reloaded', '1'); return 1")
        .await?;
    // A steer from the send box.
    ada.execute("document.getElementById('send-mode').value = 'steer'; return 1")
        .await?;
    ada.type_into("#send-body", "please stop and rebase")
        .await?;
    ada.click("#send-button").await?;
    let d = said!("delivery").await?;
    assert_eq!(
        (d["mode"].clone(), d["body"].clone()),
        (json!("steer"), json!("please stop and rebase"))
    );
    said!("replied").await?;
    // The reply and the sent attempt appear live.
    ada.wait_text("#conversation", "on it: please stop and rebase", 15)
        .await?;
    ada.wait_for("#conversation .attempt.sent", 15).await?;
    ada.wait_text("#conversation", "new", 5).await?;
    assert_eq!(
        ada.execute("return document.body.getAttribute('data-not-reloaded')")
            .await?,
        json!("1"),
        "the page was reloaded"
    );
    ada.screenshot(&crate::browser::shots().join("conversation.png"))
        .await?;
    ada.click("#mark-read").await?;
    ada.wait_text("#unread-count", "No unread reply", 10)
        .await?;

    // The relay: the replay holds the delivery's frame; a frame sent now appears as it comes.
    ada.goto(&url("/sessions/demo-1/relay")).await?;
    said!("relay.open").await?;
    ada.wait_text("#frames", "please stop and rebase", 15)
        .await?;
    stdin
        .write_all(b"frame compiling crate countersign-console-http\n")
        .await?;
    stdin.flush().await?;
    ada.wait_text("#frames", "compiling crate countersign-console-http", 15)
        .await?;
    ada.screenshot(&crate::browser::shots().join("relay.png"))
        .await?;

    // The broadcast form: each recipient's result.
    ada.goto(&url("/broadcasts")).await?;
    ada.wait_for("input[value='demo-1']", 10).await?;
    ada.click("input[value='demo-1']").await?;
    ada.type_into("#broadcast-more", "nobody-here").await?;
    ada.type_into("#broadcast-body", "release at noon").await?;
    ada.click("#broadcast-send").await?;
    ada.wait_text("#broadcast-recipients", "not_live", 10)
        .await?;
    ada.wait_text("tr[data-recipient='demo-1']", "sent", 15)
        .await?;
    assert_eq!(said!("delivery").await?["body"], "release at noon");
    ada.screenshot(&crate::browser::shots().join("broadcast.png"))
        .await?;

    // The session's link closing ends the relay.
    ada.goto(&url("/sessions/demo-1/relay")).await?;
    ada.wait_text("#relay-state", "Live", 15).await?;
    stdin.write_all(b"quit\n").await?;
    stdin.flush().await?;
    ada.wait_text("#relay-state", "closed", 15).await?;
    ada.quit().await;
    drop(stdin);
    said!("closed").await?;
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;
    console.stop().await;
    Ok(())
}
