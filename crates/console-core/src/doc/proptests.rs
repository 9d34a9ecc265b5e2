//! Property tests of the document engine on generated markdown: the write/parse fixpoint, what
//! an edit changes (exactly the tokens of the blocks it touched), stale tokens refused, and no
//! panic on arbitrary text.
//!
//! "Touched", precisely: an op replaces bytes `[a, b)` of the canonical markdown (an insertion
//! has `a == b`). A block is touched when its closed range `[start, end]`, widened over the
//! spaces and tabs next to it (a cell's padding, a line's trailing blanks), meets `[a, b]`; its
//! ancestors contain it, so they are touched too. Beyond those, an edit may reach the blocks its
//! new text joins with (a line that becomes a lazy continuation of the paragraph before or its
//! setext underline, a list continued by a list of the same kind, blocks an unclosed fence or
//! raw HTML block swallows): those are contiguous with the touched text (no block that keeps
//! its id and token lies between), and are themselves changed or removed.
//! And a table whose header changes its column count gains or loses cells in every row, and a
//! row whose line the edit splits into more or fewer cells (text written before its leading
//! pipe, a pipe written or deleted) shifts its cells: one pushed past the header's column count
//! is no longer a cell (GFM ignores it), and its id goes. Every other block keeps its id and
//! token.

use std::collections::{HashMap, HashSet};

use proptest::prelude::*;

use super::tests::{counter, counter_from};
use super::*;

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("word".to_owned()),
        Just("snake_case".to_owned()),
        Just("*emph*".to_owned()),
        Just("**strong**".to_owned()),
        Just("`code`".to_owned()),
        Just("[link](https://e.com/x)".to_owned()),
        Just("<countersign://issue/CS-1>".to_owned()),
        Just("<b>x</b>".to_owned()),
        Just("a\\*b".to_owned()),
        Just("&amp;".to_owned()),
        Just("ünï".to_owned()),
        Just("1.".to_owned()),
        Just("#tag".to_owned()),
        Just("|".to_owned()),
        "[a-z]{1,6}",
    ]
}

fn line() -> impl Strategy<Value = String> {
    prop::collection::vec(word(), 1..5).prop_map(|w| w.join(" "))
}

fn paragraph() -> impl Strategy<Value = String> {
    prop::collection::vec(line(), 1..3).prop_map(|l| l.join("\n"))
}

fn list(depth: u32) -> BoxedStrategy<String> {
    let item = (
        prop_oneof![Just("- "), Just("* "), Just("1. "), Just("2) ")],
        prop_oneof![Just(""), Just("[ ] "), Just("[x] ")],
        line(),
    );
    let nested = if depth > 0 {
        prop::option::of(list(depth - 1)).boxed()
    } else {
        Just(None).boxed()
    };
    prop::collection::vec((item, nested, any::<bool>()), 1..4)
        .prop_map(|items| {
            let marker = items[0].0.0;
            let mut out = Vec::new();
            for ((_, task, text), nested, loose) in items {
                let mut s = format!("{marker}{task}{text}");
                if let Some(n) = nested {
                    let pad = " ".repeat(marker.len());
                    let inner: Vec<String> = n.lines().map(|l| format!("{pad}{l}")).collect();
                    s.push('\n');
                    s.push_str(&inner.join("\n"));
                }
                if loose {
                    s.push('\n');
                }
                out.push(s);
            }
            out.join("\n")
        })
        .boxed()
}

fn table() -> impl Strategy<Value = String> {
    (1usize..4, 0usize..4).prop_flat_map(|(cols, rows)| {
        prop::collection::vec(prop::collection::vec("[a-z0-9 ]{0,5}", cols), rows + 1).prop_map(
            move |cells| {
                let mut lines = Vec::new();
                for (i, row) in cells.iter().enumerate() {
                    lines.push(format!("| {} |", row.join(" | ")));
                    if i == 0 {
                        lines.push(format!("|{}", "---|".repeat(cols)));
                    }
                }
                lines.join("\n")
            },
        )
    })
}

fn block() -> impl Strategy<Value = String> {
    prop_oneof![
        (1usize..4, line()).prop_map(|(n, l)| format!("{} {l}", "#".repeat(n))),
        paragraph(),
        paragraph(),
        list(2),
        table(),
        (
            prop_oneof![Just("```"), Just("~~~")],
            "[a-z ]{0,8}",
            paragraph()
        )
            .prop_map(|(f, info, body)| format!("{f}{info}\n{body}\n{f}")),
        paragraph().prop_map(|p| p
            .lines()
            .map(|l| format!("> {l}"))
            .collect::<Vec<_>>()
            .join("\n")),
        (line(), prop::collection::vec("[a-z]{1,5}", 0..3)).prop_map(|(q, opts)| {
            let mut s = format!(":::ask id=a1 state=open\n{q}\n");
            for (i, o) in opts.iter().enumerate() {
                s.push_str(&format!("\n- ({i}) {o}"));
            }
            s.push_str("\n:::");
            s
        }),
        prop_oneof![Just("---"), Just("***"), Just("___")].prop_map(str::to_owned),
        prop_oneof![
            Just("<div onclick=\"x()\">raw</div>".to_owned()),
            Just("<!-- note -->".to_owned()),
            Just("<script>alert(1)</script>".to_owned())
        ],
        "[a-z]{1,5}".prop_map(|a| format!("![{a}](https://e.com/{a}.png)")),
        "    [a-z]{1,8}".prop_map(|c| c.to_owned()),
    ]
}

fn separator() -> impl Strategy<Value = &'static str> {
    prop_oneof![
        4 => Just("\n\n"),
        1 => Just("\n"),
        1 => Just("\n\n\n"),
        1 => Just(" \n\n"),
        1 => Just("\r\n\r\n"),
    ]
}

fn markdown() -> impl Strategy<Value = String> {
    prop::collection::vec((block(), separator()), 0..8).prop_map(|blocks| {
        let mut s = String::new();
        for (b, sep) in blocks {
            s.push_str(&b);
            s.push_str(sep);
        }
        s
    })
}

/// Text an edit puts in: inline words, or new blocks.
fn edit_text() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => line(),
        1 => Just(String::new()),
        1 => line().prop_map(|l| format!("\n\n## {l}")),
        1 => block().prop_map(|b| format!("\n\n{b}\n\n")),
        1 => Just("\n- x".to_owned()),
        1 => Just("```".to_owned()),
        1 => Just("<!--".to_owned()),
        1 => Just("\n".to_owned()),
    ]
}

/// The shape of a document: every block's type and range, in order.
fn shape(doc: &Document) -> Vec<(BlockType, Range)> {
    doc.blocks()
        .into_iter()
        .map(|b| (b.kind, b.range))
        .collect()
}

/// A document is well formed: canonical (a fixpoint), its shape the shape a fresh parse gives,
/// tokens the digests of the ranges, ids valid and distinct, and it loads back.
fn check_well_formed(doc: &Document) -> Result<(), TestCaseError> {
    let md = doc.markdown();
    let fresh = Document::parse(md, &mut counter());
    prop_assert_eq!(fresh.markdown(), md);
    prop_assert_eq!(shape(&fresh), shape(doc));
    prop_assert_eq!(doc.token(), crate::clock::sha256_hex(md));
    let mut seen = HashSet::new();
    for b in doc.blocks() {
        prop_assert!(valid_block_id(&b.id));
        prop_assert!(seen.insert(b.id.to_string()), "duplicate id {}", b.id);
        let text = md.get(b.range.start..b.range.end);
        prop_assert!(text.is_some(), "range {:?} off the text", b.range);
        prop_assert_eq!(
            b.token.to_string(),
            crate::clock::sha256_hex(text.unwrap_or(""))
        );
    }
    let loaded = Document::load(md, &doc.block_ids());
    prop_assert!(loaded.is_ok(), "{:?}", loaded.err());
    Ok(())
}

/// Picks a quote in `doc`: a slice of a block's text, and that block when the slice occurs
/// more than once in the document.
pub(crate) fn pick_quote(
    doc: &Document,
    which: usize,
    from: usize,
    len: usize,
) -> Option<(Quote, Option<BlockInfo>, usize, usize)> {
    let blocks = doc.blocks();
    if blocks.is_empty() {
        return None;
    }
    let b = blocks[which % blocks.len()].clone();
    let md = doc.markdown();
    let text = md.get(b.range.start..b.range.end)?;
    let bounds: Vec<usize> = text
        .char_indices()
        .map(|(i, _)| i)
        .chain(std::iter::once(text.len()))
        .collect();
    let s = bounds[from % bounds.len()];
    let e_i = (from % bounds.len() + 1 + len).min(bounds.len() - 1);
    let e = bounds[e_i];
    let exact = text.get(s..e)?;
    if exact.is_empty() {
        return None;
    }
    let (a, bb) = (b.range.start + s, b.range.start + e);
    let count_in = |scope: &str| {
        let mut n = 0;
        let mut at = 0;
        while let Some(p) = scope.get(at..).and_then(|r| r.find(exact)) {
            n += 1;
            at += p + scope[at + p..].chars().next().map_or(1, char::len_utf8);
        }
        n
    };
    if count_in(md) == 1 {
        Some((Quote::exact(exact), None, a, bb))
    } else if count_in(text) == 1 {
        Some((Quote::exact(exact), Some(b), a, bb))
    } else {
        None
    }
}

proptest! {
    #[test]
    fn doc_prop_write_parse_is_a_fixpoint(md in markdown()) {
        let doc = Document::parse(&md, &mut counter());
        check_well_formed(&doc)?;
        let again = Document::parse(doc.markdown(), &mut counter());
        prop_assert_eq!(again.markdown(), doc.markdown());
    }

    #[test]
    fn doc_prop_arbitrary_text_never_panics(text in "(?s).{0,300}", cut in any::<usize>(), len in 0usize..20, put in "(?s).{0,40}") {
        let doc = Document::parse(&text, &mut counter());
        // Canonical, and loads back.
        let again = Document::parse(doc.markdown(), &mut counter());
        prop_assert_eq!(again.markdown(), doc.markdown());
        prop_assert!(Document::load(doc.markdown(), &doc.block_ids()).is_ok());
        let _ = doc.to_html();
        let _ = doc.references();
        let _ = doc.tasks();
        let md = doc.markdown();
        let chars: Vec<usize> = md.char_indices().map(|(i, _)| i).chain(std::iter::once(md.len())).collect();
        let s = chars[cut % chars.len()];
        let e = chars[(cut % chars.len() + len).min(chars.len() - 1)];
        let ops = [EditOp::Replace { quote: Quote::exact(&md[s..e]), text: put, block: None, block_token: None }];
        if let Ok(edited) = doc.apply(None, &ops, &mut counter_from(10_000)) {
            check_well_formed(&edited.document)?;
        }
    }

    #[test]
    fn doc_prop_blocks_json_writer_matches_serde(md in markdown(), which in any::<usize>()) {
        // Once written, a top-level block's JSON is kept with its tree and shared by the
        // documents edits make: it must hold where the block moved to.
        let doc = Document::parse(&md, &mut counter());
        super::tests::assert_writer_matches_serde(&doc);
        let ids = doc.block_ids();
        if let Some(id) = ids.get(which % ids.len().max(1)) {
            let mut ids = counter_from(10_000);
            for edited in [
                doc.insert_after_block(id, "new\n\n- a\n  - b", &mut ids),
                doc.remove_block(id, &mut ids),
                doc.replace_block(id, "| x |\n|---|\n| y |", &mut ids),
            ]
            .into_iter()
            .flatten()
            {
                super::tests::assert_writer_matches_serde(&edited.document);
                super::tests::assert_writer_matches_serde(&edited.document.append("end", &mut ids).document);
            }
        }
        let prepended = Document::parse(&format!("# new\n\n{md}"), &mut counter());
        super::tests::assert_writer_matches_serde(&prepended);
    }

    /// A text loads exactly when it is its chunks joined the canonical way (the check `load`
    /// makes without building the joined text).
    #[test]
    fn doc_prop_load_takes_exactly_canonical_text(
        text in "[-#*>|`:\\[\\]()!<>a-c0-9 \n\t\\\\_~=]{0,200}",
        at in any::<usize>(),
        put in "[\n \t]{1,2}",
    ) {
        let canonical = Document::parse(&text, &mut counter()).markdown().to_owned();
        let mut nudged = canonical.clone();
        let at = at % (nudged.len() + 1);
        if nudged.is_char_boundary(at) {
            nudged.insert_str(at, &put);
        }
        for t in [&text, &canonical, &nudged] {
            let ranges = parse::chunk_ranges(t);
            let joined = parse::join(ranges.iter().map(|&(s, e)| t.get(s..e).unwrap_or("")));
            prop_assert_eq!(parse::canonical_tree(t, None).is_some(), joined == *t, "{:?}", t);
        }
        prop_assert!(parse::canonical_tree(&canonical, None).is_some());
    }

    #[test]
    fn doc_prop_arbitrary_markdownish_text_is_canonical(text in "[-#*>|`:\\[\\]()!<>a-c0-9 \n\t\\\\_~=]{0,200}") {
        let doc = Document::parse(&text, &mut counter());
        check_well_formed(&doc)?;
    }

    #[test]
    fn doc_prop_an_edit_changes_exactly_the_tokens_it_touches(
        md in markdown(),
        which in any::<usize>(),
        from in any::<usize>(),
        len in 0usize..12,
        kind in 0u8..4,
        text in edit_text(),
    ) {
        edit_changes_exactly_the_tokens_it_touches(&md, which, from, len, kind, text)?;
    }

    #[test]
    fn doc_prop_a_stale_token_is_always_refused(
        md in markdown(),
        which in any::<usize>(),
        from in any::<usize>(),
        text in line(),
        stale_doc in any::<bool>(),
        flip in 0usize..64,
    ) {
        let doc = Document::parse(&md, &mut counter());
        let Some((quote, _, _, _)) = pick_quote(&doc, which, from, 3) else {
            return Ok(());
        };
        let blocks = doc.blocks();
        let target = &blocks[which % blocks.len()];
        let bad = |t: &str| {
            let mut c: Vec<char> = t.chars().collect();
            let i = flip % c.len().max(1);
            if let Some(ch) = c.get_mut(i) {
                *ch = if *ch == '0' { '1' } else { '0' };
            }
            c.into_iter().collect::<String>()
        };
        let (expected, block_token) = if stale_doc {
            (Some(bad(doc.token())), Some(target.token.to_string()))
        } else {
            (Some(doc.token().to_owned()), Some(bad(&target.token.to_string())))
        };
        let op = EditOp::Replace { quote, text, block: None, block_token: None };
        // The quote may lie outside `target`: give the block only as a precondition of a
        // second, scoped op that would apply if the token were fresh.
        let scoped = EditOp::InsertAfter {
            quote: Quote::exact(doc.markdown().get(target.range.start..target.range.end).unwrap_or("")),
            text: String::new(),
            block: Some(target.id.to_string()),
            block_token,
        };
        let got = doc.apply(expected.as_deref(), &[op, scoped], &mut counter_from(10_000));
        match got {
            Err(EditError::DocumentChanged { token, blocks }) => {
                prop_assert_eq!(token.as_str(), doc.token());
                prop_assert_eq!(blocks.get(&*target.id), Some(&target.token.to_string()));
            }
            other => return Err(TestCaseError::fail(format!("not refused: {other:?}"))),
        }
    }
}

/// The property of `doc_prop_an_edit_changes_exactly_the_tokens_it_touches`, for one input.
fn edit_changes_exactly_the_tokens_it_touches(
    md: &str,
    which: usize,
    from: usize,
    len: usize,
    kind: u8,
    text: String,
) -> Result<(), TestCaseError> {
    let doc = Document::parse(md, &mut counter());
    let Some((quote, block, qa, qb)) = pick_quote(&doc, which, from, len) else {
        return Ok(());
    };
    let (block_id, block_token) = match &block {
        Some(b) => (Some(b.id.to_string()), Some(b.token.to_string())),
        None => (None, None),
    };
    let (op, a, b) = match kind {
        0 => (
            EditOp::Replace {
                quote,
                text: text.clone(),
                block: block_id,
                block_token,
            },
            qa,
            qb,
        ),
        1 => (
            EditOp::InsertBefore {
                quote,
                text: text.clone(),
                block: block_id,
                block_token,
            },
            qa,
            qa,
        ),
        2 => (
            EditOp::InsertAfter {
                quote,
                text: text.clone(),
                block: block_id,
                block_token,
            },
            qb,
            qb,
        ),
        _ => (
            EditOp::Delete {
                quote,
                block: block_id,
                block_token,
            },
            qa,
            qb,
        ),
    };
    // Counted first, so the edit's document counts its own from it.
    let counted = doc.tasks();
    let edited = doc.apply(
        Some(doc.token()),
        std::slice::from_ref(&op),
        &mut counter_from(10_000),
    );
    let edited = match edited {
        Ok(e) => e,
        Err(e) => return Err(TestCaseError::fail(format!("{e:?} for {op:?}"))),
    };
    let new = &edited.document;
    check_well_formed(new)?;
    // The task count carried through the edit is the count of the new text.
    prop_assert_eq!(
        new.tasks(),
        Document::parse(new.markdown(), &mut counter()).tasks(),
        "tasks before: {:?}",
        counted
    );

    let old_blocks = doc.blocks();
    let new_blocks = new.blocks();
    let old_by_id: HashMap<&str, &BlockInfo> =
        old_blocks.iter().map(|b| (b.id.as_ref(), b)).collect();
    let new_by_id: HashMap<&str, &BlockInfo> =
        new_blocks.iter().map(|b| (b.id.as_ref(), b)).collect();

    // `changed` is exactly the blocks created or whose token changed, in document order.
    let expected_changed: Vec<(String, String)> = new_blocks
        .iter()
        .filter(|nb| {
            old_by_id
                .get(nb.id.as_ref())
                .is_none_or(|ob| ob.token != nb.token)
        })
        .map(|nb| (nb.id.to_string(), nb.token.to_string()))
        .collect();
    prop_assert_eq!(&edited.changed, &expected_changed);
    // `removed` is exactly the ids gone.
    let expected_removed: Vec<String> = old_blocks
        .iter()
        .filter(|ob| !new_by_id.contains_key(ob.id.as_ref()))
        .map(|ob| ob.id.to_string())
        .collect();
    prop_assert_eq!(&edited.removed, &expected_removed);
    prop_assert_eq!(new.token() == doc.token(), new.markdown() == doc.markdown());

    // Touched: closed ranges, widened over the blanks next to them, meeting [a, b].
    let bytes = doc.markdown().as_bytes();
    let touched = |r: Range| {
        let mut s = r.start;
        while s > 0 && matches!(bytes[s - 1], b' ' | b'\t') {
            s -= 1;
        }
        let mut e = r.end;
        while e < bytes.len() && matches!(bytes[e], b' ' | b'\t') {
            e += 1;
        }
        s <= b && a <= e
    };
    // Kept: the same id and token, where the edit leaves it (before the edit: where it was;
    // after: moved by the edit's change of length). An id that went with its text to a
    // copy elsewhere (new text equal to a block the edit swallowed, e.g. by a fence it
    // opened) is not a block kept in place: it joins the reach. Nor is a table row that went
    // from body to header or back (a table the edit split, re-formed around its rows).
    let delta = new.markdown().len() as isize - doc.markdown().len() as isize;
    let header = |blk: &BlockInfo, by_id: &HashMap<&str, &BlockInfo>| {
        blk.kind == BlockType::TableRow
            && blk
                .path
                .last()
                .and_then(|t| by_id.get(t.id.as_ref()))
                .is_some_and(|t| t.range.start == blk.range.start)
    };
    let kept = |blk: &BlockInfo| {
        new_by_id.get(blk.id.as_ref()).is_some_and(|nb| {
            let at = if blk.range.start < a {
                blk.range.start as isize
            } else {
                blk.range.start as isize + delta
            };
            nb.token == blk.token
                && nb.range.start as isize == at
                && header(blk, &old_by_id) == header(nb, &new_by_id)
        })
    };
    // The reach: [a, b] widened over untouched blocks that changed or went, with no
    // untouched block that kept its id and token between them and the reach.
    let blank = |s: usize, e: usize| {
        s <= e
            && !old_blocks.iter().any(|k| {
                k.range.start < k.range.end
                    && k.range.start < e
                    && k.range.end > s
                    && !touched(k.range)
                    && kept(k)
            })
    };
    let (mut lo, mut hi) = (a, b);
    loop {
        let mut grew = false;
        for ob in &old_blocks {
            if touched(ob.range) || kept(ob) {
                continue;
            }
            if ob.range.end > hi && ob.range.start >= hi && blank(hi, ob.range.start) {
                hi = ob.range.end;
                grew = true;
            }
            if ob.range.start < lo && ob.range.end <= lo && blank(ob.range.end, lo) {
                lo = ob.range.start;
                grew = true;
            }
        }
        if !grew {
            break;
        }
    }
    // Tables whose column count changed.
    let reshaped: HashSet<std::sync::Arc<str>> = old_blocks
        .iter()
        .filter(|ob| ob.kind == BlockType::Table)
        .filter(|ob| {
            let cols = |bi: &BlockInfo| {
                bi.rows
                    .as_ref()
                    .and_then(|r| r.first())
                    .map(|r| r.cells.len())
            };
            new_by_id
                .get(ob.id.as_ref())
                .is_none_or(|nb| cols(nb) != cols(ob))
        })
        .map(|ob| ob.id.clone())
        .collect();
    // Rows whose line the edit split into a different number of cells (text before the
    // leading pipe or after the trailing one, a pipe written or deleted): their cells shift,
    // and those past the header's column count are no longer cells (GFM ignores them).
    let cell_count = |md: &str, r: Range| md.get(r.start..r.end).map(|l| table::cells(l).len());
    let shifted: HashSet<std::sync::Arc<str>> = old_blocks
        .iter()
        .filter(|ob| ob.kind == BlockType::TableRow)
        .filter(|ob| {
            new_by_id.get(ob.id.as_ref()).is_some_and(|nb| {
                cell_count(new.markdown(), nb.range) != cell_count(doc.markdown(), ob.range)
            })
        })
        .map(|ob| ob.id.clone())
        .collect();
    for ob in &old_blocks {
        if touched(ob.range) {
            continue;
        }
        if lo <= ob.range.start && ob.range.end <= hi {
            // Joined by the new text (a lazy line, a list continued, an unclosed fence).
            continue;
        }
        if ob.kind == BlockType::TableCell
            && ob
                .path
                .iter()
                .any(|p| reshaped.contains(&p.id) || shifted.contains(&p.id))
        {
            continue;
        }
        let nb = new_by_id.get(ob.id.as_ref());
        prop_assert!(
            nb.is_some(),
            "untouched block {:?} lost its id after {:?}\nold: {:?}\nnew: {:?}",
            ob,
            op,
            doc.markdown(),
            new.markdown()
        );
        prop_assert_eq!(
            nb.map(|n| n.token),
            Some(ob.token),
            "untouched block {:?} changed",
            ob
        );
    }
    Ok(())
}

/// A case proptest found: the new text (a raw HTML block) replaces a code block's opening
/// fence, so the fences pair differently to the end, and equals a block the edit swallowed,
/// whose id goes with its text to the copy.
#[test]
fn an_edit_that_repairs_fences_changes_the_blocks_to_the_end() {
    let md = "# word\n\n```\n<countersign://issue/CS-1> snake_case <countersign://issue/CS-1> a\\*b\n```\n\n> word\n\n:::ask id=a1 state=open\nword\n\n:::\n\n<script>alert(1)</script>\n\n```\nword\n```\n\n";
    let text = "\n\n<script>alert(1)</script>\n\n".to_owned();
    edit_changes_exactly_the_tokens_it_touches(
        md,
        4903479064803716300,
        3513367486392160332,
        3,
        0,
        text,
    )
    .expect("the property holds");
}

/// A case proptest found: a fence written into a task item (`- [ ] x` → ``- ``` ] x``) opens
/// an empty code block its list item closes; a fresh parse ended it inside the fence, the
/// edit's reparse at the line's end.
#[test]
fn a_fence_written_into_a_list_item_holds_its_line() {
    let md = ":::ask id=a1 state=open\nword\n\n:::\n\n- [ ] snake_case\n\nword\n\n# word\n\n:::ask id=a1 state=open\nword\n\n:::\n\n```\nword\n```\n\n:::ask id=a1 state=open\nword\n\n:::\n\n";
    edit_changes_exactly_the_tokens_it_touches(
        md,
        16262622254752564213,
        7132712283470874292,
        0,
        0,
        "```".to_owned(),
    )
    .expect("the property holds");
}

/// A case proptest found: text written before a row's leading pipe is a new first cell (GFM),
/// so the row's cells shift right and its last one, past the header's three columns, is no
/// longer a cell. The cells still there keep their ids and tokens; the new one gets a fresh id,
/// the one pushed out is removed.
#[test]
fn text_before_a_rows_leading_pipe_shifts_its_cells() {
    let md = "|  |  |  |\n|---|---|---|\n|  00a | a0a |   a00 |\n|  |  |  |\n\n> #tag\n\n:::ask id=a1 state=open\nword\n\n:::\n\n:::ask id=a1 state=open\nword\n\n:::\n\n";
    edit_changes_exactly_the_tokens_it_touches(
        md,
        1079615598834980281,
        6792586297117013305,
        3,
        1,
        "word".to_owned(),
    )
    .expect("the property holds");

    let doc = Document::parse(md, &mut counter());
    let op = EditOp::InsertBefore {
        quote: Quote::exact("|  0"),
        text: "word".to_owned(),
        block: None,
        block_token: None,
    };
    let edited = doc
        .apply(Some(doc.token()), &[op], &mut counter_from(10_000))
        .expect("applies");
    let cells = |d: &Document| -> Vec<(String, String)> {
        let md = d.markdown();
        d.blocks()
            .into_iter()
            .filter(|b| b.kind == BlockType::TableCell && b.path.last().map(|p| p.index) == Some(1))
            .map(|b| (b.id.to_string(), md[b.range.start..b.range.end].to_owned()))
            .collect()
    };
    let before = cells(&doc);
    let after = cells(&edited.document);
    let texts: Vec<&str> = after.iter().map(|(_, t)| t.as_str()).collect();
    assert_eq!(texts, ["word", "00a", "a0a"]);
    assert_eq!(after[1], before[0]);
    assert_eq!(after[2], before[1]);
    assert!(
        before.iter().all(|(id, _)| *id != after[0].0),
        "the new cell's id is fresh"
    );
    assert_eq!(edited.removed, [before[2].0.clone()]);
}

/// A case proptest found: a thematic break written after a table's header line splits the
/// table; the header line and the next two are paragraphs, and the rows `|  |`, `|---|`,
/// `|  |` re-form a table, the first row its header, the second its delimiter line (no block).
/// The row that became a header keeps its id and text but is not a block kept in place.
#[test]
fn a_rule_written_after_a_header_re_forms_the_table_below() {
    let md = "| aa  | a0 |  aa00 |\n|---|---|---|\n|  |  |  |\n|  |\n|---|\n|  |\n\n:::ask id=a1 state=open\nword\n\n:::\n\n- word\n- word\n  - #tag\n  - word\n  - [ ] word\n\n:::ask id=a1 state=open\nword\n\n:::\n\n|  |\n|---|\n|  |\n|  |\n|  |\n\n";
    edit_changes_exactly_the_tokens_it_touches(
        md,
        14633815399781268989,
        9139683064620985941,
        11,
        2,
        "\n\n***\n\n".to_owned(),
    )
    .expect("the property holds");
}

/// A case proptest found: a fence written into a nested list item opens a code block whose
/// content is the next line; the item ends at a blank line and an unindented quote. comrak
/// ends that code block inside its fence, so a fresh parse held the fence's line only, where
/// the edit's reparse (its text ending at the list) held the content line too.
#[test]
fn a_fence_written_into_a_nested_item_holds_its_content() {
    let md = "- word\n\n- word\n  - |\n    - word\n\n> word\n\n";
    edit_changes_exactly_the_tokens_it_touches(
        md,
        4277857093805526719,
        254094459226638962,
        0,
        0,
        "```".to_owned(),
    )
    .expect("the property holds");

    let edited = "- word\n\n- word\n  - ```\n    - word\n\n> word\n";
    let doc = Document::parse(edited, &mut counter());
    let code: Vec<&str> = doc
        .blocks()
        .into_iter()
        .filter(|b| b.kind == BlockType::Code)
        .map(|b| &edited[b.range.start..b.range.end])
        .collect();
    assert_eq!(code, ["```\n    - word"]);
}
