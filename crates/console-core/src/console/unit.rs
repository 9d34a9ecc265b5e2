//! The unit of work: one write transaction and what it did, published once after it commits
//! and only if it committed.
//!
//! [`transact!`] runs a body with the transaction (`&mut dyn WorkTx`, which hands out the
//! areas' stores) and, when it asks for it, an [`AfterCommit`]: what the body leaves to do
//! after the commit (documents to keep loaded). The commit path, [`Console::commit_work`], commits and then
//! publishes: the highest event id the transaction appended (the storage reports it, so every
//! append is published, whichever code appended it) wakes the live streams, and the documents
//! are kept for the next edit. No caller publishes by hand: `event_committed` is private to
//! this module (the tidy test checks that no other file calls it).

use crate::console::Console;
use crate::doc::Document;
use crate::error::Error;
use crate::work::WorkTx;
use crate::work::documents::Artifact;

/// What a unit of work leaves to do after its commit, besides waking the streams for its
/// events (the storage reports those): `transact!(console, |tx, after| body)` hands it to a
/// body that changes documents.
#[derive(Default)]
pub(crate) struct AfterCommit {
    /// Documents as the transaction left them, kept loaded for the next read or edit.
    documents: Vec<(Artifact, Document)>,
}

impl AfterCommit {
    /// Keeps a document loaded once the transaction commits (never if it does not).
    pub(crate) fn keep_document(&mut self, kept: Option<(Artifact, Document)>) {
        self.documents.extend(kept);
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
        Ok(())
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
