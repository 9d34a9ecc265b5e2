//! The document engine's part in storing a document: what it makes of one (snapshot, index
//! parts, references), and a stored one loaded again (its snapshot with its edit log replayed).

use super::*;
use crate::work::documents::{EdgeKind, Snapshot, StoredDocument};

/// Index parts are cut to this many bytes (a huge code block still indexes its start).
const PART_MAX: usize = 64 * 1024;

/// What the engine made of a document, for storing it.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub doc: Document,
    pub snapshot: Snapshot,
    pub tasks: (i64, i64),
    pub token: String,
    /// The index's parts: each top-level block's id and text.
    pub parts: Vec<(String, String)>,
    /// Outgoing references: the block each is in, the console ref, how it refers.
    pub refs: Vec<(String, String, EdgeKind)>,
}

impl Parsed {
    fn of(doc: Document) -> Self {
        let parts = doc
            .blocks()
            .into_iter()
            .filter(|b| b.path.is_empty())
            .map(|b| (b.id.to_string(), part_text(doc.markdown(), &b.range)))
            .collect();
        Self {
            snapshot: snapshot_of(&doc),
            tasks: tasks_of(&doc),
            token: doc.token().to_owned(),
            parts,
            refs: references_of(&doc),
            doc,
        }
    }
}

/// A document's snapshot: its markdown and block ids.
pub(super) fn snapshot_of(doc: &Document) -> Snapshot {
    Snapshot {
        markdown: doc.markdown().to_owned(),
        block_ids: doc.block_ids(),
    }
}

/// `(done, total)` of a document's task-list items.
pub(super) fn tasks_of(doc: &Document) -> (i64, i64) {
    doc.tasks()
        .map(|(d, t)| (i64::from(d), i64::from(t)))
        .unwrap_or((0, 0))
}

/// A stored document as the engine holds it: its snapshot loaded, then each logged edit
/// replayed with the block ids it took, checked against the token it left. The error says
/// why it does not load.
pub(super) fn replay(stored: &StoredDocument) -> Result<Document, String> {
    let mut d = Document::load(&stored.snapshot.markdown, &stored.snapshot.block_ids)
        .map_err(|e| e.to_string())?;
    for e in &stored.log {
        let ops: Vec<doc::EditOp> = serde_json::from_str(&e.ops)
            .map_err(|_| format!("the edit log's entry {} does not read", e.entry))?;
        let mut ids = e.ids.iter();
        let mut short = false;
        let edited = {
            let mut give = || match ids.next() {
                Some(i) => i.clone(),
                None => {
                    short = true;
                    String::new()
                }
            };
            d.apply(None, &ops, &mut give)
        }
        .map_err(|err| format!("the edit log's entry {} does not apply ({err})", e.entry))?;
        if short || ids.next().is_some() || edited.document.token() != e.token {
            return Err(format!(
                "the edit log's entry {} replays to another document",
                e.entry
            ));
        }
        d = edited.document;
    }
    Ok(d)
}

/// A block's text for the index, at most [`PART_MAX`] bytes.
pub(super) fn part_text(markdown: &str, r: &doc::Range) -> String {
    let t = markdown.get(r.start..r.end).unwrap_or("");
    let mut end = t.len().min(PART_MAX);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    t[..end].to_owned()
}

pub(super) fn references_of(doc: &Document) -> Vec<(String, String, EdgeKind)> {
    doc.references()
        .into_iter()
        .map(|r| {
            let kind = match r.kind {
                doc::RefKind::Link => EdgeKind::Link,
                doc::RefKind::Embed => EdgeKind::Embed,
            };
            (r.block, r.to, kind)
        })
        .collect()
}

/// A stored document the engine does not load: refused until a person rebuilds it.
fn unloadable(id: ArtifactId, e: &str) -> Error {
    tracing::error!(artifact = %id, error = %e, "a stored document does not load");
    Error::with_message(
        ErrorCode::INTERNAL,
        format!(
            "the document's stored blocks do not load ({e}); a person rebuilds it from its \
             markdown: POST /api/v1/artifacts/{id}/rebuild"
        ),
    )
}

impl Documents<'_> {
    /// Parses a document with the engine: fresh block ids from the injected entropy.
    pub(super) fn parse_document(&self, markdown: &str) -> Result<Parsed, Error> {
        Ok(Parsed::of(Document::parse(markdown, &mut || {
            self.new_block_id()
        })))
    }

    /// A document as the engine holds it: the cache's for this state, else loaded from its
    /// stored snapshot and log (and kept: `a` was read in this transaction, so the state is
    /// committed).
    pub(crate) async fn loaded(
        &self,
        tx: &mut dyn WorkTx,
        a: &Artifact,
    ) -> Result<Document, Error> {
        if let Some(d) = self.console.documents.loaded(a) {
            return Ok(d);
        }
        let stored = self.stored(tx, a).await?;
        let d = replay(&stored).map_err(|e| unloadable(a.id, &e))?;
        self.console.documents.keep_loaded(a, d.clone());
        Ok(d)
    }

    pub(super) async fn stored(
        &self,
        tx: &mut dyn WorkTx,
        a: &Artifact,
    ) -> Result<StoredDocument, Error> {
        tx.documents()
            .document(a.id)
            .await?
            .ok_or_else(|| Error::from(StorageError::Corrupt("a document without content".into())))
    }

    /// A document's latest saved markdown: the cached document's, else the snapshot with the
    /// logged splices (no engine: it reads even when the document does not load).
    pub(super) async fn markdown_of(
        &self,
        tx: &mut dyn WorkTx,
        a: &Artifact,
    ) -> Result<String, Error> {
        if let Some(d) = self.console.documents.loaded(a) {
            return Ok(d.markdown().to_owned());
        }
        Ok(self.stored(tx, a).await?.markdown())
    }
}
