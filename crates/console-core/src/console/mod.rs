//! [`Console`]: one method per operation, split by area as the broker's core is:
//! [`signin`] (sign-in and browser sessions), [`tokens`] (bearer tokens: the shared one and
//! personal ones), [`front`] (the broker front), [`work`] (projects, issues, claims, events:
//! the [`Issues`] service, `console.issues()`),
//! [`documents`] (documents and files), [`asks`] (asks, comments, the inbox: the [`asks::Asks`]
//! service, `console.asks()`), [`messages`] (messages, broadcasts, deliveries, presence,
//! conversation state: the [`Messages`] service, `console.messages()`), [`delivery`] (the
//! delivery timeline and architecture sources: the [`delivery::Delivery`] service,
//! `console.delivery()`).

/// Runs `$body` as a unit of work ([`unit`]): a write transaction, with `$tx: &mut dyn
/// WorkTx` (the area's code reaches the stores it uses: `tx.issues()`, `tx.asks()`, …),
/// committed when the body answers `Ok` and then published by [`Console::commit_work`] (every
/// event it appended wakes the live streams; with `transact!(console, |tx, after| body)` and
/// `after: &mut AfterCommit`, the documents it kept are kept loaded and the deliveries it
/// opened are handed to the sessions' links), never by the caller. A storage conflict (a serialization failure or a busy database)
/// starts it over, up to ten times.
macro_rules! transact {
    ($self:expr, |$tx:ident| $body:expr) => {
        transact!($self, |$tx, _after| $body)
    };
    ($self:expr, |$tx:ident, $after:ident| $body:expr) => {{
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let result: Result<_, $crate::error::Error> = async {
                let mut guard = $self.parts.storage.begin().await?;
                let mut after = $crate::console::unit::AfterCommit::default();
                let v = {
                    let $tx: &mut dyn $crate::work::WorkTx = &mut *guard;
                    #[allow(unused_variables)]
                    let $after = &mut after;
                    let body: Result<_, $crate::error::Error> = async { $body }.await;
                    body?
                };
                $self.commit_work(guard, after).await?;
                Ok::<_, $crate::error::Error>(v)
            }
            .await;
            match result {
                // Only a conflict is retried: the transaction runs again on what the winner
                // committed, after the storage's backoff. An outage or a refusal is answered.
                Err(e) if e.is_conflict() && attempts < $crate::console::TRANSACT_ATTEMPTS => {
                    $self.parts.storage.back_off(attempts).await;
                }
                Err(e) if e.is_conflict() => {
                    tracing::warn!(attempts, "a write conflict outlived its retries");
                    break Err(e);
                }
                other => break other,
            }
        }
    }};
}

/// How many times [`transact!`] runs a transaction that keeps meeting write conflicts: the
/// broker's number too (`countersign_common::storage`).
pub(crate) const TRANSACT_ATTEMPTS: u32 = countersign_common::storage::TRANSACT_ATTEMPTS;

pub mod asks;
mod delivery;
pub mod documents;
mod front;
mod messages;
mod notify;
mod repos;
mod signin;
mod tokens;
pub(crate) mod unit;
mod work;

pub use delivery::{
    ComponentTree, Delivery, MeasuresAnswer, NewSessionGroup, PipelineAnswer, SessionGroupPatch,
    TimelineAnswer, full_date,
};
pub use messages::{
    ACK_WITHIN, Ack, AgentPatch, LIVE_FOR, LinkNotice, Messages, NewBroadcast, Presence,
    is_session_id,
};
pub use signin::safe_return_to;
pub use work::{IssuePatch, Issues, NewIssue, Suggestion, console_ref, is_role};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::Duration;
use serde::Serialize;
use zeroize::Zeroizing;

use crate::broker::{
    Approval, ApprovalStatement, BrokerClient, Countersignature, CredentialRecord, GrantItem,
    MachineLogin, PasskeyItem, PasskeyOffer, PasskeyRegistration,
};
use crate::caller::{Caller, Human};
use crate::clock::{self, Clock, Entropy, Time, ct_eq, sha256, sha256_hex};
use crate::error::{Error, ErrorCode};
use crate::idp::{IdentityProvider, IdpError};
use crate::ids::{Login, TokenId};
use crate::storage::{BrowserSession, Decision, PersonalToken, SignInAttempt, Storage};

/// At most this many live personal tokens per person.
pub const MAX_LIVE_TOKENS: usize = 50;
/// The prefix of every personal token, so that a leaked one is recognisable.
pub const PERSONAL_TOKEN_PREFIX: &str = "csp_";
/// Records whose facts the console remembers (a record's text never changes: it hashes to its
/// id), so that the inbox asks the broker for the pending list alone on each refresh.
const RECORD_CACHE: usize = 1024;

/// What the console is built from.
#[derive(Debug, Clone)]
pub struct Parts {
    pub storage: Arc<dyn Storage>,
    /// `None`: no broker configured (the credential routes say so).
    pub broker: Option<Arc<dyn BrokerClient>>,
    /// `None`: no OpenID Connect provider (only dev mode's local sign-in, if enabled).
    pub idp: Option<Arc<dyn IdentityProvider>>,
    pub clock: Arc<dyn Clock>,
    pub entropy: Arc<dyn Entropy>,
    /// Which agent sessions are live (their session link is open). `None`: none is.
    pub presence: Option<Arc<dyn Presence>>,
    /// ServiceAccount token verification with the accounts let in (`ns/name`). `None`: no
    /// issuer is configured, and such tokens are refused.
    pub service_tokens: Option<(Arc<dyn crate::caller::ServiceTokens>, Vec<String>)>,
}

/// Policy knobs.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// How long a browser session lasts from sign-in.
    pub session_lifetime: Duration,
    /// How long a person has to come back from the identity provider.
    pub sign_in_lifetime: Duration,
    /// Dev mode's sign-in by e-mail alone. Never on outside dev mode.
    pub local_sign_in: bool,
    /// Refuse an ID token whose `email_verified` is not true.
    pub require_verified_email: bool,
    /// When not empty, only logins of these domains sign in.
    pub allowed_domains: Vec<String>,
    /// Synced pull requests and runs together that the delivery reads keep parsed in memory
    /// (~1-2 KiB each); with more, each read reads its window from the storage.
    pub delivery_kept_rows: i64,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            session_lifetime: Duration::hours(12),
            sign_in_lifetime: Duration::minutes(10),
            local_sign_in: false,
            require_verified_email: true,
            allowed_domains: Vec::new(),
            delivery_kept_rows: 200_000,
        }
    }
}

/// A session just opened: the token goes into the cookie and nowhere else.
#[derive(Debug)]
pub struct NewSession {
    pub token: Zeroizing<String>,
    pub human: Human,
    pub expires_at: Time,
}

/// A sign-in just started at the identity provider.
#[derive(Debug)]
pub struct SignInStart {
    /// Where to send the browser.
    pub url: String,
    /// The `state`, which the browser also keeps (in a cookie) to prove at the callback that
    /// the sign-in is its own.
    pub state: String,
}

/// A personal token as its owner's list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub created_at: String,
    pub expires_at: Option<String>,
}

impl TokenInfo {
    fn of(t: &PersonalToken) -> Self {
        Self {
            id: t.id.to_string(),
            name: t.name.clone(),
            created_at: rfc3339(&t.created_at),
            expires_at: t.expires_at.as_ref().map(rfc3339),
        }
    }
}

/// A token just minted: shown once, never stored.
#[derive(Debug)]
pub struct MintedToken {
    pub info: TokenInfo,
    pub token: Zeroizing<String>,
}

/// RFC 3339 with second precision and `Z`.
pub fn rfc3339(t: &Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The approval console's domain.
#[derive(Debug)]
pub struct Console {
    parts: Parts,
    config: ConsoleConfig,
    shared_token_hash: Option<[u8; 32]>,
    records: Mutex<HashMap<String, CredentialRecord>>,
    /// The highest event id this process knows committed (its own writes, and other replicas'
    /// as the storage reports them): event streams wait on it, then read the log.
    committed: tokio::sync::watch::Sender<i64>,
    /// The delivery area's code host, targets and sync locks (issue 15).
    delivery: delivery::DeliveryState,
    /// People's inboxes as last read, each good until an event commits (asks).
    inboxes: asks::InboxCache,
    /// The word counts `advice.suggestions` weighs a new issue's words by.
    advice: work::WordCounts,
    /// Loaded documents, blocks answers and rendered HTML, each good while its artifact is
    /// unchanged.
    documents: documents::DocumentCaches,
    /// What notices the server can send (issue 29); unset: none are queued.
    outbox: std::sync::OnceLock<crate::notify::Outbox>,
}

impl Console {
    /// `shared_token`: the agents' shared bearer token, if any.
    pub fn new(parts: Parts, config: ConsoleConfig, shared_token: Option<&str>) -> Self {
        Self {
            parts,
            config,
            shared_token_hash: shared_token.map(sha256),
            records: Mutex::new(HashMap::new()),
            committed: tokio::sync::watch::Sender::new(0),
            delivery: Default::default(),
            inboxes: Default::default(),
            advice: Default::default(),
            documents: Default::default(),
            outbox: Default::default(),
        }
    }

    pub fn now(&self) -> Time {
        self.parts.clock.now()
    }

    pub fn config(&self) -> &ConsoleConfig {
        &self.config
    }

    pub fn has_broker(&self) -> bool {
        self.parts.broker.is_some()
    }

    /// The identity provider's display name, when one is configured.
    pub fn idp_name(&self) -> Option<String> {
        self.parts.idp.as_ref().map(|i| i.name())
    }

    fn broker(&self) -> Result<&Arc<dyn BrokerClient>, Error> {
        self.parts
            .broker
            .as_ref()
            .ok_or_else(|| ErrorCode::BROKER_NOT_CONFIGURED.into())
    }

    /// A fresh id (a UUID v4 from the console's entropy) of the kind `from_random` makes:
    /// `console.new_id(MessageId::from_random)`.
    pub(crate) fn new_id<T>(&self, from_random: impl FnOnce([u8; 16]) -> T) -> T {
        from_random(clock::random::<16>(&*self.parts.entropy))
    }

    /// A fresh random token (32 bytes, base64url): sessions, CSRF and form tokens.
    pub fn random_token(&self) -> String {
        clock::random_token::<32>(&*self.parts.entropy)
    }

    // ----- housekeeping -----

    /// Deletes lapsed sessions and sign-in attempts.
    pub async fn purge(&self) -> Result<u64, Error> {
        Ok(self.parts.storage.purge_expired(self.now()).await?)
    }

    pub async fn health(&self) -> Result<(), Error> {
        Ok(self.parts.storage.ping().await?)
    }

    /// Whether a primary takes writes (`/readyz`): a read-only database is not ready.
    pub async fn ready(&self) -> Result<(), Error> {
        Ok(self.parts.storage.writable().await?)
    }
}
