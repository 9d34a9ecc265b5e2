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

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::model::{Enrollment, Grant, LauncherCredential, Record};
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

/// Kinds whose commit is made durable in this replica's memory of the head (its
/// [`HeadKeeper`]) before the change is answered: whatever ends something. An end a replica has
/// acknowledged is then never forgotten by it, whatever happens to the database afterwards.
pub const DURABLE_KINDS: &[&str] = &[
    "revocation",
    "expiry",
    "end",
    "session_end",
    "machine_login_end",
    "withholding",
];

/// The kind of the entry `audit accept-head` appends: an operator accepted the chain as it was
/// (its subject is [`ACCEPT_SUBJECT`]). A witness whose record is no longer in the chain but
/// predates such an entry takes the broker's head instead of failing it closed.
pub const ACCEPT_KIND: &str = "head_accepted";

/// The subject of an [`ACCEPT_KIND`] entry.
pub const ACCEPT_SUBJECT: &str = "audit:head";

/// Where a replica keeps the head it has verified outside the database (the server: a state
/// file, written and `fsync`ed). [`Follower::keep`] calls it before an end is answered.
#[async_trait::async_trait]
pub trait HeadKeeper: Send + Sync + std::fmt::Debug {
    /// Makes `head` (or a later one) durable. Never moves backwards: a lower head than one
    /// already kept is already kept.
    async fn keep(&self, head: &Walk) -> Result<(), String>;
}

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
    /// A witness outside the database (the console) has seen an entry the chain no longer has.
    Witness,
}

impl BreakReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Seal => "seal",
            Self::Hash => "hash",
            Self::Gap => "gap",
            Self::PrevHash => "prev_hash",
            Self::Rewritten => "rewritten",
            Self::Witness => "witness",
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
    /// The last entry this process committed itself (or the head it resumed from): the chain
    /// must reach it, with that hash, even before the follower has verified up to it.
    floor: Mutex<Walk>,
    /// Where heads are kept outside the database (the server's state file).
    keeper: OnceLock<Arc<dyn HeadKeeper>>,
    /// The position of the last [`ACCEPT_KIND`] entry verified (0: none).
    accepted: AtomicI64,
    /// Whether a round has verified the whole chain since the start (so [`Self::accepted`] is
    /// known).
    lapped: AtomicBool,
    /// The keeper's last failure, until a later head is kept: the broker refuses releases,
    /// requests and decisions meanwhile (an end it answered may not be remembered).
    unkept: Mutex<Option<String>>,
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
            floor: Mutex::new(Walk::default()),
            keeper: OnceLock::new(),
            accepted: AtomicI64::new(0),
            lapped: AtomicBool::new(false),
            unkept: Mutex::new(None),
        }
    }

    /// Resumes from `head` (the state file, or a head an operator accepted), clearing a break.
    pub fn reset(&self, head: Walk) {
        *self.floor.lock().unwrap_or_else(|p| p.into_inner()) = head.clone();
        *self.state.lock().unwrap_or_else(|p| p.into_inner()) =
            FollowerState { head, broken: None };
    }

    /// Where heads are kept outside the database; set once, before serving.
    pub fn set_keeper(&self, keeper: Arc<dyn HeadKeeper>) {
        let _ = self.keeper.set(keeper);
    }

    /// Makes `head` durable with the keeper (none set: nothing to do). Called, after its
    /// commit, by a transaction that ended something, before it is answered.
    pub async fn keep(&self, head: &Walk) -> Result<(), String> {
        let Some(k) = self.keeper.get() else {
            return Ok(());
        };
        let r = k.keep(head).await;
        *self.unkept.lock().unwrap_or_else(|p| p.into_inner()) = r.as_ref().err().cloned();
        r
    }

    /// Why the last head could not be kept, until a later one is.
    pub fn unkept(&self) -> Option<String> {
        self.unkept
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The position of the last [`ACCEPT_KIND`] entry verified, once a round has verified the
    /// whole chain since the start; `None` before.
    pub fn accepted(&self) -> Option<i64> {
        self.lapped
            .load(Ordering::Acquire)
            .then(|| self.accepted.load(Ordering::Acquire))
    }

    /// Fails closed with `b` (a break found outside the follower's rounds, e.g. by a witness).
    /// Sticky, as every break.
    pub fn fail(&self, b: ChainBreak) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if st.broken.is_none() {
            tracing::error!(
                position = b.position,
                reason = b.reason.as_str(),
                "audit chain broken"
            );
            st.broken = Some(b);
        }
    }

    fn saw(&self, e: &AuditEntry) {
        if e.kind == ACCEPT_KIND {
            self.accepted.fetch_max(e.position, Ordering::AcqRel);
        }
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
        {
            let mut floor = self.floor.lock().unwrap_or_else(|p| p.into_inner());
            if to.position > floor.position {
                *floor = to.clone();
            }
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
        // Taken before this round's first read: every entry committed by then is visible to
        // it, so a chain that does not reach the floor has lost entries this process committed.
        let floor = self.floor.lock().unwrap_or_else(|p| p.into_inner()).clone();
        let mut walk = st.head.clone();
        let mut result = self.advance(tx, sealer, &mut walk, &floor).await?;
        if result.is_ok() && walk.position < floor.position {
            result = Err(ChainBreak {
                position: floor.position,
                reason: BreakReason::Gap,
            });
        }
        if result.is_ok() {
            let budget = if full { i64::MAX } else { self.sweep_per_round };
            let mut sweep = self.sweep.lock().unwrap_or_else(|p| p.into_inner()).clone();
            result = sweep_below(tx, sealer, &mut sweep, &walk, budget, &|e| self.saw(e)).await?;
            *self.sweep.lock().unwrap_or_else(|p| p.into_inner()) = sweep;
            if full && result.is_ok() {
                self.lapped.store(true, Ordering::Release);
            }
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
        floor: &Walk,
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
                if e.position == floor.position && e.hash != floor.hash {
                    return Ok(Err(ChainBreak {
                        position: e.position,
                        reason: BreakReason::Rewritten,
                    }));
                }
                self.saw(e);
            }
        }
    }
}

/// What a witness outside the database (the console) remembers of this broker's chain: the
/// highest head it has been answered, and the last [`ACCEPT_KIND`] entry it had seen then.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Witnessed {
    pub head: Walk,
    pub accepted: i64,
}

impl crate::broker::Broker {
    /// A witness's check: `seen` is what the witness remembers. The entry it names must still
    /// be in the chain (at its position, with its hash, sealed), unless an operator accepted a
    /// head after the witness recorded it (an [`ACCEPT_KIND`] entry after `seen.accepted`):
    /// otherwise the chain is behind what someone outside the database saw, and the broker fails
    /// closed (`witness`, sticky as every break). Answers this replica's verified head and the
    /// last accepted position, for the witness to remember instead.
    pub async fn witness(&self, seen: &Witnessed) -> Result<Witnessed, crate::Error> {
        use crate::error::{Error, ErrorCode};
        self.audit_gate()?;
        let follower = self.audit_follower();
        let Some(accepted) = follower.accepted() else {
            return Err(Error::with_message(
                ErrorCode::DATABASE_UNAVAILABLE,
                "audit log: the chain is still being verified since the start; ask again",
            ));
        };
        if seen.head.position > 0 {
            let unavailable = |e: StorageError| {
                tracing::warn!(error = %e, "audit log read for a witness failed");
                Error::with_message(
                    ErrorCode::DATABASE_UNAVAILABLE,
                    "audit log read: a dependency the broker needs is unavailable",
                )
            };
            let mut tx = self.storage.read().await.map_err(unavailable)?;
            let at = tx
                .audit_entries(seen.head.position - 1, 1)
                .await
                .map_err(unavailable)?;
            drop(tx);
            let held = at.first().is_some_and(|e| {
                e.position == seen.head.position
                    && e.hash == seen.head.hash
                    && check_entry(&self.sealer, e).is_ok()
            });
            if !held {
                if accepted > seen.accepted {
                    tracing::warn!(
                        witnessed = seen.head.position,
                        accepted,
                        "a witness's head is no longer in the chain, but an operator accepted a head since: the witness takes this one"
                    );
                } else {
                    follower.fail(ChainBreak {
                        position: seen.head.position,
                        reason: BreakReason::Witness,
                    });
                    metrics::gauge!("countersign_audit_chain_broken").set(1.0);
                    self.audit_gate()?;
                }
            }
        }
        Ok(Witnessed {
            head: follower.state().head,
            accepted,
        })
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
    saw: &(dyn Fn(&AuditEntry) + Sync),
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
            saw(e);
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

// ----- Offline inspection (`countersign-broker audit verify`) -----

/// One thing an inspection found: where (a position, or a table and id) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub place: String,
    pub why: String,
}

impl std::fmt::Display for Finding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.place, self.why)
    }
}

/// What a verified entry says about its subject.
#[derive(Debug, Clone)]
struct Said {
    position: i64,
    kind: String,
    body: serde_json::Value,
}

/// Checks everything sealed in a database, offline: the whole chain (going on past each break,
/// so every bad entry is named), then each sealed row against its seal and against what the
/// chain's entries say about it, and finally the entries that name a row that is not there.
#[derive(Debug, Default)]
pub struct Inspection {
    walk: Walk,
    entries: i64,
    findings: Vec<Finding>,
    /// Verified entries by subject.
    said: std::collections::HashMap<String, Vec<Said>>,
    /// Subjects whose row was inspected.
    rows: std::collections::HashSet<String>,
    /// A head a replica remembers, and where it comes from.
    remembered: Option<(Walk, String)>,
}

fn at_ms(body: &serde_json::Value) -> Option<i64> {
    body.get("at").and_then(|v| v.as_i64())
}

impl Inspection {
    pub fn new() -> Self {
        Self::default()
    }

    fn find(&mut self, place: impl Into<String>, why: impl Into<String>) {
        self.findings.push(Finding {
            place: place.into(),
            why: why.into(),
        });
    }

    /// The next entry of the chain, in position order.
    pub fn entry(&mut self, sealer: &Sealer, e: &AuditEntry) {
        self.entries += 1;
        let place = format!("position {}", e.position);
        if e.position != self.walk.position + 1 {
            if e.position > self.walk.position + 1 {
                let why = format!(
                    "gap: positions {} to {} are missing",
                    self.walk.position + 1,
                    e.position - 1
                );
                self.find(format!("position {}", self.walk.position + 1), why);
            } else {
                self.find(place.clone(), "gap: out of order");
            }
        }
        let whole = match check_entry(sealer, e) {
            Ok(()) => true,
            Err(BreakReason::Hash) => {
                self.find(
                    place.clone(),
                    "hash: the stored hash is not the hash of the entry's content (edited)",
                );
                false
            }
            Err(_) => {
                self.find(
                    place.clone(),
                    "seal: the seal does not verify over the position and hash (forged or edited)",
                );
                false
            }
        };
        if e.prev_hash != self.walk.hash && e.position == self.walk.position + 1 {
            self.find(
                place.clone(),
                format!(
                    "prev_hash: does not link to position {} (an entry inserted, removed or replaced)",
                    self.walk.position
                ),
            );
        }
        if let Some((head, source)) = &self.remembered
            && head.position == e.position
            && head.hash != e.hash
        {
            let why = format!(
                "rewritten: not the entry {source} remembers at this position ({})",
                head.hash
            );
            self.find(place.clone(), why);
        }
        if whole {
            let body = serde_json::from_str(&e.body).unwrap_or(serde_json::Value::Null);
            self.said.entry(e.subject.clone()).or_default().push(Said {
                position: e.position,
                kind: e.kind.clone(),
                body,
            });
        }
        self.walk = Walk {
            position: e.position,
            hash: e.hash.clone(),
        };
    }

    /// The head of the chain as walked.
    pub fn head(&self) -> &Walk {
        &self.walk
    }

    pub fn entries(&self) -> i64 {
        self.entries
    }

    /// Before the chain: a head a replica remembers (its state file), which the chain must
    /// hold (at its position, with its hash).
    pub fn remember(&mut self, head: Walk, source: impl Into<String>) {
        self.remembered = Some((head, source.into()));
    }

    fn said(&self, subject: &str) -> &[Said] {
        self.said.get(subject).map(|v| v.as_slice()).unwrap_or(&[])
    }

    fn ends_in_log(&self, subject: &str, kinds: &[&str]) -> Option<i64> {
        self.said(subject)
            .iter()
            .find(|s| kinds.contains(&s.kind.as_str()))
            .map(|s| s.position)
    }

    /// A launcher credential row.
    pub fn credential(&mut self, sealer: &Sealer, c: &LauncherCredential) {
        let place = format!("credentials {}", c.id);
        let subject = format!("credential:{}", c.id);
        self.rows.insert(subject.clone());
        if c.seal.is_empty() {
            self.find(
                place.clone(),
                "unsealed (written before seals, or inserted)",
            );
        } else if !sealer.verify_credential(c) {
            self.find(
                place.clone(),
                "seal: does not verify (key, operator, service, record, approver or expiry edited, or the row inserted)",
            );
        }
        let logged = self.ends_in_log(&subject, &["machine_login_end"]);
        match (c.revoked_at, logged) {
            (None, Some(p)) => self.find(
                place,
                format!("revoked at position {p} of the audit log, but the row is not revoked (its end was cleared)"),
            ),
            (Some(_), None) => self.find(
                place,
                "revoked, but no machine_login_end entry in the audit log records it",
            ),
            _ => {}
        }
    }

    /// An enrollment row.
    pub fn enrollment(&mut self, sealer: &Sealer, e: &Enrollment) {
        let place = format!("enrollments {}", e.id);
        let subject = format!("enrollment:{}", e.id);
        self.rows.insert(subject.clone());
        if e.seal.is_empty() {
            self.find(
                place.clone(),
                "unsealed (written before seals, or inserted)",
            );
        } else if !sealer.verify_enrollment(e) {
            self.find(
                place.clone(),
                "seal: does not verify (key, credential, kind, runtime id or operator edited, or the row inserted)",
            );
        }
        let logged = self.ends_in_log(&subject, &["session_end"]);
        match (&e.ended, logged) {
            (None, Some(p)) => self.find(
                place.clone(),
                format!("ended at position {p} of the audit log, but the row is live (its end was cleared)"),
            ),
            (Some(_), None) => self.find(
                place.clone(),
                "ended, but no session_end entry in the audit log records it",
            ),
            _ => {}
        }
        let mut withheld = std::collections::BTreeSet::new();
        for s in self
            .said(&subject)
            .iter()
            .filter(|s| s.kind == "withholding")
        {
            if let Some(names) = s.body.get("names").and_then(|n| n.as_array()) {
                withheld.extend(names.iter().filter_map(|n| n.as_str()).map(str::to_owned));
            }
        }
        let row: std::collections::BTreeSet<String> =
            e.withheld.iter().map(|n| n.as_str().to_owned()).collect();
        if let Some(n) = withheld.difference(&row).next() {
            self.find(
                place.clone(),
                format!("{n} is withheld in the audit log, but not in the row (cleared)"),
            );
        }
        if let Some(n) = row.difference(&withheld).next() {
            self.find(
                place,
                format!("{n} is withheld in the row, but no withholding entry records it"),
            );
        }
    }

    /// A record (a request for approval) and its decision.
    pub fn record(&mut self, sealer: &Sealer, r: &Record) {
        let place = format!("records {}", r.id);
        let subject = format!("record:{}", r.id);
        self.rows.insert(subject.clone());
        if !r.text_verifies() {
            self.find(
                place.clone(),
                "text: the stored text does not hash to the record's id (edited)",
            );
        }
        let logged: Vec<Said> = self
            .said(&subject)
            .iter()
            .filter(|s| s.kind == "decision")
            .cloned()
            .collect();
        match (&r.decided, logged.first()) {
            (Some(d), entry) => {
                if !sealer.verify_decision(
                    &r.id,
                    d.event,
                    &d.by,
                    d.at,
                    d.countersignature.as_ref(),
                    &d.seal,
                ) {
                    self.find(
                        place.clone(),
                        "decision seal: does not verify (decision, who or when edited, or inserted)",
                    );
                }
                if d.event != r.state {
                    self.find(
                        place.clone(),
                        format!(
                            "state {} is not its decision's {}",
                            r.state.as_str(),
                            d.event.as_str()
                        ),
                    );
                }
                match entry {
                    None => self.find(
                        place,
                        "decided, but no decision entry in the audit log records it",
                    ),
                    Some(s) => {
                        let countersigned = d
                            .countersignature
                            .as_ref()
                            .and_then(|c| serde_json::to_value(c).ok());
                        let same = s.body.get("event").and_then(|v| v.as_str())
                            == Some(d.event.as_str())
                            && s.body.get("by").and_then(|v| v.as_str()) == Some(d.by.as_str())
                            && at_ms(&s.body) == Some(d.at.timestamp_millis())
                            && s.body.get("countersignature") == countersigned.as_ref();
                        if !same {
                            self.find(
                                place,
                                format!(
                                    "its decision is not the one the audit log records at position {}",
                                    s.position
                                ),
                            );
                        }
                    }
                }
            }
            (None, Some(s)) => self.find(
                place,
                format!(
                    "decided at position {} of the audit log, but the row is undecided (cleared)",
                    s.position
                ),
            ),
            (None, None) => {}
        }
    }

    /// A grant, with its record when it names one: the grant's seal, its chain (the record's
    /// sealed decision, or policy's sealed automatic decision), and the log's entries for it.
    pub fn grant(&mut self, sealer: &Sealer, g: &Grant, record: Option<&Record>) {
        let place = format!("grants {}", g.id);
        let subject = format!("grant:{}", g.id);
        self.rows.insert(subject.clone());
        if !sealer.verify_grant(g) {
            self.find(
                place.clone(),
                "seal: does not verify (secrets, session, record, approver or lifetime edited, or inserted)",
            );
        } else if !crate::broker::grant_chain_verifies(sealer, g, record) {
            self.find(
                place.clone(),
                "chain: its record's decision or policy's automatic decision does not verify for it",
            );
        }
        let said = self.said(&subject).to_vec();
        match said.iter().find(|s| s.kind == "grant") {
            None => self.find(place.clone(), "no grant entry in the audit log records it"),
            Some(s) => {
                let names: Vec<&str> = g.names.iter().map(|n| n.as_str()).collect();
                let logged: Vec<&str> = s
                    .body
                    .get("names")
                    .and_then(|n| n.as_array())
                    .map(|a| a.iter().filter_map(|n| n.as_str()).collect())
                    .unwrap_or_default();
                let same = logged == names
                    && s.body.get("enrollment").and_then(|v| v.as_str())
                        == Some(g.enrollment_id.to_string().as_str())
                    && s.body.get("expires_at").and_then(|v| v.as_i64())
                        == g.expires_at.map(|t| t.timestamp_millis())
                    && s.body.get("approver").and_then(|v| v.as_str())
                        == g.approver.as_ref().map(|a| a.as_str());
                if !same {
                    self.find(
                        place.clone(),
                        format!(
                            "not the grant the audit log records at position {}",
                            s.position
                        ),
                    );
                }
            }
        }
        let logged = said
            .iter()
            .find(|s| ["revocation", "expiry", "end"].contains(&s.kind.as_str()));
        match (g.end, logged) {
            (None, Some(s)) => self.find(
                place,
                format!(
                    "ended ({}) at position {} of the audit log, but the row is live (its end was cleared)",
                    s.kind, s.position
                ),
            ),
            (Some((end, _)), None) => self.find(
                place,
                format!(
                    "{}, but no entry in the audit log records its end",
                    match end {
                        crate::model::GrantEnd::Revoked => "revoked",
                        crate::model::GrantEnd::Expired => "expired",
                        crate::model::GrantEnd::Ended => "ended",
                    }
                ),
            ),
            _ => {}
        }
    }

    /// A registered passkey: its seal, and the chain's record of its registration (the same
    /// person and key) and removal.
    pub fn passkey(&mut self, sealer: &Sealer, p: &crate::model::Passkey) {
        let place = format!("passkeys {}", p.id);
        let subject = format!("passkey:{}", p.id);
        self.rows.insert(subject.clone());
        if !sealer.verify_passkey(p) {
            self.find(
                place.clone(),
                "seal: does not verify (key, person or flags edited, or the row inserted)",
            );
        }
        let said = self.said(&subject).to_vec();
        match said.iter().find(|s| s.kind == "passkey_registered") {
            None => self.find(
                place.clone(),
                "no passkey_registered entry in the audit log records it",
            ),
            Some(s) => {
                let same = s.body.get("key").and_then(|v| v.as_str()) == Some(p.key.as_str())
                    && s.body.get("person").and_then(|v| v.as_str()) == Some(p.person.as_str());
                if !same {
                    self.find(
                        place.clone(),
                        format!(
                            "its key or person is not what the audit log records at position {}",
                            s.position
                        ),
                    );
                }
            }
        }
        let removed = said.iter().find(|s| s.kind == "passkey_removed");
        match (p.removed_at, removed) {
            (None, Some(s)) => self.find(
                place,
                format!(
                    "removed at position {} of the audit log, but the row is live (cleared)",
                    s.position
                ),
            ),
            (Some(_), None) => self.find(
                place,
                "removed, but no entry in the audit log records its removal",
            ),
            _ => {}
        }
    }

    /// A decision's passkey countersignature verified again, offline, with the key the audit
    /// chain recorded for its passkey (the row's, when the chain has none: that is reported by
    /// [`Inspection::passkey`]).
    pub fn countersignature(
        &mut self,
        settings: Option<&crate::passkey::PasskeySettings>,
        r: &Record,
        passkey: Option<&crate::model::Passkey>,
    ) {
        let Some((d, c)) = r
            .decided
            .as_ref()
            .and_then(|d| d.countersignature.as_ref().map(|c| (d, c)))
        else {
            return;
        };
        let place = format!("records {}", r.id);
        let Some(settings) = settings else {
            self.find(
                place,
                "countersigned, but no [passkeys] settings were given to check it with",
            );
            return;
        };
        let Some(p) = passkey else {
            self.find(
                place,
                format!(
                    "countersigned by passkey {}, which has no row",
                    c.credential
                ),
            );
            return;
        };
        let mut p = p.clone();
        if let Some(key) = self
            .said(&format!("passkey:{}", p.id))
            .iter()
            .find(|s| s.kind == "passkey_registered")
            .and_then(|s| s.body.get("key").and_then(|k| k.as_str()))
        {
            p.key = key.to_owned();
        }
        let statement =
            crate::passkey::Statement::of(r, crate::passkey::Decision::Approve, &d.by, &c.nonce);
        if let Err(e) =
            crate::passkey::verify_countersignature(settings, &p, &statement, c, 0, None)
        {
            self.find(
                place,
                format!(
                    "countersignature: does not verify against its passkey's recorded key ({e})"
                ),
            );
        }
    }

    /// A row that could not be read at all.
    pub fn unreadable(&mut self, table: &str, id: &str, why: &str) {
        self.find(format!("{table} {id}"), format!("unreadable: {why}"));
    }

    /// After every row: entries that name a credential, enrollment, grant or record with no row
    /// (deleted). Answers every finding, in the order found.
    pub fn finish(mut self) -> Vec<Finding> {
        if let Some((head, source)) = self.remembered.take()
            && head.position > self.walk.position
        {
            let why = format!(
                "the database is behind {source}: its chain ends at position {}, {source} remembers position {} ({})",
                self.walk.position, head.position, head.hash
            );
            self.find(format!("position {}", head.position), why);
        }
        let mut missing: Vec<(i64, String)> = self
            .said
            .iter()
            .filter(|(subject, _)| {
                [
                    "credential:",
                    "enrollment:",
                    "grant:",
                    "record:",
                    "passkey:",
                ]
                .iter()
                .any(|p| subject.starts_with(p))
                    && !self.rows.contains(*subject)
            })
            .filter_map(|(subject, said)| said.first().map(|s| (s.position, subject.clone())))
            .collect();
        missing.sort();
        for (position, subject) in missing {
            self.find(
                format!("position {position}"),
                format!("names {subject}, which has no row (deleted)"),
            );
        }
        self.findings
    }
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
