//! The console's operations on targeted messages, broadcasts, delivery attempts, threads and
//! per-agent conversation state (issue 14; spec "Broadcasts and session messages", "Message
//! accept rules", "Inbox and read state"; protocol §4.2, §6.4). Each write runs in one
//! transaction (`transact!`) and appends its event there; on an issue, the events are in the
//! issue's log.
//!
//! - [`delivery`]: the delivery machinery every kind shares (messages here, comment mentions
//!   in asks).
//! - [`broadcasts`]: one message to many sessions under an idempotency key.
//! - [`accept`]: the nine conditions of accepting an attempt, as one compare-and-set.

use serde_json::json;

use super::work::not_found;
use super::*;
use crate::work::messages::{
    Accepted, Attempt, AttemptView, DeliveryContent, DeliveryKind, ExpiryNotice, Message,
    MessageView, Mode, Target, Thread,
};
use crate::work::{Actor, Event, IssueKey, NewEvent, WorkTx, rules};

mod accept;
mod broadcasts;
mod delivery;
mod inbox;
mod presence;

pub use broadcasts::NewBroadcast;
pub use delivery::{ACK_WITHIN, Ack};
#[allow(unused_imports)]
pub(crate) use delivery::{NewAttempt, Opened};
pub use inbox::AgentPatch;
pub use presence::{LIVE_FOR, LinkNotice};

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

pub(crate) fn check_session(s: &str) -> Result<(), Error> {
    if is_session_id(s) {
        Ok(())
    } else {
        Err(ErrorCode::INVALID_SESSION_ID.into())
    }
}

/// A UUID in any case, written lowercase; `None` when it is not one.
pub(crate) fn uuid_of(s: &str) -> Option<String> {
    crate::ids::uuid_id(s)
}

fn no_message() -> Error {
    Error::with_message(ErrorCode::NOT_FOUND, "no such message")
}

/// A message's view from its thread's messages and their attempts: its replies (children)
/// nested, oldest first.
fn view_of(m: &Message, all: &[Message], attempts: &[Attempt]) -> MessageView {
    MessageView {
        id: m.id.clone(),
        thread_id: m.thread_id.clone(),
        parent: m.parent.clone(),
        issue: m.issue.clone(),
        broadcast: m.broadcast.clone(),
        target: m.target.clone(),
        delivery: m.delivery,
        body: m.body.clone(),
        notice: m.notice.clone(),
        author: m.author.clone(),
        deliveries: attempts
            .iter()
            .filter(|a| a.id == m.id)
            .map(AttemptView::from)
            .collect(),
        replies: all
            .iter()
            .filter(|r| r.parent.as_deref() == Some(m.id.as_str()))
            .map(|r| view_of(r, all, attempts))
            .collect(),
        created_at: m.created_at,
        duplicate: None,
    }
}

impl Console {
    /// A fresh id (UUID v4 from the console's entropy).
    pub(crate) fn fresh_message_id(&self) -> String {
        uuid::Builder::from_random_bytes(clock::random::<16>(&*self.parts.entropy))
            .into_uuid()
            .to_string()
    }

    /// Views of `messages`, each with its attempts and replies, read in `tx` (two queries for
    /// any number of messages).
    pub(crate) async fn message_views(
        &self,
        tx: &mut dyn WorkTx,
        messages: &[Message],
    ) -> Result<Vec<MessageView>, Error> {
        let mut threads: Vec<String> = messages.iter().map(|m| m.thread_id.clone()).collect();
        threads.sort();
        threads.dedup();
        let all = tx.thread_messages(&threads).await?;
        let ids: Vec<String> = all.iter().map(|m| m.id.clone()).collect();
        let attempts = tx.attempts(DeliveryKind::Message, &ids).await?;
        Ok(messages
            .iter()
            .map(|m| view_of(m, &all, &attempts))
            .collect())
    }

    async fn message_view(&self, tx: &mut dyn WorkTx, m: &Message) -> Result<MessageView, Error> {
        Ok(self
            .message_views(tx, std::slice::from_ref(m))
            .await?
            .pop()
            .unwrap_or_else(|| view_of(m, &[], &[])))
    }

    /// Appends a message event (`message.sent`, `message.replied`, `message.accepted`) in the
    /// message's scope: on an issue, in its log.
    pub(crate) async fn message_event(
        &self,
        tx: &mut dyn WorkTx,
        kind: &'static str,
        actor: &Actor,
        m: &Message,
        data: serde_json::Value,
    ) -> Result<Event, Error> {
        let sequence = match &m.issue {
            Some(k) => tx.bump_issue_sequence(k).await?,
            None => None,
        };
        let e = NewEvent {
            kind,
            at: self.now(),
            actor: actor.clone(),
            project: m.issue.as_ref().map(IssueKey::project),
            issue: sequence.and(m.issue.clone()),
            artifact: None,
            session: actor.session().map(str::to_owned),
            data,
        };
        Ok(tx.append_event(&e, sequence).await?)
    }

    /// What a session receives for a message.
    fn message_content(m: &Message, mode: Mode) -> DeliveryContent {
        DeliveryContent {
            thread_id: m.thread_id.clone(),
            issue: m.issue.as_ref().map(|k| k.as_str().to_owned()),
            mode,
            author: m.author.clone(),
            body: m.body.clone(),
            notice: m.notice.clone(),
        }
    }

    /// Opens one attempt of a targeted message per session it reaches now: its session, or
    /// every live session advertising its role.
    async fn attempt_message(
        &self,
        tx: &mut dyn WorkTx,
        m: &Message,
        requested_by: &Actor,
    ) -> Result<Vec<Opened>, Error> {
        let sessions = match &m.target {
            Some(Target::Session(s)) => vec![s.clone()],
            Some(Target::Role(r)) => self.holders_in(tx, r).await?,
            None => return Ok(Vec::new()),
        };
        let mode = m.delivery.unwrap_or(Mode::Send);
        let content = Self::message_content(m, mode);
        let scope = m.scope();
        let mut opened = Vec::with_capacity(sessions.len());
        for s in &sessions {
            let new = NewAttempt {
                kind: DeliveryKind::Message,
                id: &m.id,
                session_id: s,
                mode,
                requested_by,
                content: &content,
                scope: &scope,
            };
            opened.push(self.open_attempt(tx, &new).await?);
        }
        Ok(opened)
    }

    /// Writes a new targeted message, appends `message.sent` (with the body), opens its
    /// attempts, and after the commit hands them to the links.
    pub(crate) async fn send_message(&self, m: Message) -> Result<MessageView, Error> {
        self.send_message_once(m, None)
            .await?
            .ok_or_else(|| Error::new(ErrorCode::INTERNAL))
    }

    /// [`Console::send_message`], kept with `webhook_id` when given: `None` (nothing sent)
    /// when that id made a message already.
    async fn send_message_once(
        &self,
        m: Message,
        webhook_id: Option<&str>,
    ) -> Result<Option<MessageView>, Error> {
        let done = transact!(self, |tx| {
            if let Some(w) = webhook_id
                && !tx.insert_webhook(w, &m.id, m.created_at).await?
            {
                return Ok(None);
            }
            if let Some(k) = &m.issue
                && tx.issue(k).await?.is_none()
            {
                return Err(not_found("issue"));
            }
            tx.insert_message(&m).await?;
            let data = json!(view_of(&m, &[], &[]));
            let sent = self
                .message_event(tx, "message.sent", &m.author, &m, data)
                .await?;
            let from = format!("countersign://message/{}", m.id);
            self.documents()
                .keep_mentions(tx, &from, m.issue.as_ref(), (&m.body, false), &sent)
                .await?;
            let opened = self.attempt_message(tx, &m, &m.author).await?;
            let view = self.message_view(tx, &m).await?;
            Ok(Some((view, opened, sent)))
        })?;
        let Some((view, opened, sent)) = done else {
            return Ok(None);
        };
        self.event_committed(sent.id);
        self.dispatch(&opened).await;
        Ok(Some(view))
    }

    /// The broker's expiry notice (protocol §8; its signature verified by the caller): one
    /// issue-less `send` message to the session, authored by `{kind: system, name: broker}`,
    /// with the notice beside its body. A webhook id seen before makes nothing (`false`).
    pub async fn broker_expired(&self, webhook_id: &str, n: ExpiryNotice) -> Result<bool, Error> {
        check_session(&n.session_id)?;
        let body = format!(
            "Credential request {} for {} expired undecided at {}.",
            n.request_id,
            n.identifiers.join(", "),
            n.expired_at
        );
        let author = Actor::System {
            name: "broker".into(),
        };
        let mut m = self.targeted_message(
            &author,
            None,
            Target::Session(n.session_id.clone()),
            Mode::Send,
            &body,
        );
        m.notice = Some(json!(n));
        Ok(self.send_message_once(m, Some(webhook_id)).await?.is_some())
    }

    fn targeted_message(
        &self,
        author: &Actor,
        issue: Option<IssueKey>,
        target: Target,
        delivery: Mode,
        body: &str,
    ) -> Message {
        let id = self.fresh_message_id();
        Message {
            thread_id: id.clone(),
            id,
            parent: None,
            issue,
            broadcast: None,
            target: Some(target),
            delivery: Some(delivery),
            body: body.to_owned(),
            notice: None,
            author: author.clone(),
            created_at: self.now(),
        }
    }

    /// Posts a message on an issue to a session or to a role (one attempt per live session
    /// advertising it); `delivery` defaults to `send`.
    pub async fn issue_message(
        &self,
        actor: &Actor,
        key: &str,
        body: &str,
        target: Target,
        delivery: Option<Mode>,
    ) -> Result<MessageView, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        check_body(body)?;
        match &target {
            Target::Session(s) => check_session(s)?,
            Target::Role(r) if !is_role(r) => {
                return Err(message_input(
                    "a target role is a role name: ^[a-z][a-z0-9._-]{0,63}$",
                ));
            }
            Target::Role(_) => {}
        }
        let m = self.targeted_message(
            actor,
            Some(key),
            target,
            delivery.unwrap_or(Mode::Send),
            body,
        );
        self.send_message(m).await
    }

    /// Sends an issue-less targeted message from a person to a session.
    pub async fn session_message(
        &self,
        human: &Human,
        session: &str,
        body: &str,
        delivery: Option<Mode>,
    ) -> Result<MessageView, Error> {
        check_session(session)?;
        check_body(body)?;
        let author = Actor::User {
            login: human.login.clone(),
        };
        let m = self.targeted_message(
            &author,
            None,
            Target::Session(session.to_owned()),
            delivery.unwrap_or(Mode::Send),
            body,
        );
        self.send_message(m).await
    }

    /// One message on an issue, with its attempts and replies.
    pub async fn message_on_issue(&self, key: &str, id: &str) -> Result<MessageView, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let id = uuid_of(id).ok_or_else(no_message)?;
        let mut tx = self.parts.storage.read().await?;
        let m = tx
            .message(&id)
            .await?
            .filter(|m| m.issue.as_ref() == Some(&key))
            .ok_or_else(no_message)?;
        self.message_view(&mut *tx, &m).await
    }

    /// Retries a targeted message: one new attempt per session it reaches now (its session,
    /// or every live session advertising its role), requested by `actor`.
    pub async fn retry_message(&self, actor: &Actor, id: &str) -> Result<Vec<AttemptView>, Error> {
        let id = uuid_of(id).ok_or_else(no_message)?;
        let opened = transact!(self, |tx| {
            let m = tx
                .message(&id)
                .await?
                .filter(|m| m.target.is_some())
                .ok_or_else(|| {
                    Error::with_message(ErrorCode::NOT_FOUND, "no targeted message has this id")
                })?;
            self.attempt_message(tx, &m, actor).await
        })?;
        self.dispatch(&opened).await;
        Ok(opened
            .iter()
            .map(|o| AttemptView::from(&o.attempt))
            .collect())
    }

    /// A session's reply to a message delivered to it. The first posts (created); after
    /// that, `follow_up` true posts other text as a follow-up under the first reply, and
    /// anything else (false or absent, or text already posted there) posts nothing and answers
    /// the stored message marked `duplicate`.
    pub async fn reply_to_message(
        &self,
        actor: &Actor,
        id: &str,
        body: &str,
        follow_up: bool,
    ) -> Result<(MessageView, bool), Error> {
        let session = actor
            .session()
            .ok_or_else(|| Error::new(ErrorCode::INVALID_SESSION_ID))?
            .to_owned();
        check_body(body)?;
        let id = uuid_of(id).ok_or_else(no_message)?;
        let (view, created, event) = transact!(self, |tx| {
            let m = tx.message(&id).await?.ok_or_else(no_message)?;
            let attempts = tx
                .attempts(DeliveryKind::Message, std::slice::from_ref(&m.id))
                .await?;
            if !attempts.iter().any(|a| a.session_id == session) {
                return Err(Error::with_message(
                    ErrorCode::SESSION_FORBIDDEN,
                    "only a session the message was delivered to replies to it",
                ));
            }
            let thread = tx
                .thread_messages(std::slice::from_ref(&m.thread_id))
                .await?;
            let by_session = |x: &&Message| x.author_session() == Some(session.as_str());
            let first = thread
                .iter()
                .filter(by_session)
                .find(|x| x.parent.as_deref() == Some(m.id.as_str()))
                .cloned();
            let parent = match &first {
                None => m.id.clone(),
                Some(first) => {
                    let posted = std::iter::once(first).chain(
                        thread
                            .iter()
                            .filter(by_session)
                            .filter(|x| x.parent.as_deref() == Some(first.id.as_str())),
                    );
                    let same = posted.clone().find(|x| x.body == body).cloned();
                    if !follow_up || same.is_some() {
                        let stored = same.unwrap_or_else(|| first.clone());
                        let mut v = self.message_view(tx, &stored).await?;
                        v.duplicate = Some(true);
                        return Ok((v, false, None));
                    }
                    first.id.clone()
                }
            };
            let r = Message {
                id: self.fresh_message_id(),
                thread_id: m.thread_id.clone(),
                parent: Some(parent),
                issue: m.issue.clone(),
                broadcast: None,
                target: None,
                delivery: None,
                body: body.to_owned(),
                notice: None,
                author: actor.clone(),
                created_at: self.now(),
            };
            tx.insert_message(&r).await?;
            let v = self.message_view(tx, &r).await?;
            let e = self
                .message_event(tx, "message.replied", actor, &r, json!(v))
                .await?;
            let from = format!("countersign://message/{}", r.id);
            self.documents()
                .keep_mentions(tx, &from, r.issue.as_ref(), (&r.body, false), &e)
                .await?;
            Ok((v, true, Some(e)))
        })?;
        if let Some(e) = event {
            self.event_committed(e.id);
        }
        Ok((view, created))
    }

    /// The conversation a message belongs to, by any of its messages' ids: the root with its
    /// deliveries, and every other message, oldest first. On a direct thread (no issue) a
    /// bearer names its session, which must be the root's target or have replied in it
    /// (THREAD_FORBIDDEN): a guard against mistakes, not an authorization boundary.
    pub async fn message_thread(&self, caller: &Actor, id: &str) -> Result<Thread, Error> {
        let id = uuid_of(id).ok_or_else(no_message)?;
        let mut tx = self.parts.storage.read().await?;
        let m = tx.message(&id).await?.ok_or_else(no_message)?;
        let all = tx
            .thread_messages(std::slice::from_ref(&m.thread_id))
            .await?;
        let root = all
            .iter()
            .find(|x| x.id == m.thread_id)
            .cloned()
            .ok_or_else(no_message)?;
        if root.issue.is_none()
            && let Actor::Agent { session, .. } = caller
        {
            let session = session.as_deref().ok_or_else(|| {
                Error::with_message(
                    ErrorCode::INVALID_SESSION_ID,
                    "on a direct thread, name your session in `?session=`",
                )
            })?;
            let targets = root.target == Some(Target::Session(session.to_owned()));
            let replied = all.iter().any(|x| x.author_session() == Some(session));
            if !targets && !replied {
                return Err(ErrorCode::THREAD_FORBIDDEN.into());
            }
        }
        let ids: Vec<String> = all.iter().map(|x| x.id.clone()).collect();
        let attempts = tx.attempts(DeliveryKind::Message, &ids).await?;
        Ok(Thread {
            root: view_of(&root, &all, &attempts),
            replies: all
                .iter()
                .filter(|x| x.id != root.id)
                .map(|x| view_of(x, &all, &attempts))
                .collect(),
        })
    }

    /// A session's targeted messages (to it, or to a role it received), newest first.
    pub async fn messages_of_session(
        &self,
        session: &str,
        limit: u32,
        offset: u32,
    ) -> Result<Vec<MessageView>, Error> {
        check_session(session)?;
        let mut tx = self.parts.storage.read().await?;
        let ms = tx.session_messages(session, limit, offset).await?;
        self.message_views(&mut *tx, &ms).await
    }

    /// The targeted session accepts a delivery attempt (spec, "Message accept rules"): see
    /// [`accept::refusal`].
    pub async fn accept_delivery(
        &self,
        actor: &Actor,
        id: &str,
        attempt: &str,
        accepted_as: Option<Mode>,
    ) -> Result<Accepted, Error> {
        let session = actor
            .session()
            .ok_or_else(|| Error::new(ErrorCode::INVALID_SESSION_ID))?
            .to_owned();
        if accepted_as == Some(Mode::Send) {
            return Err(message_input("`as` is aside or steer"));
        }
        let id = uuid_of(id).ok_or_else(no_message)?;
        let number = attempt
            .parse::<i64>()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| Error::with_message(ErrorCode::NOT_FOUND, "no such attempt"))?;
        let now = self.now();
        let (accepted, event) = transact!(self, |tx| {
            let m = tx.message(&id).await?.ok_or_else(no_message)?;
            let root = if m.thread_id == m.id {
                m.clone()
            } else {
                tx.message(&m.thread_id).await?.ok_or_else(no_message)?
            };
            let attempts = tx
                .attempts(DeliveryKind::Message, std::slice::from_ref(&m.id))
                .await?;
            let a = attempts
                .iter()
                .find(|a| a.attempt == number)
                .cloned()
                .ok_or_else(|| Error::with_message(ErrorCode::NOT_FOUND, "no such attempt"))?;
            if a.session_id != session {
                return Err(ErrorCode::ACCEPT_FORBIDDEN.into());
            }
            if let Some(code) = accept::refusal(&m, &root, &attempts, &a, &session, now) {
                return Err(code.into());
            }
            let mode = accepted_as.unwrap_or(a.mode);
            tx.accept_attempt(DeliveryKind::Message, &m.id, a.attempt, now, mode)
                .await?;
            let mut done = a.clone();
            done.accepted_at = Some(now);
            done.accepted_as = Some(mode);
            let data = json!({
                "message": m.id,
                "attempt": a.attempt,
                "session_id": session,
                "accepted_at": crate::work::model::rfc3339::format(&now),
                "accepted_as": mode,
            });
            let e = self
                .message_event(tx, "message.accepted", actor, &m, data)
                .await?;
            Ok((
                Accepted {
                    attempt: AttemptView::from(&done),
                    body: m.body.clone(),
                },
                e,
            ))
        })?;
        self.event_committed(event.id);
        Ok(accepted)
    }
}
