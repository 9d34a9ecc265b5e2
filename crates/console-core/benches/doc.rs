//! The document engine on a 1 MiB document (issue 12's benchmark): a `replace` op, the blocks
//! list (and as JSON), loading a stored document, and comrak's own parse of the same text (the
//! floor under `load`). Run: `cargo bench -p countersign-console-core --bench doc`.
//!
//! On a shared machine, wall time measures the neighbours too: `DOC_BENCH_CLOCK=cpu` measures
//! this thread's CPU time instead (`CLOCK_THREAD_CPUTIME_ID`), which other processes barely
//! move (caches and memory bandwidth still shared).

use std::collections::HashMap;
use std::io::Write;
use std::time::Duration;

use countersign_console_core::doc::{Document, EditOp, Quote};
use criterion::measurement::{Measurement, ValueFormatter, WallTime};
use criterion::{Criterion, Throughput};

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

/// The comrak options the engine parses with (CommonMark + tables, task lists, directives).
fn comrak_options() -> comrak::Options<'static> {
    let mut o = comrak::Options::default();
    o.extension.table = true;
    o.extension.tasklist = true;
    o.extension.block_directive = true;
    o
}

/// `tag` follows each name (` (cpu)` under the CPU clock, so the two kinds of figure are kept
/// apart in `target/criterion`).
fn bench<M: Measurement + 'static>(c: &mut Criterion<M>, tag: &str) {
    let text = one_mib();
    let mut ids = counter();
    let doc = Document::parse(&text, &mut ids);
    let ops = [EditOp::Replace {
        quote: Quote::exact("A second line of paragraph 5000."),
        text: "A changed line of paragraph 5000.".into(),
        block: None,
        block_token: None,
    }];
    c.bench_function(&format!("replace op on 1 MiB{tag}"), |b| {
        b.iter(|| doc.apply(Some(doc.token()), &ops, &mut ids))
    });
    c.bench_function(&format!("blocks list of 1 MiB{tag}"), |b| {
        b.iter(|| doc.blocks())
    });
    c.bench_function(&format!("blocks list of 1 MiB as JSON{tag}"), |b| {
        b.iter(|| serde_json::to_vec(&doc.blocks()))
    });
    let stored = doc.block_ids();
    c.bench_function(
        &format!("blocks list of 1 MiB as JSON from the tree{tag}"),
        |b| {
            b.iter(|| {
                let mut out = Vec::new();
                doc.write_blocks_json(&mut out, &mut |_, _| {});
                out
            })
        },
    );
    // The blocks route's body: each block's `refs` looked up (by id, in a map holding the few
    // blocks that have any, as the route's query answers) and written.
    let counts: HashMap<String, (i64, i64)> = doc
        .block_ids()
        .into_iter()
        .step_by(100)
        .map(|id| (id, (1, 2)))
        .collect();
    c.bench_function(
        &format!("blocks route body of 1 MiB (JSON with refs){tag}"),
        |b| {
            b.iter(|| {
                let mut out = Vec::new();
                out.extend_from_slice(b"{\"token\":\"");
                out.extend_from_slice(doc.token().as_bytes());
                out.extend_from_slice(b"\",\"blocks\":");
                doc.write_blocks_json(&mut out, &mut |id, out| match counts.get(id) {
                    // Writing to a Vec cannot fail.
                    Some((incoming, outgoing)) => {
                        let _ = write!(
                            out,
                            ",\"refs\":{{\"incoming\":{incoming},\"outgoing\":{outgoing}}}"
                        );
                    }
                    None => out.extend_from_slice(b",\"refs\":{\"incoming\":0,\"outgoing\":0}"),
                });
                out.push(b'}');
                out
            })
        },
    );
    c.bench_function(&format!("load 1 MiB{tag}"), |b| {
        b.iter(|| Document::load(doc.markdown(), &stored))
    });
    let options = comrak_options();
    c.bench_function(&format!("comrak parse 1 MiB (floor){tag}"), |b| {
        b.iter(|| {
            let arena = comrak::Arena::new();
            comrak::parse_document(&arena, doc.markdown(), &options)
                .children()
                .count()
        })
    });
}

/// This thread's CPU time.
struct ThreadCpu;

fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

impl Measurement for ThreadCpu {
    type Intermediate = Duration;
    type Value = Duration;

    fn start(&self) -> Duration {
        thread_cpu()
    }
    fn end(&self, start: Duration) -> Duration {
        thread_cpu().saturating_sub(start)
    }
    fn add(&self, a: &Duration, b: &Duration) -> Duration {
        *a + *b
    }
    fn zero(&self) -> Duration {
        Duration::ZERO
    }
    fn to_f64(&self, v: &Duration) -> f64 {
        v.as_secs_f64() * 1e9
    }
    fn formatter(&self) -> &dyn ValueFormatter {
        &Nanos
    }
}

/// Formats nanoseconds as criterion's wall-time formatter does (ns, µs, ms, s).
struct Nanos;

impl ValueFormatter for Nanos {
    fn scale_values(&self, ns: f64, values: &mut [f64]) -> &'static str {
        let (factor, unit) = if ns < 1e3 {
            (1.0, "ns")
        } else if ns < 1e6 {
            (1e-3, "µs")
        } else if ns < 1e9 {
            (1e-6, "ms")
        } else {
            (1e-9, "s")
        };
        for v in values {
            *v *= factor;
        }
        unit
    }
    fn scale_throughputs(&self, _: f64, _: &Throughput, _: &mut [f64]) -> &'static str {
        "ns"
    }
    fn scale_for_machines(&self, _: &mut [f64]) -> &'static str {
        "ns"
    }
}

fn main() {
    let cpu = std::env::var("DOC_BENCH_CLOCK").is_ok_and(|v| v == "cpu");
    if cpu {
        let mut c = Criterion::default()
            .with_measurement(ThreadCpu)
            .sample_size(20)
            .configure_from_args();
        bench(&mut c, " (cpu)");
        c.final_summary();
    } else {
        let mut c: Criterion<WallTime> = Criterion::default().sample_size(20).configure_from_args();
        bench(&mut c, "");
        c.final_summary();
    }
}
