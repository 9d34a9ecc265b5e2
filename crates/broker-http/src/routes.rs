//! The routes: one handler each, in the spec's order. A handler reads the request, checks its
//! credential (refusals come first), parses its body into the route's shape, calls the core and
//! renders the answer.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, FromRequest, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use countersign_broker_core::ErrorCode;
use countersign_broker_core::broker::EnrollInput;
use countersign_broker_core::broker::PollState;
use countersign_broker_core::ids::{
    CredentialId, EnrollmentId, GrantId, RecordId, RequestId, SecretName,
};
use countersign_broker_core::model::{Enrollment, Grant, LauncherCredential};
use countersign_common::wire as w;
use serde::Serialize;

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::extract::{Console, ConsoleApprover, ConsoleOn, PathParam, Proved, ProvedOn, Raw};
use crate::wire;

type St = State<Arc<AppState>>;

/// A 200 with `answer`, one of the answer types of `countersign_common::wire`.
fn ok(answer: impl Serialize) -> Response {
    (StatusCode::OK, axum::Json(answer)).into_response()
}

fn state(s: &'static str) -> Response {
    ok(w::StateAnswer::new(s))
}

/// A request under a machine credential.
type Machine = Proved<LauncherCredential>;

/// A request under a session proof.
type Session = Proved<Enrollment>;

/// A request under a session proof, with the session's live grants read with its enrollment.
type SessionWithGrants = Proved<(Enrollment, Vec<Grant>)>;

/// A request under a machine credential on the record the path's id names.
type MachineOn<I> = ProvedOn<LauncherCredential, I>;

/// A request under a session proof on the record the path's id names.
type SessionOn<I> = ProvedOn<Enrollment, I>;

// ----- machine credential -----

pub(crate) async fn enroll(State(st): St, Proved(cred, r): Machine) -> ApiResult<Response> {
    let b: wire::EnrollBody = r.json(ErrorCode::INVALID_ENROLLMENT)?;
    let e = st
        .broker
        .enroll(
            &cred,
            EnrollInput {
                kind: b.kind,
                runtime_id: b.runtime_id,
                slot: b.slot,
                operator: b.operator,
                thumbprint: b.thumbprint,
                jwk: b.jwk,
                session_id: b.session_id,
                pod_token: b.pod_token,
            },
        )
        .await?;
    Ok((StatusCode::CREATED, axum::Json(wire::enrolled(&e))).into_response())
}

pub(crate) async fn unenroll(State(st): St, on: MachineOn<EnrollmentId>) -> ApiResult<Response> {
    st.broker.unenroll(&on.by, on.id).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub(crate) async fn operator_machines(
    State(st): St,
    Proved(cred, _): Machine,
) -> ApiResult<Response> {
    let list = st.broker.operator_machines(&cred).await?;
    Ok(ok(wire::credentials(&list, st.broker.now())))
}

pub(crate) async fn operator_revoke_machine(
    State(st): St,
    on: MachineOn<CredentialId>,
) -> ApiResult<Response> {
    Ok(state(
        st.broker.operator_revoke_machine(&on.by, on.id).await?,
    ))
}

pub(crate) async fn operator_grants(
    State(st): St,
    Proved(cred, _): Machine,
) -> ApiResult<Response> {
    Ok(ok(wire::grants(&st.broker.operator_grants(&cred).await?)))
}

pub(crate) async fn operator_revoke_grant(
    State(st): St,
    on: MachineOn<GrantId>,
) -> ApiResult<Response> {
    Ok(state(st.broker.operator_revoke_grant(&on.by, on.id).await?))
}

// ----- no credential: machine logins -----

pub(crate) async fn login_start(
    State(st): St,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    r: Raw,
) -> ApiResult<Response> {
    st.limits.login_start(peer.ip()).map_err(|wait| {
        ApiError::rate_limited(
            "too many launcher credential requests; try again later",
            wait,
        )
    })?;
    let b: wire::SignedBody = r.json(ErrorCode::INVALID_REQUEST)?;
    let started = st.broker.start_machine_login(&b.request).await?;
    let body = w::LoginStarted {
        code: started.code.display(),
        pending_id: started.pending_id,
    };
    Ok((StatusCode::ACCEPTED, no_store(), axum::Json(body)).into_response())
}

pub(crate) async fn token_login(State(st): St, r: Raw) -> ApiResult<Response> {
    if !st.broker.has_token_issuer() {
        return Err(ErrorCode::TOKEN_LOGIN_OFF.into());
    }
    let b: wire::TokenLoginBody = r.json(ErrorCode::INVALID_REQUEST)?;
    let sa = st.broker.verify_service_token(&b.token).await?;
    st.limits.token_login(&sa.account()).map_err(|wait| {
        ApiError::rate_limited(
            "too many token logins for this ServiceAccount; try again later",
            wait,
        )
    })?;
    let c = st.broker.token_login_verified(&sa, &b.request).await?;
    Ok(ok(w::TokenLogin {
        credential_id: c.id.to_string(),
        expires_at: c.expires_at,
    }))
}

pub(crate) async fn login_poll(
    State(st): St,
    PathParam(pending): PathParam,
) -> ApiResult<Response> {
    let v = match st.broker.poll_machine_login(&pending).await? {
        PollState::Pending => w::LoginPoll::state("pending"),
        PollState::Issued {
            credential_id,
            expires_at,
        } => w::LoginPoll {
            credential_id: Some(credential_id.to_string()),
            expires_at: Some(expires_at),
            state: "issued".to_owned(),
        },
        PollState::Denied => w::LoginPoll::state("denied"),
        PollState::Expired => w::LoginPoll::state("expired"),
    };
    Ok((StatusCode::OK, no_store(), axum::Json(v)).into_response())
}

// ----- session proof -----

pub(crate) async fn renew(State(st): St, PathParam(id): PathParam, r: Raw) -> ApiResult<Response> {
    let e = st
        .broker
        .authenticate_renewal(r.proof(), r.target())
        .await?;
    let id = EnrollmentId::parse(&id)?;
    let b: wire::RenewBody = r.json_or_default(ErrorCode::INVALID_RENEWAL)?;
    let lease = st.broker.renew(&e, id, b.pod_token.as_deref()).await?;
    Ok(ok(w::Renewed {
        lease_expires_at: lease,
    }))
}

pub(crate) async fn enrollment_self(
    Proved((e, grants), _): SessionWithGrants,
) -> ApiResult<Response> {
    Ok(ok(wire::enrollment_self(&e, &grants)))
}

pub(crate) async fn create_request(State(st): St, Proved(e, r): Session) -> ApiResult<Response> {
    let b: wire::RequestBody = r.json(ErrorCode::INVALID_REQUEST)?;
    let created = st
        .broker
        .create_request(&e, &b.request, b.session_id.as_deref())
        .await?;
    Ok(ok(wire::request_for(
        &st.broker,
        &created.request,
        Some(created.coalesced),
    )))
}

pub(crate) async fn get_request(State(st): St, on: SessionOn<RequestId>) -> ApiResult<Response> {
    let request = st.broker.get_request(&on.by, on.id).await?;
    Ok(ok(wire::request_for(&st.broker, &request, None)))
}

pub(crate) async fn cancel_request(State(st): St, on: SessionOn<RequestId>) -> ApiResult<Response> {
    Ok(state(
        st.broker.cancel_own_request(&on.by, on.id).await?.as_str(),
    ))
}

pub(crate) async fn grant_values(State(st): St, on: SessionOn<GrantId>) -> ApiResult<Response> {
    let released = st.broker.release_values(&on.by, on.id).await?;
    // The body is built by hand into a buffer that is zeroized once sent; no serde_json::Value
    // copy of a value is left behind.
    let mut out = zeroize::Zeroizing::new(Vec::with_capacity(256));
    out.extend_from_slice(b"{\"expires_at\":");
    match &released.expires_at {
        Some(t) => out.extend_from_slice(
            format!("\"{}\"", countersign_broker_core::clock::rfc3339(t)).as_bytes(),
        ),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b",\"values\":{");
    for (i, (name, value)) in released.values.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write_json_string(&mut out, name.as_str());
        out.push(b':');
        write_json_string(&mut out, value.expose());
    }
    out.push(b'}');
    // An issued secret's credential as environment variables (additive: only when there is one).
    if !released.parts.is_empty() {
        out.extend_from_slice(b",\"parts\":{");
        for (i, (name, env)) in released.parts.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            write_json_string(&mut out, name.as_str());
            out.extend_from_slice(b":{");
            for (j, (var, value)) in env.iter().enumerate() {
                if j > 0 {
                    out.push(b',');
                }
                write_json_string(&mut out, var);
                out.push(b':');
                write_json_string(&mut out, value.expose());
            }
            out.push(b'}');
        }
        out.push(b'}');
        // Which parts are not secret (a client need not mask them).
        let public: std::collections::BTreeMap<_, _> = released
            .public_parts
            .iter()
            .map(|(n, vars)| (n.as_str(), vars))
            .collect();
        out.extend_from_slice(b",\"public_parts\":");
        out.extend_from_slice(&serde_json::to_vec(&public).unwrap_or_else(|_| b"{}".to_vec()));
    }
    out.push(b'}');
    let body = Body::from(axum::body::Bytes::copy_from_slice(&out));
    let mut resp = (StatusCode::OK, body).into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp.headers_mut()
        .insert(header::PRAGMA, HeaderValue::from_static("no-cache"));
    Ok(resp)
}

/// Writes `s` as a JSON string (RFC 8259 escaping) into a zeroizing buffer.
fn write_json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            c if (c as u32) < 0x20 => {
                out.extend_from_slice(format!("\\u{:04x}", c as u32).as_bytes())
            }
            c => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

pub(crate) async fn revoke_grant(State(st): St, on: SessionOn<GrantId>) -> ApiResult<Response> {
    Ok(state(st.broker.revoke_own_grant(&on.by, on.id).await?))
}

// ----- console token -----

pub(crate) async fn pending(
    State(st): St,
    ConsoleApprover(who): ConsoleApprover,
) -> ApiResult<Response> {
    let pending = st.broker.pending_for(&who).await?;
    Ok(ok(w::PendingList {
        pending: pending.iter().map(wire::pending_item).collect(),
    }))
}

pub(crate) async fn get_record(
    State(st): St,
    _: Console,
    PathParam(record): PathParam,
) -> ApiResult<Response> {
    // A record id, or (issue 48) the id of the request it decides: the one its session was
    // given, which the console shows as the request's name.
    let rec = match RequestId::parse(&record) {
        Ok(request) => st.broker.record_of_request(request).await?,
        Err(_) => st.broker.record(&RecordId::parse(&record)?).await?,
    };
    Ok(ok(wire::record(&rec)))
}

pub(crate) async fn approve(State(st): St, on: ConsoleOn<RecordId>) -> ApiResult<Response> {
    let (id, r) = (on.id, on.raw);
    let (b, who) = r.approving::<wire::DecisionBody>(ErrorCode::INVALID_DECISION)?;
    let a = st
        .broker
        .approve(&id, &who, b.code.as_deref(), b.countersignature.as_ref())
        .await?;
    Ok(ok(w::Approval {
        credential_id: a.credential_id.map(|c| c.to_string()),
        grant_id: a.grant_id.map(|g| g.to_string()),
        state: "approved".to_owned(),
    }))
}

pub(crate) async fn deny(State(st): St, on: ConsoleOn<RecordId>) -> ApiResult<Response> {
    let (b, who) = on
        .raw
        .approving::<wire::DecisionBody>(ErrorCode::INVALID_DECISION)?;
    let id = on.id;
    Ok(state(
        st.broker.deny(&id, &who, b.code.as_deref()).await?.as_str(),
    ))
}

pub(crate) async fn lookup(
    State(st): St,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    _: Console,
    req: Request,
) -> ApiResult<Response> {
    // After the console token: a caller without it cannot spend the console's budget.
    st.limits.lookup(peer.ip()).map_err(|wait| {
        ApiError::rate_limited("too many machine-login lookups; try again later", wait)
    })?;
    // The body is read after the rate limit.
    let r = Raw::from_request(req, &st).await?;
    let b: wire::LookupBody = r.json(ErrorCode::INVALID_LOOKUP)?;
    let code = b.code.unwrap_or_default();
    Ok(ok(wire::record(
        &st.broker.lookup_machine_login(&code).await?,
    )))
}

pub(crate) async fn credentials_for(
    State(st): St,
    ConsoleApprover(who): ConsoleApprover,
) -> ApiResult<Response> {
    let list = st.broker.credentials_for(&who).await?;
    Ok(ok(wire::credentials(&list, st.broker.now())))
}

pub(crate) async fn revoke_credential_by_approver(
    State(st): St,
    PathParam(id): PathParam,
    _: Console,
    r: Raw,
) -> ApiResult<Response> {
    let who = r.approver(ErrorCode::INVALID_REVOKE)?;
    let id = CredentialId::parse(&id)?;
    Ok(state(
        st.broker.revoke_credential_by_approver(&who, id).await?,
    ))
}

pub(crate) async fn grants_for(
    State(st): St,
    ConsoleApprover(who): ConsoleApprover,
) -> ApiResult<Response> {
    Ok(ok(wire::grants(&st.broker.grants_for(&who).await?)))
}

pub(crate) async fn revoke_grant_by_approver(
    State(st): St,
    PathParam(id): PathParam,
    _: Console,
    r: Raw,
) -> ApiResult<Response> {
    let who = r.approver(ErrorCode::INVALID_REVOKE)?;
    let id = GrantId::parse(&id)?;
    Ok(state(st.broker.revoke_grant_as(&who, id, false).await?))
}

// ----- console token: passkeys (docs/passkeys.md) -----

pub(crate) async fn passkeys(
    State(st): St,
    ConsoleApprover(who): ConsoleApprover,
) -> ApiResult<Response> {
    Ok(ok(wire::passkeys(&st.broker.passkeys_of(&who).await?)))
}

pub(crate) async fn passkey_challenge(State(st): St, _: Console, r: Raw) -> ApiResult<Response> {
    let who = r.approver(ErrorCode::INVALID_PASSKEY)?;
    Ok(ok(wire::passkey_offer(
        &st.broker.passkey_offer(&who).await?,
    )))
}

pub(crate) async fn passkey_register(State(st): St, _: Console, r: Raw) -> ApiResult<Response> {
    let (b, who) = r.approving::<wire::PasskeyBody>(ErrorCode::INVALID_PASSKEY)?;
    let p = st
        .broker
        .register_passkey(
            &who,
            countersign_broker_core::broker::Registration {
                name: b.name,
                nonce: b.nonce,
                client_data: b.client_data,
                attestation_object: b.attestation_object,
                enroll_code: b.enroll_code,
                endorsement: b.endorsement,
            },
        )
        .await?;
    Ok((StatusCode::CREATED, axum::Json(wire::passkey(&p))).into_response())
}

pub(crate) async fn passkey_rename(
    State(st): St,
    PathParam(id): PathParam,
    _: Console,
    r: Raw,
) -> ApiResult<Response> {
    let (b, who) = r.approving::<wire::PasskeyRenameBody>(ErrorCode::INVALID_PASSKEY)?;
    Ok(ok(wire::passkey(
        &st.broker.rename_passkey(&who, &id, &b.name).await?,
    )))
}

pub(crate) async fn passkey_remove(
    State(st): St,
    PathParam(id): PathParam,
    _: Console,
    r: Raw,
) -> ApiResult<Response> {
    let who = r.approver(ErrorCode::INVALID_PASSKEY)?;
    st.broker.remove_passkey(&who, &id).await?;
    Ok(state("removed"))
}

pub(crate) async fn statement(State(st): St, on: ConsoleOn<RecordId>) -> ApiResult<Response> {
    let who = on.raw.approver(ErrorCode::INVALID_DECISION)?;
    let offer = st.broker.statement_for(&on.id, &who).await?;
    let rp_id = st
        .broker
        .config()
        .passkeys
        .as_ref()
        .map(|p| p.rp_id.as_str())
        .unwrap_or_default();
    Ok(ok(wire::statement(&offer, rp_id)))
}

// ----- open -----

pub(crate) async fn settings(State(st): St) -> Response {
    // With the secrets an issuer makes per grant (additive: only when there are some).
    ok(wire::settings(
        st.broker.store().settings(),
        &st.broker.issued_secrets(),
    ))
}

pub(crate) async fn reread(
    State(st): St,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    PathParam(name): PathParam,
) -> ApiResult<Response> {
    st.limits
        .reread(peer.ip())
        .map_err(|wait| ApiError::rate_limited("too many secret rereads; try again later", wait))?;
    let secret = SecretName::parse(&name)?;
    // The reread runs in its own task: if the caller goes away mid-reread, the change still
    // applies; a caller still waiting gets the answer.
    let broker = st.broker.clone();
    let task = tokio::spawn(async move { broker.reread(&secret).await });
    let (served, reason) = match task.await {
        Ok(r) => r?,
        Err(_) => return Err(ErrorCode::REQUEST_ENDED.into()),
    };
    Ok(ok(w::Reread {
        name,
        reason: reason.map(|r| r.as_str().to_owned()),
        served,
    }))
}

pub(crate) async fn healthz(State(st): St) -> ApiResult<Response> {
    st.broker.health().await?;
    Ok(ok(w::Health {
        status: "ok".to_owned(),
    }))
}

fn no_store() -> [(header::HeaderName, HeaderValue); 1] {
    [(header::CACHE_CONTROL, HeaderValue::from_static("no-store"))]
}
