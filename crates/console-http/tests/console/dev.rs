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
