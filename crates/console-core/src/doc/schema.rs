//! The block schema (protocol §6.2 "Block schema"): a JSON Schema 2020-12 document with one
//! `$defs` entry per block type, describing a block as the blocks list gives it.

use serde_json::{Map, Value, json};

use super::block::BlockType;

/// What each block type is, in markdown terms.
fn describe(kind: BlockType) -> &'static str {
    match kind {
        BlockType::Heading => "An ATX (`# …`) or setext heading.",
        BlockType::Paragraph => {
            "A paragraph; also raw HTML, `:::` directives other than `:::ask` and link reference definitions, kept as text (never rendered as HTML)."
        }
        BlockType::List => {
            "A bullet or ordered list; its children are list_item and task_item blocks."
        }
        BlockType::ListItem => "A list item; its children are the blocks inside it.",
        BlockType::TaskItem => {
            "A GFM task-list item (`- [ ]` or `- [x]`); its children are the blocks inside it."
        }
        BlockType::Code => "A fenced or indented code block.",
        BlockType::Quote => "A block quote; its children are the blocks inside it.",
        BlockType::Table => {
            "A GFM table; its children are table_row blocks, row 0 the header (the delimiter row is no block). `rows` lists the cells' text."
        }
        BlockType::TableRow => "A table row; its children are table_cell blocks.",
        BlockType::TableCell => "A table cell; its range is the cell's text between the pipes.",
        BlockType::Ask => {
            "An `:::ask id=<ask id> state=<state>` block directive: the question, then the options as `- (<option id>) <label>` items, closed by `:::`."
        }
        BlockType::Image => "A paragraph that is only an inline image `![alt](url)`.",
        BlockType::File => {
            "A paragraph that is only an inline link to a console artifact `[name](countersign://artifact/<id>)`."
        }
        BlockType::ThematicBreak => "A thematic break (`---`, `***`, `___`).",
    }
}

fn def(kind: BlockType, shared: &Map<String, Value>) -> Value {
    let get = |name: &str| shared.get(name).cloned().unwrap_or(Value::Null);
    let nested = matches!(
        kind,
        BlockType::List
            | BlockType::ListItem
            | BlockType::TaskItem
            | BlockType::Quote
            | BlockType::Table
            | BlockType::TableRow
    );
    let mut properties = Map::new();
    properties.insert("id".into(), get("block_id"));
    properties.insert("type".into(), json!({"const": kind.as_str()}));
    properties.insert("range".into(), get("range"));
    properties.insert("token".into(), get("token"));
    properties.insert("refs".into(), get("refs"));
    properties.insert("path".into(), get("path"));
    let mut required = vec!["id", "type", "range", "token", "path"];
    if kind == BlockType::Table {
        properties.insert("rows".into(), get("rows"));
        required.push("rows");
    }
    json!({
        "title": kind.as_str(),
        "description": describe(kind),
        "type": "object",
        "properties": properties,
        "required": required,
        "x-nested-blocks": nested,
    })
}

/// Shapes every block shares, written into each type's entry (the `$defs` hold the block
/// types and nothing else): its id, token, range, path, table rows and references.
fn shared_shapes() -> Map<String, Value> {
    let mut defs = Map::new();
    defs.insert(
        "block_id".into(),
        json!({"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"}),
    );
    defs.insert(
        "token".into(),
        json!({"description": "lowercase hex SHA-256 of the block's markdown range", "type": "string", "pattern": "^[0-9a-f]{64}$"}),
    );
    defs.insert(
        "range".into(),
        json!({
            "description": "UTF-8 byte offsets into the canonical markdown, half-open",
            "type": "object",
            "properties": {"start": {"type": "integer", "minimum": 0}, "end": {"type": "integer", "minimum": 0}},
            "required": ["start", "end"],
            "additionalProperties": false
        }),
    );
    defs.insert(
        "path".into(),
        json!({
            "description": "the block's ancestors, outermost first; index: the ancestor's place among its siblings, from 0",
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "type": {"enum": BlockType::ALL.iter().map(|k| k.as_str()).collect::<Vec<_>>()},
                    "id": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                    "index": {"type": "integer", "minimum": 0}
                },
                "required": ["type", "id", "index"]
            }
        }),
    );
    defs.insert(
        "rows".into(),
        json!({
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "index": {"type": "integer", "minimum": 0},
                    "cells": {"type": "array", "items": {
                        "type": "object",
                        "properties": {"index": {"type": "integer", "minimum": 0}, "text": {"type": "string"}},
                        "required": ["index", "text"]
                    }}
                },
                "required": ["index", "cells"]
            }
        }),
    );
    let edge = json!({
        "type": "object",
        "properties": {
            "from": {}, "to": {},
            "kind": {"enum": ["link", "mention", "embed"]},
            "at": {"type": "string"},
            "event_id": {"type": ["integer", "null"]}
        }
    });
    defs.insert(
        "refs".into(),
        json!({
            "type": "object",
            "properties": {
                "incoming": {"type": "array", "items": edge},
                "outgoing": {"type": "array", "items": edge}
            }
        }),
    );
    defs
}

/// The schema document.
pub fn block_schema() -> Value {
    let shared = shared_shapes();
    let mut defs = Map::new();
    for kind in BlockType::ALL {
        defs.insert(kind.as_str().into(), def(kind, &shared));
    }
    let one_of: Vec<Value> = BlockType::ALL
        .iter()
        .map(|k| json!({"$ref": format!("#/$defs/{}", k.as_str())}))
        .collect();
    json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "countersign://schema/block",
        "title": "Countersign document block",
        "oneOf": one_of,
        "$defs": defs,
    })
}
