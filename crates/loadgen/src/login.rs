//! The broker's machine-login flow and a session's enrollment, as the measuring tools drive them
//! over HTTP: a machine key starts a login, the console token looks the code up and approves
//! it, the launcher polls its credential, and the credential enrolls a session key. Shared by
//! `countersign-loadgen` and `countersign-issued-bench`, so that both log in exactly as a
//! launcher does.

use anyhow::{Context, bail};
use countersign_proto::claims::{self, MachineLoginClaims, ProofClaims};
use countersign_proto::{Header, SigningKey, jws};
use serde_json::{Value, json};

/// Logs a machine of `person`'s in from `host` (start, lookup, approve with the code, poll):
/// its key and credential id. `token` is the broker's console token; `person` approves.
pub async fn machine_login(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    person: &str,
    host: &str,
) -> anyhow::Result<(SigningKey, String)> {
    let machine = SigningKey::generate()?;
    let now = chrono::Utc::now().timestamp();
    let login = MachineLoginClaims {
        iat: now,
        exp: now + 300,
        jti: claims::new_jti()?,
        login_hint: person.into(),
        host: host.into(),
        authorization_details: None,
    };
    let object = jws::sign(
        &machine,
        &Header::with_jwk(claims::TYP_MACHINE_LOGIN, machine.public_jwk()),
        &login,
    )?;
    let started: Value = ok(http
        .post(format!("{base}/v1/launcher-credentials"))
        .json(&json!({ "request": object }))
        .send()
        .await?)
    .await?;
    let code = started["code"].as_str().context("code")?.to_owned();
    let pending = started["pending_id"]
        .as_str()
        .context("pending_id")?
        .to_owned();
    let record: Value = ok(http
        .post(format!("{base}/v1/machine-logins/lookup"))
        .bearer_auth(token)
        .json(&json!({ "code": code }))
        .send()
        .await?)
    .await?;
    let record_id = record["record_id"].as_str().context("record_id")?;
    ok(http
        .post(format!("{base}/v1/credential-requests/{record_id}/approve"))
        .bearer_auth(token)
        .json(&json!({ "approver": person, "code": code }))
        .send()
        .await?)
    .await?;
    let polled: Value = ok(http
        .get(format!("{base}/v1/launcher-credentials/{pending}"))
        .send()
        .await?)
    .await?;
    let credential = polled["credential_id"]
        .as_str()
        .context("credential_id")?
        .to_owned();
    Ok((machine, credential))
}

/// Enrolls a session (`runtime_id`) with the machine's credential: the session's key and its
/// enrollment id.
pub async fn enroll(
    http: &reqwest::Client,
    base: &str,
    machine: &SigningKey,
    credential: &str,
    runtime_id: &str,
) -> anyhow::Result<(SigningKey, String)> {
    let session = SigningKey::generate()?;
    let body = serde_json::to_vec(&json!({
        "kind": "session",
        "runtime_id": runtime_id,
        "thumbprint": session.thumbprint(),
        "jwk": session.public_jwk(),
    }))?;
    let proof = jws::sign(
        machine,
        &Header::with_kid(claims::TYP_LAUNCHER_PROOF, credential),
        &ProofClaims {
            htm: "POST".into(),
            htu: claims::htu(base, "/v1/enrollments"),
            iat: chrono::Utc::now().timestamp(),
            jti: claims::new_jti()?,
            bh: Some(claims::body_hash(&body)),
        },
    )?;
    let enrolled: Value = ok(http
        .post(format!("{base}/v1/enrollments"))
        .header("proof", proof)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await?)
    .await?;
    let id = enrolled["enrollment_id"]
        .as_str()
        .context("enrollment_id")?
        .to_owned();
    Ok((session, id))
}

/// A set-up call's JSON answer; an error naming the status when it refused.
async fn ok(resp: reqwest::Response) -> anyhow::Result<Value> {
    let status = resp.status();
    let v: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        bail!("setup call failed: {status} {v}");
    }
    Ok(v)
}
