//! Each route's answer, as its type writes it, against the document's schema for the route;
//! and the check itself, on answers that drift.

use std::collections::BTreeMap;

use countersign_common::Time;
use countersign_common::wire as w;
use serde::Serialize;
use serde_json::{Value, json};

use super::{check_answer, conforms, route_of};
use crate::openapi::{ROUTES, document};

fn t(s: &str) -> Time {
    chrono::DateTime::parse_from_rfc3339(s)
        .map(|t| t.with_timezone(&chrono::Utc))
        .unwrap_or_default()
}

fn text<T: Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

const ID: &str = "6d1f0c2e-0000-4000-8000-000000000001";

fn summary(operator: &str) -> w::EnrollmentSummary {
    w::EnrollmentSummary {
        kind: "session".into(),
        operator: operator.into(),
        runtime_id: "laptop/psql".into(),
        slot: None,
    }
}

fn record(decided: bool) -> w::CredentialRecord {
    w::CredentialRecord {
        approver: "ada@example.com".into(),
        decided: decided.then(|| w::Decided {
            at: t("2026-11-24T14:06:00.5Z"),
            credential_id: Some(ID.into()),
            event: "approved".into(),
        }),
        enrollment: (!decided).then(|| summary("ada@example.com")),
        expires_at: t("2026-11-24T15:05:00Z"),
        identifiers: vec!["APP_DB".into()],
        kind: "agent_secret".into(),
        lifetime_seconds: Some(5400),
        reason: "migrations".into(),
        record_id: "ab".repeat(32),
        request_id: decided.then(|| ID.into()),
        requested_at: t("2026-11-24T14:05:00Z"),
        rules_version: "v1".into(),
        service: None,
        session: w::SessionIds {
            enrollment: None,
            request: Some("s1".into()),
        },
        state: "pending".into(),
    }
}

fn passkey() -> w::PasskeyItem {
    w::PasskeyItem {
        aaguid: "00000000-0000-0000-0000-000000000000".into(),
        created_at: t("2026-11-24T14:00:00Z"),
        enrolled_by: "code".into(),
        id: "cred-1".into(),
        name: "laptop".into(),
        synced: true,
    }
}

fn grant(ended: bool) -> w::GrantItem {
    w::GrantItem {
        approver: Some("ada@example.com".into()),
        created_at: t("2026-11-24T14:00:00Z"),
        credentials: vec![w::IssuedCredential {
            destroyed_at: None,
            error: ended.then(|| "role in use".into()),
            issuer: "postgres".into(),
            name: "cs_role".into(),
            next_attempt_at: ended.then(|| t("2026-11-24T14:10:00Z")),
            secret: "APP_DB".into(),
            state: if ended { "destroying" } else { "live" }.into(),
        }],
        enrollment: summary(""),
        expires_at: (!ended).then(|| t("2026-11-24T15:00:00Z")),
        grant_id: ID.into(),
        granted: "approval".into(),
        names: vec!["APP_DB".into()],
        record_id: None,
        state: if ended { "ended" } else { "live" }.into(),
    }
}

fn request(extra: bool) -> w::RequestAnswer {
    w::RequestAnswer {
        approver: Some("ada@example.com".into()),
        coalesced: extra.then_some(true),
        countersign: extra.then(|| "passkey".into()),
        decided_at: (!extra).then(|| t("2026-11-24T14:06:00Z")),
        decision: (!extra).then(|| w::DecisionBy {
            at: t("2026-11-24T14:06:00Z"),
            by: "ada@example.com".into(),
        }),
        grant_id: None,
        lifetime_seconds: None,
        record_id: Some("ab".repeat(32)),
        request_id: ID.into(),
        secrets: vec![w::SecretDecision {
            decision: "approval".into(),
            name: "APP_DB".into(),
        }],
        state: "pending".into(),
    }
}

fn values() -> w::GrantValues {
    let parts = BTreeMap::from([(
        "APP_DB".to_owned(),
        BTreeMap::from([("PGUSER".to_owned(), "cs_role".to_owned())]),
    )]);
    w::GrantValues {
        expires_at: None,
        parts,
        public_parts: BTreeMap::from([("APP_DB".to_owned(), vec!["PGUSER".to_owned()])]),
        values: BTreeMap::from([("APP_DB".to_owned(), "v".to_owned())]),
    }
}

fn statement() -> w::ApprovalStatement {
    w::ApprovalStatement {
        aaguids: Some(vec!["aa".into()]),
        challenge: "Y2g".into(),
        device_bound: false,
        expires_at: t("2026-11-24T14:10:00Z"),
        nonce: "n".into(),
        passkeys: vec![passkey()],
        required: true,
        rp_id: "example.com".into(),
        statement: "approve".into(),
        words: "Approve".into(),
    }
}

fn settings() -> [w::Settings; 2] {
    let local = w::Settings {
        secrets_prefix: "app/".into(),
        store: "local-file-store".into(),
        ..w::Settings::default()
    };
    let cloud = w::Settings {
        cloud_a_region: Some("eu-west-1".into()),
        issued: vec![w::IssuedSecret {
            issuer: "aws-iam".into(),
            kind: "issued".into(),
            name: "AWS".into(),
            owner: "ada@example.com".into(),
            tier: "approval".into(),
        }],
        ..local.clone()
    };
    [local, cloud]
}

/// Representative answers of each route (method, path template): every variant of optional
/// fields the route writes.
// Long: one table of every route's answers; splitting it would only scatter the table.
fn examples() -> Vec<(&'static str, &'static str, Vec<String>)> {
    let state = |s: &str| vec![text(&w::StateAnswer::new(s))];
    let machines = w::MachineLoginList {
        credentials: vec![w::MachineLogin {
            approved_by: "ada@example.com".into(),
            credential_id: ID.into(),
            expired: false,
            expires_at: t("2026-11-25T14:00:00Z"),
            host: "laptop".into(),
            issued_at: t("2026-11-24T14:00:00Z"),
            service: None,
            subject: Some("sa".into()),
        }],
    };
    let grants = w::GrantList {
        grants: vec![grant(false), grant(true)],
    };
    let enrolled = |slot: Option<&str>| w::Enrolled {
        enrollment_id: ID.into(),
        lease_expires_at: t("2026-11-24T15:00:00Z"),
        slot: slot.map(str::to_owned),
    };
    let polls = [
        w::LoginPoll::state("pending"),
        w::LoginPoll {
            credential_id: Some(ID.into()),
            expires_at: Some(None),
            state: "issued".into(),
        },
        w::LoginPoll {
            credential_id: Some(ID.into()),
            expires_at: Some(Some(t("2026-11-25T14:00:00Z"))),
            state: "issued".into(),
        },
    ];
    let me = w::EnrollmentSelf {
        enrollment_id: ID.into(),
        grants: vec![w::SessionGrant {
            approver: None,
            expires_at: None,
            grant_id: ID.into(),
            request_id: ID.into(),
        }],
        kind: "pod".into(),
        lease_expires_at: t("2026-11-24T15:00:00Z"),
        operator: None,
        slot: None,
    };
    let approval = w::Approval {
        credential_id: None,
        grant_id: Some(ID.into()),
        state: "approved".into(),
    };
    let offer = w::PasskeyOffer {
        challenge: "Y2g".into(),
        expires_at: t("2026-11-24T14:10:00Z"),
        nonce: "n".into(),
        passkeys: vec![passkey()],
        rp_id: "example.com".into(),
        user_handle: "dWg".into(),
    };
    let rereads = [None, Some("not in store")].map(|reason| w::Reread {
        name: "APP_DB".into(),
        reason: reason.map(str::to_owned),
        served: reason.is_none(),
    });
    vec![
        (
            "POST",
            "/v1/enrollments",
            vec![text(&enrolled(None)), text(&enrolled(Some("a")))],
        ),
        ("DELETE", "/v1/enrollments/{id}", vec![String::new()]),
        (
            "POST",
            "/v1/launcher-credentials",
            vec![text(&w::LoginStarted {
                code: "ABCD-EFGH".into(),
                pending_id: "p".into(),
            })],
        ),
        (
            "POST",
            "/v1/launcher-credentials/token",
            vec![text(&w::TokenLogin {
                credential_id: ID.into(),
                expires_at: t("2026-11-25T14:00:00Z"),
            })],
        ),
        (
            "GET",
            "/v1/launcher-credentials/{pending}",
            polls.iter().map(text).collect(),
        ),
        (
            "POST",
            "/v1/enrollments/{id}/renew",
            vec![text(&w::Renewed {
                lease_expires_at: t("2026-11-24T15:00:00.123Z"),
            })],
        ),
        ("GET", "/v1/enrollments/self", vec![text(&me)]),
        (
            "POST",
            "/v1/requests",
            vec![text(&request(true)), text(&request(false))],
        ),
        ("GET", "/v1/requests/{id}", vec![text(&request(false))]),
        ("POST", "/v1/requests/{id}/cancel", state("cancelled")),
        ("POST", "/v1/grants/{id}/values", vec![text(&values())]),
        ("POST", "/v1/grants/{id}/revoke", state("revoked")),
        (
            "GET",
            "/v1/pending",
            vec![text(&w::PendingList {
                pending: vec![w::PendingItem {
                    identifiers: vec!["APP_DB".into()],
                    kind: "agent_secret".into(),
                    record_id: "ab".repeat(32),
                    request_id: None,
                    requested_at: t("2026-11-24T14:05:00Z"),
                    session: w::SessionIds::default(),
                }],
            })],
        ),
        (
            "GET",
            "/v1/credential-requests/{record}",
            vec![text(&record(false)), text(&record(true))],
        ),
        (
            "POST",
            "/v1/credential-requests/{record}/approve",
            vec![text(&approval)],
        ),
        (
            "POST",
            "/v1/credential-requests/{record}/deny",
            state("denied"),
        ),
        (
            "POST",
            "/v1/machine-logins/lookup",
            vec![text(&record(false))],
        ),
        ("GET", "/v1/launcher-credentials", vec![text(&machines)]),
        (
            "POST",
            "/v1/launcher-credentials/{id}/revoke-by-approver",
            state("revoked"),
        ),
        ("GET", "/v1/grants", vec![text(&grants)]),
        (
            "POST",
            "/v1/grants/{id}/revoke-by-approver",
            state("revoked"),
        ),
        (
            "GET",
            "/v1/passkeys",
            vec![text(&w::PasskeyList {
                passkeys: vec![passkey()],
            })],
        ),
        ("POST", "/v1/passkeys/challenge", vec![text(&offer)]),
        ("POST", "/v1/passkeys", vec![text(&passkey())]),
        ("PATCH", "/v1/passkeys/{id}", vec![text(&passkey())]),
        ("POST", "/v1/passkeys/{id}/remove", state("removed")),
        (
            "POST",
            "/v1/credential-requests/{record}/statement",
            vec![text(&statement())],
        ),
        ("GET", "/v1/operator/machines", vec![text(&machines)]),
        (
            "POST",
            "/v1/operator/machines/{id}/revoke",
            state("revoked"),
        ),
        ("GET", "/v1/operator/grants", vec![text(&grants)]),
        ("POST", "/v1/operator/grants/{id}/revoke", state("revoked")),
        ("GET", "/v1/settings", settings().iter().map(text).collect()),
        (
            "POST",
            "/v1/secrets/{name}/reread",
            rereads.iter().map(text).collect(),
        ),
        (
            "GET",
            "/healthz",
            vec![text(&w::Health {
                status: "ok".into(),
            })],
        ),
    ]
}

#[test]
fn every_routes_answer_matches_the_documents_schema() {
    let doc = document();
    let examples = examples();
    for r in ROUTES {
        let (_, _, answers) = examples
            .iter()
            .find(|(m, p, _)| *m == r.method && *p == r.path)
            .unwrap_or_else(|| panic!("no example answer of {} {}", r.method, r.path));
        for answer in answers {
            if let Err(e) = check_answer(&doc, r.method, r.path, r.success, answer) {
                panic!("{e}\n{answer}");
            }
            // The same bytes the `json!` answers were: keys sorted at every depth.
            if !answer.is_empty() {
                let map: Value = serde_json::from_str(answer).unwrap_or_default();
                assert_eq!(
                    answer,
                    &map.to_string(),
                    "{} {}: keys out of order",
                    r.method,
                    r.path
                );
            }
        }
    }
    assert_eq!(
        examples.len(),
        ROUTES.len(),
        "an example of a route not in the table"
    );
}

#[test]
fn the_check_catches_an_answer_that_drifts() {
    let doc = document();
    let check = |path: &str, body: Value| check_answer(&doc, "POST", path, 201, &body.to_string());
    let good =
        json!({"enrollment_id": ID, "lease_expires_at": "2026-11-24T15:00:00Z", "slot": null});
    assert_eq!(check("/v1/enrollments", good.clone()), Ok(()));
    let drifts = [
        // A field renamed, one left out, one extra, a null where the type has none, a wrong type.
        json!({"enrollment": ID, "lease_expires_at": "2026-11-24T15:00:00Z", "slot": null}),
        json!({"enrollment_id": ID, "lease_expires_at": "2026-11-24T15:00:00Z"}),
        json!({"enrollment_id": ID, "lease_expires_at": "2026-11-24T15:00:00Z", "slot": null, "x": 1}),
        json!({"enrollment_id": null, "lease_expires_at": "2026-11-24T15:00:00Z", "slot": null}),
        json!({"enrollment_id": ID, "lease_expires_at": "tomorrow", "slot": null}),
        json!({"enrollment_id": ID, "lease_expires_at": "2026-11-24T15:00:00Z", "slot": 3}),
    ];
    for d in drifts {
        assert!(check("/v1/enrollments", d.clone()).is_err(), "{d}");
    }
    assert!(
        check_answer(&doc, "POST", "/v1/enrollments", 200, &good.to_string()).is_err(),
        "the wrong success status"
    );
    assert!(
        check_answer(&doc, "DELETE", &format!("/v1/enrollments/{ID}"), 204, "{}").is_err(),
        "a body where none is documented"
    );
    // Absent is not null: a request's `coalesced` is left out or a boolean, never null.
    let mut r = serde_json::to_value(request(false)).unwrap_or_default();
    r["coalesced"] = Value::Null;
    assert!(
        check_answer(
            &doc,
            "GET",
            &format!("/v1/requests/{ID}"),
            200,
            &r.to_string()
        )
        .is_err()
    );
    // A keyword the check does not know fails it rather than passing unchecked.
    assert!(conforms(&doc, &json!({"pattern": "^a"}), &json!("a"), "x").is_err());
}

#[test]
fn paths_reach_their_route() {
    let at = |m, p| route_of(m, p).map(|r| r.path);
    assert_eq!(
        at("GET", "/v1/enrollments/self"),
        Some("/v1/enrollments/self")
    );
    assert_eq!(
        at("DELETE", "/v1/enrollments/x"),
        Some("/v1/enrollments/{id}")
    );
    assert_eq!(
        at("POST", "/v1/passkeys/challenge"),
        Some("/v1/passkeys/challenge")
    );
    assert_eq!(at("GET", "/v1/pending?approver=a"), Some("/v1/pending"));
    assert_eq!(at("GET", "/metrics"), None);
    assert_eq!(at("GET", "/v1/enrollments//renew"), None);
}
