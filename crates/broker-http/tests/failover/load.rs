//! The load on the two broker replicas: clients (a machine login and a session each) that ask
//! for an automatic grant on one replica, release it on the other, and revoke every third one,
//! sending a 503 (or a 429) again with back-off and a freshly signed proof and request object
//! each time, as `countersign-broker-client` does; every answer is recorded ([`Log`]), and every
//! grant and revocation the brokers acknowledged ([`Ledger`]), so that they can be checked after
//! each failover.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use reqwest::Method as M;
use serde_json::Value;

use crate::common::client::{Client, Session, s};

/// The automatic secret the clients ask for.
pub const AUTO: &str = "FAILOVER_AUTO";

/// What a call was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Grant,
    Release,
    Revoke,
    /// A release after the revocation, or the checks' release of a revoked grant.
    Refused,
    /// The checks' release of a live grant.
    Check,
}

/// One answer: when, from which replica (0 or 1), to what, its status, in which phase (0 before
/// the first failover, 1 from the first, 2 from the second).
#[derive(Debug, Clone)]
pub struct Answer {
    /// When the call was sent, and when it was answered.
    pub sent: Instant,
    pub at: Instant,
    pub replica: usize,
    pub kind: Kind,
    pub status: u16,
    pub phase: usize,
}

/// Every answer and every call that ended unexpectedly.
#[derive(Default)]
pub struct Log {
    pub answers: Mutex<Vec<Answer>>,
    /// Calls that failed to be answered (a transport error), by replica.
    pub transport: Mutex<Vec<(Instant, usize, String)>>,
    /// Final answers that were not what the call expects (any 500 among them).
    pub unexpected: Mutex<Vec<String>>,
    pub phase: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Log {
    fn answered(&self, sent: Instant, replica: usize, kind: Kind, status: u16) {
        lock(&self.answers).push(Answer {
            sent,
            at: Instant::now(),
            replica,
            kind,
            status,
            phase: self.phase.load(Ordering::SeqCst),
        });
    }

    pub fn unexpected(&self, what: String) {
        lock(&self.unexpected).push(what);
    }

    /// Answers counted by status.
    pub fn by_status(&self) -> BTreeMap<u16, usize> {
        let mut m = BTreeMap::new();
        for a in lock(&self.answers).iter() {
            *m.entry(a.status).or_default() += 1;
        }
        m
    }

    /// A copy of the answers so far.
    pub fn answers(&self) -> Vec<Answer> {
        lock(&self.answers).clone()
    }

    pub fn unexpected_so_far(&self) -> Vec<String> {
        lock(&self.unexpected).clone()
    }

    pub fn transport_errors(&self) -> Vec<(Instant, usize, String)> {
        lock(&self.transport).clone()
    }
}

/// The two replicas, as clients with the console token.
pub type Replicas = [Client; 2];

/// Calls `once` on `replica` until it is answered with something other than 503 or 429
/// (waiting 50 ms doubling to 500 ms between attempts; `once` signs afresh each time), for at
/// most 120 s: the final answer, or `None` (recorded as unexpected) when none came.
pub async fn call<F, Fut>(
    log: &Log,
    replica: usize,
    kind: Kind,
    what: &str,
    mut once: F,
) -> Option<(u16, Value)>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<(u16, Value)>>,
{
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut wait = Duration::from_millis(50);
    loop {
        let sent = Instant::now();
        match once().await {
            Ok((status, v)) => {
                log.answered(sent, replica, kind, status);
                if !matches!(status, 503 | 429) {
                    return Some((status, v));
                }
            }
            Err(e) => lock(&log.transport).push((Instant::now(), replica, format!("{what}: {e}"))),
        }
        if Instant::now() > deadline {
            log.unexpected(format!(
                "{what} on replica {replica}: no answer but 503 in 120 s"
            ));
            return None;
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(Duration::from_millis(500));
    }
}

/// A grant the brokers acknowledged (200 `granted`), and whether its revocation was
/// acknowledged (200).
#[derive(Debug, Clone)]
pub struct Held {
    pub session: usize,
    pub grant: String,
    pub revoked: bool,
}

#[derive(Default)]
pub struct Ledger {
    pub held: Mutex<Vec<Held>>,
}

impl Ledger {
    pub fn snapshot(&self) -> Vec<Held> {
        lock(&self.held).clone()
    }
}

/// What the clients share: the replicas, the sessions, the log and the ledger, and the
/// switches that pause and stop them.
pub struct Load {
    pub replicas: Replicas,
    pub sessions: Vec<Session>,
    pub log: Log,
    pub ledger: Ledger,
    pub paused: AtomicBool,
    /// Set while the load's clients are inside a round (so a pause waits for them).
    pub busy: AtomicUsize,
    pub stop: AtomicBool,
}

/// Whether the answer to a release is the refusal of an ended grant.
pub fn not_live(status: u16, v: &Value) -> bool {
    status == 403 && s(v, "code") == "GRANT_NOT_LIVE"
}

impl Load {
    /// Client `i`'s loop until stopped: a round at a time, alternating replicas.
    pub async fn client(self: Arc<Self>, i: usize) {
        let mut n = i;
        while !self.stop.load(Ordering::SeqCst) {
            if self.paused.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            self.busy.fetch_add(1, Ordering::SeqCst);
            if !self.paused.load(Ordering::SeqCst) {
                self.round(i, n).await;
            }
            self.busy.fetch_sub(1, Ordering::SeqCst);
            n += 1;
        }
    }

    /// One round of session `i`: a grant on one replica, its release on the other, and for
    /// every third round its revocation and a release that must be refused.
    async fn round(&self, i: usize, n: usize) {
        let (r, other) = (n % 2, (n + 1) % 2);
        let (a, b) = (&self.replicas[r], &self.replicas[other]);
        let se = &self.sessions[i];
        let what = format!("grant (session {i})");
        let Some((status, made)) = call(&self.log, r, Kind::Grant, &what, || {
            se.ask(a, AUTO, None, None)
        })
        .await
        else {
            return;
        };
        if status != 200 || s(&made, "state") != "granted" {
            return self.log.unexpected(format!("{what}: {status} {made}"));
        }
        let grant = s(&made, "grant_id");
        lock(&self.ledger.held).push(Held {
            session: i,
            grant: grant.clone(),
            revoked: false,
        });
        let path = format!("/v1/grants/{grant}/values");
        let what = format!("release of {grant}");
        match call(&self.log, other, Kind::Release, &what, || {
            se.post(b, &path, None)
        })
        .await
        {
            Some((200, _)) | None => {}
            Some((status, v)) => self.log.unexpected(format!("{what}: {status} {v}")),
        }
        if !n.is_multiple_of(3) {
            return;
        }
        let revoke = format!("/v1/grants/{grant}/revoke");
        let what = format!("revocation of {grant}");
        match call(&self.log, r, Kind::Revoke, &what, || {
            se.post(a, &revoke, None)
        })
        .await
        {
            Some((200, _)) => {
                if let Some(h) = lock(&self.ledger.held)
                    .iter_mut()
                    .find(|h| h.grant == grant)
                {
                    h.revoked = true;
                }
            }
            None => return,
            Some((status, v)) => return self.log.unexpected(format!("{what}: {status} {v}")),
        }
        let what = format!("release of revoked {grant}");
        match call(&self.log, other, Kind::Refused, &what, || {
            se.post(b, &path, None)
        })
        .await
        {
            Some((status, v)) if not_live(status, &v) => {}
            None => {}
            Some((status, v)) => self.log.unexpected(format!("{what}: {status} {v}")),
        }
    }

    /// Pauses the clients and waits until none is inside a round.
    pub async fn pause(&self) {
        self.paused.store(true, Ordering::SeqCst);
        while self.busy.load(Ordering::SeqCst) > 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn resume(&self) {
        self.paused.store(false, Ordering::SeqCst);
    }

    /// Every acknowledged grant released (200) on both replicas, every acknowledged revocation
    /// refused (403 `GRANT_NOT_LIVE`) on both, by one task per session: the number checked.
    pub async fn check_ledger(self: &Arc<Self>) -> usize {
        let held = self.ledger.snapshot();
        let mut tasks = Vec::new();
        for i in 0..self.sessions.len() {
            let mine: Vec<Held> = held.iter().filter(|h| h.session == i).cloned().collect();
            let load = self.clone();
            tasks.push(tokio::spawn(async move {
                for h in &mine {
                    for r in 0..2 {
                        load.check_one(h, r).await;
                    }
                }
            }));
        }
        for t in tasks {
            if let Err(e) = t.await {
                self.log.unexpected(format!("a check task failed: {e}"));
            }
        }
        held.len()
    }

    async fn check_one(&self, h: &Held, r: usize) {
        let (c, se) = (&self.replicas[r], &self.sessions[h.session]);
        let path = format!("/v1/grants/{}/values", h.grant);
        let (kind, what) = if h.revoked {
            (
                Kind::Refused,
                format!("check: revoked {} on replica {r}", h.grant),
            )
        } else {
            (
                Kind::Check,
                format!("check: grant {} on replica {r}", h.grant),
            )
        };
        match call(&self.log, r, kind, &what, || se.post(c, &path, None)).await {
            None => {}
            Some((status, v)) if h.revoked && !not_live(status, &v) => {
                self.log.unexpected(format!("{what}: {status} {v}"))
            }
            Some((status, v)) if !h.revoked && status != 200 => {
                self.log.unexpected(format!("{what}: {status} {v}"))
            }
            Some(_) => {}
        }
    }

    /// `/readyz` of replica `r`: its status (0 when unanswered).
    pub async fn readyz(&self, r: usize) -> u16 {
        match self.replicas[r].send(M::GET, "/readyz", &[], None).await {
            Ok((status, _)) => status,
            Err(_) => 0,
        }
    }
}
