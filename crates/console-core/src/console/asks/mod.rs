//! The console's asks area: asks, comments with suggestions and mentions, reviews and the
//! inbox (issue 13; protocol §6.3, §6.4, §7), as one service, [`Asks`], reached as
//! [`Console::asks`]. Each write runs in one transaction (`transact!`) and appends its event
//! there; after the commit the event wakes the streams.
//!
//! - this module: the inputs and answers, the checks, and the helpers every write shares
//!   (ids, appending an event where it belongs, an ask's and a comment's full view);
//! - [`lifecycle`]: an ask on an issue opened, read, reworded, answered, closed, followed;
//! - [`inbox`]: a person's inbox, snoozes, their answers and decisions; [`cache`] the kept
//!   inbox answers;
//! - [`comments`]: comments, replies, mentions, threads and suggestions;
//! - [`documents`]: asks on documents (block asks), approval requests and reviews.
//!
//! Locks are taken ask (or comment) first, then the issue whose log the event goes to, then
//! the event log's.

mod cache;
mod comments;
mod documents;
mod inbox;
mod lifecycle;

pub(crate) use cache::InboxCache;
pub use cache::{CachedInbox, InboxJson, SpareBuffer};
pub use documents::{ApprovalIn, ApprovalRequested, ReviewIn};
pub use inbox::{Waiting, waiting};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::*;
use crate::doc;
use crate::ids::SessionId;
use crate::ids::{ArtifactId, AskId, CommentId, ReviewId};
use crate::work::asks::AskPlace;
use crate::work::asks::{
    Answer, AnswerEntry, Approval, Approved, Ask, AskFilter, AskKind, AskOption, AskState, AskView,
    AssigneeFilter, Closed, Comment, CommentFilter, CommentSuggestion, CommentView, InboxFilter,
    Quote, Review, ReviewOutcome, SuggestionState, ThreadState, Turn, Wording,
};
use crate::work::asks::{InboxAsk, InboxEntry, InboxScope};
use crate::work::model::rfc3339;
use crate::work::rules;
use crate::work::{
    Actor, Event, EventFacts, IssueKey, NewEvent, ProjectKey, SearchKind, WorkTx, search,
};

use super::messages::NewAttempt;
use super::unit::AfterCommit;
use super::work::{console_ref, invalid, not_found};
use crate::work::documents::{Artifact, ArtifactKind, Scope as DocScope};
use crate::work::messages::{Attempt, AttemptView, Deliverable, DeliveryContent, Mode, Scope};

/// Caps of protocol §2.
const QUESTION_MAX: usize = 2_000;
const LABEL_MAX: usize = 200;
const OPTIONS_MAX: usize = 20;
const TEXT_MAX: usize = 65_536;
/// How far ahead a snooze may reach.
const SNOOZE_DAYS_MAX: i64 = 365;

fn cap(message: &str) -> Error {
    Error::with_message(ErrorCode::CAP_EXCEEDED, message)
}

fn ask_state(state: AskState, message: &str) -> Error {
    Error::with_message(ErrorCode::ASK_STATE, message).with_detail("state", state.as_str())
}

/// An option id: `^[A-Za-z0-9_-]{1,32}$`.
fn is_option_id(s: &str) -> bool {
    (1..=32).contains(&s.len())
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b'-')
}

/// A text body: trimmed, not empty, at most `max` characters.
fn check_text(t: &str, what: &str, max: usize) -> Result<String, Error> {
    let t = t.trim();
    if t.is_empty() {
        return Err(invalid(format!("{what} has a visible character")));
    }
    if rules::chars(t) > max {
        return Err(cap(&format!("{what} is at most {max} characters")));
    }
    Ok(t.to_owned())
}

/// One option as a body gives it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptionIn {
    pub id: Option<String>,
    pub label: String,
}

/// Options as given: each id given, else its position (`1`, `2`, …); ids unique.
fn check_options(given: &[OptionIn]) -> Result<Vec<AskOption>, Error> {
    if given.len() > OPTIONS_MAX {
        return Err(cap("an ask has at most 20 options"));
    }
    let mut out: Vec<AskOption> = Vec::new();
    for (i, o) in given.iter().enumerate() {
        let id = match &o.id {
            Some(id) if is_option_id(id) => id.clone(),
            Some(_) => return Err(invalid("an option id is 1 to 32 of A-Z a-z 0-9 _ -")),
            None => (i + 1).to_string(),
        };
        if out.iter().any(|x| x.id == id) {
            return Err(invalid(format!("option id `{id}` is given twice")));
        }
        let label = o.label.trim();
        if label.is_empty() || label.chars().any(char::is_control) {
            return Err(invalid(
                "an option label has a visible character and no control character",
            ));
        }
        if rules::chars(label) > LABEL_MAX {
            return Err(cap("an option label is at most 200 characters"));
        }
        out.push(AskOption {
            id,
            label: label.to_owned(),
        });
    }
    Ok(out)
}

/// Opening an ask (protocol §6.3).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewAsk {
    pub question: String,
    #[serde(default)]
    pub options: Vec<OptionIn>,
    /// On a document: the block the `:::ask` block goes in after.
    pub block: Option<String>,
    pub actor: Option<String>,
}

/// Rewording an open ask.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AskPatch {
    pub question: Option<String>,
    pub options: Option<Vec<OptionIn>>,
    pub actor: Option<String>,
}

/// Answering: selected options and/or text, one at least.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AnswerIn {
    #[serde(default)]
    pub options: Vec<String>,
    pub text: Option<String>,
}

/// How an ask closes without an answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CloseAs {
    Retracted,
    Resolved,
}

/// Retracting or resolving.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CloseIn {
    pub state: CloseAs,
    pub note: Option<String>,
    pub actor: Option<String>,
}

/// A new comment (protocol §6.3).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewComment {
    pub body: String,
    pub artifact: Option<String>,
    pub ask: Option<String>,
    pub quote: Option<Quote>,
    pub block: Option<String>,
    pub suggestion: Option<SuggestionIn>,
    pub parent: Option<String>,
    #[serde(default)]
    pub mentions: Vec<String>,
    pub actor: Option<String>,
}

/// `suggestion {replacement}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SuggestionIn {
    pub replacement: String,
}

/// One of `advice.suggestions` on a new ask: an answered ask that may settle it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AskSuggestion {
    pub ask: AskId,
    pub question: String,
    pub answer: SuggestedAnswer,
    pub by: Actor,
    #[serde(with = "rfc3339")]
    pub at: Time,
}

/// The answer a suggestion names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SuggestedAnswer {
    pub options: Vec<AskOption>,
    pub text: Option<String>,
}

/// `counts` of a scope list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct AskCounts {
    pub asks: usize,
    pub issues: usize,
    pub artifacts: usize,
}

/// `GET /asks`: open asks in one scope, with counts.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ScopeList {
    pub asks: Vec<AskView>,
    pub counts: AskCounts,
}

/// How a session is reached by an ask's answer and replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Via {
    Author,
    Follower,
    Subscriber,
}

/// One session an ask's answer and replies reach.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Recipient {
    pub session_id: SessionId,
    pub via: Via,
}

/// One inbox row (protocol §6.4); its id is its ask's, its `ask` the inbox's view of the ask.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InboxRow {
    pub id: AskId,
    pub ask: InboxAsk,
    pub issue: Option<IssueKey>,
    pub artifact: Option<ArtifactId>,
    /// Whose turn it is (a snoozed row keeps its turn).
    pub turn: Option<Turn>,
    #[serde(with = "rfc3339")]
    pub turn_since: Time,
    #[serde(with = "crate::work::model::rfc3339_opt")]
    pub snoozed_until: Option<Time>,
}

/// `GET /inbox`: rows by whose turn it is; a row the caller snoozed is under `snoozed` until
/// then.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inbox {
    pub human_turn: Vec<InboxRow>,
    pub agent_turn: Vec<InboxRow>,
    pub snoozed: Vec<InboxRow>,
}

/// The ask an answers row is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnsweredAsk {
    pub id: AskId,
    pub question: String,
    pub state: AskState,
    pub owner: Actor,
    pub link: String,
}

/// The answer of an answers row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowAnswer {
    pub options: Vec<String>,
    pub text: Option<String>,
    pub current: bool,
}

/// The reply of an answers row.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RowReply {
    pub id: CommentId,
    pub body: String,
}

/// Whether an answers row is an answer or a reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerKind {
    Answer,
    Reply,
}

/// One row of `GET /inbox/answers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnswerRow {
    pub kind: AnswerKind,
    #[serde(with = "rfc3339")]
    pub at: Time,
    pub ask: AnsweredAsk,
    pub answer: Option<RowAnswer>,
    pub reply: Option<RowReply>,
}

/// A page of answers rows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AnswersPage {
    pub rows: Vec<AnswerRow>,
    pub total: i64,
    pub limit: u32,
    pub offset: u32,
}

/// One thing a person decided: an answer or reply on an ask, or a credential request they
/// approved or denied through the console (the page of "what you decided").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decided {
    Ask(AnswerRow),
    Credential(crate::storage::Decision),
}

impl Decided {
    pub fn at(&self) -> Time {
        match self {
            Decided::Ask(r) => r.at,
            Decided::Credential(d) => d.at,
        }
    }
}

/// A page of a person's answers and decisions, newest first; `more` when a later page has
/// rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecidedPage {
    pub rows: Vec<Decided>,
    pub more: bool,
}

/// `GET /comments/{id}`: the comment and its whole thread, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CommentThread {
    #[serde(flatten)]
    pub comment: CommentView,
    pub thread: Vec<CommentView>,
}

/// The asks area's operations over the console they belong to: `console.asks().ask(id)`.
/// It borrows the console (its storage, clock, caches and the other areas it writes through
/// in one transaction: documents' blocks, mentions' deliveries, notices) and holds nothing of
/// its own.
#[derive(Debug, Clone, Copy)]
pub struct Asks<'c> {
    console: &'c Console,
}

impl Console {
    /// The asks area: asks, comments, reviews and the inbox.
    pub fn asks(&self) -> Asks<'_> {
        Asks { console: self }
    }
}

/// Where an event goes: its project, and the issue whose log takes it (with the sequence).
struct Place<'a> {
    project: &'a ProjectKey,
    issue: Option<&'a IssueKey>,
    artifact: Option<ArtifactId>,
}

impl<'a> Place<'a> {
    fn new(
        project: &'a ProjectKey,
        issue: Option<&'a IssueKey>,
        artifact: Option<ArtifactId>,
    ) -> Self {
        Self {
            project,
            issue,
            artifact,
        }
    }
}

impl Asks<'_> {
    /// Appends an event about an ask or comment: to its document's log when it is on a
    /// document (taking the document's next sequence), else to its issue's (the issue's next).
    async fn append_at(
        &self,
        tx: &mut dyn WorkTx,
        kind: &'static str,
        actor: &Actor,
        place: Place<'_>,
        data: serde_json::Value,
    ) -> Result<Event, Error> {
        let now = self.console.now();
        let (sequence, issue) = match (place.artifact, place.issue) {
            (Some(id), _) => {
                let mut a = tx
                    .documents()
                    .artifact(id)
                    .await?
                    .ok_or_else(|| not_found("artifact"))?;
                a.sequence += 1;
                tx.documents().update_artifact(&a).await?;
                (Some(a.sequence), a.scope.issue().cloned())
            }
            (None, Some(k)) => (
                Some(tx.asks().next_issue_sequence(k, now).await?),
                Some(k.clone()),
            ),
            (None, None) => (None, None),
        };
        let e = NewEvent {
            kind,
            facts: EventFacts {
                at: now,
                actor: actor.clone(),
                project: Some(place.project.clone()),
                issue,
                artifact: place.artifact,
                session: actor.session().cloned(),
                data,
            },
        };
        Ok(tx.events().append_event(&e, sequence).await?)
    }

    /// Appends an ask's event, the ask (full) as its data.
    async fn append_ask(
        &self,
        tx: &mut dyn WorkTx,
        kind: &'static str,
        actor: &Actor,
        view: &AskView,
    ) -> Result<Event, Error> {
        let place = Place::new(
            &view.head.project,
            view.head.issue.as_ref(),
            view.head.artifact,
        );
        let data = serde_json::to_value(view).unwrap_or_default();
        self.append_at(tx, kind, actor, place, data).await
    }

    /// Appends a comment's event, the comment (with its mentions' attempts) as its data.
    async fn append_comment(
        &self,
        tx: &mut dyn WorkTx,
        kind: &'static str,
        actor: &Actor,
        view: &CommentView,
    ) -> Result<Event, Error> {
        let c = &view.comment;
        let place = Place::new(&c.project, c.issue.as_ref(), c.artifact);
        let data = serde_json::to_value(view).unwrap_or_default();
        self.append_at(tx, kind, actor, place, data).await
    }

    /// A read-only transaction, as the area sees it.
    async fn read(&self) -> Result<Box<dyn WorkTx>, Error> {
        let tx: Box<dyn WorkTx> = self.console.parts.storage.read().await?;
        Ok(tx)
    }

    /// The asks a filter selects, oldest first, in the list shape.
    async fn listed(tx: &mut dyn WorkTx, f: AskFilter) -> Result<Vec<AskView>, Error> {
        let asks = tx.asks().asks(&f).await?;
        Ok(asks.into_iter().map(AskView::listed).collect())
    }

    /// A comment with its mentions' delivery attempts.
    async fn comment_view(&self, tx: &mut dyn WorkTx, c: Comment) -> Result<CommentView, Error> {
        self.comment_views(tx, vec![c])
            .await?
            .pop()
            .ok_or_else(|| Error::new(ErrorCode::INTERNAL))
    }

    /// Comments with their mentions' attempts, read in one query.
    async fn comment_views(
        &self,
        tx: &mut dyn WorkTx,
        cs: Vec<Comment>,
    ) -> Result<Vec<CommentView>, Error> {
        let items: Vec<Deliverable> = cs
            .iter()
            .filter(|c| !c.mentions.is_empty())
            .map(|c| Deliverable::Mention(c.id))
            .collect();
        let mut attempts: HashMap<Deliverable, Vec<AttemptView>> = HashMap::new();
        if !items.is_empty() {
            for a in tx.attempts().attempts(&items).await? {
                attempts
                    .entry(a.item)
                    .or_default()
                    .push(AttemptView::from(&a));
            }
        }
        Ok(cs
            .into_iter()
            .map(|c| {
                let a = attempts
                    .remove(&Deliverable::Mention(c.id))
                    .unwrap_or_default();
                CommentView::of(c, a)
            })
            .collect())
    }

    /// Opens a mention delivery of comment `c` to `session` in `tx` (mode `send`: a mention
    /// asks the session to act), dispatched by `after` once the transaction commits.
    async fn mention(
        &self,
        tx: &mut dyn WorkTx,
        after: &mut AfterCommit,
        c: &Comment,
        session: &SessionId,
        requested_by: &Actor,
    ) -> Result<Attempt, Error> {
        let content = DeliveryContent {
            thread_id: c.thread_id.to_string(),
            issue: c.issue.as_ref().map(|k| k.as_str().to_owned()),
            mode: Mode::Send,
            author: c.author.clone(),
            body: c.body.clone(),
            notice: None,
        };
        let scope = Scope {
            project: Some(c.project.clone()),
            issue: c.issue.clone(),
            artifact: c.artifact,
        };
        self.console
            .messages()
            .open_attempt(
                tx,
                after,
                &NewAttempt {
                    item: Deliverable::Mention(c.id),
                    session_id: session,
                    mode: Mode::Send,
                    requested_by,
                    content: &content,
                    scope: &scope,
                },
            )
            .await
    }

    /// The read route's shape: with replies, edit history and answers.
    async fn ask_full(&self, tx: &mut dyn WorkTx, a: Ask) -> Result<AskView, Error> {
        let replies = tx
            .asks()
            .comments(&CommentFilter {
                ask: Some(a.head.id),
                ..Default::default()
            })
            .await?;
        let replies = self.comment_views(tx, replies).await?;
        let history = tx.asks().wordings(a.head.id).await?;
        let answers = tx.asks().answers(a.head.id).await?;
        let mut v = AskView::listed(a);
        v.replies = Some(replies);
        v.history = Some(history);
        v.answers = Some(answers);
        Ok(v)
    }

    async fn locked_ask(&self, tx: &mut dyn WorkTx, id: AskId) -> Result<Ask, Error> {
        tx.asks().ask(id).await?.ok_or_else(|| not_found("ask"))
    }
}
