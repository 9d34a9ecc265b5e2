//! The records and storage of targeted messages, broadcasts, delivery attempts, threads and per-agent conversation state (issue 14): one trait, joined into
//! [`crate::work::WorkTx`] with the others.

use async_trait::async_trait;

/// Storage of targeted messages, broadcasts, delivery attempts, threads and per-agent conversation state (issue 14).
#[async_trait]
pub trait MessageTx: Send {}
