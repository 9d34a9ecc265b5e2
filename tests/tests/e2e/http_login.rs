//! Machine logins over HTTP: POST /v1/launcher-credentials, the poll, the console's lookup by
//! code and its decisions, token login (off), and their refusals.

use std::net::{IpAddr, Ipv4Addr};

use chrono::Duration;
use countersign_broker_http::limits::Quotas;
use countersign_e2e::http::*;
use countersign_proto::claims::{self, AuthorizationDetail};
use countersign_proto::jws::{self, Header};
use serde_json::{Value, json};

type R = anyhow::Result<()>;

fn time(v: &Value) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(v.as_str().expect("a time"))
        .expect("RFC 3339")
        .with_timezone(&chrono::Utc)
}

fn is_code(code: &str) -> bool {
    let b = code.as_bytes();
    b.len() == 9
        && b[4] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || b"BCDFGHJKLMNPQRSTVWXZ".contains(c))
}

#[tokio::test]
async fn a_person_logs_a_machine_in_by_typing_its_code() -> R {
    let tb = TestBroker::start().await?;
    let key = new_key();
    let started = tb
        .start_login(&key, "Ada@Example.COM", "ada-laptop")
        .await?
        .expect(202);
    assert_eq!(started.header("cache-control"), Some("no-store"));
    let (pending_id, code) = (started.s("pending_id"), started.s("code"));
    assert!(is_code(&code), "{code}");
    assert!(!pending_id.is_empty());

    let poll = tb.poll_login(&pending_id).await?.expect(200);
    assert_eq!(poll.body, json!({ "state": "pending" }));

    // The console finds it by the code, typed in any case, with or without the dash.
    let typed = code.replace('-', "").to_lowercase();
    let rec = tb.lookup(&typed).await?.expect(200);
    assert_eq!(rec.s("kind"), "launcher_credential");
    assert_eq!(rec.s("state"), "pending");
    assert_eq!(rec.s("approver"), ADA, "the login hint is lower-cased");
    assert_eq!(rec.get("identifiers"), &json!(["ada-laptop"]));
    assert_eq!(rec.get("enrollment"), &Value::Null);
    assert_eq!(rec.get("service"), &Value::Null);
    assert_eq!(rec.get("decided"), &Value::Null);
    assert_eq!(rec.get("lifetime_seconds"), &json!(12 * 3600));
    assert_eq!(
        rec.get("session"),
        &json!({ "request": null, "enrollment": null })
    );
    let record_id = rec.s("record_id");
    assert_eq!(record_id.len(), 64);
    assert_eq!(time(rec.get("requested_at")), start_time());
    assert_eq!(
        time(rec.get("expires_at")),
        start_time() + Duration::minutes(10)
    );

    // It waits in Ada's inbox, not Bob's.
    let inbox = tb.pending(ADA).await?.expect(200);
    assert_eq!(inbox.get("pending")[0]["record_id"], json!(record_id));
    assert_eq!(
        inbox.get("pending")[0]["kind"],
        json!("launcher_credential")
    );
    let bobs = tb.pending(BOB).await?.expect(200);
    assert_eq!(bobs.get("pending"), &json!([]));

    let approved = tb.approve(&record_id, ADA, Some(&typed)).await?.expect(200);
    assert_eq!(approved.s("state"), "approved");
    assert_eq!(approved.get("grant_id"), &Value::Null);
    let credential_id = approved.s("credential_id");

    let poll = tb.poll_login(&pending_id).await?.expect(200);
    assert_eq!(poll.s("state"), "issued");
    assert_eq!(poll.s("credential_id"), credential_id);
    assert_eq!(
        time(poll.get("expires_at")),
        start_time() + Duration::hours(12)
    );

    let rec = tb.record(&record_id).await?.expect(200);
    assert_eq!(rec.s("state"), "approved");
    assert_eq!(rec.get("decided")["event"], json!("approved"));
    assert_eq!(rec.get("decided")["credential_id"], json!(credential_id));

    let list = tb.credentials(ADA).await?.expect(200);
    let item = &list.get("credentials")[0];
    assert_eq!(item["credential_id"], json!(credential_id));
    assert_eq!(item["host"], json!("ada-laptop"));
    assert_eq!(item["approved_by"], json!(ADA));
    assert_eq!(item["service"], Value::Null);
    assert_eq!(item["subject"], Value::Null);
    assert_eq!(item["expired"], json!(false));
    assert_eq!(
        tb.credentials(BOB).await?.expect(200).get("credentials"),
        &json!([])
    );

    // The code was live only while the login was pending.
    tb.lookup(&code).await?.refused(404, "NO_SUCH_CODE");
    tb.pending(ADA).await?.expect(200);
    assert_eq!(tb.pending(ADA).await?.get("pending"), &json!([]));

    // The credential works: its launcher proof lists the operator's machines.
    let m = Machine {
        key,
        credential_id: credential_id.clone(),
        person: ADA.into(),
        host: "ada-laptop".into(),
        conn: tb.conn.clone(),
    };
    let machines = m.operator_machines().await?.expect(200);
    assert_eq!(
        machines.get("credentials")[0]["credential_id"],
        json!(credential_id)
    );
    Ok(())
}

#[tokio::test]
async fn a_denied_machine_login_polls_denied_and_cannot_be_approved() -> R {
    let tb = TestBroker::start().await?;
    let started = tb.start_login(&new_key(), ADA, "h").await?.expect(202);
    let code = started.s("code");
    let record_id = tb.lookup(&code).await?.expect(200).s("record_id");
    let denied = tb.deny(&record_id, ADA, Some(&code)).await?.expect(200);
    assert_eq!(denied.body, json!({ "state": "denied" }));
    assert_eq!(
        tb.poll_login(&started.s("pending_id"))
            .await?
            .expect(200)
            .body,
        json!({ "state": "denied" })
    );
    tb.approve(&record_id, ADA, Some(&code))
        .await?
        .refused(409, "RECORD_TERMINAL");
    tb.deny(&record_id, ADA, Some(&code))
        .await?
        .refused(409, "RECORD_TERMINAL");
    tb.lookup(&code).await?.refused(404, "NO_SUCH_CODE");
    let rec = tb.record(&record_id).await?.expect(200);
    assert_eq!(rec.s("state"), "denied");
    assert_eq!(rec.get("decided")["event"], json!("denied"));
    assert_eq!(rec.get("decided")["credential_id"], Value::Null);
    Ok(())
}

#[tokio::test]
async fn a_machine_login_expires_after_ten_minutes_undecided() -> R {
    let tb = TestBroker::start().await?;
    let started = tb.start_login(&new_key(), ADA, "h").await?.expect(202);
    let code = started.s("code");
    let record_id = tb.lookup(&code).await?.expect(200).s("record_id");

    tb.advance(Duration::minutes(10) - Duration::seconds(1));
    tb.lookup(&code).await?.expect(200);
    tb.advance(Duration::seconds(1));

    assert_eq!(
        tb.poll_login(&started.s("pending_id"))
            .await?
            .expect(200)
            .body,
        json!({ "state": "expired" })
    );
    let r = tb.approve(&record_id, ADA, Some(&code)).await?;
    r.refused(409, "RECORD_TERMINAL");
    assert!(r.error().contains("expired"), "{}", r.error());
    tb.lookup(&code).await?.refused(404, "NO_SUCH_CODE");
    let rec = tb.record(&record_id).await?.expect(200);
    assert_eq!(rec.s("state"), "expired");
    assert_eq!(rec.get("decided")["event"], json!("expired"));
    assert_eq!(tb.pending(ADA).await?.get("pending"), &json!([]));
    Ok(())
}

#[tokio::test]
async fn deciding_a_machine_login_needs_its_approver_and_its_code() -> R {
    let tb = TestBroker::start().await?;
    let started = tb.start_login(&new_key(), ADA, "h").await?.expect(202);
    let code = started.s("code");
    let record_id = tb.lookup(&code).await?.expect(200).s("record_id");
    let wrong = if code.starts_with('B') {
        "CCCC-CCCC"
    } else {
        "BBBB-BBBB"
    };

    for decide in ["approve", "deny"] {
        let path = format!("/v1/credential-requests/{record_id}/{decide}");
        let call = |body: Value| {
            let tb = &tb;
            let path = path.clone();
            async move { tb.console("POST", &path, Some(&body)).await }
        };
        call(json!({ "approver": ADA }))
            .await?
            .refused(400, "CODE_REQUIRED");
        call(json!({ "approver": ADA, "code": null }))
            .await?
            .refused(400, "CODE_REQUIRED");
        call(json!({ "approver": ADA, "code": "  " }))
            .await?
            .refused(400, "CODE_REQUIRED");
        call(json!({ "approver": ADA, "code": wrong }))
            .await?
            .refused(403, "CODE_MISMATCH");
        call(json!({ "approver": ADA, "code": "not-a-code" }))
            .await?
            .refused(403, "CODE_MISMATCH");
        // Only the person the login names may decide it, even with the right code.
        call(json!({ "approver": BOB, "code": code }))
            .await?
            .refused(403, "NOT_APPROVER");
        call(json!({ "code": code }))
            .await?
            .refused(400, "APPROVER_REQUIRED");
        call(json!({ "approver": "", "code": code }))
            .await?
            .refused(400, "APPROVER_REQUIRED");
        call(json!({ "approver": "not-an-email", "code": code }))
            .await?
            .refused(400, "APPROVER_REQUIRED");
    }
    // None of that decided it.
    assert_eq!(tb.record(&record_id).await?.s("state"), "pending");
    tb.approve(&record_id, ADA, Some(&code)).await?.expect(200);
    Ok(())
}

#[tokio::test]
async fn a_key_holding_a_live_credential_cannot_get_a_second() -> R {
    let tb = TestBroker::start().await?;
    let first = tb.machine_login(ADA).await?;
    // The same key logs in again.
    let again = tb.start_login(&first.key, ADA, "again").await?.expect(202);
    let code = again.s("code");
    let record_id = tb.lookup(&code).await?.expect(200).s("record_id");
    tb.approve(&record_id, ADA, Some(&code))
        .await?
        .refused(409, "KEY_HOLDS_LIVE_CREDENTIAL");
    assert_eq!(
        tb.poll_login(&again.s("pending_id")).await?.s("state"),
        "pending"
    );
    // Once the first credential is revoked the key holds none live, and the login goes through.
    tb.revoke_credential(&first.credential_id, ADA)
        .await?
        .expect(200);
    let approved = tb.approve(&record_id, ADA, Some(&code)).await?.expect(200);
    assert_ne!(approved.s("credential_id"), first.credential_id);
    Ok(())
}

#[tokio::test]
async fn a_service_logs_in_with_its_token_never_through_a_code() -> R {
    let tb = TestBroker::start().await?;
    let key = new_key();
    let mut c = tb.machine_login_claims(ADA, "h");
    c.authorization_details = Some(vec![AuthorizationDetail::launcher_credential("billing")]);
    tb.start_login_with(&tb.sign_machine_login(&key, &c))
        .await?
        .refused(400, "SERVICE_LOGS_IN_WITH_TOKEN");
    assert_eq!(tb.pending(ADA).await?.get("pending"), &json!([]));
    Ok(())
}

#[tokio::test]
async fn token_login_is_off_without_a_token_issuer() -> R {
    let tb = TestBroker::start().await?;
    for body in [
        json!({ "token": "x.y.z", "request": "a.b.c" }),
        json!({}),
        json!([1, 2]),
    ] {
        tb.open("POST", "/v1/launcher-credentials/token", Some(&body))
            .await?
            .refused(404, "TOKEN_LOGIN_OFF");
    }
    tb.send(
        "POST",
        "/v1/launcher-credentials/token",
        &[],
        Some(b"{not json".to_vec()),
    )
    .await?
    .refused(404, "TOKEN_LOGIN_OFF");
    // The body limit still applies first.
    tb.send(
        "POST",
        "/v1/launcher-credentials/token",
        &[],
        Some(vec![b' '; 64 * 1024 + 1]),
    )
    .await?
    .refused(413, "REQUEST_TOO_LARGE");
    Ok(())
}

#[tokio::test]
async fn a_login_start_body_must_be_one_json_object_with_a_request() -> R {
    let tb = TestBroker::start().await?;
    for body in [
        &b"not json"[..],
        b"[]",
        b"\"request\"",
        b"{}",
        b"{\"request\": 5}",
        b"{\"request\": \"a.b.c\", \"extra\": 1}",
        b"",
    ] {
        let r = tb
            .send("POST", "/v1/launcher-credentials", &[], Some(body.to_vec()))
            .await?;
        r.refused(400, "INVALID_REQUEST");
        assert!(
            r.error().starts_with("body must be one valid JSON object"),
            "{}",
            r.error()
        );
    }
    // A body of exactly the limit is read (and refused for its shape); one byte more is not.
    let mut at_limit = vec![b' '; 64 * 1024];
    at_limit[0] = b'x';
    tb.send("POST", "/v1/launcher-credentials", &[], Some(at_limit))
        .await?
        .refused(400, "INVALID_REQUEST");
    tb.send(
        "POST",
        "/v1/launcher-credentials",
        &[],
        Some(vec![b' '; 64 * 1024 + 1]),
    )
    .await?
    .refused(413, "REQUEST_TOO_LARGE");
    Ok(())
}

#[tokio::test]
async fn a_malformed_or_replayed_login_object_is_request_invalid() -> R {
    let tb = TestBroker::builder()
        .quotas(Quotas {
            login_starts_per_source: 1000,
            ..Quotas::default()
        })
        .start()
        .await?;
    let key = new_key();
    let other = new_key();
    let now = tb.now_secs();
    let sign_with_header =
        |h: &Header, c: &claims::MachineLoginClaims| jws::sign(&key, h, c).expect("sign");
    let jwk_header = Header::with_jwk(claims::TYP_MACHINE_LOGIN, key.public_jwk());
    let good = || tb.machine_login_claims(ADA, "h");

    let mut cases: Vec<(&str, String)> = vec![
        ("garbage", "garbage".into()),
        ("empty", String::new()),
        (
            "alg none",
            forged_token(
                &json!({ "alg": "none", "typ": claims::TYP_MACHINE_LOGIN, "jwk": jwk_value(&key) }),
                &serde_json::to_value(good())?,
            ),
        ),
        (
            "wrong typ",
            sign_with_header(
                &Header::with_jwk(claims::TYP_SECRET_REQUEST, key.public_jwk()),
                &good(),
            ),
        ),
        (
            "kid instead of jwk",
            sign_with_header(
                &Header::with_kid(claims::TYP_MACHINE_LOGIN, "some-kid"),
                &good(),
            ),
        ),
        (
            "signed by another key than its jwk",
            jws::sign(&other, &jwk_header, &good()).expect("sign"),
        ),
    ];
    let mut c = good();
    c.iat = now - 61;
    cases.push(("iat 61 s old", sign_with_header(&jwk_header, &c)));
    let mut c = good();
    c.iat = now + 61;
    c.exp = now + 120;
    cases.push(("iat 61 s ahead", sign_with_header(&jwk_header, &c)));
    let mut c = good();
    c.exp = now - 1;
    cases.push(("expired", sign_with_header(&jwk_header, &c)));
    let mut c = good();
    c.exp = now + 301;
    cases.push((
        "exp over 300 s after iat",
        sign_with_header(&jwk_header, &c),
    ));
    let mut c = good();
    c.login_hint = "not an e-mail".into();
    cases.push(("login_hint", sign_with_header(&jwk_header, &c)));
    let mut c = good();
    c.host = " ".into();
    cases.push(("empty host", sign_with_header(&jwk_header, &c)));
    cases.push((
        "claims missing",
        sign_with_header_value(&key, &jwk_header, &json!({ "iat": now, "exp": now + 60 })),
    ));

    for (what, token) in cases {
        let r = tb.start_login_with(&token).await?;
        assert_eq!(
            (r.status, r.code()),
            (400, "REQUEST_INVALID"),
            "{what}: {}",
            r.text
        );
        r.refused(400, "REQUEST_INVALID");
    }

    // A login object is single use.
    let token = tb.sign_machine_login(&key, &good());
    tb.start_login_with(&token).await?.expect(202);
    tb.start_login_with(&token)
        .await?
        .refused(400, "REQUEST_INVALID");
    Ok(())
}

fn sign_with_header_value(key: &countersign_proto::SigningKey, h: &Header, c: &Value) -> String {
    jws::sign(key, h, c).expect("sign")
}

#[tokio::test]
async fn login_starts_are_rate_limited_per_source() -> R {
    let tb = TestBroker::start().await?;
    for i in 0..10 {
        tb.start_login(&new_key(), ADA, &format!("h{i}"))
            .await?
            .expect(202);
    }
    let r = tb.start_login(&new_key(), ADA, "h11").await?;
    r.refused(429, "RATE_LIMITED");
    let wait: i64 = r
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&wait), "{wait}");
    // Even a malformed start counts and is refused.
    tb.open("POST", "/v1/launcher-credentials", Some(&json!({})))
        .await?
        .refused(429, "RATE_LIMITED");

    // Another source address has its own quota.
    let other = tb.client_from(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)))?;
    let key = new_key();
    let body = serde_json::to_vec(&json!({
        "request": tb.sign_machine_login(&key, &tb.machine_login_claims(ADA, "elsewhere")),
    }))?;
    tb.send_with(&other, "POST", "/v1/launcher-credentials", &[], Some(body))
        .await?
        .expect(202);

    // After the wait the first source may start again.
    tb.advance(Duration::seconds(wait));
    tb.start_login(&new_key(), ADA, "later").await?.expect(202);
    tb.start_login(&new_key(), ADA, "later2")
        .await?
        .refused(429, "RATE_LIMITED");
    Ok(())
}

#[tokio::test]
async fn polling_an_unknown_login_is_not_found() -> R {
    let tb = TestBroker::start().await?;
    for pending in ["nobody-knows-this", &"x".repeat(200), "%20"] {
        tb.poll_login(pending).await?.refused(404, "NOT_FOUND");
    }
    Ok(())
}

#[tokio::test]
async fn lookup_refusals() -> R {
    let tb = TestBroker::start().await?;
    tb.console("POST", "/v1/machine-logins/lookup", Some(&json!({})))
        .await?
        .refused(400, "CODE_REQUIRED");
    tb.lookup("").await?.refused(400, "CODE_REQUIRED");
    tb.lookup(" ").await?.refused(400, "CODE_REQUIRED");
    tb.lookup("BCDF-GHJK").await?.refused(404, "NO_SUCH_CODE");
    tb.lookup("not a code").await?.refused(404, "NO_SUCH_CODE");
    for body in [
        &b"nope"[..],
        b"[]",
        b"{\"code\": 1}",
        b"{\"code\": \"x\", \"y\": 1}",
    ] {
        tb.console_raw("POST", "/v1/machine-logins/lookup", Some(body.to_vec()))
            .await?
            .refused(400, "INVALID_LOOKUP");
    }
    tb.console_raw(
        "POST",
        "/v1/machine-logins/lookup",
        Some(vec![b' '; 64 * 1024 + 1]),
    )
    .await?
    .refused(413, "REQUEST_TOO_LARGE");
    // The console token comes first.
    let started = tb.start_login(&new_key(), ADA, "h").await?.expect(202);
    let body = serde_json::to_vec(&json!({ "code": started.s("code") }))?;
    for auth in [
        None,
        Some("Bearer wrong-token".to_owned()),
        Some(tb.console_token.clone()),
        Some(format!("bearer {}", tb.console_token)),
        Some(format!("Basic {}", tb.console_token)),
    ] {
        let headers: Vec<(&str, &str)> = auth
            .as_deref()
            .map(|a| ("authorization", a))
            .into_iter()
            .collect();
        tb.send(
            "POST",
            "/v1/machine-logins/lookup",
            &headers,
            Some(body.clone()),
        )
        .await?
        .refused(401, "UI_INVALID");
    }
    Ok(())
}

#[tokio::test]
async fn every_console_route_refuses_when_no_token_is_configured() -> R {
    let tb = TestBroker::builder().no_console_token().start().await?;
    for (m, path) in [
        ("GET", format!("/v1/pending?approver={ADA}")),
        (
            "GET",
            format!("/v1/credential-requests/{}", random_record_id()),
        ),
        ("POST", "/v1/machine-logins/lookup".to_owned()),
        ("GET", format!("/v1/launcher-credentials?approver={ADA}")),
        ("GET", format!("/v1/grants?approver={ADA}")),
    ] {
        for auth in ["Bearer ", "Bearer x"] {
            tb.send(m, &path, &[("authorization", auth)], None)
                .await?
                .refused(401, "UI_INVALID");
        }
    }
    Ok(())
}
