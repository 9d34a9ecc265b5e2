//! Dynamic secrets over HTTP (issue 49): the real server on a real socket, with a PostgreSQL
//! issuer making login roles on the test server. A release answers the credential as a URL and
//! its parts (no-store), settings and the grants list show it, the holder's revoke destroys it
//! through the server's own destroyer (a login with it then fails), and an issuer that refuses
//! answers 503 ISSUER_UNAVAILABLE and leaves nothing behind.

use std::sync::Arc;
use std::time::{Duration, Instant};

use countersign_broker_core::Issuer;
use countersign_broker_core::broker::IssuedSecret;
use countersign_broker_core::ids::{Login, SecretName};
use countersign_broker_core::policy::Tier;
use countersign_e2e::http::*;
use countersign_issuer_postgres::{PostgresIssuer, PostgresIssuerConfig};
use serde_json::json;
use sqlx::Connection;
use zeroize::Zeroizing;

type R = anyhow::Result<()>;

const DB: &str = "APP_DB";

/// The test server's PostgreSQL, or `None` (skipped) when none is configured.
fn issuer(roles: Vec<String>) -> Option<Arc<PostgresIssuer>> {
    if !countersign_e2e::core::postgres_configured() {
        return None;
    }
    let url = std::env::var("COUNTERSIGN_TEST_POSTGRES_URL").ok()?;
    let mut c = PostgresIssuerConfig::new(roles);
    c.prefix = format!("csh{}_", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    Some(Arc::new(
        PostgresIssuer::new(c, Zeroizing::new(url)).expect("issuer"),
    ))
}

async fn declared(issuer: Arc<PostgresIssuer>) -> anyhow::Result<TestBroker> {
    let tb = TestBroker::start().await?;
    tb.state.broker.set_issued_secrets([IssuedSecret {
        name: SecretName::parse(DB).map_err(|e| anyhow::anyhow!("{}", e.message()))?,
        owner: Login::parse(ADA).expect("login"),
        tier: Tier::Automatic,
        issuer,
    }]);
    tb.state.broker.reload_policy().await?;
    Ok(tb)
}

async fn can_log_in(url: &str) -> bool {
    match sqlx::PgConnection::connect(url).await {
        Ok(c) => c.close().await.is_ok(),
        Err(_) => false,
    }
}

#[tokio::test]
async fn a_release_answers_the_credential_and_the_revoke_destroys_it() -> R {
    let Some(issuer) = issuer(vec![]) else {
        return Ok(());
    };
    let tb = declared(issuer.clone()).await?;
    let settings = tb.open("GET", "/v1/settings", None).await?.expect(200);
    assert_eq!(
        settings.get("issued"),
        &json!([{ "name": DB, "kind": "issued", "issuer": "postgres", "owner": ADA, "tier": "automatic" }])
    );
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[DB]).await?.expect(200);
    let grant = r.s("grant_id");
    let v = s.values(&grant).await?.expect(200);
    assert_eq!(v.header("cache-control"), Some("no-store"));
    let url = v
        .get("values")
        .get(DB)
        .and_then(|u| u.as_str())
        .expect("a URL")
        .to_string();
    let parts = v.get("parts").get(DB).expect("the parts");
    for var in ["PGHOST", "PGPORT", "PGDATABASE", "PGUSER", "PGPASSWORD"] {
        assert!(
            parts.get(var).is_some_and(|p| p.is_string()),
            "{var} in {parts}"
        );
    }
    assert!(url.contains(parts["PGPASSWORD"].as_str().unwrap_or("-")));
    assert_eq!(
        v.get("public_parts").get(DB),
        Some(&json!(["PGHOST", "PGPORT", "PGDATABASE", "PGUSER"])),
        "the parts a client need not mask"
    );
    assert!(can_log_in(&url).await);
    let again = s.values(&grant).await?.expect(200);
    assert_eq!(
        again.get("values").get(DB),
        v.get("values").get(DB),
        "the same credential"
    );

    let list = tb.grants(ADA).await?.expect(200);
    let item = &list.get("grants")[0];
    assert_eq!(item["state"], "live");
    assert_eq!(item["credentials"][0]["state"], "live");
    assert_eq!(item["credentials"][0]["issuer"], "postgres");
    assert!(
        !list
            .body
            .to_string()
            .contains(parts["PGPASSWORD"].as_str().unwrap_or("-")),
        "the list never shows the secret"
    );

    s.revoke(&grant).await?.expect(200);
    // The server's destroyer, told by the revoke, ends it within a second or so.
    let started = Instant::now();
    while can_log_in(&url).await {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "still works after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Logins stop at the destroy's first step (NOLOGIN); the role goes at its second.
    while !issuer.list().await?.is_empty() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the role outlived 10 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

#[tokio::test]
async fn an_issuer_that_refuses_answers_issuer_unavailable_and_leaves_nothing() -> R {
    let Some(issuer) = issuer(vec!["no_such_role_cs49h".into()]) else {
        return Ok(());
    };
    let tb = declared(issuer.clone()).await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let grant = s.request(&[DB]).await?.expect(200).s("grant_id");
    let r = s.values(&grant).await?;
    r.refused(503, "ISSUER_UNAVAILABLE");
    assert!(
        !r.error().contains("no_such_role"),
        "the issuer's words stay in the log: {}",
        r.error()
    );
    assert!(issuer.list().await?.is_empty(), "nothing half-made");
    Ok(())
}
