//! Repository mappings (protocol §6.5) on SQLite and PostgreSQL: set, list with the default
//! mark, one default per project, remove, and each refusal from its own condition.

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
