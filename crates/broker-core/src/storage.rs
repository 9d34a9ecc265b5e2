//! Storage, as the core needs it: transactions over the broker's aggregates.
//!
//! A write transaction ([`Storage::begin`]) locks every row it reads until it commits or is
//! dropped (dropping rolls back), so two transitions on the same row serialise and the second
//! sees the first's outcome. A backend that detects a conflict instead (a deadlock, a
//! serialisation failure) answers [`StorageError::Conflict`] and the core runs the transition
//! again from the start.
//!
//! List methods answer rows whose *stored* state matches; the core settles each against the
//! clock before using it.

use async_trait::async_trait;

use crate::audit::entry::AuditEntry;
use crate::clock::Time;
use crate::ids::{
    ConfirmationCode, CredentialId, EnrollmentId, GrantId, Login, RecordId, RequestId,
};
use crate::issuer::Issued;
use crate::model::{Enrollment, Grant, LauncherCredential, Passkey, PendingLogin, Record, Request};

/// A storage failure (the one type adapters of the broker and the console map driver errors
/// into). Its text goes to logs, never to clients.
pub use countersign_common::storage::StorageError;

/// An outbox message waiting for delivery: an expiry notification, or the destruction of an
/// issued credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutboxItem {
    pub id: String,
    /// Who delivers it: [`OutboxItem::NOTIFICATION`] or [`OutboxItem::DESTROY`].
    pub topic: String,
    pub payload: String,
    pub attempts: u32,
    pub next_attempt_at: Time,
}

impl OutboxItem {
    /// A webhook notification (protocol.md §9).
    pub const NOTIFICATION: &'static str = "notification";
    /// An issued credential to destroy ([`Issued`]).
    pub const DESTROY: &'static str = "destroy";
}

/// Rows whose stored state lags the clock, for the sweep.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Due {
    pub records: Vec<RecordId>,
    pub enrollments: Vec<EnrollmentId>,
    pub grants: Vec<GrantId>,
}

/// The broker's storage.
#[async_trait]
pub trait Storage: Send + Sync + std::fmt::Debug + 'static {
    /// A write transaction: rows read are locked until commit.
    async fn begin(&self) -> Result<Box<dyn Tx>, StorageError>;
    /// A read: no locks; never committed (drop it). Each statement may see its own snapshot:
    /// a read of one row, or of rows no other statement of it must agree with.
    async fn read(&self) -> Result<Box<dyn Tx>, StorageError>;
    /// A read whose statements all see one snapshot of the database (an audit walk that
    /// checks rows against the chain). Never committed (drop it).
    async fn snapshot(&self) -> Result<Box<dyn Tx>, StorageError> {
        self.read().await
    }
    /// Whether the database answers.
    async fn ping(&self) -> Result<(), StorageError>;
    /// Whether a primary takes writes (readiness, `/readyz`): unlike [`Storage::ping`], a
    /// read-only server (a standby, a demoted primary) is [`StorageError::Unavailable`]. By
    /// default [`Storage::ping`].
    async fn writable(&self) -> Result<(), StorageError> {
        self.ping().await
    }
    /// Waits before attempt `attempt + 1` of a transaction that met a conflict (the shared
    /// policy: `countersign_common::storage::conflict_backoff`). By default no wait: a storage
    /// that cannot conflict, or a test's.
    async fn back_off(&self, attempt: u32) -> Result<(), StorageError> {
        let _ = attempt;
        Ok(())
    }
    /// The policy epoch: a counter a reread bumps so that every replica reloads its policy.
    async fn policy_epoch(&self) -> Result<i64, StorageError>;
    /// Bumps the policy epoch; answers the new value.
    async fn bump_policy_epoch(&self) -> Result<i64, StorageError>;
    /// Remembers a single-use value (a proof's or request object's `jti`) under `scope` until
    /// `until`. `Ok(false)` when it was already remembered and has not lapsed: a replay. Lapsed
    /// entries (before `now`) may be forgotten. Every replica sharing the database must see it.
    async fn remember_once(
        &self,
        scope: &str,
        value: &str,
        until: Time,
        now: Time,
    ) -> Result<bool, StorageError>;
    /// Remembers the `jti` of a proof or of a secret request object: [`Storage::remember_once`]
    /// of `use_.scope` and `use_.jti`, given its `iat` (within the skew of `now`) as well, so that a storage this process alone writes
    /// (`Exclusive`) may remember it in memory and still refuse
    /// its replay after a restart. `Ok(false)`: a replay, or a proof it cannot tell from one.
    /// By default the value is written through.
    async fn remember_proof(&self, use_: ProofUse<'_>) -> Result<bool, StorageError> {
        self.remember_once(use_.scope, use_.jti, use_.until, use_.now)
            .await
    }
    /// Remembers many distinct single-use values at once, each as [`Storage::remember_once`]
    /// would (whether each was fresh is not answered). Required, like [`Storage::at_shutdown`]:
    /// a decorator that forgot to forward a default would drop it silently.
    async fn remember_all(
        &self,
        values: &[(&str, &str, Time)],
        now: Time,
    ) -> Result<(), StorageError>;
    /// Called once when the process stops serving, after its last request (a graceful
    /// shutdown): what the storage keeps in memory alone is made durable, so that the next
    /// process need not refuse what it cannot know.
    async fn at_shutdown(&self, now: Time) -> Result<(), StorageError>;
    /// The live values remembered under `scope` (lapsed ones, before `now`, may be left out).
    /// For the few values of a scope of its own (`Exclusive`'s
    /// proof horizon); by default unsupported.
    async fn remembered(&self, scope: &str, now: Time) -> Result<Vec<String>, StorageError> {
        let _ = (scope, now);
        Err(StorageError::Other(
            "this storage does not list remembered values".into(),
        ))
    }
}

/// Writes [`StorageDecorator`] and its [`Storage`] from one list of [`Storage`]'s methods, as
/// `tx_decorator!` does for transactions: a method added to [`Storage`] is added here once, and
/// no decorator copies the calls it passes through.
macro_rules! storage_decorator {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        /// A storage that wraps another ([`StorageDecorator::wrapped`]) and changes some of its
        /// methods: it writes the methods it changes, and every other method of [`Storage`],
        /// those with a default included, passes the call through to the wrapped one.
        /// [`Storage`] is implemented for it through these methods; their futures are not
        /// boxed, so a call passed through allocates and dispatches no more than a forward
        /// written by hand.
        pub(crate) trait StorageDecorator: Send + Sync + std::fmt::Debug + 'static {
            /// What it wraps: `dyn Storage`, or a type whose calls dispatch statically.
            type Wrapped: Storage + ?Sized;

            fn wrapped(&self) -> &Self::Wrapped;

            $(fn $name(
                &self,
                $($arg: $ty),*
            ) -> impl Future<Output = Result<$ret, StorageError>> + Send {
                async move { self.wrapped().$name($($arg),*).await }
            })*
        }

        #[async_trait]
        impl<T: StorageDecorator> Storage for T {
            $(async fn $name(&self, $($arg: $ty),*) -> Result<$ret, StorageError> {
                StorageDecorator::$name(self, $($arg),*).await
            })*
        }
    };
}

storage_decorator! {
    fn begin() -> Box<dyn Tx>;
    fn read() -> Box<dyn Tx>;
    fn snapshot() -> Box<dyn Tx>;
    fn ping() -> ();
    fn writable() -> ();
    fn back_off(attempt: u32) -> ();
    fn policy_epoch() -> i64;
    fn bump_policy_epoch() -> i64;
    fn remember_once(scope: &str, value: &str, until: Time, now: Time) -> bool;
    fn remember_proof(use_: ProofUse<'_>) -> bool;
    fn remember_all(values: &[(&str, &str, Time)], now: Time) -> ();
    fn at_shutdown(now: Time) -> ();
    fn remembered(scope: &str, now: Time) -> Vec<String>;
}

/// The single-use value of a proof or a secret request object, and what bounds when it can be
/// accepted.
#[derive(Debug, Clone, Copy)]
pub struct ProofUse<'a> {
    /// Whose key signed it, and what it is (`session:<enrollment>`, `launcher:<credential>`,
    /// `request:<enrollment>`).
    pub scope: &'a str,
    pub jti: &'a str,
    /// Its `iat`, seconds since the epoch (already checked to be within the skew of `now`).
    pub iat: i64,
    /// How far `iat` may be from the broker's clock, seconds.
    pub skew: i64,
    /// Until when the value is remembered.
    pub until: Time,
    pub now: Time,
}

/// A transaction. Every `put_*` writes the whole row (insert or replace).
#[async_trait]
pub trait Tx: Send {
    async fn commit(self: Box<Self>) -> Result<(), StorageError>;

    async fn get_credential(
        &mut self,
        id: CredentialId,
    ) -> Result<Option<LauncherCredential>, StorageError>;
    /// Credentials bound to a key thumbprint, revoked or not.
    async fn credentials_by_thumbprint(
        &mut self,
        thumbprint: &str,
    ) -> Result<Vec<LauncherCredential>, StorageError>;
    /// Every credential not revoked.
    async fn list_credentials(&mut self) -> Result<Vec<LauncherCredential>, StorageError>;
    async fn put_credential(&mut self, c: &LauncherCredential) -> Result<(), StorageError>;

    async fn get_login(&mut self, pending_hash: &str)
    -> Result<Option<PendingLogin>, StorageError>;
    async fn put_login(&mut self, l: &PendingLogin) -> Result<(), StorageError>;

    async fn get_record(&mut self, id: &RecordId) -> Result<Option<Record>, StorageError>;
    /// The stored-pending record holding this confirmation code.
    async fn record_by_code(
        &mut self,
        code: &ConfirmationCode,
    ) -> Result<Option<Record>, StorageError>;
    /// Every stored-pending record.
    async fn pending_records(&mut self) -> Result<Vec<Record>, StorageError>;
    async fn put_record(&mut self, r: &Record) -> Result<(), StorageError>;

    async fn get_enrollment(
        &mut self,
        id: EnrollmentId,
    ) -> Result<Option<Enrollment>, StorageError>;
    /// Stored-live enrollments made under a credential.
    async fn enrollments_by_credential(
        &mut self,
        id: CredentialId,
    ) -> Result<Vec<Enrollment>, StorageError>;
    async fn put_enrollment(&mut self, e: &Enrollment) -> Result<(), StorageError>;

    async fn get_request(&mut self, id: RequestId) -> Result<Option<Request>, StorageError>;
    /// Stored-pending requests of an enrollment.
    async fn pending_requests(
        &mut self,
        enrollment: EnrollmentId,
    ) -> Result<Vec<Request>, StorageError>;
    async fn put_request(&mut self, r: &Request) -> Result<(), StorageError>;

    async fn get_grant(&mut self, id: GrantId) -> Result<Option<Grant>, StorageError>;
    /// Every grant of an enrollment, ended or not.
    async fn grants_by_enrollment(
        &mut self,
        enrollment: EnrollmentId,
    ) -> Result<Vec<Grant>, StorageError>;
    /// The enrollment and, when it exists, every grant of it (as [`Tx::grants_by_enrollment`]),
    /// read together: a backend that can reads both in one statement (PostgreSQL's batched
    /// reads). `GET /v1/enrollments/self` reads both for one proof.
    async fn enrollment_with_grants(
        &mut self,
        id: EnrollmentId,
    ) -> Result<(Option<Enrollment>, Vec<Grant>), StorageError> {
        match self.get_enrollment(id).await? {
            Some(e) => Ok((Some(e), self.grants_by_enrollment(id).await?)),
            None => Ok((None, Vec::new())),
        }
    }
    /// The enrollment, locked for update in a write transaction (as [`Tx::get_enrollment`]),
    /// and, when it exists, its pending requests (as [`Tx::pending_requests`]), read in that
    /// order: a backend that can sends both in one round trip (PostgreSQL's write
    /// transactions). A secret request reads both first.
    async fn enrollment_with_pending(
        &mut self,
        id: EnrollmentId,
    ) -> Result<(Option<Enrollment>, Vec<Request>), StorageError> {
        match self.get_enrollment(id).await? {
            Some(e) => Ok((Some(e), self.pending_requests(id).await?)),
            None => Ok((None, Vec::new())),
        }
    }
    /// Every stored-live grant.
    async fn live_grants(&mut self) -> Result<Vec<Grant>, StorageError>;
    async fn put_grant(&mut self, g: &Grant) -> Result<(), StorageError>;

    /// A passkey by credential id (base64url), removed or not.
    async fn get_passkey(&mut self, id: &str) -> Result<Option<Passkey>, StorageError>;
    /// A person's passkeys, removed or not, oldest first.
    async fn passkeys_of(&mut self, person: &Login) -> Result<Vec<Passkey>, StorageError>;
    /// Every passkey (`audit verify`).
    async fn list_passkeys(&mut self) -> Result<Vec<Passkey>, StorageError>;
    async fn put_passkey(&mut self, p: &Passkey) -> Result<(), StorageError>;

    /// Rows whose stored state is live but whose time has passed.
    async fn due(&mut self, now: Time, limit: u32) -> Result<Due, StorageError>;

    /// Adds an outbox message.
    async fn push_outbox(&mut self, item: &OutboxItem) -> Result<(), StorageError>;
    /// Takes up to `limit` messages of `topic` due at `now`, locked so that no other replica
    /// takes them while this transaction lives (skip-locked where the backend has it).
    async fn take_outbox(
        &mut self,
        topic: &str,
        now: Time,
        limit: u32,
    ) -> Result<Vec<OutboxItem>, StorageError>;
    /// Removes a delivered message.
    async fn delete_outbox(&mut self, id: &str) -> Result<(), StorageError>;
    /// Reschedules a message after a failed attempt.
    async fn reschedule_outbox(
        &mut self,
        id: &str,
        attempts: u32,
        next_attempt_at: Time,
    ) -> Result<(), StorageError>;

    /// The audit log's last entry (position, hash), or `None` when it is empty. In a write
    /// transaction it locks the head until commit, so that appenders serialise (see
    /// `audit::append`): call it last, after the domain rows.
    async fn audit_head(&mut self) -> Result<Option<(i64, String)>, StorageError>;
    /// Inserts consecutive entries, in one statement where the backend can (the position is the
    /// primary key: a second entry at one position fails).
    async fn append_audit(&mut self, entries: &[AuditEntry]) -> Result<(), StorageError>;
    /// Up to `limit` entries above `after`, by position.
    async fn audit_entries(
        &mut self,
        after: i64,
        limit: u32,
    ) -> Result<Vec<AuditEntry>, StorageError>;
    /// The entries about `subject` (`grant:<id>`, …) that end it (kinds
    /// `audit::END_KINDS`), by position.
    async fn audit_ends(&mut self, subject: &str) -> Result<Vec<AuditEntry>, StorageError>;
    /// How many entries lie at or below `upto`, and the highest position (0 when empty).
    async fn audit_count(&mut self, upto: i64) -> Result<(i64, i64), StorageError>;

    /// Reads what a decision reads first, in its lock order (the session's enrollment and
    /// request when the record has them, then the record), ahead of the calls that ask for
    /// them: a backend that can reads them in one round trip and answers those calls from what
    /// it read (PostgreSQL's write transactions). By default nothing: each is read when asked.
    async fn prefetch_decision(
        &mut self,
        _owners: Option<(EnrollmentId, RequestId)>,
        _record: &RecordId,
    ) -> Result<(), StorageError> {
        Ok(())
    }
    /// The credentials issued for a grant (one per issued secret it names), by secret.
    async fn issued_of(&mut self, grant: GrantId) -> Result<Vec<Issued>, StorageError>;
    /// Up to `limit` issued credentials not yet destroyed (minting, live or being destroyed),
    /// for the reconciler.
    async fn unsettled_issued(&mut self, limit: u32) -> Result<Vec<Issued>, StorageError>;
    async fn put_issued(&mut self, c: &Issued) -> Result<(), StorageError>;
}

/// Writes [`TxDecorator`] and `Tx` for every decorator from one list of [`Tx`]'s methods, so
/// that a method added to [`Tx`] is added here once (the impl below does not compile until it
/// is) and no decorator copies the calls it passes through.
macro_rules! tx_decorator {
    ($(fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty;)*) => {
        /// A transaction that wraps another ([`TxDecorator::wrapped`]) and changes some of its
        /// methods: it writes `commit` and the methods it changes, and every other method of
        /// [`Tx`] passes the call through to the wrapped one. [`Tx`] is implemented for it
        /// through these methods; their futures are not boxed, so a decorated call allocates no
        /// more than the wrapped transaction's own.
        pub(crate) trait TxDecorator: Send {
            /// The transaction it wraps.
            fn wrapped(&mut self)
            -> impl Future<Output = Result<&mut dyn Tx, StorageError>> + Send;

            fn commit(self: Box<Self>) -> impl Future<Output = Result<(), StorageError>> + Send;

            $(fn $name(
                &mut self,
                $($arg: $ty),*
            ) -> impl Future<Output = Result<$ret, StorageError>> + Send {
                async move { self.wrapped().await?.$name($($arg),*).await }
            })*

            /// Not passed through: by default a decorator reads the two through its own
            /// `get_enrollment` and `grants_by_enrollment`, so that one which changes either
            /// (checks a seal, answers from memory) is not bypassed. A decorator that changes
            /// neither, or checks the pair itself, writes it to keep the one statement.
            fn enrollment_with_grants(
                &mut self,
                id: EnrollmentId,
            ) -> impl Future<Output = Result<(Option<Enrollment>, Vec<Grant>), StorageError>> + Send
            {
                async move {
                    match TxDecorator::get_enrollment(self, id).await? {
                        Some(e) => Ok((Some(e), TxDecorator::grants_by_enrollment(self, id).await?)),
                        None => Ok((None, Vec::new())),
                    }
                }
            }


            /// Not passed through, as `enrollment_with_grants`: read through the decorator's own
            /// `get_enrollment` and `pending_requests` unless it writes this one.
            fn enrollment_with_pending(
                &mut self,
                id: EnrollmentId,
            ) -> impl Future<Output = Result<(Option<Enrollment>, Vec<Request>), StorageError>> + Send
            {
                async move {
                    match TxDecorator::get_enrollment(self, id).await? {
                        Some(e) => Ok((Some(e), TxDecorator::pending_requests(self, id).await?)),
                        None => Ok((None, Vec::new())),
                    }
                }
            }
        }

        #[async_trait]
        impl<T: TxDecorator> Tx for T {
            async fn commit(self: Box<Self>) -> Result<(), StorageError> {
                TxDecorator::commit(self).await
            }

            $(async fn $name(&mut self, $($arg: $ty),*) -> Result<$ret, StorageError> {
                TxDecorator::$name(self, $($arg),*).await
            })*

            async fn enrollment_with_grants(
                &mut self,
                id: EnrollmentId,
            ) -> Result<(Option<Enrollment>, Vec<Grant>), StorageError> {
                TxDecorator::enrollment_with_grants(self, id).await
            }

            async fn enrollment_with_pending(
                &mut self,
                id: EnrollmentId,
            ) -> Result<(Option<Enrollment>, Vec<Request>), StorageError> {
                TxDecorator::enrollment_with_pending(self, id).await
            }
        }
    };
}

tx_decorator! {
    fn get_credential(id: CredentialId) -> Option<LauncherCredential>;
    fn credentials_by_thumbprint(thumbprint: &str) -> Vec<LauncherCredential>;
    fn list_credentials() -> Vec<LauncherCredential>;
    fn put_credential(c: &LauncherCredential) -> ();
    fn get_login(pending_hash: &str) -> Option<PendingLogin>;
    fn put_login(l: &PendingLogin) -> ();
    fn get_record(id: &RecordId) -> Option<Record>;
    fn prefetch_decision(owners: Option<(EnrollmentId, RequestId)>, record: &RecordId) -> ();
    fn record_by_code(code: &ConfirmationCode) -> Option<Record>;
    fn pending_records() -> Vec<Record>;
    fn put_record(r: &Record) -> ();
    fn get_enrollment(id: EnrollmentId) -> Option<Enrollment>;
    fn enrollments_by_credential(id: CredentialId) -> Vec<Enrollment>;
    fn put_enrollment(e: &Enrollment) -> ();
    fn get_request(id: RequestId) -> Option<Request>;
    fn pending_requests(enrollment: EnrollmentId) -> Vec<Request>;
    fn put_request(r: &Request) -> ();
    fn get_grant(id: GrantId) -> Option<Grant>;
    fn grants_by_enrollment(enrollment: EnrollmentId) -> Vec<Grant>;
    fn live_grants() -> Vec<Grant>;
    fn put_grant(g: &Grant) -> ();
    fn get_passkey(id: &str) -> Option<Passkey>;
    fn passkeys_of(person: &Login) -> Vec<Passkey>;
    fn list_passkeys() -> Vec<Passkey>;
    fn put_passkey(p: &Passkey) -> ();
    fn due(now: Time, limit: u32) -> Due;
    fn push_outbox(item: &OutboxItem) -> ();
    fn take_outbox(topic: &str, now: Time, limit: u32) -> Vec<OutboxItem>;
    fn delete_outbox(id: &str) -> ();
    fn reschedule_outbox(id: &str, attempts: u32, next_attempt_at: Time) -> ();
    fn audit_head() -> Option<(i64, String)>;
    fn append_audit(entries: &[AuditEntry]) -> ();
    fn audit_entries(after: i64, limit: u32) -> Vec<AuditEntry>;
    fn audit_ends(subject: &str) -> Vec<AuditEntry>;
    fn audit_count(upto: i64) -> (i64, i64);
    fn issued_of(grant: GrantId) -> Vec<Issued>;
    fn unsettled_issued(limit: u32) -> Vec<Issued>;
    fn put_issued(c: &Issued) -> ();
}
