//! [`Broker`]: one method per operation of the spec. Each state transition runs in one storage
//! transaction; rows it reads are locked, so concurrent deciders serialise and the losers see
//! the winner's outcome and get the spec's code.

pub mod approver;
mod auth;
mod cascade;
mod destroy;
mod enroll;
pub mod guard;
pub mod issued;
mod login;
mod operator;
mod outbox;
pub mod passkeys;
mod requests;
mod sweep;

use std::sync::{Arc, RwLock};

pub use approver::{Approved, GrantListItem};
pub use auth::ProofTarget;
pub use issued::{DestroyReport, IssuedSecret, ReconcileReport};
pub use login::{MachineLoginStarted, PollState};
pub use passkeys::{Registration, RegistrationOffer, StatementOffer};
pub use requests::{CreatedRequest, EnrollInput, Released, grant_chain_verifies};
pub use sweep::SweepReport;

use crate::clock::{Clock, Entropy, Time, random, to_millis};
use crate::config::BrokerConfig;
use crate::error::{Error, ErrorCode};
use crate::identity::TokenVerifier;
use crate::policy::{Policy, Refusal};
use crate::seal::Sealer;
use crate::secrets::{Inspection, SecretStore};
use crate::storage::{Storage, StorageError};

/// Why a transaction body stopped: a refusal for the client, or a storage failure.
#[derive(Debug)]
pub(crate) enum Fail {
    Refuse(Error),
    Storage(StorageError),
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        Fail::Refuse(e)
    }
}

impl From<ErrorCode> for Fail {
    fn from(c: ErrorCode) -> Self {
        Fail::Refuse(c.into())
    }
}

impl From<StorageError> for Fail {
    fn from(e: StorageError) -> Self {
        Fail::Storage(e)
    }
}

/// Runs `$body` (an expression using `$tx: &mut dyn Tx`, returning `Result<_, Fail>`) in a write
/// transaction, committing on success, retrying on a storage conflict after the shared backoff
/// (`countersign_common::storage`), up to its attempts; then DATABASE_UNAVAILABLE.
macro_rules! transact {
    ($self:expr, $step:expr, |$tx:ident| $body:expr) => {{
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let mut guard = match $self.storage.begin().await {
                Ok(t) => t,
                Err(e) => break Err($self.fail(crate::broker::Fail::Storage(e), $step)),
            };
            let result: Result<_, crate::broker::Fail> = {
                let $tx: &mut dyn crate::storage::Tx = &mut *guard;
                async { $body }.await
            };
            // Every outcome but a conflict is answered; a conflict is run again, after the
            // shared backoff, and once the attempts are spent answered 503 (`Broker::fail`), as
            // the console answers it.
            match result {
                Ok(v) => match guard.commit().await {
                    Ok(()) => break Ok(v),
                    Err(crate::storage::StorageError::Conflict) => {}
                    Err(e) => break Err($self.fail(crate::broker::Fail::Storage(e), $step)),
                },
                Err(crate::broker::Fail::Storage(crate::storage::StorageError::Conflict)) => {
                    drop(guard)
                }
                Err(f) => break Err($self.fail(f, $step)),
            }
            if attempts < countersign_common::storage::TRANSACT_ATTEMPTS {
                let _ = $self.storage.back_off(attempts).await;
                continue;
            }
            tracing::warn!(
                attempts,
                step = $step,
                "a write conflict outlived its retries"
            );
            break Err($self.fail(
                crate::broker::Fail::Storage(crate::storage::StorageError::Conflict),
                $step,
            ));
        }
    }};
}

/// Counts a person's decision on a record once it has committed, with how long the record
/// waited for it (`docs/metrics.md`).
pub(crate) fn count_decision(
    kind: crate::model::RecordKind,
    decision: &'static str,
    requested_at: Time,
    now: Time,
) {
    let waited = (now - requested_at).num_milliseconds().max(0) as f64 / 1000.0;
    metrics::counter!("countersign_decisions_total", "kind" => kind.as_str(), "decision" => decision)
        .increment(1);
    metrics::histogram!("countersign_approval_wait_seconds", "kind" => kind.as_str(), "decision" => decision)
        .record(waited);
}

/// Runs `$body` in a read-only transaction.
macro_rules! read {
    ($self:expr, $step:expr, |$tx:ident| $body:expr) => {{
        match $self.storage.read().await {
            Err(e) => Err($self.fail(crate::broker::Fail::Storage(e), $step)),
            Ok(mut guard) => {
                let result: Result<_, crate::broker::Fail> = {
                    let $tx: &mut dyn crate::storage::Tx = &mut *guard;
                    async { $body }.await
                };
                result.map_err(|f| $self.fail(f, $step))
            }
        }
    }};
}

pub(crate) use {read, transact};

/// The parts a broker runs on.
#[derive(Debug, Clone)]
pub struct Parts {
    pub storage: Arc<dyn Storage>,
    pub store: Arc<dyn SecretStore>,
    pub clock: Arc<dyn Clock>,
    pub entropy: Arc<dyn Entropy>,
    pub tokens: Option<Arc<dyn TokenVerifier>>,
}

/// The policy as last loaded, with the refusals seen.
#[derive(Debug, Clone, Default)]
pub struct PolicyState {
    pub policy: Arc<Policy>,
    pub refused: Vec<(crate::ids::SecretName, Refusal)>,
    pub loaded_at: Option<Time>,
}

/// The secrets broker.
#[derive(Debug)]
pub struct Broker {
    pub(crate) storage: Arc<dyn Storage>,
    pub(crate) store: Arc<dyn SecretStore>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) entropy: Arc<dyn Entropy>,
    pub(crate) tokens: Option<Arc<dyn TokenVerifier>>,
    pub(crate) sealer: Sealer,
    pub(crate) config: BrokerConfig,
    policy: RwLock<PolicyState>,
    /// Parsed public keys by thumbprint: a key never changes, and parsing it costs a curve check.
    keys: std::sync::Mutex<std::collections::HashMap<String, countersign_proto::VerifyingKey>>,
    /// The policy epoch this broker last loaded at (see [`Broker::follow_policy_epoch`]).
    seen_epoch: std::sync::atomic::AtomicI64,
    /// The highest audit log entry this process has verified, and whether the chain broke.
    audit: Arc<crate::audit::Follower>,
    /// The declared issued secrets ([`issued`]).
    issuers: RwLock<issued::Issuers>,
    /// Set when a transaction of this process queued a credential's destroy, so that the
    /// destroyer runs at once instead of at its next poll.
    destroy_queued: Arc<std::sync::atomic::AtomicBool>,
    /// How long a claimed destroy is held ([`Broker::set_destroy_lease`]), in milliseconds.
    destroy_lease_ms: std::sync::atomic::AtomicI64,
}

impl Broker {
    /// A broker over `parts`, sealing with `sealer`. The policy starts empty: call
    /// [`Broker::reload_policy`] before serving.
    pub fn new(parts: Parts, sealer: Sealer, config: BrokerConfig) -> Self {
        // Every transaction runs through the guard: seals on credentials and enrollments, and
        // the audit log appended with the changes it records.
        let audit = Arc::new(crate::audit::Follower::default());
        let destroy_queued = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let storage: Arc<dyn Storage> = Arc::new(guard::Guarded::new(
            parts.storage,
            sealer.clone(),
            parts.clock.clone(),
            audit.clone(),
            destroy_queued.clone(),
        ));
        Self {
            storage,
            store: parts.store,
            clock: parts.clock,
            entropy: parts.entropy,
            tokens: parts.tokens,
            sealer,
            config,
            policy: RwLock::new(PolicyState::default()),
            keys: Default::default(),
            seen_epoch: std::sync::atomic::AtomicI64::new(i64::MIN),
            audit,
            issuers: Default::default(),
            destroy_queued,
            destroy_lease_ms: std::sync::atomic::AtomicI64::new(
                issued::DESTROY_LEASE.num_milliseconds(),
            ),
        }
    }

    /// The audit log follower: what this process has verified of the chain.
    pub fn audit_follower(&self) -> &crate::audit::Follower {
        &self.audit
    }

    /// The sealing key (for offline verification of the audit log).
    pub fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    /// One round of the audit follower (the server runs it every second, `full` at start and
    /// every minute): verifies the entries above the remembered head and advances (with
    /// `full`, the whole chain again); a break (a deleted tail, an edited or missing entry)
    /// makes the broker fail closed until an operator intervenes.
    pub async fn follow_audit(&self, full: bool) -> Result<crate::audit::FollowerState, Error> {
        let mut tx = self
            .storage
            .read()
            .await
            .map_err(|e| self.fail(Fail::Storage(e), "audit log read"))?;
        let st = self
            .audit
            .step(&mut *tx, &self.sealer, full)
            .await
            .map_err(|e| self.fail(Fail::Storage(e), "audit log read"))?;
        metrics::gauge!("countersign_audit_chain_broken").set(if st.broken.is_some() {
            1.0
        } else {
            0.0
        });
        metrics::gauge!("countersign_audit_head_position").set(st.head.position as f64);
        Ok(st)
    }

    /// Refuses while the audit chain is broken: DATABASE_UNAVAILABLE, step `audit log`.
    pub(crate) fn audit_gate(&self) -> Result<(), Error> {
        if let Some(why) = self.audit.unkept() {
            return Err(Error::with_message(
                ErrorCode::DATABASE_UNAVAILABLE,
                format!(
                    "audit log: {} (this replica's memory of the head cannot be written: {why})",
                    ErrorCode::DATABASE_UNAVAILABLE.message()
                ),
            ));
        }
        match self.audit.broken() {
            None => Ok(()),
            Some(b) => Err(Error::with_message(
                ErrorCode::DATABASE_UNAVAILABLE,
                format!(
                    "audit log: {} (the chain breaks at {b})",
                    ErrorCode::DATABASE_UNAVAILABLE.message()
                ),
            )),
        }
    }

    /// After the last request of a graceful stop: the storage keeps what it held in memory
    /// alone ([`Storage::at_shutdown`]), so that the next process refuses nothing honest.
    pub async fn at_shutdown(&self) {
        if let Err(e) = self.storage.at_shutdown(self.now()).await {
            tracing::error!(error = %e, "storage: what was kept in memory was not written at shutdown");
        }
    }

    pub fn config(&self) -> &BrokerConfig {
        &self.config
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    pub fn storage(&self) -> &Arc<dyn Storage> {
        &self.storage
    }

    pub fn store(&self) -> &Arc<dyn SecretStore> {
        &self.store
    }

    pub fn has_token_issuer(&self) -> bool {
        self.tokens.is_some()
    }

    /// The clock's time, at the precision stored.
    pub fn now(&self) -> Time {
        to_millis(self.clock.now())
    }

    /// The current policy.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .policy
            .clone()
    }

    pub fn policy_state(&self) -> PolicyState {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn set_policy(&self, state: PolicyState) {
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) = state;
    }

    /// Loads the policy from the store. On failure the last good policy stays.
    pub async fn reload_policy(&self) -> Result<Arc<Policy>, crate::secrets::StoreError> {
        let listing = self.store.list().await?;
        let issued = self.issued_secrets();
        // A declared issued secret is served as declared, whatever the store holds by its name.
        let stored = listing
            .served
            .into_iter()
            .filter(|e| !issued.iter().any(|s| s.name == e.name));
        let policy = Arc::new(Policy::new(
            stored.chain(issued.iter().map(issued::IssuedSecret::entry)),
        ));
        self.set_policy(PolicyState {
            policy: policy.clone(),
            refused: listing.refused,
            loaded_at: Some(self.now()),
        });
        Ok(policy)
    }

    /// Rereads one secret from the store and applies the change at once. Answers whether it
    /// is now served and, if not, why.
    pub async fn reread(
        &self,
        name: &crate::ids::SecretName,
    ) -> Result<(bool, Option<Refusal>), Error> {
        if self.issuer_of(name).is_some() {
            // Declared, not read: nothing in a store to reread.
            return Ok((true, None));
        }
        let inspection = self.store.inspect(name).await.map_err(|e| {
            // The store did not answer (timeout, unreachable): the reread ended before it
            // finished; the last good policy stays and the caller may send it again.
            tracing::warn!(error = %e, secret = %name, "reread failed");
            Error::new(ErrorCode::REQUEST_ENDED)
        })?;
        let mut state = self.policy_state();
        let (entry, answer) = match inspection {
            Inspection::Served(e) => (Some(e), (true, None)),
            Inspection::Refused(r) => (None, (false, Some(r))),
        };
        state.policy = Arc::new(state.policy.with_entry(name, entry));
        state.refused.retain(|(n, _)| n != name);
        if let (false, Some(r)) = answer {
            state.refused.push((name.clone(), r));
        }
        self.set_policy(state);
        // Tell the other replicas sharing the database: they reload when they see the epoch move.
        match self.storage.bump_policy_epoch().await {
            Ok(epoch) => self
                .seen_epoch
                .store(epoch, std::sync::atomic::Ordering::SeqCst),
            Err(e) => {
                tracing::warn!(error = %e, "could not publish the policy change to other replicas")
            }
        }
        Ok(answer)
    }

    /// Reloads the policy when another replica published a change (a reread) since this broker
    /// last looked. Answers whether it reloaded. The server calls it every second or two.
    pub async fn follow_policy_epoch(&self) -> Result<bool, Error> {
        use std::sync::atomic::Ordering;
        let epoch = self
            .storage
            .policy_epoch()
            .await
            .map_err(|e| self.fail(Fail::Storage(e), "policy epoch read"))?;
        let seen = self.seen_epoch.load(Ordering::SeqCst);
        if seen == i64::MIN {
            self.seen_epoch.store(epoch, Ordering::SeqCst);
            return Ok(false);
        }
        if epoch == seen {
            return Ok(false);
        }
        self.reload_policy().await.map_err(|e| {
            tracing::warn!(error = %e, "policy reload after another replica's reread failed");
            Error::with_message(
                ErrorCode::DATABASE_UNAVAILABLE,
                "secret store read: unavailable",
            )
        })?;
        self.seen_epoch.store(epoch, Ordering::SeqCst);
        Ok(true)
    }

    /// Replaces the policy (for embedders whose policy does not come from a store listing).
    pub fn install_policy(&self, policy: Policy) {
        self.set_policy(PolicyState {
            policy: Arc::new(policy),
            refused: Vec::new(),
            loaded_at: Some(self.now()),
        });
    }

    /// Checks that the database answers.
    pub async fn health(&self) -> Result<(), Error> {
        self.storage
            .ping()
            .await
            .map_err(|e| self.fail(Fail::Storage(e), "database ping"))
    }

    /// Checks that a primary takes writes (`/readyz`): a read-only database is not ready.
    pub async fn ready(&self) -> Result<(), Error> {
        self.storage
            .writable()
            .await
            .map_err(|e| self.fail(Fail::Storage(e), "database readiness"))
    }

    /// Turns a failure into the client's error: a refusal passes; a storage failure is
    /// DATABASE_UNAVAILABLE or INTERNAL, naming the step, with the cause logged only.
    pub(crate) fn fail(&self, f: Fail, step: &str) -> Error {
        match f {
            Fail::Refuse(e) => e,
            Fail::Storage(StorageError::Unavailable(cause)) => {
                tracing::warn!(%cause, step, "database unavailable");
                Error::with_message(
                    ErrorCode::DATABASE_UNAVAILABLE,
                    format!("{step}: {}", ErrorCode::DATABASE_UNAVAILABLE.message()),
                )
            }
            // A conflict reaches here only once its retries are spent: the database is too
            // contended to answer now, which asking again later can help.
            Fail::Storage(StorageError::Conflict) => Error::with_message(
                ErrorCode::DATABASE_UNAVAILABLE,
                format!(
                    "{step}: {} (a write conflict outlived its retries)",
                    ErrorCode::DATABASE_UNAVAILABLE.message()
                ),
            ),
            Fail::Storage(e) => {
                tracing::error!(error = %e, step, "storage failure");
                Error::with_message(ErrorCode::INTERNAL, format!("{step} failed"))
            }
        }
    }

    /// The parsed key of a stored JWK, cached by thumbprint.
    pub(crate) fn verifying_key(
        &self,
        thumbprint: &str,
        jwk: &countersign_proto::PublicJwk,
    ) -> Option<countersign_proto::VerifyingKey> {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = keys.get(thumbprint) {
            return Some(k.clone());
        }
        let k = jwk.verifying_key().ok()?;
        // The stored thumbprint must be this key's: a row whose key and thumbprint disagree is
        // not trusted, and is not cached.
        if k.thumbprint() != thumbprint {
            return None;
        }
        if keys.len() >= 100_000 {
            keys.clear();
        }
        keys.insert(thumbprint.to_owned(), k.clone());
        Some(k)
    }

    pub(crate) fn uuid(&self) -> [u8; 16] {
        random::<16>(&*self.entropy)
    }

    pub(crate) fn nonce(&self) -> String {
        countersign_proto::b64::encode(&random::<16>(&*self.entropy))
    }
}

/// Hex SHA-256, for values stored only as hashes.
pub(crate) fn sha256_hex(s: &str) -> String {
    hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, s.as_bytes()).as_ref())
}

/// Constant-time equality of two byte strings (length is not secret).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    aws_lc_rs::constant_time::verify_slices_are_equal(a, b).is_ok()
}
