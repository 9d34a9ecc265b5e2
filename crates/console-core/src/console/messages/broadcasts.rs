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
    fn check(&self) -> Result<(), Error> {
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
        for s in &self.sessions {
            check_session(s)?;
        }
        let mut sorted: Vec<&String> = self.sessions.iter().collect();
        sorted.sort();
        if sorted.windows(2).any(|w| w[0] == w[1]) {
            return Err(message_input("`sessions` names each session once"));
        }
        check_body(&self.body)
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

impl Console {
    /// Sends a broadcast, or answers the one its key already named (`false`: nothing sent).
    pub async fn send_broadcast(
        &self,
        human: &Human,
        new: NewBroadcast,
    ) -> Result<(BroadcastSent, bool), Error> {
        new.check()?;
        let fingerprint = new.fingerprint();
        let by = Actor::User {
            login: human.login.clone(),
        };
        let done = transact!(self, |tx| {
            if let Some(b) = tx
                .broadcast_by_key(&human.login, &new.idempotency_key)
                .await?
            {
                return self
                    .repeat_broadcast(tx, b, &fingerprint)
                    .await
                    .map(|s| (s, None));
            }
            let mut excluded = Vec::new();
            let mut recipients = Vec::new();
            for s in &new.sessions {
                match self.modes_of(tx, s).await? {
                    None => excluded.push(Excluded {
                        session_id: s.clone(),
                        reason: ExcludeReason::NotLive,
                    }),
                    Some(m) if !m.contains(&new.mode) => excluded.push(Excluded {
                        session_id: s.clone(),
                        reason: ExcludeReason::ModeNotAdvertised,
                    }),
                    Some(_) => recipients.push(s.clone()),
                }
            }
            let b = Broadcast {
                id: self.fresh_message_id(),
                login: human.login.clone(),
                idempotency_key: new.idempotency_key.clone(),
                fingerprint: fingerprint.clone(),
                mode: new.mode,
                body: new.body.clone(),
                by: by.clone(),
                excluded: excluded.clone(),
                created_at: self.now(),
            };
            if !tx.insert_broadcast(&b).await? {
                // Another send of the key committed first.
                let b = tx
                    .broadcast_by_key(&human.login, &new.idempotency_key)
                    .await?
                    .ok_or_else(|| Error::new(ErrorCode::INTERNAL))?;
                return self
                    .repeat_broadcast(tx, b, &fingerprint)
                    .await
                    .map(|s| (s, None));
            }
            let mut opened = Vec::with_capacity(recipients.len());
            let mut copies = Vec::with_capacity(recipients.len());
            for s in &recipients {
                let mut m = self.targeted_message(
                    &by,
                    None,
                    Target::Session(s.clone()),
                    new.mode,
                    &new.body,
                );
                m.broadcast = Some(b.id.clone());
                m.created_at = b.created_at;
                tx.insert_message(&m).await?;
                opened.extend(self.attempt_message(tx, &m, &by).await?);
                copies.push(m);
            }
            let view = self.broadcast_view(tx, &b, &copies).await?;
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
            let e = tx
                .append_event(
                    &crate::work::NewEvent {
                        kind: "broadcast.sent",
                        at: self.now(),
                        actor: by.clone(),
                        project: None,
                        issue: None,
                        artifact: None,
                        session: None,
                        data: compact,
                    },
                    None,
                )
                .await?;
            Ok((
                BroadcastSent {
                    broadcast: view,
                    excluded,
                },
                Some((opened, e)),
            ))
        })?;
        match done {
            (sent, Some((opened, e))) => {
                self.event_committed(e.id);
                self.dispatch(&opened).await;
                Ok((sent, true))
            }
            (sent, None) => Ok((sent, false)),
        }
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
            return Err(Error::new(ErrorCode::BROADCAST_KEY_REUSED).with_detail("broadcast", &b.id));
        }
        let copies = tx.broadcast_messages(&b.id).await?;
        Ok(BroadcastSent {
            excluded: b.excluded.clone(),
            broadcast: self.broadcast_view(tx, &b, &copies).await?,
        })
    }

    async fn broadcast_view(
        &self,
        tx: &mut dyn WorkTx,
        b: &Broadcast,
        copies: &[Message],
    ) -> Result<BroadcastView, Error> {
        let views = self.message_views(tx, copies).await?;
        let reply_count = views.iter().map(|v| count_replies(&v.replies)).sum();
        Ok(BroadcastView {
            id: b.id.clone(),
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
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.broadcasts(limit, offset).await?)
    }

    /// One broadcast with every recipient's attempts and replies, recipients in send order.
    pub async fn broadcast_by_id(&self, id: &str) -> Result<BroadcastView, Error> {
        let nf = || Error::with_message(ErrorCode::NOT_FOUND, "no such broadcast");
        let id = uuid_of(id).ok_or_else(nf)?;
        let mut tx = self.parts.storage.read().await?;
        let b = tx.broadcast(&id).await?.ok_or_else(nf)?;
        let copies = tx.broadcast_messages(&b.id).await?;
        self.broadcast_view(&mut *tx, &b, &copies).await
    }
}

/// Replies in a tree of replies (a reply's follow-ups included).
fn count_replies(replies: &[MessageView]) -> i64 {
    replies.iter().map(|r| 1 + count_replies(&r.replies)).sum()
}
