//! A replica's memory of the chain: the follower that verifies new entries as they come and
//! sweeps the older ones again, and a witness's check of a remembered head.

use super::*;

/// Entries a follower's round re-verifies below its head (see [`Follower::step`]).
pub const SWEEP_PER_ROUND: i64 = 1_000;

/// The follower's memory: the highest entry this process has verified, and the break that
/// made it fail closed, if any. Kept in memory and, by the server, in a local state file.
/// Below the head, a sweep walks the chain again from its start, a bounded number of entries
/// a round, and starts over when it reaches the head.
#[derive(Debug)]
pub struct Follower {
    pub(super) state: Mutex<FollowerState>,
    sweep: Mutex<Walk>,
    sweep_per_round: i64,
    /// This process's committed appends that did not chain to the head when they committed
    /// (transactions of one group commit resume in any order), by the position they chain
    /// from: applied as soon as the head reaches them. Bounded: past [`PENDING_MAX`] ranges
    /// the oldest are dropped and the follower's round verifies those entries instead.
    pub(super) pending: Mutex<std::collections::BTreeMap<i64, (String, Walk)>>,
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
