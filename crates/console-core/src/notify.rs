//! Telling people where to approve (issue 29): what waits for a person, how they want to hear
//! of it, and what the notice says. Pure: the console's server keeps the outbox and sends
//! (`console-http/src/notify.rs`, `console-sql`'s notice tables).
//!
//! A notice carries the page to open and what waits (the secret names, the machine, the
//! reason), never a value, and it cannot approve by itself: the page asks for the person's
//! sign-in (and, where policy asks, their passkey).

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
}

impl Channel {
    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Email => "email",
            Channel::Slack => "slack",
            Channel::Webhook => "webhook",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "email" => Some(Channel::Email),
            "slack" => Some(Channel::Slack),
            "webhook" => Some(Channel::Webhook),
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

/// Something that waits for a person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    /// What it is, once per item: `record:<id>`, `ask:<id>`. One notice per item per channel
    /// per person, whatever repeats.
    pub item: String,
    /// One line: what waits, in words (names and reasons, never a value).
    pub title: String,
    /// The console page to open (`/requests/<record id>`).
    pub path: String,
    /// Who may act: a person, or anyone signed in (`None`).
    pub who: Option<Login>,
}

/// The broker's `record.pending` notification: a record waiting for its approver.
#[derive(Debug, Clone, Deserialize)]
pub struct RecordPending {
    pub record_id: String,
    /// `agent_secret` or `launcher_credential`.
    pub kind: String,
    /// A login, or `anyone`.
    pub approver: String,
    #[serde(default)]
    pub identifiers: Vec<String>,
    #[serde(default)]
    pub reason: String,
    /// The machine or session it is for.
    #[serde(default)]
    pub host: Option<String>,
    /// Whether policy asks for the approver's passkey.
    #[serde(default)]
    pub passkey: bool,
}

/// A text for a person to read: no control characters but newlines, at most `max` characters.
fn clean(s: &str, max: usize) -> String {
    let t: String = s
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    let mut t = t.trim().to_owned();
    if t.chars().count() > max {
        t = t.chars().take(max).collect::<String>() + "…";
    }
    t
}

impl Waiting {
    /// What a broker record waiting for approval asks of a person. `None` when the record id
    /// is not one (the page path is built from it).
    pub fn of_record(r: &RecordPending) -> Option<Self> {
        let id_ok = !r.record_id.is_empty()
            && r.record_id.len() <= 128
            && r.record_id.chars().all(|c| c.is_ascii_alphanumeric());
        if !id_ok {
            return None;
        }
        let how = if r.passkey {
            " (with your passkey)"
        } else {
            ""
        };
        let title = if r.kind == "launcher_credential" {
            format!(
                "Approve{how} a machine login for {}",
                clean(r.host.as_deref().unwrap_or("a machine"), 200)
            )
        } else {
            let names = clean(&r.identifiers.join(", "), 300);
            let on = r
                .host
                .as_deref()
                .map(|h| format!(" on {}", clean(h, 200)))
                .unwrap_or_default();
            format!(
                "Approve{how} {names} for a session{on}: “{}”",
                clean(&r.reason, 300)
            )
        };
        Some(Waiting {
            item: format!("record:{}", r.record_id),
            title,
            path: format!("/requests/{}", r.record_id),
            who: Login::parse(&r.approver),
        })
    }
}

/// A message for one person on one channel: one item, or a digest of several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    pub subject: String,
    /// Plain text, each item a line with its page's URL.
    pub text: String,
    /// `(title, url)` of each item.
    pub items: Vec<(String, String)>,
}

/// The message of `items` (`(title, path)`) for a console at `console_url`.
pub fn message(console_url: &str, items: &[(String, String)]) -> Message {
    let base = console_url.trim_end_matches('/');
    let items: Vec<(String, String)> = items
        .iter()
        .map(|(t, p)| (t.clone(), format!("{base}{p}")))
        .collect();
    let subject = match items.as_slice() {
        [(t, _)] => format!("Countersign: {t}"),
        many => format!("Countersign: {} things wait for you", many.len()),
    };
    let mut text = String::new();
    for (t, u) in &items {
        text.push_str(&format!("{t}\n{u}\n\n"));
    }
    text.push_str(
        "Open the page to decide: this message cannot approve anything, and carries no secret.\n",
    );
    Message {
        subject,
        text,
        items,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiting_record_is_a_line_and_a_page_and_never_more() {
        let r = RecordPending {
            record_id: "ab12".into(),
            kind: "agent_secret".into(),
            approver: "ada@example.com".into(),
            identifiers: vec!["DB_PASSWORD".into()],
            reason: "migrate\u{7}\nthe table".into(),
            host: Some("laptop-7".into()),
            passkey: true,
        };
        let w = Waiting::of_record(&r).expect("waiting");
        assert_eq!(w.item, "record:ab12");
        assert_eq!(w.path, "/requests/ab12");
        assert_eq!(
            w.title,
            "Approve (with your passkey) DB_PASSWORD for a session on laptop-7: “migrate  the table”"
        );
        assert_eq!(w.who, Login::parse("ada@example.com"));
        let anyone = RecordPending {
            approver: "anyone".into(),
            ..r.clone()
        };
        assert_eq!(Waiting::of_record(&anyone).expect("w").who, None);
        let bad = RecordPending {
            record_id: "../x".into(),
            ..r
        };
        assert_eq!(Waiting::of_record(&bad), None);
        let m = message("https://c.example/", &[(w.title.clone(), w.path.clone())]);
        assert!(m.subject.starts_with("Countersign: Approve"));
        assert!(m.text.contains("https://c.example/requests/ab12"));
        let two = message(
            "https://c.example",
            &[("a".into(), "/x".into()), ("b".into(), "/y".into())],
        );
        assert_eq!(two.subject, "Countersign: 2 things wait for you");
    }

    #[test]
    fn preferences_refuse_urls_that_are_not_http() {
        let p = |u: &str| Preferences {
            slack_url: Some(u.into()),
            ..Default::default()
        };
        assert!(p("https://hooks.slack.com/services/x").check().is_ok());
        assert!(p("javascript:alert(1)").check().is_err());
        assert!(p("https://a b").check().is_err());
        assert_eq!(
            Preferences {
                email: true,
                webhook_url: Some("https://x".into()),
                ..Default::default()
            }
            .channels(),
            vec![Channel::Email, Channel::Webhook]
        );
    }
}
