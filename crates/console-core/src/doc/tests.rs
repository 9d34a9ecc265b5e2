//! Unit tests of the document engine (property tests in `proptests`).

use super::*;

/// An id source for tests: `b0`, `b1`, …
pub(crate) fn counter() -> impl FnMut() -> String {
    let mut n = 0u64;
    move || {
        n += 1;
        format!("b{n}")
    }
}

pub(crate) fn parse(md: &str) -> Document {
    Document::parse(md, &mut counter())
}

fn types(doc: &Document) -> Vec<(BlockType, String)> {
    doc.blocks()
        .into_iter()
        .map(|b| {
            (
                b.kind,
                doc.markdown()[b.range.start..b.range.end].to_owned(),
            )
        })
        .collect()
}

const SAMPLE: &str = "# Plan\r\n\r\n\r\nSome *text* with snake_case_name and [a link](https://example.com).\nSecond line.\n\n- a\n- [ ] task one\n  - [x] nested done\n\n| h1 | h2 |\n|----|:--:|\n| 1  | 2  |\n| 3  | 4  |\n\n```rust\nfn main() {}\n```\n\n> quoted\n> text\n\n:::ask id=q1 state=open\nWhich one?\n\n- (a) first\n- (b) second\n:::\n\n---\n\n<div onclick=\"x()\">raw</div>\n\n![diagram](countersign://artifact/0b6f2a3c-1d2e-4f5a-8b9c-0d1e2f3a4b5c)\n\n[spec.pdf](countersign://artifact/0B6F2A3C-1D2E-4F5A-8B9C-0D1E2F3A4B5D)\n\n[ref]: https://example.org\n\nSee [x][ref] and <countersign://issue/CS-12>.\n";

#[test]
fn doc_parse_canonical_form_and_types() {
    let doc = parse(SAMPLE);
    let md = doc.markdown();
    assert!(
        md.starts_with("# Plan\n\nSome *text* with snake_case_name"),
        "{md}"
    );
    assert!(md.ends_with("<countersign://issue/CS-12>.\n"));
    assert!(!md.contains('\r'));
    assert_eq!(doc.token(), crate::clock::sha256_hex(md));
    let kinds: Vec<BlockType> = types(&doc).into_iter().map(|(k, _)| k).collect();
    use BlockType::*;
    assert_eq!(
        kinds,
        vec![
            Heading,
            Paragraph,
            List,
            ListItem,
            Paragraph,
            TaskItem,
            Paragraph,
            List,
            TaskItem,
            Paragraph,
            Table,
            TableRow,
            TableCell,
            TableCell,
            TableRow,
            TableCell,
            TableCell,
            TableRow,
            TableCell,
            TableCell,
            Code,
            Quote,
            Paragraph,
            Ask,
            ThematicBreak,
            Paragraph,
            Image,
            File,
            Paragraph,
            Paragraph
        ]
    );
    // Parsing the canonical form again changes nothing.
    let again = parse(md);
    assert_eq!(again.markdown(), md);
}

#[test]
fn doc_ranges_and_tokens_cover_their_text() {
    let doc = parse(SAMPLE);
    let md = doc.markdown();
    for b in doc.blocks() {
        let text = &md[b.range.start..b.range.end];
        assert_eq!(b.token, crate::clock::sha256_hex(text), "{b:?}");
    }
    let t = types(&doc);
    assert_eq!(t[0].1, "# Plan");
    assert_eq!(t[3].1, "- a");
    assert_eq!(t[5].1, "- [ ] task one\n  - [x] nested done");
    assert_eq!(t[8].1, "- [x] nested done");
    assert_eq!(t[11].1, "| h1 | h2 |");
    assert_eq!(t[12].1, "h1");
    assert_eq!(t[19].1, "4");
    assert!(t[23].1.starts_with(":::ask id=q1 state=open\n") && t[23].1.ends_with("\n:::"));
}

#[test]
fn doc_blocks_paths_and_rows() {
    let doc = parse(SAMPLE);
    let blocks = doc.blocks();
    let nested = &blocks[8];
    assert_eq!(nested.kind, BlockType::TaskItem);
    let path: Vec<(BlockType, usize)> = nested.path.iter().map(|p| (p.kind, p.index)).collect();
    assert_eq!(
        path,
        vec![
            (BlockType::List, 2),
            (BlockType::TaskItem, 1),
            (BlockType::List, 1)
        ]
    );
    let table = &blocks[10];
    let rows = table.rows.as_ref().expect("a table has rows");
    assert_eq!(rows.len(), 3);
    assert_eq!(rows[0].cells[1].text, "h2");
    assert_eq!(rows[2].cells[0].text, "3");
    let json = serde_json::to_value(table).expect("serializes");
    assert_eq!(json["type"], "table");
    assert!(json["range"]["start"].is_u64());
    assert!(
        serde_json::to_value(&blocks[0])
            .expect("ok")
            .get("rows")
            .is_none()
    );
}

/// The blocks list's JSON, field by field (protocol §6.2 "Text, blocks", less `refs`): the
/// shape `BlockInfo` serializes to and the tree writer writes.
#[test]
fn doc_blocks_json_is_the_protocol_shape() {
    let doc = parse("- a\n\n| x | y |\n|---|---|\n| \"1\" | 2\\\\ |\n");
    let b = doc.blocks();
    let head = |i: usize| {
        format!(
            r#"{{"id":"{}","type":"{}","range":{{"start":{},"end":{}}},"token":"{}","path":"#,
            b[i].id,
            b[i].kind.as_str(),
            b[i].range.start,
            b[i].range.end,
            crate::clock::sha256_hex(&doc.markdown()[b[i].range.start..b[i].range.end]),
        )
    };
    let list = r#"{"type":"list","id":"b1","index":0}"#;
    let item = r#"{"type":"list_item","id":"b2","index":0}"#;
    let table = r#"{"type":"table","id":"b4","index":1}"#;
    let row = |id: &str, i: usize| format!(r#"{{"type":"table_row","id":"{id}","index":{i}}}"#);
    let rows = r#"[{"index":0,"cells":[{"index":0,"text":"x"},{"index":1,"text":"y"}]},{"index":1,"cells":[{"index":0,"text":"\"1\""},{"index":1,"text":"2\\\\"}]}]"#;
    let expected = [
        format!("{}[]}}", head(0)),
        format!("{}[{list}]}}", head(1)),
        format!("{}[{list},{item}]}}", head(2)),
        format!(r#"{}[],"rows":{rows}}}"#, head(3)),
        format!("{}[{table}]}}", head(4)),
        format!("{}[{table},{}]}}", head(5), row("b5", 0)),
        format!("{}[{table},{}]}}", head(6), row("b5", 0)),
        format!("{}[{table}]}}", head(7)),
        format!("{}[{table},{}]}}", head(8), row("b8", 1)),
        format!("{}[{table},{}]}}", head(9), row("b8", 1)),
    ];
    let expected = format!("[{}]", expected.join(","));
    assert_eq!(b.len(), 10);
    assert_eq!(serde_json::to_string(&b).expect("serializes"), expected);
    let mut written = Vec::new();
    doc.write_blocks_json(&mut written, &mut |_, _| {});
    assert_eq!(String::from_utf8(written).expect("UTF-8"), expected);
}

/// What the routes answer: each entry with fields of their own (`refs`), flattened.
#[derive(serde::Serialize)]
struct Entry {
    #[serde(flatten)]
    block: BlockInfo,
    refs: (u32, u32),
}

/// The tree writer gives the bytes serde gives for the list, with the caller's fields where a
/// flattened wrapper puts them.
pub(crate) fn assert_writer_matches_serde(doc: &Document) {
    let blocks = doc.blocks();
    let mut written = Vec::new();
    doc.write_blocks_json(&mut written, &mut |_, _| {});
    assert_eq!(
        String::from_utf8_lossy(&written),
        serde_json::to_string(&blocks).expect("serializes")
    );
    let entries: Vec<Entry> = blocks
        .into_iter()
        .map(|block| Entry {
            refs: (block.id.len() as u32, 7),
            block,
        })
        .collect();
    let mut written = b"prefix".to_vec();
    doc.write_blocks_json(&mut written, &mut |id, out| {
        out.extend_from_slice(format!(r#","refs":[{},7]"#, id.len()).as_bytes());
    });
    assert_eq!(
        String::from_utf8_lossy(&written),
        format!(
            "prefix{}",
            serde_json::to_string(&entries).expect("serializes")
        )
    );
}

#[test]
fn doc_blocks_json_writer_matches_serde() {
    let doc = parse(SAMPLE);
    assert_writer_matches_serde(&doc);
    // The documents an edit makes share the untouched top-level blocks, and the JSON kept
    // with them: written again, each lands where its block now is.
    let mut ids = counter_from(100);
    let first = doc.blocks()[0].id.to_string();
    let grown = doc
        .insert_after_block(&first, "- new\n- list\n\nand text", &mut ids)
        .expect("inserts");
    assert_writer_matches_serde(&grown.document);
    let shrunk = grown
        .document
        .remove_block(&first, &mut ids)
        .expect("removes");
    assert_writer_matches_serde(&shrunk.document);
    assert_writer_matches_serde(&doc);
    assert_writer_matches_serde(&parse(""));
    assert_writer_matches_serde(&parse(
        "| a \\| b | \u{1}c |\n|---|---|\n| é \"q\" | \\\\ |\n\n> - [x] t\n>   - n\n",
    ));
}

#[test]
fn doc_token_is_hex_sha256() {
    let t = Token::of("abc");
    let hex = crate::clock::sha256_hex("abc");
    assert_eq!(t.to_string(), hex);
    assert_eq!(t, hex);
    assert_eq!(hex, t);
    assert!(t.is(&hex));
    assert!(!t.is(&hex.to_uppercase()));
    assert!(!t.is(&hex[..63]));
    assert!(!t.is(""));
    assert_eq!(
        serde_json::to_string(&t).expect("serializes"),
        format!("\"{hex}\"")
    );
    assert_eq!(format!("{t:?}"), format!("\"{hex}\""));
}

#[test]
fn doc_position_of_a_cell() {
    let doc = parse(SAMPLE);
    let cell = doc.blocks()[16].clone();
    let pos = doc.position(&cell.id).expect("the cell is there");
    let table = pos.table.expect("a cell has a table position");
    assert_eq!(table.id, *doc.blocks()[10].id);
    assert_eq!((table.row, table.column), (Some(1), Some(1)));
    assert_eq!(table.header.as_deref(), Some("h2"));
    assert_eq!(table.cells, vec!["1", "2"]);
    assert!(doc.position("nope").is_none());
    assert!(
        doc.position(&doc.blocks()[0].id)
            .expect("there")
            .table
            .is_none()
    );
}

#[test]
fn doc_load_round_trip_and_refusals() {
    let doc = parse(SAMPLE);
    let ids = doc.block_ids();
    let loaded = Document::load(doc.markdown(), &ids).expect("loads");
    assert_eq!(loaded.blocks(), doc.blocks());
    assert_eq!(loaded.token(), doc.token());
    assert_eq!(
        Document::load(doc.markdown(), &ids[1..]).err(),
        Some(LoadError::IdCount {
            blocks: ids.len(),
            ids: ids.len() - 1
        })
    );
    let mut dup = ids.clone();
    dup[1] = dup[0].clone();
    assert_eq!(
        Document::load(doc.markdown(), &dup).err(),
        Some(LoadError::DuplicateId)
    );
    let mut bad = ids.clone();
    bad[0] = "no spaces".into();
    assert_eq!(
        Document::load(doc.markdown(), &bad).err(),
        Some(LoadError::MalformedId)
    );
    assert_eq!(
        Document::load("# a\n\n\nb\n", &["x".into(), "y".into()]).err(),
        Some(LoadError::NotCanonical)
    );
    let empty = parse("");
    assert_eq!(empty.markdown(), "");
    assert!(Document::load("", &[]).is_ok());
}

/// `load` checks the ids before it parses (the blocks take them as they are built), but its
/// refusals keep their order: the markdown, then the count, then the first bad id.
#[test]
fn doc_load_refusals_keep_their_order() {
    let doc = parse(SAMPLE);
    let ids = doc.block_ids();
    let mut bad = ids.clone();
    bad[3] = "no spaces".into();
    bad[5] = bad[4].clone();
    assert_eq!(
        Document::load("# a\n\n\nb\n", &bad).err(),
        Some(LoadError::NotCanonical)
    );
    assert_eq!(
        Document::load(doc.markdown(), &bad[1..]).err(),
        Some(LoadError::IdCount {
            blocks: ids.len(),
            ids: ids.len() - 1
        })
    );
    assert_eq!(
        Document::load(doc.markdown(), &bad).err(),
        Some(LoadError::MalformedId)
    );
    bad[3] = ids[3].clone();
    assert_eq!(
        Document::load(doc.markdown(), &bad).err(),
        Some(LoadError::DuplicateId)
    );
    let mut bad = ids.clone();
    bad[2] = bad[1].clone();
    bad[4] = "no/slash".into();
    assert_eq!(
        Document::load(doc.markdown(), &bad).err(),
        Some(LoadError::DuplicateId)
    );
    let mut extra = ids.clone();
    extra.push("more".into());
    assert_eq!(
        Document::load(doc.markdown(), &extra).err(),
        Some(LoadError::IdCount {
            blocks: ids.len(),
            ids: ids.len() + 1
        })
    );
    // The ids land on the blocks in document order.
    let loaded = Document::load(doc.markdown(), &ids).expect("loads");
    assert_eq!(loaded.block_ids(), ids);
}

#[test]
fn doc_tasks_count_nested_items() {
    assert_eq!(parse(SAMPLE).tasks(), Some((1, 2)));
    assert_eq!(parse("# none\n").tasks(), None);
    assert_eq!(
        parse("- [x] a\n  - [ ] b\n    - [X] c\n> - [ ] d\n").tasks(),
        Some((2, 4))
    );
}

#[test]
fn doc_references_with_blocks_and_kinds() {
    let doc = parse(SAMPLE);
    let refs = doc.references();
    let blocks = doc.blocks();
    let got: Vec<(usize, &str, RefKind)> = refs
        .iter()
        .map(|r| {
            let i = blocks
                .iter()
                .position(|b| *b.id == *r.block)
                .expect("a block");
            (i, r.to.as_str(), r.kind)
        })
        .collect();
    assert_eq!(
        got,
        vec![
            (
                26,
                "countersign://artifact/0b6f2a3c-1d2e-4f5a-8b9c-0d1e2f3a4b5c",
                RefKind::Embed
            ),
            (
                27,
                "countersign://artifact/0b6f2a3c-1d2e-4f5a-8b9c-0d1e2f3a4b5d",
                RefKind::Link
            ),
            (29, "countersign://issue/CS-12", RefKind::Link),
        ]
    );
    assert_eq!(
        parse_ref("countersign://agent/s-1/artifact/notes-2"),
        Some(RefTarget::AgentArtifact {
            session: "s-1".into(),
            slug: "notes-2".into()
        })
    );
    assert_eq!(parse_ref("countersign://issue/cs-1"), None);
    assert_eq!(parse_ref("https://x"), None);
}

fn op(json: serde_json::Value) -> EditOp {
    serde_json::from_value(json).expect("an op")
}

#[test]
fn doc_ops_deserialize_from_the_wire() {
    use serde_json::json;
    assert_eq!(
        op(json!({"op": "replace", "quote": {"exact": "a", "prefix": "b"}, "text": "c"})),
        EditOp::Replace {
            quote: Quote {
                exact: "a".into(),
                prefix: Some("b".into()),
                suffix: None
            },
            text: "c".into(),
            block: None,
            block_token: None
        }
    );
    assert_eq!(
        op(json!({"op": "delete_row", "block": "t", "index": 2, "block_token": "x"})),
        EditOp::DeleteRow {
            block: "t".into(),
            index: 2,
            block_token: "x".into()
        }
    );
    for bad in [
        json!({"op": "replace", "quote": {"exact": "a"}, "text": "c", "extra": 1}),
        json!({"op": "replace", "quote": {"exact": "a", "x": 1}, "text": "c"}),
        json!({"op": "delete_row", "block": "t", "index": 2}),
        json!({"op": "delete_column", "block": "t", "index": -1, "block_token": "x"}),
        json!({"op": "move", "quote": {"exact": "a"}}),
    ] {
        assert!(
            serde_json::from_value::<EditOp>(bad.clone()).is_err(),
            "{bad}"
        );
    }
}

fn apply(doc: &Document, ops: Vec<EditOp>) -> Result<Edited, EditError> {
    let mut ids = counter_from(1000);
    doc.apply(None, &ops, &mut ids)
}

pub(crate) fn counter_from(start: u64) -> impl FnMut() -> String {
    let mut n = start;
    move || {
        n += 1;
        format!("n{n}")
    }
}

fn replace(exact: &str, text: &str) -> EditOp {
    EditOp::Replace {
        quote: Quote::exact(exact),
        text: text.into(),
        block: None,
        block_token: None,
    }
}

#[test]
fn doc_replace_in_a_paragraph_keeps_ids_and_other_tokens() {
    let doc = parse("# Title\n\nHello world.\n\n- a\n- b\n");
    let before = doc.blocks();
    let edited = apply(&doc, vec![replace("world", "there!")]).expect("applies");
    let after = edited.document.blocks();
    assert_eq!(
        edited.document.markdown(),
        "# Title\n\nHello there!.\n\n- a\n- b\n"
    );
    assert_eq!(before.len(), after.len());
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(b.id, a.id);
    }
    assert_eq!(
        edited.changed,
        vec![(after[1].id.to_string(), after[1].token.to_string())]
    );
    assert!(edited.removed.is_empty());
    assert_eq!(after[2].token, before[2].token);
    assert_ne!(after[2].range, before[2].range);
}

#[test]
fn doc_insert_text_creates_a_heading_block() {
    let doc = parse("Hello world.\n\nEnd.\n");
    let ops = vec![EditOp::InsertAfter {
        quote: Quote::exact("world."),
        text: "\n\n## New".into(),
        block: None,
        block_token: None,
    }];
    let edited = apply(&doc, ops).expect("applies");
    assert_eq!(
        edited.document.markdown(),
        "Hello world.\n\n## New\n\nEnd.\n"
    );
    let blocks = edited.document.blocks();
    assert_eq!(blocks[1].kind, BlockType::Heading);
    assert_eq!(
        edited.changed,
        vec![(blocks[1].id.to_string(), blocks[1].token.to_string())]
    );
    assert_eq!(blocks[0].id, doc.blocks()[0].id);
}

#[test]
fn doc_quote_errors_and_scope() {
    let doc = parse("one two one\n\nthree one\n");
    assert_eq!(
        apply(&doc, vec![replace("four", "x")]).err(),
        Some(EditError::QuoteNotFound { op: 0 })
    );
    assert_eq!(
        apply(&doc, vec![replace("two", "2"), replace("one", "1")]).err(),
        Some(EditError::QuoteAmbiguous { op: 1, matches: 3 })
    );
    let with_prefix = EditOp::Replace {
        quote: Quote {
            exact: "one".into(),
            prefix: Some("three ".into()),
            suffix: None,
        },
        text: "1".into(),
        block: None,
        block_token: None,
    };
    let edited = apply(&doc, vec![with_prefix]).expect("applies");
    assert_eq!(edited.document.markdown(), "one two one\n\nthree 1\n");
    let second = doc.blocks()[1].clone();
    let scoped = EditOp::Delete {
        quote: Quote::exact(" one"),
        block: Some(second.id.to_string()),
        block_token: Some(second.token.to_string()),
    };
    let edited = apply(&doc, vec![scoped]).expect("applies");
    assert_eq!(edited.document.markdown(), "one two one\n\nthree\n");
    let missing = EditOp::Delete {
        quote: Quote::exact("one"),
        block: Some("nope".into()),
        block_token: None,
    };
    assert_eq!(
        apply(&doc, vec![missing]).err(),
        Some(EditError::TargetNotFound { op: 0 })
    );
    assert!(matches!(
        apply(&doc, vec![replace("", "x")]),
        Err(EditError::Invalid { op: 0, .. })
    ));
}

#[test]
fn doc_stale_tokens_are_refused_with_current_tokens() {
    let doc = parse("a\n\nb\n");
    let b = doc.blocks()[1].clone();
    let mut ids = counter_from(0);
    let err = doc
        .apply(Some("0000"), &[replace("a", "x")], &mut ids)
        .err();
    assert!(
        matches!(err, Some(EditError::DocumentChanged { ref token, .. }) if token == doc.token())
    );
    let stale = EditOp::Replace {
        quote: Quote::exact("b"),
        text: "y".into(),
        block: Some(b.id.to_string()),
        block_token: Some("stale".into()),
    };
    match doc.apply(Some(doc.token()), &[stale], &mut ids) {
        Err(EditError::DocumentChanged { token, blocks }) => {
            assert_eq!(token, doc.token());
            assert_eq!(blocks.get(&*b.id), Some(&b.token.to_string()));
        }
        other => panic!("{other:?}"),
    }
    let err: crate::Error = EditError::QuoteAmbiguous { op: 1, matches: 2 }.into();
    assert_eq!(err.code_str(), "QUOTE_AMBIGUOUS");
    assert_eq!(err.details["matches"], 2);
}

#[test]
fn doc_all_or_nothing() {
    let doc = parse("a\n\nb\n");
    let err = apply(&doc, vec![replace("a", "x"), replace("zzz", "y")]).err();
    assert_eq!(err, Some(EditError::QuoteNotFound { op: 1 }));
    assert_eq!(doc.markdown(), "a\n\nb\n");
    let later = apply(&doc, vec![replace("a", "x"), replace("x", "z")]).expect("applies");
    assert_eq!(later.document.markdown(), "z\n\nb\n");
}

#[test]
fn doc_delete_a_block_and_merge_paragraphs() {
    let doc = parse("a\n\nb\n\nc\n");
    let ids = doc.block_ids();
    let edited = apply(&doc, vec![replace("b\n\n", "")]).expect("applies");
    assert_eq!(edited.document.markdown(), "a\n\nc\n");
    assert_eq!(edited.removed, vec![ids[1].clone()]);
    assert_eq!(
        edited.document.block_ids(),
        vec![ids[0].clone(), ids[2].clone()]
    );
    let merged = apply(&doc, vec![replace("a\n\nb", "a b")]).expect("applies");
    assert_eq!(merged.document.markdown(), "a b\n\nc\n");
    assert_eq!(merged.document.block_ids()[0], ids[0]);
    assert_eq!(merged.removed, vec![ids[1].clone()]);
}

#[test]
fn doc_lists_joined_by_an_edit_merge() {
    let doc = parse("- a\n\npara\n\n- b\n");
    let edited = apply(&doc, vec![replace("para", "- c")]).expect("applies");
    let md = edited.document.markdown();
    let fresh = parse(md);
    let kinds = |d: &Document| d.blocks().into_iter().map(|b| b.kind).collect::<Vec<_>>();
    assert_eq!(kinds(&edited.document), kinds(&fresh));
    assert_eq!(
        edited
            .document
            .blocks()
            .iter()
            .map(|b| b.range)
            .collect::<Vec<_>>(),
        fresh.blocks().iter().map(|b| b.range).collect::<Vec<_>>()
    );
    assert!(Document::load(md, &edited.document.block_ids()).is_ok());
}

#[test]
fn doc_table_ops() {
    let doc = parse("| a | b | c |\n|---|---|---|\n| 1 | 2 | 3 |\n| 4 | 5 | 6 |\n");
    let table = doc.blocks()[0].clone();
    let row = |index| EditOp::DeleteRow {
        block: table.id.to_string(),
        index,
        block_token: table.token.to_string(),
    };
    let edited = apply(&doc, vec![row(1)]).expect("applies");
    assert_eq!(
        edited.document.markdown(),
        "| a | b | c |\n|---|---|---|\n| 4 | 5 | 6 |\n"
    );
    assert_eq!(edited.removed.len(), 4);
    assert!(matches!(
        apply(&doc, vec![row(0)]),
        Err(EditError::Invalid { op: 0, .. })
    ));
    assert_eq!(
        apply(&doc, vec![row(3)]).err(),
        Some(EditError::TargetNotFound { op: 0 })
    );
    let col = |index| EditOp::DeleteColumn {
        block: table.id.to_string(),
        index,
        block_token: table.token.to_string(),
    };
    let edited = apply(&doc, vec![col(1)]).expect("applies");
    assert_eq!(
        edited.document.markdown(),
        "| a | c |\n| --- | --- |\n| 1 | 3 |\n| 4 | 6 |\n"
    );
    let before = doc.blocks();
    let after = edited.document.blocks();
    // The table, rows and the kept cells keep their ids; column 1's cells go.
    assert_eq!(after[0].id, before[0].id);
    assert_eq!(after[1].id, before[1].id);
    assert_eq!(after[2].id, before[2].id);
    assert_eq!(after[3].id, before[4].id);
    assert!(edited.removed.contains(&before[3].id.to_string()));
    assert_eq!(
        apply(&doc, vec![col(3)]).err(),
        Some(EditError::TargetNotFound { op: 0 })
    );
    let stale = EditOp::DeleteColumn {
        block: table.id.to_string(),
        index: 0,
        block_token: "old".into(),
    };
    assert!(matches!(
        apply(&doc, vec![stale]),
        Err(EditError::DocumentChanged { .. })
    ));
    let para = parse("text\n");
    let not_table = EditOp::DeleteRow {
        block: para.blocks()[0].id.to_string(),
        index: 1,
        block_token: para.blocks()[0].token.to_string(),
    };
    assert!(matches!(
        apply(&para, vec![not_table]),
        Err(EditError::Invalid { .. })
    ));
    let one = parse("| a |\n|---|\n| 1 |\n");
    let t = one.blocks()[0].clone();
    let last = EditOp::DeleteColumn {
        block: t.id.to_string(),
        index: 0,
        block_token: t.token.to_string(),
    };
    assert!(matches!(
        apply(&one, vec![last]),
        Err(EditError::Invalid { .. })
    ));
}

#[test]
fn doc_ask_blocks_write_read_insert_replace() {
    let ask = AskBlock {
        id: "0b6f2a3c-1d2e-4f5a-8b9c-0d1e2f3a4b5c".into(),
        state: "open".into(),
        question: "Which **database**?\n\n::: not a fence".into(),
        options: vec![
            AskOption {
                id: "1".into(),
                label: "PostgreSQL".into(),
            },
            AskOption {
                id: "lite".into(),
                label: "SQLite\nonly".into(),
            },
        ],
        attributes: Default::default(),
    };
    let md = write_ask(&ask).expect("writes");
    assert!(md.starts_with("::::ask id=0b6f2a3c-1d2e-4f5a-8b9c-0d1e2f3a4b5c state=open\n"));
    let read = read_ask(&md).expect("reads");
    assert_eq!(read.options[1].label, "SQLite only");
    assert_eq!(read.question, ask.question);
    assert_eq!(read.id, ask.id);
    let doc = parse("# T\n\nIntro.\n\nMore.\n");
    let intro = doc.blocks()[1].id.to_string();
    let mut ids = counter_from(50);
    let edited = doc
        .insert_after_block(&intro, &md, &mut ids)
        .expect("inserts");
    let asks = edited.document.asks();
    assert_eq!(asks.len(), 1);
    assert_eq!(asks[0].ask.options.len(), 2);
    let kinds: Vec<BlockType> = edited.document.blocks().iter().map(|b| b.kind).collect();
    assert_eq!(
        kinds,
        vec![
            BlockType::Heading,
            BlockType::Paragraph,
            BlockType::Ask,
            BlockType::Paragraph
        ]
    );
    assert_eq!(edited.changed.len(), 1);
    let answered = AskBlock {
        state: "answered".into(),
        ..asks[0].ask.clone()
    };
    let again = edited
        .document
        .replace_block(
            &asks[0].block,
            &write_ask(&answered).expect("writes"),
            &mut ids,
        )
        .expect("replaces");
    let asks2 = again.document.asks();
    assert_eq!(asks2[0].block, asks[0].block);
    assert_eq!(asks2[0].ask.state, "answered");
    assert!(
        write_ask(&AskBlock {
            id: "bad id".into(),
            ..ask.clone()
        })
        .is_err()
    );
    assert_eq!(
        doc.insert_after_block("nope", "x", &mut ids).err(),
        Some(EditError::TargetNotFound { op: 0 })
    );
}

#[test]
fn rendered_html_comes_in_parts_of_whole_top_level_blocks() {
    let mut md = String::from("# Title\n");
    for i in 0..40 {
        md.push_str(&format!(
            "\n## Section {i}\n\nSome words of section {i}.\n\n- [x] a task\n- [ ] another\n"
        ));
    }
    let doc = parse(&md);
    let html = doc.to_html();
    assert_eq!(html.blocks(), doc.tops().len());
    // Parts of at most 300 bytes (one block when a block alone is longer) rebuild the whole.
    let (mut from, mut whole, mut parts) = (0, String::new(), 0);
    while let Some(p) = html.part(from, 300) {
        assert!(
            p.html.len() <= 300 || p.html.blocks() == 1,
            "{}",
            p.html.len()
        );
        assert_eq!(p.html.matches(" data-block=\"").count(), p.html.blocks());
        assert_eq!(p.bytes_after, html.len() - whole.len() - p.html.len());
        whole.push_str(&p.html);
        parts += 1;
        match p.next {
            Some(n) => {
                assert_eq!(p.blocks_after, html.blocks() - n);
                from = n;
            }
            None => break,
        }
    }
    assert!(parts > 5, "{parts}");
    assert_eq!(whole, html.as_str());
    // A budget the whole fits in answers it all, with nothing after; past the end, nothing.
    let all = html.part(0, usize::MAX).expect("a part");
    assert_eq!(
        (all.html.as_str(), all.next, all.bytes_after),
        (html.as_str(), None, 0)
    );
    assert_eq!(html.part(html.blocks(), 300), None);
    // A budget smaller than the first block still answers that block.
    assert_eq!(html.part(0, 1).map(|p| p.html.blocks()), Some(1));
}

#[test]
fn doc_html_is_sanitized_and_carries_block_ids() {
    let doc = parse(
        "# T <b>x</b>\n\n<script>alert(1)</script>\n\n[js](javascript:alert(1)) [d](data:text/html,x) [ok](https://e.com \"t\") ![i](JaVaScRiPt:x) <img src=x onerror=y>\n\n[c](countersign://issue/CS-1)\n",
    );
    let html = doc.to_html();
    assert!(!html.contains("<script"), "{html}");
    assert!(!html.contains("<img src=x"), "{html}");
    assert!(!html.contains("<b>"), "{html}");
    assert!(!html.to_lowercase().contains("javascript:"), "{html}");
    assert!(!html.contains("data:"), "{html}");
    assert!(
        html.contains("<a href=\"https://e.com\" title=\"t\">ok</a>"),
        "{html}"
    );
    assert!(
        html.contains(&format!("<h1 data-block=\"{}\">", doc.blocks()[0].id)),
        "{html}"
    );
    assert!(html.contains("&lt;script&gt;"), "{html}");
    let mapped = doc.to_html_with(&|u| Some(u.replace("countersign://issue/", "/issues/")));
    assert!(mapped.contains("href=\"/issues/CS-1\""), "{mapped}");
}

#[test]
fn doc_schema_has_one_def_per_block_type() {
    let schema = block_schema();
    assert_eq!(
        schema["$schema"],
        "https://json-schema.org/draft/2020-12/schema"
    );
    let defs = schema["$defs"].as_object().expect("defs");
    let mut names: Vec<&str> = defs.keys().map(String::as_str).collect();
    names.sort_unstable();
    let mut want: Vec<&str> = BlockType::ALL.iter().map(|k| k.as_str()).collect();
    want.sort_unstable();
    assert_eq!(names, want);
    assert_eq!(defs["table"]["properties"]["type"]["const"], "table");
}

#[test]
fn doc_block_helpers_keep_containers() {
    let doc = parse("> quoted line\n> second\n\n- item\n- other\n");
    let blocks = doc.blocks();
    let mut ids = counter_from(200);
    let quoted = doc
        .replace_block(&blocks[1].id, "a\nb", &mut ids)
        .expect("replaces");
    assert_eq!(quoted.document.markdown(), "> a\n> b\n\n- item\n- other\n");
    assert_eq!(quoted.document.block_ids(), doc.block_ids());
    let item_para = &blocks[4];
    assert_eq!(item_para.kind, BlockType::Paragraph);
    let listed = doc
        .replace_block(&item_para.id, "x\ny", &mut ids)
        .expect("replaces");
    assert_eq!(
        listed.document.markdown(),
        "> quoted line\n> second\n\n- x\n  y\n- other\n"
    );
    let removed = doc.remove_block(&blocks[5].id, &mut ids).expect("removes");
    assert_eq!(
        removed.document.markdown(),
        "> quoted line\n> second\n\n- item\n"
    );
    assert_eq!(
        removed.removed,
        vec![blocks[5].id.to_string(), blocks[6].id.to_string()]
    );
    let appended = doc.append("## End", &mut ids);
    assert!(
        appended
            .document
            .markdown()
            .ends_with("- other\n\n## End\n")
    );
    assert_eq!(appended.changed.len(), 1);
}

#[test]
fn doc_edit_text_with_crlf_and_insert_before() {
    let doc = parse("alpha\n\nomega\n");
    let ops = vec![EditOp::InsertBefore {
        quote: Quote::exact("omega"),
        text: "beta\r\n\r\n".into(),
        block: None,
        block_token: None,
    }];
    let edited = apply(&doc, ops).expect("applies");
    assert_eq!(edited.document.markdown(), "alpha\n\nbeta\n\nomega\n");
    assert_eq!(edited.document.blocks().len(), 3);
    assert_eq!(edited.document.blocks()[2].id, doc.blocks()[1].id);
    let none = apply(&doc, vec![]).expect("no ops");
    assert!(none.changed.is_empty() && none.removed.is_empty());
    assert_eq!(none.document.token(), doc.token());
}

#[test]
fn doc_an_unclosed_fence_swallows_what_follows_like_a_fresh_parse() {
    let doc = parse("a\n\nb\n\n- c\n");
    let edited = apply(&doc, vec![replace("a", "```")]).expect("applies");
    let md = edited.document.markdown();
    assert_eq!(md, "```\n\nb\n\n- c\n");
    let kinds: Vec<BlockType> = edited.document.blocks().iter().map(|b| b.kind).collect();
    assert_eq!(kinds, vec![BlockType::Code]);
    assert!(Document::load(md, &edited.document.block_ids()).is_ok());
    assert_eq!(edited.removed.len(), 5);
}
