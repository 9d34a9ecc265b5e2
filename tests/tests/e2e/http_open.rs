//! The open routes (settings, health, reread), the route table against the router and the
//! OpenAPI document, body limits and shapes on every route with a body, and the failures of
//! the database (DATABASE_UNAVAILABLE, INTERNAL) through the storage fault switch.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use chrono::Duration;
use countersign_broker_core::ErrorCode;
use countersign_broker_http::limits::Quotas;
use countersign_broker_http::openapi::{Credential, ROUTES};
use countersign_e2e::http::*;
use serde_json::{Value, json};

type R = anyhow::Result<()>;

fn many_rereads() -> Quotas {
    Quotas {
        rereads_per_source: 1000,
        rereads_overall: 1000,
        ..Quotas::default()
    }
}

#[tokio::test]
async fn settings_and_health() -> R {
    let tb = TestBroker::start().await?;
    let s = tb.open("GET", "/v1/settings", None).await?.expect(200);
    assert_eq!(
        s.body,
        json!({ "store": "local-file-store", "secrets_prefix": PREFIX })
    );
    let h = tb.open("GET", "/healthz", None).await?.expect(200);
    assert_eq!(h.body, json!({ "status": "ok" }));

    tb.faults.ping(Some(Fault::Unavailable));
    let r = tb.open("GET", "/healthz", None).await?;
    r.refused(503, "DATABASE_UNAVAILABLE");
    assert!(r.error().starts_with("database ping"), "{}", r.error());
    assert_eq!(
        r.header("retry-after"),
        Some("1"),
        "a 503 says when to ask again"
    );
    tb.faults.ping(Some(Fault::Broken));
    let r = tb.open("GET", "/healthz", None).await?;
    r.refused(500, "INTERNAL");
    assert!(
        !r.error().contains("injected"),
        "the cause stays in the log: {}",
        r.error()
    );
    tb.faults.ping(None);
    tb.open("GET", "/healthz", None).await?.expect(200);
    // Settings need no database.
    tb.faults.all(Some(Fault::Unavailable));
    tb.open("GET", "/v1/settings", None).await?.expect(200);
    Ok(())
}

#[tokio::test]
async fn an_unreachable_database_refuses_credentials_with_503() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    // Credential reads.
    tb.faults.reads(Some(Fault::Unavailable));
    for r in [
        s.describe().await?,
        s.request(&[AUTO]).await?,
        s.renew().await?,
        m.operator_machines().await?,
        m.enroll(&EnrollSpec::session("x"), &new_key()).await?,
    ] {
        r.refused(503, "DATABASE_UNAVAILABLE");
        assert!(!r.error().contains("injected"), "{}", r.error());
    }
    let r = s.describe().await?;
    assert!(r.error().starts_with("proof check"), "{}", r.error());
    let r = m.operator_machines().await?;
    assert!(
        r.error().starts_with("launcher credential read"),
        "{}",
        r.error()
    );
    tb.faults.reads(None);
    // The single-use memory of jti values.
    tb.faults.once(Some(Fault::Unavailable));
    s.describe().await?.refused(503, "DATABASE_UNAVAILABLE");
    m.operator_machines()
        .await?
        .refused(503, "DATABASE_UNAVAILABLE");
    tb.faults.once(None);
    s.describe().await?.expect(200);
    m.operator_machines().await?.expect(200);
    Ok(())
}

/// A write that keeps meeting conflicts is run again up to the shared policy's attempts, then
/// answered 503 with `Retry-After` (the console's answer to the same case), never 500 (issue 50).
#[tokio::test]
async fn a_conflict_that_outlives_its_retries_is_503_with_retry_after() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    tb.faults.writes(Some(Fault::Conflict));
    let r = s.request(&[AUTO]).await?;
    r.refused(503, "DATABASE_UNAVAILABLE");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert!(
        r.error().contains("conflict outlived its retries"),
        "{}",
        r.error()
    );
    tb.faults.writes(None);
    s.request(&[AUTO]).await?.expect(200);
    Ok(())
}

#[tokio::test]
async fn a_broken_database_is_internal_naming_the_step_never_the_cause() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let p = s.request(&[ADA_SECRET]).await?.expect(200);
    tb.faults.writes(Some(Fault::Broken));
    for (r, step) in [
        (s.request(&[AUTO]).await?, "create request failed"),
        (
            m.enroll(&EnrollSpec::session("x"), &new_key()).await?,
            "enroll failed",
        ),
        (
            tb.approve(&p.s("record_id"), ADA, None).await?,
            "approve failed",
        ),
        (s.renew().await?, "renew failed"),
        (
            tb.start_login(&new_key(), ADA, "h").await?,
            "start machine login failed",
        ),
    ] {
        r.refused(500, "INTERNAL");
        assert_eq!(r.error(), step);
    }
    tb.faults.writes(None);
    tb.faults.reads(Some(Fault::Broken));
    let r = tb.pending(ADA).await?;
    r.refused(500, "INTERNAL");
    assert_eq!(r.error(), "list pending failed");
    tb.faults.reads(None);
    // Nothing was half done.
    assert_eq!(tb.record(&p.s("record_id")).await?.s("state"), "pending");
    Ok(())
}

#[tokio::test]
async fn a_reread_applies_one_secrets_change_at_once() -> R {
    let tb = TestBroker::builder().quotas(many_rereads()).start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    assert_eq!(
        tb.reread(AUTO).await?.expect(200).body,
        json!({ "name": AUTO, "served": true })
    );
    for (name, reason) in [
        ("NOPE", "absent"),
        (NO_OWNER, "owner-tag-missing"),
        (NO_VALUE, "no-current-value"),
    ] {
        assert_eq!(
            tb.reread(name).await?.expect(200).body,
            json!({ "name": name, "served": false, "reason": reason })
        );
    }
    tb.edit_secret(AUTO_2, |x| x.key = Some("another-key".into()))?;
    assert_eq!(
        tb.reread(AUTO_2).await?.get("reason"),
        &json!("wrong-encryption-key")
    );
    tb.edit_secret(ADA_SECRET_2, |x| x.tier = Some("weird".into()))?;
    assert_eq!(
        tb.reread(ADA_SECRET_2).await?.get("reason"),
        &json!("tier-unknown")
    );
    s.request(&[ADA_SECRET_2])
        .await?
        .refused(400, "UNKNOWN_SECRET");

    // A tier change: owner → automatic, served at once after the reread.
    tb.edit_secret(UNTIERED, |x| x.tier = Some("automatic".into()))?;
    assert_eq!(s.request(&[UNTIERED]).await?.s("state"), "pending");
    tb.reread(UNTIERED).await?.expect(200);
    // The earlier pending request of it is joined; once cancelled, the secret is automatic.
    let joined = s.request(&[UNTIERED]).await?.expect(200);
    assert_eq!(joined.get("coalesced"), &json!(true));
    s.cancel(&joined.s("request_id")).await?.expect(200);
    assert_eq!(s.request(&[UNTIERED]).await?.s("state"), "granted");

    // A new secret, unknown until reread.
    tb.edit_store(|v| v.push(StoredSecret::new("BRAND_NEW", ADA, Some("automatic"))))?;
    s.request(&["BRAND_NEW"])
        .await?
        .refused(400, "UNKNOWN_SECRET");
    tb.reread("BRAND_NEW").await?.expect(200);
    let g = s.request(&["BRAND_NEW"]).await?.expect(200);
    assert_eq!(g.s("state"), "granted");

    for name in [
        "auto_token",
        "1A",
        "A-B",
        "_A",
        &"A".repeat(129),
        "%ff",
        "%20",
    ] {
        tb.reread(name).await?.refused(400, "SECRET_NAME_INVALID");
    }
    Ok(())
}

#[tokio::test]
async fn a_reread_the_store_cannot_finish_ends_and_keeps_the_last_good_policy() -> R {
    let tb = TestBroker::builder().quotas(many_rereads()).start().await?;
    let (_machine, session) = tb.session_of(ADA).await?;
    // The store goes away: the reread ends without a result, and says to send it again.
    let saved = std::fs::read_to_string(&tb.store_path)?;
    std::fs::remove_file(&tb.store_path)?;
    let r = tb.reread(AUTO).await?;
    r.refused(503, "REQUEST_ENDED");
    // The last good policy stays: the automatic secret is still granted.
    session.request(&[AUTO]).await?.expect(200);
    // The store comes back: rereads work again.
    std::fs::write(&tb.store_path, saved)?;
    assert_eq!(tb.reread(AUTO).await?.expect(200).body["served"], true);
    Ok(())
}

#[tokio::test]
async fn rereads_are_rate_limited_per_source_and_overall() -> R {
    let tb = TestBroker::start().await?;
    for _ in 0..6 {
        tb.reread(AUTO).await?.expect(200);
    }
    let r = tb.reread(AUTO).await?;
    r.refused(429, "RATE_LIMITED");
    let wait: i64 = r.header("retry-after").expect("Retry-After").parse()?;
    assert!((1..=60).contains(&wait), "{wait}");
    // A malformed name is limited too: the limit comes first.
    tb.reread("bad").await?.refused(429, "RATE_LIMITED");

    // Other sources have their own quota, up to 60 a minute over all callers.
    let mut total = 6;
    let mut overall = None;
    'sources: for last in 2..=20u8 {
        let client = tb.client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 0, last)))?;
        for _ in 0..6 {
            let r = tb
                .send_with(
                    &client,
                    "POST",
                    &format!("/v1/secrets/{AUTO}/reread"),
                    &[],
                    None,
                )
                .await?;
            if r.status == 429 {
                overall = Some(r);
                break 'sources;
            }
            r.expect(200);
            total += 1;
        }
    }
    let r = overall.expect("the overall limit is reached");
    r.refused(429, "RATE_LIMITED");
    assert!(r.header("retry-after").is_some());
    assert_eq!(total, 60);

    tb.advance(Duration::seconds(wait.max(10)));
    tb.reread(AUTO).await?.expect(200);
    Ok(())
}

/// A path for a route with its parameters filled in.
fn fill(path: &str, id: &str, record: &str, pending: &str, name: &str) -> String {
    path.replace("{id}", id)
        .replace("{record}", record)
        .replace("{pending}", pending)
        .replace("{name}", name)
}

#[tokio::test]
async fn every_route_of_the_table_is_served_and_refuses_without_its_credential() -> R {
    let tb = TestBroker::start().await?;
    for r in ROUTES {
        let path = fill(r.path, &random_uuid(), &random_record_id(), "nobody", AUTO);
        let path = if matches!(
            r.path,
            "/v1/pending" | "/v1/launcher-credentials" | "/v1/grants"
        ) && r.method == "GET"
        {
            format!("{path}?approver={ADA}")
        } else {
            path
        };
        let body = r.body.map(|_| b"{}".to_vec());
        let resp = tb.send(r.method, &path, &[], body).await?;
        assert_ne!(resp.status, 405, "{} {} is not routed", r.method, r.path);
        assert!(
            resp.status != 404 || !resp.code().is_empty(),
            "{} {} is not routed",
            r.method,
            r.path
        );
        let want = match r.credential {
            Credential::Machine => Some("LAUNCHER_INVALID"),
            Credential::Session | Credential::Renewal => Some("PROOF_INVALID"),
            Credential::Console => Some("UI_INVALID"),
            Credential::None => None,
        };
        if let Some(code) = want {
            resp.refused(401, code);
        } else if resp.status >= 400 {
            // Every refusal is {"code","error"} with a code the route lists.
            let code = resp.code().to_owned();
            resp.refused(resp.status, &code);
            assert!(
                r.codes.contains(&code.as_str()),
                "{} {}: {code}",
                r.method,
                r.path
            );
        }
    }
    // Routes outside the table are not served.
    tb.open("GET", "/v1/nothing-here", None).await?.expect(404);
    tb.open("PUT", "/v1/requests", None).await?.expect(405);
    Ok(())
}

#[tokio::test]
async fn the_openapi_document_lists_exactly_the_route_table() -> R {
    let tb = TestBroker::start().await?;
    let doc = tb.open("GET", "/v1/openapi.json", None).await?.expect(200);
    assert_eq!(doc.body["openapi"], json!("3.1.0"));
    let mut listed = BTreeSet::new();
    for (path, ops) in doc.body["paths"].as_object().expect("paths") {
        for (method, op) in ops.as_object().expect("operations") {
            listed.insert((method.to_uppercase(), path.clone()));
            let r = ROUTES
                .iter()
                .find(|r| r.path == path && r.method.eq_ignore_ascii_case(method))
                .unwrap_or_else(|| panic!("{method} {path} is not in the table"));
            assert_eq!(op["x-credential"], json!(r.credential.as_str()));
            assert!(op["responses"][r.success.to_string()].is_object());
            let documented: BTreeSet<String> = op["responses"]
                .as_object()
                .expect("responses")
                .values()
                .filter_map(|v| v["x-codes"].as_array())
                .flatten()
                .filter_map(|c| c.as_str().map(str::to_owned))
                .collect();
            for code in r.codes.iter().chain(r.credential.codes()) {
                assert!(
                    documented.contains(*code),
                    "{method} {path} documents {code}"
                );
            }
            assert_eq!(
                op.get("requestBody").is_some(),
                r.body.is_some(),
                "{method} {path}"
            );
        }
    }
    let table: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|r| (r.method.to_owned(), r.path.to_owned()))
        .collect();
    assert_eq!(listed, table);
    assert_eq!(table.len(), ROUTES.len(), "no route twice");
    assert_eq!(
        ROUTES.len(),
        28 + 6,
        "the spec's 28 routes and issue 29's six passkey routes"
    );
    Ok(())
}

#[test]
fn every_code_of_the_table_is_a_catalogue_code() {
    let catalogue: BTreeSet<&str> = ErrorCode::ALL.iter().map(|c| c.as_str()).collect();
    let mut used = BTreeSet::new();
    for r in ROUTES {
        for code in r
            .codes
            .iter()
            .chain(r.credential.codes())
            .chain(r.body.iter())
        {
            assert!(catalogue.contains(code), "{} {}: {code}", r.method, r.path);
            used.insert(*code);
        }
    }
    // Every catalogue code is some route's (INTERNAL and REQUEST_TOO_LARGE apply everywhere).
    let unused: Vec<_> = catalogue.difference(&used).collect();
    assert!(unused.is_empty(), "codes no route lists: {unused:?}");
}

#[tokio::test]
async fn every_route_with_a_body_refuses_an_oversized_or_malformed_one_with_its_codes() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let record_id = s.request(&[ADA_SECRET]).await?.expect(200).s("record_id");
    let grant_id = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    let mut checked = 0;
    for r in ROUTES.iter().filter(|r| r.body.is_some()) {
        let id = match r.path {
            "/v1/enrollments/{id}/renew" => s.enrollment_id.clone(),
            "/v1/launcher-credentials/{id}/revoke-by-approver" => m.credential_id.clone(),
            _ => grant_id.clone(),
        };
        let path = fill(r.path, &id, &record_id, "x", AUTO);
        let auth = format!("Bearer {}", tb.console_token);
        let send = |body: Vec<u8>| {
            let (tb, m, s, path, auth) = (&tb, &m, &s, path.clone(), auth.clone());
            async move {
                match r.credential {
                    Credential::Console => {
                        tb.send(r.method, &path, &[("authorization", &auth)], Some(body))
                            .await
                    }
                    Credential::Machine => m.call_raw(r.method, &path, &body).await,
                    Credential::Session | Credential::Renewal => {
                        s.call_raw(r.method, &path, &body).await
                    }
                    Credential::None => tb.send(r.method, &path, &[], Some(body)).await,
                }
            }
        };
        let big = send(vec![b' '; 64 * 1024 + 1]).await?;
        big.refused(413, "REQUEST_TOO_LARGE");
        if r.path == "/v1/launcher-credentials/token" {
            // Without a token issuer the route answers TOKEN_LOGIN_OFF before reading the shape.
            send(b"{".to_vec()).await?.refused(404, "TOKEN_LOGIN_OFF");
            continue;
        }
        for bad in [&b"{"[..], b"[]", b"{\"unexpected\": true}"] {
            let resp = send(bad.to_vec()).await?;
            let want = r.body.unwrap_or_default();
            assert_eq!(resp.code(), want, "{} {}: {}", r.method, r.path, resp.text);
            resp.refused(400, want);
        }
        checked += 1;
    }
    assert_eq!(checked, 14, "every route with a body but the token login");
    Ok(())
}

#[tokio::test]
async fn undecodable_path_segments_get_each_routes_own_code() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    s.get_request("%ff").await?.refused(400, "REQUEST_ID_INPUT");
    s.cancel("%ff").await?.refused(400, "REQUEST_ID_INPUT");
    s.values("%ff").await?.refused(400, "GRANT_ID_INPUT");
    s.revoke("%C3%28").await?.refused(400, "GRANT_ID_INPUT");
    s.renew_id("%ff").await?.refused(400, "ENROLLMENT_ID_INPUT");
    m.unenroll("%ff").await?.refused(400, "ENROLLMENT_ID_INPUT");
    m.operator_revoke_machine("%ff")
        .await?
        .refused(400, "CREDENTIAL_ID_INPUT");
    m.operator_revoke_grant("%ff")
        .await?
        .refused(400, "GRANT_ID_INPUT");
    tb.record("%ff").await?.refused(400, "RECORD_ID_INPUT");
    tb.approve("%ff", ADA, None)
        .await?
        .refused(400, "RECORD_ID_INPUT");
    tb.revoke_credential("%ff", ADA)
        .await?
        .refused(400, "CREDENTIAL_ID_INPUT");
    tb.revoke_grant_as("%ff", ADA)
        .await?
        .refused(400, "GRANT_ID_INPUT");
    tb.poll_login("%ff").await?.refused(404, "NOT_FOUND");
    tb.reread("%ff").await?.refused(400, "SECRET_NAME_INVALID");
    // The credential is still checked first.
    tb.open("GET", "/v1/requests/%ff", None)
        .await?
        .refused(401, "PROOF_INVALID");
    tb.open("GET", "/v1/credential-requests/%ff", None)
        .await?
        .refused(401, "UI_INVALID");
    tb.open("POST", "/v1/operator/grants/%ff/revoke", None)
        .await?
        .refused(401, "LAUNCHER_INVALID");
    Ok(())
}

#[tokio::test]
async fn metrics_are_served() -> R {
    let tb = TestBroker::start().await?;
    let r = tb.open("GET", "/metrics", None).await?.expect(200);
    assert_eq!(r.body, Value::Null, "text, not JSON");
    Ok(())
}
