//! Enrollment and the session's lease over HTTP: POST /v1/enrollments, DELETE
//! /v1/enrollments/{id}, POST /v1/enrollments/{id}/renew, GET /v1/enrollments/self.

use chrono::Duration;
use countersign_e2e::http::*;
use serde_json::{Value, json};

type R = anyhow::Result<()>;

fn time(v: &Value) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(v.as_str().expect("a time"))
        .expect("RFC 3339")
        .with_timezone(&chrono::Utc)
}

#[tokio::test]
async fn a_machine_enrolls_a_session_that_describes_itself() -> R {
    let tb = TestBroker::start().await?;
    let m = tb.machine_login(ADA).await?;
    let key = new_key();
    let mut spec = EnrollSpec::session("tty-1");
    spec.operator = Some("Ada@Example.com".into());
    spec.session_id = Some("notify-me".into());
    let r = m.enroll(&spec, &key).await?.expect(201);
    assert_eq!(
        time(r.get("lease_expires_at")),
        start_time() + Duration::minutes(15)
    );
    assert_eq!(r.get("slot"), &Value::Null);
    let s = Session {
        key,
        enrollment_id: r.s("enrollment_id"),
        credential_id: m.credential_id.clone(),
        conn: tb.conn.clone(),
    };
    let me = s.describe().await?.expect(200);
    assert_eq!(
        me.body,
        json!({
            "enrollment_id": s.enrollment_id,
            "grants": [],
            "kind": "session",
            "lease_expires_at": r.get("lease_expires_at"),
            "operator": ADA,
            "slot": null,
        })
    );

    // `host` and `box` are stored as `session`.
    for kind in ["host", "box"] {
        let mut spec = EnrollSpec::session(&format!("rt-{kind}"));
        spec.kind = kind.into();
        let s = m.enroll_with(&spec).await?;
        assert_eq!(s.describe().await?.s("kind"), "session");
    }

    // A pod: its slot, no operator.
    let pod = m.enroll_pod("pod-uid-1", Some("web-1")).await?;
    let me = pod.describe().await?.expect(200);
    assert_eq!(me.s("kind"), "pod");
    assert_eq!(me.s("slot"), "web-1");
    assert_eq!(me.get("operator"), &Value::Null);
    // Another slot of the same pod is another enrollment; so is the same runtime under
    // another machine login.
    m.enroll_pod("pod-uid-1", Some("web-2")).await?;
    m.enroll_pod("pod-uid-1", None).await?;
    let m2 = tb.machine_login(ADA).await?;
    m2.enroll_session("tty-1").await?;
    Ok(())
}

#[tokio::test]
async fn enrollment_refusals() -> R {
    let tb = TestBroker::start().await?;
    let m = tb.machine_login(ADA).await?;
    let key = new_key();
    let enroll = |body: Value| {
        let m = &m;
        async move { m.call("POST", "/v1/enrollments", Some(&body)).await }
    };
    let spec = EnrollSpec::session("rt");

    for kind in ["vm", "", "Session", "pods"] {
        let mut s = spec.clone();
        s.kind = kind.into();
        enroll(s.body(&key)).await?.refused(400, "INVALID_KIND");
    }
    let mut s = spec.clone();
    s.slot = Some("web".into());
    enroll(s.body(&key)).await?.refused(400, "INVALID_SLOT");
    for slot in ["Web", "1web", "", &"a".repeat(64), "web_1"] {
        let s = EnrollSpec::pod("pod", Some(slot));
        enroll(s.body(&key)).await?.refused(400, "INVALID_SLOT");
    }
    for op in [BOB, "not-an-email"] {
        let mut s = spec.clone();
        s.operator = Some(op.into());
        enroll(s.body(&key))
            .await?
            .refused(403, "OPERATOR_MISMATCH");
    }
    let mut pod = EnrollSpec::pod("pod", None);
    pod.pod_token = Some("a.b.c".into());
    enroll(pod.body(&key))
        .await?
        .refused(403, "POD_IDENTITY_MISMATCH");

    // Body shape: INVALID_ENROLLMENT, with a message that quotes nothing sent.
    let good = spec.body(&key);
    let mut shapes: Vec<Value> = Vec::new();
    for field in ["kind", "runtime_id", "thumbprint", "jwk"] {
        let mut b = good.clone();
        b.as_object_mut().map(|o| o.remove(field));
        shapes.push(b);
    }
    let mut b = good.clone();
    b["thumbprint"] = json!(new_key().thumbprint());
    shapes.push(b);
    let mut b = good.clone();
    b["jwk"]["d"] = json!("AAAA");
    shapes.push(b);
    let mut b = good.clone();
    b["jwk"] = json!({ "kty": "RSA", "n": "x", "e": "AQAB" });
    shapes.push(b);
    let mut b = good.clone();
    b["extra"] = json!(true);
    shapes.push(b);
    let mut b = good.clone();
    b["runtime_id"] = json!("  ");
    shapes.push(b);
    let mut b = good.clone();
    b["runtime_id"] = json!(7);
    shapes.push(b);
    let mut b = good.clone();
    b["pod_token"] = json!("a.b.c");
    shapes.push(b);
    // A notification session id with whitespace is a malformed enrollment body.
    let mut b = good.clone();
    b["session_id"] = json!("has space");
    shapes.push(b);
    let mut b = good.clone();
    b["session_id"] = json!("x".repeat(129));
    shapes.push(b);
    shapes.push(json!([good.clone()]));
    for body in shapes {
        let r = enroll(body.clone()).await?;
        assert_eq!(r.code(), "INVALID_ENROLLMENT", "{body}: {}", r.text);
        r.refused(400, "INVALID_ENROLLMENT");
        assert!(!r.error().contains("has space"));
    }
    m.call_raw("POST", "/v1/enrollments", b"{not json")
        .await?
        .refused(400, "INVALID_ENROLLMENT");
    m.call_raw("POST", "/v1/enrollments", &[b' '; 64 * 1024 + 1])
        .await?
        .refused(413, "REQUEST_TOO_LARGE");

    // Nothing was enrolled by any of that.
    m.enroll(&spec, &key).await?.expect(201);
    m.enroll(&spec, &new_key())
        .await?
        .refused(409, "ALREADY_ENROLLED");
    let p = m.enroll_pod("pod", Some("a")).await?;
    m.enroll(&EnrollSpec::pod("pod", Some("a")), &new_key())
        .await?
        .refused(409, "ALREADY_ENROLLED");
    // Once ended, the runtime may enroll again.
    m.unenroll(&p.enrollment_id).await?.expect(204);
    m.enroll(&EnrollSpec::pod("pod", Some("a")), &new_key())
        .await?
        .expect(201);

    // The credential: a session proof or none is LAUNCHER_INVALID.
    let s = m.enroll_session("rt-2").await?;
    let body = serde_json::to_vec(&EnrollSpec::session("rt-3").body(&new_key()))?;
    let proof = s.proof("POST", "/v1/enrollments", &body);
    tb.with_proof("POST", "/v1/enrollments", Some(&proof), &body)
        .await?
        .refused(401, "LAUNCHER_INVALID");
    tb.with_proof("POST", "/v1/enrollments", None, &body)
        .await?
        .refused(401, "LAUNCHER_INVALID");
    Ok(())
}

#[tokio::test]
async fn renewing_extends_the_lease_and_a_lapsed_lease_ends_the_session() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    tb.advance(Duration::minutes(10));
    let r = s.renew().await?.expect(200);
    assert_eq!(
        time(r.get("lease_expires_at")),
        start_time() + Duration::minutes(25)
    );
    // Past the first lease's end, still live.
    tb.advance(Duration::minutes(10));
    let me = s.describe().await?.expect(200);
    assert_eq!(
        time(me.get("lease_expires_at")),
        start_time() + Duration::minutes(25)
    );
    // The renewed lease lapses in turn.
    tb.advance(Duration::minutes(5));
    s.describe().await?.refused(401, "PROOF_INVALID");
    s.renew().await?.refused(401, "ENROLLMENT_NOT_LIVE");
    Ok(())
}

#[tokio::test]
async fn a_lapsed_lease_ends_its_grants_and_cancels_its_pending_requests() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let granted = s.request(&[AUTO]).await?.expect(200);
    let pending = s.request(&[ADA_SECRET]).await?.expect(200);
    let record_id = pending.s("record_id");
    assert_eq!(
        tb.grants(ADA).await?.get("grants").as_array().map(Vec::len),
        Some(1)
    );

    tb.advance(Duration::minutes(15));
    s.values(&granted.s("grant_id"))
        .await?
        .refused(401, "PROOF_INVALID");
    s.renew().await?.refused(401, "ENROLLMENT_NOT_LIVE");
    let rec = tb.record(&record_id).await?.expect(200);
    assert_eq!(rec.s("state"), "cancelled");
    assert_eq!(rec.get("decided")["event"], json!("cancelled"));
    tb.approve(&record_id, ADA, None)
        .await?
        .refused(409, "RECORD_TERMINAL");
    assert_eq!(tb.pending(ADA).await?.get("pending"), &json!([]));
    assert_eq!(tb.grants(ADA).await?.get("grants"), &json!([]));
    Ok(())
}

#[tokio::test]
async fn renew_refusals() -> R {
    let tb = TestBroker::start().await?;
    let (m, a) = tb.session_of(ADA).await?;
    let b = m.enroll_session("other").await?;
    a.renew_id(&b.enrollment_id)
        .await?
        .refused(403, "NOT_YOURS");
    for id in ["not-a-uuid", "0000", &b.enrollment_id.replace('-', "")] {
        a.renew_id(id).await?.refused(400, "ENROLLMENT_ID_INPUT");
    }
    let path = format!("/v1/enrollments/{}/renew", a.enrollment_id);
    for body in [&b"nope"[..], b"[]", b"{\"pod_token\": 1}", b"{\"x\": 1}"] {
        a.call_raw("POST", &path, body)
            .await?
            .refused(400, "INVALID_RENEWAL");
    }
    a.call_raw("POST", &path, &[b' '; 64 * 1024 + 1])
        .await?
        .refused(413, "REQUEST_TOO_LARGE");
    a.call("POST", &path, Some(&json!({}))).await?.expect(200);
    a.call("POST", &path, Some(&json!({ "pod_token": null })))
        .await?
        .expect(200);
    // A pod's token must identify it; with no trusted issuer none can.
    let pod = m.enroll_pod("pod-1", None).await?;
    pod.renew().await?.expect(200);
    let path = format!("/v1/enrollments/{}/renew", pod.enrollment_id);
    pod.call("POST", &path, Some(&json!({ "pod_token": "a.b.c" })))
        .await?
        .refused(403, "POD_IDENTITY_MISMATCH");
    // A launcher proof on the renew route is PROOF_INVALID.
    let proof = m.launcher_proof(
        "POST",
        &format!("/v1/enrollments/{}/renew", a.enrollment_id),
        b"",
    );
    tb.with_proof(
        "POST",
        &format!("/v1/enrollments/{}/renew", a.enrollment_id),
        Some(&proof),
        b"",
    )
    .await?
    .refused(401, "PROOF_INVALID");
    // An ended enrollment is told apart, but only with a proof that is otherwise good.
    m.unenroll(&a.enrollment_id).await?.expect(204);
    a.renew().await?.refused(401, "ENROLLMENT_NOT_LIVE");
    let mut spec = a.proof_spec(
        "POST",
        &format!("/v1/enrollments/{}/renew", a.enrollment_id),
        b"",
    );
    spec.claims.iat -= 61;
    tb.with_proof(
        "POST",
        &format!("/v1/enrollments/{}/renew", a.enrollment_id),
        Some(&spec.sign(&a.key)),
        b"",
    )
    .await?
    .refused(401, "PROOF_INVALID");
    Ok(())
}

#[tokio::test]
async fn unenrolling_ends_the_session_for_its_operator_and_its_pods_for_their_machine() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let pending = s.request(&[ADA_SECRET]).await?.expect(200);
    let r = m.unenroll(&s.enrollment_id).await?.expect(204);
    assert_eq!(r.text, "");
    s.describe().await?.refused(401, "PROOF_INVALID");
    s.renew().await?.refused(401, "ENROLLMENT_NOT_LIVE");
    let rec = tb.record(&pending.s("record_id")).await?.expect(200);
    assert_eq!(rec.s("state"), "cancelled");
    // Ending it again is harmless.
    m.unenroll(&s.enrollment_id).await?.expect(204);

    // Another of Ada's machines may end a session of hers; Bob's may not.
    let s2 = m.enroll_session("rt-2").await?;
    let bobs = tb.machine_login(BOB).await?;
    bobs.unenroll(&s2.enrollment_id)
        .await?
        .refused(403, "OPERATOR_MISMATCH");
    let m2 = tb.machine_login(ADA).await?;
    m2.unenroll(&s2.enrollment_id).await?.expect(204);
    s2.describe().await?.refused(401, "PROOF_INVALID");

    // A pod only by the machine login that enrolled it.
    let pod = m.enroll_pod("pod-uid", Some("web")).await?;
    m2.unenroll(&pod.enrollment_id)
        .await?
        .refused(403, "NOT_ENROLLING_CREDENTIAL");
    bobs.unenroll(&pod.enrollment_id)
        .await?
        .refused(403, "NOT_ENROLLING_CREDENTIAL");
    pod.describe().await?.expect(200);
    m.unenroll(&pod.enrollment_id).await?.expect(204);
    pod.describe().await?.refused(401, "PROOF_INVALID");

    for id in ["nope", "12345678-1234-1234-1234-1234567890", "{x}"] {
        m.unenroll(id).await?.refused(400, "ENROLLMENT_ID_INPUT");
    }
    m.unenroll(&random_uuid()).await?.refused(404, "NOT_FOUND");
    // A session proof on the machine route is LAUNCHER_INVALID.
    let s3 = m.enroll_session("rt-3").await?;
    s3.call(
        "DELETE",
        &format!("/v1/enrollments/{}", s3.enrollment_id),
        None,
    )
    .await?
    .refused(401, "LAUNCHER_INVALID");
    Ok(())
}

#[tokio::test]
async fn an_expired_machine_login_enrolls_nothing_more_but_its_sessions_keep_running() -> R {
    let tb = TestBroker::builder()
        .configure(|c| c.machine_credential_lifetime = Duration::minutes(20))
        .start()
        .await?;
    let (m, s) = tb.session_of(ADA).await?;
    tb.advance(Duration::minutes(14));
    s.renew().await?.expect(200);
    tb.advance(Duration::minutes(7));

    let r = m.enroll(&EnrollSpec::session("new"), &new_key()).await?;
    r.refused(401, "LAUNCHER_INVALID");
    assert!(r.error().contains("expired"), "{}", r.error());
    s.describe().await?.expect(200);
    s.renew().await?.expect(200);
    s.request(&[AUTO]).await?.expect(200);

    // Listed while a session of it runs, marked expired; its operator routes still answer.
    let list = tb.credentials(ADA).await?.expect(200);
    assert_eq!(
        list.get("credentials")[0]["credential_id"],
        json!(m.credential_id)
    );
    assert_eq!(list.get("credentials")[0]["expired"], json!(true));
    let mine = m.operator_machines().await?.expect(200);
    assert_eq!(mine.get("credentials")[0]["expired"], json!(true));
    m.unenroll(&s.enrollment_id).await?.expect(204);
    assert_eq!(tb.credentials(ADA).await?.get("credentials"), &json!([]));
    Ok(())
}

#[tokio::test]
async fn postgres_smoke_when_configured() -> R {
    // Runs only where COUNTERSIGN_TEST_POSTGRES_URL names a server; on a database of its own.
    let Some(db) = PgDatabase::create("cs_smoke").await? else {
        return Ok(());
    };
    let result = async {
        let tb = TestBroker::builder().database_url(&db.url).start().await?;
        let (_m, s) = tb.session_of(ADA).await?;
        let r = s.request(&[AUTO]).await?.expect(200);
        let v = s.values(&r.s("grant_id")).await?.expect(200);
        assert_eq!(v.get("values")[AUTO], json!(tb.value_of(AUTO)));
        tb.shutdown().await;
        anyhow::Ok(())
    }
    .await;
    db.drop_now().await;
    result
}
