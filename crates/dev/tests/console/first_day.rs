//! A first day in the console, in headless Chromium, as a new user walks it: by the labels and
//! button texts a person reads, not by ids. She signs in, creates a project and an issue, edits
//! its fields in place, comments; an agent's comment and ask arrive without a reload and she
//! answers; she writes a document, edits it, meets a stale save (an agent edited meanwhile)
//! and keeps her text; quotes a selection in a comment; approves a version; searches and
//! follows every result (none answers 404); sends a broadcast with a double click (one
//! broadcast is sent); opens an unknown issue (404 inside the layout); uses `/` and `c`.
//!
//! On every page of the walk, axe-core (the npm package, found by `COUNTERSIGN_AXE_JS`, which
//! `.ci/run` installs) finds no serious or critical violation, and the page's first load is
//! at most 200 KB (the Performance API's sizes of the document and what it fetched).
//!
//! Skips without Chromium unless `COUNTERSIGN_REQUIRE_BROWSER=1`, which also makes axe-core
//! mandatory.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::{Value, json};

use crate::common::webdriver::{Browser, Driver, browser_or_skip};
use crate::common::*;

/// The most a page's first load may transfer.
const FIRST_LOAD_LIMIT: f64 = 200.0 * 1024.0;

/// What the walk checked on each page.
#[derive(Default)]
struct Audit {
    axe: Option<String>,
    /// Page (its path) → bytes of its first load.
    sizes: BTreeMap<String, f64>,
    /// Serious or critical violations, by page.
    violations: Vec<String>,
    pages: usize,
}

struct Walk<'a> {
    b: &'a Browser,
    url: String,
    audit: Audit,
    shots: std::path::PathBuf,
}

impl Walk<'_> {
    fn at(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    async fn path(&self) -> anyhow::Result<String> {
        let u = self.b.current_url().await?;
        Ok(u.strip_prefix(&self.url).unwrap_or(&u).to_owned())
    }

    /// Runs `script` (a function body) and answers its value.
    async fn js(&self, script: &str) -> anyhow::Result<Value> {
        self.b.execute(script).await
    }

    /// Marks the first displayed element `find` (a JS expression over `document`, answering an
    /// element or null) answers, polling until it does, and answers a selector for it.
    async fn find(&self, what: &str, find: &str) -> anyhow::Result<String> {
        let until = Instant::now() + Duration::from_secs(10);
        let script = format!(
            "const shown = e => !!(e && (e.offsetWidth || e.offsetHeight || e.getClientRects().length)); \
             const e = (function () {{ {find} }})(); \
             if (!shown(e)) return null; \
             window.__walk = (window.__walk || 0) + 1; \
             e.setAttribute('data-walk', String(window.__walk)); \
             return String(window.__walk);"
        );
        loop {
            if let Value::String(n) = self.js(&script).await? {
                return Ok(format!("[data-walk=\"{n}\"]"));
            }
            if Instant::now() > until {
                bail!(
                    "no {what} on {} ({})",
                    self.path().await?,
                    self.js("return document.querySelector('main') ? document.querySelector('main').innerText.slice(0, 1500) : ''")
                        .await?
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The control a label names (its text contains `label`): `<label>`, then `aria-label`.
    async fn field(&self, label: &str) -> anyhow::Result<String> {
        let l = serde_json::to_string(label)?;
        self.find(
            &format!("field labelled {label:?}"),
            &format!(
                "const want = {l}.toLowerCase(); \
                 const shown = e => !!(e && (e.offsetWidth || e.offsetHeight || e.getClientRects().length)); \
                 for (const lab of document.querySelectorAll('label')) {{ \
                   if (!lab.textContent.toLowerCase().includes(want)) continue; \
                   const c = lab.control || (lab.htmlFor && document.getElementById(lab.htmlFor)); \
                   if (shown(c)) return c; }} \
                 for (const c of document.querySelectorAll('[aria-label]')) {{ \
                   if (c.getAttribute('aria-label').toLowerCase().includes(want) && shown(c)) return c; }} \
                 return null;"
            ),
        )
        .await
    }

    /// A button or link whose text is `text` (or starts with it).
    async fn control(&self, text: &str) -> anyhow::Result<String> {
        let t = serde_json::to_string(text)?;
        self.find(
            &format!("button or link {text:?}"),
            &format!(
                "const want = {t}.toLowerCase(); \
                 const shown = e => !!(e && (e.offsetWidth || e.offsetHeight || e.getClientRects().length)); \
                 const all = Array.from(document.querySelectorAll('button, a, input[type=submit]')).filter(shown); \
                 const text = e => (e.innerText || e.value || '').trim().replace(/\\s+/g, ' ').toLowerCase(); \
                 return all.find(e => text(e) === want) || all.find(e => text(e).startsWith(want)) || null;"
            ),
        )
        .await
    }

    async fn fill(&self, label: &str, text: &str) -> anyhow::Result<()> {
        let f = self.field(label).await?;
        self.b.type_into(&f, text).await
    }

    async fn press(&self, text: &str) -> anyhow::Result<()> {
        let c = self.control(text).await?;
        self.b.click(&c).await
    }

    /// Waits until the page's main text contains `needle`.
    async fn sees(&self, needle: &str) -> anyhow::Result<()> {
        self.b.wait_text("main", needle, 15).await.map(|_| ())
    }

    /// The HTTP status the browser got for the page it shows.
    async fn status(&self) -> anyhow::Result<i64> {
        Ok(self
            .js("const n = performance.getEntriesByType('navigation')[0]; return n ? n.responseStatus : 0;")
            .await?
            .as_i64()
            .unwrap_or(0))
    }

    /// Checks the page now shown: axe-core's serious and critical violations, the first
    /// load's size, a screenshot. Waits for the page to have loaded.
    async fn check(&mut self, name: &str) -> anyhow::Result<()> {
        let until = Instant::now() + Duration::from_secs(10);
        while self.js("return document.readyState").await? != json!("complete") {
            anyhow::ensure!(Instant::now() < until, "{name} did not finish loading");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.audit.pages += 1;
        let path = self.path().await?;
        // The first load: the document and what it fetched (their bodies as sent, or the
        // bytes transferred when more; the event stream, which never ends, left out).
        let size = self
            .js("const all = performance.getEntriesByType('navigation').concat(performance.getEntriesByType('resource')); \
                 return all.filter(e => !e.name.includes('/api/v1/events')) \
                   .reduce((s, e) => s + Math.max(e.transferSize || 0, e.encodedBodySize || 0), 0);")
            .await?
            .as_f64()
            .unwrap_or(0.0);
        self.audit.sizes.insert(path.clone(), size);
        anyhow::ensure!(
            size <= FIRST_LOAD_LIMIT,
            "{name} ({path}): first load {size} bytes, over 200 KB"
        );
        if let Some(src) = &self.audit.axe {
            for v in crate::common::axe::violations(self.b, src).await? {
                self.audit.violations.push(format!("{name} ({path}): {v}"));
            }
        }
        self.b
            .screenshot(&self.shots.join(format!("first-day-{name}.png")))
            .await?;
        Ok(())
    }

    /// Navigates by typing the address (what a person does with a URL they were given).
    async fn open(&self, path: &str) -> anyhow::Result<()> {
        self.b.goto(&self.at(path)).await
    }

    /// Clicks `text` and waits for the address to change.
    async fn follow(&self, text: &str) -> anyhow::Result<()> {
        let before = self.b.current_url().await?;
        self.press(text).await?;
        let until = Instant::now() + Duration::from_secs(10);
        while self.b.current_url().await? == before {
            anyhow::ensure!(Instant::now() < until, "{text:?} did not lead anywhere");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    }
}

#[tokio::test]
async fn a_first_day_in_chromium() -> anyhow::Result<()> {
    let Some((chromium, chromedriver)) = browser_or_skip() else {
        return Ok(());
    };
    let console = TestConsole::start(ConsoleOptions {
        local_sign_in: true,
        shared_token: true,
        ..Default::default()
    })
    .await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    // An agent session holding its link (a broadcast's recipient).
    let _link = crate::asks::link::live(&console, "s1", SHARED_TOKEN).await?;
    let profiles = tempfile::tempdir()?;
    let driver = Driver::start(&chromedriver).await?;
    let b = driver
        .browser(&chromium, &profiles.path().join("walker"))
        .await?;
    let mut w = Walk {
        b: &b,
        url: console.url.clone(),
        audit: Audit {
            axe: crate::common::axe::source(),
            ..Default::default()
        },
        shots: crate::browser::shots(),
    };
    let result = walk(&mut w, &agent, &console).await;
    if let Err(e) = &result {
        let _ = b.screenshot(&w.shots.join("first-day-failed.png")).await;
        eprintln!(
            "the walk failed at {}: {e:#}",
            w.path().await.unwrap_or_default()
        );
    }
    println!("first loads (bytes): {:?}", w.audit.sizes);
    let audit = std::mem::take(&mut w.audit);
    drop(w);
    b.quit().await;
    drop(driver);
    console.stop().await;
    result?;
    assert!(
        audit.violations.is_empty(),
        "axe-core: serious or critical violations:\n{}",
        audit.violations.join("\n")
    );
    assert!(audit.pages >= 12, "only {} pages checked", audit.pages);
    Ok(())
}

async fn walk(w: &mut Walk<'_>, agent: &Who, console: &TestConsole) -> anyhow::Result<()> {
    // ----- sign in -----
    w.open("/").await?;
    w.fill("E-mail", ADA).await?;
    w.check("sign-in").await?;
    w.press("Sign in").await?;
    w.sees("Inbox").await?;
    w.sees("No question waits for you").await?;
    w.check("inbox-empty").await?;

    // ----- a project -----
    w.follow("Projects").await?;
    w.check("projects-empty").await?;
    open_form(w, "New project").await?;
    w.fill("Key", "WALK").await?;
    w.fill("Name", "Walk through").await?;
    w.press("Create project").await?;
    w.b.wait_text("main", "WALK", 15).await?;
    w.check("project").await?;

    // ----- an issue, by `c` on the issue list -----
    if !w.path().await?.starts_with("/projects/WALK") {
        w.follow("WALK").await?;
    }
    w.sees("WALK").await?;
    // `c` shows the new-issue form (on an empty project it is open already: `c` closes it,
    // and `c` again opens it).
    let open_form = "const f = document.getElementById('new-issue'); return !!f && !f.hidden;";
    for _ in 0..2 {
        let was = w.js(open_form).await?;
        w.js("document.activeElement && document.activeElement.blur(); return 1")
            .await?;
        w.b.keys("c").await?;
        let until = Instant::now() + Duration::from_secs(5);
        while w.js(open_form).await? == was {
            anyhow::ensure!(
                Instant::now() < until,
                "`c` did not toggle the new-issue form"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        if w.js(open_form).await? == json!(true) {
            break;
        }
    }
    w.fill("Title", "Safari checkout breaks").await?;
    w.press("Create issue").await?;
    w.b.wait_text("h1", "Safari checkout breaks", 15).await?;
    let issue_path = w.path().await?;
    anyhow::ensure!(issue_path.starts_with("/issues/WALK-"), "{issue_path}");
    let key = issue_path.trim_start_matches("/issues/").to_owned();
    w.check("issue").await?;

    // Its fields, in place: status and priority.
    let status = w.field("Status").await?;
    w.js(&format!(
        "const s = document.querySelector('{status}'); s.value = 'in_progress'; s.dispatchEvent(new Event('change', {{ bubbles: true }})); return 1"
    ))
    .await?;
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let r = agent.get(&format!("/api/v1/issues/{key}")).await?;
        if r.json["status"] == "in_progress" {
            break;
        }
        anyhow::ensure!(Instant::now() < until, "status not changed: {}", r.text);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A comment.
    w.fill("Comment", "Reproduced on Safari 17.").await?;
    w.press("Comment").await?;
    w.sees("Reproduced on Safari 17.").await?;

    // An agent's comment and ask arrive without a reload.
    w.js("document.body.setAttribute('data-not-reloaded', '1'); return 1")
        .await?;
    let r = agent
        .post(
            &format!("/api/v1/issues/{key}/comments"),
            json!({"body": "The Safari layout shifts the pay button.", "actor": "s1"}),
        )
        .await?;
    anyhow::ensure!(r.status == 201, "{}", r.text);
    let r = agent
        .post(
            &format!("/api/v1/issues/{key}/asks"),
            json!({"question": "Ship the Safari fix today?", "options": [{"id": "yes", "label": "Ship it"}, {"id": "no", "label": "Wait"}], "actor": "s1"}),
        )
        .await?;
    anyhow::ensure!(r.status == 201, "{}", r.text);
    let ask = r.json["id"].as_str().unwrap_or_default().to_owned();
    w.sees("The Safari layout shifts the pay button.").await?;
    w.sees("Ship the Safari fix today?").await?;
    anyhow::ensure!(
        w.js("return document.body.getAttribute('data-not-reloaded')")
            .await?
            == json!("1"),
        "the issue page reloaded"
    );
    w.check("issue-live").await?;

    // She answers it from her inbox, with an option and words.
    w.follow("Inbox").await?;
    w.sees("Ship the Safari fix today?").await?;
    w.check("inbox-ask").await?;
    let pick = w
        .find(
            "the option Ship it to tick",
            "for (const l of document.querySelectorAll('.pick-options label')) { if (l.textContent.includes('Ship it')) return l.querySelector('input'); } return null;",
        )
        .await?;
    w.b.click(&pick).await?;
    w.fill("Answer in words", "after the tests pass").await?;
    let answer = w
        .find(
            "the answer form's button",
            "const f = document.querySelector('form[data-answer-text]'); return f && f.querySelector('button[type=submit]');",
        )
        .await?;
    w.b.click(&answer).await?;
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let r = agent.get(&format!("/api/v1/asks/{ask}")).await?;
        if r.json["state"] == "answered" {
            anyhow::ensure!(
                r.json["answer"]["options"] == json!(["yes"])
                    && r.json["answer"]["text"] == "after the tests pass",
                "{}",
                r.text
            );
            break;
        }
        anyhow::ensure!(Instant::now() < until, "not answered: {}", r.text);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    w.follow("your answers and decisions").await?;
    w.sees("Ship it; after the tests pass").await?;
    w.check("answers").await?;

    // ----- a document -----
    w.open("/projects/WALK/documents").await?;
    w.check("documents-empty").await?;
    w.fill("File name", "checkout-plan").await?;
    w.fill(
        "Markdown",
        "# Checkout plan\n\nMove the pay button above the fold.\n\nTest on Safari and Firefox.\n",
    )
    .await?;
    w.press("Create document").await?;
    w.b.wait_text("h1", "checkout-plan.md", 15).await?;
    let doc = w.path().await?.trim_start_matches("/artifacts/").to_owned();
    w.sees("Move the pay button above the fold.").await?;
    w.check("document").await?;

    // Edit it, preview, save.
    w.follow("Edit").await?;
    let text = w.field("Markdown").await?;
    w.js(&format!(
        "const t = document.querySelector('{text}'); t.value = t.value.replace('above the fold', 'above the fold on phones'); return 1"
    ))
    .await?;
    w.press("Preview").await?;
    w.b.wait_text("#preview", "above the fold on phones", 10)
        .await?;
    w.check("editor").await?;
    w.press("Save").await?;
    w.b.wait_text("#save-result", "Saved", 10).await?;
    let md = agent.get(&format!("/api/v1/artifacts/{doc}/text")).await?;
    anyhow::ensure!(
        md.json["markdown"]
            .as_str()
            .unwrap_or("")
            .contains("above the fold on phones"),
        "{}",
        md.text
    );

    // A stale save: an agent edits while she types; her save applies nothing, shows what
    // changed, and keeps her text.
    let r = agent
        .post(
            &format!("/api/v1/artifacts/{doc}/edits"),
            json!({"ops": [{"op": "replace", "quote": {"exact": "Test on Safari and Firefox."}, "text": "Test on Safari, Firefox and Chrome."}], "actor": "s1"}),
        )
        .await?;
    anyhow::ensure!(r.status == 200, "{}", r.text);
    w.js(&format!(
        "const t = document.querySelector('{text}'); t.value = t.value.replace('# Checkout plan', '# Checkout plan for the winter sale'); return 1"
    ))
    .await?;
    w.press("Save").await?;
    w.b.wait_text("#stale", "changed the document while you edited", 10)
        .await?;
    w.b.wait_text("#stale-theirs", "Chrome", 5).await?;
    w.b.wait_text("#stale-mine", "winter sale", 5).await?;
    let kept = w
        .js("return document.getElementById('stale-kept').value")
        .await?;
    anyhow::ensure!(
        kept.as_str().unwrap_or("").contains("winter sale"),
        "{kept}"
    );
    let md = agent.get(&format!("/api/v1/artifacts/{doc}/text")).await?;
    anyhow::ensure!(
        !md.json["markdown"]
            .as_str()
            .unwrap_or("")
            .contains("winter sale"),
        "a stale save applied: {}",
        md.text
    );
    w.check("stale-save").await?;
    // She takes the latest and reapplies her change by hand.
    w.press("Edit the latest text").await?;
    w.js(&format!(
        "const t = document.querySelector('{text}'); t.value = t.value.replace('# Checkout plan', '# Checkout plan for the winter sale'); return 1"
    ))
    .await?;
    w.press("Save").await?;
    w.b.wait_text("#save-result", "Saved", 10).await?;
    let md = agent.get(&format!("/api/v1/artifacts/{doc}/text")).await?;
    let now = md.json["markdown"].as_str().unwrap_or("");
    anyhow::ensure!(
        now.contains("winter sale") && now.contains("Chrome"),
        "{now}"
    );

    // Name a version and approve it.
    w.follow("Back to the document").await?;
    w.fill("Name the current text", "ready for review").await?;
    w.press("Name version").await?;
    w.b.wait_text("#versions", "ready for review", 10).await?;
    w.press("Approve the latest version").await?;
    w.b.wait_text("#doc-result", "You approved version", 10)
        .await?;
    w.sees("approved").await?;
    w.check("document-reviewed").await?;
    // A version is a page.
    w.follow("Version 1").await?;
    anyhow::ensure!(w.status().await? == 200);
    w.sees("Checkout plan").await?;
    w.check("version").await?;
    w.b.goto(&w.at(&format!("/artifacts/{doc}"))).await?;

    // Select text to quote it in a comment: no retyping.
    w.js(
        "const p = Array.from(document.querySelectorAll('#rendered p')).find(p => p.textContent.includes('pay button')); \
         const r = document.createRange(); r.selectNodeContents(p); \
         const s = window.getSelection(); s.removeAllRanges(); s.addRange(r); \
         document.dispatchEvent(new Event('selectionchange')); return 1",
    )
    .await?;
    w.follow("Comment on the selection").await?;
    let quote = w.field("Quote").await?;
    let q = w
        .js(&format!("return document.querySelector('{quote}').value"))
        .await?;
    anyhow::ensure!(
        q.as_str().unwrap_or("").contains("Move the pay button"),
        "quote: {q}"
    );
    w.fill("Comment", "Which phones?").await?;
    w.press("Comment").await?;
    w.b.wait_text("#threads", "Which phones?", 10).await?;
    w.check("discussion").await?;
    let comments = agent
        .get(&format!("/api/v1/artifacts/{doc}/comments"))
        .await?;
    anyhow::ensure!(
        comments.text.contains("Move the pay button"),
        "{}",
        comments.text
    );

    // ----- search: `/`, then every result link answers -----
    w.js("document.activeElement && document.activeElement.blur(); return 1")
        .await?;
    w.b.keys("/").await?;
    let focused = w
        .js("return document.activeElement && document.activeElement.id")
        .await?;
    anyhow::ensure!(focused == json!("header-search"), "`/` focused {focused}");
    w.b.keys("safar\u{E007}").await?;
    w.b.wait_for("ol.results", 10).await?;
    w.check("search").await?;
    let links = w
        .js("return Array.from(document.querySelectorAll('ol.results a')).map(a => [a.getAttribute('href'), a.textContent.trim()])")
        .await?;
    let links: Vec<(String, String)> = serde_json::from_value(links)?;
    anyhow::ensure!(links.len() >= 4, "few results: {links:?}");
    let search_page = w.b.current_url().await?;
    for (href, text) in &links {
        anyhow::ensure!(
            uuid::Uuid::parse_str(text).is_err(),
            "an id as link text: {text}"
        );
        w.open(href).await?;
        let s = w.status().await?;
        anyhow::ensure!(s == 200, "{href} ({text}) answered {s}");
    }
    w.b.goto(&search_page).await?;

    // ----- a broadcast, double-clicked: one broadcast -----
    w.follow("Broadcasts").await?;
    w.check("broadcasts").await?;
    let s1 = w
        .find(
            "the session s1 to tick",
            "const c = document.querySelector('input[name=session][value=s1]'); return c;",
        )
        .await?;
    w.b.click(&s1).await?;
    w.fill("Message", "Freeze merges until the Safari fix ships.")
        .await?;
    let send = w.control("Send to the selected").await?;
    w.js(&format!(
        "const b = document.querySelector('{send}'); b.click(); b.click(); return 1"
    ))
    .await?;
    w.b.wait_text("#broadcast-result", "Sent to 1 session", 10)
        .await?;
    let body = w
        .js("return document.getElementById('broadcast-body').value")
        .await?;
    anyhow::ensure!(body == json!(""), "the form kept its text: {body}");
    // The real double click too.
    w.b.click(&send).await?;
    let ada = Who::person(console, ADA).await?;
    let list = ada.get("/api/v1/broadcasts").await?;
    let sent = list.json.as_array().map(Vec::len).unwrap_or(0);
    anyhow::ensure!(sent == 1, "{sent} broadcasts: {}", list.text);
    w.sees("Freeze merges").await?;

    // ----- an unknown issue: 404 inside the layout -----
    w.open("/issues/WALK-99").await?;
    anyhow::ensure!(w.status().await? == 404);
    w.b.wait_for("nav", 5).await?;
    w.sees("404").await?;
    w.check("not-found").await?;
    w.follow("See your issues")
        .await
        .context("the 404 page's way back")?;

    // The shortcuts dialog.
    w.js("document.activeElement && document.activeElement.blur(); return 1")
        .await?;
    w.b.keys("?").await?;
    w.b.wait_for("#shortcuts[open]", 5).await?;
    Ok(())
}

/// Opens a form that starts hidden behind a button, when there is such a button.
async fn open_form(w: &Walk<'_>, button: &str) -> anyhow::Result<()> {
    let c = w.control(button).await?;
    let open = w
        .js(&format!(
            "return document.querySelector('{c}').getAttribute('aria-expanded')"
        ))
        .await?;
    if open != json!("true") {
        w.b.click(&c).await?;
    }
    Ok(())
}
