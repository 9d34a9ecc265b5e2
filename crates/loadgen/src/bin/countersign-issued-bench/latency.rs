//! `latency`: for each of `--grants` grants in turn, request the issued secret, release it
//! twice (the first release mints the credential: its time is the mint cost; the second answers
//! the stored one, for comparison), open a connection with the credential and keep it, revoke
//! the grant, and measure from the revoke's answer until (a) a new login with the credential
//! fails and (b) the kept connection is closed by the server (`SELECT 1` on it every 10 ms),
//! each bounded by `--timeout`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::Connection;

use crate::client::{Api, grant_of, url_of};
use crate::{Summary, ms};

/// What one grant measured, in milliseconds; `None` when the bound passed first.
struct One {
    mint: f64,
    second: f64,
    refused: Option<f64>,
    closed: Option<f64>,
    /// The SQLSTATE (or "other") the refused login failed with.
    refusal: String,
}

/// Where the roles are: the server (admin URL) and the run's prefix.
pub struct Roles<'a> {
    pub pg: &'a str,
    pub prefix: &'a str,
}

pub async fn run(
    api: &Api,
    grants: usize,
    timeout: Duration,
    roles: Roles<'_>,
) -> anyhow::Result<bool> {
    let mut all = Vec::with_capacity(grants);
    for i in 0..grants {
        let one = grant(api, timeout)
            .await
            .with_context(|| format!("grant {}", i + 1))?;
        all.push(one);
    }
    // The last destroy may still be dropping its role when its refusal is seen.
    let mut pg = sqlx::PgConnection::connect(roles.pg).await?;
    let waited = Instant::now();
    let mut left = crate::roles::list(&mut pg, roles.prefix).await?;
    while !left.is_empty() && waited.elapsed() < timeout {
        tokio::time::sleep(Duration::from_millis(20)).await;
        left = crate::roles::list(&mut pg, roles.prefix).await?;
    }
    let _ = pg.close().await;
    println!(
        "roles left under the prefix: {} (looked until {:.2} s after the last grant's refusal)",
        left.len(),
        waited.elapsed().as_secs_f64()
    );
    let col = |f: &dyn Fn(&One) -> Option<f64>| all.iter().filter_map(f).collect::<Vec<_>>();
    Summary::new("first release (mint)", col(&|o| Some(o.mint))).print();
    Summary::new(
        "second release (stored credential)",
        col(&|o| Some(o.second)),
    )
    .print();
    let refused = Summary::new("revoke answered → new login refused", col(&|o| o.refused));
    let closed = Summary::new(
        "revoke answered → kept connection closed",
        col(&|o| o.closed),
    );
    refused.print();
    closed.print();
    let mut codes: BTreeMap<&str, usize> = BTreeMap::new();
    for o in &all {
        *codes.entry(o.refusal.as_str()).or_default() += 1;
    }
    println!("  the refused logins' SQLSTATEs: {codes:?}");
    let late = all.len() - refused.n().min(closed.n());
    let met = late == 0 && refused.p(0.99) <= 1000.0 && closed.p(0.99) <= 1000.0;
    println!(
        "goal p99 ≤ 1 s on one broker: {} ({late} grant(s) past the {:.0} s bound)",
        if met { "met" } else { "NOT met" },
        timeout.as_secs_f64()
    );
    Ok(late == 0 && left.is_empty())
}

async fn grant(api: &Api, timeout: Duration) -> anyhow::Result<One> {
    let g = grant_of(&api.request(600).await?.ok("request")?)?;
    let t = Instant::now();
    let first = api.values(&g).await?.ok("first release")?;
    let mint = ms(t.elapsed());
    let t = Instant::now();
    let again = api.values(&g).await?.ok("second release")?;
    let second = ms(t.elapsed());
    let url = url_of(&first)?;
    anyhow::ensure!(
        url_of(&again)? == url,
        "the second release answered another credential"
    );
    let mut kept = sqlx::PgConnection::connect(&url)
        .await
        .context("log in with the released credential")?;
    sqlx::query("SELECT 1").execute(&mut kept).await?;
    api.revoke(&g).await?.ok("revoke")?;
    let revoked = Instant::now();
    let ((refused, refusal), closed) = tokio::join!(
        refused_within(&url, revoked, timeout),
        closed_within(&mut kept, revoked, timeout)
    );
    Ok(One {
        mint,
        second,
        refused,
        closed,
        refusal,
    })
}

/// Logs in with `url` until a login fails: the time from `since`, and the failure's SQLSTATE.
async fn refused_within(url: &str, since: Instant, timeout: Duration) -> (Option<f64>, String) {
    while since.elapsed() < timeout {
        match sqlx::PgConnection::connect(url).await {
            Ok(c) => {
                let _ = c.close().await;
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Err(e) => {
                let at = ms(since.elapsed());
                let code = match &e {
                    sqlx::Error::Database(d) => d.code().map(|c| c.to_string()),
                    _ => None,
                };
                return (Some(at), code.unwrap_or_else(|| "other".into()));
            }
        }
    }
    (None, "none".into())
}

/// Runs `SELECT 1` on `kept` every 10 ms until it fails: the time from `since`.
async fn closed_within(
    kept: &mut sqlx::PgConnection,
    since: Instant,
    timeout: Duration,
) -> Option<f64> {
    while since.elapsed() < timeout {
        if sqlx::query("SELECT 1").execute(&mut *kept).await.is_err() {
            return Some(ms(since.elapsed()));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    None
}
