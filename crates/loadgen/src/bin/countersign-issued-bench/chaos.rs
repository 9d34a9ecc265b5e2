//! `chaos`: `--workers` loops request, release (the first release mints) and revoke (the end
//! queues a destroy) `--grants` grants of the issued secret while the broker process is killed
//! with SIGKILL `--kills` times and started again each time on the same database and config.
//!
//! Where the kills land: the grants are cut into `--kills` blocks; in each, one grant picked at
//! random carries a kill, at random either 0–40 ms after its first release is sent (while the
//! mint's transactions and the issuer's `CREATE ROLE` run) or 0–200 ms after its revoke is
//! answered (while the destroyer, woken by the end, claims the destroy and drops the role).
//! The other workers' calls in flight are cut wherever they are. A call that gets no answer is
//! sent again (a fresh proof) once the broker answers. A release the broker refuses with
//! `ISSUER_UNAVAILABLE` (a killed minter's claim not lapsed yet) is, for half the grants, tried
//! again for up to [`RELEASE_PATIENCE`]; the other half are revoked at once, so that some grants
//! end while a dead minter's claim still holds their credential. One grant in ten is left live,
//! for the end to revoke.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::sync::mpsc;

use crate::Rng;
use crate::broker::BrokerProc;
use crate::client::{Answer, Api, grant_of};

/// How long a release refused as ISSUER_UNAVAILABLE is tried again before the grant is
/// revoked without its credential (longer than the core's 30 s mint claim).
pub const RELEASE_PATIENCE: Duration = Duration::from_secs(45);
/// How long a call waits for a broker that gives no answer (restarts take a second or two).
const DOWN_PATIENCE: Duration = Duration::from_secs(90);

/// Where a planned kill lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// After the grant's first release is sent.
    Mint,
    /// After the grant's revoke is answered.
    Destroy,
}

/// The kill a grant carries: its phase and delay.
#[derive(Debug, Clone, Copy)]
pub struct Kill {
    pub phase: Phase,
    pub delay: Duration,
}

/// One kill per block of grants, at a random grant, phase and delay.
pub fn plan(grants: usize, kills: usize, rng: &mut Rng) -> BTreeMap<usize, Kill> {
    let mut out = BTreeMap::new();
    for k in 0..kills {
        let (lo, hi) = (k * grants / kills, (k + 1) * grants / kills);
        let at = lo + rng.below((hi - lo).max(1) as u64) as usize;
        let kill = if rng.below(2) == 0 {
            Kill {
                phase: Phase::Mint,
                delay: Duration::from_millis(rng.below(41)),
            }
        } else {
            Kill {
                phase: Phase::Destroy,
                delay: Duration::from_millis(rng.below(201)),
            }
        };
        out.insert(at, kill);
    }
    out
}

/// What happened to one grant, wall-clock times in ms since the epoch.
#[derive(Debug, Default, Clone)]
pub struct GrantRecord {
    pub grant: String,
    pub minted: bool,
    /// When the revoke this loop sent was answered; `None`: left live for the end.
    pub revoked_ms: Option<i64>,
    /// Time spent retrying a release refused as ISSUER_UNAVAILABLE.
    pub claim_wait: Duration,
    pub release_gave_up: bool,
    /// Revoked at its first ISSUER_UNAVAILABLE, while the claim held.
    pub abandoned: bool,
    /// Calls sent again after no answer.
    pub resent: u32,
    pub refusals: Vec<String>,
}

/// What the kill supervisor did.
#[derive(Debug, Default)]
pub struct KillStats {
    pub kills: usize,
    /// From each start to `/readyz` 200.
    pub ready: Vec<Duration>,
}

/// Runs the loop; answers the grants' records and the broker, with every kill done.
pub async fn run(
    api: Arc<Api>,
    mut broker: BrokerProc,
    base: &str,
    grants: usize,
    workers: usize,
    plan: BTreeMap<usize, Kill>,
    seed: u64,
) -> anyhow::Result<(Vec<GrantRecord>, BrokerProc, KillStats)> {
    let (kill_tx, kill_rx) = mpsc::unbounded_channel::<Duration>();
    let http = reqwest::Client::new();
    let base_owned = base.to_owned();
    let supervisor = tokio::spawn(async move {
        let stats = supervise(&mut broker, &http, &base_owned, kill_rx).await;
        (broker, stats)
    });
    let next = Arc::new(AtomicUsize::new(0));
    let plan = Arc::new(plan);
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (api, next, plan, kill_tx) = (api.clone(), next.clone(), plan.clone(), kill_tx.clone());
        let mut rng = Rng::new(seed ^ (w as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
        tasks.push(tokio::spawn(async move {
            let mut records = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= grants {
                    break;
                }
                let kill = plan.get(&i).copied();
                // One in ten is left live for the end, never one that carries a destroy kill.
                let keep = kill.is_none_or(|k| k.phase == Phase::Mint) && rng.below(10) == 0;
                let patient = rng.below(2) == 0;
                let r = one(&api, kill, keep, patient, &kill_tx)
                    .await
                    .with_context(|| format!("grant {}", i + 1))?;
                records.push(r);
            }
            anyhow::Ok(records)
        }));
    }
    drop(kill_tx);
    let mut records = Vec::new();
    for t in tasks {
        records.extend(t.await??);
    }
    let (broker, stats) = supervisor.await?;
    Ok((records, broker, stats?))
}

/// Kills the broker as asked (after each request's delay) and starts it again, waiting for
/// `/readyz`; until every sender is gone.
async fn supervise(
    broker: &mut BrokerProc,
    http: &reqwest::Client,
    base: &str,
    mut asks: mpsc::UnboundedReceiver<Duration>,
) -> anyhow::Result<KillStats> {
    let mut stats = KillStats::default();
    while let Some(delay) = asks.recv().await {
        tokio::time::sleep(delay).await;
        broker.kill()?;
        stats.kills += 1;
        broker.start()?;
        let ready = broker
            .wait_ready(http, base, Duration::from_secs(60))
            .await
            .with_context(|| format!("restart after kill {}", stats.kills))?;
        stats.ready.push(ready);
    }
    Ok(stats)
}

/// One grant: request, release (`patient`: tried again on ISSUER_UNAVAILABLE), revoke (unless
/// `keep`), with the kill it carries.
async fn one(
    api: &Api,
    kill: Option<Kill>,
    keep: bool,
    patient: bool,
    kill_tx: &mpsc::UnboundedSender<Duration>,
) -> anyhow::Result<GrantRecord> {
    let mut r = GrantRecord::default();
    let requested = resend(api, &mut r, || api.request(3600)).await?;
    r.grant = grant_of(&requested.ok("request")?)?;
    if let Some(k) = kill.filter(|k| k.phase == Phase::Mint) {
        kill_tx.send(k.delay).context("the supervisor stopped")?;
    }
    release(api, &mut r, patient).await?;
    if keep && !r.abandoned {
        return Ok(r);
    }
    let g = r.grant.clone();
    match resend(api, &mut r, || api.revoke(&g)).await? {
        Answer::Ok(_) => r.revoked_ms = Some(crate::now_ms()),
        Answer::Refused {
            status,
            code,
            message,
        } => r
            .refusals
            .push(format!("revoke {status} {code}: {message}")),
        Answer::Down => bail!("revoke: no answer"),
    }
    if let Some(k) = kill.filter(|k| k.phase == Phase::Destroy) {
        kill_tx.send(k.delay).context("the supervisor stopped")?;
    }
    Ok(r)
}

/// Releases the grant's values, trying again while the broker gives no answer, and while it
/// answers ISSUER_UNAVAILABLE (for up to [`RELEASE_PATIENCE`]) when `patient`.
async fn release(api: &Api, r: &mut GrantRecord, patient: bool) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut waiting: Option<Instant> = None;
    loop {
        let g = r.grant.clone();
        match resend(api, r, || api.values(&g)).await? {
            Answer::Ok(_) => {
                r.minted = true;
                break;
            }
            Answer::Refused {
                status: 503, code, ..
            } if code == "ISSUER_UNAVAILABLE" => {
                if !patient {
                    r.abandoned = true;
                    break;
                }
                let since = *waiting.get_or_insert_with(Instant::now);
                r.claim_wait = since.elapsed();
                if started.elapsed() > RELEASE_PATIENCE {
                    r.release_gave_up = true;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Answer::Refused {
                status,
                code,
                message,
            } => {
                r.refusals
                    .push(format!("release {status} {code}: {message}"));
                break;
            }
            Answer::Down => bail!("release: no answer"),
        }
    }
    if let Some(since) = waiting {
        r.claim_wait = since.elapsed();
    }
    Ok(())
}

/// Sends `call` until the broker answers (for up to [`DOWN_PATIENCE`]), counting the resends.
async fn resend<F, Fut>(api: &Api, r: &mut GrantRecord, call: F) -> anyhow::Result<Answer>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Answer>>,
{
    let mut sent = 0u32;
    let a = api
        .until_answered(DOWN_PATIENCE, || {
            sent += 1;
            call()
        })
        .await?;
    r.resent += sent.saturating_sub(1);
    Ok(a)
}
