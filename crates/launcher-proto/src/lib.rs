//! # countersign-launcher-proto
//!
//! The contract between the launcher helper (`countersign-launcher`) and its local clients (the
//! `countersign` CLI, or any program an operator writes against `docs/launcher-helper.md`):
//!
//! - [`messages`]: the typed requests ([`Request`], one `op` each) and answers ([`Response`],
//!   one `result` each), and the helper's refusal codes ([`HelperCode`], the spec's "Launcher
//!   helper codes");
//! - [`frame`]: newline-delimited JSON with a line cap ([`MAX_LINE`]);
//! - [`client`]: a blocking client over the Unix socket;
//! - [`routes`]: which broker routes the helper signs proofs for;
//! - [`paths`]: where the socket lives by default.
//!
//! The helper and the CLI call the broker through `countersign-broker-client`, not through
//! this crate: it stays the helper's protocol, with no HTTP stack.
//!
//! Like kanidm's `unix_proto`, the wire types live in one crate both sides build on, so the
//! helper and the CLI cannot drift apart.

pub mod client;
pub mod frame;
pub mod messages;
pub mod paths;
pub mod routes;
mod secret;

pub use client::{Client, ClientError};
pub use frame::MAX_LINE;
pub use messages::{HelperCode, HelperError, Request, Response};
pub use secret::Secret;
