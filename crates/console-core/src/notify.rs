//! Telling people where to approve (issue 29): what waits for a person, what the notice says,
//! and how it is queued ([`Outbox::queue`], in the transaction
//! of whatever waits: an ask's own, or the broker's `record.pending` hook's). The console's
//! server sends (`console-http/src/notify.rs`); `console-sql` keeps the notice tables. How a
//! person wants to hear ([`Preferences`]), a notice and its store ([`NoticeTx`]) are the work
//! storage's ([`crate::work::notices`]), a layer below this one; they are named here too.
//!
//! A notice carries the page to open and what waits (the secret names, the machine, the
//! reason), never a value, and it cannot approve by itself: the page asks for the person's
//! sign-in (and, where policy asks, their passkey).

use countersign_common::storage::StorageError;
use serde::Deserialize;

use crate::clock::Entropy;
use crate::ids::Login;
use crate::work::WorkTx;
use crate::work::asks::{Ask, AskKind};

pub use crate::work::notices::{Channel, Notice, NoticeTx, Preferences};

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
    /// Who is not told: the person who made it (an ask they opened themselves).
    pub except: Option<Login>,
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
            except: None,
        })
    }

    /// What a new ask asks of the people who may answer it: the assignee of its issue (or of
    /// its document's issue), else (an unassigned issue, a document with no issue) anyone
    /// signed in, as the inbox's scope has it; never its author when a person opened it. The
    /// line is the question's first line, where it is, and the ask's page.
    pub fn of_ask(ask: &Ask, assignee: Option<Login>) -> Self {
        let first = ask.head.question.lines().next().unwrap_or_default();
        let of = ask
            .head
            .issue
            .as_ref()
            .map(|k| format!(" of {}", k.as_str()))
            .unwrap_or_default();
        let place = match (&ask.head.kind, &ask.head.artifact, &ask.head.issue) {
            (AskKind::Approval, _, _) => format!("Review a document{of}"),
            (_, Some(_), _) => format!("Answer an ask on a document{of}"),
            (_, None, Some(k)) => format!("Answer an ask on {}", k.as_str()),
            (_, None, None) => "Answer an ask".to_owned(),
        };
        Waiting {
            item: format!("ask:{}", ask.head.id),
            title: format!("{place}: “{}”", clean(first, 200)),
            path: format!("/asks/{}", ask.head.id),
            who: assignee,
            except: match &ask.author {
                crate::work::Actor::User { login } => Some(login.clone()),
                _ => None,
            },
        }
    }
}

/// What the console's server can send on, and how long a digest gathers: the notices'
/// outbox as `[notifications]` configures it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outbox {
    /// The channels configured (e-mail needs SMTP, the generic webhook its secret).
    pub channels: Vec<Channel>,
    /// A digest's period, in milliseconds.
    pub digest_ms: i64,
    /// Channels everyone who may act is told on, whether or not they chose any (dev mode's
    /// mailbox): a person with no preferences hears on these alone.
    pub always: Vec<Channel>,
}

impl Outbox {
    /// Queues `w` in `tx` for whoever may act on it and asked to hear (its person, or, when
    /// anyone signed in decides, everyone with preferences; never `w.except`), once per item,
    /// channel and person; with [`Outbox::always`] channels, everyone who may act hears on
    /// those too (anyone signed in: everyone who has signed in). Answers how many notices were
    /// new.
    pub async fn queue(
        &self,
        tx: &mut dyn WorkTx,
        w: &Waiting,
        now_ms: i64,
        entropy: &dyn Entropy,
    ) -> Result<usize, StorageError> {
        let everyone = !self.always.is_empty();
        let people: Vec<(Login, Preferences)> = match &w.who {
            Some(l) => match tx.notices().notify_prefs_of(l).await? {
                Some(p) => vec![(l.clone(), p)],
                None if everyone => vec![(l.clone(), Preferences::default())],
                None => Vec::new(),
            },
            None if everyone => tx
                .notices()
                .notify_everyone()
                .await?
                .into_iter()
                .map(|(l, p)| (l, p.unwrap_or_default()))
                .collect(),
            None => tx.notices().notify_people_all().await?,
        };
        let mut made = 0;
        for (login, prefs) in people {
            if w.except.as_ref() == Some(&login) {
                continue;
            }
            let mut channels = prefs.channels();
            for c in &self.always {
                if !channels.contains(c) {
                    channels.push(*c);
                }
            }
            for channel in channels {
                if !self.channels.contains(&channel) {
                    tracing::debug!(person = %login, channel = channel.as_str(), "no such channel configured");
                    continue;
                }
                let mut id = [0u8; 16];
                entropy.fill(&mut id);
                let n = Notice {
                    id: format!("ntc_{}", hex::encode(id)),
                    login: login.clone(),
                    channel,
                    item: w.item.clone(),
                    title: w.title.clone(),
                    path: w.path.clone(),
                    created_at: now_ms,
                    next_at: if prefs.digest {
                        now_ms + self.digest_ms
                    } else {
                        now_ms
                    },
                    attempts: 0,
                };
                if tx.notices().queue_notice(&n).await? {
                    made += 1;
                }
            }
        }
        Ok(made)
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
    fn a_new_ask_is_its_first_line_and_its_page_for_whoever_answers() {
        use crate::work::{Actor, IssueKey, ProjectKey};
        let project = ProjectKey::parse("ASK").expect("key");
        let issue = IssueKey::parse("ASK-1");
        let agent = Actor::Agent {
            owner: Login::parse("ada@example.com"),
            service: None,
            session: crate::ids::SessionId::parse("s1"),
        };
        // An ask id is a UUID: "0b6e…" stands for the one the assertions name.
        const ID: &str = "0b6e0000-0000-4000-8000-000000000000";
        let ask = Ask::opened(
            crate::ids::AskId::parse(ID).expect("an id"),
            AskKind::Question,
            (project.clone(), issue.clone(), None),
            "Refund <!channel> partial\ncaptures?\nMore detail".into(),
            Vec::new(),
            &agent,
            chrono::DateTime::UNIX_EPOCH,
        );
        let w = Waiting::of_ask(&ask, Login::parse("bob@example.com"));
        assert_eq!(w.item, format!("ask:{ID}"));
        assert_eq!(w.path, format!("/asks/{ID}"));
        assert_eq!(
            w.title,
            "Answer an ask on ASK-1: “Refund <!channel> partial”"
        );
        assert_eq!(w.who, Login::parse("bob@example.com"));
        assert_eq!(w.except, None, "an agent's ask: nobody left out");
        let by_ada = Ask {
            author: Actor::User {
                login: Login::parse("ada@example.com").expect("login"),
            },
            head: crate::work::asks::AskHead {
                kind: AskKind::Approval,
                artifact: crate::ids::ArtifactId::parse("d0c00000-0000-4000-8000-000000000000"),
                ..ask.head
            },
            ..ask
        };
        let w = Waiting::of_ask(&by_ada, None);
        assert!(
            w.title.starts_with("Review a document of ASK-1: "),
            "{}",
            w.title
        );
        assert_eq!(w.who, None, "unassigned: anyone signed in");
        assert_eq!(w.except, Login::parse("ada@example.com"));
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
