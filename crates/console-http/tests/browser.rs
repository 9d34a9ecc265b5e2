//! The approval pages in headless Chromium (Debian's `chromium` and `chromium-driver`), driven
//! over WebDriver: a person approves a machine login by typing its code, an agent's owner-tier
//! request appears in the owner's inbox without a reload and is approved there (the agent then
//! receives the value), and a second person is refused NOT_APPROVER. Screenshots of the pages
//! are saved to `docs/screenshots/`.
//!
//! Skips (printing `skipped: chromium not installed`) when Chromium or ChromeDriver is absent,
//! unless `COUNTERSIGN_REQUIRE_BROWSER=1`.

mod common;

use common::idp::TestIdp;
use common::webdriver::{Driver, find_browser};
use common::*;

fn shots() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/screenshots")
}

#[tokio::test]
async fn approve_in_the_browser() -> anyhow::Result<()> {
    let Some((chromium, chromedriver)) = find_browser() else {
        assert!(
            std::env::var("COUNTERSIGN_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "COUNTERSIGN_REQUIRE_BROWSER=1 but chromium or chromedriver is not installed"
        );
        println!("skipped: chromium not installed");
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

    // Her machine logs in; she types its code and approves.
    let login = start_machine_login(&broker, ADA, "ada-laptop").await?;
    ada.goto(&format!("{}/machines/approve", console.url))
        .await?;
    ada.type_into("#code", &login.code).await?;
    ada.click("#lookup button[type=submit]").await?;
    ada.wait_text("#machine-facts", "ada-laptop", 10).await?;
    ada.screenshot(&shots().join("machine-approve.png")).await?;
    ada.click("button[data-action=approve-machine]").await?;
    ada.wait_text("#result", "Approved", 10).await?;
    let machine = login.machine(&broker).await?;

    // She watches her inbox; an agent asks for her owner-tier secret; it appears by itself.
    ada.goto(&format!("{}/", console.url)).await?;
    ada.wait_for(".empty", 10).await?;
    let session = machine.enroll(&broker, "claude-session-7").await?;
    let req = session
        .request(
            &broker,
            &[ADA_SECRET],
            "run the release pipeline",
            Some(3600),
        )
        .await?;
    assert_eq!(req["state"], "pending");
    let record = req["record_id"].as_str().unwrap_or_default().to_owned();
    let row = format!("li[data-record-id=\"{record}\"]");
    ada.wait_for(&row, 10).await?;
    ada.wait_text(&row, "run the release pipeline", 5).await?;
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

    // Ada approves in her inbox; the agent receives the value.
    ada.click(&format!("{row} button[data-action=approve]"))
        .await?;
    ada.wait_text("#flash", "Approved", 10).await?;
    let request_id = req["request_id"].as_str().unwrap_or_default().to_owned();
    let grant =
        eventually(10, || async {
            let r = session.get_request(&broker, &request_id).await?;
            Ok((r["state"] == "granted")
                .then(|| r["grant_id"].as_str().unwrap_or_default().to_owned()))
        })
        .await?;
    let values = session.values(&broker, &grant).await?;
    assert_eq!(
        values.json["values"][ADA_SECRET],
        broker.values[ADA_SECRET].as_str()
    );

    // Her grants and machines, with revoke.
    ada.goto(&format!("{}/grants", console.url)).await?;
    ada.wait_for(&format!("tr[data-grant-id=\"{grant}\"]"), 10)
        .await?;
    ada.screenshot(&shots().join("grants.png")).await?;
    ada.goto(&format!("{}/machines", console.url)).await?;
    ada.wait_for(
        &format!("tr[data-credential-id=\"{}\"]", machine.credential_id),
        10,
    )
    .await?;
    ada.screenshot(&shots().join("machines.png")).await?;
    ada.click(&format!(
        "tr[data-credential-id=\"{}\"] button",
        machine.credential_id
    ))
    .await?;
    ada.wait_text("#result", "Revoked", 10).await?;
    assert_eq!(session.values(&broker, &grant).await?.status, 401);

    ada.quit().await;
    drop(driver);
    console.stop().await;
    broker.stop().await;
    Ok(())
}
