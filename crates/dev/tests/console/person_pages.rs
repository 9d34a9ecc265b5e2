//! The pages of issue 27 that are not the work pages, over real HTTP: a document's versions are
//! pages (not JSON), its page links its discussion and editor and shows no token, a project's
//! documents are listed with the forms that make one, the editor's preview renders as the page
//! does (sanitized); search links every kind to a page that answers, with titles and snippets;
//! the person's answers page; delivery pages that need configuration say what and where, inside
//! the layout; the settings and sessions pages hold their forms.

use serde_json::json;

use crate::common::*;

/// Every `href="…"` of a page that points into the console (not assets), in order.
pub fn page_links(html: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .filter(|h| h.starts_with('/') && !h.starts_with("/assets/") && !h.starts_with("/favicon"))
        .map(|h| h.replace("&amp;", "&"))
        .collect()
}

/// The results list of the search page.
fn results(html: &str) -> &str {
    html.split("<ol class=\"results\"")
        .nth(1)
        .and_then(|r| r.split("</ol>").next())
        .unwrap_or("")
}

/// Whether `s` holds a 64-character lowercase hex run (a token).
fn has_hex64(s: &str) -> bool {
    let mut run = 0;
    for c in s.chars() {
        if c.is_ascii_hexdigit() && !c.is_ascii_uppercase() {
            run += 1;
            if run >= 64 {
                return true;
            }
        } else {
            run = 0;
        }
    }
    false
}

#[tokio::test]
async fn documents_pages_search_and_settings() -> anyhow::Result<()> {
    let console = console_on(None).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let r = ada
        .post(
            "/api/v1/projects",
            json!({"key": "WEB", "name": "Web shop"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = ada
        .post(
            "/api/v1/issues",
            json!({"project": "WEB", "title": "Safari checkout breaks"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);

    // A project document, edited and named twice.
    let md = "# Checkout plan\n\nThe first draft of the plan.\n\n- [ ] fix the Safari layout\n";
    let r = ada
        .post(
            "/api/v1/projects/WEB/artifacts",
            json!({"filename": "plan.md", "content_type": "text/markdown", "content": md}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let doc = r.json["id"].as_str().unwrap_or_default().to_owned();
    ada.post(
        &format!("/api/v1/artifacts/{doc}/versions"),
        json!({"name": "first"}),
    )
    .await?;
    let r = ada
        .post(
            &format!("/api/v1/artifacts/{doc}/edits"),
            json!({"ops": [{"op": "replace", "quote": {"exact": "The first draft of the plan."}, "text": "The second draft of the plan."}]}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    ada.post(
        &format!("/api/v1/artifacts/{doc}/versions"),
        json!({"name": "second"}),
    )
    .await?;

    // The document page: links to its discussion, editor and version pages; no token.
    let p = ada.get(&format!("/artifacts/{doc}")).await?;
    assert_eq!(p.status, 200, "{}", p.text);
    assert!(!has_hex64(&p.text), "a 64-character token on the page");
    let links = page_links(&p.text);
    for want in [
        format!("/artifacts/{doc}/discussion"),
        format!("/artifacts/{doc}/edit"),
        format!("/artifacts/{doc}/versions/1"),
        format!("/artifacts/{doc}/versions/2"),
        "/projects/WEB/documents".to_owned(),
    ] {
        assert!(links.contains(&want), "{want} not in {links:?}");
    }
    assert!(
        !links.iter().any(|l| l.starts_with("/api/")),
        "a document link opens JSON: {links:?}"
    );
    // A version is a page: rendered, in the layout, linked to its neighbours and the diff.
    let v = ada.get(&format!("/artifacts/{doc}/versions/1")).await?;
    assert_eq!(v.status, 200, "{}", v.text);
    assert!(
        v.headers
            .get("content-type")
            .and_then(|c| c.to_str().ok())
            .is_some_and(|c| c.starts_with("text/html")),
        "{:?}",
        v.headers
    );
    assert!(
        v.text.contains("The first draft of the plan."),
        "{}",
        v.text
    );
    assert!(v.text.contains("<h1>Checkout plan</h1>") || v.text.contains(">Checkout plan</h1>"));
    assert!(page_links(&v.text).contains(&format!("/artifacts/{doc}/versions/2")));
    assert!(!page_links(&v.text).contains(&format!("/artifacts/{doc}?from=1&to=2")));
    let v2 = ada.get(&format!("/artifacts/{doc}/versions/2")).await?;
    assert!(page_links(&v2.text).contains(&format!("/artifacts/{doc}?from=1&to=2")));
    // A version that is not there: 404 inside the layout, with the way back to the document.
    let none = ada.get(&format!("/artifacts/{doc}/versions/9")).await?;
    assert_eq!(none.status, 404, "{}", none.text);
    assert!(
        none.text.contains("<nav") && none.text.contains(&format!("href=\"/artifacts/{doc}\""))
    );
    // The editor holds the markdown as it is, and the token the save is guarded by.
    let e = ada.get(&format!("/artifacts/{doc}/edit")).await?;
    assert_eq!(e.status, 200, "{}", e.text);
    assert!(e.text.contains("The second draft of the plan."));
    let text = ada.get(&format!("/api/v1/artifacts/{doc}/text")).await?;
    let token = text.json["token"].as_str().unwrap_or_default();
    assert!(e.text.contains(&format!("data-token=\"{token}\"")));

    // The preview renders as the page does: raw HTML and script URLs do not pass; console
    // refs point at pages. A bearer is not a person.
    let preview = ada
        .http
        .post(format!("{}/documents/preview", console.url))
        .header("origin", &console.url)
        .header("x-csrf-token", ada.csrf.clone().unwrap_or_default())
        .header("content-type", "text/markdown")
        .body("# Title\n\n<script>alert(1)</script>\n\n[x](javascript:alert(2)) [i](countersign://issue/WEB-1)\n")
        .send()
        .await?;
    assert_eq!(preview.status(), 200);
    let html = preview.text().await?;
    assert!(html.contains("Title</h1>"), "{html}");
    assert!(
        !html.contains("<script") && !html.contains("javascript:"),
        "{html}"
    );
    assert!(html.contains("href=\"/issues/WEB-1\""), "{html}");
    let no_csrf = ada
        .http
        .post(format!("{}/documents/preview", console.url))
        .header("origin", &console.url)
        .body("# x")
        .send()
        .await?;
    assert_eq!(no_csrf.status(), 403);
    assert_eq!(
        agent.get(&format!("/artifacts/{doc}/edit")).await?.status,
        403
    );

    // The project's documents page lists it, with the forms to write and upload one.
    let list = ada.get("/projects/WEB/documents").await?;
    assert_eq!(list.status, 200, "{}", list.text);
    assert!(
        list.text
            .contains(&format!("href=\"/artifacts/{doc}\">plan.md</a>"))
    );
    assert!(list.text.contains("id=\"new-document\"") && list.text.contains("id=\"upload\""));
    let nope = ada.get("/projects/NOPE/documents").await?;
    assert_eq!(nope.status, 404);
    assert!(nope.text.contains("<nav"), "{}", nope.text);
    // Every page's navigation reaches the person's answers and the settings.
    for href in [
        "/answers",
        "/settings",
        "/history",
        "/broadcasts",
        "/delivery/pipeline",
    ] {
        assert!(
            list.text.contains(&format!("href=\"{href}\"")),
            "no link to {href} in the navigation"
        );
    }

    // Something of every kind to find: a comment on the issue, an ask, a comment on the
    // document, a message.
    let r = agent
        .post(
            "/api/v1/issues/WEB-1/comments",
            json!({"body": "Safari users cannot pay since the redesign.", "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = agent
        .post(
            "/api/v1/issues/WEB-1/asks",
            json!({"question": "Ship the Safari fix today?", "options": [{"id": "yes", "label": "Yes"}, {"id": "no", "label": "No"}], "actor": "s1"}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let ask = r.json["id"].as_str().unwrap_or_default().to_owned();
    let r = ada
        .post(
            &format!("/api/v1/artifacts/{doc}/comments"),
            json!({"body": "Safari first, please.", "quote": {"exact": "fix the Safari layout"}}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let r = ada
        .post(
            "/api/v1/issues/WEB-1/messages",
            json!({"body": "Look at the Safari logs", "target": {"session": "s1"}}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);

    // Search: every result links to a page that answers; link text is no id; a word's
    // beginning finds the word.
    let empty = ada.get("/search").await?;
    assert!(
        empty
            .text
            .contains("issues, documents, asks, comments and messages"),
        "{}",
        empty.text
    );
    for q in ["safari"] {
        let s = ada.get(&format!("/search?q={q}")).await?;
        assert_eq!(s.status, 200, "{}", s.text);
        let list = results(&s.text);
        let kinds: Vec<&str> = list
            .split("data-kind=\"")
            .skip(1)
            .filter_map(|r| r.split('"').next())
            .collect();
        for k in ["issue", "document", "ask", "comment", "message"] {
            assert!(kinds.contains(&k), "{q}: no {k} in {kinds:?}: {list}");
        }
        for link in page_links(list) {
            let mut got = ada.get(&link).await?;
            // A message's link sends the browser on to where it was written.
            if got.status == 303
                && let Some(to) = got.location()
            {
                got = ada.get(&to).await?;
            }
            assert_eq!(got.status, 200, "{q}: {link} answers {}", got.status);
        }
        // No UUID is a link's text.
        for text in list
            .split("\">")
            .skip(1)
            .filter_map(|t| t.split("</a>").next())
        {
            assert!(
                uuid::Uuid::parse_str(text.trim()).is_err(),
                "an id as link text: {text}"
            );
        }
        assert!(list.contains(&format!("href=\"/asks/{ask}\"")), "{list}");
        assert!(
            list.contains(&format!("href=\"/artifacts/{doc}/discussion#comment-")),
            "{list}"
        );
    }

    // Ada answers with an option and words: her answers page lists it.
    let r = ada
        .post(
            &format!("/api/v1/asks/{ask}/answer"),
            json!({"options": ["yes"], "text": "after the tests pass"}),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let answers = ada.get("/answers").await?;
    assert_eq!(answers.status, 200, "{}", answers.text);
    assert!(
        answers.text.contains("Yes; after the tests pass"),
        "{}",
        answers.text
    );
    assert!(answers.text.contains(&format!("href=\"/asks/{ask}\"")));

    // Delivery without settings: a page inside the layout (200, issue 48: not an error) that
    // says what to configure and links the settings; the settings page says the console needs
    // [code_hosting].
    for path in ["/delivery", "/delivery/pipeline"] {
        let d = ada.get(path).await?;
        assert_eq!(d.status, 200, "{path}: {}", d.text);
        assert!(
            d.text.contains("<nav"),
            "{path}: not in the layout: {}",
            d.text
        );
        assert!(d.text.contains("href=\"/settings#delivery\""), "{}", d.text);
        assert!(d.text.contains("deploy repository"), "{}", d.text);
    }
    let c = ada.get("/projects/WEB/components").await?;
    assert_eq!(c.status, 404);
    assert!(c.text.contains("href=\"/settings#sources\""), "{}", c.text);
    let s = ada.get("/settings").await?;
    assert_eq!(s.status, 200, "{}", s.text);
    for form in ["delivery-settings", "source-form", "mapping-form"] {
        assert!(s.text.contains(&format!("id=\"{form}\"")), "{form}");
    }
    assert!(s.text.contains("[code_hosting]"), "{}", s.text);
    let r = ada
        .call(
            reqwest::Method::PUT,
            "/api/v1/settings/repo-projects/acme/shop",
            Some(json!({"project": "WEB", "default": true})),
        )
        .await?;
    assert_eq!(r.status, 200, "{}", r.text);
    let s = ada.get("/settings").await?;
    assert!(s.text.contains("data-repo=\"acme/shop\""), "{}", s.text);
    assert!(
        s.text
            .contains("DELETE /api/v1/settings/repo-projects/acme/shop")
    );

    // Session groups on the sessions page.
    let r = ada
        .post(
            "/api/v1/delivery/session-groups",
            json!({"name": "checkout crew", "sessions": ["s1", "s2"]}),
        )
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let gid = r.json["id"].as_str().unwrap_or_default().to_owned();
    let sessions = ada.get("/sessions").await?;
    assert!(
        sessions.text.contains(&format!("data-group=\"{gid}\"")),
        "{}",
        sessions.text
    );
    assert!(sessions.text.contains("s1, s2"));
    assert!(sessions.text.contains("id=\"group-new\""));
    // A record id, as the CLI and MCP print a waiting request's, leads to its page.
    let record = "AB".repeat(32);
    let s = ada.get(&format!("/search?q={record}")).await?;
    assert_eq!(s.status, 303, "{}", s.text);
    assert_eq!(
        s.location().as_deref(),
        Some(format!("/requests/{}", record.to_ascii_lowercase()).as_str())
    );
    // A word's beginning finds the word (the search's prefix match).
    let s = ada.get("/search?q=safar").await?;
    let list = results(&s.text);
    for k in ["issue", "document", "ask", "comment", "message"] {
        assert!(
            list.contains(&format!("data-kind=\"{k}\"")),
            "\"safar\" finds no {k}: {list}"
        );
    }
    console.stop().await;
    Ok(())
}

/// A browser that accepts gzip gets pages, scripts and JSON gzipped (the first load stays
/// small); event streams are not. Each page carries the CSRF token masked afresh (what a
/// compressed page's length could tell changes every time: BREACH), and every masking works.
#[tokio::test]
async fn pages_are_gzipped_and_each_carries_a_fresh_csrf_masking() -> anyhow::Result<()> {
    let console = console_on(None).await?;
    let ada = Who::person(&console, ADA).await?;
    let get = |path: &str| {
        ada.http
            .get(format!("{}{path}", console.url))
            .header("accept-encoding", "gzip")
            .send()
    };
    for path in ["/projects", "/assets/console.js", "/api/v1/projects"] {
        let r = get(path).await?;
        assert_eq!(r.status(), 200, "{path}");
        let encoding = r.headers().get("content-encoding").cloned();
        let vary = r.headers().get("vary").cloned();
        let body = r.bytes().await?;
        if path == "/api/v1/projects" && body.len() < 1024 {
            // Under 1 KiB nothing is gained: sent as it is.
            assert!(encoding.is_none(), "{path}");
            continue;
        }
        assert_eq!(
            encoding.as_ref().map(|v| v.as_bytes()),
            Some(&b"gzip"[..]),
            "{path}"
        );
        assert!(
            vary.is_some_and(|v| v.to_str().unwrap_or("").contains("accept-encoding")),
            "{path}"
        );
        assert_eq!(body.get(..2), Some(&[0x1f, 0x8b][..]), "{path}: not gzip");
    }
    // Without Accept-Encoding, as it is.
    let plain = ada
        .http
        .get(format!("{}/projects", console.url))
        .send()
        .await?;
    assert!(plain.headers().get("content-encoding").is_none());
    // An event stream is never compressed (each event must reach the page at once).
    let mut events = get("/api/v1/events").await?;
    assert_eq!(events.status(), 200);
    assert!(events.headers().get("content-encoding").is_none());
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), events.chunk()).await;
    assert!(matches!(first, Ok(Ok(Some(_)))), "{first:?}");
    drop(events);

    // Two pages, two maskings of one token: both accepted for a state change.
    let a = scrape_csrf(&ada.get("/projects").await?.text).unwrap_or_default();
    let b = scrape_csrf(&ada.get("/issues").await?.text).unwrap_or_default();
    assert!(!a.is_empty() && a != b, "{a} / {b}");
    for (i, csrf) in [a, b].into_iter().enumerate() {
        let r = ada
            .http
            .post(format!("{}/api/v1/projects", console.url))
            .header("origin", &console.url)
            .header("x-csrf-token", csrf)
            .json(&json!({"key": format!("GZ{i}"), "name": "Gzip"}))
            .send()
            .await?;
        assert_eq!(r.status(), 201, "{}", r.text().await?);
    }
    console.stop().await;
    Ok(())
}
