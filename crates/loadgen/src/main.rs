//! `countersign-loadgen`: measures the broker's hot paths.
//!
//! It starts a broker in this process (its own Tokio runtime, `--server-threads` workers,
//! SQLite in a temp dir or the `--database-url` given, a local store), or `--replicas N` of them
//! on one PostgreSQL database (each its own runtime, storage pool and listener; the connections
//! spread over them round-robin), logs a machine in through the real HTTP flow, enrolls a
//! session (or `--sessions` of them, whose automatic requests take turns), then drives
//! `GET /v1/enrollments/self` and `POST /v1/requests` (automatic tier) over loopback HTTP from
//! a second runtime, on hyper's HTTP/1 client connections, kept open. The open-loop phases
//! release a call each time a ticker at the rate fires (Tokio's timer), to whichever kept
//! connection is free, and count its latency from that moment: a call that waits for a
//! connection or a slow server counts its wait, as in wrk2; unlike wrk2, a tick the client's own
//! timer fires late is not counted. Every request carries a fresh proof (its own `jti`, `iat`
//! now); proofs are signed before each measured phase so that the client's signing does not
//! compete with the server for the two cores. It reports, in the same run, the cost of one
//! ES256 verification (aws-lc-rs, the broker's path) and what it allows on the server's cores.
//! With `--wrk` it runs the closed-loop reads once more with wrk (a process of its own, as the
//! issue's figures were made) as the client, on the same presigned proofs.
//! Each measured phase says on standard error when it starts (`measuring: GET
//! /v1/enrollments/self`), for a profiler to attach to that phase alone.

/// The allocator the broker's binaries use (see `docs/decisions.md`).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Parser;
use countersign_broker_core::SystemClock;
use countersign_broker_http::config::{Config, Durations, LimitsConfig, StoreConfig};
use countersign_loadgen::login;
use countersign_proto::claims::{self, AuthorizationDetail, ProofClaims, SecretRequestClaims};
use countersign_proto::{Header, SigningKey, jws};
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use hyper_util::rt::TokioIo;
use serde_json::json;

mod wrk;

#[derive(Parser, Debug)]
#[command(
    name = "countersign-loadgen",
    version,
    about = "Throughput and latency of the broker's proof-verified routes"
)]
struct Args {
    /// Seconds each closed-loop (maximum throughput) phase runs.
    #[arg(long, default_value_t = 10)]
    seconds: u64,
    /// Concurrent connections in the closed-loop phases.
    #[arg(long, default_value_t = 32)]
    connections: usize,
    /// The fixed rate of the open-loop phases, requests per second.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// SQLite's `synchronous` setting for the broker's database: `full` or `normal`.
    #[arg(long, default_value = "full")]
    synchronous: String,
    /// Worker threads of each broker's runtime.
    #[arg(long, default_value_t = 2)]
    server_threads: usize,
    /// The brokers' database (`postgres://…`, or `sqlite://path?mode=rwc`); default a SQLite
    /// file in a temp dir, with `--synchronous`. A PostgreSQL database should be empty or one
    /// this tool used before (it adds `--sessions` sessions each run).
    #[arg(long)]
    database_url: Option<String>,
    /// Broker replicas on the one database, each on its own runtime with its own storage pool,
    /// caches and listener; the load goes to them round-robin by connection. More than one
    /// needs PostgreSQL (SQLite storage is single-process).
    #[arg(long, default_value_t = 1)]
    replicas: usize,
    /// After the closed-loop reads, run them again with wrk (a process of its own, on `PATH`) as
    /// the client, `--connections` connections on two threads: its rate, latency, and the
    /// server's CPU per read. One replica only.
    #[arg(long)]
    wrk: bool,
    /// Sessions the automatic requests come from, in turn (the reads all come from the first).
    /// One session's requests take its enrollment one at a time (on PostgreSQL, its row);
    /// several show what the database allows between sessions.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1000))]
    sessions: u16,
}

const PERSON: &str = "bench@countersign.local";

/// Connections the open-loop phases keep open (more than the calls in flight at the rates we
/// measure, so that a call waits for a connection only when the server stalls).
const OPEN_LOOP_CONNECTIONS: usize = 64;

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let dir = std::env::temp_dir().join(format!("countersign-loadgen-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let result = run(&args, &dir);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run(args: &Args, dir: &std::path::Path) -> anyhow::Result<()> {
    let database_url = args.database_url.clone().unwrap_or_else(|| {
        format!(
            "sqlite://{}?mode=rwc&synchronous={}",
            dir.join("broker.db").display(),
            args.synchronous
        )
    });
    if args.replicas == 0 {
        bail!("--replicas must be at least 1");
    }
    if args.replicas > 1 && args.wrk {
        bail!("--wrk drives one broker: wrk cannot spread its connections over several replicas");
    }
    if args.replicas > 1 && database_url.starts_with("sqlite") {
        bail!("several replicas need PostgreSQL: SQLite storage is single-process");
    }
    // The brokers, each on its own runtime.
    let (server_rts, server_threads) = server_runtimes(args.replicas, args.server_threads)?;
    // The brokers' runtime threads, and SQLite's: sqlx runs each SQLite connection on a
    // thread of its own, outside the runtime, whose work is the server's too.
    let server_cpu = || -> ServerCpu {
        let threads = server_threads
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        ServerCpu {
            runtime: threads.iter().map(|t| thread_cpu_seconds(t)).sum(),
            sqlite: sqlite_worker_cpu_seconds(),
        }
    };
    let mut listen = Vec::new();
    for _ in 0..args.replicas {
        let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        listen.push(listener.local_addr()?);
    }
    // One public URL for all (as behind a load balancer): the first listener's.
    let public_url = format!("http://{}", listen[0]);
    let token = "loadgen-console-token-0123456789";
    let mut config = broker_config(dir, listen[0], &public_url, database_url, token)?;
    let mut running = Vec::new();
    for (rt, addr) in server_rts.iter().zip(&listen) {
        config.listen = *addr;
        running.push(rt.block_on(async {
            let state =
                countersign_broker_http::server::build(&config, Arc::new(SystemClock)).await?;
            countersign_broker_http::serve(state, *addr, None, chrono::Duration::minutes(5)).await
        })?);
    }
    let addrs: Vec<SocketAddr> = running.iter().map(|r| r.addr).collect();
    let base = public_url;
    println!(
        "{} broker replica(s) on {}",
        args.replicas,
        if config.database_url.starts_with("postgres") {
            "PostgreSQL"
        } else {
            "SQLite"
        }
    );

    let verify_us = measure_verify();
    // Every replica's threads share the machine's cores: count the machine's.
    let cores = std::thread::available_parallelism().map_or(args.server_threads, |n| n.get());
    println!(
        "ES256 verification (aws-lc-rs), one core: {verify_us:.1} µs → {:.0} verifications/s on {cores} cores",
        1e6 / verify_us * cores as f64,
    );

    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    client_rt.block_on(measure(
        args,
        &addrs,
        &base,
        token,
        &server_cpu,
        cores,
        verify_us,
    ))?;
    for (rt, r) in server_rts.iter().zip(running) {
        rt.block_on(r.shutdown(Duration::from_secs(5)));
    }
    Ok(())
}

/// Where each broker thread's `/proc` entry is recorded as it starts, to read its CPU time.
type ThreadList = Arc<std::sync::Mutex<Vec<String>>>;

/// One multi-threaded runtime per broker replica, its threads named apart from the client's
/// and recorded in the list answered.
fn server_runtimes(
    replicas: usize,
    threads: usize,
) -> anyhow::Result<(Vec<tokio::runtime::Runtime>, ThreadList)> {
    let server_threads = Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let mut server_rts = Vec::new();
    for _ in 0..replicas {
        let record = server_threads.clone();
        server_rts.push(
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(threads)
                // Named apart from the client's threads, for a profiler (`perf report --comms`).
                .thread_name("broker-server")
                .on_thread_start(move || {
                    // The thread's /proc entry, to read the CPU time the server spends.
                    if let Ok(p) = std::fs::read_link("/proc/thread-self") {
                        // The link reads `<pid>/task/<tid>`, relative to /proc.
                        record
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(format!("/proc/{}", p.display()));
                    }
                })
                .enable_all()
                .build()?,
        );
    }
    Ok((server_rts, server_threads))
}

/// The brokers' configuration, with its seal key, console token and one automatic secret
/// written into `dir`.
fn broker_config(
    dir: &std::path::Path,
    listen: SocketAddr,
    public_url: &str,
    database_url: String,
    token: &str,
) -> anyhow::Result<Config> {
    std::fs::write(
        dir.join("seal.key"),
        countersign_proto::b64::encode(&[7u8; 32]),
    )?;
    std::fs::write(dir.join("console-token"), token)?;
    std::fs::write(
        dir.join("secrets.toml"),
        format!(
            "prefix = \"agents/\"\n[[secret]]\nname = \"agents/bench-auto\"\nowner = \"{PERSON}\"\ntier = \"automatic\"\nvalue = \"v\"\n"
        ),
    )?;
    Ok(Config {
        listen,
        public_url: public_url.to_owned(),
        database_url,
        seal_key_file: dir.join("seal.key"),
        // Its own, beside its database: never the user's state directory.
        audit_state_file: Some(dir.join("audit-state.json")),
        otlp_endpoint: None,
        passkeys: None,
        approval: Vec::new(),
        issued: Vec::new(),
        console_token_file: Some(dir.join("console-token")),
        tls: None,
        store: StoreConfig::Local {
            path: dir.join("secrets.toml"),
        },
        limits: LimitsConfig::default(),
        durations: Durations::default(),
        service_logins: Default::default(),
        token_issuer: None,
        notifications: None,
    })
}

/// The measured phases: the HTTP floor, then proof-verified reads and automatic requests, each
/// in a closed loop and in an open loop at `--rate`.
async fn measure(
    args: &Args,
    addrs: &[SocketAddr],
    base: &str,
    token: &str,
    server_cpu: &dyn Fn() -> ServerCpu,
    cores: usize,
    verify_us: f64,
) -> anyhow::Result<()> {
    // reqwest only for the set-up calls; the measured phases use their own connections.
    let http = reqwest::Client::new();
    let (machine, credential) = login::machine_login(&http, base, token, PERSON, "loadgen").await?;
    let mut sessions = Vec::new();
    for i in 0..args.sessions {
        let runtime = format!("loadgen-{}", i + 1);
        let (key, enrollment_id) =
            login::enroll(&http, base, &machine, &credential, &runtime).await?;
        sessions.push(Session { key, enrollment_id });
    }
    // The reads, the floor and wrk's proofs come from the first session alone.
    let (session, first) = (&sessions[0], &sessions[..1]);
    let target = 0.5 * 1e6 / verify_us * cores as f64;

    let n = ((args.seconds as f64) * 40_000.0) as usize;
    // A closed-loop phase: its rate and latency, and the server's CPU per request.
    let closed = |label: &'static str, calls: Calls, target: Option<f64>| async move {
        eprintln!("measuring: {label}");
        let machine0 = MachineTime::now();
        let cpu0 = server_cpu();
        let r = closed_loop(
            addrs,
            calls,
            args.connections,
            Duration::from_secs(args.seconds),
        )
        .await?;
        let cpu1 = server_cpu();
        let cpu = ServerCpu {
            runtime: cpu1.runtime - cpu0.runtime,
            sqlite: cpu1.sqlite - cpu0.sqlite,
        };
        r.print(&format!("{label}, closed loop"), target);
        print_capacity(cpu, r.done, cores, target.unwrap_or(f64::NAN), verify_us);
        machine0.print_steal();
        anyhow::Ok(())
    };
    // An open-loop phase at `--rate`: latency counted from when the ticker released each call.
    let open = |label: &'static str, calls: Vec<Call>| async move {
        eprintln!("measuring: {label} at a fixed rate");
        let machine0 = MachineTime::now();
        let r = open_loop(
            addrs,
            calls,
            args.rate,
            Duration::from_secs(10),
            OPEN_LOOP_CONNECTIONS,
        )
        .await?;
        r.print(&format!("{label} at {} req/s", args.rate), None);
        machine0.print_steal();
        anyhow::Ok(())
    };
    let floor = floor_calls(session, base)?;
    closed("GET of no route (the HTTP floor: 404)", floor, None).await?;

    let reads = presign(first, base, n, |s, b| s.self_proof(b))?;
    closed("GET /v1/enrollments/self", Calls::Once(reads), Some(target)).await?;
    if args.wrk {
        let capacity = (cores, target, verify_us);
        wrk_reads(args, session, base, addrs[0], server_cpu, capacity).await?;
    }
    let reads = presign(first, base, (args.rate * 10) as usize, |s, b| {
        s.self_proof(b)
    })?;
    open("GET /v1/enrollments/self", reads).await?;

    let n = ((args.seconds as f64) * 10_000.0) as usize;
    let writes = presign(&sessions, base, n, |s, b| s.request_call(b))?;
    closed("POST /v1/requests (automatic)", Calls::Once(writes), None).await?;
    let writes = presign(&sessions, base, (args.rate * 10) as usize, |s, b| {
        s.request_call(b)
    })?;
    open("POST /v1/requests (automatic)", writes).await?;
    anyhow::Ok(())
}

/// The floor under every route: HTTP/1.1 over loopback TCP, the router, the request's span and
/// metrics, a JSON error answer, and nothing else (`GET` of a path no route has: 404 from the
/// fallback, carrying a proof of the same size that nothing reads). Since nothing reads the
/// proofs, a thousand are sent again and again: the phase never runs out, at any rate.
fn floor_calls(session: &Session, base: &str) -> anyhow::Result<Calls> {
    let calls = presign(std::slice::from_ref(session), base, 1000, |s, b| {
        s.self_proof(b)
    })?
    .into_iter()
    .map(|c| Call {
        path: FLOOR_PATH.into(),
        ..c
    })
    .collect();
    Ok(Calls::Repeated(calls))
}

/// The closed-loop reads again with wrk, a process of its own, as the client (`--wrk`): its
/// rate and latency, and the server's CPU per read. `capacity` is the machine's cores, the
/// target rate and one verification's cost, for `print_capacity`.
async fn wrk_reads(
    args: &Args,
    session: &Session,
    base: &str,
    addr: SocketAddr,
    server_cpu: &dyn Fn() -> ServerCpu,
    (cores, target, verify_us): (usize, f64, f64),
) -> anyhow::Result<()> {
    let n = ((args.seconds as f64) * 40_000.0) as usize;
    let proofs: Vec<String> = presign(std::slice::from_ref(session), base, n, |s, b| {
        s.self_proof(b)
    })?
    .into_iter()
    .map(|c| c.proof)
    .collect();
    eprintln!("measuring: GET /v1/enrollments/self with wrk");
    let url = format!("http://{addr}/v1/enrollments/self");
    let machine0 = MachineTime::now();
    let cpu0 = server_cpu();
    let (connections, seconds) = (args.connections, args.seconds);
    let r = tokio::task::spawn_blocking(move || wrk::run(&url, &proofs, 2, connections, seconds))
        .await??;
    let cpu1 = server_cpu();
    println!(
        "GET /v1/enrollments/self, wrk (a process of its own, 2 threads, {connections} connections): {:.0} req/s, p50 {:.2} ms, p99 {:.2} ms ({} requests, {} errors); target ≥ {target:.0} req/s (half the ES256 rate)",
        r.rate, r.p50_ms, r.p99_ms, r.requests, r.errors
    );
    let cpu = ServerCpu {
        runtime: cpu1.runtime - cpu0.runtime,
        sqlite: cpu1.sqlite - cpu0.sqlite,
    };
    print_capacity(cpu, r.requests as usize, cores, target, verify_us);
    machine0.print_steal();
    anyhow::Ok(())
}

/// The machine's CPU time so far, all cores (`/proc/stat`'s `cpu` line, in ticks): its total
/// and what the hypervisor took (steal). A virtual machine whose host is busy loses time
/// its threads were ready to run, which shows up as latency no code of ours spent.
#[derive(Debug, Clone, Copy, Default)]
struct MachineTime {
    total: u64,
    steal: u64,
}

impl MachineTime {
    fn now() -> Self {
        let Ok(stat) = std::fs::read_to_string("/proc/stat") else {
            return Self::default();
        };
        let Some(line) = stat.lines().find(|l| l.starts_with("cpu ")) else {
            return Self::default();
        };
        // user nice system idle iowait irq softirq steal (guest time is within user).
        let f: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .take(8)
            .filter_map(|v| v.parse().ok())
            .collect();
        Self {
            total: f.iter().sum(),
            steal: f.get(7).copied().unwrap_or(0),
        }
    }

    /// The share of the machine's CPU time since `self` the hypervisor took.
    fn print_steal(self) {
        let now = Self::now();
        let total = now.total.saturating_sub(self.total);
        if total > 0 {
            let steal = now.steal.saturating_sub(self.steal) as f64 * 100.0 / total as f64;
            println!("  machine: {steal:.0} % of CPU time stolen by the hypervisor in this phase");
        }
    }
}

/// CPU seconds the server's threads have used: its runtimes' and SQLite's worker threads'.
#[derive(Debug, Clone, Copy)]
struct ServerCpu {
    runtime: f64,
    sqlite: f64,
}

/// CPU seconds of this process's SQLite worker threads (sqlx names them
/// `sqlx-sqlite-worker-N`, which the kernel's 15-byte `comm` cuts short). A worker that has
/// exited is no longer counted: the broker's pool keeps its connections.
fn sqlite_worker_cpu_seconds() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter(|t| {
            std::fs::read_to_string(t.path().join("comm"))
                .is_ok_and(|c| c.starts_with("sqlx-sqlite-wor"))
        })
        .map(|t| thread_cpu_seconds(&t.path().to_string_lossy()))
        .sum()
}

/// CPU seconds (user + system) a thread of this process has used, from `/proc/<pid>/task/<tid>/stat`.
fn thread_cpu_seconds(task: &str) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("{task}/stat")) else {
        return 0.0;
    };
    // Fields after the command name (which is in parentheses and may hold spaces).
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line: 12th and 13th after ')'.
    let ticks = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// The server's own CPU per request in a phase, and the rate its cores would allow were the
/// load generator not sharing them.
fn print_capacity(cpu: ServerCpu, done: usize, cores: usize, target: f64, verify_us: f64) {
    let cpu_seconds = cpu.runtime + cpu.sqlite;
    if done == 0 || cpu_seconds <= 0.0 {
        return;
    }
    let per_request_us = cpu_seconds * 1e6 / done as f64;
    let sqlite_us = cpu.sqlite * 1e6 / done as f64;
    let capacity = 1e6 / per_request_us * cores as f64;
    println!(
        "  server CPU {per_request_us:.0} µs per request ({:.2}× one verification; SQLite's worker threads {sqlite_us:.0} µs of it) → {capacity:.0} req/s on {cores} cores with the client elsewhere{}",
        per_request_us / verify_us,
        if target.is_nan() {
            String::new()
        } else {
            format!(" (target ≥ {target:.0})")
        }
    );
}

/// Median cost of one ES256 verification through the broker's own verifier.
fn measure_verify() -> f64 {
    let Ok(key) = SigningKey::generate() else {
        return f64::NAN;
    };
    let msg = b"eyJhbGciOiJFUzI1NiJ9.eyJhIjoxfQ";
    let Ok(sig) = key.sign(msg) else {
        return f64::NAN;
    };
    let vk = key.verifying_key().clone();
    let mut samples = Vec::new();
    for _ in 0..15 {
        let start = Instant::now();
        for _ in 0..200 {
            let _ = std::hint::black_box(vk.verify(std::hint::black_box(msg), &sig));
        }
        samples.push(start.elapsed().as_secs_f64() * 1e6 / 200.0);
    }
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// One prepared call.
struct Call {
    method: reqwest::Method,
    path: String,
    proof: String,
    body: Option<Bytes>,
}

struct Session {
    key: SigningKey,
    enrollment_id: String,
}

impl Session {
    fn proof(
        &self,
        base: &str,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> anyhow::Result<String> {
        let c = ProofClaims {
            htm: method.into(),
            htu: claims::htu(base, path),
            iat: chrono::Utc::now().timestamp(),
            jti: claims::new_jti()?,
            bh: body.map(claims::body_hash),
        };
        Ok(jws::sign(
            &self.key,
            &Header::with_kid(claims::TYP_SESSION_PROOF, &self.enrollment_id),
            &c,
        )?)
    }

    fn self_proof(&self, base: &str) -> anyhow::Result<Call> {
        Ok(Call {
            method: reqwest::Method::GET,
            path: "/v1/enrollments/self".into(),
            proof: self.proof(base, "GET", "/v1/enrollments/self", None)?,
            body: None,
        })
    }

    fn request_call(&self, base: &str) -> anyhow::Result<Call> {
        let now = chrono::Utc::now().timestamp();
        let req = SecretRequestClaims {
            iat: now,
            exp: now + 300,
            jti: claims::new_jti()?,
            aud: base.into(),
            authorization_details: vec![AuthorizationDetail::agent_secret("BENCH_AUTO")],
            reason: "benchmark".into(),
            lifetime_seconds: Some(60),
        };
        let object = jws::sign(
            &self.key,
            &Header::with_kid(claims::TYP_SECRET_REQUEST, &self.enrollment_id),
            &req,
        )?;
        let body = serde_json::to_vec(&json!({ "request": object }))?;
        Ok(Call {
            method: reqwest::Method::POST,
            path: "/v1/requests".into(),
            proof: self.proof(base, "POST", "/v1/requests", Some(&body))?,
            body: Some(body.into()),
        })
    }
}

/// `n` calls from `sessions` in turn.
fn presign(
    sessions: &[Session],
    base: &str,
    n: usize,
    make: impl Fn(&Session, &str) -> anyhow::Result<Call>,
) -> anyhow::Result<Vec<Call>> {
    sessions
        .iter()
        .cycle()
        .take(n)
        .map(|s| make(s, base))
        .collect()
}

struct Report {
    done: usize,
    errors: usize,
    elapsed: Duration,
    latencies: Vec<Duration>,
}

impl Report {
    fn print(&self, name: &str, target: Option<f64>) {
        let mut l = self.latencies.clone();
        l.sort();
        let pct = |p: f64| {
            l.get(((l.len() as f64 * p) as usize).min(l.len().saturating_sub(1)))
                .copied()
                .unwrap_or_default()
        };
        let rps = self.done as f64 / self.elapsed.as_secs_f64();
        println!(
            "{name}: {rps:.0} req/s, p50 {:.2} ms, p99 {:.2} ms ({} requests, {} errors){}",
            pct(0.50).as_secs_f64() * 1e3,
            pct(0.99).as_secs_f64() * 1e3,
            self.done,
            self.errors,
            target
                .map(|t| format!("; target ≥ {t:.0} req/s (half the ES256 rate)"))
                .unwrap_or_default()
        );
    }
}

/// One HTTP/1 connection of hyper's, as a closed-loop client drives it.
async fn connect(
    addr: SocketAddr,
) -> anyhow::Result<hyper::client::conn::http1::SendRequest<Full<Bytes>>> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// A path no route has: the floor phase's 404.
const FLOOR_PATH: &str = "/v1/no-such-route";

/// Sends one call on a connection; its latency.
async fn send_on(
    sender: &mut hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    host: &str,
    c: &Call,
) -> anyhow::Result<Duration> {
    let start = Instant::now();
    let mut req = hyper::Request::builder()
        .method(c.method.clone())
        .uri(c.path.as_str())
        .header(hyper::header::HOST, host)
        .header("proof", c.proof.as_str());
    if c.body.is_some() {
        req = req.header(hyper::header::CONTENT_TYPE, "application/json");
    }
    let req = req.body(Full::new(c.body.clone().unwrap_or_default()))?;
    sender.ready().await?;
    let resp = sender.send_request(req).await?;
    let status = resp.status();
    resp.into_body().collect().await?;
    let floor = c.path == FLOOR_PATH && status == hyper::StatusCode::NOT_FOUND;
    if !status.is_success() && !floor {
        bail!("{} {} answered {status}", c.method, c.path);
    }
    Ok(start.elapsed())
}

/// A closed-loop phase's calls: each sent once (a proof the server reads is single use), or,
/// for calls whose proof nothing reads, sent again from the first when the last was sent.
enum Calls {
    Once(Vec<Call>),
    Repeated(Vec<Call>),
}

/// Connections go to the replicas round-robin.
async fn closed_loop(
    addrs: &[SocketAddr],
    calls: Calls,
    connections: usize,
    run_for: Duration,
) -> anyhow::Result<Report> {
    let (calls, repeated) = match calls {
        Calls::Once(c) => (c, false),
        Calls::Repeated(c) => (c, true),
    };
    anyhow::ensure!(!calls.is_empty(), "a closed-loop phase without calls");
    let calls = Arc::new(calls);
    let next = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    for i in 0..connections {
        let addr = addrs[i % addrs.len()];
        senders.push((addr, connect(addr).await?));
    }
    let start = Instant::now();
    let mut tasks = Vec::new();
    for (addr, mut sender) in senders {
        let (host, calls, next) = (addr.to_string(), calls.clone(), next.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            while start.elapsed() < run_for {
                let mut i = next.fetch_add(1, Ordering::Relaxed);
                if repeated {
                    i %= calls.len();
                }
                let Some(c) = calls.get(i) else { break };
                match send_on(&mut sender, &host, c).await {
                    Ok(d) => lat.push(d),
                    Err(_) => {
                        errors += 1;
                        // A refused call may have closed the connection: open another.
                        match connect(addr).await {
                            Ok(s) => sender = s,
                            Err(_) => break,
                        }
                    }
                }
            }
            (lat, errors)
        }));
    }
    let mut report = Report {
        done: 0,
        errors: 0,
        elapsed: Duration::ZERO,
        latencies: Vec::new(),
    };
    for t in tasks {
        let (lat, errors) = t.await?;
        report.done += lat.len();
        report.errors += errors;
        report.latencies.extend(lat);
    }
    report.elapsed = start.elapsed();
    if !repeated && next.load(Ordering::Relaxed) >= calls.len() {
        println!(
            "  (ran out of presigned calls after {:.1} s: the figures above are over that time, \
             not --seconds)",
            report.elapsed.as_secs_f64()
        );
    }
    Ok(report)
}

/// A fixed rate of calls over `connections` kept-open connections, as wrk2 does: each call's
/// latency counts from the moment the ticker released it, so a server stall also delays the
/// calls queued behind it (no coordinated omission). A tick the client's timer fires late is
/// not counted (wrk2 would count it). This tool's open-loop figures have always been made so.
async fn open_loop(
    addrs: &[SocketAddr],
    calls: Vec<Call>,
    rate: u64,
    run_for: Duration,
    connections: usize,
) -> anyhow::Result<Report> {
    let calls = Arc::new(calls);
    let (due_tx, due_rx) = tokio::sync::mpsc::channel::<(usize, Instant)>(calls.len().max(1));
    let due_rx = Arc::new(tokio::sync::Mutex::new(due_rx));
    let mut workers = Vec::new();
    for c in 0..connections {
        let addr = addrs[c % addrs.len()];
        let mut sender = connect(addr).await?;
        let (host, calls, due_rx) = (addr.to_string(), calls.clone(), due_rx.clone());
        workers.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0;
            loop {
                let next = due_rx.lock().await.recv().await;
                let Some((i, due)) = next else { break };
                match send_on(&mut sender, &host, &calls[i]).await {
                    Ok(_) => lat.push(due.elapsed()),
                    Err(_) => {
                        errors += 1;
                        match connect(addr).await {
                            Ok(s) => sender = s,
                            Err(_) => break,
                        }
                    }
                }
            }
            (lat, errors)
        }));
    }
    let start = Instant::now();
    let mut tick = tokio::time::interval(Duration::from_nanos(1_000_000_000 / rate.max(1)));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    let mut i = 0;
    while start.elapsed() < run_for && i < calls.len() {
        tick.tick().await;
        due_tx.send((i, Instant::now())).await?;
        i += 1;
    }
    drop(due_tx);
    let mut report = Report {
        done: 0,
        errors: 0,
        elapsed: start.elapsed(),
        latencies: Vec::new(),
    };
    for w in workers {
        let (lat, errors) = w.await?;
        report.done += lat.len();
        report.errors += errors;
        report.latencies.extend(lat);
    }
    report.elapsed = report.elapsed.max(run_for.min(start.elapsed()));
    Ok(report)
}
