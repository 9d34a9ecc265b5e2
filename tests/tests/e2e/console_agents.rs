//! The console's agents with Kubernetes ServiceAccount tokens (protocol §3.1), verified as the
//! broker verifies them, over real HTTP against an issuer on loopback with real keys.

use std::sync::Arc;

use countersign_console_http::Config;
use countersign_console_http::config::AgentsConfig;
use countersign_e2e::k8s::{Issuer, IssuerKey, TokenSpec};
use serde_json::{Value, json};

async fn me(url: &str, token: &str) -> anyhow::Result<(u16, Value)> {
    let r = reqwest::Client::new()
        .get(format!("{url}/api/v1/me"))
        .bearer_auth(token)
        .send()
        .await?;
    let status = r.status().as_u16();
    Ok((status, r.json().await.unwrap_or(Value::Null)))
}

async fn console(
    agents: Option<AgentsConfig>,
) -> anyhow::Result<(String, countersign_console_http::Running, tempfile::TempDir)> {
    let dir = tempfile::tempdir()?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let mut c = Config::new(&url);
    c.database_url = format!("sqlite://{}?mode=rwc", dir.path().join("c.db").display());
    c.agents = agents;
    let state =
        countersign_console_http::build(&c, Arc::new(countersign_console_core::SystemClock))
            .await?;
    let running = countersign_console_http::serve(state, listener).await?;
    Ok((url, running, dir))
}

#[tokio::test]
async fn service_account_tokens_are_agents() -> anyhow::Result<()> {
    let key = IssuerKey::ec();
    let issuer = Issuer::start(&[&key]).await?;
    let agents: AgentsConfig = toml::from_str(&format!(
        "service_accounts = [\"team/builder\"]\n[token_issuer]\nissuer = \"{}\"\njwks_url = \"{}\"\n",
        issuer.url,
        issuer.jwks_url()
    ))?;
    let (url, running, _dir) = console(Some(agents)).await?;
    let now = chrono::Utc::now().timestamp();
    let with_aud = |account: &str, aud: &str| TokenSpec {
        aud: vec![aud.to_owned()],
        ..TokenSpec::projected(&issuer.url, account, now)
    };

    // The default audience, a listed account: an agent whose service is the subject.
    let token = key.mint(&with_aud("team/builder", "countersign-console"));
    assert_eq!(
        me(&url, &token).await?,
        (
            200,
            json!({"kind": "agent", "owner": null, "service": "system:serviceaccount:team:builder"})
        )
    );
    // Each failure is 401 UNAUTHENTICATED, saying no more.
    let refusals = [
        key.mint(&with_aud("team/other", "countersign-console")),
        key.mint(&with_aud("team/builder", "countersign-test")),
        key.mint(&with_aud("team/builder", "countersign-console").at(now - 7200, 600)),
        key.mint(&with_aud("team/builder", "countersign-console").at(now, 7200)),
        IssuerKey::ec().mint(&with_aud("team/builder", "countersign-console")),
        format!("{}x", &token[..token.len() - 1]),
    ];
    for t in &refusals {
        let (status, body) = me(&url, t).await?;
        assert_eq!(
            (status, body["code"].as_str()),
            (401, Some("UNAUTHENTICATED")),
            "{body}"
        );
    }
    running.shutdown(std::time::Duration::from_secs(1)).await;

    // No issuer configured: such tokens are refused too.
    let (url, running, _dir) = console(None).await?;
    let (status, body) = me(&url, &token).await?;
    assert_eq!(
        (status, body["code"].as_str()),
        (401, Some("UNAUTHENTICATED"))
    );
    running.shutdown(std::time::Duration::from_secs(1)).await;
    Ok(())
}
