//! TEMPORARY differential dump (not committed).
#![allow(dead_code, clippy::unwrap_used)]
use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::TestRunner;
use super::*;
use super::tests::counter;
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


fn dump_one(out: &mut String, text: &str) {
    let doc = Document::parse(text, &mut counter());
    out.push_str(&serde_json::to_string(doc.markdown()).unwrap());
    out.push('\n');
    out.push_str(&serde_json::to_string(&doc.blocks()).unwrap());
    out.push('\n');
    for id in doc.block_ids() {
        out.push_str(&serde_json::to_string(&doc.position(&id)).unwrap());
        out.push('\n');
    }
    out.push_str(&format!("{:?}\n", Document::load(text, &doc.block_ids()).map(|d| d.token().to_owned())));
    out.push_str(&format!("{:?}\n", Document::load(doc.markdown(), &doc.block_ids()).map(|d| d.token().to_owned())));
    out.push_str(&format!("{:?} {:?}\n", doc.tasks(), doc.references()));
    out.push_str(&doc.to_html());
    out.push('\n');
    let md = doc.markdown();
    let n = md.len();
    for (k, text) in ["x", "", "\n\n- y\n- z", "| a |\n|---|\n| b |", "  more *words*\n>q"].iter().enumerate() {
        if n == 0 { break; }
        let a = (k * 7919 + n / 3) % n;
        let mut a2 = a; while !md.is_char_boundary(a2) { a2 -= 1; }
        let mut b = (a2 + 1 + k * 3).min(n); while !md.is_char_boundary(b) { b += 1; }
        let quote = &md[a2..b];
        if quote.is_empty() { continue; }
        let ops = [EditOp::Replace { quote: Quote::exact(quote), text: (*text).to_owned(), block: None, block_token: None },
                   EditOp::InsertAfter { quote: Quote::exact(quote), text: (*text).to_owned(), block: None, block_token: None }];
        for op in ops {
            let mut ids = counter();
            match doc.apply(Some(doc.token()), std::slice::from_ref(&op), &mut ids) {
                Ok(e) => {
                    out.push_str(&format!("{:?} {:?}\n", e.changed, e.removed));
                    out.push_str(&serde_json::to_string(&e.document.blocks()).unwrap());
                    out.push_str(&format!("{:?}\n", e.document.markdown()));
                }
                Err(e) => out.push_str(&format!("{e:?}\n")),
            }
        }
    }
    if let Some(b) = doc.block_ids().get(1) {
        let mut ids = counter();
        out.push_str(&format!("{:?}\n", doc.remove_block(b, &mut ids).map(|e| (e.changed, e.removed, e.document.markdown().to_owned()))));
        out.push_str(&format!("{:?}\n", doc.replace_block(b, "new\ntext", &mut ids).map(|e| (e.changed, e.removed, e.document.markdown().to_owned()))));
        out.push_str(&format!("{:?}\n", doc.insert_after_block(b, "- new", &mut ids).map(|e| (e.changed, e.removed, e.document.markdown().to_owned()))));
    }
}

#[test]
fn doc_difftmp_dump() {
    let mut out = String::new();
    let mut runner = TestRunner::deterministic();
    let md = markdown();
    for _ in 0..3000 {
        let t = md.new_tree(&mut runner).unwrap().current();
        dump_one(&mut out, &t);
    }
    let arb = "(?s).{0,300}";
    for _ in 0..1500 {
        let t = arb.new_tree(&mut runner).unwrap().current();
        dump_one(&mut out, &t);
    }
    let mdish = "[-#*>|`:\\[\\]()!<>a-c0-9 \n\t\\\\_~=]{0,200}";
    for _ in 0..3000 {
        let t = mdish.new_tree(&mut runner).unwrap().current();
        dump_one(&mut out, &t);
    }
    dump_one(&mut out, "# Plan\r\n\r\n\r\nSome *text* with snake_case_name and [a link](https://example.com).\nSecond line.\n\n- a\n- [ ] task one\n  - [x] nested done\n\n| h1 | h2 |\n|----|:--:|\n| 1  | 2  |\n| 3  | 4  |\n\n```rust\nfn main() {}\n```\n\n> quoted\n> text\n\n:::ask id=q1 state=open\nWhich one?\n\n- (a) first\n- (b) second\n:::\n\n---\n\n<div onclick=\"x()\">raw</div>\n\n![diagram](countersign://artifact/0b6f2a3c-1d2e-4f5a-8b9c-0d1e2f3a4b5c)\n\n[spec.pdf](countersign://artifact/0B6F2A3C-1D2E-4F5A-8B9C-0D1E2F3A4B5D)\n\n[ref]: https://example.org\n\nSee [x][ref] and <countersign://issue/CS-12>.\n");
    std::fs::write(std::env::var("DIFF_OUT").unwrap(), out).unwrap();
}
