//! [`Exclusive`]: a storage decorator for a database this process alone writes (the embedded
//! SQLite default). It answers the hot reads of authentication from memory and remembers
//! single-use values in memory, which is correct only because no other process writes.
//!
//! - Read transactions answer `get_enrollment`, `get_credential` and `grants_by_enrollment`
//!   from a cache filled on a miss. A write transaction reads the database, except an
//!   enrollment the cache holds (one statement fewer in the writer's turn); when it commits it
//!   drops every cached entry it wrote, before its caller sees the commit; a fill that raced
//!   with such a commit is not kept (entries carry a version checked at fill time).
//! - A key written by a write transaction that has not ended is neither answered from the
//!   cache nor filled: SQLite's writer may hold it uncommitted in its open batch (which a
//!   later member must see), or commit it at any moment. A transaction whose caller went away
//!   while its commit was pending leaves its keys so for good: nothing tells when the batch
//!   committed them, and the cache must not keep what was there before.
//! - `remember_once` (login request objects) refuses a replay from memory: the values seen, in shards
//!   (so that no shard's map grows large enough for its rehash to stall callers); each call
//!   forgets a few lapsed values of its shard, soonest lapsed first. A value new to memory is
//!   then written through to the database, which answers whether it is fresh (it may have been
//!   seen before a restart), and the caller hears that answer only once it is durable.
//! - `remember_proof` (the `jti`s of proofs, one per proof-verified call, and of secret request
//!   objects, whose `iat` is within the skew as a proof's is) keeps most values in memory
//!   only, and refuses their replay after a restart by a *proof horizon* instead: a second `H`,
//!   recorded durably (a value of its own scope in the database's single-use values) before
//!   any proof is accepted at a time after it, such that
//!   1. no proof is accepted while the broker's clock reads a second after `H`, and
//!   2. no proof whose `iat` is after `H` is accepted on memory alone: it is written through.
//!
//!   The horizon moves one second ahead of the clock, written when a call finds the clock past
//!   it: about one write a second under load, batched with any other. At its first call a
//!   process reads the highest horizon its predecessors recorded (its *floor*), and then
//!   - refuses every proof whose `iat` is at or before the floor: a predecessor may have
//!     accepted it on memory alone (1 and 2 bound every such `iat` by the floor): as a replay
//!     when the database holds it, and otherwise as undecided ([`UNDECIDED`]: 503 with
//!     `Retry-After`, so that an honest client signs a fresh proof and asks again, issue 50);
//!     and
//!   - writes through every proof whose `iat` is within the skew after the floor: a
//!     predecessor may have written such a proof through (it accepted proofs until the floor,
//!     with `iat` up to the skew later), and the database decides it, as before.
//!
//!   Past that, a proof whose `iat` is at or before the current horizon is remembered in
//!   memory only. The price: for a second or two after a crash, proofs signed before it
//!   (including honest ones, and those of clients whose clock runs behind the broker's by up
//!   to that long) are refused as undecided, and for the skew after it, proofs cost a write as
//!   they all did before. See `docs/decisions.md` (issue 28).
//!
//!   A graceful stop pays nothing of that: at shutdown ([`Storage::at_shutdown`], after the
//!   last request) the process writes every live value it holds in memory through, in one
//!   transaction, and then records that its horizon is *released* (a value `H:F` of
//!   [`RELEASED_SCOPE`]: its last horizon `H` and the floor `F` it refused below itself). A
//!   successor whose predecessors' highest horizon is a released `H` refuses only at or before
//!   `F` (what a crash before that predecessor may have accepted on memory alone) and lets the
//!   database decide the rest. From the moment the release begins, every proof is written
//!   through.
//!
//! With several replicas (PostgreSQL) do not use it: their writes would not reach this cache,
//! nor their proofs this memory.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasher, RandomState};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::clock::Time;
use crate::ids::{CredentialId, EnrollmentId};
use crate::model::{Enrollment, Grant, LauncherCredential, Passkey, PendingLogin, Record, Request};
use crate::storage::{ProofUse, Storage, StorageDecorator, StorageError, Tx, TxDecorator};

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Enrollment(EnrollmentId),
    Credential(CredentialId),
    Grants(EnrollmentId),
}

#[derive(Debug, Clone)]
enum Value {
    Enrollment(Option<Enrollment>),
    Credential(Option<LauncherCredential>),
    Grants(Vec<Grant>),
}

#[derive(Debug, Default)]
struct Cache {
    /// Every key's version: bumped on each commit that wrote it.
    versions: HashMap<Key, u64>,
    values: HashMap<Key, Value>,
    /// Keys written by write transactions that have not ended (their commit not yet answered,
    /// or not yet dropped), with how many writes each: the open batch of SQLite's writer may
    /// hold them uncommitted, or commit them at any moment, which the cached values do not
    /// show. Neither kind of transaction answers such a key from the cache, nor is it filled.
    /// A transaction whose caller went away while its commit was pending never learns when
    /// (or whether) it committed: its keys stay here, read from the database from then on.
    writing: HashMap<Key, usize>,
}

const MAX_CACHED: usize = 100_000;

impl Cache {
    fn version(&self, k: &Key) -> u64 {
        self.versions.get(k).copied().unwrap_or(0)
    }

    fn fill(&mut self, k: Key, seen: u64, v: Value) {
        if self.version(&k) == seen && !self.writing.contains_key(&k) {
            if self.values.len() >= MAX_CACHED {
                self.values.clear();
            }
            self.values.insert(k, v);
        }
    }

    fn invalidate(&mut self, keys: &[Key]) {
        for k in keys {
            *self.versions.entry(k.clone()).or_insert(0) += 1;
            self.values.remove(k);
        }
    }

    /// The cached value of `k`, unless a write transaction that has not ended wrote it.
    fn clean(&self, k: &Key) -> Option<&Value> {
        if self.writing.contains_key(k) {
            return None;
        }
        self.values.get(k)
    }

    fn begin_write(&mut self, k: &Key) {
        *self.writing.entry(k.clone()).or_insert(0) += 1;
    }

    /// A write transaction that wrote `keys` has ended (its commit answered, or dropped before
    /// committing, which rolls back): what it wrote is no longer cached, nor being written.
    fn end_writes(&mut self, keys: &[Key]) {
        self.invalidate(keys);
        for k in keys {
            if let Some(n) = self.writing.get_mut(k) {
                *n -= 1;
                if *n == 0 {
                    self.writing.remove(k);
                }
            }
        }
    }
}

/// Single-use values, each with the time until which it is remembered, and a min-heap on that
/// time so that lapsed values leave a few at a time on every call: no sweep of the whole map
/// (which, at a few hundred thousand values, stalled every caller behind this lock).
#[derive(Debug, Default)]
struct Once {
    seen: HashMap<Arc<str>, Time>,
    lapsing: BinaryHeap<Reverse<(Time, Arc<str>)>>,
}

/// Shards of the single-use values. At a few hundred thousand values remembered (a busy
/// minute), one map's rehash on growth held its lock for tens of milliseconds.
const ONCE_SHARDS: usize = 64;

/// How many lapsed values one call may forget: more than the one it adds, so the heap keeps up.
const FORGET_PER_CALL: usize = 8;

impl Once {
    fn forget_lapsed(&mut self, now: Time) {
        for _ in 0..FORGET_PER_CALL {
            match self.lapsing.peek() {
                Some(Reverse((t, _))) if *t < now => {}
                _ => return,
            }
            if let Some(Reverse((t, key))) = self.lapsing.pop()
                && self.seen.get(&key) == Some(&t)
            {
                self.seen.remove(&key);
            }
        }
    }
}

/// The storage error's text for a proof dated at or before the floor that the database does not
/// hold: the broker cannot yet tell it from a replay (see [`Exclusive`]'s notes).
pub const UNDECIDED: &str = "proof dated before this process's floor: undecided";

/// The scope under which the proof horizon is recorded among the single-use values (a proof's
/// scope is `session:…` or `launcher:…`, a request object's `request:…` or a login's: none is
/// this).
pub const HORIZON_SCOPE: &str = "proof-horizon";

/// The scope under which a process that stopped gracefully records that its horizon is
/// released: `H:F`, its last horizon and the floor it inherited (see the module's notes).
pub const RELEASED_SCOPE: &str = "proof-horizon-released";

/// What a process inherits from its predecessors, read once at its first proof.
#[derive(Debug, Clone, Copy)]
struct Floor {
    /// Proofs whose `iat` is at or before it are refused (a predecessor may have accepted them
    /// on memory alone).
    refuse: i64,
    /// The predecessors' highest horizon: proofs whose `iat` is within the skew after it (or
    /// before it) are written through, so that the database decides them.
    horizon: i64,
}

/// The decorator.
#[derive(Debug)]
pub struct Exclusive<S> {
    inner: Arc<S>,
    cache: Arc<Mutex<Cache>>,
    once: Box<[Mutex<Once>]>,
    shard_of: RandomState,
    /// What the predecessors left: read once, at the first proof.
    floor: OnceLock<Floor>,
    /// The highest horizon this process has recorded durably (`i64::MIN`: none yet).
    horizon: AtomicI64,
    /// Until when (ms since the epoch) the highest horizon's row is kept.
    horizon_until: AtomicI64,
    /// Set when the shutdown's release begins: every proof is then written through.
    released: AtomicBool,
}

impl<S: Storage> Exclusive<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner: Arc::new(inner),
            cache: Arc::default(),
            once: (0..ONCE_SHARDS).map(|_| Mutex::default()).collect(),
            shard_of: RandomState::new(),
            floor: OnceLock::new(),
            horizon: AtomicI64::new(i64::MIN),
            horizon_until: AtomicI64::new(i64::MIN),
            released: AtomicBool::new(false),
        }
    }

    /// The proof horizon this process has recorded, if any (seconds since the epoch).
    pub fn proof_horizon(&self) -> Option<i64> {
        Some(self.horizon.load(Ordering::Acquire)).filter(|h| *h != i64::MIN)
    }

    /// What the predecessors left: their highest horizon, and below what to refuse (that
    /// horizon, unless the process that recorded it released it at a graceful stop). Read from
    /// the database at the first proof.
    async fn floor(&self, now: Time) -> Result<Floor, StorageError> {
        if let Some(f) = self.floor.get() {
            return Ok(*f);
        }
        let number = |v: &str| {
            v.parse::<i64>().map_err(|_| {
                StorageError::Other(format!("the proof horizon {v:?} is not a number"))
            })
        };
        let mut horizon = i64::MIN;
        for v in self.inner.remembered(HORIZON_SCOPE, now).await? {
            horizon = horizon.max(number(&v)?);
        }
        let mut refuse = horizon;
        if horizon != i64::MIN {
            for v in self.inner.remembered(RELEASED_SCOPE, now).await? {
                let (h, f) = v.split_once(':').ok_or_else(|| {
                    StorageError::Other(format!("the released horizon {v:?} is not H:F"))
                })?;
                if number(h)? == horizon {
                    refuse = number(f)?;
                }
            }
        }
        // The first value set wins: it was read before any horizon of this process was
        // recorded (recording waits for the floor), so it is the predecessors' alone.
        Ok(*self.floor.get_or_init(|| Floor { refuse, horizon }))
    }

    /// Makes the recorded horizon at least `to`, durably, before answering.
    async fn advance_horizon(&self, to: i64, use_: &ProofUse<'_>) -> Result<(), StorageError> {
        if self.horizon.load(Ordering::Acquire) >= to {
            return Ok(());
        }
        // Kept as long as a proof with an `iat` at the horizon could be accepted.
        let keep = (use_.until - use_.now).max(chrono::TimeDelta::seconds(use_.skew));
        let until = chrono::DateTime::from_timestamp(to, 0)
            .and_then(|t| t.checked_add_signed(keep))
            .ok_or_else(|| StorageError::Other(format!("proof horizon {to} out of range")))?;
        // Fresh or already recorded, the row stands once this answers.
        self.inner
            .remember_once(HORIZON_SCOPE, &to.to_string(), until, use_.now)
            .await?;
        self.horizon.fetch_max(to, Ordering::AcqRel);
        self.horizon_until
            .fetch_max(until.timestamp_millis(), Ordering::AcqRel);
        Ok(())
    }

    /// The release at a graceful stop (see the module's notes): every live value held in
    /// memory alone is written through, then the horizon is recorded as released.
    async fn release(&self, now: Time) -> Result<(), StorageError> {
        // Before the snapshot: a proof remembered after it sees the flag and is written
        // through (the flag is read after the value enters memory).
        self.released.store(true, Ordering::SeqCst);
        let mut live: Vec<(Arc<str>, Time)> = Vec::new();
        for shard in &self.once {
            let once = lock(shard);
            live.extend(
                once.seen
                    .iter()
                    .filter(|(_, t)| **t >= now)
                    .map(|(k, t)| (k.clone(), *t)),
            );
        }
        let values: Vec<(&str, &str, Time)> = live
            .iter()
            .filter_map(|(k, t)| k.split_once('\0').map(|(s, v)| (s, v, *t)))
            .collect();
        self.inner.remember_all(&values, now).await?;
        let horizon = self.horizon.load(Ordering::SeqCst);
        let Some(floor) = self.floor.get() else {
            // No proof was ever accepted: nothing in memory alone.
            return Ok(());
        };
        if horizon == i64::MIN {
            return Ok(());
        }
        let until =
            chrono::DateTime::from_timestamp_millis(self.horizon_until.load(Ordering::SeqCst))
                .ok_or_else(|| {
                    StorageError::Other("the horizon's keeping is out of range".into())
                })?;
        self.inner
            .remember_once(
                RELEASED_SCOPE,
                &format!("{horizon}:{}", floor.refuse),
                until,
                now,
            )
            .await?;
        tracing::info!(
            values = values.len(),
            horizon,
            "proof values kept at shutdown; the proof horizon is released"
        );
        Ok(())
    }

    /// Remembers `key` in memory until `until`: `false` when it is there and live (a replay).
    fn remember_in_memory(&self, key: &Arc<str>, until: Time, now: Time) -> bool {
        let mut once = lock(&self.once[self.shard(key)]);
        once.forget_lapsed(now);
        match once.seen.get(key) {
            Some(t) if *t >= now => false,
            _ => {
                once.seen.insert(key.clone(), until);
                once.lapsing.push(Reverse((until, key.clone())));
                true
            }
        }
    }

    /// Forgets `key` remembered until `until` (nothing may be stored for it).
    fn forget_in_memory(&self, key: &Arc<str>, until: Time) {
        let mut once = lock(&self.once[self.shard(key)]);
        if once.seen.get(key) == Some(&until) {
            once.seen.remove(key);
        }
    }

    fn shard(&self, key: &Arc<str>) -> usize {
        self.shard_of.hash_one(key) as usize % ONCE_SHARDS
    }

    /// Writes a value new to memory through to the database, which decides (it may have been
    /// seen before a restart); the caller hears only once it is durable.
    async fn write_through(
        &self,
        key: &Arc<str>,
        scope: &str,
        value: &str,
        until: Time,
        now: Time,
    ) -> Result<bool, StorageError> {
        let fresh = self.inner.remember_once(scope, value, until, now).await;
        if fresh.is_err() {
            // Nothing may be stored: do not refuse the value as a replay next time.
            self.forget_in_memory(key, until);
        }
        fresh
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// How many single-use values are remembered now (lapsed ones not yet forgotten included).
    pub fn remembered_values(&self) -> usize {
        self.once.iter().map(|s| lock(s).seen.len()).sum()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<S: Storage> StorageDecorator for Exclusive<S> {
    type Wrapped = S;

    fn wrapped(&self) -> &S {
        &self.inner
    }

    async fn begin(&self) -> Result<Box<dyn Tx>, StorageError> {
        Ok(Box::new(WriteTx {
            inner: Some(self.inner.begin().await?),
            cache: self.cache.clone(),
            written: Vec::new(),
            committing: false,
        }))
    }

    async fn read(&self) -> Result<Box<dyn Tx>, StorageError> {
        Ok(Box::new(ReadTx {
            storage: self.inner.clone(),
            inner: None,
            cache: self.cache.clone(),
        }))
    }

    /// As [`Storage::snapshot`]'s default: a read, served through the cache.
    async fn snapshot(&self) -> Result<Box<dyn Tx>, StorageError> {
        StorageDecorator::read(self).await
    }

    async fn remember_once(
        &self,
        scope: &str,
        value: &str,
        until: Time,
        now: Time,
    ) -> Result<bool, StorageError> {
        let key: Arc<str> = format!("{scope}\0{value}").into();
        if !self.remember_in_memory(&key, until, now) {
            return Ok(false);
        }
        self.write_through(&key, scope, value, until, now).await
    }

    async fn remember_proof(&self, use_: ProofUse<'_>) -> Result<bool, StorageError> {
        let floor = self.floor(use_.now).await?;
        if use_.iat <= floor.refuse {
            // A predecessor may have accepted it on memory alone. One the database holds is a
            // replay (refused as one); any other cannot be told from an honest proof signed
            // just before the restart: undecided, answered 503 so that its client signs a
            // fresh proof and asks again, never 401, which would blame it.
            let fresh = self
                .inner
                .remember_once(use_.scope, use_.jti, use_.until, use_.now)
                .await?;
            return if fresh {
                Err(StorageError::Unavailable(UNDECIDED.into()))
            } else {
                Ok(false)
            };
        }
        // (1): the horizon covers the clock's second (and the next, so that a call early in a
        // second finds it recorded) before anything is accepted now.
        let second = use_.now.timestamp();
        if self.horizon.load(Ordering::Acquire) < second {
            self.advance_horizon(second.saturating_add(1), &use_)
                .await?;
        }
        let key: Arc<str> = format!("{}\0{}", use_.scope, use_.jti).into();
        if !self.remember_in_memory(&key, use_.until, use_.now) {
            return Ok(false);
        }
        // (2), what a predecessor may have written through (or released), and anything once
        // the release has begun.
        let beyond_horizon = use_.iat > self.horizon.load(Ordering::Acquire);
        let near_floor = use_.iat <= floor.horizon.saturating_add(use_.skew);
        if beyond_horizon || near_floor || self.released.load(Ordering::SeqCst) {
            return self
                .write_through(&key, use_.scope, use_.jti, use_.until, use_.now)
                .await;
        }
        Ok(true)
    }

    async fn at_shutdown(&self, now: Time) -> Result<(), StorageError> {
        self.release(now).await?;
        self.inner.at_shutdown(now).await
    }
}

/// A write transaction: reads the database, except an enrollment the cache holds and no write
/// transaction that has not ended wrote; remembers what it wrote for invalidation.
struct WriteTx {
    /// `None` once committed.
    inner: Option<Box<dyn Tx>>,
    cache: Arc<Mutex<Cache>>,
    written: Vec<Key>,
    /// Its commit was asked for and has not answered.
    committing: bool,
}

impl WriteTx {
    fn wrote(&mut self, k: Key) {
        lock(&self.cache).begin_write(&k);
        self.written.push(k);
    }
}

impl Drop for WriteTx {
    /// Dropped without committing (its writes roll back), after its commit answered, or while
    /// its commit was pending (its caller gone): then the batch may still commit its writes at
    /// any moment, so its keys stay being written (see [`Cache::writing`]).
    fn drop(&mut self) {
        if self.written.is_empty() {
            return;
        }
        let written = std::mem::take(&mut self.written);
        let mut cache = lock(&self.cache);
        if self.committing {
            cache.invalidate(&written);
        } else {
            cache.end_writes(&written);
        }
    }
}

/// A read transaction: answers cached reads from memory, opens the database only on a miss.
struct ReadTx<S> {
    storage: Arc<S>,
    inner: Option<Box<dyn Tx>>,
    cache: Arc<Mutex<Cache>>,
}

impl<S: Storage> ReadTx<S> {
    /// A cached read: from memory, or else `read` from the database and kept, unless a commit
    /// wrote the key in between.
    async fn cached<T: Cached>(
        &mut self,
        k: Key,
        read: impl for<'t> FnOnce(&'t mut dyn Tx) -> TxFuture<'t, T> + Send,
    ) -> Result<T, StorageError> {
        let seen = {
            let c = lock(&self.cache);
            match c.clean(&k) {
                Some(v) => {
                    return T::from_value(v.clone())
                        .ok_or_else(|| StorageError::Other("cache kind".into()));
                }
                None => c.version(&k),
            }
        };
        let v = read(self.wrapped().await?).await?;
        lock(&self.cache).fill(k, seen, v.clone().into_value());
        Ok(v)
    }
}

fn committed() -> StorageError {
    StorageError::Other("the write transaction was committed".into())
}

/// A database read's future, as `Tx`'s methods answer it.
type TxFuture<'t, T> =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<T, StorageError>> + Send + 't>>;

/// An answer the cache keeps, as its [`Value`].
trait Cached: Clone + Send {
    fn into_value(self) -> Value;
    fn from_value(v: Value) -> Option<Self>;
}

macro_rules! cached {
    ($($variant:ident($t:ty)),*) => {$(
        impl Cached for $t {
            fn into_value(self) -> Value {
                Value::$variant(self)
            }
            fn from_value(v: Value) -> Option<Self> {
                match v {
                    Value::$variant(v) => Some(v),
                    _ => None,
                }
            }
        }
    )*};
}

cached!(
    Enrollment(Option<Enrollment>),
    Credential(Option<LauncherCredential>),
    Grants(Vec<Grant>)
);

impl<S: Storage> TxDecorator for ReadTx<S> {
    /// Opens the database's read transaction on the first read it does not answer itself.
    async fn wrapped(&mut self) -> Result<&mut dyn Tx, StorageError> {
        if self.inner.is_none() {
            self.inner = Some(self.storage.read().await?);
        }
        match self.inner.as_mut() {
            Some(t) => Ok(t.as_mut()),
            None => Err(StorageError::Other("read transaction".into())),
        }
    }

    async fn commit(self: Box<Self>) -> Result<(), StorageError> {
        match self.inner {
            Some(t) => t.commit().await,
            None => Ok(()),
        }
    }

    async fn get_credential(
        &mut self,
        id: CredentialId,
    ) -> Result<Option<LauncherCredential>, StorageError> {
        self.cached(Key::Credential(id), |tx| tx.get_credential(id))
            .await
    }

    async fn get_enrollment(
        &mut self,
        id: EnrollmentId,
    ) -> Result<Option<Enrollment>, StorageError> {
        self.cached(Key::Enrollment(id), |tx| tx.get_enrollment(id))
            .await
    }

    async fn grants_by_enrollment(
        &mut self,
        enrollment: EnrollmentId,
    ) -> Result<Vec<Grant>, StorageError> {
        self.cached(Key::Grants(enrollment), |tx| {
            tx.grants_by_enrollment(enrollment)
        })
        .await
    }

    async fn put_credential(&mut self, _: &LauncherCredential) -> Result<(), StorageError> {
        Err(StorageError::Other("write in a read transaction".into()))
    }
    async fn put_login(&mut self, _: &PendingLogin) -> Result<(), StorageError> {
        Err(StorageError::Other("write in a read transaction".into()))
    }
    async fn put_record(&mut self, _: &Record) -> Result<(), StorageError> {
        Err(StorageError::Other("write in a read transaction".into()))
    }
    async fn put_enrollment(&mut self, _: &Enrollment) -> Result<(), StorageError> {
        Err(StorageError::Other("write in a read transaction".into()))
    }
    async fn put_request(&mut self, _: &Request) -> Result<(), StorageError> {
        Err(StorageError::Other("write in a read transaction".into()))
    }
    async fn put_grant(&mut self, _: &Grant) -> Result<(), StorageError> {
        Err(StorageError::Other("write in a read transaction".into()))
    }
    async fn put_passkey(&mut self, _: &Passkey) -> Result<(), StorageError> {
        Err(StorageError::Other("write in a read transaction".into()))
    }
}

impl TxDecorator for WriteTx {
    async fn wrapped(&mut self) -> Result<&mut dyn Tx, StorageError> {
        match self.inner.as_mut() {
            Some(t) => Ok(t.as_mut()),
            None => Err(committed()),
        }
    }

    async fn commit(self: Box<Self>) -> Result<(), StorageError> {
        let mut this = *self;
        this.committing = true;
        let result = match this.inner.take() {
            Some(inner) => inner.commit().await,
            None => Err(committed()),
        };
        this.committing = false;
        // Drop what was written whether or not the commit reported success: after an unknown
        // outcome the database is the truth (`Drop` ends the writes).
        drop(this);
        result
    }

    /// From the cache when it holds the enrollment and no write transaction that has not ended
    /// wrote it (SQLite's writer runs one write transaction at a time, so the cache is the
    /// committed state and the open batch's writes are exactly those not ended); else from the
    /// database, which shows the batch's writes. An automatic request's turn at the writer then
    /// sends one statement fewer.
    async fn get_enrollment(
        &mut self,
        id: EnrollmentId,
    ) -> Result<Option<Enrollment>, StorageError> {
        let cached = lock(&self.cache)
            .clean(&Key::Enrollment(id))
            .cloned()
            .and_then(Option::<Enrollment>::from_value);
        match cached {
            Some(e) => Ok(e),
            None => self.wrapped().await?.get_enrollment(id).await,
        }
    }

    async fn put_credential(&mut self, c: &LauncherCredential) -> Result<(), StorageError> {
        self.wrote(Key::Credential(c.id));
        self.wrapped().await?.put_credential(c).await
    }

    async fn put_enrollment(&mut self, e: &Enrollment) -> Result<(), StorageError> {
        self.wrote(Key::Enrollment(e.id));
        self.wrapped().await?.put_enrollment(e).await
    }

    async fn put_grant(&mut self, g: &Grant) -> Result<(), StorageError> {
        self.wrote(Key::Grants(g.enrollment_id));
        self.wrapped().await?.put_grant(g).await
    }
}
