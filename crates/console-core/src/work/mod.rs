//! The work core: projects, issues, claims and the event log (spec: Issues, Projects; protocol
//! §5, §6.1, §7), with no IO.
//!
//! - [`model`]: the records and their validated keys, as the answers show them.
//! - [`rules`]: the input rules the spec writes out (project names, caps).
//! - [`search`]: merging each kind's ranked matches (reciprocal rank fusion).
//! - [`documents`], [`asks`], [`messages`], [`delivery`]: each area's records and storage
//!   trait.
//! - [`notices`]: people's notice preferences and the notices queued, and their store.
//! - [`view`]: the issue answer, which joins an issue with the other areas' records on it.
//! - [`store`]: the storage traits, one per aggregate, that a [`store::WorkTx`] transaction
//!   joins; filtering and paging happen in the storage's queries, never after a fetch-all.
//!
//! The operations are methods of the console's `Issues` service (`console/work/`): each runs in
//! one transaction, retried on a conflict, and appends its event in that transaction, so the event
//! log and the records never disagree.

pub mod asks;
pub mod delivery;
pub mod documents;
pub mod messages;
pub mod model;
pub mod notices;
pub mod repos;
pub mod rules;
pub mod search;
pub mod store;
pub mod view;

pub use asks::AskTx;
pub use delivery::DeliveryTx;
pub use documents::DocumentTx;
pub use messages::{AttemptTx, MessageInboxTx, MessageTx, PresenceTx};
pub use model::*;
pub use notices::NoticeTx;
pub use repos::{CodeRef, RepoMapping, RepoName};
pub use store::{EventTx, IssueTx, ProjectTx, WorkTx};
pub use view::IssueView;
