//! The records and storage of delivery settings, the synced GitHub data behind the timeline and measures, session groups, architecture sources (issue 15): one trait, joined into
//! [`crate::work::WorkTx`] with the others.

use async_trait::async_trait;

/// Storage of delivery settings, the synced GitHub data behind the timeline and measures, session groups, architecture sources (issue 15).
#[async_trait]
pub trait DeliveryTx: Send {}
