//! The one harness of the tests that run the broker as a process (`audit_cli`, `audit_follow`,
//! `audit_restore`, `dev_port_zero`, `outbox_restart`): [`process`] starts the real
//! `countersign-broker` binary (a server from a [`Deployment`]'s configuration file, dev mode,
//! or a one-shot command), waits for it and stops it; [`client`] speaks to it over HTTP with real
//! keys; [`audit_db`] makes a database for the one-shot audit commands; and the passes of a
//! background loop are waited for from `/metrics` (`countersign_loop_passes_total`) instead of
//! sleeping a fixed time.
//!
//! Each test file uses a part of it.
#![allow(dead_code)]

pub mod audit_db;
pub mod client;
pub mod process;

use std::time::Duration;

use client::Client;

/// Passes of the broker's loop `name` (`broker.outbox`, `broker.audit`, …) ended so far.
pub async fn passes(base: &str, name: &str) -> anyhow::Result<u64> {
    counter(base, "countersign_loop_passes_total", name).await
}

/// The value of the counter `metric` of loop `name` on `/metrics`.
async fn counter(base: &str, metric: &str, name: &str) -> anyhow::Result<u64> {
    let (status, text) = Client::new(base, "")
        .send_text(reqwest::Method::GET, "/metrics", &[], None)
        .await?;
    anyhow::ensure!(status == 200, "/metrics: {status}");
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
