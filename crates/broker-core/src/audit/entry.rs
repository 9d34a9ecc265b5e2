//! The audit log's entry as stored: the one type of the log that the storage traits name, kept
//! apart from the chain's logic (which uses storage), so that storage does not depend on that
//! logic (re-exported as `audit::AuditEntry`).

use serde::{Deserialize, Serialize};

use crate::clock::Time;

/// An entry as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub position: i64,
    #[serde(with = "crate::clock::serde_time")]
    pub at: Time,
    /// `decision`, `grant`, `release`, `revocation`, `expiry`, `end`, `session_end`,
    /// `machine_login_end`, `withholding`.
    pub kind: String,
    /// What it is about: `grant:<id>`, `enrollment:<id>`, `credential:<id>`, `record:<id>`,
    /// `request:<id>`.
    pub subject: String,
    /// Canonical JSON of the details (names, never values).
    pub body: String,
    pub prev_hash: String,
    pub hash: String,
    pub seal: String,
}
