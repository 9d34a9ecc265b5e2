//! Broadcasts (spec, "Broadcasts and session messages"; protocol §6.4): one targeted message
//! per recipient under a shared broadcast, in one transaction with its attempts.
//!
//! - A selected session that is not live, or whose link does not advertise the mode, is
//!   excluded and named; never moved to another mode.
//! - `idempotency_key` names one send per person: the broadcast row is inserted first, keyed
//!   by `(person, key)`; a second send with the key finds the first (concurrent ones wait on
//!   the key's unique index, then find it), and answers it when its request's fingerprint
//!   (`sessions` in order, `mode`, `body`) is the same, else BROADCAST_KEY_REUSED naming it.
//!   Either way that second send writes nothing.

use serde_json::json;

use super::*;
use crate::work::messages::{
    Broadcast, BroadcastRow, BroadcastSent, BroadcastView, ExcludeReason, Excluded, Recipient,
};

/// At most this many sessions per broadcast (protocol §2).
pub const MAX_RECIPIENTS: usize = 500;
/// The longest idempotency key (protocol §2).
pub const KEY_MAX: usize = 255;

/// A new broadcast request.
#[derive(Debug, Clone)]
pub struct NewBroadcast {
    pub idempotency_key: String,
    pub sessions: Vec<String>,
    pub mode: Mode,
    pub body: String,
}

impl NewBroadcast {
    /// Checks the request; answers its sessions, in order.
    fn check(&self) -> Result<Vec<SessionId>, Error> {
        let k = &self.idempotency_key;
        if k.chars().count() > KEY_MAX {
            return Err(Error::with_message(
                ErrorCode::CAP_EXCEEDED,
                "an idempotency_key is at most 255 characters",
            ));
        }
        if k.is_empty() || !k.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(message_input(
                "an idempotency_key is 1 to 255 visible ASCII characters",
            ));
        }
        if self.sessions.is_empty() {
            return Err(message_input("`sessions` names one session at least"));
        }
        if self.sessions.len() > MAX_RECIPIENTS {
            return Err(Error::with_message(
                ErrorCode::CAP_EXCEEDED,
                "a broadcast reaches at most 500 sessions",
            ));
        }
        let sessions = self
            .sessions
            .iter()
            .map(|s| SessionId::named(s))
            .collect::<Result<Vec<_>, _>>()?;
        let mut sorted: Vec<&SessionId> = sessions.iter().collect();
        sorted.sort();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(message_input("`sessions` names each session once"));
        }
        check_body(&self.body)?;
        Ok(sessions)
    }

    /// SHA-256 (hex) of the request: the same sessions in order, mode and body.
    fn fingerprint(&self) -> String {
        clock::sha256_hex(
            json!({"sessions": self.sessions, "mode": self.mode, "body": self.body})
                .to_string()
                .as_str(),
        )
    }
}

/// Which of a broadcast's sessions it reaches: those live with the mode advertised, in the
/// request's order, and the others excluded with the reason.
struct Reach {
    recipients: Vec<SessionId>,
    excluded: Vec<Excluded>,
}

/// What a broadcast's transaction answers: what it sent, and whether it sent it now (not a
/// repeat of its key).
type BroadcastDone = (BroadcastSent, bool);

impl Messages<'_> {
    /// Sends a broadcast, or answers the one its key already named (`false`: nothing sent).
    pub async fn broadcast(
        &self,
        human: &Human,
        new: NewBroadcast,
    ) -> Result<(BroadcastSent, bool), Error> {
        let sessions = new.check()?;
        let fingerprint = new.fingerprint();
        transact!(self.console, |tx, after| {
            self.write_broadcast(tx, after, human, &new, &sessions, &fingerprint)
                .await
        })
    }

    /// A broadcast's writes, in its transaction ([`Messages::broadcast`]): the key's earlier
    /// send answered, else the broadcast row (whose key's unique index makes a concurrent send
    /// wait, then answer the winner's), a copy per recipient with its attempts, and
    /// `broadcast.sent`. `sessions` are the request's, checked; `after` dispatches the copies'
    /// attempts once the transaction commits.
    async fn write_broadcast(
        &self,
        tx: &mut dyn WorkTx,
        after: &mut AfterCommit,
        human: &Human,
        new: &NewBroadcast,
        sessions: &[SessionId],
        fingerprint: &str,
    ) -> Result<BroadcastDone, Error> {
        let earlier = tx
            .messages()
            .broadcast_by_key(&human.login, &new.idempotency_key)
            .await?;
        if let Some(b) = earlier {
            return Ok((self.repeat_broadcast(tx, b, fingerprint).await?, false));
        }
        let reach = self.reach(tx, sessions, new.mode).await?;
        let by = Actor::User {
            login: human.login.clone(),
        };
        let b = Broadcast {
            id: self.console.new_id(BroadcastId::from_random),
            login: human.login.clone(),
            idempotency_key: new.idempotency_key.clone(),
            fingerprint: fingerprint.to_owned(),
            mode: new.mode,
            body: new.body.clone(),
            by,
            excluded: reach.excluded.clone(),
            created_at: self.console.now(),
        };
        if !tx.messages().insert_broadcast(&b).await? {
            // Another send of the key committed first.
            let b = tx
                .messages()
                .broadcast_by_key(&human.login, &new.idempotency_key)
                .await?
                .ok_or_else(|| Error::new(ErrorCode::INTERNAL))?;
            return Ok((self.repeat_broadcast(tx, b, fingerprint).await?, false));
        }
        let copies = self.write_copies(tx, after, &b, &reach.recipients).await?;
        let view = self.broadcast_view(tx, &b, &copies).await?;
        self.append_sent(tx, &view, &reach.excluded).await?;
        let sent = BroadcastSent {
            broadcast: view,
            excluded: reach.excluded,
        };
        Ok((sent, true))
    }

    /// Which of the request's sessions the broadcast reaches now (see [`Reach`]): a session
    /// not live, or not advertising the mode, is excluded, never moved to another mode.
    async fn reach(
        &self,
        tx: &mut dyn WorkTx,
        sessions: &[SessionId],
        mode: Mode,
    ) -> Result<Reach, Error> {
        let mut reach = Reach {
            recipients: Vec::new(),
            excluded: Vec::new(),
        };
        for s in sessions {
            let reason = match self.modes_of(tx, s).await? {
                None => ExcludeReason::NotLive,
                Some(m) if !m.contains(&mode) => ExcludeReason::ModeNotAdvertised,
                Some(_) => {
                    reach.recipients.push(s.clone());
                    continue;
                }
            };
            reach.excluded.push(Excluded {
                session_id: s.clone(),
                reason,
            });
        }
        Ok(reach)
    }

    /// Writes broadcast `b`'s copy to each recipient (dated as the broadcast) and opens its
    /// attempt (left to `after`); answers the copies, in send order.
    async fn write_copies(
        &self,
        tx: &mut dyn WorkTx,
        after: &mut AfterCommit,
        b: &Broadcast,
        recipients: &[SessionId],
    ) -> Result<Vec<Message>, Error> {
        let mut copies = Vec::with_capacity(recipients.len());
        for s in recipients {
            let mut m = self.targeted(&b.by, None, Target::Session(s.to_string()), b.mode, &b.body);
            m.broadcast = Some(b.id);
            m.created_at = b.created_at;
            tx.messages().insert_message(&m).await?;
            self.attempt(tx, after, &m, &b.by).await?;
            copies.push(m);
        }
        Ok(copies)
    }

    /// Appends `broadcast.sent`: the broadcast compact (each recipient's message by id), with
    /// the sessions excluded.
    async fn append_sent(
        &self,
        tx: &mut dyn WorkTx,
        view: &BroadcastView,
        excluded: &[Excluded],
    ) -> Result<Event, Error> {
        let compact = json!({
            "id": view.id,
            "idempotency_key": view.idempotency_key,
            "mode": view.mode,
            "body": view.body,
            "by": view.by,
            "created_at": crate::work::model::rfc3339::format(&view.created_at),
            "recipients": view.recipients.iter()
                .map(|r| json!({"session_id": r.session_id, "message": r.message.id}))
                .collect::<Vec<_>>(),
            "recipient_count": view.recipient_count,
            "reply_count": view.reply_count,
            "excluded": excluded,
        });
        let e = NewEvent {
            kind: "broadcast.sent",
            facts: EventFacts {
                at: self.console.now(),
                actor: view.by.clone(),
                project: None,
                issue: None,
                artifact: None,
                session: None,
                data: compact,
            },
        };
        Ok(tx.events().append_event(&e, None).await?)
    }

    /// A second send of a key: the original when the request is the same, else
    /// BROADCAST_KEY_REUSED naming it.
    async fn repeat_broadcast(
        &self,
        tx: &mut dyn WorkTx,
        b: Broadcast,
        fingerprint: &str,
    ) -> Result<BroadcastSent, Error> {
        if b.fingerprint != fingerprint {
            return Err(Error::new(ErrorCode::BROADCAST_KEY_REUSED).with_detail("broadcast", b.id));
        }
        let copies = tx.messages().broadcast_messages(b.id).await?;
        Ok(BroadcastSent {
            excluded: b.excluded.clone(),
            broadcast: self.broadcast_view(tx, &b, &copies).await?,
        })
    }

    /// A broadcast's view: each copy's, with its attempts and replies, and the counts.
    async fn broadcast_view(
        &self,
        tx: &mut dyn WorkTx,
        b: &Broadcast,
        copies: &[Message],
    ) -> Result<BroadcastView, Error> {
        let views = self.views(tx, copies).await?;
        let reply_count = views.iter().map(|v| count_replies(&v.replies)).sum();
        Ok(BroadcastView {
            id: b.id,
            idempotency_key: b.idempotency_key.clone(),
            mode: b.mode,
            body: b.body.clone(),
            by: b.by.clone(),
            created_at: b.created_at,
            recipient_count: views.len() as i64,
            reply_count,
            recipients: views
                .into_iter()
                .map(|v| Recipient {
                    session_id: match &v.target {
                        Some(Target::Session(s)) => s.clone(),
                        _ => String::new(),
                    },
                    message: v,
                })
                .collect(),
        })
    }

    /// Recent broadcasts, newest first, with recipient and reply counts.
    pub async fn recent_broadcasts(
        &self,
        limit: u32,
        offset: u32,
    ) -> Result<Vec<BroadcastRow>, Error> {
        let mut tx = self.read().await?;
        Ok(tx.messages().broadcasts(limit, offset).await?)
    }

    /// One broadcast with every recipient's attempts and replies, recipients in send order.
    pub async fn broadcast_by_id(&self, id: BroadcastId) -> Result<BroadcastView, Error> {
        let nf = || Error::with_message(ErrorCode::NOT_FOUND, "no such broadcast");
        let mut tx = self.read().await?;
        let b = tx.messages().broadcast(id).await?.ok_or_else(nf)?;
        let copies = tx.messages().broadcast_messages(b.id).await?;
        self.broadcast_view(&mut *tx, &b, &copies).await
    }
}

/// Replies in a tree of replies (a reply's follow-ups included).
fn count_replies(replies: &[MessageView]) -> i64 {
    replies.iter().map(|r| 1 + count_replies(&r.replies)).sum()
}
