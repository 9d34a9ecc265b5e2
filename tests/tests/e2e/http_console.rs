//! The console-token routes over HTTP: the inbox, records and their decisions, the person's
//! machine logins and grants, and revocations by an approver.

use countersign_broker_core::ids::{Approver, RecordId, RequestId};
use countersign_broker_core::model::{Record, RecordKind, RecordState, RecordText, SessionIds};
use countersign_e2e::http::*;
use serde_json::{Value, json};

type R = anyhow::Result<()>;

const LISTS: [&str; 3] = ["/v1/pending", "/v1/launcher-credentials", "/v1/grants"];

#[tokio::test]
async fn the_lists_need_one_approver() -> R {
    let tb = TestBroker::start().await?;
    for list in LISTS {
        tb.console("GET", &format!("{list}?approver={ADA}"), None)
            .await?
            .expect(200);
        for query in [
            "",
            "?approver=",
            "?approver=%20",
            "?approver=not-an-email",
            "?other=x",
            &format!("?approver={ADA}&approver={BOB}"),
            "?approver=%ff",
        ] {
            let r = tb.console("GET", &format!("{list}{query}"), None).await?;
            assert_eq!(r.code(), "APPROVER_REQUIRED", "{list}{query}: {}", r.text);
            r.refused(400, "APPROVER_REQUIRED");
        }
        // The token is checked first.
        for query in ["", &format!("?approver={ADA}"), "?approver=%ff"] {
            tb.open("GET", &format!("{list}{query}"), None)
                .await?
                .refused(401, "UI_INVALID");
        }
    }
    Ok(())
}

#[tokio::test]
async fn reading_a_record_needs_a_well_formed_known_id() -> R {
    let tb = TestBroker::start().await?;
    let id = random_record_id();
    tb.record(&id).await?.refused(404, "NOT_FOUND");
    for bad in [
        id.to_uppercase(),
        id[..63].to_owned(),
        format!("{id}0"),
        format!("g{}", &id[1..]),
        "x".into(),
    ] {
        tb.record(&bad).await?.refused(400, "RECORD_ID_INPUT");
    }
    tb.open("GET", &format!("/v1/credential-requests/{id}"), None)
        .await?
        .refused(401, "UI_INVALID");
    Ok(())
}

#[tokio::test]
async fn decision_refusals() -> R {
    let tb = TestBroker::start().await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let record_id = s.request(&[ADA_SECRET]).await?.expect(200).s("record_id");
    for decide in ["approve", "deny"] {
        let path = format!("/v1/credential-requests/{record_id}/{decide}");
        for body in [
            &b"nope"[..],
            b"[]",
            b"{\"approver\": 1}",
            b"{\"approver\": \"ada@example.com\", \"extra\": 1}",
            b"{\"code\": 5}",
        ] {
            tb.console_raw("POST", &path, Some(body.to_vec()))
                .await?
                .refused(400, "INVALID_DECISION");
        }
        tb.console_raw("POST", &path, Some(vec![b' '; 64 * 1024 + 1]))
            .await?
            .refused(413, "REQUEST_TOO_LARGE");
        for body in [
            json!({}),
            json!({ "approver": null }),
            json!({ "approver": "  " }),
        ] {
            tb.console("POST", &path, Some(&body))
                .await?
                .refused(400, "APPROVER_REQUIRED");
        }
        tb.open("POST", &path, Some(&json!({ "approver": ADA })))
            .await?
            .refused(401, "UI_INVALID");
        tb.console(
            "POST",
            &format!("/v1/credential-requests/{}/{decide}", random_record_id()),
            Some(&json!({ "approver": ADA })),
        )
        .await?
        .refused(404, "NOT_FOUND");
        tb.console(
            "POST",
            &format!(
                "/v1/credential-requests/{}/{decide}",
                record_id.to_uppercase()
            ),
            Some(&json!({ "approver": ADA })),
        )
        .await?
        .refused(400, "RECORD_ID_INPUT");
        tb.console(
            "POST",
            &format!("/v1/credential-requests/{record_id}/{decide}"),
            Some(&json!({ "approver": CAROL })),
        )
        .await?
        .refused(403, "NOT_APPROVER");
    }
    // Still undecided after all that.
    assert_eq!(tb.record(&record_id).await?.s("state"), "pending");
    Ok(())
}

#[tokio::test]
async fn a_services_machine_login_is_never_approved_by_code_but_anyone_may_deny_it() -> R {
    let tb = TestBroker::start().await?;
    // No route makes such a record yet (token logins need no person); write one as a service
    // login that waits for a person would be, to pin the rule.
    let key = new_key();
    let now = tb.state.broker.now();
    let body = RecordText {
        version: 1,
        kind: RecordKind::LauncherCredential,
        approver: Approver::Anyone,
        enrollment: None,
        session: SessionIds {
            request: None,
            enrollment: None,
        },
        identifiers: vec!["billing/runner".into()],
        service: Some("billing".into()),
        reason: "machine login for billing/runner".into(),
        lifetime_seconds: Some(3600),
        rules_version: String::new(),
        expires_at: now + chrono::Duration::minutes(10),
        requested_at: now,
        enrollment_id: None,
        request_id: None,
        thumbprint: Some(key.thumbprint()),
        jwk: Some(key.public_jwk()),
        nonce: new_jti(),
    };
    let text = body.canonical();
    let id = RecordId::of_text(&text);
    let mut tx = tb.state.broker.storage().begin().await?;
    tx.put_record(&Record {
        id,
        text,
        body,
        state: RecordState::Pending,
        decided: None,
        code: None,
    })
    .await?;
    tx.commit().await?;
    let rid = id.to_string();
    let rec = tb.record(&rid).await?.expect(200);
    assert_eq!(rec.s("service"), "billing");
    assert_eq!(rec.s("approver"), "anyone");
    tb.approve(&rid, ADA, Some("BCDF-GHJK"))
        .await?
        .refused(400, "SERVICE_LOGS_IN_WITH_TOKEN");
    tb.approve(&rid, CAROL, None)
        .await?
        .refused(400, "SERVICE_LOGS_IN_WITH_TOKEN");
    let d = tb.deny(&rid, CAROL, None).await?.expect(200);
    assert_eq!(d.s("state"), "denied");
    Ok(())
}

#[tokio::test]
async fn revoking_a_machine_login_ends_every_session_it_enrolled() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let pod = m.enroll_pod("pod-uid", Some("web")).await?;
    let grant = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    let pending = s.request(&[ADA_SECRET]).await?.expect(200);
    let keep = tb.machine_login(ADA).await?;
    let kept = keep.enroll_session("kept").await?;

    let r = tb
        .revoke_credential(&m.credential_id, ADA)
        .await?
        .expect(200);
    assert_eq!(r.body, json!({ "state": "revoked" }));

    s.describe().await?.refused(401, "PROOF_INVALID");
    s.values(&grant).await?.refused(401, "PROOF_INVALID");
    s.renew().await?.refused(401, "ENROLLMENT_NOT_LIVE");
    pod.describe().await?.refused(401, "PROOF_INVALID");
    pod.renew().await?.refused(401, "ENROLLMENT_NOT_LIVE");
    m.operator_machines()
        .await?
        .refused(401, "LAUNCHER_INVALID");
    m.enroll(&EnrollSpec::session("again"), &new_key())
        .await?
        .refused(401, "LAUNCHER_INVALID");
    // Its pending request was cancelled by the launcher.
    let rec = tb.record(&pending.s("record_id")).await?.expect(200);
    assert_eq!(rec.s("state"), "cancelled");
    let mut tx = tb.state.broker.storage().read().await?;
    let stored = tx
        .get_request(
            RequestId::parse(&pending.s("request_id")).map_err(|e| anyhow::anyhow!("{e}"))?,
        )
        .await?
        .ok_or_else(|| anyhow::anyhow!("no request"))?;
    drop(tx);
    assert_eq!(stored.state.as_str(), "cancelled");
    assert_eq!(
        stored.decision.map(|d| d.by),
        Some(format!("launcher:{}", m.credential_id))
    );
    assert_eq!(tb.grants(ADA).await?.get("grants"), &json!([]));
    assert_eq!(tb.pending(ADA).await?.get("pending"), &json!([]));

    // Ada's other machine and its session are untouched; the list shows only it now.
    kept.describe().await?.expect(200);
    let list = tb.credentials(ADA).await?.expect(200);
    assert_eq!(
        list.get("credentials"),
        &json!([list.get("credentials")[0].clone()])
    );
    assert_eq!(
        list.get("credentials")[0]["credential_id"],
        json!(keep.credential_id)
    );
    // Revoking again answers the same.
    tb.revoke_credential(&m.credential_id, ADA)
        .await?
        .expect(200);
    Ok(())
}

#[tokio::test]
async fn a_persons_machine_login_is_revoked_only_by_whoever_approved_it() -> R {
    let tb = TestBroker::start().await?;
    let m = tb.machine_login(ADA).await?;
    let path = format!(
        "/v1/launcher-credentials/{}/revoke-by-approver",
        m.credential_id
    );
    tb.revoke_credential(&m.credential_id, BOB)
        .await?
        .refused(403, "NOT_APPROVER");
    tb.revoke_credential(&random_uuid(), ADA)
        .await?
        .refused(404, "NOT_FOUND");
    for id in ["nope", &m.credential_id.replace('-', "")] {
        tb.revoke_credential(id, ADA)
            .await?
            .refused(400, "CREDENTIAL_ID_INPUT");
    }
    for body in [
        &b"nope"[..],
        b"[]",
        b"{\"approver\": 1}",
        b"{\"approver\": \"a@b\", \"x\": 1}",
    ] {
        tb.console_raw("POST", &path, Some(body.to_vec()))
            .await?
            .refused(400, "INVALID_REVOKE");
    }
    for body in [json!({}), json!({ "approver": "" })] {
        tb.console("POST", &path, Some(&body))
            .await?
            .refused(400, "APPROVER_REQUIRED");
    }
    tb.console_raw("POST", &path, Some(vec![b' '; 64 * 1024 + 1]))
        .await?
        .refused(413, "REQUEST_TOO_LARGE");
    tb.open("POST", &path, Some(&json!({ "approver": ADA })))
        .await?
        .refused(401, "UI_INVALID");
    m.operator_machines().await?.expect(200);

    // A service's login: listed for everyone, ended by anyone signed in.
    let svc = tb.service_machine("billing", "billing/runner").await?;
    for who in [ADA, CAROL] {
        let list = tb.credentials(who).await?.expect(200);
        let item = list
            .get("credentials")
            .as_array()
            .and_then(|a| {
                a.iter()
                    .find(|c| c["credential_id"] == json!(svc.credential_id))
            })
            .cloned()
            .expect("the service login is listed");
        assert_eq!(item["service"], json!("billing"));
        assert_eq!(item["host"], json!("billing/runner"));
        assert_eq!(
            item["subject"],
            json!("system:serviceaccount:billing:runner")
        );
        assert_eq!(item["approved_by"], json!(""));
    }
    tb.revoke_credential(&svc.credential_id, CAROL)
        .await?
        .expect(200);
    svc.operator_machines()
        .await?
        .refused(401, "LAUNCHER_INVALID");
    Ok(())
}

#[tokio::test]
async fn grants_are_listed_for_their_sessions_person_and_their_approver() -> R {
    let tb = TestBroker::start().await?;
    let (_ma, ada) = tb.session_of(ADA).await?;
    let (_mb, bob) = tb.session_of(BOB).await?;
    let auto = ada.request(&[AUTO]).await?.expect(200).s("grant_id");
    tb.advance(chrono::Duration::seconds(1));
    let p = ada.request(&[BOB_SECRET]).await?.expect(200);
    let bobs_secret = tb
        .approve(&p.s("record_id"), BOB, None)
        .await?
        .expect(200)
        .s("grant_id");
    tb.advance(chrono::Duration::seconds(1));
    let q = bob.request(&[SHARED]).await?.expect(200);
    let shared = tb
        .approve(&q.s("record_id"), ADA, None)
        .await?
        .expect(200)
        .s("grant_id");

    let ids = |r: &Resp| -> Vec<String> {
        r.get("grants")
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|g| g["grant_id"].as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    // Newest first.
    assert_eq!(
        ids(&tb.grants(ADA).await?.expect(200)),
        [shared.clone(), bobs_secret.clone(), auto.clone()]
    );
    assert_eq!(
        ids(&tb.grants(BOB).await?.expect(200)),
        [shared.clone(), bobs_secret.clone()]
    );
    assert_eq!(
        ids(&tb.grants(CAROL).await?.expect(200)),
        Vec::<String>::new()
    );
    let list = tb.grants(ADA).await?;
    let a = &list.get("grants")[2];
    assert_eq!(a["granted"], json!("automatic"));
    assert_eq!(a["record_id"], Value::Null);
    assert_eq!(a["approver"], Value::Null);
    assert_eq!(a["names"], json!([AUTO]));
    assert_eq!(a["expires_at"], Value::Null);
    assert_eq!(a["enrollment"]["kind"], json!("session"));
    assert_eq!(a["enrollment"]["operator"], json!(ADA));

    // Revoked by the grant's approver, or by its session's operator; nobody else.
    tb.revoke_grant_as(&shared, CAROL)
        .await?
        .refused(403, "NOT_APPROVER");
    assert_eq!(
        tb.revoke_grant_as(&shared, ADA)
            .await?
            .expect(200)
            .s("state"),
        "revoked"
    );
    bob.values(&shared).await?.refused(403, "GRANT_NOT_LIVE");
    assert_eq!(
        tb.revoke_grant_as(&bobs_secret, BOB)
            .await?
            .expect(200)
            .s("state"),
        "revoked"
    );
    assert_eq!(
        tb.revoke_grant_as(&auto, ADA).await?.expect(200).s("state"),
        "revoked"
    );
    ada.values(&auto).await?.refused(403, "GRANT_NOT_LIVE");
    // A console revoke withholds nothing: the automatic secret is granted again on request.
    assert_eq!(ada.request(&[AUTO]).await?.s("state"), "granted");

    tb.revoke_grant_as(&random_uuid(), ADA)
        .await?
        .refused(404, "NOT_FOUND");
    tb.revoke_grant_as("grant", ADA)
        .await?
        .refused(400, "GRANT_ID_INPUT");
    let path = format!("/v1/grants/{auto}/revoke-by-approver");
    for body in [&b"nope"[..], b"{\"approver\": []}", b"{\"why\": 1}"] {
        tb.console_raw("POST", &path, Some(body.to_vec()))
            .await?
            .refused(400, "INVALID_REVOKE");
    }
    tb.console("POST", &path, Some(&json!({})))
        .await?
        .refused(400, "APPROVER_REQUIRED");
    tb.console_raw("POST", &path, Some(vec![b' '; 64 * 1024 + 1]))
        .await?
        .refused(413, "REQUEST_TOO_LARGE");
    tb.open("POST", &path, Some(&json!({ "approver": ADA })))
        .await?
        .refused(401, "UI_INVALID");
    Ok(())
}
