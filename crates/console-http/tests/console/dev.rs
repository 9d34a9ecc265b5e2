//! Dev mode: `countersign-console dev` runs the broker and the console together on loopback,
//! on the broker's dev state, with dev mode's local sign-in.

use crate::common;

use std::time::Duration;

use common::*;
use countersign_console_http::dev::{self, DEV_PERSON};
use serde_json::json;

#[tokio::test]
async fn dev_mode_runs_broker_and_console_together() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let state = dir.path().join(".countersign-dev");
    let d = dev::start(&state, 0, 0).await?;
    for f in [
        "seal.key",
        "console-token",
        "secrets.toml",
        "broker.db",
        "console.db",
    ] {
        assert!(state.join(f).exists(), "{f} missing");
    }
    let http = reqwest::Client::new();
    let health: serde_json::Value = http
        .get(format!("{}/healthz", d.broker_url))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(health["status"], "ok");
    let health: serde_json::Value = http
        .get(format!("{}/healthz", d.console_url))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(health["status"], "ok");

    // The dev person signs in locally; the sign-in page suggests them.
    let mut p = Person::at(&d.console_url)?;
    let page = p.get("/sign-in").await?;
    assert!(page.text.contains(DEV_PERSON));
    let r = p.sign_in_local(DEV_PERSON).await?;
    assert_eq!(r.status, 303, "{}", r.text);
    assert_eq!(
        p.get("/api/v1/me").await?.json,
        json!({ "kind": "user", "login": DEV_PERSON })
    );
    // The console reaches the broker with the dev console token.
    let inbox = p.get("/api/v1/credential-requests?approver=me").await?;
    assert_eq!((inbox.status, inbox.json.clone()), (200, json!([])));

    let token = std::fs::read_to_string(state.join("console-token"))?;
    d.shutdown(Duration::from_secs(2)).await;

    // Restarting keeps the state.
    let d = dev::start(&state, 0, 0).await?;
    assert_eq!(std::fs::read_to_string(state.join("console-token"))?, token);
    let p = Person::at(&d.console_url)?;
    assert_eq!(p.get("/api/v1/me").await?.status, 401);
    d.shutdown(Duration::from_secs(2)).await;
    Ok(())
}

/// Dev mode prints a token agents can use with the console's API, and labels the broker's
/// console token as the broker's (issue 27); the console refuses the broker's token.
#[tokio::test]
async fn dev_mode_prints_an_agent_token_for_the_console() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let state = dir.path().join(".countersign-dev");
    let d = dev::start(&state, 0, 0).await?;
    let banner = d.banner();
    let agent = d.agent_token();
    assert!(agent.len() >= 40, "{banner}");
    assert!(
        banner.contains(&format!("agent token:   {agent}   (for the console API")),
        "{banner}"
    );
    let broker_token = std::fs::read_to_string(state.join("console-token"))?;
    assert!(
        banner.contains(&format!(
            "broker console token: {}   (for the broker API, not the console's)",
            broker_token.trim()
        )),
        "{banner}"
    );
    let http = reqwest::Client::new();
    let me = http
        .get(format!("{}/api/v1/me", d.console_url))
        .bearer_auth(&agent)
        .send()
        .await?;
    assert_eq!(me.status(), 200);
    let me: serde_json::Value = me.json().await?;
    assert_eq!(me["kind"], "agent", "{me}");
    // An agent works with it: a project under its session's name.
    let p = http
        .post(format!("{}/api/v1/projects", d.console_url))
        .bearer_auth(&agent)
        .json(&json!({"key": "DEV", "name": "Dev", "actor": "s1"}))
        .send()
        .await?;
    assert_eq!(p.status(), 201, "{}", p.text().await?);
    let broker = http
        .get(format!("{}/api/v1/me", d.console_url))
        .bearer_auth(broker_token.trim())
        .send()
        .await?;
    assert_eq!(broker.status(), 401);
    d.shutdown(Duration::from_secs(2)).await;
    // The same token after a restart.
    let d = dev::start(&state, 0, 0).await?;
    assert_eq!(d.agent_token(), agent);
    d.shutdown(Duration::from_secs(2)).await;
    Ok(())
}

/// `countersign-console dev --config FILE` takes the console's optional tables: with
/// `[code_hosting]`, delivery settings reach for the code host (here a closed port: 503
/// CODE_HOST_UNAVAILABLE) where without it they say none is configured; anything but the
/// optional tables is refused.
#[tokio::test]
async fn dev_mode_takes_the_consoles_optional_tables() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let state = dir.path().join(".countersign-dev");
    let settings = json!({
        "deploy_repository": "acme/shop",
        "workflow_paths": [".github/workflows/deploy.yml"],
        "production_jobs": ["production-deploy"],
        "population_authors": ["alice"],
        "excluded_repositories": []
    });
    let put = |url: String| {
        let settings = settings.clone();
        async move {
            let mut p = Person::at(&url)?;
            p.sign_in_local(DEV_PERSON).await?;
            Resp::read(
                p.http
                    .put(format!("{url}/api/v1/delivery/settings"))
                    .header("origin", &p.base)
                    .header("x-csrf-token", &p.csrf)
                    .json(&settings)
                    .send()
                    .await?,
            )
            .await
        }
    };

    let d = dev::start(&state, 0, 0).await?;
    let r = put(d.console_url.clone()).await?;
    assert_eq!(r.code(), "DELIVERY_SETTINGS_ACCESS", "{}", r.text);
    assert!(r.text.contains("[code_hosting]"), "{}", r.text);
    d.shutdown(Duration::from_secs(2)).await;

    // A port nothing listens on: the code host is configured, and unreachable.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let token = dir.path().join("github-token");
    std::fs::write(&token, "github_pat_dev_mode_test_0123456789")?;
    let file = dir.path().join("dev.toml");
    std::fs::write(
        &file,
        format!(
            "[code_hosting]\napi_url = \"http://127.0.0.1:{closed}\"\ntoken_file = {:?}\n\n\
             [delivery_targets]\ndeploys_per_day = 1.0\n",
            token.display().to_string()
        ),
    )?;
    let extras = dev::DevExtras::load(&file)?;
    assert!(extras.code_hosting.is_some() && extras.delivery_targets.is_some());
    let d = dev::start_with(
        &state,
        0,
        0,
        dev::DevOptions {
            extras,
            ..Default::default()
        },
    )
    .await?;
    let r = put(d.console_url.clone()).await?;
    assert_eq!(
        (r.status, r.code()),
        (503, "CODE_HOST_UNAVAILABLE"),
        "{}",
        r.text
    );
    d.shutdown(Duration::from_secs(2)).await;

    // Only the optional tables: `serve`'s others are dev mode's own.
    let other = dir.path().join("other.toml");
    std::fs::write(&other, "[oidc]\nissuer = \"https://idp.example\"\n")?;
    assert!(dev::DevExtras::load(&other).is_err());
    Ok(())
}
