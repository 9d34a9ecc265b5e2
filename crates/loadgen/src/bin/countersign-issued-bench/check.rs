//! The chaos run's end and its two checks, made against PostgreSQL and the broker's own
//! database directly: every grant still live is revoked, one sweep interval and a margin pass,
//! then
//!
//! 1. the roles under the run's prefix that no live grant backs are counted (0 to pass);
//! 2. for every grant whose role the watcher saw, the time from the grant's end (its
//!    `ended_at_ms`, as the broker stored it) to the first sample that found the role gone is
//!    measured, and the grants where it exceeds one sweep interval are counted (0 to pass).
//!
//! When roles remain at the first check, the watch goes on for up to `--settle` seconds before
//! the second, to tell a late destroy (and how late) from one that never comes.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use sqlx::Connection;

use crate::client::{Answer, Api};
use crate::roles::{self, Watcher};
use crate::{Summary, now_ms};

/// Beyond one sweep interval, before the checks: the destroyer's one-second poll and a
/// destroy's own time.
pub const MARGIN: Duration = Duration::from_secs(3);

/// What the end revoked.
pub struct Ended {
    pub live_at_end: usize,
    pub revoked_ms: i64,
}

/// Revokes every grant the console lists live.
pub async fn revoke_live(api: &Api) -> anyhow::Result<Ended> {
    let live = api.live_grants().await?;
    for g in &live {
        match api
            .until_answered(Duration::from_secs(60), || api.revoke(g))
            .await?
        {
            Answer::Ok(_) => {}
            Answer::Refused { status, code, .. } => {
                anyhow::bail!("final revoke of {g}: {status} {code}")
            }
            Answer::Down => anyhow::bail!("final revoke of {g}: no answer"),
        }
    }
    Ok(Ended {
        live_at_end: live.len(),
        revoked_ms: now_ms(),
    })
}

/// The inputs of the checks.
pub struct Checked<'a> {
    pub api: &'a Api,
    pub watcher: &'a Watcher,
    pub pg: &'a str,
    pub prefix: &'a str,
    pub database_url: &'a str,
    pub sweep: Duration,
    pub settle: Duration,
}

/// Runs both checks, prints a line for each; answers whether both passed.
pub async fn checks(c: &Checked<'_>, ended: &Ended) -> anyhow::Result<bool> {
    let mut pg = sqlx::PgConnection::connect(c.pg).await?;
    let now = roles::list(&mut pg, c.prefix).await?;
    let live: BTreeSet<String> = c
        .api
        .live_grants()
        .await?
        .into_iter()
        .map(|g| g.replace('-', ""))
        .collect();
    let unbacked: Vec<&String> = now
        .iter()
        .filter(|r| {
            r.strip_prefix(c.prefix)
                .is_none_or(|hex| !live.contains(hex))
        })
        .collect();
    println!(
        "check 1: {} role(s) under the prefix that no live grant backs, {:.1} s after the last revoke ({} live grant(s)) — {}",
        unbacked.len(),
        (now_ms() - ended.revoked_ms) as f64 / 1e3,
        live.len(),
        if unbacked.is_empty() { "PASS" } else { "FAIL" }
    );
    if !unbacked.is_empty() {
        // Check 2 then counts how long the late ones really lived.
        settle(&mut pg, c, ended).await?;
    }
    let _ = pg.close().await;
    let late = outlived(c).await?;
    Ok(unbacked.is_empty() && late == 0)
}

/// Check 2: grants whose role outlived their end by more than one sweep interval.
async fn outlived(c: &Checked<'_>) -> anyhow::Result<usize> {
    let ends = broker_ends(c.database_url).await?;
    let (seen, samples, failures) = c.watcher.seen();
    let now = now_ms();
    let bound = c.sweep.as_millis() as i64;
    let (mut lives, mut late, mut unended, mut returned) = (Vec::new(), Vec::new(), 0, 0);
    for (role, s) in &seen {
        returned += s.returned;
        let hex = role.strip_prefix(c.prefix).unwrap_or(role);
        let Some(end) = ends.get(hex).copied().flatten() else {
            unended += 1;
            continue;
        };
        let outlived = s.gone_ms.unwrap_or(now) - end;
        lives.push(outlived as f64);
        if outlived > bound {
            late.push((hex.to_owned(), outlived, s.gone_ms.is_none()));
        }
    }
    Summary::new("grant's end → its role found gone", lives).print();
    println!(
        "  roles seen: {} over {samples} samples every {} ms ({failures} failed); seen with no end stored: {unended}; found again after gone: {returned}",
        seen.len(),
        roles::SAMPLE.as_millis()
    );
    print_late(&late);
    println!(
        "check 2: {} grant(s) whose credential outlived its end by more than one sweep interval ({} s) — {}",
        late.len(),
        c.sweep.as_secs(),
        if late.is_empty() { "PASS" } else { "FAIL" }
    );
    Ok(late.len())
}

/// The late grants: how many outlived their end by each 5 s band, and the first few by id.
fn print_late(late: &[(String, i64, bool)]) {
    let mut bands: BTreeMap<i64, usize> = BTreeMap::new();
    for (_, ms, _) in late {
        *bands.entry(ms / 5000 * 5).or_default() += 1;
    }
    for (from, n) in &bands {
        println!("  late by {from}–{} s: {n} grant(s)", from + 5);
    }
    for (g, ms, still) in late.iter().take(5) {
        println!(
            "  late: grant {g}: {:.1} s after its end{}",
            *ms as f64 / 1e3,
            if *still { " and still there" } else { "" }
        );
    }
}

/// Watches the roles left for up to `--settle`: when the last went, or how many stayed.
async fn settle(pg: &mut sqlx::PgConnection, c: &Checked<'_>, ended: &Ended) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let left = roles::list(pg, c.prefix).await?;
        let after = (now_ms() - ended.revoked_ms) as f64 / 1e3;
        if left.is_empty() {
            println!("  the last role left went {after:.1} s after the last revoke");
            return Ok(());
        }
        if started.elapsed() > c.settle {
            println!(
                "  {} role(s) still there {after:.1} s after the last revoke",
                left.len()
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Each grant's end as the broker stored it (ms since the epoch), by its id's 32 hex digits.
async fn broker_ends(database_url: &str) -> anyhow::Result<BTreeMap<String, Option<i64>>> {
    sqlx::any::install_default_drivers();
    let mut db = sqlx::AnyConnection::connect(database_url).await?;
    let rows: Vec<(String, Option<i64>)> = sqlx::query_as("SELECT id, ended_at_ms FROM grants")
        .fetch_all(&mut db)
        .await?;
    let _ = db.close().await;
    Ok(rows
        .into_iter()
        .map(|(id, end)| (id.replace('-', ""), end))
        .collect())
}

/// The broker's issued credentials by state, and the destroys still queued.
pub async fn broker_state(database_url: &str) -> anyhow::Result<String> {
    sqlx::any::install_default_drivers();
    let mut db = sqlx::AnyConnection::connect(database_url).await?;
    let states: Vec<(String, i64)> =
        sqlx::query_as("SELECT state, COUNT(*) FROM issued GROUP BY state ORDER BY state")
            .fetch_all(&mut db)
            .await?;
    let (queued,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM outbox WHERE topic = 'destroy'")
        .fetch_one(&mut db)
        .await?;
    let _ = db.close().await;
    Ok(format!(
        "issued credentials by state {states:?}; destroys still queued {queued}"
    ))
}
