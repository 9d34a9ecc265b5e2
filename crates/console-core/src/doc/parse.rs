//! Markdown to blocks, through comrak: the top-level chunks of a text, the canonical form, and
//! the owned block tree of one chunk.
//!
//! Canonical markdown keeps each top-level block's source lines as they are (so what an author
//! or agent wrote is what a quote matches) and normalizes what lies between them: LF line ends,
//! exactly one blank line between top-level blocks, none before the first, one final LF.
//! Lines that hold no block (link reference definitions) are kept as a text block of their own.

use comrak::nodes::{AstNode, NodeValue};
use comrak::{Arena, Options, parse_document};

use super::block::{BlockType, Detail, Node};
use crate::clock::sha256_hex;

/// The parser's options: CommonMark plus GFM tables and task lists and `:::` block directives.
/// Nothing else (no raw HTML rendering is ever asked of comrak: the engine renders itself).
pub(crate) fn options() -> Options<'static> {
    let mut o = Options::default();
    o.extension.table = true;
    o.extension.tasklist = true;
    o.extension.block_directive = true;
    o
}

/// CRLF and lone CR become LF.
pub(crate) fn normalize_newlines(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.contains('\r') {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(text.replace("\r\n", "\n").replace('\r', "\n"))
}

/// Line starts of a text, to turn comrak's (line, column) into byte offsets.
pub(crate) struct Lines<'t> {
    text: &'t str,
    starts: Vec<usize>,
}

impl<'t> Lines<'t> {
    pub fn new(text: &'t str) -> Self {
        let mut starts = Vec::with_capacity(text.len() / 40 + 1);
        starts.push(0);
        for (i, b) in text.bytes().enumerate() {
            if b == b'\n' {
                starts.push(i + 1);
            }
        }
        Lines { text, starts }
    }

    /// Number of lines (a final LF does not start another).
    pub fn count(&self) -> usize {
        if self.text.is_empty() {
            0
        } else if self.text.ends_with('\n') {
            self.starts.len().saturating_sub(1)
        } else {
            self.starts.len()
        }
    }

    /// Byte offset where 1-based `line` starts (the text's length past the end).
    pub fn start(&self, line: usize) -> usize {
        line.checked_sub(1)
            .and_then(|i| self.starts.get(i).copied())
            .unwrap_or(self.text.len())
            .min(self.text.len())
    }

    /// Byte offset where 1-based `line` ends, its LF excluded.
    pub fn end(&self, line: usize) -> usize {
        match self.starts.get(line) {
            Some(next) => next.saturating_sub(1).max(self.start(line)),
            None => self.text.len(),
        }
    }

    pub fn line(&self, line: usize) -> &'t str {
        self.text
            .get(self.start(line)..self.end(line))
            .unwrap_or("")
    }

    /// The byte offset of 1-based (line, column), clamped to the line and to a char boundary
    /// (rounded down).
    pub fn offset(&self, line: usize, column: usize) -> usize {
        let start = self.start(line);
        let at = (start + column.saturating_sub(1)).min(self.end(line));
        floor_boundary(self.text, at)
    }

    /// The exclusive byte offset just past the inclusive (line, column), clamped and rounded up
    /// to a char boundary.
    pub fn offset_after(&self, line: usize, column: usize) -> usize {
        let start = self.start(line);
        let at = (start + column).min(self.end(line));
        ceil_boundary(self.text, at)
    }
}

pub(crate) fn floor_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while at > 0 && !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}

pub(crate) fn ceil_boundary(text: &str, mut at: usize) -> usize {
    at = at.min(text.len());
    while at < text.len() && !text.is_char_boundary(at) {
        at += 1;
    }
    at
}

fn is_blank(line: &str) -> bool {
    line.bytes().all(|b| b == b' ' || b == b'\t')
}

/// The last line any node of a subtree reaches (comrak's end positions of a container can
/// stop short of its last child's text).
fn last_line<'a>(node: &'a AstNode<'a>) -> usize {
    let mut last = node.data.borrow().sourcepos.end.line;
    for d in node.descendants() {
        last = last.max(d.data.borrow().sourcepos.end.line);
    }
    last
}

/// The top-level chunks of `text` (LF line ends), as line spans (1-based, inclusive): one per
/// top-level block, plus one per run of non-blank lines no block covers (link reference
/// definitions). Blank lines at a chunk's edges are left out.
fn chunk_lines<'a>(root: &'a AstNode<'a>, lines: &Lines<'_>) -> Vec<(usize, usize)> {
    let count = lines.count();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for child in root.children() {
        let start = child.data.borrow().sourcepos.start.line.max(1);
        let end = last_line(child).max(start).min(count);
        if start > count {
            continue;
        }
        match spans.last_mut() {
            // Overlapping spans (never seen, but cheap to survive) become one chunk.
            Some(last) if start <= last.1 => last.1 = last.1.max(end),
            _ => spans.push((start, end)),
        }
    }
    // Runs of non-blank lines outside every span.
    let mut all = Vec::with_capacity(spans.len() + 4);
    let mut line = 1;
    let mut next = spans.iter().peekable();
    while line <= count {
        if let Some(&&(s, e)) = next.peek()
            && s <= line
        {
            all.push((s, e));
            line = e + 1;
            next.next();
            continue;
        }
        let limit = next.peek().map(|&&(s, _)| s).unwrap_or(count + 1);
        if is_blank(lines.line(line)) {
            line += 1;
            continue;
        }
        let gap_start = line;
        while line < limit && !is_blank(lines.line(line)) {
            line += 1;
        }
        all.push((gap_start, line - 1));
    }
    // Trim blank lines at both edges.
    all.into_iter()
        .filter_map(|(mut s, mut e)| {
            while s <= e && is_blank(lines.line(s)) {
                s += 1;
            }
            while e >= s && is_blank(lines.line(e)) {
                e -= 1;
            }
            (s <= e).then_some((s, e))
        })
        .collect()
}

/// The byte ranges of the top-level chunks of `text` (LF line ends).
pub(crate) fn chunk_ranges(text: &str) -> Vec<(usize, usize)> {
    let arena = Arena::new();
    let opts = options();
    let root = parse_document(&arena, text, &opts);
    let lines = Lines::new(text);
    chunk_lines(root, &lines)
        .into_iter()
        .map(|(s, e)| (lines.start(s), lines.end(e)))
        .collect()
}

/// Joins chunk texts the canonical way: one blank line between, one final LF.
pub(crate) fn join<'s>(chunks: impl IntoIterator<Item = &'s str>) -> String {
    let mut out = String::new();
    for c in chunks {
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(c);
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// The canonical markdown of `text` and its chunk ranges. The normalization is repeated until
/// it holds still (it does after one round for every input we know of; the bound keeps a
/// pathological one from looping).
pub(crate) fn canonical(text: &str) -> (String, Vec<(usize, usize)>) {
    let mut current = normalize_newlines(text).into_owned();
    for _ in 0..8 {
        let ranges = chunk_ranges(&current);
        let joined = join(ranges.iter().map(|&(s, e)| current.get(s..e).unwrap_or("")));
        if joined == current {
            return (current, ranges);
        }
        current = joined;
    }
    let ranges = chunk_ranges(&current);
    (current, ranges)
}

/// Builds the block trees of the chunks of `text` (one comrak parse), ranges relative to each
/// chunk's start, ids empty. `chunks` are the byte ranges [`chunk_ranges`] gives for `text`.
pub(crate) fn build_chunks(text: &str, chunks: &[(usize, usize)]) -> Vec<Node> {
    let arena = Arena::new();
    let opts = options();
    let root = parse_document(&arena, text, &opts);
    let lines = Lines::new(text);
    let builder = Builder {
        text,
        lines: &lines,
    };
    let tops: Vec<&AstNode<'_>> = root.children().collect();
    let mut next = 0;
    let mut out = Vec::with_capacity(chunks.len());
    for &(cs, ce) in chunks {
        let chunk_text = text.get(cs..ce).unwrap_or("");
        // The top-level AST nodes that start within this chunk.
        let mut inside = Vec::new();
        while let Some(node) = tops.get(next) {
            let start = lines.start(node.data.borrow().sourcepos.start.line);
            if start >= ce {
                break;
            }
            if start >= cs {
                inside.push(*node);
            }
            next += 1;
        }
        let node = match inside.as_slice() {
            [one] => builder
                .block(one, cs, (0, ce - cs))
                .unwrap_or_else(|| text_block(chunk_text)),
            _ => text_block(chunk_text),
        };
        let mut node = node;
        // The top-level block spans its whole chunk (its leading indentation included).
        node.start = 0;
        node.end = ce - cs;
        node.token = sha256_hex(chunk_text);
        out.push(node);
    }
    out
}

/// A block kept as text: raw HTML, reference definitions, other directives.
fn text_block(text: &str) -> Node {
    Node {
        id: String::new(),
        kind: BlockType::Paragraph,
        start: 0,
        end: text.len(),
        token: sha256_hex(text),
        detail: Detail::None,
        children: Vec::new(),
    }
}

struct Builder<'t, 'l> {
    text: &'t str,
    lines: &'l Lines<'t>,
}

impl Builder<'_, '_> {
    /// The absolute byte range of a node, its end the furthest any descendant reaches.
    fn range<'a>(&self, node: &'a AstNode<'a>) -> (usize, usize) {
        let sp = node.data.borrow().sourcepos;
        let start = self.lines.offset(sp.start.line, sp.start.column);
        let mut end = (sp.end.line, sp.end.column);
        for d in node.descendants() {
            let e = d.data.borrow().sourcepos.end;
            if (e.line, e.column) > end {
                end = (e.line, e.column);
            }
        }
        let end = self.lines.offset_after(end.0, end.1).max(start);
        (start, end)
    }

    /// The block a comrak node is, with its block children, or None for an inline node.
    /// `base` is the chunk's absolute start; `within` the parent's relative range, which the
    /// node's range is clamped into.
    fn block<'a>(
        &self,
        node: &'a AstNode<'a>,
        base: usize,
        within: (usize, usize),
    ) -> Option<Node> {
        let value = node.data.borrow().value.clone();
        let (abs_start, abs_end) = self.range(node);
        let start = abs_start.saturating_sub(base).clamp(within.0, within.1);
        let end = abs_end.saturating_sub(base).clamp(start, within.1);
        let mut detail = Detail::None;
        let mut nested = false;
        let kind = match &value {
            NodeValue::Heading(_) => BlockType::Heading,
            NodeValue::Paragraph => self.paragraph_kind(node, abs_start, abs_end),
            NodeValue::ThematicBreak => BlockType::ThematicBreak,
            NodeValue::CodeBlock(_) => BlockType::Code,
            NodeValue::HtmlBlock(_) => BlockType::Paragraph,
            NodeValue::BlockQuote => {
                nested = true;
                BlockType::Quote
            }
            NodeValue::List(_) => {
                nested = true;
                BlockType::List
            }
            NodeValue::Item(_) => {
                nested = true;
                BlockType::ListItem
            }
            NodeValue::TaskItem(t) => {
                nested = true;
                detail = Detail::Task {
                    checked: t.symbol.is_some(),
                };
                BlockType::TaskItem
            }
            NodeValue::Table(_) => {
                nested = true;
                BlockType::Table
            }
            NodeValue::TableRow(header) => {
                nested = true;
                detail = Detail::Row { header: *header };
                BlockType::TableRow
            }
            NodeValue::TableCell => {
                let text = self.text.get(abs_start..abs_end).unwrap_or("").to_owned();
                detail = Detail::Cell { text };
                BlockType::TableCell
            }
            NodeValue::BlockDirective(d) => {
                if is_ask_info(&d.info) {
                    BlockType::Ask
                } else {
                    BlockType::Paragraph
                }
            }
            NodeValue::Document => return None,
            v if v.block() => BlockType::Paragraph,
            _ => return None,
        };
        let mut children = Vec::new();
        if nested {
            for child in node.children() {
                if let Some(c) = self.block(child, base, (start, end)) {
                    children.push(c);
                }
            }
        }
        if kind == BlockType::TableRow {
            self.cells_from_line(base, start, end, &mut children);
        }
        let token = sha256_hex(self.text.get(base + start..base + end).unwrap_or(""));
        Some(Node {
            id: String::new(),
            kind,
            start,
            end,
            token,
            detail,
            children,
        })
    }

    /// A row's cells, from the row's own line split at its unescaped pipes (comrak pads a
    /// short row with empty cells placed on the row's last pipe): cell `i` is the `i`-th span,
    /// trimmed, or an empty range at the row's end when the line has fewer cells.
    fn cells_from_line(&self, base: usize, start: usize, end: usize, cells: &mut [Node]) {
        let line = self.text.get(base + start..base + end).unwrap_or("");
        let spans = super::table::cells(line);
        for (i, cell) in cells.iter_mut().enumerate() {
            let (s, e) = match spans.get(i) {
                Some(&(s, e)) => {
                    let raw = line.get(s..e).unwrap_or("");
                    let lead = raw.len() - raw.trim_start_matches([' ', '\t']).len();
                    let body = raw.trim_end_matches([' ', '\t']).len().max(lead);
                    (start + s + lead, start + s + body)
                }
                None => (end, end),
            };
            let text = self.text.get(base + s..base + e).unwrap_or("");
            cell.start = s;
            cell.end = e;
            cell.token = sha256_hex(text);
            cell.detail = Detail::Cell {
                text: text.to_owned(),
            };
        }
    }

    /// A paragraph that is one inline image is an `image` block; one inline link to a console
    /// artifact (`[name](countersign://artifact/<id>)`) is a `file` block. Only the inline form
    /// counts (the source ends with `)`), so the answer never depends on reference definitions
    /// elsewhere in the document.
    fn paragraph_kind<'a>(&self, node: &'a AstNode<'a>, start: usize, end: usize) -> BlockType {
        let source = self.text.get(start..end).unwrap_or("").trim();
        if !source.ends_with(')') {
            return BlockType::Paragraph;
        }
        let mut children = node.children();
        let (Some(only), None) = (children.next(), children.next()) else {
            return BlockType::Paragraph;
        };
        match &only.data.borrow().value {
            NodeValue::Image(_) if source.starts_with("![") => BlockType::Image,
            NodeValue::Link(link)
                if source.starts_with('[')
                    && super::refs::parse_ref(&link.url).is_some_and(|r| r.is_artifact()) =>
            {
                BlockType::File
            }
            _ => BlockType::Paragraph,
        }
    }
}

/// `:::ask …`: the directive's info string names `ask` first.
pub(crate) fn is_ask_info(info: &str) -> bool {
    info.split_whitespace().next() == Some("ask")
}

/// Parses `text` whole (with every reference definition in force) and calls `f` on each node
/// with its absolute byte range, for the views that need link resolution (references, HTML).
pub(crate) fn with_ast<R>(
    text: &str,
    f: impl for<'a> FnOnce(&'a AstNode<'a>, &Lines<'_>) -> R,
) -> R {
    let arena = Arena::new();
    let opts = options();
    let root = parse_document(&arena, text, &opts);
    let lines = Lines::new(text);
    f(root, &lines)
}
