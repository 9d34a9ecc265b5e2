//! The console's operations on asks, comments with suggestions and mentions, reviews and the
//! inbox (issue 13; protocol §6.3, §6.4, §7). Each write runs in one transaction
//! (`transact!`) and appends its event there; after the commit the event wakes the streams.
//!
//! Locks are taken ask (or comment) first, then the issue whose log the event goes to, then
//! the event log's.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::*;
use crate::doc;
use crate::work::asks::{
    Answer, AnswerEntry, Approval, Approved, Ask, AskFilter, AskKind, AskOption, AskState, AskView,
    AssigneeFilter, Closed, Comment, CommentFilter, CommentSuggestion, CommentView, InboxFilter,
    Quote, Review, ReviewOutcome, SuggestionState, ThreadState, Turn, Wording,
};
use crate::work::asks::{InboxAsk, InboxEntry, InboxScope};
use crate::work::model::rfc3339;
use crate::work::rules;
use crate::work::{Actor, Event, IssueKey, NewEvent, ProjectKey, SearchKind, WorkTx, search};

use super::messages::{NewAttempt, Opened};
use super::work::{console_ref, invalid, not_found};
use crate::work::documents::{Artifact, ArtifactKind, Scope as DocScope};
use crate::work::messages::{AttemptView, DeliveryContent, DeliveryKind, Mode, Scope};

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

/// An ask or comment id: a UUID in any case, written lowercase; anything else names nothing.
fn uuid_id(s: &str, what: &str) -> Result<String, Error> {
    crate::ids::uuid_id(s).ok_or_else(|| not_found(what))
}

pub(crate) use crate::ids::is_session_id;

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
    pub ask: String,
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
    pub session_id: String,
    pub via: Via,
}

/// One inbox row (protocol §6.4); its id is its ask's, its `ask` the inbox's view of the ask.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InboxRow {
    pub id: String,
    pub ask: InboxAsk,
    pub issue: Option<IssueKey>,
    pub artifact: Option<String>,
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
    pub id: String,
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
    pub id: String,
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

/// Where an event goes: its project, and the issue whose log takes it (with the sequence).
struct Place<'a> {
    project: &'a ProjectKey,
    issue: Option<&'a IssueKey>,
    artifact: Option<&'a str>,
}

impl Console {
    fn new_id(&self) -> String {
        let mut b = [0u8; 16];
        self.parts.entropy.fill(&mut b);
        uuid::Builder::from_random_bytes(b)
            .into_uuid()
            .hyphenated()
            .to_string()
    }

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
        let now = self.now();
        let (sequence, issue) = match (place.artifact, place.issue) {
            (Some(id), _) => {
                let mut a = tx
                    .artifact(id)
                    .await?
                    .ok_or_else(|| not_found("artifact"))?;
                a.sequence += 1;
                tx.update_artifact(&a).await?;
                (Some(a.sequence), a.scope.issue().cloned())
            }
            (None, Some(k)) => (Some(tx.next_issue_sequence(k, now).await?), Some(k.clone())),
            (None, None) => (None, None),
        };
        let e = NewEvent {
            kind,
            at: now,
            actor: actor.clone(),
            project: Some(place.project.clone()),
            issue,
            artifact: place.artifact.map(str::to_owned),
            session: actor.session().map(str::to_owned),
            data,
        };
        Ok(tx.append_event(&e, sequence).await?)
    }

    /// Appends an ask's event, the ask (full) as its data.
    async fn append_ask(
        &self,
        tx: &mut dyn WorkTx,
        kind: &'static str,
        actor: &Actor,
        view: &AskView,
    ) -> Result<Event, Error> {
        let place = Place {
            project: &view.project,
            issue: view.issue.as_ref(),
            artifact: view.artifact.as_deref(),
        };
        self.append_at(
            tx,
            kind,
            actor,
            place,
            serde_json::to_value(view).unwrap_or_default(),
        )
        .await
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
        let ids: Vec<String> = cs
            .iter()
            .filter(|c| !c.mentions.is_empty())
            .map(|c| c.id.clone())
            .collect();
        let mut attempts: HashMap<String, Vec<AttemptView>> = HashMap::new();
        if !ids.is_empty() {
            for a in tx.attempts(DeliveryKind::Mention, &ids).await? {
                attempts
                    .entry(a.id.clone())
                    .or_default()
                    .push(AttemptView::from(&a));
            }
        }
        Ok(cs
            .into_iter()
            .map(|c| {
                let a = attempts.remove(&c.id).unwrap_or_default();
                CommentView::of(c, a)
            })
            .collect())
    }

    /// Opens a mention delivery of comment `c` to `session` in `tx` (mode `send`: a mention
    /// asks the session to act).
    async fn mention(
        &self,
        tx: &mut dyn WorkTx,
        c: &Comment,
        session: &str,
        requested_by: &Actor,
    ) -> Result<Opened, Error> {
        let content = DeliveryContent {
            thread_id: c.thread_id.clone(),
            issue: c.issue.as_ref().map(|k| k.as_str().to_owned()),
            mode: Mode::Send,
            author: c.author.clone(),
            body: c.body.clone(),
            notice: None,
        };
        let scope = Scope {
            project: Some(c.project.clone()),
            issue: c.issue.clone(),
            artifact: c.artifact.clone(),
        };
        self.open_attempt(
            tx,
            &NewAttempt {
                kind: DeliveryKind::Mention,
                id: &c.id,
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
            .comments(&CommentFilter {
                ask: Some(a.id.clone()),
                ..Default::default()
            })
            .await?;
        let replies = self.comment_views(tx, replies).await?;
        let history = tx.wordings(&a.id).await?;
        let answers = tx.answers(&a.id).await?;
        let mut v = AskView::listed(a);
        v.replies = Some(replies);
        v.history = Some(history);
        v.answers = Some(answers);
        Ok(v)
    }

    async fn locked_ask(&self, tx: &mut dyn WorkTx, id: &str) -> Result<Ask, Error> {
        tx.ask(id).await?.ok_or_else(|| not_found("ask"))
    }

    // ----- asks -----

    /// Opens a question ask on an issue. `advice` is read afterwards ([`Console::ask_advice`]).
    pub async fn open_issue_ask(
        &self,
        actor: &Actor,
        key: &str,
        new: NewAsk,
    ) -> Result<AskView, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        if new.block.is_some() {
            return Err(invalid(
                "`block` places an ask in a document: an issue has none",
            ));
        }
        let question = check_text(&new.question, "a question", QUESTION_MAX)?;
        let options = check_options(&new.options)?;
        let now = self.now();
        let id = self.new_id();
        let (view, event) = transact!(self, |tx| {
            let issue = tx.issue(&key).await?.ok_or_else(|| not_found("issue"))?;
            let ask = Ask::opened(
                id.clone(),
                AskKind::Question,
                (issue.project.clone(), Some(issue.key.clone()), None),
                question.clone(),
                options.clone(),
                actor,
                now,
            );
            tx.insert_ask(&ask).await?;
            self.notify_ask(tx, &ask).await?;
            let view = self.ask_full(tx, ask).await?;
            let e = self.append_ask(tx, "ask.opened", actor, &view).await?;
            Ok((view, e))
        })?;
        self.event_committed(event.id);
        tracing::info!(ask = %view.id, "ask opened");
        Ok(view)
    }

    /// Answered asks of the same project that may settle a new one: the three best matches
    /// for any word of its question, read after its write committed (it never slows or
    /// blocks the write); none when the search fails.
    pub async fn ask_advice(&self, ask: &AskView) -> Vec<AskSuggestion> {
        let words = search::words(&ask.question);
        if words.is_empty() {
            return Vec::new();
        }
        let found = async {
            let mut tx = self.parts.storage.read().await?;
            let (hits, _) = tx
                .search_asks(&words, true, Some(&ask.project), true, 4)
                .await?;
            let ids: Vec<String> = hits
                .iter()
                .filter(|h| h.id != ask.id)
                .take(3)
                .map(|h| h.id.clone())
                .collect();
            let mut asks = tx.asks_by_id(&ids).await?;
            asks.sort_by_key(|a| ids.iter().position(|i| *i == a.id));
            Ok::<_, crate::storage::StorageError>(asks)
        };
        match found.await {
            Ok(asks) => asks
                .into_iter()
                .filter_map(|a| {
                    let ans = a.answer?;
                    let options = ans
                        .options
                        .iter()
                        .filter_map(|o| a.options.iter().find(|x| &x.id == o).cloned())
                        .collect();
                    Some(AskSuggestion {
                        ask: a.id,
                        question: a.question,
                        answer: SuggestedAnswer {
                            options,
                            text: ans.text,
                        },
                        by: ans.by,
                        at: ans.at,
                    })
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "ask advice not found");
                Vec::new()
            }
        }
    }

    /// One ask with replies, edit history and answers.
    pub async fn ask(&self, id: &str) -> Result<AskView, Error> {
        let id = uuid_id(id, "ask")?;
        let mut tx = self.parts.storage.read().await?;
        let a = tx.ask(&id).await?.ok_or_else(|| not_found("ask"))?;
        self.ask_full(&mut *tx, a).await
    }

    /// An issue's asks (those on its documents included), oldest first, in `states` (any
    /// when empty).
    pub async fn issue_asks(
        &self,
        key: &str,
        states: Vec<AskState>,
    ) -> Result<Vec<AskView>, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let mut tx = self.parts.storage.read().await?;
        if tx.issue(&key).await?.is_none() {
            return Err(not_found("issue"));
        }
        let asks = tx
            .asks(&AskFilter {
                issue: Some(key),
                states,
                ..Default::default()
            })
            .await?;
        Ok(asks.into_iter().map(AskView::listed).collect())
    }

    /// Open asks in one scope: one session's own, or every one on a project's issues and
    /// documents; with counts of asks, and of the issues and documents they are on.
    pub async fn scope_asks(
        &self,
        author_session: Option<&str>,
        project: Option<&str>,
    ) -> Result<ScopeList, Error> {
        let mut f = AskFilter {
            states: vec![AskState::Open],
            ..Default::default()
        };
        let mut tx = self.parts.storage.read().await?;
        match (author_session, project) {
            (Some(s), None) => {
                if !is_session_id(s) {
                    return Err(ErrorCode::INVALID_SESSION_ID.into());
                }
                f.author_session = Some(s.to_owned());
            }
            (None, Some(p)) => {
                let p = ProjectKey::parse(p).ok_or_else(|| {
                    Error::with_message(ErrorCode::INVALID_QUERY, "`project` is a project key")
                })?;
                if tx.project(&p).await?.is_none() {
                    return Err(not_found("project"));
                }
                f.project = Some(p);
            }
            _ => {
                return Err(Error::with_message(
                    ErrorCode::INVALID_QUERY,
                    "name exactly one scope: `author_session` or `project`",
                ));
            }
        }
        let asks = tx.asks(&f).await?;
        let issues: HashSet<&IssueKey> = asks.iter().filter_map(|a| a.issue.as_ref()).collect();
        let artifacts: HashSet<&String> = asks.iter().filter_map(|a| a.artifact.as_ref()).collect();
        let counts = AskCounts {
            asks: asks.len(),
            issues: issues.len(),
            artifacts: artifacts.len(),
        };
        Ok(ScopeList {
            asks: asks.into_iter().map(AskView::listed).collect(),
            counts,
        })
    }

    /// Whether `actor` may act on an ask as its author: a person always; a bearer only for
    /// the session that wrote it (SESSION_FORBIDDEN).
    fn as_author(actor: &Actor, ask: &Ask) -> Result<(), Error> {
        if actor.is_human() {
            return Ok(());
        }
        match (actor.session(), ask.author_session()) {
            (Some(a), Some(b)) if a == b => Ok(()),
            _ => Err(Error::with_message(
                ErrorCode::SESSION_FORBIDDEN,
                "a bearer rewords only an ask its own session wrote",
            )),
        }
    }

    /// Rewords an open ask (its author's session, or a person): the earlier wording goes to
    /// the edit history. A patch that changes nothing appends no event.
    pub async fn reword_ask(
        &self,
        actor: &Actor,
        id: &str,
        patch: AskPatch,
    ) -> Result<AskView, Error> {
        let id = uuid_id(id, "ask")?;
        let question = patch
            .question
            .as_deref()
            .map(|q| check_text(q, "a question", QUESTION_MAX))
            .transpose()?;
        let options = patch.options.as_deref().map(check_options).transpose()?;
        let now = self.now();
        let (view, events, kept) = transact!(self, |tx| {
            let mut ask = self.locked_ask(tx, &id).await?;
            Self::as_author(actor, &ask)?;
            if ask.state != AskState::Open {
                return Err(ask_state(ask.state, "only an open ask is reworded"));
            }
            let q = question.clone().unwrap_or_else(|| ask.question.clone());
            let o = options.clone().unwrap_or_else(|| ask.options.clone());
            if q == ask.question && o == ask.options {
                let view = self.ask_full(tx, ask).await?;
                return Ok((view, Vec::new(), None));
            }
            // The wording being replaced, with who wrote it and when.
            tx.add_wording(
                &id,
                &Wording {
                    question: ask.question.clone(),
                    options: ask.options.clone(),
                    by: ask.worded_by.clone(),
                    at: ask.worded_at,
                },
            )
            .await?;
            ask.question = q;
            ask.options = o;
            ask.updated_at = now;
            ask.worded_by = actor.clone();
            ask.worded_at = now;
            if !actor.is_human() {
                ask.turn = Some(Turn::Human);
                ask.turn_since = now;
            }
            // A block ask's `:::ask` block says the new wording.
            let (mut events, kept) = self.rewrite_block(tx, actor, &mut ask).await?;
            tx.update_ask(&ask).await?;
            let view = self.ask_full(tx, ask).await?;
            events.push(self.append_ask(tx, "ask.reworded", actor, &view).await?);
            Ok((view, events, kept))
        })?;
        self.document_committed(&events, kept);
        Ok(view)
    }

    /// Answers an ask (a person): selected options and/or text. An answered ask takes a later
    /// answer, which becomes current; the earlier stays in the answers history. Then it is
    /// its agent's turn.
    pub async fn answer_ask(&self, actor: &Actor, id: &str, a: AnswerIn) -> Result<AskView, Error> {
        let id = uuid_id(id, "ask")?;
        if !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        let text = match a.text.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(t) if rules::chars(t) > TEXT_MAX => {
                return Err(cap("an answer's text is at most 65536 characters"));
            }
            Some(t) => Some(t.to_owned()),
        };
        let mut selected: Vec<String> = Vec::new();
        for o in &a.options {
            if !selected.contains(o) {
                selected.push(o.clone());
            }
        }
        if selected.is_empty() && text.is_none() {
            return Err(invalid("an answer selects options or has text, or both"));
        }
        // An approval ask is answered by a review of the version it asks about.
        let approval = {
            let mut tx = self.parts.storage.read().await?;
            tx.ask(&id).await?.filter(|a| a.kind == AskKind::Approval)
        };
        if let Some(ask) = approval {
            if !matches!(ask.state, AskState::Open | AskState::Answered) {
                return Err(ask_state(
                    ask.state,
                    "a retracted or resolved ask takes no answer",
                ));
            }
            let outcome = match selected.as_slice() {
                [o] => ReviewOutcome::parse(o),
                _ => None,
            }
            .ok_or_else(|| {
                invalid("an approval ask is answered with one option: approve or request_changes")
            })?;
            let (Some(artifact), Some(version)) = (
                ask.artifact.clone(),
                ask.approval.as_ref().map(|x| x.version),
            ) else {
                return Err(not_found("document"));
            };
            let r = ReviewIn {
                outcome,
                version,
                body: text,
            };
            return self
                .review_answering(actor, &artifact, r, Some(&id))
                .await?
                .1
                .ok_or_else(|| not_found("ask"));
        }
        let now = self.now();
        let (view, event) = transact!(self, |tx| {
            let mut ask = self.locked_ask(tx, &id).await?;
            if !matches!(ask.state, AskState::Open | AskState::Answered) {
                return Err(ask_state(
                    ask.state,
                    "a retracted or resolved ask takes no answer",
                ));
            }
            if let Some(o) = selected
                .iter()
                .find(|o| !ask.options.iter().any(|x| &x.id == *o))
            {
                return Err(invalid(format!("the ask has no option `{o}`")));
            }
            let answer = Answer {
                options: selected.clone(),
                text: text.clone(),
                by: actor.clone(),
                at: now,
            };
            tx.add_answer(&id, &answer).await?;
            ask.answer = Some(answer);
            ask.state = AskState::Answered;
            // An answered ask is not open: it leaves the inbox (issue 27; docs/decisions.md).
            ask.turn = None;
            ask.turn_since = now;
            ask.updated_at = now;
            tx.update_ask(&ask).await?;
            let view = self.ask_full(tx, ask).await?;
            let e = self.append_ask(tx, "ask.answered", actor, &view).await?;
            Ok((view, e))
        })?;
        self.event_committed(event.id);
        tracing::info!(ask = %view.id, "ask answered");
        Ok(view)
    }

    /// Retracts or resolves an open ask without an answer.
    pub async fn close_ask(&self, actor: &Actor, id: &str, c: CloseIn) -> Result<AskView, Error> {
        let id = uuid_id(id, "ask")?;
        let note = c
            .note
            .as_deref()
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .map(|n| {
                if rules::chars(n) > TEXT_MAX {
                    Err(cap("a note is at most 65536 characters"))
                } else {
                    Ok(n.to_owned())
                }
            })
            .transpose()?;
        let now = self.now();
        let (view, events, kept) = transact!(self, |tx| {
            let mut ask = self.locked_ask(tx, &id).await?;
            if ask.state != AskState::Open {
                return Err(ask_state(
                    ask.state,
                    "only an open ask is retracted or resolved",
                ));
            }
            ask.state = match c.state {
                CloseAs::Retracted => AskState::Retracted,
                CloseAs::Resolved => AskState::Resolved,
            };
            ask.closed = Some(Closed {
                note: note.clone(),
                by: actor.clone(),
                at: now,
            });
            ask.turn = None;
            ask.turn_since = now;
            ask.updated_at = now;
            // A block ask's block records how it closed.
            let (mut events, kept) = self.rewrite_block(tx, actor, &mut ask).await?;
            tx.update_ask(&ask).await?;
            let view = self.ask_full(tx, ask).await?;
            let kind = match c.state {
                CloseAs::Retracted => "ask.retracted",
                CloseAs::Resolved => "ask.resolved",
            };
            events.push(self.append_ask(tx, kind, actor, &view).await?);
            Ok((view, events, kept))
        })?;
        self.document_committed(&events, kept);
        Ok(view)
    }

    /// The sessions an ask's answer and replies reach: its author's session, its followers,
    /// and the sessions subscribed to its issue; each once, by the first of those.
    pub async fn recipients(&self, id: &str) -> Result<Vec<Recipient>, Error> {
        let id = uuid_id(id, "ask")?;
        let mut tx = self.parts.storage.read().await?;
        let ask = tx.ask(&id).await?.ok_or_else(|| not_found("ask"))?;
        self.recipients_of(&mut *tx, &ask).await
    }

    async fn recipients_of(&self, tx: &mut dyn WorkTx, ask: &Ask) -> Result<Vec<Recipient>, Error> {
        let mut out: Vec<Recipient> = Vec::new();
        let mut add = |s: &str, via: Via| {
            if !out.iter().any(|r| r.session_id == s) {
                out.push(Recipient {
                    session_id: s.to_owned(),
                    via,
                });
            }
        };
        if let Some(s) = ask.author_session() {
            add(s, Via::Author);
        }
        for f in &ask.followers {
            add(f, Via::Follower);
        }
        if let Some(d) = &ask.artifact {
            for (s, _) in tx.document_subscribers(d).await? {
                add(&s, Via::Subscriber);
            }
        }
        if let Some(k) = &ask.issue {
            for (s, _) in tx.subscribers(k).await? {
                add(&s, Via::Subscriber);
            }
        }
        Ok(out)
    }

    /// Follows (or unfollows) an ask for a session: a person for any session, a bearer only
    /// for its own (SESSION_FORBIDDEN). Following twice, or unfollowing a session that does
    /// not follow, changes nothing and appends no event.
    pub async fn follow_ask(
        &self,
        actor: &Actor,
        id: &str,
        session: &str,
        follow: bool,
    ) -> Result<(), Error> {
        let id = uuid_id(id, "ask")?;
        if !is_session_id(session) {
            return Err(ErrorCode::INVALID_SESSION_ID.into());
        }
        if !actor.is_human() && actor.session() != Some(session) {
            return Err(Error::with_message(
                ErrorCode::SESSION_FORBIDDEN,
                "a bearer follows and unfollows for its own session only",
            ));
        }
        let now = self.now();
        let event = transact!(self, |tx| {
            let mut ask = self.locked_ask(tx, &id).await?;
            let has = ask.followers.iter().any(|f| f == session);
            if has == follow {
                return Ok(None);
            }
            if follow {
                ask.followers.push(session.to_owned());
            } else {
                ask.followers.retain(|f| f != session);
            }
            ask.updated_at = now;
            tx.update_ask(&ask).await?;
            let data = serde_json::to_value(FollowData {
                ask: &ask.id,
                session_id: session,
            })
            .unwrap_or_default();
            let place = Place {
                project: &ask.project,
                issue: ask.issue.as_ref(),
                artifact: ask.artifact.as_deref(),
            };
            let kind = if follow {
                "ask.followed"
            } else {
                "ask.unfollowed"
            };
            Ok(Some(self.append_at(tx, kind, actor, place, data).await?))
        })?;
        if let Some(e) = event {
            self.event_committed(e.id);
        }
        Ok(())
    }

    /// How many open asks each session wrote (`GET /sessions`' `open_asks`).
    pub async fn open_ask_counts(
        &self,
        sessions: &[String],
    ) -> Result<HashMap<String, i64>, Error> {
        if sessions.is_empty() {
            return Ok(HashMap::new());
        }
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.open_ask_counts(sessions).await?.into_iter().collect())
    }

    // ----- the inbox -----

    /// The caller's inbox (protocol §6.4): asks that are a person's or an agent's turn, on
    /// issues assigned to `assignee` (`me`, `unassigned`, an e-mail someone signed in with;
    /// none: the caller's and the unassigned; asks on documents with no issue are unassigned),
    /// within `project`; a row the caller snoozed is under `snoozed` until then. Oldest turn
    /// first.
    ///
    /// A person's inbox may hold thousands of asks: each answer is kept (with its JSON) until
    /// the next event commits or a snooze in it ends ([`InboxCache`]). Every write that
    /// changes an inbox appends an event (a snooze too), so no answer outlives its data; with
    /// several replicas, another replica's event reaches the watermark through the storage's
    /// listener.
    pub async fn inbox_asks(
        &self,
        human: &Human,
        project: Option<&str>,
        assignee: Option<&str>,
    ) -> Result<Arc<CachedInbox>, Error> {
        let project = project
            .map(|p| {
                ProjectKey::parse(p).ok_or_else(|| {
                    Error::with_message(ErrorCode::INVALID_QUERY, "`project` is a project key")
                })
            })
            .transpose()?;
        let assignee = match assignee {
            None => AssigneeFilter::MineAndUnassigned(human.login.clone()),
            Some("me") => AssigneeFilter::Person(human.login.clone()),
            Some("unassigned") => AssigneeFilter::Unassigned,
            Some(e) => AssigneeFilter::Person(self.assignee(e).await?),
        };
        let filter = InboxFilter {
            login: human.login.clone(),
            project,
            assignee,
        };
        // The watermark is read before the storage: an event committed after it makes the
        // answer read now stale at once, never the other way round.
        let watermark = *self.committed.borrow();
        let now = self.now();
        let (kept, since) = match self.inboxes.get(&filter, watermark, now) {
            Lookup::Hit(hit) => return Ok(hit),
            Lookup::Stale(kept, since) => (Some(kept), since),
            Lookup::Miss => (None, 0),
        };
        let mut tx = self.parts.storage.read().await?;
        // Events since the kept answer was read name what they may have changed: only that
        // part is read again (event ids have no gaps: `watermark - since` events).
        if let Some(kept) = kept
            && let Ok(n) = u32::try_from(watermark - since)
            && n <= InboxCache::PATCH_EVENTS
        {
            let events = tx.events_after(since, n).await?;
            if events.len() == n as usize
                && let Some(scope) = inbox_scope(&events)
            {
                let fresh = tx.inbox(&filter, Some(&scope)).await?;
                let cached = Arc::new(kept.patched(&scope, fresh, now, Self::inbox_row));
                self.inboxes.put(filter, watermark, cached.clone());
                return Ok(cached);
            }
        }
        let entries = tx.inbox(&filter, None).await?;
        drop(tx);
        let cached = Arc::new(CachedInbox::of(
            entries,
            now,
            Self::inbox_row,
            self.inboxes.spares.clone(),
        ));
        self.inboxes.put(filter, watermark, cached.clone());
        Ok(cached)
    }

    fn inbox_row(a: InboxAsk, snoozed_until: Option<Time>) -> InboxRow {
        InboxRow {
            id: a.id.clone(),
            issue: a.issue.clone(),
            artifact: a.artifact.clone(),
            turn: a.turn,
            turn_since: a.turn_since,
            snoozed_until,
            ask: a,
        }
    }

    /// Snoozes an inbox row for the caller until `until` (in the future, at most 365 days
    /// ahead: else INVALID_STATE). An ask that is nobody's turn is in no inbox: ASK_STATE.
    /// Appends `inbox.snoozed` (`{ask, login, snoozed_until}`; no issue's or document's log).
    pub async fn snooze(&self, human: &Human, id: &str, until: Time) -> Result<InboxRow, Error> {
        let id = uuid_id(id, "ask")?;
        let now = self.now();
        if until <= now || until > now + Duration::days(SNOOZE_DAYS_MAX) {
            return Err(Error::with_message(
                ErrorCode::INVALID_STATE,
                "snoozed_until is in the future, at most 365 days ahead",
            ));
        }
        let actor = Actor::User {
            login: human.login.clone(),
        };
        let (row, event) = transact!(self, |tx| {
            let ask = self.locked_ask(tx, &id).await?;
            if ask.turn.is_none() {
                return Err(ask_state(
                    ask.state,
                    "the ask waits on nobody: it is in no inbox",
                ));
            }
            tx.snooze(&human.login, &id, until).await?;
            let data = serde_json::to_value(SnoozeData {
                ask: &id,
                login: &human.login,
                snoozed_until: Some(until),
            })
            .unwrap_or_default();
            let e = self
                .append_personal(tx, "inbox.snoozed", &actor, &ask.project, data)
                .await?;
            Ok((Self::inbox_row(InboxAsk::of(&ask), Some(until)), e))
        })?;
        self.event_committed(event.id);
        Ok(row)
    }

    /// Un-snoozes an inbox row for the caller (one not snoozed: done already, no event);
    /// appends `inbox.unsnoozed`.
    pub async fn unsnooze(&self, human: &Human, id: &str) -> Result<(), Error> {
        let id = uuid_id(id, "ask")?;
        let actor = Actor::User {
            login: human.login.clone(),
        };
        let event = transact!(self, |tx| {
            let ask = self.locked_ask(tx, &id).await?;
            if tx.snoozed_until(&human.login, &id).await?.is_none() {
                return Ok(None);
            }
            tx.unsnooze(&human.login, &id).await?;
            let data = serde_json::to_value(SnoozeData {
                ask: &id,
                login: &human.login,
                snoozed_until: None,
            })
            .unwrap_or_default();
            Ok(Some(
                self.append_personal(tx, "inbox.unsnoozed", &actor, &ask.project, data)
                    .await?,
            ))
        })?;
        if let Some(e) = event {
            self.event_committed(e.id);
        }
        Ok(())
    }

    /// Appends an event about a person's own inbox: in no issue's or document's log.
    async fn append_personal(
        &self,
        tx: &mut dyn WorkTx,
        kind: &'static str,
        actor: &Actor,
        project: &ProjectKey,
        data: serde_json::Value,
    ) -> Result<Event, Error> {
        let e = NewEvent {
            kind,
            at: self.now(),
            actor: actor.clone(),
            project: Some(project.clone()),
            issue: None,
            artifact: None,
            session: None,
            data,
        };
        Ok(tx.append_event(&e, None).await?)
    }

    /// The caller's own answers and replies on asks, newest first.
    pub async fn my_answers(
        &self,
        human: &Human,
        limit: u32,
        offset: u32,
    ) -> Result<AnswersPage, Error> {
        let mut tx = self.parts.storage.read().await?;
        let (entries, total) = tx.answers_by(&human.login, limit, offset).await?;
        let asked = |a: &Ask| AnsweredAsk {
            id: a.id.clone(),
            question: a.question.clone(),
            state: a.state,
            owner: a.author.clone(),
            link: console_ref(SearchKind::Ask, &a.id),
        };
        let rows = entries
            .into_iter()
            .map(|e| match e {
                AnswerEntry::Answer { ask, answer } => AnswerRow {
                    kind: AnswerKind::Answer,
                    at: answer.at,
                    ask: asked(&ask),
                    answer: Some(RowAnswer {
                        options: answer.options,
                        text: answer.text,
                        current: answer.current,
                    }),
                    reply: None,
                },
                AnswerEntry::Reply {
                    ask,
                    comment_id,
                    body,
                    at,
                } => AnswerRow {
                    kind: AnswerKind::Reply,
                    at,
                    ask: asked(&ask),
                    answer: None,
                    reply: Some(RowReply {
                        id: comment_id,
                        body,
                    }),
                },
            })
            .collect();
        Ok(AnswersPage {
            rows,
            total,
            limit,
            offset,
        })
    }
}

impl Console {
    /// The most rows [`Console::answers_and_decisions`] reaches (`offset + limit`).
    pub const DECIDED_REACH: u32 = 2_000;

    /// A person's answers and replies on asks and their credential decisions, in one list,
    /// newest first: `limit` rows from `offset` (each source is read up to `offset + limit`
    /// and merged; together at most [`Console::DECIDED_REACH`]).
    pub async fn answers_and_decisions(
        &self,
        human: &Human,
        limit: u32,
        offset: u32,
    ) -> Result<DecidedPage, Error> {
        let reach = offset.saturating_add(limit).min(Self::DECIDED_REACH);
        // One more than the reach from each: whether a later page has rows.
        let answers = self.my_answers(human, reach + 1, 0).await?;
        let decisions = self
            .parts
            .storage
            .decisions_of(&human.login, reach + 1)
            .await?;
        let mut all: Vec<Decided> = answers
            .rows
            .into_iter()
            .map(Decided::Ask)
            .chain(decisions.into_iter().map(Decided::Credential))
            .collect();
        all.sort_by_key(|d| std::cmp::Reverse(d.at()));
        let more = all.len() > reach as usize;
        let rows = all
            .into_iter()
            .take(reach as usize)
            .skip(offset as usize)
            .collect();
        Ok(DecidedPage { rows, more })
    }

    // ----- comments -----

    /// Comments on an issue, a quote of one of its documents, or one of its asks; `parent`
    /// makes it a reply in that comment's thread (it takes the thread's place: `artifact`,
    /// `ask`, `quote`, `block` and `suggestion` go with the root). A reply on an ask moves
    /// the ask's turn: a person's to its agent, an agent's to a person (or, once answered, to
    /// nobody: the agent followed up).
    pub async fn comment_on_issue(
        &self,
        actor: &Actor,
        key: &str,
        new: NewComment,
    ) -> Result<CommentView, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        self.add_comment(actor, On::Issue(key), new).await
    }

    /// Comments on a document or one of its quotes (with a suggested replacement), or one of
    /// its asks; as [`Console::comment_on_issue`].
    pub async fn comment_on_document(
        &self,
        actor: &Actor,
        artifact: &str,
        new: NewComment,
    ) -> Result<CommentView, Error> {
        let artifact = uuid_id(artifact, "artifact")?;
        if new.artifact.is_some() {
            return Err(invalid(
                "the path names the document: no `artifact` in the body",
            ));
        }
        self.add_comment(actor, On::Document(artifact), new).await
    }

    async fn add_comment(
        &self,
        actor: &Actor,
        on: On,
        new: NewComment,
    ) -> Result<CommentView, Error> {
        let checked = self.check_comment(&new)?;
        let ask_id = new
            .ask
            .as_deref()
            .map(|a| uuid_id(a, "ask"))
            .transpose()
            .map_err(|_| invalid("`ask` names no ask here"))?;
        let parent = new
            .parent
            .as_deref()
            .map(|p| uuid_id(p, "comment"))
            .transpose()
            .map_err(|_| invalid("`parent` names no comment here"))?;
        let named_artifact = match (&on, &new.artifact) {
            (On::Document(d), _) => Some(d.clone()),
            (On::Issue(_), Some(x)) => Some(
                uuid_id(x, "artifact")
                    .map_err(|_| invalid("`artifact` names no document of this issue"))?,
            ),
            (On::Issue(_), None) => None,
        };
        if (new.quote.is_some() || new.block.is_some()) && named_artifact.is_none() {
            return Err(invalid(
                "a `quote` or `block` is in a document: name the `artifact`",
            ));
        }
        let here = |issue: Option<&IssueKey>, artifact: Option<&String>| match &on {
            On::Issue(k) => issue == Some(k),
            On::Document(d) => artifact == Some(d),
        };
        let now = self.now();
        let id = self.new_id();
        let (view, events, opened) = transact!(self, |tx| {
            // The thread and the ask first (locks go comment and ask, then document or issue).
            let root = match &parent {
                Some(p) => {
                    let c = tx
                        .comment(p)
                        .await?
                        .filter(|c| here(c.issue.as_ref(), c.artifact.as_ref()))
                        .ok_or_else(|| invalid("`parent` names no comment here"))?;
                    let root = if c.thread_id == c.id {
                        c
                    } else {
                        tx.comment(&c.thread_id)
                            .await?
                            .ok_or_else(|| not_found("thread"))?
                    };
                    Some(root)
                }
                None => None,
            };
            let on_ask = match (&ask_id, &root) {
                (Some(a), _) => Some(a.clone()),
                (None, Some(r)) => r.ask.clone(),
                (None, None) => None,
            };
            let mut ask = match &on_ask {
                Some(a) => Some(
                    tx.ask(a)
                        .await?
                        .filter(|x| here(x.issue.as_ref(), x.artifact.as_ref()))
                        .ok_or_else(|| invalid("`ask` names no ask here"))?,
                ),
                None => None,
            };
            // Its document: named, the thread's, or the ask's; they agree.
            let mut artifact = named_artifact.clone();
            for other in [
                root.as_ref().and_then(|r| r.artifact.clone()),
                ask.as_ref().and_then(|a| a.artifact.clone()),
            ]
            .into_iter()
            .flatten()
            {
                match &artifact {
                    Some(x) if *x != other => {
                        return Err(invalid(
                            "the `artifact`, the thread and the ask are on different documents",
                        ));
                    }
                    _ => artifact = Some(other),
                }
            }
            let (project, issue) = match &artifact {
                Some(d) => {
                    let a = self.document_in(tx, d).await?;
                    if let On::Issue(k) = &on
                        && a.scope.issue() != Some(k)
                    {
                        return Err(invalid("`artifact` names no document of this issue"));
                    }
                    if let Some(q) = &new.quote {
                        // The quote must match once in its scope (the engine's rules).
                        let d = self.loaded(tx, &a).await?;
                        let probe = doc::EditOp::Replace {
                            quote: engine_quote(q),
                            text: q.exact.clone(),
                            block: new.block.clone(),
                            block_token: None,
                        };
                        d.apply(None, &[probe], &mut || self.new_block_id())?;
                    } else if let Some(b) = &new.block {
                        let d = self.loaded(tx, &a).await?;
                        if d.position(b).is_none() {
                            return Err(Error::with_message(
                                ErrorCode::TARGET_NOT_FOUND,
                                "the document has no block with this id",
                            ));
                        }
                    }
                    (
                        a.scope.project().ok_or_else(no_document)?,
                        a.scope.issue().cloned(),
                    )
                }
                None => {
                    let On::Issue(k) = &on else {
                        return Err(no_document());
                    };
                    let issue = tx.issue(k).await?.ok_or_else(|| not_found("issue"))?;
                    (issue.project, Some(k.clone()))
                }
            };
            let comment = Comment {
                id: id.clone(),
                thread_id: root
                    .as_ref()
                    .map(|r| r.id.clone())
                    .unwrap_or_else(|| id.clone()),
                parent: parent.clone(),
                project,
                issue,
                artifact,
                ask: on_ask.clone(),
                quote: new.quote.clone(),
                block: new.block.clone(),
                body: checked.body.clone(),
                author: actor.clone(),
                suggestion: new.suggestion.as_ref().map(|s| CommentSuggestion {
                    replacement: s.replacement.clone(),
                    state: SuggestionState::Pending,
                }),
                mentions: checked.mentions.clone(),
                thread_state: root.is_none().then_some(ThreadState::Open),
                created_at: now,
                edited_at: None,
            };
            tx.insert_comment(&comment).await?;
            if let Some(a) = ask.as_mut() {
                Self::replied(a, actor, now);
                tx.update_ask(a).await?;
            }
            let mut opened = Vec::new();
            for m in &comment.mentions {
                opened.push(self.mention(tx, &comment, m, actor).await?);
            }
            let view = self.comment_view(tx, comment).await?;
            let place = Place {
                project: &view.project,
                issue: view.issue.as_ref(),
                artifact: view.artifact.as_deref(),
            };
            let data = serde_json::to_value(&view).unwrap_or_default();
            let e = self
                .append_at(tx, "comment.created", actor, place, data)
                .await?;
            let from = format!("countersign://comment/{}", view.id);
            self.keep_mentions(tx, &from, view.issue.as_ref(), (&view.body, false), &e)
                .await?;
            Ok((view, vec![e], opened))
        })?;
        self.document_committed(&events, None);
        self.dispatch(&opened).await;
        Ok(view)
    }

    /// A reply on an ask moves its turn (docs/asks.md, "Whose turn").
    fn replied(ask: &mut Ask, actor: &Actor, now: Time) {
        let next = match (ask.state, actor.is_human()) {
            (AskState::Open, true) => Some(Turn::Agent),
            (AskState::Open, false) => Some(Turn::Human),
            // An answered ask is in no inbox, whoever replies (issue 27).
            (AskState::Answered, _) => None,
            (AskState::Retracted | AskState::Resolved, _) => ask.turn,
        };
        if next != ask.turn {
            ask.turn = next;
            ask.turn_since = now;
        }
        ask.updated_at = now;
    }

    /// A comment body's rules: the body (at most 65,536 characters), a suggestion only with a
    /// quote, mentions as session ids.
    fn check_comment(&self, new: &NewComment) -> Result<CheckedComment, Error> {
        let body = check_text(&new.body, "a comment", TEXT_MAX)?;
        if new.suggestion.is_some() && new.quote.is_none() {
            return Err(invalid("a suggestion replaces a `quote`: name one"));
        }
        if new.parent.is_some()
            && (new.artifact.is_some()
                || new.ask.is_some()
                || new.quote.is_some()
                || new.block.is_some()
                || new.suggestion.is_some())
        {
            return Err(invalid(
                "a reply (`parent`) takes its thread's place: no `artifact`, `ask`, `quote`, `block` or `suggestion`",
            ));
        }
        let mut mentions: Vec<String> = Vec::new();
        for m in &new.mentions {
            if !is_session_id(m) {
                return Err(Error::with_message(
                    ErrorCode::INVALID_SESSION_ID,
                    "a mention is a session id",
                ));
            }
            if !mentions.contains(m) {
                mentions.push(m.clone());
            }
        }
        if let Some(s) = &new.suggestion
            && rules::chars(&s.replacement) > TEXT_MAX
        {
            return Err(cap("a replacement is at most 65536 characters"));
        }
        Ok(CheckedComment { body, mentions })
    }

    /// An issue's comments (those on its documents and asks included), oldest first;
    /// `artifact` scopes them to one document.
    pub async fn issue_comments(
        &self,
        key: &str,
        artifact: Option<&str>,
    ) -> Result<Vec<CommentView>, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let artifact = artifact
            .map(|a| {
                uuid_id(a, "artifact").map_err(|_| {
                    Error::with_message(ErrorCode::INVALID_QUERY, "`artifact` is a document id")
                })
            })
            .transpose()?;
        let mut tx = self.parts.storage.read().await?;
        if tx.issue(&key).await?.is_none() {
            return Err(not_found("issue"));
        }
        let cs = tx
            .comments(&CommentFilter {
                issue: Some(key),
                artifact,
                ..Default::default()
            })
            .await?;
        self.comment_views(&mut *tx, cs).await
    }

    /// One comment with its whole thread, oldest first.
    pub async fn comment(&self, id: &str) -> Result<CommentThread, Error> {
        let id = uuid_id(id, "comment")?;
        let mut tx = self.parts.storage.read().await?;
        let c = tx.comment(&id).await?.ok_or_else(|| not_found("comment"))?;
        let thread = tx
            .comments(&CommentFilter {
                thread: Some(c.thread_id.clone()),
                ..Default::default()
            })
            .await?;
        let comment = self.comment_view(&mut *tx, c).await?;
        let thread = self.comment_views(&mut *tx, thread).await?;
        Ok(CommentThread { comment, thread })
    }

    /// Runs `change` on a comment (locked) and appends `kind` when it says it changed
    /// something; answers the comment as it is after.
    async fn change_comment(
        &self,
        actor: &Actor,
        id: &str,
        kind: &'static str,
        change: impl Fn(&mut Comment, Time) -> Result<bool, Error> + Send + Sync,
    ) -> Result<CommentView, Error> {
        let id = uuid_id(id, "comment")?;
        let now = self.now();
        let (view, event) = transact!(self, |tx| {
            let mut c = tx.comment(&id).await?.ok_or_else(|| not_found("comment"))?;
            if let (Some(k), None) = (&c.issue, &c.artifact) {
                // Locks go comment, then issue.
                tx.issue(k).await?;
            }
            if !change(&mut c, now)? {
                let view = self.comment_view(tx, c).await?;
                return Ok((view, None));
            }
            tx.update_comment(&c).await?;
            let view = self.comment_view(tx, c).await?;
            let place = Place {
                project: &view.project,
                issue: view.issue.as_ref(),
                artifact: view.artifact.as_deref(),
            };
            let data = serde_json::to_value(&view).unwrap_or_default();
            let e = self.append_at(tx, kind, actor, place, data).await?;
            if kind == "comment.edited" {
                let from = format!("countersign://comment/{}", view.id);
                self.keep_mentions(tx, &from, view.issue.as_ref(), (&view.body, true), &e)
                    .await?;
            }
            Ok((view, Some(e)))
        })?;
        if let Some(e) = event {
            self.event_committed(e.id);
        }
        Ok(view)
    }

    /// Edits a comment's body (a person). The same body changes nothing.
    pub async fn edit_comment(
        &self,
        actor: &Actor,
        id: &str,
        body: &str,
    ) -> Result<CommentView, Error> {
        if !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        let body = check_text(body, "a comment", TEXT_MAX)?;
        self.change_comment(actor, id, "comment.edited", |c, now| {
            if c.body == body {
                return Ok(false);
            }
            c.body = body.clone();
            c.edited_at = Some(now);
            Ok(true)
        })
        .await
    }

    /// Resolves (or reopens) the thread a comment is in; answers the thread's root. Resolving
    /// a resolved thread or reopening an open one changes nothing (200, no event).
    pub async fn resolve_thread(
        &self,
        actor: &Actor,
        id: &str,
        resolve: bool,
    ) -> Result<CommentView, Error> {
        if !resolve && !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        let id = uuid_id(id, "comment")?;
        let root = {
            let mut tx = self.parts.storage.read().await?;
            tx.comment(&id)
                .await?
                .ok_or_else(|| not_found("comment"))?
                .thread_id
        };
        let (want, kind) = if resolve {
            (ThreadState::Resolved, "comment.resolved")
        } else {
            (ThreadState::Open, "comment.reopened")
        };
        self.change_comment(actor, &root, kind, |c, _| {
            if c.thread_state == Some(want) {
                return Ok(false);
            }
            c.thread_state = Some(want);
            Ok(true)
        })
        .await
    }

    /// Rejects a comment's pending suggestion (a person); a decided or absent one is
    /// SUGGESTION_STATE.
    pub async fn reject_suggestion(&self, actor: &Actor, id: &str) -> Result<CommentView, Error> {
        if !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        self.change_comment(actor, id, "suggestion.rejected", |c, _| {
            match &mut c.suggestion {
                Some(CommentSuggestion {
                    state: state @ SuggestionState::Pending,
                    ..
                }) => {
                    *state = SuggestionState::Rejected;
                    Ok(true)
                }
                other => Err(suggestion_state(other.as_ref())),
            }
        })
        .await
    }
}

impl Console {
    /// The mentioned session's reply to a comment (an agent naming itself in `actor`): a
    /// reply in the comment's thread. A session the comment does not mention:
    /// SESSION_FORBIDDEN.
    pub async fn comment_reply(
        &self,
        actor: &Actor,
        id: &str,
        body: &str,
    ) -> Result<CommentView, Error> {
        let id = uuid_id(id, "comment")?;
        let session = actor.session().ok_or(ErrorCode::INVALID_SESSION_ID)?;
        let c = {
            let mut tx = self.parts.storage.read().await?;
            tx.comment(&id).await?.ok_or_else(|| not_found("comment"))?
        };
        if !c.mentions.iter().any(|m| m == session) {
            return Err(Error::with_message(
                ErrorCode::SESSION_FORBIDDEN,
                "only a session the comment mentions replies to it",
            ));
        }
        let new = NewComment {
            body: body.to_owned(),
            parent: Some(id.clone()),
            ..Default::default()
        };
        match (&c.artifact, &c.issue) {
            (Some(d), _) => self.add_comment(actor, On::Document(d.clone()), new).await,
            (None, Some(k)) => self.add_comment(actor, On::Issue(k.clone()), new).await,
            (None, None) => Err(not_found("comment")),
        }
    }
}

impl Console {
    /// Retries a comment's mention delivery: a new attempt to `target`, which must be one of
    /// its mentions (required when it mentions several). Answers the new attempt.
    pub async fn retry_mention(
        &self,
        actor: &Actor,
        id: &str,
        target: Option<&str>,
    ) -> Result<AttemptView, Error> {
        let id = uuid_id(id, "comment")?;
        if target.is_some_and(|t| !is_session_id(t)) {
            return Err(ErrorCode::INVALID_SESSION_ID.into());
        }
        let opened = transact!(self, |tx| {
            let c = tx.comment(&id).await?.ok_or_else(|| not_found("comment"))?;
            let session = match (target, c.mentions.as_slice()) {
                (_, []) => return Err(invalid("the comment mentions no session")),
                (None, [only]) => only.clone(),
                (None, _) => {
                    return Err(invalid(
                        "the comment mentions several sessions: `target` names one",
                    ));
                }
                (Some(t), all) if all.iter().any(|m| m == t) => t.to_owned(),
                (Some(_), _) => {
                    return Err(invalid("`target` is not one of the comment's mentions"));
                }
            };
            self.mention(tx, &c, &session, actor).await
        })?;
        self.dispatch(std::slice::from_ref(&opened)).await;
        Ok(AttemptView::from(&opened.attempt))
    }
}

impl Console {
    /// Accepts a comment's pending suggestion (a person): its quote is replaced by the
    /// replacement as a quote-anchored `replace` edit of the document, in the same transaction
    /// (the edit's refusals, QUOTE_NOT_FOUND, QUOTE_AMBIGUOUS, TARGET_NOT_FOUND, leave both
    /// unchanged); a decided or absent suggestion is SUGGESTION_STATE.
    pub async fn accept_suggestion(&self, actor: &Actor, id: &str) -> Result<CommentView, Error> {
        if !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        let id = uuid_id(id, "comment")?;
        let (view, events, kept) = transact!(self, |tx| {
            let mut c = tx.comment(&id).await?.ok_or_else(|| not_found("comment"))?;
            let replacement = match &c.suggestion {
                Some(CommentSuggestion {
                    replacement,
                    state: SuggestionState::Pending,
                }) => replacement.clone(),
                other => return Err(suggestion_state(other.as_ref())),
            };
            let (Some(artifact), Some(quote)) = (c.artifact.clone(), c.quote.clone()) else {
                return Err(suggestion_state(None));
            };
            let op = doc::EditOp::Replace {
                quote: engine_quote(&quote),
                text: replacement,
                block: c.block.clone(),
                block_token: None,
            };
            let (_, mut events, kept) = self
                .change_document(tx, actor, &artifact, None, std::slice::from_ref(&op))
                .await?;
            if let Some(s) = c.suggestion.as_mut() {
                s.state = SuggestionState::Accepted;
            }
            tx.update_comment(&c).await?;
            let view = self.comment_view(tx, c).await?;
            let place = Place {
                project: &view.project,
                issue: view.issue.as_ref(),
                artifact: view.artifact.as_deref(),
            };
            let data = serde_json::to_value(&view).unwrap_or_default();
            events.push(
                self.append_at(tx, "suggestion.accepted", actor, place, data)
                    .await?,
            );
            Ok((view, events, kept))
        })?;
        self.document_committed(&events, kept);
        Ok(view)
    }

    /// A document's comments, oldest first.
    pub async fn document_comments(&self, artifact: &str) -> Result<Vec<CommentView>, Error> {
        let artifact = uuid_id(artifact, "artifact")?;
        let mut tx = self.parts.storage.read().await?;
        self.document_in(&mut *tx, &artifact).await?;
        let cs = tx
            .comments(&CommentFilter {
                artifact: Some(artifact),
                ..Default::default()
            })
            .await?;
        self.comment_views(&mut *tx, cs).await
    }
}

fn suggestion_state(s: Option<&CommentSuggestion>) -> Error {
    let state = match s.map(|s| s.state) {
        None => "none",
        Some(SuggestionState::Pending) => "pending",
        Some(SuggestionState::Accepted) => "accepted",
        Some(SuggestionState::Rejected) => "rejected",
    };
    Error::with_message(
        ErrorCode::SUGGESTION_STATE,
        "the comment has no pending suggestion",
    )
    .with_detail("state", state)
}

/// What a new comment is on, as its route names it.
enum On {
    Issue(IssueKey),
    Document(String),
}

/// A comment body once checked.
struct CheckedComment {
    body: String,
    mentions: Vec<String>,
}

/// `inbox.snoozed`, `inbox.unsnoozed`.
#[derive(Serialize)]
struct SnoozeData<'a> {
    ask: &'a str,
    login: &'a Login,
    #[serde(with = "crate::work::model::rfc3339_opt")]
    snoozed_until: Option<Time>,
}

/// Kinds of event that name no issue, document or ask and change no inbox: a kept inbox
/// answer stays good across them. Any other kind naming none of those is read afresh.
const NOT_IN_INBOXES: &[&str] = &[
    "architecture.synced",
    "broadcast.sent",
    "delivery.attempt",
    "delivery.settings_changed",
    "delivery.synced",
    "message.accepted",
    "message.replied",
    "message.sent",
    "project.created",
    "repo_mapping.changed",
    "session.gone",
    "session.live",
    "session.updated",
    "session_group.changed",
    "subscription.removed",
];

/// What a run of events may have changed in anyone's inbox: the asks on the issues and
/// documents they are in, and the asks they name (`data.ask`: a snooze, an ask's own
/// events). `None` when one may have changed more (a kind not known to leave inboxes alone
/// that names nothing): the inbox is read afresh.
///
/// It holds because each write that changes an ask, an issue's assignee or a snooze appends
/// its event in the same transaction, in the log of that ask's issue or document.
fn inbox_scope(events: &[Event]) -> Option<InboxScope> {
    let mut scope = InboxScope::default();
    for e in events {
        let mut named = false;
        if let Some(i) = &e.issue {
            scope.issues.push(i.as_str().to_owned());
            named = true;
        }
        if let Some(a) = &e.artifact {
            scope.artifacts.push(a.clone());
            named = true;
        }
        if let Some(a) = e.data.get("ask").and_then(serde_json::Value::as_str) {
            scope.asks.push(a.to_owned());
            named = true;
        }
        if !named && !NOT_IN_INBOXES.contains(&e.kind.as_str()) {
            return None;
        }
    }
    for v in [&mut scope.asks, &mut scope.issues, &mut scope.artifacts] {
        v.sort_unstable();
        v.dedup();
    }
    Some(scope)
}

/// An inbox answer's JSON, shared by every read of it (a person's inbox may be megabytes).
#[derive(Debug, Clone)]
pub struct InboxJson(Arc<SpareBuffer>);

impl std::ops::Deref for InboxJson {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        &self.0.0
    }
}

impl AsRef<[u8]> for InboxJson {
    fn as_ref(&self) -> &[u8] {
        &self.0.0
    }
}

/// Buffers of inbox answers no longer read, kept for the next answer's JSON (each console's
/// own, in its [`InboxCache`]). An answer after each write is megabytes made afresh, and a
/// fresh allocation that size is mapped anew by the allocator and faulted in page by page (then
/// unmapped when freed, which stalls the other threads while their TLBs are flushed); a buffer
/// kept is written in place.
#[derive(Debug, Default, Clone)]
pub(crate) struct Spares(Arc<Mutex<Vec<Vec<u8>>>>);

/// Spare buffers kept at most, and the sizes kept (a smaller allocation is recycled by the
/// allocator itself).
const SPARE_BUFFERS_KEPT: usize = 2;
const SPARE_BUFFER_SIZES: std::ops::RangeInclusive<usize> = (1 << 20)..=(64 << 20);

impl Spares {
    /// A buffer of at least `capacity`, empty: a spare one if any.
    fn buffer(&self, capacity: usize) -> Vec<u8> {
        if capacity < *SPARE_BUFFER_SIZES.start() {
            return Vec::with_capacity(capacity);
        }
        let spare = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop();
        match spare {
            Some(mut b) => {
                b.clear();
                b.reserve(capacity);
                b
            }
            None => Vec::with_capacity(capacity),
        }
    }
}

/// A buffer that goes back to its console's [`Spares`] when dropped (when there is room).
#[derive(Debug)]
pub struct SpareBuffer(Vec<u8>, Spares);

impl Drop for SpareBuffer {
    fn drop(&mut self) {
        if !SPARE_BUFFER_SIZES.contains(&self.0.capacity()) {
            return;
        }
        let mut spare = self.1.0.lock().unwrap_or_else(|e| e.into_inner());
        if spare.len() < SPARE_BUFFERS_KEPT {
            spare.push(std::mem::take(&mut self.0));
        }
    }
}

/// An inbox answer: its rows in order, each with its JSON made once; the whole JSON and the
/// typed answer are made on first use.
#[derive(Debug)]
pub struct CachedInbox {
    rows: Vec<KeptRow>,
    /// The first snooze in it to end: the answer is good until then.
    until: Option<Time>,
    json: std::sync::OnceLock<InboxJson>,
    inbox: std::sync::OnceLock<Inbox>,
    /// Where the JSON's buffer comes from and goes back to.
    spares: Spares,
}

#[derive(Debug, Clone)]
struct KeptRow {
    turn_since: Time,
    seq: i64,
    section: Section,
    row: Arc<InboxRow>,
    json: Arc<str>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Section {
    Human,
    Agent,
    Snoozed,
}

impl KeptRow {
    fn of(e: InboxEntry, now: Time, row: fn(InboxAsk, Option<Time>) -> InboxRow) -> Option<Self> {
        let snoozed = e.snoozed_until.filter(|u| *u > now);
        let section = match (snoozed, e.ask.turn) {
            (Some(_), _) => Section::Snoozed,
            (None, Some(Turn::Human)) => Section::Human,
            (None, Some(Turn::Agent)) => Section::Agent,
            (None, None) => return None,
        };
        let (turn_since, seq) = (e.ask.turn_since, e.seq);
        let row = row(e.ask, snoozed);
        // Serializing an inbox row cannot fail.
        let json = serde_json::to_string(&row).unwrap_or_default();
        Some(Self {
            turn_since,
            seq,
            section,
            row: Arc::new(row),
            json: Arc::from(json),
        })
    }
}

impl CachedInbox {
    fn of(
        entries: Vec<InboxEntry>,
        now: Time,
        row: fn(InboxAsk, Option<Time>) -> InboxRow,
        spares: Spares,
    ) -> Self {
        Self::sorted(
            entries
                .into_iter()
                .filter_map(|e| KeptRow::of(e, now, row))
                .collect(),
            spares,
        )
    }

    fn sorted(mut rows: Vec<KeptRow>, spares: Spares) -> Self {
        // Oldest turn first; asks made in one millisecond as they were made.
        rows.sort_by_key(|r| (r.turn_since, r.seq));
        let until = rows
            .iter()
            .filter(|r| r.section == Section::Snoozed)
            .filter_map(|r| r.row.snoozed_until)
            .min();
        Self {
            rows,
            until,
            json: std::sync::OnceLock::new(),
            inbox: std::sync::OnceLock::new(),
            spares,
        }
    }

    /// This answer with the part in `scope` replaced by `fresh` (that part read again).
    fn patched(
        &self,
        scope: &InboxScope,
        fresh: Vec<InboxEntry>,
        now: Time,
        row: fn(InboxAsk, Option<Time>) -> InboxRow,
    ) -> Self {
        let asks: HashSet<&str> = scope.asks.iter().map(String::as_str).collect();
        let issues: HashSet<&str> = scope.issues.iter().map(String::as_str).collect();
        let artifacts: HashSet<&str> = scope.artifacts.iter().map(String::as_str).collect();
        let within = |r: &InboxRow| {
            asks.contains(r.id.as_str())
                || r.issue
                    .as_ref()
                    .is_some_and(|i| issues.contains(i.as_str()))
                || r.artifact.as_deref().is_some_and(|a| artifacts.contains(a))
        };
        let mut rows: Vec<KeptRow> = self
            .rows
            .iter()
            .filter(|k| !within(&k.row))
            .cloned()
            .collect();
        rows.extend(fresh.into_iter().filter_map(|e| KeptRow::of(e, now, row)));
        Self::sorted(rows, self.spares.clone())
    }

    /// The typed answer (the home page's), made on first use.
    pub fn inbox(&self) -> &Inbox {
        self.inbox.get_or_init(|| {
            let of = |s: Section| -> Vec<InboxRow> {
                self.rows
                    .iter()
                    .filter(|r| r.section == s)
                    .map(|r| (*r.row).clone())
                    .collect()
            };
            Inbox {
                human_turn: of(Section::Human),
                agent_turn: of(Section::Agent),
                snoozed: of(Section::Snoozed),
            }
        })
    }

    /// The answer's JSON (what serializing [`CachedInbox::inbox`] writes), made once for
    /// every reader of this answer from each row's JSON.
    pub fn json(&self) -> InboxJson {
        self.json
            .get_or_init(|| {
                let size: usize = self.rows.iter().map(|r| r.json.len() + 1).sum();
                let mut out = self.spares.buffer(64 + size);
                for (i, (name, s)) in [
                    ("human_turn", Section::Human),
                    ("agent_turn", Section::Agent),
                    ("snoozed", Section::Snoozed),
                ]
                .into_iter()
                .enumerate()
                {
                    out.extend_from_slice(if i == 0 { b"{\"" } else { b"],\"" });
                    out.extend_from_slice(name.as_bytes());
                    out.extend_from_slice(b"\":[");
                    let mut first = true;
                    for r in self.rows.iter().filter(|r| r.section == s) {
                        if !first {
                            out.push(b',');
                        }
                        first = false;
                        out.extend_from_slice(r.json.as_bytes());
                    }
                }
                out.extend_from_slice(b"]}");
                // Shared as it was written: `Arc<[u8]>` would copy the megabytes once more.
                InboxJson(Arc::new(SpareBuffer(out, self.spares.clone())))
            })
            .clone()
    }

    /// Rows in it (what the cache's budget counts).
    fn rows(&self) -> usize {
        self.rows.len()
    }
}

/// What the cache holds for a person's inbox with filters.
enum Lookup {
    /// Read since the last event committed, its snoozes still on.
    Hit(Arc<CachedInbox>),
    /// Read before the events after this watermark.
    Stale(Arc<CachedInbox>, i64),
    Miss,
}

/// People's inboxes as last read (per person and filters): an answer is good while no event
/// has committed since it was read, and until the first snooze in it ends; one read before
/// later events is patched from them. At most [`InboxCache::ROWS`] rows are kept, the oldest
/// answers dropped first.
#[derive(Debug, Default)]
pub(crate) struct InboxCache {
    entries: Mutex<std::collections::VecDeque<CacheEntry>>,
    /// Buffers of answers no longer read, for the next answer's JSON.
    spares: Spares,
}

#[derive(Debug)]
struct CacheEntry {
    filter: InboxFilter,
    watermark: i64,
    inbox: Arc<CachedInbox>,
}

impl InboxCache {
    /// The rows kept in all (about 1 KiB each with their JSON).
    const ROWS: usize = 100_000;
    /// Events since a kept answer that are read to patch it; more, and it is read afresh.
    const PATCH_EVENTS: u32 = 200;

    fn get(&self, f: &InboxFilter, watermark: i64, now: Time) -> Lookup {
        let Ok(entries) = self.entries.lock() else {
            return Lookup::Miss;
        };
        let Some(e) = entries
            .iter()
            .find(|e| &e.filter == f && e.inbox.until.is_none_or(|u| now < u))
        else {
            return Lookup::Miss;
        };
        if e.watermark == watermark {
            Lookup::Hit(e.inbox.clone())
        } else if e.watermark < watermark {
            Lookup::Stale(e.inbox.clone(), e.watermark)
        } else {
            // Read after events this reader has not seen yet: read afresh.
            Lookup::Miss
        }
    }

    fn put(&self, filter: InboxFilter, watermark: i64, inbox: Arc<CachedInbox>) {
        let Ok(mut entries) = self.entries.lock() else {
            return;
        };
        if entries
            .iter()
            .any(|e| e.filter == filter && e.watermark > watermark)
        {
            return;
        }
        entries.retain(|e| e.filter != filter);
        entries.push_back(CacheEntry {
            filter,
            watermark,
            inbox,
        });
        let mut rows: usize = entries.iter().map(|e| e.inbox.rows()).sum();
        while rows > Self::ROWS && entries.len() > 1 {
            if let Some(old) = entries.pop_front() {
                rows -= old.inbox.rows();
            }
        }
    }
}

/// `ask.followed`, `ask.unfollowed`.
#[derive(Serialize)]
struct FollowData<'a> {
    ask: &'a str,
    session_id: &'a str,
}

// ----- documents: asks, block asks, approval, reviews, comments and suggestions -----

/// A document that is not one (a file, an image, an agent conversation's artifact).
fn no_document() -> Error {
    Error::with_message(
        ErrorCode::NOT_FOUND,
        "no such document: asks and comments go on an issue's or a project's markdown document",
    )
}

/// An approval request (protocol §6.2): `{summary?, actor?}`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalIn {
    pub summary: Option<String>,
    pub actor: Option<String>,
}

/// A review (protocol §6.2): `{outcome, version, body?}`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewIn {
    pub outcome: ReviewOutcome,
    pub version: i64,
    pub body: Option<String>,
}

/// `approval.requested`, `approval.approved`, `approval.changes_requested`.
#[derive(Serialize)]
struct ApprovalData<'a> {
    artifact: &'a str,
    version: i64,
    ask: Option<&'a str>,
    by: &'a Actor,
    #[serde(with = "rfc3339")]
    at: Time,
}

/// What an approval request answers: the ask, and whether it is new (201) or the open one
/// handed back to a person (200).
#[derive(Debug, Clone)]
pub struct ApprovalRequested {
    pub ask: AskView,
    pub created: bool,
}

/// The `:::ask` block of an ask.
fn ask_block(ask: &Ask) -> Result<String, Error> {
    doc::write_ask(&doc::AskBlock {
        id: ask.id.clone(),
        state: ask.state.as_str().to_owned(),
        question: ask.question.clone(),
        options: ask
            .options
            .iter()
            .map(|o| doc::AskOption {
                id: o.id.clone(),
                label: o.label.clone(),
            })
            .collect(),
        attributes: Default::default(),
    })
    .map_err(|e| invalid(e.to_string()))
}

/// An edit op on the whole text of block `id` (made by `op` from that text); `None` when the
/// document has no such block.
fn whole_block(
    d: &doc::Document,
    id: &str,
    op: impl FnOnce(String) -> doc::EditOp,
) -> Option<doc::EditOp> {
    let p = d.position(id)?;
    let text = d.markdown().get(p.block.range.start..p.block.range.end)?;
    Some(op(text.to_owned()))
}

/// A comment's quote as the engine takes it.
fn engine_quote(q: &Quote) -> doc::Quote {
    doc::Quote {
        exact: q.exact.clone(),
        prefix: q.prefix.clone(),
        suffix: q.suffix.clone(),
    }
}

/// The loaded document and the events and document to keep of a change made in a transaction.
type Changed = (Vec<Event>, Option<(Artifact, doc::Document)>);

impl Console {
    /// An issue's or project's markdown document, locked in a write transaction.
    async fn document_in(&self, tx: &mut dyn WorkTx, id: &str) -> Result<Artifact, Error> {
        let a = tx
            .artifact(id)
            .await?
            .ok_or_else(|| not_found("artifact"))?;
        if a.kind != ArtifactKind::Document || matches!(a.scope, DocScope::Agent(_)) {
            return Err(no_document());
        }
        Ok(a)
    }

    /// Open approval asks of a document go to their agent's turn: the content changed after
    /// the request (protocol §6.3: an open approval ask follows later versions and waits on
    /// its agent until the approval route hands it back). Called by the documents' writes in
    /// their transaction.
    pub(crate) async fn approval_follows(
        &self,
        tx: &mut dyn WorkTx,
        artifact: &str,
    ) -> Result<(), Error> {
        let now = self.now();
        let open = tx
            .asks(&AskFilter {
                artifact: Some(artifact.to_owned()),
                states: vec![AskState::Open],
                ..Default::default()
            })
            .await?;
        for mut a in open {
            if a.kind == AskKind::Approval && a.turn != Some(Turn::Agent) {
                a.turn = Some(Turn::Agent);
                a.turn_since = now;
                a.updated_at = now;
                tx.update_ask(&a).await?;
            }
        }
        Ok(())
    }

    /// Rewrites a block ask's `:::ask` block to say what the ask says now (its wording, its
    /// state). A block the document no longer has (someone removed it) is left alone.
    async fn rewrite_block(
        &self,
        tx: &mut dyn WorkTx,
        actor: &Actor,
        ask: &mut Ask,
    ) -> Result<Changed, Error> {
        let (Some(artifact), Some(_)) = (ask.artifact.clone(), ask.block.clone()) else {
            return Ok((Vec::new(), None));
        };
        let a = self.document_in(tx, &artifact).await?;
        let current = self.loaded(tx, &a).await?;
        let Some(block) = current
            .asks()
            .into_iter()
            .find(|x| x.ask.id == ask.id)
            .map(|x| x.block)
        else {
            return Ok((Vec::new(), None));
        };
        let md = ask_block(ask)?;
        // As an edit op (the document's log replays ops): the block's whole text replaced.
        let Some(op) = whole_block(&current, &block, |text| doc::EditOp::Replace {
            quote: doc::Quote::exact(text),
            text: md.clone(),
            block: Some(block.clone()),
            block_token: None,
        }) else {
            return Ok((Vec::new(), None));
        };
        let (_, events, kept) = self
            .change_document(tx, actor, &artifact, None, std::slice::from_ref(&op))
            .await?;
        if let Some((_, d)) = &kept {
            ask.block = d
                .asks()
                .into_iter()
                .find(|x| x.ask.id == ask.id)
                .map(|x| x.block)
                .or(ask.block.take());
        }
        Ok((events, kept))
    }

    /// Opens a question ask on a document; with `block`, an `:::ask` block goes in after that
    /// block (a block ask; TARGET_NOT_FOUND for a block the document lacks).
    pub async fn open_document_ask(
        &self,
        actor: &Actor,
        artifact: &str,
        new: NewAsk,
    ) -> Result<AskView, Error> {
        let artifact = uuid_id(artifact, "artifact")?;
        let question = check_text(&new.question, "a question", QUESTION_MAX)?;
        let options = check_options(&new.options)?;
        let now = self.now();
        let id = self.new_id();
        let (view, events, kept) = transact!(self, |tx| {
            let a = self.document_in(tx, &artifact).await?;
            let mut ask = Ask::opened(
                id.clone(),
                AskKind::Question,
                (
                    a.scope.project().ok_or_else(no_document)?,
                    a.scope.issue().cloned(),
                    Some(a.id.clone()),
                ),
                question.clone(),
                options.clone(),
                actor,
                now,
            );
            let mut events = Vec::new();
            let mut kept = None;
            if let Some(after) = &new.block {
                let md = ask_block(&ask)?;
                // As an edit op (the document's log replays ops): after the whole text of
                // the top-level block holding `after`, the ask block as a block of its own.
                let current = self.loaded(tx, &a).await?;
                let top = current
                    .position(after)
                    .map(|p| {
                        p.block
                            .path
                            .first()
                            .map(|s| s.id.to_string())
                            .unwrap_or_else(|| p.block.id.to_string())
                    })
                    .ok_or_else(|| {
                        Error::with_message(
                            ErrorCode::TARGET_NOT_FOUND,
                            "the document has no block with this id",
                        )
                    })?;
                let op = whole_block(&current, &top, |text| doc::EditOp::InsertAfter {
                    quote: doc::Quote::exact(text),
                    text: format!("\n\n{md}"),
                    block: Some(top.clone()),
                    block_token: None,
                })
                .ok_or_else(|| not_found("block"))?;
                let (_, e, k) = self
                    .change_document(tx, actor, &artifact, None, std::slice::from_ref(&op))
                    .await?;
                ask.block = k.as_ref().and_then(|(_, d)| {
                    d.asks()
                        .into_iter()
                        .find(|x| x.ask.id == id)
                        .map(|x| x.block)
                });
                events.extend(e);
                kept = k;
            }
            tx.insert_ask(&ask).await?;
            self.notify_ask(tx, &ask).await?;
            let view = self.ask_full(tx, ask).await?;
            events.push(self.append_ask(tx, "ask.opened", actor, &view).await?);
            Ok((view, events, kept))
        })?;
        self.document_committed(&events, kept);
        tracing::info!(ask = %view.id, "ask opened on a document");
        Ok(view)
    }

    /// A document's asks, oldest first, in `states` (any when empty).
    pub async fn document_asks(
        &self,
        artifact: &str,
        states: Vec<AskState>,
    ) -> Result<Vec<AskView>, Error> {
        let artifact = uuid_id(artifact, "artifact")?;
        let mut tx = self.parts.storage.read().await?;
        self.document_in(&mut *tx, &artifact).await?;
        let asks = tx
            .asks(&AskFilter {
                artifact: Some(artifact),
                states,
                ..Default::default()
            })
            .await?;
        Ok(asks.into_iter().map(AskView::listed).collect())
    }

    /// Opens an approval ask for a document's latest version (its content settles into a
    /// version first), showing an earlier approval; or, when one is open, hands it back to a
    /// person for the latest version (`created` false). Appends `approval.requested` (and
    /// `ask.opened` for a new ask).
    pub async fn request_approval(
        &self,
        actor: &Actor,
        artifact: &str,
        r: ApprovalIn,
    ) -> Result<ApprovalRequested, Error> {
        let artifact = uuid_id(artifact, "artifact")?;
        let summary = r
            .summary
            .as_deref()
            .map(|s| check_text(s, "a summary", QUESTION_MAX))
            .transpose()?;
        let now = self.now();
        let id = self.new_id();
        let (out, events) = transact!(self, |tx| {
            let a = self.document_in(tx, &artifact).await?;
            let mut events = Vec::new();
            let version = self
                .settle_now(tx, &artifact, actor, &mut events)
                .await?
                .map(|v| v.number)
                .ok_or_else(|| invalid("the document has no version to approve"))?;
            let approved = tx
                .reviews(&artifact)
                .await?
                .into_iter()
                .rev()
                .find(|x| x.outcome == ReviewOutcome::Approve)
                .map(|x| Approved {
                    version: x.version,
                    at: x.at,
                    by: x.by,
                });
            let open = tx
                .asks(&AskFilter {
                    artifact: Some(artifact.clone()),
                    states: vec![AskState::Open],
                    ..Default::default()
                })
                .await?
                .into_iter()
                .find(|x| x.kind == AskKind::Approval);
            let (view, created) = match open {
                Some(ask) => {
                    // Locks go ask, then document: read it again locked.
                    let mut ask = tx.ask(&ask.id).await?.unwrap_or_else(|| ask.clone());
                    ask.approval = Some(Approval { version, approved });
                    if let Some(s) = &summary {
                        ask.question = s.clone();
                    }
                    ask.turn = Some(Turn::Human);
                    ask.turn_since = now;
                    ask.updated_at = now;
                    tx.update_ask(&ask).await?;
                    (self.ask_full(tx, ask).await?, false)
                }
                None => {
                    let ask = Ask {
                        approval: Some(Approval { version, approved }),
                        ..Ask::opened(
                            id.clone(),
                            AskKind::Approval,
                            (
                                a.scope.project().ok_or_else(no_document)?,
                                a.scope.issue().cloned(),
                                Some(artifact.clone()),
                            ),
                            summary.clone().unwrap_or_else(|| {
                                format!("Approve version {version} of {}?", a.filename)
                            }),
                            vec![
                                AskOption {
                                    id: "approve".into(),
                                    label: "Approve".into(),
                                },
                                AskOption {
                                    id: "request_changes".into(),
                                    label: "Request changes".into(),
                                },
                            ],
                            actor,
                            now,
                        )
                    };
                    tx.insert_ask(&ask).await?;
                    self.notify_ask(tx, &ask).await?;
                    let view = self.ask_full(tx, ask).await?;
                    events.push(self.append_ask(tx, "ask.opened", actor, &view).await?);
                    (view, true)
                }
            };
            let data = ApprovalData {
                artifact: &artifact,
                version,
                ask: Some(&view.id),
                by: actor,
                at: now,
            };
            let place = Place {
                project: &view.project,
                issue: view.issue.as_ref(),
                artifact: Some(&artifact),
            };
            let data = serde_json::to_value(data).unwrap_or_default();
            events.push(
                self.append_at(tx, "approval.requested", actor, place, data)
                    .await?,
            );
            Ok((ApprovalRequested { ask: view, created }, events))
        })?;
        self.document_committed(&events, None);
        Ok(out)
    }

    /// A person's review of a document's latest settled version (another version:
    /// DOCUMENT_CHANGED, naming the latest). It answers the open approval ask, if there is
    /// one, keeping its thread. Appends `approval.approved` or `approval.changes_requested`
    /// (and `ask.answered`).
    pub async fn review(
        &self,
        actor: &Actor,
        artifact: &str,
        r: ReviewIn,
    ) -> Result<(Review, Option<AskView>), Error> {
        self.review_answering(actor, artifact, r, None).await
    }

    /// A review that answers approval ask `ask` (the answer route on an approval ask), or
    /// with `None` the open approval ask if there is one.
    async fn review_answering(
        &self,
        actor: &Actor,
        artifact: &str,
        r: ReviewIn,
        ask: Option<&str>,
    ) -> Result<(Review, Option<AskView>), Error> {
        if !actor.is_human() {
            return Err(ErrorCode::HUMAN_ONLY.into());
        }
        let artifact = uuid_id(artifact, "artifact")?;
        let body = match r.body.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(b) if rules::chars(b) > TEXT_MAX => {
                return Err(cap("a review's body is at most 65536 characters"));
            }
            Some(b) => Some(b.to_owned()),
        };
        let now = self.now();
        let id = self.new_id();
        let (review, answered, events) = transact!(self, |tx| {
            // Any approval ask first (locks go ask, then document).
            let open = match ask {
                Some(id) => Some(id.to_owned()),
                None => tx
                    .asks(&AskFilter {
                        artifact: Some(artifact.clone()),
                        states: vec![AskState::Open],
                        ..Default::default()
                    })
                    .await?
                    .into_iter()
                    .find(|x| x.kind == AskKind::Approval)
                    .map(|x| x.id),
            };
            let open = match open {
                Some(id) => tx.ask(&id).await?,
                None => None,
            };
            let mut a = self.document_in(tx, &artifact).await?;
            let mut events = Vec::new();
            // Content due to settle is a version already.
            if !a.settled && self.now() - a.changed_at >= super::documents::settle_after() {
                self.settle_now(tx, &artifact, actor, &mut events).await?;
                a = self.document_in(tx, &artifact).await?;
            }
            let latest = a.version.as_ref().map_or(0, |v| v.number);
            if r.version != latest {
                return Err(Error::with_message(
                    ErrorCode::DOCUMENT_CHANGED,
                    format!("version {latest} is the latest settled version: review that one"),
                )
                .with_detail("version", latest)
                .with_detail("token", a.token.clone()));
            }
            let review = Review {
                id: id.clone(),
                artifact: artifact.clone(),
                version: latest,
                outcome: r.outcome,
                body: body.clone(),
                by: actor.clone(),
                at: now,
                ask: open.as_ref().map(|x| x.id.clone()),
            };
            tx.insert_review(&review).await?;
            let mut answered = None;
            if let Some(mut ask) = open {
                let answer = Answer {
                    options: vec![r.outcome.as_str().to_owned()],
                    text: body.clone(),
                    by: actor.clone(),
                    at: now,
                };
                tx.add_answer(&ask.id, &answer).await?;
                ask.answer = Some(answer);
                ask.state = AskState::Answered;
                // Answered: out of the inbox (issue 27).
                ask.turn = None;
                ask.turn_since = now;
                ask.updated_at = now;
                if r.outcome == ReviewOutcome::Approve
                    && let Some(ap) = ask.approval.as_mut()
                {
                    ap.approved = Some(Approved {
                        version: latest,
                        at: now,
                        by: actor.clone(),
                    });
                }
                tx.update_ask(&ask).await?;
                let view = self.ask_full(tx, ask).await?;
                events.push(self.append_ask(tx, "ask.answered", actor, &view).await?);
                answered = Some(view);
            }
            let kind = match r.outcome {
                ReviewOutcome::Approve => "approval.approved",
                ReviewOutcome::RequestChanges => "approval.changes_requested",
            };
            let data = ApprovalData {
                artifact: &artifact,
                version: latest,
                ask: review.ask.as_deref(),
                by: actor,
                at: now,
            };
            let project = a.scope.project().ok_or_else(no_document)?;
            let place = Place {
                project: &project,
                issue: a.scope.issue(),
                artifact: Some(&artifact),
            };
            let data = serde_json::to_value(data).unwrap_or_default();
            events.push(self.append_at(tx, kind, actor, place, data).await?);
            Ok((review, answered, events))
        })?;
        self.document_committed(&events, None);
        Ok((review, answered))
    }

    /// A document's reviews, oldest first.
    pub async fn reviews(&self, artifact: &str) -> Result<Vec<Review>, Error> {
        let artifact = uuid_id(artifact, "artifact")?;
        let mut tx = self.parts.storage.read().await?;
        self.document_in(&mut *tx, &artifact).await?;
        Ok(tx.reviews(&artifact).await?)
    }
}
