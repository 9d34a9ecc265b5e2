//! The notices' records and storage (issue 29): how a person wants to hear that something
//! waits for them ([`Preferences`], each [`Channel`]), a notice queued ([`Notice`]) and the
//! store a work transaction hands out for them ([`NoticeTx`]). What waits, what a notice says
//! and how it is queued are the console's `notify` module's, which builds on these.

use async_trait::async_trait;
use countersign_common::storage::StorageError;
use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode};
use crate::ids::Login;

/// How a person wants to hear that something waits for them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preferences {
    /// An e-mail to their login's address.
    #[serde(default)]
    pub email: bool,
    /// A Slack-compatible incoming webhook (`{"text": …}`).
    #[serde(default)]
    pub slack_url: Option<String>,
    /// A generic webhook, signed as Standard Webhooks with the console's notification secret.
    #[serde(default)]
    pub webhook_url: Option<String>,
    /// One digest per channel every digest period instead of one notice per item.
    #[serde(default)]
    pub digest: bool,
}

/// Where a notice goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    Email,
    Slack,
    Webhook,
    /// Dev mode's mailbox: what e-mail and webhooks would carry, kept by the console and shown
    /// on its page. Not a preference: everyone who may act hears on it where it is on (the
    /// outbox's `always` channels).
    Mailbox,
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Slack => "slack",
            Channel::Webhook => "webhook",
            Channel::Mailbox => "mailbox",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "email" => Some(Channel::Email),
            "slack" => Some(Channel::Slack),
            "webhook" => Some(Channel::Webhook),
            "mailbox" => Some(Channel::Mailbox),
            _ => None,
        }
    }
}

fn check_url(field: &str, url: &Option<String>) -> Result<(), Error> {
    let Some(u) = url else { return Ok(()) };
    let rest = u
        .strip_prefix("https://")
        .or_else(|| u.strip_prefix("http://"));
    let ok = rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/'))
        && u.len() <= 2048
        && !u.chars().any(|c| c.is_control() || c.is_whitespace());
    if ok {
        Ok(())
    } else {
        Err(Error::with_message(
            ErrorCode::INVALID_BODY,
            format!("{field} must be an http:// or https:// URL of at most 2048 characters"),
        ))
    }
}

impl Preferences {
    /// Refuses a URL that is not http(s) (or too long, or with whitespace).
    pub fn check(&self) -> Result<(), Error> {
        check_url("slack_url", &self.slack_url)?;
        check_url("webhook_url", &self.webhook_url)
    }

    /// The channels these preferences name.
    pub fn channels(&self) -> Vec<Channel> {
        let mut out = Vec::new();
        if self.email {
            out.push(Channel::Email);
        }
        if self.slack_url.is_some() {
            out.push(Channel::Slack);
        }
        if self.webhook_url.is_some() {
            out.push(Channel::Webhook);
        }
        out
    }
}

/// A notice waiting to be sent (or sent): one item for one person on one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub id: String,
    pub login: Login,
    pub channel: Channel,
    pub item: String,
    pub title: String,
    pub path: String,
    /// Unix milliseconds.
    pub created_at: i64,
    pub next_at: i64,
    pub attempts: i64,
}

/// The notices' storage, inside a work transaction ([`WorkTx`](super::WorkTx)): a notice is
/// queued in the transaction that makes what waits, so both commit or neither does.
#[async_trait]
pub trait NoticeTx: Send {
    /// A person's preferences, if they set any.
    async fn notify_prefs_of(&mut self, login: &Login)
    -> Result<Option<Preferences>, StorageError>;
    /// Everyone with preferences, by login.
    async fn notify_people_all(&mut self) -> Result<Vec<(Login, Preferences)>, StorageError>;
    /// Everyone who has signed in, with their preferences where they set any (what a notice
    /// for anyone signed in reaches when the outbox has `always` channels).
    async fn notify_everyone(&mut self) -> Result<Vec<(Login, Option<Preferences>)>, StorageError>;
    /// Queues a notice; `false` when one for the same item, channel and person is already
    /// queued or sent.
    async fn queue_notice(&mut self, n: &Notice) -> Result<bool, StorageError>;
}
