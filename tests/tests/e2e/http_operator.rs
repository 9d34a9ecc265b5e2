//! The operator routes over HTTP: a person, from one of their own machines (a launcher proof),
//! lists and ends their machines' logins and their sessions' grants.

use chrono::Duration;
use countersign_broker_core::ids::RequestId;
use countersign_e2e::http::*;
use serde_json::json;

type R = anyhow::Result<()>;

fn ids(r: &Resp, list: &str, field: &str) -> Vec<String> {
    r.get(list)
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x[field].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn an_operator_lists_and_revokes_their_own_machines() -> R {
    let tb = TestBroker::start().await?;
    let m1 = tb.machine_login(ADA).await?;
    tb.advance(Duration::seconds(1));
    let m2 = tb.machine_login(ADA).await?;
    let b1 = tb.machine_login(BOB).await?;
    let svc = tb.service_machine("billing", "billing/runner").await?;

    let list = m1.operator_machines().await?.expect(200);
    assert_eq!(
        ids(&list, "credentials", "credential_id"),
        [m2.credential_id.clone(), m1.credential_id.clone()],
        "the operator's own machines, newest first, no service logins"
    );
    let item = &list.get("credentials")[1];
    assert_eq!(item["host"], json!(m1.host));
    assert_eq!(item["approved_by"], json!(ADA));
    assert_eq!(item["expired"], json!(false));

    let s2 = m2.enroll_session("on-m2").await?;
    let pending = s2.request(&[ADA_SECRET]).await?.expect(200);
    let r = m1
        .operator_revoke_machine(&m2.credential_id)
        .await?
        .expect(200);
    assert_eq!(r.body, json!({ "state": "revoked" }));
    s2.describe().await?.refused(401, "PROOF_INVALID");
    s2.renew().await?.refused(401, "ENROLLMENT_NOT_LIVE");
    m2.operator_machines()
        .await?
        .refused(401, "LAUNCHER_INVALID");
    let mut tx = tb.state.broker.storage().read().await?;
    let stored = tx
        .get_request(
            RequestId::parse(&pending.s("request_id")).map_err(|e| anyhow::anyhow!("{e}"))?,
        )
        .await?
        .ok_or_else(|| anyhow::anyhow!("no request"))?;
    drop(tx);
    assert_eq!(
        stored.decision.map(|d| d.by),
        Some(format!("launcher:{}", m1.credential_id)),
        "ended by the calling machine"
    );
    assert_eq!(
        ids(
            &m1.operator_machines().await?,
            "credentials",
            "credential_id"
        ),
        std::slice::from_ref(&m1.credential_id)
    );

    m1.operator_revoke_machine(&b1.credential_id)
        .await?
        .refused(403, "NOT_APPROVER");
    b1.operator_machines().await?.expect(200);
    // A service's login answers like an unknown id.
    m1.operator_revoke_machine(&svc.credential_id)
        .await?
        .refused(404, "NOT_FOUND");
    m1.operator_revoke_machine(&random_uuid())
        .await?
        .refused(404, "NOT_FOUND");
    for id in ["m2", &m2.credential_id.to_uppercase().replace('-', "")] {
        m1.operator_revoke_machine(id)
            .await?
            .refused(400, "CREDENTIAL_ID_INPUT");
    }
    // Revoking the calling machine's own login ends its access.
    m1.operator_revoke_machine(&m1.credential_id)
        .await?
        .expect(200);
    m1.operator_machines()
        .await?
        .refused(401, "LAUNCHER_INVALID");
    Ok(())
}

#[tokio::test]
async fn an_operator_lists_and_revokes_grants_of_their_sessions_and_those_they_approved() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let (_mb, b) = tb.session_of(BOB).await?;
    let auto = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    tb.advance(Duration::seconds(1));
    let p = s.request(&[ADA_SECRET]).await?.expect(200);
    let own = tb
        .approve(&p.s("record_id"), ADA, None)
        .await?
        .expect(200)
        .s("grant_id");
    tb.advance(Duration::seconds(1));
    let q = b.request(&[SHARED]).await?.expect(200);
    let approved = tb
        .approve(&q.s("record_id"), ADA, None)
        .await?
        .expect(200)
        .s("grant_id");
    let bobs = b.request(&[AUTO]).await?.expect(200).s("grant_id");

    let list = m.operator_grants().await?.expect(200);
    assert_eq!(
        ids(&list, "grants", "grant_id"),
        [approved.clone(), own.clone(), auto.clone()]
    );
    // The same view as the console's live-grants page.
    assert_eq!(list.body, tb.grants(ADA).await?.expect(200).body);

    m.operator_revoke_grant(&bobs)
        .await?
        .refused(403, "NOT_APPROVER");
    b.values(&bobs).await?.expect(200);
    assert_eq!(
        m.operator_revoke_grant(&approved)
            .await?
            .expect(200)
            .s("state"),
        "revoked"
    );
    b.values(&approved).await?.refused(403, "GRANT_NOT_LIVE");
    assert_eq!(
        m.operator_revoke_grant(&own).await?.expect(200).s("state"),
        "revoked"
    );
    s.values(&own).await?.refused(403, "GRANT_NOT_LIVE");
    m.operator_revoke_grant(&random_uuid())
        .await?
        .refused(404, "NOT_FOUND");
    m.operator_revoke_grant("not-a-grant")
        .await?
        .refused(400, "GRANT_ID_INPUT");
    // A session proof on an operator route is LAUNCHER_INVALID.
    s.call("GET", "/v1/operator/grants", None)
        .await?
        .refused(401, "LAUNCHER_INVALID");
    Ok(())
}

#[tokio::test]
async fn an_operator_revoke_of_an_automatic_grant_withholds_its_secret() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let g1 = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    let g2 = s
        .request_with(&[AUTO], Some(3600), None)
        .await?
        .expect(200)
        .s("grant_id");
    let g3 = s.request(&[AUTO_2]).await?.expect(200).s("grant_id");
    let other = m.enroll_session("other").await?;

    m.operator_revoke_grant(&g1).await?.expect(200);
    s.values(&g1).await?.refused(403, "GRANT_NOT_LIVE");
    // The session's other automatic grant of the same secret ended with it.
    s.values(&g2).await?.refused(403, "GRANT_NOT_LIVE");
    // A grant of another secret did not.
    s.values(&g3).await?.expect(200);

    // The secret now needs its owner's approval for this session.
    let r = s.request(&[AUTO]).await?.expect(200);
    assert_eq!(r.s("state"), "pending");
    assert_eq!(r.s("approver"), ADA);
    assert_eq!(
        r.get("secrets"),
        &json!([{ "name": AUTO, "decision": "approval" }])
    );
    let a = tb.approve(&r.s("record_id"), ADA, None).await?.expect(200);
    let v = s.values(&a.s("grant_id")).await?.expect(200);
    assert_eq!(v.get("values")[AUTO], json!(tb.value_of(AUTO)));
    // Other secrets, and other sessions, are as before.
    assert_eq!(s.request(&[AUTO_2]).await?.s("state"), "granted");
    assert_eq!(other.request(&[AUTO]).await?.s("state"), "granted");
    Ok(())
}

#[tokio::test]
async fn an_operator_revoke_withholds_even_when_the_grant_had_already_ended() -> R {
    let tb = TestBroker::start().await?;
    let (m, s) = tb.session_of(ADA).await?;
    let g = s
        .request_with(&[AUTO], Some(10), None)
        .await?
        .expect(200)
        .s("grant_id");
    tb.advance(Duration::seconds(11));
    s.values(&g).await?.refused(403, "GRANT_NOT_LIVE");
    assert_eq!(
        m.operator_revoke_grant(&g).await?.expect(200).s("state"),
        "expired"
    );
    let r = s.request(&[AUTO]).await?.expect(200);
    assert_eq!(r.s("state"), "pending");
    Ok(())
}

#[tokio::test]
async fn a_services_machine_login_has_no_operator() -> R {
    let tb = TestBroker::start().await?;
    let svc = tb.service_machine("billing", "billing/runner").await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let g = s.request(&[AUTO]).await?.expect(200).s("grant_id");
    svc.operator_machines()
        .await?
        .refused(403, "SERVICE_CREDENTIAL");
    svc.operator_grants()
        .await?
        .refused(403, "SERVICE_CREDENTIAL");
    svc.operator_revoke_machine(&svc.credential_id)
        .await?
        .refused(403, "SERVICE_CREDENTIAL");
    svc.operator_revoke_grant(&g)
        .await?
        .refused(403, "SERVICE_CREDENTIAL");
    s.values(&g).await?.expect(200);
    // Its launcher proof still enrolls pods, which have no operator.
    let pod = svc.enroll_pod("pod-uid", Some("worker")).await?;
    let me = pod.describe().await?.expect(200);
    assert_eq!(me.get("operator"), &serde_json::Value::Null);
    Ok(())
}
