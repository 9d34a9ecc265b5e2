//! Every page fits its screen (issue 48), in headless Chromium: a signed-in person with content
//! on every page (a project, issues with long titles, documents with a long code line and a wide
//! table, an ask, messages, a broadcast, a live session, a token, a machine login, a pending and
//! an approved credential request) opens EVERY page route of the route table (`table::ROUTES`,
//! the rows of kind Page with method GET, real ids for the path's parameters) at 390×844 (a
//! phone) and at 1400×900 (a wide screen). No page scrolls sideways
//! (`document.documentElement.scrollWidth > window.innerWidth` fails, naming the widest
//! elements), and axe-core finds no serious or critical violation on any page, at either width.
//!
//! On the phone, the navigation folds into a menu (a button with `aria-expanded`, opened and
//! closed by the keyboard too) and the header takes little of the first screen; issue keys
//! and badges stay on one line; a long code line scrolls inside its own box. On the wide
//! screen, the lists use the width. Times read as words relative to now, the absolute time in
//! their title. Screenshots of a few pages at both widths go to `docs/screenshots/` with
//! `COUNTERSIGN_UPDATE_SCREENSHOTS=1` (else under the target directory).
//!
//! Skips without Chromium unless `COUNTERSIGN_REQUIRE_BROWSER=1`, which also makes axe-core
//! mandatory.

use std::time::{Duration, Instant};

use anyhow::Context;
use countersign_console_http::table::{Kind, ROUTES};
use serde_json::{Value, json};

use crate::common::webdriver::{Browser, Driver, browser_or_skip};
use crate::common::*;

pub(crate) const PHONE: (u32, u32) = (390, 844);
pub(crate) const WIDE: (u32, u32) = (1400, 900);

/// The GET page routes the walk does not open, each with why (besides the assets: paths under
/// `/assets/`, and the icons). Every one must still be a row of the table (so the list cannot
/// go stale); every other GET page route is opened, and one with parameters the walk cannot
/// fill fails the test.
const NOT_OPENED: &[(&str, &str)] = &[
    (
        "/inbox/rows",
        "a fragment: the inbox's rows for its live refresh",
    ),
    ("/inbox/count", "JSON: the navigation's count"),
    (
        "/artifacts/{id}/part",
        "a fragment: a long document's next part",
    ),
    ("/auth/oidc", "a redirect to the OpenID provider"),
    ("/auth/callback", "the OpenID provider's redirect back"),
];

/// A script, a style sheet or an icon: not a page.
fn is_asset(path: &str) -> bool {
    path.starts_with("/assets/") || path.starts_with("/favicon.")
}

/// Pages screenshotted at both widths: (file name, path).
const SHOTS: &[&str] = &["inbox", "issues", "issue", "document", "sessions"];

/// A long line of code, a long unbroken word and a wide table: what widens a page when
/// nothing holds it.
fn wide_markdown(title: &str) -> String {
    let code = format!(
        "let request = broker.request(\"{}\", Lifetime::hours(8), Reason::new(\"{}\"))?; // {}",
        "DEMO_PASSKEY_".repeat(6),
        "rotate the signing keys of every deploy environment ".repeat(3),
        "x".repeat(120)
    );
    let head: Vec<String> = (1..=10).map(|i| format!("Column number {i}")).collect();
    let cells: Vec<String> = (1..=10)
        .map(|i| format!("value-{i}-without-spaces-{}", "q".repeat(12)))
        .collect();
    format!(
        "# {title}\n\nA paragraph that names an id with no space in it: \
         sess_{id} and a link https://example.com/{path}.\n\n\
         ```rust\n{code}\n```\n\n\
         | {head} |\n|{sep}\n| {cells} |\n\n- [ ] a task to do\n- [x] a task done\n",
        id = "0123456789abcdef".repeat(5),
        path = "a/really/long/path/that/keeps/going/".repeat(5),
        head = head.join(" | "),
        sep = " --- |".repeat(10),
        cells = cells.join(" | "),
    )
}

/// What the seed made: the ids the page routes' parameters are filled with.
struct Ids {
    project: String,
    issue: String,
    artifact: String,
    version: u64,
    ask: String,
    session: String,
    broadcast: String,
    message: String,
    request: String,
}

fn created(r: &Resp, what: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        r.status == 200 || r.status == 201,
        "{what}: {} {}",
        r.status,
        r.text
    );
    Ok(())
}

fn str_of(v: &Value, what: &str) -> anyhow::Result<String> {
    v.as_str()
        .map(str::to_owned)
        .with_context(|| format!("{what}: not a string: {v}"))
}

/// Fills the console with a little of everything, as Ada, an agent (session `s1`) and a
/// machine of Ada's would.
async fn seed(
    console: &TestConsole,
    broker: &TestBroker,
    ada: &Person,
    agent: &Who,
) -> anyhow::Result<Ids> {
    let project = "WIDE".to_owned();
    created(
        &ada.post(
            "/api/v1/projects",
            json!({"key": project, "name": "Checkout and payments for every storefront we run"}),
        )
        .await?,
        "project",
    )?;
    let mut issue = String::new();
    for (n, title) in [
        "Safari checkout breaks when the pay button moves below the fold on small phones in landscape",
        "Rotate the signing keys of https://payments.example.com/api/v2/merchants/0123456789abcdef0123456789/keys",
        "Short one",
    ]
    .iter()
    .enumerate()
    {
        let r = ada
            .post(
                "/api/v1/issues",
                json!({"project": project, "title": title, "priority": n, "labels": ["checkout", "mobile-safari", "needs-design-review"]}),
            )
            .await?;
        created(&r, "issue")?;
        if issue.is_empty() {
            issue = str_of(&r.json["key"], "issue key")?;
        }
    }
    created(
        &ada.post(
            &format!("/api/v1/issues/{issue}/artifacts"),
            json!({"filename": "description.md", "slug": "description", "content_type": "text/markdown",
                   "content": wide_markdown("What breaks")}),
        )
        .await?,
        "description",
    )?;
    created(
        &ada.post(
            &format!("/api/v1/issues/{issue}/comments"),
            json!({"body": format!("Seen with `{}` on the order page.", "order_".repeat(20))}),
        )
        .await?,
        "comment",
    )?;
    let r = ada
        .post(
            &format!("/api/v1/projects/{project}/artifacts"),
            json!({"filename": "checkout-plan.md", "content_type": "text/markdown",
                   "content": wide_markdown("Checkout plan")}),
        )
        .await?;
    created(&r, "document")?;
    let artifact = str_of(&r.json["id"], "document id")?;
    created(
        &ada.post(
            &format!("/api/v1/artifacts/{artifact}/versions"),
            json!({"name": "ready for review"}),
        )
        .await?,
        "version",
    )?;
    let doc = ada.get(&format!("/api/v1/artifacts/{artifact}")).await?;
    let version = doc
        .json
        .pointer("/version/number")
        .and_then(Value::as_u64)
        .with_context(|| format!("the document's version: {}", doc.text))?;
    created(
        &ada.post(
            &format!("/api/v1/artifacts/{artifact}/comments"),
            json!({"body": "Which phones? The table is wider than any of them."}),
        )
        .await?,
        "document comment",
    )?;
    let r = agent
        .post(
            &format!("/api/v1/issues/{issue}/asks"),
            json!({"question": "Ship the Safari fix to every storefront today, or wait for the design review of the new checkout?",
                   "options": [{"id": "yes", "label": "Ship it today"}, {"id": "no", "label": "Wait for the review"}],
                   "actor": "s1"}),
        )
        .await?;
    created(&r, "ask")?;
    let ask = str_of(&r.json["id"], "ask id")?;
    let r = ada
        .post(
            "/api/v1/sessions/s1/messages",
            json!({"body": format!("Please look at the flaky test: {}", "checkout_flow_".repeat(12))}),
        )
        .await?;
    created(&r, "session message")?;
    let message = str_of(&r.json["id"], "message id")?;
    created(
        &ada.post(
            &format!("/api/v1/issues/{issue}/messages"),
            json!({"body": "Can you take the Safari layout?", "target": {"session": "s1"}}),
        )
        .await?,
        "issue message",
    )?;
    let r = ada
        .post(
            "/api/v1/broadcasts",
            json!({"idempotency_key": "wide-1", "sessions": ["s1"], "mode": "send",
                   "body": "Freeze merges until the Safari fix ships to every storefront."}),
        )
        .await?;
    created(&r, "broadcast")?;
    let broadcast = str_of(&r.json["broadcast"]["id"], "broadcast id")?;
    created(
        &ada.post(
            "/api/v1/agent-tokens",
            json!({"name": "the build agent on the release machine"}),
        )
        .await?,
        "token",
    )?;

    // A machine of Ada's, approved; one request of its sessions approved (a live grant, a
    // decision), one pending (the request page, the inbox).
    let login = start_machine_login(
        broker,
        ADA,
        "ada-desk-with-a-long-host-name.corp.example.internal",
    )
    .await?;
    let r = ada
        .post(
            "/api/v1/credential-requests/machine-lookup",
            json!({ "code": login.code }),
        )
        .await?;
    created(&r, "machine lookup")?;
    let id = str_of(&r.json["record_id"], "machine record")?;
    created(
        &ada.post(
            &format!("/api/v1/credential-requests/{id}/approve"),
            json!({ "code": login.code }),
        )
        .await?,
        "machine approval",
    )?;
    let machine = login.machine(broker).await?;
    let first = machine.enroll(broker, "rt-wide-1").await?;
    let approved = first
        .request(
            broker,
            &[ADA_SECRET],
            "deploy the checkout fix to the staging storefront",
            Some(3600),
        )
        .await?;
    let approved = str_of(&approved["record_id"], "request record")?;
    created(
        &ada.post(
            &format!("/api/v1/credential-requests/{approved}/approve"),
            json!({}),
        )
        .await?,
        "request approval",
    )?;
    let second = machine.enroll(broker, "rt-wide-2").await?;
    let pending = second
        .request(
            broker,
            &[ADA_SECRET],
            &format!("rotate the keys of {}", "payments-eu-west-1-".repeat(6)),
            Some(600),
        )
        .await?;
    let request = str_of(&pending["record_id"], "request record")?;
    let _ = console;
    Ok(Ids {
        project,
        issue,
        artifact,
        version,
        ask,
        session: "s1".into(),
        broadcast,
        message,
        request,
    })
}

/// The addresses the walk opens for one page route; `None` for a route with parameters the
/// walk does not know (a new page: add it here).
fn addresses(path: &str, ids: &Ids) -> Option<Vec<String>> {
    let p = |s: &str| {
        s.replace("{key}", &ids.project)
            .replace("{session_id}", &ids.session)
    };
    Some(match path {
        "/projects/{key}/issues" => vec![
            p(path),
            format!("/projects/{}/issues?view=board", ids.project),
        ],
        "/issues" => vec!["/issues".into(), "/issues?view=board".into()],
        "/search" => vec!["/search".into(), "/search?q=safari".into()],
        "/requests/{id}" => vec![format!("/requests/{}", ids.request)],
        "/issues/{key}" => vec![format!("/issues/{}", ids.issue)],
        "/artifacts/{id}" => vec![format!("/artifacts/{}", ids.artifact)],
        "/artifacts/{id}/versions/{number}" => {
            vec![format!(
                "/artifacts/{}/versions/{}",
                ids.artifact, ids.version
            )]
        }
        "/artifacts/{id}/edit" => vec![format!("/artifacts/{}/edit", ids.artifact)],
        "/artifacts/{id}/discussion" => vec![format!("/artifacts/{}/discussion", ids.artifact)],
        "/asks/{id}" => vec![format!("/asks/{}", ids.ask)],
        "/broadcasts/{id}" => vec![format!("/broadcasts/{}", ids.broadcast)],
        "/messages/{id}" => vec![format!("/messages/{}", ids.message)],
        "/projects/{key}/documents"
        | "/projects/{key}/components"
        | "/sessions/{session_id}"
        | "/sessions/{session_id}/relay" => vec![p(path)],
        _ if !path.contains('{') => vec![path.to_owned()],
        _ => return None,
    })
}

/// Waits for the page to have loaded and its script to have run.
pub(crate) async fn settled(b: &Browser) -> anyhow::Result<()> {
    let until = Instant::now() + Duration::from_secs(10);
    while b.execute("return document.readyState").await? != json!("complete") {
        anyhow::ensure!(Instant::now() < until, "the page did not finish loading");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    tokio::time::sleep(Duration::from_millis(150)).await;
    Ok(())
}

/// How wide the page is against the viewport, and the elements that stick out furthest
/// (outermost first: an element sticking out whose parent does not, outside any box that
/// scrolls or clips); `null` when the page fits.
const OVERFLOW: &str = r#"
const vw = window.innerWidth, sw = document.documentElement.scrollWidth;
if (sw <= vw) return null;
const clips = e => { for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
  const o = getComputedStyle(a).overflowX; if (o !== 'visible') return true; } return false; };
const right = e => e.getBoundingClientRect().right + window.scrollX;
const name = e => { let s = e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') +
  (typeof e.className === 'string' && e.className.trim() ? '.' + e.className.trim().split(/\s+/).join('.') : '');
  return s; };
const path = e => { const p = []; for (let a = e; a && a !== document.body && p.length < 4; a = a.parentElement) p.unshift(name(a)); return p.join(' > '); };
const out = [];
for (const e of document.body.querySelectorAll('*')) {
  const r = e.getBoundingClientRect();
  if (r.width === 0 && r.height === 0) continue;
  if (right(e) <= vw + 0.5) continue;
  if (e.parentElement && e.parentElement !== document.body && right(e.parentElement) > vw + 0.5) continue;
  if (clips(e)) continue;
  out.push([Math.round(right(e)), path(e), (e.textContent || '').trim().slice(0, 60)]);
}
out.sort((a, b) => b[0] - a[0]);
return { width: sw, viewport: vw, widest: out.slice(0, 4) };
"#;

/// Whether the element `css` is displayed.
async fn shown(b: &Browser, css: &str) -> anyhow::Result<bool> {
    let s = serde_json::to_string(css)?;
    Ok(b.execute(&format!(
        "const e = document.querySelector({s}); return !!(e && e.getClientRects().length);"
    ))
    .await?
        == json!(true))
}

/// On the phone: the navigation folds behind the menu button, which opens and closes by
/// click and by keyboard, and the header takes little of the first screen.
async fn phone_menu(b: &Browser, url: &str, problems: &mut Vec<String>) -> anyhow::Result<()> {
    b.goto(&format!("{url}/")).await?;
    settled(b).await?;
    let mut check = |ok: bool, what: &str| {
        if !ok {
            problems.push(format!("390 px, the menu: {what}"));
        }
    };
    check(shown(b, "#menu-toggle").await?, "no menu button shown");
    check(
        !shown(b, "#nav-main").await? && !shown(b, "#nav-more").await?,
        "the navigation rows are shown before the menu is opened",
    );
    let top = b
        .execute(
            "return Math.max(...['header', 'nav.sub'].map(s => document.querySelector(s)) \
               .filter(e => e && e.getClientRects().length).map(e => e.getBoundingClientRect().bottom));",
        )
        .await?
        .as_f64()
        .unwrap_or(f64::MAX);
    check(
        top <= 0.12 * f64::from(PHONE.1),
        &format!("the header and navigation take {top} px of the first screen's 844"),
    );
    // By keyboard: Enter on the button opens it, Tab reaches the first link, Escape closes
    // it and gives the focus back to the button.
    b.execute("document.getElementById('menu-toggle').focus(); return 1")
        .await?;
    b.keys("\u{E007}").await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    check(
        b.attribute("#menu-toggle", "aria-expanded").await? == "true",
        "Enter did not open it (aria-expanded)",
    );
    check(
        shown(b, "#nav-main a").await? && shown(b, "#nav-more a").await?,
        "opened, the navigation rows are not shown",
    );
    b.keys("\u{E004}").await?;
    let inside = b
        .execute("return !!document.activeElement.closest('#nav-main')")
        .await?;
    check(
        inside == json!(true),
        "Tab after the button does not reach the navigation",
    );
    b.keys("\u{E00C}").await?;
    tokio::time::sleep(Duration::from_millis(100)).await;
    check(
        b.attribute("#menu-toggle", "aria-expanded").await? == "false"
            && !shown(b, "#nav-main").await?,
        "Escape did not close it",
    );
    check(
        b.execute("return document.activeElement && document.activeElement.id")
            .await?
            == json!("menu-toggle"),
        "Escape did not give the focus back to the button",
    );
    // By click, then a link of the second row.
    b.click("#menu-toggle").await?;
    b.click("#nav-more a[href=\"/tokens\"]").await?;
    b.wait_text("h1", "Agent tokens", 10).await?;
    Ok(())
}

/// Page-specific checks at one width: keys and badges on one line, code scrolling in its
/// box, lists using the width, times in words with the absolute time on hover.
async fn details(
    b: &Browser,
    path: &str,
    width: u32,
    problems: &mut Vec<String>,
) -> anyhow::Result<()> {
    let at = format!("{width} px {path}");
    // Keys and badges never wrap.
    let wrapped = b
        .execute(
            "return Array.from(document.querySelectorAll('main .badge, main td.key a, main .card .key')) \
               .filter(e => e.getClientRects().length > 1 || e.getBoundingClientRect().height > 2.2 * parseFloat(getComputedStyle(e).lineHeight || 16)) \
               .map(e => e.textContent.trim());",
        )
        .await?;
    if wrapped.as_array().is_some_and(|a| !a.is_empty()) {
        problems.push(format!("{at}: keys or badges wrap: {wrapped}"));
    }
    // Times: words relative to now, the absolute time in the title.
    let times = b
        .execute(
            r"const ts = Array.from(document.querySelectorAll('main time'));
              const bad = ts.filter(t => !/^\d{4}-\d\d-\d\d \d\d:\d\d UTC$/.test(t.title) || !t.getAttribute('datetime')
                || !/^(just now|now|\d+ min ago|in \d+ min|\d+ h ago|in \d+ h|yesterday|tomorrow|\d+ days ago|in \d+ days|\d{1,2} [A-Z][a-z]{2}( \d{4})?)$/.test(t.textContent));
              return [ts.length, bad.map(t => t.outerHTML)];",
        )
        .await?;
    if times[1].as_array().is_some_and(|a| !a.is_empty()) {
        problems.push(format!(
            "{at}: times not in words with the absolute on hover: {}",
            times[1]
        ));
    }
    if path.starts_with("/projects/WIDE/issues") && !path.contains("board") {
        anyhow::ensure!(
            times[0].as_u64().unwrap_or(0) >= 1,
            "{at}: no time on the issue list"
        );
        if width == WIDE.0 {
            let w = b
                .execute("const t = document.querySelector('main table.list'); return t ? t.getBoundingClientRect().width : 0;")
                .await?
                .as_f64()
                .unwrap_or(0.0);
            if w < 1100.0 {
                problems.push(format!(
                    "{at}: the issue list is {w} px wide on a 1400 px screen"
                ));
            }
        }
    }
    if path.starts_with("/artifacts/") && path.matches('/').count() == 2 {
        // The document: its long code line scrolls inside its own box.
        let pre = b
            .execute("const p = document.querySelector('main pre'); return p ? [p.scrollWidth, p.clientWidth, p.getAttribute('tabindex')] : null;")
            .await?;
        let (sw, cw) = (
            pre[0].as_f64().unwrap_or(0.0),
            pre[1].as_f64().unwrap_or(0.0),
        );
        if !(sw > cw && cw > 0.0) {
            problems.push(format!(
                "{at}: the long code line does not scroll in its box: {pre}"
            ));
        }
        let cells = b
            .execute("return document.querySelectorAll('main table td').length")
            .await?;
        anyhow::ensure!(
            cells.as_u64().unwrap_or(0) >= 10,
            "{at}: the document's wide table is not rendered ({cells} cells)"
        );
    }
    Ok(())
}

#[tokio::test]
async fn every_page_fits_a_phone_and_a_wide_screen() -> anyhow::Result<()> {
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let axe_js = crate::common::axe::source();
    let broker = TestBroker::start().await?;
    let console = TestConsole::start(ConsoleOptions {
        broker: Some(&broker),
        local_sign_in: true,
        shared_token: true,
        ..Default::default()
    })
    .await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let _link = crate::asks::link::live(&console, "s1", SHARED_TOKEN).await?;
    let mut ada = Person::new(&console)?;
    let r = ada.sign_in_local(ADA).await?;
    anyhow::ensure!(r.status == 303, "sign-in: {} {}", r.status, r.text);
    let ids = seed(&console, &broker, &ada, &agent).await?;

    // Empty states say what to do: Bob has no issue, no token, no decision yet.
    let mut bob = Person::new(&console)?;
    bob.sign_in_local(BOB).await?;
    for (path, says) in [
        ("/issues", "No issue is assigned to you"),
        ("/tokens", "Mint one"),
        ("/history", "When an agent asks"),
    ] {
        let r = bob.get(path).await?;
        anyhow::ensure!(
            r.status == 200 && r.text.contains(says),
            "{path}: the empty state does not say {says:?}: {}",
            r.text
        );
    }

    // The page routes: every GET page row, less the named exceptions.
    let pages: Vec<&str> = ROUTES
        .iter()
        .filter(|r| r.kind == Kind::Page && r.method == "GET")
        .map(|r| r.path)
        .collect();
    for (path, _) in NOT_OPENED {
        assert!(
            pages.contains(path),
            "{path} is not a GET page route any more: take it out of NOT_OPENED"
        );
    }
    let walked: Vec<&str> = pages
        .iter()
        .copied()
        .filter(|p| !is_asset(p) && !NOT_OPENED.iter().any(|(n, _)| n == p))
        .collect();
    let unknown: Vec<&str> = walked
        .iter()
        .copied()
        .filter(|p| addresses(p, &ids).is_none())
        .collect();
    assert!(
        unknown.is_empty(),
        "page routes the walk cannot fill: {unknown:?} (give them ids in `addresses`, or a reason in NOT_OPENED)"
    );
    assert!(walked.len() >= 30, "only {} page routes", walked.len());

    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let b = driver
        .browser(&chromium, &profiles.path().join("phone"))
        .await?;
    let shots = crate::browser::shots();
    let mut problems: Vec<String> = Vec::new();
    let result = async {
        // The sign-in page, before signing in; then sign in as a person does.
        for (w, h) in [WIDE, PHONE] {
            b.set_viewport(w, h).await?;
            b.goto(&format!("{}/sign-in", console.url)).await?;
            settled(&b).await?;
            measure(&b, "/sign-in", w, axe_js.as_deref(), &mut problems).await?;
        }
        b.type_into("#email", ADA).await?;
        b.click("form.local button[type=submit]").await?;
        b.wait_text("h1", "Inbox", 10).await?;

        phone_menu(&b, &console.url, &mut problems).await?;

        let mut opened = 0;
        for (w, h) in [PHONE, WIDE] {
            b.set_viewport(w, h).await?;
            if w == WIDE.0 {
                b.goto(&format!("{}/", console.url)).await?;
                settled(&b).await?;
                if shown(&b, "#menu-toggle").await? || !shown(&b, "#nav-main a").await? {
                    problems.push("1400 px: the navigation is folded behind a menu".into());
                }
            }
            for route in &walked {
                for path in addresses(route, &ids).unwrap_or_default() {
                    b.goto(&format!("{}{path}", console.url)).await?;
                    settled(&b).await?;
                    let status = b
                        .execute("const n = performance.getEntriesByType('navigation')[0]; return n ? n.responseStatus : 0;")
                        .await?;
                    if status.as_i64().unwrap_or(0) >= 500 {
                        problems.push(format!("{w} px {path}: answered {status}"));
                    }
                    measure(&b, &path, w, axe_js.as_deref(), &mut problems).await?;
                    details(&b, &path, w, &mut problems).await?;
                    opened += 1;
                    let shot = match path.as_str() {
                        "/" => Some("inbox"),
                        p if p == format!("/projects/{}/issues", ids.project) => Some("issues"),
                        p if p == format!("/issues/{}", ids.issue) => Some("issue"),
                        p if p == format!("/artifacts/{}", ids.artifact) => Some("document"),
                        "/sessions" => Some("sessions"),
                        _ => None,
                    };
                    if let Some(name) = shot.filter(|n| SHOTS.contains(n)) {
                        let kind = if w == PHONE.0 { "phone" } else { "wide" };
                        b.screenshot(&shots.join(format!("{kind}-{name}.png"))).await?;
                    }
                }
            }
        }
        println!("opened {opened} pages at two widths");
        anyhow::Ok(())
    }
    .await;
    b.quit().await;
    drop(driver);
    console.stop().await;
    broker.stop().await;
    result?;
    assert!(
        problems.is_empty(),
        "{} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
    Ok(())
}

/// Sideways scroll and axe-core on the page shown.
pub(crate) async fn measure(
    b: &Browser,
    path: &str,
    width: u32,
    axe_js: Option<&str>,
    problems: &mut Vec<String>,
) -> anyhow::Result<()> {
    let over = b.execute(OVERFLOW).await?;
    if !over.is_null() {
        problems.push(format!(
            "{width} px {path}: the page is {} px wide, it scrolls sideways; widest: {}",
            over["width"], over["widest"]
        ));
    }
    if let Some(src) = axe_js {
        for v in crate::common::axe::violations(b, src).await? {
            problems.push(format!("{width} px {path}: axe-core: {v}"));
        }
    }
    Ok(())
}
