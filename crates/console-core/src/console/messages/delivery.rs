//! The delivery machinery (protocol §4.2), shared by every kind of delivery: a targeted
//! message (`message`) and a comment's mention of a session (`mention`).
//!
//! - [`Messages::open_attempt`], inside the caller's transaction: numbers the attempt (from 1
//!   per message or comment), decides it (`failed` with `not_live` when the session has no
//!   live link, `mode_not_advertised` when its link does not advertise the mode, else
//!   `pending` with the content to send kept beside it), appends `delivery.attempt`, and
//!   leaves a pending one to the unit of work's [`AfterCommit`].
//! - The unit of work ([`crate::console::unit`]), once that transaction committed and only
//!   then: hands each pending attempt to the session's link through [`Presence::deliver`]; one
//!   the link cannot take fails at once. No caller dispatches.
//! - [`Messages::delivered`]: the session's `delivered` makes a pending attempt of its own
//!   `sent`, if it comes within [`ACK_WITHIN`] of the attempt on the console's clock.
//! - [`Messages::expire_deliveries`]: pending attempts older than [`ACK_WITHIN`] fail
//!   (`not_acknowledged`); the server runs it every second, any replica may.
//!
//! Every state change is a compare-and-set on `pending` in its own transaction with its
//! `delivery.attempt` event, so concurrent acknowledgements, sweeps and replicas never move an
//! attempt twice. Nothing is resent by itself: a retry is a new attempt.

use chrono::Duration;
use serde_json::json;

use super::presence::LinkNotice;
use super::*;
use crate::console::unit::AfterCommit;
use crate::work::messages::{
    Attempt, AttemptState, Deliverable, Delivery, DeliveryContent, Finish, Mode, Scope, failure,
};
use crate::work::{Actor, Event, EventFacts, NewEvent};

/// How long a session has to acknowledge a delivery (`delivered`).
pub const ACK_WITHIN: Duration = Duration::seconds(30);
/// At most this many attempts are failed per sweep transaction.
const SWEEP_BATCH: u32 = 500;

/// A new attempt to open in the caller's transaction.
#[derive(Debug, Clone, Copy)]
pub(crate) struct NewAttempt<'a> {
    /// The message or comment.
    pub item: Deliverable,
    pub session_id: &'a SessionId,
    pub mode: Mode,
    pub requested_by: &'a Actor,
    /// What the session receives.
    pub content: &'a DeliveryContent,
    /// Where the `delivery.attempt` events go.
    pub scope: &'a Scope,
}

/// A session's `delivered`: `by` is the session (an agent actor naming it).
#[derive(Debug, Clone, PartialEq)]
pub struct Ack {
    pub by: Actor,
    pub item: Deliverable,
    pub attempt: i64,
}

/// The console's own actor, for what its sweeps do.
fn console_actor() -> Actor {
    Actor::System {
        name: "console".into(),
    }
}

impl Messages<'_> {
    /// The modes a session's live link advertises; `None` when it has none.
    pub(crate) async fn modes_of(
        &self,
        tx: &mut dyn WorkTx,
        session: &SessionId,
    ) -> Result<Option<Vec<Mode>>, Error> {
        Ok(self.live_in(tx, session).await?.map(|l| l.modes))
    }

    /// Opens an attempt in `tx` (see the module's doc); a pending one for this replica's link
    /// is left to `after`, which hands it to the link once the transaction commits.
    pub(crate) async fn open_attempt(
        &self,
        tx: &mut dyn WorkTx,
        after: &mut AfterCommit,
        new: &NewAttempt<'_>,
    ) -> Result<Attempt, Error> {
        let number = tx.attempts().next_attempt(new.item).await?;
        let live = self.live_in(tx, new.session_id).await?;
        let (state, error) = match &live {
            None => (AttemptState::Failed, Some(failure::NOT_LIVE)),
            Some(l) if !l.modes.contains(&new.mode) => {
                (AttemptState::Failed, Some(failure::MODE_NOT_ADVERTISED))
            }
            Some(_) => (AttemptState::Pending, None),
        };
        let attempt = Attempt {
            item: new.item,
            attempt: number,
            session_id: new.session_id.clone(),
            mode: new.mode,
            state,
            requested_by: new.requested_by.clone(),
            created_at: self.console.now(),
            sent_at: None,
            accepted_at: None,
            accepted_as: None,
            error: error.map(str::to_owned),
            scope: new.scope.clone(),
        };
        let pending = state == AttemptState::Pending;
        tx.attempts()
            .insert_attempt(&attempt, pending.then_some(new.content))
            .await?;
        self.attempt_event(tx, &attempt, new.requested_by).await?;
        // The link is this replica's, or another's: told at commit, it sends the content.
        let elsewhere = live
            .as_ref()
            .map(|l| l.replica.clone())
            .filter(|r| r != self.replica());
        if let (true, Some(replica)) = (pending, &elsewhere) {
            let notice = LinkNotice::Deliver {
                replica: replica.clone(),
                item: attempt.item,
                attempt: attempt.attempt,
                session: attempt.session_id.clone(),
            };
            tx.presence().notify_links(&notice.to_payload()).await?;
        }
        after.deliver((pending && elsewhere.is_none()).then(|| Delivery {
            item: attempt.item,
            attempt: attempt.attempt,
            session_id: attempt.session_id.clone(),
            content: new.content.clone(),
        }));
        Ok(attempt)
    }

    /// Appends `delivery.attempt` for an attempt's new state: in its scope's log (an issue's
    /// takes its next sequence), the envelope's `session` the attempt's session.
    pub(crate) async fn attempt_event(
        &self,
        tx: &mut dyn WorkTx,
        a: &Attempt,
        actor: &Actor,
    ) -> Result<Event, Error> {
        let sequence = match &a.scope.issue {
            Some(k) => tx.messages().bump_issue_sequence(k).await?,
            None => None,
        };
        let e = NewEvent {
            kind: "delivery.attempt",
            facts: EventFacts {
                at: self.console.now(),
                actor: actor.clone(),
                project: a.scope.project.clone(),
                issue: sequence.and(a.scope.issue.clone()),
                artifact: a.scope.artifact,
                session: Some(a.session_id.clone()),
                data: json!({
                    "kind": a.item.kind(),
                    "id": a.item.to_string(),
                    "attempt": a.attempt,
                    "session_id": a.session_id,
                    "state": a.state,
                    "requested_by": a.requested_by,
                }),
            },
        };
        Ok(tx.events().append_event(&e, sequence).await?)
    }

    /// Sessions' `delivered`, in one transaction: each names a pending attempt of the session
    /// itself, made within [`ACK_WITHIN`], which becomes `sent`; any other (unknown, another
    /// session's, failed or late) changes nothing. Answers how many became `sent`.
    pub async fn delivered(&self, acks: &[Ack]) -> Result<usize, Error> {
        if acks.is_empty() {
            return Ok(0);
        }
        let now = self.console.now();
        let events = transact!(self.console, |tx| {
            let mut events = Vec::new();
            for ack in acks {
                let Some(session) = ack.by.session() else {
                    continue;
                };
                let f = Finish {
                    to: AttemptState::Sent,
                    at: now,
                    error: None,
                    session: Some(session),
                    created_after: Some(now - ACK_WITHIN),
                };
                let sent = tx
                    .attempts()
                    .finish_attempt(ack.item, ack.attempt, &f)
                    .await?;
                if let Some(a) = sent {
                    events.push(self.attempt_event(tx, &a, &ack.by).await?);
                }
            }
            Ok(events)
        })?;
        Ok(events.len())
    }

    /// Fails the pending attempts no `delivered` came for within [`ACK_WITHIN`]
    /// (`not_acknowledged`). Answers how many failed.
    pub async fn expire_deliveries(&self) -> Result<usize, Error> {
        let cutoff = self.console.now() - ACK_WITHIN;
        let mut failed = 0;
        loop {
            let due = {
                let mut tx = self.read().await?;
                tx.attempts()
                    .pending_attempts(Some(cutoff), None, SWEEP_BATCH)
                    .await?
            };
            if due.is_empty() {
                return Ok(failed);
            }
            let keys: Vec<_> = due.iter().map(|a| (a.item, a.attempt)).collect();
            let n = self
                .fail_attempts(&keys, failure::NOT_ACKNOWLEDGED, None)
                .await?;
            failed += n;
            if n == 0 || due.len() < SWEEP_BATCH as usize {
                return Ok(failed);
            }
        }
    }

    /// Fails one pending attempt (a delivery the link named for it could not take).
    pub async fn fail_delivery(&self, item: Deliverable, attempt: i64) -> Result<(), Error> {
        self.fail_attempts(&[(item, attempt)], failure::NOT_LIVE, None)
            .await
            .map(|_| ())
    }

    /// Fails every pending attempt of a session whose link closed (`not_live`): nothing will
    /// acknowledge them.
    pub async fn session_left(&self, session: &SessionId) -> Result<usize, Error> {
        let now = self.console.now();
        let pending = {
            let mut tx = self.read().await?;
            tx.attempts()
                .pending_attempts(Some(now), Some(session), SWEEP_BATCH)
                .await?
        };
        let keys: Vec<_> = pending.iter().map(|a| (a.item, a.attempt)).collect();
        self.fail_attempts(&keys, failure::NOT_LIVE, Some(session))
            .await
    }

    /// Moves each of `keys` from `pending` to `failed` with `error`, in one transaction.
    pub(crate) async fn fail_attempts(
        &self,
        keys: &[(Deliverable, i64)],
        error: &str,
        session: Option<&SessionId>,
    ) -> Result<usize, Error> {
        if keys.is_empty() {
            return Ok(0);
        }
        let now = self.console.now();
        let actor = console_actor();
        let events = transact!(self.console, |tx| {
            let mut events = Vec::new();
            for (item, attempt) in keys {
                let f = Finish {
                    to: AttemptState::Failed,
                    at: now,
                    error: Some(error),
                    session,
                    created_after: None,
                };
                let failed = tx.attempts().finish_attempt(*item, *attempt, &f).await?;
                if let Some(a) = failed {
                    events.push(self.attempt_event(tx, &a, &actor).await?);
                }
            }
            Ok(events)
        })?;
        Ok(events.len())
    }

    /// A pending attempt's delivery, for the replica holding the session's link when another
    /// replica opened it; `None` once it is no longer pending.
    pub async fn pending_delivery(
        &self,
        item: Deliverable,
        attempt: i64,
    ) -> Result<Option<Delivery>, Error> {
        let mut tx = self.read().await?;
        Ok(tx
            .attempts()
            .pending_content(item, attempt)
            .await?
            .map(|(session_id, content)| Delivery {
                item,
                attempt,
                session_id,
                content,
            }))
    }
}
