//! The console tools: asks over the console API (`POST /api/v1/issues/{key}/asks`, `GET
//! /api/v1/asks/{id}`, console protocol §6.3, acting as this session), and the session link
//! (protocol §4.2) over which messages are delivered to this session, with replies over the API.
//!
//! The link (`countersign-link-client`) is held from the start to the end of the server, so the
//! session is live on the console while the agent runs: `hello` (title, roles, mode `send`),
//! then every `deliver` is acknowledged (`delivered`) and queued for `read_messages`. A dropped link is opened again
//! (1 s, doubling to 30 s); a link replaced by a newer one for the same session id (4409) or
//! refused for its `hello` (4400) is not.
//!
//! The agent token is read from a file or `COUNTERSIGN_AGENT_TOKEN`, never from the command
//! line, and is kept out of the environment of the commands the server runs.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use countersign_launcher_proto::Secret;
use countersign_link_client::{Advert, Event, Link, LinkError, Mode, Options};
use rmcp::model::{CallToolResult, ContentBlock};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::args::McpArgs;
use crate::ctx::Ctx;
use crate::exit::Fail;

use super::{SessionFacts, log};

// ----- the console tools' parameters -----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AskParams {
    /// The issue key the question is about (e.g. PAY-12).
    pub issue: String,
    /// The question (at most 2,000 characters).
    pub question: String,
    /// Answer options the person may pick (labels, at most 20); none for a free-text answer.
    #[serde(default)]
    pub options: Vec<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AnswerParams {
    /// The ask id ask_person answered.
    pub ask_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplyParams {
    /// The id of the message (or mention's comment) to reply to, as read_messages answered it.
    pub message_id: String,
    /// The reply's text.
    pub body: String,
}

/// The environment variable that may hold the agent token.
pub const TOKEN_ENV: &str = "COUNTERSIGN_AGENT_TOKEN";
/// Messages kept for `read_messages` at most (the oldest are dropped beyond).
const QUEUE_LIMIT: usize = 1000;

/// What the link delivered, waiting to be read.
#[derive(Debug, Default)]
struct Inbox {
    queue: Mutex<VecDeque<Value>>,
    /// Delivered ids and their kind (`message` or `mention`), for replies.
    kinds: Mutex<HashMap<String, String>>,
    arrived: Notify,
    state: Mutex<String>,
}

/// The console as this session uses it.
pub struct Console {
    http: reqwest::Client,
    base: String,
    token: Secret,
    session_id: String,
    inbox: Arc<Inbox>,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("base", &self.base)
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

fn role_ok(r: &str) -> bool {
    let b = r.as_bytes();
    !b.is_empty()
        && b.len() <= 64
        && b[0].is_ascii_lowercase()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
}

/// Reads the agent token: the file, else the environment (then removed from it).
fn token(args: &McpArgs) -> Result<Option<Secret>, Fail> {
    if let Some(p) = &args.agent_token_file {
        let text = std::fs::read_to_string(p).map_err(|e| {
            Fail::usage(format!("reading the agent token file {}: {e}", p.display()))
        })?;
        let t = text.trim();
        if t.is_empty() {
            return Err(Fail::usage(format!(
                "the agent token file {} is empty",
                p.display()
            )));
        }
        return Ok(Some(Secret::new(t.to_owned())));
    }
    match std::env::var(TOKEN_ENV) {
        Ok(t) if !t.trim().is_empty() => Ok(Some(Secret::new(t.trim().to_owned()))),
        _ => Ok(None),
    }
}

impl Console {
    /// The console, when an agent token is configured.
    ///
    /// # Errors
    /// A token file that cannot be read or is empty, a token without a console URL, or a bad
    /// title or role (exit 2).
    pub fn configure(
        ctx: &Ctx,
        args: &McpArgs,
        facts: &SessionFacts,
    ) -> Result<Option<Self>, Fail> {
        let Some(token) = token(args)? else {
            return Ok(None);
        };
        let base = match &args.console_url {
            Some(u) => u.clone(),
            None => ctx.helper.status()?.console_url.ok_or_else(|| {
                Fail::usage("an agent token is configured but no console URL: give --console-url")
            })?,
        };
        let base = base.trim_end_matches('/').to_owned();
        let url = reqwest::Url::parse(&base)
            .map_err(|e| Fail::usage(format!("console URL {base:?}: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(Fail::usage(format!(
                "console URL {base:?}: not http or https"
            )));
        }
        if let Some(r) = args.roles.iter().find(|r| !role_ok(r)) {
            return Err(Fail::usage(format!(
                "role {r:?}: a role is lower case letters, digits, '.', '_' and '-', starting with a letter, at most 64"
            )));
        }
        if args.roles.len() > 32 {
            return Err(Fail::usage("at most 32 roles"));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(30))
            .user_agent(concat!("countersign-mcp/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Fail::failure(format!("HTTP client: {e}")))?;
        Ok(Some(Self {
            http,
            base,
            token,
            session_id: facts.session_id.clone(),
            inbox: Arc::new(Inbox::default()),
        }))
    }

    /// The agent token, to be masked in command output.
    #[must_use]
    pub fn token(&self) -> &Secret {
        &self.token
    }

    /// Opens the session link in the background.
    #[must_use]
    pub fn start_link(&self, args: &McpArgs) -> LinkTask {
        let title = args
            .title
            .clone()
            .unwrap_or_else(|| format!("countersign mcp ({})", args.label));
        let title: String = title
            .chars()
            .filter(|c| !c.is_control())
            .take(200)
            .collect();
        let title = if title.is_empty() {
            "countersign mcp".to_owned()
        } else {
            title
        };
        let roles: Vec<&str> = args.roles.iter().map(String::as_str).collect();
        let options = Options::new(
            &self.base,
            self.token.expose(),
            &self.session_id,
            Advert::new(&title).roles(&roles).modes(&[Mode::Send]),
        );
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(hold_link(options, Arc::clone(&self.inbox), stop_rx));
        LinkTask {
            task,
            stop: stop_tx,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Reply {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(self.token.expose());
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = match req.send().await {
            Ok(r) => r,
            Err(e) => return Err(format!("console unreachable: {}", without_url(&e))),
        };
        let status = resp.status().as_u16();
        let v: Value = resp.json().await.unwrap_or(Value::Null);
        if (200..300).contains(&status) {
            Ok(v)
        } else {
            Err(format!(
                "console refused ({}): {}",
                v["code"].as_str().unwrap_or(&format!("HTTP {status}")),
                v["error"].as_str().unwrap_or("")
            ))
        }
    }

    /// `ask_person`.
    pub async fn ask(&self, p: &AskParams) -> CallToolResult {
        if !issue_key_ok(&p.issue) {
            return error_result("issue is an issue key such as PAY-12".into());
        }
        let n = p.question.trim().chars().count();
        if !(1..=2000).contains(&n) {
            return error_result("question is 1 to 2,000 characters".into());
        }
        if p.options.len() > 20 || p.options.iter().any(|o| o.trim().is_empty()) {
            return error_result("options are at most 20 non-empty labels".into());
        }
        #[derive(Serialize)]
        struct Opt<'a> {
            label: &'a str,
        }
        let mut body = json!({ "question": p.question.trim(), "actor": self.session_id });
        if !p.options.is_empty()
            && let Some(o) = body.as_object_mut()
        {
            let opts: Vec<Opt> = p.options.iter().map(|l| Opt { label: l.trim() }).collect();
            o.insert("options".into(), json!(opts));
        }
        let path = format!("/api/v1/issues/{}/asks", p.issue);
        match self.call(reqwest::Method::POST, &path, Some(body)).await {
            Ok(ask) => {
                let id = ask["id"].as_str().unwrap_or("?").to_owned();
                log(format!("ask {id} opened on {}", p.issue));
                ok_result(
                    format!(
                        "ask {id} is open on {}: a person answers it in the approval console; read it later with get_answer {id}",
                        p.issue
                    ),
                    json!({
                        "ask_id": id,
                        "state": ask["state"],
                        "issue": p.issue,
                        "options": ask["options"],
                    }),
                )
            }
            Err(e) => error_result(e),
        }
    }

    /// `get_answer`.
    pub async fn answer(&self, p: &AnswerParams) -> CallToolResult {
        let Some(ask_id) = countersign_common::ids::uuid_text(&p.ask_id) else {
            return error_result("ask_id is a UUID".into());
        };
        let path = format!(
            "/api/v1/asks/{ask_id}?session={}",
            self.session_id.replace('%', "%25")
        );
        match self.call(reqwest::Method::GET, &path, None).await {
            Ok(ask) => {
                let state = ask["state"].as_str().unwrap_or("?").to_owned();
                let mut text = format!("ask {}: {state}", p.ask_id);
                if state == "answered" {
                    let picked: Vec<String> = ask["answer"]["options"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|o| {
                            let id = o
                                .as_str()
                                .map(str::to_owned)
                                .unwrap_or_else(|| o["id"].as_str().unwrap_or_default().to_owned());
                            ask["options"]
                                .as_array()
                                .into_iter()
                                .flatten()
                                .find(|x| x["id"].as_str() == Some(id.as_str()))
                                .and_then(|x| x["label"].as_str())
                                .map_or(id.clone(), |l| format!("{l} ({id})"))
                        })
                        .collect();
                    let by = ask["answer"]["by"]["login"].as_str().unwrap_or("a person");
                    text.push_str(&format!(" by {by}"));
                    if !picked.is_empty() {
                        text.push_str(&format!("; chose {}", picked.join(", ")));
                    }
                    if let Some(t) = ask["answer"]["text"].as_str()
                        && !t.is_empty()
                    {
                        text.push_str(&format!("; wrote: {t}"));
                    }
                }
                ok_result(
                    text,
                    json!({
                        "ask_id": ask["id"],
                        "state": ask["state"],
                        "question": ask["question"],
                        "options": ask["options"],
                        "answer": ask["answer"],
                        "replies": ask["replies"],
                    }),
                )
            }
            Err(e) => error_result(e),
        }
    }

    /// `read_messages`: everything delivered since the last read, waiting up to `wait` for one.
    pub async fn read(&self, wait: Duration) -> CallToolResult {
        let take = || -> Vec<Value> {
            self.inbox
                .queue
                .lock()
                .map(|mut q| q.drain(..).collect())
                .unwrap_or_default()
        };
        let mut got = take();
        if got.is_empty() && !wait.is_zero() {
            let arrived = self.inbox.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            got = take();
            if got.is_empty() {
                let _ = tokio::time::timeout(wait, arrived).await;
                got = take();
            }
        }
        let link = self
            .inbox
            .state
            .lock()
            .map(|s| s.clone())
            .unwrap_or_default();
        let text = if got.is_empty() {
            format!("no new messages (link: {link})")
        } else {
            got.iter()
                .map(|m| {
                    format!(
                        "{} {} from {}{}: {}",
                        m["kind"].as_str().unwrap_or("message"),
                        m["id"].as_str().unwrap_or("?"),
                        author_words(&m["author"]),
                        m["issue"]
                            .as_str()
                            .map(|i| format!(" on {i}"))
                            .unwrap_or_default(),
                        m["body"].as_str().unwrap_or("")
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        ok_result(text, json!({ "messages": got, "link": link }))
    }

    /// `reply`.
    pub async fn reply(&self, p: &ReplyParams) -> CallToolResult {
        let Some(id) = countersign_common::ids::uuid_text(&p.message_id) else {
            return error_result("message_id is a UUID".into());
        };
        let n = p.body.chars().count();
        if !(1..=65_536).contains(&n) {
            return error_result("body is 1 to 65,536 characters".into());
        }
        let kind = self
            .inbox
            .kinds
            .lock()
            .ok()
            .and_then(|k| k.get(&id).cloned())
            .unwrap_or_else(|| "message".into());
        let path = if kind == "mention" {
            format!("/api/v1/comments/{id}/replies")
        } else {
            format!("/api/v1/messages/{id}/replies")
        };
        let body = json!({ "actor": self.session_id, "body": p.body });
        match self.call(reqwest::Method::POST, &path, Some(body)).await {
            Ok(v) => ok_result(
                format!("replied to {kind} {id}"),
                json!({ "replied_to": id, "kind": kind, "reply_id": v["id"] }),
            ),
            Err(e) => error_result(e),
        }
    }
}

type Reply = Result<Value, String>;

fn without_url(e: &reqwest::Error) -> String {
    let mut s = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

fn author_words(a: &Value) -> String {
    match a["kind"].as_str() {
        Some("user") => a["login"].as_str().unwrap_or("a person").to_owned(),
        Some("agent") => format!(
            "session {}",
            a["session"].as_str().unwrap_or("(unnamed agent)")
        ),
        Some("system") => a["name"].as_str().unwrap_or("the system").to_owned(),
        _ => "someone".to_owned(),
    }
}

fn issue_key_ok(k: &str) -> bool {
    let Some((p, n)) = k.split_once('-') else {
        return false;
    };
    let pb = p.as_bytes();
    (2..=10).contains(&pb.len())
        && pb[0].is_ascii_uppercase()
        && pb
            .iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
        && !n.is_empty()
        && !n.starts_with('0')
        && n.bytes().all(|c| c.is_ascii_digit())
}

fn ok_result(text: String, facts: Value) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(text)]);
    r.structured_content = Some(facts);
    r
}

fn error_result(text: String) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(text.clone())]);
    r.structured_content = Some(json!({ "state": "error", "error": text }));
    r
}

/// The link task; stopped (its socket closed) by [`LinkTask::stop`].
#[derive(Debug)]
pub struct LinkTask {
    task: tokio::task::JoinHandle<()>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl LinkTask {
    pub async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(Duration::from_secs(1), self.task).await;
    }
}

fn set_state(inbox: &Inbox, s: &str) {
    if let Ok(mut st) = inbox.state.lock() {
        s.clone_into(&mut st);
    }
}

/// How one link ended.
enum Ended {
    /// Stopped by the server.
    Stopped,
    /// Never to be opened again.
    Final(String),
    /// Open it again.
    Retry(String),
}

async fn hold_link(
    options: Options,
    inbox: Arc<Inbox>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut backoff = Duration::from_secs(1);
    set_state(&inbox, "connecting");
    loop {
        let ended = once(options.clone(), &inbox, &mut stop).await;
        match ended {
            Ended::Stopped => {
                set_state(&inbox, "closed");
                return;
            }
            Ended::Final(why) => {
                log(format!("console link closed for good: {why}"));
                set_state(&inbox, &format!("closed: {why}"));
                return;
            }
            Ended::Retry(why) => {
                log(format!(
                    "console link: {why}; opening it again in {} s",
                    backoff.as_secs()
                ));
                set_state(&inbox, &format!("reconnecting: {why}"));
            }
        }
        tokio::select! {
            () = tokio::time::sleep(backoff) => {}
            _ = stop.changed() => { set_state(&inbox, "closed"); return; }
        }
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

/// One link, from connecting to its close.
async fn once(
    options: Options,
    inbox: &Inbox,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Ended {
    let connected = tokio::select! {
        c = Link::connect(options) => c,
        _ = stop.changed() => return Ended::Stopped,
    };
    let mut link = match connected {
        Ok(l) => l,
        Err(LinkError::Closed { code, reason }) if matches!(code, 4400 | 4409) => {
            return Ended::Final(format!("closed by the console ({code} {reason})"));
        }
        Err(e @ LinkError::Connect(_)) if e.to_string().contains("HTTP error: 40") => {
            // 400 (a bad session id), 401 (a bad token), 403 (not an agent): no retry mends it.
            return Ended::Final(e.to_string());
        }
        Err(e) => return Ended::Retry(e.to_string()),
    };
    set_state(inbox, "live");
    log("console link live");
    let handle = link.handle();
    loop {
        let event = tokio::select! {
            e = link.next() => e,
            _ = stop.changed() => {
                handle.close();
                let _ = tokio::time::timeout(Duration::from_secs(1), async {
                    while link.next().await.is_some() {}
                }).await;
                return Ended::Stopped;
            }
        };
        match event {
            Some(Event::Delivery(d)) => {
                let kind = d.delivery.kind.clone();
                let id = d.delivery.id.clone();
                if let Ok(mut k) = inbox.kinds.lock() {
                    k.insert(id.clone(), kind.clone());
                }
                let entry = json!({
                    "kind": kind,
                    "id": id,
                    "attempt": d.delivery.attempt,
                    "thread_id": d.thread_id,
                    "issue": d.issue,
                    "mode": d.mode,
                    "author": d.author,
                    "body": d.body,
                    "notice": d.notice,
                });
                if let Ok(mut q) = inbox.queue.lock() {
                    if q.len() >= QUEUE_LIMIT {
                        q.pop_front();
                    }
                    q.push_back(entry);
                }
                inbox.arrived.notify_waiters();
                log(format!("{kind} {id} delivered"));
            }
            // This session serves no relay (it does not advertise the capability).
            Some(Event::RelayOpen { .. } | Event::RelayClose { .. }) => {}
            Some(Event::Closed { code, reason }) => {
                let why = format!(
                    "closed by the console ({} {reason})",
                    code.map(|c| c.to_string()).unwrap_or_default()
                );
                return if matches!(code, Some(4400 | 4409)) {
                    Ended::Final(why)
                } else {
                    Ended::Retry(why)
                };
            }
            None => return Ended::Retry("the link ended".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn issue_keys_and_roles() {
        for k in ["PAY-12", "AB-1", "A1B2-999"] {
            assert!(issue_key_ok(k), "{k}");
        }
        for k in [
            "pay-12",
            "P-1",
            "PAY-0",
            "PAY-01",
            "PAY",
            "PAY-",
            "ABCDEFGHIJK-1",
        ] {
            assert!(!issue_key_ok(k), "{k}");
        }
        assert!(role_ok("reviewer"));
        assert!(role_ok("ci.bot-2"));
        assert!(!role_ok("Reviewer"));
        assert!(!role_ok(""));
    }
}
