//! The console over real HTTP against a real broker, people signing in through an OpenID
//! provider on loopback.

use crate::common;

use common::idp::{Tamper, TestIdp};
use common::*;
use countersign_console_http::table::ROUTES;
use serde_json::json;

async fn setup() -> anyhow::Result<(TestBroker, TestIdp, TestConsole)> {
    let broker = TestBroker::start().await?;
    let idp = TestIdp::start().await?;
    let console = TestConsole::start(ConsoleOptions {
        broker: Some(&broker),
        idp: Some(&idp),
        shared_token: true,
        ..Default::default()
    })
    .await?;
    Ok((broker, idp, console))
}

/// The spec's route table (console-protocol.md §1.3), method and path, in its order.
const SPEC_ORDER: &[(&str, &str)] = &[
    ("GET", "/api/v1"),
    ("GET", "/api/v1/me"),
    ("GET", "/api/v1/people"),
    ("GET", "/api/v1/agent-tokens"),
    ("POST", "/api/v1/agent-tokens"),
    ("DELETE", "/api/v1/agent-tokens/{id}"),
    ("GET", "/api/v1/block-schema"),
    ("GET", "/api/v1/search"),
    ("GET", "/api/v1/references"),
    ("GET", "/api/v1/events"),
    ("GET", "/api/v1/projects"),
    ("POST", "/api/v1/projects"),
    ("GET", "/api/v1/projects/{key}/components"),
    ("GET", "/api/v1/projects/{key}/artifacts"),
    ("POST", "/api/v1/projects/{key}/artifacts"),
    ("GET", "/api/v1/projects/{key}/artifacts/{slug}"),
    ("GET", "/api/v1/projects/{key}/artifacts/{slug}/blocks"),
    ("POST", "/api/v1/projects/{key}/artifacts/{slug}/edits"),
    ("GET", "/api/v1/projects/{key}/artifacts/{slug}/text"),
    ("POST", "/api/v1/projects/{key}/artifacts/{slug}/versions"),
    (
        "GET",
        "/api/v1/projects/{key}/artifacts/{slug}/versions/{number}",
    ),
    ("GET", "/api/v1/projects/{key}/architecture-source"),
    ("PUT", "/api/v1/projects/{key}/architecture-source"),
    ("DELETE", "/api/v1/projects/{key}/architecture-source"),
    ("POST", "/api/v1/projects/{key}/architecture-source/sync"),
    ("GET", "/api/v1/architecture-sources"),
    ("GET", "/api/v1/settings/repo-projects"),
    ("PUT", "/api/v1/settings/repo-projects/{owner}/{repo}"),
    ("DELETE", "/api/v1/settings/repo-projects/{owner}/{repo}"),
    ("GET", "/api/v1/issues"),
    ("POST", "/api/v1/issues"),
    ("GET", "/api/v1/issues/resolve"),
    ("GET", "/api/v1/issues/{key}"),
    ("PATCH", "/api/v1/issues/{key}"),
    ("GET", "/api/v1/issues/{key}/artifacts"),
    ("POST", "/api/v1/issues/{key}/artifacts"),
    ("GET", "/api/v1/issues/{key}/artifacts/{slug}"),
    ("GET", "/api/v1/issues/{key}/artifacts/{slug}/blocks"),
    ("POST", "/api/v1/issues/{key}/artifacts/{slug}/edits"),
    ("GET", "/api/v1/issues/{key}/artifacts/{slug}/text"),
    ("POST", "/api/v1/issues/{key}/artifacts/{slug}/versions"),
    (
        "GET",
        "/api/v1/issues/{key}/artifacts/{slug}/versions/{number}",
    ),
    ("GET", "/api/v1/issues/{key}/asks"),
    ("POST", "/api/v1/issues/{key}/asks"),
    ("POST", "/api/v1/issues/{key}/claim"),
    ("DELETE", "/api/v1/issues/{key}/claim"),
    ("GET", "/api/v1/issues/{key}/comments"),
    ("POST", "/api/v1/issues/{key}/comments"),
    ("GET", "/api/v1/issues/{key}/events"),
    ("POST", "/api/v1/issues/{key}/messages"),
    ("GET", "/api/v1/issues/{key}/messages/{id}"),
    ("GET", "/api/v1/issues/{key}/references"),
    ("GET", "/api/v1/issues/{key}/subscribers"),
    ("DELETE", "/api/v1/issues/{key}/subscribers/{session_id}"),
    ("GET", "/api/v1/artifacts/{id}"),
    ("GET", "/api/v1/artifacts/{id}/asks"),
    ("POST", "/api/v1/artifacts/{id}/asks"),
    ("POST", "/api/v1/artifacts/{id}/approval-requests"),
    ("GET", "/api/v1/artifacts/{id}/blocks"),
    ("GET", "/api/v1/artifacts/{id}/blocks/{block_id}"),
    ("GET", "/api/v1/artifacts/{id}/comments"),
    ("POST", "/api/v1/artifacts/{id}/comments"),
    ("POST", "/api/v1/artifacts/{id}/edits"),
    ("GET", "/api/v1/artifacts/{id}/events"),
    ("POST", "/api/v1/artifacts/{id}/rebuild"),
    ("GET", "/api/v1/artifacts/{id}/references"),
    ("GET", "/api/v1/artifacts/{id}/reviews"),
    ("POST", "/api/v1/artifacts/{id}/reviews"),
    ("GET", "/api/v1/artifacts/{id}/subscribers"),
    ("DELETE", "/api/v1/artifacts/{id}/subscribers/{session_id}"),
    ("GET", "/api/v1/artifacts/{id}/text"),
    ("POST", "/api/v1/artifacts/{id}/versions"),
    ("GET", "/api/v1/artifacts/{id}/versions/{number}"),
    ("POST", "/api/v1/agents/{session_id}/artifacts"),
    ("GET", "/api/v1/agents/{session_id}/artifacts/{slug}"),
    (
        "GET",
        "/api/v1/agents/{session_id}/artifacts/{slug}/versions/{number}",
    ),
    ("GET", "/api/v1/asks"),
    ("GET", "/api/v1/asks/{id}"),
    ("PATCH", "/api/v1/asks/{id}"),
    ("POST", "/api/v1/asks/{id}/answer"),
    ("POST", "/api/v1/asks/{id}/close"),
    ("GET", "/api/v1/asks/{id}/recipients"),
    ("PUT", "/api/v1/asks/{id}/followers/{session_id}"),
    ("DELETE", "/api/v1/asks/{id}/followers/{session_id}"),
    ("GET", "/api/v1/comments/{id}"),
    ("PATCH", "/api/v1/comments/{id}"),
    ("POST", "/api/v1/comments/{id}/suggestion/accept"),
    ("POST", "/api/v1/comments/{id}/suggestion/reject"),
    ("POST", "/api/v1/comments/{id}/deliveries"),
    ("POST", "/api/v1/comments/{id}/reopen"),
    ("POST", "/api/v1/comments/{id}/resolve"),
    ("POST", "/api/v1/comments/{id}/replies"),
    ("GET", "/api/v1/broadcasts"),
    ("POST", "/api/v1/broadcasts"),
    ("GET", "/api/v1/broadcasts/{id}"),
    ("GET", "/api/v1/sessions"),
    ("GET", "/api/v1/sessions/{session_id}/messages"),
    ("POST", "/api/v1/sessions/{session_id}/messages"),
    ("GET", "/api/v1/sessions/{session_id}/relay"),
    ("GET", "/api/v1/messages/{id}/thread"),
    ("POST", "/api/v1/messages/{id}/deliveries"),
    ("POST", "/api/v1/messages/{id}/deliveries/{attempt}/accept"),
    ("POST", "/api/v1/messages/{id}/replies"),
    ("GET", "/api/v1/inbox"),
    ("GET", "/api/v1/inbox/answers"),
    ("PUT", "/api/v1/inbox/asks/{id}/snooze"),
    ("DELETE", "/api/v1/inbox/asks/{id}/snooze"),
    ("GET", "/api/v1/inbox/issues"),
    ("PATCH", "/api/v1/inbox/issues/{key}"),
    ("GET", "/api/v1/inbox/threads"),
    ("POST", "/api/v1/inbox/threads/{id}/read"),
    ("GET", "/api/v1/inbox/agents"),
    ("PATCH", "/api/v1/inbox/agents/{session_id}"),
    ("GET", "/api/v1/delivery/timeline"),
    ("GET", "/api/v1/delivery/measures"),
    ("GET", "/api/v1/delivery/pipeline"),
    ("GET", "/api/v1/delivery/runs/{id}"),
    ("POST", "/api/v1/delivery/session-groups"),
    ("PATCH", "/api/v1/delivery/session-groups/{id}"),
    ("DELETE", "/api/v1/delivery/session-groups/{id}"),
    ("GET", "/api/v1/delivery/settings"),
    ("PUT", "/api/v1/delivery/settings"),
    ("GET", "/api/v1/credential-requests"),
    ("POST", "/api/v1/credential-requests/machine-lookup"),
    ("GET", "/api/v1/credential-requests/{id}"),
    ("POST", "/api/v1/credential-requests/{id}/approve"),
    ("POST", "/api/v1/credential-requests/{id}/deny"),
    ("GET", "/api/v1/credential-grants"),
    ("POST", "/api/v1/credential-grants/{id}/revoke"),
    ("GET", "/api/v1/machine-logins"),
    ("POST", "/api/v1/machine-logins/{id}/revoke"),
];

/// `GET /api/v1` lists `routes` in the spec table's order (issue 27: `GET /api/v1/projects`
/// came after `/sessions`), and `count` is the table's 131.
#[tokio::test]
async fn route_list_is_in_the_spec_tables_order() -> anyhow::Result<()> {
    let console = TestConsole::start(ConsoleOptions::default()).await?;
    let table: serde_json::Value = reqwest::get(format!("{}/api/v1", console.url))
        .await?
        .json()
        .await?;
    let listed: Vec<(String, String)> = table["routes"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    (
                        r["method"].as_str().unwrap_or("").to_owned(),
                        r["path"].as_str().unwrap_or("").to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let want: Vec<(String, String)> = SPEC_ORDER
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(listed, want);
    assert_eq!(table["count"], 131);
    console.stop().await;
    Ok(())
}

/// `GET /api/v1` lists exactly the router's routes: every row reaches its handler (never the
/// fallback, never 405), and a path not in the table reaches the fallback.
#[tokio::test]
async fn route_table_equals_the_router() -> anyhow::Result<()> {
    let console = TestConsole::start(ConsoleOptions::default()).await?;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?;
    let table = http.get(format!("{}/api/v1", console.url)).send().await?;
    assert_eq!(table.status(), 200);
    let table: serde_json::Value = table.json().await?;
    let rows = |name: &str| -> Vec<(String, String, String)> {
        table[name]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|r| {
                        (
                            r["method"].as_str().unwrap_or("").to_owned(),
                            r["path"].as_str().unwrap_or("").to_owned(),
                            r["auth"].as_str().unwrap_or("").to_owned(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let api = rows("routes");
    let mut listed = api.clone();
    listed.extend(rows("other_routes"));
    assert_eq!(table["count"], api.len());
    assert!(api.iter().all(|(_, p, _)| p.starts_with("/api/v1")));
    let mut specs: Vec<_> = ROUTES.iter().filter(|r| r.is_api()).collect();
    specs.extend(ROUTES.iter().filter(|r| !r.is_api()));
    assert_eq!(listed.len(), specs.len());
    for (spec, (m, p, a)) in specs.into_iter().zip(&listed) {
        assert_eq!(
            (spec.method, spec.path, spec.auth.as_str()),
            (m.as_str(), p.as_str(), a.as_str())
        );
        assert!(!spec.purpose.is_empty());
        let path = spec
            .path
            .replace("{id}", "00000000-0000-0000-0000-000000000000")
            .replace("{key}", "PAY-1");
        if spec.path == "/api/v1/events" {
            continue;
        }
        let r = http
            .request(spec.method.parse()?, format!("{}{path}", console.url))
            .header("origin", &console.url)
            .send()
            .await?;
        let status = r.status().as_u16();
        let body = r.text().await?;
        assert_ne!(status, 405, "{} {} has no handler", spec.method, spec.path);
        assert!(
            !body.contains(countersign_console_http::server::NO_ROUTE),
            "{} {} reached the fallback",
            spec.method,
            spec.path
        );
    }
    let r = http
        .get(format!("{}/api/v1/nothing-here", console.url))
        .send()
        .await?;
    assert_eq!(r.status(), 404);
    assert!(
        r.text()
            .await?
            .contains(countersign_console_http::server::NO_ROUTE)
    );
    console.stop().await;
    Ok(())
}

#[tokio::test]
async fn oidc_sign_in_with_pkce_lowercases_the_login() -> anyhow::Result<()> {
    let (broker, idp, console) = setup().await?;
    let mut ada = Person::new(&console)?;

    // Not signed in: pages go to the sign-in page, the API answers 401.
    let r = ada.get("/grants").await?;
    assert_eq!(r.status, 303);
    assert_eq!(r.location().as_deref(), Some("/sign-in?next=%2Fgrants"));
    assert_eq!(ada.get("/api/v1/me").await?.code(), "UNAUTHENTICATED");

    ada.sign_in_oidc(&idp, "Ada@Example.COM").await?;
    assert_eq!(idp.pkce_checked(), 1);
    // The hops: console start → provider → console callback → inbox.
    let start = &ada.hops[0];
    assert_eq!(start.status, 303);
    let to_idp = url::Url::parse(&start.location().unwrap_or_default())?;
    let q: std::collections::HashMap<_, _> = to_idp.query_pairs().into_owned().collect();
    assert_eq!(
        q.get("code_challenge_method").map(String::as_str),
        Some("S256")
    );
    assert!(q.contains_key("nonce") && q.contains_key("state"));
    let callback = &ada.hops[2];
    let session_cookie = callback
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("countersign_session="))
        .expect("session cookie");
    assert!(session_cookie.contains("HttpOnly"));
    assert!(session_cookie.contains("SameSite=Lax"));
    assert!(!session_cookie.contains("Secure"), "plain http: no Secure");

    let me = ada.get("/api/v1/me").await?;
    assert_eq!(
        me.json,
        json!({ "kind": "user", "login": "ada@example.com" })
    );
    assert!(
        ada.get("/api/v1/people")
            .await?
            .json
            .as_array()
            .is_some_and(|a| a.contains(&json!("ada@example.com")))
    );

    // Security headers on pages.
    let page = ada.get("/").await?;
    let csp = page
        .headers
        .get("content-security-policy")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    assert!(csp.contains("script-src 'self'") && csp.contains("frame-ancestors 'none'"));

    // Sign-out ends the session (a form post with the CSRF field).
    let out = ada
        .http
        .post(format!("{}/sign-out", console.url))
        .header("origin", &console.url)
        .form(&[("csrf", ada.csrf.as_str())])
        .send()
        .await?;
    assert_eq!(out.status(), 303);
    assert_eq!(ada.get("/api/v1/me").await?.code(), "UNAUTHENTICATED");

    console.stop().await;
    broker.stop().await;
    Ok(())
}

#[tokio::test]
async fn oidc_refusals() -> anyhow::Result<()> {
    let (broker, idp, console) = setup().await?;

    // A callback replayed in another browser (no sign-in cookie): refused.
    let ada = Person::new(&console)?;
    idp.set_next_login(ADA);
    let start = ada.get("/auth/oidc").await?;
    let authorize = start.location().unwrap_or_default();
    let to_console = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()?
        .get(&authorize)
        .send()
        .await?;
    let callback = to_console
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let mallory = Person::new(&console)?;
    let r = mallory.get(&callback).await?;
    assert_eq!(r.status, 401);
    assert!(r.text.contains("SIGN_IN_FAILED"), "{}", r.text);
    // The right browser can still finish it, once.
    let ok = ada.get(&callback).await?;
    assert_eq!(ok.status, 303, "{}", ok.text);
    let again = ada.get(&callback).await?;
    assert_eq!(again.status, 401);

    // ID tokens that do not verify, or an unverified e-mail.
    for t in [
        Tamper::WrongNonce,
        Tamper::WrongKey,
        Tamper::WrongAudience,
        Tamper::Unverified,
    ] {
        idp.tamper(t);
        let mut p = Person::new(&console)?;
        idp.set_next_login(BOB);
        let last = p.follow("/auth/oidc").await?;
        assert_eq!(last.status, 401, "{t:?}: {}", last.text);
        assert!(last.text.contains("SIGN_IN_FAILED"), "{t:?}");
        assert_eq!(
            p.get("/api/v1/me").await?.code(),
            "UNAUTHENTICATED",
            "{t:?}"
        );
    }
    idp.tamper(Tamper::None);

    // The provider refusing.
    let r = Person::new(&console)?
        .get("/auth/callback?error=access_denied&state=x")
        .await?;
    assert_eq!(r.status, 401);
    console.stop().await;
    broker.stop().await;
    Ok(())
}

#[tokio::test]
async fn personal_tokens_shared_token_and_human_only() -> anyhow::Result<()> {
    let (broker, idp, console) = setup().await?;
    let mut ada = Person::new(&console)?;
    ada.sign_in_oidc(&idp, ADA).await?;

    let minted = ada
        .post("/api/v1/agent-tokens", json!({ "name": "laptop agent" }))
        .await?;
    assert_eq!(minted.status, 201, "{}", minted.text);
    let token = minted.json["token"].as_str().unwrap_or_default().to_owned();
    assert!(token.starts_with("csp_"));
    let id = minted.json["id"].as_str().unwrap_or_default().to_owned();
    let list = ada.get("/api/v1/agent-tokens").await?;
    assert_eq!(list.json.as_array().map(Vec::len), Some(1));
    assert!(
        !list.text.contains(&token),
        "the list never shows the token"
    );
    assert_eq!(
        ada.post("/api/v1/agent-tokens", json!({ "nope": 1 }))
            .await?
            .code(),
        "TOKEN_INPUT"
    );
    // A name is 1 to 100 characters: empty (or only spaces) is refused, not defaulted; the
    // default is for an absent name (issue 27).
    let long = "x".repeat(101);
    for name in ["", "   ", long.as_str()] {
        let r = ada
            .post("/api/v1/agent-tokens", json!({ "name": name }))
            .await?;
        refused(&r, 400, "TOKEN_INPUT");
    }
    let unnamed = ada.post("/api/v1/agent-tokens", json!({})).await?;
    assert_eq!(unnamed.json["name"], "agent token", "{}", unnamed.text);
    let hundred = ada
        .post("/api/v1/agent-tokens", json!({ "name": "y".repeat(100) }))
        .await?;
    assert_eq!(hundred.status, 201, "{}", hundred.text);
    for id in [&unnamed.json["id"], &hundred.json["id"]] {
        let gone = ada
            .delete(&format!(
                "/api/v1/agent-tokens/{}",
                id.as_str().unwrap_or_default()
            ))
            .await?;
        assert_eq!(gone.status, 204);
    }

    // Only the token's hash is kept.
    for entry in std::fs::read_dir(console.dir.path())? {
        let bytes = std::fs::read(entry?.path())?;
        assert!(
            !bytes.windows(token.len()).any(|w| w == token.as_bytes()),
            "the token is stored in clear"
        );
    }

    // Caller identity for agents.
    let me = bearer_get(&console, &token, "/api/v1/me").await?;
    assert_eq!(
        me.json,
        json!({ "kind": "agent", "owner": ADA, "service": null })
    );
    let shared = bearer_get(&console, SHARED_TOKEN, "/api/v1/me").await?;
    assert_eq!(
        shared.json,
        json!({ "kind": "agent", "owner": null, "service": null })
    );

    // Human-only routes refuse bearers, whatever the method.
    for path in [
        "/api/v1/credential-requests?approver=me",
        "/api/v1/credential-grants?approver=me",
        "/api/v1/machine-logins",
        "/api/v1/agent-tokens",
        "/",
    ] {
        let r = bearer_get(&console, &token, path).await?;
        assert_eq!((r.status, r.code()), (403, "HUMAN_ONLY"), "{path}");
    }
    let r = bearer_post(
        &console,
        SHARED_TOKEN,
        &format!("/api/v1/credential-requests/{}/approve", "a".repeat(64)),
        json!({}),
    )
    .await?;
    assert_eq!((r.status, r.code()), (403, "HUMAN_ONLY"));
    let r = bearer_post(&console, &token, "/api/v1/agent-tokens", json!({})).await?;
    assert_eq!((r.status, r.code()), (403, "HUMAN_ONLY"));

    // A bad bearer is 401, not HUMAN_ONLY.
    let r = bearer_get(&console, "csp_not-a-token", "/api/v1/me").await?;
    assert_eq!((r.status, r.code()), (401, "UNAUTHENTICATED"));

    // Revoked tokens stop at once; only the owner revokes.
    let mut bob = Person::new(&console)?;
    bob.sign_in_oidc(&idp, BOB).await?;
    assert_eq!(
        bob.delete(&format!("/api/v1/agent-tokens/{id}"))
            .await?
            .status,
        404
    );
    assert_eq!(
        ada.delete(&format!("/api/v1/agent-tokens/{id}"))
            .await?
            .status,
        204
    );
    let r = bearer_get(&console, &token, "/api/v1/me").await?;
    assert_eq!(r.status, 401);
    console.stop().await;
    broker.stop().await;
    Ok(())
}

#[tokio::test]
async fn browser_state_changes_need_same_origin_and_the_csrf_token() -> anyhow::Result<()> {
    let (broker, idp, console) = setup().await?;
    let mut ada = Person::new(&console)?;
    ada.sign_in_oidc(&idp, ADA).await?;
    let url = format!("{}/api/v1/agent-tokens", console.url);

    let no_token = ada
        .http
        .post(&url)
        .header("origin", &console.url)
        .json(&json!({}))
        .send()
        .await?;
    assert_eq!(no_token.status(), 403);
    let wrong = ada
        .http
        .post(&url)
        .header("origin", &console.url)
        .header("x-csrf-token", "nope")
        .json(&json!({}))
        .send()
        .await?;
    assert_eq!(wrong.status(), 403);
    let cross = ada
        .http
        .post(&url)
        .header("origin", "http://evil.example")
        .header("x-csrf-token", &ada.csrf)
        .json(&json!({}))
        .send()
        .await?;
    assert_eq!(cross.status(), 403);
    let cross_site = ada
        .http
        .post(&url)
        .header("sec-fetch-site", "cross-site")
        .header("x-csrf-token", &ada.csrf)
        .json(&json!({}))
        .send()
        .await?;
    assert_eq!(cross_site.status(), 403);
    let body: serde_json::Value = cross_site.json().await?;
    assert_eq!(body["code"], "CSRF_REJECTED");
    // The sign-out form without its field.
    let r = ada
        .http
        .post(format!("{}/sign-out", console.url))
        .header("origin", &console.url)
        .form(&[("x", "y")])
        .send()
        .await?;
    assert_eq!(r.status(), 403);
    assert_eq!(ada.get("/api/v1/me").await?.json["login"], ADA);
    // With both, it goes through.
    assert_eq!(
        ada.post("/api/v1/agent-tokens", json!({})).await?.status,
        201
    );
    console.stop().await;
    broker.stop().await;
    Ok(())
}

/// The broker front end to end: a machine login approved by its typed code, an owner-tier
/// request approved by its owner (another person refused NOT_APPROVER with the broker's code),
/// a shared secret's request decided by anyone, grants and machines listed and revoked.
#[tokio::test]
async fn broker_front_end_to_end() -> anyhow::Result<()> {
    let (broker, idp, console) = setup().await?;
    let mut ada = Person::new(&console)?;
    ada.sign_in_oidc(&idp, ADA).await?;
    let mut bob = Person::new(&console)?;
    bob.sign_in_oidc(&idp, BOB).await?;

    // Ada's machine logs in; its login waits in her inbox.
    let login = start_machine_login(&broker, ADA, "ada-laptop").await?;
    let inbox = ada.get("/api/v1/credential-requests?approver=me").await?;
    assert_eq!(inbox.status, 200, "{}", inbox.text);
    let rows = inbox.json.as_array().cloned().unwrap_or_default();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0]["kind"], "launcher_credential");
    assert_eq!(rows[0]["identifiers"], json!(["ada-laptop"]));
    assert_eq!(
        ada.get("/api/v1/credential-requests?approver=bob@example.com")
            .await?
            .code(),
        "INVALID_QUERY"
    );
    assert_eq!(
        ada.get("/api/v1/credential-requests").await?.code(),
        "INVALID_QUERY"
    );

    // Typed code → facts → approve with the code.
    let typed = login.code.to_lowercase();
    let facts = ada
        .post(
            "/api/v1/credential-requests/machine-lookup",
            json!({ "code": typed }),
        )
        .await?;
    assert_eq!(facts.status, 200, "{}", facts.text);
    assert_eq!(facts.json["identifiers"], json!(["ada-laptop"]));
    assert_eq!(facts.json["approver"], ADA);
    let record = facts.json["record_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let r = ada
        .post(
            "/api/v1/credential-requests/machine-lookup",
            json!({ "code": "ZZZZ-ZZZZ" }),
        )
        .await?;
    assert_eq!((r.status, r.code()), (404, "NO_SUCH_CODE"));
    let r = ada
        .post(
            &format!("/api/v1/credential-requests/{record}/approve"),
            json!({}),
        )
        .await?;
    assert_eq!((r.status, r.code()), (400, "CODE_REQUIRED"));
    let r = ada
        .post(
            &format!("/api/v1/credential-requests/{record}/approve"),
            json!({ "code": "AAAA-AAAA" }),
        )
        .await?;
    assert_eq!((r.status, r.code()), (403, "CODE_MISMATCH"));
    let r = bob
        .post(
            &format!("/api/v1/credential-requests/{record}/approve"),
            json!({ "code": login.code }),
        )
        .await?;
    assert_eq!((r.status, r.code()), (403, "NOT_APPROVER"));
    let r = ada
        .post(
            &format!("/api/v1/credential-requests/{record}/approve"),
            json!({ "code": login.code }),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json["state"], "approved");
    assert!(r.json["credential_id"].is_string());
    let machine = login.machine(&broker).await?;

    // An owner-tier request waits for Ada alone.
    let session = machine.enroll(&broker, "agent-1").await?;
    let req = session
        .request(&broker, &[ADA_SECRET], "deploy the release", Some(3600))
        .await?;
    assert_eq!(req["state"], "pending");
    let record = req["record_id"].as_str().unwrap_or_default().to_owned();
    let rows = ada
        .get("/api/v1/credential-requests?approver=me")
        .await?
        .json;
    let row = rows
        .as_array()
        .and_then(|a| a.iter().find(|r| r["record_id"] == record.as_str()))
        .cloned()
        .unwrap_or_default();
    assert_eq!(row["reason"], "deploy the release");
    assert_eq!(row["lifetime_seconds"], 3600);
    assert_eq!(row["identifiers"], json!([ADA_SECRET]));
    assert_eq!(row["enrollment"]["runtime_id"], "agent-1");
    let bobs = bob
        .get("/api/v1/credential-requests?approver=me")
        .await?
        .json;
    assert!(
        bobs.as_array()
            .is_some_and(|a| a.iter().all(|r| r["record_id"] != record.as_str()))
    );
    let one = bob
        .get(&format!("/api/v1/credential-requests/{record}"))
        .await?;
    assert_eq!(one.json["approver"], ADA);
    let r = bob
        .post(
            &format!("/api/v1/credential-requests/{record}/approve"),
            json!({}),
        )
        .await?;
    assert_eq!((r.status, r.code()), (403, "NOT_APPROVER"));
    let r = bob
        .post(
            &format!("/api/v1/credential-requests/{record}/deny"),
            json!({}),
        )
        .await?;
    assert_eq!((r.status, r.code()), (403, "NOT_APPROVER"));
    let r = ada
        .post(
            &format!("/api/v1/credential-requests/{record}/approve"),
            json!({}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let grant = r.json["grant_id"].as_str().unwrap_or_default().to_owned();
    let values = session.values(&broker, &grant).await?;
    assert_eq!(
        values.json["values"][ADA_SECRET],
        broker.values[ADA_SECRET].as_str()
    );
    let r = ada
        .post(
            &format!("/api/v1/credential-requests/{record}/approve"),
            json!({}),
        )
        .await?;
    assert_eq!((r.status, r.code()), (409, "RECORD_TERMINAL"));
    assert_eq!(
        ada.get(&format!("/api/v1/credential-requests/{record}"))
            .await?
            .json["state"],
        "approved"
    );

    // Malformed ids never reach another broker route.
    let r = ada
        .post(
            "/api/v1/credential-requests/..%2F..%2Fv1%2Fgrants/approve",
            json!({}),
        )
        .await?;
    assert_eq!(r.code(), "RECORD_ID_INPUT");
    assert_eq!(
        ada.post(
            "/api/v1/credential-requests/x/approve",
            json!({ "extra": 1 })
        )
        .await?
        .code(),
        "INVALID_DECISION"
    );

    // A shared secret: anyone signed in decides.
    let shared = session
        .request(&broker, &[SHARED], "read the shared key", None)
        .await?;
    let srec = shared["record_id"].as_str().unwrap_or_default().to_owned();
    for p in [&ada, &bob] {
        let rows = p.get("/api/v1/credential-requests?approver=me").await?.json;
        assert!(
            rows.as_array()
                .is_some_and(|a| a.iter().any(|r| r["record_id"] == srec.as_str()))
        );
    }
    let r = bob
        .post(
            &format!("/api/v1/credential-requests/{srec}/deny"),
            json!({}),
        )
        .await?;
    assert_eq!(r.json["state"], "denied", "{}", r.text);
    let sid = shared["request_id"].as_str().unwrap_or_default();
    assert_eq!(session.get_request(&broker, sid).await?["state"], "denied");

    // Grants: listed for Ada, revoked.
    let grants = ada.get("/api/v1/credential-grants?approver=me").await?;
    assert!(
        grants
            .json
            .as_array()
            .is_some_and(|a| a.iter().any(|g| g["grant_id"] == grant.as_str())),
        "{}",
        grants.text
    );
    assert_eq!(
        ada.get("/api/v1/credential-grants").await?.code(),
        "INVALID_QUERY"
    );
    let r = bob
        .post(
            &format!("/api/v1/credential-grants/{grant}/revoke"),
            json!({}),
        )
        .await?;
    assert_eq!(r.code(), "NOT_APPROVER");
    let r = ada
        .post(
            &format!("/api/v1/credential-grants/{grant}/revoke"),
            json!({}),
        )
        .await?;
    assert_eq!(r.json["state"], "revoked", "{}", r.text);
    assert_eq!(
        session.values(&broker, &grant).await?.code(),
        "GRANT_NOT_LIVE"
    );

    // Pages render for her.
    for path in [
        "/",
        "/inbox/rows",
        "/grants",
        "/machines",
        "/machines/approve",
        "/tokens",
        &format!("/requests/{record}"),
    ] {
        let r = ada.get(path).await?;
        assert_eq!(r.status, 200, "{path}: {}", r.text);
    }

    // Machines: Ada's laptop, approved by her; Bob may not revoke it.
    let machines = ada.get("/api/v1/machine-logins").await?;
    let m = machines
        .json
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|m| m["credential_id"] == machine.credential_id.as_str())
        })
        .cloned()
        .unwrap_or_default();
    assert_eq!(m["approved_by"], ADA);
    assert_eq!(m["host"], "ada-laptop");
    let r = bob
        .post(
            &format!("/api/v1/machine-logins/{}/revoke", machine.credential_id),
            json!({}),
        )
        .await?;
    assert_eq!(r.code(), "NOT_APPROVER");
    let r = ada
        .post(
            &format!("/api/v1/machine-logins/{}/revoke", machine.credential_id),
            json!({}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let again = session
        .request(&broker, &[AUTO], "after revoke", None)
        .await;
    assert!(again.is_err(), "the session ended with its machine login");

    console.stop().await;
    broker.stop().await;
    Ok(())
}

#[tokio::test]
async fn without_a_broker() -> anyhow::Result<()> {
    let idp = TestIdp::start().await?;
    let console = TestConsole::start(ConsoleOptions {
        idp: Some(&idp),
        ..Default::default()
    })
    .await?;
    let mut ada = Person::new(&console)?;
    ada.sign_in_oidc(&idp, ADA).await?;
    let r = ada.get("/api/v1/credential-requests?approver=me").await?;
    assert_eq!((r.status, r.text.as_str()), (200, "null"));
    let r = ada
        .post(
            &format!("/api/v1/credential-requests/{}/approve", "a".repeat(64)),
            json!({}),
        )
        .await?;
    assert_eq!((r.status, r.code()), (404, "BROKER_NOT_CONFIGURED"));
    assert_eq!(ada.get("/").await?.status, 200);
    console.stop().await;
    Ok(())
}

#[tokio::test]
async fn a_broker_that_is_down() -> anyhow::Result<()> {
    let broker = TestBroker::start().await?;
    let idp = TestIdp::start().await?;
    let console = TestConsole::start(ConsoleOptions {
        broker: Some(&broker),
        idp: Some(&idp),
        ..Default::default()
    })
    .await?;
    let mut ada = Person::new(&console)?;
    ada.sign_in_oidc(&idp, ADA).await?;
    broker.stop().await;
    let r = ada.get("/api/v1/credential-requests?approver=me").await?;
    assert_eq!((r.status, r.code()), (503, "BROKER_UNAVAILABLE"));
    console.stop().await;
    Ok(())
}

#[tokio::test]
async fn local_sign_in_is_dev_only() -> anyhow::Result<()> {
    let broker = TestBroker::start().await?;
    let dev = TestConsole::start(ConsoleOptions {
        broker: Some(&broker),
        local_sign_in: true,
        ..Default::default()
    })
    .await?;
    let mut bob = Person::new(&dev)?;
    let r = bob.sign_in_local("Bob@Example.com").await?;
    assert_eq!(r.status, 303, "{}", r.text);
    let cookie = r
        .set_cookies()
        .into_iter()
        .find(|c| c.starts_with("countersign_session="))
        .unwrap_or_default();
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"));
    assert_eq!(bob.get("/api/v1/me").await?.json["login"], BOB);
    assert_eq!(bob.sign_in_local("not an email").await?.status, 400);

    // Without the form's token (login CSRF): refused.
    let r = reqwest::Client::new()
        .post(format!("{}/auth/local", dev.url))
        .form(&[("email", ADA)])
        .send()
        .await?;
    assert_eq!(r.status(), 403);

    // Not offered, and refused, where it is off.
    let idp = TestIdp::start().await?;
    let prod = TestConsole::start(ConsoleOptions {
        broker: Some(&broker),
        idp: Some(&idp),
        ..Default::default()
    })
    .await?;
    let page = Person::new(&prod)?.get("/sign-in").await?;
    assert!(!page.text.contains("/auth/local"));
    let r = reqwest::Client::new()
        .post(format!("{}/auth/local", prod.url))
        .header("origin", &prod.url)
        .form(&[("email", ADA)])
        .send()
        .await?;
    assert_eq!(r.status(), 404);
    dev.stop().await;
    prod.stop().await;
    broker.stop().await;
    Ok(())
}
