//! The document engine (issue 12), with no IO: markdown parsed into a block tree with stable
//! block ids, the canonical markdown written back, byte ranges and tokens per block, and the
//! quote-anchored edit ops of protocol §6.2.
//!
//! # API
//! - [`Document::parse`]`(markdown, new_id)`: any text to a document in canonical form, block
//!   ids from the caller's source (the console's injected entropy; tests pass a counter).
//! - [`Document::load`]`(markdown, ids)`: a stored document (canonical markdown plus its block
//!   ids in document order, [`Document::block_ids`]) back, or a [`LoadError`] when they do not
//!   fit (then the routes rebuild: parse afresh with new ids).
//! - [`Document::markdown`], [`Document::token`] (lowercase hex SHA-256 of the markdown),
//!   [`Document::blocks`] (the flat list of protocol §6.2, nested blocks included, with
//!   `path`; ids are `Arc<str>` and tokens [`Token`]s shared with the tree, so it is cheap),
//!   [`Document::write_blocks_json`] (the same list as JSON bytes, written straight from the
//!   tree, with room for the route's own fields per block: the blocks route's fast path),
//!   [`Document::position`] (one block, with `table` for tables, rows and cells).
//! - [`Document::apply`]`(expected_token, ops, new_id)`: the [`EditOp`]s of protocol §6.2, all
//!   or none, answering [`Edited`] `{document, changed, removed}` or an [`EditError`] (which
//!   converts into the console's [`crate::Error`]).
//! - [`Document::tasks`] (an issue's `progress.tasks`), [`Document::references`] (outgoing
//!   console refs), [`Document::to_html`] (sanitized), the ask helpers
//!   ([`Document::asks`], [`Document::insert_after_block`], [`Document::replace_block`],
//!   [`Document::remove_block`], [`write_ask`], [`read_ask`]) and [`block_schema`].
//!
//! # Canonical markdown
//! The engine keeps each top-level block's source lines as written (so a quote matches what an
//! author or agent wrote: comrak's own CommonMark writer escapes `_`, `[`, `#`, `<`, `!` …)
//! and normalizes what lies between them: LF line ends, one blank line between top-level
//! blocks, nothing before the first, one final LF (the empty document is the empty string).
//! `write ∘ parse` is therefore a fixpoint, shown by a property test.
//!
//! # Blocks
//! Block types are exactly the schema's ([`BlockType`]). Raw HTML blocks, `:::` directives
//! other than `:::ask`, and runs of link reference definitions are `paragraph` blocks kept as
//! text (never rendered as HTML). A paragraph that is only an inline image `![alt](url)` is an
//! `image` block; one that is only an inline link to a console artifact
//! `[name](countersign://artifact/<id>)` (or an agent conversation's artifact) is a `file`
//! block. An `:::ask` directive is an `ask` block, a leaf (its question and options are its
//! markdown, [`read_ask`]). List items with `[ ]` / `[x]` are `task_item`s. Tables nest
//! `table_row`s (row 0 the header; the delimiter row is no block) which nest `table_cell`s.
//!
//! # Edits
//! An op's change is a splice of the canonical markdown; only the top-level blocks it touches
//! are parsed again (see [`Document::apply`] and the notes for what "touched" means), so
//! every other block keeps its id and token, and the cost of an edit does not grow with the
//! document beyond copying its text and hashing it once.

mod ask;
mod block;
mod edit;
mod html;
mod json;
mod parse;
#[cfg(test)]
mod proptests;
pub mod refs;
mod schema;
mod table;
#[cfg(test)]
mod tests;

use std::collections::HashSet;
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::Arc;

pub use ask::{AskBlock, AskFormatError, AskOption, read_ask, write_ask};
pub use block::{
    BlockInfo, BlockPosition, BlockType, CellText, PathStep, Range, RowCells, TablePosition, Token,
};
use block::{Detail, Node};
pub use edit::{EditError, EditOp, Edited, Quote, valid_block_id};
pub use html::{HtmlPart, SafeHtml};
pub use refs::{OutgoingRef, RefKind, RefTarget, parse_ref};
pub use schema::block_schema;

use crate::clock::sha256_hex;

/// A document: its canonical markdown, token, and block tree. Cheap to clone (top-level blocks
/// are shared).
#[derive(Clone, Debug)]
pub struct Document {
    markdown: String,
    token: String,
    tops: Vec<Top>,
    /// `(done, total)` task-list items, once counted: an edit's document counts its own from
    /// this one's and the top-level blocks the edit replaced ([`Document::edited`]).
    tasks: std::sync::OnceLock<(u32, u32)>,
}

/// A top-level block: where it starts in the markdown, and its tree (ranges relative to that).
#[derive(Clone, Debug)]
pub(crate) struct Top {
    pub start: usize,
    pub node: Arc<Node>,
}

impl Top {
    pub fn end(&self) -> usize {
        self.start + self.node.end
    }
}

/// `(done, total)` task-list items in top-level blocks (nested lists included).
pub(crate) fn tasks_in(tops: &[Top]) -> (u32, u32) {
    let (mut done, mut total) = (0u32, 0u32);
    for top in tops {
        top.node.walk(&mut |n| {
            if let Detail::Task { checked } = n.detail {
                total = total.saturating_add(1);
                if checked {
                    done = done.saturating_add(1);
                }
            }
        });
    }
    (done, total)
}

/// Why a stored document does not load.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    #[error("the stored markdown is not in canonical form")]
    NotCanonical,
    #[error("the markdown has {blocks} blocks but {ids} ids are stored")]
    IdCount { blocks: usize, ids: usize },
    #[error("a stored block id is malformed")]
    MalformedId,
    #[error("a stored block id appears twice")]
    DuplicateId,
}

/// One `:::ask` block of a document: its block id and what it says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AskAt {
    pub block: String,
    pub ask: AskBlock,
}

impl Document {
    /// Parses any text (CRLF or CR line ends included) into a document in canonical form; every
    /// block gets an id from `new_id` (one that is no block id is replaced by a digest of it).
    pub fn parse(markdown: &str, new_id: &mut dyn FnMut() -> String) -> Document {
        let (markdown, ranges, nodes) = parse::canonical(markdown);
        let tops = nodes
            .into_iter()
            .zip(&ranges)
            .map(|(mut node, &(start, _))| {
                edit::assign_fresh(&mut node, new_id);
                Top {
                    start,
                    node: Arc::new(node),
                }
            })
            .collect();
        let token = sha256_hex(&markdown);
        Document {
            markdown,
            token,
            tops,
            tasks: Default::default(),
        }
    }

    /// Rebuilds a stored document: `markdown` must be canonical and `ids` its block ids in
    /// document order ([`Document::block_ids`]), valid and distinct.
    pub fn load(markdown: &str, ids: &[String]) -> Result<Document, LoadError> {
        // The ids first: each stored id is read once (they are scattered over the heap),
        // checked and copied while at hand, and the blocks take them as they are built. Their
        // refusals come after the markdown's and the count's, as the order of checks says.
        let mut shared: Vec<Arc<str>> = Vec::with_capacity(ids.len());
        let mut refused = None;
        for id in ids {
            if !valid_block_id(id) {
                refused = Some(LoadError::MalformedId);
                break;
            }
            shared.push(Arc::from(id.as_str()));
        }
        // An id repeated before the first malformed one is the first refusal.
        if has_duplicate(&shared) {
            refused = Some(LoadError::DuplicateId);
        }
        let given = refused.is_none().then_some(shared);
        let (ranges, nodes, blocks) =
            parse::canonical_tree(markdown, given).ok_or(LoadError::NotCanonical)?;
        if blocks != ids.len() {
            return Err(LoadError::IdCount {
                blocks,
                ids: ids.len(),
            });
        }
        if let Some(refused) = refused {
            return Err(refused);
        }
        let tops = nodes
            .into_iter()
            .zip(&ranges)
            .map(|(node, &(start, _))| Top {
                start,
                node: Arc::new(node),
            })
            .collect();
        Ok(Document {
            markdown: markdown.to_owned(),
            token: sha256_hex(markdown),
            tops,
            tasks: Default::default(),
        })
    }

    /// The canonical markdown.
    pub fn markdown(&self) -> &str {
        &self.markdown
    }

    /// The document's token: lowercase hex SHA-256 of the canonical markdown.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Every block id in document order (pre-order: a block before its children): what
    /// [`Document::load`] takes back.
    pub fn block_ids(&self) -> Vec<String> {
        let mut out = Vec::new();
        for top in &self.tops {
            top.node.walk(&mut |n| out.push(n.id.to_string()));
        }
        out
    }

    /// The flat list of blocks in document order, nested ones included. Each entry shares its
    /// id, `path` and `rows` with the tree and its siblings (no string is copied).
    pub fn blocks(&self) -> Vec<BlockInfo> {
        let mut out = Vec::with_capacity(self.tops.len() * 4);
        let root: Arc<[PathStep]> = Arc::from(Vec::new());
        for (index, top) in self.tops.iter().enumerate() {
            let text = self.markdown.get(top.start..).unwrap_or_default();
            collect(&top.node, top.start, text, index, &root, &mut out);
        }
        out
    }

    /// The blocks list as JSON, written straight from the tree: the bytes
    /// `serde_json::to_vec(&self.blocks())` gives, but with `extra(id, out)` called before each
    /// block's closing brace, so a caller can add fields of its own (the routes'
    /// `,"refs":{…}`) where a `#[serde(flatten)]` wrapper would put them. Appends to `out`.
    pub fn write_blocks_json(&self, out: &mut Vec<u8>, extra: &mut dyn FnMut(&str, &mut Vec<u8>)) {
        json::write_blocks(self, out, extra);
    }

    /// One block as in [`Document::blocks`], plus its place in a table for a table, table row
    /// or table cell; None when the document has no such block.
    pub fn position(&self, id: &str) -> Option<BlockPosition> {
        for (index, top) in self.tops.iter().enumerate() {
            let mut chain: Vec<(&Node, usize)> = Vec::new();
            if find_chain(&top.node, index, id, &mut chain) {
                let (node, _) = *chain.last()?;
                let path = chain[..chain.len() - 1]
                    .iter()
                    .map(|(n, i)| PathStep {
                        kind: n.kind,
                        id: Arc::clone(&n.id),
                        index: *i,
                    })
                    .collect();
                let text = self.markdown.get(top.start..).unwrap_or_default();
                let block = info(node, top.start, text, path);
                let table = table_position(&chain, text);
                return Some(BlockPosition { block, table });
            }
        }
        None
    }

    /// Task-list items anywhere (nested lists included): `(done, total)`, None when there are
    /// none.
    pub fn tasks(&self) -> Option<(u32, u32)> {
        let (done, total) = *self.tasks.get_or_init(|| tasks_in(&self.tops));
        (total > 0).then_some((done, total))
    }

    /// Every console ref in links, images and autolinks, with the innermost block it appears
    /// in; kind `embed` for images, `link` otherwise. Reference-style links count (they are
    /// resolved against the whole document). One entry per (block, ref, kind), document order.
    pub fn references(&self) -> Vec<OutgoingRef> {
        let found = parse::with_ast(&self.markdown, parse::collect_refs);
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        for (at, target, kind) in found {
            let Some(block) = self.innermost_at(at) else {
                continue;
            };
            let entry = OutgoingRef {
                block: block.to_owned(),
                to: target.to_url(),
                target,
                kind,
            };
            if seen.insert(entry.clone()) {
                out.push(entry);
            }
        }
        out
    }

    /// The id of the innermost block whose range holds byte `at`.
    pub(crate) fn innermost_at(&self, at: usize) -> Option<&str> {
        let i = self
            .tops
            .partition_point(|t| t.start <= at)
            .checked_sub(1)?;
        let top = self.tops.get(i)?;
        let rel = at - top.start;
        if rel > top.node.end {
            return None;
        }
        let mut node: &Node = &top.node;
        'down: loop {
            for child in &node.children {
                if child.start <= rel && rel < child.end.max(child.start + 1) {
                    node = child;
                    continue 'down;
                }
            }
            return Some(&*node.id);
        }
    }

    /// The document rendered for a page: sanitized HTML (no raw HTML passes, only `http`,
    /// `https`, `mailto`, `countersign` and relative URLs survive), each top-level element
    /// carrying `data-block="<id>"`.
    pub fn to_html(&self) -> SafeHtml {
        html::render(self, &|url| Some(url.to_owned()))
    }

    /// As [`Document::to_html`], with console refs (`countersign://…`) rewritten by `resolve`
    /// (None drops the link, keeping its text).
    pub fn to_html_with(&self, resolve: &dyn Fn(&str) -> Option<String>) -> SafeHtml {
        html::render(self, resolve)
    }

    /// The `:::ask` blocks, document order, with what they say (an ask block whose markdown
    /// does not read as an ask is left out).
    pub fn asks(&self) -> Vec<AskAt> {
        let mut out = Vec::new();
        for top in &self.tops {
            top.node.walk(&mut |n| {
                if n.kind == BlockType::Ask
                    && let Some(text) = self.markdown.get(top.start + n.start..top.start + n.end)
                    && let Some(ask) = read_ask(text)
                {
                    out.push(AskAt {
                        block: n.id.to_string(),
                        ask,
                    });
                }
            });
        }
        out
    }

    /// Inserts `markdown` (one or more blocks) after block `id`'s top-level block (a nested
    /// block's container stays whole). The error is [`EditError::TargetNotFound`] `{op: 0}`.
    pub fn insert_after_block(
        &self,
        id: &str,
        markdown: &str,
        new_id: &mut dyn FnMut() -> String,
    ) -> Result<Edited, EditError> {
        let (_, _, _, i) = self
            .locate_block(id)
            .ok_or(EditError::TargetNotFound { op: 0 })?;
        let end = self.tops[i].end();
        let text = format!("\n\n{markdown}");
        Ok(self.edited(self.splice(end, end, &text, new_id)))
    }

    /// Appends `markdown` as new blocks at the end of the document.
    pub fn append(&self, markdown: &str, new_id: &mut dyn FnMut() -> String) -> Edited {
        let end = self.markdown.len();
        let text = format!("\n\n{markdown}");
        self.edited(self.splice(end, end, &text, new_id))
    }

    /// Replaces block `id`'s markdown with `markdown`. For a nested block, the lines after the
    /// first get the container's prefix (`> ` kept, list markers become spaces).
    pub fn replace_block(
        &self,
        id: &str,
        markdown: &str,
        new_id: &mut dyn FnMut() -> String,
    ) -> Result<Edited, EditError> {
        let (s, e, _, _) = self
            .locate_block(id)
            .ok_or(EditError::TargetNotFound { op: 0 })?;
        let line_start = self
            .markdown
            .get(..s)
            .and_then(|t| t.rfind('\n'))
            .map_or(0, |p| p + 1);
        let prefix: String = self
            .markdown
            .get(line_start..s)
            .unwrap_or("")
            .chars()
            .map(|c| if c == '>' { '>' } else { ' ' })
            .collect();
        let text = if prefix.is_empty() {
            markdown.to_owned()
        } else {
            markdown
                .trim_end_matches('\n')
                .split('\n')
                .enumerate()
                .map(|(i, line)| {
                    if i == 0 {
                        line.to_owned()
                    } else {
                        format!("{prefix}{line}")
                    }
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        Ok(self.edited(self.splice(s, e, &text, new_id)))
    }

    /// Removes block `id` (its text; a container left empty goes too).
    pub fn remove_block(
        &self,
        id: &str,
        new_id: &mut dyn FnMut() -> String,
    ) -> Result<Edited, EditError> {
        let (s, e, _, _) = self
            .locate_block(id)
            .ok_or(EditError::TargetNotFound { op: 0 })?;
        Ok(self.edited(self.splice(s, e, "", new_id)))
    }

    /// The top-level blocks, for the renderer: start offset and tree.
    pub(crate) fn tops(&self) -> &[Top] {
        &self.tops
    }
}

/// Whether an id appears twice: their 64-bit hashes sorted (8 bytes an id, in order: far
/// fewer cache misses than a hash set of 75,000 strings), and only when two hashes meet, the
/// ids themselves compared.
fn has_duplicate(ids: &[Arc<str>]) -> bool {
    let hasher = BuildHasherDefault::<IdHasher>::default();
    let mut hashes: Vec<u64> = ids.iter().map(|id| hasher.hash_one(&**id)).collect();
    hashes.sort_unstable();
    if hashes.windows(2).all(|w| w[0] != w[1]) {
        return false;
    }
    let mut seen: HashSet<&str, BuildHasherDefault<IdHasher>> =
        HashSet::with_capacity_and_hasher(ids.len(), hasher);
    !ids.iter().all(|id| seen.insert(id))
}

/// FxHash (rustc's hasher, with a final mix) for `load`'s duplicate check: the ids are the engine's own, read
/// back from storage (no caller picks them), so a fast unkeyed hash is enough; SipHash was a
/// twentieth of a large document's load.
#[derive(Default)]
struct IdHasher(u64);

impl IdHasher {
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
}

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.add(u64::from_le_bytes(word));
        }
    }

    fn write_u8(&mut self, byte: u8) {
        self.add(u64::from(byte));
    }

    fn finish(&self) -> u64 {
        // The multiplications carry low bits up, never down: fold the high half in (the table
        // picks buckets by the low bits), as MurmurHash3's finalizer does.
        let mut x = self.0;
        x ^= x >> 33;
        x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
        x ^ (x >> 33)
    }
}

fn info(node: &Node, base: usize, text: &str, path: Arc<[PathStep]>) -> BlockInfo {
    BlockInfo {
        id: Arc::clone(&node.id),
        kind: node.kind,
        range: Range {
            start: base + node.start,
            end: base + node.end,
        },
        token: node.token,
        path,
        rows: node.rows(text).cloned(),
    }
}

/// Pushes `node`'s entry and its descendants' onto `out`; `path` is its ancestors', shared by
/// its siblings, and its children share one made here.
fn collect(
    node: &Node,
    base: usize,
    text: &str,
    index: usize,
    path: &Arc<[PathStep]>,
    out: &mut Vec<BlockInfo>,
) {
    out.push(info(node, base, text, Arc::clone(path)));
    if node.children.is_empty() {
        return;
    }
    let step = PathStep {
        kind: node.kind,
        id: Arc::clone(&node.id),
        index,
    };
    let inner: Arc<[PathStep]> = path.iter().cloned().chain(std::iter::once(step)).collect();
    for (i, child) in node.children.iter().enumerate() {
        collect(child, base, text, i, &inner, out);
    }
}

fn find_chain<'a>(
    node: &'a Node,
    index: usize,
    id: &str,
    chain: &mut Vec<(&'a Node, usize)>,
) -> bool {
    chain.push((node, index));
    if *node.id == *id {
        return true;
    }
    for (i, child) in node.children.iter().enumerate() {
        if find_chain(child, i, id, chain) {
            return true;
        }
    }
    chain.pop();
    false
}

fn table_position(chain: &[(&Node, usize)], text: &str) -> Option<TablePosition> {
    let t = chain
        .iter()
        .rposition(|(n, _)| n.kind == BlockType::Table)?;
    let (table, _) = chain[t];
    let row = chain.get(t + 1).map(|&(_, i)| i);
    let column = chain.get(t + 2).map(|&(_, i)| i);
    let texts = |row: usize| -> Vec<String> {
        table
            .children
            .get(row)
            .map(|r| r.cell_texts(text).into_iter().map(|c| c.text).collect())
            .unwrap_or_default()
    };
    // The header cell above: a cell's column in row 0 (the spec's "header cell text above").
    let header = column.and_then(|c| texts(0).into_iter().nth(c));
    let cells = row.map(texts).unwrap_or_default();
    Some(TablePosition {
        id: table.id.to_string(),
        row,
        column,
        header,
        cells,
    })
}
