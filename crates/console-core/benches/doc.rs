//! The document engine on a 1 MiB document (issue 12's benchmark): a `replace` op, and the
//! blocks list. Run: `cargo bench -p countersign-console-core --bench doc`.

use countersign_console_core::doc::{Document, EditOp, Quote};
use criterion::{Criterion, criterion_group, criterion_main};

/// About 1 MiB of varied markdown: headings, paragraphs with links, task lists, tables.
fn one_mib() -> String {
    let mut s = String::with_capacity(1 << 20);
    let mut i = 0;
    while s.len() < 1 << 20 {
        i += 1;
        s.push_str(&format!(
            "## Section {i}\n\nSome *text* with a [link](https://example.com/{i}) and `code` for item {i}, more words to fill the line.\nA second line of paragraph {i}.\n\n- [ ] task {i}\n- [x] done {i}\n  - nested {i}\n\n| a | b |\n|---|---|\n| {i} | x |\n\n"
        ));
    }
    s
}

fn counter() -> impl FnMut() -> String {
    let mut n = 0u64;
    move || {
        n += 1;
        format!("id{n}")
    }
}

fn bench(c: &mut Criterion) {
    let text = one_mib();
    let mut ids = counter();
    let doc = Document::parse(&text, &mut ids);
    let ops = [EditOp::Replace {
        quote: Quote::exact("A second line of paragraph 5000."),
        text: "A changed line of paragraph 5000.".into(),
        block: None,
        block_token: None,
    }];
    c.bench_function("replace op on 1 MiB", |b| {
        b.iter(|| doc.apply(Some(doc.token()), &ops, &mut ids))
    });
    c.bench_function("blocks list of 1 MiB", |b| b.iter(|| doc.blocks()));
    c.bench_function("blocks list of 1 MiB as JSON", |b| {
        b.iter(|| serde_json::to_vec(&doc.blocks()))
    });
    let stored = doc.block_ids();
    c.bench_function("load 1 MiB", |b| {
        b.iter(|| Document::load(doc.markdown(), &stored))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20);
    targets = bench
}
criterion_main!(benches);
