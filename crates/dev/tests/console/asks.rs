//! The asks routes end to end, on SQLite and PostgreSQL: asks on issues and every state move
//! (and every refusal of a wrong one), lists and counts, followers and recipients, the inbox by
//! whose turn, snoozes, the caller's answers, comments and threads, search and the events.

use reqwest::Method;
use serde_json::{Value, json};

use crate::common::*;
use crate::on_both_databases;

/// A project `ASK` with issues `ASK-1` (assigned to Ada), `ASK-2` (to Bob) and `ASK-3`
/// (nobody's), Bob having signed in.
async fn setup(console: &TestConsole) -> anyhow::Result<(Who, Who, Who)> {
    let ada = Who::person(console, ADA).await?;
    let bob = Who::person(console, BOB).await?;
    let agent = Who::agent(console, SHARED_TOKEN);
    let r = ada
        .post("/api/v1/projects", json!({"key": "ASK", "name": "Asks"}))
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    for (title, assignee) in [
        ("refund flow", json!(ADA)),
        ("ledger export", json!(BOB)),
        ("nobody's", Value::Null),
    ] {
        let r = ada
            .post(
                "/api/v1/issues",
                json!({"project": "ASK", "title": title, "assignee": assignee}),
            )
            .await?;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    // ASK-3: clear the assignee the creator got by default.
    let r = ada
        .patch("/api/v1/issues/ASK-3", json!({"assignee": null}))
        .await?;
    assert_eq!(r.json["assignee"], Value::Null, "{}", r.text);
    Ok((ada, bob, agent))
}

/// Opens an ask as session `s1` and answers its id.
async fn open(agent: &Who, issue: &str, question: &str, options: Value) -> anyhow::Result<String> {
    let r = agent
        .post(
            &format!("/api/v1/issues/{issue}/asks"),
            json!({"question": question, "options": options, "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    Ok(r.json["id"].as_str().unwrap_or_default().to_owned())
}

fn ids(rows: &Value) -> Vec<String> {
    rows.as_array()
        .map(|a| {
            a.iter()
                .map(|r| r["id"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

async fn ask_states(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, _bob, agent) = setup(&console).await?;

    // Open: ids given, else their positions; advice on the answer; Location.
    let r = agent
        .post(
            "/api/v1/issues/ASK-1/asks",
            json!({"question": "Refund partial captures?", "options": [{"id": "yes", "label": "Yes"}, {"label": "No"}], "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(r.location(), Some(format!("/api/v1/asks/{id}")));
    assert_eq!(r.json["kind"], "question");
    assert_eq!(r.json["state"], "open");
    assert_eq!(r.json["issue"], "ASK-1");
    assert_eq!(
        r.json["options"],
        json!([{"id": "yes", "label": "Yes"}, {"id": "2", "label": "No"}])
    );
    assert_eq!(r.json["author"]["session"], "s1");
    assert_eq!(r.json["advice"]["suggestions"], json!([]));
    assert_eq!(r.json["history"], json!([]));
    assert_eq!(r.json["replies"], json!([]));
    assert_eq!(r.json["turn"], "human");

    // Reword: its author's session or a person; another session SESSION_FORBIDDEN, none
    // INVALID_SESSION_ID.
    refused(
        &agent
            .patch(
                &format!("/api/v1/asks/{id}"),
                json!({"question": "x", "actor": "s2"}),
            )
            .await?,
        403,
        "SESSION_FORBIDDEN",
    );
    refused(
        &agent
            .patch(&format!("/api/v1/asks/{id}"), json!({"question": "x"}))
            .await?,
        400,
        "INVALID_SESSION_ID",
    );
    let r = agent
        .patch(
            &format!("/api/v1/asks/{id}"),
            json!({"question": "Refund partial captures too?", "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["question"], "Refund partial captures too?");
    assert_eq!(r.json["history"][0]["question"], "Refund partial captures?");
    assert_eq!(r.json["history"][0]["by"]["session"], "s1");
    let r = ada
        .patch(
            &format!("/api/v1/asks/{id}"),
            json!({"options": [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}]}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json["history"][1]["question"],
        "Refund partial captures too?"
    );
    assert_eq!(r.json["history"][1]["by"]["session"], "s1");
    assert_eq!(r.json["options"][1]["id"], "no");

    // Answer: a person only, with options and/or text.
    refused(
        &agent
            .post(
                &format!("/api/v1/asks/{id}/answer"),
                json!({"options": ["yes"]}),
            )
            .await?,
        403,
        "HUMAN_ONLY",
    );
    refused(
        &ada.post(&format!("/api/v1/asks/{id}/answer"), json!({}))
            .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.post(
            &format!("/api/v1/asks/{id}/answer"),
            json!({"options": ["maybe"]}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.post(
            &format!("/api/v1/asks/{id}/answer"),
            json!({"text": "x".repeat(65_537)}),
        )
        .await?,
        400,
        "CAP_EXCEEDED",
    );
    let r = ada
        .post(
            &format!("/api/v1/asks/{id}/answer"),
            json!({"options": ["yes"]}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["state"], "answered");
    assert_eq!(r.json["answer"]["options"], json!(["yes"]));
    assert_eq!(
        r.json["answer"]["by"],
        json!({"kind": "user", "login": ADA})
    );
    // Answered is not open: nobody's turn, in no inbox (issue 27).
    assert_eq!(r.json["turn"], Value::Null);
    // answered → answered: the later answer is current, the earlier in the history.
    let r = ada
        .post(
            &format!("/api/v1/asks/{id}/answer"),
            json!({"options": ["no"], "text": "only full captures"}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["answer"]["text"], "only full captures");
    assert_eq!(r.json["answers"][0]["options"], json!(["yes"]));
    assert_eq!(r.json["answers"][0]["current"], false);
    assert_eq!(r.json["answers"][1]["current"], true);
    // answered: no reword, no close.
    let r = agent
        .patch(
            &format!("/api/v1/asks/{id}"),
            json!({"question": "x", "actor": "s1"}),
        )
        .await?;
    refused(&r, 409, "ASK_STATE");
    assert_eq!(r.json["state"], "answered");
    refused(
        &agent
            .post(
                &format!("/api/v1/asks/{id}/close"),
                json!({"state": "resolved", "actor": "s1"}),
            )
            .await?,
        409,
        "ASK_STATE",
    );

    // open → retracted; then nothing moves it.
    let a2 = open(&agent, "ASK-1", "Ship on Friday?", json!([])).await?;
    let r = agent
        .post(
            &format!("/api/v1/asks/{a2}/close"),
            json!({"state": "retracted", "note": "moot", "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["state"], "retracted");
    assert_eq!(r.json["closed"]["note"], "moot");
    assert_eq!(r.json["turn"], Value::Null);
    for (m, path, body) in [
        (
            Method::POST,
            format!("/api/v1/asks/{a2}/answer"),
            json!({"text": "yes"}),
        ),
        (
            Method::PATCH,
            format!("/api/v1/asks/{a2}"),
            json!({"question": "x"}),
        ),
        (
            Method::POST,
            format!("/api/v1/asks/{a2}/close"),
            json!({"state": "resolved"}),
        ),
        (
            Method::POST,
            format!("/api/v1/asks/{a2}/close"),
            json!({"state": "retracted"}),
        ),
    ] {
        let r = ada.call(m, &path, Some(body)).await?;
        refused(&r, 409, "ASK_STATE");
        assert_eq!(r.json["state"], "retracted");
    }
    // open → resolved; then nothing moves it.
    let a3 = open(&agent, "ASK-1", "Use the new ledger?", json!([])).await?;
    let r = ada
        .post(
            &format!("/api/v1/asks/{a3}/close"),
            json!({"state": "resolved"}),
        )
        .await?;
    assert_eq!(r.json["state"], "resolved", "{}", r.text);
    for (m, path, body) in [
        (
            Method::POST,
            format!("/api/v1/asks/{a3}/answer"),
            json!({"text": "yes"}),
        ),
        (
            Method::PATCH,
            format!("/api/v1/asks/{a3}"),
            json!({"question": "x"}),
        ),
        (
            Method::POST,
            format!("/api/v1/asks/{a3}/close"),
            json!({"state": "retracted"}),
        ),
    ] {
        let r = ada.call(m, &path, Some(body)).await?;
        refused(&r, 409, "ASK_STATE");
        assert_eq!(r.json["state"], "resolved");
    }
    refused(
        &ada.post(
            &format!("/api/v1/asks/{a3}/close"),
            json!({"state": "answered"}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );

    // Caps and shapes.
    for (body, status, code) in [
        (
            json!({"question": "q".repeat(2001), "actor": "s1"}),
            400,
            "CAP_EXCEEDED",
        ),
        (
            json!({"question": "q", "options": (0..21).map(|i| json!({"label": format!("o{i}")})).collect::<Vec<_>>()}),
            400,
            "CAP_EXCEEDED",
        ),
        (
            json!({"question": "q", "options": [{"label": "l".repeat(201)}]}),
            400,
            "CAP_EXCEEDED",
        ),
        (
            json!({"question": "q", "options": [{"id": "no spaces", "label": "x"}]}),
            400,
            "INVALID_BODY",
        ),
        (
            json!({"question": "q", "options": [{"id": "a", "label": "x"}, {"id": "a", "label": "y"}]}),
            400,
            "INVALID_BODY",
        ),
        (json!({"question": "  "}), 400, "INVALID_BODY"),
        (json!({"question": "q", "block": "b1"}), 400, "INVALID_BODY"),
        (
            json!({"question": "q", "colour": "red"}),
            400,
            "INVALID_BODY",
        ),
        (
            json!({"question": "q", "actor": "a b"}),
            400,
            "INVALID_SESSION_ID",
        ),
    ] {
        refused(
            &agent.post("/api/v1/issues/ASK-1/asks", body).await?,
            status,
            code,
        );
    }
    // 2,000 characters and 20 options are fine.
    let r = agent
        .post(
            "/api/v1/issues/ASK-1/asks",
            json!({"question": "é".repeat(2000), "options": (0..20).map(|i| json!({"label": "l".repeat(200), "id": format!("o{i}")})).collect::<Vec<_>>()}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    refused(
        &agent
            .post("/api/v1/issues/ASK-9/asks", json!({"question": "q"}))
            .await?,
        404,
        "NOT_FOUND",
    );
    for path in [
        "/api/v1/asks/nope",
        "/api/v1/asks/6f1c0a4e-0000-4000-8000-000000000000",
    ] {
        refused(&agent.get(path).await?, 404, "NOT_FOUND");
    }
    // Read: any case of the id.
    let r = agent
        .get(&format!("/api/v1/asks/{}", id.to_uppercase()))
        .await?;
    assert_eq!(r.json["id"], id.as_str(), "{}", r.text);
    assert_eq!(r.json["answers"].as_array().map(Vec::len), Some(2));

    // Advice: an answered ask in the project that may settle a new one, who answered, when.
    let r = agent
        .post(
            "/api/v1/issues/ASK-2/asks",
            json!({"question": "Should partial captures be refunded?", "actor": "s3"}),
        )
        .await?;
    let s = &r.json["advice"]["suggestions"];
    assert_eq!(s[0]["ask"], id.as_str(), "{}", r.text);
    assert_eq!(s[0]["by"]["login"], ADA);
    assert_eq!(
        s[0]["answer"]["options"],
        json!([{"id": "no", "label": "No"}])
    );
    assert_eq!(s[0]["answer"]["text"], "only full captures");
    assert!(s[0]["at"].is_string());

    // Every move appended its event to the issue's log.
    let log = agent.get("/api/v1/issues/ASK-1/events?limit=200").await?;
    let kinds: Vec<&str> = log
        .json
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["kind"].as_str()).collect())
        .unwrap_or_default();
    for k in [
        "ask.opened",
        "ask.reworded",
        "ask.answered",
        "ask.retracted",
        "ask.resolved",
    ] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    let answered = log
        .json
        .as_array()
        .and_then(|a| a.iter().find(|e| e["kind"] == "ask.answered"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(answered["data"]["id"], id.as_str());
    assert_eq!(answered["actor"]["login"], ADA);
    console.stop().await;
    Ok(())
}

on_both_databases!(ask_states, ask_states_sqlite, ask_states_postgres);

async fn lists_followers_recipients(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, _bob, agent) = setup(&console).await?;
    let a1 = open(&agent, "ASK-1", "first?", json!([])).await?;
    let a2 = open(&agent, "ASK-1", "second?", json!([])).await?;
    let r = agent
        .post(
            "/api/v1/issues/ASK-2/asks",
            json!({"question": "third?", "actor": "s2"}),
        )
        .await?;
    let a3 = r.json["id"].as_str().unwrap_or_default().to_owned();
    ada.post(&format!("/api/v1/asks/{a2}/answer"), json!({"text": "ok"}))
        .await?;

    // An issue's asks, by state.
    let all = agent.get("/api/v1/issues/ASK-1/asks").await?;
    assert_eq!(ids(&all.json), [a1.clone(), a2.clone()]);
    assert!(
        all.json[0].get("replies").is_none(),
        "lists carry no replies"
    );
    let open = agent.get("/api/v1/issues/ASK-1/asks?state=open").await?;
    assert_eq!(ids(&open.json), std::slice::from_ref(&a1));
    let both = agent
        .get("/api/v1/issues/ASK-1/asks?state=open&state=answered")
        .await?;
    assert_eq!(ids(&both.json).len(), 2);
    refused(
        &agent.get("/api/v1/issues/ASK-1/asks?state=shut").await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &agent.get("/api/v1/issues/ASK-1/asks?colour=red").await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &agent.get("/api/v1/issues/ASK-9/asks").await?,
        404,
        "NOT_FOUND",
    );

    // The issue's open asks, read and listed.
    let i = agent.get("/api/v1/issues/ASK-1").await?;
    assert_eq!(
        ids(&i.json["open_asks"]),
        std::slice::from_ref(&a1),
        "{}",
        i.text
    );
    let list = agent.get("/api/v1/issues?project=ASK").await?;
    assert_eq!(ids(&list.json[0]["open_asks"]), std::slice::from_ref(&a1));
    assert_eq!(ids(&list.json[1]["open_asks"]), std::slice::from_ref(&a3));
    assert_eq!(list.json[2]["open_asks"], json!([]));

    // The scope list: exactly one of author_session and project.
    let mine = agent.get("/api/v1/asks?author_session=s1").await?;
    assert_eq!(
        ids(&mine.json["asks"]),
        std::slice::from_ref(&a1),
        "{}",
        mine.text
    );
    assert_eq!(
        mine.json["counts"],
        json!({"asks": 1, "issues": 1, "artifacts": 0})
    );
    let project = agent.get("/api/v1/asks?project=ASK").await?;
    assert_eq!(ids(&project.json["asks"]), [a1.clone(), a3.clone()]);
    assert_eq!(
        project.json["counts"],
        json!({"asks": 2, "issues": 2, "artifacts": 0})
    );
    for q in ["", "?author_session=s1&project=ASK", "?project=ask"] {
        refused(
            &agent.get(&format!("/api/v1/asks{q}")).await?,
            400,
            "INVALID_QUERY",
        );
    }
    refused(
        &agent.get("/api/v1/asks?project=NONE").await?,
        404,
        "NOT_FOUND",
    );
    refused(
        &agent.get("/api/v1/asks?author_session=a%20b").await?,
        400,
        "INVALID_SESSION_ID",
    );

    // Followers: a bearer for its own session only, a person for any.
    let follow = |who: &Who, m: Method, session: &str, q: &str| {
        let (who, path) = (
            who.clone(),
            format!("/api/v1/asks/{a1}/followers/{session}{q}"),
        );
        async move { who.call(m, &path, None).await }
    };
    assert_eq!(
        follow(&agent, Method::PUT, "s5", "?session=s5")
            .await?
            .status,
        204
    );
    // Twice: the same, no second event.
    assert_eq!(
        follow(&agent, Method::PUT, "s5", "?session=s5")
            .await?
            .status,
        204
    );
    refused(
        &follow(&agent, Method::PUT, "s6", "?session=s5").await?,
        403,
        "SESSION_FORBIDDEN",
    );
    refused(
        &follow(&agent, Method::DELETE, "s5", "?session=s6").await?,
        403,
        "SESSION_FORBIDDEN",
    );
    refused(
        &follow(&agent, Method::PUT, "s6", "").await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &follow(&agent, Method::PUT, "a%20b", "?session=s5").await?,
        400,
        "INVALID_SESSION_ID",
    );
    assert_eq!(follow(&ada, Method::PUT, "s6", "").await?.status, 204);
    refused(
        &follow(&ada, Method::PUT, "s6", "?session=s6").await?,
        400,
        "INVALID_BODY",
    );
    let r = agent.get(&format!("/api/v1/asks/{a1}")).await?;
    assert_eq!(r.json["followers"], json!(["s5", "s6"]));
    assert_eq!(follow(&ada, Method::DELETE, "s6", "").await?.status, 204);
    assert_eq!(
        follow(&agent, Method::DELETE, "s6", "?session=s6")
            .await?
            .status,
        204
    );
    refused(
        &agent
            .call(
                Method::PUT,
                "/api/v1/asks/6f1c0a4e-0000-4000-8000-000000000000/followers/s5?session=s5",
                None,
            )
            .await?,
        404,
        "NOT_FOUND",
    );

    // Recipients: the author's session, followers, the issue's subscribers; each once.
    agent
        .post("/api/v1/issues/ASK-1/claim", json!({"actor": "s9"}))
        .await?;
    let r = agent.get(&format!("/api/v1/asks/{a1}/recipients")).await?;
    assert_eq!(
        r.json,
        json!([
            {"session_id": "s1", "via": "author"},
            {"session_id": "s5", "via": "follower"},
            {"session_id": "s9", "via": "subscriber"},
        ]),
        "{}",
        r.text
    );

    let log = agent.get("/api/v1/issues/ASK-1/events?limit=200").await?;
    let followed: Vec<&Value> = log
        .json
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|e| {
                    e["kind"]
                        .as_str()
                        .is_some_and(|k| k.starts_with("ask.f") || k.starts_with("ask.u"))
                })
                .collect()
        })
        .unwrap_or_default();
    let kinds: Vec<(&str, &str)> = followed
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap_or(""),
                e["data"]["session_id"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("ask.followed", "s5"),
            ("ask.followed", "s6"),
            ("ask.unfollowed", "s6")
        ]
    );
    assert_eq!(followed[0]["data"]["ask"], a1.as_str());
    console.stop().await;
    Ok(())
}

on_both_databases!(
    lists_followers_recipients,
    lists_followers_recipients_sqlite,
    lists_followers_recipients_postgres
);

async fn inbox_by_turn(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, bob, agent) = setup(&console).await?;
    let mine = open(&agent, "ASK-1", "on ada's issue?", json!([])).await?;
    let bobs = open(&agent, "ASK-2", "on bob's issue?", json!([])).await?;
    let nobodys = open(&agent, "ASK-3", "on nobody's issue?", json!([])).await?;
    ada.post("/api/v1/projects", json!({"key": "OTH", "name": "Other"}))
        .await?;
    ada.post(
        "/api/v1/issues",
        json!({"project": "OTH", "title": "elsewhere"}),
    )
    .await?;
    let other = open(&agent, "OTH-1", "in another project?", json!([])).await?;

    // No filter: the caller's and the unassigned, oldest turn first.
    let r = ada.get("/api/v1/inbox").await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        ids(&r.json["human_turn"]),
        [mine.clone(), nobodys.clone(), other.clone()]
    );
    assert_eq!(r.json["agent_turn"], json!([]));
    assert_eq!(r.json["snoozed"], json!([]));
    let row = &r.json["human_turn"][0];
    assert_eq!(row["ask"]["question"], "on ada's issue?");
    assert_eq!(row["issue"], "ASK-1");
    assert_eq!(row["snoozed_until"], Value::Null);
    assert!(row["turn_since"].is_string());
    // Filters.
    let r = ada.get("/api/v1/inbox?assignee=me").await?;
    assert_eq!(ids(&r.json["human_turn"]), [mine.clone(), other.clone()]);
    let r = ada.get("/api/v1/inbox?assignee=unassigned").await?;
    assert_eq!(ids(&r.json["human_turn"]), std::slice::from_ref(&nobodys));
    let r = ada.get(&format!("/api/v1/inbox?assignee={BOB}")).await?;
    assert_eq!(ids(&r.json["human_turn"]), std::slice::from_ref(&bobs));
    let r = ada.get("/api/v1/inbox?project=OTH").await?;
    assert_eq!(ids(&r.json["human_turn"]), std::slice::from_ref(&other));
    refused(
        &ada.get("/api/v1/inbox?assignee=carol@example.com").await?,
        400,
        "ASSIGNEE_NOT_ALLOWED",
    );
    refused(
        &ada.get("/api/v1/inbox?assignee=not-an-email").await?,
        400,
        "ASSIGNEE_NOT_ALLOWED",
    );
    refused(
        &ada.get("/api/v1/inbox?project=nope").await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &ada.get("/api/v1/inbox?colour=red").await?,
        400,
        "INVALID_QUERY",
    );
    refused(&agent.get("/api/v1/inbox").await?, 403, "HUMAN_ONLY");
    let r = bob.get("/api/v1/inbox").await?;
    assert_eq!(ids(&r.json["human_turn"]), [bobs.clone(), nobodys.clone()]);

    // Whose turn: answered, nobody's (the inbox lists open asks; issue 27), and the agent's
    // follow-up leaves it so.
    ada.post(
        &format!("/api/v1/asks/{mine}/answer"),
        json!({"text": "yes"}),
    )
    .await?;
    let r = ada.get("/api/v1/inbox").await?;
    assert_eq!(r.json["agent_turn"], json!([]), "{}", r.text);
    assert!(!ids(&r.json["human_turn"]).contains(&mine), "{}", r.text);
    let c = agent
        .post(
            "/api/v1/issues/ASK-1/comments",
            json!({"body": "thanks, done", "ask": mine, "actor": "s1"}),
        )
        .await?;
    assert_eq!(c.status, 201, "{}", c.text);
    let r = ada.get("/api/v1/inbox").await?;
    assert_eq!(r.json["agent_turn"], json!([]));
    // A person's reply on an open ask hands it to its agent; the agent's reply hands it back.
    ada.post(
        "/api/v1/issues/ASK-3/comments",
        json!({"body": "which ledger?", "ask": nobodys}),
    )
    .await?;
    let r = ada.get("/api/v1/inbox").await?;
    assert_eq!(ids(&r.json["agent_turn"]), std::slice::from_ref(&nobodys));
    agent
        .post(
            "/api/v1/issues/ASK-3/comments",
            json!({"body": "the new one", "ask": nobodys, "actor": "s1"}),
        )
        .await?;
    let r = ada.get("/api/v1/inbox").await?;
    assert_eq!(ids(&r.json["human_turn"]), [other.clone(), nobodys.clone()]);

    // Snooze: future, at most 365 days; a row under `snoozed` until then (the caller's only).
    let until = (chrono::Utc::now() + chrono::Duration::hours(2))
        .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    let path = format!("/api/v1/inbox/asks/{other}/snooze");
    let r = ada
        .call(Method::PUT, &path, Some(json!({"snoozed_until": until})))
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["id"], other.as_str());
    assert_eq!(r.json["snoozed_until"], until.as_str());
    let r = ada.get("/api/v1/inbox").await?;
    assert_eq!(ids(&r.json["snoozed"]), std::slice::from_ref(&other));
    assert_eq!(ids(&r.json["human_turn"]), std::slice::from_ref(&nobodys));
    let r = bob
        .get(&format!("/api/v1/inbox?project=OTH&assignee={ADA}"))
        .await?;
    assert_eq!(
        ids(&r.json["human_turn"]),
        std::slice::from_ref(&other),
        "Bob's inbox keeps it"
    );
    for when in [
        chrono::Utc::now() - chrono::Duration::minutes(1),
        chrono::Utc::now() + chrono::Duration::days(366),
    ] {
        let r = ada
            .call(
                Method::PUT,
                &path,
                Some(json!({"snoozed_until": when.to_rfc3339()})),
            )
            .await?;
        refused(&r, 400, "INVALID_STATE");
    }
    refused(
        &ada.call(
            Method::PUT,
            &path,
            Some(json!({"snoozed_until": "tomorrow"})),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.call(Method::PUT, &path, Some(json!({}))).await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &agent
            .call(Method::PUT, &path, Some(json!({"snoozed_until": until})))
            .await?,
        403,
        "HUMAN_ONLY",
    );
    // An ask that is nobody's turn is in no inbox.
    let r = ada
        .call(
            Method::PUT,
            &format!("/api/v1/inbox/asks/{mine}/snooze"),
            Some(json!({"snoozed_until": until})),
        )
        .await?;
    refused(&r, 409, "ASK_STATE");
    refused(
        &ada.call(
            Method::PUT,
            "/api/v1/inbox/asks/6f1c0a4e-0000-4000-8000-000000000000/snooze",
            Some(json!({"snoozed_until": until})),
        )
        .await?,
        404,
        "NOT_FOUND",
    );
    // Un-snooze: 204, back under its turn; again: 204.
    assert_eq!(ada.call(Method::DELETE, &path, None).await?.status, 204);
    assert_eq!(ada.call(Method::DELETE, &path, None).await?.status, 204);
    let r = ada.get("/api/v1/inbox").await?;
    assert_eq!(r.json["snoozed"], json!([]));
    assert_eq!(ids(&r.json["human_turn"]), [other.clone(), nobodys.clone()]);
    console.stop().await;
    Ok(())
}

on_both_databases!(inbox_by_turn, inbox_by_turn_sqlite, inbox_by_turn_postgres);

async fn answers_page(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, bob, agent) = setup(&console).await?;
    let a1 = open(
        &agent,
        "ASK-1",
        "one?",
        json!([{"id": "y", "label": "Yes"}]),
    )
    .await?;
    let a2 = open(&agent, "ASK-2", "two?", json!([])).await?;
    ada.post(
        &format!("/api/v1/asks/{a1}/answer"),
        json!({"options": ["y"]}),
    )
    .await?;
    let reply = ada
        .post(
            "/api/v1/issues/ASK-2/comments",
            json!({"body": "looking\nmore later", "ask": a2}),
        )
        .await?;
    ada.post(
        &format!("/api/v1/asks/{a1}/answer"),
        json!({"text": "on second thought"}),
    )
    .await?;
    bob.post(
        &format!("/api/v1/asks/{a2}/answer"),
        json!({"text": "bob's"}),
    )
    .await?;
    // A comment not on an ask is no reply here.
    ada.post("/api/v1/issues/ASK-1/comments", json!({"body": "plain"}))
        .await?;

    let r = ada.get("/api/v1/inbox/answers").await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        (
            r.json["total"].as_i64(),
            r.json["limit"].as_i64(),
            r.json["offset"].as_i64()
        ),
        (Some(3), Some(50), Some(0))
    );
    let rows = &r.json["rows"];
    assert_eq!(rows[0]["kind"], "answer");
    assert_eq!(
        rows[0]["answer"],
        json!({"options": [], "text": "on second thought", "current": true})
    );
    assert_eq!(rows[0]["ask"]["id"], a1.as_str());
    assert_eq!(rows[0]["ask"]["link"], format!("countersign://ask/{a1}"));
    assert_eq!(rows[0]["ask"]["owner"]["session"], "s1");
    assert_eq!(rows[0]["ask"]["state"], "answered");
    assert_eq!(rows[0]["reply"], Value::Null);
    assert_eq!(rows[1]["kind"], "reply");
    assert_eq!(rows[1]["reply"]["id"], reply.json["id"]);
    assert_eq!(rows[1]["reply"]["body"], "looking\nmore later");
    assert_eq!(rows[1]["ask"]["question"], "two?");
    assert_eq!(rows[2]["answer"]["current"], false);
    assert_eq!(rows[2]["answer"]["options"], json!(["y"]));
    let r = ada.get("/api/v1/inbox/answers?limit=1&offset=1").await?;
    assert_eq!(r.json["rows"].as_array().map(Vec::len), Some(1));
    assert_eq!(r.json["rows"][0]["kind"], "reply");
    assert_eq!(r.json["total"], 3);
    for q in ["limit=0", "limit=201", "offset=-1", "limit=x", "page=2"] {
        refused(
            &ada.get(&format!("/api/v1/inbox/answers?{q}")).await?,
            400,
            "INVALID_QUERY",
        );
    }
    refused(
        &agent.get("/api/v1/inbox/answers").await?,
        403,
        "HUMAN_ONLY",
    );
    let r = bob.get("/api/v1/inbox/answers").await?;
    assert_eq!(r.json["total"], 1);
    console.stop().await;
    Ok(())
}

on_both_databases!(answers_page, answers_page_sqlite, answers_page_postgres);

async fn comments_and_threads(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, _bob, agent) = setup(&console).await?;
    let ask = open(&agent, "ASK-1", "which currency?", json!([])).await?;

    let root = ada
        .post(
            "/api/v1/issues/ASK-1/comments",
            json!({"body": "Start with EUR.", "mentions": ["s1", "s2", "s1"]}),
        )
        .await?;
    assert_eq!(root.status, 201, "{}", root.text);
    let rid = root.json["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(root.location(), Some(format!("/api/v1/comments/{rid}")));
    assert_eq!(root.json["thread_id"], rid.as_str());
    assert_eq!(root.json["thread_state"], "open");
    assert_eq!(root.json["parent"], Value::Null);
    assert_eq!(root.json["author"], json!({"kind": "user", "login": ADA}));
    // Each mention once, each with its attempt (numbered per comment); neither is live.
    let m = &root.json["mentions"];
    assert_eq!(
        (&m[0]["session_id"], &m[1]["session_id"]),
        (&json!("s1"), &json!("s2"))
    );
    assert_eq!(m.as_array().map(Vec::len), Some(2));
    assert_eq!(m[0]["deliveries"][0]["attempt"], 1);
    assert_eq!(m[1]["deliveries"][0]["attempt"], 2);
    assert_eq!(m[1]["deliveries"][0]["state"], "failed");
    let reply = agent
        .post(
            "/api/v1/issues/ASK-1/comments",
            json!({"body": "EUR first, then GBP", "parent": rid, "actor": "s1"}),
        )
        .await?;
    assert_eq!(reply.status, 201, "{}", reply.text);
    assert_eq!(reply.json["thread_id"], rid.as_str());
    assert_eq!(reply.json["thread_state"], Value::Null);
    let on_ask = agent
        .post(
            "/api/v1/issues/ASK-1/comments",
            json!({"body": "context for the ask", "ask": ask, "actor": "s1"}),
        )
        .await?;
    assert_eq!(on_ask.json["ask"], ask.as_str(), "{}", on_ask.text);
    // The ask's replies.
    let a = agent.get(&format!("/api/v1/asks/{ask}")).await?;
    assert_eq!(a.json["replies"][0]["body"], "context for the ask");

    // Refusals.
    for (body, status, code) in [
        (json!({"body": ""}), 400, "INVALID_BODY"),
        (json!({"body": "x".repeat(65_537)}), 400, "CAP_EXCEEDED"),
        (
            json!({"body": "x", "mentions": ["a b"]}),
            400,
            "INVALID_SESSION_ID",
        ),
        (
            json!({"body": "x", "suggestion": {"replacement": "y"}}),
            400,
            "INVALID_BODY",
        ),
        (
            json!({"body": "x", "parent": rid, "ask": ask}),
            400,
            "INVALID_BODY",
        ),
        (
            json!({"body": "x", "parent": "6f1c0a4e-0000-4000-8000-000000000000"}),
            400,
            "INVALID_BODY",
        ),
        (
            json!({"body": "x", "ask": "6f1c0a4e-0000-4000-8000-000000000000"}),
            400,
            "INVALID_BODY",
        ),
        (json!({"body": "x", "colour": "red"}), 400, "INVALID_BODY"),
    ] {
        refused(
            &ada.post("/api/v1/issues/ASK-1/comments", body).await?,
            status,
            code,
        );
    }
    // A parent or ask of another issue.
    refused(
        &ada.post(
            "/api/v1/issues/ASK-2/comments",
            json!({"body": "x", "parent": rid}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.post(
            "/api/v1/issues/ASK-2/comments",
            json!({"body": "x", "ask": ask}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.post("/api/v1/issues/ASK-9/comments", json!({"body": "x"}))
            .await?,
        404,
        "NOT_FOUND",
    );
    // 65,536 characters are fine.
    let r = ada
        .post(
            "/api/v1/issues/ASK-2/comments",
            json!({"body": "é".repeat(65_536)}),
        )
        .await?;
    assert_eq!(r.status, 201);

    // List and read with the thread.
    let list = agent.get("/api/v1/issues/ASK-1/comments").await?;
    assert_eq!(list.json.as_array().map(Vec::len), Some(3), "{}", list.text);
    refused(
        &agent
            .get("/api/v1/issues/ASK-1/comments?artifact=x")
            .await?,
        400,
        "INVALID_QUERY",
    );
    let r = agent
        .get("/api/v1/issues/ASK-1/comments?artifact=6f1c0a4e-0000-4000-8000-000000000000")
        .await?;
    assert_eq!(r.json, json!([]));
    let t = agent
        .get(&format!(
            "/api/v1/comments/{}",
            reply.json["id"].as_str().unwrap_or("")
        ))
        .await?;
    assert_eq!(t.json["body"], "EUR first, then GBP");
    assert_eq!(
        ids(&t.json["thread"]),
        [
            rid.clone(),
            reply.json["id"].as_str().unwrap_or("").to_owned()
        ]
    );
    refused(&agent.get("/api/v1/comments/nope").await?, 404, "NOT_FOUND");

    // Edit: a person only; the same body changes nothing.
    let path = format!("/api/v1/comments/{rid}");
    refused(
        &agent.patch(&path, json!({"body": "x"})).await?,
        403,
        "HUMAN_ONLY",
    );
    refused(
        &ada.patch(&path, json!({"body": ""})).await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.patch(&path, json!({"body": "x".repeat(65_537)}))
            .await?,
        400,
        "CAP_EXCEEDED",
    );
    let r = ada
        .patch(&path, json!({"body": "Start with EUR, then GBP."}))
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json["edited_at"].is_string());

    // Resolve (anyone; a reply's id resolves its thread) and reopen (a person), idempotent.
    let rp = format!(
        "/api/v1/comments/{}/resolve",
        reply.json["id"].as_str().unwrap_or("")
    );
    let r = agent.post(&rp, json!({"actor": "s1"})).await?;
    assert_eq!(
        (r.status, &r.json["thread_state"]),
        (200, &json!("resolved")),
        "{}",
        r.text
    );
    assert_eq!(r.json["id"], rid.as_str());
    let r = ada.post(&rp, json!({})).await?;
    assert_eq!(
        (r.status, &r.json["thread_state"]),
        (200, &json!("resolved"))
    );
    refused(
        &agent.post(&format!("{path}/reopen"), json!({})).await?,
        403,
        "HUMAN_ONLY",
    );
    let r = ada.post(&format!("{path}/reopen"), json!({})).await?;
    assert_eq!((r.status, &r.json["thread_state"]), (200, &json!("open")));
    let r = ada.post(&format!("{path}/reopen"), json!({})).await?;
    assert_eq!((r.status, &r.json["thread_state"]), (200, &json!("open")));

    // A suggestion that is not there.
    let r = ada
        .post(&format!("{path}/suggestion/reject"), json!({}))
        .await?;
    refused(&r, 409, "SUGGESTION_STATE");
    assert_eq!(r.json["state"], "none");
    refused(
        &agent
            .post(&format!("{path}/suggestion/reject"), json!({}))
            .await?,
        403,
        "HUMAN_ONLY",
    );

    // The mentioned session's reply names itself; another session may not.
    let r = agent
        .post(
            &format!("{path}/replies"),
            json!({"actor": "s2", "body": "on it"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["parent"], rid.as_str());
    assert_eq!(r.json["thread_id"], rid.as_str());
    assert_eq!(r.json["author"]["session"], "s2");
    refused(
        &agent
            .post(
                &format!("{path}/replies"),
                json!({"actor": "s7", "body": "me too"}),
            )
            .await?,
        403,
        "SESSION_FORBIDDEN",
    );
    refused(
        &agent
            .post(&format!("{path}/replies"), json!({"body": "who?"}))
            .await?,
        400,
        "INVALID_SESSION_ID",
    );
    refused(
        &ada.post(&format!("{path}/replies"), json!({"body": "x"}))
            .await?,
        403,
        "AGENT_ONLY",
    );

    let log = agent.get("/api/v1/issues/ASK-1/events?limit=200").await?;
    let kinds: Vec<&str> = log
        .json
        .as_array()
        .map(|a| a.iter().filter_map(|e| e["kind"].as_str()).collect())
        .unwrap_or_default();
    for k in [
        "comment.created",
        "comment.edited",
        "comment.resolved",
        "comment.reopened",
    ] {
        assert!(kinds.contains(&k), "{k} in {kinds:?}");
    }
    assert_eq!(
        kinds.iter().filter(|k| **k == "comment.resolved").count(),
        1
    );
    console.stop().await;
    Ok(())
}

on_both_databases!(
    comments_and_threads,
    comments_and_threads_sqlite,
    comments_and_threads_postgres
);

async fn search_finds_asks_and_comments(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, _bob, agent) = setup(&console).await?;
    let a = open(&agent, "ASK-1", "Which kangaroo currency?", json!([])).await?;
    let c = ada
        .post(
            "/api/v1/issues/ASK-2/comments",
            json!({"body": "The kangaroo ledger\nsecond line"}),
        )
        .await?;
    let r = agent.get("/api/v1/search?q=kangaroo").await?;
    assert_eq!(r.json["total"], 2, "{}", r.text);
    let rows = r.json["rows"].as_array().cloned().unwrap_or_default();
    let ask = rows
        .iter()
        .find(|x| x["kind"] == "ask")
        .cloned()
        .unwrap_or_default();
    assert_eq!(ask["id"], a.as_str());
    assert_eq!(ask["ref"], format!("countersign://ask/{a}"));
    assert_eq!(ask["project"], "ASK");
    let com = rows
        .iter()
        .find(|x| x["kind"] == "comment")
        .cloned()
        .unwrap_or_default();
    assert_eq!(com["id"], c.json["id"]);
    assert_eq!(com["title"], "The kangaroo ledger");
    // A reworded question is found by its new words only.
    agent
        .patch(
            &format!("/api/v1/asks/{a}"),
            json!({"question": "Which wombat currency?", "actor": "s1"}),
        )
        .await?;
    let r = agent.get("/api/v1/search?q=kangaroo").await?;
    assert_eq!(r.json["total"], 1, "{}", r.text);
    let r = agent.get("/api/v1/search?q=wombat").await?;
    assert_eq!(r.json["rows"][0]["id"], a.as_str());
    console.stop().await;
    Ok(())
}

on_both_databases!(
    search_finds_asks_and_comments,
    search_finds_asks_and_comments_sqlite,
    search_finds_asks_and_comments_postgres
);

/// The session link (protocol §4.2) from a session's side: a real WebSocket client.
pub(crate) mod link {
    use std::time::Duration;

    use futures_util::{SinkExt, StreamExt};
    use serde_json::{Value, json};
    use tokio_tungstenite::tungstenite::Message;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;

    use crate::common::TestConsole;

    pub type Ws = tokio_tungstenite::WebSocketStream<
        tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>,
    >;

    /// Opens session `session`'s link and says hello (modes `send`); answers after `welcome`.
    pub async fn live(console: &TestConsole, session: &str, token: &str) -> anyhow::Result<Ws> {
        let url = format!(
            "{}/link/v1/sessions/{session}",
            console.url.replace("http://", "ws://")
        );
        let mut req = url.into_client_request()?;
        req.headers_mut()
            .insert("authorization", format!("Bearer {token}").parse()?);
        req.headers_mut()
            .insert("sec-websocket-protocol", "countersign.link.v1".parse()?);
        let (mut ws, _) = tokio_tungstenite::connect_async(req).await?;
        ws.send(Message::Text(
            json!({"type": "hello", "title": "asking", "roles": ["asker"], "modes": ["send"]})
                .to_string()
                .into(),
        ))
        .await?;
        let w = next_of(&mut ws, "welcome").await?;
        anyhow::ensure!(w["session_id"] == session, "{w}");
        Ok(ws)
    }

    /// The next text message of `kind` (others skipped), within 10 s.
    pub async fn next_of(ws: &mut Ws, kind: &str) -> anyhow::Result<Value> {
        loop {
            match tokio::time::timeout(Duration::from_secs(10), ws.next()).await? {
                Some(Ok(Message::Text(t))) => {
                    let v: Value = serde_json::from_str(&t)?;
                    if v["type"] == kind {
                        return Ok(v);
                    }
                }
                Some(Ok(_)) => continue,
                other => anyhow::bail!("expected {kind}, got {other:?}"),
            }
        }
    }

    pub async fn send(ws: &mut Ws, v: Value) -> anyhow::Result<()> {
        ws.send(Message::Text(v.to_string().into())).await?;
        Ok(())
    }
}

async fn mention_failed_offline_retried_live(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, _bob, agent) = setup(&console).await?;
    // s1 is not live: its mention fails at once.
    let c = ada
        .post(
            "/api/v1/issues/ASK-1/comments",
            json!({"body": "@s1 please check the refund totals", "mentions": ["s1"]}),
        )
        .await?;
    assert_eq!(c.status, 201, "{}", c.text);
    let cid = c.json["id"].as_str().unwrap_or_default().to_owned();
    let d = &c.json["mentions"][0]["deliveries"];
    assert_eq!(d[0]["attempt"], 1, "{}", c.text);
    assert_eq!(d[0]["state"], "failed");
    assert_eq!(d[0]["error"], "not_live");
    assert_eq!(d[0]["requested_by"]["login"], ADA);

    // Live now: a retry (the one mention needs no target) is delivered and acknowledged.
    let mut ws = link::live(&console, "s1", SHARED_TOKEN).await?;
    let r = agent
        .post(
            &format!("/api/v1/comments/{cid}/deliveries"),
            json!({"actor": "s2"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json[0]["attempt"], 2);
    assert_eq!(r.json[0]["state"], "pending");
    assert_eq!(r.json[0]["requested_by"]["session"], "s2");
    let frame = link::next_of(&mut ws, "deliver").await?;
    assert_eq!(
        frame["delivery"],
        json!({"kind": "mention", "id": cid, "attempt": 2})
    );
    assert_eq!(frame["body"], "@s1 please check the refund totals");
    assert_eq!(frame["thread_id"], cid.as_str());
    assert_eq!(frame["issue"], "ASK-1");
    link::send(
        &mut ws,
        json!({"type": "delivered", "kind": "mention", "id": cid, "attempt": 2}),
    )
    .await?;
    eventually(10, || async {
        let t = agent.get(&format!("/api/v1/comments/{cid}")).await?;
        Ok((t.json["mentions"][0]["deliveries"][1]["state"] == "sent").then_some(()))
    })
    .await?;

    // Its reply threads under the comment.
    let r = agent
        .post(
            &format!("/api/v1/comments/{cid}/replies"),
            json!({"actor": "s1", "body": "totals match"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let t = ada.get(&format!("/api/v1/comments/{cid}")).await?;
    assert_eq!(t.json["thread"][1]["body"], "totals match", "{}", t.text);
    assert_eq!(t.json["thread"][1]["parent"], cid.as_str());
    assert_eq!(t.json["thread"][1]["author"]["session"], "s1");

    // Retry refusals.
    let two = ada
        .post(
            "/api/v1/issues/ASK-1/comments",
            json!({"body": "both of you", "mentions": ["s1", "s2"]}),
        )
        .await?;
    let two = two.json["id"].as_str().unwrap_or_default().to_owned();
    let none = ada
        .post("/api/v1/issues/ASK-1/comments", json!({"body": "nobody"}))
        .await?;
    let none = none.json["id"].as_str().unwrap_or_default().to_owned();
    for (id, body, status, code) in [
        (two.as_str(), json!({}), 400, "INVALID_BODY"),
        (two.as_str(), json!({"target": "s9"}), 400, "INVALID_BODY"),
        (
            two.as_str(),
            json!({"target": "a b"}),
            400,
            "INVALID_SESSION_ID",
        ),
        (none.as_str(), json!({}), 400, "INVALID_BODY"),
        (two.as_str(), json!({"colour": "red"}), 400, "INVALID_BODY"),
        (
            "6f1c0a4e-0000-4000-8000-000000000000",
            json!({}),
            404,
            "NOT_FOUND",
        ),
    ] {
        refused(
            &ada.post(&format!("/api/v1/comments/{id}/deliveries"), body)
                .await?,
            status,
            code,
        );
    }
    let r = ada
        .post(
            &format!("/api/v1/comments/{two}/deliveries"),
            json!({"target": "s1"}),
        )
        .await?;
    assert_eq!(
        (r.status, &r.json[0]["attempt"]),
        (201, &json!(3)),
        "{}",
        r.text
    );
    let frame = link::next_of(&mut ws, "deliver").await?;
    assert_eq!(frame["delivery"]["id"], two.as_str());
    console.stop().await;
    Ok(())
}

on_both_databases!(
    mention_failed_offline_retried_live,
    mention_failed_offline_retried_live_sqlite,
    mention_failed_offline_retried_live_postgres
);

/// A person signed in through dev mode's local form, in Chromium.
async fn browser_sign_in(
    b: &crate::common::webdriver::Browser,
    console: &TestConsole,
    email: &str,
) -> anyhow::Result<()> {
    b.goto(&format!("{}/sign-in", console.url)).await?;
    b.type_into("#email", email).await?;
    b.click("form.local button[type=submit]").await?;
    b.wait_text("h1", "Inbox", 10).await?;
    Ok(())
}

/// An agent session on a real link opens an ask; a person answers it in Chromium with one
/// click on an option; the session receives the answer over its link; after the console
/// restarts on the same database, the ask and its answer are still there.
async fn answered_in_the_browser_over_the_link(db: Option<String>) -> anyhow::Result<()> {
    use crate::common::webdriver::{Driver, browser_or_skip};
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let db = db.unwrap_or_else(|| {
        format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("console.db").display()
        )
    });
    let console = console_on(Some(db.clone())).await?;
    let (ada, _bob, agent) = setup(&console).await?;
    let mut ws = link::live(&console, "s1", SHARED_TOKEN).await?;
    let id = open(
        &agent,
        "ASK-1",
        "Refund the partial capture on order 1042?",
        json!([{"id": "yes", "label": "Refund it"}, {"id": "no", "label": "Keep it"}]),
    )
    .await?;

    // The live session's open asks are counted.
    let live = agent.get("/api/v1/sessions").await?;
    let s1 = live
        .json
        .as_array()
        .and_then(|a| a.iter().find(|s| s["session_id"] == "s1"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(s1["open_asks"], 1, "{}", live.text);

    let driver = Driver::start(&chromedriver).await?;
    let b = driver.browser(&chromium, &dir.path().join("ada")).await?;
    browser_sign_in(&b, &console, ADA).await?;
    let row = format!("#human-turn li[data-ask-id=\"{id}\"]");
    b.wait_text(&row, "Refund the partial capture on order 1042?", 10)
        .await?;
    b.screenshot(&crate::browser::shots().join("inbox-asks.png"))
        .await?;
    b.click(&format!("{row} button[data-option=\"yes\"]"))
        .await?;
    b.wait_text("#flash", "Answered: Refund it.", 10).await?;
    // An answered ask is no longer open: its row leaves the inbox, live (docs/decisions.md,
    // issue 27: answered asks leave the inbox).
    b.wait_gone(&format!("li[data-ask-id=\"{id}\"]"), 10)
        .await?;

    // The session holds the answer, over its link.
    let frame = link::next_of(&mut ws, "ask.answered").await?;
    assert_eq!(frame["ask"]["id"], id.as_str(), "{frame}");
    assert_eq!(frame["ask"]["answer"]["options"], json!(["yes"]));
    assert_eq!(frame["ask"]["answer"]["by"]["login"], ADA);
    // And it is on the event stream.
    let log = agent.get("/api/v1/issues/ASK-1/events?limit=200").await?;
    assert!(
        log.json.as_array().is_some_and(|a| a
            .iter()
            .any(|e| e["kind"] == "ask.answered" && e["data"]["id"] == id.as_str())),
        "{}",
        log.text
    );

    let live = agent.get("/api/v1/sessions").await?;
    assert_eq!(live.json[0]["open_asks"], 0, "{}", live.text);

    // One ask page: its answer and history.
    b.goto(&format!("{}/asks/{id}", console.url)).await?;
    b.wait_text("#current-answer", "Refund it", 10).await?;
    b.quit().await;
    drop(ws);
    drop(ada);
    console.stop().await;

    // A restart on the same database: the ask and its answer are still there.
    let again = console_on(Some(db)).await?;
    let agent = Who::agent(&again, SHARED_TOKEN);
    let r = agent.get(&format!("/api/v1/asks/{id}")).await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["state"], "answered");
    assert_eq!(r.json["answer"]["options"], json!(["yes"]));
    assert_eq!(r.json["answer"]["by"]["login"], ADA);
    assert_eq!(
        r.json["question"],
        "Refund the partial capture on order 1042?"
    );
    let mine = agent
        .get("/api/v1/issues/ASK-1/asks?state=answered")
        .await?;
    assert_eq!(ids(&mine.json), std::slice::from_ref(&id));
    again.stop().await;
    Ok(())
}

on_both_databases!(
    answered_in_the_browser_over_the_link,
    answered_in_the_browser_over_the_link_sqlite,
    answered_in_the_browser_over_the_link_postgres
);

const SPEC: &str = "# Refunds\n\nRefunds go back in full.\n\nPartial captures are kept.\n\nEvery refund is logged.\n";

/// Uploads `spec.md` to ASK-1; answers its id and the id of the paragraph holding `text`.
async fn spec(agent: &Who, text: &str) -> anyhow::Result<(String, String)> {
    let r = agent
        .post(
            "/api/v1/issues/ASK-1/artifacts",
            json!({"filename": "spec.md", "content_type": "text/markdown", "content": SPEC, "actor": "s1"}),
        )
        .await?;
    anyhow::ensure!(r.status == 201, "{}", r.text);
    let id = r.json["id"].as_str().unwrap_or_default().to_owned();
    let blocks = agent.get(&format!("/api/v1/artifacts/{id}/blocks")).await?;
    let text_of = |b: &Value| -> String {
        let (s, e) = (
            b["range"]["start"].as_u64().unwrap_or(0) as usize,
            b["range"]["end"].as_u64().unwrap_or(0) as usize,
        );
        SPEC.get(s..e).unwrap_or("").to_owned()
    };
    let block = blocks.json["blocks"]
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|b| b["type"] == "paragraph" && text_of(b).contains(text))
        })
        .and_then(|b| b["id"].as_str())
        .unwrap_or_default()
        .to_owned();
    anyhow::ensure!(!block.is_empty(), "no block holds {text}: {}", blocks.text);
    Ok((id, block))
}

async fn markdown(who: &Who, doc: &str) -> anyhow::Result<String> {
    let t = who.get(&format!("/api/v1/artifacts/{doc}/text")).await?;
    Ok(t.json["markdown"].as_str().unwrap_or_default().to_owned())
}

fn kinds_of(log: &Value) -> Vec<String> {
    log.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|e| e["kind"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

async fn document_asks_and_block_asks(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, _bob, agent) = setup(&console).await?;
    let (doc, para) = spec(&agent, "Refunds go back in full.").await?;

    // An ask on the document.
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{doc}/asks"),
            json!({"question": "Is this the whole policy?", "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let plain = r.json["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        (&r.json["artifact"], &r.json["issue"], &r.json["block"]),
        (&json!(doc), &json!("ASK-1"), &Value::Null)
    );

    // A block ask: its `:::ask` block goes in after the block named.
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{doc}/asks"),
            json!({"question": "Full refunds for partial captures too?", "options": [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}], "block": para, "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let block_ask = r.json["id"].as_str().unwrap_or_default().to_owned();
    assert!(r.json["block"].is_string(), "{}", r.text);
    let md = markdown(&agent, &doc).await?;
    let expected = format!(
        "Refunds go back in full.\n\n:::ask id={block_ask} state=open\nFull refunds for partial captures too?\n\n- (yes) Yes\n- (no) No\n:::\n\nPartial captures are kept."
    );
    assert!(md.contains(&expected), "{md}");
    refused(
        &agent
            .post(
                &format!("/api/v1/artifacts/{doc}/asks"),
                json!({"question": "q", "block": "nope"}),
            )
            .await?,
        404,
        "TARGET_NOT_FOUND",
    );
    // The block's id is in the ask's blocks.
    let b = agent
        .get(&format!(
            "/api/v1/artifacts/{doc}/blocks/{}",
            r.json["block"].as_str().unwrap_or("")
        ))
        .await?;
    assert_eq!(b.json["type"], "ask", "{}", b.text);

    // Reword: the block is rewritten; retract: the block records it.
    let r = agent
        .patch(
            &format!("/api/v1/asks/{block_ask}"),
            json!({"question": "Full refunds for partial captures as well?", "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let md = markdown(&agent, &doc).await?;
    assert!(
        md.contains("Full refunds for partial captures as well?"),
        "{md}"
    );
    assert!(!md.contains("partial captures too?"), "{md}");
    let r = agent
        .post(
            &format!("/api/v1/asks/{block_ask}/close"),
            json!({"state": "retracted", "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.json["state"], "retracted", "{}", r.text);
    let md = markdown(&agent, &doc).await?;
    assert!(
        md.contains(&format!(":::ask id={block_ask} state=retracted")),
        "{md}"
    );

    // Lists: the document's asks, the issue's (its documents' included).
    let l = agent.get(&format!("/api/v1/artifacts/{doc}/asks")).await?;
    assert_eq!(ids(&l.json), [plain.clone(), block_ask.clone()]);
    let l = agent
        .get(&format!("/api/v1/artifacts/{doc}/asks?state=open"))
        .await?;
    assert_eq!(ids(&l.json), std::slice::from_ref(&plain));
    let l = agent.get("/api/v1/issues/ASK-1/asks").await?;
    assert_eq!(ids(&l.json), [plain.clone(), block_ask.clone()]);
    let s = agent.get("/api/v1/asks?project=ASK").await?;
    assert_eq!(
        s.json["counts"],
        json!({"asks": 1, "issues": 1, "artifacts": 1})
    );

    // Its events are in the document's log, not the issue's.
    let dl = agent
        .get(&format!("/api/v1/artifacts/{doc}/events?limit=200"))
        .await?;
    let kinds = kinds_of(&dl.json);
    for k in [
        "ask.opened",
        "ask.reworded",
        "ask.retracted",
        "document.edited",
    ] {
        assert!(kinds.iter().any(|x| x == k), "{k} in {kinds:?}");
    }
    let il = agent.get("/api/v1/issues/ASK-1/events?limit=200").await?;
    assert!(!kinds_of(&il.json).iter().any(|k| k.starts_with("ask.")));

    // A project's document takes asks too (unassigned in the inbox); a file does not.
    let p = agent
        .post(
            "/api/v1/projects/ASK/artifacts",
            json!({"filename": "guide.md", "content_type": "text/markdown", "content": "# Guide\n", "actor": "s1"}),
        )
        .await?;
    let guide = p.json["id"].as_str().unwrap_or_default().to_owned();
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{guide}/asks"),
            json!({"question": "Publish the guide?", "actor": "s1"}),
        )
        .await?;
    assert_eq!(
        (r.json["issue"].clone(), r.json["project"].clone()),
        (Value::Null, json!("ASK"))
    );
    let g = r.json["id"].as_str().unwrap_or_default().to_owned();
    let inbox = ada.get("/api/v1/inbox?assignee=unassigned").await?;
    assert!(
        ids(&inbox.json["human_turn"]).contains(&g),
        "{}",
        inbox.text
    );
    let f = agent
        .post(
            "/api/v1/issues/ASK-1/artifacts",
            json!({"filename": "notes.txt", "content_type": "text/plain", "content": "x", "actor": "s1"}),
        )
        .await?;
    let file = f.json["id"].as_str().unwrap_or_default().to_owned();
    for path in [
        format!("/api/v1/artifacts/{file}/asks"),
        "/api/v1/artifacts/6f1c0a4e-0000-4000-8000-000000000000/asks".to_owned(),
        "/api/v1/artifacts/nope/asks".to_owned(),
    ] {
        refused(
            &agent.post(&path, json!({"question": "q"})).await?,
            404,
            "NOT_FOUND",
        );
    }
    console.stop().await;
    Ok(())
}

on_both_databases!(
    document_asks_and_block_asks,
    document_asks_and_block_asks_sqlite,
    document_asks_and_block_asks_postgres
);

async fn approval_and_reviews(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, _bob, agent) = setup(&console).await?;
    let (doc, _) = spec(&agent, "Every refund is logged.").await?;

    // A request: an approval ask for the latest version (the upload's, 1).
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{doc}/approval-requests"),
            json!({"summary": "Ready for review?", "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let ask = r.json["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(r.location(), Some(format!("/api/v1/asks/{ask}")));
    assert_eq!(r.json["kind"], "approval");
    assert_eq!(r.json["question"], "Ready for review?");
    assert_eq!(r.json["approval"], json!({"version": 1, "approved": null}));
    assert_eq!(r.json["options"][0]["id"], "approve");
    let inbox = ada.get("/api/v1/inbox").await?;
    assert_eq!(ids(&inbox.json["human_turn"]), std::slice::from_ref(&ask));

    // A later edit: the ask follows it and waits on its agent.
    let e = agent
        .post(
            &format!("/api/v1/artifacts/{doc}/edits"),
            json!({"ops": [{"op": "replace", "quote": {"exact": "logged"}, "text": "logged and audited"}], "actor": "s1"}),
        )
        .await?;
    assert_eq!(e.status, 200, "{}", e.text);
    let inbox = ada.get("/api/v1/inbox").await?;
    assert_eq!(
        ids(&inbox.json["agent_turn"]),
        std::slice::from_ref(&ask),
        "{}",
        inbox.text
    );
    // The same route hands the same row back to a person, for the new latest version (2).
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{doc}/approval-requests"),
            json!({"actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["id"], ask.as_str());
    assert_eq!(r.json["approval"]["version"], 2);
    assert_eq!(r.json["turn"], "human");
    let inbox = ada.get("/api/v1/inbox").await?;
    assert_eq!(ids(&inbox.json["human_turn"]), std::slice::from_ref(&ask));

    // Reviews: a person, on the latest settled version.
    let path = format!("/api/v1/artifacts/{doc}/reviews");
    let r = ada
        .post(&path, json!({"outcome": "approve", "version": 1}))
        .await?;
    refused(&r, 409, "DOCUMENT_CHANGED");
    assert_eq!(r.json["version"], 2);
    refused(
        &agent
            .post(&path, json!({"outcome": "approve", "version": 2}))
            .await?,
        403,
        "HUMAN_ONLY",
    );
    for body in [
        json!({"outcome": "maybe", "version": 2}),
        json!({"version": 2}),
        json!({"outcome": "approve"}),
    ] {
        refused(&ada.post(&path, body).await?, 400, "INVALID_BODY");
    }
    refused(
        &ada.post(
            &path,
            json!({"outcome": "approve", "version": 2, "body": "x".repeat(65_537)}),
        )
        .await?,
        400,
        "CAP_EXCEEDED",
    );
    let r = ada
        .post(
            &path,
            json!({"outcome": "request_changes", "version": 2, "body": "say who audits"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["outcome"], "request_changes");
    assert_eq!(r.json["ask"], ask.as_str());
    assert_eq!(r.json["by"]["login"], ADA);
    // It answered the approval ask, keeping its thread.
    let a = agent.get(&format!("/api/v1/asks/{ask}")).await?;
    assert_eq!(a.json["state"], "answered");
    assert_eq!(a.json["answer"]["options"], json!(["request_changes"]));
    assert_eq!(a.json["answer"]["text"], "say who audits");

    // A new request after an answer is a new ask; answering it on the ask approves.
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{doc}/approval-requests"),
            json!({"actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let second = r.json["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(r.json["approval"]["approved"], Value::Null);
    refused(
        &ada.post(
            &format!("/api/v1/asks/{second}/answer"),
            json!({"options": ["approve", "request_changes"]}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    let r = ada
        .post(
            &format!("/api/v1/asks/{second}/answer"),
            json!({"options": ["approve"]}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["state"], "answered");
    assert_eq!(r.json["approval"]["approved"]["version"], 2);
    let reviews = agent.get(&path).await?;
    assert_eq!(
        reviews.json.as_array().map(Vec::len),
        Some(2),
        "{}",
        reviews.text
    );
    assert_eq!(reviews.json[1]["outcome"], "approve");
    assert_eq!(reviews.json[1]["ask"], second.as_str());

    // A third request shows the earlier approval.
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{doc}/approval-requests"),
            json!({"actor": "s1"}),
        )
        .await?;
    assert_eq!(r.json["approval"]["approved"]["version"], 2, "{}", r.text);
    assert_eq!(r.json["approval"]["approved"]["by"]["login"], ADA);

    // A review with no approval ask open is a review alone.
    let third = r.json["id"].as_str().unwrap_or_default().to_owned();
    ada.post(
        &format!("/api/v1/asks/{third}/close"),
        json!({"state": "resolved"}),
    )
    .await?;
    let r = ada
        .post(&path, json!({"outcome": "approve", "version": 2}))
        .await?;
    assert_eq!(
        (r.status, &r.json["ask"]),
        (201, &Value::Null),
        "{}",
        r.text
    );

    let dl = agent
        .get(&format!("/api/v1/artifacts/{doc}/events?limit=200"))
        .await?;
    let kinds = kinds_of(&dl.json);
    for k in [
        "approval.requested",
        "approval.changes_requested",
        "approval.approved",
        "ask.answered",
        "ask.opened",
    ] {
        assert!(kinds.iter().any(|x| x == k), "{k} in {kinds:?}");
    }
    let requested = dl
        .json
        .as_array()
        .and_then(|a| a.iter().find(|e| e["kind"] == "approval.requested"))
        .cloned()
        .unwrap_or_default();
    assert_eq!(requested["data"]["artifact"], doc.as_str());
    assert_eq!(requested["data"]["version"], 1);
    assert_eq!(requested["data"]["ask"], ask.as_str());
    assert_eq!(requested["data"]["by"]["session"], "s1");
    console.stop().await;
    Ok(())
}

on_both_databases!(
    approval_and_reviews,
    approval_and_reviews_sqlite,
    approval_and_reviews_postgres
);

async fn document_comments_and_suggestions(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, _bob, agent) = setup(&console).await?;
    let (doc, para) = spec(&agent, "Partial captures are kept.").await?;
    let path = format!("/api/v1/artifacts/{doc}/comments");

    // A suggestion on a quote.
    let r = agent
        .post(
            &path,
            json!({"body": "Say it plainly.", "quote": {"exact": "are kept"}, "suggestion": {"replacement": "stay with the merchant"}, "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let sug = r.json["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        r.json["suggestion"],
        json!({"replacement": "stay with the merchant", "state": "pending"})
    );
    assert_eq!(r.json["quote"], json!({"exact": "are kept"}));
    assert_eq!(r.json["artifact"], doc.as_str());
    assert_eq!(r.json["issue"], "ASK-1");
    // Through the issue's route, naming the document; on a block.
    let r = ada
        .post(
            "/api/v1/issues/ASK-1/comments",
            json!({"body": "Logged where?", "artifact": doc, "quote": {"exact": "logged"}}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = ada
        .post(&path, json!({"body": "This paragraph.", "block": para}))
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    // The quote's refusals, the engine's.
    for (body, status, code) in [
        (
            json!({"body": "x", "quote": {"exact": "nowhere"}}),
            409,
            "QUOTE_NOT_FOUND",
        ),
        (
            json!({"body": "x", "quote": {"exact": "Refund"}}),
            409,
            "QUOTE_AMBIGUOUS",
        ),
        (
            json!({"body": "x", "quote": {"exact": "kept"}, "block": "nope"}),
            404,
            "TARGET_NOT_FOUND",
        ),
        (
            json!({"body": "x", "block": "nope"}),
            404,
            "TARGET_NOT_FOUND",
        ),
        (
            json!({"body": "x", "suggestion": {"replacement": "y"}}),
            400,
            "INVALID_BODY",
        ),
        (json!({"body": "x", "artifact": doc}), 400, "INVALID_BODY"),
        (
            json!({"body": "x", "quote": {"exact": "kept", "colour": "red"}}),
            400,
            "INVALID_BODY",
        ),
    ] {
        refused(&ada.post(&path, body).await?, status, code);
    }
    refused(
        &ada.post(
            "/api/v1/issues/ASK-1/comments",
            json!({"body": "x", "quote": {"exact": "kept"}}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    refused(
        &ada.post(
            "/api/v1/issues/ASK-2/comments",
            json!({"body": "x", "artifact": doc}),
        )
        .await?,
        400,
        "INVALID_BODY",
    );
    // Lists.
    let l = agent.get(&path).await?;
    assert_eq!(l.json.as_array().map(Vec::len), Some(3), "{}", l.text);
    let l = agent
        .get(&format!("/api/v1/issues/ASK-1/comments?artifact={doc}"))
        .await?;
    assert_eq!(l.json.as_array().map(Vec::len), Some(3));

    // Accept: applied as a replace of the quote; then decided.
    let acc = format!("/api/v1/comments/{sug}/suggestion/accept");
    refused(&agent.post(&acc, json!({})).await?, 403, "HUMAN_ONLY");
    let r = ada.post(&acc, json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["suggestion"]["state"], "accepted");
    let md = markdown(&agent, &doc).await?;
    assert!(
        md.contains("Partial captures stay with the merchant."),
        "{md}"
    );
    for p in [
        acc.clone(),
        format!("/api/v1/comments/{sug}/suggestion/reject"),
    ] {
        let r = ada.post(&p, json!({})).await?;
        refused(&r, 409, "SUGGESTION_STATE");
        assert_eq!(r.json["state"], "accepted");
    }

    // A suggestion whose quote is gone: the edit's refusal, and it stays pending.
    let r = agent
        .post(
            &path,
            json!({"body": "shorter", "quote": {"exact": "Every refund"}, "suggestion": {"replacement": "Each refund"}, "actor": "s1"}),
        )
        .await?;
    let gone = r.json["id"].as_str().unwrap_or_default().to_owned();
    agent
        .post(
            &format!("/api/v1/artifacts/{doc}/edits"),
            json!({"ops": [{"op": "replace", "quote": {"exact": "Every refund"}, "text": "All refunds"}], "actor": "s1"}),
        )
        .await?;
    let r = ada
        .post(
            &format!("/api/v1/comments/{gone}/suggestion/accept"),
            json!({}),
        )
        .await?;
    refused(&r, 409, "QUOTE_NOT_FOUND");
    let c = ada.get(&format!("/api/v1/comments/{gone}")).await?;
    assert_eq!(c.json["suggestion"]["state"], "pending");
    // Reject it: then decided.
    let r = ada
        .post(
            &format!("/api/v1/comments/{gone}/suggestion/reject"),
            json!({}),
        )
        .await?;
    assert_eq!(r.json["suggestion"]["state"], "rejected", "{}", r.text);
    let r = ada
        .post(
            &format!("/api/v1/comments/{gone}/suggestion/accept"),
            json!({}),
        )
        .await?;
    refused(&r, 409, "SUGGESTION_STATE");
    assert_eq!(r.json["state"], "rejected");

    let dl = agent
        .get(&format!("/api/v1/artifacts/{doc}/events?limit=200"))
        .await?;
    let kinds = kinds_of(&dl.json);
    for k in [
        "comment.created",
        "suggestion.accepted",
        "suggestion.rejected",
        "document.edited",
    ] {
        assert!(kinds.iter().any(|x| x == k), "{k} in {kinds:?}");
    }
    console.stop().await;
    Ok(())
}

on_both_databases!(
    document_comments_and_suggestions,
    document_comments_and_suggestions_sqlite,
    document_comments_and_suggestions_postgres
);

/// Comment threads beside a document in Chromium: a suggestion shown as a diff, accepted with
/// one click, changes the document; a thread is resolved.
#[tokio::test]
async fn suggestion_accepted_beside_the_document() -> anyhow::Result<()> {
    use crate::common::webdriver::{Driver, browser_or_skip};
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let console = console_on(None).await?;
    let (_ada, _bob, agent) = setup(&console).await?;
    let (doc, _) = spec(&agent, "Partial captures are kept.").await?;
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{doc}/comments"),
            json!({"body": "Plainer, please.", "quote": {"exact": "are kept"}, "suggestion": {"replacement": "stay with the merchant"}, "actor": "s1"}),
        )
        .await?;
    let sug = r.json["id"].as_str().unwrap_or_default().to_owned();
    let dir = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let b = driver.browser(&chromium, &dir.path().join("ada")).await?;
    browser_sign_in(&b, &console, ADA).await?;
    b.goto(&format!("{}/artifacts/{doc}/discussion", console.url))
        .await?;
    let thread = format!("[data-thread-id=\"{sug}\"]");
    b.wait_text(&format!("{thread} .suggestion del"), "are kept", 10)
        .await?;
    b.wait_text(
        &format!("{thread} .suggestion ins"),
        "stay with the merchant",
        10,
    )
    .await?;
    b.screenshot(&crate::browser::shots().join("discussion.png"))
        .await?;
    b.click(&format!("{thread} button[data-accept]")).await?;
    b.wait_text("#flash", "Suggestion accepted", 10).await?;
    b.wait_text("#doc", "Partial captures stay with the merchant.", 10)
        .await?;
    b.wait_for(
        &format!("{thread} [data-suggestion-state=\"accepted\"]"),
        10,
    )
    .await?;
    b.click(&format!("{thread} button[data-resolve]")).await?;
    b.wait_for(
        &format!("[data-thread-id=\"{sug}\"][data-thread-state=\"resolved\"]"),
        10,
    )
    .await?;
    let md = markdown(&agent, &doc).await?;
    assert!(
        md.contains("Partial captures stay with the merchant."),
        "{md}"
    );
    b.quit().await;
    console.stop().await;
    Ok(())
}

fn rfc(t: chrono::DateTime<chrono::Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

/// `(kind, id)` of each row of an inbox threads page.
fn thread_ids(page: &Value) -> Vec<(String, String)> {
    page["rows"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["thread"]["kind"].as_str().unwrap_or_default().to_owned(),
                        r["thread"]["id"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The inbox's threads beyond messages: a comment thread the person wrote in shows when
/// someone else comments later (not to the one who wrote last), leaves when marked read or
/// when the person writes again, and comes back on a newer comment; an ask the person wrote
/// in shows when someone else replies or answers, unless it is open and in the person's inbox
/// lists; `?issue=` (an issue's documents included) and `?artifact=`; paging over message,
/// comment and ask threads merged newest reply first.
async fn inbox_threads_of_comments_and_asks(db: Option<String>) -> anyhow::Result<()> {
    use countersign_console_core::{Clock, ManualClock};
    use std::sync::Arc;
    let clock = Arc::new(ManualClock::new(chrono::Utc::now()));
    let console = console_with_clock(db, clock.clone()).await?;
    let (ada, bob, agent) = setup(&console).await?;
    let tick = || clock.advance(chrono::Duration::seconds(1));
    let threads = |who: &Who, q: &str| {
        let (who, q) = (who.clone(), q.to_owned());
        async move { who.get(&format!("/api/v1/inbox/threads{q}")).await }
    };
    let read = |who: &Who, id: &str, at: chrono::DateTime<chrono::Utc>| {
        let (who, id) = (who.clone(), id.to_owned());
        async move {
            who.post(
                &format!("/api/v1/inbox/threads/{id}/read"),
                json!({"read_through": rfc(at)}),
            )
            .await
        }
    };

    // A comment thread on Bob's issue: Ada's root, Bob's reply.
    tick();
    let root = ada
        .post(
            "/api/v1/issues/ASK-2/comments",
            json!({"body": "Ledger totals are off\nby a cent."}),
        )
        .await?;
    assert_eq!(root.status, 201, "{}", root.text);
    let c1 = root.json["id"].as_str().unwrap_or_default().to_owned();
    assert_eq!(
        threads(&ada, "").await?.json["total"],
        0,
        "nobody else wrote"
    );
    tick();
    let r = bob
        .post(
            "/api/v1/issues/ASK-2/comments",
            json!({"body": "Rounding, I think.\nChecking.", "parent": c1}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let p = threads(&ada, "").await?;
    assert_eq!(p.status, 200, "{}", p.text);
    assert_eq!(
        (&p.json["total"], &p.json["limit"], &p.json["offset"]),
        (&json!(1), &json!(50), &json!(0))
    );
    let row = &p.json["rows"][0];
    assert_eq!(row["thread"], json!({"kind": "comment", "id": c1}));
    assert_eq!(row["owner"], json!({"kind": "user", "login": ADA}));
    assert_eq!(row["subject"], "Ledger totals are off");
    assert_eq!(row["link"], format!("countersign://comment/{c1}"));
    assert_eq!(
        row["newest_reply"]["author"],
        json!({"kind": "user", "login": BOB})
    );
    assert_eq!(row["newest_reply"]["first_line"], "Rounding, I think.");
    assert_eq!(row["newest_reply"]["at"], rfc(clock.now()));
    // Bob wrote last: nothing for him.
    assert_eq!(threads(&bob, "").await?.json["total"], 0);

    // Marked read: gone; a newer reply: back.
    let r = read(&ada, &c1, clock.now()).await?;
    assert_eq!(r.status, 204, "{}", r.text);
    assert_eq!(threads(&ada, "").await?.json["total"], 0);
    tick();
    bob.post(
        "/api/v1/issues/ASK-2/comments",
        json!({"body": "Found it.", "parent": c1}),
    )
    .await?;
    let p = threads(&ada, "").await?;
    assert_eq!(thread_ids(&p.json), [("comment".to_owned(), c1.clone())]);
    assert_eq!(p.json["rows"][0]["newest_reply"]["first_line"], "Found it.");
    // Writing in it reads it; an agent's reply is someone else's too.
    tick();
    ada.post(
        "/api/v1/issues/ASK-2/comments",
        json!({"body": "Thanks.", "parent": c1}),
    )
    .await?;
    assert_eq!(threads(&ada, "").await?.json["total"], 0);
    let p = threads(&bob, "").await?;
    assert_eq!(thread_ids(&p.json), [("comment".to_owned(), c1.clone())]);
    assert_eq!(p.json["rows"][0]["newest_reply"]["first_line"], "Thanks.");
    tick();
    agent
        .post(
            "/api/v1/issues/ASK-2/comments",
            json!({"body": "Fixed in the export.", "parent": c1, "actor": "s1"}),
        )
        .await?;
    let p = threads(&ada, "").await?;
    assert_eq!(p.json["rows"][0]["newest_reply"]["author"]["session"], "s1");

    // An ask on Bob's issue (open, but not in Ada's inbox lists): Ada replies, the agent
    // answers her.
    tick();
    let on_bobs = open(
        &agent,
        "ASK-2",
        "Which ledger?\nThe old one is gone.",
        json!([]),
    )
    .await?;
    tick();
    ada.post(
        "/api/v1/issues/ASK-2/comments",
        json!({"body": "The one in the export.", "ask": on_bobs}),
    )
    .await?;
    let ids_now = thread_ids(&threads(&ada, "").await?.json);
    assert!(
        !ids_now.contains(&("ask".to_owned(), on_bobs.clone())),
        "{ids_now:?}"
    );
    tick();
    agent
        .post(
            "/api/v1/issues/ASK-2/comments",
            json!({"body": "Got it, the new one.", "ask": on_bobs, "actor": "s1"}),
        )
        .await?;
    let p = threads(&ada, "").await?;
    assert_eq!(
        thread_ids(&p.json),
        [
            ("ask".to_owned(), on_bobs.clone()),
            ("comment".to_owned(), c1.clone())
        ]
    );
    let row = &p.json["rows"][0];
    assert_eq!(row["owner"]["session"], "s1");
    assert_eq!(row["subject"], "Which ledger?");
    assert_eq!(row["link"], format!("countersign://ask/{on_bobs}"));
    assert_eq!(row["newest_reply"]["first_line"], "Got it, the new one.");
    assert_eq!(row["newest_reply"]["at"], rfc(clock.now()));
    // Bob never wrote in it.
    assert!(
        !thread_ids(&threads(&bob, "").await?.json).contains(&("ask".to_owned(), on_bobs.clone()))
    );

    // An ask on Ada's issue: open and in her inbox, so not a thread, until Bob answers it.
    tick();
    let on_adas = open(
        &agent,
        "ASK-1",
        "Refund partial captures?",
        json!([{"id": "yes", "label": "Yes, in full"}, {"id": "no", "label": "No"}]),
    )
    .await?;
    tick();
    ada.post(
        "/api/v1/issues/ASK-1/comments",
        json!({"body": "What do the others do?", "ask": on_adas}),
    )
    .await?;
    tick();
    agent
        .post(
            "/api/v1/issues/ASK-1/comments",
            json!({"body": "They refund in full.", "ask": on_adas, "actor": "s1"}),
        )
        .await?;
    let inbox = ada.get("/api/v1/inbox").await?;
    assert!(
        ids(&inbox.json["human_turn"]).contains(&on_adas),
        "{}",
        inbox.text
    );
    let ids_now = thread_ids(&threads(&ada, "").await?.json);
    assert!(
        !ids_now.contains(&("ask".to_owned(), on_adas.clone())),
        "{ids_now:?}"
    );
    tick();
    let r = bob
        .post(
            &format!("/api/v1/asks/{on_adas}/answer"),
            json!({"options": ["yes"]}),
        )
        .await?;
    assert_eq!(r.json["state"], "answered", "{}", r.text);
    let p = threads(&ada, "").await?;
    assert_eq!(
        thread_ids(&p.json)[0],
        ("ask".to_owned(), on_adas.clone()),
        "{}",
        p.text
    );
    let row = &p.json["rows"][0];
    assert_eq!(
        row["newest_reply"]["author"],
        json!({"kind": "user", "login": BOB})
    );
    assert_eq!(row["newest_reply"]["first_line"], "Yes, in full");
    // Bob answered last: nothing for him there.
    assert!(
        !thread_ids(&threads(&bob, "").await?.json).contains(&("ask".to_owned(), on_adas.clone()))
    );
    // An ask's read mark is its id.
    let r = read(&ada, &on_adas, clock.now()).await?;
    assert_eq!(r.status, 204, "{}", r.text);
    let ids_now = thread_ids(&threads(&ada, "").await?.json);
    assert!(
        !ids_now.contains(&("ask".to_owned(), on_adas.clone())),
        "{ids_now:?}"
    );

    // A thread on ASK-1's document, and a message thread on ASK-3.
    let (doc, _) = spec(&agent, "Partial captures are kept.").await?;
    tick();
    let r = ada
        .post(
            &format!("/api/v1/artifacts/{doc}/comments"),
            json!({"body": "Kept where?", "quote": {"exact": "are kept"}}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let c2 = r.json["id"].as_str().unwrap_or_default().to_owned();
    tick();
    let r = ada
        .post(
            "/api/v1/issues/ASK-3/messages",
            json!({"body": "Is the export done?", "target": {"session": "s1"}}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let m1 = r.json["id"].as_str().unwrap_or_default().to_owned();
    tick();
    let r = bob
        .post(
            &format!("/api/v1/artifacts/{doc}/comments"),
            json!({"body": "With the merchant.", "parent": c2}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    tick();
    let r = agent
        .post(
            &format!("/api/v1/messages/{m1}/replies"),
            json!({"actor": "s1", "body": "Yes."}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);

    // Every kind, newest reply first.
    let all = [
        ("message", m1.clone()),
        ("comment", c2.clone()),
        ("ask", on_bobs.clone()),
        ("comment", c1.clone()),
    ]
    .map(|(k, id)| (k.to_owned(), id));
    let p = threads(&ada, "").await?;
    assert_eq!(thread_ids(&p.json), all, "{}", p.text);
    assert_eq!(p.json["total"], 4);
    // Pages over the merge.
    for (q, from, to) in [
        ("?limit=2", 0, 2),
        ("?limit=2&offset=1", 1, 3),
        ("?limit=1&offset=3", 3, 4),
        ("?offset=2", 2, 4),
        ("?limit=3&offset=4", 4, 4),
    ] {
        let p = threads(&ada, q).await?;
        assert_eq!(thread_ids(&p.json), all[from..to], "{q}: {}", p.text);
        assert_eq!(p.json["total"], 4, "{q}");
    }
    let p = threads(&ada, "?limit=2&offset=1").await?;
    assert_eq!(
        (&p.json["limit"], &p.json["offset"]),
        (&json!(2), &json!(1))
    );

    // Narrowed: an issue takes its documents' threads; a document only its own.
    let p = threads(&ada, "?issue=ASK-2").await?;
    assert_eq!(
        thread_ids(&p.json),
        [
            ("ask".to_owned(), on_bobs.clone()),
            ("comment".to_owned(), c1.clone())
        ]
    );
    assert_eq!(p.json["total"], 2);
    let p = threads(&ada, "?issue=ASK-1").await?;
    assert_eq!(thread_ids(&p.json), [("comment".to_owned(), c2.clone())]);
    let p = threads(&ada, "?issue=ASK-3").await?;
    assert_eq!(thread_ids(&p.json), [("message".to_owned(), m1.clone())]);
    let p = threads(&ada, &format!("?artifact={}", doc.to_uppercase())).await?;
    assert_eq!(thread_ids(&p.json), [("comment".to_owned(), c2.clone())]);
    assert_eq!(p.json["total"], 1);
    let p = threads(&ada, "?artifact=6f1c0a4e-0000-4000-8000-000000000000").await?;
    assert_eq!(p.json["total"], 0);
    for q in [
        format!("?issue=ASK-1&artifact={doc}"),
        "?artifact=x".to_owned(),
    ] {
        refused(&threads(&ada, &q).await?, 400, "INVALID_QUERY");
    }

    // Marks on the comment threads; an answer's text is its first line.
    assert_eq!(read(&ada, &c1, clock.now()).await?.status, 204);
    assert_eq!(read(&ada, &c2, clock.now()).await?.status, 204);
    let p = threads(&ada, "").await?;
    assert_eq!(
        thread_ids(&p.json),
        [
            ("message".to_owned(), m1.clone()),
            ("ask".to_owned(), on_bobs.clone())
        ]
    );
    tick();
    bob.post(
        &format!("/api/v1/asks/{on_bobs}/answer"),
        json!({"text": "The new ledger.\nSee the export."}),
    )
    .await?;
    let p = threads(&ada, "").await?;
    assert_eq!(thread_ids(&p.json)[0], ("ask".to_owned(), on_bobs.clone()));
    assert_eq!(
        p.json["rows"][0]["newest_reply"]["first_line"],
        "The new ledger."
    );

    // An ask a person opened is theirs: Bob's answer brings it; her mark takes it away.
    tick();
    let r = ada
        .post(
            "/api/v1/issues/ASK-2/asks",
            json!({"question": "Can the export wait?"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let hers = r.json["id"].as_str().unwrap_or_default().to_owned();
    tick();
    bob.post(
        &format!("/api/v1/asks/{hers}/answer"),
        json!({"text": "A week."}),
    )
    .await?;
    let p = threads(&ada, "").await?;
    assert_eq!(thread_ids(&p.json)[0], ("ask".to_owned(), hers.clone()));
    assert_eq!(
        p.json["rows"][0]["owner"],
        json!({"kind": "user", "login": ADA})
    );
    assert_eq!(p.json["rows"][0]["subject"], "Can the export wait?");
    assert_eq!(read(&ada, &hers, clock.now()).await?.status, 204);
    let p = threads(&ada, "").await?;
    assert_eq!(thread_ids(&p.json)[0], ("ask".to_owned(), on_bobs.clone()));
    console.stop().await;
    Ok(())
}

on_both_databases!(
    inbox_threads_of_comments_and_asks,
    inbox_threads_of_comments_and_asks_sqlite,
    inbox_threads_of_comments_and_asks_postgres
);
