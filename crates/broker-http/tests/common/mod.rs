//! What the broker-process tests share: waiting for the passes of a background loop, read from
//! `/metrics` (`countersign_loop_passes_total`), instead of sleeping a fixed time.

use std::time::Duration;

/// Passes of the broker's loop `name` (`broker.outbox`, `broker.audit`, …) ended so far.
pub async fn passes(base: &str, name: &str) -> anyhow::Result<u64> {
    counter(base, "countersign_loop_passes_total", name).await
}

/// The value of the counter `metric` of loop `name` on `/metrics`.
async fn counter(base: &str, metric: &str, name: &str) -> anyhow::Result<u64> {
    // A fresh client: no pooled connection outlives the call (SIGTERM's graceful shutdown is
    // not kept waiting).
    let http = reqwest::Client::builder().no_proxy().build()?;
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await?
        .error_for_status()?
        .text()
        .await?;
    let series = format!("{metric}{{loop=\"{name}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&series))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
        .ok_or_else(|| anyhow::anyhow!("no {series}in /metrics"))
}

/// Waits (up to 20 s) until a whole pass of loop `name` that began after this call has ended:
/// the passes run one after another, so once more have ended than had started now, the first
/// to start after now has ended too.
pub async fn whole_pass(base: &str, name: &str) -> anyhow::Result<()> {
    let started = counter(base, "countersign_loop_passes_started_total", name).await?;
    for _ in 0..400 {
        if passes(base, name).await? > started {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("no whole pass of {name} within 20 s")
}
