//! The console's messages area: targeted messages, broadcasts, delivery attempts, threads and
//! per-agent conversation state (issue 14; spec "Broadcasts and session messages", "Message
//! accept rules", "Inbox and read state"; protocol §4.2, §6.4), as one service, [`Messages`],
//! reached as [`Console::messages`]. Each write runs in one transaction (`transact!`, the
//! area's store `tx.messages()`) and appends its event there; on an issue, the events are in
//! the issue's log.
//!
//! - this module: the service, the checks, and what every operation shares (a message's view
//!   with its attempts and replies, its event, its attempts opened);
//! - [`sends`]: messages on an issue and to a session, the broker's expiry notice, retries and
//!   a session's replies;
//! - [`threads`]: one message on an issue, a thread, a session's messages;
//! - [`accept`]: a session accepting an attempt, the nine conditions as one compare-and-set;
//! - [`broadcasts`]: one message to many sessions under an idempotency key;
//! - [`delivery`]: the delivery machinery every kind shares (messages here, comment mentions
//!   in asks);
//! - [`presence`]: which sessions are live, shared by every replica, and the [`Presence`] of
//!   this replica's links;
//! - [`inbox`]: the inbox's threads, read marks and the per-agent state.

use super::unit::AfterCommit;
use super::work::not_found;
use super::*;
use crate::ids::{BroadcastId, MessageId, SessionId};
use crate::work::messages::{
    Attempt, AttemptView, Deliverable, DeliveryContent, Message, MessageView, Mode, Target,
};
use crate::work::{Actor, Event, EventFacts, IssueKey, NewEvent, WorkTx, rules};

mod accept;
mod broadcasts;
mod delivery;
mod inbox;
mod presence;
mod sends;
mod threads;

pub use broadcasts::NewBroadcast;
#[allow(unused_imports)]
pub(crate) use delivery::NewAttempt;
pub use delivery::{ACK_WITHIN, Ack};
pub use inbox::AgentPatch;
pub use presence::{LIVE_FOR, LinkNotice, Presence};

/// The longest message, reply or broadcast body (protocol §2), in characters.
pub const BODY_MAX: usize = 65_536;

pub(crate) fn message_input(message: impl Into<String>) -> Error {
    Error::with_message(ErrorCode::MESSAGE_INPUT, message)
}

/// A message body: not blank, at most [`BODY_MAX`] characters.
pub(crate) fn check_body(body: &str) -> Result<(), Error> {
    if body.trim().is_empty() {
        return Err(message_input("`body` holds some text"));
    }
    if rules::chars(body) > BODY_MAX {
        return Err(Error::with_message(
            ErrorCode::CAP_EXCEEDED,
            "a message body is at most 65,536 characters",
        ));
    }
    Ok(())
}

pub use crate::ids::is_session_id;

fn no_message() -> Error {
    Error::with_message(ErrorCode::NOT_FOUND, "no such message")
}

/// The session an agent actor acts for: a session's reply and accept need one.
fn session_of(actor: &Actor) -> Result<SessionId, Error> {
    actor
        .session()
        .cloned()
        .ok_or_else(|| Error::new(ErrorCode::INVALID_SESSION_ID))
}

/// A message's view from its thread's messages and their attempts: its replies (children)
/// nested, oldest first.
fn view_of(m: &Message, all: &[Message], attempts: &[Attempt]) -> MessageView {
    let item = Deliverable::Message(m.id);
    MessageView {
        id: m.id,
        thread_id: m.thread_id,
        parent: m.parent,
        issue: m.issue.clone(),
        broadcast: m.broadcast,
        target: m.target.clone(),
        delivery: m.delivery,
        body: m.body.clone(),
        notice: m.notice.clone(),
        author: m.author.clone(),
        deliveries: attempts
            .iter()
            .filter(|a| a.item == item)
            .map(AttemptView::from)
            .collect(),
        replies: all
            .iter()
            .filter(|r| r.parent == Some(m.id))
            .map(|r| view_of(r, all, attempts))
            .collect(),
        created_at: m.created_at,
        duplicate: None,
    }
}

/// The messages area's operations over the console they belong to:
/// `console.messages().thread(caller, id)`. It borrows the console (its storage, clock,
/// entropy, this replica's [`Presence`], and the documents area a message's mentions are
/// written through in its transaction) and holds nothing of its own.
#[derive(Debug, Clone, Copy)]
pub struct Messages<'c> {
    console: &'c Console,
}

impl Console {
    /// The messages area: messages, broadcasts, delivery attempts, presence, the inbox's
    /// threads and per-agent state.
    pub fn messages(&self) -> Messages<'_> {
        Messages { console: self }
    }
}

impl Messages<'_> {
    /// A read transaction, seen as the area sees one.
    async fn read(&self) -> Result<Box<dyn WorkTx>, Error> {
        let tx: Box<dyn WorkTx> = self.console.parts.storage.read().await?;
        Ok(tx)
    }

    /// Views of `messages`, each with its attempts and replies, read in `tx` (two queries for
    /// any number of messages).
    async fn views(
        &self,
        tx: &mut dyn WorkTx,
        messages: &[Message],
    ) -> Result<Vec<MessageView>, Error> {
        let mut threads: Vec<MessageId> = messages.iter().map(|m| m.thread_id).collect();
        threads.sort();
        threads.dedup();
        let all = tx.messages().thread_messages(&threads).await?;
        let items: Vec<Deliverable> = all.iter().map(|m| Deliverable::Message(m.id)).collect();
        let attempts = tx.attempts().attempts(&items).await?;
        Ok(messages
            .iter()
            .map(|m| view_of(m, &all, &attempts))
            .collect())
    }

    /// One message's view, as [`Messages::views`] reads it.
    async fn view(&self, tx: &mut dyn WorkTx, m: &Message) -> Result<MessageView, Error> {
        Ok(self
            .views(tx, std::slice::from_ref(m))
            .await?
            .pop()
            .unwrap_or_else(|| view_of(m, &[], &[])))
    }

    /// Appends a message event (`message.sent`, `message.replied`, `message.accepted`) in the
    /// message's scope: on an issue, in its log.
    async fn append(
        &self,
        tx: &mut dyn WorkTx,
        kind: &'static str,
        actor: &Actor,
        m: &Message,
        data: serde_json::Value,
    ) -> Result<Event, Error> {
        let sequence = match &m.issue {
            Some(k) => tx.messages().bump_issue_sequence(k).await?,
            None => None,
        };
        let e = NewEvent {
            kind,
            facts: EventFacts {
                at: self.console.now(),
                actor: actor.clone(),
                project: m.issue.as_ref().map(IssueKey::project),
                issue: sequence.and(m.issue.clone()),
                artifact: None,
                session: actor.session().cloned(),
                data,
            },
        };
        Ok(tx.events().append_event(&e, sequence).await?)
    }

    /// Keeps the mention edges of a message's body (the documents area's), with the event
    /// that wrote it.
    async fn keep_mentions(
        &self,
        tx: &mut dyn WorkTx,
        m: &Message,
        event: &Event,
    ) -> Result<(), Error> {
        let from = format!("countersign://message/{}", m.id);
        self.console
            .documents()
            .keep_mentions(tx, &from, m.issue.as_ref(), (&m.body, false), event)
            .await
    }

    /// What a session receives for a message.
    fn content(m: &Message, mode: Mode) -> DeliveryContent {
        DeliveryContent {
            thread_id: m.thread_id.to_string(),
            issue: m.issue.as_ref().map(|k| k.as_str().to_owned()),
            mode,
            author: m.author.clone(),
            body: m.body.clone(),
            notice: m.notice.clone(),
        }
    }

    /// Opens one attempt of a targeted message per session it reaches now: its session, or
    /// every live session advertising its role (each pending one dispatched by `after` once
    /// the transaction commits). A target is text (a body's); a stored one was refused
    /// (INVALID_SESSION_ID) unless it was a session id.
    async fn attempt(
        &self,
        tx: &mut dyn WorkTx,
        after: &mut AfterCommit,
        m: &Message,
        requested_by: &Actor,
    ) -> Result<Vec<Attempt>, Error> {
        let sessions = match &m.target {
            Some(Target::Session(s)) => vec![SessionId::named(s)?],
            Some(Target::Role(r)) => self.holders_in(tx, r).await?,
            None => return Ok(Vec::new()),
        };
        let mode = m.delivery.unwrap_or(Mode::Send);
        let content = Self::content(m, mode);
        let scope = m.scope();
        let mut opened = Vec::with_capacity(sessions.len());
        for s in &sessions {
            let new = NewAttempt {
                item: Deliverable::Message(m.id),
                session_id: s,
                mode,
                requested_by,
                content: &content,
                scope: &scope,
            };
            opened.push(self.open_attempt(tx, after, &new).await?);
        }
        Ok(opened)
    }

    /// A new targeted message by `author`, the root of its own thread, written now.
    fn targeted(
        &self,
        author: &Actor,
        issue: Option<IssueKey>,
        target: Target,
        delivery: Mode,
        body: &str,
    ) -> Message {
        let id = self.console.new_id(MessageId::from_random);
        Message {
            thread_id: id,
            id,
            parent: None,
            issue,
            broadcast: None,
            target: Some(target),
            delivery: Some(delivery),
            body: body.to_owned(),
            notice: None,
            author: author.clone(),
            created_at: self.console.now(),
        }
    }
}
