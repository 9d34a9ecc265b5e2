//! The block tree: block types (protocol §6.2's schema), the owned nodes a document keeps, and
//! the flat views the routes answer with.

use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};

/// A block's type: exactly the `$defs` of protocol §6.2's block schema.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlockType {
    Heading,
    Paragraph,
    List,
    ListItem,
    TaskItem,
    Code,
    Quote,
    Table,
    TableRow,
    TableCell,
    Ask,
    Image,
    File,
    ThematicBreak,
}

impl BlockType {
    /// Every block type, in the schema's order.
    pub const ALL: [BlockType; 14] = [
        BlockType::Heading,
        BlockType::Paragraph,
        BlockType::List,
        BlockType::ListItem,
        BlockType::TaskItem,
        BlockType::Code,
        BlockType::Quote,
        BlockType::Table,
        BlockType::TableRow,
        BlockType::TableCell,
        BlockType::Ask,
        BlockType::Image,
        BlockType::File,
        BlockType::ThematicBreak,
    ];

    /// The wire name, e.g. `"task_item"`.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockType::Heading => "heading",
            BlockType::Paragraph => "paragraph",
            BlockType::List => "list",
            BlockType::ListItem => "list_item",
            BlockType::TaskItem => "task_item",
            BlockType::Code => "code",
            BlockType::Quote => "quote",
            BlockType::Table => "table",
            BlockType::TableRow => "table_row",
            BlockType::TableCell => "table_cell",
            BlockType::Ask => "ask",
            BlockType::Image => "image",
            BlockType::File => "file",
            BlockType::ThematicBreak => "thematic_break",
        }
    }
}

/// A block's token: the SHA-256 of its canonical markdown. Kept as the 32 bytes; written (on
/// the wire, by `Display` and `to_string`) as 64 lowercase hex digits, and equal to a string
/// holding exactly those digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Token(pub(crate) [u8; 32]);

/// Each byte's two lowercase hex digits.
const HEX_PAIRS: [[u8; 2]; 256] = {
    let digits = b"0123456789abcdef";
    let mut table = [[0u8; 2]; 256];
    let mut i = 0;
    while i < 256 {
        table[i] = [digits[i >> 4], digits[i & 0xf]];
        i += 1;
    }
    table
};

impl Token {
    /// The token of `text`.
    pub fn of(text: &str) -> Token {
        Token(crate::clock::sha256(text))
    }

    /// The digest's bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The 64 lowercase hex digits, as bytes.
    pub fn hex_bytes(&self) -> [u8; 64] {
        let mut out = [0u8; 64];
        for (pair, b) in out.chunks_exact_mut(2).zip(self.0) {
            pair.copy_from_slice(&HEX_PAIRS[usize::from(b)]);
        }
        out
    }

    /// Whether `hex` is this token's 64 lowercase hex digits.
    pub fn is(&self, hex: &str) -> bool {
        hex.as_bytes() == self.hex_bytes()
    }
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let hex = self.hex_bytes();
        f.write_str(std::str::from_utf8(&hex).unwrap_or_default())
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "\"{self}\"")
    }
}

impl Serialize for Token {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let hex = self.hex_bytes();
        s.serialize_str(std::str::from_utf8(&hex).unwrap_or_default())
    }
}

impl PartialEq<str> for Token {
    fn eq(&self, other: &str) -> bool {
        self.is(other)
    }
}

impl PartialEq<&str> for Token {
    fn eq(&self, other: &&str) -> bool {
        self.is(other)
    }
}

impl PartialEq<String> for Token {
    fn eq(&self, other: &String) -> bool {
        self.is(other)
    }
}

impl PartialEq<Token> for String {
    fn eq(&self, other: &Token) -> bool {
        other.is(self)
    }
}

impl PartialEq<Token> for &str {
    fn eq(&self, other: &Token) -> bool {
        other.is(self)
    }
}

impl From<Token> for String {
    fn from(t: Token) -> String {
        t.to_string()
    }
}

/// What a node knows beyond its type and range.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) enum Detail {
    #[default]
    None,
    /// A task item: checked or not.
    Task { checked: bool },
    /// A table row: the header row or a body row.
    Row { header: bool },
    /// A table: its rows' cell texts (the cells' markdown, trimmed) as the blocks list shows
    /// them, made the first time it is asked for (the tree never changes once built).
    Table { rows: OnceLock<Arc<[RowCells]>> },
}

/// One block of the tree. `start` and `end` are byte offsets relative to the start of the
/// top-level block the node belongs to (so an edit elsewhere moves no node but the top-level
/// ones); `token` is the SHA-256 of that range's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub id: Arc<str>,
    pub kind: BlockType,
    pub start: usize,
    pub end: usize,
    pub token: Token,
    pub detail: Detail,
    pub children: Vec<Node>,
}

impl Node {
    /// Calls `f` on this node and every descendant, in document order (pre-order).
    pub fn walk<'a>(&'a self, f: &mut dyn FnMut(&'a Node)) {
        f(self);
        for child in &self.children {
            child.walk(f);
        }
    }

    /// A table's rows (None for another block); `text` is the markdown from the node's
    /// top-level block on (the node's ranges are relative to it).
    pub fn rows(&self, text: &str) -> Option<&Arc<[RowCells]>> {
        match &self.detail {
            Detail::Table { rows } => Some(rows.get_or_init(|| {
                self.children
                    .iter()
                    .enumerate()
                    .map(|(index, row)| RowCells {
                        index,
                        cells: row.cell_texts(text),
                    })
                    .collect()
            })),
            _ => None,
        }
    }

    /// A table row's cells' texts (their ranges' text).
    pub fn cell_texts(&self, text: &str) -> Vec<CellText> {
        self.children
            .iter()
            .enumerate()
            .map(|(index, cell)| CellText {
                index,
                text: text
                    .get(cell.start..cell.end)
                    .unwrap_or_default()
                    .to_owned(),
            })
            .collect()
    }
}

/// A half-open UTF-8 byte range of the canonical markdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub start: usize,
    pub end: usize,
}

fn arc_str<S: serde::Serializer>(v: &Arc<str>, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(v)
}

fn arc_slice<T: Serialize, S: serde::Serializer>(v: &Arc<[T]>, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(v.iter())
}

fn arc_slice_opt<T: Serialize, S: serde::Serializer>(
    v: &Option<Arc<[T]>>,
    s: S,
) -> Result<S::Ok, S::Error> {
    match v {
        Some(v) => s.collect_seq(v.iter()),
        None => s.serialize_none(),
    }
}

/// One ancestor in a block's `path`: its type, id, and its index among its siblings (top-level
/// blocks count from 0 in the document).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathStep {
    #[serde(rename = "type")]
    pub kind: BlockType,
    #[serde(serialize_with = "arc_str")]
    pub id: Arc<str>,
    pub index: usize,
}

/// A table cell in a table's `rows`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CellText {
    pub index: usize,
    pub text: String,
}

/// A table row in a table's `rows`: row 0 is the header.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RowCells {
    pub index: usize,
    pub cells: Vec<CellText>,
}

/// One entry of the blocks list (protocol §6.2 "Text, blocks", less `refs`, which the routes
/// add): a flat list in document order, nested blocks included, each naming its ancestors
/// (outermost first) in `path`. `rows` is there on tables only.
///
/// Cheap to make and to clone: the id is the tree's own (`Arc<str>`), the token its 32 bytes,
/// and siblings share one `path` (as a table shares its `rows` with the tree).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockInfo {
    #[serde(serialize_with = "arc_str")]
    pub id: Arc<str>,
    #[serde(rename = "type")]
    pub kind: BlockType,
    pub range: Range,
    pub token: Token,
    #[serde(serialize_with = "arc_slice")]
    pub path: Arc<[PathStep]>,
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "arc_slice_opt"
    )]
    pub rows: Option<Arc<[RowCells]>>,
}

/// A block's place in a table, for the block route's `table` field: the table's id, the row
/// (0 is the header) and column of a row or cell, the text of the header cell above a cell
/// (null for the table or a row), and the cells of the row a row or cell is in (empty for the
/// table itself).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TablePosition {
    pub id: String,
    pub row: Option<usize>,
    pub column: Option<usize>,
    pub header: Option<String>,
    pub cells: Vec<String>,
}

/// What the block route answers about one block: the block as in the list, plus `table` for a
/// table, table row or table cell.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockPosition {
    #[serde(flatten)]
    pub block: BlockInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<TablePosition>,
}
