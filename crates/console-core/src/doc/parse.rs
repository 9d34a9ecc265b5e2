//! Markdown to blocks, through comrak: the top-level chunks of a text, the canonical form, and
//! the owned block tree of one chunk.
//!
//! Canonical markdown keeps each top-level block's source lines as they are (so what an author
//! or agent wrote is what a quote matches) and normalizes what lies between them: LF line ends,
//! exactly one blank line between top-level blocks, none before the first, one final LF.
//! Lines that hold no block (link reference definitions) are kept as a text block of their own.

use comrak::nodes::{AstNode, NodeValue};
use comrak::{Arena, Options, parse_document};

use std::cell::{Cell, RefCell};
use std::sync::Arc;

use super::block::{BlockType, Detail, Node, Token};
use super::refs::{RefKind, RefTarget, parse_ref};

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

/// The furthest (line, column) a node or any of its descendants reaches (comrak's end
/// positions of a container can stop short of its last child's text).
fn reach<'a>(node: &'a AstNode<'a>) -> (usize, usize) {
    let mut end = (0, 0);
    for d in node.descendants() {
        let e = d.data.borrow().sourcepos.end;
        end = end.max((e.line, e.column));
    }
    end
}

/// The top-level chunks of `text` (LF line ends), as line spans (1-based, inclusive): one per
/// top-level block, plus one per run of non-blank lines no block covers (link reference
/// definitions). Blank lines at a chunk's edges are left out.
fn chunk_lines<'a>(root: &'a AstNode<'a>, lines: &Lines<'_>) -> Vec<(usize, usize)> {
    let count = lines.count();
    let mut spans: Vec<(usize, usize)> = Vec::new();
    for child in root.children() {
        let start = child.data.borrow().sourcepos.start.line.max(1);
        let end = reach(child).0.max(start).min(count);
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

/// The byte ranges of a text's top-level chunks, in order.
pub(crate) type Chunks = Vec<(usize, usize)>;

/// The byte ranges of the top-level chunks of a parsed text.
fn ranges_of<'a>(root: &'a AstNode<'a>, lines: &Lines<'_>) -> Vec<(usize, usize)> {
    chunk_lines(root, lines)
        .into_iter()
        .map(|(s, e)| (lines.start(s), lines.end(e)))
        .collect()
}

/// The byte ranges of the top-level chunks of `text` (LF line ends).
pub(crate) fn chunk_ranges(text: &str) -> Vec<(usize, usize)> {
    let arena = Arena::new();
    let opts = options();
    let root = parse_document(&arena, text, &opts);
    ranges_of(root, &Lines::new(text))
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

/// Whether `text` is its chunks joined the canonical way (`join` of the chunks equals `text`),
/// without building the joined text.
fn is_joined(text: &str, ranges: &[(usize, usize)]) -> bool {
    let bytes = text.as_bytes();
    let follows = |at: usize, piece: &[u8]| bytes.get(at..).is_some_and(|r| r.starts_with(piece));
    let mut at = 0;
    for (i, &(s, e)) in ranges.iter().enumerate() {
        let chunk = text.get(s..e).unwrap_or("").as_bytes();
        if chunk.is_empty() && i == 0 {
            // `join` writes no separator before a first empty chunk's successor.
            return join(ranges.iter().map(|&(s, e)| text.get(s..e).unwrap_or(""))) == text;
        }
        if i > 0 {
            if !follows(at, b"\n\n") {
                return false;
            }
            at += 2;
        }
        if !follows(at, chunk) {
            return false;
        }
        at += chunk.len();
    }
    if !ranges.is_empty() {
        if !follows(at, b"\n") {
            return false;
        }
        at += 1;
    }
    at == bytes.len()
}

/// The canonical markdown of `text`, its chunk ranges and block trees (ids empty). The
/// normalization is repeated until it holds still (it does after one round for every input we
/// know of; the bound keeps a pathological one from looping); the trees are built from the
/// last round's parse, so a text already canonical is parsed once.
pub(crate) fn canonical(text: &str) -> (String, Chunks, Vec<Node>) {
    let mut current = normalize_newlines(text).into_owned();
    let opts = options();
    let mut round = 0;
    loop {
        let arena = Arena::new();
        let root = parse_document(&arena, &current, &opts);
        let lines = Lines::new(&current);
        let ranges = ranges_of(root, &lines);
        if round == 8 || is_joined(&current, &ranges) {
            let (nodes, _) = build(root, &current, &lines, &ranges, None);
            return (current, ranges, nodes);
        }
        round += 1;
        let joined = join(ranges.iter().map(|&(s, e)| current.get(s..e).unwrap_or("")));
        current = joined;
    }
}

/// The chunk ranges and block trees of `text`, which must be canonical (None when it is not):
/// one comrak parse. The blocks take `ids` in document order (pre-order) as they are made
/// (empty ids when there are none, or too few); the count is of the blocks made.
pub(crate) fn canonical_tree(
    text: &str,
    ids: Option<Vec<Arc<str>>>,
) -> Option<(Chunks, Vec<Node>, usize)> {
    let arena = Arena::new();
    let opts = options();
    let root = parse_document(&arena, text, &opts);
    let lines = Lines::new(text);
    let ranges = ranges_of(root, &lines);
    if !is_joined(text, &ranges) {
        return None;
    }
    let (nodes, count) = build(root, text, &lines, &ranges, ids);
    Some((ranges, nodes, count))
}

/// Builds the block trees of the chunks of a parsed `text`, ranges relative to each chunk's
/// start, ids from `ids` in pre-order (else empty), and counts the blocks. `chunks` are the
/// byte ranges [`ranges_of`] gives for it.
fn build<'a>(
    root: &'a AstNode<'a>,
    text: &str,
    lines: &Lines<'_>,
    chunks: &[(usize, usize)],
    ids: Option<Vec<Arc<str>>>,
) -> (Vec<Node>, usize) {
    let builder = Builder {
        text,
        lines,
        empty: Arc::from(""),
        ids: RefCell::new(ids.map(Vec::into_iter)),
        made: Cell::new(0),
    };
    let mut tops = root.children().peekable();
    let mut out = Vec::with_capacity(chunks.len());
    for &(cs, ce) in chunks {
        let chunk_text = text.get(cs..ce).unwrap_or("");
        // The top-level AST nodes that start within this chunk.
        let mut inside = None;
        let mut several = false;
        while let Some(node) = tops.peek() {
            let start = lines.start(node.data.borrow().sourcepos.start.line);
            if start >= ce {
                break;
            }
            if start >= cs {
                several |= inside.is_some();
                inside = Some(*node);
            }
            tops.next();
        }
        let built = match (inside, several) {
            (Some(one), false) => builder.top(one, cs, ce - cs),
            _ => None,
        };
        out.push(built.unwrap_or_else(|| text_block(chunk_text, builder.next_id())));
    }
    (out, builder.made.get())
}

/// A block kept as text: raw HTML, reference definitions, other directives.
fn text_block(text: &str, id: Arc<str>) -> Node {
    Node {
        id,
        kind: BlockType::Paragraph,
        start: 0,
        end: text.len(),
        token: Token::of(text),
        detail: Detail::None,
        children: Vec::new(),
    }
}

struct Builder<'t, 'l> {
    text: &'t str,
    lines: &'l Lines<'t>,
    /// The empty id a node gets without `ids` (shared, not one allocation per node).
    empty: Arc<str>,
    /// The ids to give the blocks as they are made (pre-order).
    ids: RefCell<Option<std::vec::IntoIter<Arc<str>>>>,
    /// Blocks made so far.
    made: Cell<usize>,
}

impl Builder<'_, '_> {
    /// The next block's id.
    fn next_id(&self) -> Arc<str> {
        self.made.set(self.made.get() + 1);
        let next = self.ids.borrow_mut().as_mut().and_then(Iterator::next);
        next.unwrap_or_else(|| Arc::clone(&self.empty))
    }

    /// The top-level block a comrak node is, its chunk `[base, base + len)`: its tree with
    /// ranges relative to `base`, and the block itself spanning the whole chunk (its leading
    /// indentation included).
    fn top<'a>(&self, node: &'a AstNode<'a>, base: usize, len: usize) -> Option<Node> {
        let (node, _) = self.raw(node);
        let mut node = node?;
        self.place(&mut node, base, (0, len), false);
        node.start = 0;
        node.end = len;
        node.token = Token::of(self.text.get(base..base + len).unwrap_or(""));
        Some(node)
    }

    /// The block a comrak node is, with its block children, or None for an inline node; and
    /// the furthest (line, column) the node's subtree reaches. The block's `start` and `end`
    /// are absolute byte offsets (its end the furthest any descendant reaches), not yet
    /// clamped into its parent's; tokens and table rows are left for [`Builder::place`].
    fn raw<'a>(&self, node: &'a AstNode<'a>) -> (Option<Node>, (usize, usize)) {
        let (kind, nested, detail, start_pos, own_end, paragraph) = {
            let data = node.data.borrow();
            let sp = data.sourcepos;
            let (kind, nested, detail) = classify(&data.value);
            // A fenced code block holds at least its opening fence's line and its content's
            // lines up to the last non-blank one (each source line after the fence is one line
            // of the literal): comrak may end one that its container closes (a list item ended
            // by an unindented line) inside its fence, where an edit's reparse of the same text
            // (ending at the block) ends it at its content's end.
            let own_end = match &data.value {
                NodeValue::CodeBlock(c) if c.fenced => {
                    let body = c.literal.trim_end_matches(['\n', ' ', '\t']);
                    let content = if body.is_empty() {
                        0
                    } else {
                        1 + body.bytes().filter(|&b| b == b'\n').count()
                    };
                    (sp.end.line, sp.end.column).max((sp.start.line + content, usize::MAX / 4))
                }
                _ => (sp.end.line, sp.end.column),
            };
            (
                kind,
                nested && kind.is_some(),
                detail,
                (sp.start.line, sp.start.column),
                own_end,
                matches!(data.value, NodeValue::Paragraph),
            )
        };
        // Pre-order: the block's id before its children's.
        let id = kind.map(|_| self.next_id());
        let mut end = own_end;
        let mut children = Vec::new();
        if nested {
            children.reserve_exact(node.children().count());
            for child in node.children() {
                let (block, reached) = self.raw(child);
                end = end.max(reached);
                if let Some(block) = block {
                    children.push(block);
                }
            }
        } else {
            end = end.max(reach(node));
        }
        let Some(kind) = kind else {
            return (None, end);
        };
        let abs_start = self.lines.offset(start_pos.0, start_pos.1);
        let abs_end = self.lines.offset_after(end.0, end.1).max(abs_start);
        let kind = if paragraph {
            self.paragraph_kind(node, abs_start, abs_end)
        } else {
            kind
        };
        let block = Node {
            id: id.unwrap_or_else(|| Arc::clone(&self.empty)),
            kind,
            start: abs_start,
            end: abs_end,
            token: Token([0; 32]),
            detail,
            children,
        };
        (Some(block), end)
    }

    /// Makes a [`Builder::raw`] block's range relative to `base` (the chunk's start) and
    /// clamps it into `within` (its parent's relative range), then its children's into its
    /// own; sets the tokens (but the node's own when `top`: the caller sets it) and a table
    /// row's cells from its line.
    fn place(&self, node: &mut Node, base: usize, within: (usize, usize), token: bool) {
        let start = node.start.saturating_sub(base).clamp(within.0, within.1);
        let end = node.end.saturating_sub(base).clamp(start, within.1);
        node.start = start;
        node.end = end;
        if node.kind == BlockType::TableRow {
            self.cells_from_line(base, start, end, &mut node.children);
        } else {
            for child in &mut node.children {
                self.place(child, base, (start, end), true);
            }
        }
        if token {
            node.token = Token::of(self.text.get(base + start..base + end).unwrap_or(""));
        }
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
            cell.token = Token::of(text);
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
                    && parse_ref(&link.url).is_some_and(|r| r.is_artifact()) =>
            {
                BlockType::File
            }
            _ => BlockType::Paragraph,
        }
    }
}

/// Every console ref in links, images and autolinks of the AST, with the absolute byte offset
/// where it starts.
pub(crate) fn collect_refs<'a>(
    root: &'a AstNode<'a>,
    lines: &Lines<'_>,
) -> Vec<(usize, RefTarget, RefKind)> {
    let mut out = Vec::new();
    for node in root.descendants() {
        let data = node.data.borrow();
        let (url, kind) = match &data.value {
            NodeValue::Link(l) => (&l.url, RefKind::Link),
            NodeValue::Image(l) => (&l.url, RefKind::Embed),
            _ => continue,
        };
        if let Some(target) = parse_ref(url) {
            let at = lines.offset(data.sourcepos.start.line, data.sourcepos.start.column);
            out.push((at, target, kind));
        }
    }
    out
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

/// What block a comrak node is (`None`: not one of ours, as the document root), whether its
/// children are blocks of their own, and its type's detail.
fn classify(value: &NodeValue) -> (Option<BlockType>, bool, Detail) {
    let mut detail = Detail::None;
    let mut nested = false;
    let kind = match value {
        NodeValue::Heading(_) => Some(BlockType::Heading),
        NodeValue::Paragraph => Some(BlockType::Paragraph),
        NodeValue::ThematicBreak => Some(BlockType::ThematicBreak),
        NodeValue::CodeBlock(_) => Some(BlockType::Code),
        NodeValue::HtmlBlock(_) => Some(BlockType::Paragraph),
        NodeValue::BlockQuote => {
            nested = true;
            Some(BlockType::Quote)
        }
        NodeValue::List(_) => {
            nested = true;
            Some(BlockType::List)
        }
        NodeValue::Item(_) => {
            nested = true;
            Some(BlockType::ListItem)
        }
        NodeValue::TaskItem(t) => {
            nested = true;
            detail = Detail::Task {
                checked: t.symbol.is_some(),
            };
            Some(BlockType::TaskItem)
        }
        NodeValue::Table(_) => {
            nested = true;
            detail = Detail::Table {
                rows: std::sync::OnceLock::new(),
            };
            Some(BlockType::Table)
        }
        NodeValue::TableRow(header) => {
            nested = true;
            detail = Detail::Row { header: *header };
            Some(BlockType::TableRow)
        }
        NodeValue::TableCell => Some(BlockType::TableCell),
        NodeValue::BlockDirective(d) => Some(if is_ask_info(&d.info) {
            BlockType::Ask
        } else {
            BlockType::Paragraph
        }),
        NodeValue::Document => None,
        v if v.block() => Some(BlockType::Paragraph),
        _ => None,
    };
    (kind, nested, detail)
}
