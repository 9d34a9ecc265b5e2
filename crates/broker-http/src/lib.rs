//! # countersign-broker-http
//!
//! The broker's HTTP API (spec: `broker-http-api.md`) as a thin axum server over
//! [`countersign_broker_core::Broker`]: each handler reads the request, checks its credential
//! through the core, calls one core operation and renders the answer or the refusal.

pub mod answer_check;
pub mod audit;
pub mod config;
pub mod conn;
pub mod dev;
pub mod error;
pub mod extract;
pub mod issuers;
pub mod limits;
pub mod notify;
pub mod openapi;
pub mod routes;
pub mod server;
pub mod wire;

use std::sync::Arc;

use countersign_broker_core::Broker;

pub use config::Config;
pub use server::{Running, serve};

/// What every handler shares.
#[derive(Debug)]
pub struct AppState {
    pub broker: Arc<Broker>,
    /// SHA-256 of the console token; `None` refuses every console-token route.
    pub console_token_hash: Option<[u8; 32]>,
    pub limits: limits::Limits,
    pub body_limit: usize,
    /// The read timeout: TLS handshake, request head (and idle keep-alive), whole request body
    /// (see [`conn`]).
    pub read_timeout: std::time::Duration,
    /// Connections served at once; more are closed on accept (see [`conn`]).
    pub max_connections: usize,
    pub metrics: Option<metrics_exporter_prometheus::PrometheusHandle>,
    /// Where expiry notifications go; `None` drops them (see [`notify`]).
    pub notifier: Option<Arc<notify::Notifier>>,
    /// Where this replica remembers the audit log head it has verified (see [`audit`]);
    /// `None`: in memory only.
    pub audit_state_file: Option<std::path::PathBuf>,
    /// Set once the audit follower's first full walk of the chain has verified (`/readyz`).
    pub audit_walked: std::sync::atomic::AtomicBool,
    /// The background loops' pace, which tests turn (see [`server::Loops`]).
    pub loops: server::Loops,
}

impl AppState {
    pub fn new(broker: Arc<Broker>, console_token: Option<&str>, quotas: limits::Quotas) -> Self {
        let clock = broker_clock(&broker);
        Self {
            console_token_hash: console_token.map(sha256),
            limits: limits::Limits::new(quotas, clock),
            broker,
            body_limit: extract::DEFAULT_BODY_LIMIT,
            read_timeout: conn::DEFAULT_READ_TIMEOUT,
            max_connections: conn::DEFAULT_MAX_CONNECTIONS,
            metrics: None,
            notifier: None,
            audit_state_file: None,
            audit_walked: std::sync::atomic::AtomicBool::new(false),
            loops: server::Loops::default(),
        }
    }
}

fn broker_clock(broker: &Broker) -> Arc<dyn countersign_broker_core::Clock> {
    broker.clock().clone()
}

/// SHA-256 of a string.
pub fn sha256(s: &str) -> [u8; 32] {
    let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, s.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(d.as_ref());
    out
}
