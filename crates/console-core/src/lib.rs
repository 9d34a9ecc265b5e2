//! # countersign-console-core
//!
//! The approval console's domain, with no HTTP server, SQL driver or socket in it:
//!
//! - **Sign-in** ([`Console::begin_sign_in`], [`Console::finish_sign_in`],
//!   [`Console::sign_in_local`]): a person signs in through an [`IdentityProvider`]
//!   (OpenID Connect, authorization code with PKCE) or, in dev mode only, by naming an e-mail.
//!   A browser session is a random token whose SHA-256 alone is stored, with a CSRF token for
//!   the browser's state changes.
//! - **Callers** ([`Caller`]): a signed-in person ([`Human`]) or an agent presenting a bearer
//!   token: the shared token or a personal token a person minted (only its SHA-256 is stored).
//! - **The broker front** ([`Console::inbox`], [`Console::approve`], …): the console asks the
//!   broker through a [`BrokerClient`], naming the signed-in person as approver; the broker
//!   decides who may act and its refusals reach the caller with the broker's code.
//!
//! - **Work** ([`Console::create_issue`], [`Console::claim`], …; [`work`]): projects, issues,
//!   claims and the event log every write appends to in its own transaction.
//!
//! Storage, the broker client, the identity provider, time and randomness are traits, injected
//! through [`Parts`].

pub mod broker;
pub mod caller;
pub mod clock;
pub mod console;
pub mod doc;
pub mod error;
pub mod idp;
pub mod ids;
pub mod notify;
pub mod storage;
pub mod work;

pub use broker::BrokerClient;
pub use caller::{Caller, Human, ServiceTokens};
pub use clock::{Clock, Entropy, ManualClock, SystemClock, SystemEntropy, Time};
pub use console::{Console, ConsoleConfig, IssuePatch, NewIssue, Parts, Presence};
pub use error::{Error, ErrorCatalogue, ErrorCode};
pub use idp::IdentityProvider;
pub use ids::{Login, TokenId};
pub use storage::{Storage, StorageError};
