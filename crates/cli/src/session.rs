//! Commands that act for the session the caller runs in: `request`, `status`, `cancel`,
//! `grants`, `values`, `revoke`, and the `renew` worker. Each broker call carries a session
//! proof the helper signs for this process (it is refused `NOT_A_SESSION` outside a session).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use countersign_common::wire::{self, RequestAnswer};
use countersign_launcher_proto::messages::{
    SessionInfo, SessionState, SignRequest, Standing, StatusInfo,
};
use countersign_launcher_proto::{ClientError, HelperCode, Secret};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::args::{Ask, RenewArgs, RequestArgs};
use crate::ctx::{Ctx, Progress, json_fail};
use crate::exit::{self, Fail};
use crate::granted::{self, Granted, Parts};

/// A request as the broker answers it: read as the broker's own answer type
/// ([`RequestAnswer`], `countersign_common::wire`), and the whole as it came (printed as JSON,
/// fields a newer broker adds included).
#[derive(Debug, Clone)]
pub struct Req {
    pub answer: RequestAnswer,
    pub raw: Value,
}

impl Req {
    fn parse(raw: Value) -> Result<Self, Fail> {
        let answer: RequestAnswer = serde_json::from_value(raw.clone()).map_err(json_fail)?;
        Ok(Self { answer, raw })
    }

    /// A line for people.
    pub fn describe(&self) -> String {
        match self.answer.state.as_str() {
            "granted" => format!(
                "granted: request {}, grant {}",
                self.answer.request_id,
                self.answer.grant_id.as_deref().unwrap_or("?")
            ),
            // One name for the request (issue 48): the console shows and finds it by this id.
            "pending" => format!(
                "pending: request {} waits for {}",
                self.answer.request_id,
                approver_words(self.answer.approver.as_deref()),
            ),
            "denied" => {
                let denied: Vec<&str> = self
                    .answer
                    .secrets
                    .iter()
                    .filter(|s| s.decision == "deny")
                    .map(|s| s.name.as_str())
                    .collect();
                let by = self
                    .answer
                    .decision
                    .as_ref()
                    .map(|d| format!(" by {}", d.by))
                    .unwrap_or_default();
                if denied.is_empty() {
                    format!("denied{by}: request {}", self.answer.request_id)
                } else {
                    format!(
                        "denied{by}: request {} (policy denies {})",
                        self.answer.request_id,
                        denied.join(", ")
                    )
                }
            }
            other => format!("request {} is {other}", self.answer.request_id),
        }
    }

    /// The exit status a request in this state gives.
    #[must_use]
    pub fn exit(&self) -> u8 {
        match self.answer.state.as_str() {
            "granted" => exit::SUCCESS,
            "pending" => exit::PENDING,
            "denied" => exit::DENIED,
            _ => exit::FAILURE,
        }
    }
}

fn approver_words(a: Option<&str>) -> String {
    match a {
        Some("anyone") => "anyone signed in to the approval console".to_owned(),
        Some(p) => p.to_owned(),
        None => "a person".to_owned(),
    }
}

/// Signs (through the helper) and sends a secret request.
///
/// # Errors
/// The helper's or the broker's refusal.
pub async fn create(ctx: &Ctx, ask: &Ask, reason: &str) -> Result<Req, Fail> {
    if ask.secrets.is_empty() {
        return Err(Fail::usage("name at least one --secret"));
    }
    let reason: String = reason.chars().take(1000).collect();
    let signed = ctx.helper.sign_request(SignRequest {
        secrets: ask.secrets.clone(),
        reason,
        lifetime_seconds: ask.lifetime,
    })?;
    let mut body = json!({ "request": signed.request });
    if let (Some(s), Some(obj)) = (&ask.session_id, body.as_object_mut()) {
        obj.insert("session_id".into(), Value::String(s.clone()));
    }
    let answer = ctx
        .session_call("POST", "/v1/requests", Some(&body))
        .await?;
    Req::parse(answer.json()?)
}

/// Reads a request of the current session.
///
/// # Errors
/// The helper's or the broker's refusal.
pub async fn get(ctx: &Ctx, id: &str) -> Result<Req, Fail> {
    let answer = ctx
        .session_call("GET", &format!("/v1/requests/{id}"), None)
        .await?;
    Req::parse(answer.json()?)
}

/// Cancels a pending request of the current session; answers the state it left.
///
/// # Errors
/// The helper's or the broker's refusal.
pub async fn cancel_request(ctx: &Ctx, id: &str) -> Result<String, Fail> {
    let answer = ctx
        .session_call("POST", &format!("/v1/requests/{id}/cancel"), None)
        .await?;
    Ok(answer.json::<wire::StateAnswer>()?.state)
}

/// Waits while `req` is pending (unless told not to): polls until a person decides, or until
/// `timeout`. Answers the request as it then stands.
///
/// # Errors
/// The helper's refusal, or the broker's (a broker that cannot be reached is asked again).
pub async fn wait(
    ctx: &Ctx,
    req: Req,
    no_wait: bool,
    timeout: Option<Duration>,
) -> Result<Req, Fail> {
    if req.answer.state != "pending" || no_wait {
        return Ok(req);
    }
    let progress = Progress::start(
        ctx,
        format!(
            "Waiting for {} to approve request {} ...",
            approver_words(req.answer.approver.as_deref()),
            req.answer.request_id
        ),
    );
    let deadline = timeout.map(|t| Instant::now() + t);
    let mut last = req;
    let result = loop {
        if deadline.is_some_and(|d| Instant::now() + ctx.poll > d) {
            break Ok(last);
        }
        tokio::time::sleep(ctx.poll).await;
        match get(ctx, &last.answer.request_id).await {
            Ok(r) if r.answer.state == "pending" => last = r,
            Ok(r) => break Ok(r),
            // The broker unreachable for a moment: keep waiting.
            Err(e) if e.code.is_none() && e.message.contains("broker unreachable") => {
                progress.set(format!(
                    "Waiting (broker unreachable: retrying) ... {}",
                    last.answer.request_id
                ));
            }
            Err(e) => break Err(e),
        }
    };
    progress.done();
    result
}

/// A grant's values, and each issued secret's parts ([`crate::granted`]): the broker's answer
/// `countersign_common::wire::GrantValues` with its fields' names, read otherwise: values and
/// parts into zeroizing strings, and parts in the order the broker wrote them (the grant's,
/// which decides who wins a clash), where the shared type holds plain strings in sorted maps.
/// A test reads each from the other.
#[derive(Deserialize, Serialize, Debug)]
pub struct Values {
    #[serde(default)]
    pub expires_at: Option<countersign_common::Time>,
    pub values: BTreeMap<String, Secret>,
    /// Absent from the answer when no granted secret is issued.
    #[serde(default, skip_serializing_if = "Parts::is_empty")]
    pub parts: Parts,
    /// The parts that are not secret, by secret (not masked).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub public_parts: granted::Public,
}

impl Values {
    /// The environment a command gets from these values, warning on standard error of each
    /// variable two of them give ([`crate::granted`]).
    #[must_use]
    pub fn granted(&self) -> Granted {
        let g = self.granted_quietly();
        for c in &g.clashes {
            eprintln!("countersign: {}", c.warning());
        }
        g
    }

    /// The same, without a warning.
    #[must_use]
    pub fn granted_quietly(&self) -> Granted {
        granted::of_release(&self.values, &self.parts, &self.public_parts)
    }
}

/// Releases a grant's values.
///
/// # Errors
/// The helper's or the broker's refusal.
pub async fn values(ctx: &Ctx, grant_id: &str) -> Result<Values, Fail> {
    let answer = ctx
        .session_call("POST", &format!("/v1/grants/{grant_id}/values"), None)
        .await?;
    answer.json().map_err(Fail::from)
}

/// Prints a release: as JSON, the broker's answer; otherwise NAME=value lines of the
/// environment `run` would give a command (the values, then the issued secrets' parts).
fn print_values(ctx: &Ctx, v: &Values) {
    ctx.print(v, || {
        v.granted()
            .env
            .iter()
            .map(|(k, s)| format!("{k}={}", s.expose()))
            .collect::<Vec<_>>()
            .join("\n")
    });
}

// ----- commands -----

pub async fn request(ctx: &Ctx, a: RequestArgs) -> Result<u8, Fail> {
    let created = create(ctx, &a.ask, &a.reason).await?;
    let req = wait(ctx, created, a.ask.no_wait, a.ask.timeout).await?;
    if req.answer.state == "granted" && a.print_values {
        let grant = req.answer.grant_id.clone().unwrap_or_default();
        let v = values(ctx, &grant).await?;
        if ctx.json {
            let mut out = req.raw.clone();
            if let Some(obj) = out.as_object_mut() {
                obj.insert(
                    "values".into(),
                    serde_json::to_value(&v.values).map_err(json_fail)?,
                );
                if !v.parts.is_empty() {
                    obj.insert(
                        "parts".into(),
                        serde_json::to_value(&v.parts).map_err(json_fail)?,
                    );
                }
            }
            ctx.print(&out, String::new);
        } else {
            ctx.note(&req.describe());
            print_values(ctx, &v);
        }
        return Ok(exit::SUCCESS);
    }
    ctx.print(&req.raw, || req.describe());
    Ok(req.exit())
}

pub async fn status(ctx: &Ctx, request_id: Option<String>) -> Result<u8, Fail> {
    if let Some(id) = request_id {
        let req = get(ctx, &id).await?;
        ctx.print(&req.raw, || req.describe());
        return Ok(req.exit());
    }
    let s = ctx.helper.status()?;
    ctx.print(&s, || describe_status(ctx, &s));
    Ok(exit::SUCCESS)
}

fn describe_session(s: &SessionInfo) -> String {
    let state = match s.state {
        SessionState::Enrolling => "enrolling".to_owned(),
        SessionState::Enrolled => format!(
            "enrolled as {}, lease until {}",
            s.enrollment_id.as_deref().unwrap_or("?"),
            s.lease_expires_at.as_deref().unwrap_or("?")
        ),
        SessionState::Failed => format!("enrollment failed: {}", s.error.as_deref().unwrap_or("?")),
        SessionState::Ended => format!("ended: {}", s.error.as_deref().unwrap_or("?")),
    };
    format!("{} (root pid {}): {state}", s.runtime_id, s.root_pid)
}

fn describe_status(ctx: &Ctx, s: &StatusInfo) -> String {
    let mut out = vec![
        format!(
            "helper:   {} (version {}, protocol {})",
            ctx.socket.display(),
            s.version,
            s.protocol
        ),
        format!("broker:   {}", s.broker_url),
    ];
    if let Some(c) = &s.console_url {
        out.push(format!("console:  {c}"));
    }
    out.push(match &s.credential {
        Some(c) => format!(
            "machine:  logged in{} (launcher credential {}{}{})",
            match (&c.login, &c.service) {
                (Some(l), _) => format!(" for {l} on {}", c.host),
                (None, Some(svc)) => format!(" as service {svc}"),
                _ => String::new(),
            },
            c.credential_id,
            c.expires_at
                .as_deref()
                .map(|e| format!(", until {e}"))
                .unwrap_or_default(),
            if c.expired { ", expired" } else { "" }
        ),
        None if s.login_pending => "machine:  a login is waiting for approval".to_owned(),
        None => "machine:  not logged in (countersign login --login EMAIL)".to_owned(),
    });
    out.push(match (&s.caller.standing, &s.caller.session) {
        (Standing::Session, Some(sess)) => {
            format!("you:      in session {}", describe_session(sess))
        }
        (Standing::Outside, _) => "you:      outside every session".to_owned(),
        (Standing::FormerSession, _) => "you:      left from a session that has ended".to_owned(),
        _ => "you:      your process ancestry cannot be followed (treated as inside a session)"
            .to_owned(),
    });
    for sess in &s.sessions {
        out.push(format!("session:  {}", describe_session(sess)));
    }
    out.join("\n")
}

pub async fn cancel(ctx: &Ctx, id: &str) -> Result<u8, Fail> {
    let state = cancel_request(ctx, id).await?;
    ctx.print(&json!({ "request_id": id, "state": state }), || {
        format!("request {id}: {state}")
    });
    Ok(exit::SUCCESS)
}

pub async fn grants(ctx: &Ctx) -> Result<u8, Fail> {
    let answer = ctx
        .session_call("GET", "/v1/enrollments/self", None)
        .await?;
    let raw: Value = answer.json()?;
    let me: wire::EnrollmentSelf = serde_json::from_value(raw.clone()).map_err(json_fail)?;
    ctx.print(&raw, || {
        let lines: Vec<String> = me
            .grants
            .iter()
            .map(|g| {
                format!(
                    "{}  request {}  approver {}  expires {}",
                    g.grant_id,
                    g.request_id,
                    g.approver.as_deref().unwrap_or("(policy)"),
                    g.expires_at
                        .as_ref()
                        .map_or_else(|| "when the session ends".to_owned(), wire::rfc3339),
                )
            })
            .collect();
        if lines.is_empty() {
            "no live grants".to_owned()
        } else {
            lines.join("\n")
        }
    });
    Ok(exit::SUCCESS)
}

pub async fn show_values(ctx: &Ctx, grant_id: &str) -> Result<u8, Fail> {
    let v = values(ctx, grant_id).await?;
    print_values(ctx, &v);
    Ok(exit::SUCCESS)
}

pub async fn revoke(ctx: &Ctx, grant_id: &str) -> Result<u8, Fail> {
    let answer = ctx
        .session_call("POST", &format!("/v1/grants/{grant_id}/revoke"), None)
        .await?;
    let raw: Value = answer.json()?;
    let revoked: wire::StateAnswer = serde_json::from_value(raw.clone()).map_err(json_fail)?;
    ctx.print(&raw, || format!("grant {grant_id}: {}", revoked.state));
    Ok(exit::SUCCESS)
}

// ----- the renewal worker -----

/// How one renewal went.
enum Renewal {
    Renewed(String),
    /// Never try again.
    Terminal(Fail),
    /// Try again later.
    Transient(Fail),
}

async fn renew_once(ctx: &Ctx) -> Renewal {
    let status = match ctx.helper.status() {
        Ok(s) => s,
        Err(e @ ClientError::Unreachable { .. }) => return Renewal::Transient(e.into()),
        Err(e) => return Renewal::Transient(e.into()),
    };
    let Some(session) = status
        .caller
        .session
        .filter(|_| status.caller.standing == Standing::Session)
    else {
        return Renewal::Terminal(
            Fail::new(
                exit::RENEWAL_TERMINAL,
                "this process is in no session (it has ended, or never began)",
            )
            .with_code(Some(HelperCode::NotASession.as_str().to_owned())),
        );
    };
    let terminal_state = |s: &SessionInfo| {
        Fail::new(
            exit::RENEWAL_TERMINAL,
            format!(
                "the session's enrollment is over: {}",
                s.error.as_deref().unwrap_or("?")
            ),
        )
        .with_code(s.broker_code.clone())
    };
    let id = match (session.state, &session.enrollment_id) {
        (SessionState::Enrolled, Some(id)) => id.clone(),
        (SessionState::Enrolling, _) => {
            return Renewal::Transient(Fail::failure("the session is still enrolling"));
        }
        _ => return Renewal::Terminal(terminal_state(&session)),
    };
    let path = format!("/v1/enrollments/{id}/renew");
    match ctx.session_call("POST", &path, None).await {
        Ok(a) => match a.json::<wire::Renewed>() {
            Ok(r) => Renewal::Renewed(wire::rfc3339(&r.lease_expires_at)),
            Err(e) => Renewal::Transient(e.into()),
        },
        Err(f) => {
            let terminal_broker = f
                .code
                .as_deref()
                .is_some_and(|c| countersign_broker_client::TERMINAL_RENEWAL_CODES.contains(&c));
            let terminal_helper =
                matches!(f.code.as_deref(), Some("NOT_A_SESSION" | "NOT_ENROLLED"));
            if terminal_broker || terminal_helper {
                Renewal::Terminal(Fail {
                    exit: exit::RENEWAL_TERMINAL,
                    ..f
                })
            } else {
                Renewal::Transient(f)
            }
        }
    }
}

pub async fn renew(ctx: &Ctx, a: RenewArgs) -> Result<u8, Fail> {
    let mut backoff = Duration::from_secs(1);
    loop {
        match renew_once(ctx).await {
            Renewal::Renewed(lease) => {
                backoff = Duration::from_secs(1);
                ctx.print(&json!({ "lease_expires_at": lease }), || {
                    format!("lease renewed until {lease}")
                });
                if a.once {
                    return Ok(exit::SUCCESS);
                }
                let half = chrono_left(&lease).map(|d| d / 2);
                let wait = half
                    .map_or(a.interval, |h| h.min(a.interval))
                    .max(Duration::from_secs(1));
                tokio::time::sleep(wait).await;
            }
            Renewal::Terminal(f) => return Err(f),
            Renewal::Transient(f) => {
                if a.once {
                    return Err(f);
                }
                eprintln!(
                    "countersign renew: {}; trying again in {}s",
                    f.message,
                    backoff.as_secs()
                );
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(a.interval).max(Duration::from_secs(1));
            }
        }
    }
}

/// Time until an RFC 3339 instant, by this machine's clock.
fn chrono_left(rfc3339: &str) -> Option<Duration> {
    let at = chrono::DateTime::parse_from_rfc3339(rfc3339).ok()?;
    let left = at.timestamp_millis() - chrono::Utc::now().timestamp_millis();
    (left > 0).then(|| Duration::from_millis(u64::try_from(left).unwrap_or(0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_left() {
        assert_eq!(chrono_left("2000-03-01T00:00:00Z"), None);
        assert!(chrono_left("2999-03-01T00:00:00Z").is_some());
        assert_eq!(chrono_left("nonsense"), None);
    }

    #[test]
    fn request_exits() {
        let r = |state: &str| {
            Req::parse(json!({"request_id": "r", "state": state})).expect("a request answer")
        };
        assert_eq!(r("granted").exit(), 0);
        assert_eq!(r("pending").exit(), 75);
        assert_eq!(r("denied").exit(), 77);
        assert_eq!(r("expired").exit(), 1);
    }

    /// A request is read as the broker writes its answer (`wire::RequestAnswer`), and kept as
    /// it came for `--json`.
    #[test]
    fn a_request_reads_as_the_broker_writes_it() {
        let at = chrono::DateTime::parse_from_rfc3339("2026-11-24T14:05:00Z")
            .map(|t| t.with_timezone(&chrono::Utc))
            .unwrap_or_default();
        let answer = RequestAnswer {
            approver: Some("ada@example.com".into()),
            coalesced: None,
            countersign: None,
            decided_at: Some(at),
            decision: Some(wire::DecisionBy {
                at,
                by: "ada@example.com".into(),
            }),
            grant_id: None,
            lifetime_seconds: Some(600),
            record_id: Some("rec".into()),
            request_id: "67e55044-10b1-426f-9247-bb680e5fe0c8".into(),
            secrets: vec![
                wire::SecretDecision {
                    decision: "deny".into(),
                    name: "PROD_DB".into(),
                },
                wire::SecretDecision {
                    decision: "approval".into(),
                    name: "GITHUB_TOKEN".into(),
                },
            ],
            state: "denied".into(),
        };
        let mut raw = serde_json::to_value(&answer).expect("serializes");
        if let Some(o) = raw.as_object_mut() {
            o.insert("future_field".into(), json!(1));
        }
        let req = Req::parse(raw.clone()).expect("reads");
        assert_eq!(req.answer, answer);
        assert_eq!(req.raw, raw, "kept as it came");
        assert_eq!(
            req.describe(),
            "denied by ada@example.com: request 67e55044-10b1-426f-9247-bb680e5fe0c8 (policy denies PROD_DB)"
        );
        assert_eq!(req.exit(), 77);
        // Not a request answer: refused, not guessed.
        assert!(Req::parse(json!({"state": "granted"})).is_err());
    }
}
