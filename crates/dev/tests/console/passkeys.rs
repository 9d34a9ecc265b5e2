//! Passkeys in the browser (issue 29, docs/passkeys.md): in headless Chromium with a virtual
//! authenticator (the WebAuthn spec's WebDriver extension, which ChromeDriver implements), a
//! person registers a passkey with an operator's enrollment code on the passkeys page, then
//! approves a request that policy marks `approval = "passkey"` on its page, which shows the
//! statement in words; the agent's session gets its value. A second browser holding only the
//! person's session cookie cannot approve: it has no passkey, and the console's API without a
//! countersignature is refused PASSKEY_REQUIRED by the broker.
//!
//! The console answers at `http://localhost:<port>`: WebAuthn takes a domain, never an IP
//! address, as the relying party.

use crate::browser::shots;
use crate::common;

use common::webdriver::{Browser, Driver, browser_or_skip};
use common::*;
use serde_json::json;

async fn signed_in(b: &Browser, console: &TestConsole, email: &str) -> anyhow::Result<()> {
    b.goto(&format!("{}/passkeys", console.url)).await?;
    b.wait_for("#email", 10).await?;
    b.type_into("#email", email).await?;
    b.click_text("Sign in").await?;
    b.wait_text("h1", "Passkeys", 10).await?;
    Ok(())
}

/// The session's request for `ADA_SECRET`: its record id and request id.
async fn ada_asks(broker: &TestBroker, session: &Session) -> anyhow::Result<(String, String)> {
    let r = session
        .request(broker, &[ADA_SECRET], "deploy the release", None)
        .await?;
    anyhow::ensure!(r["state"] == "pending", "{r}");
    let s = |f: &str| r[f].as_str().unwrap_or_default().to_owned();
    Ok((s("record_id"), s("request_id")))
}

#[tokio::test]
async fn a_person_registers_a_passkey_and_approves_with_it_and_a_stolen_cookie_cannot()
-> anyhow::Result<()> {
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let port = listener.local_addr()?.port();
    let broker = TestBroker::start_with(&format!(
        "\n[passkeys]\nrp_id = \"localhost\"\norigins = [\"http://localhost:{port}\"]\n\
         \n[[approval]]\nsecret = \"{ADA_SECRET}\"\napproval = \"passkey\"\n"
    ))
    .await?;
    let console = TestConsole::start(ConsoleOptions {
        broker: Some(&broker),
        local_sign_in: true,
        listener: Some(listener),
        host: Some("localhost"),
        ..Default::default()
    })
    .await?;
    let url = |p: &str| format!("{}{p}", console.url);

    // The agent's side: Ada's machine logs in, a session enrolls.
    let login = start_machine_login(&broker, ADA, "ada-laptop").await?;
    let record = broker
        .console_call("/v1/machine-logins/lookup", json!({ "code": login.code }))
        .await?;
    let record = record.json["record_id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let approved = broker
        .console_call(
            &format!("/v1/credential-requests/{record}/approve"),
            json!({ "approver": ADA, "code": login.code }),
        )
        .await?;
    anyhow::ensure!(approved.status == 200, "{}", approved.text);
    let machine = login.machine(&broker).await?;
    let session = machine.enroll(&broker, "ada-agent").await?;

    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let ada = driver
        .browser(&chromium, &profiles.path().join("ada"))
        .await?;
    let authenticator = ada.add_virtual_authenticator().await?;
    signed_in(&ada, &console, ADA).await?;

    // No passkey yet: the page says how to get the first one.
    ada.wait_text("#list", "Ask an operator for an enrollment code", 10)
        .await?;
    // `serve` makes no codes: the page names the operator's command, with her login in it.
    ada.wait_text(
        "#enroll-help",
        &format!("countersign-broker passkeys enroll-code {ADA} --config"),
        5,
    )
    .await?;
    assert_eq!(
        ada.execute("return document.querySelectorAll('#enroll-code-show').length;")
            .await?,
        json!(0)
    );
    let code = {
        let key = zeroize::Zeroizing::new(vec![9u8; 32]);
        let sealer = countersign_broker_core::seal::Sealer::new(&key).expect("sealer");
        countersign_broker_core::passkey::enroll_code(
            &sealer,
            &countersign_broker_core::SystemEntropy,
            &countersign_broker_core::ids::Login::parse(ADA).expect("login"),
            chrono::Utc::now(),
            chrono::Duration::minutes(15),
        )
        .map_err(anyhow::Error::msg)?
        .value
    };
    ada.type_into("#passkey-name", "laptop").await?;
    ada.type_into("#enroll-code", &code).await?;
    ada.click("#passkey-add-button").await?;
    ada.wait_text("#list", "laptop", 15).await?;
    ada.wait_text("#list", "an operator's enrollment code", 5)
        .await?;
    assert_eq!(ada.virtual_credentials(&authenticator).await?.len(), 1);
    ada.screenshot(&shots().join("passkeys.png")).await?;
    // The same authenticator again: the browser itself refuses (the page excludes the
    // passkeys already registered), and says so.
    ada.type_into("#passkey-name", "again").await?;
    ada.click("#passkey-add-button").await?;
    ada.wait_text("#result", "already registered", 15).await?;

    // The agent asks; Ada opens the request: the statement in words, then her passkey.
    // The page opens by the request id its agent was given (issue 48); the statement is one
    // plain sentence naming the session by its machine, not its runtime id.
    let (_, request) = ada_asks(&broker, &session).await?;
    ada.goto(&url(&format!("/requests/{request}"))).await?;
    ada.wait_text("#request-id", &request, 10).await?;
    let words = ada.wait_text("#statement-words", "I, ", 10).await?;
    assert_eq!(
        words,
        format!(
            "I, {ADA}, approve that the session ‘ada-agent’ on {ADA}'s machine receives {ADA_SECRET} for as long as the session lives, for the reason “deploy the release”."
        )
    );
    ada.wait_text("button.approve", "Approve with passkey", 5)
        .await?;
    ada.screenshot(&shots().join("passkey-approve.png")).await?;
    ada.click("button.approve").await?;
    ada.wait_text("#outcome", "Approved by you", 15).await?;
    let request = session.get_request(&broker, &request).await?;
    let grant = request["grant_id"].as_str().unwrap_or_default().to_owned();
    let values = session.values(&broker, &grant).await?;
    assert_eq!(values.status, 200, "{}", values.text);
    assert_eq!(
        values.json["values"][ADA_SECRET].as_str(),
        broker.values.get(ADA_SECRET).map(String::as_str)
    );

    // A second browser holding only Ada's session cookie: no passkey, so no approval.
    let (record, _) = ada_asks(&broker, &session).await?;
    let thief = driver
        .browser(&chromium, &profiles.path().join("thief"))
        .await?;
    thief.add_virtual_authenticator().await?;
    thief.goto(&url("/sign-in")).await?;
    for c in ada.cookies().await? {
        let mut c = c.clone();
        if let Some(o) = c.as_object_mut() {
            o.remove("sameSite");
            o.remove("expiry");
        }
        thief.add_cookie(&c).await?;
    }
    thief.goto(&url(&format!("/requests/{record}"))).await?;
    thief.wait_for("#statement-words", 10).await?;
    thief.click("button.approve").await?;
    thief.wait_for("#result.error", 30).await?;
    // Its console API without a countersignature: the broker refuses.
    let refused = thief
        .execute(&format!(
            "return (async () => {{ const r = await fetch('/api/v1/credential-requests/{record}/approve', {{method: 'POST', \
             headers: {{'Content-Type': 'application/json', 'X-CSRF-Token': document.querySelector('meta[name=csrf-token]').content}}, \
             body: '{{}}'}}); return [r.status, (await r.json()).code]; }})();"
        ))
        .await?;
    assert_eq!(refused, json!([403, "PASSKEY_REQUIRED"]));
    let r = broker
        .console_call(
            &format!("/v1/credential-requests/{record}/statement"),
            json!({ "approver": ADA }),
        )
        .await?;
    assert_eq!(r.status, 200, "still pending: {}", r.text);

    thief.quit().await;
    ada.quit().await;
    console.stop().await;
    broker.stop().await;
    Ok(())
}
