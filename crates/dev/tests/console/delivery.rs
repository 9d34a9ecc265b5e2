//! The delivery routes end to end, on SQLite and PostgreSQL, with GitHub served by the recorded
//! stand-in (`crates/code-host/fixtures/month`: the story is in `month.py`). An unrecorded
//! request fails the test (the stand-in's drop panics, and each test asserts none happened).

use std::sync::Arc;

use countersign_code_host::standin::{Fixtures, Recorded, StandIn, month_dir};
use countersign_console_core::ManualClock;
use countersign_console_core::work::delivery::Targets;
use countersign_console_http::config::CodeHostingConfig;
use futures_util::SinkExt;
use reqwest::Method;
use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

use crate::common::*;
use crate::on_both_databases;

const GH_TOKEN: &str = "github_pat_console_test_0123456789";
const MONTH: &str = "from=2026-03-02&to=2026-04-01";

pub struct Rig {
    pub console: TestConsole,
    pub standin: StandIn,
    _dir: tempfile::TempDir,
}

pub async fn rig(db: Option<String>) -> anyhow::Result<Rig> {
    let standin = StandIn::start(
        Fixtures::load(&month_dir()).map_err(anyhow::Error::msg)?,
        Some(GH_TOKEN),
    )
    .await?;
    let dir = tempfile::tempdir()?;
    let token = dir.path().join("github-token");
    std::fs::write(&token, GH_TOKEN)?;
    // The sync runs at 2026-04-01T00:00:00Z over the 30 days before, as the fixtures record.
    let clock = Arc::new(ManualClock::new(
        chrono::DateTime::parse_from_rfc3339("2026-04-01T00:00:00Z")?.with_timezone(&chrono::Utc),
    ));
    let console = TestConsole::start(ConsoleOptions {
        local_sign_in: true,
        shared_token: true,
        database_url: db,
        clock: Some(clock),
        code_hosting: Some(CodeHostingConfig {
            api_url: standin.url.clone(),
            token_file: Some(token),
        }),
        delivery_targets: Some(Targets {
            deploys_per_day: Some(0.25),
            merge_to_production_seconds: Some(14_400.0),
            change_failure_rate: Some(0.15),
            deploy_run_success: Some(0.95),
            ..Default::default()
        }),
        ..Default::default()
    })
    .await?;
    Ok(Rig {
        console,
        standin,
        _dir: dir,
    })
}

pub fn settings() -> Value {
    json!({
        "deploy_repository": "acme/shop",
        "workflow_paths": [".github/workflows/deploy.yml", ".github/workflows/checks.yml"],
        "production_jobs": ["production-deploy"],
        "production_apply_step": "terraform apply",
        "population_authors": ["agent-bot", "alice", "bob"],
        "excluded_repositories": [],
        "staging_e2e_job": "staging-e2e",
        "staging_deploy_job": "staging-deploy",
        "pr_checks_rollup_job": "checks-rollup"
    })
}

/// Project SHOP with issues SHOP-1..SHOP-9 (priorities and components as the comments say)
/// and an unowned P0, SHOP-10.
pub async fn shop_issues(ada: &Who, agent: &Who) -> anyhow::Result<()> {
    let r = ada
        .post("/api/v1/projects", json!({"key": "SHOP", "name": "Shop"}))
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let explicit = |ids: &[&str]| json!({"mode": "explicit", "ids": ids});
    let issues = [
        ("Cart badge", Some(1), Some(explicit(&["cart"]))),
        ("Footer", Some(2), None),
        ("Checkout retries", Some(1), Some(explicit(&["payments"]))),
        ("Payment provider", Some(0), Some(explicit(&["payments"]))),
        ("Search filters", Some(2), Some(explicit(&["search"]))),
        ("Wishlist", Some(1), Some(explicit(&["storefront"]))),
        ("Wishlist sharing", Some(2), Some(explicit(&["storefront"]))),
        (
            "Order export",
            Some(3),
            Some(json!({"mode": "none", "reason": "back office"})),
        ),
        ("Loyalty points", None, None),
    ];
    for (title, priority, components) in issues {
        let mut b = json!({"project": "SHOP", "title": title, "priority": priority});
        if let Some(c) = components {
            b["components"] = c;
        }
        let r = ada.post("/api/v1/issues", b).await?;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    // An agent's issue has no assignee: an open P0 with no owner.
    let r = agent
        .post(
            "/api/v1/issues",
            json!({"project": "SHOP", "title": "Outage follow-up", "priority": 0}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    Ok(())
}

/// A share or rate, to within float parsing (serde_json's default parse is not exact).
#[track_caller]
fn close(v: &Value, expected: f64) {
    let got = v.as_f64().unwrap_or(f64::NAN);
    assert!((got - expected).abs() < 1e-9, "{got} is not {expected}");
}

fn numbers(v: &Value) -> Vec<i64> {
    v.as_array()
        .map(|a| a.iter().filter_map(|x| x["number"].as_i64()).collect())
        .unwrap_or_default()
}

async fn synced(who: &Who) -> anyhow::Result<()> {
    eventually(60, || async {
        let r = who
            .get(&format!("/api/v1/delivery/measures?{MONTH}"))
            .await?;
        Ok((r.status == 200 && !r.json["freshness"]["synced_at"].is_null()).then_some(()))
    })
    .await
}

async fn a_month_of_delivery(db: Option<String>) -> anyhow::Result<()> {
    let rig = rig(db).await?;
    let ada = Who::person(&rig.console, ADA).await?;
    let agent = Who::agent(&rig.console, SHARED_TOKEN);
    // Nothing configured yet.
    let r = ada.get("/api/v1/delivery/settings").await?;
    assert_eq!((r.status, r.json.clone()), (200, Value::Null));
    for path in [
        "/api/v1/delivery/timeline",
        "/api/v1/delivery/measures",
        "/api/v1/delivery/pipeline",
        "/api/v1/delivery/runs/9000001",
    ] {
        refused(&ada.get(path).await?, 404, "DELIVERY_NOT_CONFIGURED");
    }
    shop_issues(&ada, &agent).await?;
    let r = ada
        .post(
            "/api/v1/delivery/session-groups",
            json!({"name": "Alpha team", "sessions": ["s-alpha", "s-beta"]}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    // The component tree, for the component facet.
    let r = ada
        .call(
            Method::PUT,
            "/api/v1/projects/SHOP/architecture-source",
            Some(json!({"repo": "acme/shop", "branch": "main"})),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = ada
        .post("/api/v1/projects/SHOP/architecture-source/sync", json!({}))
        .await?;
    assert_eq!(
        (r.status, r.json["last_error"].clone()),
        (200, Value::Null),
        "{}",
        r.text
    );

    let r = agent
        .call(
            Method::PUT,
            "/api/v1/delivery/settings",
            Some({
                let mut s = settings();
                s["actor"] = json!("s-admin");
                s
            }),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["deploy_repository"], "acme/shop");
    synced(&ada).await?;

    // ----- measures over March 2..31, computed by hand from the fixture's story -----
    let m = ada
        .get(&format!("/api/v1/delivery/measures?{MONTH}"))
        .await?;
    assert_eq!(m.status, 200, "{}", m.text);
    let m = &m.json;
    // Successful production deploys in the window: D0..D9 less the failed D5 = 9, over 30
    // days: 0.3 a day.
    close(&m["deploys_per_day"], 0.3);
    // Production deploy runs: 10, of which 9 succeeded.
    close(&m["deploy_run_success"], 0.9);
    let lt = &m["lead_time"];
    // Eleven population PRs deployed in the window (renovate's #104 is outside the
    // population). Merge to production, seconds, sorted: 2880 (#106), 4680 (#108),
    // 6480 (#111), 11880 (#107), 15480 (#105), 15480 (#110), 69480 (#102), 80280 (#101),
    // 80280 (#103), 87480 (#112), 188280 (#109): median 15480.
    assert_eq!(lt["merge_to_production"]["count"], 11);
    assert_eq!(lt["merge_to_production"]["median"].as_f64(), Some(15480.0));
    // First commit to production: 4800, 7080, 8580, 95580, 105480, 109080, 109080, 175680,
    // 177480, 181080, 281880: median 109080.
    assert_eq!(
        lt["first_commit_to_production"]["median"].as_f64(),
        Some(109_080.0)
    );
    // Open to production: 4680, 6480, 8280, 94680, 101880, 105480, 105480, 173880, 173880,
    // 177480, 278280: median 105480.
    assert_eq!(lt["open_to_production"]["median"].as_f64(), Some(105_480.0));
    // Open to merge, the 13 population PRs merged in the window: 1800 ×3, 25200, 86400,
    // 90000 ×5, 93600 ×2, 262800: median (7th) 90000.
    assert_eq!(lt["open_to_merge"]["count"], 13);
    assert_eq!(lt["open_to_merge"]["median"].as_f64(), Some(90_000.0));
    // Failed changes: #105 (reverted by #106) shipped by D3, #110 (reverted by #111) by D7:
    // 2 of 9 deploys, 2 of 11 PRs; no stored flag in the window.
    let cfr = &m["change_failure_rate"];
    close(&cfr["per_deploy"], 2.0 / 9.0);
    close(&cfr["per_pr"], 2.0 / 11.0);
    assert_eq!(cfr["flags_source"], "derived");
    // Restore: D3 14:18 → D4 16:18 (ships the revert) = 7200 s; D7 03-19 14:18 → D8 03-20
    // 11:18 = 75600 s; median 41400.
    assert_eq!(m["time_to_restore"]["count"], 2);
    assert_eq!(m["time_to_restore"]["median"].as_f64(), Some(41_400.0));
    // Rework: #106, #111 (reverts) and #108 (hotfix) of 13 merged.
    close(&m["rework_share"], 3.0 / 13.0);
    assert_eq!(m["open_p0_unowned"]["issues"], json!(["SHOP-10"]));
    assert_eq!(m["daily"].as_array().map(Vec::len), Some(30));
    let d10 = m["daily"]
        .as_array()
        .and_then(|d| d.iter().find(|x| x["day"] == "2026-03-10").cloned())
        .unwrap_or_default();
    assert_eq!(
        (
            d10["deploys"].as_i64(),
            d10["failed_deploys"].as_i64(),
            d10["merges"].as_i64()
        ),
        (Some(2), Some(1), Some(2))
    );
    // Targets: 0.3 ≥ 0.25 met; 15480 ≤ 14400 not; 0.22 ≤ 0.15 not; 0.9 ≥ 0.95 not.
    let t = &m["targets"];
    assert_eq!(t["deploys_per_day"]["met"], true);
    assert_eq!(t["merge_to_production"]["met"], false);
    assert_eq!(t["change_failure_rate"]["met"], false);
    assert_eq!(t["deploy_run_success"]["met"], false);

    // ----- the timeline -----
    let t = ada
        .get(&format!("/api/v1/delivery/timeline?{MONTH}"))
        .await?;
    assert_eq!(t.status, 200, "{}", t.text);
    let t = &t.json;
    assert_eq!(
        numbers(&t["merges"]),
        vec![
            114, 113, 112, 111, 110, 109, 108, 107, 106, 105, 103, 102, 101
        ]
    );
    let deploys = t["deploys"].as_array().cloned().unwrap_or_default();
    assert_eq!(deploys.len(), 9);
    let d6 = deploys
        .iter()
        .find(|d| d["run"] == 9_000_007)
        .cloned()
        .unwrap_or_default();
    assert_eq!(d6["pulls"], json!([107, 108]));
    let d3 = deploys
        .iter()
        .find(|d| d["run"] == 9_000_004)
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        (d3["pulls"].clone(), d3["failed_change"].clone()),
        (json!([105]), json!(true))
    );
    let failures = t["failures"].as_array().cloned().unwrap_or_default();
    assert_eq!(failures.len(), 1);
    assert_eq!(
        (
            failures[0]["run"].as_i64(),
            failures[0]["production_job"].as_str(),
            failures[0]["failing_job"].as_str(),
            failures[0]["failing_step"].as_str()
        ),
        (
            Some(9_000_006),
            Some("production-deploy"),
            Some("production-deploy"),
            Some("terraform apply")
        )
    );
    assert_eq!(numbers(&t["waiting"]), vec![113, 114]);
    let pr = |n: i64| {
        t["merges"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["number"] == n).cloned())
            .unwrap_or_default()
    };
    // Issues: title first (SHOP-1), else the head branch (SHOP-2-footer), else none.
    assert_eq!(
        (pr(101)["issue"].clone(), pr(101)["issue_title"].clone()),
        (json!("SHOP-1"), json!("Cart badge"))
    );
    assert_eq!(pr(102)["issue"], "SHOP-2");
    assert_eq!(pr(108)["issue"], Value::Null);
    // Sessions oldest commit first; the group is the parent agent of PRs whose first session
    // it holds.
    assert_eq!(pr(103)["sessions"], json!(["s-beta", "s-alpha"]));
    assert_eq!(pr(103)["parent_agent"], "Alpha team");
    assert_eq!(pr(110)["parent_agent"], "s-epsilon");
    assert_eq!(pr(113)["deployed_status"], "waiting");
    assert_eq!(pr(101)["deployed_status"], "deployed");
    assert_eq!(t["issue_titles"]["SHOP-6"], "Wishlist");
    assert_eq!(t["components"]["cart"]["parent"], "storefront");
    assert!(t["freshness"]["error"].is_null());
    assert_eq!(t["session_groups"][0]["name"], "Alpha team");
    // Colours: parent agents with nothing applied.
    assert_eq!(
        t["color_counts"],
        json!({"Alpha team": 4, "s-gamma": 1, "s-delta": 1, "s-epsilon": 2, "__no_session__": 5})
    );
    assert_eq!(t["measures"]["deploys_per_day"].as_f64(), Some(0.3));

    // Facets: two applied; each facet's counts ignore it alone.
    let f = ada
        .get(&format!(
            "/api/v1/delivery/timeline?{MONTH}&session=s-alpha&priority=P1"
        ))
        .await?;
    assert_eq!(numbers(&f.json["merges"]), vec![109, 103, 101]);
    assert_eq!(f.json["facet_counts"]["priority"]["P1"], 3);
    assert_eq!(
        f.json["facet_counts"]["session"],
        json!({"s-alpha": 3, "s-beta": 1})
    );
    assert_eq!(f.json["color_counts"]["__no_session__"], 5);
    // Absence values; a parent component includes its children; search by title or number.
    let f = ada
        .get(&format!(
            "/api/v1/delivery/timeline?{MONTH}&issue=__no_issue__"
        ))
        .await?;
    assert_eq!(numbers(&f.json["merges"]), vec![114, 108]);
    let f = ada
        .get(&format!(
            "/api/v1/delivery/timeline?{MONTH}&component=storefront"
        ))
        .await?;
    assert_eq!(numbers(&f.json["merges"]), vec![111, 110, 109, 101]);
    let f = ada
        .get(&format!(
            "/api/v1/delivery/timeline?{MONTH}&component=__no_component__&deployed=waiting"
        ))
        .await?;
    assert_eq!(numbers(&f.json["merges"]), vec![114, 113]);
    let f = ada
        .get(&format!("/api/v1/delivery/timeline?{MONTH}&q=wishlist"))
        .await?;
    assert_eq!(numbers(&f.json["merges"]), vec![111, 110, 109]);
    let f = ada
        .get(&format!(
            "/api/v1/delivery/timeline?{MONTH}&q=%23112&rework=false"
        ))
        .await?;
    assert_eq!(numbers(&f.json["merges"]), vec![112]);
    let f = ada
        .get(&format!(
            "/api/v1/delivery/timeline?{MONTH}&priority=__no_priority__&author=agent-bot"
        ))
        .await?;
    assert_eq!(numbers(&f.json["merges"]), vec![113]);
    refused(
        &ada.get("/api/v1/delivery/timeline?priority=P7").await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &ada.get("/api/v1/delivery/timeline?from=yesterday").await?,
        400,
        "INVALID_QUERY",
    );
    refused(
        &ada.get("/api/v1/delivery/measures?nope=1").await?,
        400,
        "INVALID_QUERY",
    );
    // The default window is the seven days before now (2026-03-25..04-01): #112..#114.
    let f = ada.get("/api/v1/delivery/timeline").await?;
    assert_eq!(numbers(&f.json["merges"]), vec![114, 113, 112]);

    // ----- the pipeline page and one run -----
    let p = ada.get("/api/v1/delivery/pipeline?at=2026-03-31").await?;
    assert_eq!(p.status, 200, "{}", p.text);
    assert_eq!(p.json["days"].as_array().map(Vec::len), Some(7));
    assert_eq!(p.json["days"][0]["day"], "2026-03-25");
    assert_eq!(p.json["slowest_jobs"][0]["name"], "integration");
    let d = p.json["days"]
        .as_array()
        .and_then(|d| d.iter().find(|x| x["day"] == "2026-03-26").cloned())
        .unwrap_or_default();
    // D9 ran on 03-26: its production job took five minutes, staging e2e six.
    assert_eq!(
        d["production_deploy"]["median_seconds"].as_f64(),
        Some(300.0)
    );
    assert_eq!(d["staging_e2e"]["median_seconds"].as_f64(), Some(360.0));
    assert!(d["pr_checks"]["runs"].as_i64().unwrap_or(0) > 30);
    for j in p.json["failed_jobs"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        assert!(
            j["name"] == "integration" || j["name"] == "checks-rollup",
            "{j}"
        );
    }
    refused(
        &ada.get("/api/v1/delivery/pipeline?at=2026-3-31").await?,
        400,
        "INVALID_QUERY",
    );
    let run = ada.get("/api/v1/delivery/runs/9000006").await?;
    assert_eq!(run.status, 200, "{}", run.text);
    assert_eq!(run.json["jobs"].as_array().map(Vec::len), Some(4));
    assert_eq!(run.json["jobs"][3]["steps"][2]["conclusion"], "failure");
    refused(
        &ada.get("/api/v1/delivery/runs/abc").await?,
        400,
        "RUN_ID_INPUT",
    );
    refused(
        &ada.get("/api/v1/delivery/runs/0").await?,
        400,
        "RUN_ID_INPUT",
    );
    rig.standin.put(
        "GET /repos/acme/shop/actions/runs/1",
        Recorded::json(404, &json!({"message": "Not Found"})),
    );
    refused(&ada.get("/api/v1/delivery/runs/1").await?, 404, "NOT_FOUND");
    let s = ada.get("/api/v1/delivery/settings").await?;
    assert_eq!(s.json["production_apply_step"], "terraform apply");
    rig.standin.assert_no_misses();
    rig.console.stop().await;
    Ok(())
}

on_both_databases!(
    a_month_of_delivery,
    a_month_of_delivery_sqlite,
    a_month_of_delivery_postgres
);

async fn open_link(
    console: &TestConsole,
    session: &str,
    title: &str,
) -> anyhow::Result<impl Sized + use<>> {
    let url = format!(
        "{}/link/v1/sessions/{session}",
        console.url.replace("http://", "ws://")
    );
    let mut req = url.into_client_request()?;
    req.headers_mut()
        .insert("authorization", format!("Bearer {SHARED_TOKEN}").parse()?);
    req.headers_mut()
        .insert("sec-websocket-protocol", "countersign.link.v1".parse()?);
    let (mut ws, _) = tokio_tungstenite::connect_async(req).await?;
    ws.send(Message::Text(
        json!({"type": "hello", "title": title, "roles": [], "capabilities": [], "modes": ["send"]}).to_string().into(),
    ))
    .await?;
    Ok(ws)
}

async fn refusals(db: Option<String>) -> anyhow::Result<()> {
    let rig = rig(db).await?;
    let ada = Who::person(&rig.console, ADA).await?;
    let agent = Who::agent(&rig.console, SHARED_TOKEN);
    let put = |who: &Who, body: Value| {
        let who = who.clone();
        async move {
            who.call(Method::PUT, "/api/v1/delivery/settings", Some(body))
                .await
        }
    };
    // Settings: an unknown field, a bad shape, a repository the token cannot read, GitHub down.
    let mut s = settings();
    s["colour"] = json!("blue");
    refused(&put(&ada, s).await?, 400, "INVALID_BODY");
    let mut s = settings();
    s["workflow_paths"] = json!(["deploy.yml"]);
    refused(&put(&ada, s).await?, 400, "INVALID_BODY");
    let mut s = settings();
    s["deploy_repository"] = json!("acme/secret");
    refused(&put(&ada, s).await?, 409, "DELIVERY_SETTINGS_ACCESS");
    rig.standin.put(
        "GET /repos/acme/down",
        Recorded::json(502, &json!({"message": "Server Error"})),
    );
    let mut s = settings();
    s["deploy_repository"] = json!("acme/down");
    refused(&put(&ada, s).await?, 503, "CODE_HOST_UNAVAILABLE");
    assert_eq!(
        ada.get("/api/v1/delivery/settings").await?.json,
        Value::Null
    );

    // Session groups.
    let post = |body: Value| ada.post("/api/v1/delivery/session-groups", body);
    refused(
        &post(json!({"name": "G", "sessions": []})).await?,
        400,
        "SESSION_GROUP_INPUT",
    );
    refused(
        &post(json!({"name": "G", "sessions": ["a"], "extra": 1})).await?,
        400,
        "SESSION_GROUP_INPUT",
    );
    refused(
        &post(json!({"name": "G"})).await?,
        400,
        "SESSION_GROUP_INPUT",
    );
    refused(
        &post(json!({"name": "x".repeat(81), "sessions": ["a"]})).await?,
        400,
        "CAP_EXCEEDED",
    );
    let g = post(json!({"name": "Builders", "sessions": ["s-1", "s-2"]})).await?;
    assert_eq!(g.status, 201, "{}", g.text);
    let id = g.json["id"].as_str().unwrap_or_default().to_owned();
    refused(
        &post(json!({"name": "Others", "sessions": ["s-2"]})).await?,
        409,
        "SESSION_IN_GROUP",
    );
    refused(
        &post(json!({"name": "builders", "sessions": ["s-3"]})).await?,
        409,
        "SESSION_GROUP_NAME_TAKEN",
    );
    let _link = open_link(&rig.console, "s-live", "Night shift").await?;
    eventually(10, || async {
        let r = agent.get("/api/v1/sessions").await?;
        Ok(r.text.contains("s-live").then_some(()))
    })
    .await?;
    refused(
        &post(json!({"name": "Night shift", "sessions": ["s-4"]})).await?,
        409,
        "SESSION_GROUP_NAME_IS_SESSION_TITLE",
    );
    // The name of a session inside the group is allowed.
    let n = post(json!({"name": "Night shift", "sessions": ["s-live"]})).await?;
    assert_eq!(n.status, 201, "{}", n.text);
    let path = format!("/api/v1/delivery/session-groups/{id}");
    let r = agent
        .patch(
            &path,
            json!({"add": ["s-3"], "remove": ["s-1"], "name": "Makers", "actor": "s-3"}),
        )
        .await?;
    assert_eq!(
        (r.status, r.json["sessions"].clone(), r.json["name"].clone()),
        (200, json!(["s-2", "s-3"]), json!("Makers")),
        "{}",
        r.text
    );
    refused(
        &ada.patch(&path, json!({"remove": ["s-2", "s-3"]})).await?,
        400,
        "SESSION_GROUP_INPUT",
    );
    refused(
        &ada.patch(&path, json!({"add": ["s-live"]})).await?,
        409,
        "SESSION_IN_GROUP",
    );
    refused(
        &ada.patch(&path, json!({"name": "night shift"})).await?,
        409,
        "SESSION_GROUP_NAME_TAKEN",
    );
    refused(
        &ada.patch(&path, json!({"nme": "x"})).await?,
        400,
        "SESSION_GROUP_INPUT",
    );
    refused(
        &ada.patch(
            "/api/v1/delivery/session-groups/not-a-uuid",
            json!({"name": "x"}),
        )
        .await?,
        404,
        "NOT_FOUND",
    );
    assert_eq!(ada.call(Method::DELETE, &path, None).await?.status, 204);
    refused(
        &ada.call(Method::DELETE, &path, None).await?,
        404,
        "NOT_FOUND",
    );

    // Architecture sources.
    let r = ada
        .post("/api/v1/projects", json!({"key": "SHOP", "name": "Shop"}))
        .await?;
    assert_eq!(r.status, 201);
    let src = "/api/v1/projects/SHOP/architecture-source";
    assert_eq!(ada.get(src).await?.json, Value::Null);
    refused(
        &ada.get("/api/v1/projects/SHOP/components").await?,
        404,
        "SOURCE_NOT_FOUND",
    );
    refused(
        &ada.post(&format!("{src}/sync"), json!({})).await?,
        404,
        "SOURCE_NOT_FOUND",
    );
    refused(
        &ada.call(Method::DELETE, src, None).await?,
        404,
        "SOURCE_NOT_FOUND",
    );
    refused(
        &ada.get("/api/v1/projects/NOPE/architecture-source").await?,
        404,
        "NOT_FOUND",
    );
    let put_src = |body: Value| ada.call(Method::PUT, src, Some(body));
    refused(
        &put_src(json!({"repo": "acme/secret", "branch": "main"})).await?,
        409,
        "SOURCE_ACCESS",
    );
    refused(
        &put_src(json!({"repo": "acme/shop", "branch": "nope"})).await?,
        409,
        "SOURCE_ACCESS",
    );
    refused(
        &put_src(json!({"repo": "acme/down", "branch": "main"})).await?,
        503,
        "CODE_HOST_UNAVAILABLE",
    );
    refused(
        &put_src(json!({"repo": "acme/shop"})).await?,
        400,
        "INVALID_BODY",
    );
    // A branch with no catalog file: set, and its import records the missing catalog.
    let r = put_src(json!({"repo": "acme/shop", "branch": "release/2026-03"})).await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = ada.post(&format!("{src}/sync"), json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.json["last_error"]
            .as_str()
            .unwrap_or("")
            .contains("catalog-info.yaml"),
        "{}",
        r.text
    );
    // The main branch: imported at once (the PUT starts it), the tree with attached work.
    shop_issues_after_project(&ada).await?;
    let r = put_src(json!({"repo": "acme/shop", "branch": "main"})).await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let tree = eventually(30, || async {
        let r = ada.get("/api/v1/projects/SHOP/components").await?;
        Ok((r.status == 200
            && r.json["source"]["branch"] == "main"
            && !r.json["source"]["synced_at"].is_null())
        .then_some(r.json))
    })
    .await?;
    let ids: Vec<&str> = tree["components"]
        .as_array()
        .map(|a| a.iter().filter_map(|c| c["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(
        ids,
        vec!["shop", "storefront", "cart", "checkout", "payments"]
    );
    let node = |id: &str| {
        tree["components"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["id"] == id).cloned())
            .unwrap_or_default()
    };
    assert_eq!(node("payments")["counts"]["open"], 2);
    assert_eq!(node("shop")["counts"]["open_with_children"], 5);
    assert_eq!(node("cart")["issues"][0]["key"], "SHOP-1");
    let keys = |v: &Value| {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| x["key"].as_str().map(str::to_owned))
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    assert_eq!(keys(&tree["not_architectural"]), vec!["SHOP-8"]);
    assert_eq!(keys(&tree["retired_links"]), vec!["SHOP-5"]);
    assert_eq!(tree["retired_links"][0]["ids"], json!(["search"]));
    assert_eq!(
        keys(&tree["unassigned"]),
        vec!["SHOP-2", "SHOP-9", "SHOP-10"]
    );
    let r = agent
        .post(&format!("{src}/sync"), json!({"actor": "s-9"}))
        .await?;
    assert_eq!(
        (r.status, r.json["last_error"].clone()),
        (200, Value::Null),
        "{}",
        r.text
    );
    // GitHub failing during a sync: 200 with last_error; a branch gone: SOURCE_ACCESS.
    rig.standin.once(
        "GET /repos/acme/shop/branches/main",
        Recorded::json(503, &json!({"message": "unavailable"})),
    );
    let r = ada.post(&format!("{src}/sync"), json!({})).await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.json["last_error"].is_null());
    rig.standin.once(
        "GET /repos/acme/shop/branches/main",
        Recorded::json(404, &json!({"message": "Branch not found"})),
    );
    refused(
        &ada.post(&format!("{src}/sync"), json!({})).await?,
        409,
        "SOURCE_ACCESS",
    );
    let list = ada.get("/api/v1/architecture-sources").await?;
    assert_eq!(list.json[0]["project"], "SHOP");
    assert!(!list.json[0]["last_error"].is_null());
    assert_eq!(ada.call(Method::DELETE, src, None).await?.status, 204);
    assert_eq!(ada.get(src).await?.json, Value::Null);
    // The events.
    let ev = ada.get("/api/v1/issues/SHOP-1/events").await?;
    assert_eq!(ev.status, 200);
    rig.standin.assert_no_misses();
    rig.console.stop().await;
    Ok(())
}

/// SHOP's issues when the project exists already.
async fn shop_issues_after_project(ada: &Who) -> anyhow::Result<()> {
    let explicit = |ids: &[&str]| json!({"mode": "explicit", "ids": ids});
    let rows = [
        ("Cart badge", Some(explicit(&["cart"]))),
        ("Footer", None),
        ("Checkout retries", Some(explicit(&["payments"]))),
        ("Payment provider", Some(explicit(&["payments"]))),
        ("Search filters", Some(explicit(&["search"]))),
        ("Wishlist", Some(explicit(&["storefront"]))),
        ("Wishlist sharing", Some(explicit(&["storefront"]))),
        (
            "Order export",
            Some(json!({"mode": "none", "reason": "back office"})),
        ),
        ("Loyalty points", None),
        ("Outage follow-up", None),
    ];
    for (title, components) in rows {
        let mut b = json!({"project": "SHOP", "title": title});
        if let Some(c) = components {
            b["components"] = c;
        }
        let r = ada.post("/api/v1/issues", b).await?;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    Ok(())
}

on_both_databases!(refusals, refusals_sqlite, refusals_postgres);

/// What the delivery pages' browser tests start from: the month of SHOP synced through the
/// stand-in, and Ada signed in to its timeline in Chromium (the driver and the profile kept
/// beside the browser, alive as long as it is).
struct MonthInBrowser {
    rig: Rig,
    ada: Who,
    b: crate::common::webdriver::Browser,
    driver: crate::common::webdriver::Driver,
    profiles: tempfile::TempDir,
}

/// [`MonthInBrowser`]; none without Chromium (unless `COUNTERSIGN_REQUIRE_BROWSER=1`).
async fn month_in_browser() -> anyhow::Result<Option<MonthInBrowser>> {
    use crate::common::webdriver::{Driver, browser_or_skip};
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(None);
    };
    let rig = rig(None).await?;
    let ada = Who::person(&rig.console, ADA).await?;
    let agent = Who::agent(&rig.console, SHARED_TOKEN);
    shop_issues(&ada, &agent).await?;
    let r = ada
        .call(Method::PUT, "/api/v1/delivery/settings", Some(settings()))
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    synced(&ada).await?;

    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let b = driver
        .browser(&chromium, &profiles.path().join("ada"))
        .await?;
    b.goto(&format!("{}/delivery?{MONTH}", rig.console.url))
        .await?;
    b.wait_for("#email", 10).await?;
    b.type_into("#email", ADA).await?;
    b.click("form.local button[type=submit]").await?;
    b.wait_text("h1", "Delivery", 10).await?;
    Ok(Some(MonthInBrowser {
        rig,
        ada,
        b,
        driver,
        profiles,
    }))
}

/// The timeline page in headless Chromium with two facets applied (session and priority):
/// the merges narrow to the three PRs both select, the facet counts follow, and the daily
/// chart is drawn as SVG.
#[tokio::test]
async fn timeline_page_with_two_facets_in_the_browser() -> anyhow::Result<()> {
    let Some(MonthInBrowser {
        rig,
        ada: _,
        b,
        driver: _driver,
        profiles: _profiles,
    }) = month_in_browser().await?
    else {
        return Ok(());
    };
    assert_eq!(b.attribute("#merges", "data-count").await?, "13");
    assert!(
        b.source().await.contains("<rect"),
        "the daily chart is drawn"
    );
    b.click("details[data-facet=session] > summary").await?;
    b.click("details[data-facet=session] input[value=s-alpha]")
        .await?;
    b.click("details[data-facet=priority] > summary").await?;
    b.click("details[data-facet=priority] input[value=P1]")
        .await?;
    b.click("#apply").await?;
    b.wait_for("#merges[data-count='3']", 10).await?;
    let url = b.current_url().await?;
    assert!(
        url.contains("session=s-alpha") && url.contains("priority=P1"),
        "{url}"
    );
    for n in [101, 103, 109] {
        b.wait_for(&format!("#merges tr[data-pr='{n}']"), 5).await?;
    }
    b.screenshot(&crate::browser::shots().join("delivery-timeline.png"))
        .await?;
    // What changes with no event (a background sync) still reaches the open page: its
    // freshness line and data are fetched again every 30 s while it is visible. A line made
    // stale here comes back from the server, without a reload.
    b.execute("window.notReloaded = true; document.getElementById('freshness').textContent = 'stale'; return true;")
        .await?;
    b.wait_text("#freshness", "Synced", 45).await?;
    assert_eq!(
        b.execute("return window.notReloaded === true").await?,
        json!(true),
        "the page was reloaded"
    );
    b.quit().await;
    rig.standin.assert_no_misses();
    rig.console.stop().await;
    Ok(())
}

/// Without delivery settings, the Delivery link and the pipeline's answer 200 with a page in
/// the layout that says what to configure and links where: on a console with no code host,
/// the `[code_hosting]` table to add; with one, that step is done.
#[tokio::test]
async fn delivery_without_settings_says_how_to_set_it_up() -> anyhow::Result<()> {
    let plain = console_on(None).await?;
    let ada = Who::person(&plain, ADA).await?;
    for path in ["/delivery", "/delivery/pipeline"] {
        let r = ada.get(path).await?;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
        for needle in [
            "<nav aria-label=\"Main\"",
            "<main id=\"main\">",
            "Delivery is not set up yet",
            "[code_hosting]",
            "token_file",
            "href=\"/settings#delivery\"",
            "href=\"/settings#repositories\"",
            "/assets/delivery.css",
        ] {
            assert!(r.text.contains(needle), "{path} lacks {needle}: {}", r.text);
        }
        assert!(!r.text.contains("404"), "{path}: {}", r.text);
    }
    let css = ada.get("/assets/delivery.css").await?;
    assert_eq!(css.status, 200);
    assert!(css.text.contains("svg.chart"), "{}", css.text);
    plain.stop().await;

    // With a code host, the first step is done; the API still refuses as the spec says.
    let rig = rig(None).await?;
    let ada = Who::person(&rig.console, ADA).await?;
    let r = ada.get("/delivery").await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        r.text.contains("Delivery is not set up yet")
            && r.text.contains("id=\"step-code-host\" class=\"done\"")
            && !r.text.contains("token_file"),
        "{}",
        r.text
    );
    refused(
        &ada.get("/api/v1/delivery/timeline").await?,
        404,
        "DELIVERY_NOT_CONFIGURED",
    );
    rig.standin.assert_no_misses();
    rig.console.stop().await;
    Ok(())
}

/// The page's width against the viewport's, and the widest elements when it is wider.
const FITS: &str = "const vw = window.innerWidth, sw = document.documentElement.scrollWidth;
const wide = sw <= vw ? [] : Array.from(document.querySelectorAll('body *'))
  .filter(e => e.getBoundingClientRect().right > vw + 1)
  .slice(0, 5).map(e => e.tagName + '#' + e.id + '.' + (typeof e.className === 'string' ? e.className : ''));
return [vw, sw, wide];";

async fn fits(b: &crate::common::webdriver::Browser, what: &str) -> anyhow::Result<()> {
    let v = b.execute(FITS).await?;
    let (vw, sw) = (
        v[0].as_i64().unwrap_or(0),
        v[1].as_i64().unwrap_or(i64::MAX),
    );
    anyhow::ensure!(
        sw <= vw,
        "{what}: {sw} px wide in a {vw} px viewport: {}",
        v[2]
    );
    Ok(())
}

/// The delivery pages read in Chromium. The timeline's chart has a y axis of counts and an x
/// axis of dates, and its legend's swatches are painted with the bars' own fills; facets read
/// as people say them ("no session", "Agent or group") in one compact bar; a year's window is
/// charted by week (at most 53 bars) and the page fits a 390 px phone and a 1400 px screen.
/// The pipeline page shows each stage's success, median duration, last run and target, as the
/// API has them, with plurals right, at both widths.
#[tokio::test]
async fn delivery_pages_read_in_the_browser() -> anyhow::Result<()> {
    let Some(MonthInBrowser {
        rig,
        ada,
        b,
        driver: _driver,
        profiles: _profiles,
    }) = month_in_browser().await?
    else {
        return Ok(());
    };
    b.set_viewport(1400, 900).await?;

    // ----- the chart: axes with dates, a legend in the bars' colours -----
    let axes = b
        .execute(
            "const t = s => Array.from(document.querySelectorAll(s)).map(e => e.textContent.trim());
             return [t('#daily-chart .x-axis text'), t('#daily-chart .y-axis text'),
                     document.querySelectorAll('#daily-chart .bars > g').length,
                     document.querySelector('#daily-chart').getAttribute('aria-labelledby')];",
        )
        .await?;
    let x: Vec<String> = serde_json::from_value(axes[0].clone())?;
    let y: Vec<String> = serde_json::from_value(axes[1].clone())?;
    // March 2..31: thirty bars, a date label every five days.
    assert_eq!(axes[2], 30, "{axes}");
    assert_eq!(x.first().map(String::as_str), Some("Mar 2"), "{x:?}");
    assert!(x.len() >= 4 && x.contains(&"Mar 27".to_owned()), "{x:?}");
    for l in &x {
        let (month, day) = l.split_once(' ').unwrap_or_default();
        assert!(
            ["Mar", "Apr"].contains(&month) && day.parse::<u32>().is_ok_and(|d| d <= 31),
            "not a date: {l}"
        );
    }
    assert_eq!(y.first().map(String::as_str), Some("0"), "{y:?}");
    assert!(y.len() >= 2, "{y:?}");
    assert!(axes[3].as_str().is_some_and(|s| s.contains("chart-desc")));
    let colours = b
        .execute(
            "const fill = e => getComputedStyle(e).fill;
             return Array.from(document.querySelectorAll('#legend li[data-series]')).map(li => {
               const k = li.getAttribute('data-series');
               const bars = Array.from(document.querySelectorAll('#daily-chart rect[data-series=' + k + ']'));
               return [k, fill(li.querySelector('rect')), Array.from(new Set(bars.map(fill))), bars.length,
                       li.textContent.trim()];
             });",
        )
        .await?;
    let colours = colours.as_array().cloned().unwrap_or_default();
    assert_eq!(colours.len(), 3, "{colours:?}");
    let mut swatches = Vec::new();
    for c in &colours {
        assert_eq!(c[3], 30, "{c}");
        assert_eq!(c[2], json!([c[1].clone()]), "legend and bars differ: {c}");
        assert!(
            c[1].as_str()
                .is_some_and(|f| f.starts_with("rgb(") && f != "rgb(0, 0, 0)"),
            "{c}"
        );
        swatches.push(c[1].clone());
    }
    swatches.dedup();
    assert_eq!(swatches.len(), 3, "three colours: {colours:?}");
    assert_eq!(colours[0][4], "merges");

    // ----- facets as people say them, in one compact bar -----
    let facets = b
        .execute(
            "const f = document.getElementById('facets');
             const label = (facet, v) => { const i = f.querySelector('details[data-facet=' + facet + '] input[value=\"' + v + '\"]');
               return i ? i.closest('label').textContent.replace(/\\s+/g, ' ').trim() : null; };
             return [f.getBoundingClientRect().height, document.querySelector('main').textContent,
                     Array.from(f.querySelectorAll('details.facet > summary')).map(s => s.textContent.trim()),
                     label('session', '__no_session__'), label('component', '__no_component__'),
                     label('rework', 'false')];",
        )
        .await?;
    let summaries: Vec<String> = serde_json::from_value(facets[2].clone())?;
    assert_eq!(
        summaries,
        [
            "Repository",
            "Agent or group",
            "Session",
            "Issue",
            "Priority",
            "Component",
            "Author",
            "Rework",
            "Deploy status"
        ]
    );
    let text = facets[1].as_str().unwrap_or_default();
    for raw in ["__no_", "parent_agent", "not_tracked", "false"] {
        assert!(!text.contains(raw), "the page shows {raw}");
    }
    for (i, want) in [(3, "no session"), (4, "no component"), (5, "not rework")] {
        assert!(
            facets[i].as_str().is_some_and(|l| l.starts_with(want)),
            "{want}: {}",
            facets[i]
        );
    }
    assert!(
        facets[0].as_f64().unwrap_or(f64::MAX) < 260.0,
        "the filter bar is {} px tall",
        facets[0]
    );
    fits(&b, "the month at 1400 px").await?;
    crate::common::axe::accessible(&b, "the month").await?;
    b.set_viewport(390, 844).await?;
    fits(&b, "the month at 390 px").await?;

    // ----- a year: by week, and it fits -----
    b.goto(&format!(
        "{}/delivery?from=2025-04-01&to=2026-04-01",
        rig.console.url
    ))
    .await?;
    b.wait_for("figure.chart-box[data-unit=week]", 10).await?;
    let year = b
        .execute(
            "const c = document.getElementById('daily-chart');
             return [document.querySelectorAll('#daily-chart .bars > g').length,
                     c.getBoundingClientRect().width, window.innerWidth,
                     Array.from(document.querySelectorAll('#daily-chart .x-axis text')).map(e => e.textContent)];",
        )
        .await?;
    let bars = year[0].as_u64().unwrap_or(0);
    assert!((52..=53).contains(&bars), "{year}");
    assert!(
        year[1].as_f64().unwrap_or(f64::MAX) <= year[2].as_f64().unwrap_or(0.0),
        "{year}"
    );
    // The first week is cut by the window: it starts on the window's first day.
    assert_eq!(year[3][0], "Apr 1, 2025", "{year}");
    fits(&b, "a year at 390 px").await?;
    b.screenshot(&crate::browser::shots().join("delivery-year-phone.png"))
        .await?;
    b.set_viewport(1400, 900).await?;
    fits(&b, "a year at 1400 px").await?;
    crate::common::axe::accessible(&b, "a year").await?;
    b.screenshot(&crate::browser::shots().join("delivery-year-wide.png"))
        .await?;

    // ----- the pipeline: each stage as the API has it -----
    let api = ada.get("/api/v1/delivery/pipeline?at=2026-03-31").await?;
    assert_eq!(api.status, 200, "{}", api.text);
    let stages = api.json["stages"].as_array().cloned().unwrap_or_default();
    let keys: Vec<&str> = stages.iter().filter_map(|s| s["stage"].as_str()).collect();
    assert_eq!(
        keys,
        [
            "pr_checks",
            "staging_e2e",
            "staging_deploy",
            "production_deploy"
        ]
    );
    b.goto(&format!(
        "{}/delivery/pipeline?at=2026-03-31",
        rig.console.url
    ))
    .await?;
    b.wait_for("#stages", 10).await?;
    for width in [1400, 390] {
        b.set_viewport(width, 900).await?;
        fits(&b, &format!("the pipeline at {width} px")).await?;
    }
    b.screenshot(&crate::browser::shots().join("delivery-pipeline-phone.png"))
        .await?;
    crate::common::axe::accessible(&b, "the pipeline").await?;
    for s in &stages {
        let key = s["stage"].as_str().unwrap_or_default();
        let card = b
            .execute(&format!(
                "const c = document.querySelector('li.stage[data-stage={key}]');
                 const t = s => {{ const e = c.querySelector(s); return e ? e.textContent.trim() : null; }};
                 const time = c.querySelector('.last time');
                 return [t('.success'), t('.median'), t('.last'), t('.target'), time ? time.getAttribute('datetime') : null];"
            ))
            .await?;
        let runs = s["result"]["runs"].as_u64().unwrap_or(0);
        let rate = s["result"]["success"].as_f64();
        let success = card[0].as_str().unwrap_or_default();
        match rate {
            Some(r) => {
                let noun = if runs == 1 { "run" } else { "runs" };
                assert!(
                    success.ends_with(&format!(" % of {runs} {noun}")),
                    "{key}: {success}"
                );
                let shown: f64 = success
                    .split(' ')
                    .next()
                    .and_then(|p| p.parse().ok())
                    .unwrap_or(f64::NAN);
                assert!((shown - r * 100.0).abs() <= 0.5, "{key}: {success} for {r}");
            }
            None => assert_eq!(success, "no run", "{key}"),
        }
        let median = card[1].as_str().unwrap_or_default();
        assert_eq!(
            median == "—",
            s["result"]["median_seconds"].is_null(),
            "{key}: {median}"
        );
        let last = &s["last_run"];
        if last.is_null() {
            assert_eq!(card[2], "none in these days", "{key}");
        } else {
            let l = card[2].as_str().unwrap_or_default();
            let result = if last["success"] == true {
                "passed"
            } else {
                "failed"
            };
            assert!(
                l.contains(result) && l.contains(&format!("run {}", last["run"])),
                "{key}: {l} for {last}"
            );
            let instant = |v: &Value| {
                chrono::DateTime::parse_from_rfc3339(v.as_str().unwrap_or_default()).ok()
            };
            assert!(instant(&card[4]).is_some(), "{key}: {card}");
            assert_eq!(instant(&card[4]), instant(&last["at"]), "{key}");
        }
        if key == "production_deploy" {
            // The rig's target: production deploy runs succeed at least 95 % of the time.
            let target = card[3].as_str().unwrap_or_default();
            assert!(target.starts_with("at least 95 %"), "{target}");
            let met = api.json["targets"]["deploy_run_success"]["met"].as_bool();
            let word = if met == Some(true) { "met" } else { "missed" };
            assert!(target.ends_with(word), "{target} ({met:?})");
        }
    }
    // D9 ran on 03-26: its production job took five minutes.
    let day = b
        .execute("return document.querySelector('#days tr[data-day=\"2026-03-26\"]').textContent")
        .await?;
    assert!(day.as_str().is_some_and(|d| d.contains("5 min")), "{day}");
    let lead = b
        .execute("return document.getElementById('lead-times').textContent")
        .await?;
    assert!(
        lead.as_str().is_some_and(|l| l.contains("at most 4 h")),
        "{lead}"
    );
    // Plurals: every count agrees with its noun.
    let counts = b
        .execute(
            "return Array.from(document.querySelector('main').textContent.matchAll(/\\b(\\d+) (runs?|PRs?|results?)\\b/g)).map(m => [m[1], m[2]]);",
        )
        .await?;
    let counts = counts.as_array().cloned().unwrap_or_default();
    assert!(counts.len() > 7, "{counts:?}");
    for c in &counts {
        let n = c[0].as_str().unwrap_or_default();
        let noun = c[1].as_str().unwrap_or_default();
        assert_eq!(n == "1", !noun.ends_with('s'), "{n} {noun}");
    }
    let text = b
        .execute("return document.querySelector('main').textContent")
        .await?;
    assert!(
        !text.as_str().unwrap_or_default().contains("checks at run"),
        "{text}"
    );
    // The settings page, with its mapping and source tables, fits a phone too.
    let r = ada
        .call(
            Method::PUT,
            "/api/v1/settings/repo-projects/acme/a-repository-with-a-rather-long-name",
            Some(json!({"project": "SHOP", "default": true})),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    b.goto(&format!("{}/settings", rig.console.url)).await?;
    b.wait_for("#mapping-list table", 10).await?;
    fits(&b, "the settings at 390 px").await?;
    crate::common::axe::accessible(&b, "the settings").await?;
    b.quit().await;
    rig.standin.assert_no_misses();
    rig.console.stop().await;
    Ok(())
}
