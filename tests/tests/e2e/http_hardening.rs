//! The review's hardening over HTTP: request bodies that repeat a JSON member, Unicode format
//! characters in `host`, `runtime_id`, `reason` and `login_hint`, the machine-login lookup's rate
//! limit, and the server's body read timeout and connection cap (over raw sockets).

use std::net::{IpAddr, Ipv4Addr};

use anyhow::Context;
use countersign_broker_http::limits::Quotas;
use countersign_e2e::http::*;
use serde_json::json;

type R = anyhow::Result<()>;

/// `body` (a JSON object) with `extra` (`"name":value` text) appended as further members.
fn with_members(body: &serde_json::Value, extra: &str) -> Vec<u8> {
    let text = body.to_string();
    let open = text.strip_suffix('}').unwrap_or(&text);
    format!("{open},{extra}}}").into_bytes()
}

#[tokio::test]
async fn a_body_repeating_a_member_is_refused_with_the_routes_input_code() -> R {
    let tb = TestBroker::start().await?;
    let m = tb.machine_login(ADA).await?;

    // Enrollment: the same member twice, even with the same value, is INVALID_ENROLLMENT.
    let key = new_key();
    let body = EnrollSpec::session("rt-dup").body(&key);
    let dup = with_members(&body, r#""runtime_id":"rt-dup""#);
    m.call_raw("POST", "/v1/enrollments", &dup)
        .await?
        .refused(400, "INVALID_ENROLLMENT");
    // Nested: a repeat inside the jwk.
    let mut nested = body.clone();
    let crv = nested["jwk"]["crv"].clone();
    nested["jwk"] = serde_json::Value::Null;
    let jwk = serde_json::to_string(&jwk_value(&key))?;
    let jwk = format!("{},\"crv\":{crv}}}", jwk.strip_suffix('}').unwrap_or(&jwk));
    let nested = nested
        .to_string()
        .replace("\"jwk\":null", &format!("\"jwk\":{jwk}"));
    m.call_raw("POST", "/v1/enrollments", nested.as_bytes())
        .await?
        .refused(400, "INVALID_ENROLLMENT");
    // The control: the body as sent once is accepted.
    m.call_raw("POST", "/v1/enrollments", body.to_string().as_bytes())
        .await?
        .expect(201);

    // Console routes: lookup and a decision.
    tb.console_raw(
        "POST",
        "/v1/machine-logins/lookup",
        Some(br#"{"code":"AAAA-BBBB","code":"CCCC-DDDD"}"#.to_vec()),
    )
    .await?
    .refused(400, "INVALID_LOOKUP");
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[ADA_SECRET]).await?.expect(200);
    let record = r.s("record_id");
    let decision = json!({ "approver": ADA });
    tb.console_raw(
        "POST",
        &format!("/v1/credential-requests/{record}/approve"),
        Some(with_members(&decision, &format!(r#""approver":"{BOB}""#))),
    )
    .await?
    .refused(400, "INVALID_DECISION");
    Ok(())
}

/// Unicode format characters (category Cf): a bidi override and isolate, a zero-width space, the
/// byte-order mark and the soft hyphen.
const FORMAT: [char; 5] = ['\u{202E}', '\u{2066}', '\u{200B}', '\u{FEFF}', '\u{00AD}'];

#[tokio::test]
async fn format_characters_are_refused_in_host_runtime_id_reason_and_login_hint() -> R {
    let tb = TestBroker::builder()
        .quotas(Quotas {
            login_starts_per_source: 1000,
            ..Quotas::default()
        })
        .start()
        .await?;
    let key = new_key();
    let (m, s) = tb.session_of(ADA).await?;
    for c in FORMAT {
        let what = format!("U+{:04X}", c as u32);
        // host and login_hint: the machine-login start's REQUEST_INVALID.
        let mut claims = tb.machine_login_claims(ADA, &format!("build{c}host"));
        let r = tb
            .start_login_with(&tb.sign_machine_login(&key, &claims))
            .await?;
        assert_eq!(
            (r.status, r.code()),
            (400, "REQUEST_INVALID"),
            "host {what}"
        );
        claims = tb.machine_login_claims(&format!("ada{c}@example.com"), "build-host");
        let r = tb
            .start_login_with(&tb.sign_machine_login(&key, &claims))
            .await?;
        assert_eq!(
            (r.status, r.code()),
            (400, "REQUEST_INVALID"),
            "login_hint {what}"
        );

        // runtime_id: the enrollment's INVALID_ENROLLMENT.
        let r = m
            .enroll(&EnrollSpec::session(&format!("rt{c}1")), &new_key())
            .await?;
        assert_eq!(
            (r.status, r.code()),
            (400, "INVALID_ENROLLMENT"),
            "runtime_id {what}"
        );

        // reason: the secret request's REQUEST_INVALID.
        let request = s.secret_request(&[AUTO], &format!("deploy {c}the fix"), None);
        let r = s.post_request(&json!({ "request": request })).await?;
        assert_eq!(
            (r.status, r.code()),
            (400, "REQUEST_INVALID"),
            "reason {what}"
        );
    }
    // The controls: the same values without the character pass.
    let claims = tb.machine_login_claims(ADA, "buildhost");
    tb.start_login_with(&tb.sign_machine_login(&key, &claims))
        .await?
        .expect(202);
    m.enroll(&EnrollSpec::session("rt1"), &new_key())
        .await?
        .expect(201);
    let request = s.secret_request(&[AUTO], "deploy the fix", None);
    s.post_request(&json!({ "request": request }))
        .await?
        .expect(200);
    Ok(())
}

/// A lookup through `client` with the console token.
async fn lookup_from(
    tb: &TestBroker,
    client: &reqwest::Client,
    code: &str,
) -> anyhow::Result<Resp> {
    let auth = format!("Bearer {}", tb.console_token);
    let body = serde_json::to_vec(&json!({ "code": code }))?;
    tb.send_with(
        client,
        "POST",
        "/v1/machine-logins/lookup",
        &[("authorization", &auth)],
        Some(body),
    )
    .await
}

#[tokio::test]
async fn machine_login_lookups_are_rate_limited_per_source_and_overall() -> R {
    let tb = TestBroker::builder()
        .quotas(Quotas {
            lookups_per_source: 3,
            lookups_overall: 5,
            ..Quotas::default()
        })
        .start()
        .await?;
    let started = tb.start_login(&new_key(), ADA, "laptop").await?.expect(202);
    let code = started.s("code");

    // Callers without the console token spend nothing.
    for _ in 0..10 {
        tb.open(
            "POST",
            "/v1/machine-logins/lookup",
            Some(&json!({ "code": code })),
        )
        .await?
        .refused(401, "UI_INVALID");
    }
    // Three from this address, found or not (a guess counts as much as a hit) ...
    tb.lookup(&code).await?.expect(200);
    tb.lookup("BBBB-BBBB").await?.refused(404, "NO_SUCH_CODE");
    tb.lookup(&code).await?.expect(200);
    // ... then the fourth is refused, with a wait to try again.
    let r = tb.lookup(&code).await?;
    r.refused(429, "RATE_LIMITED");
    let wait: i64 = r.header("retry-after").context("Retry-After")?.parse()?;
    assert!((1..=60).contains(&wait), "{wait}");
    // Even a malformed lookup is refused once over.
    tb.console_raw("POST", "/v1/machine-logins/lookup", Some(b"{".to_vec()))
        .await?
        .refused(429, "RATE_LIMITED");

    // Another address has its own quota, under the overall one (5 a minute).
    let other = tb.client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))?;
    lookup_from(&tb, &other, &code).await?.expect(200);
    lookup_from(&tb, &other, &code).await?.expect(200);
    lookup_from(&tb, &other, &code)
        .await?
        .refused(429, "RATE_LIMITED");

    // A minute later on the broker's clock, both may look up again.
    tb.advance(chrono::Duration::seconds(60));
    tb.lookup(&code).await?.expect(200);
    lookup_from(&tb, &other, &code).await?.expect(200);
    Ok(())
}
