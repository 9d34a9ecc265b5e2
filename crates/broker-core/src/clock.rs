//! Time and randomness are parameters: every lease, expiry, proof window and rate limit reads an
//! injected [`Clock`], and every identifier, code and nonce comes from an injected [`Entropy`].

use std::sync::Mutex;

use chrono::{DateTime, Duration, DurationRound, Utc};

/// A point in time. The broker keeps millisecond precision so that a value read back from storage
/// equals the one written.
pub type Time = DateTime<Utc>;

/// Where the broker reads the time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> Time;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Time {
        Utc::now()
    }
}

/// A clock that moves only when told to: for tests and simulations.
#[derive(Debug)]
pub struct ManualClock(Mutex<Time>);

impl ManualClock {
    pub fn new(start: Time) -> Self {
        Self(Mutex::new(start))
    }

    pub fn set(&self, t: Time) {
        *self.0.lock().unwrap_or_else(|p| p.into_inner()) = t;
    }

    pub fn advance(&self, d: Duration) {
        let mut g = self.0.lock().unwrap_or_else(|p| p.into_inner());
        *g += d;
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Time {
        *self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Truncates to whole milliseconds, the precision stored.
pub fn to_millis(t: Time) -> Time {
    t.duration_trunc(Duration::milliseconds(1)).unwrap_or(t)
}

/// RFC 3339 in UTC with `Z`, as every answer shows times.
pub fn rfc3339(t: &Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// Serde helpers that write times as RFC 3339 with `Z`.
pub mod serde_time {
    use super::Time;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(t: &Time, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&super::rfc3339(t))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Time, D::Error> {
        let s = String::deserialize(d)?;
        chrono::DateTime::parse_from_rfc3339(&s)
            .map(|t| t.with_timezone(&chrono::Utc))
            .map_err(serde::de::Error::custom)
    }

    pub mod option {
        use super::Time;
        use serde::{Deserialize, Deserializer, Serializer};

        pub fn serialize<S: Serializer>(t: &Option<Time>, s: S) -> Result<S::Ok, S::Error> {
            match t {
                Some(t) => s.serialize_str(&super::super::rfc3339(t)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Time>, D::Error> {
            Option::<String>::deserialize(d)?
                .map(|s| {
                    chrono::DateTime::parse_from_rfc3339(&s)
                        .map(|t| t.with_timezone(&chrono::Utc))
                        .map_err(serde::de::Error::custom)
                })
                .transpose()
        }
    }
}

/// Where the broker draws randomness.
pub trait Entropy: Send + Sync + std::fmt::Debug {
    fn fill(&self, buf: &mut [u8]);
}

/// The operating system's CSPRNG (through aws-lc-rs).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemEntropy;

impl Entropy for SystemEntropy {
    fn fill(&self, buf: &mut [u8]) {
        // aws-lc-rs fails only when the OS has no randomness to give; nothing can continue then.
        #[allow(clippy::expect_used)]
        aws_lc_rs::rand::fill(buf).expect("the operating system's random source failed");
    }
}

/// Draws `N` random bytes.
pub fn random<const N: usize>(e: &dyn Entropy) -> [u8; N] {
    let mut b = [0u8; N];
    e.fill(&mut b);
    b
}
