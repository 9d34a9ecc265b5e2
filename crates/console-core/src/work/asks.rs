//! The records and storage of asks, comments with suggestions and mentions, reviews and the inbox (issue 13): one trait, joined into
//! [`crate::work::WorkTx`] with the others.

use async_trait::async_trait;

/// Storage of asks, comments with suggestions and mentions, reviews and the inbox (issue 13).
#[async_trait]
pub trait AskTx: Send {}
