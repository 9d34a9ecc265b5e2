//! The failover test of issue 50: a pg_auto_failover formation on loopback (a monitor and two
//! nodes, synchronous standby on; [`formation`]) under two broker replicas (the real
//! `countersign-broker serve`, each with its own state directory, both on the formation's
//! multi-host URL) and a console ([`console`]), under load ([`load`]): clients make automatic
//! grants, release them and revoke some, sending 503s again with back-off.
//!
//! Two failovers: `pg_autoctl perform failover`, then the new primary killed with SIGKILL (its
//! keeper and its postmaster). After each: every acknowledged grant still releases (200) on
//! both replicas, every acknowledged revocation holds on both (403 `GRANT_NOT_LIVE`), both
//! replicas serve writes and are ready again, `countersign-broker audit verify` passes on the
//! formation's URL, and the console lists every project it acknowledged; no 500 was answered at
//! any time. It prints how long the brokers answered 503 in each failover.
//!
//! Skipped (saying why) without `pg_autoctl`, unless `COUNTERSIGN_REQUIRE_FAILOVER=1` (CI sets
//! it and installs `postgresql-15-auto-failover`).

#[path = "../common/mod.rs"]
mod common;
mod console;
mod formation;
mod load;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use common::client::{Client, Machine};
use common::process::{BrokerProcess, Deployment};
use console::Console;
use formation::{DATABASE, Formation, Node};
use load::{AUTO, Answer, Kind, Load};

type R = anyhow::Result<()>;

/// Clients of the load, each its own machine login and session.
const CLIENTS: usize = 4;
const PERSON: &str = "ada@example.com";
/// How long a failover may take until both replicas serve writes again.
const SERVE_AGAIN_WITHIN: Duration = Duration::from_secs(60);

fn required() -> bool {
    std::env::var("COUNTERSIGN_REQUIRE_FAILOVER").is_ok_and(|v| v == "1")
}

/// How the primary goes.
#[derive(Debug, Clone, Copy)]
enum How {
    /// `pg_autoctl perform failover`.
    Planned,
    /// The primary node killed with SIGKILL, keeper and postmaster.
    Killed,
}

/// What one failover measured, as instants.
struct Figures {
    how: How,
    started: Instant,
    /// When the new primary took writes (it answered read-write).
    writable: Instant,
    /// When each replica first answered a grant 200 after that.
    served: [Instant; 2],
    /// Each replica's first and last 503 in this failover, and how many.
    unavailable: [Option<(Instant, Instant, usize)>; 2],
    /// Each replica's longest time without a grant answered 200 (up to `served`), and the
    /// longest any call to it waited for its answer.
    no_grant: [Duration; 2],
    slowest: [Duration; 2],
    /// Calls answered in this failover (until both replicas were ready again).
    answered: usize,
    console: Option<(Instant, Instant)>,
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

impl Figures {
    fn print(&self, n: usize) {
        let at = |i: Instant| secs(i.saturating_duration_since(self.started));
        println!(
            "failover {n} ({:?}): the new primary took writes at +{}; {} calls answered until both replicas were ready",
            self.how,
            at(self.writable),
            self.answered
        );
        for (r, name) in ["A", "B"].iter().enumerate() {
            let window = match self.unavailable[r] {
                Some((first, last, count)) => format!(
                    "answered 503 {count} times from +{} to +{} ({} window)",
                    at(first),
                    at(last),
                    secs(last - first)
                ),
                None => "answered no 503".into(),
            };
            println!(
                "  replica {name}: {window}; no grant served for {}, the slowest answer took {}; served a grant again at +{} ({} after the new primary took writes)",
                secs(self.no_grant[r]),
                secs(self.slowest[r]),
                at(self.served[r]),
                secs(self.served[r].saturating_duration_since(self.writable))
            );
        }
        if let Some((first, last)) = self.console {
            println!(
                "  console: answered 503 from +{} to +{} ({} window)",
                at(first),
                at(last),
                secs(last - first)
            );
        }
    }
}

/// A broker replica's files, on the formation's URL.
fn deployment(url: &str) -> anyhow::Result<Deployment> {
    Deployment::builder()
        .database_url(url)
        .secret(AUTO, "ops@example.com", "automatic")
        .log_filter("info,sqlx=warn")
        .create()
}

/// Waits until replica `r` answers `/readyz` 200.
async fn wait_ready(load: &Load, r: usize, within: Duration) -> R {
    let deadline = Instant::now() + within;
    while load.readyz(r).await != 200 {
        ensure!(
            Instant::now() < deadline,
            "replica {r} not ready within {within:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Runs `f` on a blocking thread (the formation's commands wait on processes).
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    tokio::task::spawn_blocking(f).await?
}

/// Polls node `n` every 100 ms until it takes writes (at most 90 s): when it did.
fn writable_from(f: &Formation, n: &Node) -> anyhow::Result<Instant> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if f.writable(n) {
            return Ok(Instant::now());
        }
        ensure!(Instant::now() < deadline, "{} never took writes", n.name);
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Fails the primary over (`how`) and waits until both replicas serve grants and are ready
/// again: what it measured.
async fn failover(
    f: &Arc<Formation>,
    load: &Arc<Load>,
    console: Option<&Console>,
    phase: usize,
    how: How,
) -> anyhow::Result<Figures> {
    let g = f.clone();
    let old = blocking(move || g.primary()).await?;
    let new = f
        .nodes
        .iter()
        .find(|n| n.name != old.name)
        .cloned()
        .context("a second node")?;
    load.log.phase.store(phase, Ordering::SeqCst);
    let started = Instant::now();
    let (g, n) = (f.clone(), new.clone());
    let watcher = tokio::task::spawn_blocking(move || writable_from(&g, &n));
    let g = f.clone();
    match how {
        How::Planned => blocking(move || g.perform_failover()).await?,
        How::Killed => blocking(move || g.kill(&old)).await?,
    }
    let writable = watcher.await??;
    let served = served_again(load, writable).await?;
    for r in 0..2 {
        wait_ready(load, r, SERVE_AGAIN_WITHIN).await?;
    }
    if let Some(c) = console {
        c.wait_ready(SERVE_AGAIN_WITHIN).await?;
    }
    let end = Instant::now();
    let answers: Vec<Answer> = load
        .log
        .answers()
        .into_iter()
        .filter(|a| a.phase == phase && a.at <= end)
        .collect();
    let of = |r: usize| answers.iter().filter(move |a| a.replica == r);
    let unavailable = [0, 1].map(|r| {
        let mut it = of(r).filter(|a| a.status == 503);
        let first = it.next()?.at;
        let (last, count) = it.fold((first, 1), |(_, n), a| (a.at, n + 1));
        Some((first, last, count))
    });
    let no_grant = [0, 1].map(|r| {
        let mut last = started;
        let mut longest = Duration::ZERO;
        for a in of(r).filter(|a| a.kind == Kind::Grant && a.status == 200 && a.at <= served[r]) {
            longest = longest.max(a.at.saturating_duration_since(last));
            last = a.at;
        }
        longest
    });
    let slowest = [0, 1].map(|r| of(r).map(|a| a.at - a.sent).max().unwrap_or_default());
    Ok(Figures {
        how,
        started,
        writable,
        served,
        unavailable,
        no_grant,
        slowest,
        answered: answers.len(),
        console: console.and_then(|c| c.unavailable_between(started, end)),
    })
}

/// Waits until each replica has answered a grant 200 after `writable`: when each first did.
async fn served_again(load: &Load, writable: Instant) -> anyhow::Result<[Instant; 2]> {
    let deadline = writable + SERVE_AGAIN_WITHIN;
    loop {
        let answers = load.log.answers();
        let first = |r: usize| {
            answers
                .iter()
                .find(|a| {
                    a.replica == r && a.kind == Kind::Grant && a.status == 200 && a.at > writable
                })
                .map(|a| a.at)
        };
        if let (Some(a), Some(b)) = (first(0), first(1)) {
            return Ok([a, b]);
        }
        if Instant::now() > deadline {
            bail!(
                "the replicas did not serve grants within {SERVE_AGAIN_WITHIN:?} of the new primary; unexpected: {:?}",
                load.log.unexpected_so_far()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The checks after a failover, the load paused: the ledger on both replicas, `audit verify`
/// on the formation's URL, the console's projects; then the load resumes.
async fn check_after(
    load: &Arc<Load>,
    console: Option<&Console>,
    url: &str,
    seal_key: &std::path::Path,
) -> R {
    load.pause().await;
    let checked = load.check_ledger().await;
    let mut verify = common::process::command(["audit", "verify", "--database-url", url]);
    verify.arg("--seal-key-file").arg(seal_key);
    let out = blocking(move || Ok(verify.output()?)).await?;
    ensure!(
        out.status.success(),
        "audit verify failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let projects = match console {
        Some(c) => c.check_projects().await?,
        None => 0,
    };
    println!(
        "  checked: {checked} acknowledged grants on both replicas, {projects} console projects; audit verify: {}",
        String::from_utf8_lossy(&out.stdout).trim()
    );
    let unexpected = load.log.unexpected_so_far();
    ensure!(unexpected.is_empty(), "unexpected answers: {unexpected:#?}");
    if let Some(c) = console {
        let unexpected = c.unexpected();
        ensure!(
            unexpected.is_empty(),
            "the console's unexpected answers: {unexpected:#?}"
        );
    }
    load.resume();
    Ok(())
}

/// The console on the formation (its own database), in front of replica A; `None` (after
/// saying so) when its binary was not built and the test is not required.
async fn start_console(
    f: &Formation,
    url: &str,
    broker: &Deployment,
) -> anyhow::Result<Option<Console>> {
    let Some(binary) = console::binary() else {
        ensure!(
            !required(),
            "COUNTERSIGN_REQUIRE_FAILOVER=1 but target/…/countersign-console is not built (cargo build -p countersign-dev)"
        );
        println!("the console part is skipped: countersign-console is not built beside the broker");
        return Ok(None);
    };
    let primary = f.primary()?;
    f.psql(&primary, "CREATE DATABASE console")?;
    let console_url = url.replacen(&format!("/{DATABASE}?"), "/console?", 1);
    ensure!(console_url != url, "no /{DATABASE}? in {url}");
    let c = Console::start(&binary, broker.dir.path(), &console_url, &broker.base).await?;
    c.wait_ready(Duration::from_secs(30)).await?;
    Ok(Some(c))
}

/// The load's sessions: a machine login and a session each, alternating replicas.
async fn sessions(replicas: &[Client; 2]) -> anyhow::Result<Vec<common::client::Session>> {
    let mut out = Vec::new();
    for i in 0..CLIENTS {
        let c = &replicas[i % 2];
        let m = Machine::login(c, PERSON, &format!("host-{i}")).await?;
        out.push(m.session(c, &format!("rt-failover-{i}")).await?);
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_failovers_under_load() -> R {
    let autoctl = match formation::autoctl() {
        Ok(p) => p,
        Err(why) => {
            assert!(!required(), "COUNTERSIGN_REQUIRE_FAILOVER=1 but {why}");
            println!("skipped: {why}");
            return Ok(());
        }
    };
    let started = Instant::now();
    let f = Arc::new(blocking(move || Formation::start(autoctl)).await?);
    let primary = f.primary()?;
    let sync = f.psql(&primary, "SHOW synchronous_standby_names")?;
    ensure!(
        !sync.is_empty(),
        "no synchronous standby on {}",
        primary.name
    );
    let url = f.url()?;
    println!(
        "formation up in {} (synchronous_standby_names = {sync}): {url}",
        secs(started.elapsed())
    );
    let deployments = [deployment(&url)?, deployment(&url)?];
    let mut brokers: Vec<BrokerProcess> = Vec::new();
    for d in &deployments {
        brokers.push(d.start().await?);
    }
    let replicas = [deployments[0].client(), deployments[1].client()];
    let load = Arc::new(Load {
        sessions: sessions(&replicas).await?,
        replicas,
        log: Default::default(),
        ledger: Default::default(),
        paused: AtomicBool::new(false),
        busy: AtomicUsize::new(0),
        stop: AtomicBool::new(false),
    });
    for r in 0..2 {
        wait_ready(&load, r, Duration::from_secs(30)).await?;
    }
    let console = start_console(&f, &url, &deployments[0])
        .await?
        .map(Arc::new);
    let result = run(&f, &load, console.clone(), &url, &deployments).await;
    load.stop.store(true, Ordering::SeqCst);
    if let Some(c) = &console {
        c.stop.store(true, Ordering::SeqCst);
    }
    if result.is_err() {
        for (d, name) in deployments.iter().zip(["A", "B"]) {
            let log = d.log_text();
            let tail: Vec<&str> = log.lines().rev().take(40).collect();
            eprintln!(
                "replica {name}'s log, last lines first:\n{}",
                tail.join("\n")
            );
        }
    }
    result?;
    println!("the test took {}", secs(started.elapsed()));
    Ok(())
}

/// The load, the two failovers and their checks, then the totals.
async fn run(
    f: &Arc<Formation>,
    load: &Arc<Load>,
    console: Option<Arc<Console>>,
    url: &str,
    deployments: &[Deployment; 2],
) -> R {
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| tokio::spawn(load.clone().client(i)))
        .collect();
    let console_load = console
        .clone()
        .map(|c| tokio::spawn(async move { c.load().await }));
    let console = console.as_deref();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let seal_key = deployments[0].path("seal.key");
    for (phase, how) in [(1, How::Planned), (2, How::Killed)] {
        let figures = failover(f, load, console, phase, how).await?;
        figures.print(phase);
        if matches!(how, How::Planned) {
            let g = f.clone();
            blocking(move || {
                g.wait_states(
                    &[("node1", "secondary"), ("node2", "primary")],
                    Duration::from_secs(60),
                )
            })
            .await?;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        check_after(load, console, url, &seal_key).await?;
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    load.stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.await?;
    }
    if let Some(c) = console {
        c.stop.store(true, Ordering::SeqCst);
    }
    if let Some(t) = console_load {
        t.await?;
    }
    totals(load, console)
}

/// Prints the totals and fails on any 500, any unexpected answer and any call left unanswered.
fn totals(load: &Load, console: Option<&Console>) -> R {
    let by_status = load.log.by_status();
    let made: usize = by_status.values().sum();
    let held = load.ledger.snapshot();
    let revoked = held.iter().filter(|h| h.revoked).count();
    let transport = load.log.transport_errors();
    println!(
        "brokers: {made} answers by status {by_status:?}, {} calls unanswered; {} grants and {revoked} revocations acknowledged",
        transport.len(),
        held.len()
    );
    if let Some(c) = console {
        println!(
            "console: answers by status {:?}; {} projects acknowledged",
            c.by_status(),
            c.created_count()
        );
        ensure!(
            !c.by_status().contains_key(&500),
            "the console answered 500"
        );
    }
    ensure!(
        !by_status.contains_key(&500),
        "a broker answered 500: {by_status:?}"
    );
    ensure!(
        transport.is_empty(),
        "calls the brokers did not answer: {:?}",
        transport.iter().map(|(_, r, e)| (r, e)).collect::<Vec<_>>()
    );
    let unexpected = load.log.unexpected_so_far();
    ensure!(unexpected.is_empty(), "unexpected answers: {unexpected:#?}");
    ensure!(
        revoked > 0 && held.len() > revoked,
        "too little load: {held:?}"
    );
    Ok(())
}
