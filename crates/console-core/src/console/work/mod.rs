//! The console's work area: projects and issues, their labels, ranks, claims, read states
//! and subscribers (protocol §6.1, §6.2), as one service, [`Issues`], reached as
//! [`Console::issues`]. Each write runs in one transaction (`transact!`, reaching the stores
//! `tx.projects()`, `tx.issues()`, `tx.events()`), retried on a storage conflict, and appends
//! its event in that transaction; after the commit the unit of work wakes the event streams.
//!
//! - this module: the inputs and their checks, the helpers other areas share
//!   ([`console_ref`], `invalid`, `not_found`, the person an assignee names), and the event
//!   log every area appends to (`Console::append`; the unit of work, `console/unit.rs`,
//!   publishes what commits);
//! - [`projects`]: projects; [`issues`]: an issue created, imported, read and listed;
//!   [`update`]: an issue's fields edited; [`claims`]: claims and releases;
//!   [`follow`]: an issue's log, read states and subscribers; [`advice`]: the similar issues
//!   a new one is told of; [`ranks`]: the ranks that order a project's issues;
//!   [`search`]: the console's full-text search over every area.

mod advice;
mod claims;
mod follow;
mod issues;
mod projects;
mod ranks;
mod search;
mod update;

pub use advice::Suggestion;
pub(in crate::console) use advice::WordCounts;
pub use ranks::{rank_between, rank_of_number};

use serde::Deserialize;
use serde_json::{Value, json};

use super::*;
use crate::work::rules;
use crate::work::{
    Actor, Components, ComponentsMode, Event, EventFacts, IssueKey, NewEvent, ProjectKey,
    SearchKind, Status, WorkTx,
};

/// The work area's operations (`console.issues()`): a view of the console.
#[derive(Debug, Clone, Copy)]
pub struct Issues<'c> {
    console: &'c Console,
}

/// A console ref (protocol §5): `countersign://issue/KEY`, ….
pub fn console_ref(kind: SearchKind, id: &str) -> String {
    let k = match kind {
        SearchKind::Issue => "issue",
        SearchKind::Document => "artifact",
        SearchKind::Ask => "ask",
        SearchKind::Comment => "comment",
        SearchKind::Message => "message",
        SearchKind::Request => "request",
    };
    format!("countersign://{k}/{id}")
}

/// Caps of protocol §2.
const TITLE_MAX: usize = 1000;
const LABEL_MAX: usize = 64;
const LABELS_MAX: usize = 50;

/// `Some(x)` for a present field, `Some(None)` for `null` (PATCH: absent = unchanged, `null`
/// clears).
fn present<'de, T: Deserialize<'de>, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Option<Option<T>>, D::Error> {
    Option::<T>::deserialize(d).map(Some)
}

/// Where an issue goes among its project's issues.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub enum RankAt {
    Before(String),
    After(String),
}

/// A new native issue (protocol §6.1).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewIssue {
    /// An issue to import: `owner/repo#n` (its title comes from the code host).
    #[serde(rename = "ref")]
    pub reference: Option<String>,
    pub project: Option<String>,
    pub title: Option<String>,
    pub status: Option<Status>,
    pub priority: Option<u8>,
    #[serde(default)]
    pub labels: Vec<String>,
    pub route: Option<String>,
    pub parent: Option<String>,
    pub rank: Option<RankAt>,
    pub assignee: Option<String>,
    pub components: Option<Components>,
    /// The session a bearer acts for (read by the HTTP layer).
    pub actor: Option<String>,
}

/// An issue update: absent fields stay, `null` clears (protocol §1.2, §6.1).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuePatch {
    pub title: Option<String>,
    pub status: Option<Status>,
    #[serde(default, deserialize_with = "present")]
    pub priority: Option<Option<u8>>,
    pub labels: Option<Vec<String>>,
    pub labels_add: Option<Vec<String>>,
    #[serde(default, deserialize_with = "present")]
    pub route: Option<Option<String>>,
    #[serde(default, deserialize_with = "present")]
    pub parent: Option<Option<String>>,
    pub rank: Option<RankAt>,
    #[serde(default, deserialize_with = "present")]
    pub assignee: Option<Option<String>>,
    pub components: Option<Components>,
    pub expected_sequence: Option<i64>,
    pub actor: Option<String>,
}

pub(super) fn invalid(message: impl Into<String>) -> Error {
    Error::with_message(ErrorCode::INVALID_BODY, message)
}

pub(super) fn not_found(what: &str) -> Error {
    Error::with_message(ErrorCode::NOT_FOUND, format!("no such {what}"))
}

/// A role name (a session's `roles`, an issue's `route`): `^[a-z][a-z0-9._-]{0,63}$`.
pub fn is_role(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=64).contains(&b.len())
        && b[0].is_ascii_lowercase()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"._-".contains(c))
}

fn check_title(t: &str) -> Result<String, Error> {
    let t = t.trim();
    if t.is_empty() || t.chars().any(char::is_control) {
        return Err(invalid(
            "a title has a visible character and no control character",
        ));
    }
    if rules::chars(t) > TITLE_MAX {
        return Err(Error::with_message(
            ErrorCode::CAP_EXCEEDED,
            "a title is at most 1000 characters",
        ));
    }
    Ok(t.to_owned())
}

fn check_labels(labels: &[String]) -> Result<Vec<String>, Error> {
    let mut out: Vec<String> = Vec::new();
    for l in labels {
        let l = l.trim();
        if l.is_empty() || l.chars().any(char::is_control) {
            return Err(invalid(
                "a label has a visible character and no control character",
            ));
        }
        if rules::chars(l) > LABEL_MAX {
            return Err(Error::with_message(
                ErrorCode::CAP_EXCEEDED,
                "a label is at most 64 characters",
            ));
        }
        if !out.iter().any(|o| o == l) {
            out.push(l.to_owned());
        }
    }
    if out.len() > LABELS_MAX {
        return Err(Error::with_message(
            ErrorCode::CAP_EXCEEDED,
            "an issue holds at most 50 labels",
        ));
    }
    Ok(out)
}

fn check_priority(p: Option<u8>) -> Result<Option<u8>, Error> {
    match p {
        Some(p) if p > 3 => Err(invalid("priority is 0 to 3, or null")),
        p => Ok(p),
    }
}

fn check_route(r: Option<String>) -> Result<Option<String>, Error> {
    match r {
        Some(r) if !is_role(&r) => Err(invalid("a route is a role name: ^[a-z][a-z0-9._-]{0,63}$")),
        r => Ok(r),
    }
}

fn check_components(c: Components) -> Result<Components, Error> {
    let ok = match c.mode {
        ComponentsMode::Explicit => !c.ids.is_empty(),
        ComponentsMode::Inherit | ComponentsMode::None => c.ids.is_empty(),
    };
    if !ok || c.ids.iter().any(|i| i.is_empty() || i.len() > 253) {
        return Err(invalid(
            "components: `explicit` names ids; `inherit` and `none` name none",
        ));
    }
    Ok(c)
}

impl Console {
    /// The work area: projects, issues, claims, read states and subscribers.
    pub fn issues(&self) -> Issues<'_> {
        Issues { console: self }
    }

    /// A receiver that changes whenever events are committed.
    pub fn events_watch(&self) -> tokio::sync::watch::Receiver<i64> {
        self.committed.subscribe()
    }

    pub(super) async fn append(
        &self,
        tx: &mut dyn WorkTx,
        kind: &'static str,
        actor: &Actor,
        project: Option<&ProjectKey>,
        issue: Option<(&IssueKey, i64)>,
        data: Value,
    ) -> Result<Event, Error> {
        let e = NewEvent {
            kind,
            facts: EventFacts {
                at: self.now(),
                actor: actor.clone(),
                project: project.cloned(),
                issue: issue.map(|(k, _)| k.clone()),
                artifact: None,
                session: actor.session().cloned(),
                data,
            },
        };
        Ok(tx.events().append_event(&e, issue.map(|(_, s)| s)).await?)
    }

    /// The person an assignee names: a login someone signed in with.
    pub(super) async fn assignee(&self, login: &str) -> Result<Login, Error> {
        let not_allowed = || {
            Error::with_message(
                ErrorCode::ASSIGNEE_NOT_ALLOWED,
                "an assignee is the e-mail of a person who has signed in",
            )
        };
        let l = Login::parse(login).ok_or_else(not_allowed)?;
        if self.parts.storage.has_person(&l).await? {
            Ok(l)
        } else {
            Err(not_allowed())
        }
    }

    /// Appends an event about a live session (`session.live`, `session.updated`,
    /// `session.gone`), which no transaction of the work records carries.
    pub async fn session_event(
        &self,
        kind: &'static str,
        actor: &Actor,
        data: Value,
    ) -> Result<(), Error> {
        transact!(self, |tx| self
            .append(tx, kind, actor, None, None, data.clone())
            .await)?;
        Ok(())
    }

    /// Events with id above `after`, at most `limit` (the stream's replay and its live reads).
    pub async fn events_after(&self, after: i64, limit: u32) -> Result<Vec<Event>, Error> {
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.events().events_after(after, limit).await?)
    }

    /// The highest committed event id.
    pub async fn last_event_id(&self) -> Result<i64, Error> {
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.events().last_event_id().await?)
    }
}
