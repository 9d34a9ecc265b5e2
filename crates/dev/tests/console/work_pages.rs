//! The work pages (issue 27): projects, issue lists and the issue page as the conversation.
//!
//! In headless Chromium, by visible labels, as a new user: sign in, meet the empty projects page,
//! create a project (and be refused a second with the same key, in the form), create an issue
//! with a description holding tasks, edit its fields in place (status, priority, assignee,
//! labels, title), claim and release it, comment, see an agent's comment and ask arrive without
//! a reload, resolve the ask, open one, add a child, move through the list with `j` and open a
//! row with Enter, use `/` and `c`, and meet 404 pages inside the layout. Over HTTP: the list
//! pages' paging, filters and board, the history in words, error pages in the layout.
//! Screenshots go to `docs/screenshots/` with `COUNTERSIGN_UPDATE_SCREENSHOTS=1`.

use crate::browser::shots;
use crate::common;

use common::webdriver::{Browser, Driver, browser_or_skip};
use common::*;
use serde_json::json;

async fn signed_in(b: &Browser, console: &TestConsole, email: &str) -> anyhow::Result<()> {
    b.goto(&format!("{}/projects", console.url)).await?;
    b.wait_for("#email", 10).await?;
    b.type_into("#email", email).await?;
    b.click_text("Sign in").await?;
    b.wait_text("h1", "Projects", 10).await?;
    Ok(())
}

/// The id of the element `css` matches, via the page (what the person sees focused).
async fn active_id(b: &Browser) -> anyhow::Result<String> {
    Ok(
        b.execute("return document.activeElement ? document.activeElement.id : ''")
            .await?
            .as_str()
            .unwrap_or("")
            .to_owned(),
    )
}

#[tokio::test]
async fn work_pages_in_the_browser() -> anyhow::Result<()> {
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
    let agent = Who::agent(&console, SHARED_TOKEN);
    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let ada = driver
        .browser(&chromium, &profiles.path().join("ada"))
        .await?;
    signed_in(&ada, &console, ADA).await?;

    // The empty projects page names the next step, not an API call.
    let empty = ada.wait_text("#list", "No project yet", 10).await?;
    assert!(!empty.contains("POST"), "{empty}");
    ada.screenshot(&shots().join("projects-empty.png")).await?;

    // Create a project by its labels: the page goes to its (empty) issue list.
    ada.fill("Key", "PAY").await?;
    ada.fill("Name", "Payments").await?;
    ada.click_text("Create project").await?;
    ada.wait_text("h1", "Payments", 10).await?;
    assert!(ada.current_url().await?.ends_with("/projects/PAY/issues"));
    ada.wait_text("#list", "No issue in this project yet", 10)
        .await?;

    // A second project with the same key: refused inside the form, with its code; `c` opens
    // the form on the projects page.
    ada.goto(&url("/projects")).await?;
    ada.wait_for("tr[data-project=PAY]", 10).await?;
    ada.press("c").await?;
    ada.wait_for("#new-project", 5).await?;
    ada.fill("Key", "PAY").await?;
    ada.fill("Name", "Again").await?;
    ada.click_text("Create project").await?;
    ada.wait_text("#new-project [data-form-error]", "PROJECT_EXISTS", 10)
        .await?;

    // Create an issue with a description holding tasks.
    ada.goto(&url("/projects/PAY/issues")).await?;
    ada.fill("Title", "Checkout fails on Safari").await?;
    ada.fill(
        "Description",
        "Steps:\n\n- [x] reproduce on Safari 17\n- [ ] fix the date parser\n",
    )
    .await?;
    ada.choose("Priority", "P1").await?;
    ada.fill("Labels", "bug, safari").await?;
    ada.click_text("Create issue").await?;
    ada.wait_text("h1", "Checkout fails on Safari", 10).await?;
    assert!(ada.current_url().await?.ends_with("/issues/PAY-1"));
    ada.wait_text("#tasks", "1 of 2 tasks done", 10).await?;
    ada.wait_text("#description", "fix the date parser", 5)
        .await?;
    // A marker the page keeps until it is reloaded: what follows arrives without a reload.
    ada.execute("window.notReloaded = true; return true;")
        .await?;

    // Edit in place: status, priority, assignee (refused for someone who never signed in,
    // then Bob), labels and the title.
    ada.choose("Status", "in progress").await?;
    ada.wait_text(
        "#timeline",
        "ada@example.com changed status from todo to in progress",
        10,
    )
    .await?;
    ada.choose("Priority", "P0").await?;
    ada.wait_text("#timeline", "changed the priority from P1 to P0", 10)
        .await?;
    ada.fill("Assignee", "nobody@example.com").await?;
    ada.click("#facts form:has(#assignee-input) button").await?;
    ada.wait_text(
        "#facts form:has(#assignee-input) [data-form-error]",
        "ASSIGNEE_NOT_ALLOWED",
        10,
    )
    .await?;
    let _bob = Who::person(&console, BOB).await?;
    ada.fill("Assignee", BOB).await?;
    ada.click("#facts form:has(#assignee-input) button").await?;
    ada.wait_text(
        "#timeline",
        "changed the assignee from ada@example.com to bob@example.com",
        10,
    )
    .await?;
    ada.fill("Labels", "bug, safari, checkout").await?;
    ada.click("#facts form:has(#labels-input) button").await?;
    ada.wait_text(
        "#timeline",
        "changed the labels from bug, safari to bug, safari, checkout",
        10,
    )
    .await?;
    ada.click_text("Edit title").await?;
    ada.fill("Title", "Checkout fails on Safari 17").await?;
    ada.click_text("Save title").await?;
    ada.wait_text("#title", "Checkout fails on Safari 17", 10)
        .await?;

    // Claim and release.
    ada.click_text("Claim").await?;
    ada.wait_text("#claim", ADA, 10).await?;
    ada.click_text("Release").await?;
    ada.wait_text("#claim", "nobody", 10).await?;

    // Comment in markdown: it shows as the person wrote it, rendered.
    ada.fill("Comment", "Seen on **Safari 17** only.").await?;
    ada.click_text("Comment").await?;
    ada.wait_text("#timeline", "Seen on Safari 17 only.", 10)
        .await?;
    assert_eq!(
        ada.execute("return document.querySelectorAll('#timeline .comment strong').length > 0")
            .await?,
        json!(true)
    );

    // An agent comments and asks: both appear without a reload.
    let c = agent
        .post(
            "/api/v1/issues/PAY-1/comments",
            json!({"body": "I can take the parser.", "actor": "sess-dev"}),
        )
        .await?;
    assert_eq!(c.status, 201, "{}", c.text);
    ada.wait_text("#timeline", "I can take the parser.", 10)
        .await?;
    let a = agent
        .post(
            "/api/v1/issues/PAY-1/asks",
            json!({"question": "Which date library?", "options": [{"label": "chrono"}, {"label": "time"}], "actor": "sess-dev"}),
        )
        .await?;
    assert_eq!(a.status, 201, "{}", a.text);
    let ask = a.json["id"].as_str().unwrap_or_default().to_owned();
    let row = format!("li[data-ask=\"{ask}\"]");
    ada.wait_text(&row, "Which date library?", 10).await?;
    assert_eq!(
        ada.execute("return window.notReloaded === true").await?,
        json!(true),
        "the page was reloaded"
    );
    ada.screenshot(&shots().join("issue-conversation.png"))
        .await?;

    // Resolve the ask without answering (confirmed in the dialog).
    ada.click(&format!("{row} button[data-body*=resolved]"))
        .await?;
    ada.wait_for("#confirm[open]", 5).await?;
    ada.click("#confirm-ok").await?;
    ada.wait_text(&format!("{row} .badge"), "resolved", 10)
        .await?;

    // Ask a question from the page.
    ada.click_text("Ask a question").await?;
    ada.fill("Question", "Ship behind a flag?").await?;
    ada.fill("Options", "yes, no").await?;
    ada.click_text("Open the ask").await?;
    ada.wait_text("#timeline", "Ship behind a flag?", 10)
        .await?;

    // A child issue.
    ada.click_text("Add a child issue").await?;
    ada.fill("Title", "Parse Safari's dates").await?;
    ada.click_text("Create child").await?;
    ada.wait_text("#children", "PAY-2", 10).await?;

    // The list: rows, `j` to the first, Enter opens it.
    ada.goto(&url("/projects/PAY/issues")).await?;
    ada.wait_for("tr[data-issue=\"PAY-2\"]", 10).await?;
    ada.press("j").await?;
    ada.press("\u{E007}").await?;
    ada.wait_text("h1", "PAY-", 10).await?;
    ada.goto(&url("/projects/PAY/issues?view=board")).await?;
    ada.wait_text(".board", "in progress", 10).await?;
    ada.screenshot(&shots().join("issues-board.png")).await?;
    // `c` on the list opens the new-issue form; `/` focuses search.
    ada.goto(&url("/projects/PAY/issues")).await?;
    ada.wait_for("tr[data-issue]", 10).await?;
    ada.press("c").await?;
    ada.wait_for("#new-issue", 5).await?;
    assert_eq!(active_id(&ada).await?, "new-title");
    ada.press("\u{E00C}").await?; // Escape closes it.
    ada.press("/").await?;
    assert_eq!(active_id(&ada).await?, "header-search");
    ada.screenshot(&shots().join("issues-list.png")).await?;

    // Her issues: the child (assigned to its creator); PAY-1 is Bob's now.
    ada.click_text("Issues").await?;
    ada.wait_text("h1", "Your issues", 10).await?;
    let mine = ada.wait_text("#list", "PAY-2", 10).await?;
    assert!(!mine.contains("PAY-1 "), "{mine}");

    // Error pages inside the layout, with a way back.
    ada.goto(&url("/issues/PAY-99")).await?;
    ada.wait_text("h1", "There is no issue PAY-99", 10).await?;
    ada.wait_text(".error-page", "404", 5).await?;
    ada.wait_for("nav a[href=\"/projects\"]", 5).await?;
    ada.screenshot(&shots().join("error-404.png")).await?;
    ada.goto(&url("/projects/NOPE/issues")).await?;
    ada.wait_text("h1", "There is no project NOPE", 10).await?;
    ada.click("#way-back").await?;
    ada.wait_text("h1", "Projects", 10).await?;
    ada.goto(&url("/no/such/page")).await?;
    ada.wait_text(".error-page", "404", 10).await?;

    ada.quit().await;
    drop(driver);
    console.stop().await;
    Ok(())
}

/// The list pages over HTTP: paged (no page holds more than 50 rows; the next page resumes),
/// filters by assignee, priority and label, sorting, the board's counts; the issue page's
/// history in words, comments and asks; 404s inside the layout.
#[tokio::test]
async fn work_pages_over_http() -> anyhow::Result<()> {
    let console = console_on(None).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let ada = Who::person(&console, ADA).await?;
    let bob = Who::person(&console, BOB).await?;
    let r = ada
        .post(
            "/api/v1/projects",
            json!({"key": "PAY", "name": "Payments"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    for n in 1..=60 {
        let body = if n % 3 == 0 {
            json!({"project": "PAY", "title": format!("issue {n}"), "priority": 0, "labels": ["ui"], "assignee": BOB})
        } else {
            json!({"project": "PAY", "title": format!("issue {n}")})
        };
        let r = ada.post("/api/v1/issues", body).await?;
        assert_eq!(r.status, 201, "{}", r.text);
    }
    let rows = |html: &str| html.matches("<tr data-issue=").count();

    // Paged: 50, then the rest by the next link.
    let first = ada.get("/projects/PAY/issues").await?;
    assert_eq!(first.status, 200);
    assert_eq!(rows(&first.text), 50);
    assert!(first.text.contains("50 of 60 issues"), "{}", first.text);
    let next = first
        .text
        .split("id=\"next-page\"")
        .next()
        .and_then(|s| s.rsplit("href=\"").next())
        .and_then(|s| s.split('"').next())
        .map(|s| s.replace("&amp;", "&").replace("&#38;", "&"))
        .unwrap_or_default();
    assert!(next.contains("after="), "{next}");
    let second = ada.get(&next).await?;
    assert_eq!(rows(&second.text), 10, "{}", second.text);
    assert!(!second.text.contains("id=\"next-page\""));

    // Filters: assignee, priority, label; and sorting by newest.
    let bobs = ada
        .get("/projects/PAY/issues?assignee=bob%40example.com")
        .await?;
    assert_eq!(rows(&bobs.text), 20);
    let p0 = ada.get("/projects/PAY/issues?priority=0&label=ui").await?;
    assert_eq!(rows(&p0.text), 20);
    let none = ada.get("/projects/PAY/issues?priority=none").await?;
    assert_eq!(rows(&none.text), 40);
    let newest = ada.get("/projects/PAY/issues?sort=created").await?;
    assert!(
        newest.text.contains("\"/issues/PAY-60\"") && !newest.text.contains("\"/issues/PAY-1\"")
    );
    assert!(first.text.contains("\"/issues/PAY-1\"") && !first.text.contains("\"/issues/PAY-60\""));
    let bad = ada.get("/projects/PAY/issues?priority=9").await?;
    assert_eq!(bad.status, 400);
    assert!(bad.text.contains("INVALID_QUERY") && bad.text.contains("<nav"));

    // "My issues": Bob's twenty.
    let his = bob.get("/issues").await?;
    assert_eq!(rows(&his.text), 20, "{}", his.text);
    assert!(his.text.contains("Your issues"));

    // The board: a column per status with its count, at most 20 cards each.
    let board = ada.get("/projects/PAY/issues?view=board").await?;
    assert!(
        board.text.contains("<span class=\"n\">60</span>"),
        "{}",
        board.text
    );
    assert_eq!(board.text.matches("class=\"card\"").count(), 20);

    // The issue page: history in words, comments, asks, messages' absence of raw names.
    let r = ada
        .patch("/api/v1/issues/PAY-1", json!({"status": "in_progress"}))
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    agent
        .post(
            "/api/v1/issues/PAY-1/comments",
            json!({"body": "a *first* look", "actor": "sess-1"}),
        )
        .await?;
    agent
        .post(
            "/api/v1/issues/PAY-1/asks",
            json!({"question": "Which way?", "actor": "sess-1"}),
        )
        .await?;
    let page = ada.get("/issues/PAY-1").await?;
    assert_eq!(page.status, 200);
    assert!(
        page.text
            .contains("changed status from todo to in progress"),
        "{}",
        page.text
    );
    assert!(page.text.contains("<em>first</em>"), "{}", page.text);
    assert!(page.text.contains("Which way?"));
    assert!(!page.text.contains("issue.updated</"));
    assert!(page.text.contains("created the issue"));

    // 404s inside the layout.
    for path in [
        "/issues/PAY-999",
        "/projects/NOPE/issues",
        "/projects/lower/issues",
    ] {
        let r = ada.get(path).await?;
        assert_eq!(r.status, 404, "{path}");
        assert!(
            r.text.contains("<nav") && r.text.contains("way-back"),
            "{path}: {}",
            r.text
        );
    }
    let r = ada
        .http
        .get(format!("{}/not-a-page", console.url))
        .header("accept", "text/html")
        .send()
        .await?;
    assert_eq!(r.status(), 404);
    assert!(
        r.text()
            .await?
            .contains("There is no page at this address.")
    );
    console.stop().await;
    Ok(())
}
