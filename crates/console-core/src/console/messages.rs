//! The console's operations on targeted messages, broadcasts, delivery attempts, threads and
//! per-agent conversation state (issue 14). Each write runs in one transaction (`transact!`)
//! and appends its event there.
//!
//! - [`delivery`]: the delivery machinery every kind shares (messages here, comment mentions
//!   in asks): deciding an attempt, handing it to the session's link, the session's
//!   `delivered`, and failing what is not acknowledged in time.

#[allow(unused_imports)]
use super::*;

mod delivery;

pub use delivery::{ACK_WITHIN, Ack};
#[allow(unused_imports)]
pub(crate) use delivery::{NewAttempt, Opened};
