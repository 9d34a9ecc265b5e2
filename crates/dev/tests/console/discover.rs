//! Discoverable from where people are (issue 48), over real HTTP and in headless Chromium: a
//! project's documents linked from the projects list and its issue list; the issue page's
//! "New document" (the form with the issue filled in, the document created on the issue) and
//! its message box to the session holding the issue (delivered on the session's link); `@` in
//! a comment box offering live sessions and people by name, a picked session becoming the
//! comment's mention; an inbox row saying whose turn it is and why it is there; the asker's
//! issue page and the ask page saying where an open ask waits; and delivery attempts folded
//! into their message (no lines of their own, failures kept visible).

use std::time::Duration;

use countersign_link_client::{Advert, Event, Link, Mode, Options};
use serde_json::{Value, json};

use crate::browser::shots;
use crate::common::webdriver::{Driver, browser_or_skip};
use crate::common::*;
use crate::on_both_databases;

const ARROW_DOWN: &str = "\u{E015}";
const ENTER: &str = "\u{E007}";
const TAB: &str = "\u{E004}";
const ESCAPE: &str = "\u{E00C}";
const BACKSPACE: &str = "\u{E003}";

/// A page's text with the escapes askama writes undone (what a person reads).
fn read(html: &str) -> String {
    html.replace("&#39;", "'")
        .replace("&#34;", "\"")
        .replace("&quot;", "\"")
        .replace("&amp;", "&")
}

/// A live session on `token`, titled `title`, once the console lists it; it acknowledges
/// what it is delivered.
async fn live(console: &TestConsole, token: &str, id: &str, title: &str) -> anyhow::Result<Link> {
    let mut o = Options::new(
        &console.url,
        token,
        id,
        Advert::new(title).modes(&[Mode::Send, Mode::Aside, Mode::Steer]),
    );
    o.auto_ack = true;
    let link = Link::connect(o).await?;
    let agent = Who::agent(console, token);
    eventually(10, || {
        let agent = agent.clone();
        async move {
            let l = agent.get("/api/v1/sessions").await?;
            Ok(l.json
                .as_array()
                .is_some_and(|a| a.iter().any(|s| s["session_id"] == id))
                .then_some(()))
        }
    })
    .await?;
    Ok(link)
}

/// The next delivery on a link (other events skipped), within 10 s.
async fn delivery(link: &mut Link) -> anyhow::Result<countersign_link_client::Delivery> {
    loop {
        match tokio::time::timeout(Duration::from_secs(10), link.next()).await? {
            Some(Event::Delivery(d)) => return Ok(d),
            Some(Event::Closed { code, reason }) => anyhow::bail!("closed {code:?} {reason}"),
            Some(_) => continue,
            None => anyhow::bail!("the link ended"),
        }
    }
}

/// PAY with PAY-1 (assigned to Bob) and PAY-2 (unassigned), and a personal token of Ada's for
/// her agent.
async fn setup(console: &TestConsole) -> anyhow::Result<(Who, Who, String)> {
    let ada = Who::person(console, ADA).await?;
    let bob = Who::person(console, BOB).await?;
    let r = ada
        .post(
            "/api/v1/projects",
            json!({"key": "PAY", "name": "Payments"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    for (title, assignee) in [("Refunds", json!(BOB)), ("Ledger export", Value::Null)] {
        let r = ada
            .post(
                "/api/v1/issues",
                json!({"project": "PAY", "title": title, "assignee": assignee}),
            )
            .await?;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let r = ada
        .patch("/api/v1/issues/PAY-2", json!({"assignee": null}))
        .await?;
    assert_eq!(r.json["assignee"], Value::Null, "{}", r.text);
    let minted = ada
        .post("/api/v1/agent-tokens", json!({"name": "ada's laptop"}))
        .await?;
    assert_eq!(minted.status, 201, "{}", minted.text);
    let token = minted.json["token"].as_str().unwrap_or_default().to_owned();
    Ok((ada, bob, token))
}

/// The page at `path` once its text (escapes undone) contains `needle`.
async fn page_with(who: &Who, path: &str, needle: &str) -> anyhow::Result<String> {
    let mut last = String::new();
    for _ in 0..100 {
        let p = who.get(path).await?;
        assert_eq!(p.status, 200, "{path}: {}", p.text);
        last = read(&p.text);
        if last.contains(needle) {
            return Ok(last);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    anyhow::bail!("{path} did not come to show {needle:?}: {last}")
}

#[tokio::test]
async fn project_documents_new_document_and_the_holder_box() -> anyhow::Result<()> {
    let console = TestConsole::start(ConsoleOptions {
        local_sign_in: true,
        shared_token: true,
        ..Default::default()
    })
    .await?;
    let (ada, _bob, token) = setup(&console).await?;
    let agent = Who::agent(&console, &token);

    // The projects list and the project's issue list link its documents, which answer 200.
    let docs = "href=\"/projects/PAY/documents\"";
    assert!(ada.get("/projects").await?.text.contains(docs));
    assert!(ada.get("/projects/PAY/issues").await?.text.contains(docs));
    assert_eq!(ada.get("/projects/PAY/documents").await?.status, 200);

    // The issue page starts a document on the issue: the form comes with the issue filled in.
    let page = read(&ada.get("/issues/PAY-1").await?.text);
    let new_doc = "/projects/PAY/documents?issue=PAY-1#new-document";
    assert!(page.contains(new_doc), "{page}");
    let form = ada.get("/projects/PAY/documents?issue=PAY-1").await?;
    assert_eq!(form.status, 200);
    assert!(
        form.text
            .contains("id=\"new-doc-issue\" name=\"issue\" value=\"PAY-1\""),
        "{}",
        form.text
    );
    // No session holds the issue: no message box.
    assert!(!page.contains("id=\"message-holder\""), "{page}");

    // Ada's agent, live as "Refund worker", claims PAY-1: the page offers a message box to it,
    // by its human name.
    let link = live(&console, &token, "sess-ada-1", "Refund worker").await?;
    let r = agent
        .post("/api/v1/issues/PAY-1/claim", json!({"actor": "sess-ada-1"}))
        .await?;
    assert!(r.status < 300, "{}", r.text);
    let page = read(&ada.get("/issues/PAY-1").await?.text);
    assert!(page.contains("id=\"message-holder\""), "{page}");
    assert!(page.contains("Message Refund worker"), "{page}");
    assert!(page.contains("Refund worker holds this issue"), "{page}");
    assert!(
        page.contains("<p id=\"claim\">Refund worker (session sess-ada-1)"),
        "{page}"
    );
    assert!(page.contains("{\"session\":\"sess-ada-1\"}"), "{page}");

    drop(link);
    console.stop().await;
    Ok(())
}

/// Delivery attempts are no timeline lines: each message shows its delivery's state.
async fn delivery_attempts_fold_into_their_message(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, _bob, token) = setup(&console).await?;
    let mut link = live(&console, &token, "sess-ada-1", "Refund worker").await?;
    // Delivery attempts fold into their message: a message delivered on the link shows as
    // delivered; one to a session that is not live shows its failure; no attempt has a line.
    let m = ada
        .post(
            "/api/v1/issues/PAY-1/messages",
            json!({"body": "Please check the ledger", "target": {"session": "sess-ada-1"}}),
        )
        .await?;
    assert_eq!(m.status, 201, "{}", m.text);
    assert_eq!(delivery(&mut link).await?.body, "Please check the ledger");
    let m = ada
        .post(
            "/api/v1/issues/PAY-1/messages",
            json!({"body": "Anyone there?", "target": {"session": "sess-gone"}}),
        )
        .await?;
    assert_eq!(m.status, 201, "{}", m.text);
    let page = page_with(&ada, "/issues/PAY-1", "data-delivery=\"delivered\"").await?;
    let page = if page.contains("data-delivery=\"failed\"") {
        page
    } else {
        page_with(&ada, "/issues/PAY-1", "data-delivery=\"failed\"").await?
    };
    assert!(
        page.contains("not delivered to session sess-gone"),
        "{page}"
    );
    assert!(page.contains("Refund worker"), "{page}");
    // The issue's log holds the attempts; the timeline shows none as its own line.
    let log = ada.get("/api/v1/issues/PAY-1/events").await?;
    assert!(log.text.contains("delivery.attempt"), "{}", log.text);
    assert!(!page.contains("delivery attempt"), "{page}");
    let timeline = page
        .split("id=\"timeline\"")
        .nth(1)
        .and_then(|t| t.split("</ol>").next())
        .unwrap_or("");
    assert_eq!(timeline.matches("class=\"entry message\"").count(), 2);
    assert!(
        !timeline
            .split("class=\"entry change\"")
            .skip(1)
            .filter_map(|l| l.split("</li>").next())
            .any(|l| l.contains("deliver")),
        "{timeline}"
    );

    drop(link);
    console.stop().await;
    Ok(())
}

on_both_databases!(
    delivery_attempts_fold_into_their_message,
    delivery_attempts_fold_into_their_message_sqlite,
    delivery_attempts_fold_into_their_message_postgres
);

/// An inbox row says whose turn it is and why it is there; the asker's issue page and the ask
/// page say where an open ask waits.
async fn where_an_ask_waits(db: Option<String>) -> anyhow::Result<()> {
    let console = console_on(db).await?;
    let (ada, bob, token) = setup(&console).await?;
    let agent = Who::agent(&console, &token);
    let link = live(&console, &token, "sess-ada-1", "Refund worker").await?;
    // Ada's agent asks on PAY-1, assigned to Bob. Bob's inbox row says whose turn it is and
    // why it is there, and who asked for whom.
    let r = agent
        .post(
            "/api/v1/issues/PAY-1/asks",
            json!({"question": "Refund in full or in part?", "options": [{"label": "full"}, {"label": "part"}], "actor": "sess-ada-1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let ask = r.json["id"].as_str().unwrap_or_default().to_owned();
    let home = page_with(&bob, "/", "Refund in full or in part?").await?;
    assert!(
        home.contains("Your turn to answer; in your inbox because the issue is assigned to you."),
        "{home}"
    );
    assert!(
        home.contains("asked by session sess-ada-1 of ada@example.com"),
        "{home}"
    );
    // Ada, whose agent asked, does not hold it in her inbox; her issue page and the ask page
    // say where it waits.
    let home = read(&ada.get("/").await?.text);
    assert!(!home.contains("Refund in full or in part?"), "{home}");
    let page = read(&ada.get("/issues/PAY-1").await?.text);
    assert!(
        page.contains("Waits for an answer in bob@example.com's inbox (the issue's assignee)."),
        "{page}"
    );
    let ask_page = read(&ada.get(&format!("/asks/{ask}")).await?.text);
    assert!(
        ask_page.contains(
            "A person's turn to answer; in bob@example.com's inbox, the issue's assignee."
        ),
        "{ask_page}"
    );

    // On the unassigned PAY-2 an ask is in every person's inbox; Ada's row names her agent.
    let r = agent
        .post(
            "/api/v1/issues/PAY-2/asks",
            json!({"question": "Export as CSV?", "actor": "sess-ada-1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let home = page_with(&ada, "/", "Export as CSV?").await?;
    assert!(
        home.contains(
            "A person's turn to answer; in every person's inbox because the issue has no assignee."
        ),
        "{home}"
    );
    assert!(
        home.contains("asked by session sess-ada-1 of you"),
        "{home}"
    );

    // Bob asks back on the ask: the agent's turn, said on the asker's issue page and in Bob's
    // inbox row.
    let r = bob
        .post(
            "/api/v1/issues/PAY-1/comments",
            json!({"body": "Why in part?", "ask": ask}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let page = page_with(
        &ada,
        "/issues/PAY-1",
        "waits on session sess-ada-1 to reply",
    )
    .await?;
    assert!(
        page.contains("shown under \"Waiting on agents\" in bob@example.com's inbox"),
        "{page}"
    );
    let home = page_with(&bob, "/", "a person asked back and it has not replied").await?;
    assert!(
        home.contains("session sess-ada-1 of ada@example.com's turn"),
        "{home}"
    );
    drop(link);
    console.stop().await;
    Ok(())
}

on_both_databases!(
    where_an_ask_waits,
    where_an_ask_waits_sqlite,
    where_an_ask_waits_postgres
);

#[tokio::test]
async fn discoverable_in_the_browser() -> anyhow::Result<()> {
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let console = TestConsole::start(ConsoleOptions {
        local_sign_in: true,
        shared_token: true,
        ..Default::default()
    })
    .await?;
    let url = |p: &str| format!("{}{p}", console.url);
    let (ada, _bob, token) = setup(&console).await?;
    let agent = Who::agent(&console, &token);
    let mut link = live(&console, &token, "sess-ada-1", "Refund worker").await?;
    let r = agent
        .post("/api/v1/issues/PAY-1/claim", json!({"actor": "sess-ada-1"}))
        .await?;
    assert!(r.status < 300, "{}", r.text);

    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let b = driver
        .browser(&chromium, &profiles.path().join("ada"))
        .await?;
    b.goto(&url("/projects")).await?;
    b.wait_for("#email", 10).await?;
    b.type_into("#email", ADA).await?;
    b.click_text("Sign in").await?;
    b.wait_text("h1", "Projects", 10).await?;

    // From the projects list to the documents.
    b.click("tr[data-project=PAY] a[href='/projects/PAY/documents']")
        .await?;
    b.wait_text("h1", "Documents of Payments", 10).await?;

    // "New document" on the issue page: the form with the issue filled in; the document it
    // creates is the issue's.
    b.goto(&url("/issues/PAY-1")).await?;
    b.click_text("New document").await?;
    b.wait_text("h1", "Documents of Payments", 10).await?;
    assert_eq!(b.attribute("#new-doc-issue", "value").await?, "PAY-1");
    b.fill("File name", "refund-plan.md").await?;
    b.type_into("#new-doc-text", "# Refund plan\n\nFull refunds first.")
        .await?;
    b.click_text("Create document").await?;
    // The form goes to the new document's page; the document is the issue's.
    eventually(10, || async {
        Ok(b.current_url().await?.contains("/artifacts/").then_some(()))
    })
    .await?;
    let l = ada.get("/api/v1/issues/PAY-1/artifacts").await?;
    assert!(l.text.contains("refund-plan.md"), "{}", l.text);

    // The message box sends to the session holding the issue: it arrives on its link.
    b.goto(&url("/issues/PAY-1")).await?;
    b.wait_text("#message-holder-title", "Message Refund worker", 10)
        .await?;
    b.type_into("#message-holder-body", "Is the ledger balanced?")
        .await?;
    b.click_text("Send to Refund worker").await?;
    assert_eq!(delivery(&mut link).await?.body, "Is the ledger balanced?");
    b.wait_text("#timeline", "Is the ledger balanced?", 10)
        .await?;

    // "@" offers live sessions and people by name; arrows, Escape, Enter and Tab.
    b.click("#comment-body").await?;
    b.keys("Thanks @refund").await?;
    let option = b
        .wait_for("[role=listbox] [role=option][data-kind=session]", 10)
        .await?;
    assert!(!option.is_empty());
    b.wait_text("[role=listbox]", "Refund worker", 5).await?;
    assert_eq!(b.attribute("#comment-body", "aria-expanded").await?, "true");
    b.keys(ESCAPE).await?;
    b.wait_gone("[role=listbox] [role=option]", 5).await?;
    assert_eq!(
        b.attribute("#comment-body", "aria-expanded").await?,
        "false"
    );
    // The comment form stays open (Escape closed the list only); typing reopens the list.
    b.keys(BACKSPACE).await?;
    b.keys("d").await?;
    b.wait_text("[role=listbox]", "Refund worker", 5).await?;
    b.keys(ENTER).await?;
    b.wait_gone("[role=listbox] [role=option]", 5).await?;
    let typed = b
        .execute("return document.getElementById('comment-body').value")
        .await?;
    assert_eq!(typed, json!("Thanks @Refund worker "));
    let mentions = b
        .execute("return document.getElementById('comment-mentions').value")
        .await?;
    assert_eq!(mentions, json!("sess-ada-1"));
    // People too: "@bo" offers Bob; the arrows move through what is offered, Tab picks.
    b.keys("and @bo").await?;
    b.wait_text("[role=listbox]", BOB, 5).await?;
    b.keys(ARROW_DOWN).await?;
    let active = b
        .execute(
            "const b = document.getElementById('comment-body'); \
             const o = document.getElementById(b.getAttribute('aria-activedescendant')); \
             return o ? o.getAttribute('aria-selected') : null",
        )
        .await?;
    assert_eq!(active, json!("true"));
    b.screenshot(&shots().join("issue-mention.png")).await?;
    b.keys(TAB).await?;
    let typed = b
        .execute("return document.getElementById('comment-body').value")
        .await?;
    assert_eq!(typed, json!("Thanks @Refund worker and @bob@example.com "));

    // The saved comment mentions the session: it is delivered to it on its link.
    b.click_text("Comment").await?;
    let d = delivery(&mut link).await?;
    assert!(d.body.contains("@Refund worker"), "{}", d.body);
    let comments = ada.get("/api/v1/issues/PAY-1/comments").await?;
    let saved = comments
        .json
        .as_array()
        .and_then(|a| {
            a.iter()
                .find(|c| c["body"].as_str().is_some_and(|b| b.contains("@bob")))
        })
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        saved["mentions"][0]["session_id"], "sess-ada-1",
        "{}",
        comments.text
    );
    b.wait_text("#timeline", "Mentions Refund worker", 10)
        .await?;

    // Where asks wait, as a person reads it: Ada's agent asks on Bob's PAY-1 and on the
    // unassigned PAY-2. Ada's inbox row for PAY-2 says whose turn and why it is hers; her
    // issue page says PAY-1's ask waits in Bob's inbox.
    for (issue, question) in [
        ("PAY-1", "Refund in full or in part?"),
        ("PAY-2", "Export as CSV?"),
    ] {
        let r = agent
            .post(
                &format!("/api/v1/issues/{issue}/asks"),
                json!({"question": question, "actor": "sess-ada-1"}),
            )
            .await?;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    b.goto(&url("/")).await?;
    b.wait_text(
        "#human-turn [data-why]",
        "in every person's inbox because the issue has no assignee",
        10,
    )
    .await?;
    b.wait_text("#human-turn", "asked by session sess-ada-1 of you", 5)
        .await?;
    b.screenshot(&shots().join("inbox-why.png")).await?;
    crate::common::axe::accessible(&b, "the inbox").await?;
    b.goto(&url("/issues/PAY-1")).await?;
    b.wait_text(
        "#timeline .waits",
        "Waits for an answer in bob@example.com's inbox",
        10,
    )
    .await?;
    b.screenshot(&shots().join("issue-ask-waits.png")).await?;
    // On a phone the message box and the mention list fit the width.
    b.set_viewport(390, 844).await?;
    b.click("#message-holder-body").await?;
    b.keys("@ref").await?;
    b.wait_text("#message-holder [role=listbox]", "Refund worker", 5)
        .await?;
    let wide = b
        .execute("return document.documentElement.scrollWidth")
        .await?;
    assert!(wide.as_u64().is_some_and(|w| w <= 390), "{wide}");
    b.screenshot(&shots().join("phone-issue-message.png"))
        .await?;
    crate::common::axe::accessible(&b, "the issue page with the mention list open").await?;

    b.quit().await;
    drop(link);
    console.stop().await;
    Ok(())
}
