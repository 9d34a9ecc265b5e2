//! The notification outbox, as a deliverer sees it: claim due messages, then report each one
//! delivered (or given up) or due again later. The transport (HTTP, signing) is the caller's.
//!
//! A claim takes the due rows with [`Tx::take_outbox`](crate::storage::Tx::take_outbox) (row
//! locks, skip-locked on PostgreSQL) and, in the same transaction, moves each one `lease` ahead
//! and counts the attempt. The lock is held only for that transaction, never across the
//! delivery: another replica skips the rows while they are being claimed and does not find them
//! due afterwards, so two replicas never deliver one message at once, and SQLite's single writer
//! is not held while a webhook receiver answers. A deliverer that dies before reporting leaves
//! its messages to be claimed again once the lease has passed: delivery is at least once.
//!
//! What a grant's end queues is here too ([`queue_destroys`]): the guard calls it in the
//! transaction that stores the end, so a credential never outlives its grant unqueued.

use chrono::Duration;

use super::{Broker, Fail, read, transact};
use crate::clock::Time;
use crate::error::Error;
use crate::ids::GrantId;
use crate::issuer::{Issued, IssuedState};
use crate::storage::{OutboxItem, StorageError, Tx};

impl Broker {
    /// Claims up to `limit` due messages of `topic` for one delivery attempt each, leased for
    /// `lease`. Each answered item's `attempts` counts this attempt.
    pub async fn claim_outbox(
        &self,
        topic: &str,
        limit: u32,
        lease: Duration,
    ) -> Result<Vec<OutboxItem>, Error> {
        let now = self.now();
        // Most polls find nothing: look without the write lock first.
        let due = read!(self, "outbox read", |tx| Ok::<_, Fail>(
            tx.take_outbox(topic, now, 1).await?
        ))?;
        if due.is_empty() {
            return Ok(due);
        }
        transact!(self, "outbox claim", |tx| {
            let mut items = tx.take_outbox(topic, now, limit).await?;
            for item in &mut items {
                item.attempts = item.attempts.saturating_add(1);
                item.next_attempt_at = now + lease;
                tx.reschedule_outbox(&item.id, item.attempts, item.next_attempt_at)
                    .await?;
            }
            Ok::<_, Fail>(items)
        })
    }

    /// Removes a message: delivered, or given up.
    pub async fn outbox_done(&self, id: &str) -> Result<(), Error> {
        transact!(self, "outbox delete", |tx| Ok::<_, Fail>(
            tx.delete_outbox(id).await?
        ))
    }

    /// Makes a message due again at `at` after a failed attempt.
    pub async fn outbox_retry(&self, id: &str, attempts: u32, at: Time) -> Result<(), Error> {
        transact!(self, "outbox reschedule", |tx| Ok::<_, Fail>(
            tx.reschedule_outbox(id, attempts, at).await?
        ))
    }
}

/// Marks each unended credential of `grant` destroying and queues its destroy at `at`: the
/// guard calls it when a write stores the grant's end. Answers whether it queued any.
pub(crate) async fn queue_destroys(
    tx: &mut dyn Tx,
    grant: GrantId,
    at: Time,
) -> Result<bool, StorageError> {
    let mut queued = false;
    for mut c in tx.issued_of(grant).await? {
        if !c.state.unended() {
            continue;
        }
        c.state = IssuedState::Destroying;
        c.next_attempt_at = Some(at);
        tx.put_issued(&c).await?;
        tx.push_outbox(&destroy_item(&c, at)).await?;
        queued = true;
    }
    Ok(queued)
}

fn destroy_item(c: &Issued, at: Time) -> OutboxItem {
    OutboxItem {
        id: format!("destroy:{}:{}", c.grant_id, c.secret),
        topic: OutboxItem::DESTROY.to_string(),
        payload: serde_json::json!({ "grant": c.grant_id, "secret": c.secret }).to_string(),
        attempts: 0,
        next_attempt_at: at,
    }
}
