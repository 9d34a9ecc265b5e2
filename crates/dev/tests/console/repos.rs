//! Repository mappings (protocol §6.5) and issues imported from `owner/repo#n` (protocol §6.1,
//! §9, against the recorded GitHub stand-in) on SQLite and PostgreSQL, each refusal from its
//! own condition.

use reqwest::Method;
use serde_json::json;

use crate::common::*;
use crate::on_both_databases;

async fn repo_mappings(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    for (key, name) in [("API", "Api"), ("WEB", "Web")] {
        let r = ada
            .post("/api/v1/projects", json!({"key": key, "name": name}))
            .await?;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let put = |who: &Who, path: &str, body: serde_json::Value| {
        let (who, path) = (who.clone(), path.to_owned());
        async move { who.call(Method::PUT, &path, Some(body)).await }
    };

    // Set: 200 with the record, the name kept lowercase (GitHub's names are case-insensitive).
    let r = put(
        &agent,
        "/api/v1/settings/repo-projects/Acme/API",
        json!({"project": "API", "default": true}),
    )
    .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        r.json,
        json!({"repo": "acme/api", "project": "API", "default": true})
    );
    let r = put(
        &ada,
        "/api/v1/settings/repo-projects/acme/api-client",
        json!({"project": "API"}),
    )
    .await?;
    assert_eq!(r.json["default"], json!(false), "{}", r.text);
    put(
        &ada,
        "/api/v1/settings/repo-projects/acme/web",
        json!({"project": "WEB", "default": true}),
    )
    .await?;

    let list = |r: &Resp| -> Vec<(String, String, bool)> {
        r.json
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|m| {
                        (
                            m["repo"].as_str().unwrap_or("").to_owned(),
                            m["project"].as_str().unwrap_or("").to_owned(),
                            m["default"].as_bool().unwrap_or(false),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let r = agent.get("/api/v1/settings/repo-projects").await?;
    assert_eq!(
        list(&r),
        [
            ("acme/api".into(), "API".into(), true),
            ("acme/api-client".into(), "API".into(), false),
            ("acme/web".into(), "WEB".into(), true),
        ]
    );

    // One default per project: a new default takes it from the old; WEB's stays.
    put(
        &ada,
        "/api/v1/settings/repo-projects/acme/api-client",
        json!({"project": "API", "default": true}),
    )
    .await?;
    assert_eq!(
        list(&ada.get("/api/v1/settings/repo-projects").await?),
        [
            ("acme/api".into(), "API".into(), false),
            ("acme/api-client".into(), "API".into(), true),
            ("acme/web".into(), "WEB".into(), true),
        ]
    );
    // Moving a mapping to another project.
    put(
        &ada,
        "/api/v1/settings/repo-projects/acme/api",
        json!({"project": "WEB"}),
    )
    .await?;
    assert_eq!(
        list(&ada.get("/api/v1/settings/repo-projects").await?)[0],
        ("acme/api".into(), "WEB".into(), false)
    );

    // Refusals.
    for (body, code) in [
        (json!({"project": "NOPE"}), "INVALID_PROJECT"),
        (json!({"project": "nope"}), "INVALID_PROJECT"),
        (json!({"project": "API", "extra": 1}), "INVALID_BODY"),
        (json!({"default": true}), "INVALID_BODY"),
        (json!({"project": "API", "default": "yes"}), "INVALID_BODY"),
    ] {
        refused(
            &put(&ada, "/api/v1/settings/repo-projects/acme/x", body).await?,
            400,
            code,
        );
    }
    for path in [
        "/api/v1/settings/repo-projects/-acme/api",
        "/api/v1/settings/repo-projects/acme/..",
        "/api/v1/settings/repo-projects/ac_me/api",
    ] {
        refused(
            &put(&ada, path, json!({"project": "API"})).await?,
            404,
            "NOT_FOUND",
        );
    }
    refused(
        &ada.call(
            Method::POST,
            "/api/v1/settings/repo-projects/acme/api",
            None,
        )
        .await?,
        405,
        "METHOD_NOT_ALLOWED",
    );

    // Remove: 204, then it names nothing.
    let r = agent
        .call(
            Method::DELETE,
            "/api/v1/settings/repo-projects/acme/web?session=s1",
            None,
        )
        .await?;
    assert_eq!(r.status, 204, "{}", r.text);
    refused(
        &agent
            .call(
                Method::DELETE,
                "/api/v1/settings/repo-projects/acme/web",
                None,
            )
            .await?,
        404,
        "NOT_FOUND",
    );
    assert_eq!(
        list(&ada.get("/api/v1/settings/repo-projects").await?).len(),
        2
    );

    // Each change appended `repo_mapping.changed`: the record, null once removed.
    let all = read_events(&agent, None, "?since=0", 8, 10).await?;
    let events: Vec<&serde_json::Value> = all
        .iter()
        .filter(|(_, kind, _)| kind == "repo_mapping.changed")
        .map(|(_, _, e)| e)
        .collect();
    assert_eq!(events.len(), 6, "{all:?}");
    assert_eq!(events[0]["data"]["repo"], json!("acme/api"));
    assert_eq!(events[5]["data"], serde_json::Value::Null);
    assert_eq!(events[5]["project"], json!("WEB"));
    console.stop().await;
    Ok(())
}
on_both_databases!(repo_mappings, repo_mappings_sqlite, repo_mappings_postgres);

/// A GitHub stand-in serving the recorded month of `acme/shop`, accepting `GH_TOKEN`.
async fn github() -> anyhow::Result<countersign_code_host::standin::StandIn> {
    use countersign_code_host::standin::{Fixtures, StandIn, month_dir};
    let f = Fixtures::load(&month_dir()).map_err(anyhow::Error::msg)?;
    Ok(StandIn::start(f, Some(GH_TOKEN)).await?)
}

const GH_TOKEN: &str = "github_pat_test_0123456789";

/// Issues imported from `owner/repo#n` through the code-hosting client (protocol §6.1, §9)
/// against the recorded stand-in: the project from the repository's mapping, the title and
/// state from GitHub, a repeat answering the original, refs resolved, the mapping then in use;
/// each refusal from its own condition; concurrent imports of one ref make one issue.
async fn imports(db: Option<String>) -> anyhow::Result<()> {
    let gh = github().await?;
    let console = TestConsole::start(ConsoleOptions {
        local_sign_in: true,
        shared_token: true,
        database_url: db,
        code_host: Some((gh.url.clone(), Some(GH_TOKEN.into()))),
        ..Default::default()
    })
    .await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    ada.post("/api/v1/projects", json!({"key": "SHOP", "name": "Shop"}))
        .await?;
    ada.post("/api/v1/projects", json!({"key": "OPS", "name": "Ops"}))
        .await?;

    // No project and no mapping: nothing to file it under (GitHub is not asked).
    refused(
        &agent
            .post("/api/v1/issues", json!({"ref": "acme/shop#42"}))
            .await?,
        400,
        "INVALID_PROJECT",
    );
    assert_eq!(gh.served().len(), 0);
    ada.call(
        Method::PUT,
        "/api/v1/settings/repo-projects/acme/shop",
        Some(json!({"project": "SHOP", "default": true})),
    )
    .await?;

    // From the mapping; the title and state from GitHub; the creator's defaults apply.
    let r = agent
        .post(
            "/api/v1/issues",
            json!({"ref": "Acme/Shop#42", "labels": ["imported"], "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(r.json["key"], json!("SHOP-1"));
    assert_eq!(r.json["title"], json!("Checkout times out under load"));
    assert_eq!(r.json["repo"], json!("acme/shop#42"));
    assert_eq!(r.json["status"], json!("todo"));
    assert_eq!(r.json["labels"], json!(["imported"]));
    assert_eq!(r.location().as_deref(), Some("/api/v1/issues/SHOP-1"));
    // Again: the original, 200, unchanged, and GitHub is not asked again.
    let asked = gh.count("GET /repos/acme/shop/issues/42");
    let again = agent
        .post(
            "/api/v1/issues",
            json!({"ref": "acme/shop#42", "priority": 0}),
        )
        .await?;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(again.json["key"], json!("SHOP-1"));
    assert_eq!(again.json["priority"], serde_json::Value::Null);
    assert_eq!(gh.count("GET /repos/acme/shop/issues/42"), asked);
    // A closed pull request, into the project named: done.
    let r = ada
        .post(
            "/api/v1/issues",
            json!({"ref": "acme/shop#105", "project": "OPS"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    assert_eq!(
        (&r.json["key"], &r.json["status"], &r.json["title"]),
        (
            &json!("OPS-1"),
            &json!("done"),
            &json!("SHOP-4 Payment provider switch")
        )
    );
    assert!(r.json["closed_at"].is_string());

    // Refs resolve to their issues.
    let r = agent
        .get("/api/v1/issues/resolve?ref=acme/shop%2342")
        .await?;
    assert_eq!(r.json, json!({"key": "SHOP-1"}), "{}", r.text);
    refused(
        &agent
            .get("/api/v1/issues/resolve?ref=acme/shop%237")
            .await?,
        404,
        "NOT_FOUND",
    );

    // Refusals.
    refused(
        &agent
            .post("/api/v1/issues", json!({"ref": "acme/shop#999"}))
            .await?,
        404,
        "NOT_FOUND",
    );
    for body in [
        json!({"ref": "acme/shop#0"}),
        json!({"ref": "acme/shop"}),
        json!({"ref": "acme/shop#1", "title": "mine"}),
        json!({"ref": 42}),
    ] {
        refused(
            &agent.post("/api/v1/issues", body).await?,
            400,
            "INVALID_BODY",
        );
    }
    refused(
        &agent
            .post(
                "/api/v1/issues",
                json!({"ref": "acme/shop#7", "project": "nope"}),
            )
            .await?,
        400,
        "INVALID_PROJECT",
    );
    gh.once(
        "GET /repos/acme/shop/issues/7",
        countersign_code_host::standin::Recorded::json(502, &json!({"message": "Server Error"})),
    );
    refused(
        &agent
            .post("/api/v1/issues", json!({"ref": "acme/shop#7"}))
            .await?,
        503,
        "CODE_HOST_UNAVAILABLE",
    );
    // A rotated token the stand-in no longer accepts: no access.
    gh.accept_token(Some("another-token"));
    refused(
        &agent
            .post("/api/v1/issues", json!({"ref": "acme/shop#7"}))
            .await?,
        409,
        "SOURCE_ACCESS",
    );
    gh.accept_token(Some(GH_TOKEN));

    // The mapping is in use now: it names the issues.
    let r = ada
        .call(
            Method::DELETE,
            "/api/v1/settings/repo-projects/acme/shop",
            None,
        )
        .await?;
    refused(&r, 409, "MAPPING_IN_USE");
    assert_eq!(r.json["issues"], json!(["OPS-1", "SHOP-1"]));

    // Twenty imports of one ref at once: one issue, one 201, the others 200 with its key.
    let mut tasks = Vec::new();
    for i in 0..20 {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            agent
                .post(
                    "/api/v1/issues",
                    json!({"ref": "acme/shop#105", "project": "SHOP", "actor": format!("s{i}")}),
                )
                .await
        }));
    }
    let mut created = 0;
    let mut keys = std::collections::HashSet::new();
    for t in tasks {
        let r = t.await??;
        assert!(r.status == 200 || r.status == 201, "{}", r.text);
        created += usize::from(r.status == 201);
        keys.insert(r.json["key"].as_str().unwrap_or("").to_owned());
    }
    // OPS-1 was imported from #105 already: every one answers it.
    assert_eq!((created, keys.len()), (0, 1));
    assert!(keys.contains("OPS-1"));
    gh.assert_no_misses();
    console.stop().await;
    Ok(())
}
on_both_databases!(imports, imports_sqlite, imports_postgres);

/// Concurrent imports of a ref not imported yet make exactly one issue.
async fn concurrent_imports(db: Option<String>) -> anyhow::Result<()> {
    let gh = github().await?;
    let console = TestConsole::start(ConsoleOptions {
        shared_token: true,
        database_url: db,
        code_host: Some((gh.url.clone(), Some(GH_TOKEN.into()))),
        ..Default::default()
    })
    .await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    agent
        .post(
            "/api/v1/projects",
            json!({"key": "SHOP", "name": "Shop", "actor": "s0"}),
        )
        .await?;
    let mut tasks = Vec::new();
    for i in 0..20 {
        let agent = agent.clone();
        tasks.push(tokio::spawn(async move {
            agent
                .post(
                    "/api/v1/issues",
                    json!({"ref": "acme/shop#42", "project": "SHOP", "actor": format!("s{i}")}),
                )
                .await
        }));
    }
    let mut created = 0;
    let mut keys = std::collections::HashSet::new();
    for t in tasks {
        let r = t.await??;
        assert!(r.status == 200 || r.status == 201, "{}", r.text);
        created += usize::from(r.status == 201);
        keys.insert(r.json["key"].as_str().unwrap_or("").to_owned());
    }
    assert_eq!((created, keys.len()), (1, 1), "{keys:?}");
    let list = agent.get("/api/v1/issues?project=SHOP").await?;
    assert_eq!(list.json.as_array().map(Vec::len), Some(1), "{}", list.text);
    gh.assert_no_misses();
    console.stop().await;
    Ok(())
}
on_both_databases!(
    concurrent_imports,
    concurrent_imports_sqlite,
    concurrent_imports_postgres
);

/// Without `[code_hosting]`, or without a token file, an import is no access.
#[tokio::test]
async fn imports_need_the_integration() -> anyhow::Result<()> {
    let gh = github().await?;
    for code_host in [None, Some((gh.url.clone(), None))] {
        let console = TestConsole::start(ConsoleOptions {
            shared_token: true,
            code_host,
            ..Default::default()
        })
        .await?;
        let agent = Who::agent(&console, SHARED_TOKEN);
        agent
            .post(
                "/api/v1/projects",
                json!({"key": "SHOP", "name": "Shop", "actor": "s0"}),
            )
            .await?;
        refused(
            &agent
                .post(
                    "/api/v1/issues",
                    json!({"ref": "acme/shop#42", "project": "SHOP"}),
                )
                .await?,
            409,
            "SOURCE_ACCESS",
        );
        console.stop().await;
    }
    assert_eq!(gh.served().len(), 0);
    gh.assert_no_misses();
    Ok(())
}
