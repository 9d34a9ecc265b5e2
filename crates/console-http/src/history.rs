//! What each person decided through this console, and when: the history page and the request
//! page's "decided by" read it. The broker keeps each record's outcome (`decided`) but has no
//! list of decided records by approver and does not name who decided a record anyone could
//! decide, so the console keeps its own: the approve and deny routes record every decision the
//! broker accepted.
//!
//! Kept in the console process, bounded ([`LIMIT`] decisions overall, oldest dropped first):
//! a restart or another replica does not see it. It moves to the console's event log once that
//! exists (see `docs/decisions.md`, "Console pages").

use std::collections::VecDeque;
use std::sync::Mutex;

use countersign_console_core::{Login, Time};

/// How many decisions the console remembers.
pub const LIMIT: usize = 10_000;

/// One decision a person made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub login: Login,
    pub record_id: String,
    /// `approved` or `denied`.
    pub event: &'static str,
    pub at: Time,
}

/// The decisions made through this console, oldest first.
#[derive(Debug, Default)]
pub struct DecisionLog {
    entries: Mutex<VecDeque<Decision>>,
}

impl DecisionLog {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Decision>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a decision the broker accepted.
    pub fn record(&self, login: &Login, record_id: &str, approved: bool, at: Time) {
        let mut entries = self.lock();
        if entries.len() >= LIMIT {
            entries.pop_front();
        }
        entries.push_back(Decision {
            login: login.clone(),
            record_id: record_id.to_owned(),
            event: if approved { "approved" } else { "denied" },
            at,
        });
    }

    /// The person's decisions, newest first, at most `limit`.
    pub fn of(&self, login: &Login, limit: usize) -> Vec<Decision> {
        self.lock()
            .iter()
            .rev()
            .filter(|d| d.login == *login)
            .take(limit)
            .cloned()
            .collect()
    }

    /// Who decided a record through this console, if anyone did.
    pub fn of_record(&self, record_id: &str) -> Option<Decision> {
        self.lock()
            .iter()
            .rev()
            .find(|d| d.record_id == record_id)
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn newest_first_per_person_and_bounded() {
        let log = DecisionLog::default();
        let (ada, bob) = (
            Login::parse("ada@example.com"),
            Login::parse("bob@example.com"),
        );
        let (Some(ada), Some(bob)) = (ada, bob) else {
            panic!("logins");
        };
        let t0 = Time::default();
        log.record(&ada, "r1", true, t0);
        log.record(&bob, "r2", false, t0);
        log.record(&ada, "r3", false, t0 + chrono::Duration::minutes(1));
        let mine: Vec<_> = log.of(&ada, 10).into_iter().map(|d| d.record_id).collect();
        assert_eq!(mine, ["r3", "r1"]);
        assert_eq!(log.of(&ada, 1).len(), 1);
        assert_eq!(log.of_record("r2").map(|d| d.login), Some(bob.clone()));
        assert_eq!(log.of_record("r9"), None);
        for i in 0..LIMIT {
            log.record(&bob, &format!("x{i}"), true, t0);
        }
        assert!(log.of(&ada, 10).is_empty(), "the oldest are dropped first");
        assert_eq!(log.of(&bob, usize::MAX).len(), LIMIT);
    }
}
