//! Dev mode: `countersign-console dev` runs the broker and the console together on loopback,
//! on the broker's dev state, with dev mode's local sign-in.

use crate::common;

use std::time::Duration;

use common::*;
use countersign_dev::{self as dev, DEV_PERSON};
use serde_json::json;

#[tokio::test]
async fn dev_mode_runs_broker_and_console_together() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let state = dir.path().join(".countersign-dev");
    let d = dev::start(&state, 0, 0).await?;
    for f in [
        "seal.key",
        "console-token",
        "secrets.toml",
        "broker.db",
        "console.db",
    ] {
        assert!(state.join(f).exists(), "{f} missing");
    }
    let http = reqwest::Client::new();
    let health: serde_json::Value = http
        .get(format!("{}/healthz", d.broker_url))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(health["status"], "ok");
    let health: serde_json::Value = http
        .get(format!("{}/healthz", d.console_url))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(health["status"], "ok");

    // The dev person signs in locally; the sign-in page suggests them.
    let mut p = Person::at(&d.console_url)?;
    let page = p.get("/sign-in").await?;
    assert!(page.text.contains(DEV_PERSON));
    let r = p.sign_in_local(DEV_PERSON).await?;
    assert_eq!(r.status, 303, "{}", r.text);
    assert_eq!(
        p.get("/api/v1/me").await?.json,
        json!({ "kind": "user", "login": DEV_PERSON })
    );
    // The console reaches the broker with the dev console token.
    let inbox = p.get("/api/v1/credential-requests?approver=me").await?;
    assert_eq!((inbox.status, inbox.json.clone()), (200, json!([])));

    let token = std::fs::read_to_string(state.join("console-token"))?;
    d.shutdown(Duration::from_secs(2)).await;

    // Restarting keeps the state.
    let d = dev::start(&state, 0, 0).await?;
    assert_eq!(std::fs::read_to_string(state.join("console-token"))?, token);
    let p = Person::at(&d.console_url)?;
    assert_eq!(p.get("/api/v1/me").await?.status, 401);
    d.shutdown(Duration::from_secs(2)).await;
    Ok(())
}

/// Dev mode prints a token agents can use with the console's API, and labels the broker's
/// console token as the broker's (issue 27); the console refuses the broker's token.
#[tokio::test]
async fn dev_mode_prints_an_agent_token_for_the_console() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let state = dir.path().join(".countersign-dev");
    let d = dev::start(&state, 0, 0).await?;
    let banner = d.banner();
    let agent = d.agent_token();
    assert!(agent.len() >= 40, "{banner}");
    assert!(
        banner.contains(&format!("agent token:   {agent}   (for the console API")),
        "{banner}"
    );
    let broker_token = std::fs::read_to_string(state.join("console-token"))?;
    assert!(
        banner.contains(&format!(
            "broker console token: {}   (for the broker API, not the console's)",
            broker_token.trim()
        )),
        "{banner}"
    );
    let http = reqwest::Client::new();
    let me = http
        .get(format!("{}/api/v1/me", d.console_url))
        .bearer_auth(&agent)
        .send()
        .await?;
    assert_eq!(me.status(), 200);
    let me: serde_json::Value = me.json().await?;
    assert_eq!(me["kind"], "agent", "{me}");
    // An agent works with it: a project under its session's name.
    let p = http
        .post(format!("{}/api/v1/projects", d.console_url))
        .bearer_auth(&agent)
        .json(&json!({"key": "DEV", "name": "Dev", "actor": "s1"}))
        .send()
        .await?;
    assert_eq!(p.status(), 201, "{}", p.text().await?);
    let broker = http
        .get(format!("{}/api/v1/me", d.console_url))
        .bearer_auth(broker_token.trim())
        .send()
        .await?;
    assert_eq!(broker.status(), 401);
    d.shutdown(Duration::from_secs(2)).await;
    // The same token after a restart.
    let d = dev::start(&state, 0, 0).await?;
    assert_eq!(d.agent_token(), agent);
    d.shutdown(Duration::from_secs(2)).await;
    Ok(())
}

/// `countersign-console dev --config FILE` takes the console's optional tables: with
/// `[code_hosting]`, delivery settings reach for the code host (here a closed port: 503
/// CODE_HOST_UNAVAILABLE) where without it they say none is configured; anything but the
/// optional tables is refused.
#[tokio::test]
async fn dev_mode_takes_the_consoles_optional_tables() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let state = dir.path().join(".countersign-dev");
    let settings = json!({
        "deploy_repository": "acme/shop",
        "workflow_paths": [".github/workflows/deploy.yml"],
        "production_jobs": ["production-deploy"],
        "population_authors": ["alice"],
        "excluded_repositories": []
    });
    let put = |url: String| {
        let settings = settings.clone();
        async move {
            let mut p = Person::at(&url)?;
            p.sign_in_local(DEV_PERSON).await?;
            Resp::read(
                p.http
                    .put(format!("{url}/api/v1/delivery/settings"))
                    .header("origin", &p.base)
                    .header("x-csrf-token", &p.csrf)
                    .json(&settings)
                    .send()
                    .await?,
            )
            .await
        }
    };

    let d = dev::start(&state, 0, 0).await?;
    let r = put(d.console_url.clone()).await?;
    assert_eq!(r.code(), "DELIVERY_SETTINGS_ACCESS", "{}", r.text);
    assert!(r.text.contains("[code_hosting]"), "{}", r.text);
    d.shutdown(Duration::from_secs(2)).await;

    // A port nothing listens on: the code host is configured, and unreachable.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let token = dir.path().join("github-token");
    std::fs::write(&token, "github_pat_dev_mode_test_0123456789")?;
    let file = dir.path().join("dev.toml");
    std::fs::write(
        &file,
        format!(
            "[code_hosting]\napi_url = \"http://127.0.0.1:{closed}\"\ntoken_file = {:?}\n\n\
             [delivery_targets]\ndeploys_per_day = 1.0\n",
            token.display().to_string()
        ),
    )?;
    let extras = dev::DevExtras::load(&file)?;
    assert!(extras.code_hosting.is_some() && extras.delivery_targets.is_some());
    let d = dev::start_with(
        &state,
        0,
        0,
        dev::DevOptions {
            extras,
            ..Default::default()
        },
    )
    .await?;
    let r = put(d.console_url.clone()).await?;
    assert_eq!(
        (r.status, r.code()),
        (503, "CODE_HOST_UNAVAILABLE"),
        "{}",
        r.text
    );
    d.shutdown(Duration::from_secs(2)).await;

    // Only the optional tables: `serve`'s others are dev mode's own.
    let other = dir.path().join("other.toml");
    std::fs::write(&other, "[oidc]\nissuer = \"https://idp.example\"\n")?;
    assert!(dev::DevExtras::load(&other).is_err());
    Ok(())
}

/// `countersign-console dev` as a child process (the real binary) on ports the OS picks, with
/// its own state directory, optionally `--config FILE`; its banner read from its output.
pub(crate) struct DevProcess {
    child: tokio::process::Child,
    pub dir: tempfile::TempDir,
    /// The banner's lines, as printed.
    pub banner: Vec<String>,
    /// The console's URL, as the banner's `console:` line prints it.
    pub console_url: String,
    pub broker_url: String,
    log: std::path::PathBuf,
}

impl DevProcess {
    pub(crate) async fn start(config: Option<&std::path::Path>) -> anyhow::Result<Self> {
        use anyhow::Context as _;
        use tokio::io::AsyncBufReadExt as _;
        let dir = tempfile::tempdir()?;
        let log = dir.path().join("dev.log");
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_countersign-console"));
        cmd.arg("dev")
            .arg("--dir")
            .arg(dir.path().join("dev"))
            .args(["--broker-port", "0", "--console-port", "0"]);
        if let Some(c) = config {
            cmd.arg("--config").arg(c);
        }
        let mut child = cmd
            .env("RUST_LOG", "info")
            .env_remove("COUNTERSIGN_LOG_JSON")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()
            .context("start countersign-console dev")?;
        let mut lines = tokio::io::BufReader::new(child.stdout.take().context("stdout")?).lines();
        let mut banner = Vec::new();
        let until = std::time::Instant::now() + Duration::from_secs(60);
        while !banner
            .last()
            .is_some_and(|l: &String| l.starts_with("Next:"))
        {
            let line = tokio::time::timeout_at(until.into(), lines.next_line())
                .await
                .context("dev mode printed no banner within 60 s")??
                .with_context(|| {
                    format!(
                        "dev mode exited: {}",
                        std::fs::read_to_string(&log).unwrap_or_default()
                    )
                })?;
            banner.push(line);
        }
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let field = |name: &str| {
            banner
                .iter()
                .find(|l| l.trim_start().starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .map(str::to_owned)
        };
        Ok(Self {
            console_url: field("console:").context("console line")?,
            broker_url: field("broker:").context("broker line")?,
            banner,
            child,
            dir,
            log,
        })
    }

    /// The banner's line starting with `start` (after its indent).
    pub(crate) fn line(&self, start: &str) -> &str {
        self.banner
            .iter()
            .find(|l| l.trim_start().starts_with(start))
            .map(String::as_str)
            .unwrap_or_default()
    }

    /// The state directory.
    pub(crate) fn state(&self) -> std::path::PathBuf {
        self.dir.path().join("dev")
    }

    /// The console's agent token.
    pub(crate) fn agent_token(&self) -> String {
        std::fs::read_to_string(self.state().join(dev::AGENT_TOKEN_FILE))
            .unwrap_or_default()
            .trim()
            .to_owned()
    }

    /// The value the dev store holds for `name` (`agents/demo-passkey`).
    pub(crate) fn value(&self, name: &str) -> String {
        let text = std::fs::read_to_string(self.state().join("secrets.toml")).unwrap_or_default();
        let mut lines = text
            .lines()
            .skip_while(|l| l.trim() != format!("name = \"{name}\""));
        lines
            .find_map(|l| l.trim().strip_prefix("value = \""))
            .and_then(|v| v.strip_suffix('"'))
            .unwrap_or_default()
            .to_owned()
    }

    /// Ends it with SIGTERM; answers its log.
    pub(crate) async fn stop(mut self) -> String {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let _ = tokio::time::timeout(Duration::from_secs(15), self.child.wait()).await;
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// A POST of a page's form, as a browser sends it: its `csrf` field, from `origin`.
async fn post_form(
    p: &Person,
    origin: &str,
    path: &str,
    csrf: Option<&str>,
) -> anyhow::Result<Resp> {
    let mut form = vec![("x", "1")];
    if let Some(c) = csrf {
        form.push(("csrf", c));
    }
    Resp::read(
        p.http
            .post(format!("{}{path}", p.base))
            .header("origin", origin)
            .form(&form)
            .send()
            .await?,
    )
    .await
}

/// Issue 48: dev mode prints ONE console URL, `http://localhost:<port>` (where passkeys work),
/// on its console, passkeys and "Next:" lines, and everything works there: sign-in and every
/// form (at `127.0.0.1` the sign-in form answered 403 CSRF_REJECTED before). The console also
/// answers at `127.0.0.1` and on `[::1]`, and a browser's request from `127.0.0.1` counts as
/// its own, in dev mode only: `serve` refuses the other origin. The Passkeys page's
/// enrollment-code button is a HumanOnly, CSRF-checked form, dev mode's only.
#[tokio::test]
async fn dev_mode_prints_one_url_and_everything_works_there() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let d = dev::start(&dir.path().join(".countersign-dev"), 0, 0).await?;
    let port = d.console.addr.port();
    let url = format!("http://localhost:{port}");
    assert_eq!(d.console_url, url);
    let banner = d.banner();
    let line = |start: &str| {
        banner
            .lines()
            .find(|l| l.trim_start().starts_with(start))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(
        line("console:").contains(&format!("console:       {url}   ")),
        "{banner}"
    );
    assert!(
        line("passkeys:").contains(&format!("{url}/passkeys")),
        "{banner}"
    );
    assert!(
        line("notifications:").contains(&format!("{url}/notifications/mailbox")),
        "{banner}"
    );
    assert!(line("Next:").contains(&format!("open {url} ")), "{banner}");
    assert!(
        !banner.contains(&format!("127.0.0.1:{port}")),
        "the console is printed at one URL: {banner}"
    );

    // At the printed URL: sign-in, then a form of the pages (a token minted).
    let mut p = Person::at(&url)?;
    let r = p.sign_in_local(DEV_PERSON).await?;
    assert_eq!(r.status, 303, "sign-in at {url}: {}", r.text);
    let minted = p
        .post("/api/v1/agent-tokens", json!({ "name": "at localhost" }))
        .await?;
    assert_eq!(minted.status, 201, "{}", minted.text);
    // At 127.0.0.1 too, dev mode only.
    let loopback = format!("http://127.0.0.1:{port}");
    let mut q = Person::at(&loopback)?;
    let r = q.sign_in_local(DEV_PERSON).await?;
    assert_eq!(r.status, 303, "sign-in at {loopback}: {}", r.text);
    let minted = q
        .post("/api/v1/agent-tokens", json!({ "name": "at 127.0.0.1" }))
        .await?;
    assert_eq!(minted.status, 201, "{}", minted.text);
    // Another origin is still refused.
    let r = Resp::read(
        p.http
            .post(format!("{url}/api/v1/agent-tokens"))
            .header("origin", "http://localhost.evil.example")
            .header("x-csrf-token", &p.csrf)
            .json(&json!({ "name": "cross-site" }))
            .send()
            .await?,
    )
    .await?;
    assert_eq!((r.status, r.code()), (403, "CSRF_REJECTED"), "{}", r.text);
    // `localhost` may reach [::1] first: the console answers there too.
    if std::net::TcpListener::bind("[::1]:0").is_ok() {
        let r = reqwest::get(format!("http://[::1]:{port}/healthz")).await?;
        assert_eq!(r.status(), 200);
    }

    // The Passkeys page offers a fresh enrollment code to a person with no passkey: a form
    // that posts its CSRF token, answered with the code filled in.
    let page = p.get("/passkeys").await?;
    assert!(
        page.text.contains("id=\"enroll-code-show\""),
        "{}",
        page.text
    );
    let csrf = scrape_field(&page.text, "csrf").unwrap_or_default();
    let shown = post_form(&p, &url, "/passkeys/enroll-code", Some(&csrf)).await?;
    assert_eq!(shown.status, 200, "{}", shown.text);
    // The input's value: `<input id="enroll-code" name="code" … value="…">`.
    let code = shown
        .text
        .split("id=\"enroll-code\"")
        .nth(1)
        .and_then(|t| t.split("value=\"").nth(1))
        .and_then(|t| t.split('"').next())
        .unwrap_or_default()
        .to_owned();
    assert!(code.len() > 40, "a code is filled in: {}", shown.text);
    assert!(shown.text.contains(&format!("<code>{code}</code>")));
    // Two presses, two codes.
    let again = post_form(&p, &url, "/passkeys/enroll-code", Some(&csrf)).await?;
    assert!(!again.text.contains(&code), "a fresh code each time");
    // Without its CSRF token, or from another site, or by an agent: refused.
    let r = post_form(&p, &url, "/passkeys/enroll-code", None).await?;
    assert_eq!((r.status, r.code()), (403, "CSRF_REJECTED"), "{}", r.text);
    let r = post_form(
        &p,
        "http://evil.example",
        "/passkeys/enroll-code",
        Some(&csrf),
    )
    .await?;
    assert_eq!((r.status, r.code()), (403, "CSRF_REJECTED"), "{}", r.text);
    let r = Resp::read(
        reqwest::Client::new()
            .post(format!("{url}/passkeys/enroll-code"))
            .bearer_auth(d.agent_token())
            .send()
            .await?,
    )
    .await?;
    assert_eq!((r.status, r.code()), (403, "HUMAN_ONLY"), "{}", r.text);
    d.shutdown(Duration::from_secs(2)).await;

    // `serve` keeps its exact origin: at `localhost`, a request from 127.0.0.1 is refused; it
    // makes no enrollment codes, and names the operator's command with the person's login.
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let console = TestConsole::start(ConsoleOptions {
        local_sign_in: true,
        listener: Some(listener),
        host: Some("localhost"),
        ..Default::default()
    })
    .await?;
    let mut p = Person::at(&console.url)?;
    assert_eq!(p.sign_in_local(ADA).await?.status, 303);
    let r = Resp::read(
        p.http
            .post(format!("{}/api/v1/agent-tokens", console.url))
            .header("origin", format!("http://127.0.0.1:{port}"))
            .header("x-csrf-token", &p.csrf)
            .json(&json!({ "name": "from 127.0.0.1" }))
            .send()
            .await?,
    )
    .await?;
    assert_eq!((r.status, r.code()), (403, "CSRF_REJECTED"), "{}", r.text);
    let page = p.get("/passkeys").await?;
    assert!(!page.text.contains("enroll-code-show"), "{}", page.text);
    assert!(
        page.text.contains(&format!(
            "<code>countersign-broker passkeys enroll-code {ADA} --config"
        )),
        "{}",
        page.text
    );
    let csrf = scrape_field(&page.text, "csrf").unwrap_or_default();
    let r = post_form(&p, &console.url, "/passkeys/enroll-code", Some(&csrf)).await?;
    assert_eq!(r.status, 404, "{}", r.text);
    assert!(r.text.contains("in dev mode only"), "{}", r.text);
    console.stop().await;
    Ok(())
}

/// Issue 48, a person's first day with dev mode, in Chromium with a virtual authenticator, at
/// the URL the real `countersign-console dev` PRINTS: she signs in there, gets a fresh
/// enrollment code from the Passkeys page's button and registers a passkey with it, approves
/// her machine's login, and an agent's `countersign run` asks for DEMO_PASSKEY. The notice of
/// it is in the dev mailbox (linked from the Notifications page), and its link opens the
/// request; she approves it from her inbox with her passkey, and the agent's command gets the
/// value.
#[tokio::test]
async fn a_person_uses_passkeys_and_the_dev_mailbox_at_the_url_dev_mode_prints()
-> anyhow::Result<()> {
    use anyhow::Context as _;
    use common::cli::{Helper, collect, wait_timeout};
    use common::webdriver::{Driver, browser_or_skip};
    use std::process::Stdio;
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let dev = DevProcess::start(None).await?;
    let url = dev.console_url.clone();
    assert!(url.starts_with("http://localhost:"), "{:?}", dev.banner);
    assert!(
        dev.line("passkeys:").contains(&format!("{url}/passkeys ")),
        "{:?}",
        dev.banner
    );
    assert!(
        dev.line("Next:").contains(&format!("open {url} ")),
        "{:?}",
        dev.banner
    );

    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let b = driver
        .browser(&chromium, &profiles.path().join("dev"))
        .await?;
    let authenticator = b.add_virtual_authenticator().await?;

    // She opens the printed URL, is sent to sign in, signs in.
    b.goto(&format!("{url}/passkeys")).await?;
    b.wait_for("#email", 10).await?;
    b.type_into("#email", DEV_PERSON).await?;
    b.click_text("Sign in").await?;
    b.wait_text("h1", "Passkeys", 10).await?;
    assert!(b.current_url().await?.starts_with(&url));

    // No passkey yet: the page's button shows a fresh code and fills it in.
    b.wait_text("#list", "Show an enrollment code above", 10)
        .await?;
    b.click("#enroll-code-show").await?;
    let shown = b
        .wait_text("#enroll-code-shown", "Your enrollment code", 10)
        .await?;
    let code = b
        .execute("return document.getElementById('enroll-code').value;")
        .await?;
    let code = code.as_str().unwrap_or_default().to_owned();
    assert!(code.len() > 40 && shown.contains(&code), "{shown}");
    b.type_into("#passkey-name", "dev laptop").await?;
    b.click("#passkey-add-button").await?;
    b.wait_text("#list", "dev laptop", 15).await?;
    assert_eq!(b.virtual_credentials(&authenticator).await?.len(), 1);
    // With a passkey, the page offers no code any more.
    b.goto(&format!("{url}/passkeys")).await?;
    b.wait_text("#list", "dev laptop", 10).await?;
    assert_eq!(
        b.execute("return document.querySelectorAll('#enroll-code-show').length;")
            .await?,
        json!(0)
    );

    // Her machine logs in through the real launcher helper, told of the printed URL; she
    // approves its code in the console.
    let helper = Helper::start(&dev.broker_url, &url, "dev-laptop").await?;
    let login = helper.start_login(DEV_PERSON).await?;
    assert_eq!(login.first["console_url"], url.as_str());
    b.goto(&format!("{url}/machines/approve")).await?;
    b.type_into("#code", &login.code).await?;
    b.click("#lookup button[type=submit]").await?;
    b.wait_text("#machine-facts", "dev-laptop", 10).await?;
    b.click("button[data-action=approve-machine]").await?;
    b.wait_text("#result", "Approved", 10).await?;
    login.issued().await?;

    // An agent's command asks for DEMO_PASSKEY; it checks the value it is given.
    let value = dev.value("agents/demo-passkey");
    anyhow::ensure!(!value.is_empty(), "the dev store's DEMO_PASSKEY");
    let script = format!("[ \"$DEMO_PASSKEY\" = '{value}' ] && printf ok; read -r _ || true");
    let mut agent = helper
        .cli(&[
            "run",
            "--secret",
            "DEMO_PASSKEY",
            "--reason",
            "try a passkey approval",
            "--",
            "sh",
            "-c",
            &script,
        ])?
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let agent_stdin = agent.stdin.take().context("stdin")?;
    let agent_out = collect(agent.stdout.take().context("stdout")?);
    let agent_err = collect(agent.stderr.take().context("stderr")?);
    b.goto(&format!("{url}/")).await?;
    let row = "li[data-record-id]";
    b.wait_text(row, "try a passkey approval", 30).await?;
    let record = b.attribute(row, "data-record-id").await?;

    // The notice is in the dev mailbox, linked from the Notifications page; its link opens
    // the request.
    b.goto(&format!("{url}/notifications")).await?;
    b.click("#mailbox-link a").await?;
    b.wait_text("h1", "Dev mailbox", 10).await?;
    let deep = format!("{url}/requests/{record}");
    let link = format!("a.deep-link[href=\"{deep}\"]");
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while b.wait_for(&link, 1).await.is_err() {
        anyhow::ensure!(
            std::time::Instant::now() < until,
            "no notice links to {deep}: {}",
            b.source().await
        );
        b.goto(&format!("{url}/notifications/mailbox")).await?;
    }
    let text = b.wait_text(&link, "DEMO_PASSKEY", 5).await?;
    assert!(text.contains("with your passkey"), "{text}");
    b.wait_text("#mailbox-list", "machine login for dev-laptop", 5)
        .await?;
    b.screenshot(&crate::browser::shots().join("dev-mailbox.png"))
        .await?;
    b.click(&link).await?;
    b.wait_text("h1", "Secret request", 10).await?;
    assert_eq!(b.current_url().await?, deep);
    b.wait_text("#statement-words", "DEMO_PASSKEY", 10).await?;

    // She approves it from her inbox, with her passkey; the agent's command gets the value.
    b.goto(&format!("{url}/")).await?;
    let row = format!("li[data-record-id=\"{record}\"]");
    b.wait_text(&row, "DEMO_PASSKEY", 10).await?;
    b.click(&format!("{row} button[data-action=approve]"))
        .await?;
    b.wait_text("#flash", "Approved", 20).await?;
    drop(agent_stdin);
    let status = wait_timeout(&mut agent, 30).await?;
    let (out, err) = (agent_out.await?, agent_err.await?);
    assert!(status.success(), "run: {status}: {err}\n{}", helper.log());
    assert_eq!(out, "ok", "stderr: {err}");

    helper.stop().await?;
    b.quit().await;
    drop(driver);
    let log = dev.stop().await;
    assert!(!log.contains(&value), "dev mode's log shows the value");
    Ok(())
}
