//! The approval pages in headless Chromium (Debian's `chromium` and `chromium-driver`), driven
//! over WebDriver, with the real launcher helper (`countersign-launcher`, on a temporary socket)
//! and the real `countersign` CLI: the owner signs in and approves the machine's login by typing
//! the code `countersign login` shows; an agent's `countersign run --secret <owner-tier secret>`
//! waits while its request appears in the owner's inbox without a reload; a second person is
//! refused NOT_APPROVER; the owner approves in the page, and the agent's command receives the
//! value. Screenshots of the pages are saved to `docs/screenshots/` when
//! `COUNTERSIGN_UPDATE_SCREENSHOTS=1` (else under the target directory).
//!
//! Skips (printing `skipped: chromium not installed`) when Chromium or ChromeDriver is absent,
//! unless `COUNTERSIGN_REQUIRE_BROWSER=1`.

use crate::common;

use std::process::Stdio;

use anyhow::Context;
use common::cli::{Helper, collect, wait_timeout};
use common::idp::TestIdp;
use common::webdriver::{Driver, browser_or_skip};
use common::*;

/// Where the screenshots go: `docs/screenshots/` with `COUNTERSIGN_UPDATE_SCREENSHOTS=1`, else
/// the target directory (they are taken either way; a plain test run leaves the tree clean).
pub fn shots() -> std::path::PathBuf {
    let dir = if std::env::var("COUNTERSIGN_UPDATE_SCREENSHOTS").as_deref() == Ok("1") {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots")
    } else {
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("screenshots")
    };
    let _ = std::fs::create_dir_all(&dir);
    dir
}

#[tokio::test]
async fn approve_in_the_browser() -> anyhow::Result<()> {
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let broker = TestBroker::start().await?;
    let idp = TestIdp::start().await?;
    let console = TestConsole::start(ConsoleOptions {
        broker: Some(&broker),
        idp: Some(&idp),
        ..Default::default()
    })
    .await?;
    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let ada = driver
        .browser(&chromium, &profiles.path().join("ada"))
        .await?;

    // Ada opens the console, is sent to sign in, signs in with the provider.
    idp.set_next_login(ADA);
    ada.goto(&format!("{}/grants", console.url)).await?;
    if let Err(e) = ada.wait_for("#oidc", 10).await {
        anyhow::bail!(
            "{e}: at {} showing {}",
            ada.current_url().await?,
            ada.source().await
        );
    }
    ada.screenshot(&shots().join("sign-in.png")).await?;
    ada.click("#oidc").await?;
    ada.wait_text("h1", "Live grants", 10).await?;
    assert!(ada.current_url().await?.ends_with("/grants"));

    // Her machine logs in: the real launcher helper on a temporary socket, `countersign login`
    // shows a code, she types it in the console and approves.
    let helper = Helper::start(&broker.url, &console.url, "ada-laptop").await?;
    let login = helper.start_login(ADA).await?;
    assert_eq!(login.first["console_url"], console.url.as_str());
    assert_eq!(login.first["host"], "ada-laptop");
    ada.goto(&format!("{}/machines/approve", console.url))
        .await?;
    ada.type_into("#code", &login.code).await?;
    ada.click("#lookup button[type=submit]").await?;
    ada.wait_text("#machine-facts", "ada-laptop", 10).await?;
    ada.screenshot(&shots().join("machine-approve.png")).await?;
    ada.click("button[data-action=approve-machine]").await?;
    ada.wait_text("#result", "Approved", 10).await?;
    let credential_id = login.issued().await?;

    // She watches her inbox; an agent asks, through the CLI, for her owner-tier secret: `run`
    // waits for a person, and the request appears by itself. The command checks the value it
    // is given, then holds the session (and so the grant) open until its stdin closes.
    // (`run` masks the value in its output, so the command compares it and says `ok`.)
    ada.goto(&format!("{}/", console.url)).await?;
    ada.wait_for(".empty", 10).await?;
    let script = format!(
        "[ \"${ADA_SECRET}\" = '{}' ] && printf ok; read -r _ || true",
        broker.values[ADA_SECRET]
    );
    let mut agent = helper
        .cli(&[
            "run",
            "--secret",
            ADA_SECRET,
            "--reason",
            "run the release pipeline",
            "--lifetime",
            "3600",
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
    let row = "li[data-record-id]";
    ada.wait_text(row, "run the release pipeline", 30).await?;
    let record = ada.attribute(row, "data-record-id").await?;
    let row = format!("li[data-record-id=\"{record}\"]");
    ada.wait_text(&row, ADA_SECRET, 5).await?;
    ada.screenshot(&shots().join("inbox.png")).await?;

    // Bob signs in elsewhere and tries to approve it: the broker refuses him.
    let bob = driver
        .browser(&chromium, &profiles.path().join("bob"))
        .await?;
    idp.set_next_login(BOB);
    bob.goto(&format!("{}/requests/{record}", console.url))
        .await?;
    bob.click("#oidc").await?;
    bob.wait_text("h1", "Secret request", 10).await?;
    bob.click("button[data-action=approve]").await?;
    bob.wait_text("#result", "NOT_APPROVER", 10).await?;
    bob.screenshot(&shots().join("not-approver.png")).await?;
    bob.quit().await;

    // Ada approves in her inbox; the agent's command runs with the value.
    ada.click(&format!("{row} button[data-action=approve]"))
        .await?;
    ada.wait_text("#flash", "Approved", 10).await?;

    // Her grants (the command still holds its session) and machines.
    ada.goto(&format!("{}/grants", console.url)).await?;
    ada.wait_text("tr[data-grant-id]", ADA_SECRET, 30).await?;
    ada.screenshot(&shots().join("grants.png")).await?;
    ada.goto(&format!("{}/machines", console.url)).await?;
    let machine_row = format!("tr[data-credential-id=\"{credential_id}\"]");
    ada.wait_for(&machine_row, 10).await?;
    ada.screenshot(&shots().join("machines.png")).await?;

    // The command ends: `countersign run` exits with its status, and it printed the value from
    // the store.
    drop(agent_stdin);
    let status = wait_timeout(&mut agent, 30).await?;
    let (out, err) = (agent_out.await?, agent_err.await?);
    assert!(status.success(), "run: {status}: {err}\n{}", helper.log());
    assert_eq!(out, "ok", "stderr: {err}");

    // She revokes the machine's login: it can no longer start a session.
    ada.click(&format!("{machine_row} button")).await?;
    ada.wait_text("#confirm[open]", "ends every session", 5)
        .await?;
    ada.click("#confirm-ok").await?;
    ada.wait_text("#result", "Revoked", 10).await?;
    let after = helper.cli(&["run", "--", "true"])?.output().await?;
    let why = String::from_utf8_lossy(&after.stderr);
    assert_eq!(after.status.code(), Some(1), "run after revocation: {why}");
    assert!(why.contains("LAUNCHER_INVALID"), "{why}");
    helper.stop().await?;

    ada.quit().await;
    drop(driver);
    console.stop().await;
    broker.stop().await;
    Ok(())
}
