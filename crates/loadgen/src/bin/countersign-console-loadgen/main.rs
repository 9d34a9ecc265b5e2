//! `countersign-console-loadgen`: the console's work routes under load (issue 11's
//! benchmarks), against a console in this process on a SQLite file (or `--database-url`):
//!
//! 1. all but `--create` of `--issues` created through the core (the same transaction and
//!    event, no HTTP), so the next phases run on a table that size;
//! 2. the last `--create` through `POST /api/v1/issues` (advice included), `--connections` at
//!    once;
//! 3. filtered lists (`project`, `status`, `label`, `limit=50`): p50, p99;
//! 4. search (`q` one or two words): p50, p99;
//! 5. fan-out: `--streams` open `GET /api/v1/events` streams, then `--events` issues created
//!    one at a time; for each event, the delay from the POST's answer to each stream's receipt.
//!
//! With `--inbox-asks N` it runs the inbox phase alone instead (issue 13): `N` open asks across
//! `--inbox-projects` projects, on issues assigned to one person, made through the core; then
//! `--queries` reads of that person's `GET /api/v1/inbox` from `--connections` clients, with the
//! person's browser session: p50, p99.
//!
//! `--mode documents` (issue 12) instead: one `--document-kib` markdown document (headings,
//! paragraphs, task lists, tables, code) uploaded through `POST …/artifacts` (multipart), then
//! `--edits` replace ops through `POST /api/v1/artifacts/{id}/edits`, one at a time, each with
//! the previous answer's token as `expected_token`, and `--reads` `GET …/blocks`: p50, p99.
//!
//! `--mode pages` (issue 27) instead: the pages a person reads, as a signed-in browser asks
//! for them (dev mode's local sign-in, the session cookie), one request at a time so each
//! latency is the server's time plus loopback, on a project of `--issues` issues (made through
//! the core unless `--existing`): the issue list `/projects/BENCH/issues` and its
//! `?status=done`, an issue page with `--timeline` entries (comments and asks on one issue),
//! and a `--document-kib` document's page `/artifacts/{id}`: p50, p99 of `--reads` each.
//!
//! The server runs on its own 2-thread runtime; the client on the rest. Figures go to
//! `docs/benchmarks.md` with the command.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use countersign_console_core::NewIssue;
use countersign_console_core::ids::SessionId;
use countersign_console_core::work::Actor;
use serde_json::json;

mod documents;
mod inbox;
mod issues;
mod pages;

use documents::*;
use inbox::*;
use issues::*;
use pages::*;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(version, about = "Throughput and latency of the console's work routes")]
struct Args {
    /// Issues in the table for the list, search and fan-out phases.
    #[arg(long, default_value_t = 100_000)]
    issues: usize,
    /// Of those, how many are created through the API (the creation phase).
    #[arg(long, default_value_t = 5_000)]
    create: usize,
    /// Concurrent clients in the creation, list and search phases.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Requests in each of the list and search phases.
    #[arg(long, default_value_t = 2_000)]
    queries: usize,
    /// Open event streams in the fan-out phase.
    #[arg(long, default_value_t = 1_000)]
    streams: usize,
    /// Events sent to them, one at a time.
    #[arg(long, default_value_t = 20)]
    events: usize,
    /// The console's database (default: a SQLite file in a temp dir).
    #[arg(long)]
    database_url: Option<String>,
    /// The database holds the issues already (from an earlier run with the same
    /// `--database-url`): create none through the core, only `--create` through the API.
    #[arg(long)]
    existing: bool,
    /// Run the inbox phase alone: this many open asks in one person's inbox.
    #[arg(long, default_value_t = 0)]
    inbox_asks: usize,
    /// Across this many projects (ten issues each).
    #[arg(long, default_value_t = 100)]
    inbox_projects: usize,
    /// `work` (issues, lists, search, fan-out) or `documents` (edits and blocks of one large
    /// document).
    #[arg(long, default_value = "work")]
    mode: String,
    /// The document's size in KiB (documents mode).
    #[arg(long, default_value_t = 1024)]
    document_kib: usize,
    /// Replace ops, one at a time (documents mode).
    #[arg(long, default_value_t = 500)]
    edits: usize,
    /// Blocks reads, one at a time (documents mode); page reads of each page (pages mode).
    #[arg(long, default_value_t = 100)]
    reads: usize,
    /// Entries on the issue page's timeline (pages mode): comments and asks on one issue.
    #[arg(long, default_value_t = 200)]
    timeline: usize,
}

const TOKEN: &str = "loadgen-shared-token-0123456789";

const WORDS: &[&str] = &[
    "refund",
    "payment",
    "invoice",
    "ledger",
    "currency",
    "checkout",
    "cart",
    "login",
    "session",
    "token",
    "rotate",
    "deploy",
    "rollback",
    "migration",
    "index",
    "query",
    "latency",
    "cache",
    "queue",
    "worker",
    "retry",
    "timeout",
    "webhook",
    "audit",
    "report",
    "export",
    "import",
    "search",
    "filter",
    "page",
    "button",
    "layout",
    "mobile",
    "desktop",
    "email",
    "alert",
    "metric",
    "trace",
    "log",
    "dashboard",
    "billing",
    "plan",
    "quota",
    "limit",
    "upgrade",
    "schema",
    "backup",
    "restore",
    "replica",
    "failover",
];

/// A small deterministic generator (xorshift), so runs are comparable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[(self.next() % v.len() as u64) as usize]
    }
    fn title(&mut self) -> String {
        (0..5)
            .map(|_| self.pick(WORDS))
            .collect::<Vec<_>>()
            .join(" ")
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The `/proc` entries of the client runtime's threads.
static CLIENT_THREADS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// CPU seconds (user + system) from a `/proc/<…>/stat` file.
fn cpu_seconds(stat_file: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(stat_file) else {
        return 0.0;
    };
    // Fields after the command name (in parentheses, which may hold spaces).
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime: fields 14 and 15 of the line, the 12th and 13th after ')'.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The server's CPU seconds so far: the process's (its runtime, SQLite's worker threads, the
/// allocator) less the client runtime's threads.
fn server_cpu() -> f64 {
    let client: f64 = CLIENT_THREADS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|t| cpu_seconds(&format!("{t}/stat")))
        .sum();
    cpu_seconds("/proc/self/stat") - client
}

/// Whether the console's database is a PostgreSQL server on this machine, whose processes'
/// CPU [`database_cpu`] reads.
static LOCAL_POSTGRES: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The CPU seconds so far of every `postgres` process on this machine (the server the console
/// talks to, with whatever else uses it), when the database is PostgreSQL on this machine;
/// `NAN` otherwise. A search's cost on PostgreSQL is mostly the server's, not the console's.
fn database_cpu() -> f64 {
    if !LOCAL_POSTGRES.load(std::sync::atomic::Ordering::Relaxed) {
        return f64::NAN;
    }
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return f64::NAN;
    };
    dir.filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "postgres")
        })
        .map(|e| cpu_seconds(&format!("{}/stat", e.path().display())))
        .sum()
}

fn report(name: &str, lat: Vec<Duration>, elapsed: Duration, server_cpu_s: f64) {
    report_with(name, lat, elapsed, server_cpu_s, f64::NAN);
}

fn report_with(
    name: &str,
    mut lat: Vec<Duration>,
    elapsed: Duration,
    server_cpu_s: f64,
    database_cpu_s: f64,
) {
    lat.sort();
    // NaN: the phase's server CPU is not its own (other work ran between its requests).
    let mut cpu = if server_cpu_s.is_finite() {
        format!(
            "; server CPU {:.0} µs per request",
            server_cpu_s * 1e6 / lat.len().max(1) as f64
        )
    } else {
        String::new()
    };
    if database_cpu_s.is_finite() {
        cpu.push_str(&format!(
            ", PostgreSQL's processes {:.0} µs",
            database_cpu_s * 1e6 / lat.len().max(1) as f64
        ));
    }
    println!(
        "{name}: {} requests in {:.2} s ({:.0}/s), p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms{cpu}",
        lat.len(),
        elapsed.as_secs_f64(),
        lat.len() as f64 / elapsed.as_secs_f64(),
        percentile(&lat, 0.50).as_secs_f64() * 1e3,
        percentile(&lat, 0.99).as_secs_f64() * 1e3,
        lat.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
}

/// Runs `n` requests from `connections` clients; answers each one's latency.
async fn closed_loop<F, Fut>(
    n: usize,
    connections: usize,
    f: F,
) -> anyhow::Result<(Vec<Duration>, Duration)>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = anyhow::Result<()>> + Send,
{
    let f = Arc::new(f);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let (f, next) = (f.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    return Ok::<_, anyhow::Error>(lat);
                }
                let t = Instant::now();
                f(i).await?;
                lat.push(t.elapsed());
            }
        }));
    }
    let mut all = Vec::with_capacity(n);
    for t in tasks {
        all.extend(t.await??);
    }
    Ok((all, start.elapsed()))
}

/// A phase: `n` requests from `connections` clients ([`closed_loop`]), the `i`th built by
/// `request(i)`, each answered `expect` and read to its end; reported as `name` with the server
/// CPU they took.
async fn measured(
    name: &str,
    n: usize,
    connections: usize,
    expect: u16,
    request: impl Fn(usize) -> reqwest::RequestBuilder + Send + Sync + 'static,
) -> anyhow::Result<()> {
    let (cpu0, db0) = (server_cpu(), database_cpu());
    let (lat, took) = closed_loop(n, connections, move |i| {
        let r = request(i);
        async move {
            let r = r.send().await?;
            anyhow::ensure!(r.status() == expect, "{}: {}", r.url().path(), r.status());
            r.bytes().await?;
            Ok(())
        }
    })
    .await?;
    report_with(name, lat, took, server_cpu() - cpu0, database_cpu() - db0);
    Ok(())
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .on_thread_start(|| {
            // The client's threads, whose CPU time is not the server's.
            if let Ok(p) = std::fs::read_link("/proc/thread-self") {
                CLIENT_THREADS
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push(format!("/proc/{}", p.display()));
            }
        })
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN)?;
    let listener = server_rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let url = format!("http://{}", listener.local_addr()?);
    let mut config = countersign_console_http::Config::new(&url);
    config.database_url = args.database_url.clone().unwrap_or_else(|| {
        format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("console.db").display()
        )
    });
    config.shared_token_file = Some(token_file);
    // The inbox and pages phases sign their person in through dev mode's local sign-in
    // (loopback only).
    config.local_sign_in = args.inbox_asks > 0 || args.mode == "pages";
    let state = server_rt.block_on(countersign_console_http::build(
        &config,
        Arc::new(countersign_console_core::SystemClock),
    ))?;
    let _running = server_rt.block_on(countersign_console_http::serve(state.clone(), listener))?;
    LOCAL_POSTGRES.store(
        args.database_url.as_deref().is_some_and(|u| {
            u.starts_with("postgres") && (u.contains("@127.0.0.1") || u.contains("@localhost"))
        }),
        std::sync::atomic::Ordering::Relaxed,
    );
    println!(
        "console on {}",
        if args
            .database_url
            .as_deref()
            .is_some_and(|u| u.starts_with("postgres"))
        {
            "PostgreSQL"
        } else {
            "SQLite"
        }
    );
    if args.inbox_asks > 0 {
        return client_rt.block_on(inbox(args, url, state));
    }
    if args.mode == "documents" {
        return client_rt.block_on(documents(args, url));
    }
    if args.mode == "pages" {
        return client_rt.block_on(pages(args, url, state));
    }
    client_rt.block_on(run(args, url, state))
}
