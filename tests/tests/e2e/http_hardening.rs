//! The review's hardening over HTTP: request bodies that repeat a JSON member, Unicode format
//! characters in `host`, `runtime_id`, `reason` and `login_hint`, the machine-login lookup's rate
//! limit, and the server's body read timeout and connection cap (over raw sockets).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::Context;
use countersign_broker_http::limits::Quotas;
use countersign_e2e::http::*;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

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

// ----- the read timeout and the connection cap, over raw sockets -----

/// Reads until the server closes the connection (EOF or reset), refusing to wait past `guard`:
/// a server without the limit would keep the connection open and fail the test there.
async fn read_until_closed(
    stream: &mut tokio::net::TcpStream,
    guard: Duration,
) -> anyhow::Result<String> {
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(guard, read)
        .await
        .context("the server kept the connection open")?;
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// A broker whose read timeout is `read_ms` and whose connection cap is `max`.
async fn limited(read_ms: u64, max: usize) -> anyhow::Result<TestBroker> {
    TestBroker::builder()
        .server(move |s| {
            s.read_timeout = Duration::from_millis(read_ms);
            s.max_connections = max;
        })
        .start()
        .await
}

fn addr(tb: &TestBroker) -> String {
    tb.base_url
        .split_once("://")
        .map_or(tb.base_url.as_str(), |(_, a)| a)
        .to_owned()
}

const GUARD: Duration = Duration::from_secs(20);

#[tokio::test]
async fn a_body_never_finished_gets_408_and_the_connection_is_closed() -> R {
    let tb = limited(200, 64).await?;
    let mut s = tokio::net::TcpStream::connect(addr(&tb)).await?;
    s.write_all(
        b"POST /v1/launcher-credentials HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"req",
    )
    .await?;
    let answer = read_until_closed(&mut s, GUARD).await?;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("connection: close"),
        "{answer}"
    );
    Ok(())
}

#[tokio::test]
async fn a_trickled_body_gets_408_although_bytes_keep_coming() -> R {
    let tb = limited(300, 64).await?;
    let s = tokio::net::TcpStream::connect(addr(&tb)).await?;
    let (mut rd, mut wr) = s.into_split();
    wr.write_all(
        b"POST /v1/launcher-credentials HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: 10000\r\n\r\n",
    )
    .await?;
    // One byte every 50 ms: each read is quick, the whole body never is.
    let trickle = tokio::spawn(async move {
        for _ in 0..400 {
            if wr.write_all(b" ").await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    let mut out = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(GUARD, read)
        .await
        .context("the server kept reading the trickle")?;
    trickle.abort();
    let answer = String::from_utf8_lossy(&out);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    Ok(())
}

#[tokio::test]
async fn an_unfinished_head_and_an_idle_connection_are_closed() -> R {
    let tb = limited(200, 64).await?;
    // Headers begun, never ended.
    let mut s = tokio::net::TcpStream::connect(addr(&tb)).await?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: b\r\nX-Slow: ")
        .await?;
    read_until_closed(&mut s, GUARD).await?;
    // A kept-alive connection left idle after its answer.
    let mut s = tokio::net::TcpStream::connect(addr(&tb)).await?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n")
        .await?;
    let answer = read_until_closed(&mut s, GUARD).await?;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    Ok(())
}

/// A connection that has been served once (so it surely holds a slot), left open.
async fn served_connection(tb: &TestBroker) -> anyhow::Result<tokio::net::TcpStream> {
    let mut s = tokio::net::TcpStream::connect(addr(tb)).await?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n")
        .await?;
    let mut buf = [0u8; 4096];
    let n = tokio::time::timeout(GUARD, s.read(&mut buf)).await??;
    let head = String::from_utf8_lossy(&buf[..n]);
    anyhow::ensure!(head.starts_with("HTTP/1.1 200"), "{head}");
    Ok(s)
}

#[tokio::test]
async fn connections_over_the_cap_are_closed_unanswered_until_a_slot_frees() -> R {
    let tb = limited(30_000, 2).await?;
    let first = served_connection(&tb).await?;
    let _second = served_connection(&tb).await?;

    // A third is closed at once, with no answer.
    let mut third = tokio::net::TcpStream::connect(addr(&tb)).await?;
    let _ = third
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: b\r\n\r\n")
        .await;
    let answer = read_until_closed(&mut third, GUARD).await?;
    assert_eq!(answer, "", "over the cap: no answer");

    // One closes: its slot frees and a new connection is served (once the server has seen the
    // close: retried until then, bounded by the guard).
    drop(first);
    let served = tokio::time::timeout(GUARD, async {
        loop {
            if served_connection(&tb).await.is_ok() {
                return;
            }
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(served.is_ok(), "a freed slot is used again");
    Ok(())
}

/// A broker serving HTTPS with a fresh self-signed certificate for 127.0.0.1.
async fn limited_tls(read_ms: u64, max: usize) -> anyhow::Result<(TestBroker, TempDir)> {
    let dir = TempDir::new()?;
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()])?;
    let (cert_path, key_path) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_path, cert.cert.pem())?;
    std::fs::write(&key_path, cert.signing_key.serialize_pem())?;
    let tb = TestBroker::builder()
        .tls(cert_path, key_path)
        .server(move |s| {
            s.read_timeout = Duration::from_millis(read_ms);
            s.max_connections = max;
        })
        .start()
        .await?;
    Ok((tb, dir))
}

/// Under the handshake timeout axum-server had before (10 s), so that the checks below can
/// only pass through the configured limits.
const TLS_GUARD: Duration = Duration::from_secs(5);

#[tokio::test]
async fn the_tls_listener_has_the_same_read_timeout_and_cap() -> R {
    // A handshake never begun is cut off at the read timeout.
    let (tb, _dir) = limited_tls(200, 64).await?;
    tb.open("GET", "/healthz", None).await?.expect(200);
    let mut s = tokio::net::TcpStream::connect(addr(&tb)).await?;
    read_until_closed(&mut s, TLS_GUARD).await?;

    // With one slot, held by the client's kept-alive TLS connection, another connection is
    // closed at once, before any handshake.
    let (tb, _dir) = limited_tls(30_000, 1).await?;
    tb.open("GET", "/healthz", None).await?.expect(200);
    let mut s = tokio::net::TcpStream::connect(addr(&tb)).await?;
    assert_eq!(read_until_closed(&mut s, TLS_GUARD).await?, "");
    // The kept-alive connection still serves.
    tb.open("GET", "/healthz", None).await?.expect(200);
    Ok(())
}
