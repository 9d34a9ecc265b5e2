//! The console's own storage: browser sessions, sign-in attempts, personal tokens and the people
//! who have signed in (one statement each), and transactions over the work storage
//! ([`crate::work::store`]). Tokens and session ids are kept only as their SHA-256.

use async_trait::async_trait;

use crate::clock::Time;
use crate::ids::{Login, TokenId};
use crate::work::WorkTx;

pub use countersign_common::storage::StorageError;

/// A signed-in browser session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrowserSession {
    /// SHA-256 (hex) of the session token the cookie carries.
    pub key: String,
    pub login: Login,
    /// The CSRF token pages send back in `X-CSRF-Token` (or a form field).
    pub csrf_token: String,
    pub created_at: Time,
    pub expires_at: Time,
}

/// An OpenID Connect sign-in under way: what the callback needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignInAttempt {
    /// SHA-256 (hex) of the `state` parameter.
    pub key: String,
    pub nonce: String,
    pub pkce_verifier: String,
    /// A local path to return to after signing in.
    pub return_to: String,
    pub expires_at: Time,
}

/// A personal agent token (only its hash is kept).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PersonalToken {
    pub id: TokenId,
    pub owner: Login,
    pub name: String,
    /// SHA-256 (hex) of the token.
    pub hash: String,
    pub created_at: Time,
    /// When it stops working, if it was minted with an expiry.
    pub expires_at: Option<Time>,
    pub revoked_at: Option<Time>,
}

/// A decision a person made on a credential request through the console (the history page).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub login: Login,
    pub record_id: String,
    /// `approved` or `denied`.
    pub event: String,
    pub at: Time,
}

/// The console's storage. Each method is one statement (or one transaction).
#[async_trait]
pub trait Storage: Send + Sync + std::fmt::Debug {
    async fn put_session(&self, s: &BrowserSession) -> Result<(), StorageError>;
    async fn get_session(&self, key: &str) -> Result<Option<BrowserSession>, StorageError>;
    async fn delete_session(&self, key: &str) -> Result<(), StorageError>;

    async fn put_attempt(&self, a: &SignInAttempt) -> Result<(), StorageError>;
    /// Removes and answers the attempt: each is used at most once.
    async fn take_attempt(&self, key: &str) -> Result<Option<SignInAttempt>, StorageError>;

    async fn put_token(&self, t: &PersonalToken) -> Result<(), StorageError>;
    /// The owner's tokens neither revoked nor expired at `now`, oldest first.
    async fn live_tokens(
        &self,
        owner: &Login,
        now: Time,
    ) -> Result<Vec<PersonalToken>, StorageError>;
    async fn token_by_hash(&self, hash: &str) -> Result<Option<PersonalToken>, StorageError>;
    /// Marks the owner's token revoked; false when the owner has no such live token.
    async fn revoke_token(
        &self,
        owner: &Login,
        id: TokenId,
        at: Time,
    ) -> Result<bool, StorageError>;

    /// Records that `login` signed in at `at`.
    async fn saw_person(&self, login: &Login, at: Time) -> Result<(), StorageError>;
    /// Everyone who has signed in, by login.
    async fn people(&self) -> Result<Vec<Login>, StorageError>;
    /// Whether `login` has signed in.
    async fn has_person(&self, login: &Login) -> Result<bool, StorageError>;

    /// Records a decision the broker accepted.
    async fn record_decision(&self, d: &Decision) -> Result<(), StorageError>;
    /// A person's decisions, newest first, at most `limit`.
    async fn decisions_of(&self, login: &Login, limit: u32) -> Result<Vec<Decision>, StorageError>;
    /// The latest decision made on a record through the console, if any.
    async fn decision_on(&self, record_id: &str) -> Result<Option<Decision>, StorageError>;

    /// Deletes sessions and sign-in attempts that lapsed before `now`.
    async fn purge_expired(&self, now: Time) -> Result<u64, StorageError>;
    async fn ping(&self) -> Result<(), StorageError>;
    /// Whether a primary takes writes (readiness, `/readyz`): unlike [`Storage::ping`], a
    /// read-only server (a standby, a demoted primary) is [`StorageError::Unavailable`]. By
    /// default [`Storage::ping`].
    async fn writable(&self) -> Result<(), StorageError> {
        self.ping().await
    }

    /// Begins a write transaction over the work storage (projects, issues, events).
    async fn begin(&self) -> Result<Box<dyn WorkTx>, StorageError>;
    /// Begins a read-only transaction over the work storage.
    async fn read(&self) -> Result<Box<dyn WorkTx>, StorageError>;
    /// Waits before a transaction that met a write conflict runs again for the `attempt`+1th
    /// time (the core has no timer; the storage knows how long its contention lasts).
    async fn back_off(&self, attempt: u32) {
        let _ = attempt;
    }
    /// Reads with no transaction: each statement sees the latest commit, none a snapshot
    /// shared with the others. For reads of one statement, or of several that need not agree
    /// (`advice.suggestions`), it spares the transaction's own round trips.
    async fn read_loose(&self) -> Result<Box<dyn WorkTx>, StorageError> {
        self.read().await
    }
}
