//! The helper's wall clock, injected: every time the helper reads (a proof's `iat`, a request
//! object's `exp`, when a lease is due for renewal or a service's login for refreshing, whether
//! a credential has expired) comes from one [`Clock`], so tests move a [`ManualClock`] instead
//! of waiting. The clock is the broker's and the console's (`countersign_common::clock`); what
//! is the helper's own here is its arithmetic on leases and expiries ([`later`], [`remaining`]).

use std::time::Duration;

use chrono::{DateTime, TimeDelta, Utc};

pub use countersign_common::clock::{Clock, ManualClock, SystemClock};

/// `at` plus `by` (saturating).
#[must_use]
pub fn later(at: DateTime<Utc>, by: Duration) -> DateTime<Utc> {
    TimeDelta::from_std(by)
        .ok()
        .and_then(|d| at.checked_add_signed(d))
        .unwrap_or(DateTime::<Utc>::MAX_UTC)
}

/// Time left from `now` until an RFC 3339 instant (zero once passed); `None` if unparsable.
#[must_use]
pub fn remaining(now: DateTime<Utc>, rfc3339: &str) -> Option<Duration> {
    let at = DateTime::parse_from_rfc3339(rfc3339).ok()?;
    let left = at.timestamp_millis().saturating_sub(now.timestamp_millis());
    Some(Duration::from_millis(
        u64::try_from(left.max(0)).unwrap_or(0),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_when_told() {
        let t0 = DateTime::parse_from_rfc3339("2030-01-01T00:00:00Z")
            .map(|t| t.with_timezone(&Utc))
            .unwrap_or_default();
        let c = ManualClock::new(t0);
        assert_eq!(c.now(), t0);
        c.advance(TimeDelta::seconds(90));
        assert_eq!(
            remaining(c.now(), "2030-01-01T00:02:00Z"),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            remaining(c.now(), "2029-01-01T00:00:00Z"),
            Some(Duration::ZERO)
        );
        assert_eq!(remaining(c.now(), "soon"), None);
        assert_eq!(later(t0, Duration::MAX), DateTime::<Utc>::MAX_UTC);
    }
}
