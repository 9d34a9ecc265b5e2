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
use countersign_console_core::work::Actor;
use serde_json::json;

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

fn report(name: &str, mut lat: Vec<Duration>, elapsed: Duration, server_cpu_s: f64) {
    lat.sort();
    // NaN: the phase's server CPU is not its own (other work ran between its requests).
    let cpu = if server_cpu_s.is_finite() {
        format!(
            "; server CPU {:.0} µs per request",
            server_cpu_s * 1e6 / lat.len().max(1) as f64
        )
    } else {
        String::new()
    };
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
    let cpu0 = server_cpu();
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
    report(name, lat, took, server_cpu() - cpu0);
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

/// An agent rewords one of its asks (a write in the inbox: the next read patches it).
async fn reword(
    console: &countersign_console_core::Console,
    asked: &[(Actor, String)],
    turn: usize,
) -> anyhow::Result<()> {
    let (agent, id) = &asked[(turn * 7919) % asked.len()];
    console
        .asks()
        .reword_ask(
            agent,
            id,
            countersign_console_core::console::asks::AskPatch {
                question: Some(format!("Reworded, take {turn}?")),
                ..Default::default()
            },
        )
        .await?;
    Ok(())
}

/// The person the inbox and pages modes sign in as.
const PERSON: &str = "bench@example.com";

fn bench_login() -> anyhow::Result<countersign_console_core::Login> {
    countersign_console_core::Login::parse(PERSON).ok_or_else(|| anyhow::anyhow!("login"))
}

/// The inbox phase (see the module's doc).
async fn inbox(
    args: Args,
    url: String,
    state: Arc<countersign_console_http::AppState>,
) -> anyhow::Result<()> {
    use countersign_console_core::console::asks::{NewAsk, OptionIn};
    let session = state.console.sign_in_local(PERSON).await?;
    let cookie = format!("countersign_session={}", session.token.as_str());
    let person = Actor::User {
        login: bench_login()?,
    };
    let started = Instant::now();
    let projects = args.inbox_projects.max(1);
    let per_project = args.inbox_asks.div_ceil(projects);
    let issues_per_project = 10usize;
    let mut rng = Rng(0x6a09_e667_f3bc_c909);
    let mut made = 0;
    let mut asked = Vec::new();
    for p in 0..projects {
        let key = format!("P{p:03}");
        state
            .console
            .issues()
            .create_project(&person, &key, &format!("Project {p}"))
            .await?;
        let mut keys = Vec::new();
        for _ in 0..issues_per_project {
            let (issue, _) = state
                .console
                .issues()
                .create_issue(
                    &person,
                    NewIssue {
                        project: Some(key.clone()),
                        title: Some(rng.title()),
                        ..Default::default()
                    },
                )
                .await?;
            keys.push(issue.key.to_string());
        }
        for a in 0..per_project {
            if made == args.inbox_asks {
                break;
            }
            let agent = Actor::Agent {
                owner: None,
                service: None,
                session: Some(format!("agent-{}", a % 7)),
            };
            let new = NewAsk {
                question: format!("{}?", rng.title()),
                options: vec![
                    OptionIn {
                        id: Some("yes".into()),
                        label: "Yes".into(),
                    },
                    OptionIn {
                        id: Some("no".into()),
                        label: "No".into(),
                    },
                ],
                block: None,
                actor: None,
            };
            let opened = state
                .console
                .asks()
                .open_issue_ask(&agent, &keys[a % keys.len()], new)
                .await?;
            asked.push((agent, opened.id));
            made += 1;
        }
        if p % 10 == 9 {
            eprintln!("  {made} asks…");
        }
    }
    println!(
        "filled {made} open asks across {projects} projects in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.connections + 8)
        .build()?;
    let first = Instant::now();
    let check = http
        .get(format!("{url}/api/v1/inbox"))
        .header("cookie", &cookie)
        .send()
        .await?;
    anyhow::ensure!(check.status() == 200, "inbox: {}", check.status());
    let body: serde_json::Value = check.json().await?;
    println!(
        "GET /api/v1/inbox, the first read (nothing kept): {:.1} ms",
        first.elapsed().as_secs_f64() * 1e3
    );
    let rows = body["human_turn"].as_array().map_or(0, Vec::len);
    anyhow::ensure!(rows == made, "the inbox has {rows} rows, not {made}");
    // A write in the inbox before each read (an agent rewords one of its asks): the kept
    // answer is patched from the events since, that ask read again, the JSON made again.
    let mut turn = 0usize;
    let me = countersign_console_core::Human {
        login: bench_login()?,
        csrf_token: String::new(),
        session_key: String::new(),
    };
    let (mut core, mut json, mut cold) = (Vec::new(), Vec::new(), Vec::new());
    // CPU while each read runs (the machine may be shared: latency alone says little): the
    // process's for the core's reads (nothing else runs then), the server's for the requests.
    let (mut core_cpu, mut cold_cpu) = (0.0, 0.0);
    let mut size = 0;
    for _ in 0..args.queries.min(200) {
        turn += 1;
        reword(&state.console, &asked, turn).await?;
        let c = cpu_seconds("/proc/self/stat");
        let t = Instant::now();
        let inbox = state.console.asks().inbox_asks(&me, None, None).await?;
        core.push(t.elapsed());
        let t = Instant::now();
        size = inbox.json().len();
        json.push(t.elapsed());
        core_cpu += cpu_seconds("/proc/self/stat") - c;
        turn += 1;
        reword(&state.console, &asked, turn).await?;
        let c = server_cpu();
        let t = Instant::now();
        let r = http
            .get(format!("{url}/api/v1/inbox"))
            .header("cookie", &cookie)
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "inbox: {}", r.status());
        r.bytes().await?;
        cold.push(t.elapsed());
        cold_cpu += server_cpu() - c;
    }
    core.sort();
    json.sort();
    println!(
        "inbox read after a write in it, in the core: p50 {:.2} ms, p99 {:.2} ms; its JSON ({size} bytes): p50 {:.2} ms; CPU {:.1} ms per read with its JSON",
        percentile(&core, 0.5).as_secs_f64() * 1e3,
        percentile(&core, 0.99).as_secs_f64() * 1e3,
        percentile(&json, 0.5).as_secs_f64() * 1e3,
        core_cpu * 1e3 / core.len().max(1) as f64,
    );
    let spent: Duration = cold.iter().sum();
    report(
        &format!("GET /api/v1/inbox after a write in it ({made} open asks)"),
        cold,
        spent,
        cold_cpu,
    );
    // Then reads with no write between them: the answer kept since the last event.
    let name = format!("GET /api/v1/inbox ({made} open asks, {projects} projects)");
    measured(&name, args.queries, args.connections, 200, move |_| {
        http.get(format!("{url}/api/v1/inbox"))
            .header("cookie", &cookie)
    })
    .await
}

/// A markdown document of about `kib` KiB: sections of a heading, a paragraph holding the
/// unique word `paraNx` (what the edits replace), a task list, and now and then a table or a
/// code block. Answers it and its number of sections.
fn document(kib: usize) -> (String, usize) {
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    let mut md = String::from("# Load\n");
    let mut n = 0;
    while md.len() < kib * 1024 {
        md.push_str(&format!("\n## Section {n}\n\n"));
        let words: Vec<&str> = (0..40).map(|_| rng.pick(WORDS)).collect();
        md.push_str(&format!("para{n}x {}.\n\n", words.join(" ")));
        for t in 0..3 {
            let done = if rng.next().is_multiple_of(2) {
                "x"
            } else {
                " "
            };
            md.push_str(&format!("- [{done}] task {n}.{t} {}\n", rng.title()));
        }
        if n % 5 == 0 {
            md.push_str("\n| name | value | note |\n|---|---|---|\n");
            for r in 0..3 {
                md.push_str(&format!(
                    "| r{r} | {} | {} |\n",
                    rng.next() % 1000,
                    rng.pick(WORDS)
                ));
            }
        }
        if n % 7 == 0 {
            md.push_str(&format!(
                "\n```\nfn f{n}() -> u64 {{ {} }}\n```\n",
                rng.next() % 1000
            ));
        }
        n += 1;
    }
    (md, n)
}

/// Creates project BENCH through the API; answers the status.
async fn create_bench(http: &reqwest::Client, url: &str) -> anyhow::Result<reqwest::StatusCode> {
    let r = http
        .post(format!("{url}/api/v1/projects"))
        .bearer_auth(TOKEN)
        .json(&json!({"key": "BENCH", "name": "Bench", "actor": "loadgen"}))
        .send()
        .await?;
    Ok(r.status())
}

/// Uploads `md` to project BENCH as the markdown file `filename` (multipart); answers the new
/// artifact's JSON.
async fn upload(
    http: &reqwest::Client,
    url: &str,
    filename: &str,
    md: &str,
) -> anyhow::Result<serde_json::Value> {
    let boundary = "loadgen-boundary-5f3a";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{filename}\"\r\n\
         Content-Type: text/markdown\r\n\r\n"
    )
    .into_bytes();
    body.extend_from_slice(md.as_bytes());
    body.extend_from_slice(format!("\r\n--{boundary}--\r\n").as_bytes());
    let r = http
        .post(format!("{url}/api/v1/projects/BENCH/artifacts"))
        .bearer_auth(TOKEN)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await?;
    anyhow::ensure!(r.status() == 201, "upload: {}", r.text().await?);
    Ok(r.json().await?)
}

async fn documents(args: Args, url: String) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let status = create_bench(&http, &url).await?;
    anyhow::ensure!(status == 201, "project: {status}");
    let (md, sections) = document(args.document_kib);
    let started = Instant::now();
    let meta = upload(&http, &url, "load.md", &md).await?;
    println!(
        "uploaded a {} byte document ({sections} sections) in {:.1} ms",
        meta["size"],
        started.elapsed().as_secs_f64() * 1e3
    );
    let id = meta["id"].as_str().unwrap_or_default().to_owned();
    let mut token = meta["token"].as_str().unwrap_or_default().to_owned();

    // Replace ops, one at a time, each conditional on the last answer's token.
    let mut lat = Vec::with_capacity(args.edits);
    let started = Instant::now();
    let cpu0 = server_cpu();
    for i in 0..args.edits {
        let n = (i * 7919) % sections;
        let (from, to) = if (i / sections) % 2 == 0 {
            (format!("para{n}x"), format!("para{n}y"))
        } else {
            (format!("para{n}y"), format!("para{n}x"))
        };
        let t = Instant::now();
        let r = http
            .post(format!("{url}/api/v1/artifacts/{id}/edits"))
            .bearer_auth(TOKEN)
            .json(&json!({
                "expected_token": token,
                "ops": [{"op": "replace", "quote": {"exact": from}, "text": to}],
            }))
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "edit {i}: {}", r.text().await?);
        let answer: serde_json::Value = r.json().await?;
        lat.push(t.elapsed());
        token = answer["token"].as_str().unwrap_or_default().to_owned();
    }
    report(
        &format!(
            "POST /api/v1/artifacts/{{id}}/edits (one replace, {} KiB)",
            args.document_kib
        ),
        lat,
        started.elapsed(),
        server_cpu() - cpu0,
    );

    // The blocks route.
    let mut lat = Vec::with_capacity(args.reads);
    let mut blocks = 0;
    let started = Instant::now();
    let cpu0 = server_cpu();
    for _ in 0..args.reads {
        let t = Instant::now();
        let r = http
            .get(format!("{url}/api/v1/artifacts/{id}/blocks"))
            .bearer_auth(TOKEN)
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "blocks: {}", r.status());
        let b = r.bytes().await?;
        lat.push(t.elapsed());
        blocks = b.len();
    }
    report(
        &format!(
            "GET /api/v1/artifacts/{{id}}/blocks ({} KiB answer, unchanged document)",
            blocks / 1024
        ),
        lat,
        started.elapsed(),
        server_cpu() - cpu0,
    );

    // The blocks route right after an edit (the answer made afresh), one edit before each.
    let mut lat = Vec::new();
    let started = Instant::now();
    for i in 0..(args.reads / 4).max(1) {
        let r = http
            .post(format!("{url}/api/v1/artifacts/{id}/edits"))
            .bearer_auth(TOKEN)
            .json(&json!({"ops": [{"op": "insert_after", "quote": {"exact": "# Load"}, "text": format!("\n\nfresh {i}")}]}))
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "edit: {}", r.text().await?);
        let t = Instant::now();
        let r = http
            .get(format!("{url}/api/v1/artifacts/{id}/blocks"))
            .bearer_auth(TOKEN)
            .send()
            .await?;
        anyhow::ensure!(r.status() == 200, "blocks: {}", r.status());
        r.bytes().await?;
        lat.push(t.elapsed());
    }
    report(
        "GET /api/v1/artifacts/{id}/blocks (right after an edit)",
        lat,
        started.elapsed(),
        f64::NAN,
    );
    Ok(())
}

async fn run(
    args: Args,
    url: String,
    state: Arc<countersign_console_http::AppState>,
) -> anyhow::Result<()> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(args.streams + args.connections + 8)
        .build()?;
    let status = create_bench(&http, &url).await?;
    anyhow::ensure!(
        status == 201 || (args.existing && status == 409),
        "project: {status}"
    );

    let create = args.create.min(args.issues);
    // 1. All but `--create` issues through the core.
    let rest = if args.existing {
        0
    } else {
        args.issues - create
    };
    fill(&state, rest, args.connections).await?;

    // 2. Creation through the API, on a table that holds the rest already.
    let (h, u) = (http.clone(), url.clone());
    measured(
        "POST /api/v1/issues (with advice)",
        create,
        args.connections,
        201,
        move |i| {
            let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (i as u64 + 1));
            h.post(format!("{u}/api/v1/issues"))
                .bearer_auth(TOKEN)
                .json(&json!({
                    "project": "BENCH",
                    "title": rng.title(),
                    "labels": [format!("l{}", rng.next() % 20)],
                    "priority": rng.next() % 4,
                }))
        },
    )
    .await?;

    // 3. Filtered lists.
    let (h, u) = (http.clone(), url.clone());
    measured(
        "GET /api/v1/issues (project, status, label, limit=50)",
        args.queries,
        args.connections,
        200,
        move |i| {
            let status = ["todo", "in_progress", "done"][i % 3];
            h.get(format!(
                "{u}/api/v1/issues?project=BENCH&status={status}&label=l{}&limit=50",
                i % 20
            ))
            .bearer_auth(TOKEN)
        },
    )
    .await?;

    // 4. Search.
    let (h, u) = (http.clone(), url.clone());
    measured(
        "GET /api/v1/search (one or two words)",
        args.queries,
        args.connections,
        200,
        move |i| {
            let q = if i % 2 == 0 {
                WORDS[i % WORDS.len()].to_owned()
            } else {
                format!(
                    "{} {}",
                    WORDS[i % WORDS.len()],
                    WORDS[(i * 7) % WORDS.len()]
                )
            };
            h.get(format!("{u}/api/v1/search"))
                .query(&[("q", q.as_str())])
                .bearer_auth(TOKEN)
        },
    )
    .await?;

    // 5. Fan-out to open streams.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let ready = Arc::new(tokio::sync::Barrier::new(args.streams + 1));
    for s in 0..args.streams {
        let (http, url, tx, ready) = (http.clone(), url.clone(), tx.clone(), ready.clone());
        tokio::spawn(async move {
            let mut resp = match http
                .get(format!("{url}/api/v1/events"))
                .bearer_auth(TOKEN)
                .send()
                .await
            {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("stream {s}: {e}");
                    ready.wait().await;
                    return;
                }
            };
            ready.wait().await;
            let mut buf = String::new();
            while let Ok(Some(chunk)) = resp.chunk().await {
                buf.push_str(&String::from_utf8_lossy(&chunk));
                while let Some(nl) = buf.find('\n') {
                    let line: String = buf.drain(..=nl).collect();
                    // Each event carries one `id:` line.
                    if line.starts_with("id:") {
                        let _ = tx.send(Instant::now());
                    }
                }
            }
        });
    }
    drop(tx);
    ready.wait().await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut delays = Vec::new();
    for e in 0..args.events {
        let r = http
            .post(format!("{url}/api/v1/issues"))
            .bearer_auth(TOKEN)
            .json(&json!({"project": "BENCH", "title": format!("fan-out {e}")}))
            .send()
            .await?;
        let answered = Instant::now();
        anyhow::ensure!(r.status() == 201, "fan-out create: {}", r.status());
        let mut got = 0;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while got < args.streams {
            let Ok(Some(at)) = tokio::time::timeout_at(deadline, rx.recv()).await else {
                break;
            };
            got += 1;
            delays.push(at.saturating_duration_since(answered));
        }
        anyhow::ensure!(
            got == args.streams,
            "event {e} reached {got} of {} streams",
            args.streams
        );
    }
    delays.sort();
    println!(
        "fan-out: {} events to {} streams: delay after the POST's answer p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
        args.events,
        args.streams,
        percentile(&delays, 0.5).as_secs_f64() * 1e3,
        percentile(&delays, 0.99).as_secs_f64() * 1e3,
        delays.last().copied().unwrap_or_default().as_secs_f64() * 1e3,
    );
    Ok(())
}

/// `rest` issues in project BENCH through the core (no HTTP), `connections` at once, with
/// statuses, priorities and labels spread as the list phases filter them.
async fn fill(
    state: &Arc<countersign_console_http::AppState>,
    rest: usize,
    connections: usize,
) -> anyhow::Result<()> {
    let started = Instant::now();
    // No HTTP here: the whole process's CPU is the write path's.
    let cpu0 = cpu_seconds("/proc/self/stat");
    let statuses = ["todo", "in_progress", "in_review", "blocked", "done"];
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut fillers = Vec::new();
    // As many at once as the API phase: the writes group-commit as they would under load.
    for _ in 0..connections {
        let (state, next) = (state.clone(), next.clone());
        fillers.push(tokio::spawn(async move {
            let actor = Actor::System {
                name: "loadgen".into(),
            };
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= rest {
                    return Ok::<_, anyhow::Error>(());
                }
                let mut rng = Rng(0x2545_f491_4f6c_dd1d ^ (i as u64 + 1));
                let new = NewIssue {
                    project: Some("BENCH".into()),
                    title: Some(rng.title()),
                    status: serde_json::from_value(json!(rng.pick(&statuses))).ok(),
                    priority: Some((rng.next() % 4) as u8),
                    labels: vec![format!("l{}", rng.next() % 20)],
                    ..Default::default()
                };
                state.console.issues().create_issue(&actor, new).await?;
                if i % 10_000 == 9_999 {
                    eprintln!("  {} issues…", i + 1);
                }
            }
        }));
    }
    for f in fillers {
        f.await??;
    }
    let cpu = cpu_seconds("/proc/self/stat") - cpu0;
    println!(
        "issue creation through the core (no HTTP, no advice), {} at once: {rest} in {:.1} s \
         ({:.0}/s); {:.0} µs of CPU each",
        connections,
        started.elapsed().as_secs_f64(),
        rest as f64 / started.elapsed().as_secs_f64().max(1e-9),
        cpu * 1e6 / rest.max(1) as f64,
    );
    Ok(())
}

/// The pages mode (see the module's doc).
async fn pages(
    args: Args,
    url: String,
    state: Arc<countersign_console_http::AppState>,
) -> anyhow::Result<()> {
    use countersign_console_core::console::asks::{NewAsk, NewComment};
    let person = Actor::User {
        login: bench_login()?,
    };
    let created = state
        .console
        .issues()
        .create_project(&person, "BENCH", "Bench")
        .await;
    anyhow::ensure!(created.is_ok() || args.existing, "project: {created:?}");
    if !args.existing {
        fill(&state, args.issues, args.connections).await?;
    }
    let session = state.console.sign_in_local(PERSON).await?;
    let cookie = format!("countersign_session={}", session.token.as_str());
    let http = reqwest::Client::new();

    // One request at a time: each latency is the server's time and loopback. As a browser
    // does, each asks for gzip: what is reported is the bytes transferred (the body as sent),
    // beside the page's HTML (one more request without compression, not timed).
    let reads = args.reads;
    let read = |path: String| {
        let (http, url, cookie) = (http.clone(), url.clone(), cookie.clone());
        async move {
            let plain = http
                .get(format!("{url}{path}"))
                .header("cookie", &cookie)
                .send()
                .await?;
            anyhow::ensure!(plain.status() == 200, "{path}: {}", plain.status());
            let html = plain.text().await?;
            let mut lat = Vec::with_capacity(reads);
            let mut sent = 0;
            let started = Instant::now();
            let cpu0 = server_cpu();
            for _ in 0..reads {
                let t = Instant::now();
                let r = http
                    .get(format!("{url}{path}"))
                    .header("cookie", &cookie)
                    .header("accept-encoding", "gzip")
                    .send()
                    .await?;
                anyhow::ensure!(r.status() == 200, "{path}: {}", r.status());
                sent = r.bytes().await?.len();
                lat.push(t.elapsed());
            }
            report(
                &format!(
                    "GET {path} ({} KiB of HTML, {} KiB transferred)",
                    html.len() / 1024,
                    sent / 1024
                ),
                lat,
                started.elapsed(),
                server_cpu() - cpu0,
            );
            Ok::<_, anyhow::Error>(html)
        }
    };
    read("/projects/BENCH/issues".into()).await?;
    read("/projects/BENCH/issues?status=done".into()).await?;

    // The query the list pages make (`Console::issue_rows`: a page of 50 with its children's
    // progress and open asks, the total), called in this process: the server's share of a
    // list page before its markup, for each order, a filter, and the 100th page by cursor.
    {
        use countersign_console_core::work::{
            IssueCursor, IssueListQuery, IssueSort, ProjectKey, Status,
        };
        let project = ProjectKey::parse("BENCH");
        let mut cases: Vec<(String, IssueListQuery)> = Vec::new();
        for sort in IssueSort::ALL {
            cases.push((
                format!("sort={}", sort.as_str()),
                IssueListQuery {
                    project: project.clone(),
                    sort,
                    ..Default::default()
                },
            ));
        }
        cases.push((
            "status=done".into(),
            IssueListQuery {
                project: project.clone(),
                status: vec![Status::Done],
                ..Default::default()
            },
        ));
        // The 100th page: follow 99 cursors first.
        let mut deep = IssueListQuery {
            project: project.clone(),
            ..Default::default()
        };
        for _ in 0..99 {
            let page = state.console.issues().issue_rows(&deep).await?;
            deep.after = page.next.as_deref().and_then(IssueCursor::parse);
        }
        cases.push(("the 100th page".into(), deep));
        for (name, q) in cases {
            let mut lat = Vec::with_capacity(reads);
            let started = Instant::now();
            let mut rows = 0;
            for _ in 0..reads {
                let t = Instant::now();
                let page = state.console.issues().issue_rows(&q).await?;
                lat.push(t.elapsed());
                rows = page.rows.len();
            }
            report(
                &format!("Console::issue_rows ({name}, {rows} rows)"),
                lat,
                started.elapsed(),
                f64::NAN,
            );
        }
    }

    // An issue with `--timeline` entries: comments, and an ask each fourth.
    let (issue, _) = state
        .console
        .issues()
        .create_issue(
            &person,
            NewIssue {
                project: Some("BENCH".into()),
                title: Some("An issue with a long conversation".into()),
                ..Default::default()
            },
        )
        .await?;
    let key = issue.key.to_string();
    let agent = Actor::Agent {
        owner: None,
        service: None,
        session: Some("loadgen-agent".into()),
    };
    let mut rng = Rng(0x3c6e_f372_fe94_f82b);
    for i in 0..args.timeline {
        if i % 4 == 3 {
            state
                .console
                .asks()
                .open_issue_ask(
                    &agent,
                    &key,
                    NewAsk {
                        question: format!("{}?", rng.title()),
                        options: Vec::new(),
                        block: None,
                        actor: None,
                    },
                )
                .await?;
        } else {
            let who = if i % 2 == 0 { &person } else { &agent };
            state
                .console
                .asks()
                .comment_on_issue(
                    who,
                    &key,
                    NewComment {
                        body: format!("{} {} {}", rng.title(), rng.title(), rng.title()),
                        ..Default::default()
                    },
                )
                .await?;
        }
    }
    read(format!("/issues/{key}")).await?;

    // A `--document-kib` document's page.
    let (md, _) = document(args.document_kib);
    let meta = upload(&http, &url, "pages.md", &md).await?;
    let id = meta["id"].as_str().unwrap_or_default().to_owned();
    let page = read(format!("/artifacts/{id}")).await?;
    // The part the page fetches next as the person reads on.
    if let Some(next) = page
        .split("data-doc-part=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
    {
        read(next.replace("&amp;", "&")).await?;
    }
    Ok(())
}
