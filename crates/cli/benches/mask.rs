//! Throughput of the output masker: 20 values with all their encodings, over 64 MiB of
//! realistic text (build logs and JSON), without and with occasional occurrences.
//!
//! `cargo bench -p countersign-cli --bench mask`; figures in `docs/benchmarks.md`.

use std::hint::black_box;

use countersign_cli::mask::Masker;
use criterion::{Criterion, Throughput, criterion_group, criterion_main};

const SIZE: usize = 64 << 20;
const CHUNK: usize = 64 << 10;

fn values() -> Vec<Vec<u8>> {
    (0..20)
        .map(|i| format!("tok_{i:02}_Zx9/Qw+Lp\"3rT{}é", "k".repeat(i)).into_bytes())
        .collect()
}

fn text(with_values: bool) -> Vec<u8> {
    let lines: [&[u8]; 4] = [
        b"2026-11-24T10:00:00Z INFO compiling countersign-cli v0.1.0 (/work/crates/cli)\n",
        b"{\"level\":\"debug\",\"msg\":\"GET /v1/enrollments/self 200\",\"ms\":1.25,\"path\":\"/a/b?c=d%20e\"}\n",
        b"    Finished `release` profile [optimized] target(s) in 42.17s; 314 tests passed\n",
        b"Authorization: Bearer eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ3b3JrZXIifQ.c2lnbmF0dXJl\n",
    ];
    let vals = values();
    let mut out = Vec::with_capacity(SIZE + 256);
    let mut i = 0usize;
    while out.len() < SIZE {
        out.extend_from_slice(lines[i % lines.len()]);
        if with_values && i % 1000 == 999 {
            out.extend_from_slice(b"token=");
            out.extend_from_slice(&vals[(i / 1000) % vals.len()]);
            out.push(b'\n');
        }
        i += 1;
    }
    out.truncate(SIZE);
    out
}

fn bench(c: &mut Criterion) {
    let vals = values();
    let mut group = c.benchmark_group("mask");
    group.throughput(Throughput::Bytes(SIZE as u64));
    group.sample_size(10);
    for (name, with) in [
        ("64MiB_text_no_values", false),
        ("64MiB_text_values_every_1000_lines", true),
    ] {
        let input = text(with);
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut m =
                    Masker::new(vals.iter().map(Vec::as_slice)).unwrap_or_else(|e| panic!("{e}"));
                let mut out = Vec::with_capacity(CHUNK * 2);
                let mut total = 0usize;
                for chunk in input.chunks(CHUNK) {
                    out.clear();
                    m.push(chunk, &mut out);
                    total += out.len();
                }
                out.clear();
                m.finish(&mut out);
                black_box(total + out.len())
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
