//! [`Guarded`]: the storage decorator every [`Broker`](super::Broker) runs its transactions
//! through. It keeps two promises for the whole core, whatever the call site:
//!
//! - **Seals on what a grant depends on.** Every launcher credential and enrollment written is
//!   sealed with the broker's key ([`Sealer::seal_credential`], [`Sealer::seal_enrollment`]);
//!   every one read is verified, and one whose seal fails (a key swapped, a row inserted, or a
//!   row from before seals existed) is never served: the read answers as if the row did not
//!   exist, so the route refuses with its own code (PROOF_INVALID, LAUNCHER_INVALID, …), and an
//!   ERROR line `tampering detected` (`table`, `id`, `reason`) and the counter
//!   `countersign_tamper_detected_total{what}` say so. Verifying here also covers what the
//!   in-process cache ([`crate::exclusive`]) serves, since the cache sits below.
//! - **The audit log.** A write transaction notes the state of the rows it reads, and each
//!   write that makes a decision, a grant, a revocation, an end, a withholding or an expiry
//!   becomes an [`AuditEvent`]; at commit they are appended to the chain ([`audit::append`]) in
//!   the same transaction, last, so the row and its entry commit together. When one of them
//!   ends something ([`audit::DURABLE_KINDS`]), the commit returns only once the new head is
//!   kept outside the database ([`audit::Follower::keep`]: the server's state file, `fsync`ed).
//! - **Every end destroys.** A write that stores a grant's end marks each credential issued for
//!   it `destroying` and queues its destroy in the outbox, in the same transaction (the outbox
//!   module's `queue_destroys`); a credential recorded minting or destroyed becomes a
//!   `credential_mint` or `credential_destroy` entry.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::json;

use crate::audit::{self, AuditEntry, AuditEvent};
use crate::clock::{Clock, Time, to_millis};
use crate::ids::{
    ConfirmationCode, CredentialId, EnrollmentId, GrantId, Login, RecordId, RequestId, SecretName,
};
use crate::issuer::{Issued, IssuedState};
use crate::model::{
    Enrollment, Grant, GrantEnd, LauncherCredential, Passkey, Record, Request, RequestState,
};
use crate::seal::Sealer;
use crate::storage::{Storage, StorageDecorator, StorageError, Tx, TxDecorator};

/// Logs and counts a row refused for its seal.
pub(crate) fn tampered(table: &'static str, id: &str, reason: &'static str) {
    metrics::counter!("countersign_tamper_detected_total", "what" => table).increment(1);
    tracing::error!(table, id, reason, "tampering detected");
}

/// The decorator.
#[derive(Debug)]
pub struct Guarded {
    inner: Arc<dyn Storage>,
    sealer: Sealer,
    clock: Arc<dyn Clock>,
    follower: Arc<audit::Follower>,
    destroy_queued: Arc<AtomicBool>,
}

impl Guarded {
    /// The guard over `inner`. Entries its transactions append and commit advance `follower`
    /// ([`audit::Follower::appended`]), so the follower does not read them back.
    pub fn new(
        inner: Arc<dyn Storage>,
        sealer: Sealer,
        clock: Arc<dyn Clock>,
        follower: Arc<audit::Follower>,
        destroy_queued: Arc<AtomicBool>,
    ) -> Self {
        Self {
            inner,
            sealer,
            clock,
            follower,
            destroy_queued,
        }
    }

    fn wrap(&self, inner: Box<dyn Tx>, write: bool) -> Box<dyn Tx> {
        Box::new(GuardTx {
            inner,
            sealer: self.sealer.clone(),
            clock: self.clock.clone(),
            follower: self.follower.clone(),
            destroy_queued: self.destroy_queued.clone(),
            queued_destroy: false,
            write,
            seen: Seen::default(),
            events: Vec::new(),
            appended: None,
        })
    }
}

impl StorageDecorator for Guarded {
    type Wrapped = dyn Storage;

    fn wrapped(&self) -> &dyn Storage {
        self.inner.as_ref()
    }

    async fn begin(&self) -> Result<Box<dyn Tx>, StorageError> {
        Ok(self.wrap(self.inner.begin().await?, true))
    }

    async fn read(&self) -> Result<Box<dyn Tx>, StorageError> {
        Ok(self.wrap(self.inner.read().await?, false))
    }

    async fn snapshot(&self) -> Result<Box<dyn Tx>, StorageError> {
        Ok(self.wrap(self.inner.snapshot().await?, false))
    }
}

/// The state of rows a write transaction read, to tell which writes change what the log
/// records. A row written without being read first is new.
#[derive(Default)]
struct Seen {
    grants: HashMap<GrantId, bool>,
    enrollments: HashMap<EnrollmentId, (bool, BTreeSet<SecretName>)>,
    credentials: HashMap<CredentialId, bool>,
    records: HashMap<RecordId, bool>,
    requests: HashMap<RequestId, RequestState>,
    /// Passkeys read (by credential id): whether removed.
    passkeys: HashMap<String, bool>,
    /// Issued credentials read: their state and when destroyed.
    issued: HashMap<(GrantId, SecretName), (IssuedState, Option<Time>)>,
}

struct GuardTx {
    inner: Box<dyn Tx>,
    sealer: Sealer,
    clock: Arc<dyn Clock>,
    follower: Arc<audit::Follower>,
    /// Told, once this transaction commits, that it queued a destroy.
    destroy_queued: Arc<AtomicBool>,
    queued_destroy: bool,
    write: bool,
    seen: Seen,
    events: Vec<AuditEvent>,
    /// The head the entries this transaction appended chained to, and their last.
    appended: Option<(audit::Walk, audit::Walk)>,
}

fn ms(t: Time) -> i64 {
    t.timestamp_millis()
}

impl GuardTx {
    fn credential(&mut self, c: LauncherCredential) -> Option<LauncherCredential> {
        if !self.sealer.verify_credential(&c) {
            let why = if c.seal.is_empty() {
                "unsealed"
            } else {
                "seal"
            };
            tampered("credentials", &c.id.to_string(), why);
            return None;
        }
        if self.write {
            self.seen
                .credentials
                .entry(c.id)
                .or_insert(c.revoked_at.is_some());
        }
        Some(c)
    }

    fn passkey(&mut self, p: Passkey) -> Option<Passkey> {
        if !self.sealer.verify_passkey(&p) {
            let why = if p.seal.is_empty() {
                "unsealed"
            } else {
                "seal"
            };
            tampered("passkeys", &p.id, why);
            return None;
        }
        if self.write {
            self.seen
                .passkeys
                .entry(p.id.clone())
                .or_insert(p.removed_at.is_some());
        }
        Some(p)
    }

    fn enrollment(&mut self, e: Enrollment) -> Option<Enrollment> {
        if !self.sealer.verify_enrollment(&e) {
            let why = if e.seal.is_empty() {
                "unsealed"
            } else {
                "seal"
            };
            tampered("enrollments", &e.id.to_string(), why);
            return None;
        }
        if self.write {
            self.seen
                .enrollments
                .entry(e.id)
                .or_insert_with(|| (e.ended.is_some(), e.withheld.clone()));
        }
        Some(e)
    }

    fn grant(&mut self, g: &Grant) {
        if self.write {
            self.seen.grants.entry(g.id).or_insert(g.end.is_some());
        }
    }

    fn record(&mut self, r: &Record) {
        if self.write {
            self.seen.records.entry(r.id).or_insert(r.decided.is_some());
        }
    }

    fn request(&mut self, r: &Request) {
        if self.write {
            self.seen.requests.entry(r.id).or_insert(r.state);
        }
    }

    fn event(&mut self, kind: &'static str, subject: String, body: &impl serde::Serialize) {
        self.events.push(AuditEvent {
            kind,
            subject,
            // Serializing these bodies to JSON cannot fail.
            body: serde_json::to_string(body).unwrap_or_default(),
        });
    }
}

impl TxDecorator for GuardTx {
    async fn wrapped(&mut self) -> Result<&mut dyn Tx, StorageError> {
        Ok(self.inner.as_mut())
    }

    async fn commit(mut self: Box<Self>) -> Result<(), StorageError> {
        let ends = self
            .events
            .iter()
            .any(|e| audit::DURABLE_KINDS.contains(&e.kind));
        if !self.events.is_empty() {
            let now = to_millis(self.clock.now());
            let events = std::mem::take(&mut self.events);
            let sealer = self.sealer.clone();
            audit::append(&mut *self, &sealer, now, &events).await?;
        }
        let GuardTx {
            inner,
            follower,
            appended,
            destroy_queued,
            queued_destroy,
            ..
        } = *self;
        inner.commit().await?;
        if queued_destroy {
            destroy_queued.store(true, Ordering::SeqCst);
        }
        if let Some((from, to)) = appended {
            follower.appended(&from, to.clone());
            // An end is in this replica's memory outside the database before it is answered:
            // a database restored from before it cannot bring back what it ended.
            if ends {
                follower.keep(&to).await.map_err(|e| {
                    tracing::error!(error = %e, "audit head not kept after an end");
                    StorageError::Unavailable(format!("audit state: {e}"))
                })?;
            }
        }
        Ok(())
    }

    async fn get_credential(
        &mut self,
        id: CredentialId,
    ) -> Result<Option<LauncherCredential>, StorageError> {
        Ok(self
            .inner
            .get_credential(id)
            .await?
            .and_then(|c| self.credential(c)))
    }

    async fn credentials_by_thumbprint(
        &mut self,
        thumbprint: &str,
    ) -> Result<Vec<LauncherCredential>, StorageError> {
        let all = self.inner.credentials_by_thumbprint(thumbprint).await?;
        Ok(all.into_iter().filter_map(|c| self.credential(c)).collect())
    }

    async fn list_credentials(&mut self) -> Result<Vec<LauncherCredential>, StorageError> {
        let all = self.inner.list_credentials().await?;
        Ok(all.into_iter().filter_map(|c| self.credential(c)).collect())
    }

    async fn put_credential(&mut self, c: &LauncherCredential) -> Result<(), StorageError> {
        let mut c = c.clone();
        c.seal = self.sealer.seal_credential(&c);
        let was_revoked = self.seen.credentials.insert(c.id, c.revoked_at.is_some());
        if let Some(at) = c.revoked_at
            && was_revoked != Some(true)
        {
            self.event(
                "machine_login_end",
                format!("credential:{}", c.id),
                &json!({ "at": ms(at), "record": c.record_id.map(|r| r.to_string()) }),
            );
        }
        self.inner.put_credential(&c).await
    }

    async fn get_record(&mut self, id: &RecordId) -> Result<Option<Record>, StorageError> {
        let r = self.inner.get_record(id).await?;
        if let Some(r) = &r {
            self.record(r);
        }
        Ok(r)
    }

    async fn record_by_code(
        &mut self,
        code: &ConfirmationCode,
    ) -> Result<Option<Record>, StorageError> {
        let r = self.inner.record_by_code(code).await?;
        if let Some(r) = &r {
            self.record(r);
        }
        Ok(r)
    }

    async fn pending_records(&mut self) -> Result<Vec<Record>, StorageError> {
        let rs = self.inner.pending_records().await?;
        rs.iter().for_each(|r| self.record(r));
        Ok(rs)
    }

    async fn put_record(&mut self, r: &Record) -> Result<(), StorageError> {
        let was = self.seen.records.insert(r.id, r.decided.is_some());
        if let Some(d) = &r.decided
            && was != Some(true)
        {
            let mut body = json!({
                "event": d.event.as_str(),
                "by": d.by,
                "at": ms(d.at),
                "kind": r.body.kind.as_str(),
                "rules_version": r.body.rules_version,
            });
            // The countersignature goes into the chain whole, so `audit verify` can check it
            // again against the passkey's registered key.
            if let Some(c) = &d.countersignature {
                body["countersignature"] = json!(c);
            }
            self.event("decision", format!("record:{}", r.id), &body);
        }
        self.inner.put_record(r).await
    }

    async fn get_enrollment(
        &mut self,
        id: EnrollmentId,
    ) -> Result<Option<Enrollment>, StorageError> {
        Ok(self
            .inner
            .get_enrollment(id)
            .await?
            .and_then(|e| self.enrollment(e)))
    }

    async fn enrollments_by_credential(
        &mut self,
        id: CredentialId,
    ) -> Result<Vec<Enrollment>, StorageError> {
        let all = self.inner.enrollments_by_credential(id).await?;
        Ok(all.into_iter().filter_map(|e| self.enrollment(e)).collect())
    }

    async fn put_enrollment(&mut self, e: &Enrollment) -> Result<(), StorageError> {
        let mut e = e.clone();
        e.seal = self.sealer.seal_enrollment(&e);
        let was = self
            .seen
            .enrollments
            .insert(e.id, (e.ended.is_some(), e.withheld.clone()));
        let (was_ended, was_withheld) = was.unwrap_or_default();
        if let Some(end) = &e.ended
            && !was_ended
        {
            self.event(
                "session_end",
                format!("enrollment:{}", e.id),
                &json!({ "at": ms(end.at), "by": end.by }),
            );
        }
        let added: Vec<&str> = e
            .withheld
            .difference(&was_withheld)
            .map(|n| n.as_str())
            .collect();
        if !added.is_empty() {
            let body = json!({ "names": added });
            self.event("withholding", format!("enrollment:{}", e.id), &body);
        }
        self.inner.put_enrollment(&e).await
    }

    async fn get_request(&mut self, id: RequestId) -> Result<Option<Request>, StorageError> {
        let r = self.inner.get_request(id).await?;
        if let Some(r) = &r {
            self.request(r);
        }
        Ok(r)
    }

    async fn pending_requests(
        &mut self,
        enrollment: EnrollmentId,
    ) -> Result<Vec<Request>, StorageError> {
        let rs = self.inner.pending_requests(enrollment).await?;
        rs.iter().for_each(|r| self.request(r));
        Ok(rs)
    }

    async fn enrollment_with_pending(
        &mut self,
        id: EnrollmentId,
    ) -> Result<(Option<Enrollment>, Vec<Request>), StorageError> {
        let (e, rs) = self.inner.enrollment_with_pending(id).await?;
        let e = e.and_then(|e| self.enrollment(e));
        rs.iter().for_each(|r| self.request(r));
        Ok((e, rs))
    }

    async fn put_request(&mut self, r: &Request) -> Result<(), StorageError> {
        let was = self.seen.requests.insert(r.id, r.state);
        if r.state != RequestState::Pending && was.is_none_or(|s| s == RequestState::Pending) {
            let by = match (&r.decision, r.record_id) {
                (Some(d), _) => d.by.clone(),
                (None, None) => "automatic".to_owned(),
                (None, Some(_)) => "broker".to_owned(),
            };
            self.event(
                "decision",
                format!("request:{}", r.id),
                &DecisionBody {
                    by: &by,
                    enrollment: r.enrollment_id.to_string(),
                    grant: r.grant_id.map(|g| g.to_string()),
                    names: r.names().iter().map(|n| n.as_str()).collect(),
                    record: r.record_id.map(|g| g.to_string()),
                    state: r.state.as_str(),
                },
            );
        }
        self.inner.put_request(r).await
    }

    async fn get_grant(&mut self, id: GrantId) -> Result<Option<Grant>, StorageError> {
        let g = self.inner.get_grant(id).await?;
        if let Some(g) = &g {
            self.grant(g);
        }
        Ok(g)
    }

    async fn grants_by_enrollment(
        &mut self,
        enrollment: EnrollmentId,
    ) -> Result<Vec<Grant>, StorageError> {
        let gs = self.inner.grants_by_enrollment(enrollment).await?;
        gs.iter().for_each(|g| self.grant(g));
        Ok(gs)
    }

    /// The pair in one read of the wrapped transaction, checked as the two reads are: an
    /// enrollment failing its seal reads as none, and then so do its grants.
    async fn enrollment_with_grants(
        &mut self,
        id: EnrollmentId,
    ) -> Result<(Option<Enrollment>, Vec<Grant>), StorageError> {
        let (e, gs) = self.inner.enrollment_with_grants(id).await?;
        let Some(e) = e.and_then(|e| self.enrollment(e)) else {
            return Ok((None, Vec::new()));
        };
        gs.iter().for_each(|g| self.grant(g));
        Ok((Some(e), gs))
    }

    async fn live_grants(&mut self) -> Result<Vec<Grant>, StorageError> {
        let gs = self.inner.live_grants().await?;
        gs.iter().for_each(|g| self.grant(g));
        Ok(gs)
    }

    async fn get_passkey(&mut self, id: &str) -> Result<Option<Passkey>, StorageError> {
        Ok(self
            .inner
            .get_passkey(id)
            .await?
            .and_then(|p| self.passkey(p)))
    }

    async fn passkeys_of(&mut self, person: &Login) -> Result<Vec<Passkey>, StorageError> {
        let all = self.inner.passkeys_of(person).await?;
        Ok(all.into_iter().filter_map(|p| self.passkey(p)).collect())
    }

    async fn list_passkeys(&mut self) -> Result<Vec<Passkey>, StorageError> {
        let all = self.inner.list_passkeys().await?;
        Ok(all.into_iter().filter_map(|p| self.passkey(p)).collect())
    }

    async fn put_passkey(&mut self, p: &Passkey) -> Result<(), StorageError> {
        let mut p = p.clone();
        p.seal = self.sealer.seal_passkey(&p);
        let was = self
            .seen
            .passkeys
            .insert(p.id.clone(), p.removed_at.is_some());
        let subject = format!("passkey:{}", p.id);
        if was.is_none() {
            // The public key is in the chain: `audit verify` checks countersignatures with
            // the key the chain recorded, and a row whose key differs from it is reported.
            self.event(
                "passkey_registered",
                subject.clone(),
                &json!({
                    "person": p.person.as_str(),
                    "key": p.key,
                    "aaguid": p.aaguid,
                    "backup_eligible": p.backup_eligible,
                    "enrolled_by": p.enrolled_by,
                    "at": ms(p.created_at),
                }),
            );
        }
        if let Some(at) = p.removed_at
            && was != Some(true)
        {
            self.event(
                "passkey_removed",
                subject,
                &json!({ "person": p.person.as_str(), "at": ms(at) }),
            );
        }
        self.inner.put_passkey(&p).await
    }

    async fn put_grant(&mut self, g: &Grant) -> Result<(), StorageError> {
        let was = self.seen.grants.insert(g.id, g.end.is_some());
        let subject = format!("grant:{}", g.id);
        if was.is_none() {
            self.event(
                "grant",
                subject.clone(),
                &GrantBody {
                    approver: g.approver.as_ref().map(|a| a.as_str()),
                    enrollment: g.enrollment_id.to_string(),
                    expires_at: g.expires_at.map(ms),
                    granted: &g.granted,
                    names: g.names.iter().map(|n| n.as_str()).collect(),
                    record: g.record_id.map(|r| r.to_string()),
                    request: g.request_id.to_string(),
                    rules_version: &g.rules_version,
                },
            );
        }
        if let Some((end, at)) = g.end
            && was != Some(true)
        {
            let kind = match end {
                GrantEnd::Revoked => "revocation",
                GrantEnd::Expired => "expiry",
                GrantEnd::Ended => "end",
            };
            self.event(kind, subject, &json!({ "at": ms(at) }));
            self.inner.put_grant(g).await?;
            // Every end destroys what was issued for the grant: queued with the end itself.
            self.queued_destroy |=
                super::outbox::queue_destroys(self.inner.as_mut(), g.id, at).await?;
            return Ok(());
        }
        self.inner.put_grant(g).await
    }

    async fn issued_of(&mut self, grant: GrantId) -> Result<Vec<Issued>, StorageError> {
        let rows = self.inner.issued_of(grant).await?;
        for c in &rows {
            self.seen
                .issued
                .insert((c.grant_id, c.secret.clone()), (c.state, c.destroyed_at));
        }
        Ok(rows)
    }

    async fn put_issued(&mut self, c: &Issued) -> Result<(), StorageError> {
        let was = self
            .seen
            .issued
            .insert((c.grant_id, c.secret.clone()), (c.state, c.destroyed_at));
        let body =
            || json!({ "secret": c.secret.as_str(), "issuer": c.issuer, "credential": c.name });
        let subject = format!("grant:{}", c.grant_id);
        if was.is_none() && c.state == IssuedState::Minting {
            // Sealed into the chain before the issuer is called (the caller commits first).
            self.event("credential_mint", subject, &body());
        } else if c.state == IssuedState::Destroyed && was != Some((c.state, c.destroyed_at)) {
            let mut b = body();
            // Destroyed without a mint this broker recorded live: an orphan the sweep found.
            b["orphan"] = json!(!matches!(was, Some((st, _)) if st != IssuedState::Destroyed));
            self.event("credential_destroy", subject, &b);
        }
        self.inner.put_issued(c).await
    }

    async fn append_audit(&mut self, entries: &[AuditEntry]) -> Result<(), StorageError> {
        self.inner.append_audit(entries).await?;
        if let (Some(first), Some(last)) = (entries.first(), entries.last()) {
            let to = audit::Walk {
                position: last.position,
                hash: last.hash.clone(),
            };
            let from = match self.appended.take() {
                Some((from, _)) => from,
                None => audit::Walk {
                    position: first.position - 1,
                    hash: first.prev_hash.clone(),
                },
            };
            self.appended = Some((from, to));
        }
        Ok(())
    }
}

/// The body of a request's `decision` entry. Fields in name order: the same text the JSON map
/// it replaced wrote (docs/audit.md), without building the map.
#[derive(serde::Serialize)]
struct DecisionBody<'a> {
    by: &'a str,
    enrollment: String,
    grant: Option<String>,
    names: Vec<&'a str>,
    record: Option<String>,
    state: &'a str,
}

/// The body of a `grant` entry, fields in name order (as [`DecisionBody`]).
#[derive(serde::Serialize)]
struct GrantBody<'a> {
    approver: Option<&'a str>,
    enrollment: String,
    expires_at: Option<i64>,
    granted: &'a crate::model::GrantedBy,
    names: Vec<&'a str>,
    record: Option<String>,
    request: String,
    rules_version: &'a str,
}

#[cfg(test)]
mod body_tests {
    use serde_json::json;

    use super::{DecisionBody, GrantBody};

    /// The typed bodies write the text the JSON maps wrote (keys in order), so entries keep
    /// their documented shape.
    #[test]
    fn typed_bodies_write_what_the_maps_wrote() {
        let d = DecisionBody {
            by: "automatic",
            enrollment: "e1".into(),
            grant: Some("g1".into()),
            names: vec!["A", "B"],
            record: None,
            state: "granted",
        };
        let map = json!({
            "state": "granted", "by": "automatic", "enrollment": "e1",
            "names": ["A", "B"], "grant": "g1", "record": null,
        });
        assert_eq!(serde_json::to_string(&d).ok(), Some(map.to_string()));
        let granted = crate::model::GrantedBy::Automatic;
        let g = GrantBody {
            approver: Some("ada@example.com"),
            enrollment: "e1".into(),
            expires_at: Some(5),
            granted: &granted,
            names: vec!["A"],
            record: Some("r".into()),
            request: "q".into(),
            rules_version: "v1",
        };
        let map = json!({
            "request": "q", "enrollment": "e1", "names": ["A"], "granted": granted,
            "record": "r", "approver": "ada@example.com", "expires_at": 5, "rules_version": "v1",
        });
        assert_eq!(serde_json::to_string(&g).ok(), Some(map.to_string()));
    }
}
