//! A session's secret requests and grants over HTTP: POST /v1/requests, GET
//! /v1/requests/{id}, cancel, values, revoke; their decisions by policy and by approvers;
//! expiry; coalescing; and the approval chain re-verified at release.

use chrono::Duration;
use countersign_e2e::http::*;
use countersign_proto::claims::{self, AuthorizationDetail};
use countersign_proto::jws::{self, Header};
use serde_json::{Value, json};

type R = anyhow::Result<()>;

/// An edit of a secret request object's claims.
type Edit = Box<dyn Fn(&mut countersign_proto::SecretRequestClaims)>;

fn time(v: &Value) -> chrono::DateTime<chrono::Utc> {
    chrono::DateTime::parse_from_rfc3339(v.as_str().expect("a time"))
        .expect("RFC 3339")
        .with_timezone(&chrono::Utc)
}

#[tokio::test]
async fn an_automatic_secret_is_granted_at_once_and_read_fresh_from_the_store() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[AUTO]).await?.expect(200);
    assert_eq!(r.s("state"), "granted");
    assert_eq!(
        r.get("secrets"),
        &json!([{ "name": AUTO, "decision": "automatic" }])
    );
    assert_eq!(r.get("record_id"), &Value::Null);
    assert_eq!(r.get("approver"), &Value::Null);
    assert_eq!(r.get("lifetime_seconds"), &Value::Null);
    assert_eq!(r.get("coalesced"), &json!(false));
    assert_eq!(r.get("decision"), &Value::Null);
    assert_eq!(time(r.get("decided_at")), start_time());
    let grant_id = r.s("grant_id");

    let v = s.values(&grant_id).await?.expect(200);
    assert_eq!(v.header("cache-control"), Some("no-store"));
    assert_eq!(
        v.body,
        json!({ "expires_at": null, "values": { AUTO: tb.value_of(AUTO) } })
    );
    // Readable again, and read fresh: a rotation shows at once, no reread needed.
    tb.edit_secret(AUTO, |x| x.value = Some("rotated \"value\"\n\u{1}".into()))?;
    let v = s.values(&grant_id).await?.expect(200);
    assert_eq!(v.get("values")[AUTO], json!("rotated \"value\"\n\u{1}"));

    let me = s.describe().await?.expect(200);
    assert_eq!(
        me.get("grants"),
        &json!([{ "grant_id": grant_id, "request_id": r.s("request_id"), "approver": null, "expires_at": null }])
    );
    let got = s.get_request(&r.s("request_id")).await?.expect(200);
    assert_eq!(got.s("state"), "granted");
    assert_eq!(got.s("grant_id"), grant_id);
    assert_eq!(
        got.get("coalesced"),
        &Value::Null,
        "only the creation answer says"
    );

    // Two automatic secrets in one grant.
    let both = s.request(&[AUTO_2, AUTO]).await?.expect(200);
    let v = s.values(&both.s("grant_id")).await?.expect(200);
    assert_eq!(v.get("values").as_object().map(|o| o.len()), Some(2));
    Ok(())
}

#[tokio::test]
async fn an_owner_tier_secret_waits_for_its_owner() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s
        .request_with(&[ADA_SECRET], None, Some("chat-42"))
        .await?
        .expect(200);
    assert_eq!(r.s("state"), "pending");
    assert_eq!(r.s("approver"), ADA);
    assert_eq!(r.get("grant_id"), &Value::Null);
    assert_eq!(
        r.get("secrets"),
        &json!([{ "name": ADA_SECRET, "decision": "approval" }])
    );
    let record_id = r.s("record_id");
    let request_id = r.s("request_id");

    let inbox = tb.pending(ADA).await?.expect(200);
    let item = &inbox.get("pending")[0];
    assert_eq!(time(&item["requested_at"]), start_time());
    assert_eq!(
        inbox.get("pending"),
        &json!([{
            "record_id": record_id,
            // Issue 48: the request's own id beside its record's (an additive field).
            "request_id": request_id,
            "kind": "agent_secret",
            "identifiers": [ADA_SECRET],
            "requested_at": item["requested_at"],
            "session": { "request": "chat-42", "enrollment": null },
        }])
    );
    assert_eq!(tb.pending(BOB).await?.get("pending"), &json!([]));

    let rec = tb.record(&record_id).await?.expect(200);
    assert_eq!(rec.s("kind"), "agent_secret");
    assert_eq!(rec.s("request_id"), request_id);
    // The record read takes the request's id as well (issue 48: one request, one name).
    let by_request = tb.record(&request_id).await?.expect(200);
    assert_eq!(by_request.s("record_id"), record_id);
    assert_eq!(rec.s("state"), "pending");
    assert_eq!(rec.s("approver"), ADA);
    assert_eq!(rec.s("reason"), "end-to-end test");
    assert_eq!(rec.get("enrollment")["kind"], json!("session"));
    assert_eq!(rec.get("enrollment")["operator"], json!(ADA));
    assert_eq!(rec.get("enrollment")["slot"], Value::Null);
    assert_eq!(rec.get("identifiers"), &json!([ADA_SECRET]));
    assert_eq!(rec.get("lifetime_seconds"), &Value::Null);
    assert_eq!(rec.s("rules_version").len(), 64);
    assert_eq!(
        time(rec.get("expires_at")),
        start_time() + Duration::minutes(30)
    );

    tb.approve(&record_id, BOB, None)
        .await?
        .refused(403, "NOT_APPROVER");
    tb.advance(Duration::minutes(3));
    // A code is ignored for a secret request.
    let a = tb
        .approve(&record_id, "ADA@example.com", Some("whatever"))
        .await?
        .expect(200);
    assert_eq!(a.s("state"), "approved");
    assert_eq!(a.get("credential_id"), &Value::Null);
    let grant_id = a.s("grant_id");

    let got = s.get_request(&request_id).await?.expect(200);
    assert_eq!(got.s("state"), "granted");
    assert_eq!(got.s("grant_id"), grant_id);
    assert_eq!(got.s("approver"), ADA);
    assert_eq!(got.get("decision")["by"], json!(ADA));
    assert_eq!(
        time(&got.get("decision")["at"]),
        start_time() + Duration::minutes(3)
    );
    let v = s.values(&grant_id).await?.expect(200);
    assert_eq!(v.get("values")[ADA_SECRET], json!(tb.value_of(ADA_SECRET)));

    let rec = tb.record(&record_id).await?.expect(200);
    assert_eq!(rec.s("state"), "approved");
    assert_eq!(rec.get("decided")["event"], json!("approved"));
    let listed = tb.grants(ADA).await?.expect(200);
    let item = &listed.get("grants")[0];
    assert_eq!(item["grant_id"], json!(grant_id));
    assert_eq!(item["granted"], json!("approval"));
    assert_eq!(item["record_id"], json!(record_id));
    assert_eq!(item["names"], json!([ADA_SECRET]));
    assert_eq!(item["approver"], json!(ADA));
    assert_eq!(item["enrollment"]["operator"], json!(ADA));
    assert_eq!(s.describe().await?.get("grants")[0]["approver"], json!(ADA));
    let again = tb.approve(&record_id, ADA, None).await?;
    again.refused(409, "RECORD_TERMINAL");
    assert!(
        again.error().contains("already decided"),
        "{}",
        again.error()
    );
    assert_eq!(tb.pending(ADA).await?.get("pending"), &json!([]));
    Ok(())
}

#[tokio::test]
async fn a_shared_secret_is_decided_by_anyone_signed_in() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[SHARED]).await?.expect(200);
    assert_eq!(r.s("approver"), "anyone");
    for who in [ADA, BOB, CAROL] {
        let p = tb.pending(who).await?.expect(200);
        assert_eq!(p.get("pending")[0]["record_id"], json!(r.s("record_id")));
    }
    let a = tb
        .approve(&r.s("record_id"), CAROL, None)
        .await?
        .expect(200);
    let v = s.values(&a.s("grant_id")).await?.expect(200);
    assert_eq!(v.get("values")[SHARED], json!(tb.value_of(SHARED)));
    let got = s.get_request(&r.s("request_id")).await?.expect(200);
    assert_eq!(got.s("approver"), "anyone", "kept after the decision");
    assert_eq!(got.get("decision")["by"], json!(CAROL));
    // Carol approved it: it shows among her grants.
    assert_eq!(
        tb.grants(CAROL).await?.get("grants")[0]["grant_id"],
        json!(a.s("grant_id"))
    );
    Ok(())
}

#[tokio::test]
async fn a_denied_request_stays_denied() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[BOB_SECRET]).await?.expect(200);
    assert_eq!(r.s("approver"), BOB);
    let record_id = r.s("record_id");
    tb.deny(&record_id, ADA, None)
        .await?
        .refused(403, "NOT_APPROVER");
    tb.advance(Duration::seconds(5));
    let d = tb.deny(&record_id, BOB, None).await?.expect(200);
    assert_eq!(d.body, json!({ "state": "denied" }));
    let got = s.get_request(&r.s("request_id")).await?.expect(200);
    assert_eq!(got.s("state"), "denied");
    assert_eq!(got.get("grant_id"), &Value::Null);
    assert_eq!(got.get("decision")["by"], json!(BOB));
    assert_eq!(
        time(got.get("decided_at")),
        start_time() + Duration::seconds(5)
    );
    assert_eq!(tb.record(&record_id).await?.s("state"), "denied");
    tb.approve(&record_id, BOB, None)
        .await?
        .refused(409, "RECORD_TERMINAL");
    tb.deny(&record_id, BOB, None)
        .await?
        .refused(409, "RECORD_TERMINAL");
    s.cancel(&r.s("request_id"))
        .await?
        .refused(409, "REQUEST_TERMINAL");
    // Asking again makes a new request.
    let again = s.request(&[BOB_SECRET]).await?.expect(200);
    assert_ne!(again.s("request_id"), r.s("request_id"));
    Ok(())
}

#[tokio::test]
async fn a_locked_secret_is_denied_by_policy_with_the_whole_request() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[LOCKED]).await?.expect(200);
    assert_eq!(r.s("state"), "denied");
    assert_eq!(r.get("record_id"), &Value::Null);
    assert_eq!(r.get("grant_id"), &Value::Null);
    assert_eq!(r.get("decision"), &Value::Null);
    let r = s.request(&[AUTO, LOCKED]).await?.expect(200);
    assert_eq!(r.s("state"), "denied");
    assert_eq!(
        r.get("secrets"),
        &json!([{ "name": AUTO, "decision": "automatic" }, { "name": LOCKED, "decision": "deny" }])
    );
    assert_eq!(s.describe().await?.get("grants"), &json!([]));
    Ok(())
}

#[tokio::test]
async fn automatic_secrets_ride_along_with_one_needing_approval() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(BOB).await?;
    let r = s.request(&[AUTO, UNTIERED]).await?.expect(200);
    assert_eq!(r.s("state"), "pending");
    assert_eq!(
        r.s("approver"),
        ADA,
        "a secret with no tier tag is owner-tier"
    );
    assert_eq!(
        r.get("secrets"),
        &json!([{ "name": AUTO, "decision": "automatic" }, { "name": UNTIERED, "decision": "approval" }])
    );
    let a = tb.approve(&r.s("record_id"), ADA, None).await?.expect(200);
    let v = s.values(&a.s("grant_id")).await?.expect(200);
    assert_eq!(v.get("values")[AUTO], json!(tb.value_of(AUTO)));
    assert_eq!(v.get("values")[UNTIERED], json!(tb.value_of(UNTIERED)));
    Ok(())
}

#[tokio::test]
async fn the_session_cancels_its_pending_request() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[ADA_SECRET]).await?.expect(200);
    let request_id = r.s("request_id");
    let c = s.cancel(&request_id).await?.expect(200);
    assert_eq!(c.body, json!({ "state": "cancelled" }));
    let got = s.get_request(&request_id).await?.expect(200);
    assert_eq!(got.s("state"), "cancelled");
    assert_eq!(
        got.get("decision")["by"],
        json!(format!("session:{}", s.enrollment_id))
    );
    let rec = tb.record(&r.s("record_id")).await?.expect(200);
    assert_eq!(rec.s("state"), "cancelled");
    tb.approve(&r.s("record_id"), ADA, None)
        .await?
        .refused(409, "RECORD_TERMINAL");
    s.cancel(&request_id)
        .await?
        .refused(409, "REQUEST_TERMINAL");
    let granted = s.request(&[AUTO]).await?.expect(200);
    s.cancel(&granted.s("request_id"))
        .await?
        .refused(409, "REQUEST_TERMINAL");
    assert_eq!(tb.pending(ADA).await?.get("pending"), &json!([]));

    let other = m.enroll_session("other").await?;
    let theirs = other.request(&[ADA_SECRET]).await?.expect(200);
    s.cancel(&theirs.s("request_id"))
        .await?
        .refused(403, "NOT_YOURS");
    s.cancel(&random_uuid()).await?.refused(404, "NOT_FOUND");
    for id in [
        "x",
        "1234",
        &theirs.s("request_id").to_uppercase().replace('-', ""),
    ] {
        s.cancel(id).await?.refused(400, "REQUEST_ID_INPUT");
    }
    Ok(())
}

#[tokio::test]
async fn reading_a_request_is_for_its_own_session() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let other = m.enroll_session("other").await?;
    let theirs = other.request(&[AUTO]).await?.expect(200);
    s.get_request(&theirs.s("request_id"))
        .await?
        .refused(403, "NOT_YOURS");
    s.get_request(&random_uuid())
        .await?
        .refused(404, "NOT_FOUND");
    for id in [
        "nope",
        "{00000000-0000-0000-0000-000000000000}",
        "00000000000000000000000000000000",
    ] {
        s.get_request(id).await?.refused(400, "REQUEST_ID_INPUT");
    }
    Ok(())
}

#[tokio::test]
async fn the_holder_revokes_its_grant() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[AUTO]).await?.expect(200);
    let grant_id = r.s("grant_id");
    let other = m.enroll_session("other").await?;
    other.revoke(&grant_id).await?.refused(403, "NOT_YOURS");
    other.values(&grant_id).await?.refused(403, "NOT_YOURS");

    let rv = s.revoke(&grant_id).await?.expect(200);
    assert_eq!(rv.body, json!({ "state": "revoked" }));
    s.values(&grant_id).await?.refused(403, "GRANT_NOT_LIVE");
    assert_eq!(s.describe().await?.get("grants"), &json!([]));
    assert_eq!(tb.grants(ADA).await?.get("grants"), &json!([]));
    // Revoking again answers its state.
    assert_eq!(s.revoke(&grant_id).await?.expect(200).s("state"), "revoked");
    // A revoke by the holder withholds nothing: asking again grants again.
    assert_eq!(s.request(&[AUTO]).await?.s("state"), "granted");

    s.revoke(&random_uuid()).await?.refused(404, "NOT_FOUND");
    s.values(&random_uuid()).await?.refused(404, "NOT_FOUND");
    for id in [
        "g",
        "not-a-uuid-at-all-but-36-characters",
        "urn:uuid:00000000-0000-0000-0000-000000000000",
    ] {
        s.revoke(id).await?.refused(400, "GRANT_ID_INPUT");
        s.values(id).await?.refused(400, "GRANT_ID_INPUT");
    }
    Ok(())
}

#[tokio::test]
async fn a_grant_expires_after_its_lifetime() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s.request_with(&[AUTO], Some(60), None).await?.expect(200);
    assert_eq!(r.get("lifetime_seconds"), &json!(60));
    let grant_id = r.s("grant_id");
    let v = s.values(&grant_id).await?.expect(200);
    assert_eq!(
        time(v.get("expires_at")),
        start_time() + Duration::seconds(60)
    );
    assert_eq!(
        time(&s.describe().await?.get("grants")[0]["expires_at"]),
        start_time() + Duration::seconds(60)
    );
    tb.advance(Duration::seconds(59));
    s.values(&grant_id).await?.expect(200);
    tb.advance(Duration::seconds(1));
    s.values(&grant_id).await?.refused(403, "GRANT_NOT_LIVE");
    assert_eq!(s.describe().await?.get("grants"), &json!([]));
    assert_eq!(s.revoke(&grant_id).await?.expect(200).s("state"), "expired");

    // An approved grant's lifetime counts from the approval.
    let p = s
        .request_with(&[ADA_SECRET], Some(120), None)
        .await?
        .expect(200);
    tb.advance(Duration::seconds(100));
    let a = tb.approve(&p.s("record_id"), ADA, None).await?.expect(200);
    let approved_at = start_time() + Duration::seconds(160);
    let v = s.values(&a.s("grant_id")).await?.expect(200);
    assert_eq!(
        time(v.get("expires_at")),
        approved_at + Duration::seconds(120)
    );
    tb.advance(Duration::seconds(120));
    s.values(&a.s("grant_id"))
        .await?
        .refused(403, "GRANT_NOT_LIVE");

    // The largest lifetime is 24 h.
    s.request_with(&[AUTO_2], Some(24 * 3600), None)
        .await?
        .expect(200);
    for l in [0, 24 * 3600 + 1] {
        s.request_with(&[AUTO_2], Some(l), None)
            .await?
            .refused(400, "REQUEST_INVALID");
    }
    Ok(())
}

#[tokio::test]
async fn a_pending_request_expires_after_thirty_minutes_undecided() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[ADA_SECRET]).await?.expect(200);
    let record_id = r.s("record_id");
    // Keep the session alive past the request's life.
    tb.advance(Duration::minutes(14));
    s.renew().await?.expect(200);
    tb.advance(Duration::minutes(14));
    s.renew().await?.expect(200);
    tb.advance(Duration::minutes(2) - Duration::seconds(1));
    assert_eq!(
        s.get_request(&r.s("request_id")).await?.s("state"),
        "pending"
    );
    tb.advance(Duration::seconds(1));

    let got = s.get_request(&r.s("request_id")).await?.expect(200);
    assert_eq!(got.s("state"), "expired");
    assert_eq!(got.get("decision"), &Value::Null);
    assert_eq!(
        time(got.get("decided_at")),
        start_time() + Duration::minutes(30)
    );
    let rec = tb.record(&record_id).await?.expect(200);
    assert_eq!(rec.s("state"), "expired");
    let a = tb.approve(&record_id, ADA, None).await?;
    a.refused(409, "RECORD_TERMINAL");
    assert!(a.error().contains("expired"), "{}", a.error());
    tb.deny(&record_id, ADA, None)
        .await?
        .refused(409, "RECORD_TERMINAL");
    s.cancel(&r.s("request_id"))
        .await?
        .refused(409, "REQUEST_TERMINAL");
    assert_eq!(tb.pending(ADA).await?.get("pending"), &json!([]));
    // The secret may be asked for again.
    assert_eq!(s.request(&[ADA_SECRET]).await?.s("state"), "pending");
    Ok(())
}

#[tokio::test]
async fn an_identical_pending_request_is_joined_and_an_overlapping_one_refused() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let first = s.request(&[ADA_SECRET]).await?.expect(200);
    assert_eq!(first.get("coalesced"), &json!(false));
    let joined = s.request(&[ADA_SECRET, ADA_SECRET]).await?.expect(200);
    assert_eq!(joined.get("coalesced"), &json!(true));
    assert_eq!(joined.s("request_id"), first.s("request_id"));
    assert_eq!(joined.s("record_id"), first.s("record_id"));

    s.request(&[ADA_SECRET, ADA_SECRET_2])
        .await?
        .refused(409, "REQUEST_PENDING");
    s.request_with(&[ADA_SECRET], Some(60), None)
        .await?
        .refused(409, "REQUEST_PENDING");
    // No overlap, no refusal.
    let second = s.request(&[ADA_SECRET_2]).await?.expect(200);
    assert_eq!(second.get("coalesced"), &json!(false));
    // Another session's request is its own.
    let other = m.enroll_session("other").await?;
    let theirs = other.request(&[ADA_SECRET]).await?.expect(200);
    assert_eq!(theirs.get("coalesced"), &json!(false));
    assert_eq!(
        tb.pending(ADA)
            .await?
            .get("pending")
            .as_array()
            .map(Vec::len),
        Some(3)
    );
    // Once decided, a new request is a new request.
    tb.approve(&first.s("record_id"), ADA, None)
        .await?
        .expect(200);
    let again = s.request(&[ADA_SECRET]).await?.expect(200);
    assert_ne!(again.s("request_id"), first.s("request_id"));
    assert_eq!(again.get("coalesced"), &json!(false));
    Ok(())
}

#[tokio::test]
async fn secrets_needing_different_approvers_or_unknown_names_are_refused() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    for names in [
        &[ADA_SECRET, BOB_SECRET][..],
        &[ADA_SECRET, SHARED],
        &[AUTO, BOB_SECRET, UNTIERED],
    ] {
        s.request(names).await?.refused(400, "MIXED_APPROVERS");
    }
    for names in [
        &["NO_SUCH_SECRET"][..],
        &[NO_OWNER],
        &[NO_VALUE],
        &[ADA_SECRET, BOB_SECRET, "NOPE"],
    ] {
        s.request(names).await?.refused(400, "UNKNOWN_SECRET");
    }
    assert_eq!(tb.pending(ADA).await?.get("pending"), &json!([]));
    Ok(())
}

#[tokio::test]
async fn a_request_body_and_its_signed_object_are_checked() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let other = m.enroll_session("other").await?;
    let good = s.secret_request(&[AUTO], "why", None);

    // The body.
    for body in [
        &b"nope"[..],
        b"[]",
        b"{}",
        b"{\"request\": 1}",
        b"{\"request\": \"a\", \"x\": 1}",
        b"{\"request\": \"a\", \"session_id\": 5}",
    ] {
        s.call_raw("POST", "/v1/requests", body)
            .await?
            .refused(400, "INVALID_REQUEST");
    }
    s.call_raw("POST", "/v1/requests", &[b' '; 64 * 1024 + 1])
        .await?
        .refused(413, "REQUEST_TOO_LARGE");
    for sid in [
        "x".repeat(129),
        "a b".into(),
        "tab\there".into(),
        "bell\u{7}".into(),
        String::new(),
        "nbsp\u{a0}".into(),
    ] {
        s.post_request(&json!({ "request": good, "session_id": sid }))
            .await?
            .refused(400, "SESSION_ID_INPUT");
    }
    s.post_request(&json!({ "request": "garbage", "session_id": "x".repeat(129) }))
        .await?
        .refused(400, "SESSION_ID_INPUT");
    s.post_request(&json!({ "request": good, "session_id": "x".repeat(128) }))
        .await?
        .expect(200);

    // The signed object.
    let now = tb.now_secs();
    let claims = || s.request_claims(&[AUTO], "why", None);
    let kid_header = Header::with_kid(claims::TYP_SECRET_REQUEST, &s.enrollment_id);
    let mut cases: Vec<(&str, String)> = vec![
        ("garbage", "garbage".into()),
        (
            "alg none",
            forged_token(
                &json!({ "alg": "none", "typ": claims::TYP_SECRET_REQUEST, "kid": s.enrollment_id }),
                &serde_json::to_value(claims())?,
            ),
        ),
        (
            "wrong typ",
            jws::sign(
                &s.key,
                &Header::with_kid(claims::TYP_SESSION_PROOF, &s.enrollment_id),
                &claims(),
            )
            .expect("sign"),
        ),
        (
            "another session's kid",
            jws::sign(
                &s.key,
                &Header::with_kid(claims::TYP_SECRET_REQUEST, &other.enrollment_id),
                &claims(),
            )
            .expect("sign"),
        ),
        (
            "signed by another key",
            jws::sign(&other.key, &kid_header, &claims()).expect("sign"),
        ),
        (
            "jwk instead of kid",
            jws::sign(
                &s.key,
                &Header::with_jwk(claims::TYP_SECRET_REQUEST, s.key.public_jwk()),
                &claims(),
            )
            .expect("sign"),
        ),
        (
            "another session's own request",
            other.secret_request(&[AUTO], "why", None),
        ),
    ];
    let mut edits: Vec<(&str, Edit)> = vec![
        (
            "aud",
            Box::new(|c| c.aud = "https://elsewhere.example".into()),
        ),
        (
            "aud with slash",
            Box::new(|c| c.aud = format!("{}/", c.aud)),
        ),
        ("iat 61 s old", Box::new(move |c| c.iat = now - 61)),
        ("iat 61 s ahead", Box::new(move |c| c.iat = now + 61)),
        ("expired", Box::new(move |c| c.exp = now - 1)),
        (
            "exp over 300 s after iat",
            Box::new(move |c| c.exp = now + 301),
        ),
        (
            "lower-case name",
            Box::new(|c| {
                c.authorization_details = vec![AuthorizationDetail::agent_secret("auto_token")]
            }),
        ),
        ("no detail", Box::new(|c| c.authorization_details = vec![])),
        (
            "launcher detail",
            Box::new(|c| {
                c.authorization_details = vec![AuthorizationDetail::launcher_credential("svc")]
            }),
        ),
        (
            "detail without a name",
            Box::new(|c| c.authorization_details[0].name = None),
        ),
        ("empty reason", Box::new(|c| c.reason = "  ".into())),
        ("long reason", Box::new(|c| c.reason = "r".repeat(1001))),
        ("lifetime 0", Box::new(|c| c.lifetime_seconds = Some(0))),
    ];
    for (what, edit) in edits.drain(..) {
        let mut c = claims();
        edit(&mut c);
        cases.push((what, s.sign_request(&c)));
    }
    cases.push((
        "claims missing",
        s.sign_request(&json!({ "iat": now, "exp": now + 60, "jti": "j", "aud": tb.public_url })),
    ));
    for (what, token) in cases {
        let r = s.post_request(&json!({ "request": token })).await?;
        assert_eq!(
            (r.status, r.code()),
            (400, "REQUEST_INVALID"),
            "{what}: {}",
            r.text
        );
        r.refused(400, "REQUEST_INVALID");
    }
    let mut c = claims();
    c.reason = "r".repeat(1000);
    s.post_request(&json!({ "request": s.sign_request(&c) }))
        .await?
        .expect(200);

    // A request object is single use.
    let once = s.secret_request(&[AUTO_2], "why", None);
    s.post_request(&json!({ "request": once }))
        .await?
        .expect(200);
    s.post_request(&json!({ "request": once }))
        .await?
        .refused(400, "REQUEST_INVALID");
    Ok(())
}

#[tokio::test]
async fn a_secret_removed_from_the_store_is_not_released() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let auto = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    let auto2 = s.request(&[AUTO_2]).await?.expect(200).s("grant_id");

    // Its current value gone: refused at once, before any reread.
    tb.edit_secret(AUTO, |x| x.value = None)?;
    s.values(&auto).await?.refused(404, "SECRET_NOT_IN_STORE");
    // Deleted, and the broker told: the reread says so, and the grant releases nothing.
    tb.edit_secret(AUTO_2, |x| x.deleted = true)?;
    let rr = tb.reread(AUTO_2).await?.expect(200);
    assert_eq!(
        rr.body,
        json!({ "name": AUTO_2, "served": false, "reason": "absent" })
    );
    s.values(&auto2).await?.refused(404, "SECRET_NOT_IN_STORE");
    s.request(&[AUTO_2]).await?.refused(400, "UNKNOWN_SECRET");
    // Removed from the file altogether.
    tb.edit_store(|v| v.retain(|x| x.name != AUTO))?;
    tb.reread(AUTO).await?.expect(200);
    s.values(&auto).await?.refused(404, "SECRET_NOT_IN_STORE");
    Ok(())
}

#[tokio::test]
async fn a_changed_owner_or_tier_breaks_the_grant_chain_once_reread() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let p = s.request(&[ADA_SECRET]).await?.expect(200);
    let approved = tb
        .approve(&p.s("record_id"), ADA, None)
        .await?
        .expect(200)
        .s("grant_id");
    let auto = s.request(&[AUTO]).await?.expect(200).s("grant_id");

    tb.edit_secret(ADA_SECRET, |x| x.owner = Some(BOB.into()))?;
    tb.edit_secret(AUTO, |x| x.tier = Some("owner".into()))?;
    // The policy the broker holds is unchanged until a reread (or the five-minute reload).
    s.values(&approved).await?.expect(200);
    s.values(&auto).await?.expect(200);

    assert_eq!(
        tb.reread(ADA_SECRET).await?.expect(200).get("served"),
        &json!(true)
    );
    tb.reread(AUTO).await?.expect(200);
    s.values(&approved)
        .await?
        .refused(403, "GRANT_CHAIN_INVALID");
    s.values(&auto).await?.refused(403, "GRANT_CHAIN_INVALID");

    // A pending request whose approver lost standing cannot be approved either.
    let q = s.request(&[ADA_SECRET_2]).await?.expect(200);
    tb.edit_secret(ADA_SECRET_2, |x| x.owner = Some(CAROL.into()))?;
    tb.reread(ADA_SECRET_2).await?.expect(200);
    tb.approve(&q.s("record_id"), ADA, None)
        .await?
        .refused(403, "GRANT_CHAIN_INVALID");
    // Changing it back restores the chain.
    tb.edit_secret(ADA_SECRET, |x| x.owner = Some(ADA.into()))?;
    tb.reread(ADA_SECRET).await?.expect(200);
    s.values(&approved).await?.expect(200);
    Ok(())
}

#[tokio::test]
async fn rows_written_straight_into_the_database_fail_closed() -> R {
    use countersign_broker_core::Storage;
    use countersign_broker_core::ids::{
        EnrollmentId, GrantId, Login, RecordId, RequestId, SecretName,
    };
    use countersign_broker_core::model::{Grant, GrantedBy};

    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let (_m2, bobs) = tb.session_of(BOB).await?;
    let approve = |names: &'static [&'static str], lifetime: Option<u64>| {
        let (tb, s) = (&tb, &s);
        async move {
            let p = s.request_with(names, lifetime, None).await?.expect(200);
            let a = tb.approve(&p.s("record_id"), ADA, None).await?.expect(200);
            anyhow::Ok((a.s("grant_id"), p.s("record_id")))
        }
    };
    let (short, _) = approve(&[ADA_SECRET], Some(60)).await?;
    let (other, record) = approve(&[ADA_SECRET_2], None).await?;
    let auto = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    let bobs_auto = bobs.request(&[AUTO]).await?.expect(200).s("grant_id");
    for g in [&short, &other, &auto] {
        s.values(g).await?.expect(200);
    }

    let db = tb.open_db().await?;
    let gid = |s: &str| GrantId::parse(s).map_err(|e| anyhow::anyhow!("{e}"));
    let edit_grant = |id: GrantId, f: Box<dyn FnOnce(&mut Grant) + Send>| {
        let db = &db;
        async move {
            let mut tx = db.begin().await?;
            let mut g = tx
                .get_grant(id)
                .await?
                .ok_or_else(|| anyhow::anyhow!("no grant"))?;
            f(&mut g);
            tx.put_grant(&g).await?;
            tx.commit().await?;
            anyhow::Ok(())
        }
    };
    // A 60-second grant made to last until the session ends.
    edit_grant(gid(&short)?, Box::new(|g| g.expires_at = None)).await?;
    s.values(&short).await?.refused(403, "GRANT_CHAIN_INVALID");
    // A grant moved to another session.
    edit_grant(
        gid(&bobs_auto)?,
        Box::new(|g| {
            g.enrollment_id = EnrollmentId::parse(&s.enrollment_id).unwrap_or(g.enrollment_id)
        }),
    )
    .await?;
    s.values(&bobs_auto)
        .await?
        .refused(403, "GRANT_CHAIN_INVALID");
    // An automatic grant widened to a secret that needs approval.
    edit_grant(
        gid(&auto)?,
        Box::new(|g| {
            g.names
                .push(SecretName::parse(BOB_SECRET).unwrap_or_else(|_| g.names[0].clone()))
        }),
    )
    .await?;
    s.values(&auto).await?.refused(403, "GRANT_CHAIN_INVALID");

    // The approved record's text edited after its approval (same id).
    {
        let mut tx = db.begin().await?;
        let rid = RecordId::parse(&record).map_err(|e| anyhow::anyhow!("{e}"))?;
        let mut rec = tx
            .get_record(&rid)
            .await?
            .ok_or_else(|| anyhow::anyhow!("no record"))?;
        rec.body.reason = "edited".into();
        rec.text = rec.body.canonical();
        tx.put_record(&rec).await?;
        tx.commit().await?;
    }
    s.values(&other).await?.refused(403, "GRANT_CHAIN_INVALID");

    // A grant row minted from nothing, naming the session and Bob's secret.
    let forged = GrantId::parse(&random_uuid()).map_err(|e| anyhow::anyhow!("{e}"))?;
    {
        let mut tx = db.begin().await?;
        let g = Grant {
            id: forged,
            request_id: RequestId::parse(&random_uuid()).map_err(|e| anyhow::anyhow!("{e}"))?,
            enrollment_id: EnrollmentId::parse(&s.enrollment_id)
                .map_err(|e| anyhow::anyhow!("{e}"))?,
            names: vec![SecretName::parse(BOB_SECRET).map_err(|e| anyhow::anyhow!("{e}"))?],
            granted: GrantedBy::Approval,
            record_id: None,
            approver: Login::parse(BOB),
            expires_at: None,
            created_at: start_time(),
            rules_version: String::new(),
            end: None,
            seal: "AAAA".into(),
            decision_seal: None,
        };
        tx.put_grant(&g).await?;
        tx.commit().await?;
    }
    let r = s.values(&forged.to_string()).await?;
    r.refused(403, "GRANT_CHAIN_INVALID");
    assert!(!r.text.contains(&tb.value_of(BOB_SECRET)));
    db.close().await;
    Ok(())
}
