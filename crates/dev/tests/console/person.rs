//! What a person does through the API (issue 27), on SQLite and PostgreSQL: acting through
//! their own personal token as themself (protocol §4.1), with history crediting them.

use serde_json::json;

use crate::common::*;

/// A personal token that names no session acts as its owner: a project, an issue, an update
/// and a claim with no `actor`, each credited to the person (`{kind: user, login}`), as a
/// browser's would be. Naming a session still acts as that session; the shared token still
/// must name one; and a session's own replies still need the session named.
async fn own_token_acts_as_the_person(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let minted = ada
        .post("/api/v1/agent-tokens", json!({"name": "my laptop"}))
        .await?;
    assert_eq!(minted.status, 201, "{}", minted.text);
    let own = Who::agent(&console, minted.json["token"].as_str().unwrap_or_default());
    let shared = Who::agent(&console, SHARED_TOKEN);

    // The shared token names no person: where a session is needed, it must name one.
    refused(
        &shared
            .post(
                "/api/v1/projects",
                json!({"key": "PAY", "name": "Payments"}),
            )
            .await?,
        400,
        "INVALID_SESSION_ID",
    );
    // Ada's own token, no `actor`: she creates the project, the issue, edits and claims it.
    let p = own
        .post(
            "/api/v1/projects",
            json!({"key": "PAY", "name": "Payments"}),
        )
        .await?;
    assert_eq!(p.status, 201, "{}", p.text);
    let i = own
        .post(
            "/api/v1/issues",
            json!({"project": "PAY", "title": "Refunds"}),
        )
        .await?;
    assert_eq!(i.status, 201, "{}", i.text);
    let u = own
        .patch("/api/v1/issues/PAY-1", json!({"status": "in_progress"}))
        .await?;
    assert_eq!(u.status, 200, "{}", u.text);
    let c = own.post("/api/v1/issues/PAY-1/claim", json!({})).await?;
    assert_eq!(c.status, 200, "{}", c.text);
    assert_eq!(c.json["holder"], json!({"kind": "user", "login": ADA}));
    let me = json!({"kind": "user", "login": ADA});
    let log = ada.get("/api/v1/issues/PAY-1/events").await?;
    let actors: Vec<_> = log
        .json
        .as_array()
        .map(|l| l.iter().map(|e| e["actor"].clone()).collect())
        .unwrap_or_default();
    assert!(actors.len() >= 3, "{}", log.text);
    assert!(actors.iter().all(|a| *a == me), "{}", log.text);
    assert!(log.json[0]["session"].is_null(), "{}", log.text);

    // Naming a session acts as that session of hers.
    let u = own
        .patch(
            "/api/v1/issues/PAY-1",
            json!({"title": "Refunds v2", "actor": "laptop-1"}),
        )
        .await?;
    assert_eq!(u.status, 200, "{}", u.text);
    let last = ada
        .get("/api/v1/issues/PAY-1/events?order=desc&limit=1")
        .await?;
    assert_eq!(
        last.json[0]["actor"],
        json!({"kind": "agent", "owner": ADA, "service": null, "session": "laptop-1"}),
        "{}",
        last.text
    );
    console.stop().await;
    Ok(())
}

crate::on_both_databases!(
    own_token_acts_as_the_person,
    own_token_acts_as_the_person_sqlite,
    own_token_acts_as_the_person_postgres
);

/// Search (issue 27): a word's prefix finds it ("safar" finds "Safari") in every kind, and
/// every row says where it belongs and which page shows it: a comment or an ask names its
/// issue (never its uuid as an issue key), a comment on a document its document.
async fn search_prefixes_and_links(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    ada.post("/api/v1/projects", json!({"key": "WEB", "name": "Web"}))
        .await?;
    let i = ada
        .post(
            "/api/v1/issues",
            json!({"project": "WEB", "title": "Safari crashes on login"}),
        )
        .await?;
    assert_eq!(i.status, 201, "{}", i.text);
    let c = ada
        .post(
            "/api/v1/issues/WEB-1/comments",
            json!({"body": "Seen on Safari 17 too"}),
        )
        .await?;
    assert_eq!(c.status, 201, "{}", c.text);
    let a = agent
        .post(
            "/api/v1/issues/WEB-1/asks",
            json!({"question": "Which Safari versions matter?", "actor": "s1"}),
        )
        .await?;
    assert_eq!(a.status, 201, "{}", a.text);
    let d = ada
        .post(
            "/api/v1/issues/WEB-1/artifacts",
            json!({
                "filename": "notes.md",
                "content_type": "text/markdown",
                "content": "# Notes\n\nSafari's cache is the suspect.\n"
            }),
        )
        .await?;
    assert_eq!(d.status, 201, "{}", d.text);
    let doc = d.json["id"].as_str().unwrap_or_default().to_owned();
    let dc = ada
        .post(
            &format!("/api/v1/artifacts/{doc}/comments"),
            json!({"body": "Safari again"}),
        )
        .await?;
    assert_eq!(dc.status, 201, "{}", dc.text);

    let r = ada.get("/api/v1/search?q=safar").await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let rows = r.json["rows"].as_array().cloned().unwrap_or_default();
    let of = |kind: &str, id: &str| {
        rows.iter()
            .find(|x| x["kind"] == kind && x["id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} {id} in {}", r.text))
    };
    let issue = of("issue", "WEB-1");
    assert_eq!(issue["page"], "/issues/WEB-1");
    assert_eq!(issue["issue"], "WEB-1");
    let cid = c.json["id"].as_str().unwrap_or_default();
    let comment = of("comment", cid);
    assert_eq!(comment["issue"], "WEB-1");
    assert_eq!(comment["page"], format!("/issues/WEB-1#comment-{cid}"));
    assert!(
        comment["title"]
            .as_str()
            .is_some_and(|t| t.contains("Safari"))
    );
    let aid = a.json["id"].as_str().unwrap_or_default();
    let ask = of("ask", aid);
    assert_eq!(ask["issue"], "WEB-1");
    assert_eq!(ask["page"], format!("/asks/{aid}"));
    let document = of("document", &doc);
    assert_eq!(document["artifact"], doc.as_str());
    assert_eq!(document["issue"], "WEB-1");
    assert_eq!(document["page"], format!("/artifacts/{doc}"));
    let dcid = dc.json["id"].as_str().unwrap_or_default();
    let on_doc = of("comment", dcid);
    assert_eq!(on_doc["artifact"], doc.as_str());
    assert_eq!(
        on_doc["page"],
        format!("/artifacts/{doc}/discussion#comment-{dcid}")
    );
    // Every row has a title and a snippet, and its page is a console page.
    for row in &rows {
        assert!(
            row["page"].as_str().is_some_and(|p| p.starts_with('/')),
            "{row}"
        );
        assert!(
            row["title"].is_string() && row["snippet"].is_string(),
            "{row}"
        );
    }
    // Two prefixes narrow it: only what holds both.
    let r = ada.get("/api/v1/search?q=safar%20crash").await?;
    let ids: Vec<&str> = r.json["rows"]
        .as_array()
        .map(|a| a.iter().filter_map(|x| x["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, ["WEB-1"], "{}", r.text);
    console.stop().await;
    Ok(())
}

crate::on_both_databases!(
    search_prefixes_and_links,
    search_prefixes_and_links_sqlite,
    search_prefixes_and_links_postgres
);
