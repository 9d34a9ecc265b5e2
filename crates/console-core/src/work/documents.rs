//! The records and storage of documents (typed-block markdown with versions), files and images, references (issue 12): one trait, joined into
//! [`crate::work::WorkTx`] with the others.

use async_trait::async_trait;

/// Storage of documents (typed-block markdown with versions), files and images, references (issue 12).
#[async_trait]
pub trait DocumentTx: Send {}
