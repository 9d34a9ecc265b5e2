//! # countersign-broker-core
//!
//! The Countersign secrets broker's domain as a library: machine logins, session and pod
//! enrollment, secret requests decided by policy or a person, grants that release values fresh
//! from a secret store, and the sealed approval chain that re-verifies every grant at release.
//!
//! It knows nothing of HTTP, SQL drivers, cloud SDKs or sockets. Callers supply the parts behind
//! traits: [`Storage`] (transactions over the aggregates), [`SecretStore`], [`Clock`],
//! [`Entropy`] and [`TokenVerifier`]. [`Broker`] holds them and exposes one method per
//! operation of the spec; every refusal is an [`Error`] with a catalogue [`ErrorCode`].

pub mod audit;
pub mod broker;
pub mod clock;
pub mod config;
pub mod error;
pub mod exclusive;
pub mod identity;
pub mod ids;
pub mod issuer;
pub mod model;
pub mod passkey;
pub mod policy;
pub mod seal;
pub mod secrets;
pub mod storage;

pub use broker::Broker;
pub use clock::{Clock, Entropy, ManualClock, SystemClock, SystemEntropy, Time};
pub use config::BrokerConfig;
pub use error::{Error, ErrorCatalogue, ErrorCode, Result};
pub use identity::{ServiceAccountToken, TokenVerifier};
pub use issuer::{Issuer, IssuerError, Minted};
pub use secrets::{SecretStore, SecretValue};
pub use storage::{Storage, StorageError, Tx};
