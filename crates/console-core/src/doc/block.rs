//! The block tree: block types (protocol §6.2's schema), the owned nodes a document keeps, and
//! the flat views the routes answer with.

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

/// What a node knows beyond its type and range.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub(crate) enum Detail {
    #[default]
    None,
    /// A task item: checked or not.
    Task { checked: bool },
    /// A table row: the header row or a body row.
    Row { header: bool },
    /// A table cell: its markdown, trimmed.
    Cell { text: String },
}

/// One block of the tree. `start` and `end` are byte offsets relative to the start of the
/// top-level block the node belongs to (so an edit elsewhere moves no node but the top-level
/// ones); `token` is the SHA-256 of that range's text.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Node {
    pub id: String,
    pub kind: BlockType,
    pub start: usize,
    pub end: usize,
    pub token: String,
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

    /// Number of nodes in this subtree.
    pub fn count(&self) -> usize {
        1 + self.children.iter().map(Node::count).sum::<usize>()
    }
}

/// A half-open UTF-8 byte range of the canonical markdown.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Range {
    pub start: usize,
    pub end: usize,
}

/// One ancestor in a block's `path`: its type, id, and its index among its siblings (top-level
/// blocks count from 0 in the document).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct PathStep {
    #[serde(rename = "type")]
    pub kind: BlockType,
    pub id: String,
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct BlockInfo {
    pub id: String,
    #[serde(rename = "type")]
    pub kind: BlockType,
    pub range: Range,
    pub token: String,
    pub path: Vec<PathStep>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rows: Option<Vec<RowCells>>,
}

/// A block's place in a table, for the block route's `table` field: the table's id, the row
/// (0 is the header) and column of a row or cell, the header row's cells, and the cells of the
/// row a row or cell is in (empty for the table itself).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TablePosition {
    pub id: String,
    pub row: Option<usize>,
    pub column: Option<usize>,
    pub header: Vec<String>,
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
