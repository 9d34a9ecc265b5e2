//! Secret values never leak: a canary value released through the API appears in the values
//! answer and nowhere else — not in any refusal's body, not in the server's logs (captured
//! in-process at TRACE) — and a value never released appears nowhere at all. Refusal messages
//! never quote what a client sent either.

use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

use chrono::Duration;
use countersign_e2e::http::*;
use serde_json::json;

type R = anyhow::Result<()>;

/// Everything the server's crates log, at TRACE.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Capture {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|p| p.into_inner())).into_owned()
    }
}

fn logs() -> &'static Capture {
    static CAPTURE: OnceLock<Capture> = OnceLock::new();
    CAPTURE.get_or_init(|| {
        let c = Capture::default();
        let writer = c.clone();
        // The server's side only: the test's own HTTP client (same process) is not the broker.
        let filter = tracing_subscriber::EnvFilter::new(
            "countersign_broker_http=trace,countersign_broker_core=trace,\
             countersign_broker_sql=trace,countersign_store_local=trace,tower_http=trace,\
             axum=trace,sqlx=trace",
        );
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .try_init();
        c
    })
}

#[tokio::test]
async fn a_released_value_appears_only_in_the_values_answer() -> R {
    let capture = logs();
    let canary = format!("CANARY-{}-released", uuid::Uuid::new_v4().simple());
    let unreleased = format!("CANARY-{}-never", uuid::Uuid::new_v4().simple());
    let marker = format!("MARKER-{}", uuid::Uuid::new_v4().simple());
    let mut secrets = default_secrets();
    for s in &mut secrets {
        if s.name == AUTO {
            s.value = Some(canary.clone());
        }
        if s.name == BOB_SECRET {
            s.value = Some(unreleased.clone());
        }
    }
    let tb = TestBroker::builder().secrets(secrets).start().await?;
    let mut answers: Vec<Resp> = Vec::new();
    let mut released: Vec<Resp> = Vec::new();

    let (m, s) = tb.session_of(ADA).await?;
    let grant = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    released.push(s.values(&grant).await?.expect(200));
    released.push(s.values(&grant).await?.expect(200));

    // Refusals around the released value.
    let other = m.enroll_session("other").await?;
    answers.push(other.values(&grant).await?);
    answers.push(s.request(&[AUTO]).await?);
    let p = s.request(&[BOB_SECRET]).await?;
    answers.push(tb.deny(&p.s("record_id"), BOB, None).await?);
    answers.push(tb.record(&p.s("record_id")).await?);
    answers.push(tb.grants(ADA).await?);
    answers.push(tb.pending(BOB).await?);
    answers.push(s.describe().await?);
    let mut spec = s.proof_spec("POST", &format!("/v1/grants/{grant}/values"), b"");
    spec.claims.iat -= 120;
    answers.push(
        tb.with_proof(
            "POST",
            &format!("/v1/grants/{grant}/values"),
            Some(&spec.sign(&s.key)),
            b"",
        )
        .await?,
    );
    // The chain broken by an owner change.
    tb.edit_secret(AUTO, |x| x.tier = Some("owner".into()))?;
    answers.push(tb.reread(AUTO).await?);
    answers.push(s.values(&grant).await?);
    tb.edit_secret(AUTO, |x| x.tier = Some("automatic".into()))?;
    answers.push(tb.reread(AUTO).await?);
    // The store file broken right next to the values: its parse error must not quote them.
    let good = std::fs::read_to_string(&tb.store_path)?;
    tb.write_store_text(&good.replace(
        &format!("value = \"{canary}\""),
        &format!("value = \"{canary}\" trailing junk"),
    ))?;
    answers.push(s.values(&grant).await?);
    tb.advance(Duration::seconds(61));
    answers.push(tb.reread(AUTO).await?);
    answers.push(tb.reread(BOB_SECRET).await?);
    tb.write_store_text(&good.replace(
        &format!("value = \"{unreleased}\""),
        &format!("value = {unreleased}"),
    ))?;
    answers.push(tb.reread(BOB_SECRET).await?);
    tb.write_store_text(&good)?;
    // Gone from the store, and revoked.
    tb.edit_secret(AUTO, |x| x.deleted = true)?;
    answers.push(s.values(&grant).await?);
    answers.push(tb.reread(AUTO).await?);
    tb.edit_secret(AUTO, |x| x.deleted = false)?;
    tb.reread(AUTO).await?.expect(200);
    released.push(s.values(&grant).await?.expect(200));
    answers.push(s.revoke(&grant).await?);
    answers.push(s.values(&grant).await?);

    // Bodies carrying a marker as values, on every route with a body: no refusal quotes it
    // (a refusal may name a field, never a value).
    let wrong_types = serde_json::to_vec(
        &json!({ "request": [marker.clone()], "code": [marker.clone()], "approver": { "x": marker.clone() }, "unexpected": marker.clone() }),
    )?;
    let unterminated = format!("{{\"request\": \"{marker}");
    for body in [wrong_types, unterminated.into_bytes()] {
        answers.push(s.call_raw("POST", "/v1/requests", &body).await?);
        answers.push(
            s.call_raw(
                "POST",
                &format!("/v1/enrollments/{}/renew", s.enrollment_id),
                &body,
            )
            .await?,
        );
        answers.push(m.call_raw("POST", "/v1/enrollments", &body).await?);
        answers.push(
            tb.send("POST", "/v1/launcher-credentials", &[], Some(body.clone()))
                .await?,
        );
        answers.push(
            tb.console_raw("POST", "/v1/machine-logins/lookup", Some(body.clone()))
                .await?,
        );
        answers.push(
            tb.console_raw(
                "POST",
                &format!("/v1/credential-requests/{}/approve", p.s("record_id")),
                Some(body.clone()),
            )
            .await?,
        );
    }
    let mut spec = EnrollSpec::session(&format!("{marker} runtime\u{1}"));
    spec.session_id = Some(format!("{marker} with space"));
    answers.push(m.enroll(&spec, &new_key()).await?);
    answers.push(
        s.request_with(&[AUTO], None, Some(&format!("{marker} x")))
            .await?,
    );
    answers.push(tb.lookup(&marker).await?);
    answers.push(tb.approve(&p.s("record_id"), &marker, None).await?);

    for r in &released {
        assert!(
            r.text.contains(&canary),
            "the values answer carries the value"
        );
        assert!(!r.text.contains(&unreleased));
    }
    assert!(answers.iter().any(|r| r.status >= 400));
    for r in &answers {
        assert!(
            !r.text.contains(&canary),
            "a released value in an answer: {}",
            r.text
        );
        assert!(
            !r.text.contains(&unreleased),
            "an unreleased value in an answer: {}",
            r.text
        );
        assert!(
            !r.text.contains(&marker),
            "a refusal quotes its input: {}",
            r.text
        );
    }

    tb.shutdown().await;
    let text = capture.text();
    assert!(
        text.contains("values released") && text.contains(&grant),
        "the capture sees the server's logs"
    );
    assert!(
        text.contains("reread failed"),
        "the broken store was logged"
    );
    for (what, needle) in [
        ("released", &canary),
        ("unreleased", &unreleased),
        ("marker", &marker),
    ] {
        if let Some(line) = text.lines().find(|l| l.contains(needle.as_str())) {
            panic!("the {what} value is in a log line: {line}");
        }
    }
    Ok(())
}
