//! A document's blocks (with their reference counts) and its page's HTML.

use super::*;

/// `{incoming, outgoing}` reference counts of a block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RefCounts {
    pub incoming: i64,
    pub outgoing: i64,
}

/// A block of the blocks answer: the engine's entry with its reference counts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockEntry {
    #[serde(flatten)]
    pub block: doc::BlockInfo,
    pub refs: RefCounts,
}

/// `{token, blocks}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlocksView {
    pub token: String,
    pub blocks: Vec<BlockEntry>,
}

/// One block's position: the entry, with `table` for a table, row or cell.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockView {
    #[serde(flatten)]
    pub position: doc::BlockPosition,
    pub refs: RefCounts,
}

/// A document as its page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub artifact: ArtifactView,
    /// The engine's sanitized HTML (no raw HTML passes; only safe URL schemes), which knows its
    /// top-level blocks ([`doc::SafeHtml::part`]).
    pub html: doc::SafeHtml,
    /// The document's token: the HTML is of this text.
    pub token: String,
    pub versions: Vec<VersionInfo>,
}

/// The typed document block schema (JSON Schema 2020-12).
pub fn block_schema() -> Value {
    doc::block_schema()
}

/// Where a console ref goes on the pages, if anywhere.
fn page_of(url: &str) -> Option<String> {
    Some(match doc::parse_ref(url)? {
        doc::RefTarget::Issue { key } => format!("/issues/{key}"),
        doc::RefTarget::Project { key } => format!("/projects/{key}/issues"),
        doc::RefTarget::Artifact { id } => format!("/artifacts/{id}"),
        _ => return None,
    })
}

/// The blocks answer of a document with its reference counts.
fn blocks_view(d: &Document, counts: &HashMap<String, RefCounts>) -> BlocksView {
    BlocksView {
        token: d.token().to_owned(),
        blocks: d
            .blocks()
            .into_iter()
            .map(|block| BlockEntry {
                refs: counts.get(&*block.id).copied().unwrap_or_default(),
                block,
            })
            .collect(),
    }
}

impl Documents<'_> {
    /// A document by id for a read: settled first when due, loaded, with its row.
    async fn read_document(
        &self,
        id: ArtifactId,
    ) -> Result<(Artifact, Document, Box<dyn WorkTx>), Error> {
        let a = self.current(id).await?;
        if a.kind != ArtifactKind::Document {
            return Err(not_document());
        }
        let mut tx = self.read().await?;
        let d = self.loaded(&mut *tx, &a).await?;
        Ok((a, d, tx))
    }

    /// Per block, its reference counts.
    async fn ref_counts(
        &self,
        tx: &mut dyn WorkTx,
        a: &Artifact,
    ) -> Result<HashMap<String, RefCounts>, Error> {
        Ok(tx
            .documents()
            .block_ref_counts(&artifact_ref(a))
            .await?
            .into_iter()
            .map(|(b, incoming, outgoing)| (b, RefCounts { incoming, outgoing }))
            .collect())
    }

    /// A document's blocks with ranges, tokens and reference counts, in document order.
    pub async fn blocks(&self, id: ArtifactId) -> Result<BlocksView, Error> {
        let (a, d, mut tx) = self.read_document(id).await?;
        let counts = self.ref_counts(&mut *tx, &a).await?;
        Ok(blocks_view(&d, &counts))
    }

    /// The blocks answer as JSON, serialized once per document state and reference counts:
    /// listing a large document's blocks costs far more than sending them again (a 1 MiB
    /// document has tens of thousands), and the answer changes only with the document (its
    /// sequence and token) or its edges.
    pub async fn blocks_json(&self, id: ArtifactId) -> Result<Arc<[u8]>, Error> {
        let a = self.current(id).await?;
        if a.kind != ArtifactKind::Document {
            return Err(not_document());
        }
        let mut tx = self.read().await?;
        let mut counts = tx.documents().block_ref_counts(&artifact_ref(&a)).await?;
        counts.sort();
        if let Some(json) = self.console.documents.answered(&a, &counts) {
            return Ok(json);
        }
        let d = self.loaded(&mut *tx, &a).await?;
        let by_block: HashMap<&str, (i64, i64)> = counts
            .iter()
            .map(|(b, incoming, outgoing)| (b.as_str(), (*incoming, *outgoing)))
            .collect();
        // The engine writes the list straight from its tree (the bytes serde would give for
        // [`BlocksView`]), each block's `refs` added before its closing brace.
        let mut out = Vec::new();
        out.extend_from_slice(b"{\"token\":\"");
        out.extend_from_slice(d.token().as_bytes());
        out.extend_from_slice(b"\",\"blocks\":");
        d.write_blocks_json(&mut out, &mut |id, out| match by_block.get(id) {
            None => out.extend_from_slice(b",\"refs\":{\"incoming\":0,\"outgoing\":0}"),
            Some((incoming, outgoing)) => out.extend_from_slice(
                format!(",\"refs\":{{\"incoming\":{incoming},\"outgoing\":{outgoing}}}").as_bytes(),
            ),
        });
        out.push(b'}');
        let json: Arc<[u8]> = out.into();
        self.console.documents.keep_answer(&a, counts, &json);
        Ok(json)
    }

    /// One block's position (TARGET_NOT_FOUND for an id the document lacks).
    pub async fn block(&self, id: ArtifactId, block: &str) -> Result<BlockView, Error> {
        let (a, d, mut tx) = self.read_document(id).await?;
        let position = d.position(block).ok_or_else(|| {
            Error::with_message(
                ErrorCode::TARGET_NOT_FOUND,
                "the document has no block with this id",
            )
        })?;
        let refs = self
            .ref_counts(&mut *tx, &a)
            .await?
            .get(block)
            .copied()
            .unwrap_or_default();
        Ok(BlockView { position, refs })
    }

    /// A document for its page: the sanitized HTML (console refs pointing at the pages) and
    /// the versions.
    pub async fn rendered(&self, id: ArtifactId) -> Result<Rendered, Error> {
        let (a, d, mut tx) = self.read_document(id).await?;
        let versions = tx.documents().versions(a.id).await?;
        Ok(Rendered {
            artifact: ArtifactView::of(&a),
            html: self.console.documents.html(&a, || d.to_html_with(&page_of)),
            token: d.token().to_owned(),
            versions: versions.iter().map(VersionInfo::of).collect(),
        })
    }
}
