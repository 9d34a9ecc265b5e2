//! `countersign-issued-bench`: measures dynamic secrets (issue 49) on the real broker binary,
//! run as a process of its own from a configuration this tool writes (SQLite in a temp dir, or
//! a scratch database on `--database-url`'s PostgreSQL server; an `[[issued]]` secret on the
//! PostgreSQL issuer of `--postgres-url`, automatic tier, its roles under a prefix of this run's
//! own), driven over HTTP as a session would: a machine logs in (approved with the console
//! token), enrolls a session, and requests, releases and revokes grants of the issued secret.
//!
//! - `latency`: the mint cost (the first release) and, after each revoke, how long until the
//!   credential is refused by PostgreSQL: a new login fails, and a connection kept open is
//!   closed by the server; or, with `--issuer aws-iam`, by moto's IAM: a call signed with the
//!   key fails ([`latency`], [`aws`]).
//! - `chaos`: grants made and ended while the broker is killed with SIGKILL and started again;
//!   then every grant revoked, and two checks against PostgreSQL and the broker's database
//!   ([`chaos`], [`check`]). Exits non-zero when a check fails.
//!
//! Every role the run made is dropped at the end, and a scratch database with it.
//!
//! ```text
//! cargo build --release -p countersign-broker-http -p countersign-loadgen \
//!     --bin countersign-broker --bin countersign-issued-bench
//! target/release/countersign-issued-bench latency --grants 200 [--issuer aws-iam]
//! target/release/countersign-issued-bench chaos --grants 200 --kills 20 \
//!     [--database-url postgres://postgres:postgres@127.0.0.1:5432/postgres]
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args as ClapArgs, Parser, Subcommand, ValueEnum};

mod aws;
mod broker;
mod chaos;
mod check;
mod client;
mod latency;
mod roles;

use broker::{BrokerProc, IssuerSpec, Storage};
use client::Api;

#[derive(Parser, Debug)]
#[command(
    name = "countersign-issued-bench",
    version,
    about = "Dynamic secrets on the real broker: mint cost, time to refusal after a revoke, and SIGKILL chaos"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Subcommand, Debug)]
enum Mode {
    /// Mint cost and the time from a revoke to the credential refused.
    Latency {
        #[command(flatten)]
        common: Common,
        /// The bound on each wait for a refusal, in seconds.
        #[arg(long, default_value_t = 10)]
        timeout: u64,
        /// The issuer: PostgreSQL (`--postgres-url`), or AWS IAM on moto (`moto_server` on
        /// `PATH`).
        #[arg(long, value_enum, default_value_t = IssuerKind::Postgres)]
        issuer: IssuerKind,
    },
    /// Grants made and ended while the broker is killed; then the leftovers checked.
    Chaos {
        #[command(flatten)]
        common: Common,
        /// SIGKILLs of the broker during the run (at most --grants).
        #[arg(long, default_value_t = 20)]
        kills: usize,
        /// Grants in flight at once.
        #[arg(long, default_value_t = 4)]
        workers: usize,
        /// The random seed of the kills' placement (default: from the clock; printed).
        #[arg(long)]
        seed: Option<u64>,
        /// How long to keep watching roles left after a failed check, in seconds.
        #[arg(long, default_value_t = 90)]
        settle: u64,
    },
}

#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum IssuerKind {
    Postgres,
    AwsIam,
}

#[derive(ClapArgs, Debug)]
struct Common {
    /// Grants to make.
    #[arg(long, default_value_t = 200)]
    grants: usize,
    /// The broker binary; default `countersign-broker` beside this tool.
    #[arg(long)]
    broker_bin: Option<PathBuf>,
    /// The PostgreSQL the issuer makes roles on (its admin URL, a role with CREATEROLE), and
    /// where this tool checks them.
    #[arg(
        long,
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    postgres_url: String,
    /// PostgreSQL storage: the broker's database is a scratch one this tool creates on this
    /// server and drops after. Default: SQLite in a temp dir.
    #[arg(long)]
    database_url: Option<String>,
    /// `durations.issued_sweep`: the reconciler's period, in seconds.
    #[arg(long, default_value_t = 5)]
    issued_sweep: u64,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let passed = rt.block_on(run(cli.mode))?;
    if !passed {
        std::process::exit(1);
    }
    Ok(())
}

async fn run(mode: Mode) -> anyhow::Result<bool> {
    let common = match &mode {
        Mode::Latency { common, .. } | Mode::Chaos { common, .. } => common,
    };
    let bin = broker::binary(common.broker_bin.clone())?;
    let dir = tempfile::Builder::new()
        .prefix("countersign-issued-bench-")
        .tempdir()?;
    let storage = Storage::create(dir.path(), common.database_url.as_deref()).await?;
    // moto for the AWS IAM issuer, kept running until the end.
    let (aws, spec) = match &mode {
        Mode::Latency {
            issuer: IssuerKind::AwsIam,
            ..
        } => {
            let (side, admin_json) = aws::AwsSide::start().await?;
            let endpoint = side.endpoint.clone();
            (
                Some(side),
                IssuerSpec::AwsIam {
                    endpoint,
                    admin_json,
                },
            )
        }
        _ => (
            None,
            IssuerSpec::Postgres {
                admin_url: common.postgres_url.clone(),
            },
        ),
    };
    let (config, settings) =
        broker::write_config(dir.path(), &storage, &spec, common.issued_sweep)?;
    let proc = BrokerProc::new(bin.clone(), config, dir.path().to_path_buf());
    println!("started {} UTC; load: {}", utc_now(), uptime());
    println!(
        "broker: {} (a process of its own); storage: {}; issuer: {} (credentials {}*); issued_sweep {} s; {} grants",
        bin.display(),
        storage.label(),
        match &aws {
            Some(side) => format!("AWS IAM on moto {}", side.endpoint),
            None => format!("PostgreSQL {}", host_of(&common.postgres_url)),
        },
        settings.prefix,
        settings.sweep,
        common.grants
    );
    let result = measure(&mode, proc, &settings, &storage, aws.as_ref()).await;
    println!("ended {} UTC; load: {}", utc_now(), uptime());
    if aws.is_none() {
        match roles::drop_all(&common.postgres_url, &settings.prefix).await {
            Ok(0) => {}
            Ok(n) => println!(
                "cleanup: dropped {n} role(s) left under {}",
                settings.prefix
            ),
            Err(e) => println!(
                "cleanup: could not drop roles under {}: {e}",
                settings.prefix
            ),
        }
    }
    if let Err(e) = storage.drop_database().await {
        println!("cleanup: could not drop the scratch database: {e}");
    }
    if !matches!(result, Ok(true)) {
        // The broker's logs stay for a look.
        let kept = dir.keep();
        println!("the broker's logs: {}/broker-*.log", kept.display());
    }
    result
}

/// Starts the broker, logs in, and runs the mode.
async fn measure(
    mode: &Mode,
    mut proc: BrokerProc,
    settings: &broker::Settings,
    storage: &Storage,
    aws: Option<&aws::AwsSide>,
) -> anyhow::Result<bool> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()?;
    proc.start()?;
    let ready = proc
        .wait_ready(&http, &settings.base, Duration::from_secs(60))
        .await?;
    println!("broker ready in {:.2} s", ready.as_secs_f64());
    let api = Api::setup(http.clone(), settings).await?;
    match mode {
        Mode::Latency {
            timeout, common, ..
        } => {
            let target = match aws {
                Some(side) => latency::Target::AwsIam { side },
                None => latency::Target::Postgres {
                    admin_url: &common.postgres_url,
                },
            };
            let timeout = Duration::from_secs(*timeout);
            let passed =
                latency::run(&api, common.grants, timeout, &target, &settings.prefix).await;
            drop(proc);
            passed
        }
        Mode::Chaos {
            common,
            kills,
            workers,
            seed,
            settle,
        } => {
            let c = ChaosRun {
                grants: common.grants,
                kills: *kills,
                workers: *workers,
                seed: seed.unwrap_or_else(crate::seed),
                settle: Duration::from_secs(*settle),
                pg: &common.postgres_url,
                database_url: storage.url(),
            };
            c.run(Arc::new(api), proc, settings).await
        }
    }
}

/// One chaos run's settings.
struct ChaosRun<'a> {
    grants: usize,
    kills: usize,
    workers: usize,
    seed: u64,
    settle: Duration,
    pg: &'a str,
    database_url: &'a str,
}

impl ChaosRun<'_> {
    async fn run(
        &self,
        api: Arc<Api>,
        proc: BrokerProc,
        settings: &broker::Settings,
    ) -> anyhow::Result<bool> {
        anyhow::ensure!(
            self.kills <= self.grants && self.workers > 0,
            "--kills must be at most --grants, and --workers at least 1"
        );
        let plan = chaos::plan(self.grants, self.kills, &mut Rng::new(self.seed));
        let mints = plan
            .values()
            .filter(|k| k.phase == chaos::Phase::Mint)
            .count();
        println!(
            "chaos: {} workers, {} kills (seed {}: {mints} during mints, {} during destroys)",
            self.workers,
            self.kills,
            self.seed,
            self.kills - mints
        );
        let watcher = roles::Watcher::start(self.pg, &settings.prefix).await?;
        let (records, mut proc, stats) = chaos::run(
            api.clone(),
            proc,
            &settings.base,
            self.grants,
            self.workers,
            plan,
            self.seed,
        )
        .await?;
        report_loop(&records, &stats);
        println!(
            "  calls answered 503 (cannot decide yet) just after a restart and signed again: {}; refused as replayed: {}",
            api.undecided.load(std::sync::atomic::Ordering::Relaxed),
            api.replays.load(std::sync::atomic::Ordering::Relaxed)
        );
        let ended = check::revoke_live(&api).await?;
        let sweep = Duration::from_secs(settings.sweep);
        println!(
            "end: revoked the {} grant(s) still live; waiting one sweep ({} s) and {} s",
            ended.live_at_end,
            settings.sweep,
            check::MARGIN.as_secs()
        );
        tokio::time::sleep(sweep + check::MARGIN).await;
        let checked = check::Checked {
            api: &api,
            watcher: &watcher,
            pg: self.pg,
            prefix: &settings.prefix,
            database_url: self.database_url,
            sweep,
            settle: self.settle,
        };
        let passed = check::checks(&checked, &ended).await?;
        match check::broker_state(self.database_url).await {
            Ok(s) => println!("broker's database: {s}"),
            Err(e) => println!("broker's database: not read: {e}"),
        }
        proc.kill()?;
        println!("chaos: {}", if passed { "PASS" } else { "FAIL" });
        Ok(passed)
    }
}

/// What the loop did: grants, kills, restarts, and the calls the kills cost.
fn report_loop(records: &[chaos::GrantRecord], stats: &chaos::KillStats) {
    let minted = records.iter().filter(|r| r.minted).count();
    let revoked = records.iter().filter(|r| r.revoked_ms.is_some()).count();
    let resent: u32 = records.iter().map(|r| r.resent).sum();
    let waited: Vec<f64> = records
        .iter()
        .filter(|r| !r.claim_wait.is_zero())
        .map(|r| ms(r.claim_wait))
        .collect();
    let gave_up = records.iter().filter(|r| r.release_gave_up).count();
    let abandoned = records.iter().filter(|r| r.abandoned).count();
    let refusals: Vec<&String> = records.iter().flat_map(|r| &r.refusals).collect();
    println!(
        "loop: {} grants, {minted} minted, {revoked} revoked in the loop; {} kills; {resent} calls sent again (no answer, or refused as replayed)",
        records.len(),
        stats.kills
    );
    Summary::new(
        "restart → /readyz 200",
        stats.ready.iter().map(|d| ms(*d)).collect(),
    )
    .print();
    if !waited.is_empty() {
        Summary::new(
            "release refused ISSUER_UNAVAILABLE (a killed mint's claim) until it answered",
            waited,
        )
        .print();
    }
    println!(
        "  grants revoked at their first ISSUER_UNAVAILABLE (ended while a killed mint's claim held): {abandoned}; releases given up after {} s: {gave_up}; other refusals: {refusals:?}",
        chaos::RELEASE_PATIENCE.as_secs()
    );
}

/// p50, p99 and max of a sample, in milliseconds.
#[derive(Debug)]
pub struct Summary {
    label: String,
    sorted: Vec<f64>,
}

impl Summary {
    pub fn new(label: &str, mut v: Vec<f64>) -> Self {
        v.sort_by(f64::total_cmp);
        Self {
            label: label.into(),
            sorted: v,
        }
    }

    pub fn n(&self) -> usize {
        self.sorted.len()
    }

    /// The nearest-rank percentile; NaN for an empty sample.
    pub fn p(&self, p: f64) -> f64 {
        let n = self.sorted.len();
        if n == 0 {
            return f64::NAN;
        }
        let rank = ((p * n as f64).ceil() as usize).clamp(1, n);
        self.sorted[rank - 1]
    }

    pub fn print(&self) {
        println!(
            "{}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (n = {})",
            self.label,
            self.p(0.50),
            self.p(0.99),
            self.p(1.0),
            self.n()
        );
    }
}

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

fn utc_now() -> String {
    chrono::Utc::now().format("%Y-%m-%d %H:%M:%S").to_string()
}

/// `/proc/loadavg`'s three load averages.
fn uptime() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The host and port of a URL (never its password).
fn host_of(url: &str) -> String {
    reqwest::Url::parse(url)
        .ok()
        .map(|u| {
            format!(
                "{}:{}{}",
                u.host_str().unwrap_or("?"),
                u.port().unwrap_or(5432),
                u.path()
            )
        })
        .unwrap_or_else(|| "?".into())
}

/// A seed from the clock and the process id.
pub fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ (u64::from(std::process::id()) << 32)
}

/// `n` random lowercase hex digits (names of this run's roles and scratch database).
pub fn random_hex(n: usize) -> String {
    let mut r = Rng::new(seed());
    (0..n)
        .map(|_| char::from_digit(r.below(16) as u32, 16).unwrap_or('0'))
        .collect()
}

/// splitmix64: the kills' placement, reproducible from a printed seed.
#[derive(Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n ≥ 1).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}
