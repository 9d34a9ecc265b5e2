//! `latency`: for each of `--grants` grants in turn, request the issued secret, release it
//! twice (the first release mints the credential: its time is the mint cost; the second answers
//! the stored one, for comparison), check the credential works, revoke the grant, and measure
//! from the revoke's answer until the issuer refuses the credential, bounded by `--timeout`:
//!
//! - PostgreSQL: (a) a new login with it fails, and (b) a connection opened with it before the
//!   revoke and kept is closed by the server (`SELECT 1` on it every 10 ms);
//! - AWS IAM (moto): a call signed with the key fails ([`crate::aws`]).
//!
//! At the end it waits (up to `--timeout`) for the last destroy to finish and counts the
//! credentials left under the run's prefix (none to pass).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::Context;
use sqlx::Connection;

use crate::aws::{self, AwsSide};
use crate::client::{Api, grant_of, url_of};
use crate::{Summary, ms};

/// The issuer the grants' credentials come from, and where to look at what it holds.
pub enum Target<'a> {
    Postgres { admin_url: &'a str },
    AwsIam { side: &'a AwsSide },
}

/// What one grant measured, in milliseconds; `None` when the bound passed first.
struct One {
    mint: f64,
    second: f64,
    refused: Option<f64>,
    /// PostgreSQL only: the kept connection closed.
    closed: Option<f64>,
    /// The SQLSTATE or IAM error code the refused call failed with.
    refusal: String,
}

pub async fn run(
    api: &Api,
    grants: usize,
    timeout: Duration,
    target: &Target<'_>,
    prefix: &str,
) -> anyhow::Result<bool> {
    let mut all = Vec::with_capacity(grants);
    for i in 0..grants {
        let one = match target {
            Target::Postgres { .. } => postgres_grant(api, timeout).await,
            Target::AwsIam { side } => aws_grant(api, timeout, &side.endpoint).await,
        };
        all.push(one.with_context(|| format!("grant {}", i + 1))?);
    }
    let left = left_after(target, prefix, timeout).await?;
    let col = |f: &dyn Fn(&One) -> Option<f64>| all.iter().filter_map(f).collect::<Vec<_>>();
    Summary::new("first release (mint)", col(&|o| Some(o.mint))).print();
    Summary::new(
        "second release (stored credential)",
        col(&|o| Some(o.second)),
    )
    .print();
    let (what, codes_are) = match target {
        Target::Postgres { .. } => ("new login refused", "SQLSTATEs"),
        Target::AwsIam { .. } => ("a call with the key refused", "IAM error codes"),
    };
    let refused = Summary::new(&format!("revoke answered → {what}"), col(&|o| o.refused));
    refused.print();
    let mut worst = refused.p(0.99);
    let mut measured = refused.n();
    if let Target::Postgres { .. } = target {
        let closed = Summary::new(
            "revoke answered → kept connection closed",
            col(&|o| o.closed),
        );
        closed.print();
        worst = worst.max(closed.p(0.99));
        measured = measured.min(closed.n());
    }
    let mut codes: BTreeMap<&str, usize> = BTreeMap::new();
    for o in &all {
        *codes.entry(o.refusal.as_str()).or_default() += 1;
    }
    println!("  the refusals' {codes_are}: {codes:?}");
    println!("credentials left under the prefix once the last destroy ended: {left}");
    let late = all.len() - measured;
    let met = late == 0 && worst <= 1000.0;
    println!(
        "goal p99 ≤ 1 s on one broker: {} ({late} grant(s) past the {:.0} s bound)",
        if met { "met" } else { "NOT met" },
        timeout.as_secs_f64()
    );
    Ok(late == 0 && left == 0)
}

/// The credentials under `prefix`, once none is left or `timeout` passed (the last destroy may
/// still be at work when its refusal is seen).
async fn left_after(target: &Target<'_>, prefix: &str, timeout: Duration) -> anyhow::Result<usize> {
    let waited = Instant::now();
    loop {
        let left = match target {
            Target::Postgres { admin_url } => {
                let mut pg = sqlx::PgConnection::connect(admin_url).await?;
                let n = crate::roles::list(&mut pg, prefix).await?.len();
                let _ = pg.close().await;
                n
            }
            Target::AwsIam { side } => side.users(prefix).await?,
        };
        if left == 0 || waited.elapsed() > timeout {
            return Ok(left);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Request, release twice, and the release's value.
async fn minted(api: &Api) -> anyhow::Result<(String, serde_json::Value, f64, f64)> {
    let g = grant_of(&api.request(600).await?.ok("request")?)?;
    let t = Instant::now();
    let first = api.values(&g).await?.ok("first release")?;
    let mint = ms(t.elapsed());
    let t = Instant::now();
    let again = api.values(&g).await?.ok("second release")?;
    let second = ms(t.elapsed());
    anyhow::ensure!(
        url_of(&again)? == url_of(&first)?,
        "the second release answered another credential"
    );
    Ok((g, first, mint, second))
}

async fn postgres_grant(api: &Api, timeout: Duration) -> anyhow::Result<One> {
    let (g, first, mint, second) = minted(api).await?;
    let url = url_of(&first)?;
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

async fn aws_grant(api: &Api, timeout: Duration, endpoint: &str) -> anyhow::Result<One> {
    let (g, first, mint, second) = minted(api).await?;
    let key = aws::key_of(&first)?;
    aws::call_with(endpoint, &key)
        .await
        .map_err(|code| anyhow::anyhow!("the minted key does not work: {code}"))?;
    api.revoke(&g).await?.ok("revoke")?;
    let revoked = Instant::now();
    let (refused, refusal) = aws::refused_within(endpoint, &key, revoked, timeout).await;
    Ok(One {
        mint,
        second,
        refused,
        closed: None,
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
