//! Rate limits (protocol.md §6) with governor, reading the core's clock so that tests move time
//! rather than wait. Limits are per broker process; several replicas each keep their own (see
//! docs/decisions.md).

use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use countersign_broker_core::Clock;
use governor::clock::Clock as GovernorClock;
use governor::middleware::NoOpMiddleware;
use governor::state::keyed::DefaultKeyedStateStore;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

/// The core's clock as governor reads it: time since the Unix epoch.
#[derive(Debug, Clone)]
pub struct CoreClock(pub Arc<dyn Clock>);

impl GovernorClock for CoreClock {
    type Instant = Duration;
    fn now(&self) -> Duration {
        let t = self.0.now();
        Duration::from_millis(u64::try_from(t.timestamp_millis()).unwrap_or(0))
    }
}

type Keyed<K> = RateLimiter<K, DefaultKeyedStateStore<K>, CoreClock, NoOpMiddleware<Duration>>;
type Direct = RateLimiter<NotKeyed, InMemoryState, CoreClock, NoOpMiddleware<Duration>>;

/// Per-minute quotas.
#[derive(Debug, Clone, Copy)]
pub struct Quotas {
    pub login_starts_per_source: u32,
    pub token_logins_per_account: u32,
    pub rereads_per_source: u32,
    pub rereads_overall: u32,
    /// Machine-login lookups by code (protocol.md §4): per source address, then overall.
    pub lookups_per_source: u32,
    pub lookups_overall: u32,
}

impl Default for Quotas {
    fn default() -> Self {
        Self {
            login_starts_per_source: 10,
            token_logins_per_account: 30,
            rereads_per_source: 6,
            rereads_overall: 60,
            lookups_per_source: 30,
            lookups_overall: 60,
        }
    }
}

fn per_minute(n: u32) -> Quota {
    Quota::per_minute(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN))
}

/// The broker's limiters.
pub struct Limits {
    clock: CoreClock,
    login_starts: Keyed<std::net::IpAddr>,
    token_logins: Keyed<String>,
    rereads: Keyed<std::net::IpAddr>,
    rereads_all: Direct,
    lookups: Keyed<std::net::IpAddr>,
    lookups_all: Direct,
}

impl std::fmt::Debug for Limits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Limits(..)")
    }
}

impl Limits {
    pub fn new(q: Quotas, clock: Arc<dyn Clock>) -> Self {
        let clock = CoreClock(clock);
        Self {
            login_starts: RateLimiter::new(
                per_minute(q.login_starts_per_source),
                DefaultKeyedStateStore::default(),
                clock.clone(),
            ),
            token_logins: RateLimiter::new(
                per_minute(q.token_logins_per_account),
                DefaultKeyedStateStore::default(),
                clock.clone(),
            ),
            rereads: RateLimiter::new(
                per_minute(q.rereads_per_source),
                DefaultKeyedStateStore::default(),
                clock.clone(),
            ),
            rereads_all: RateLimiter::new(
                per_minute(q.rereads_overall),
                InMemoryState::default(),
                clock.clone(),
            ),
            lookups: RateLimiter::new(
                per_minute(q.lookups_per_source),
                DefaultKeyedStateStore::default(),
                clock.clone(),
            ),
            lookups_all: RateLimiter::new(
                per_minute(q.lookups_overall),
                InMemoryState::default(),
                clock.clone(),
            ),
            clock,
        }
    }

    fn keyed<K: Hash + Eq + Clone>(&self, l: &Keyed<K>, key: &K) -> Result<(), u64> {
        l.check_key(key)
            .map_err(|nu| nu.wait_time_from(self.clock.now()).as_secs_f64().ceil() as u64)
    }

    /// A machine-login start from `source`; `Err(seconds)` to wait.
    pub fn login_start(&self, source: std::net::IpAddr) -> Result<(), u64> {
        self.keyed(&self.login_starts, &source)
    }

    /// A token login for a ServiceAccount.
    pub fn token_login(&self, account: &str) -> Result<(), u64> {
        self.keyed(&self.token_logins, &account.to_owned())
    }

    /// A reread from `source`: per source, then over all callers.
    pub fn reread(&self, source: std::net::IpAddr) -> Result<(), u64> {
        self.keyed(&self.rereads, &source)?;
        self.rereads_all
            .check()
            .map_err(|nu| nu.wait_time_from(self.clock.now()).as_secs_f64().ceil() as u64)
    }

    /// A machine-login lookup from `source`: per source, then over all callers. Each lookup
    /// counts, found or not: the budget is what bounds guessing a live code.
    pub fn lookup(&self, source: std::net::IpAddr) -> Result<(), u64> {
        self.keyed(&self.lookups, &source)?;
        self.lookups_all
            .check()
            .map_err(|nu| nu.wait_time_from(self.clock.now()).as_secs_f64().ceil() as u64)
    }

    /// Forgets keys whose limits have fully recovered (called by the housekeeping task).
    pub fn shrink(&self) {
        self.login_starts.retain_recent();
        self.token_logins.retain_recent();
        self.rereads.retain_recent();
        self.lookups.retain_recent();
    }
}
