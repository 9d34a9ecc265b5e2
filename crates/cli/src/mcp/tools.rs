//! The MCP tools ([`Server`]), with [`rmcp`]'s tool router.
//!
//! Every result and error is built here from names, ids, states and masked output: a value never
//! reaches one (`no_value` in each description says so to the model and its user). Requests the
//! server waits on report progress (`notifications/progress`) when the client sent a progress
//! token, and a wait that ends undecided answers a result that says what it waits for, so a
//! client with a short tool timeout still learns the request id.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use countersign_launcher_proto::Secret;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolResult, ContentBlock, Implementation, RequestMetaObject, ServerCapabilities,
    ServerConfig,
};
use rmcp::{Peer, RoleServer, ServerHandler, tool, tool_handler, tool_router};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::ctx::Ctx;
use crate::exit::Fail;
use crate::granted;
use crate::session::{self, Req, Values};

use super::console::{AnswerParams, AskParams, Console, ReplyParams};
use super::exec::{self, Commands};
use super::report::Reporter;
use super::requests::{self, Book, Outcome};
use super::{SessionFacts, log};

/// A tool's description: its parts, then [`NO_VALUE`] (a literal, as `concat!` takes).
macro_rules! description {
    ($($part:literal),*) => {
        concat!(
            $($part,)*
            "No tool result, error or log line of this server ever carries a secret's value: they are built from secret names, request, record and grant ids, and masked output only."
        )
    };
}

/// Said in every tool's description.
pub const NO_VALUE: &str = description!();

const RUN_DESCRIPTION: &str = description!(
    "Run a shell command (/bin/sh -c) with secrets in its environment, without the model ever seeing them. ",
    "Requests the named secrets for this session (each value goes into the environment variable of its name; ",
    "a credential made for the grant, such as a database's, also sets the variables its tools read: PGHOST, PGPORT, ",
    "PGDATABASE, PGUSER, PGPASSWORD, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY); ",
    "a grant this session already holds for a name is reused. If the policy asks a person, reports progress ",
    "\"waiting for approval of request <request id>\" and waits up to `wait` seconds; still undecided, it answers ",
    "state \"pending\" with the request id and the approval page's URL (approval_url; passkey is ",
    "true when the person approves with their passkey), without running the command: tell the user to open that ",
    "page (or which request to approve in the approval console: it shows and finds the request by that id), then call run_with_secrets again with the same secrets (it waits ",
    "on the same request) or check request_status. Once granted, runs the command (standard input empty, stopped ",
    "after `timeout` seconds) and answers its exit code and its standard output and error, in which every ",
    "granted value and its base64, URL and JSON encodings are replaced by <concealed by countersign>; if a ",
    "value is too short to mask, the output is withheld. "
);
const STATUS_DESCRIPTION: &str = description!(
    "The state of a secret request of this session (pending, granted, denied, expired, cancelled), ",
    "with its approver, grant id, record id and the secret names it asked for. "
);
const CANCEL_DESCRIPTION: &str = description!(
    "Cancel a pending secret request of this session (the person is no longer asked). "
);
const GRANTS_DESCRIPTION: &str = description!(
    "This session's live grants: grant and request ids, the secret names each holds, approver, and when each ",
    "expires (null: when this MCP server's session ends). Names and expiries only. "
);
const ASK_DESCRIPTION: &str = description!(
    "Ask a person a question on an issue of the approval console (an ask, with optional answer options). ",
    "Answers the ask's id at once, without waiting: read the answer later with get_answer (asks outlive this ",
    "server and its session). "
);
const ANSWER_DESCRIPTION: &str = description!(
    "Read an ask: its state (open, answered, retracted, resolved), the answer (selected options, text, who, ",
    "when) and replies. "
);
const READ_DESCRIPTION: &str = description!(
    "Messages delivered to this session over its console link since the last read (people's and other ",
    "sessions' messages, mentions, and the broker's notices of requests that expired undecided); waits up to ",
    "`wait` seconds for one when there is none. "
);
const REPLY_DESCRIPTION: &str =
    description!("Reply to a message (or mention) delivered to this session, by its id. ");

/// The console tools, offered only with a console configured.
pub const CONSOLE_TOOLS: &[&str] = &["ask_person", "get_answer", "read_messages", "reply"];

/// The longest `timeout` and `wait`, in seconds.
const MAX_SECONDS: f64 = 3600.0;
/// The default command time limit.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

// ----- parameters -----

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// The command line, run with /bin/sh -c.
    pub command: String,
    /// Secret names (upper case, digits and _, e.g. GITHUB_TOKEN); each value is put in the
    /// environment variable of its name (an issued secret also sets its parts: PGPASSWORD …).
    /// May be empty.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Why the command needs these secrets, shown to the person who approves (1 to 1,000
    /// characters).
    pub reason: String,
    /// The longest the command may run, in seconds (default 300, at most 3600); then its process
    /// group is stopped.
    #[serde(default)]
    pub timeout: Option<f64>,
    /// How long this call waits for a person to approve, in seconds (default: the server's, 25;
    /// at most 3600; 0 answers at once). The request stays pending after it.
    #[serde(default)]
    pub wait: Option<f64>,
    /// How long a grant made now lasts, in seconds (default: until this server's session ends).
    #[serde(default)]
    pub lifetime: Option<u64>,
    /// The working directory (default: the server's).
    #[serde(default)]
    pub cwd: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequestIdParams {
    /// A request id (a UUID) of this session, as run_with_secrets answered it.
    pub request_id: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// How long to wait for a message when none is waiting, in seconds (default 0, at most 600).
    #[serde(default)]
    pub wait: Option<f64>,
}

// ----- results -----

fn text_result(text: String, facts: Value, error: bool) -> CallToolResult {
    let mut r = if error {
        CallToolResult::error(vec![ContentBlock::text(text)])
    } else {
        CallToolResult::success(vec![ContentBlock::text(text)])
    };
    r.structured_content = Some(facts);
    r
}

fn fail_result(f: &Fail) -> CallToolResult {
    text_result(
        f.message.clone(),
        json!({ "state": "error", "code": f.code, "error": f.message }),
        true,
    )
}

fn refuse(message: impl Into<String>) -> CallToolResult {
    fail_result(&Fail::usage(message.into()))
}

fn seconds(v: Option<f64>, default: Duration, name: &str) -> Result<Duration, CallToolResult> {
    match v {
        None => Ok(default),
        Some(s) if s.is_finite() && (0.0..=MAX_SECONDS).contains(&s) => {
            Ok(Duration::from_secs_f64(s))
        }
        Some(_) => Err(refuse(format!(
            "{name} is a number of seconds from 0 to {MAX_SECONDS}"
        ))),
    }
}

// ----- the server -----

/// The MCP server: the session it acts for and its tools.
#[derive(Debug, Clone)]
pub struct Server {
    ctx: Arc<Ctx>,
    facts: SessionFacts,
    book: Arc<Book>,
    commands: Commands,
    default_wait: Duration,
    console: Option<Arc<Console>>,
    tool_router: ToolRouter<Self>,
}

impl Server {
    #[must_use]
    pub fn new(
        ctx: Arc<Ctx>,
        facts: SessionFacts,
        default_wait: Duration,
        console: Option<Console>,
    ) -> Self {
        let mut tool_router = Self::tool_router();
        if console.is_none() {
            for name in CONSOLE_TOOLS {
                tool_router.remove_route(name);
            }
        }
        Self {
            ctx,
            facts,
            book: Arc::new(Book::default()),
            commands: Commands::default(),
            default_wait,
            console: console.map(Arc::new),
            tool_router,
        }
    }

    /// The commands running now (stopped when the server stops).
    #[must_use]
    pub fn commands(&self) -> Commands {
        self.commands.clone()
    }

    async fn run_checked(&self, p: RunParams, report: &Reporter) -> CallToolResult {
        if p.command.trim().is_empty() {
            return refuse("command is empty");
        }
        let n = p.reason.trim().chars().count();
        if !(1..=1000).contains(&n) {
            return refuse("reason is 1 to 1,000 characters");
        }
        for s in &p.secrets {
            if let Err(e) = crate::args::parse_secret_name(s) {
                return refuse(format!("{s:?}: {e}"));
            }
        }
        if p.lifetime == Some(0) {
            return refuse("lifetime is a positive number of seconds");
        }
        let limit = match seconds(p.timeout, DEFAULT_TIMEOUT, "timeout") {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => return refuse("timeout is a positive number of seconds"),
            Err(r) => return r,
        };
        let wait = match seconds(p.wait, self.default_wait, "wait") {
            Ok(d) => d,
            Err(r) => return r,
        };
        let cwd = p.cwd.as_ref().map(PathBuf::from);
        if let Some(d) = &cwd
            && !d.is_dir()
        {
            return refuse(format!("cwd {} is not a directory", d.display()));
        }
        let names = p.secrets.clone();
        let outcome = match requests::ensure(
            &self.ctx,
            &self.book,
            &names,
            p.reason.trim(),
            p.lifetime,
            wait,
            report,
        )
        .await
        {
            Ok(o) => o,
            Err(f) => return fail_result(&f),
        };
        let holders = match outcome {
            Outcome::Granted(h) => h,
            Outcome::Pending(req, names) => return pending_result(&self.ctx, &req, &names),
            Outcome::Denied(req) => {
                let text = format!("{}; the command was not run", req.describe());
                return text_result(text, requests::facts(&req, None), true);
            }
            Outcome::Ended(req) => {
                let text = format!("{}; the command was not run", req.describe());
                return text_result(text, requests::facts(&req, None), true);
            }
        };
        self.run_granted(&p, &names, &holders, cwd.as_ref(), limit, report)
            .await
    }

    async fn run_granted(
        &self,
        p: &RunParams,
        names: &[String],
        holders: &BTreeMap<String, String>,
        cwd: Option<&PathBuf>,
        limit: Duration,
        report: &Reporter,
    ) -> CallToolResult {
        // Every live grant's values: the command's own, and the others to mask (a command in
        // the session may release them itself).
        let mut released = match self.released(holders).await {
            Ok(r) => r,
            Err(result) => return result,
        };
        let env = match env_of(names, holders, &released) {
            Ok(env) => env,
            Err(result) => return result,
        };
        log(format!(
            "running a command with {}",
            if names.is_empty() {
                "no secrets".to_owned()
            } else {
                names.join(", ")
            }
        ));
        let ran = exec::run(
            &p.command,
            cwd,
            &env,
            &self.ctx.socket,
            limit,
            &self.commands,
            report,
        )
        .await;
        drop(env);
        // Grants the command got for itself while it ran.
        self.release_new(&mut released).await;
        let token = self
            .console
            .as_ref()
            .map(|c| ("the console agent token", c.token()));
        // Every value and every part of an issued secret's credential.
        let masked: Vec<(String, Secret)> = released
            .values()
            .flat_map(|v| v.granted_quietly().masked)
            .collect();
        let all = masked.iter().map(|(k, v)| (k.as_str(), v)).chain(token);
        let (finished, shown) = ran.mask(all);
        drop(masked);
        drop(released);
        let grants: BTreeMap<&String, &String> = holders.iter().collect();
        let mut facts = json!({
            "state": "ran",
            "exit_code": finished.exit_code,
            "signal": finished.signal,
            "timed_out": finished.timed_out,
            "secrets": names,
            "grants": grants,
        });
        if let Some(e) = &finished.spawn_error {
            return text_result(
                format!("the command could not be started: {e}"),
                json!({ "state": "error", "error": e }),
                true,
            );
        }
        text_result(ran_text(&finished, shown, &mut facts, limit), facts, false)
    }

    /// The values of every live grant of this session and of the grants `holders` names: a
    /// holder's that cannot be read fails the call; another's ended meanwhile.
    async fn released(
        &self,
        holders: &BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, Values>, CallToolResult> {
        let before = match requests::describe(&self.ctx).await {
            Ok(me) => me.grants,
            Err(f) => return Err(fail_result(&f)),
        };
        let mut wanted: Vec<String> = holders.values().cloned().collect();
        wanted.extend(before.iter().map(|g| g.grant_id.clone()));
        wanted.sort();
        wanted.dedup();
        let mut released = BTreeMap::new();
        for g in &wanted {
            match requests::values(&self.ctx, g).await {
                Ok(v) => {
                    released.insert(g.clone(), v);
                }
                Err(f) if holders.values().any(|h| h == g) => return Err(fail_result(&f)),
                Err(_) => {} // ended meanwhile: nothing of it to mask that the command can get
            }
        }
        Ok(released)
    }

    /// Adds the values of grants this session holds now and `released` does not (a command
    /// may have got some for itself), to be masked too.
    async fn release_new(&self, released: &mut BTreeMap<String, Values>) {
        if let Ok(me) = requests::describe(&self.ctx).await {
            for g in me.grants {
                if !released.contains_key(&g.grant_id)
                    && let Ok(v) = requests::values(&self.ctx, &g.grant_id).await
                {
                    released.insert(g.grant_id.clone(), v);
                }
            }
        }
    }
}

/// The command's environment: each name's value from the grant that holds it, and the parts
/// of the issued ones ([`crate::granted`]): grants in the order the call first names them,
/// each grant's parts in its order, the first part of a variable winning (a clash is logged).
fn env_of(
    names: &[String],
    holders: &BTreeMap<String, String>,
    released: &BTreeMap<String, Values>,
) -> Result<Vec<(String, Secret)>, CallToolResult> {
    let mut values: Vec<(&str, &Secret)> = Vec::new();
    let mut grants: Vec<&String> = Vec::new();
    for n in names {
        let holder = holders.get(n);
        let value = holder
            .and_then(|g| released.get(g))
            .and_then(|v| v.values.get(n));
        match (holder, value) {
            (Some(g), Some(v)) => {
                values.push((n.as_str(), v));
                if !grants.contains(&g) {
                    grants.push(g);
                }
            }
            _ => {
                return Err(refuse(format!(
                    "the grant for {n} holds no value of that name; the command was not run"
                )));
            }
        }
    }
    let parts = grants
        .iter()
        .filter_map(|g| released.get(*g))
        .flat_map(|v| v.parts.0.iter())
        .filter(|(s, _)| names.contains(s))
        .map(|(s, vars)| (s.as_str(), vars));
    // The environment only: what the output masks comes from each release's own `granted`.
    let g = granted::compose(values, parts, &granted::Public::new());
    for c in &g.clashes {
        log(c.warning());
    }
    Ok(g.env)
}

/// What a run tool answers of a finished command: how it ended, then its masked output (or why
/// it is withheld, noted in `facts`).
fn ran_text(
    finished: &exec::Finished,
    shown: Result<(exec::Shown, exec::Shown), exec::Withheld>,
    facts: &mut Value,
    limit: Duration,
) -> String {
    let mut text = match finished.exit_code {
        Some(c) if finished.timed_out => {
            format!(
                "timed out after {} s and was stopped; exit code {c}",
                limit.as_secs()
            )
        }
        Some(c) => format!("exit code {c}"),
        None => "the command's exit status is unknown".to_owned(),
    };
    match shown {
        Ok((out, err)) => {
            if let Some(obj) = facts.as_object_mut() {
                obj.insert("stdout_omitted_bytes".into(), json!(out.omitted));
                obj.insert("stderr_omitted_bytes".into(), json!(err.omitted));
            }
            text.push_str("\n--- stdout ---\n");
            text.push_str(&out.text);
            if !out.text.is_empty() && !out.text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str("--- stderr ---\n");
            text.push_str(&err.text);
        }
        Err(w) => {
            if let Some(obj) = facts.as_object_mut() {
                obj.insert("output_withheld".into(), json!(w.0));
            }
            text.push('\n');
            text.push_str(&w.0);
        }
    }
    text
}

fn pending_result(ctx: &Ctx, req: &Req, names: &[String]) -> CallToolResult {
    let passkey = requests::needs_passkey(req);
    let how = if passkey { " with their passkey" } else { "" };
    let place = match requests::approval_page(ctx, req) {
        Some(url) => format!("at {url}"),
        None => "in the approval console".to_owned(),
    };
    let text = format!(
        "{}. The command was not run. Tell the user to approve request {}{how} {place}; then call run_with_secrets again with the same secrets (it waits on this request), or check request_status {}.",
        requests::waiting_line(req),
        req.answer.request_id,
        req.answer.request_id
    );
    let mut facts = requests::facts(req, Some(names));
    if let Some(obj) = facts.as_object_mut() {
        obj.insert(
            "approval_url".into(),
            requests::approval_page(ctx, req).map_or(Value::Null, Value::String),
        );
        obj.insert("passkey".into(), Value::Bool(passkey));
    }
    text_result(text, facts, false)
}

fn check_uuid(id: &str, what: &str) -> Result<String, CallToolResult> {
    countersign_common::ids::uuid_text(id).ok_or_else(|| refuse(format!("{what} is a UUID")))
}

#[tool_router(router = tool_router)]
impl Server {
    #[tool(name = "run_with_secrets", description = RUN_DESCRIPTION)]
    async fn run_with_secrets(
        &self,
        Parameters(p): Parameters<RunParams>,
        meta: RequestMetaObject,
        peer: Peer<RoleServer>,
    ) -> CallToolResult {
        let report = Reporter::new(&meta, peer);
        self.run_checked(p, &report).await
    }

    #[tool(name = "request_status", description = STATUS_DESCRIPTION)]
    async fn request_status(&self, Parameters(p): Parameters<RequestIdParams>) -> CallToolResult {
        let id = match check_uuid(&p.request_id, "request_id") {
            Ok(id) => id,
            Err(r) => return r,
        };
        match session::get(&self.ctx, &id).await {
            Ok(req) => {
                let names = self.book.names(&id);
                if names.is_some() {
                    self.book.note(&req, &[]);
                }
                let mut text = if req.answer.state == "pending" {
                    requests::waiting_line(&req)
                } else {
                    req.describe()
                };
                if let Some(n) = &names {
                    text.push_str(&format!("; secrets {}", n.join(", ")));
                }
                text_result(text, requests::facts(&req, names.as_deref()), false)
            }
            Err(f) => fail_result(&f),
        }
    }

    #[tool(name = "cancel_request", description = CANCEL_DESCRIPTION)]
    async fn cancel_request(&self, Parameters(p): Parameters<RequestIdParams>) -> CallToolResult {
        let id = match check_uuid(&p.request_id, "request_id") {
            Ok(id) => id,
            Err(r) => return r,
        };
        match session::cancel_request(&self.ctx, &id).await {
            Ok(state) => {
                if let Ok(req) = session::get(&self.ctx, &id).await {
                    self.book.note(&req, &[]);
                }
                log(format!("request {id}: {state} (cancelled)"));
                text_result(
                    format!("request {id}: {state}"),
                    json!({ "request_id": id, "state": state }),
                    false,
                )
            }
            Err(f) => fail_result(&f),
        }
    }

    #[tool(name = "list_grants", description = GRANTS_DESCRIPTION)]
    async fn list_grants(&self, Parameters(_): Parameters<NoParams>) -> CallToolResult {
        match requests::describe(&self.ctx).await {
            Ok(me) => {
                let rows: Vec<Value> = me
                    .grants
                    .iter()
                    .map(|g| {
                        json!({
                            "grant_id": g.grant_id,
                            "request_id": g.request_id,
                            "secrets": self.book.names(&g.request_id),
                            "approver": g.approver,
                            "expires_at": g.expires_at,
                        })
                    })
                    .collect();
                let lines: Vec<String> = me
                    .grants
                    .iter()
                    .map(|g| {
                        format!(
                            "grant {}: {} (request {}, approver {}, expires {})",
                            g.grant_id,
                            self.book
                                .names(&g.request_id)
                                .map(|n| n.join(", "))
                                .unwrap_or_else(|| "secrets not known to this server".into()),
                            g.request_id,
                            g.approver.as_deref().unwrap_or("none: the policy"),
                            g.expires_at.as_ref().map_or_else(
                                || "when this server's session ends".to_owned(),
                                countersign_common::wire::rfc3339
                            )
                        )
                    })
                    .collect();
                let text = if lines.is_empty() {
                    "no live grants".to_owned()
                } else {
                    lines.join("\n")
                };
                text_result(
                    text,
                    json!({
                        "enrollment_id": me.enrollment_id,
                        "session_id": self.facts.session_id,
                        "runtime_id": self.facts.runtime_id,
                        "lease_expires_at": me.lease_expires_at,
                        "grants": rows,
                    }),
                    false,
                )
            }
            Err(f) => fail_result(&f),
        }
    }

    #[tool(name = "ask_person", description = ASK_DESCRIPTION)]
    async fn ask_person(&self, Parameters(p): Parameters<AskParams>) -> CallToolResult {
        match &self.console {
            Some(c) => c.ask(&p).await,
            None => refuse("no console is configured"),
        }
    }

    #[tool(name = "get_answer", description = ANSWER_DESCRIPTION)]
    async fn get_answer(&self, Parameters(p): Parameters<AnswerParams>) -> CallToolResult {
        match &self.console {
            Some(c) => c.answer(&p).await,
            None => refuse("no console is configured"),
        }
    }

    #[tool(name = "read_messages", description = READ_DESCRIPTION)]
    async fn read_messages(&self, Parameters(p): Parameters<ReadParams>) -> CallToolResult {
        let wait = match p.wait {
            Some(w) if !(w.is_finite() && (0.0..=600.0).contains(&w)) => {
                return refuse("wait is a number of seconds from 0 to 600");
            }
            w => Duration::from_secs_f64(w.unwrap_or(0.0)),
        };
        match &self.console {
            Some(c) => c.read(wait).await,
            None => refuse("no console is configured"),
        }
    }

    #[tool(name = "reply", description = REPLY_DESCRIPTION)]
    async fn reply(&self, Parameters(p): Parameters<ReplyParams>) -> CallToolResult {
        match &self.console {
            Some(c) => c.reply(&p).await,
            None => refuse("no console is configured"),
        }
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Server {
    fn get_info(&self) -> ServerConfig {
        let console = if self.console.is_some() {
            " ask_person asks a person a question on a console issue and answers at once; get_answer reads the answer later; read_messages and reply handle messages delivered to this session."
        } else {
            ""
        };
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "countersign",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(format!(
                "Countersign: use secrets without seeing them. run_with_secrets runs a command with named secrets in its environment and answers its masked output; when a person must approve, it answers the request id to tell the user. Grants last until this server's session ends unless a lifetime is given.{console} {NO_VALUE}"
            ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_description_says_no_value_is_ever_shown() {
        let router = Server::tool_router();
        let tools = router.list_all();
        assert_eq!(tools.len(), 8);
        for t in tools {
            let d = t.description.as_deref().unwrap_or_default();
            assert!(d.ends_with(NO_VALUE), "{}: {d}", t.name);
        }
    }

    #[test]
    fn a_command_gets_the_parts_of_the_issued_secrets_it_names() {
        let release = |json: &str| serde_json::from_str::<Values>(json).expect("release");
        let released = BTreeMap::from([
            (
                "g1".to_owned(),
                release(
                    r#"{"values":{"APP_DB":"postgres://a:apw1@h:1/app","OTHER_DB":"postgres://o:opw1@h:1/o"},
                        "parts":{"OTHER_DB":{"PGPASSWORD":"opw1"},"APP_DB":{"PGPASSWORD":"apw1","PGUSER":"a"}}}"#,
                ),
            ),
            (
                "g2".to_owned(),
                release(
                    r#"{"values":{"KEY":"kkkk"},"parts":{"KEY":{"AWS_ACCESS_KEY_ID":"AKIA1"}}}"#,
                ),
            ),
        ]);
        let holders = BTreeMap::from([
            ("APP_DB".to_owned(), "g1".to_owned()),
            ("KEY".to_owned(), "g2".to_owned()),
        ]);
        let names = ["KEY".to_owned(), "APP_DB".to_owned()];
        let env = env_of(&names, &holders, &released).expect("env");
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.expose())).collect();
        // OTHER_DB is in the grant but not named: neither its value nor its parts.
        assert_eq!(
            env,
            [
                ("KEY", "kkkk"),
                ("APP_DB", "postgres://a:apw1@h:1/app"),
                ("AWS_ACCESS_KEY_ID", "AKIA1"),
                ("PGPASSWORD", "apw1"),
                ("PGUSER", "a"),
            ]
        );
        let missing = ["NOPE".to_owned()];
        assert!(env_of(&missing, &holders, &released).is_err());
    }
}
