//! Sending: a message on an issue (to a session or a role), an issue-less message from a
//! person to a session, the broker's expiry notice, a retry of a targeted message, and a
//! session's reply (the first, a follow-up, or the one it posted already).

use serde_json::json;

use super::*;
use crate::work::messages::ExpiryNotice;

/// Where a session's reply goes ([`reply_place`]).
#[derive(Debug, Clone, Copy, PartialEq)]
enum ReplyPlace<'t> {
    /// Post it under this message: the one replied to (a first reply), or the session's first
    /// reply to it (a follow-up).
    Under(MessageId),
    /// Post nothing: the session posted this already (the same text, or no follow-up asked).
    Posted(&'t Message),
}

/// Where `session`'s reply `body` to `m` goes, from `m`'s thread as stored: a first reply goes
/// under `m`; after it, a follow-up (`follow_up`) with new text goes under the first reply,
/// and anything else is the reply already posted (the one with this text, else the first).
fn reply_place<'t>(
    thread: &'t [Message],
    m: &'t Message,
    session: &SessionId,
    body: &str,
    follow_up: bool,
) -> ReplyPlace<'t> {
    let by_session = |x: &&Message| x.author_session() == Some(session);
    let under = |parent: MessageId| {
        thread
            .iter()
            .filter(by_session)
            .filter(move |x| x.parent == Some(parent))
    };
    let Some(first) = under(m.id).next() else {
        return ReplyPlace::Under(m.id);
    };
    let same = std::iter::once(first)
        .chain(under(first.id))
        .find(|x| x.body == body);
    match (follow_up, same) {
        (true, None) => ReplyPlace::Under(first.id),
        (_, same) => ReplyPlace::Posted(same.unwrap_or(first)),
    }
}

impl Messages<'_> {
    /// Writes a new targeted message, appends `message.sent` (with the body) and opens its
    /// attempts (the unit of work hands them to the links after the commit).
    async fn send(&self, m: Message) -> Result<MessageView, Error> {
        self.send_once(m, None)
            .await?
            .ok_or_else(|| Error::new(ErrorCode::INTERNAL))
    }

    /// [`Messages::send`], kept with `webhook_id` when given: `None` (nothing sent) when that
    /// id made a message already.
    async fn send_once(
        &self,
        m: Message,
        webhook_id: Option<&str>,
    ) -> Result<Option<MessageView>, Error> {
        transact!(self.console, |tx, after| {
            if let Some(w) = webhook_id
                && !tx.messages().insert_webhook(w, m.id, m.created_at).await?
            {
                return Ok(None);
            }
            if let Some(k) = &m.issue
                && tx.issues().issue(k).await?.is_none()
            {
                return Err(not_found("issue"));
            }
            tx.messages().insert_message(&m).await?;
            let data = json!(view_of(&m, &[], &[]));
            let sent = self.append(tx, "message.sent", &m.author, &m, data).await?;
            self.keep_mentions(tx, &m, &sent).await?;
            self.attempt(tx, after, &m, &m.author).await?;
            Ok(Some(self.view(tx, &m).await?))
        })
    }

    /// The broker's expiry notice (protocol §8; its signature verified by the caller): one
    /// issue-less `send` message to the session, authored by `{kind: system, name: broker}`,
    /// with the notice beside its body. A webhook id seen before makes nothing (`false`).
    pub async fn broker_expired(&self, webhook_id: &str, n: ExpiryNotice) -> Result<bool, Error> {
        let body = format!(
            "Credential request {} for {} expired undecided at {}.",
            n.request_id,
            n.identifiers.join(", "),
            n.expired_at
        );
        let author = Actor::System {
            name: "broker".into(),
        };
        let mut m = self.targeted(
            &author,
            None,
            Target::Session(n.session_id.to_string()),
            Mode::Send,
            &body,
        );
        m.notice = Some(json!(n));
        Ok(self.send_once(m, Some(webhook_id)).await?.is_some())
    }

    /// Posts a message on an issue to a session or to a role (one attempt per live session
    /// advertising it); `delivery` defaults to `send`.
    pub async fn post_on_issue(
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
            Target::Session(s) => {
                SessionId::named(s)?;
            }
            Target::Role(r) if !is_role(r) => {
                return Err(message_input(
                    "a target role is a role name: ^[a-z][a-z0-9._-]{0,63}$",
                ));
            }
            Target::Role(_) => {}
        }
        let m = self.targeted(
            actor,
            Some(key),
            target,
            delivery.unwrap_or(Mode::Send),
            body,
        );
        self.send(m).await
    }

    /// Sends an issue-less targeted message from a person to a session.
    pub async fn send_to_session(
        &self,
        human: &Human,
        session: &SessionId,
        body: &str,
        delivery: Option<Mode>,
    ) -> Result<MessageView, Error> {
        check_body(body)?;
        let author = Actor::User {
            login: human.login.clone(),
        };
        let m = self.targeted(
            &author,
            None,
            Target::Session(session.to_string()),
            delivery.unwrap_or(Mode::Send),
            body,
        );
        self.send(m).await
    }

    /// Retries a targeted message: one new attempt per session it reaches now (its session,
    /// or every live session advertising its role), requested by `actor`.
    pub async fn retry(&self, actor: &Actor, id: MessageId) -> Result<Vec<AttemptView>, Error> {
        let opened = transact!(self.console, |tx, after| {
            let m = tx
                .messages()
                .message(id)
                .await?
                .filter(|m| m.target.is_some())
                .ok_or_else(|| {
                    Error::with_message(ErrorCode::NOT_FOUND, "no targeted message has this id")
                })?;
            self.attempt(tx, after, &m, actor).await
        })?;
        Ok(opened.iter().map(AttemptView::from).collect())
    }

    /// A session's reply to a message delivered to it. The first posts (created); after
    /// that, `follow_up` true posts other text as a follow-up under the first reply, and
    /// anything else (false or absent, or text already posted there) posts nothing and answers
    /// the stored message marked `duplicate` ([`reply_place`]).
    pub async fn reply(
        &self,
        actor: &Actor,
        id: MessageId,
        body: &str,
        follow_up: bool,
    ) -> Result<(MessageView, bool), Error> {
        let session = session_of(actor)?;
        check_body(body)?;
        transact!(self.console, |tx| {
            let m = tx.messages().message(id).await?.ok_or_else(no_message)?;
            self.check_delivered(tx, &m, &session).await?;
            let thread = tx
                .messages()
                .thread_messages(std::slice::from_ref(&m.thread_id))
                .await?;
            match reply_place(&thread, &m, &session, body, follow_up) {
                ReplyPlace::Posted(stored) => {
                    let mut v = self.view(tx, stored).await?;
                    v.duplicate = Some(true);
                    Ok((v, false))
                }
                ReplyPlace::Under(parent) => {
                    let (v, _) = self.post_reply(tx, actor, &m, parent, body).await?;
                    Ok((v, true))
                }
            }
        })
    }

    /// Refuses a reply from a session `m` was never delivered to (no attempt of `m` is its):
    /// SESSION_FORBIDDEN.
    async fn check_delivered(
        &self,
        tx: &mut dyn WorkTx,
        m: &Message,
        session: &SessionId,
    ) -> Result<(), Error> {
        let attempts = tx
            .attempts()
            .attempts(&[Deliverable::Message(m.id)])
            .await?;
        if attempts.iter().any(|a| a.session_id == *session) {
            return Ok(());
        }
        Err(Error::with_message(
            ErrorCode::SESSION_FORBIDDEN,
            "only a session the message was delivered to replies to it",
        ))
    }

    /// Writes a reply to `m` under `parent` in `m`'s thread, with its `message.replied` event
    /// (the reply's view as its data) and the mention edges of its body.
    async fn post_reply(
        &self,
        tx: &mut dyn WorkTx,
        actor: &Actor,
        m: &Message,
        parent: MessageId,
        body: &str,
    ) -> Result<(MessageView, Event), Error> {
        let r = Message {
            id: self.console.new_id(MessageId::from_random),
            thread_id: m.thread_id,
            parent: Some(parent),
            issue: m.issue.clone(),
            broadcast: None,
            target: None,
            delivery: None,
            body: body.to_owned(),
            notice: None,
            author: actor.clone(),
            created_at: self.console.now(),
        };
        tx.messages().insert_message(&r).await?;
        let v = self.view(tx, &r).await?;
        let e = self
            .append(tx, "message.replied", actor, &r, json!(v))
            .await?;
        self.keep_mentions(tx, &r, &e).await?;
        Ok((v, e))
    }
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;

    /// The message id a test names `name` (its bytes, padded).
    fn id(name: &str) -> MessageId {
        let mut bytes = [0u8; 16];
        for (b, n) in bytes.iter_mut().zip(name.bytes()) {
            *b = n;
        }
        MessageId::from_random(bytes)
    }

    fn sid(s: &str) -> SessionId {
        SessionId::parse(s).unwrap_or_else(|| panic!("{s}"))
    }

    /// A message `id` under `parent` in thread `t`, by session `by` (or by a person).
    fn msg(id: &str, parent: Option<&str>, by: Option<&str>, body: &str) -> Message {
        let author = match by {
            Some(s) => Actor::Agent {
                owner: None,
                service: None,
                session: Some(sid(s)),
            },
            None => Actor::System {
                name: "broker".into(),
            },
        };
        Message {
            id: self::id(id),
            thread_id: self::id("t"),
            parent: parent.map(self::id),
            issue: None,
            broadcast: None,
            target: None,
            delivery: None,
            body: body.into(),
            notice: None,
            author,
            created_at: chrono::Utc
                .timestamp_opt(0, 0)
                .single()
                .unwrap_or_else(|| panic!("time")),
        }
    }

    /// A first reply goes under the message; after it, new text with `follow_up` goes under
    /// the first reply, and anything else is what the session posted already.
    #[test]
    fn where_a_reply_goes() {
        let root = msg("t", None, None, "hello");
        let alone = [root.clone()];
        assert_eq!(
            reply_place(&alone, &root, &sid("s1"), "hi", false),
            ReplyPlace::Under(id("t"))
        );
        let first = msg("r1", Some("t"), Some("s1"), "hi");
        let other = msg("r2", Some("t"), Some("s2"), "yo");
        let more = msg("r3", Some("r1"), Some("s1"), "and more");
        let thread = [root.clone(), first.clone(), other, more.clone()];
        let s1 = sid("s1");
        let place = |body, follow_up| reply_place(&thread, &root, &s1, body, follow_up);
        assert_eq!(place("new", true), ReplyPlace::Under(id("r1")));
        assert_eq!(place("new", false), ReplyPlace::Posted(&first));
        assert_eq!(place("hi", true), ReplyPlace::Posted(&first));
        assert_eq!(place("and more", true), ReplyPlace::Posted(&more));
        assert_eq!(
            reply_place(&thread, &root, &sid("s2"), "new", true),
            ReplyPlace::Under(id("r2"))
        );
    }
}
