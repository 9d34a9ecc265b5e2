//! State-machine property test of the broker's domain core on real storage.
//!
//! Proptest draws sequences of client operations over three persons, their machines (machine
//! logins, some left pending), sessions, and eight secrets of every tier: requests, approvals,
//! denials, cancels, value releases, grant revokes by holder / approver / operator, machine
//! revokes, unenrollment, renewal, clock moves, sweeps, and store changes applied by reload,
//! by reread, or not yet. A model written from the spec predicts each answer. After every step
//! the test reads everything back through the core's own read methods (`own_grants`,
//! `get_request`, `record`, `pending_for`, `grants_for`, `release_values`) and checks:
//!
//! - every answer, state, decision and time is the model's;
//! - no live grant on a session that is not live; nothing pending under an ended session, a
//!   revoked machine or a lapsed lease;
//! - every live grant's chain verifies, and policy admitted it when it was made (automatic
//!   tier, or approved by someone the record admits who had standing);
//! - a terminal request or record, once seen, never changes;
//! - values are released only for live grants, and are the store's current values.
//!
//! Runs on SQLite always, both on the bare database and behind the in-memory cache the broker
//! puts in front of SQLite (64 cases × up to 40 operations each; `PROPTEST_CASES` overrides),
//! and on PostgreSQL when `COUNTERSIGN_TEST_POSTGRES_URL` is set (16 cases).

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Mutex;

use chrono::Duration;
use countersign_broker_core::Time;
use countersign_broker_core::error::{Error, ErrorCode};
use countersign_broker_core::ids::{Approver, GrantId, Login, RecordId, RequestId};
use countersign_broker_core::model::{
    Enrollment, GrantEnd, GrantedBy, Record, RecordKind, RecordState, Request, RequestState,
};
use countersign_broker_core::policy::{SecretDecision, Tier};
use countersign_e2e::core::{
    CoreFixture, Machine, PendingMachineLogin, Session, login, postgres_configured,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};

const PERSONS: [&str; 3] = ["ada@x.test", "bob@x.test", "cy@x.test"];
/// The secrets: name, initial owner, initial tier, present in the store at the start.
const SECRETS: [(&str, usize, Tier, bool); 8] = [
    ("AUTO_A", 0, Tier::Automatic, true),
    ("AUTO_B", 1, Tier::Automatic, true),
    ("OWN_A", 0, Tier::Owner, true),
    ("OWN_B", 1, Tier::Owner, true),
    ("SHARED_A", 2, Tier::Shared, true),
    ("SHARED_B", 0, Tier::Shared, true),
    ("LOCKED_A", 1, Tier::Locked, true),
    ("EXTRA", 2, Tier::Owner, false),
];
const TIERS: [Tier; 4] = [Tier::Automatic, Tier::Owner, Tier::Shared, Tier::Locked];
const LIFETIMES: [Option<u64>; 4] = [None, Some(60), Some(600), Some(7200)];

// ---------------------------------------------------------------------------------------------
// Operations
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Change {
    Owner(u8),
    Tier(u8),
    Value,
    Remove,
    Restore,
}

#[derive(Debug, Clone, Copy)]
enum Apply {
    Reload,
    Reread,
    NotYet,
}

#[derive(Debug, Clone)]
enum Op {
    Login {
        person: u8,
    },
    StartLogin {
        person: u8,
    },
    Enroll {
        machine: u8,
        runtime: u8,
    },
    Request {
        session: u8,
        secrets: Vec<u8>,
        lifetime: u8,
    },
    /// `aim`: pick a pending record and the person it names (else any record, any person).
    Approve {
        record: u8,
        person: u8,
        aim: bool,
    },
    Deny {
        record: u8,
        person: u8,
        aim: bool,
    },
    /// `aim`: pick a pending request of the session; `foreign`: pick any session's request.
    Cancel {
        session: u8,
        request: u8,
        foreign: bool,
        aim: bool,
    },
    /// `aim`: pick a live grant of the session; `foreign`: pick any session's grant.
    Values {
        session: u8,
        grant: u8,
        foreign: bool,
        aim: bool,
    },
    RevokeHolder {
        session: u8,
        grant: u8,
    },
    RevokeApprover {
        person: u8,
        grant: u8,
    },
    RevokeOperator {
        machine: u8,
        grant: u8,
    },
    RevokeMachine {
        by_operator: bool,
        who: u8,
        machine: u8,
    },
    Unenroll {
        session: u8,
    },
    Renew {
        session: u8,
    },
    Advance {
        secs: u32,
    },
    Sweep,
    Store {
        secret: u8,
        change: Change,
        apply: Apply,
    },
}

fn change() -> impl Strategy<Value = Change> {
    prop_oneof![
        3 => any::<u8>().prop_map(Change::Owner),
        3 => any::<u8>().prop_map(Change::Tier),
        1 => Just(Change::Value),
        1 => Just(Change::Remove),
        1 => Just(Change::Restore),
    ]
}

fn apply() -> impl Strategy<Value = Apply> {
    prop_oneof![2 => Just(Apply::Reload), 2 => Just(Apply::Reread), 1 => Just(Apply::NotYet)]
}

fn op() -> impl Strategy<Value = Op> {
    let ix = any::<u8>;
    let aim = || prop::bool::weighted(0.8);
    let foreign = || prop::bool::weighted(0.1);
    let names = prop_oneof![
        3 => prop::collection::vec(0u8..8, 1..=1),
        1 => prop::collection::vec(0u8..8, 2..=3),
    ];
    let secs = prop_oneof![
        8 => 1u32..120,
        4 => 300u32..1200,
        2 => 1800u32..7200,
        1 => Just(13 * 3600),
    ];
    prop_oneof![
        1 => ix().prop_map(|person| Op::Login { person }),
        1 => ix().prop_map(|person| Op::StartLogin { person }),
        2 => (ix(), 0u8..3).prop_map(|(machine, runtime)| Op::Enroll { machine, runtime }),
        8 => (ix(), names, 0u8..4)
            .prop_map(|(session, secrets, lifetime)| Op::Request { session, secrets, lifetime }),
        5 => (ix(), ix(), aim())
            .prop_map(|(record, person, aim)| Op::Approve { record, person, aim }),
        2 => (ix(), ix(), aim()).prop_map(|(record, person, aim)| Op::Deny { record, person, aim }),
        2 => (ix(), ix(), foreign(), aim()).prop_map(|(session, request, foreign, aim)| {
            Op::Cancel { session, request, foreign, aim }
        }),
        4 => (ix(), ix(), foreign(), aim()).prop_map(|(session, grant, foreign, aim)| {
            Op::Values { session, grant, foreign, aim }
        }),
        1 => (ix(), ix()).prop_map(|(session, grant)| Op::RevokeHolder { session, grant }),
        1 => (ix(), ix()).prop_map(|(person, grant)| Op::RevokeApprover { person, grant }),
        1 => (ix(), ix()).prop_map(|(machine, grant)| Op::RevokeOperator { machine, grant }),
        1 => (any::<bool>(), ix(), ix())
            .prop_map(|(by_operator, who, machine)| Op::RevokeMachine { by_operator, who, machine }),
        1 => ix().prop_map(|session| Op::Unenroll { session }),
        3 => ix().prop_map(|session| Op::Renew { session }),
        3 => secs.prop_map(|secs| Op::Advance { secs }),
        1 => Just(Op::Sweep),
        2 => (0u8..8, change(), apply())
            .prop_map(|(secret, change, apply)| Op::Store { secret, change, apply }),
    ]
}

// ---------------------------------------------------------------------------------------------
// The model
// ---------------------------------------------------------------------------------------------

/// A request's explicit state; time-driven ends are derived by [`Model::request_state`].
#[derive(Debug, Clone, PartialEq, Eq)]
enum RState {
    Pending,
    /// `by` is the approver, or `None` when policy decided at once.
    Granted {
        at: Time,
        by: Option<String>,
    },
    Denied {
        at: Time,
        by: Option<String>,
    },
    Cancelled {
        at: Time,
        by: String,
    },
    Expired {
        at: Time,
    },
}

impl RState {
    fn core_state(&self) -> RequestState {
        match self {
            RState::Pending => RequestState::Pending,
            RState::Granted { .. } => RequestState::Granted,
            RState::Denied { .. } => RequestState::Denied,
            RState::Cancelled { .. } => RequestState::Cancelled,
            RState::Expired { .. } => RequestState::Expired,
        }
    }
}

#[derive(Debug)]
struct MMachine {
    m: Machine,
    operator: usize,
    expires_at: Time,
    revoked: bool,
}

#[derive(Debug)]
struct MSession {
    s: Session,
    machine: usize,
    runtime: u8,
    lease: Time,
    /// An explicit end (unenroll, machine revoke), made while live.
    ended: Option<(Time, String)>,
    withheld: BTreeSet<String>,
    /// The operator (the machine's person).
    operator: usize,
}

#[derive(Debug)]
struct MRequest {
    id: RequestId,
    session: usize,
    /// Sorted, unique.
    names: Vec<String>,
    lifetime: Option<u64>,
    state: RState,
    record: Option<usize>,
    grant: Option<usize>,
    expires_at: Option<Time>,
}

#[derive(Debug)]
enum RecKind {
    Agent { request: usize },
    Login { pending: Box<PendingMachineLogin> },
}

/// A machine-login record's explicit decision.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LoginDecision {
    Approved { at: Time, by: String },
    Denied { at: Time, by: String },
}

#[derive(Debug)]
struct MRecord {
    id: RecordId,
    kind: RecKind,
    /// `None`: anyone.
    approver: Option<usize>,
    expires_at: Time,
    login_decision: Option<LoginDecision>,
}

#[derive(Debug)]
struct MGrant {
    id: GrantId,
    session: usize,
    request: usize,
    names: Vec<String>,
    automatic: bool,
    approver: Option<usize>,
    expires_at: Option<Time>,
    revoked: Option<Time>,
}

/// The model's view of a record's state.
#[derive(Debug, Clone, PartialEq, Eq)]
struct RecView {
    state: RecordState,
    /// (by, at) of the decision; `None` while pending.
    decided: Option<(String, Time)>,
}

struct Model {
    persons: Vec<Login>,
    /// The store: name → (owner, tier, value).
    store: BTreeMap<&'static str, (usize, Tier, String)>,
    /// The broker's policy as last loaded: name → (owner, tier).
    policy: BTreeMap<&'static str, (usize, Tier)>,
    /// Policies by rules_version, as the broker reported them.
    policies: BTreeMap<String, BTreeMap<&'static str, (usize, Tier)>>,
    machines: Vec<MMachine>,
    sessions: Vec<MSession>,
    requests: Vec<MRequest>,
    records: Vec<MRecord>,
    grants: Vec<MGrant>,
    /// Terminal answers seen, which must never change.
    seen_requests: BTreeMap<RequestId, Request>,
    seen_records: BTreeMap<RecordId, Record>,
    value_counter: u32,
    hosts: u32,
}

type Check = Result<(), TestCaseError>;

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

/// How often each expectation was met, by label and answer: printed after a run, to show
/// what the drawn sequences reached.
static TALLY: Mutex<BTreeMap<String, usize>> = Mutex::new(BTreeMap::new());

fn tally(what: &str, answer: &str) {
    let mut t = TALLY.lock().unwrap_or_else(|p| p.into_inner());
    *t.entry(format!("{what} -> {answer}")).or_default() += 1;
}

fn expect_code<T: std::fmt::Debug>(r: &Result<T, Error>, code: ErrorCode, what: &str) -> Check {
    tally(what, code.as_str());
    match r {
        Err(e) if e.code == code => Ok(()),
        other => Err(fail(format!(
            "{what}: expected {}, got {other:?}",
            code.as_str()
        ))),
    }
}

fn ok<T>(r: Result<T, Error>, what: &str) -> Result<T, TestCaseError> {
    tally(what, "ok");
    r.map_err(|e| fail(format!("{what}: expected success, got {e:?}")))
}

fn pick(len: usize, ix: u8) -> Option<usize> {
    (len > 0).then(|| usize::from(ix) % len)
}

/// One of `all`: among those `preferred` when there are any, else among all.
fn choose(
    all: impl Iterator<Item = usize>,
    preferred: impl Fn(&usize) -> bool,
    ix: u8,
) -> Option<usize> {
    let all: Vec<usize> = all.collect();
    let best: Vec<usize> = all.iter().copied().filter(|i| preferred(i)).collect();
    let from = if best.is_empty() { &all } else { &best };
    pick(from.len(), ix).map(|k| from[k])
}

impl Model {
    async fn new(fx: &CoreFixture) -> Model {
        let mut store = BTreeMap::new();
        for (name, owner, tier, present) in SECRETS {
            if present {
                let value = format!("v0-{name}");
                fx.store.put(name, PERSONS[owner], tier, &value);
                store.insert(name, (owner, tier, value));
            }
        }
        fx.reload().await;
        let mut m = Model {
            persons: PERSONS.iter().map(|p| login(p)).collect(),
            policy: store.iter().map(|(n, (o, t, _))| (*n, (*o, *t))).collect(),
            store,
            policies: BTreeMap::new(),
            machines: Vec::new(),
            sessions: Vec::new(),
            requests: Vec::new(),
            records: Vec::new(),
            grants: Vec::new(),
            seen_requests: BTreeMap::new(),
            seen_records: BTreeMap::new(),
            value_counter: 0,
            hosts: 0,
        };
        m.note_policy(fx);
        m
    }

    fn note_policy(&mut self, fx: &CoreFixture) {
        let version = fx.broker.policy().rules_version().to_owned();
        self.policies.insert(version, self.policy.clone());
    }

    /// A record and a person to decide it: with `aim`, a pending record and the person it
    /// names (anyone's: the drawn person).
    fn aim_record(&self, record: u8, person: u8, aim: bool, now: Time) -> Option<(usize, usize)> {
        let ci = choose(
            0..self.records.len(),
            |ci| aim && self.record_view(*ci, now).state == RecordState::Pending,
            record,
        )?;
        let p = match (aim, self.records[ci].approver) {
            (true, Some(a)) => a,
            _ => usize::from(person) % PERSONS.len(),
        };
        Some((ci, p))
    }

    fn person_ix(&self, l: &Login) -> Option<usize> {
        self.persons.iter().position(|p| p == l)
    }

    // --- derived states -----------------------------------------------------------------------

    fn session_end(&self, si: usize, now: Time) -> Option<(Time, String)> {
        let s = &self.sessions[si];
        match &s.ended {
            Some(e) => Some(e.clone()),
            None if now >= s.lease => Some((s.lease, "broker".into())),
            None => None,
        }
    }

    fn session_live(&self, si: usize, now: Time) -> bool {
        self.session_end(si, now).is_none()
    }

    fn request_state(&self, ri: usize, now: Time) -> RState {
        let r = &self.requests[ri];
        if r.state != RState::Pending {
            return r.state.clone();
        }
        let expiry = r.expires_at.filter(|t| now >= *t);
        match (expiry, self.session_end(r.session, now)) {
            (Some(e), Some((s, _))) if e <= s => RState::Expired { at: e },
            (_, Some((at, by))) => RState::Cancelled { at, by },
            (Some(e), None) => RState::Expired { at: e },
            (None, None) => RState::Pending,
        }
    }

    fn record_view(&self, ci: usize, now: Time) -> RecView {
        let rec = &self.records[ci];
        match &rec.kind {
            RecKind::Agent { request } => match self.request_state(*request, now) {
                RState::Pending => RecView {
                    state: RecordState::Pending,
                    decided: None,
                },
                RState::Granted { at, by } => RecView {
                    state: RecordState::Approved,
                    decided: Some((by.unwrap_or_default(), at)),
                },
                RState::Denied { at, by } => RecView {
                    state: RecordState::Denied,
                    decided: Some((by.unwrap_or_default(), at)),
                },
                RState::Cancelled { at, by } => RecView {
                    state: RecordState::Cancelled,
                    decided: Some((by, at)),
                },
                RState::Expired { at } => RecView {
                    state: RecordState::Expired,
                    decided: Some(("broker".into(), at)),
                },
            },
            RecKind::Login { .. } => match &rec.login_decision {
                Some(LoginDecision::Approved { at, by }) => RecView {
                    state: RecordState::Approved,
                    decided: Some((by.clone(), *at)),
                },
                Some(LoginDecision::Denied { at, by }) => RecView {
                    state: RecordState::Denied,
                    decided: Some((by.clone(), *at)),
                },
                None if now >= rec.expires_at => RecView {
                    state: RecordState::Expired,
                    decided: Some(("broker".into(), rec.expires_at)),
                },
                None => RecView {
                    state: RecordState::Pending,
                    decided: None,
                },
            },
        }
    }

    fn grant_end(&self, gi: usize, now: Time) -> Option<(GrantEnd, Time)> {
        let g = &self.grants[gi];
        if let Some(t) = g.revoked {
            return Some((GrantEnd::Revoked, t));
        }
        let expiry = g.expires_at.filter(|t| now >= *t);
        match (expiry, self.session_end(g.session, now)) {
            (Some(e), Some((s, _))) if e <= s => Some((GrantEnd::Expired, e)),
            (_, Some((s, _))) => Some((GrantEnd::Ended, s)),
            (Some(e), None) => Some((GrantEnd::Expired, e)),
            (None, None) => None,
        }
    }

    fn grant_live(&self, gi: usize, now: Time) -> bool {
        self.grant_end(gi, now).is_none()
    }

    fn grant_state_str(&self, gi: usize, now: Time) -> &'static str {
        match self.grant_end(gi, now) {
            None => "live",
            Some((GrantEnd::Expired, _)) => "expired",
            Some((GrantEnd::Revoked, _)) => "revoked",
            Some((GrantEnd::Ended, _)) => "ended",
        }
    }

    // --- policy rules, written from the spec --------------------------------------------------

    /// Whether `approver` (or policy alone, for `None`) may release `name` to a session from
    /// which `withheld` is withheld, under `policy`. `Err` names the refusal.
    fn standing(
        policy: &BTreeMap<&'static str, (usize, Tier)>,
        names: &[String],
        approver: Option<usize>,
        withheld: &BTreeSet<String>,
    ) -> Result<(), ErrorCode> {
        for n in names {
            let &(owner, tier) = policy
                .get(n.as_str())
                .ok_or(ErrorCode::SECRET_NOT_IN_STORE)?;
            let ok = match tier {
                Tier::Automatic if !withheld.contains(n) => true,
                Tier::Automatic | Tier::Owner => approver == Some(owner),
                Tier::Shared => approver.is_some(),
                Tier::Locked => false,
            };
            if !ok {
                return Err(ErrorCode::GRANT_CHAIN_INVALID);
            }
        }
        Ok(())
    }

    /// The expected answer to releasing grant `gi`'s values to its (authenticated) session.
    fn expected_values(&self, gi: usize, now: Time) -> Result<BTreeMap<String, String>, ErrorCode> {
        let g = &self.grants[gi];
        if !self.grant_live(gi, now) {
            return Err(ErrorCode::GRANT_NOT_LIVE);
        }
        Self::standing(
            &self.policy,
            &g.names,
            g.approver,
            &self.sessions[g.session].withheld,
        )?;
        g.names
            .iter()
            .map(|n| {
                self.store
                    .get(n.as_str())
                    .map(|(_, _, v)| (n.clone(), v.clone()))
                    .ok_or(ErrorCode::SECRET_NOT_IN_STORE)
            })
            .collect()
    }

    // --- steps --------------------------------------------------------------------------------

    async fn step(&mut self, fx: &CoreFixture, op: &Op) -> Check {
        let now = fx.now();
        match op {
            Op::Login { person } => {
                let p = usize::from(*person) % PERSONS.len();
                let host = self.host();
                let pending = ok(
                    fx.start_machine_login(&self.persons[p], &host).await,
                    "start machine login",
                )?;
                let m = ok(
                    fx.approve_machine_login(&pending, &self.persons[p]).await,
                    "approve machine login",
                )?;
                self.records.push(MRecord {
                    id: pending.record_id,
                    kind: RecKind::Login {
                        pending: Box::new(pending),
                    },
                    approver: Some(p),
                    expires_at: now + Duration::minutes(10),
                    login_decision: Some(LoginDecision::Approved {
                        at: now,
                        by: PERSONS[p].into(),
                    }),
                });
                self.add_machine(m, p, now);
            }
            Op::StartLogin { person } => {
                let p = usize::from(*person) % PERSONS.len();
                let host = self.host();
                let pending = ok(
                    fx.start_machine_login(&self.persons[p], &host).await,
                    "start machine login",
                )?;
                self.records.push(MRecord {
                    id: pending.record_id,
                    kind: RecKind::Login {
                        pending: Box::new(pending),
                    },
                    approver: Some(p),
                    expires_at: now + Duration::minutes(10),
                    login_decision: None,
                });
            }
            Op::Enroll { machine, runtime } => {
                let Some(mi) = pick(self.machines.len(), *machine) else {
                    return Ok(());
                };
                let runtime_id = format!("rt-{runtime}");
                let r = fx.enroll(&self.machines[mi].m, &runtime_id).await;
                let mm = &self.machines[mi];
                if mm.revoked || now >= mm.expires_at {
                    return expect_code(
                        &r,
                        ErrorCode::LAUNCHER_INVALID,
                        "enroll under a dead login",
                    );
                }
                let taken = (0..self.sessions.len()).any(|si| {
                    self.sessions[si].machine == mi
                        && self.sessions[si].runtime == *runtime
                        && self.session_live(si, now)
                });
                if taken {
                    return expect_code(&r, ErrorCode::ALREADY_ENROLLED, "enroll a live runtime");
                }
                let s = ok(r, "enroll")?;
                let operator = self.machines[mi].operator;
                self.sessions.push(MSession {
                    s,
                    machine: mi,
                    runtime: *runtime,
                    lease: now + Duration::minutes(15),
                    ended: None,
                    withheld: BTreeSet::new(),
                    operator,
                });
            }
            Op::Request {
                session,
                secrets,
                lifetime,
            } => {
                let Some(si) = pick(self.sessions.len(), *session) else {
                    return Ok(());
                };
                self.request(fx, si, secrets, LIFETIMES[usize::from(*lifetime) % 4], now)
                    .await?;
            }
            Op::Approve {
                record,
                person,
                aim,
            } => {
                let Some((ci, p)) = self.aim_record(*record, *person, *aim, now) else {
                    return Ok(());
                };
                self.decide(fx, ci, p, true, now).await?;
            }
            Op::Deny {
                record,
                person,
                aim,
            } => {
                let Some((ci, p)) = self.aim_record(*record, *person, *aim, now) else {
                    return Ok(());
                };
                self.decide(fx, ci, p, false, now).await?;
            }
            Op::Cancel {
                session,
                request,
                foreign,
                aim,
            } => {
                let Some(si) = pick(self.sessions.len(), *session) else {
                    return Ok(());
                };
                let Some(ri) = choose(
                    (0..self.requests.len())
                        .filter(|ri| *foreign || self.requests[*ri].session == si),
                    |ri| *aim && self.request_state(*ri, now) == RState::Pending,
                    *request,
                ) else {
                    return Ok(());
                };
                let r = fx.cancel(&self.sessions[si].s, self.requests[ri].id).await;
                if !self.session_live(si, now) {
                    return expect_code(&r, ErrorCode::PROOF_INVALID, "cancel from a dead session");
                }
                if self.requests[ri].session != si {
                    return expect_code(&r, ErrorCode::NOT_YOURS, "cancel another's request");
                }
                if self.request_state(ri, now) != RState::Pending {
                    return expect_code(
                        &r,
                        ErrorCode::REQUEST_TERMINAL,
                        "cancel a decided request",
                    );
                }
                let state = ok(r, "cancel")?;
                prop_assert_eq!(state, RequestState::Cancelled);
                self.requests[ri].state = RState::Cancelled {
                    at: now,
                    by: format!("session:{}", self.sessions[si].s.id),
                };
            }
            Op::Values {
                session,
                grant,
                foreign,
                aim,
            } => {
                let Some(si) = pick(self.sessions.len(), *session) else {
                    return Ok(());
                };
                let Some(gi) = choose(
                    (0..self.grants.len()).filter(|gi| *foreign || self.grants[*gi].session == si),
                    |gi| *aim && self.grant_live(*gi, now),
                    *grant,
                ) else {
                    return Ok(());
                };
                let r = fx.values(&self.sessions[si].s, self.grants[gi].id).await;
                if !self.session_live(si, now) {
                    return expect_code(&r, ErrorCode::PROOF_INVALID, "values to a dead session");
                }
                if self.grants[gi].session != si {
                    return expect_code(&r, ErrorCode::NOT_YOURS, "values of another's grant");
                }
                self.check_values(gi, r.map(|v| v.into_iter().collect()), now, "values")?;
            }
            Op::RevokeHolder { session, grant } => {
                let Some(si) = pick(self.sessions.len(), *session) else {
                    return Ok(());
                };
                let own: Vec<usize> = (0..self.grants.len())
                    .filter(|gi| self.grants[*gi].session == si)
                    .collect();
                let Some(k) = pick(own.len(), *grant) else {
                    return Ok(());
                };
                let gi = own[k];
                let r = fx
                    .revoke_by_holder(&self.sessions[si].s, self.grants[gi].id)
                    .await;
                if !self.session_live(si, now) {
                    return expect_code(&r, ErrorCode::PROOF_INVALID, "revoke from a dead session");
                }
                self.revoked(gi, ok(r, "revoke by holder")?, now)?;
            }
            Op::RevokeApprover { person, grant } => {
                let Some(gi) = pick(self.grants.len(), *grant) else {
                    return Ok(());
                };
                let p = usize::from(*person) % PERSONS.len();
                let r = fx
                    .revoke_by_approver(&self.persons[p], self.grants[gi].id)
                    .await;
                let g = &self.grants[gi];
                if g.approver != Some(p) && self.sessions[g.session].operator != p {
                    return expect_code(&r, ErrorCode::NOT_APPROVER, "revoke by a stranger");
                }
                self.revoked(gi, ok(r, "revoke by approver")?, now)?;
            }
            Op::RevokeOperator { machine, grant } => {
                let (Some(mi), Some(gi)) = (
                    pick(self.machines.len(), *machine),
                    pick(self.grants.len(), *grant),
                ) else {
                    return Ok(());
                };
                let r = fx
                    .revoke_by_operator(&self.machines[mi].m, self.grants[gi].id)
                    .await;
                if self.machines[mi].revoked {
                    return expect_code(
                        &r,
                        ErrorCode::LAUNCHER_INVALID,
                        "operator on a revoked login",
                    );
                }
                let op = self.machines[mi].operator;
                let g = &self.grants[gi];
                if g.approver != Some(op) && self.sessions[g.session].operator != op {
                    return expect_code(
                        &r,
                        ErrorCode::NOT_APPROVER,
                        "operator revoke of a stranger's grant",
                    );
                }
                self.revoked(gi, ok(r, "revoke by operator")?, now)?;
                // The operator's revoke withholds the revoked grant's secrets from its session:
                // the session's other automatic grants that got any of them end, and they need
                // approval from now on.
                let si = self.grants[gi].session;
                let withheld: BTreeSet<String> = self.grants[gi].names.iter().cloned().collect();
                for oi in 0..self.grants.len() {
                    let other = &self.grants[oi];
                    if oi != gi
                        && other.session == si
                        && other.automatic
                        && other.names.iter().any(|n| withheld.contains(n))
                        && self.grant_live(oi, now)
                    {
                        self.grants[oi].revoked = Some(now);
                    }
                }
                self.sessions[si].withheld.extend(withheld);
            }
            Op::RevokeMachine {
                by_operator,
                who,
                machine,
            } => {
                let Some(ti) = pick(self.machines.len(), *machine) else {
                    return Ok(());
                };
                let target = self.machines[ti].m.credential_id;
                let by = if *by_operator {
                    let ci = usize::from(*who) % self.machines.len();
                    let r = fx
                        .revoke_machine_by_operator(&self.machines[ci].m, target)
                        .await;
                    if self.machines[ci].revoked {
                        return expect_code(
                            &r,
                            ErrorCode::LAUNCHER_INVALID,
                            "operator on a revoked login",
                        );
                    }
                    if self.machines[ci].operator != self.machines[ti].operator {
                        return expect_code(
                            &r,
                            ErrorCode::NOT_APPROVER,
                            "revoke another's machine",
                        );
                    }
                    prop_assert_eq!(ok(r, "operator machine revoke")?, "revoked");
                    format!("launcher:{}", self.machines[ci].m.credential_id)
                } else {
                    let p = usize::from(*who) % PERSONS.len();
                    let r = fx
                        .revoke_machine_by_approver(&self.persons[p], target)
                        .await;
                    if self.machines[ti].operator != p {
                        return expect_code(
                            &r,
                            ErrorCode::NOT_APPROVER,
                            "revoke a login one did not approve",
                        );
                    }
                    prop_assert_eq!(ok(r, "approver machine revoke")?, "revoked");
                    format!("launcher:{target}")
                };
                self.machines[ti].revoked = true;
                for si in 0..self.sessions.len() {
                    if self.sessions[si].machine == ti && self.session_live(si, now) {
                        self.sessions[si].ended = Some((now, by.clone()));
                    }
                }
            }
            Op::Unenroll { session } => {
                let Some(si) = pick(self.sessions.len(), *session) else {
                    return Ok(());
                };
                let mi = self.sessions[si].machine;
                let r = fx
                    .unenroll(&self.machines[mi].m, &self.sessions[si].s)
                    .await;
                if self.machines[mi].revoked {
                    return expect_code(
                        &r,
                        ErrorCode::LAUNCHER_INVALID,
                        "unenroll with a revoked login",
                    );
                }
                ok(r, "unenroll")?;
                if self.session_live(si, now) {
                    let by = format!("launcher:{}", self.machines[mi].m.credential_id);
                    self.sessions[si].ended = Some((now, by));
                }
            }
            Op::Renew { session } => {
                let Some(si) = pick(self.sessions.len(), *session) else {
                    return Ok(());
                };
                let r = fx.renew(&self.sessions[si].s).await;
                if !self.session_live(si, now) {
                    return expect_code(&r, ErrorCode::ENROLLMENT_NOT_LIVE, "renew a dead session");
                }
                let lease = ok(r, "renew")?;
                prop_assert_eq!(lease, now + Duration::minutes(15));
                self.sessions[si].lease = lease;
            }
            Op::Advance { secs } => fx.advance(Duration::seconds(i64::from(*secs))),
            Op::Sweep => {
                fx.sweep().await;
            }
            Op::Store {
                secret,
                change,
                apply,
            } => {
                self.store_change(fx, usize::from(*secret) % SECRETS.len(), change, *apply)
                    .await
            }
        }
        Ok(())
    }

    fn host(&mut self) -> String {
        self.hosts += 1;
        format!("host-{}", self.hosts)
    }

    fn add_machine(&mut self, m: Machine, operator: usize, now: Time) {
        self.machines.push(MMachine {
            m,
            operator,
            expires_at: now + Duration::hours(12),
            revoked: false,
        });
    }

    /// Applies a grant revoke's answer to the model.
    fn revoked(&mut self, gi: usize, answer: &str, now: Time) -> Check {
        if self.grant_live(gi, now) {
            prop_assert_eq!(answer, "revoked");
            self.grants[gi].revoked = Some(now);
        } else {
            prop_assert_eq!(answer, self.grant_state_str(gi, now));
        }
        Ok(())
    }

    async fn request(
        &mut self,
        fx: &CoreFixture,
        si: usize,
        secrets: &[u8],
        lifetime: Option<u64>,
        now: Time,
    ) -> Check {
        let mut names: Vec<&'static str> = Vec::new();
        for ix in secrets {
            let n = SECRETS[usize::from(*ix) % SECRETS.len()].0;
            if !names.contains(&n) {
                names.push(n);
            }
        }
        let r = fx.request(&self.sessions[si].s, &names, lifetime).await;
        if !self.session_live(si, now) {
            return expect_code(&r, ErrorCode::PROOF_INVALID, "request from a dead session");
        }
        // Policy's decision, per secret.
        let withheld = &self.sessions[si].withheld;
        let mut decisions = Vec::new();
        let mut approvers: Vec<Option<usize>> = Vec::new();
        for n in &names {
            let Some(&(owner, tier)) = self.policy.get(n) else {
                return expect_code(&r, ErrorCode::UNKNOWN_SECRET, "request an unserved secret");
            };
            let (d, a) = match tier {
                Tier::Automatic if !withheld.contains(*n) => (SecretDecision::Automatic, None),
                Tier::Automatic | Tier::Owner => (SecretDecision::Approval, Some(Some(owner))),
                Tier::Shared => (SecretDecision::Approval, Some(None)),
                Tier::Locked => (SecretDecision::Deny, None),
            };
            if let Some(a) = a
                && !approvers.contains(&a)
            {
                approvers.push(a);
            }
            decisions.push((n.to_string(), d));
        }
        let denied = decisions.iter().any(|(_, d)| *d == SecretDecision::Deny);
        if !denied && approvers.len() > 1 {
            return expect_code(
                &r,
                ErrorCode::MIXED_APPROVERS,
                "request with mixed approvers",
            );
        }
        // This session's pending requests: an identical one is joined, an overlap refused.
        let mut sorted: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        sorted.sort();
        for ri in 0..self.requests.len() {
            let p = &self.requests[ri];
            if p.session != si || self.request_state(ri, now) != RState::Pending {
                continue;
            }
            if p.names == sorted && p.lifetime == lifetime {
                let c = ok(r, "coalesced request")?;
                prop_assert!(c.coalesced, "an identical pending request is joined");
                prop_assert_eq!(c.request.id, p.id);
                prop_assert_eq!(c.request.state, RequestState::Pending);
                return Ok(());
            }
            if p.names.iter().any(|n| sorted.contains(n)) {
                return expect_code(&r, ErrorCode::REQUEST_PENDING, "overlapping request");
            }
        }
        let c = ok(r, "request")?;
        prop_assert!(!c.coalesced);
        let got: Vec<(String, SecretDecision)> = c
            .request
            .secrets
            .iter()
            .map(|(n, d)| (n.to_string(), *d))
            .collect();
        prop_assert_eq!(&got, &decisions);
        prop_assert_eq!(c.request.lifetime_seconds, lifetime);
        let ri = self.requests.len();
        let mut m = MRequest {
            id: c.request.id,
            session: si,
            names: sorted.clone(),
            lifetime,
            state: RState::Pending,
            record: None,
            grant: None,
            expires_at: None,
        };
        if denied {
            prop_assert_eq!(c.request.state, RequestState::Denied);
            prop_assert!(c.request.record_id.is_none() && c.request.grant_id.is_none());
            m.state = RState::Denied { at: now, by: None };
        } else if approvers.is_empty() {
            prop_assert_eq!(c.request.state, RequestState::Granted);
            prop_assert!(c.request.record_id.is_none() && c.request.approver.is_none());
            let gid = c
                .request
                .grant_id
                .ok_or_else(|| fail("a granted request names its grant".into()))?;
            m.state = RState::Granted { at: now, by: None };
            m.grant = Some(self.grants.len());
            self.grants.push(MGrant {
                id: gid,
                session: si,
                request: ri,
                names: sorted,
                automatic: true,
                approver: None,
                expires_at: lifetime.map(|l| now + Duration::seconds(l as i64)),
                revoked: None,
            });
        } else {
            let approver = approvers[0];
            prop_assert_eq!(c.request.state, RequestState::Pending);
            prop_assert!(c.request.grant_id.is_none());
            let want = match approver {
                Some(p) => Approver::Person(self.persons[p].clone()),
                None => Approver::Anyone,
            };
            prop_assert_eq!(c.request.approver.as_ref(), Some(&want));
            let rid = c
                .request
                .record_id
                .ok_or_else(|| fail("a pending request names its record".into()))?;
            let expires_at = now + Duration::minutes(30);
            prop_assert_eq!(c.request.expires_at, Some(expires_at));
            m.expires_at = Some(expires_at);
            m.record = Some(self.records.len());
            self.records.push(MRecord {
                id: rid,
                kind: RecKind::Agent { request: ri },
                approver,
                expires_at,
                login_decision: None,
            });
        }
        self.requests.push(m);
        Ok(())
    }

    async fn decide(
        &mut self,
        fx: &CoreFixture,
        ci: usize,
        p: usize,
        approving: bool,
        now: Time,
    ) -> Check {
        let who = self.persons[p].clone();
        let rec_id = self.records[ci].id;
        let what = if approving { "approve" } else { "deny" };
        let admitted = self.records[ci].approver.is_none_or(|a| a == p);
        let pending = self.record_view(ci, now).state == RecordState::Pending;
        match &self.records[ci].kind {
            RecKind::Login { pending: login } => {
                let login = login.clone();
                let r = if approving {
                    fx.approve_machine_login(&login, &who).await.map(Some)
                } else {
                    fx.broker
                        .deny(&rec_id, &who, Some(&login.code.display()))
                        .await
                        .map(|_| None)
                };
                if !admitted {
                    return expect_code(&r, ErrorCode::NOT_APPROVER, what);
                }
                if !pending {
                    return expect_code(&r, ErrorCode::RECORD_TERMINAL, what);
                }
                let machine = ok(r, what)?;
                self.records[ci].login_decision = Some(if approving {
                    LoginDecision::Approved {
                        at: now,
                        by: who.to_string(),
                    }
                } else {
                    LoginDecision::Denied {
                        at: now,
                        by: who.to_string(),
                    }
                });
                if let Some(m) = machine {
                    self.add_machine(m, p, now);
                }
            }
            RecKind::Agent { request } => {
                let ri = *request;
                if approving {
                    let r = fx.approve(&rec_id, &who).await;
                    if !admitted {
                        return expect_code(&r, ErrorCode::NOT_APPROVER, what);
                    }
                    if !pending {
                        return expect_code(&r, ErrorCode::RECORD_TERMINAL, what);
                    }
                    let si = self.requests[ri].session;
                    if Self::standing(
                        &self.policy,
                        &self.requests[ri].names,
                        Some(p),
                        &self.sessions[si].withheld,
                    )
                    .is_err()
                    {
                        return expect_code(
                            &r,
                            ErrorCode::GRANT_CHAIN_INVALID,
                            "approve without standing",
                        );
                    }
                    let approved = ok(r, what)?;
                    let gid = approved
                        .grant_id
                        .ok_or_else(|| fail("an approval makes a grant".into()))?;
                    let lifetime = self.requests[ri].lifetime;
                    self.requests[ri].state = RState::Granted {
                        at: now,
                        by: Some(who.to_string()),
                    };
                    self.requests[ri].grant = Some(self.grants.len());
                    self.grants.push(MGrant {
                        id: gid,
                        session: si,
                        request: ri,
                        names: self.requests[ri].names.clone(),
                        automatic: false,
                        approver: Some(p),
                        expires_at: lifetime.map(|l| now + Duration::seconds(l as i64)),
                        revoked: None,
                    });
                } else {
                    let r = fx.deny(&rec_id, &who).await;
                    if !admitted {
                        return expect_code(&r, ErrorCode::NOT_APPROVER, what);
                    }
                    if !pending {
                        return expect_code(&r, ErrorCode::RECORD_TERMINAL, what);
                    }
                    prop_assert_eq!(ok(r, what)?, "denied");
                    self.requests[ri].state = RState::Denied {
                        at: now,
                        by: Some(who.to_string()),
                    };
                }
            }
        }
        Ok(())
    }

    async fn store_change(&mut self, fx: &CoreFixture, si: usize, change: &Change, apply: Apply) {
        let (name, default_owner, default_tier, _) = SECRETS[si];
        self.value_counter += 1;
        let fresh = format!("v{}-{name}", self.value_counter);
        match change {
            Change::Owner(p) => {
                let p = usize::from(*p) % PERSONS.len();
                if fx.store.update(name, Some(PERSONS[p]), None, None)
                    && let Some(s) = self.store.get_mut(name)
                {
                    s.0 = p;
                }
            }
            Change::Tier(t) => {
                let t = TIERS[usize::from(*t) % TIERS.len()];
                if fx.store.update(name, None, Some(t), None)
                    && let Some(s) = self.store.get_mut(name)
                {
                    s.1 = t;
                }
            }
            Change::Value => {
                if fx.store.update(name, None, None, Some(&fresh))
                    && let Some(s) = self.store.get_mut(name)
                {
                    s.2 = fresh;
                }
            }
            Change::Remove => {
                fx.store.remove(name);
                self.store.remove(name);
            }
            Change::Restore => {
                if !self.store.contains_key(name) {
                    fx.store
                        .put(name, PERSONS[default_owner], default_tier, &fresh);
                    self.store
                        .insert(name, (default_owner, default_tier, fresh));
                }
            }
        }
        match apply {
            Apply::Reload => {
                fx.reload().await;
                self.policy = self
                    .store
                    .iter()
                    .map(|(n, (o, t, _))| (*n, (*o, *t)))
                    .collect();
            }
            Apply::Reread => {
                fx.reread(name).await;
                match self.store.get(name) {
                    Some((o, t, _)) => self.policy.insert(name, (*o, *t)),
                    None => self.policy.remove(name),
                };
            }
            Apply::NotYet => {}
        }
        self.note_policy(fx);
    }

    fn check_values(
        &self,
        gi: usize,
        got: Result<BTreeMap<String, String>, Error>,
        now: Time,
        what: &str,
    ) -> Check {
        match (self.expected_values(gi, now), got) {
            (Ok(want), Ok(got)) => {
                tally(what, "ok");
                prop_assert_eq!(got, want, "{}: values", what)
            }
            (Err(code), got) => expect_code(&got, code, what)?,
            (Ok(_), Err(e)) => {
                return Err(fail(format!(
                    "{what}: grant {} should release, got {e:?}",
                    self.grants[gi].id
                )));
            }
        }
        Ok(())
    }

    // --- invariants ---------------------------------------------------------------------------

    async fn check(&mut self, fx: &CoreFixture) -> Check {
        let now = fx.now();
        let mut callers: Vec<Enrollment> = Vec::with_capacity(self.sessions.len());
        for si in 0..self.sessions.len() {
            let e = fx
                .enrollment(self.sessions[si].s.id)
                .await
                .ok_or_else(|| fail("an enrollment disappeared".into()))?;
            let live = self.session_live(si, now);
            prop_assert_eq!(e.is_live(now), live, "session {} liveness", si);
            if let Some((at, by)) = self.session_end(si, now) {
                let ended = e
                    .ended
                    .clone()
                    .ok_or_else(|| fail("ended without an end".into()))?;
                prop_assert_eq!((ended.at, ended.by), (at, by), "session {} end", si);
            }
            prop_assert_eq!(
                &e.withheld
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<BTreeSet<_>>(),
                &self.sessions[si].withheld,
                "session {} withheld",
                si
            );
            callers.push(e);
        }
        // Grants, through each session's own view and through release.
        for (si, e) in callers.iter().enumerate() {
            let own = fx
                .broker
                .own_grants(e)
                .await
                .map_err(|x| fail(format!("own_grants: {x:?}")))?;
            let got: BTreeSet<GrantId> = own.iter().map(|g| g.id).collect();
            let want: BTreeSet<GrantId> = (0..self.grants.len())
                .filter(|gi| self.grants[*gi].session == si && self.grant_live(*gi, now))
                .map(|gi| self.grants[gi].id)
                .collect();
            prop_assert_eq!(&got, &want, "live grants of session {}", si);
            if !self.session_live(si, now) {
                prop_assert!(own.is_empty(), "a live grant on a dead session");
            }
            for g in &own {
                let gi = self
                    .grants
                    .iter()
                    .position(|m| m.id == g.id)
                    .ok_or_else(|| fail("unknown grant".into()))?;
                let record = match g.record_id {
                    Some(rid) => Some(ok(fx.record(&rid).await, "grant's record")?),
                    None => None,
                };
                ok(
                    fx.broker.verify_chain(g, record.as_ref(), e),
                    "live grant's chain",
                )?;
                // Admitted by policy when made.
                let policy = self.policies.get(&g.rules_version).ok_or_else(|| {
                    fail(format!(
                        "grant under an unknown rules_version {}",
                        g.rules_version
                    ))
                })?;
                let approver = g.approver.as_ref().and_then(|a| self.person_ix(a));
                prop_assert_eq!(approver, self.grants[gi].approver);
                prop_assert_eq!(g.request_id, self.requests[self.grants[gi].request].id);
                match g.granted {
                    GrantedBy::Automatic => {
                        prop_assert!(self.grants[gi].automatic && record.is_none());
                        prop_assert!(
                            Self::standing(policy, &self.grants[gi].names, None, &BTreeSet::new())
                                .is_ok(),
                            "automatic grant {} not automatic under its rules",
                            g.id
                        );
                    }
                    GrantedBy::Approval => {
                        let rec = record
                            .as_ref()
                            .ok_or_else(|| fail("approval without record".into()))?;
                        let who = g
                            .approver
                            .as_ref()
                            .ok_or_else(|| fail("approval without approver".into()))?;
                        prop_assert!(
                            rec.body.approver.admits(who),
                            "approver not admitted by the record"
                        );
                        prop_assert_eq!(rec.state, RecordState::Approved);
                        prop_assert_eq!(
                            rec.decided.as_ref().map(|d| d.by.as_str()),
                            Some(who.as_str())
                        );
                        // Standing when approved (withheld only adds the owner's need).
                        prop_assert!(
                            Self::standing(
                                policy,
                                &self.grants[gi].names,
                                approver,
                                &self.sessions[si].withheld
                            )
                            .is_ok()
                                || Self::standing(
                                    policy,
                                    &self.grants[gi].names,
                                    approver,
                                    &BTreeSet::new()
                                )
                                .is_ok(),
                            "approved grant {} without standing under its rules",
                            g.id
                        );
                    }
                }
            }
            for gi in 0..self.grants.len() {
                if self.grants[gi].session != si {
                    continue;
                }
                let got = fx.values_as(e, self.grants[gi].id).await;
                let got = got.map(|v| v.into_iter().collect());
                self.check_values(gi, got, now, "release check")?;
            }
        }
        // Requests.
        for ri in 0..self.requests.len() {
            let si = self.requests[ri].session;
            let r = ok(
                fx.broker
                    .get_request(&callers[si], self.requests[ri].id)
                    .await,
                "get_request",
            )?;
            let want = self.request_state(ri, now);
            prop_assert_eq!(r.state, want.core_state(), "request {} state", ri);
            let (decided_at, decision) = match &want {
                RState::Pending => (None, None),
                RState::Granted { at, by } | RState::Denied { at, by } => {
                    (Some(*at), by.clone().map(|b| (b, *at)))
                }
                RState::Cancelled { at, by } => (Some(*at), Some((by.clone(), *at))),
                RState::Expired { at } => (Some(*at), None),
            };
            prop_assert_eq!(r.decided_at, decided_at, "request {} decided_at", ri);
            prop_assert_eq!(
                r.decision.as_ref().map(|d| (d.by.clone(), d.at)),
                decision,
                "request {} decision",
                ri
            );
            prop_assert_eq!(
                r.grant_id,
                self.requests[ri].grant.map(|g| self.grants[g].id)
            );
            prop_assert_eq!(
                r.record_id,
                self.requests[ri].record.map(|c| self.records[c].id)
            );
            if !self.session_live(si, now) {
                prop_assert!(
                    r.state != RequestState::Pending,
                    "pending request on a dead session"
                );
            }
            if let Some(old) = self.seen_requests.get(&r.id) {
                prop_assert_eq!(old, &r, "a terminal request moved");
            } else if r.state != RequestState::Pending {
                self.seen_requests.insert(r.id, r);
            }
        }
        // Records.
        for ci in 0..self.records.len() {
            let rec = ok(fx.record(&self.records[ci].id).await, "record")?;
            let want = self.record_view(ci, now);
            prop_assert_eq!(rec.state, want.state, "record {} state", ci);
            prop_assert_eq!(
                rec.decided.as_ref().map(|d| (d.by.clone(), d.at)),
                want.decided,
                "record {} decision",
                ci
            );
            if let RecKind::Agent { request } = self.records[ci].kind {
                prop_assert_eq!(rec.body.kind, RecordKind::AgentSecret);
                if !self.session_live(self.requests[request].session, now) {
                    prop_assert!(
                        rec.state != RecordState::Pending,
                        "pending record on a dead session"
                    );
                }
            }
            if let Some(old) = self.seen_records.get(&rec.id) {
                prop_assert_eq!(&old.state, &rec.state, "a terminal record moved");
                prop_assert_eq!(
                    old.decided.as_ref().map(|d| (d.event, d.at, d.by.clone())),
                    rec.decided.as_ref().map(|d| (d.event, d.at, d.by.clone())),
                    "a terminal record's decision moved"
                );
            } else if rec.state != RecordState::Pending {
                self.seen_records.insert(rec.id, rec);
            }
        }
        // The console's lists.
        for (p, person) in self.persons.iter().enumerate() {
            let pending: BTreeSet<RecordId> =
                fx.pending_for(person).await.iter().map(|r| r.id).collect();
            let want: BTreeSet<RecordId> = (0..self.records.len())
                .filter(|ci| {
                    self.records[*ci].approver.is_none_or(|a| a == p)
                        && self.record_view(*ci, now).state == RecordState::Pending
                })
                .map(|ci| self.records[ci].id)
                .collect();
            prop_assert_eq!(pending, want, "pending for {}", person);
            let listed = fx.grants_for(person).await;
            prop_assert!(listed.iter().all(|i| i.grant.is_live()));
            let listed: BTreeSet<GrantId> = listed.iter().map(|i| i.grant.id).collect();
            let want: BTreeSet<GrantId> = (0..self.grants.len())
                .filter(|gi| {
                    let g = &self.grants[*gi];
                    self.grant_live(*gi, now)
                        && (g.approver == Some(p) || self.sessions[g.session].operator == p)
                })
                .map(|gi| self.grants[gi].id)
                .collect();
            prop_assert_eq!(listed, want, "grants for {}", person);
        }
        // A revoked machine leaves nothing live.
        for (s, caller) in self.sessions.iter().zip(&callers) {
            if self.machines[s.machine].revoked {
                prop_assert!(
                    !caller.is_live(now),
                    "a session of a revoked machine is live"
                );
            }
        }
        Ok(())
    }
}

/// Runs one drawn sequence on a fresh fixture.
async fn run_case<F, Fut>(make: F, ops: Vec<Op>) -> Check
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = CoreFixture>,
{
    let fx = make().await;
    let mut model = Model::new(&fx).await;
    let mut result = Ok(());
    // Every case starts with ada's and bob's machines and three sessions.
    let setup = [
        Op::Login { person: 0 },
        Op::Login { person: 1 },
        Op::Enroll {
            machine: 0,
            runtime: 0,
        },
        Op::Enroll {
            machine: 0,
            runtime: 1,
        },
        Op::Enroll {
            machine: 1,
            runtime: 0,
        },
    ];
    for op in &setup {
        if let Err(e) = model.step(&fx, op).await {
            result = Err(fail(format!("setup ({op:?}): {e}")));
        }
    }
    for (i, op) in ops.iter().enumerate() {
        if result.is_err() {
            break;
        }
        let step = model.step(&fx, op).await;
        let step = match step {
            Ok(()) => model.check(&fx).await,
            Err(e) => Err(e),
        };
        if let Err(e) = step {
            result = Err(fail(format!("step {i} ({op:?}): {e}")));
            break;
        }
    }
    fx.finish().await;
    result
}

fn cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn run<F, Fut>(cases: u32, make: F)
where
    F: Fn() -> Fut + Copy,
    Fut: Future<Output = CoreFixture>,
{
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 300,
        failure_persistence: None,
        ..Config::default()
    });
    let started = std::time::Instant::now();
    let result = runner.run(&prop::collection::vec(op(), 1..=40), |ops| {
        rt.block_on(run_case(make, ops))
    });
    println!("{cases} cases in {:?}", started.elapsed());
    if std::env::var("CORE_PROPS_TALLY").is_ok_and(|v| v == "1") {
        for (k, n) in TALLY.lock().unwrap_or_else(|p| p.into_inner()).iter() {
            println!("{n:>8}  {k}");
        }
    }
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn state_machine_on_sqlite() {
    run(cases(64), CoreFixture::sqlite);
}

#[test]
fn state_machine_on_sqlite_exclusive() {
    run(cases(64), CoreFixture::sqlite_exclusive);
}

#[test]
fn state_machine_on_postgres() {
    if !postgres_configured() {
        return;
    }
    run(cases(16), || async {
        CoreFixture::postgres()
            .await
            .expect("PostgreSQL configured")
    });
}
