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

use chrono::Duration;

use super::{Broker, Fail, read, transact};
use crate::clock::Time;
use crate::error::Error;
use crate::storage::OutboxItem;

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
