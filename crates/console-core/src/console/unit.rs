//! The unit of work: one write transaction and what it did, published once after it commits
//! and only if it committed.
//!
//! [`transact!`] runs a body with the transaction (`&mut dyn WorkTx`, which hands out the
//! areas' stores) and, when it asks for it, an [`AfterCommit`]: what the body leaves to do
//! after the commit (documents to keep loaded, message deliveries to hand to the sessions'
//! links). The commit path, [`Console::commit_work`], commits and then publishes: the highest
//! event id the transaction appended (the storage reports it, so every append is published,
//! whichever code appended it) wakes the live streams, the documents are kept for the next
//! edit, and each delivery the transaction opened goes to its session's link. No caller
//! publishes or dispatches by hand: `event_committed` and `dispatch` are private to this
//! module (the tidy test checks that no other file calls `event_committed`; the compiler, that
//! none calls `dispatch`), and an attempt opens only with an [`AfterCommit`] to dispatch it.

use std::future::Future;
use std::pin::Pin;

use crate::console::Console;
use crate::doc::Document;
use crate::error::Error;
use crate::work::WorkTx;
use crate::work::documents::Artifact;
use crate::work::messages::{Deliverable, Delivery, failure};

/// What a unit of work leaves to do after its commit, besides waking the streams for its
/// events (the storage reports those): `transact!(console, |tx, after| body)` hands it to a
/// body that changes documents or opens delivery attempts.
#[derive(Default)]
pub(crate) struct AfterCommit {
    /// Documents as the transaction left them, kept loaded for the next read or edit.
    documents: Vec<(Artifact, Document)>,
    /// The pending attempts the transaction opened whose session's link is this replica's,
    /// to hand to it (another replica's link hears of its own at commit, through the storage).
    deliveries: Vec<Delivery>,
}

impl AfterCommit {
    /// Keeps a document loaded once the transaction commits (never if it does not).
    pub(crate) fn keep_document(&mut self, kept: Option<(Artifact, Document)>) {
        self.documents.extend(kept);
    }

    /// Hands a delivery to its session's link once the transaction commits (never if it does
    /// not: the attempt it names was never stored).
    pub(crate) fn deliver(&mut self, d: Option<Delivery>) {
        self.deliveries.extend(d);
    }
}

impl Console {
    /// The unit of work's commit path: commits `tx`, then publishes what it did. Nothing is
    /// published when the commit fails.
    pub(crate) async fn commit_work(
        &self,
        tx: Box<dyn WorkTx>,
        after: AfterCommit,
    ) -> Result<(), Error> {
        let last_event = tx.commit().await?;
        for (a, doc) in after.documents {
            self.documents.keep_loaded(&a, doc);
        }
        if let Some(id) = last_event {
            self.event_committed(id);
        }
        if !after.deliveries.is_empty() {
            self.dispatch(after.deliveries).await;
        }
        Ok(())
    }

    /// After the transaction that opened `deliveries` committed (its events woke the streams
    /// first): hands each to its session's link; one no link takes fails at once (`not_live`,
    /// in a transaction of its own). Boxed, a named type: failing them is a unit of work that
    /// commits through [`Console::commit_work`] again (with no delivery), so the futures nest.
    fn dispatch(&self, deliveries: Vec<Delivery>) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(async move {
            let refused: Vec<(Deliverable, i64)> = deliveries
                .iter()
                .filter(|d| !self.hand_over(d))
                .map(|d| (d.item, d.attempt))
                .collect();
            if refused.is_empty() {
                return;
            }
            let failed = self
                .messages()
                .fail_attempts(&refused, failure::NOT_LIVE, None)
                .await;
            if let Err(e) = failed {
                tracing::warn!(code = e.code_str(), "refused deliveries not marked failed");
            }
        })
    }

    /// Hands a delivery to the session's link on this replica.
    fn hand_over(&self, d: &Delivery) -> bool {
        self.parts.presence.as_ref().is_some_and(|p| p.deliver(d))
    }

    /// Events committed by another replica (the storage's notifications): wakes this one's
    /// streams as its own commits do.
    pub fn heard_committed(&self, id: i64) {
        self.event_committed(id);
    }

    /// Wakes event streams: events up to `id` are committed.
    fn event_committed(&self, id: i64) {
        self.committed.send_if_modified(|c| {
            if id > *c {
                *c = id;
                true
            } else {
                false
            }
        });
    }
}
