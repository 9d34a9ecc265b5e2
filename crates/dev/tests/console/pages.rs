//! The approval pages as a new user tries them, in headless Chromium over WebDriver against a
//! real broker and console (agents and machines speak the broker protocol with real keys):
//! a decision on the request page shows the request's new state, who decided and when, and the
//! way on to the next pending request; the history page lists what the person decided, newest
//! first; the grants and machines pages show changes made elsewhere without a reload; revoking a
//! grant, a machine login or a token asks for a confirmation in a `<dialog>` (cancel keeps it);
//! every
//! page writes times in one format; a new personal token has a copy button; user text reaches
//! the page as text. Screenshots go to `docs/screenshots/` with
//! `COUNTERSIGN_UPDATE_SCREENSHOTS=1`.
//!
//! Skips when Chromium or ChromeDriver is absent, unless `COUNTERSIGN_REQUIRE_BROWSER=1`.

use crate::browser::shots;
use crate::common;

use anyhow::Context;
use common::idp::TestIdp;
use common::webdriver::{Browser, Driver, browser_or_skip};
use common::*;
use serde_json::{Value, json};

/// Every `<time>` on the page carries its `datetime`, reads as words relative to now ("just
/// now", "3 min ago", "yesterday", "24 Nov") and holds `YYYY-MM-DD HH:MM UTC` in its title (shown
/// on hover); answers how many there are.
async fn times_in_one_format(b: &Browser) -> anyhow::Result<u64> {
    let v = b
        .execute(
            "const ts = Array.from(document.querySelectorAll('time'));\
             const bad = ts.filter(t => !/^\\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC$/.test(t.title) \
               || !/^(just now|now|\\d+ min ago|in \\d+ min|\\d+ h ago|in \\d+ h|yesterday|tomorrow|\\d+ days ago|in \\d+ days|\\d{1,2} [A-Z][a-z]{2}( \\d{4})?)$/.test(t.textContent) \
               || !t.getAttribute('datetime'));\
             return bad.length ? 'bad: ' + bad.map(t => t.outerHTML).join(' ') : ts.length;",
        )
        .await?;
    v.as_u64().with_context(|| format!("times: {v}"))
}

/// Approves a pending machine login by its code through the API, as the person; answers its
/// record.
async fn approve_machine(who: &Person, code: &str) -> anyhow::Result<String> {
    let rec = who
        .post(
            "/api/v1/credential-requests/machine-lookup",
            json!({ "code": code }),
        )
        .await?;
    anyhow::ensure!(rec.status == 200, "lookup: {}", rec.text);
    let id = rec.json["record_id"].as_str().context("record_id")?;
    let r = who
        .post(
            &format!("/api/v1/credential-requests/{id}/approve"),
            json!({ "code": code }),
        )
        .await?;
    anyhow::ensure!(r.status == 200, "approve: {}", r.text);
    Ok(id.to_owned())
}

/// The grants the person may revoke, by id.
async fn live_grants(p: &Person) -> anyhow::Result<Vec<String>> {
    let r = p.get("/api/v1/credential-grants?approver=me").await?;
    anyhow::ensure!(r.status == 200, "grants: {}", r.text);
    Ok(r.json
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|g| g["grant_id"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default())
}

fn record_of(v: &Value) -> anyhow::Result<String> {
    Ok(v["record_id"]
        .as_str()
        .with_context(|| format!("no record in {v}"))?
        .to_owned())
}

#[tokio::test]
async fn approval_pages_as_a_new_user_tries_them() -> anyhow::Result<()> {
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
    let url = |p: &str| format!("{}{p}", console.url);

    // Ada signs in and looks at her (empty) machines page.
    idp.set_next_login(ADA);
    ada.goto(&url("/machines")).await?;
    ada.click("#oidc").await?;
    ada.wait_text("h1", "Machines", 10).await?;
    ada.wait_for("#list .empty", 10).await?;
    // The same person elsewhere (another tab, the CLI): changes made there reach this page.
    let mut elsewhere = Person::new(&console)?;
    elsewhere.sign_in_oidc(&idp, ADA).await?;

    // Her desk machine logs in; she approves it elsewhere: it appears without a reload.
    let desk = start_machine_login(&broker, ADA, "ada-desk").await?;
    let desk_record = approve_machine(&elsewhere, &desk.code).await?;
    let desk = desk.machine(&broker).await?;
    let desk_row = format!("tr[data-credential-id=\"{}\"]", desk.credential_id);
    ada.wait_text(&desk_row, "ada-desk", 10).await?;
    assert!(times_in_one_format(&ada).await? >= 1);

    // Agents on it ask for her secret; one reason carries markup, shown as text.
    let session = desk.enroll(&broker, "rt-1").await?;
    let nasty = "<b>ship</b> & \"deploy\"";
    let first_asked = session
        .request(&broker, &[ADA_SECRET], nasty, Some(3600))
        .await?;
    let first = record_of(&first_asked)?;
    let first_request = first_asked["request_id"].as_str().unwrap_or_default();
    // (A second session: one session has one pending request per secret.)
    let other = desk.enroll(&broker, "rt-1b").await?;
    let second_asked = other
        .request(&broker, &[ADA_SECRET], "rotate the keys", Some(600))
        .await?;
    let second = record_of(&second_asked)?;
    let second_request = second_asked["request_id"].as_str().unwrap_or_default();

    // She opens the first request and approves it: the page shows its new state, that she
    // decided it and when, and offers the next pending request.
    ada.goto(&url(&format!("/requests/{first}"))).await?;
    ada.wait_text("h1", "Secret request", 10).await?;
    ada.wait_text("dl.facts", nasty, 5).await?;
    // The request's id, as the CLI and MCP print it (issue 48), and its record's.
    ada.wait_text("#request-id", first_request, 5).await?;
    ada.wait_text("#record-id", &first, 5).await?;
    assert_eq!(
        ada.execute("return document.querySelectorAll('dl.facts b').length")
            .await?,
        json!(0),
        "the reason's markup reached the page as markup"
    );
    assert!(times_in_one_format(&ada).await? >= 1);
    ada.click("button[data-action=approve]").await?;
    let outcome = ada.wait_text("#outcome", "Approved by you at ", 10).await?;
    assert!(outcome.contains(" UTC"), "{outcome}");
    ada.wait_text("#state", "approved", 5).await?;
    assert!(
        ada.wait_for("button[data-action=approve]", 1)
            .await
            .is_err(),
        "a decided request still offers approve"
    );
    let next = ada.attribute("#next-request", "href").await?;
    assert!(
        next.ends_with(&format!("/requests/{second_request}")),
        "{next}"
    );
    assert!(times_in_one_format(&ada).await? >= 2);
    ada.screenshot(&shots().join("request-decided.png")).await?;

    // The way on: the next request, which she denies; nothing else waits, back to the inbox.
    ada.click("#next-request").await?;
    ada.wait_text("dl.facts", "rotate the keys", 10).await?;
    ada.click("button[data-action=deny]").await?;
    ada.wait_text("#outcome", "Denied by you at ", 10).await?;
    assert!(ada.wait_for("#next-request", 1).await.is_err());
    ada.click("#back-to-inbox").await?;
    ada.wait_text("h1", "Inbox", 10).await?;
    ada.wait_for("#inbox .empty", 10).await?;

    // Her history: what she decided and when, newest first (the desk's login too).
    ada.goto(&url("/history")).await?;
    ada.wait_text("h1", "Your decisions", 10).await?;
    let rows = ada
        .execute(
            "return Array.from(document.querySelectorAll('#list tr[data-record-id]'))\
               .map(r => [r.getAttribute('data-record-id'), r.querySelector('.badge').textContent]);",
        )
        .await?;
    assert_eq!(
        rows,
        json!([
            [second, "denied"],
            [first, "approved"],
            [desk_record, "approved"]
        ])
    );
    ada.wait_text("#list", nasty, 5).await?;
    ada.wait_text("#list", "Machine login for ada-desk", 5)
        .await?;
    assert_eq!(times_in_one_format(&ada).await?, 3);
    ada.screenshot(&shots().join("history.png")).await?;
    // Bob's history is his own.
    let mut bob = Person::new(&console)?;
    bob.sign_in_oidc(&idp, BOB).await?;
    let his = bob.get("/history").await?;
    assert_eq!(his.status, 200);
    assert!(
        his.text.contains("You have not decided anything") && !his.text.contains(&first),
        "{}",
        his.text
    );

    // The grants page: the approved grant, then one approved elsewhere appears by itself.
    ada.goto(&url("/grants")).await?;
    ada.wait_text("h1", "Live grants", 10).await?;
    ada.wait_text("#list", ADA_SECRET, 10).await?;
    let third_session = desk.enroll(&broker, "rt-1c").await?;
    let third = record_of(
        &third_session
            .request(&broker, &[ADA_SECRET], "one more run", Some(900))
            .await?,
    )?;
    let approved = elsewhere
        .post(
            &format!("/api/v1/credential-requests/{third}/approve"),
            json!({}),
        )
        .await?;
    assert_eq!(approved.status, 200, "{}", approved.text);
    let grant = approved.json["grant_id"]
        .as_str()
        .context("grant_id")?
        .to_owned();
    let grant_row = format!("tr[data-grant-id=\"{grant}\"]");
    ada.wait_for(&grant_row, 10).await?;
    assert!(times_in_one_format(&ada).await? >= 2);

    // Revoking it asks first; cancelling keeps the grant.
    ada.click(&format!("{grant_row} button")).await?;
    ada.wait_text("#confirm[open]", "stops reading these secrets", 5)
        .await?;
    ada.screenshot(&shots().join("confirm-revoke.png")).await?;
    ada.click("#confirm-cancel").await?;
    ada.wait_gone("#confirm[open]", 5).await?;
    ada.wait_for(&grant_row, 5).await?;
    assert!(live_grants(&elsewhere).await?.contains(&grant));
    // Confirmed, it is revoked and leaves the list.
    ada.click(&format!("{grant_row} button")).await?;
    ada.wait_for("#confirm[open]", 5).await?;
    ada.click("#confirm-ok").await?;
    ada.wait_text("#result", "Revoked", 10).await?;
    ada.wait_gone(&grant_row, 10).await?;
    assert!(!live_grants(&elsewhere).await?.contains(&grant));

    // Machines: a second machine approved elsewhere appears; revoking it says it ends every
    // session on that machine, and does so once confirmed.
    ada.goto(&url("/machines")).await?;
    ada.wait_for(&desk_row, 10).await?;
    let laptop = start_machine_login(&broker, ADA, "ada-laptop").await?;
    approve_machine(&elsewhere, &laptop.code).await?;
    let laptop = laptop.machine(&broker).await?;
    let laptop_row = format!("tr[data-credential-id=\"{}\"]", laptop.credential_id);
    ada.wait_text(&laptop_row, "ada-laptop", 10).await?;
    let laptop_session = laptop.enroll(&broker, "rt-2").await?;
    ada.click(&format!("{laptop_row} button")).await?;
    let asked = ada
        .wait_text("#confirm[open]", "ends every session on that machine", 5)
        .await?;
    assert!(asked.contains("ada-laptop"), "{asked}");
    ada.screenshot(&shots().join("confirm-revoke-machine.png"))
        .await?;
    ada.click("#confirm-ok").await?;
    ada.wait_text("#result", "Revoked", 10).await?;
    ada.wait_gone(&laptop_row, 10).await?;
    ada.wait_for(&desk_row, 5).await?;
    let refused = laptop_session
        .request(&broker, &[ADA_SECRET], "after revocation", None)
        .await;
    assert!(refused.is_err(), "the revoked machine's session still asks");

    // A new personal token: shown once, with a copy button.
    ada.goto(&url("/tokens")).await?;
    ada.type_into("#token-name", "laptop agent").await?;
    ada.click("#mint button[type=submit]").await?;
    ada.wait_for("#minted", 10).await?;
    let token = ada
        .execute("return document.getElementById('minted-token').value")
        .await?;
    let token = token.as_str().context("token")?.to_owned();
    assert!(token.starts_with("csp_"), "{token}");
    ada.click("#copy-token").await?;
    ada.wait_text("#copy-token", "Copied", 5).await?;
    // Copied from the field, which holds the whole token selected (the fallback's path too).
    let selected = ada
        .execute(
            "const i = document.getElementById('minted-token');\
             return i.value.substring(i.selectionStart, i.selectionEnd);",
        )
        .await?;
    assert_eq!(selected, json!(token));
    ada.wait_text("#list", "laptop agent", 10).await?;
    assert!(times_in_one_format(&ada).await? >= 1);
    ada.screenshot(&shots().join("tokens.png")).await?;
    // The token works.
    let me = bearer_get(&console, &token, "/api/v1/me").await?;
    assert_eq!(me.json["owner"], ADA, "{}", me.text);
    // Revoking it asks too; then the agent holding it is refused.
    let token_row = "#list tr[data-token-id]";
    ada.click(&format!("{token_row} button")).await?;
    ada.wait_text("#confirm[open]", "laptop agent", 5).await?;
    ada.click("#confirm-ok").await?;
    ada.wait_text("#result", "Token revoked", 10).await?;
    ada.wait_gone(token_row, 10).await?;
    let refused = bearer_get(&console, &token, "/api/v1/me").await?;
    assert_eq!(refused.status, 401, "{}", refused.text);

    ada.quit().await;
    drop(driver);
    console.stop().await;
    broker.stop().await;
    Ok(())
}
