//! Edits of a document (quote-anchored ops, all or none) and rebuilds of one the engine does
//! not load.

use super::*;
use crate::work::documents::LogEntry;
use crate::work::documents::splice;

/// A document's edit log is folded into a new snapshot every this many edits (bounding what a
/// load replays).
const LOG_MAX: i64 = 256;

/// One block whose token changed (or that is new): `{id, token}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChangedBlock {
    pub id: String,
    pub token: String,
}

/// The edit answer: `{token, changed, removed}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EditAnswer {
    pub token: String,
    pub changed: Vec<ChangedBlock>,
    pub removed: Vec<String>,
}

impl EditAnswer {
    /// What an edit changed, as its answer says it.
    fn of(edited: &doc::Edited) -> Self {
        Self {
            token: edited.document.token().to_owned(),
            changed: edited
                .changed
                .iter()
                .map(|(id, token)| ChangedBlock {
                    id: id.clone(),
                    token: token.clone(),
                })
                .collect(),
            removed: edited.removed.clone(),
        }
    }
}

impl Documents<'_> {
    /// Applies quote-anchored edit ops (protocol §6.2), all or none: a stale `expected_token`
    /// or `block_token` is DOCUMENT_CHANGED (nothing applies); QUOTE_NOT_FOUND,
    /// QUOTE_AMBIGUOUS, TARGET_NOT_FOUND as the engine finds them. Content due to settle
    /// settles first. Appends `document.edited` with `changed` and `removed`; an edit that
    /// changes nothing appends nothing.
    pub async fn edit(
        &self,
        actor: &Actor,
        id: ArtifactId,
        expected_token: Option<&str>,
        ops: &[doc::EditOp],
    ) -> Result<EditAnswer, Error> {
        // The whole `WorkTx`: an edit goes through the asks' code in its transaction (an open
        // approval ask follows the new content).
        transact!(self.console, |tx, after| {
            let (answer, kept) = self
                .change_document(tx, actor, id, expected_token, ops)
                .await?;
            after.keep_document(kept);
            Ok(answer)
        })
    }

    /// The body of an edit in the caller's transaction (the asks' block asks and accepted
    /// suggestions run theirs through it): as [`Documents::edit`], answering the edit and the
    /// document as it left it (`None`: the edit changed nothing), which the caller hands to
    /// its unit of work to keep loaded once the transaction commits
    /// ([`crate::console::unit::AfterCommit::keep_document`]). The whole `WorkTx`: an open approval ask follows the
    /// new content (the asks' code, in the same transaction).
    pub(crate) async fn change_document(
        &self,
        tx: &mut dyn WorkTx,
        actor: &Actor,
        id: ArtifactId,
        expected_token: Option<&str>,
        ops: &[doc::EditOp],
    ) -> Result<(EditAnswer, Option<(Artifact, Document)>), Error> {
        let mut a = Self::artifact_in(tx, id).await?;
        if a.kind != ArtifactKind::Document {
            return Err(not_document());
        }
        let before = self.loaded(tx, &a).await?;
        self.settle_if_due(tx, &mut a).await?;
        let mut made: Vec<String> = Vec::new();
        let edited = before.apply(expected_token, ops, &mut || {
            let id = self.new_block_id();
            made.push(id.clone());
            id
        })?;
        let answer = EditAnswer::of(&edited);
        if edited.document.token() == before.token()
            && answer.changed.is_empty()
            && answer.removed.is_empty()
        {
            return Ok((answer, None));
        }
        let doc = edited.document;
        // An open approval ask follows the new content: its agent's turn.
        self.console.asks().approval_follows(tx, a.id).await?;
        self.log_edit(tx, &mut a, &before, &doc, ops, made).await?;
        let now = self.console.now();
        a.tasks = tasks_of(&doc);
        a.token = doc.token().to_owned();
        a.size = doc.markdown().len() as i64;
        a.settled = false;
        a.changed_at = now;
        a.changed_by = actor.clone();
        a.updated_at = now;
        let parts = self.index_edit(tx, &a, &doc, &answer).await?;
        let e = self
            .write_back(
                tx,
                &mut a,
                "document.edited",
                actor,
                &[
                    ("changed", json!(answer.changed)),
                    ("removed", json!(answer.removed)),
                ],
            )
            .await?;
        if let Some(e) = &e {
            self.edit_references(tx, &a, &doc, &answer, &parts, e)
                .await?;
        }
        Ok((answer, Some((a, doc))))
    }

    /// An edit goes into the document's log (what it spliced, and what replays it: its ops
    /// and the block ids it made), or, every [`LOG_MAX`] edits, the whole document becomes
    /// the snapshot.
    async fn log_edit(
        &self,
        tx: &mut dyn WorkTx,
        a: &mut Artifact,
        before: &Document,
        doc: &Document,
        ops: &[doc::EditOp],
        made: Vec<String>,
    ) -> Result<(), Error> {
        if a.log_len + 1 >= LOG_MAX {
            tx.documents().put_snapshot(a.id, &snapshot_of(doc)).await?;
            a.log_len = 0;
            return Ok(());
        }
        let (start, end, text) = splice(before.markdown(), doc.markdown());
        a.log_entry += 1;
        a.log_len += 1;
        tx.documents()
            .append_log(
                a.id,
                &LogEntry {
                    entry: a.log_entry,
                    start: start as i64,
                    end: end as i64,
                    text,
                    ops: serde_json::to_string(ops).unwrap_or_default(),
                    ids: made,
                    token: doc.token().to_owned(),
                },
            )
            .await?;
        Ok(())
    }

    /// The index after an edit: the top-level blocks changed, made or removed (an agent
    /// conversation's artifact has none). Answers the parts indexed.
    async fn index_edit(
        &self,
        tx: &mut dyn WorkTx,
        a: &Artifact,
        doc: &Document,
        answer: &EditAnswer,
    ) -> Result<Vec<(String, String)>, Error> {
        let mut parts = Vec::new();
        for c in &answer.changed {
            if let Some(p) = doc.position(&c.id)
                && p.block.path.is_empty()
            {
                parts.push((c.id.clone(), part_text(doc.markdown(), &p.block.range)));
            }
        }
        if !matches!(a.scope, Scope::Agent(_)) {
            tx.documents()
                .index_text(a.id, &parts, &answer.removed)
                .await?;
        }
        Ok(parts)
    }

    /// The reference graph after an edit: only when a touched block has a console ref, or
    /// had one (parsing a large document's references again on every edit would cost more
    /// than the edit).
    async fn edit_references(
        &self,
        tx: &mut dyn WorkTx,
        a: &Artifact,
        doc: &Document,
        answer: &EditAnswer,
        parts: &[(String, String)],
        e: &Event,
    ) -> Result<(), Error> {
        let touched: Vec<String> = answer
            .changed
            .iter()
            .map(|c| c.id.clone())
            .chain(answer.removed.iter().cloned())
            .collect();
        let refers = parts.iter().any(|(_, t)| has_console_ref(t));
        if refers
            || !tx
                .documents()
                .edges_from(&artifact_ref(a), Some(&touched))
                .await?
                .is_empty()
        {
            self.keep_references(tx, a, &references_of(doc), Some(&touched), e)
                .await?;
        }
        Ok(())
    }

    /// Rebuilds a document the engine cannot load from its latest saved markdown, parsed
    /// afresh (new block ids); appends `document.rebuilt`. A document that loads is 409
    /// DOCUMENT_LIVE when it has edits of the last five minutes not yet settled (someone is
    /// working in it: new ids would fail their next edits), else DOCUMENT_LOADS.
    pub async fn rebuild(&self, actor: &Actor, id: ArtifactId) -> Result<ArtifactView, Error> {
        transact!(self.console, |tx, after| {
            let mut a = Self::artifact_in(tx, id).await?;
            if a.kind != ArtifactKind::Document {
                return Err(not_document());
            }
            let stored = self.stored(tx, &a).await?;
            if replay(&stored).is_ok() {
                return Err(if self.is_document_live(&a) {
                    Error::new(ErrorCode::DOCUMENT_LIVE)
                } else {
                    Error::new(ErrorCode::DOCUMENT_LOADS)
                });
            }
            let p = self.parse_document(&stored.markdown())?;
            let now = self.console.now();
            tx.documents().put_snapshot(a.id, &p.snapshot).await?;
            a.log_len = 0;
            a.tasks = p.tasks;
            if p.token != a.token {
                a.token = p.token.clone();
                a.size = p.snapshot.markdown.len() as i64;
                a.settled = false;
                a.changed_at = now;
                a.changed_by = actor.clone();
            }
            a.updated_at = now;
            if !matches!(a.scope, Scope::Agent(_)) {
                tx.documents().clear_text(a.id).await?;
                let mut parts = vec![(String::new(), a.filename.clone())];
                parts.extend(p.parts.iter().cloned());
                tx.documents().index_text(a.id, &parts, &[]).await?;
            }
            let e = self
                .write_back(tx, &mut a, "document.rebuilt", actor, &[])
                .await?;
            if let Some(e) = &e {
                self.keep_references(tx, &a, &p.refs, None, e).await?;
            }
            tracing::warn!(artifact = %a.id, "document rebuilt from its markdown");
            let view = ArtifactView::of(&a);
            after.keep_document(Some((a, p.doc)));
            Ok(view)
        })
    }

    /// Whether a document has edits of the last five minutes not yet settled.
    fn is_document_live(&self, a: &Artifact) -> bool {
        !a.settled && self.console.now() - a.changed_at < settle_after()
    }
}
