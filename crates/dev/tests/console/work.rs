//! The work core over real HTTP, on SQLite and on PostgreSQL: projects, issues, claims, the
//! issue event log, the request rules of protocol §2 on the new routes, races on one issue, and
//! the event stream (resumed by `Last-Event-ID`, and across two consoles on one PostgreSQL).

use std::collections::HashSet;
use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::*;

async fn projects_and_issues(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);

    // Projects: the spec's refusals, each from its own condition.
    refused(
        &agent
            .post(
                "/api/v1/projects",
                json!({"key": "PAY", "name": "Payments"}),
            )
            .await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &agent
            .post(
                "/api/v1/projects",
                json!({"key": "PAY", "name": "Payments", "actor": "a b"}),
            )
            .await?,
        400,
        "INVALID_SESSION_ID",
    );
    for (key, name) in [
        ("pay", "Payments"),
        ("P", "Payments"),
        ("PAY", ""),
        ("PAY", "Pay\u{7}ments"),
        ("PAY", "Pay\u{202E}ments"),
        ("PAY", " \u{3164}\u{200B}"),
    ] {
        refused(
            &ada.post("/api/v1/projects", json!({"key": key, "name": name}))
                .await?,
            400,
            "INVALID_PROJECT",
        );
    }
    refused(
        &ada.post(
            "/api/v1/projects",
            json!({"key": "PAY", "name": "x".repeat(81)}),
        )
        .await?,
        400,
        "CAP_EXCEEDED",
    );
    refused(
        &ada.post(
            "/api/v1/projects",
            json!({"key": "PAY", "name": "P", "colour": "red"}),
        )
        .await?,
        400,
        "INVALID_PROJECT",
    );
    let r = agent
        .post(
            "/api/v1/projects",
            json!({"key": "PAY", "name": "Payments", "actor": "sess-1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["key"], "PAY");
    refused(
        &ada.post("/api/v1/projects", json!({"key": "PAY", "name": "Again"}))
            .await?,
        409,
        "PROJECT_EXISTS",
    );
    ada.post(
        "/api/v1/projects",
        json!({"key": "OPS", "name": "Operations"}),
    )
    .await?;
    let list = agent.get("/api/v1/projects").await?;
    let keys: Vec<&str> = list
        .json
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["key"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(keys, ["OPS", "PAY"]);

    // Issues: defaults, caps, body rules.
    let r = ada
        .post(
            "/api/v1/issues",
            json!({"project": "PAY", "title": "Refunds", "labels": ["bug"], "priority": 1}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.location().as_deref(), Some("/api/v1/issues/PAY-1"));
    assert_eq!(
        (
            r.json["key"].as_str(),
            r.json["status"].as_str(),
            r.json["assignee"].as_str()
        ),
        (Some("PAY-1"), Some("todo"), Some(ADA))
    );
    assert_eq!(r.json["sequence"], 1);
    assert_eq!(r.json["route_status"], "unknown");
    let child = agent.post("/api/v1/issues", json!({"project": "PAY", "title": "Partial refunds", "parent": "PAY-1", "route": "reviewer"})).await?;
    assert_eq!(child.status, 201, "{}", child.text);
    // An agent on the shared token has no owner: the parent's assignee.
    assert_eq!(child.json["assignee"], ADA);
    assert_eq!(child.json["route_status"], "no_holder");
    refused(
        &ada.post(
            "/api/v1/issues",
            json!({"project": "PAY", "title": "t".repeat(1001)}),
        )
        .await?,
        400,
        "CAP_EXCEEDED",
    );
    refused(
        &ada.post("/api/v1/issues", json!({"project": "NOPE", "title": "x"}))
            .await?,
        400,
        "INVALID_PROJECT",
    );
    refused(
        &ada.post(
            "/api/v1/issues",
            json!({"project": "PAY", "title": "x", "assignee": "nobody@example.com"}),
        )
        .await?,
        400,
        "ASSIGNEE_NOT_ALLOWED",
    );
    refused(
        &ada.post(
            "/api/v1/issues",
            json!({"project": "PAY", "title": "x", "expected_tokn": "a"}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.post(
            "/api/v1/issues",
            json!({"project": "PAY", "title": "x", "actor": "s1"}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    let r = Resp::read(
        ada.http
            .post(format!("{}/api/v1/issues", console.url))
            .header("origin", &console.url)
            .header("x-csrf-token", ada.csrf.clone().unwrap_or_default())
            .header("content-type", "text/plain")
            .body(r#"{"project":"PAY","title":"x"}"#)
            .send()
            .await?,
    )
    .await?;
    refused(&r, 415, "UNSUPPORTED_MEDIA_TYPE");
    let big = json!({"project": "PAY", "title": "x", "labels": ["l".repeat(1100 * 1024)]});
    refused(
        &ada.post("/api/v1/issues", big).await?,
        413,
        "REQUEST_TOO_LARGE",
    );

    // Read: children and progress.
    let one = agent.get("/api/v1/issues/PAY-1").await?;
    assert_eq!(one.json["children"], json!(["PAY-2"]));
    assert_eq!(
        one.json["progress"],
        json!({"tasks": null, "children": {"done": 0, "total": 1}})
    );
    refused(&agent.get("/api/v1/issues/PAY-99").await?, 404, "NOT_FOUND");
    refused(&agent.get("/api/v1/issues/pay-1").await?, 404, "NOT_FOUND");
    assert_eq!(
        agent.get("/api/v1/issues/resolve?ref=PAY-2").await?.json,
        json!({"key": "PAY-2"})
    );
    refused(
        &agent.get("/api/v1/issues/resolve?ref=PAY-9").await?,
        404,
        "NOT_FOUND",
    );

    // Update: conditional, closed, labels_add.
    refused(
        &ada.patch(
            "/api/v1/issues/PAY-1",
            json!({"title": "x", "expected_sequence": 7}),
        )
        .await?,
        409,
        "ISSUE_CHANGED",
    );
    let r = ada
        .patch(
            "/api/v1/issues/PAY-1",
            json!({"title": "x", "expected_sequence": 7}),
        )
        .await?;
    assert_eq!(r.json["sequence"], 1, "{}", r.text);
    let r = ada
        .patch(
            "/api/v1/issues/PAY-1",
            json!({"title": "Refunds v2", "expected_sequence": 1, "priority": null}),
        )
        .await?;
    assert_eq!(
        (
            r.status,
            r.json["sequence"].as_i64(),
            r.json["priority"].is_null()
        ),
        (200, Some(2), true),
        "{}",
        r.text
    );
    refused(
        &ada.patch(
            "/api/v1/issues/PAY-1",
            json!({"labels": ["a"], "labels_add": ["b"]}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    let r = agent
        .patch(
            "/api/v1/issues/PAY-1",
            json!({"labels_add": ["ui", "bug"], "actor": "sess-1"}),
        )
        .await?;
    assert_eq!(r.json["labels"], json!(["bug", "ui"]), "{}", r.text);
    let r = ada
        .patch("/api/v1/issues/PAY-2", json!({"status": "done"}))
        .await?;
    assert!(r.json["closed_at"].is_string(), "{}", r.text);
    assert!(r.json["route_status"].is_null());
    refused(
        &ada.patch("/api/v1/issues/PAY-2", json!({"title": "reopen me"}))
            .await?,
        409,
        "ISSUE_CLOSED",
    );
    let r = ada
        .patch(
            "/api/v1/issues/PAY-2",
            json!({"components": {"mode": "none", "reason": "docs"}}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        agent.get("/api/v1/issues/PAY-1").await?.json["progress"]["children"],
        json!({"done": 1, "total": 1})
    );

    // Lists: filters, both paging forms, refused parameters.
    let keys = |r: &Resp| -> Vec<String> {
        let arr = if r.json.is_array() {
            &r.json
        } else {
            &r.json["issues"]
        };
        arr.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|i| i["key"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    for n in 3..=7 {
        ada.post(
            "/api/v1/issues",
            json!({"project": "OPS", "title": format!("ops {n}"), "priority": n % 4}),
        )
        .await?;
    }
    assert_eq!(
        keys(&agent.get("/api/v1/issues?project=PAY").await?),
        ["PAY-1", "PAY-2"]
    );
    assert_eq!(
        keys(&agent.get("/api/v1/issues?label=ui").await?),
        ["PAY-1"]
    );
    assert_eq!(
        keys(
            &agent
                .get("/api/v1/issues?status=done&status=cancelled")
                .await?
        ),
        ["PAY-2"]
    );
    assert_eq!(
        keys(&agent.get("/api/v1/issues?open=false").await?),
        ["PAY-2"]
    );
    assert_eq!(
        keys(&agent.get("/api/v1/issues?parent=PAY-1").await?),
        ["PAY-2"]
    );
    assert_eq!(
        keys(
            &agent
                .get("/api/v1/issues?project=PAY&priority=none")
                .await?
        ),
        ["PAY-1", "PAY-2"]
    );
    assert_eq!(
        keys(&agent.get("/api/v1/issues?priority=0&priority=3").await?),
        ["OPS-1", "OPS-2", "OPS-5"]
    );
    assert_eq!(
        keys(
            &agent
                .get("/api/v1/issues?route_status=unknown&project=PAY")
                .await?
        ),
        ["PAY-1"]
    );
    let page = agent
        .get("/api/v1/issues?project=OPS&limit=2&offset=1")
        .await?;
    assert_eq!(
        (
            keys(&page),
            page.json["total"].as_i64(),
            page.json["limit"].as_i64(),
            page.json["offset"].as_i64()
        ),
        (
            vec!["OPS-2".to_owned(), "OPS-3".to_owned()],
            Some(5),
            Some(2),
            Some(1)
        )
    );
    let page = agent.get("/api/v1/issues?offset=6").await?;
    assert_eq!(
        (
            keys(&page).len(),
            page.json["total"].as_i64(),
            page.json["limit"].as_i64()
        ),
        (1, Some(7), Some(50))
    );
    refused(
        &agent.get("/api/v1/issues?cursor=abc").await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &agent.get("/api/v1/issues?limit=0").await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &agent.get("/api/v1/issues?limit=251").await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &agent.get("/api/v1/issues?colour=red").await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &agent.get("/api/v1/issues?status=open").await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &agent.get("/api/v1/issues?pinned=true").await?,
        403,
        "HUMAN_ONLY",
    );
    assert_eq!(
        keys(&ada.get("/api/v1/issues?pinned=true").await?),
        Vec::<String>::new()
    );
    refused(
        &agent.get("/api/v1/projects?x=1").await?,
        400,
        "INVALID_QUERY",
    );

    // The issue's log: every write appended its event, paged by sequence.
    let log = agent.get("/api/v1/issues/PAY-1/events").await?;
    let kinds: Vec<&str> = log
        .json
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["kind"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        kinds,
        ["issue.created", "issue.updated", "issue.updated"],
        "{}",
        log.text
    );
    assert_eq!(
        log.json[1]["data"]["changes"]["title"],
        json!(["Refunds", "Refunds v2"])
    );
    assert_eq!(
        log.json[2]["actor"],
        json!({"kind": "agent", "owner": null, "service": null, "session": "sess-1"})
    );
    assert_eq!(log.json[2]["session"], "sess-1");
    let desc = agent
        .get("/api/v1/issues/PAY-1/events?order=desc&limit=1")
        .await?;
    assert_eq!(desc.json[0]["sequence"], 3);
    let after = agent
        .get("/api/v1/issues/PAY-1/events?after=1&before=3")
        .await?;
    assert_eq!(after.json.as_array().map(Vec::len), Some(1));
    assert_eq!(after.json[0]["sequence"], 2);
    refused(
        &agent.get("/api/v1/issues/PAY-1/events?limit=201").await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &agent.get("/api/v1/issues/PAY-1/events?order=up").await?,
        400,
        "INVALID_QUERY",
    );

    // Claims: a person's holds; the agent is refused naming the holder; a person may force.
    refused(
        &agent.post("/api/v1/issues/PAY-1/claim", json!({})).await?,
        400,
        "INVALID_SESSION_ID",
    );
    let c = ada.post("/api/v1/issues/PAY-1/claim", json!({})).await?;
    assert_eq!(
        (c.status, c.json["holder"]["login"].as_str()),
        (200, Some(ADA)),
        "{}",
        c.text
    );
    let r = agent
        .post("/api/v1/issues/PAY-1/claim", json!({"actor": "sess-1"}))
        .await?;
    refused(&r, 409, "ISSUE_CLAIMED");
    assert_eq!(r.json["holder"]["login"], ADA);
    refused(
        &agent
            .post(
                "/api/v1/issues/PAY-1/claim",
                json!({"actor": "sess-1", "force": true}),
            )
            .await?,
        403,
        "HUMAN_ONLY",
    );
    refused(
        &agent
            .call(
                Method::DELETE,
                "/api/v1/issues/PAY-1/claim?session=sess-1",
                None,
            )
            .await?,
        409,
        "ISSUE_CLAIMED",
    );
    let bob = Who::person(&console, BOB).await?;
    refused(
        &bob.post("/api/v1/issues/PAY-1/claim", json!({})).await?,
        409,
        "ISSUE_CLAIMED",
    );
    let c = bob
        .post("/api/v1/issues/PAY-1/claim", json!({"force": true}))
        .await?;
    assert_eq!(c.json["holder"]["login"], BOB, "{}", c.text);
    // A session that is not live holds nothing against another: no session link is open.
    assert_eq!(
        bob.call(Method::DELETE, "/api/v1/issues/PAY-1/claim", None)
            .await?
            .status,
        204
    );
    let c = agent
        .post("/api/v1/issues/PAY-1/claim", json!({"actor": "sess-1"}))
        .await?;
    assert_eq!(c.json["holder"]["session"], "sess-1", "{}", c.text);
    let c = agent
        .post("/api/v1/issues/PAY-1/claim", json!({"actor": "sess-2"}))
        .await?;
    assert_eq!(c.json["holder"]["session"], "sess-2", "{}", c.text);
    assert_eq!(
        agent.get("/api/v1/issues/PAY-1").await?.json["status"],
        "todo"
    );

    // §2 on the new routes: 401 with WWW-Authenticate, 405 with Allow.
    let r = Resp::read(
        reqwest::Client::new()
            .get(format!("{}/api/v1/issues", console.url))
            .send()
            .await?,
    )
    .await?;
    refused(&r, 401, "UNAUTHENTICATED");
    assert_eq!(
        r.headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok()),
        Some("Bearer realm=\"countersign\"")
    );
    let r = Resp::read(
        reqwest::Client::new()
            .get(format!("{}/api/v1/issues", console.url))
            .bearer_auth("csp_nope")
            .send()
            .await?,
    )
    .await?;
    refused(&r, 401, "UNAUTHENTICATED");
    assert!(
        r.headers
            .get("www-authenticate")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.contains("invalid_token"))
    );
    let r = agent
        .call(Method::PUT, "/api/v1/issues/PAY-1", None)
        .await?;
    refused(&r, 405, "METHOD_NOT_ALLOWED");
    let allow = r
        .headers
        .get("allow")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    assert!(allow.contains("GET") && allow.contains("PATCH"), "{allow}");
    console.stop().await;
    Ok(())
}

#[tokio::test]
async fn projects_and_issues_sqlite() -> anyhow::Result<()> {
    projects_and_issues(None).await
}

#[tokio::test]
async fn projects_and_issues_postgres() -> anyhow::Result<()> {
    on_fresh_postgres(|db| projects_and_issues(Some(db))).await
}

/// 100 concurrent writers on one issue, always one consistent result:
/// - `labels_add`, each writer a label of its own: the first 50 to commit are held (the cap),
///   the rest are CAP_EXCEEDED, and the labels held are exactly the winners';
/// - 100 updates expecting one sequence: one applies, 99 are ISSUE_CHANGED;
/// - 100 people claiming: one holds, the rest are ISSUE_CLAIMED (or CLAIM_CONTENDED).
async fn races(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    ada.post("/api/v1/projects", json!({"key": "RACE", "name": "Races"}))
        .await?;
    ada.post(
        "/api/v1/issues",
        json!({"project": "RACE", "title": "contended"}),
    )
    .await?;

    let results = futures_util::future::join_all((0..100).map(|n| {
        let a = agent.clone();
        async move {
            let r = a
                .patch(
                    "/api/v1/issues/RACE-1",
                    json!({"labels_add": [format!("l{n}")]}),
                )
                .await;
            (n, r)
        }
    }))
    .await;
    let mut won = HashSet::new();
    for (n, r) in results {
        let r = r?;
        match r.status {
            200 => {
                won.insert(format!("l{n}"));
            }
            _ => refused(&r, 400, "CAP_EXCEEDED"),
        }
    }
    let held = agent.get("/api/v1/issues/RACE-1").await?;
    let labels: HashSet<String> = held.json["labels"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|l| l.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(won.len(), 50);
    assert_eq!(labels, won);

    let seq = held.json["sequence"].as_i64().unwrap_or(0);
    let results = futures_util::future::join_all((0..100).map(|n| {
        let a = agent.clone();
        async move {
            a.patch(
                "/api/v1/issues/RACE-1",
                json!({"title": format!("t{n}"), "expected_sequence": seq}),
            )
            .await
        }
    }))
    .await;
    let mut applied = 0;
    for r in results {
        let r = r?;
        if r.status == 200 {
            applied += 1;
        } else {
            refused(&r, 409, "ISSUE_CHANGED");
            assert_eq!(r.json["sequence"], seq + 1, "{}", r.text);
        }
    }
    assert_eq!(applied, 1);

    let mut people = Vec::new();
    for n in 0..100 {
        people.push(Who::person(&console, &format!("p{n}@example.com")).await?);
    }
    let results =
        futures_util::future::join_all(people.iter().enumerate().map(|(n, p)| async move {
            (n, p.post("/api/v1/issues/RACE-1/claim", json!({})).await)
        }))
        .await;
    let mut holders = Vec::new();
    for (n, r) in results {
        let r = r?;
        if r.status == 200 {
            holders.push(format!("p{n}@example.com"));
        } else {
            assert_eq!(r.status, 409, "{}", r.text);
            assert!(
                matches!(r.code(), "ISSUE_CLAIMED" | "CLAIM_CONTENDED"),
                "{}",
                r.text
            );
        }
    }
    assert_eq!(holders.len(), 1, "{holders:?}");
    let held = agent.get("/api/v1/issues/RACE-1").await?;
    assert_eq!(
        held.json["claim"]["holder"]["login"].as_str(),
        Some(holders[0].as_str())
    );
    console.stop().await;
    Ok(())
}

#[tokio::test]
async fn races_sqlite() -> anyhow::Result<()> {
    races(None).await
}

#[tokio::test]
async fn races_postgres() -> anyhow::Result<()> {
    on_fresh_postgres(|db| races(Some(db))).await
}

/// A client that disconnects at random points and reconnects with `Last-Event-ID` sees every
/// event exactly once, in order, while a writer runs; `?since=0` replays from the start.
async fn stream_resumes(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    ada.post("/api/v1/projects", json!({"key": "EV", "name": "Events"}))
        .await?;
    let writer = {
        let a = agent.clone();
        tokio::spawn(async move {
            for n in 0..60 {
                let _ = a
                    .post(
                        "/api/v1/issues",
                        json!({"project": "EV", "title": format!("e{n}")}),
                    )
                    .await;
            }
        })
    };
    let mut seen: Vec<i64> = Vec::new();
    let mut cursor = Some(0);
    let mut rng = uuid::Uuid::new_v4().as_u128();
    while seen.len() < 61 {
        rng = rng
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let take = 1 + (rng >> 64) as usize % 9;
        let got = read_events(&agent, cursor, "", take, 10).await?;
        anyhow::ensure!(
            !got.is_empty(),
            "no event after {:?} (seen {})",
            cursor,
            seen.len()
        );
        for (id, kind, env) in &got {
            assert_eq!(env["id"], *id);
            assert_eq!(env["kind"].as_str(), Some(kind.as_str()));
            seen.push(*id);
        }
        cursor = seen.last().copied();
    }
    writer.await?;
    let mut sorted = seen.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, seen, "each event once, in order");
    assert_eq!(seen.len(), 61);
    assert!(
        seen.windows(2).all(|w| w[1] == w[0] + 1),
        "no gap: {seen:?}"
    );
    // `?since=` replays as well; a live-only stream waits for the next event.
    let replay = read_events(&agent, None, "?since=0", 3, 10).await?;
    assert_eq!(
        replay.iter().map(|e| e.0).collect::<Vec<_>>(),
        seen[..3].to_vec()
    );
    assert_eq!(replay[0].1, "project.created");
    let live = open_events(&agent, None, "").await?;
    ada.post("/api/v1/issues", json!({"project": "EV", "title": "live"}))
        .await?;
    let live = events_of(live, 1, 10).await?;
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].2["data"]["title"], "live");
    console.stop().await;
    Ok(())
}

#[tokio::test]
async fn stream_resumes_sqlite() -> anyhow::Result<()> {
    stream_resumes(None).await
}

#[tokio::test]
async fn stream_resumes_postgres() -> anyhow::Result<()> {
    on_fresh_postgres(|db| stream_resumes(Some(db))).await
}

/// Two consoles on one PostgreSQL deliver each other's events (LISTEN/NOTIFY carries ids).
#[tokio::test]
async fn two_consoles_share_events() -> anyhow::Result<()> {
    on_fresh_postgres(two_consoles_share_events_on).await
}

async fn two_consoles_share_events_on(db: String) -> anyhow::Result<()> {
    let one = console_on(Some(db.clone())).await?;
    let two = console_on(Some(db)).await?;
    let on_two = Who::agent(&two, SHARED_TOKEN);
    let listening = open_events(&on_two, None, "").await?;
    let ada = Who::person(&one, ADA).await?;
    ada.post("/api/v1/projects", json!({"key": "TWO", "name": "Two"}))
        .await?;
    ada.post(
        "/api/v1/issues",
        json!({"project": "TWO", "title": "from one"}),
    )
    .await?;
    let got = events_of(listening, 2, 15).await?;
    let kinds: Vec<&str> = got.iter().map(|e| e.1.as_str()).collect();
    assert_eq!(kinds, ["project.created", "issue.created"]);
    one.stop().await;
    two.stop().await;
    Ok(())
}

/// Personal tokens (protocol §3.1): `csp_` and 43 characters, an optional expiry at most 365
/// days ahead, shown once; the list shows the expiry and no token.
#[tokio::test]
async fn personal_tokens_with_an_expiry() -> anyhow::Result<()> {
    let console = console_on(None).await?;
    let ada = Who::person(&console, ADA).await?;
    let soon = (chrono::Utc::now() + chrono::Duration::hours(1))
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let r = ada
        .post(
            "/api/v1/agent-tokens",
            json!({"name": "ci", "expires_at": soon}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let token = r.json["token"].as_str().unwrap_or("").to_owned();
    assert!(token.starts_with("csp_") && token.len() == 47, "{token}");
    assert_eq!(r.json["expires_at"].as_str(), Some(soon.as_str()));
    let me = Who::agent(&console, &token).get("/api/v1/me").await?;
    assert_eq!(me.json["owner"], ADA);
    let list = ada.get("/api/v1/agent-tokens").await?;
    assert_eq!(list.json[0]["expires_at"].as_str(), Some(soon.as_str()));
    assert!(list.json[0].get("token").is_none());
    for bad in ["2020-01-01T00:00:00Z", "not a time"] {
        refused(
            &ada.post("/api/v1/agent-tokens", json!({"expires_at": bad}))
                .await?,
            400,
            "TOKEN_INPUT",
        );
    }
    let far = (chrono::Utc::now() + chrono::Duration::days(366)).to_rfc3339();
    refused(
        &ada.post("/api/v1/agent-tokens", json!({"expires_at": far}))
            .await?,
        400,
        "TOKEN_INPUT",
    );
    console.stop().await;
    Ok(())
}

mod link {
    //! The session link (protocol §4.2) with a real WebSocket client.

    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;

    use super::*;

    type Ws = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;

    async fn open(console: &TestConsole, session: &str, token: &str) -> anyhow::Result<Ws> {
        let url = format!(
            "{}/link/v1/sessions/{session}",
            console.url.replace("http://", "ws://")
        );
        let mut req = url.into_client_request()?;
        req.headers_mut()
            .insert("authorization", format!("Bearer {token}").parse()?);
        req.headers_mut()
            .insert("sec-websocket-protocol", "countersign.link.v1".parse()?);
        let (ws, resp) = tokio_tungstenite::connect_async(req).await?;
        assert_eq!(
            resp.headers()
                .get("sec-websocket-protocol")
                .and_then(|v| v.to_str().ok()),
            Some("countersign.link.v1")
        );
        Ok(ws)
    }

    async fn next_json(ws: &mut Ws) -> anyhow::Result<Value> {
        loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await? {
                Some(Ok(Message::Text(t))) => return Ok(serde_json::from_str(&t)?),
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                other => anyhow::bail!("expected a message, got {other:?}"),
            }
        }
    }

    async fn closed_with(ws: &mut Ws) -> anyhow::Result<u16> {
        loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await? {
                Some(Ok(Message::Close(Some(f)))) => return Ok(u16::from(f.code)),
                Some(Ok(_)) => continue,
                other => anyhow::bail!("expected a close, got {other:?}"),
            }
        }
    }

    async fn hello(ws: &mut Ws, roles: &[&str]) -> anyhow::Result<Value> {
        ws.send(Message::Text(
            json!({"type": "hello", "title": "reviewing", "roles": roles, "capabilities": ["relay"], "modes": ["send", "steer"]})
                .to_string()
                .into(),
        ))
        .await?;
        next_json(ws).await
    }

    #[tokio::test]
    async fn sessions_are_live_while_linked() -> anyhow::Result<()> {
        let console = console_on(None).await?;
        let ada = Who::person(&console, ADA).await?;
        let agent = Who::agent(&console, SHARED_TOKEN);
        ada.post("/api/v1/projects", json!({"key": "LNK", "name": "Links"}))
            .await?;
        ada.post(
            "/api/v1/issues",
            json!({"project": "LNK", "title": "review me", "route": "reviewer"}),
        )
        .await?;
        assert_eq!(
            agent.get("/api/v1/issues/LNK-1").await?.json["route_status"],
            "no_holder"
        );

        let mut s1 = open(&console, "s1", SHARED_TOKEN).await?;
        let w = hello(&mut s1, &["reviewer"]).await?;
        assert_eq!(
            w,
            json!({"type": "welcome", "session_id": "s1", "ping_seconds": 20})
        );
        let live = agent.get("/api/v1/sessions").await?;
        assert_eq!(live.json[0]["session_id"], "s1", "{}", live.text);
        assert_eq!(live.json[0]["roles"], json!(["reviewer"]));
        assert_eq!(live.json[0]["modes"], json!(["send", "steer"]));
        assert_eq!(
            agent.get("/api/v1/issues/LNK-1").await?.json["route_status"],
            "live"
        );
        assert_eq!(
            agent
                .get("/api/v1/issues?route_status=live")
                .await?
                .json
                .as_array()
                .map(Vec::len),
            Some(1)
        );

        // A live session's claim holds against another session.
        assert_eq!(
            agent
                .post("/api/v1/issues/LNK-1/claim", json!({"actor": "s1"}))
                .await?
                .status,
            200
        );
        let r = agent
            .post("/api/v1/issues/LNK-1/claim", json!({"actor": "s2"}))
            .await?;
        refused(&r, 409, "ISSUE_CLAIMED");
        assert_eq!(r.json["holder"]["session"], "s1");

        // An update replaces what it advertises.
        s1.send(Message::Text(
            json!({"type": "update", "roles": ["builder"]})
                .to_string()
                .into(),
        ))
        .await?;
        super::super::common::eventually(10, || async {
            let l = agent.get("/api/v1/sessions").await?;
            Ok((l.json[0]["roles"] == json!(["builder"])).then_some(()))
        })
        .await?;

        // A newer link for the session closes the older with 4409.
        let mut again = open(&console, "s1", SHARED_TOKEN).await?;
        hello(&mut again, &["reviewer"]).await?;
        assert_eq!(closed_with(&mut s1).await?, 4409);
        // Closing the link ends the session: its claim no longer holds.
        again.close(None).await?;
        super::super::common::eventually(10, || async {
            let l = agent.get("/api/v1/sessions").await?;
            Ok(l.json.as_array().is_some_and(Vec::is_empty).then_some(()))
        })
        .await?;
        let c = agent
            .post("/api/v1/issues/LNK-1/claim", json!({"actor": "s2"}))
            .await?;
        assert_eq!(c.json["holder"]["session"], "s2", "{}", c.text);
        let events = read_events(&agent, Some(0), "", 20, 5).await?;
        let kinds: Vec<&str> = events
            .iter()
            .map(|e| e.1.as_str())
            .filter(|k| k.starts_with("session."))
            .collect();
        assert_eq!(
            kinds,
            [
                "session.live",
                "session.updated",
                "session.live",
                "session.gone"
            ]
        );
        console.stop().await;
        Ok(())
    }

    #[tokio::test]
    async fn link_refusals() -> anyhow::Result<()> {
        let console = console_on(None).await?;
        // A bad hello: 4400.
        let mut ws = open(&console, "s1", SHARED_TOKEN).await?;
        ws.send(Message::Text(
            json!({"type": "hello", "title": "t", "roles": ["Bad Role"]})
                .to_string()
                .into(),
        ))
        .await?;
        assert_eq!(closed_with(&mut ws).await?, 4400);
        let mut ws = open(&console, "s1", SHARED_TOKEN).await?;
        ws.send(Message::Text("not json".into())).await?;
        assert_eq!(closed_with(&mut ws).await?, 4400);
        // A browser session: 403 AGENT_ONLY; no credential: 401; no subprotocol: 400; a bad id.
        let ada = Who::person(&console, ADA).await?;
        let r = ada.get("/link/v1/sessions/s1").await?;
        refused(&r, 403, "AGENT_ONLY");
        let r = Resp::read(
            reqwest::Client::new()
                .get(format!("{}/link/v1/sessions/s1", console.url))
                .send()
                .await?,
        )
        .await?;
        refused(&r, 401, "UNAUTHENTICATED");
        let url = format!(
            "{}/link/v1/sessions/s1",
            console.url.replace("http://", "ws://")
        );
        let mut req = url.into_client_request()?;
        req.headers_mut()
            .insert("authorization", format!("Bearer {SHARED_TOKEN}").parse()?);
        assert!(tokio_tungstenite::connect_async(req).await.is_err());
        let r = Who::agent(&console, SHARED_TOKEN)
            .get("/link/v1/sessions/a%20b")
            .await?;
        refused(&r, 400, "INVALID_SESSION_ID");
        console.stop().await;
        Ok(())
    }
}

/// An issue edited through the API appears changed on an open issue page without a reload, and
/// on the project's issue list; user text reaches the page as text.
#[tokio::test]
async fn issue_page_follows_the_event_stream() -> anyhow::Result<()> {
    use crate::common::webdriver::{Driver, browser_or_skip};
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
    let agent = Who::agent(&console, SHARED_TOKEN);
    agent
        .post(
            "/api/v1/projects",
            json!({"key": "WEB", "name": "Web", "actor": "s1"}),
        )
        .await?;
    let nasty = "<b>bold</b> & \"quoted\"";
    agent
        .post(
            "/api/v1/issues",
            json!({"project": "WEB", "title": nasty, "labels": ["ui"]}),
        )
        .await?;
    agent
        .post(
            "/api/v1/issues",
            json!({"project": "WEB", "title": "child", "parent": "WEB-1"}),
        )
        .await?;

    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let ada = driver
        .browser(&chromium, &profiles.path().join("ada"))
        .await?;
    let url = |p: &str| format!("{}{p}", console.url);
    idp.set_next_login(ADA);
    ada.goto(&url("/issues/WEB-1")).await?;
    ada.click("#oidc").await?;
    ada.wait_text("#title", "bold", 10).await?;
    assert_eq!(
        ada.execute("return document.querySelectorAll('#title b').length")
            .await?,
        json!(0),
        "the title's markup reached the page as markup"
    );
    ada.wait_text("#children", "WEB-2", 5).await?;
    ada.wait_text("#timeline", "created the issue", 5).await?;
    // Mark the document: a reload would lose it.
    ada.execute("document.body.setAttribute('data-not-reloaded', '1'); return 1")
        .await?;

    agent
        .patch(
            "/api/v1/issues/WEB-1",
            json!({"title": "Renamed by an agent", "status": "in_review", "actor": "s1"}),
        )
        .await?;
    ada.wait_text("#title", "Renamed by an agent", 10).await?;
    // The issue page writes its history in words (issue 27).
    ada.wait_text("#timeline", "changed status from", 5).await?;
    agent
        .post("/api/v1/issues/WEB-1/claim", json!({"actor": "s1"}))
        .await?;
    ada.wait_text("#claim", "session s1", 10).await?;
    assert_eq!(
        ada.execute("return document.body.getAttribute('data-not-reloaded')")
            .await?,
        json!("1"),
        "the page was reloaded"
    );
    ada.screenshot(&crate::browser::shots().join("issue-live.png"))
        .await?;

    // The project's list, filtered, follows too.
    ada.goto(&url("/projects/WEB/issues?status=todo")).await?;
    ada.wait_text("#list", "child", 10).await?;
    ada.execute("document.body.setAttribute('data-not-reloaded', '1'); return 1")
        .await?;
    agent
        .post(
            "/api/v1/issues",
            json!({"project": "WEB", "title": "a third one"}),
        )
        .await?;
    ada.wait_text("#list", "a third one", 10).await?;
    assert_eq!(
        ada.execute("return document.body.getAttribute('data-not-reloaded')")
            .await?,
        json!("1")
    );
    ada.quit().await;
    console.stop().await;
    Ok(())
}

/// Per-issue read state (forward only, pins) and the sessions subscribed to an issue (those
/// that acted there; an unsubscribe holds until the session acts again).
async fn read_state_and_subscribers(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    ada.post(
        "/api/v1/projects",
        json!({"key": "RS", "name": "Read state"}),
    )
    .await?;
    agent
        .post(
            "/api/v1/issues",
            json!({"project": "RS", "title": "one", "actor": "s1"}),
        )
        .await?;
    agent
        .patch(
            "/api/v1/issues/RS-1",
            json!({"title": "one!", "actor": "s2"}),
        )
        .await?;
    agent
        .patch(
            "/api/v1/issues/RS-1",
            json!({"title": "one!!", "actor": "s1"}),
        )
        .await?;

    let subs = |r: &Resp| -> Vec<String> {
        r.json
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s["session_id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let r = ada.get("/api/v1/issues/RS-1/subscribers").await?;
    assert_eq!(subs(&r), ["s1", "s2"], "{}", r.text);
    assert!(r.json[0]["since"].is_string());
    refused(
        &agent.get("/api/v1/issues/RS-1/subscribers").await?,
        403,
        "HUMAN_ONLY",
    );
    assert_eq!(
        ada.call(Method::DELETE, "/api/v1/issues/RS-1/subscribers/s1", None)
            .await?
            .status,
        204
    );
    assert_eq!(
        subs(&ada.get("/api/v1/issues/RS-1/subscribers").await?),
        ["s2"]
    );
    // Unsubscribing one that is not subscribed: done already.
    assert_eq!(
        ada.call(Method::DELETE, "/api/v1/issues/RS-1/subscribers/s9", None)
            .await?
            .status,
        204
    );
    refused(
        &ada.call(
            Method::DELETE,
            "/api/v1/issues/RS-1/subscribers/a%20b",
            None,
        )
        .await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &ada.call(Method::DELETE, "/api/v1/issues/RS-9/subscribers/s1", None)
            .await?,
        404,
        "NOT_FOUND",
    );
    agent
        .post("/api/v1/issues/RS-1/claim", json!({"actor": "s1"}))
        .await?;
    assert_eq!(
        subs(&ada.get("/api/v1/issues/RS-1/subscribers").await?),
        ["s2", "s1"]
    );
    let events = read_events(&agent, Some(0), "", 6, 5).await?;
    let removed: Vec<&Value> = events
        .iter()
        .filter(|e| e.1 == "subscription.removed")
        .map(|e| &e.2["data"])
        .collect();
    assert_eq!(removed.len(), 1);
    assert_eq!(
        (
            removed[0]["session_id"].as_str(),
            removed[0]["issue"].as_str()
        ),
        (Some("s1"), Some("RS-1"))
    );

    // Read state: forward only, at most the last sequence, pins feed `pinned=true`.
    assert_eq!(ada.get("/api/v1/inbox/issues").await?.json, json!([]));
    let last = agent.get("/api/v1/issues/RS-1").await?.json["sequence"]
        .as_i64()
        .unwrap_or(0);
    let r = ada
        .patch("/api/v1/inbox/issues/RS-1", json!({"read_sequence": 1}))
        .await?;
    assert_eq!(
        r.json,
        json!({"key": "RS-1", "read_sequence": 1, "last_sequence": last, "unread": true, "pinned": false}),
        "{}",
        r.text
    );
    let r = ada
        .patch("/api/v1/inbox/issues/RS-1", json!({"read_sequence": 0}))
        .await?;
    assert_eq!(r.json["read_sequence"], 1);
    let r = ada
        .patch(
            "/api/v1/inbox/issues/RS-1",
            json!({"read_sequence": 999, "pinned": true}),
        )
        .await?;
    assert_eq!(
        (
            r.json["read_sequence"].as_i64(),
            r.json["unread"].as_bool(),
            r.json["pinned"].as_bool()
        ),
        (Some(last), Some(false), Some(true))
    );
    let pinned = ada.get("/api/v1/issues?pinned=true").await?;
    assert_eq!(pinned.json[0]["key"], "RS-1", "{}", pinned.text);
    assert_eq!(
        ada.get("/api/v1/inbox/issues").await?.json[0]["pinned"],
        true
    );
    refused(
        &ada.patch("/api/v1/inbox/issues/RS-1", json!({"read": 1}))
            .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.patch("/api/v1/inbox/issues/RS-9", json!({"pinned": true}))
            .await?,
        404,
        "NOT_FOUND",
    );
    refused(&agent.get("/api/v1/inbox/issues").await?, 403, "HUMAN_ONLY");
    // Another person's state is their own.
    let bob = Who::person(&console, BOB).await?;
    assert_eq!(bob.get("/api/v1/inbox/issues").await?.json, json!([]));
    console.stop().await;
    Ok(())
}

#[tokio::test]
async fn read_state_and_subscribers_sqlite() -> anyhow::Result<()> {
    read_state_and_subscribers(None).await
}

#[tokio::test]
async fn read_state_and_subscribers_postgres() -> anyhow::Result<()> {
    on_fresh_postgres(|db| read_state_and_subscribers(Some(db))).await
}

/// Search (SQLite FTS5, PostgreSQL full text) through reciprocal rank fusion, with paging,
/// totals, the spec's refusals, and `advice.suggestions` on a new issue.
async fn search(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    ada.post(
        "/api/v1/projects",
        json!({"key": "PAY", "name": "Payments"}),
    )
    .await?;
    ada.post(
        "/api/v1/projects",
        json!({"key": "OPS", "name": "Operations"}),
    )
    .await?;
    for (p, t) in [
        ("PAY", "Refund a partial payment"),
        ("PAY", "Refund fees twice"),
        ("OPS", "Rotate the refund service keys"),
        ("OPS", "Upgrade PostgreSQL"),
    ] {
        let r = ada
            .post("/api/v1/issues", json!({"project": p, "title": t}))
            .await?;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    // A new issue is answered with the most similar existing ones, never itself.
    let r = ada
        .post(
            "/api/v1/issues",
            json!({"project": "PAY", "title": "Refund in another currency", "labels": ["refund"]}),
        )
        .await?;
    let sugg = r.json["advice"]["suggestions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(!sugg.is_empty() && sugg.len() <= 3, "{}", r.text);
    assert!(
        sugg.iter().all(|s| s["ref"]
            .as_str()
            .is_some_and(|x| x.starts_with("countersign://issue/"))
            && s["ref"] != "countersign://issue/PAY-3"),
        "{}",
        r.text
    );
    assert!(
        sugg.iter().all(|s| s["title"]
            .as_str()
            .is_some_and(|t| t.to_lowercase().contains("refund"))),
        "{}",
        r.text
    );

    // A word only one issue held when it was last counted (that issue's own advice counted
    // it): the next issue with it is advised that one first, however recent the count.
    for (title, expect) in [
        ("Quokka fixtures for the load tests", None),
        ("Quokka fixtures", Some("countersign://issue/OPS-3")),
    ] {
        let r = ada
            .post("/api/v1/issues", json!({"project": "OPS", "title": title}))
            .await?;
        assert_eq!(r.status, 201, "{}", r.text);
        assert_eq!(
            r.json["advice"]["suggestions"][0]["ref"].as_str(),
            expect.or(r.json["advice"]["suggestions"][0]["ref"].as_str()),
            "{}",
            r.text
        );
    }

    let s = agent.get("/api/v1/search?q=refund").await?;
    assert_eq!(s.status, 200, "{}", s.text);
    assert_eq!(
        (
            s.json["total"].as_i64(),
            s.json["reachable"].as_i64(),
            s.json["limit"].as_i64(),
            s.json["offset"].as_i64()
        ),
        (Some(4), Some(4), Some(20), Some(0))
    );
    let row = &s.json["rows"][0];
    assert_eq!(row["kind"], "issue");
    assert!(
        row["ref"].as_str().is_some_and(
            |r| r == format!("countersign://issue/{}", row["id"].as_str().unwrap_or(""))
        )
    );
    assert!(
        row["snippet"]
            .as_str()
            .is_some_and(|x| x.to_lowercase().contains("refund")),
        "{}",
        s.text
    );
    assert!(row["at"].is_string());
    // Every word must match; a project narrows; labels are indexed.
    let ids = |r: &Resp| -> Vec<String> {
        r.json["rows"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x["id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    assert_eq!(
        ids(&agent.get("/api/v1/search?q=refund%20fees").await?),
        ["PAY-2"]
    );
    let mut ops = ids(&agent.get("/api/v1/search?q=refund&project=OPS").await?);
    ops.sort();
    assert_eq!(ops, ["OPS-1"]);
    assert_eq!(
        ids(&agent.get("/api/v1/search?q=currency").await?),
        ["PAY-3"]
    );
    // Paging cuts the fused list.
    let all = ids(&agent.get("/api/v1/search?q=refund").await?);
    let page = agent
        .get("/api/v1/search?q=refund&limit=2&offset=1")
        .await?;
    assert_eq!(ids(&page), all[1..3].to_vec());
    assert_eq!(page.json["total"], 4);
    // An edit reaches the index.
    ada.patch(
        "/api/v1/issues/OPS-2",
        json!({"title": "Upgrade PostgreSQL for refunds"}),
    )
    .await?;
    assert_eq!(
        ids(&agent.get("/api/v1/search?q=refunds%20postgresql").await?),
        ["OPS-2"]
    );
    assert_eq!(
        agent
            .get("/api/v1/search?q=nothing%20like%20this")
            .await?
            .json["total"],
        0
    );
    // Refusals.
    refused(
        &agent
            .get(&format!("/api/v1/search?q={}", "x".repeat(1001)))
            .await?,
        400,
        "CAP_EXCEEDED",
    );
    refused(
        &agent.get("/api/v1/search?q=a&project=pay").await?,
        400,
        "INVALID_PROJECT",
    );
    refused(
        &agent.get("/api/v1/search?q=a&limit=51").await?,
        400,
        "INVALID_QUERY",
    );
    refused(&agent.get("/api/v1/search").await?, 400, "INVALID_QUERY");
    refused(
        &agent.get("/api/v1/search?q=a&sort=new").await?,
        400,
        "INVALID_QUERY",
    );
    // Query syntax is words, never the index's own operators.
    assert_eq!(
        agent
            .get("/api/v1/search?q=%22refund%22%20OR%20*")
            .await?
            .status,
        200
    );
    console.stop().await;
    Ok(())
}

#[tokio::test]
async fn search_sqlite() -> anyhow::Result<()> {
    search(None).await
}

#[tokio::test]
async fn search_postgres() -> anyhow::Result<()> {
    on_fresh_postgres(|db| search(Some(db))).await
}
