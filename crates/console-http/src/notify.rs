//! Telling people where to approve (issue 29, docs/passkeys.md "Notifications"): what waits for
//! a person (a broker record they may decide, as the broker's `record.pending` webhook says; an
//! ask they may answer) is queued once per item, channel and person in the console's database
//! (by the core, `Console::notify_waiting` and the asks' transactions), then sent by a loop: an
//! e-mail over SMTP (`lettre`), a Slack-compatible incoming-webhook body, or a generic webhook
//! signed as Standard Webhooks, each with the approval page's link and never a value.
//!
//! - **Durable**: queued in the database before the broker's webhook is answered (the broker
//!   retries until it is), or in the transaction that opens an ask; sent from the database; a
//!   restart between the two loses nothing.
//! - **Once**: a notice is claimed (a lease moves its `next_at`, and only one claimer's update
//!   matches), sent, then marked sent; a restart after the send finds it sent. A crash between
//!   the send and the mark sends it again after the lease: at least once, like SMTP itself.
//! - **Retries**: a failed send is due again after 5 s doubling to an hour, given up after
//!   `max_attempts` (logged).
//! - **Digest**: a person who asks for one gets their notices of a channel gathered, at most one
//!   message per channel every `digest_seconds`.
//! - **Dev mode's mailbox** (issue 48): `countersign-console dev` adds a channel everyone who may
//!   act hears on, preferences or none: each message, as the e-mail and the webhooks would carry
//!   it with its links, is kept in a file of the dev state ([`Mailbox`]) and shown on the
//!   console's `/notifications/mailbox`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use countersign_common::tick::Ticks;
use countersign_console_core::notify::{Channel, Message, Outbox, Preferences, message};
use countersign_console_core::{Clock, Login, StorageError};
use countersign_console_sql::{Notice, SqlStorage};
use lettre::message::Mailbox as Address;
use lettre::message::header::ContentType;
use lettre::{AsyncSmtpTransport, AsyncTransport, Tokio1Executor};
use serde::{Deserialize, Serialize};
use serde_json::json;
use zeroize::Zeroizing;

/// How often the sender looks for notices that are due.
pub const EVERY: Duration = Duration::from_secs(1);

/// `[notifications]` of the console's configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationsConfig {
    /// The SMTP server: `smtp://host:port` (plain, a local relay), `smtp://host:587?tls=required`
    /// (STARTTLS), `smtps://host` (TLS); a user in the URL's user part. None: no e-mail.
    #[serde(default)]
    pub smtp_url: Option<String>,
    /// The SMTP password, read from this file (never in the URL).
    #[serde(default)]
    pub smtp_password_file: Option<PathBuf>,
    /// The sender, `Countersign <countersign@example.com>`.
    #[serde(default)]
    pub from: Option<String>,
    /// Signs the generic webhook's notices (Standard Webhooks: `whsec_<base64>` or text, at
    /// least 24 bytes). None: no generic webhook.
    #[serde(default)]
    pub webhook_secret_file: Option<PathBuf>,
    /// A digest's period, in seconds.
    #[serde(default = "default_digest")]
    pub digest_seconds: i64,
    /// Timeout of one send.
    #[serde(default = "default_timeout")]
    pub timeout_seconds: u64,
    /// Attempts before a notice is given up.
    #[serde(default = "default_attempts")]
    pub max_attempts: i64,
    /// Dev mode's mailbox: every notice, as e-mail and webhooks would carry it, kept in this
    /// file and shown on `/notifications/mailbox` ([`Mailbox`]). Never read from a file: only
    /// `countersign-console dev` turns it on.
    #[serde(skip)]
    pub mailbox: Option<PathBuf>,
}

impl Default for NotificationsConfig {
    /// No channel but Slack's (each person's own URL), the defaults' digest, timeout and
    /// attempts.
    fn default() -> Self {
        Self {
            smtp_url: None,
            smtp_password_file: None,
            from: None,
            webhook_secret_file: None,
            digest_seconds: default_digest(),
            timeout_seconds: default_timeout(),
            max_attempts: default_attempts(),
            mailbox: None,
        }
    }
}

fn default_digest() -> i64 {
    30 * 60
}
fn default_timeout() -> u64 {
    10
}
fn default_attempts() -> i64 {
    20
}

/// Every channel, in the order the outbox lists them.
const CHANNELS: [Channel; 4] = [
    Channel::Email,
    Channel::Slack,
    Channel::Webhook,
    Channel::Mailbox,
];

/// How many notices one round claims.
const BATCH: u32 = 32;
/// How long a claim holds a notice.
const LEASE_MS: i64 = 60_000;

/// The sender of notices.
pub struct Notifier {
    storage: SqlStorage,
    console_url: String,
    mail: Option<(AsyncSmtpTransport<Tokio1Executor>, Address)>,
    /// The sender a kept e-mail names (the configured one, else dev mode's own).
    from: String,
    mailbox: Option<Mailbox>,
    http: reqwest::Client,
    secret: Option<countersign_common::webhook::WebhookSecret>,
    digest_ms: i64,
    max_attempts: i64,
    clock: Arc<dyn Clock>,
}

impl std::fmt::Debug for Notifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Notifier")
            .field("console_url", &self.console_url)
            .field("mail", &self.mail.is_some())
            .field("webhook", &self.secret.is_some())
            .field("mailbox", &self.mailbox.is_some())
            .finish_non_exhaustive()
    }
}

impl Notifier {
    pub fn new(
        c: &NotificationsConfig,
        storage: SqlStorage,
        console_url: &str,
        clock: Arc<dyn Clock>,
    ) -> anyhow::Result<Self> {
        let mail = match &c.smtp_url {
            None => None,
            Some(url) => {
                let mut b = AsyncSmtpTransport::<Tokio1Executor>::from_url(url)
                    .context("[notifications] smtp_url")?
                    .timeout(Some(Duration::from_secs(c.timeout_seconds)));
                if let Some(p) = &c.smtp_password_file {
                    let password = Zeroizing::new(
                        std::fs::read_to_string(p)
                            .with_context(|| format!("read {}", p.display()))?,
                    );
                    let user = url::Url::parse(url)
                        .ok()
                        .map(|u| u.username().to_owned())
                        .unwrap_or_default();
                    b = b.credentials(lettre::transport::smtp::authentication::Credentials::new(
                        user,
                        password.trim().to_owned(),
                    ));
                }
                let from: Address = c
                    .from
                    .as_deref()
                    .context("[notifications] from is required with smtp_url")?
                    .parse()
                    .context("[notifications] from")?;
                Some((b.build(), from))
            }
        };
        let secret = match &c.webhook_secret_file {
            None => None,
            Some(p) => {
                let text = Zeroizing::new(
                    std::fs::read_to_string(p).with_context(|| format!("read {}", p.display()))?,
                );
                Some(
                    countersign_common::webhook::WebhookSecret::parse(text.trim())
                        .map_err(|e| anyhow::anyhow!("[notifications] webhook_secret_file: {e}"))?,
                )
            }
        };
        Ok(Self {
            storage,
            console_url: console_url.trim_end_matches('/').to_owned(),
            from: c
                .from
                .clone()
                .unwrap_or_else(|| "Countersign (dev mode) <countersign@localhost>".to_owned()),
            mail,
            mailbox: c.mailbox.as_ref().map(|p| Mailbox::new(p.clone())),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(c.timeout_seconds))
                .redirect(reqwest::redirect::Policy::none())
                .build()?,
            secret,
            digest_ms: c.digest_seconds.max(1) * 1000,
            max_attempts: c.max_attempts.max(1),
            clock,
        })
    }

    fn now_ms(&self) -> i64 {
        self.clock.now().timestamp_millis()
    }

    /// Whether this console can send on `channel`.
    fn can(&self, channel: Channel) -> bool {
        match channel {
            Channel::Email => self.mail.is_some(),
            Channel::Slack => true,
            Channel::Webhook => self.secret.is_some(),
            Channel::Mailbox => self.mailbox.is_some(),
        }
    }

    /// Dev mode's mailbox, where it is on.
    pub fn mailbox(&self) -> Option<&Mailbox> {
        self.mailbox.as_ref()
    }

    /// A person's preferences (none set: all off).
    pub async fn prefs(&self, login: &Login) -> Result<Preferences, StorageError> {
        Ok(self.storage.notify_prefs(login).await?.unwrap_or_default())
    }

    /// Sets a person's preferences, refusing a channel this console cannot send on.
    pub async fn set_prefs(
        &self,
        login: &Login,
        p: &Preferences,
    ) -> Result<(), countersign_console_core::Error> {
        use countersign_console_core::{Error, ErrorCode};
        p.check()?;
        if let Some(c) = p.channels().into_iter().find(|c| !self.can(*c)) {
            return Err(Error::with_message(
                ErrorCode::INVALID_BODY,
                match c {
                    Channel::Email => {
                        "this console sends no e-mail: [notifications] has no smtp_url"
                    }
                    _ => {
                        "this console signs no webhook: [notifications] has no webhook_secret_file"
                    }
                },
            ));
        }
        self.storage.put_notify_prefs(login, p).await?;
        Ok(())
    }

    /// What the console's core queues: the channels this console can send on, and the
    /// digest's period ([`countersign_console_core::Console::set_outbox`]).
    pub fn outbox(&self) -> Outbox {
        Outbox {
            channels: CHANNELS.into_iter().filter(|c| self.can(*c)).collect(),
            digest_ms: self.digest_ms,
            always: self
                .mailbox
                .is_some()
                .then_some(Channel::Mailbox)
                .into_iter()
                .collect(),
        }
    }

    /// The channels a person may choose on this console (`email`, `slack`, `webhook`; dev
    /// mode's mailbox is not a choice: everyone hears on it).
    pub fn available(&self) -> Vec<&'static str> {
        CHANNELS
            .into_iter()
            .filter(|c| *c != Channel::Mailbox && self.can(*c))
            .map(Channel::as_str)
            .collect()
    }

    /// One round: claims what is due, sends each person's notices of a channel as one message,
    /// marks them sent or due again. Answers how many notices were sent.
    pub async fn round(&self) -> Result<usize, StorageError> {
        let now = self.now_ms();
        let lease = now + LEASE_MS;
        let claimed = self.storage.claim_notices(now, lease, BATCH).await?;
        let mut groups: std::collections::BTreeMap<(String, Channel), Vec<Notice>> =
            Default::default();
        for n in claimed {
            groups
                .entry((n.login.as_str().to_owned(), n.channel))
                .or_default()
                .push(n);
        }
        let mut sent = 0;
        for ((_, channel), mut notices) in groups {
            let login = notices[0].login.clone();
            // A digest gathers the person's other notices of the channel, due or not.
            let more: Vec<Notice> = self
                .storage
                .claim_notices_of(&login, channel, lease)
                .await?
                .into_iter()
                .filter(|n| !notices.iter().any(|m| m.id == n.id))
                .collect();
            notices.extend(more);
            let items: Vec<(String, String)> = notices
                .iter()
                .map(|n| (n.title.clone(), n.path.clone()))
                .collect();
            let m = message(&self.console_url, &items);
            let ids: Vec<String> = notices.iter().map(|n| n.id.clone()).collect();
            match self.send(&login, channel, &m, &ids[0]).await {
                Ok(()) => {
                    self.storage.notices_sent(&ids, self.now_ms()).await?;
                    metrics::counter!("countersign_notifications_sent_total", "channel" => channel.as_str())
                        .increment(ids.len() as u64);
                    tracing::info!(person = %login, channel = channel.as_str(), notices = ids.len(), "notification sent");
                    sent += ids.len();
                }
                Err(e) => {
                    metrics::counter!("countersign_notifications_failed_total", "channel" => channel.as_str())
                        .increment(1);
                    for n in &notices {
                        let attempts = n.attempts + 1;
                        if attempts >= self.max_attempts {
                            tracing::warn!(person = %login, channel = channel.as_str(), notice = %n.id, error = %e, "notification given up");
                            self.storage.notice_given_up(&n.id, self.now_ms()).await?;
                        } else {
                            let delay = (5_000i64 << attempts.min(20)).min(3_600_000);
                            tracing::warn!(person = %login, channel = channel.as_str(), notice = %n.id, attempts, error = %e, "notification failed; retrying");
                            self.storage
                                .notice_retry(&n.id, attempts, self.now_ms() + delay)
                                .await?;
                        }
                    }
                }
            }
        }
        Ok(sent)
    }

    async fn send(
        &self,
        login: &Login,
        channel: Channel,
        m: &Message,
        id: &str,
    ) -> anyhow::Result<()> {
        match channel {
            Channel::Email => {
                let (transport, from) = self.mail.as_ref().context("no SMTP configured")?;
                let to: Address = login.as_str().parse().context("the login as an address")?;
                let mail = lettre::Message::builder()
                    .from(from.clone())
                    .to(to)
                    .subject(m.subject.clone())
                    .header(ContentType::TEXT_PLAIN)
                    .body(m.text.clone())?;
                transport.send(mail).await?;
                Ok(())
            }
            Channel::Slack => {
                let prefs = self.storage.notify_prefs(login).await?;
                let url = prefs
                    .and_then(|p| p.slack_url)
                    .context("no Slack URL any more")?;
                deliver(self.http.post(url).json(&slack_body(m))).await
            }
            Channel::Webhook => {
                let secret = self.secret.as_ref().context("no webhook secret")?;
                let prefs = self.storage.notify_prefs(login).await?;
                let url = prefs
                    .and_then(|p| p.webhook_url)
                    .context("no webhook URL any more")?;
                let body = serde_json::to_vec(&webhook_body(login, m))?;
                let ts = self.clock.now().timestamp();
                deliver(
                    self.http
                        .post(url)
                        .header("content-type", "application/json")
                        .header("webhook-id", id)
                        .header("webhook-timestamp", ts.to_string())
                        .header("webhook-signature", secret.sign(id, ts, &body))
                        .body(body),
                )
                .await
            }
            Channel::Mailbox => {
                let mailbox = self.mailbox.as_ref().context("no mailbox")?;
                let kept = Kept {
                    id: id.to_owned(),
                    at: self.now_ms(),
                    person: login.as_str().to_owned(),
                    subject: m.subject.clone(),
                    items: m.items.clone(),
                    email: format!(
                        "From: {}\nTo: {}\nSubject: {}\n\n{}",
                        self.from,
                        login.as_str(),
                        m.subject,
                        m.text
                    ),
                    webhook: serde_json::to_string_pretty(&webhook_body(login, m))?,
                    slack: serde_json::to_string_pretty(&slack_body(m))?,
                };
                mailbox.keep(&kept).await
            }
        }
    }

    /// Sends on each of `ticks` ([`EVERY`]) until the task is dropped.
    pub fn spawn(self: Arc<Self>, mut ticks: Ticks) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            loop {
                let _pass = ticks.next().await;
                if let Err(e) = self.round().await {
                    tracing::warn!(error = %e, "notifications: a round failed");
                }
            }
        })
    }
}

/// Sends a webhook's request; a 2xx is delivered. The URL is the person's secret (a Slack
/// webhook's is its token): it is never in the error, so never in a log line.
async fn deliver(req: reqwest::RequestBuilder) -> anyhow::Result<()> {
    let r = req.send().await.map_err(reqwest::Error::without_url)?;
    anyhow::ensure!(
        r.status().is_success(),
        "the webhook answered {}",
        r.status()
    );
    Ok(())
}

/// The generic webhook's body (signed as Standard Webhooks when sent).
fn webhook_body(login: &Login, m: &Message) -> serde_json::Value {
    json!({
        "type": "countersign.waiting",
        "person": login.as_str(),
        "items": m.items.iter().map(|(t, u)| json!({ "title": t, "url": u })).collect::<Vec<_>>(),
    })
}

/// A Slack-compatible incoming webhook's body: the subject, then each item as a link.
fn slack_body(m: &Message) -> serde_json::Value {
    let mut text = format!("*{}*\n", slack_escape(&m.subject));
    for (t, u) in &m.items {
        text.push_str(&format!("• <{u}|{}>\n", slack_escape(t)));
    }
    json!({ "text": text })
}

/// How many messages dev mode's mailbox keeps (the newest).
pub const MAILBOX_KEPT: usize = 200;

/// One message of dev mode's mailbox: what each channel would carry for a person's notices.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Kept {
    /// The (first) notice's id.
    pub id: String,
    /// When it was kept, Unix milliseconds.
    pub at: i64,
    pub person: String,
    pub subject: String,
    /// `(title, url)` of each item: the console's page for it.
    pub items: Vec<(String, String)>,
    /// The e-mail, its headers and its text.
    pub email: String,
    /// The generic webhook's JSON body.
    pub webhook: String,
    /// The Slack-compatible webhook's JSON body.
    pub slack: String,
}

/// Dev mode's mailbox (issue 48): the notices nobody configured a channel for are still seen.
/// Each message is a JSON line in a file of the dev state (so a restart keeps them), the
/// newest [`MAILBOX_KEPT`] kept; the Notifications page links to it.
#[derive(Debug)]
pub struct Mailbox {
    path: PathBuf,
    lock: tokio::sync::Mutex<()>,
}

impl Mailbox {
    pub fn new(path: PathBuf) -> Self {
        Self {
            path,
            lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Every message kept, oldest first (lines that do not parse are skipped).
    async fn all(&self) -> anyhow::Result<Vec<Kept>> {
        match tokio::fs::read_to_string(&self.path).await {
            Ok(text) => Ok(text
                .lines()
                .filter_map(|l| serde_json::from_str(l).ok())
                .collect()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            Err(e) => Err(e).with_context(|| format!("read {}", self.path.display())),
        }
    }

    /// Keeps `m`, dropping the oldest beyond [`MAILBOX_KEPT`].
    pub async fn keep(&self, m: &Kept) -> anyhow::Result<()> {
        let _held = self.lock.lock().await;
        let mut all = self.all().await?;
        all.push(m.clone());
        let from = all.len().saturating_sub(MAILBOX_KEPT);
        let mut text = String::new();
        for k in &all[from..] {
            text.push_str(&serde_json::to_string(k)?);
            text.push('\n');
        }
        let tmp = self.path.with_extension("tmp");
        tokio::fs::write(&tmp, text)
            .await
            .with_context(|| format!("write {}", tmp.display()))?;
        tokio::fs::rename(&tmp, &self.path)
            .await
            .with_context(|| format!("write {}", self.path.display()))?;
        Ok(())
    }

    /// What `login` was sent, newest first.
    pub async fn of(&self, login: &Login) -> anyhow::Result<Vec<Kept>> {
        let mut mine: Vec<Kept> = self
            .all()
            .await?
            .into_iter()
            .filter(|k| k.person == login.as_str())
            .collect();
        mine.reverse();
        Ok(mine)
    }
}

/// Slack's mrkdwn escapes: `&`, `<`, `>`.
fn slack_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
