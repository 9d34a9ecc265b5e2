//! The session's requests and grants as the MCP server sees them: what it asked for (the broker
//! names no secret in a session's grant list, so the server remembers which names each of its
//! requests asked for), waiting for a person with progress reports, and releasing values.
//!
//! Nothing here formats a value: errors from the values route are rebuilt from the broker's
//! code and status alone.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use countersign_common::wire::EnrollmentSelf;
use serde_json::Value;

use crate::args::Ask;
use crate::ctx::Ctx;
use crate::exit::Fail;
use crate::session::{self, Req, Values};

use super::report::Reporter;

/// A request this server made.
#[derive(Debug, Clone)]
pub struct Tracked {
    pub names: Vec<String>,
    pub state: String,
    pub record_id: Option<String>,
    pub approver: Option<String>,
    pub grant_id: Option<String>,
}

/// The requests this server made, by id.
#[derive(Debug, Default)]
pub struct Book {
    requests: Mutex<HashMap<String, Tracked>>,
    /// The requests whose approval page the client was offered (once each).
    offered: Mutex<HashSet<String>>,
}

impl Book {
    pub fn note(&self, req: &Req, names: &[String]) {
        if let Ok(mut m) = self.requests.lock() {
            let names = m
                .get(&req.answer.request_id)
                .map(|t| t.names.clone())
                .unwrap_or_else(|| names.to_vec());
            m.insert(
                req.answer.request_id.clone(),
                Tracked {
                    names,
                    state: req.answer.state.clone(),
                    record_id: req.answer.record_id.clone(),
                    approver: req.answer.approver.clone(),
                    grant_id: req.answer.grant_id.clone(),
                },
            );
        }
    }

    #[must_use]
    pub fn get(&self, id: &str) -> Option<Tracked> {
        self.requests.lock().ok()?.get(id).cloned()
    }

    /// The names a request asked for, if this server made it.
    #[must_use]
    pub fn names(&self, request_id: &str) -> Option<Vec<String>> {
        self.get(request_id).map(|t| t.names)
    }

    /// Whether request `id`'s page is offered for the first time (and marks it offered).
    pub fn first_offer(&self, id: &str) -> bool {
        self.offered
            .lock()
            .map(|mut s| s.insert(id.to_owned()))
            .unwrap_or(false)
    }

    /// This server's requests last seen pending, with their ids.
    #[must_use]
    pub fn pending(&self) -> Vec<(String, Tracked)> {
        self.requests
            .lock()
            .map(|m| {
                m.iter()
                    .filter(|(_, t)| t.state == "pending")
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// The session's enrollment and live grants (`GET /v1/enrollments/self`, the broker's own
/// answer type).
///
/// # Errors
/// The helper's or the broker's refusal.
pub async fn describe(ctx: &Ctx) -> Result<EnrollmentSelf, Fail> {
    let answer = ctx
        .session_call("GET", "/v1/enrollments/self", None)
        .await?;
    Ok(answer.json()?)
}

/// A grant's values and parts. Errors carry the broker's code, never its body.
///
/// # Errors
/// When the grant is not live or the values cannot be released.
pub async fn values(ctx: &Ctx, grant_id: &str) -> Result<Values, Fail> {
    match session::values(ctx, grant_id).await {
        Ok(v) => Ok(v),
        Err(f) => Err(Fail::failure(format!(
            "grant {grant_id}: its values could not be released{}",
            f.code
                .as_deref()
                .map(|c| format!(" ({c})"))
                .unwrap_or_default()
        ))
        .with_code(f.code)),
    }
}

/// Where getting grants for some names stands.
#[derive(Debug)]
pub enum Outcome {
    /// Each requested name with the grant that holds it.
    Granted(BTreeMap<String, String>),
    /// A person has not decided yet.
    Pending(Req, Vec<String>),
    /// Denied by a person or the policy.
    Denied(Req),
    /// The request expired or was cancelled.
    Ended(Req),
}

/// Makes sure the session holds a live grant for each of `names`: reuses live grants of this
/// server's requests, waits on this server's pending request for the same names, or requests
/// the names not yet granted. Waits for a person at most `wait`, reporting progress.
///
/// # Errors
/// The helper's or the broker's refusal (unknown secret, mixed approvers, a request already
/// pending for some of the names).
pub async fn ensure(
    ctx: &Ctx,
    book: &Book,
    names: &[String],
    reason: &str,
    lifetime: Option<u64>,
    wait: Duration,
    report: &Reporter,
) -> Result<Outcome, Fail> {
    let mut holders: BTreeMap<String, String> = BTreeMap::new();
    if !names.is_empty() {
        let me = describe(ctx).await?;
        for g in &me.grants {
            for n in book.names(&g.request_id).unwrap_or_default() {
                holders.entry(n).or_insert_with(|| g.grant_id.clone());
            }
        }
    }
    let missing: Vec<String> = names
        .iter()
        .filter(|n| !holders.contains_key(*n))
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    if missing.is_empty() {
        return Ok(Outcome::Granted(
            names
                .iter()
                .filter_map(|n| holders.get(n).map(|g| (n.clone(), g.clone())))
                .collect(),
        ));
    }
    // This server's own pending request for exactly these names: wait on it again.
    let earlier = book.pending().into_iter().find(|(_, t)| {
        let mut a = t.names.clone();
        a.sort();
        a == missing
    });
    let req = match earlier {
        Some((id, _)) => {
            let r = session::get(ctx, &id).await?;
            book.note(&r, &missing);
            r
        }
        None => ask_for(ctx, book, &missing, reason, lifetime).await?,
    };
    let req = if req.answer.state == "pending" {
        wait_for(ctx, book, req, &missing, wait, report).await?
    } else {
        req
    };
    match req.answer.state.as_str() {
        "granted" => {
            let grant = req.answer.grant_id.clone().unwrap_or_default();
            for n in missing {
                holders.insert(n, grant.clone());
            }
            Ok(Outcome::Granted(
                names
                    .iter()
                    .filter_map(|n| holders.get(n).map(|g| (n.clone(), g.clone())))
                    .collect(),
            ))
        }
        "pending" => Ok(Outcome::Pending(req, missing)),
        "denied" => Ok(Outcome::Denied(req)),
        _ => Ok(Outcome::Ended(req)),
    }
}

/// A new request for `missing`, noted in this server's book; a `REQUEST_PENDING` refusal names
/// this server's pending requests that overlap them.
async fn ask_for(
    ctx: &Ctx,
    book: &Book,
    missing: &[String],
    reason: &str,
    lifetime: Option<u64>,
) -> Result<Req, Fail> {
    let ask = Ask {
        secrets: missing.to_vec(),
        lifetime,
        no_wait: true,
        timeout: None,
        session_id: None,
    };
    match session::create(ctx, &ask, reason).await {
        Ok(r) => {
            book.note(&r, missing);
            super::log(format!(
                "request {} for {}: {}",
                r.answer.request_id,
                missing.join(", "),
                r.answer.state
            ));
            Ok(r)
        }
        Err(f) if f.code.as_deref() == Some("REQUEST_PENDING") => {
            let overlapping: Vec<String> = book
                .pending()
                .into_iter()
                .filter(|(_, t)| t.names.iter().any(|n| missing.contains(n)))
                .map(|(id, t)| format!("{id} ({})", t.names.join(", ")))
                .collect();
            Err(Fail::failure(if overlapping.is_empty() {
                "a request for some of these secrets is already pending in this session".to_owned()
            } else {
                format!(
                    "a request for some of these secrets is already pending: {}; wait for it (request_status), cancel it (cancel_request), or ask for exactly its secrets",
                    overlapping.join("; ")
                )
            })
            .with_code(f.code))
        }
        Err(f) => Err(f),
    }
}

/// Words for who decides a request.
#[must_use]
pub fn approver_words(a: Option<&str>) -> String {
    match a {
        Some("anyone") => "anyone signed in to the approval console".to_owned(),
        Some(p) => p.to_owned(),
        None => "a person".to_owned(),
    }
}

/// Whether the broker said the request's approval needs the approver's passkey
/// (`"countersign": "passkey"`, docs/passkeys.md).
#[must_use]
pub fn needs_passkey(req: &Req) -> bool {
    req.answer.countersign.as_deref() == Some("passkey")
}

/// The approval page of a pending request (`<console>/requests/<request id>`: the console
/// names a request by the id its session was given), when the helper knows the console's URL.
pub fn approval_page(ctx: &Ctx, req: &Req) -> Option<String> {
    req.answer.record_id.as_deref()?;
    let console = ctx.helper.status().ok()?.console_url?;
    Some(format!(
        "{}/requests/{}",
        console.trim_end_matches('/'),
        req.answer.request_id
    ))
}

/// What a pending request waits for, in one line.
#[must_use]
pub fn waiting_line(req: &Req) -> String {
    format!(
        "waiting for approval of request {} by {}",
        req.answer.request_id,
        approver_words(req.answer.approver.as_deref()),
    )
}

/// Polls a pending request until a person decides or `wait` passes, reporting progress.
async fn wait_for(
    ctx: &Ctx,
    book: &Book,
    req: Req,
    names: &[String],
    wait: Duration,
    report: &Reporter,
) -> Result<Req, Fail> {
    let started = Instant::now();
    let deadline = started + wait;
    let line = waiting_line(&req);
    super::log(&line);
    report.say(&line).await;
    // A passkey approval happens on the person's own device, in the console: a client that
    // takes URL-mode elicitations is handed the page (once per request) before the wait.
    if report.shows_pages()
        && needs_passkey(&req)
        && let Some(url) = approval_page(ctx, &req)
        && book.first_offer(&req.answer.request_id)
    {
        report.show_page(
            &req.answer.request_id,
            format!("Countersign: {line}. Open the approval page to approve it with a passkey."),
            url,
        );
    }
    let mut last = req;
    let mut said = Instant::now();
    while Instant::now() + ctx.poll <= deadline {
        tokio::time::sleep(ctx.poll).await;
        match session::get(ctx, &last.answer.request_id).await {
            Ok(r) if r.answer.state == "pending" => last = r,
            Ok(r) => {
                book.note(&r, names);
                super::log(format!(
                    "request {}: {}",
                    r.answer.request_id, r.answer.state
                ));
                return Ok(r);
            }
            // The broker unreachable for a moment: keep waiting.
            Err(e) if e.code.is_none() && e.message.contains("broker unreachable") => {}
            Err(e) => return Err(e),
        }
        if said.elapsed() >= Duration::from_secs(5) {
            said = Instant::now();
            report
                .say(&format!(
                    "{line}: still waiting after {} s",
                    started.elapsed().as_secs()
                ))
                .await;
        }
    }
    book.note(&last, names);
    Ok(last)
}

/// The request's answer as a JSON object of facts (no value is ever in a request).
#[must_use]
pub fn facts(req: &Req, names: Option<&[String]>) -> Value {
    let mut v = serde_json::json!({
        "request_id": req.answer.request_id,
        "state": req.answer.state,
        "record_id": req.answer.record_id,
        "approver": req.answer.approver,
        "grant_id": req.answer.grant_id,
        "decided_at": req.answer.decided_at,
        "decided_by": req.answer.decision.as_ref().map(|d| &d.by),
    });
    if let (Some(n), Some(obj)) = (names, v.as_object_mut()) {
        obj.insert("secrets".into(), serde_json::json!(n));
    }
    v
}
