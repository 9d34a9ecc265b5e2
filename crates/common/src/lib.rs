//! # countersign-common
//!
//! What the broker and the console both need and used to copy, in one small crate:
//!
//! - [`code`]: wire error codes as types. A catalogue is an enum made by [`error_catalogue!`];
//!   each code knows its wire name, HTTP status and default message, and converts into a
//!   [`WireCode`], the one shape both catalogues share. Clients read a refusal body into
//!   [`Refusal`] and match its typed code, never a string.
//! - [`clock`]: the [`Clock`] and [`Entropy`] traits (with [`ManualClock`] for tests), SHA-256
//!   and constant-time comparison.
//! - [`ids`]: the session-id rule and the UUID rule, and [`uuid_id!`], the UUID-backed id type
//!   both servers' ids are.
//! - [`login`]: the login rule (a lowercase e-mail address).
//! - [`requester`]: a requesting session named as people name it (its machine, its label).
//! - [`storage`]: the storage failure both sides map driver errors into.
//! - [`sql`] (feature `sql`): the sqlx migration runner, driver error mapping and pool opening
//!   for SQLite and PostgreSQL through sqlx `Any`.
//! - [`sql_writer`] (feature `sql`): SQLite's single writer with group commit, the one both
//!   servers' SQLite storage writes through.
//! - [`server`] (feature `server`): `init_logs` and `shutdown_signal` for the binaries.
//! - [`config`] (feature `server`): [`config::read_toml`], the one loader of both servers'
//!   configuration files.
//! - [`telemetry`] (feature `server`): traces over OTLP and W3C trace context.
//! - [`tick`] (feature `server`): the pace of the servers' time-driven loops, which tests turn
//!   instead of sleeping.
//! - [`wire`]: the broker API's answers as serde types, defined once: the broker writes them,
//!   the console (and any other reader) reads them (with feature `schema`, their JSON Schemas
//!   for the broker's OpenAPI document).
//! - [`webhook`]: Standard Webhooks signing and verification (the broker signs, the console
//!   verifies).
//!
//! With neither feature the crate has no IO dependency, so core crates may use it.

pub mod clock;
pub mod code;
#[cfg(feature = "server")]
pub mod config;
pub mod ids;
pub mod login;
pub mod requester;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "sql")]
pub mod sql;
#[cfg(feature = "sql")]
pub mod sql_writer;
pub mod storage;
#[cfg(feature = "server")]
pub mod telemetry;
#[cfg(feature = "server")]
pub mod tick;
pub mod webhook;
pub mod wire;

pub use clock::{Clock, Entropy, ManualClock, SystemClock, SystemEntropy, Time};
pub use code::{Refusal, WireCode};
pub use login::Login;
pub use storage::StorageError;
