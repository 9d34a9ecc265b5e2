//! Expiry notifications (protocol.md §9): a background deliverer that takes due messages from
//! the durable outbox (the core queues one when a pending request expires) and POSTs each to the
//! configured URL as a [Standard Webhooks](https://www.standardwebhooks.com/) message.
//!
//! - Headers: `webhook-id` (the message id, the same on every retry: receivers deduplicate on
//!   it), `webhook-timestamp` (Unix seconds of this attempt, on the broker's clock) and
//!   `webhook-signature`: `v1,<base64 of HMAC-SHA256 over "<id>.<timestamp>.<body>">`.
//! - The secret ([`WebhookSecret`], `countersign_common::webhook`, which the console verifies
//!   with): a `whsec_`-prefixed base64 string is decoded and its bytes are the HMAC key (the
//!   Standard Webhooks convention); any other text is the key as it is. At least 24 bytes.
//! - A 2xx answer deletes the message; anything else (another status, a redirect, a refused
//!   connection, the timeout) reschedules it after an exponential backoff with jitter
//!   (`retry_initial_seconds` doubling up to `retry_max_seconds`, each delay drawn between half
//!   and all of that), until `max_attempts`, when it is logged and given up.
//! - Messages are claimed through [`Broker::claim_outbox`]: a lease, never a lock held across the
//!   POST; a broker killed mid-delivery leaves the message to be sent again after the lease.
//!   Delivery is at least once, across restarts and replicas.
//! - No `[notifications]` configured: due messages are dropped (counted, logged at debug), so the
//!   outbox does not grow without bound and a URL configured later does not receive a backlog
//!   of stale notices (docs/decisions.md).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use countersign_broker_core::Broker;
use countersign_broker_core::clock::{SystemEntropy, random};
use countersign_broker_core::storage::OutboxItem;
use zeroize::Zeroizing;

use crate::config::NotificationsConfig;

/// How many messages one pass claims and delivers concurrently.
pub const BATCH: u32 = 16;
/// How often the deliverer looks for due messages.
pub const POLL: Duration = Duration::from_secs(1);

pub use countersign_common::webhook::WebhookSecret;

/// Where and how notifications are delivered.
#[derive(Debug)]
pub struct Notifier {
    url: String,
    secret: WebhookSecret,
    client: reqwest::Client,
    timeout: Duration,
    retry_initial: chrono::Duration,
    retry_max: chrono::Duration,
    max_attempts: u32,
}

impl Notifier {
    /// From the `[notifications]` section, reading the secret file.
    pub fn new(c: &NotificationsConfig) -> anyhow::Result<Self> {
        if !(c.url.starts_with("https://") || c.url.starts_with("http://")) {
            bail!("[notifications] url must be an http:// or https:// URL");
        }
        let text =
            Zeroizing::new(std::fs::read_to_string(&c.secret_file).with_context(|| {
                format!("read webhook secret file {}", c.secret_file.display())
            })?);
        let secret = WebhookSecret::parse(&text)
            .with_context(|| format!("webhook secret file {}", c.secret_file.display()))?;
        let timeout = Duration::from_secs(c.timeout_seconds.max(1));
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("countersign-broker/", env!("CARGO_PKG_VERSION")))
            .build()
            .context("webhook HTTP client")?;
        let secs = |s: u64| chrono::Duration::seconds(i64::try_from(s).unwrap_or(i64::MAX / 1000));
        Ok(Self {
            url: c.url.clone(),
            secret,
            client,
            timeout,
            retry_initial: secs(c.retry_initial_seconds.max(1)),
            retry_max: secs(c.retry_max_seconds.max(c.retry_initial_seconds.max(1))),
            max_attempts: c.max_attempts.max(1),
        })
    }

    /// How long a claimed message is left alone: twice the delivery timeout and 5 s more, so
    /// that a delivery in flight always reports before another deliverer may take it.
    pub fn lease(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.timeout * 2).unwrap_or(chrono::Duration::seconds(20))
            + chrono::Duration::seconds(5)
    }

    /// The delay after the `attempts`-th failed attempt: `initial * 2^(attempts-1)`, at most
    /// the maximum, scaled by `0.5 + jitter / 2` (`jitter` in `[0, 1)`).
    pub fn backoff(&self, attempts: u32, jitter: f64) -> chrono::Duration {
        let initial = self.retry_initial.num_milliseconds().max(1);
        let max = self.retry_max.num_milliseconds().max(initial);
        let shift = attempts.saturating_sub(1).min(40);
        let base = initial.saturating_mul(1i64 << shift).min(max);
        let jitter = jitter.clamp(0.0, 1.0);
        chrono::Duration::milliseconds(base / 2 + ((base / 2) as f64 * jitter) as i64)
    }

    /// One POST of `item`; `Err` says why it failed (for the log).
    async fn post(&self, item: &OutboxItem, timestamp: i64) -> Result<(), String> {
        let body = item.payload.as_bytes().to_vec();
        let signature = self.secret.sign(&item.id, timestamp, &body);
        let resp = self
            .client
            .post(&self.url)
            .header("webhook-id", &item.id)
            .header("webhook-timestamp", timestamp.to_string())
            .header("webhook-signature", signature)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body)
            .send()
            .await
            .map_err(|e| e.without_url().to_string())?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(format!("HTTP {}", resp.status().as_u16()))
        }
    }
}

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Report {
    pub delivered: usize,
    pub failed: usize,
    pub dropped: usize,
}

fn jitter() -> f64 {
    let r = u64::from_le_bytes(random::<8>(&SystemEntropy));
    (r >> 11) as f64 / (1u64 << 53) as f64
}

/// One pass: claims due messages and delivers each (concurrently), or drops them when no
/// notifier is configured.
pub async fn deliver_due(
    broker: &Arc<Broker>,
    notifier: Option<&Arc<Notifier>>,
) -> Result<Report, countersign_broker_core::Error> {
    let mut report = Report::default();
    let Some(notifier) = notifier else {
        for item in broker
            .claim_outbox(
                OutboxItem::NOTIFICATION,
                BATCH * 4,
                chrono::Duration::minutes(1),
            )
            .await?
        {
            broker.outbox_done(&item.id).await?;
            tracing::debug!(id = %item.id, "no notification URL configured: notification dropped");
            metrics::counter!("countersign_notifications_total", "outcome" => "dropped")
                .increment(1);
            report.dropped += 1;
        }
        return Ok(report);
    };
    let items = broker
        .claim_outbox(OutboxItem::NOTIFICATION, BATCH, notifier.lease())
        .await?;
    let mut tasks = tokio::task::JoinSet::new();
    for item in items {
        let (broker, notifier) = (broker.clone(), notifier.clone());
        tasks.spawn(async move {
            let outcome = notifier.post(&item, broker.now().timestamp()).await;
            (item, outcome)
        });
    }
    while let Some(joined) = tasks.join_next().await {
        let Ok((item, outcome)) = joined else {
            continue; // a panicked delivery: its lease runs out and it is sent again
        };
        match outcome {
            Ok(()) => {
                broker.outbox_done(&item.id).await?;
                tracing::info!(id = %item.id, attempts = item.attempts, "notification delivered");
                metrics::counter!("countersign_notifications_total", "outcome" => "delivered")
                    .increment(1);
                report.delivered += 1;
            }
            Err(why) if item.attempts >= notifier.max_attempts => {
                broker.outbox_done(&item.id).await?;
                tracing::error!(id = %item.id, attempts = item.attempts, error = %why, "notification given up");
                metrics::counter!("countersign_notifications_total", "outcome" => "given_up")
                    .increment(1);
                report.dropped += 1;
            }
            Err(why) => {
                let at = broker.now() + notifier.backoff(item.attempts, jitter());
                broker.outbox_retry(&item.id, item.attempts, at).await?;
                tracing::warn!(id = %item.id, attempts = item.attempts, error = %why, retry_at = %at, "notification delivery failed");
                metrics::counter!("countersign_notifications_total", "outcome" => "failed")
                    .increment(1);
                report.failed += 1;
            }
        }
    }
    Ok(report)
}

/// The deliverer: a pass on each of `ticks` (every [`POLL`]), for as long as the server runs.
pub async fn run(
    broker: Arc<Broker>,
    notifier: Option<Arc<Notifier>>,
    mut ticks: countersign_common::tick::Ticks,
) {
    loop {
        let _pass = ticks.next().await;
        if let Err(e) = deliver_due(&broker, notifier.as_ref()).await {
            tracing::warn!(code = %e.code, error = e.message(), "notification pass failed");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_maximum_with_jitter() -> anyhow::Result<()> {
        let dir = std::env::temp_dir().join(format!("cs-notify-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let secret = dir.join("secret");
        std::fs::write(&secret, "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw")?;
        let n = Notifier::new(&NotificationsConfig {
            url: "http://127.0.0.1:9/hook".into(),
            secret_file: secret,
            timeout_seconds: 10,
            retry_initial_seconds: 5,
            retry_max_seconds: 60,
            max_attempts: 100,
        })?;
        let ms = |a, j| n.backoff(a, j).num_milliseconds();
        assert_eq!((ms(1, 0.0), ms(1, 1.0)), (2_500, 5_000));
        assert_eq!((ms(2, 0.0), ms(2, 1.0)), (5_000, 10_000));
        assert_eq!((ms(4, 0.0), ms(4, 1.0)), (20_000, 40_000));
        assert_eq!((ms(5, 0.0), ms(5, 1.0)), (30_000, 60_000), "capped");
        assert_eq!(ms(u32::MAX, 0.5), 45_000);
        assert_eq!(n.lease().num_seconds(), 25);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }
}
