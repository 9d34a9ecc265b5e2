//! `countersign mcp` end to end: the official Python MCP client (`mcp_driver.py`, `pip install
//! mcp`) drives the real `countersign mcp` against dev mode (`countersign-console dev`: the broker
//! and the console in one process, as a child process with its logs captured) and the real
//! launcher helper. The test's person signs in to the console and approves there.
//!
//! Every line the client printed (tool results, progress, errors) is searched for every value
//! the dev store holds, raw and in base64; so are the logs of the helper, of `countersign mcp`
//! and of dev mode (broker and console, at debug level).
//!
//! Without Python's `mcp` package the tests print `skipped: …` and pass, unless
//! `COUNTERSIGN_REQUIRE_MCP=1` (CI installs it: `.ci/run`).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use base64::Engine;
use common::cli::{self, Helper};
use common::*;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, Command};

const DEV_PERSON: &str = "dev@countersign.local";
const CONCEALED: &str = "<concealed by countersign>";
const NO_VALUE: &str =
    "No tool result, error or log line of this server ever carries a secret's value";

/// Python with the `mcp` package, or `None` (printing `skipped: …`); panics instead under
/// `COUNTERSIGN_REQUIRE_MCP=1`.
fn python_mcp_or_skip() -> Option<String> {
    let ok = std::process::Command::new("python3")
        .args(["-c", "import mcp.client.stdio, mcp.client.session"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        assert!(
            std::env::var("COUNTERSIGN_REQUIRE_MCP").as_deref() != Ok("1"),
            "COUNTERSIGN_REQUIRE_MCP=1 but Python's mcp package is not installed (pip install mcp)"
        );
        println!("skipped: Python's mcp package is not installed (pip install mcp)");
        return None;
    }
    Some("python3".into())
}

/// `countersign-console dev` as a child process on ports the OS picks, its log in a file.
struct DevMode {
    child: Child,
    dir: tempfile::TempDir,
    broker_url: String,
    console_url: String,
    log: PathBuf,
}

impl DevMode {
    async fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let state = dir.path().join("dev");
        let log = dir.path().join("dev.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_countersign-console"))
            .arg("dev")
            .arg("--dir")
            .arg(&state)
            .args(["--broker-port", "0", "--console-port", "0"])
            .env("RUST_LOG", "debug")
            .env_remove("COUNTERSIGN_LOG_JSON")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("start countersign-console dev")?;
        let mut lines = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let (mut broker_url, mut console_url) = (None, None);
        let until = Instant::now() + Duration::from_secs(60);
        while broker_url.is_none() || console_url.is_none() {
            let line = tokio::time::timeout_at(until.into(), lines.next_line())
                .await
                .context("dev mode did not start within 60 s")??
                .with_context(|| format!("dev mode exited: {}", read(&log)))?;
            let url = line.split_whitespace().nth(1).map(str::to_owned);
            if line.trim_start().starts_with("console:") {
                console_url = url;
            } else if line.trim_start().starts_with("broker:") {
                broker_url = url;
            }
        }
        // Keep reading its standard output so that it never blocks on a full pipe.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Ok(Self {
            child,
            broker_url: broker_url.context("broker URL")?,
            console_url: console_url.context("console URL")?,
            dir,
            log,
        })
    }

    /// Every value of the dev store (`value = "…"` lines of its secrets file).
    fn values(&self) -> anyhow::Result<Vec<String>> {
        let text = std::fs::read_to_string(self.dir.path().join("dev/secrets.toml"))?;
        let v: Vec<String> = text
            .lines()
            .filter_map(|l| l.trim().strip_prefix("value = \""))
            .filter_map(|l| l.strip_suffix('"'))
            .map(str::to_owned)
            .collect();
        anyhow::ensure!(v.len() == 5, "dev store values: {v:?}");
        Ok(v)
    }

    async fn stop(mut self) -> String {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await;
        read(&self.log)
    }
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_default()
}

/// The Python MCP client running `countersign mcp`.
struct Client {
    child: Child,
    stdin: ChildStdin,
    /// Every line it printed, in order.
    lines: Arc<Mutex<Vec<Value>>>,
    seen: usize,
    next_id: u64,
    errlog: PathBuf,
}

impl Client {
    async fn start(python: &str, dir: &Path, server: &[String]) -> anyhow::Result<Self> {
        Self::launch(python, dir, &[], server).await
    }

    /// The driver with `flags` (`--elicit-url`: a client that takes URL-mode elicitations).
    async fn launch(
        python: &str,
        dir: &Path,
        flags: &[&str],
        server: &[String],
    ) -> anyhow::Result<Self> {
        let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/console/mcp_driver.py");
        let errlog = dir.join("mcp.log");
        let mut child = Command::new(python)
            .arg(driver)
            .args(flags)
            .arg(&errlog)
            .args(server)
            .env_remove("COUNTERSIGN_AGENT_TOKEN")
            .env_remove("COUNTERSIGN_CONSOLE_URL")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("start the Python MCP client")?;
        let stdin = child.stdin.take().context("stdin")?;
        let mut out = BufReader::new(child.stdout.take().context("stdout")?).lines();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&lines);
        tokio::spawn(async move {
            while let Ok(Some(l)) = out.next_line().await {
                let v = serde_json::from_str(&l).unwrap_or(Value::String(l));
                sink.lock().unwrap_or_else(|e| e.into_inner()).push(v);
            }
        });
        let mut c = Self {
            child,
            stdin,
            lines,
            seen: 0,
            next_id: 0,
            errlog,
        };
        c.wait_line(60, |v| v["event"] == "ready").await?;
        Ok(c)
    }

    fn all(&self) -> Vec<Value> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The first line from `from` on that `pred` accepts, waiting up to `secs`.
    async fn find(
        &self,
        from: usize,
        secs: u64,
        pred: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<(usize, Value)> {
        let until = Instant::now() + Duration::from_secs(secs);
        loop {
            if let Some((i, v)) = self
                .all()
                .into_iter()
                .enumerate()
                .skip(from)
                .find(|(_, v)| pred(v))
            {
                return Ok((i, v));
            }
            if Instant::now() > until {
                bail!(
                    "no such line from the MCP client within {secs} s: {:#?}\nserver log: {}",
                    self.all(),
                    read(&self.errlog)
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn wait_line(
        &mut self,
        secs: u64,
        pred: impl Fn(&Value) -> bool,
    ) -> anyhow::Result<Value> {
        let (i, v) = self.find(self.seen, secs, pred).await?;
        self.seen = i + 1;
        Ok(v)
    }

    async fn send(&mut self, v: Value) -> anyhow::Result<()> {
        self.stdin.write_all(format!("{v}\n").as_bytes()).await?;
        self.stdin.flush().await?;
        Ok(())
    }

    /// Starts a tool call; answers its id.
    async fn start_call(&mut self, tool: &str, args: Value) -> anyhow::Result<u64> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(json!({ "id": id, "op": "call", "tool": tool, "args": args }))
            .await?;
        Ok(id)
    }

    /// The result (or protocol error) of call `id`.
    async fn result(&self, id: u64, secs: u64) -> anyhow::Result<Value> {
        let (_, v) = self
            .find(0, secs, |v| {
                v["id"] == id && (v.get("result").is_some() || v.get("error").is_some())
            })
            .await?;
        match v.get("result") {
            Some(r) => Ok(r.clone()),
            None => bail!("call {id} failed: {v}\nserver log: {}", read(&self.errlog)),
        }
    }

    async fn call(&mut self, tool: &str, args: Value) -> anyhow::Result<Value> {
        let id = self.start_call(tool, args).await?;
        self.result(id, 90).await
    }

    /// Closes the server's standard input and waits for the client to report it gone.
    async fn close(mut self) -> anyhow::Result<(Vec<Value>, String)> {
        self.send(json!({ "op": "close" })).await?;
        let (_, _) = self.find(0, 30, |v| v["event"] == "closed").await?;
        let _ = tokio::time::timeout(Duration::from_secs(10), self.child.wait()).await;
        Ok((self.all(), read(&self.errlog)))
    }
}

/// Everything up to a logged-in helper, a person signed in, and an agent token file.
struct Setup {
    dev: DevMode,
    helper: Helper,
    person: Person,
    token_file: PathBuf,
}

async fn setup() -> anyhow::Result<Setup> {
    let dev = DevMode::start().await?;
    let helper = Helper::start(&dev.broker_url, &dev.console_url, "mcp-host").await?;
    let mut person = Person::at(&dev.console_url)?;
    let r = person.sign_in_local(DEV_PERSON).await?;
    anyhow::ensure!(r.status == 303, "sign-in: {} {}", r.status, r.text);
    // The machine login, approved in the console by its code.
    let login = helper.start_login(DEV_PERSON).await?;
    let rec = person
        .post(
            "/api/v1/credential-requests/machine-lookup",
            json!({ "code": login.code }),
        )
        .await?;
    anyhow::ensure!(rec.status == 200, "lookup: {}", rec.text);
    let id = rec.json["record_id"]
        .as_str()
        .context("record_id")?
        .to_owned();
    let ok = person
        .post(
            &format!("/api/v1/credential-requests/{id}/approve"),
            json!({ "code": login.code }),
        )
        .await?;
    anyhow::ensure!(ok.status == 200, "approve login: {}", ok.text);
    login.issued().await?;
    // The person mints a personal agent token for the agent's console tools.
    let minted = person
        .post("/api/v1/agent-tokens", json!({ "name": "mcp test" }))
        .await?;
    anyhow::ensure!(minted.status == 201, "mint: {}", minted.text);
    let token_file = helper.dir.path().join("agent-token");
    std::fs::write(&token_file, minted.json["token"].as_str().context("token")?)?;
    Ok(Setup {
        dev,
        helper,
        person,
        token_file,
    })
}

fn server_args(s: &Setup, extra: &[&str]) -> anyhow::Result<Vec<String>> {
    let mut v = vec![
        cli::cli_bin()?.display().to_string(),
        "--socket".into(),
        s.helper.socket.display().to_string(),
        "--poll-interval".into(),
        "0.2".into(),
        "mcp".into(),
        "--label".into(),
        "test-agent".into(),
        "--session-id".into(),
        "mcp-e2e-session".into(),
        "--console-url".into(),
        s.dev.console_url.clone(),
        "--agent-token-file".into(),
        s.token_file.display().to_string(),
    ];
    v.extend(extra.iter().map(|s| (*s).to_owned()));
    Ok(v)
}

/// Every form of a value that must never show.
fn forms(v: &str) -> Vec<String> {
    vec![
        v.to_owned(),
        base64::engine::general_purpose::STANDARD.encode(v),
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v),
    ]
}

fn assert_no_value(what: &str, text: &str, values: &[String]) {
    for v in values {
        for f in forms(v) {
            assert!(!text.contains(&f), "{what} shows a value ({f:?})");
        }
    }
}

fn text_of(r: &Value) -> &str {
    r["text"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn mcp_tools_mask_values_wait_for_a_person_and_end_with_the_server() -> anyhow::Result<()> {
    let Some(python) = python_mcp_or_skip() else {
        return Ok(());
    };
    let s = setup().await?;
    let values = s.dev.values()?;
    let mut c = Client::start(
        &python,
        s.helper.dir.path(),
        &server_args(&s, &["--wait", "20"])?,
    )
    .await?;

    // The tools, each saying that no value is ever shown.
    c.send(json!({ "id": 1000, "op": "list_tools" })).await?;
    let tools = c.wait_line(30, |v| v["id"] == 1000).await?;
    let mut names: Vec<&str> = tools["tools"]
        .as_array()
        .context("tools")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "ask_person",
            "cancel_request",
            "get_answer",
            "list_grants",
            "read_messages",
            "reply",
            "request_status",
            "run_with_secrets"
        ]
    );
    for t in tools["tools"].as_array().context("tools")? {
        assert!(
            t["description"].as_str().unwrap_or("").contains(NO_VALUE),
            "{t}"
        );
    }

    // The session is live on the console, under its id and title.
    let live = eventually(20, || async {
        let r = s.person.get("/api/v1/sessions").await?;
        Ok(r.json.as_array().and_then(|a| {
            a.iter()
                .find(|x| x["session_id"] == "mcp-e2e-session")
                .cloned()
        }))
    })
    .await?;
    assert_eq!(live["title"], "countersign mcp (test-agent)");

    // An automatic secret: the command runs with it; its output is masked.
    let auto = c
        .call(
            "run_with_secrets",
            json!({
                "command": "printf 'raw:%s\\n' \"$DEMO_AUTOMATIC\"; printf 'b64:%s\\n' \"$(printf '%s' \"$DEMO_AUTOMATIC\" | base64)\"; printf '{\"k\":\"%s\"}\\n' \"$DEMO_AUTOMATIC\"; echo \"err:$DEMO_AUTOMATIC\" >&2; exit 3",
                "secrets": ["DEMO_AUTOMATIC"],
                "reason": "deploy the docs",
            }),
        )
        .await?;
    assert_eq!(auto["is_error"], false, "{auto}");
    assert_eq!(auto["structured"]["exit_code"], 3, "{auto}");
    let text = text_of(&auto);
    for want in [
        format!("raw:{CONCEALED}"),
        format!("b64:{CONCEALED}"),
        format!("{{\"k\":\"{CONCEALED}\"}}"),
        format!("err:{CONCEALED}"),
        "exit code 3".to_owned(),
    ] {
        assert!(text.contains(&want), "{want}: {text}");
    }

    // list_grants: names and expiries only.
    let grants = c.call("list_grants", json!({})).await?;
    let rows = grants["structured"]["grants"]
        .as_array()
        .context("grants")?;
    assert_eq!(rows.len(), 1, "{grants}");
    assert_eq!(rows[0]["secrets"], json!(["DEMO_AUTOMATIC"]));
    assert_eq!(rows[0]["expires_at"], Value::Null);
    assert_eq!(grants["structured"]["session_id"], "mcp-e2e-session");

    // An owner secret: the call reports the record it waits for; the person approves it in the
    // console while it waits; the command then runs.
    let id = c
        .start_call(
            "run_with_secrets",
            json!({
                "command": "echo \"owner:$DEMO_OWNER\"",
                "secrets": ["DEMO_OWNER"],
                "reason": "rotate the deploy key",
                "wait": 60,
            }),
        )
        .await?;
    let (_, progress) = c
        .find(0, 30, |v| {
            v["id"] == id
                && v["progress"]["message"]
                    .as_str()
                    .is_some_and(|m| m.starts_with("waiting for approval of "))
        })
        .await?;
    let message = progress["progress"]["message"].as_str().unwrap_or_default();
    // One name (issue 48): the request id the session was given, which the console takes.
    let record = message
        .trim_start_matches("waiting for approval of request ")
        .split_whitespace()
        .next()
        .context("request id")?
        .to_owned();
    assert_eq!(record.len(), 36, "{message}");
    assert!(message.contains(DEV_PERSON), "{message}");
    let facts = s
        .person
        .get(&format!("/api/v1/credential-requests/{record}"))
        .await?;
    assert_eq!(facts.status, 200, "{}", facts.text);
    assert_eq!(
        facts.json["reason"], "rotate the deploy key",
        "{}",
        facts.text
    );
    let ok = s
        .person
        .post(
            &format!("/api/v1/credential-requests/{record}/approve"),
            json!({}),
        )
        .await?;
    assert_eq!(ok.status, 200, "{}", ok.text);
    let owner = c.result(id, 60).await?;
    assert_eq!(owner["structured"]["exit_code"], 0, "{owner}");
    assert!(
        text_of(&owner).contains(&format!("owner:{CONCEALED}")),
        "{owner}"
    );
    // The grant is reused: no new request, no person asked again.
    let again = c
        .call(
            "run_with_secrets",
            json!({ "command": "echo \"again:$DEMO_OWNER\"", "secrets": ["DEMO_OWNER"], "reason": "once more", "wait": 0 }),
        )
        .await?;
    assert!(
        text_of(&again).contains(&format!("again:{CONCEALED}")),
        "{again}"
    );

    // A short wait (a client with a short tool timeout): the answer says what it waits for.
    let pending = c
        .call(
            "run_with_secrets",
            json!({ "command": "true", "secrets": ["DEMO_SHARED"], "reason": "later", "wait": 1 }),
        )
        .await?;
    assert_eq!(pending["structured"]["state"], "pending", "{pending}");
    let record = pending["structured"]["record_id"]
        .as_str()
        .context("record")?;
    let request = pending["structured"]["request_id"]
        .as_str()
        .context("request")?
        .to_owned();
    assert!(
        text_of(&pending).contains(&format!("waiting for approval of request {request}")),
        "{pending}"
    );
    assert!(!text_of(&pending).contains(record), "one name: {pending}");
    let status = c
        .call("request_status", json!({ "request_id": request }))
        .await?;
    assert_eq!(status["structured"]["state"], "pending", "{status}");
    assert_eq!(status["structured"]["secrets"], json!(["DEMO_SHARED"]));
    let cancelled = c
        .call("cancel_request", json!({ "request_id": request }))
        .await?;
    assert_eq!(cancelled["structured"]["state"], "cancelled", "{cancelled}");
    let status = c
        .call("request_status", json!({ "request_id": request }))
        .await?;
    assert_eq!(status["structured"]["state"], "cancelled", "{status}");

    // A secret policy approves only with the owner's passkey (dev mode's DEMO_PASSKEY): the
    // answer says so, with the approval page's URL to give the person.
    let passkey = c
        .call(
            "run_with_secrets",
            json!({ "command": "true", "secrets": ["DEMO_PASSKEY"], "reason": "deploy", "wait": 1 }),
        )
        .await?;
    assert_eq!(passkey["structured"]["state"], "pending", "{passkey}");
    assert_eq!(passkey["structured"]["passkey"], true, "{passkey}");
    let request = passkey["structured"]["request_id"]
        .as_str()
        .context("request")?;
    let page = format!("{}/requests/{request}", s.dev.console_url);
    assert_eq!(
        passkey["structured"]["approval_url"],
        page.as_str(),
        "{passkey}"
    );
    assert!(
        text_of(&passkey).contains(&format!(
            "approve request {request} with their passkey at {page}"
        )),
        "{passkey}"
    );

    // The policy denies a locked secret.
    let denied = c
        .call(
            "run_with_secrets",
            json!({ "command": "true", "secrets": ["DEMO_LOCKED"], "reason": "no" }),
        )
        .await?;
    assert_eq!(denied["is_error"], true, "{denied}");
    assert!(text_of(&denied).contains("denied"), "{denied}");

    // Nothing delivered yet; the link is live.
    let read = c.call("read_messages", json!({})).await?;
    assert!(text_of(&read).contains("link: live"), "{read}");

    // A person's message reaches the session over its link; the model reads it and replies.
    let sent = s
        .person
        .post(
            "/api/v1/sessions/mcp-e2e-session/messages",
            json!({ "body": "Please also rotate the staging key." }),
        )
        .await?;
    assert_eq!(sent.status, 201, "{}", sent.text);
    let message_id = sent.json["id"].as_str().context("message id")?.to_owned();
    let read = c.call("read_messages", json!({ "wait": 20 })).await?;
    let got = read["structured"]["messages"]
        .as_array()
        .context("messages")?;
    assert_eq!(got.len(), 1, "{read}");
    assert_eq!(got[0]["id"], message_id.as_str());
    assert_eq!(got[0]["body"], "Please also rotate the staging key.");
    assert!(text_of(&read).contains(DEV_PERSON), "{read}");
    let replied = c
        .call(
            "reply",
            json!({ "message_id": message_id, "body": "Will do." }),
        )
        .await?;
    assert_eq!(replied["is_error"], false, "{replied}");
    let thread = s
        .person
        .get(&format!("/api/v1/messages/{message_id}/thread"))
        .await?;
    assert!(thread.text.contains("Will do."), "{}", thread.text);

    // A question for a person on an issue: the ask's id comes back at once; the person answers
    // it in Chromium; the model reads the answer later.
    ask_answered_in_chromium(&s, &mut c).await?;

    // Standard input closes: the session ends, and its grants with it.
    let grants = s
        .person
        .get("/api/v1/credential-grants?approver=me")
        .await?;
    assert_eq!(
        grants.json.as_array().map(Vec::len),
        Some(2),
        "{}",
        grants.text
    );
    let (lines, mcp_log) = c.close().await?;
    eventually(20, || async {
        let grants = s
            .person
            .get("/api/v1/credential-grants?approver=me")
            .await?;
        let sessions = s.person.get("/api/v1/sessions").await?;
        let gone = !sessions.text.contains("mcp-e2e-session");
        let none = grants.json.as_array().is_some_and(Vec::is_empty);
        Ok((gone && none).then_some(()))
    })
    .await?;
    let out = s
        .helper
        .cli(&["--json", "status"])?
        .stdin(Stdio::null())
        .output()
        .await?;
    let status: Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(status["sessions"], json!([]), "{status}");

    // No value anywhere: tool results, progress, errors, and every log.
    let helper_log = s.helper.log();
    let dev_log = s.dev.stop().await;
    assert!(mcp_log.contains("session ended"), "{mcp_log}");
    assert!(
        !mcp_log.contains("URL elicitation"),
        "a client without the capability is offered no page: {mcp_log}"
    );
    for (what, text) in [
        ("the MCP client's lines", serde_json::to_string(&lines)?),
        ("countersign mcp's log", mcp_log),
        ("the helper's log", helper_log),
        ("dev mode's log", dev_log),
    ] {
        assert_no_value(what, &text, &values);
    }
    Ok(())
}

async fn ask_answered_in_chromium(s: &Setup, c: &mut Client) -> anyhow::Result<()> {
    use crate::common::webdriver::{Driver, browser_or_skip};
    let project = s
        .person
        .post(
            "/api/v1/projects",
            json!({ "key": "MCP", "name": "MCP tests" }),
        )
        .await?;
    assert_eq!(project.status, 201, "{}", project.text);
    let issue = s
        .person
        .post(
            "/api/v1/issues",
            json!({ "project": "MCP", "title": "Release 2.4" }),
        )
        .await?;
    assert_eq!(issue.status, 201, "{}", issue.text);
    let key = issue.json["key"].as_str().context("key")?.to_owned();
    let asked = c
        .call(
            "ask_person",
            json!({ "issue": key, "question": "Ship release 2.4 today?", "options": ["Ship it", "Wait"] }),
        )
        .await?;
    assert_eq!(asked["is_error"], false, "{asked}");
    let ask_id = asked["structured"]["ask_id"]
        .as_str()
        .context("ask_id")?
        .to_owned();
    let open = c.call("get_answer", json!({ "ask_id": ask_id })).await?;
    assert_eq!(open["structured"]["state"], "open", "{open}");
    // The ask is the session's own.
    let r = s.person.get(&format!("/api/v1/asks/{ask_id}")).await?;
    assert_eq!(r.json["author"]["session"], "mcp-e2e-session", "{}", r.text);

    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let b = driver.browser(&chromium, &dir.path().join("dev")).await?;
    b.goto(&format!("{}/sign-in", s.dev.console_url)).await?;
    b.type_into("#email", DEV_PERSON).await?;
    b.click("form.local button[type=submit]").await?;
    b.wait_text("h1", "Inbox", 10).await?;
    let row = format!("#human-turn li[data-ask-id=\"{ask_id}\"]");
    b.wait_text(&row, "Ship release 2.4 today?", 10).await?;
    b.click(&format!("{row} button[data-option=\"1\"]")).await?;
    b.wait_text("#flash", "Answered: Ship it.", 10).await?;
    b.quit().await;

    let answered = c.call("get_answer", json!({ "ask_id": ask_id })).await?;
    assert_eq!(answered["structured"]["state"], "answered", "{answered}");
    let text = text_of(&answered);
    assert!(text.contains("chose Ship it (1)"), "{text}");
    assert!(text.contains(DEV_PERSON), "{text}");
    Ok(())
}

/// URL-mode elicitation (MCP 2025-11-25): a client that declares `elicitation: { url: {} }` is
/// offered the approval page of a request its approver decides with a passkey, before the
/// server waits, once per request; a request approved without a passkey offers none. (The
/// client of the test above declares no elicitation and is offered nothing.)
#[tokio::test]
async fn mcp_offers_the_passkey_approval_page_by_url_elicitation() -> anyhow::Result<()> {
    let Some(python) = python_mcp_or_skip() else {
        return Ok(());
    };
    let s = setup().await?;
    let mut c = Client::launch(
        &python,
        s.helper.dir.path(),
        &["--elicit-url"],
        &server_args(&s, &[])?,
    )
    .await?;
    let elicitations = |c: &Client| -> Vec<Value> {
        c.all()
            .into_iter()
            .filter(|v| v["event"] == "elicitation")
            .collect()
    };

    // No passkey asked for: the answer as before, no page offered.
    let shared = c
        .call(
            "run_with_secrets",
            json!({ "command": "true", "secrets": ["DEMO_SHARED"], "reason": "later", "wait": 1 }),
        )
        .await?;
    assert_eq!(shared["structured"]["state"], "pending", "{shared}");
    assert_eq!(shared["structured"]["passkey"], false, "{shared}");
    assert!(elicitations(&c).is_empty(), "{:?}", c.all());

    // A passkey approval: the page is offered while the call still waits.
    let call = c
        .start_call(
            "run_with_secrets",
            json!({ "command": "true", "secrets": ["DEMO_PASSKEY"], "reason": "deploy", "wait": 5 }),
        )
        .await?;
    let (at, offer) = c.find(0, 30, |v| v["event"] == "elicitation").await?;
    let result = c.result(call, 60).await?;
    let (result_at, _) = c
        .find(0, 1, |v| v["id"] == call && v.get("result").is_some())
        .await?;
    assert!(
        at < result_at,
        "offered before the wait ended: {:?}",
        c.all()
    );
    assert_eq!(result["structured"]["state"], "pending", "{result}");
    let request = result["structured"]["request_id"]
        .as_str()
        .context("request")?;
    let page = format!("{}/requests/{request}", s.dev.console_url);
    assert_eq!(result["structured"]["approval_url"], page.as_str());
    assert_eq!(offer["mode"], "url", "{offer}");
    assert_eq!(offer["url"], page.as_str(), "{offer}");
    assert_eq!(
        offer["elicitation_id"], result["structured"]["request_id"],
        "{offer}"
    );
    assert!(
        offer["message"]
            .as_str()
            .is_some_and(|m| m.contains(request) && m.contains("passkey")),
        "{offer}"
    );

    // Waiting on the same request again offers nothing more.
    let again = c
        .call(
            "run_with_secrets",
            json!({ "command": "true", "secrets": ["DEMO_PASSKEY"], "reason": "deploy", "wait": 1 }),
        )
        .await?;
    assert_eq!(
        again["structured"]["request_id"],
        result["structured"]["request_id"]
    );
    assert_eq!(elicitations(&c).len(), 1, "{:?}", c.all());
    let (_, mcp_log) = c.close().await?;
    assert!(
        mcp_log.contains("the client answered the approval page's elicitation: Accept"),
        "{mcp_log}"
    );
    s.dev.stop().await;
    Ok(())
}

/// Started inside a session (`countersign run -- countersign mcp`), the server serves that
/// session and leaves ending it to its owner; without an agent token it offers no console tool.
#[tokio::test]
async fn mcp_inside_a_session_serves_it() -> anyhow::Result<()> {
    let Some(python) = python_mcp_or_skip() else {
        return Ok(());
    };
    let s = setup().await?;
    let values = s.dev.values()?;
    let cli = cli::cli_bin()?.display().to_string();
    let socket = s.helper.socket.display().to_string();
    let server: Vec<String> = [
        cli.as_str(),
        "--socket",
        &socket,
        "run",
        "--",
        cli.as_str(),
        "--socket",
        &socket,
        "--poll-interval",
        "0.2",
        "mcp",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    let mut c = Client::start(&python, s.helper.dir.path(), &server).await?;
    c.send(json!({ "id": 1000, "op": "list_tools" })).await?;
    let tools = c.wait_line(30, |v| v["id"] == 1000).await?;
    let mut names: Vec<&str> = tools["tools"]
        .as_array()
        .context("tools")?
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "cancel_request",
            "list_grants",
            "request_status",
            "run_with_secrets"
        ]
    );
    let ran = c
        .call(
            "run_with_secrets",
            json!({ "command": "env", "secrets": ["DEMO_AUTOMATIC"], "reason": "inside run" }),
        )
        .await?;
    assert!(
        text_of(&ran).contains(&format!("DEMO_AUTOMATIC={CONCEALED}")),
        "{ran}"
    );
    // The session is `run`'s (labelled by its command's name), not one of its own.
    let grants = c.call("list_grants", json!({})).await?;
    let runtime = grants["structured"]["runtime_id"].as_str().unwrap_or("");
    assert!(runtime.ends_with("/countersign"), "{grants}");
    let (lines, mcp_log) = c.close().await?;
    assert!(mcp_log.contains("already inside session"), "{mcp_log}");
    // `run` ends the session when the server (its command) exits.
    eventually(20, || async {
        let out = s
            .helper
            .cli(&["--json", "status"])?
            .stdin(Stdio::null())
            .output()
            .await?;
        let status: Value = serde_json::from_slice(&out.stdout)?;
        Ok((status["sessions"] == json!([])).then_some(()))
    })
    .await?;
    let helper_log = s.helper.log();
    let dev_log = s.dev.stop().await;
    for (what, text) in [
        ("the MCP client's lines", serde_json::to_string(&lines)?),
        ("countersign mcp's log", mcp_log),
        ("the helper's log", helper_log),
        ("dev mode's log", dev_log),
    ] {
        assert_no_value(what, &text, &values);
    }
    Ok(())
}

/// Killed outright (SIGKILL: no chance to unregister), the server's session still ends: the
/// helper sees its root gone, unenrolls it, and the broker ends its grants.
#[tokio::test]
async fn mcp_killed_still_ends_its_session() -> anyhow::Result<()> {
    let Some(python) = python_mcp_or_skip() else {
        return Ok(());
    };
    let s = setup().await?;
    let mut c = Client::start(&python, s.helper.dir.path(), &server_args(&s, &[])?).await?;
    let ran = c
        .call(
            "run_with_secrets",
            json!({ "command": "true", "secrets": ["DEMO_AUTOMATIC"], "reason": "before the kill" }),
        )
        .await?;
    assert_eq!(ran["structured"]["exit_code"], 0, "{ran}");
    let grants = c.call("list_grants", json!({})).await?;
    // The runtime id names the root: <host>/pid-<pid>-<start>/<label>.
    let runtime = grants["structured"]["runtime_id"]
        .as_str()
        .context("runtime_id")?
        .to_owned();
    let pid = runtime
        .split('/')
        .nth(1)
        .and_then(|p| p.strip_prefix("pid-"))
        .and_then(|p| p.split('-').next())
        .context("pid in the runtime id")?
        .to_owned();
    let live = s
        .person
        .get("/api/v1/credential-grants?approver=me")
        .await?;
    assert_eq!(live.json.as_array().map(Vec::len), Some(1), "{}", live.text);
    let killed = std::process::Command::new("kill")
        .args(["-KILL", &pid])
        .status()?;
    assert!(killed.success());
    eventually(20, || async {
        let out = s
            .helper
            .cli(&["--json", "status"])?
            .stdin(Stdio::null())
            .output()
            .await?;
        let status: Value = serde_json::from_slice(&out.stdout)?;
        let grants = s
            .person
            .get("/api/v1/credential-grants?approver=me")
            .await?;
        let none = grants.json.as_array().is_some_and(Vec::is_empty);
        Ok((status["sessions"] == json!([]) && none).then_some(()))
    })
    .await?;
    let _ = c.close().await;
    s.dev.stop().await;
    Ok(())
}
