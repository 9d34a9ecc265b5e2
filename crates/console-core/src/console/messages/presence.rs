//! Presence shared by every console replica on one database (protocol §4.2): a session is live
//! while a replica holds its link, and every replica sees it so.
//!
//! - The replica holding a link writes the session's row at `hello`, `update` and close
//!   (`console_live_sessions`, with its roles in their own table for the role lookups), each
//!   with its `session.*` event in the same transaction, and refreshes its rows' heartbeat
//!   every 20 s ([`Messages::presence_heartbeat`]).
//! - A row is live when its replica is this one (a replica knows its own links) or its
//!   heartbeat is younger than [`LIVE_FOR`]; the rows of a replica that died go stale, and any
//!   other replica removes them ([`Messages::expire_sessions`], appending `session.gone`).
//! - A newer link on another replica takes the row and tells the older one's replica to
//!   close it (a notification on the links channel, sent at commit). A delivery opened on a
//!   replica that does not hold the session's link is announced the same way (ids only); the
//!   holder reads the pending attempt's content and sends it
//!   ([`Messages::pending_delivery`]).

use chrono::Duration;
use serde_json::json;

use super::*;
use crate::work::messages::{Deliverable, DeliveryKind, LiveSession};
use crate::work::{Actor, Event};

/// A row whose replica has not been heard of for this long is not live.
pub const LIVE_FOR: Duration = Duration::seconds(60);
/// Stale rows removed per sweep transaction, at most.
const STALE_BATCH: u32 = 500;

/// The session links this console replica holds (protocol §4.2). Which sessions are live is
/// shared by every replica through the storage (this module); this is the way to the links
/// themselves.
pub trait Presence: Send + Sync + std::fmt::Debug {
    /// This replica's id (random per process): the live-session rows it writes.
    fn replica(&self) -> &str;
    /// Hands a delivery to the session's link on this replica (the `deliver` frame); false
    /// when none here takes it.
    fn deliver(&self, d: &crate::work::messages::Delivery) -> bool;
}

/// What a replica is told on the links channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkNotice {
    /// Send this pending attempt on the session's link you hold.
    Deliver {
        replica: String,
        item: Deliverable,
        attempt: i64,
        session: SessionId,
    },
    /// A newer link elsewhere holds the session: close yours.
    Close {
        replica: String,
        link: i64,
        session: SessionId,
    },
}

impl LinkNotice {
    /// Space-separated words, the session last (a session id holds no whitespace).
    pub fn to_payload(&self) -> String {
        match self {
            LinkNotice::Deliver {
                replica,
                item,
                attempt,
                session,
            } => format!(
                "deliver {replica} {} {attempt} {item} {session}",
                item.kind().as_str()
            ),
            LinkNotice::Close {
                replica,
                link,
                session,
            } => format!("close {replica} {link} {session}"),
        }
    }

    pub fn parse(p: &str) -> Option<Self> {
        let w: Vec<&str> = p.split(' ').collect();
        match w.as_slice() {
            ["deliver", replica, kind, attempt, id, session] => Some(LinkNotice::Deliver {
                replica: (*replica).to_owned(),
                item: Deliverable::parse(DeliveryKind::parse(kind)?, id)?,
                attempt: attempt.parse().ok()?,
                session: SessionId::parse(session)?,
            }),
            ["close", replica, link, session] => Some(LinkNotice::Close {
                replica: (*replica).to_owned(),
                link: link.parse().ok()?,
                session: SessionId::parse(session)?,
            }),
            _ => None,
        }
    }

    /// The replica it is for.
    pub fn replica(&self) -> &str {
        match self {
            LinkNotice::Deliver { replica, .. } | LinkNotice::Close { replica, .. } => replica,
        }
    }
}

impl Messages<'_> {
    /// This replica's id ("" with no presence: no link is ever held).
    pub fn replica(&self) -> &str {
        self.console
            .parts
            .presence
            .as_ref()
            .map_or("", |p| p.replica())
    }

    fn fresh_after(&self) -> crate::clock::Time {
        self.console.now() - LIVE_FOR
    }

    /// A live session, read in `tx`.
    pub(crate) async fn live_in(
        &self,
        tx: &mut dyn WorkTx,
        session: &SessionId,
    ) -> Result<Option<LiveSession>, Error> {
        Ok(tx
            .presence()
            .live_session(session, self.replica(), self.fresh_after())
            .await?)
    }

    /// The roles live sessions advertise, read in `tx`.
    pub(crate) async fn live_roles_in(&self, tx: &mut dyn WorkTx) -> Result<Vec<String>, Error> {
        Ok(tx
            .presence()
            .live_roles(self.replica(), self.fresh_after())
            .await?)
    }

    /// The live sessions advertising `role`, read in `tx`.
    pub(crate) async fn holders_in(
        &self,
        tx: &mut dyn WorkTx,
        role: &str,
    ) -> Result<Vec<SessionId>, Error> {
        Ok(tx
            .presence()
            .role_holders(role, self.replica(), self.fresh_after())
            .await?)
    }

    /// Whether a session is live (on any replica).
    pub async fn session_is_live(&self, session: &SessionId) -> Result<bool, Error> {
        let mut tx = self.read().await?;
        Ok(self.live_in(&mut *tx, session).await?.is_some())
    }

    /// Every live session, by id (`GET /api/v1/sessions`).
    pub async fn live_sessions(&self) -> Result<Vec<LiveSession>, Error> {
        let mut tx = self.read().await?;
        Ok(tx
            .presence()
            .live_sessions(self.replica(), self.fresh_after())
            .await?)
    }

    async fn live_event(
        &self,
        tx: &mut dyn WorkTx,
        kind: &'static str,
        actor: &Actor,
        live: &LiveSession,
    ) -> Result<Event, Error> {
        self.console
            .append(tx, kind, actor, None, None, json!(live))
            .await
    }

    /// A link's `hello`: the session is live on this replica's link `live.link`
    /// (`session.live`); a link of it on another replica is told to close.
    pub async fn session_hello(&self, actor: &Actor, live: &LiveSession) -> Result<(), Error> {
        transact!(self.console, |tx| {
            let held = tx.presence().put_live(live).await?;
            if let Some((replica, link)) = held
                && replica != live.replica
            {
                let notice = LinkNotice::Close {
                    replica,
                    link,
                    session: live.session_id.clone(),
                };
                tx.presence().notify_links(&notice.to_payload()).await?;
            }
            self.live_event(tx, "session.live", actor, live).await
        })?;
        Ok(())
    }

    /// A link's `update`: what the session advertises now (`session.updated`), if that link
    /// still holds it.
    pub async fn session_update(&self, actor: &Actor, live: &LiveSession) -> Result<(), Error> {
        transact!(self.console, |tx| {
            if !tx.presence().update_live(live).await? {
                return Ok(());
            }
            self.live_event(tx, "session.updated", actor, live).await?;
            Ok(())
        })
    }

    /// A link closed: if it still held its session, the session is gone (`session.gone`) and
    /// its pending attempts fail (nothing will acknowledge them).
    pub async fn session_bye(
        &self,
        actor: &Actor,
        session: &SessionId,
        link: i64,
    ) -> Result<(), Error> {
        let replica = self.replica().to_owned();
        let gone = transact!(self.console, |tx| {
            let removed = tx.presence().remove_live(session, &replica, link).await?;
            match removed {
                Some(l) => {
                    self.live_event(tx, "session.gone", actor, &l).await?;
                    Ok(true)
                }
                None => Ok(false),
            }
        })?;
        if gone {
            self.session_left(session).await?;
        }
        Ok(())
    }

    /// This replica's heartbeat: its sessions are fresh now; `activity` moves their
    /// `last_activity_at`.
    pub async fn presence_heartbeat(
        &self,
        activity: &[(SessionId, crate::clock::Time)],
    ) -> Result<(), Error> {
        let replica = self.replica().to_owned();
        let now = self.console.now();
        transact!(self.console, |tx| Ok(tx
            .presence()
            .heartbeat(&replica, now, activity)
            .await?))
    }

    /// Removes the sessions of replicas not heard of for [`LIVE_FOR`] (`session.gone` each,
    /// by the console) and fails their pending attempts. Answers how many.
    pub async fn expire_sessions(&self) -> Result<usize, Error> {
        let replica = self.replica().to_owned();
        let before = self.fresh_after();
        {
            let mut tx = self.read().await?;
            if !tx.presence().any_stale(&replica, before).await? {
                return Ok(0);
            }
        }
        let actor = Actor::System {
            name: "console".into(),
        };
        let gone = transact!(self.console, |tx| {
            let gone = tx
                .presence()
                .remove_stale(&replica, before, STALE_BATCH)
                .await?;
            for l in &gone {
                self.live_event(tx, "session.gone", &actor, l).await?;
            }
            Ok(gone)
        })?;
        for l in &gone {
            self.session_left(&l.session_id).await?;
        }
        Ok(gone.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::CommentId;

    fn session(s: &str) -> SessionId {
        SessionId::parse(s).unwrap_or_else(|| panic!("{s}"))
    }

    #[test]
    fn notices_round_trip() {
        for n in [
            LinkNotice::Deliver {
                replica: "r1".into(),
                item: Deliverable::Mention(CommentId::from_random([0x3f; 16])),
                attempt: 2,
                session: session("sess:1.a"),
            },
            LinkNotice::Close {
                replica: "r2".into(),
                link: 7,
                session: session("s"),
            },
        ] {
            assert_eq!(LinkNotice::parse(&n.to_payload()), Some(n));
        }
        assert_eq!(LinkNotice::parse("deliver r1 message x y s"), None);
    }
}
