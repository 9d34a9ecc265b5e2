//! Queuing notices (issue 29, `crate::notify`): what waits for a person is queued in the
//! transaction that makes it (an ask's), or in one of its own (the broker's `record.pending`,
//! before the console answers the broker's webhook). Nothing is queued until the server says
//! what it can send ([`Console::set_outbox`]).

use crate::console::Console;
use crate::error::Error;
use crate::notify::{Outbox, Waiting};
use crate::work::WorkTx;
use crate::work::asks::Ask;

impl Console {
    /// What the server can send on, and a digest's period; set once, at start.
    pub fn set_outbox(&self, outbox: Outbox) {
        let _ = self.outbox.set(outbox);
    }

    /// Queues `w` in a transaction of its own; answers how many notices were new.
    pub async fn notify_waiting(&self, w: &Waiting) -> Result<usize, Error> {
        if self.outbox.get().is_none() {
            return Ok(0);
        }
        transact!(self, |tx| self.queue_waiting(tx, w).await)
    }

    async fn queue_waiting(&self, tx: &mut dyn WorkTx, w: &Waiting) -> Result<usize, Error> {
        let Some(outbox) = self.outbox.get() else {
            return Ok(0);
        };
        let now = self.now().timestamp_millis();
        Ok(outbox
            .queue(tx, w, now, self.parts.entropy.as_ref())
            .await?)
    }

    /// Queues a new ask's notices in `tx`, the ask's own transaction, for the people who may
    /// answer it ([`Waiting::of_ask`]).
    pub(crate) async fn notify_ask(&self, tx: &mut dyn WorkTx, ask: &Ask) -> Result<(), Error> {
        if self.outbox.get().is_none() {
            return Ok(());
        }
        let assignee = match &ask.head.issue {
            Some(k) => tx.issues().assignee_of(k).await?,
            None => None,
        };
        let made = self
            .queue_waiting(tx, &Waiting::of_ask(ask, assignee))
            .await?;
        tracing::debug!(ask = %ask.head.id, notices = made, "ask opened: notices queued");
        Ok(())
    }
}
