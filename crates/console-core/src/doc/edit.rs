//! Edit ops (protocol §6.2 "Edits", "Quote", "Stale write") and the splice that applies them:
//! only the top-level blocks an op touches are parsed again, every other block keeps its id,
//! range text and token (its offset moves).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::block::{BlockType, Node, Token};
use super::{Document, Top, parse, table};
use crate::clock::sha256_hex;

/// A W3C TextQuoteSelector (Web Annotation Data Model §4.2.4): `exact` must occur once in the
/// scope with `prefix` right before it and `suffix` right after (both checked against the whole
/// document, so they may reach outside a block scope).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Quote {
    pub exact: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub suffix: Option<String>,
}

impl Quote {
    pub fn exact(exact: impl Into<String>) -> Self {
        Quote {
            exact: exact.into(),
            prefix: None,
            suffix: None,
        }
    }
}

/// One edit op, as the wire writes it: `{"op": "replace", "quote": {…}, "text": "…"}`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum EditOp {
    /// The quoted text becomes `text` (markdown, parsed again with the blocks it touches).
    Replace {
        quote: Quote,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        block: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        block_token: Option<String>,
    },
    /// `text` goes in right before the quoted text.
    InsertBefore {
        quote: Quote,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        block: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        block_token: Option<String>,
    },
    /// `text` goes in right after the quoted text.
    InsertAfter {
        quote: Quote,
        text: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        block: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        block_token: Option<String>,
    },
    /// The quoted text goes.
    Delete {
        quote: Quote,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        block: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        block_token: Option<String>,
    },
    /// Row `index` of table `block` goes (from 1: row 0 is the header and stays).
    DeleteRow {
        block: String,
        index: usize,
        block_token: String,
    },
    /// Column `index` (from 0) of table `block` goes; a table keeps one column at least.
    DeleteColumn {
        block: String,
        index: usize,
        block_token: String,
    },
}

impl EditOp {
    /// The block the op names, if any.
    pub fn block(&self) -> Option<&str> {
        match self {
            EditOp::Replace { block, .. }
            | EditOp::InsertBefore { block, .. }
            | EditOp::InsertAfter { block, .. }
            | EditOp::Delete { block, .. } => block.as_deref(),
            EditOp::DeleteRow { block, .. } | EditOp::DeleteColumn { block, .. } => Some(block),
        }
    }

    /// The token the op expects its block to have, if any.
    pub fn block_token(&self) -> Option<&str> {
        match self {
            EditOp::Replace { block_token, .. }
            | EditOp::InsertBefore { block_token, .. }
            | EditOp::InsertAfter { block_token, .. }
            | EditOp::Delete { block_token, .. } => block_token.as_deref(),
            EditOp::DeleteRow { block_token, .. } | EditOp::DeleteColumn { block_token, .. } => {
                Some(block_token)
            }
        }
    }
}

/// Why an edit was refused; nothing applied. `op` is the op's index in the request, from 0.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// A stale `expected_token` or `block_token`. `token` is the document's current token and
    /// `blocks` the current token of every block, by id.
    #[error("the document changed since the token given; nothing was applied")]
    DocumentChanged {
        token: String,
        blocks: BTreeMap<String, String>,
    },
    #[error("op {op}: the quote matches nothing in its scope")]
    QuoteNotFound { op: usize },
    #[error("op {op}: the quote matches {matches} times in its scope")]
    QuoteAmbiguous { op: usize, matches: usize },
    /// A block id, table row or column the document lacks.
    #[error("op {op}: the document has no such block, row or column")]
    TargetNotFound { op: usize },
    /// An op the document cannot take (an empty quote, a table op on another block, the header
    /// row, a table's last column, a `block_token` without `block`).
    #[error("op {op}: {message}")]
    Invalid { op: usize, message: String },
}

impl From<EditError> for crate::Error {
    fn from(e: EditError) -> Self {
        use crate::ErrorCode;
        let message = e.to_string();
        match e {
            EditError::DocumentChanged { token, blocks } => {
                crate::Error::with_message(ErrorCode::DOCUMENT_CHANGED, message)
                    .with_detail("token", token)
                    .with_detail("blocks", blocks)
            }
            EditError::QuoteNotFound { op } => {
                crate::Error::with_message(ErrorCode::QUOTE_NOT_FOUND, message)
                    .with_detail("op", op)
            }
            EditError::QuoteAmbiguous { op, matches } => {
                crate::Error::with_message(ErrorCode::QUOTE_AMBIGUOUS, message)
                    .with_detail("op", op)
                    .with_detail("matches", matches)
            }
            EditError::TargetNotFound { op } => {
                crate::Error::with_message(ErrorCode::TARGET_NOT_FOUND, message)
                    .with_detail("op", op)
            }
            EditError::Invalid { op, .. } => {
                crate::Error::with_message(ErrorCode::ARTIFACT_INPUT, message).with_detail("op", op)
            }
        }
    }
}

/// A successful edit: the new document, the blocks whose token changed or that were created
/// (`(id, token)`, document order), and the ids of the blocks removed (their old order).
#[derive(Clone, Debug)]
pub struct Edited {
    pub document: Document,
    pub changed: Vec<(String, String)>,
    pub removed: Vec<String>,
}

/// Whether `id` is a block id: `^[A-Za-z0-9_-]{1,64}$`.
pub fn valid_block_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A fresh id from the caller's source; one that is not a block id is replaced by a digest of
/// it (so a bad source cannot break the id rule).
pub(crate) fn fresh(new_id: &mut dyn FnMut() -> String) -> Arc<str> {
    let id = new_id();
    if valid_block_id(&id) {
        Arc::from(id)
    } else {
        Arc::from(sha256_hex(&id).get(..32).unwrap_or_default())
    }
}

pub(crate) fn assign_fresh(node: &mut Node, new_id: &mut dyn FnMut() -> String) {
    node.id = fresh(new_id);
    for c in &mut node.children {
        assign_fresh(c, new_id);
    }
}

/// Longest common subsequence of two sequences under `eq`, as index pairs. The caller keeps
/// `a.len() * b.len()` small.
fn lcs<A, B>(a: &[A], b: &[B], eq: impl Fn(&A, &B) -> bool) -> Vec<(usize, usize)> {
    let (n, m) = (a.len(), b.len());
    let mut t = vec![0u32; (n + 1) * (m + 1)];
    let at = |i: usize, j: usize| i * (m + 1) + j;
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            t[at(i, j)] = if eq(&a[i], &b[j]) {
                t[at(i + 1, j + 1)] + 1
            } else {
                t[at(i + 1, j)].max(t[at(i, j + 1)])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::new();
    while i < n && j < m {
        if eq(&a[i], &b[j]) {
            out.push((i, j));
            i += 1;
            j += 1;
        } else if t[at(i + 1, j)] >= t[at(i, j + 1)] {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

const LCS_CAP: usize = 250_000;

/// Gives the new nodes of a re-parsed region the ids of the old nodes they continue: siblings
/// with the same type and text first (common prefix, suffix, then a longest common
/// subsequence), then siblings of the same type in order between those; a matched pair's
/// children are matched the same way. Unmatched new nodes get fresh ids.
pub(crate) fn match_ids(old: &[&Node], new: &mut [Node], new_id: &mut dyn FnMut() -> String) {
    let same = |o: &&Node, n: &Node| o.kind == n.kind && o.token == n.token;
    let mut p = 0;
    while p < old.len() && p < new.len() && same(&old[p], &new[p]) {
        p += 1;
    }
    let mut s = 0;
    while s < old.len() - p
        && s < new.len() - p
        && same(&old[old.len() - 1 - s], &new[new.len() - 1 - s])
    {
        s += 1;
    }
    for i in 0..p {
        adopt(old[i], &mut new[i], new_id);
    }
    let (ol, nl) = (old.len(), new.len());
    for i in 0..s {
        adopt(old[ol - 1 - i], &mut new[nl - 1 - i], new_id);
    }
    let om = &old[p..ol - s];
    let nm = &mut new[p..nl - s];
    let anchors = if om.len().saturating_mul(nm.len()) <= LCS_CAP {
        lcs(om, nm, |o, n| same(o, n))
    } else {
        Vec::new()
    };
    let (mut oi, mut ni) = (0, 0);
    for (ao, an) in anchors
        .into_iter()
        .chain(std::iter::once((om.len(), nm.len())))
    {
        pair_by_kind(&om[oi..ao], &mut nm[ni..an], new_id);
        if let (Some(o), Some(n)) = (om.get(ao), nm.get_mut(an)) {
            adopt(o, n, new_id);
        }
        oi = ao + 1;
        ni = an + 1;
    }
}

fn adopt(old: &Node, new: &mut Node, new_id: &mut dyn FnMut() -> String) {
    new.id = old.id.clone();
    let children: Vec<&Node> = old.children.iter().collect();
    match_ids(&children, &mut new.children, new_id);
}

fn pair_by_kind(old: &[&Node], new: &mut [Node], new_id: &mut dyn FnMut() -> String) {
    let pairs = if old.len().saturating_mul(new.len()) <= LCS_CAP {
        lcs(old, new, |o, n| o.kind == n.kind)
    } else if old.len() == new.len() && old.iter().zip(new.iter()).all(|(o, n)| o.kind == n.kind) {
        (0..old.len()).map(|i| (i, i)).collect()
    } else {
        Vec::new()
    };
    let mut matched = vec![false; new.len()];
    for (o, n) in pairs {
        if let (Some(o), Some(slot)) = (old.get(o), new.get_mut(n)) {
            adopt(o, slot, new_id);
            matched[n] = true;
        }
    }
    for (n, done) in new.iter_mut().zip(matched) {
        if !done {
            assign_fresh(n, new_id);
        }
    }
}

/// Whether two canonical chunks stay two chunks, the same, when written one after the other.
fn separate(first: &str, second: &str) -> bool {
    let text = parse::join([first, second]);
    let ranges = parse::chunk_ranges(&text);
    let b = first.len() + 2;
    ranges == [(0, first.len()), (b, b + second.len())]
}

impl Document {
    /// The text of top-level block `i`.
    pub(crate) fn top_text(&self, i: usize) -> &str {
        self.tops
            .get(i)
            .and_then(|t| self.markdown.get(t.start..t.start + t.node.end))
            .unwrap_or("")
    }

    /// Replaces bytes `a..b` of the canonical markdown with `text` and parses again the
    /// top-level blocks the change touches (those whose closed range `[start, end]` meets
    /// `[a, b]`), widened by any neighbour the new text joins with. Every other top-level block
    /// is kept as it is (shared, its offset moved).
    pub(crate) fn splice(
        &self,
        a: usize,
        b: usize,
        text: &str,
        new_id: &mut dyn FnMut() -> String,
    ) -> Document {
        let md = &self.markdown;
        let a = parse::floor_boundary(md, a);
        let b = parse::ceil_boundary(md, b.max(a));
        let mut lo = self.tops.partition_point(|t| t.end() < a);
        let mut hi = self.tops.partition_point(|t| t.start <= b).max(lo);
        let (rs, re) = if lo < hi {
            (a.min(self.tops[lo].start), b.max(self.tops[hi - 1].end()))
        } else {
            (a, b)
        };
        let mut region = String::with_capacity(re - rs + text.len());
        region.push_str(md.get(rs..a).unwrap_or(""));
        region.push_str(text);
        region.push_str(md.get(b..re).unwrap_or(""));
        let (canon, ranges, mut nodes) = self.reparse(region, &mut lo, &mut hi);
        let old: Vec<&Node> = self.tops[lo..hi].iter().map(|t| t.node.as_ref()).collect();
        match_ids(&old, &mut nodes, new_id);
        self.assemble(lo, hi, &canon, &ranges, nodes)
    }

    /// Parses `region` (the new text with the top-level blocks `lo..hi` it touches) into
    /// canonical blocks, widening `lo..hi` by a neighbour while the new text's first or last
    /// block would join it, until every edge separates.
    fn reparse(
        &self,
        mut region: String,
        lo: &mut usize,
        hi: &mut usize,
    ) -> (String, parse::Chunks, Vec<Node>) {
        let n = self.tops.len();
        loop {
            let (canon, ranges, nodes) = parse::canonical(&region);
            let chunk = |i: usize| {
                ranges
                    .get(i)
                    .and_then(|&(s, e)| canon.get(s..e))
                    .unwrap_or("")
            };
            let first = if ranges.is_empty() {
                (*hi < n).then(|| self.top_text(*hi))
            } else {
                Some(chunk(0))
            };
            let last = if ranges.is_empty() {
                lo.checked_sub(1).map(|i| self.top_text(i))
            } else {
                Some(chunk(ranges.len() - 1))
            };
            if *lo > 0
                && let Some(first) = first
                && !separate(self.top_text(*lo - 1), first)
            {
                *lo -= 1;
                region = parse::join([self.top_text(*lo), canon.trim_end_matches('\n')]);
                continue;
            }
            if *hi < n
                && let Some(last) = last
                && !separate(last, self.top_text(*hi))
            {
                region = parse::join([canon.trim_end_matches('\n'), self.top_text(*hi)]);
                *hi += 1;
                continue;
            }
            break (canon, ranges, nodes);
        }
    }

    /// The document with top-level blocks `lo..hi` replaced by `nodes` (at `ranges` of
    /// `canon`), the blocks before kept in place and those after shifted.
    fn assemble(
        &self,
        lo: usize,
        hi: usize,
        canon: &str,
        ranges: &parse::Chunks,
        nodes: Vec<Node>,
    ) -> Document {
        let md = &self.markdown;
        let n = self.tops.len();
        let left_end = lo.checked_sub(1).map(|i| self.tops[i].end()).unwrap_or(0);
        let right_start = self.tops.get(hi).map(|t| t.start).unwrap_or(md.len());
        let left = md.get(..left_end).unwrap_or("");
        let mid = canon.strip_suffix('\n').unwrap_or(canon);
        let right = if hi < n {
            md.get(right_start..md.len().saturating_sub(1))
                .unwrap_or("")
        } else {
            ""
        };
        let mut markdown = String::with_capacity(left.len() + mid.len() + right.len() + 5);
        let mut tops = Vec::with_capacity(lo + nodes.len() + (n - hi));
        tops.extend(self.tops[..lo].iter().cloned());
        markdown.push_str(left);
        if !mid.is_empty() {
            if !markdown.is_empty() {
                markdown.push_str("\n\n");
            }
            let base = markdown.len();
            markdown.push_str(mid);
            for (node, &(s, _)) in nodes.into_iter().zip(ranges) {
                tops.push(Top {
                    start: base + s,
                    node: Arc::new(node),
                });
            }
        }
        if !right.is_empty() {
            if !markdown.is_empty() {
                markdown.push_str("\n\n");
            }
            let shift = markdown.len() as isize - right_start as isize;
            markdown.push_str(right);
            tops.extend(self.tops[hi..].iter().map(|t| Top {
                start: (t.start as isize + shift) as usize,
                node: Arc::clone(&t.node),
            }));
        }
        if !markdown.is_empty() {
            markdown.push('\n');
        }
        let token = sha256_hex(&markdown);
        Document {
            markdown,
            token,
            tops,
            tasks: Default::default(),
        }
    }

    /// The absolute range of block `id`, with its node and the index of its top-level block.
    pub(crate) fn locate_block(&self, id: &str) -> Option<(usize, usize, &Node, usize)> {
        for (i, top) in self.tops.iter().enumerate() {
            let mut found = None;
            top.node.walk(&mut |node| {
                if found.is_none() && *node.id == *id {
                    found = Some(node);
                }
            });
            if let Some(node) = found {
                return Some((top.start + node.start, top.start + node.end, node, i));
            }
        }
        None
    }

    /// Where the quote matches, once, within `block`'s range (else the whole document).
    fn find_quote(
        &self,
        op: usize,
        quote: &Quote,
        block: Option<&str>,
    ) -> Result<(usize, usize), EditError> {
        if quote.exact.is_empty() {
            return Err(EditError::Invalid {
                op,
                message: "quote.exact is empty".into(),
            });
        }
        let md = &self.markdown;
        let (s, e) = match block {
            Some(id) => {
                let (s, e, _, _) = self
                    .locate_block(id)
                    .ok_or(EditError::TargetNotFound { op })?;
                (s, e)
            }
            None => (0, md.len()),
        };
        let scope = md.get(s..e).unwrap_or("");
        let exact = quote.exact.as_str();
        let mut matches = 0;
        let mut found = (0, 0);
        let mut from = 0;
        while let Some(pos) = scope.get(from..).and_then(|rest| rest.find(exact)) {
            let at = s + from + pos;
            let end = at + exact.len();
            let prefix_ok = quote
                .prefix
                .as_deref()
                .is_none_or(|p| md.get(..at).is_some_and(|before| before.ends_with(p)));
            let suffix_ok = quote
                .suffix
                .as_deref()
                .is_none_or(|x| md.get(end..).is_some_and(|after| after.starts_with(x)));
            if prefix_ok && suffix_ok {
                matches += 1;
                found = (at, end);
            }
            let step = scope
                .get(from + pos..)
                .and_then(|r| r.chars().next())
                .map(char::len_utf8)
                .unwrap_or(1);
            from += pos + step;
        }
        match matches {
            0 => Err(EditError::QuoteNotFound { op }),
            1 => Ok(found),
            matches => Err(EditError::QuoteAmbiguous { op, matches }),
        }
    }

    /// The table op's table: its absolute range and node.
    fn table(&self, op: usize, id: &str) -> Result<(usize, usize, &Node), EditError> {
        let (s, e, node, _) = self
            .locate_block(id)
            .ok_or(EditError::TargetNotFound { op })?;
        if node.kind != BlockType::Table {
            return Err(EditError::Invalid {
                op,
                message: format!("block {id} is a {}, not a table", node.kind.as_str()),
            });
        }
        Ok((s, e, node))
    }

    /// Applies one op to this (intermediate) document.
    fn apply_op(
        &self,
        op: usize,
        edit: &EditOp,
        new_id: &mut dyn FnMut() -> String,
    ) -> Result<Document, EditError> {
        match edit {
            EditOp::Replace {
                quote, text, block, ..
            } => {
                let (a, b) = self.find_quote(op, quote, block.as_deref())?;
                Ok(self.splice(a, b, text, new_id))
            }
            EditOp::InsertBefore {
                quote, text, block, ..
            } => {
                let (a, _) = self.find_quote(op, quote, block.as_deref())?;
                Ok(self.splice(a, a, text, new_id))
            }
            EditOp::InsertAfter {
                quote, text, block, ..
            } => {
                let (_, b) = self.find_quote(op, quote, block.as_deref())?;
                Ok(self.splice(b, b, text, new_id))
            }
            EditOp::Delete { quote, block, .. } => {
                let (a, b) = self.find_quote(op, quote, block.as_deref())?;
                Ok(self.splice(a, b, "", new_id))
            }
            EditOp::DeleteRow { block, index, .. } => self.delete_row(op, block, *index, new_id),
            EditOp::DeleteColumn { block, index, .. } => {
                self.delete_column(op, block, *index, new_id)
            }
        }
    }

    /// Deletes row `index` of table `block` (not its header row 0): the row's whole line.
    fn delete_row(
        &self,
        op: usize,
        block: &str,
        index: usize,
        new_id: &mut dyn FnMut() -> String,
    ) -> Result<Document, EditError> {
        let (_, _, table) = self.table(op, block)?;
        if index == 0 {
            return Err(EditError::Invalid {
                op,
                message: "row 0 is the header and cannot be deleted".into(),
            });
        }
        let top_start = self.top_start_of(block).unwrap_or(0);
        let row = table
            .children
            .get(index)
            .ok_or(EditError::TargetNotFound { op })?;
        let md = &self.markdown;
        let (rs, re) = (top_start + row.start, top_start + row.end);
        let line_start = md
            .get(..rs)
            .and_then(|s| s.rfind('\n'))
            .map_or(0, |p| p + 1);
        let line_end = md
            .get(re..)
            .and_then(|s| s.find('\n'))
            .map_or(md.len(), |p| re + p + 1);
        Ok(self.splice(line_start, line_end, "", new_id))
    }

    /// Deletes column `index` of table `block` from every line of it (a table keeps one).
    fn delete_column(
        &self,
        op: usize,
        block: &str,
        index: usize,
        new_id: &mut dyn FnMut() -> String,
    ) -> Result<Document, EditError> {
        let (ts, te, table) = self.table(op, block)?;
        let columns = table.children.first().map_or(0, |h| h.children.len());
        if index >= columns {
            return Err(EditError::TargetNotFound { op });
        }
        if columns == 1 {
            return Err(EditError::Invalid {
                op,
                message: "a table keeps one column at least".into(),
            });
        }
        let md = &self.markdown;
        let line_start = md
            .get(..ts)
            .and_then(|s| s.rfind('\n'))
            .map_or(0, |p| p + 1);
        let indent = ts - line_start;
        let lines: Vec<String> = md
            .get(line_start..te)
            .unwrap_or("")
            .split('\n')
            .map(|line| {
                let cut = parse::floor_boundary(line, indent);
                let (prefix, row) = line.split_at(cut);
                format!("{prefix}{}", table::without_cell(row, index))
            })
            .collect();
        Ok(self.splice(line_start, te, &lines.join("\n"), new_id))
    }

    fn top_start_of(&self, id: &str) -> Option<usize> {
        self.locate_block(id).map(|(_, _, _, i)| self.tops[i].start)
    }

    /// The current tokens of the blocks the ops name.
    /// Every block's current token, by id: what a stale write answers (protocol §6.2 "Stale
    /// write": the current tokens), so a client re-reads only the blocks whose token moved.
    fn current_tokens(&self) -> BTreeMap<String, String> {
        self.blocks()
            .into_iter()
            .map(|b| (b.id.to_string(), b.token.to_string()))
            .collect()
    }

    /// Applies `ops` in order, all or none (protocol §6.2 "Edits"). Preconditions are checked
    /// against this document first: `expected_token` (the whole document's), each op's
    /// `block_token` (its block's): a stale one is [`EditError::DocumentChanged`]. Each op then
    /// applies to the document the ops before it made; a quote is matched in that document.
    pub fn apply(
        &self,
        expected_token: Option<&str>,
        ops: &[EditOp],
        new_id: &mut dyn FnMut() -> String,
    ) -> Result<Edited, EditError> {
        let stale = || EditError::DocumentChanged {
            token: self.token.clone(),
            blocks: self.current_tokens(),
        };
        if expected_token.is_some_and(|t| t != self.token) {
            return Err(stale());
        }
        for (i, op) in ops.iter().enumerate() {
            match (op.block(), op.block_token()) {
                (None, Some(_)) => {
                    return Err(EditError::Invalid {
                        op: i,
                        message: "block_token needs block".into(),
                    });
                }
                (Some(id), token) => {
                    let (_, _, node, _) = self
                        .locate_block(id)
                        .ok_or(EditError::TargetNotFound { op: i })?;
                    if token.is_some_and(|t| !node.token.is(t)) {
                        return Err(stale());
                    }
                }
                (None, None) => {}
            }
        }
        let mut current: Option<Document> = None;
        for (i, op) in ops.iter().enumerate() {
            let next = current.as_ref().unwrap_or(self).apply_op(i, op, new_id)?;
            current = Some(next);
        }
        Ok(self.edited(current.unwrap_or_else(|| self.clone())))
    }

    /// The [`Edited`] answer for `document`, an edit of this one: top-level blocks both share
    /// (the same allocation) are untouched and not looked into. An edit replaces a run of
    /// top-level blocks (several ops: a few runs), so the shared ones are first found as the
    /// common head and tail by pointer, and only the middles are compared. The new document's
    /// task count follows from this one's, when counted, and the two middles'.
    pub(crate) fn edited(&self, document: Document) -> Edited {
        let same = |a: &Top, b: &Top| Arc::ptr_eq(&a.node, &b.node);
        let (old, new) = (&self.tops[..], &document.tops[..]);
        let head = old.iter().zip(new).take_while(|(a, b)| same(a, b)).count();
        let tail = old[head..]
            .iter()
            .rev()
            .zip(new[head..].iter().rev())
            .take_while(|(a, b)| same(a, b))
            .count();
        let (old, new) = (&old[head..old.len() - tail], &new[head..new.len() - tail]);
        if let Some(&(done, total)) = self.tasks.get() {
            let (od, ot) = super::tasks_in(old);
            let (nd, nt) = super::tasks_in(new);
            let _ = document.tasks.set((
                done.saturating_sub(od).saturating_add(nd),
                total.saturating_sub(ot).saturating_add(nt),
            ));
        }
        let shared: HashSet<*const Node> = new.iter().map(|t| Arc::as_ptr(&t.node)).collect();
        let mut before: HashMap<&str, Token> = HashMap::new();
        let mut order: Vec<&str> = Vec::new();
        let kept: HashSet<*const Node> = old.iter().map(|t| Arc::as_ptr(&t.node)).collect();
        for top in old {
            if !shared.contains(&Arc::as_ptr(&top.node)) {
                top.node.walk(&mut |n| {
                    before.insert(&n.id, n.token);
                    order.push(&n.id);
                });
            }
        }
        let mut changed = Vec::new();
        let mut seen: HashSet<&str> = HashSet::new();
        for top in new {
            if kept.contains(&Arc::as_ptr(&top.node)) {
                continue;
            }
            top.node.walk(&mut |n| {
                seen.insert(&n.id);
                if before.get(&*n.id) != Some(&n.token) {
                    changed.push((n.id.to_string(), n.token.to_string()));
                }
            });
        }
        let removed = order
            .into_iter()
            .filter(|id| !seen.contains(*id))
            .map(str::to_owned)
            .collect();
        Edited {
            document,
            changed,
            removed,
        }
    }
}
