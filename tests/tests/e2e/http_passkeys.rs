//! Passkey countersignatures over HTTP (issue 29, docs/passkeys.md), with a software
//! authenticator (`countersign_proto::webauthn::soft`, real P-256 and Ed25519 keys): a first
//! passkey with an operator's enrollment code, a later one endorsed by it; an approval that
//! policy marks `approval = "passkey"` refused without a countersignature and for each broken
//! one; the value released for a good one; the countersignature checked again at release and
//! by `audit verify`.

use countersign_broker_core::passkey::{ApprovalRule, Covers, Requirement};
use countersign_e2e::http::*;
use serde_json::{Value, json};

type R = anyhow::Result<()>;

async fn broker(rules: Vec<ApprovalRule>) -> anyhow::Result<TestBroker> {
    TestBroker::builder()
        .configure(move |c| c.passkeys = Some(passkey_settings(rules)))
        .start()
        .await
}

/// Ada with one registered P-256 passkey.
async fn ada_with_passkey(tb: &TestBroker) -> anyhow::Result<Soft> {
    let soft = Soft::p256(RP_ID, ORIGIN);
    tb.register_passkey(ADA, &soft, Some(&tb.enroll_code(ADA)), None)
        .await?
        .expect(201);
    Ok(soft)
}

#[tokio::test]
async fn a_first_passkey_needs_an_enrollment_code_and_a_later_one_an_endorsement() -> R {
    let tb = broker(vec![]).await?;
    let one = Soft::p256(RP_ID, ORIGIN);

    // Neither a code nor an endorsement; another person's code; a made-up code.
    tb.register_passkey(ADA, &one, None, None)
        .await?
        .refused(403, "PASSKEY_ENROLLMENT_REQUIRED");
    tb.register_passkey(ADA, &one, Some(&tb.enroll_code(BOB)), None)
        .await?
        .refused(403, "PASSKEY_ENROLLMENT_REQUIRED");
    tb.register_passkey(ADA, &one, Some("AAAAAAAAAAAAAAAAAAAAAA.1.x"), None)
        .await?
        .refused(403, "PASSKEY_ENROLLMENT_REQUIRED");

    let code = tb.enroll_code(ADA);
    let first = tb
        .register_passkey(ADA, &one, Some(&code), None)
        .await?
        .expect(201);
    assert_eq!(first.s("id"), one.id_text());
    assert_eq!(first.s("enrolled_by"), "code");
    assert_eq!(first.get("synced"), &json!(true));
    // The code is spent: once only, even for another passkey.
    tb.register_passkey(ADA, &Soft::p256(RP_ID, ORIGIN), Some(&code), None)
        .await?
        .refused(403, "PASSKEY_ENROLLMENT_REQUIRED");
    // The same credential again: refused before its code is spent (the code registers
    // another passkey below).
    let spare = tb.enroll_code(ADA);
    tb.register_passkey(ADA, &one, Some(&spare), None)
        .await?
        .refused(409, "PASSKEY_EXISTS");

    // A second passkey, endorsed by the first over the same challenge; a device-bound one.
    let mut one = one;
    let two = Soft::ed25519(RP_ID, ORIGIN);
    let second = tb
        .register_passkey(ADA, &two, None, Some(&mut one))
        .await?
        .expect(201);
    assert_eq!(
        second.s("enrolled_by"),
        format!("passkey:{}", one.id_text())
    );
    assert_eq!(second.get("synced"), &json!(false));
    // Bob cannot endorse with Ada's passkey.
    tb.register_passkey(BOB, &Soft::p256(RP_ID, ORIGIN), None, Some(&mut one))
        .await?
        .refused(403, "PASSKEY_ENROLLMENT_REQUIRED");

    // A registration made for another origin, and one whose nonce was already spent.
    let elsewhere = Soft::p256(RP_ID, "https://evil.example");
    tb.register_passkey(ADA, &elsewhere, Some(&tb.enroll_code(ADA)), None)
        .await?
        .refused(403, "PASSKEY_INVALID");
    let offer = tb.passkey_challenge(ADA).await?.expect(200);
    let challenge = countersign_proto::b64::decode(&offer.s("challenge"))?;
    let three = Soft::p256(RP_ID, ORIGIN);
    let (client, object) = three.create(&challenge, "packed");
    let body = json!({
        "approver": ADA, "name": "three", "nonce": offer.s("nonce"),
        "client_data": countersign_proto::b64::encode(&client),
        "attestation_object": countersign_proto::b64::encode(&object),
        "enroll_code": spare,
    });
    tb.console("POST", "/v1/passkeys", Some(&body))
        .await?
        .expect(201);
    // Another authenticator over the same (spent) challenge and nonce.
    let four = Soft::p256(RP_ID, ORIGIN);
    let (client, object) = four.create(&challenge, "none");
    let mut again = body.clone();
    again["enroll_code"] = json!(tb.enroll_code(ADA));
    again["client_data"] = json!(countersign_proto::b64::encode(&client));
    again["attestation_object"] = json!(countersign_proto::b64::encode(&object));
    tb.console("POST", "/v1/passkeys", Some(&again))
        .await?
        .refused(403, "PASSKEY_INVALID");
    // The same credential again, over a fresh challenge: already registered.
    tb.register_passkey(ADA, &three, Some(&tb.enroll_code(ADA)), None)
        .await?
        .refused(409, "PASSKEY_EXISTS");

    // Listed, renamed, removed; another person's is not found.
    let list = tb
        .console("GET", &format!("/v1/passkeys?approver={ADA}"), None)
        .await?
        .expect(200);
    assert_eq!(list.get("passkeys").as_array().map(Vec::len), Some(3));
    let path = format!("/v1/passkeys/{}", two.id_text());
    let renamed = tb
        .console(
            "PATCH",
            &path,
            Some(&json!({ "approver": ADA, "name": "yubikey" })),
        )
        .await?
        .expect(200);
    assert_eq!(renamed.s("name"), "yubikey");
    tb.console(
        "PATCH",
        &path,
        Some(&json!({ "approver": ADA, "name": "" })),
    )
    .await?
    .refused(400, "INVALID_PASSKEY");
    tb.console(
        "PATCH",
        &path,
        Some(&json!({ "approver": BOB, "name": "mine" })),
    )
    .await?
    .refused(404, "NOT_FOUND");
    tb.console(
        "POST",
        &format!("{path}/remove"),
        Some(&json!({ "approver": ADA })),
    )
    .await?
    .expect(200);
    let list = tb
        .console("GET", &format!("/v1/passkeys?approver={ADA}"), None)
        .await?
        .expect(200);
    assert_eq!(list.get("passkeys").as_array().map(Vec::len), Some(2));
    tb.console(
        "POST",
        "/v1/passkeys",
        Some(&json!({ "approver": ADA, "name": 1 })),
    )
    .await?
    .refused(400, "INVALID_PASSKEY");
    Ok(())
}

#[tokio::test]
async fn passkeys_off_is_said_plainly() -> R {
    let tb = TestBroker::start().await?;
    tb.passkey_challenge(ADA)
        .await?
        .refused(404, "PASSKEYS_OFF");
    Ok(())
}

#[tokio::test]
async fn a_passkey_approval_is_refused_for_each_broken_countersignature_and_releases_for_a_good_one()
-> R {
    let tb = broker(vec![passkey_for_secret(ADA_SECRET)]).await?;
    let mut soft = ada_with_passkey(&tb).await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[ADA_SECRET]).await?.expect(200);
    let record = r.s("record_id");

    // No countersignature.
    tb.approve(&record, ADA, None)
        .await?
        .refused(403, "PASSKEY_REQUIRED");

    // The statement, in words, before the key is touched.
    let st = tb.statement(&record, ADA).await?.expect(200);
    assert_eq!(st.get("required"), &json!(true));
    assert!(st.s("words").contains(ADA_SECRET), "{}", st.s("words"));
    assert!(st.s("words").starts_with(&format!("I, {ADA}, approve")));
    assert_eq!(st.get("passkeys")[0]["id"], json!(soft.id_text()));
    tb.statement(&record, BOB)
        .await?
        .refused(403, "NOT_APPROVER");

    let fresh = |tb: &TestBroker| {
        let (record, conn) = (record.clone(), tb.conn.clone());
        async move {
            let st = conn.statement(&record, ADA).await?.expect(200);
            let challenge = countersign_proto::b64::decode(&st.s("challenge"))?;
            anyhow::Ok((challenge, st.s("nonce")))
        }
    };
    // Another statement's assertion (the nonce of one, the signature over another).
    let (_, nonce) = fresh(&tb).await?;
    let (other, _) = fresh(&tb).await?;
    tb.approve_countersigned(&record, ADA, None, assertion(&mut soft, &other, &nonce))
        .await?
        .refused(403, "PASSKEY_INVALID");
    // A replayed nonce: spent by the refusal above.
    tb.approve_countersigned(&record, ADA, None, assertion(&mut soft, &other, &nonce))
        .await?
        .refused(403, "PASSKEY_INVALID");
    // An expired nonce.
    let (challenge, nonce) = fresh(&tb).await?;
    tb.advance(chrono::Duration::minutes(6));
    tb.approve_countersigned(&record, ADA, None, assertion(&mut soft, &challenge, &nonce))
        .await?
        .refused(403, "PASSKEY_INVALID");
    // User verification missing.
    let (challenge, nonce) = fresh(&tb).await?;
    let flags = soft.flags;
    soft.flags &= !countersign_proto::webauthn::flags::UV;
    tb.approve_countersigned(&record, ADA, None, assertion(&mut soft, &challenge, &nonce))
        .await?
        .refused(403, "PASSKEY_INVALID");
    soft.flags = flags;
    // A sign count gone backwards (a cloned authenticator): the count the broker keeps moved
    // on when this passkey endorsed another; an assertion with a lower one is refused.
    tb.register_passkey(ADA, &Soft::p256(RP_ID, ORIGIN), None, Some(&mut soft))
        .await?
        .expect(201);
    let (challenge, nonce) = fresh(&tb).await?;
    let count = soft.count;
    soft.count = 1;
    let stale = assertion(&mut soft, &challenge, &nonce);
    soft.count = count;
    tb.approve_countersigned(&record, ADA, None, stale)
        .await?
        .refused(403, "PASSKEY_INVALID");
    // A wrong origin.
    let (challenge, nonce) = fresh(&tb).await?;
    soft.origin = "https://evil.example".into();
    tb.approve_countersigned(&record, ADA, None, assertion(&mut soft, &challenge, &nonce))
        .await?
        .refused(403, "PASSKEY_INVALID");
    soft.origin = ORIGIN.into();
    // A passkey that is not registered.
    let (challenge, nonce) = fresh(&tb).await?;
    let mut stranger = Soft::p256(RP_ID, ORIGIN);
    tb.approve_countersigned(
        &record,
        ADA,
        None,
        assertion(&mut stranger, &challenge, &nonce),
    )
    .await?
    .refused(403, "PASSKEY_INVALID");
    // Bob's passkey over Ada's statement.
    let mut bobs = Soft::p256(RP_ID, ORIGIN);
    tb.register_passkey(BOB, &bobs, Some(&tb.enroll_code(BOB)), None)
        .await?
        .expect(201);
    let (challenge, nonce) = fresh(&tb).await?;
    tb.approve_countersigned(&record, ADA, None, assertion(&mut bobs, &challenge, &nonce))
        .await?
        .refused(403, "PASSKEY_INVALID");

    // A good one: approved, and the value released.
    let (challenge, nonce) = fresh(&tb).await?;
    let good = assertion(&mut soft, &challenge, &nonce);
    let a = tb
        .approve_countersigned(&record, ADA, None, good.clone())
        .await?
        .expect(200);
    let v = s.values(&a.s("grant_id")).await?.expect(200);
    assert_eq!(v.get("values")[ADA_SECRET], json!(tb.value_of(ADA_SECRET)));
    // Replayed after the decision: its nonce is spent.
    tb.approve_countersigned(&record, ADA, None, good)
        .await?
        .refused(403, "PASSKEY_INVALID");

    // The countersignature is in the audit chain, whole, and `audit verify` checks it again.
    let db = tb.open_db().await?;
    let settings = passkey_settings(vec![passkey_for_secret(ADA_SECRET)]);
    let found =
        countersign_broker_http::audit::inspect(&db, &tb.sealer(), Some(&settings), None).await?;
    assert!(found.findings.is_empty(), "{:?}", found.findings);
    db.close().await;
    Ok(())
}

#[tokio::test]
async fn a_secret_not_covered_needs_no_passkey_and_a_device_bound_rule_refuses_a_synced_one() -> R {
    let rule = ApprovalRule {
        covers: Covers::Secret(countersign_broker_core::ids::SecretName::parse(ADA_SECRET)?),
        requirement: Requirement {
            device_bound: true,
            aaguids: None,
        },
    };
    let tb = broker(vec![rule]).await?;
    let mut synced = ada_with_passkey(&tb).await?;
    let (_m, s) = tb.session_of(ADA).await?;

    // ADA_SECRET_2 is not covered: a click approves it.
    let other = s.request(&[ADA_SECRET_2]).await?.expect(200);
    tb.approve(&other.s("record_id"), ADA, None)
        .await?
        .expect(200);

    let r = s.request(&[ADA_SECRET]).await?.expect(200);
    let record = r.s("record_id");
    let st = tb.statement(&record, ADA).await?.expect(200);
    assert_eq!(st.get("device_bound"), &json!(true));
    assert_eq!(
        st.get("passkeys"),
        &json!([]),
        "the synced passkey may not sign"
    );
    tb.approve_with_passkey(&record, ADA, None, &mut synced)
        .await?
        .refused(403, "PASSKEY_INVALID");
    let mut bound = Soft::ed25519(RP_ID, ORIGIN);
    tb.register_passkey(ADA, &bound, None, Some(&mut synced))
        .await?
        .expect(201);
    tb.approve_with_passkey(&record, ADA, None, &mut bound)
        .await?
        .expect(200);
    Ok(())
}

#[tokio::test]
async fn a_machine_login_can_need_a_passkey() -> R {
    let rule = ApprovalRule {
        covers: Covers::MachineLogins,
        requirement: Requirement::default(),
    };
    let tb = broker(vec![rule]).await?;
    let mut soft = ada_with_passkey(&tb).await?;
    let key = new_key();
    let started = tb.start_login(&key, ADA, "laptop-1").await?.expect(202);
    let code = started.s("code");
    let record = tb.lookup(&code).await?.expect(200).s("record_id");
    tb.approve(&record, ADA, Some(&code))
        .await?
        .refused(403, "PASSKEY_REQUIRED");
    let st = tb.statement(&record, ADA).await?.expect(200);
    assert!(
        st.s("words").contains("a machine login"),
        "{}",
        st.s("words")
    );
    let a = tb
        .approve_with_passkey(&record, ADA, Some(&code), &mut soft)
        .await?
        .expect(200);
    assert!(a.get("credential_id").is_string());
    Ok(())
}

#[tokio::test]
async fn a_grant_approved_before_policy_asked_for_a_passkey_releases_nothing() -> R {
    // The same database and key, first without the rule, then with it (a restart with new
    // settings).
    let tb = TestBroker::builder()
        .configure(|c| c.passkeys = Some(passkey_settings(vec![])))
        .start()
        .await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[ADA_SECRET]).await?.expect(200);
    let grant = tb
        .approve(&r.s("record_id"), ADA, None)
        .await?
        .expect(200)
        .s("grant_id");
    s.values(&grant).await?.expect(200);
    let strict = TestBroker::builder()
        .replica_of(&tb)
        .configure(|c| c.passkeys = Some(passkey_settings(vec![passkey_for_secret(ADA_SECRET)])))
        .start()
        .await?;
    // Past the first replica's proof horizon (a proof it may have accepted on memory alone).
    tb.advance(chrono::Duration::seconds(5));
    let mut s = s;
    s.conn = strict.conn.clone();
    s.values(&grant).await?.refused(403, "PASSKEY_REQUIRED");
    Ok(())
}

/// The record's stored decision, as JSON.
async fn decision(tb: &TestBroker, record: &str) -> anyhow::Result<Value> {
    use sqlx::{Connection, Row};
    sqlx::any::install_default_drivers();
    let mut c = sqlx::AnyConnection::connect(&tb.database_url).await?;
    let row = sqlx::query("SELECT decided FROM records WHERE id = $1")
        .bind(record)
        .fetch_one(&mut c)
        .await?;
    let text: String = row.try_get("decided")?;
    c.close().await?;
    Ok(serde_json::from_str(&text)?)
}

async fn set_decision(tb: &TestBroker, record: &str, d: &Value) -> R {
    use sqlx::Connection;
    let mut c = sqlx::AnyConnection::connect(&tb.database_url).await?;
    sqlx::query("UPDATE records SET decided = $1 WHERE id = $2")
        .bind(d.to_string())
        .bind(record)
        .execute(&mut c)
        .await?;
    c.close().await?;
    Ok(())
}

#[tokio::test]
async fn a_countersigned_decision_edited_in_the_database_releases_nothing_and_is_reported() -> R {
    let tb = broker(vec![passkey_for_secret(ADA_SECRET)]).await?;
    let mut soft = ada_with_passkey(&tb).await?;
    let (_m, s) = tb.session_of(ADA).await?;
    let r = s.request(&[ADA_SECRET]).await?.expect(200);
    let record = r.s("record_id");
    let grant = tb
        .approve_with_passkey(&record, ADA, None, &mut soft)
        .await?
        .expect(200)
        .s("grant_id");
    s.values(&grant).await?.expect(200);

    // The countersignature removed (an approval that never had one), then one with its
    // signature swapped: neither releases.
    let good = decision(&tb, &record).await?;
    let mut stripped = good.clone();
    stripped
        .as_object_mut()
        .map(|o| o.remove("countersignature"));
    set_decision(&tb, &record, &stripped).await?;
    s.values(&grant).await?.refused(403, "GRANT_CHAIN_INVALID");
    let mut swapped = good.clone();
    swapped["countersignature"]["signature"] = json!("AAAA");
    set_decision(&tb, &record, &swapped).await?;
    s.values(&grant).await?.refused(403, "GRANT_CHAIN_INVALID");

    // `audit verify` names the record.
    let db = tb.open_db().await?;
    let settings = passkey_settings(vec![passkey_for_secret(ADA_SECRET)]);
    let found =
        countersign_broker_http::audit::inspect(&db, &tb.sealer(), Some(&settings), None).await?;
    let text: Vec<String> = found.findings.iter().map(|f| f.to_string()).collect();
    assert!(
        text.iter()
            .any(|f| f.contains(&format!("records {record}")) && f.contains("countersignature")),
        "{text:?}"
    );
    db.close().await;

    set_decision(&tb, &record, &good).await?;
    s.values(&grant).await?.expect(200);
    Ok(())
}
