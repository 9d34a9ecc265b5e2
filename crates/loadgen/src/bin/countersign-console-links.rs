//! `countersign-console-links`: the console's session links under load (issue 14's
//! benchmarks), with real links (the workspace's link client).
//!
//! - `broadcast`: a console in this process (its own 2-thread runtime; SQLite file or
//!   `--database-url`), `--sessions` live links acknowledging each delivery, and `--rounds`
//!   broadcasts to all of them through `POST /api/v1/broadcasts`: for each, the POST's
//!   latency, when the last delivery reached its link, and when every attempt was `sent`.
//! - `idle`: the `countersign-console` binary as a child process (`--console-bin`), then
//!   `--sessions` idle links opened to it; the child's resident memory (VmRSS, VmHWM) before
//!   and after, and the sessions it lists.
//!
//! Figures and the commands that made them: `docs/benchmarks.md`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use countersign_link_client::{Advert, Event, Link, Mode, Options};
use serde_json::{Value, json};

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const TOKEN: &str = "loadgen-shared-token-0123456789";

#[derive(Debug, Parser)]
#[command(version, about = "The console's session links under load")]
struct Args {
    #[command(subcommand)]
    mode: Bench,
}

#[derive(Debug, Subcommand)]
enum Bench {
    /// Broadcasts to many live sessions: time until every attempt is `sent`.
    Broadcast {
        #[arg(long, default_value_t = 500)]
        sessions: usize,
        #[arg(long, default_value_t = 5)]
        rounds: usize,
        /// The console's database (default: a SQLite file in a temp dir).
        #[arg(long)]
        database_url: Option<String>,
    },
    /// Idle links held by one console process: its resident memory.
    Idle {
        #[arg(long, default_value_t = 5_000)]
        sessions: usize,
        /// The console binary (default: `countersign-console` beside this one).
        #[arg(long)]
        console_bin: Option<std::path::PathBuf>,
        /// Links opened at once.
        #[arg(long, default_value_t = 100)]
        concurrency: usize,
    },
}

fn main() -> anyhow::Result<()> {
    match Args::parse().mode {
        Bench::Broadcast {
            sessions,
            rounds,
            database_url,
        } => broadcast(sessions, rounds, database_url),
        Bench::Idle {
            sessions,
            console_bin,
            concurrency,
        } => idle(sessions, console_bin, concurrency),
    }
}

/// Opens `n` links named `{prefix}{i}`, `concurrency` at a time; answers them in order.
async fn open_links(
    url: &str,
    prefix: &str,
    n: usize,
    concurrency: usize,
    modes: &[Mode],
) -> anyhow::Result<Vec<Link>> {
    let mut links = Vec::with_capacity(n);
    let mut i = 0;
    while i < n {
        let batch: Vec<_> = (i..(i + concurrency).min(n))
            .map(|k| {
                let o = Options::new(
                    url,
                    TOKEN,
                    &format!("{prefix}{k}"),
                    Advert::new(&format!("bench session {k}")).modes(modes),
                );
                tokio::spawn(Link::connect(o))
            })
            .collect();
        for b in batch {
            links.push(b.await??);
        }
        i += concurrency;
    }
    Ok(links)
}

// Long: a benchmark phase reads best as its script, top to bottom: set up, measure, print.
fn broadcast(sessions: usize, rounds: usize, database_url: Option<String>) -> anyhow::Result<()> {
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let dir = tempfile::tempdir()?;
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, TOKEN)?;
    let listener = server_rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let url = format!("http://{}", listener.local_addr()?);
    let mut config = countersign_console_http::Config::new(&url);
    config.database_url = database_url.clone().unwrap_or_else(|| {
        format!(
            "sqlite://{}?mode=rwc",
            dir.path().join("console.db").display()
        )
    });
    config.shared_token_file = Some(token_file);
    config.local_sign_in = true;
    let state = server_rt.block_on(countersign_console_http::build(
        &config,
        Arc::new(countersign_console_core::SystemClock),
    ))?;
    let _running = server_rt.block_on(countersign_console_http::serve(state.clone(), listener))?;
    // A person's browser session, made through the core (the sign-in pages are not measured).
    let signed = server_rt.block_on(state.console.sign_in_local("bench@example.com"))?;
    println!(
        "console on {}; {sessions} sessions, {rounds} rounds",
        if database_url.is_some() {
            "PostgreSQL"
        } else {
            "SQLite"
        }
    );
    client_rt.block_on(async move {
        let started = Instant::now();
        let links = open_links(&url, "b", sessions, 100, &[Mode::Send]).await?;
        println!(
            "{sessions} links open in {:.2} s",
            started.elapsed().as_secs_f64()
        );
        // Each link counts its deliveries (acknowledged by the client as they arrive).
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
        for mut l in links {
            let tx = tx.clone();
            tokio::spawn(async move {
                while let Some(e) = l.next().await {
                    if matches!(e, Event::Delivery(_)) {
                        let _ = tx.send(Instant::now());
                    }
                }
            });
        }
        let http = reqwest::Client::new();
        let names: Vec<String> = (0..sessions).map(|k| format!("b{k}")).collect();
        let mut totals = Vec::new();
        for round in 0..rounds {
            let t0 = Instant::now();
            let r = http
                .post(format!("{url}/api/v1/broadcasts"))
                .header("cookie", format!("countersign_session={}", signed.token.as_str()))
                .header("origin", &url)
                .header("x-csrf-token", &signed.human.csrf_token)
                .json(&json!({
                    "idempotency_key": format!("bench-{round}"),
                    "sessions": names,
                    "mode": "send",
                    "body": format!("round {round}: release at noon"),
                }))
                .send()
                .await?;
            anyhow::ensure!(r.status() == 201, "broadcast: {}", r.status());
            let posted = t0.elapsed();
            let v: Value = r.json().await?;
            let id = v["broadcast"]["id"].as_str().unwrap_or_default();
            let id = countersign_console_core::ids::BroadcastId::named(id)?;
            let mut last = t0;
            for _ in 0..sessions {
                last = tokio::time::timeout(Duration::from_secs(30), rx.recv())
                    .await?
                    .ok_or_else(|| anyhow::anyhow!("links ended"))?;
            }
            let received = last - t0;
            // Every attempt `sent`, read through the core every 5 ms.
            let done = loop {
                let b = state.console.messages().broadcast_by_id(id).await?;
                let sent = b
                    .recipients
                    .iter()
                    .filter(|r| {
                        r.message.deliveries.first().map(|a| a.state)
                            == Some(countersign_console_core::work::messages::AttemptState::Sent)
                    })
                    .count();
                if sent == sessions {
                    break t0.elapsed();
                }
                anyhow::ensure!(t0.elapsed() < Duration::from_secs(30), "only {sent} sent");
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            println!(
                "round {round}: POST answered in {:.0} ms; last delivery at {:.0} ms; all {sessions} attempts sent at {:.0} ms",
                posted.as_secs_f64() * 1e3,
                received.as_secs_f64() * 1e3,
                done.as_secs_f64() * 1e3
            );
            totals.push(done);
        }
        totals.sort();
        println!(
            "all attempts sent: median {:.0} ms, max {:.0} ms",
            totals[totals.len() / 2].as_secs_f64() * 1e3,
            totals.last().copied().unwrap_or_default().as_secs_f64() * 1e3
        );
        Ok(())
    })
}

/// `VmRSS` and `VmHWM` of a process, in KiB.
fn memory(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok((field("VmRSS:"), field("VmHWM:")))
}

fn idle(
    sessions: usize,
    console_bin: Option<std::path::PathBuf>,
    concurrency: usize,
) -> anyhow::Result<()> {
    let bin = match console_bin {
        Some(b) => b,
        None => std::env::current_exe()?
            .parent()
            .map(|p| p.join("countersign-console"))
            .ok_or_else(|| anyhow::anyhow!("no directory"))?,
    };
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("token"), TOKEN)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let config = dir.path().join("console.toml");
    std::fs::write(
        &config,
        format!(
            "listen = \"127.0.0.1:{port}\"\npublic_url = \"http://127.0.0.1:{port}\"\n\
             database_url = \"sqlite://{}?mode=rwc\"\nshared_token_file = \"{}\"\n",
            dir.path().join("console.db").display(),
            dir.path().join("token").display()
        ),
    )?;
    let mut child = std::process::Command::new(&bin)
        .args(["serve", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()?;
    let pid = child.id();
    let url = format!("http://127.0.0.1:{port}");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let result = rt.block_on(async {
        let http = reqwest::Client::new();
        let until = Instant::now() + Duration::from_secs(20);
        while http.get(format!("{url}/healthz")).send().await.is_err() {
            anyhow::ensure!(Instant::now() < until, "the console did not start");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let (rss0, _) = memory(pid)?;
        println!("console pid {pid}: {} MiB resident before any link", rss0 / 1024);
        let started = Instant::now();
        let links = open_links(&url, "idle-", sessions, concurrency, &[Mode::Send]).await?;
        println!(
            "{} links open in {:.1} s",
            links.len(),
            started.elapsed().as_secs_f64()
        );
        let listed: Value = http
            .get(format!("{url}/api/v1/sessions"))
            .bearer_auth(TOKEN)
            .send()
            .await?
            .json()
            .await?;
        let n = listed.as_array().map(Vec::len).unwrap_or(0);
        // Idle: let a ping round and a heartbeat pass.
        tokio::time::sleep(Duration::from_secs(25)).await;
        let (rss, hwm) = memory(pid)?;
        println!(
            "{n} sessions listed; resident {:.1} MiB (peak {:.1} MiB), {:.1} KiB per link above the baseline",
            rss as f64 / 1024.0,
            hwm as f64 / 1024.0,
            (rss.saturating_sub(rss0)) as f64 / sessions.max(1) as f64
        );
        drop(links);
        Ok(())
    });
    let _ = child.kill();
    let _ = child.wait();
    result
}
