//! The tamper-evident audit log: every decision, grant, release (names, never values),
//! revocation, end, withholding and expiry, as entries at consecutive positions from 1, each
//! hash-chained to the one before it and sealed with the broker's key.
//!
//! - `hash = hex SHA-256(prev_hash ‖ position ‖ at ‖ kind ‖ subject ‖ body)`, each field
//!   length-prefixed (8 bytes, big-endian), `prev_hash` of the first entry being [`GENESIS`].
//! - `seal = HMAC-SHA-256(key, "audit/v1" ‖ position ‖ hash)` (see [`crate::seal::Sealer`]).
//!
//! A writer without the key can neither forge an entry nor edit one (its hash changes and the
//! seal no longer verifies), nor splice the chain (the next entry's `prev_hash` breaks). Deleting
//! the tail leaves a valid shorter chain: only a reader that remembers a higher position sees
//! it, which is what [`Follower`] is for (each replica remembers its head outside the database).
//!
//! Entries are appended by [`append`] inside the transaction of the change they record, so the
//! row and its entry commit together; the backend's `audit_head` serialises appenders.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::seal::Sealer;
use crate::storage::{StorageError, Tx};

/// The `prev_hash` of the first entry.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// An entry as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub position: i64,
    #[serde(with = "crate::clock::serde_time")]
    pub at: Time,
    /// `decision`, `grant`, `release`, `revocation`, `expiry`, `end`, `session_end`,
    /// `machine_login_end`, `withholding`.
    pub kind: String,
    /// What it is about: `grant:<id>`, `enrollment:<id>`, `credential:<id>`, `record:<id>`,
    /// `request:<id>`.
    pub subject: String,
    /// Canonical JSON of the details (names, never values).
    pub body: String,
    pub prev_hash: String,
    pub hash: String,
    pub seal: String,
}

/// What one entry records, before it has a place in the chain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditEvent {
    pub kind: &'static str,
    pub subject: String,
    /// The body as JSON text (names and ids, never values).
    pub body: String,
}

/// Kinds that end their subject: an entry of one of these ends the grant (or session,
/// credential) it names, whatever its row says.
pub const END_KINDS: &[&str] = &[
    "revocation",
    "expiry",
    "end",
    "session_end",
    "machine_login_end",
];

/// The chained hash of an entry's content.
pub fn entry_hash(
    prev_hash: &str,
    position: i64,
    at: Time,
    kind: &str,
    subject: &str,
    body: &str,
) -> String {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    let (p, t) = (position.to_string(), at.timestamp_millis().to_string());
    for f in [
        prev_hash.as_bytes(),
        p.as_bytes(),
        t.as_bytes(),
        kind.as_bytes(),
        subject.as_bytes(),
        body.as_bytes(),
    ] {
        ctx.update(&(f.len() as u64).to_be_bytes());
        ctx.update(f);
    }
    hex::encode(ctx.finish().as_ref())
}

/// Why a chain does not verify at an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakReason {
    /// The seal does not verify over the entry's position and hash.
    Seal,
    /// The stored hash is not the hash of the entry's content.
    Hash,
    /// A position is missing (or the chain is shorter than remembered).
    Gap,
    /// The entry does not link to the one before it.
    PrevHash,
    /// The entry at the remembered position is not the one remembered.
    Rewritten,
}

impl BreakReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Seal => "seal",
            Self::Hash => "hash",
            Self::Gap => "gap",
            Self::PrevHash => "prev_hash",
            Self::Rewritten => "rewritten",
        }
    }
}

/// Where and why a chain breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainBreak {
    pub position: i64,
    pub reason: BreakReason,
}

impl std::fmt::Display for ChainBreak {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "position {}: {}", self.position, self.reason.as_str())
    }
}

/// Checks one entry on its own: its hash over its content and its seal.
pub fn check_entry(sealer: &Sealer, e: &AuditEntry) -> Result<(), BreakReason> {
    if entry_hash(&e.prev_hash, e.position, e.at, &e.kind, &e.subject, &e.body) != e.hash {
        return Err(BreakReason::Hash);
    }
    if !sealer.verify_audit(e.position, &e.hash, &e.seal) {
        return Err(BreakReason::Seal);
    }
    Ok(())
}

/// A chain walked in order: the last verified (position, hash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Walk {
    pub position: i64,
    pub hash: String,
}

impl Default for Walk {
    fn default() -> Self {
        Self {
            position: 0,
            hash: GENESIS.to_owned(),
        }
    }
}

impl Walk {
    /// Verifies the next entry: at the next position, linked, hashed and sealed.
    pub fn step(&mut self, sealer: &Sealer, e: &AuditEntry) -> Result<(), ChainBreak> {
        let brk = |reason| ChainBreak {
            position: e.position,
            reason,
        };
        if e.position != self.position + 1 {
            return Err(ChainBreak {
                position: self.position + 1,
                reason: BreakReason::Gap,
            });
        }
        check_entry(sealer, e).map_err(brk)?;
        if e.prev_hash != self.hash {
            return Err(brk(BreakReason::PrevHash));
        }
        self.position = e.position;
        self.hash = e.hash.clone();
        Ok(())
    }
}

/// Appends `events` at the end of the chain, in `tx`: takes the head (which the backend locks
/// until commit), then writes one sealed entry per event, all in one call. Call it last in a transaction, after
/// the rows the events record, so the head lock is held briefly. Answers the new head.
pub async fn append(
    tx: &mut dyn Tx,
    sealer: &Sealer,
    at: Time,
    events: &[AuditEvent],
) -> Result<Option<(i64, String)>, StorageError> {
    if events.is_empty() {
        return Ok(None);
    }
    let (mut position, mut prev) = tx
        .audit_head()
        .await?
        .unwrap_or_else(|| (0, GENESIS.to_owned()));
    let mut entries = Vec::with_capacity(events.len());
    for ev in events {
        position += 1;
        let body = ev.body.clone();
        let hash = entry_hash(&prev, position, at, ev.kind, &ev.subject, &body);
        let entry = AuditEntry {
            position,
            at,
            kind: ev.kind.to_owned(),
            subject: ev.subject.clone(),
            body,
            prev_hash: prev,
            seal: sealer.seal_audit(position, &hash),
            hash: hash.clone(),
        };
        entries.push(entry);
        prev = hash;
    }
    tx.append_audit(&entries).await?;
    Ok(Some((position, prev)))
}

/// Walks the whole chain from the first entry, `batch` entries per read. Answers the number of
/// entries and the head, or the first break.
pub async fn verify_all(
    tx: &mut dyn Tx,
    sealer: &Sealer,
) -> Result<Result<Walk, ChainBreak>, StorageError> {
    let mut walk = Walk::default();
    loop {
        let batch = tx.audit_entries(walk.position, 1000).await?;
        if batch.is_empty() {
            return Ok(Ok(walk));
        }
        for e in &batch {
            if let Err(b) = walk.step(sealer, e) {
                return Ok(Err(b));
            }
        }
    }
}

/// Whether a verified entry ends its subject.
pub fn ends(e: &AuditEntry) -> bool {
    END_KINDS.contains(&e.kind.as_str())
}

/// Entries a follower's round re-verifies below its head (see [`Follower::step`]).
pub const SWEEP_PER_ROUND: i64 = 1_000;

/// The follower's memory: the highest entry this process has verified, and the break that
/// made it fail closed, if any. Kept in memory and, by the server, in a local state file.
/// Below the head, a sweep walks the chain again from its start, a bounded number of entries
/// a round, and starts over when it reaches the head.
#[derive(Debug)]
pub struct Follower {
    state: Mutex<FollowerState>,
    sweep: Mutex<Walk>,
    sweep_per_round: i64,
    /// This process's committed appends that did not chain to the head when they committed
    /// (transactions of one group commit resume in any order), by the position they chain
    /// from: applied as soon as the head reaches them. Bounded: past [`PENDING_MAX`] ranges
    /// the oldest are dropped and the follower's round verifies those entries instead.
    pending: Mutex<std::collections::BTreeMap<i64, (String, Walk)>>,
}

/// Appended ranges a follower holds while waiting for the head to reach them.
pub const PENDING_MAX: usize = 4096;

impl Default for Follower {
    fn default() -> Self {
        Self::new(None)
    }
}

/// What a follower remembers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FollowerState {
    pub head: Walk,
    pub broken: Option<ChainBreak>,
}

impl Follower {
    /// A follower resuming from `head` (from the state file), or from the start.
    pub fn new(head: Option<Walk>) -> Self {
        Self::with_sweep(head, SWEEP_PER_ROUND)
    }

    /// As [`Follower::new`], re-verifying `per_round` entries below the head each round.
    pub fn with_sweep(head: Option<Walk>, per_round: i64) -> Self {
        Self {
            state: Mutex::new(FollowerState {
                head: head.unwrap_or_default(),
                broken: None,
            }),
            sweep: Mutex::new(Walk::default()),
            sweep_per_round: per_round.max(1),
            pending: Mutex::new(Default::default()),
        }
    }

    /// Resumes from `head` (the state file, or a head an operator accepted), clearing a break.
    pub fn reset(&self, head: Walk) {
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) =
            FollowerState { head, broken: None };
    }

    pub fn state(&self) -> FollowerState {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Entries this process appended and committed itself, chained to `from` and ending at
    /// `to`. When `from` is the head this follower has verified, it moves to `to` without
    /// reading them back: they were hashed and sealed here, over the head the appending
    /// transaction read (and locked). Otherwise (entries of another replica came between, or a
    /// break) nothing changes, and the next round verifies them from the database. An entry
    /// edited after its commit is below the head then, where the sweep finds it.
    ///
    /// Appends that commit together may report in any order: one that chains to a position
    /// the head has not reached yet waits (bounded) until the head reaches it, so none is read
    /// back only because its report came first.
    pub fn appended(&self, from: &Walk, to: Walk) {
        if to.position <= from.position {
            return;
        }
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.broken.is_some() {
            return;
        }
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if from.position > st.head.position {
            pending.insert(from.position, (from.hash.clone(), to));
            while pending.len() > PENDING_MAX {
                pending.pop_first();
            }
            return;
        }
        if st.head == *from {
            st.head = to;
        }
        // Ranges that now chain on, one after another; those below the head are stale.
        loop {
            let head = st.head.clone();
            while pending
                .first_key_value()
                .is_some_and(|(p, _)| *p < head.position)
            {
                pending.pop_first();
            }
            match pending.remove(&head.position) {
                Some((hash, next)) if hash == head.hash => st.head = next,
                Some(_) => {}
                None => break,
            }
        }
    }

    pub fn broken(&self) -> Option<ChainBreak> {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).broken
    }

    /// One round: checks the remembered head is still there (same position and hash), then
    /// verifies and advances over every entry above it, then sweeps on below the head: up to
    /// its per-round budget of entries (all of them with `full`), from where the last round's
    /// sweep stopped, which finds an entry edited, inserted or removed below the head within
    /// `head / budget` rounds. Each round costs a bounded amount, however long the chain. A
    /// break is sticky until an operator accepts a head ([`Follower::reset`]). Answers the state
    /// after the round.
    pub async fn step(
        &self,
        tx: &mut dyn Tx,
        sealer: &Sealer,
        full: bool,
    ) -> Result<FollowerState, StorageError> {
        let mut st = self.state();
        if st.broken.is_some() {
            return Ok(st);
        }
        let mut walk = st.head.clone();
        let mut result = self.advance(tx, sealer, &mut walk).await?;
        if result.is_ok() {
            let budget = if full { i64::MAX } else { self.sweep_per_round };
            let mut sweep = self.sweep.lock().unwrap_or_else(|p| p.into_inner()).clone();
            result = sweep_below(tx, sealer, &mut sweep, &walk, budget).await?;
            *self.sweep.lock().unwrap_or_else(|p| p.into_inner()) = sweep;
        }
        st.head = walk;
        if let Err(b) = result {
            tracing::error!(
                position = b.position,
                reason = b.reason.as_str(),
                "audit chain broken"
            );
            st.broken = Some(b);
        }
        let mut cur = self.state.lock().unwrap_or_else(|p| p.into_inner());
        // This process's own appends ([`Follower::appended`]) may have moved the head past
        // this round's while it read: the head only moves forward, and a break always lands.
        if st.broken.is_some() || cur.broken.is_some() || st.head.position >= cur.head.position {
            cur.head = st.head.clone();
            cur.broken = cur.broken.or(st.broken);
        }
        Ok(cur.clone())
    }

    async fn advance(
        &self,
        tx: &mut dyn Tx,
        sealer: &Sealer,
        walk: &mut Walk,
    ) -> Result<Result<(), ChainBreak>, StorageError> {
        if walk.position > 0 {
            let at = tx.audit_entries(walk.position - 1, 1).await?;
            match at.first() {
                Some(e) if e.position == walk.position && e.hash == walk.hash => {
                    if let Err(r) = check_entry(sealer, e) {
                        return Ok(Err(ChainBreak {
                            position: e.position,
                            reason: r,
                        }));
                    }
                }
                Some(e) if e.position == walk.position => {
                    return Ok(Err(ChainBreak {
                        position: walk.position,
                        reason: BreakReason::Rewritten,
                    }));
                }
                // The remembered head is gone: the tail was deleted (or rolled back).
                _ => {
                    return Ok(Err(ChainBreak {
                        position: walk.position,
                        reason: BreakReason::Gap,
                    }));
                }
            }
        }
        loop {
            let batch = tx.audit_entries(walk.position, 1000).await?;
            if batch.is_empty() {
                return Ok(Ok(()));
            }
            for e in &batch {
                if let Err(b) = walk.step(sealer, e) {
                    return Ok(Err(b));
                }
            }
        }
    }
}

/// Walks `sweep` on towards `head`, verifying up to `budget` entries; starts over from the
/// first entry once it reaches the head (whose hash it must then have).
async fn sweep_below(
    tx: &mut dyn Tx,
    sealer: &Sealer,
    sweep: &mut Walk,
    head: &Walk,
    budget: i64,
) -> Result<Result<(), ChainBreak>, StorageError> {
    if sweep.position > head.position {
        *sweep = Walk::default();
    }
    let mut left = budget;
    while left > 0 && sweep.position < head.position {
        let want = left.min(head.position - sweep.position).min(1000);
        let limit = u32::try_from(want).unwrap_or(1000);
        let batch = tx.audit_entries(sweep.position, limit).await?;
        if batch.is_empty() {
            return Ok(Err(ChainBreak {
                position: sweep.position + 1,
                reason: BreakReason::Gap,
            }));
        }
        for e in &batch {
            if sweep.position >= head.position {
                break;
            }
            if let Err(b) = sweep.step(sealer, e) {
                *sweep = Walk::default();
                return Ok(Err(b));
            }
            left -= 1;
        }
    }
    if sweep.position == head.position {
        let lap_ok = sweep.hash == head.hash;
        *sweep = Walk::default();
        if !lap_ok {
            return Ok(Err(ChainBreak {
                position: head.position,
                reason: BreakReason::Rewritten,
            }));
        }
    }
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use zeroize::Zeroizing;

    fn sealer() -> Sealer {
        Sealer::new(&Zeroizing::new(vec![7u8; 32])).expect("key")
    }

    fn chain(s: &Sealer, n: i64) -> Vec<AuditEntry> {
        let mut prev = GENESIS.to_owned();
        let at = Time::from_timestamp_millis(1_700_000_000_000).expect("time");
        (1..=n)
            .map(|p| {
                let body = format!("{{\"n\":{p}}}");
                let hash = entry_hash(&prev, p, at, "grant", "grant:x", &body);
                let e = AuditEntry {
                    position: p,
                    at,
                    kind: "grant".into(),
                    subject: "grant:x".into(),
                    body,
                    prev_hash: prev.clone(),
                    seal: s.seal_audit(p, &hash),
                    hash: hash.clone(),
                };
                prev = hash;
                e
            })
            .collect()
    }

    fn walk(s: &Sealer, es: &[AuditEntry]) -> Result<Walk, ChainBreak> {
        let mut w = Walk::default();
        for e in es {
            w.step(s, e)?;
        }
        Ok(w)
    }

    #[test]
    fn own_appends_move_the_follower_only_from_its_head() {
        let w = |position: i64, h: &str| Walk {
            position,
            hash: h.into(),
        };
        let f = Follower::new(Some(w(3, "c")));
        // Chained to another head (a foreign entry came between): no move.
        f.appended(&w(4, "d"), w(6, "f"));
        assert_eq!(f.state().head, w(3, "c"));
        // Chained to the verified head: moves.
        f.appended(&w(3, "c"), w(5, "e"));
        assert_eq!(f.state().head, w(5, "e"));
        // Never backwards, never past a break.
        f.appended(&w(5, "e"), w(5, "x"));
        assert_eq!(f.state().head, w(5, "e"));
        f.state.lock().expect("lock").broken = Some(ChainBreak {
            position: 2,
            reason: BreakReason::Seal,
        });
        f.appended(&w(5, "e"), w(6, "f"));
        assert_eq!(f.state().head, w(5, "e"));
    }

    #[test]
    fn own_appends_reported_out_of_order_still_move_the_follower() {
        let w = |position: i64, h: &str| Walk {
            position,
            hash: h.into(),
        };
        let f = Follower::new(Some(w(0, GENESIS)));
        // Three transactions of one group commit report last, first, middle.
        f.appended(&w(4, "d"), w(6, "f"));
        assert_eq!(f.state().head, w(0, GENESIS));
        f.appended(&w(0, GENESIS), w(2, "b"));
        assert_eq!(f.state().head, w(2, "b"));
        f.appended(&w(2, "b"), w(4, "d"));
        assert_eq!(f.state().head, w(6, "f"));
        // A waiting range whose hash does not match the head it reaches is not taken.
        f.appended(&w(8, "h"), w(9, "i"));
        f.appended(&w(6, "f"), w(8, "other"));
        assert_eq!(f.state().head, w(8, "other"));
        assert!(f.pending.lock().expect("lock").is_empty());
    }

    #[test]
    fn a_chain_verifies() {
        let s = sealer();
        let es = chain(&s, 5);
        let w = walk(&s, &es).expect("verifies");
        assert_eq!((w.position, w.hash.as_str()), (5, es[4].hash.as_str()));
    }

    #[test]
    fn an_edited_body_breaks_at_its_hash() {
        let s = sealer();
        let mut es = chain(&s, 5);
        es[2].body = "{\"n\":99}".into();
        let b = walk(&s, &es).expect_err("breaks");
        assert_eq!((b.position, b.reason), (3, BreakReason::Hash));
    }

    #[test]
    fn a_rehashed_edit_breaks_at_its_seal() {
        let s = sealer();
        let mut es = chain(&s, 5);
        let e = &mut es[2];
        e.body = "{\"n\":99}".into();
        e.hash = entry_hash(&e.prev_hash, e.position, e.at, &e.kind, &e.subject, &e.body);
        let b = walk(&s, &es).expect_err("breaks");
        assert_eq!((b.position, b.reason), (3, BreakReason::Seal));
    }

    #[test]
    fn a_removed_entry_is_a_gap() {
        let s = sealer();
        let mut es = chain(&s, 5);
        es.remove(1);
        let b = walk(&s, &es).expect_err("breaks");
        assert_eq!((b.position, b.reason), (2, BreakReason::Gap));
    }

    #[test]
    fn a_resealed_entry_from_another_chain_breaks_the_link() {
        let s = sealer();
        let mut es = chain(&s, 3);
        let other = {
            let mut o = chain(&s, 3);
            o[0].body = "{}".into();
            o[0].hash = entry_hash(GENESIS, 1, o[0].at, "grant", "grant:x", "{}");
            o[0].seal = s.seal_audit(1, &o[0].hash);
            let h = entry_hash(&o[0].hash, 2, o[1].at, "grant", "grant:x", &o[1].body);
            o[1].prev_hash = o[0].hash.clone();
            o[1].hash = h.clone();
            o[1].seal = s.seal_audit(2, &h);
            o
        };
        es[1] = other[1].clone();
        let b = walk(&s, &es).expect_err("breaks");
        assert_eq!((b.position, b.reason), (2, BreakReason::PrevHash));
    }

    #[test]
    fn another_key_does_not_verify() {
        let s = sealer();
        let es = chain(&s, 2);
        let other = Sealer::new(&Zeroizing::new(vec![8u8; 32])).expect("key");
        let b = walk(&other, &es).expect_err("breaks");
        assert_eq!((b.position, b.reason), (1, BreakReason::Seal));
    }
}
