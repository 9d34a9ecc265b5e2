//! Read connections kept between reads.
//!
//! sqlx tests a connection every time it goes back to its pool (a `ping`: a round trip to
//! SQLite's worker thread, or to PostgreSQL), and PostgreSQL's pool tests it again before each
//! checkout. A proof-verified read is one or two statements, so those tests, with the checkout
//! itself, were most of its database work. A read whose statements all ended cleanly puts its
//! connection here instead, and the next read takes it back with no test:
//!
//! - a statement that failed, or was cut off by its caller going away, may have left the
//!   connection in any state: that connection goes back to the pool, which tests it as before,
//!   and a failed one takes every kept connection back with it (they have likely met its fate:
//!   the database restarted), so that one failed read, not one per kept connection, finds out;
//! - a connection left here longer than [`IDLE_TEST`] is tested before it is used (a PostgreSQL
//!   server restarted, or an idle connection closed by the network); one that fails is closed;
//! - at most `cap` connections are kept, so the pool always has others for writes;
//! - [`Spares::close`] hands them all back, and keeps none after, before the pool is closed;
//! - on a multi-host URL, a detected failover (the pool moved to another host, or found none
//!   that fits) hands them all back, and none is kept for [`AFTER_FAILOVER`] after it: a read
//!   that began before the failover may hold a connection to the old host, which the pool's
//!   checkout then drops (`countersign_common::sql::pg_hosts`).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use countersign_common::sql::pg_hosts::Failover;
use sqlx::pool::PoolConnection;
use sqlx::{Any, AnyPool, Connection};

/// How long a kept connection may sit unused before it is tested again.
pub(crate) const IDLE_TEST: Duration = Duration::from_secs(1);
/// How long after a detected failover no connection is kept.
const AFTER_FAILOVER: Duration = Duration::from_secs(30);

/// Connections kept checked out between reads, the most recently used taken first.
#[derive(Debug)]
pub(crate) struct Spares {
    kept: Mutex<Kept>,
    cap: usize,
    /// The pool's multi-host side, when its URL lists hosts.
    failover: Option<Failover>,
}

#[derive(Debug, Default)]
struct Kept {
    conns: Vec<(PoolConnection<Any>, Instant)>,
    /// Set by [`Spares::close`]: nothing is kept any more.
    closed: bool,
    /// The failover generation the kept connections belong to.
    generation: u64,
}

impl Spares {
    pub(crate) fn new(cap: usize, failover: Option<Failover>) -> Self {
        Spares {
            kept: Mutex::new(Kept::default()),
            cap,
            failover,
        }
    }

    fn pop(&self) -> Option<(PoolConnection<Any>, Instant)> {
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = &self.failover {
            let generation = f.generation();
            if generation != kept.generation {
                kept.generation = generation;
                let stale = std::mem::take(&mut kept.conns);
                drop(kept);
                drop(stale);
                return None;
            }
        }
        kept.conns.pop()
    }

    /// A connection for a read: a kept one (tested if it sat idle), else one from the pool.
    pub(crate) async fn take(&self, pool: &AnyPool) -> Result<PoolConnection<Any>, sqlx::Error> {
        while let Some((mut conn, since)) = self.pop() {
            if since.elapsed() < IDLE_TEST {
                return Ok(conn);
            }
            match conn.ping().await {
                Ok(()) => return Ok(conn),
                Err(e) => {
                    tracing::debug!(error = %e, "a kept read connection failed its test");
                    conn.close_on_drop();
                }
            }
        }
        pool.acquire().await
    }

    /// Keeps a connection whose statements all ended cleanly; past the cap it goes back to the
    /// pool.
    pub(crate) fn put(&self, conn: PoolConnection<Any>) {
        if let Some(f) = &self.failover
            && f.since_failover().is_some_and(|d| d < AFTER_FAILOVER)
        {
            // Perhaps opened to the old host: back to the pool, which drops it if so.
            return;
        }
        let mut kept = self.kept.lock().unwrap_or_else(|p| p.into_inner());
        if !kept.closed && kept.conns.len() < self.cap {
            kept.conns.push((conn, Instant::now()));
        }
    }

    /// Hands every kept connection back to the pool.
    pub(crate) fn clear(&self) {
        let kept = std::mem::take(&mut self.kept.lock().unwrap_or_else(|p| p.into_inner()).conns);
        drop(kept);
    }

    /// Hands every kept connection back and keeps none from then on (before the pool closes).
    pub(crate) fn close(&self) {
        let kept = {
            let mut k = self.kept.lock().unwrap_or_else(|p| p.into_inner());
            k.closed = true;
            std::mem::take(&mut k.conns)
        };
        drop(kept);
    }
}
