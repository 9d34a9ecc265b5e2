//! Time and randomness, injected so that tests move time and nothing reads the system clock
//! behind the domain's back; SHA-256 and constant-time comparison.

use std::sync::Mutex;

use chrono::{DateTime, Duration, Utc};

/// A point in time (UTC).
pub type Time = DateTime<Utc>;

/// Where the broker and the console read the time: every lease, expiry, proof window and rate
/// limit. Injected, so that tests move a [`ManualClock`] instead of waiting.
pub trait Clock: Send + Sync + std::fmt::Debug {
    fn now(&self) -> Time;
}

/// The system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    // The one place the system's clock is read (the cores' clippy.toml bans it elsewhere).
    #[allow(clippy::disallowed_methods)]
    fn now(&self) -> Time {
        Utc::now()
    }
}

/// A clock that tests set and move.
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

/// Where the broker and the console take random bytes: every identifier, code and nonce.
pub trait Entropy: Send + Sync + std::fmt::Debug {
    fn fill(&self, buf: &mut [u8]);
}

/// The operating system's CSPRNG (through aws-lc-rs).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemEntropy;

impl Entropy for SystemEntropy {
    fn fill(&self, buf: &mut [u8]) {
        // aws-lc-rs's SystemRandom does not fail on the platforms it builds for; a failure here
        // would be a broken system, and a predictable token must never come out of it.
        if aws_lc_rs::rand::fill(buf).is_err() {
            panic!("the system's random number generator failed");
        }
    }
}

/// `N` random bytes.
pub fn random<const N: usize>(e: &dyn Entropy) -> [u8; N] {
    let mut b = [0u8; N];
    e.fill(&mut b);
    b
}

/// base64url (no padding) of `N` random bytes.
pub fn random_token<const N: usize>(e: &dyn Entropy) -> String {
    use base64::Engine;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random::<N>(e))
}

/// SHA-256 of a string.
pub fn sha256(s: &str) -> [u8; 32] {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, s.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}

/// Lowercase hex SHA-256 of a string: how tokens are kept.
pub fn sha256_hex(s: &str) -> String {
    hex::encode(sha256(s))
}

/// Constant-time equality.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && aws_lc_rs::constant_time::verify_slices_are_equal(a, b).is_ok()
}

/// `token` masked with a fresh one-time pad: base64url (no padding) of the pad and the token
/// XOR the pad. Each call gives different bytes for one token, so a compressed answer's length
/// tells an observer nothing about it (BREACH). [`masked_matches`] checks one.
pub fn mask_token(token: &[u8], e: &dyn Entropy) -> String {
    use base64::Engine;
    let mut out = vec![0u8; token.len() * 2];
    let (pad, masked) = out.split_at_mut(token.len());
    e.fill(pad);
    for ((m, p), t) in masked.iter_mut().zip(pad.iter()).zip(token) {
        *m = p ^ t;
    }
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(out)
}

/// Whether `presented` is a masking of `token` ([`mask_token`]), constant time in the token;
/// anything that does not decode to twice its length is refused, and so is an empty token.
pub fn masked_matches(presented: &str, token: &[u8]) -> bool {
    use base64::Engine;
    let Ok(raw) = base64::engine::general_purpose::URL_SAFE_NO_PAD.decode(presented) else {
        return false;
    };
    if token.is_empty() || raw.len() != token.len() * 2 {
        return false;
    }
    let (pad, masked) = raw.split_at(token.len());
    let unmasked: Vec<u8> = pad.iter().zip(masked).map(|(p, m)| p ^ m).collect();
    ct_eq(&unmasked, token)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manual_clock_moves_only_when_told() {
        let start = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap_or_default();
        let c = ManualClock::new(start);
        assert_eq!(c.now(), start);
        c.advance(Duration::seconds(90));
        assert_eq!(c.now(), start + Duration::seconds(90));
        c.set(start);
        assert_eq!(c.now(), start);
    }

    #[test]
    fn constant_time_equality_and_hashes() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let t = random_token::<32>(&SystemEntropy);
        assert_eq!(t.len(), 43);
    }
}
