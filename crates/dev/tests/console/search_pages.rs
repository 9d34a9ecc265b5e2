//! The search page marks what matched (issue 48), over real HTTP: each matched word inside
//! `<mark>`, nothing else marked, the title's own markup shown as text (escaped before it is
//! marked); the API's row carries the same words as character ranges.

use serde_json::json;

use crate::common::*;

/// The results list of the search page.
fn results(html: &str) -> &str {
    html.split("<ol class=\"results\"")
        .nth(1)
        .and_then(|r| r.split("</ol>").next())
        .unwrap_or("")
}

#[tokio::test]
async fn search_page_marks_the_matched_words() -> anyhow::Result<()> {
    let console = console_on(None).await?;
    let ada = Who::person(&console, ADA).await?;
    let agent = Who::agent(&console, SHARED_TOKEN);
    let r = ada
        .post("/api/v1/projects", json!({"key": "MRK", "name": "Marks"}))
        .await?;
    assert_eq!(r.status, 201, "{}", r.text);
    let title = "<script>alert(1)</script> Deploy the <b>payments</b> & redeploy";
    for t in [title, "Rotate keys"] {
        let r = ada
            .post("/api/v1/issues", json!({"project": "MRK", "title": t}))
            .await?;
        assert_eq!(r.status, 201, "{}", r.text);
    }

    let s = ada.get("/search?q=deplo%20pay").await?;
    assert_eq!(s.status, 200, "{}", s.text);
    let list = results(&s.text);
    assert!(list.contains("href=\"/issues/MRK-1\""), "{list}");
    // The words a prefix matches, each marked; "redeploy" does not begin with "deplo".
    let marked: Vec<&str> = list
        .split("<mark>")
        .skip(1)
        .filter_map(|m| m.split("</mark>").next())
        .collect();
    assert_eq!(marked, ["Deploy", "payments"], "{list}");
    // The title's markup is text: escaped, never a tag of the page.
    assert!(!list.contains("<script"), "{list}");
    assert!(!list.contains("<b>"), "{list}");
    // (Either way of writing the entities.)
    let text = list
        .replace("&#60;", "&lt;")
        .replace("&#62;", "&gt;")
        .replace("&#38;", "&amp;");
    assert!(
        text.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{list}"
    );
    assert!(
        text.contains("&lt;b&gt;<mark>payments</mark>&lt;/b&gt; &amp; redeploy"),
        "{list}"
    );

    // The API's row: the same words, as character ranges of its title.
    let api = agent.get("/api/v1/search?q=deplo%20pay").await?;
    assert_eq!(api.status, 200, "{}", api.text);
    let row = &api.json["rows"][0];
    assert_eq!(row["title"], title);
    let chars: Vec<char> = title.chars().collect();
    let words: Vec<String> = row["title_marks"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|m| {
                    let (s, e) = (m[0].as_u64()? as usize, m[1].as_u64()? as usize);
                    Some(chars.get(s..e)?.iter().collect())
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(words, ["Deploy", "payments"], "{}", api.text);
    assert_eq!(api.json["more"], false);
    console.stop().await;
    Ok(())
}
