//! Cascades: what ending a session, a machine login or a request takes with it. Each runs
//! inside the caller's transaction, so a cascade is all or nothing.

use super::{Broker, Fail};
use crate::clock::Time;
use crate::ids::CredentialId;
use crate::model::{
    DecisionBy, Ended, Enrollment, GrantEnd, LauncherCredential, Record, RecordDecision,
    RecordKind, RecordState, Request, RequestState,
};
use crate::storage::{OutboxItem, Tx};

/// What a decision carries beyond its event, who and when: a machine login's new credential,
/// and the approver's passkey countersignature.
#[derive(Debug, Default)]
pub(crate) struct Carried {
    pub credential_id: Option<CredentialId>,
    pub countersignature: Option<crate::model::Countersignature>,
}

impl Broker {
    /// Ends an enrollment (if live) and everything live under it: its grants end, its pending
    /// requests are cancelled by `by` (or expire, if their time had come first), and their
    /// records follow.
    pub(crate) async fn end_enrollment(
        &self,
        tx: &mut dyn Tx,
        enrollment: Enrollment,
        by: &str,
        now: Time,
    ) -> Result<Enrollment, Fail> {
        let mut e = enrollment.settled(now);
        if e.ended.is_none() {
            e.ended = Some(Ended {
                at: now,
                by: by.to_owned(),
            });
        }
        tx.put_enrollment(&e).await?;
        let end_at = e.ended.as_ref().map(|x| x.at).unwrap_or(now);
        for g in tx.grants_by_enrollment(e.id).await? {
            if g.end.is_none() {
                let mut g = g.settled(now, &e);
                if g.end.is_none() {
                    g.end = Some((GrantEnd::Ended, end_at));
                }
                tx.put_grant(&g).await?;
            }
        }
        for r in tx.pending_requests(e.id).await? {
            self.settle_request_write(tx, r, &e, now).await?;
        }
        Ok(e)
    }

    /// Writes a stored-pending request's settled state (expired or cancelled by its session's
    /// end), with its record and, on expiry, the notification.
    pub(crate) async fn settle_request_write(
        &self,
        tx: &mut dyn Tx,
        stored: Request,
        e: &Enrollment,
        now: Time,
    ) -> Result<Request, Fail> {
        let r = stored.clone().settled(now, e);
        if r == stored {
            return Ok(r);
        }
        tx.put_request(&r).await?;
        if let Some(rid) = r.record_id
            && let Some(rec) = tx.get_record(&rid).await?
            && rec.state == RecordState::Pending
        {
            let (event, by, at) = match (&r.state, &r.decision) {
                (RequestState::Cancelled, Some(d)) => (RecordState::Cancelled, d.by.clone(), d.at),
                _ => (
                    RecordState::Expired,
                    "broker".to_owned(),
                    r.decided_at.unwrap_or(now),
                ),
            };
            self.decide_record(tx, rec, event, &by, at, Carried::default())
                .await?;
        }
        if r.state == RequestState::Expired {
            self.notify_expired(tx, &r, e).await?;
        }
        Ok(r)
    }

    /// Seals and stores a decision on a record, with what it carries.
    pub(crate) async fn decide_record(
        &self,
        tx: &mut dyn Tx,
        mut rec: Record,
        event: RecordState,
        by: &str,
        at: Time,
        carried: Carried,
    ) -> Result<Record, Fail> {
        let Carried {
            credential_id,
            countersignature,
        } = carried;
        rec.state = event;
        let seal = self
            .sealer
            .seal_decision(&rec.id, event, by, at, countersignature.as_ref());
        rec.decided = Some(RecordDecision {
            event,
            at,
            by: by.to_owned(),
            credential_id,
            countersignature,
            seal,
        });
        rec.code = None;
        tx.put_record(&rec).await?;
        Ok(rec)
    }

    /// Cancels a pending request by `by`, with its record.
    pub(crate) async fn cancel_request(
        &self,
        tx: &mut dyn Tx,
        mut r: Request,
        by: &str,
        now: Time,
    ) -> Result<Request, Fail> {
        r.state = RequestState::Cancelled;
        r.decided_at = Some(now);
        r.decision = Some(DecisionBy {
            by: by.to_owned(),
            at: now,
        });
        tx.put_request(&r).await?;
        if let Some(rid) = r.record_id
            && let Some(rec) = tx.get_record(&rid).await?
            && rec.state == RecordState::Pending
        {
            self.decide_record(tx, rec, RecordState::Cancelled, by, now, Carried::default())
                .await?;
        }
        Ok(r)
    }

    /// Revokes a launcher credential and ends every session it enrolled.
    pub(crate) async fn revoke_credential(
        &self,
        tx: &mut dyn Tx,
        mut c: LauncherCredential,
        by: &str,
        now: Time,
    ) -> Result<(), Fail> {
        if c.revoked_at.is_none() {
            c.revoked_at = Some(now);
            tx.put_credential(&c).await?;
        }
        for e in tx.enrollments_by_credential(c.id).await? {
            self.end_enrollment(tx, e, by, now).await?;
        }
        Ok(())
    }

    /// Queues `record.pending` (issue 29): a record waits for its approver, so that the
    /// console tells the people who asked to hear where to approve. Names and ids, never a
    /// value; `passkey` when policy asks for the approver's passkey.
    pub(crate) async fn notify_pending(
        &self,
        tx: &mut dyn Tx,
        record: &crate::model::Record,
    ) -> Result<(), Fail> {
        let b = &record.body;
        let passkey = self
            .config
            .passkeys
            .as_ref()
            .is_some_and(|s| s.requirement(&self.policy(), record).is_some());
        let host = b
            .enrollment
            .as_ref()
            .map(|e| e.runtime_id.clone())
            .or_else(|| b.identifiers.first().cloned());
        let payload = serde_json::json!({
            "type": "record.pending",
            "record_id": record.id.to_string(),
            "kind": b.kind.as_str(),
            "approver": b.approver.as_str(),
            "identifiers": match b.kind {
                RecordKind::AgentSecret => b.identifiers.clone(),
                RecordKind::LauncherCredential => Vec::new(),
            },
            "reason": b.reason,
            "host": host,
            "passkey": passkey,
            "expires_at": crate::clock::rfc3339(&b.expires_at),
        });
        tx.push_outbox(&OutboxItem {
            topic: OutboxItem::NOTIFICATION.to_string(),
            id: format!("rec_{}", &record.id.to_string()[..32]),
            payload: payload.to_string(),
            attempts: 0,
            next_attempt_at: self.now(),
        })
        .await?;
        Ok(())
    }

    /// Queues the expiry notification of protocol.md §9 for a request that expired undecided.
    pub(crate) async fn notify_expired(
        &self,
        tx: &mut dyn Tx,
        r: &Request,
        e: &Enrollment,
    ) -> Result<(), Fail> {
        let Some(session_id) = r.session_id.as_ref().or(e.session_id.as_ref()) else {
            return Ok(());
        };
        let expired_at = r.decided_at.unwrap_or_else(|| self.now());
        let payload = serde_json::json!({
            "type": "request.expired",
            "session_id": session_id.as_str(),
            "request_id": r.id.to_string(),
            "record_id": r.record_id.map(|x| x.to_string()),
            "identifiers": r.names().iter().map(|n| n.as_str().to_owned()).collect::<Vec<_>>(),
            "expired_at": crate::clock::rfc3339(&expired_at),
        });
        tx.push_outbox(&OutboxItem {
            topic: OutboxItem::NOTIFICATION.to_string(),
            id: format!("msg_{}", r.id.0.simple()),
            payload: payload.to_string(),
            attempts: 0,
            next_attempt_at: self.now(),
        })
        .await?;
        Ok(())
    }
}
