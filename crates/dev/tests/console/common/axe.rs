//! axe-core on the page a browser shows: the one runner of every browser test's
//! accessibility check (the first-day walk, the page walk at two widths, the delivery and
//! discoverability tests). The script is the npm package `.ci/run` installs, found by
//! `COUNTERSIGN_AXE_JS`; without it the checks are skipped, unless
//! `COUNTERSIGN_REQUIRE_BROWSER=1` makes it mandatory.

use std::time::{Duration, Instant};

use serde_json::json;

use super::webdriver::Browser;

/// axe-core's script, when installed (`COUNTERSIGN_AXE_JS`, else where `.ci/run` puts it).
pub fn source() -> Option<String> {
    let path = std::env::var("COUNTERSIGN_AXE_JS").ok().unwrap_or_else(|| {
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../target/axe/node_modules/axe-core/axe.min.js"
        )
        .to_owned()
    });
    match std::fs::read_to_string(&path) {
        Ok(s) => Some(s),
        Err(_) => {
            assert!(
                std::env::var("COUNTERSIGN_REQUIRE_BROWSER").as_deref() != Ok("1"),
                "COUNTERSIGN_REQUIRE_BROWSER=1 but axe-core is not at {path} (COUNTERSIGN_AXE_JS)"
            );
            println!("axe-core not installed at {path}: accessibility checks skipped");
            None
        }
    }
}

/// Runs axe-core (`src`, loaded into the page once) on the page shown; answers its serious
/// and critical violations, each as "impact id: help at [nodes]".
pub async fn violations(b: &Browser, src: &str) -> anyhow::Result<Vec<String>> {
    if b.execute("return typeof window.axe === 'object'").await? != json!(true) {
        b.execute(&format!("{src}\n;return 1;")).await?;
    }
    b.execute(
        "window.__axe = null; \
         axe.run(document, { resultTypes: ['violations'] }) \
           .then(r => { window.__axe = r.violations.map(v => ({ id: v.id, impact: v.impact, help: v.help, \
              nodes: v.nodes.slice(0, 3).map(n => n.target.join(' ')) })); }) \
           .catch(e => { window.__axe = [{ id: 'axe-error', impact: 'critical', help: String(e), nodes: [] }]; }); \
         return 1;",
    )
    .await?;
    let until = Instant::now() + Duration::from_secs(30);
    let found = loop {
        let v = b.execute("return window.__axe").await?;
        if !v.is_null() {
            break v;
        }
        anyhow::ensure!(Instant::now() < until, "axe-core did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    Ok(found
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| matches!(v["impact"].as_str(), Some("serious" | "critical")))
        .map(|v| {
            format!(
                "{} {}: {} at {}",
                v["impact"].as_str().unwrap_or(""),
                v["id"].as_str().unwrap_or(""),
                v["help"].as_str().unwrap_or(""),
                v["nodes"]
            )
        })
        .collect())
}

/// No serious or critical axe-core violation on the page shown (not checked where axe-core is
/// not installed, unless `COUNTERSIGN_REQUIRE_BROWSER=1`); `what` names the page in a failure.
pub async fn accessible(b: &Browser, what: &str) -> anyhow::Result<()> {
    let Some(src) = source() else {
        return Ok(());
    };
    let found = violations(b, &src).await?;
    anyhow::ensure!(found.is_empty(), "{what}: {found:?}");
    Ok(())
}
