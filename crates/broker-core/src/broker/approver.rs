//! The approver routes the console calls with its token, naming the person acting: what waits
//! for a person, deciding records (with the typed code for a machine login), and the person's
//! grants and machines.

use super::cascade::Carried;
use super::{Broker, Fail, ct_eq, read, transact};
use crate::clock::Time;
use crate::error::{Error, ErrorCode};
use crate::ids::{CredentialId, EnrollmentId, GrantId, Login, RecordId, RequestId};
use crate::issuer::IssuedState;
use crate::model::{
    Countersignature, DecisionBy, EnrollmentSummary, Grant, GrantEnd, GrantedBy,
    LauncherCredential, Record, RecordKind, RecordState, RequestState,
};
use crate::storage::Tx;

/// A grant as the approver and operator lists show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantListItem {
    pub grant: Grant,
    pub enrollment: EnrollmentSummary,
    /// The credentials issued for it (`crate::issuer`), by secret.
    pub credentials: Vec<crate::issuer::Issued>,
}

/// What an approval produced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approved {
    pub credential_id: Option<CredentialId>,
    pub grant_id: Option<GrantId>,
}

impl Broker {
    /// A record as of now, following its request's session: a pending secret request whose
    /// session ended shows cancelled. The session's end is weighed before the record's own
    /// expiry (as [`Request::settled`] does), so that a record whose session ended first reads
    /// `cancelled` both before the sweep writes it and after, never `expired` then `cancelled`.
    ///
    /// [`Request::settled`]: crate::model::Request::settled
    pub(crate) async fn settle_record(
        &self,
        tx: &mut dyn Tx,
        mut rec: Record,
        now: Time,
    ) -> Result<Record, Fail> {
        if rec.state != RecordState::Pending || rec.body.kind != RecordKind::AgentSecret {
            return Ok(rec.settled(now));
        }
        let (Some(rid), Some(eid)) = (rec.body.request_id, rec.body.enrollment_id) else {
            return Ok(rec.settled(now));
        };
        if let (Some(r), Some(e)) = (tx.get_request(rid).await?, tx.get_enrollment(eid).await?) {
            let r = r.settled(now, &e);
            if let (RequestState::Cancelled, Some(d)) = (r.state, r.decision) {
                rec.state = RecordState::Cancelled;
                rec.decided = Some(crate::model::RecordDecision {
                    event: RecordState::Cancelled,
                    at: d.at,
                    by: d.by,
                    credential_id: None,
                    countersignature: None,
                    seal: String::new(),
                });
                return Ok(rec);
            }
        }
        Ok(rec.settled(now))
    }

    /// The session a secret request's record belongs to: its enrollment and request ids (a
    /// record's text never changes, so a read outside the transaction is enough).
    pub(crate) async fn record_owners(
        &self,
        id: &RecordId,
    ) -> Result<Option<(EnrollmentId, RequestId)>, Error> {
        super::read!(self, "read record", |tx| Ok::<_, Fail>(
            tx.get_record(id)
                .await?
                .and_then(|r| r.body.enrollment_id.zip(r.body.request_id))
        ))
    }

    /// Takes the locks of a record's session in the one order every transition uses:
    /// enrollment, then request, then (by the caller) the record. Without one order, two
    /// deciders on PostgreSQL deadlock and one must wait and run again.
    pub(crate) async fn lock_session_of(
        &self,
        tx: &mut dyn Tx,
        owners: Option<(EnrollmentId, RequestId)>,
    ) -> Result<(), Fail> {
        if let Some((eid, rid)) = owners {
            tx.get_enrollment(eid).await?;
            tx.get_request(rid).await?;
        }
        Ok(())
    }

    /// Undecided records `approver` decides, newest first.
    pub async fn pending_for(&self, approver: &Login) -> Result<Vec<Record>, Error> {
        let now = self.now();
        let mut out = read!(self, "list pending", |tx| {
            let mut out = Vec::new();
            for rec in tx.pending_records().await? {
                let rec = self.settle_record(tx, rec, now).await?;
                if rec.state == RecordState::Pending && rec.body.approver.admits(approver) {
                    out.push(rec);
                }
            }
            Ok::<_, Fail>(out)
        })?;
        out.sort_by_key(|r| std::cmp::Reverse(r.body.requested_at));
        Ok(out)
    }

    /// One record, as of now.
    pub async fn record(&self, id: &RecordId) -> Result<Record, Error> {
        let now = self.now();
        read!(self, "read record", |tx| {
            let rec = tx.get_record(id).await?.ok_or_else(|| {
                Error::with_message(ErrorCode::NOT_FOUND, "no such credential request")
            })?;
            self.settle_record(tx, rec, now).await
        })
    }

    /// The record a person decides for request `id` (issue 48: the console names a request by
    /// the id its session was given), as of now. NOT_FOUND when there is no such request or
    /// policy decided it at once (no record).
    pub async fn record_of_request(&self, id: RequestId) -> Result<Record, Error> {
        let now = self.now();
        read!(self, "read record of request", |tx| {
            let missing =
                || Error::with_message(ErrorCode::NOT_FOUND, "no such credential request");
            let record = tx
                .get_request(id)
                .await?
                .and_then(|r| r.record_id)
                .ok_or_else(missing)?;
            let rec = tx.get_record(&record).await?.ok_or_else(missing)?;
            self.settle_record(tx, rec, now).await
        })
    }

    /// Approves a record as `approver`. A machine login needs its confirmation code typed again.
    /// Where policy asks for a passkey ([`crate::passkey`]), `countersignature` is the
    /// approver's assertion over the statement [`Broker::statement_for`] issued: its nonce is
    /// spent first, and the assertion verified in the decision's transaction, whose seal
    /// covers it.
    pub async fn approve(
        &self,
        id: &RecordId,
        approver: &Login,
        code: Option<&str>,
        countersignature: Option<&Countersignature>,
    ) -> Result<Approved, Error> {
        self.audit_gate()?;
        let now = self.now();
        let policy = self.policy();
        let owners = self.record_owners(id).await?;
        if let Some(c) = countersignature {
            self.spend_statement_nonce(id, approver, c).await?;
        }
        let mut asked = None;
        let approved = transact!(self, "approve", |tx| {
            tx.prefetch_decision(owners, id).await?;
            self.lock_session_of(tx, owners).await?;
            let rec = self
                .lock_decidable(tx, id, approver, code, true, now)
                .await?;
            asked = Some((rec.body.kind, rec.body.requested_at));
            self.countersign(tx, &rec, approver, countersignature)
                .await?;
            let countersignature = countersignature.cloned();
            match rec.body.kind {
                RecordKind::LauncherCredential => {
                    self.approve_login(tx, rec, approver, countersignature, now)
                        .await
                }
                RecordKind::AgentSecret => {
                    self.approve_request(tx, rec, approver, countersignature, &policy, now)
                        .await
                }
            }
        })?;
        if let Some((kind, at)) = asked {
            crate::broker::count_decision(kind, "approved", at, now);
        }
        Ok(approved)
    }

    /// Approves a machine login's record: the launcher credential it asked for, refused while
    /// its key holds a live one.
    async fn approve_login(
        &self,
        tx: &mut dyn Tx,
        rec: Record,
        approver: &Login,
        countersignature: Option<Countersignature>,
        now: Time,
    ) -> Result<Approved, Fail> {
        let (Some(jwk), Some(thumbprint)) = (rec.body.jwk.clone(), rec.body.thumbprint.clone())
        else {
            return Err(Error::new(ErrorCode::GRANT_CHAIN_INVALID).into());
        };
        if tx
            .credentials_by_thumbprint(&thumbprint)
            .await?
            .iter()
            .any(|c| c.is_live(now))
        {
            return Err(ErrorCode::KEY_HOLDS_LIVE_CREDENTIAL.into());
        }
        let operator = match &rec.body.approver {
            crate::ids::Approver::Person(l) => Some(l.clone()),
            crate::ids::Approver::Anyone => None,
        };
        let c = LauncherCredential {
            id: CredentialId::from_random(self.uuid()),
            thumbprint,
            jwk,
            host: rec.body.identifiers.first().cloned().unwrap_or_default(),
            service: None,
            subject: None,
            operator,
            approved_by: approver.to_string(),
            issued_at: now,
            expires_at: now + self.config.machine_credential_lifetime,
            revoked_at: None,
            record_id: Some(rec.id),
            // Sealed as it is written (see `broker::guard`).
            seal: String::new(),
        };
        tx.put_credential(&c).await?;
        self.decide_record(
            tx,
            rec,
            RecordState::Approved,
            approver.as_str(),
            now,
            Carried {
                credential_id: Some(c.id),
                countersignature,
            },
        )
        .await?;
        Ok(Approved {
            credential_id: Some(c.id),
            grant_id: None,
        })
    }

    /// Approves a secret request's record: the grant, after the record's text verifies and the
    /// approver still stands under the current policy.
    async fn approve_request(
        &self,
        tx: &mut dyn Tx,
        rec: Record,
        approver: &Login,
        countersignature: Option<Countersignature>,
        policy: &crate::policy::Policy,
        now: Time,
    ) -> Result<Approved, Fail> {
        let (Some(rid), Some(eid)) = (rec.body.request_id, rec.body.enrollment_id) else {
            return Err(Error::new(ErrorCode::GRANT_CHAIN_INVALID).into());
        };
        let mut r = tx
            .get_request(rid)
            .await?
            .ok_or(ErrorCode::GRANT_CHAIN_INVALID)?;
        let e = tx
            .get_enrollment(eid)
            .await?
            .ok_or(ErrorCode::GRANT_CHAIN_INVALID)?;
        if r.clone().settled(now, &e).state != RequestState::Pending {
            return Err(terminal(&rec, false).into());
        }
        let mut names = r.names();
        names.sort();
        // The approver's standing under the current policy, and the record's text.
        if !rec.text_verifies() {
            return Err(Error::new(ErrorCode::GRANT_CHAIN_INVALID).into());
        }
        policy
            .check_standing(&names, Some(approver), &e.withheld)
            .map_err(|_| Error::new(ErrorCode::GRANT_CHAIN_INVALID))?;
        let rec = self
            .decide_record(
                tx,
                rec,
                RecordState::Approved,
                approver.as_str(),
                now,
                Carried {
                    credential_id: None,
                    countersignature,
                },
            )
            .await?;
        let mut g = Grant {
            id: GrantId::from_random(self.uuid()),
            request_id: r.id,
            enrollment_id: e.id,
            names,
            granted: GrantedBy::Approval,
            record_id: Some(rec.id),
            approver: Some(approver.clone()),
            expires_at: r
                .lifetime_seconds
                .map(|s| now + chrono::Duration::seconds(s as i64)),
            created_at: now,
            rules_version: policy.rules_version().to_owned(),
            end: None,
            seal: String::new(),
            decision_seal: None,
        };
        g.seal = self.sealer.seal_grant(&g);
        tx.put_grant(&g).await?;
        r.state = RequestState::Granted;
        r.grant_id = Some(g.id);
        r.decided_at = Some(now);
        r.decision = Some(DecisionBy {
            by: approver.to_string(),
            at: now,
        });
        tx.put_request(&r).await?;
        Ok(Approved {
            credential_id: None,
            grant_id: Some(g.id),
        })
    }

    /// Denies a record as `approver`.
    pub async fn deny(
        &self,
        id: &RecordId,
        approver: &Login,
        code: Option<&str>,
    ) -> Result<RecordState, Error> {
        self.audit_gate()?;
        let now = self.now();
        let owners = self.record_owners(id).await?;
        let mut asked = None;
        let state = transact!(self, "deny", |tx| {
            tx.prefetch_decision(owners, id).await?;
            self.lock_session_of(tx, owners).await?;
            let rec = self
                .lock_decidable(tx, id, approver, code, false, now)
                .await?;
            asked = Some((rec.body.kind, rec.body.requested_at));
            if let (RecordKind::AgentSecret, Some(rid)) = (rec.body.kind, rec.body.request_id)
                && let Some(mut r) = tx.get_request(rid).await?
            {
                r.state = RequestState::Denied;
                r.decided_at = Some(now);
                r.decision = Some(DecisionBy {
                    by: approver.to_string(),
                    at: now,
                });
                tx.put_request(&r).await?;
            }
            let rec = self
                .decide_record(
                    tx,
                    rec,
                    RecordState::Denied,
                    approver.as_str(),
                    now,
                    Carried::default(),
                )
                .await?;
            Ok::<_, Fail>(rec.state)
        })?;
        if let Some((kind, at)) = asked {
            crate::broker::count_decision(kind, "denied", at, now);
        }
        Ok(state)
    }

    /// Loads and locks a record for a decision, applying the rules in order: NOT_FOUND,
    /// NOT_APPROVER, RECORD_TERMINAL, then for a machine login SERVICE_LOGS_IN_WITH_TOKEN
    /// (approval only), CODE_REQUIRED and CODE_MISMATCH.
    async fn lock_decidable(
        &self,
        tx: &mut dyn Tx,
        id: &RecordId,
        approver: &Login,
        code: Option<&str>,
        approving: bool,
        now: Time,
    ) -> Result<Record, Fail> {
        let stored = tx.get_record(id).await?.ok_or_else(|| {
            Error::with_message(ErrorCode::NOT_FOUND, "no such credential request")
        })?;
        let rec = self.settle_record(tx, stored.clone(), now).await?;
        if !rec.body.approver.admits(approver) {
            return Err(Error::with_message(
                ErrorCode::NOT_APPROVER,
                "only the record's approver may decide it",
            )
            .into());
        }
        if rec.state != RecordState::Pending {
            return Err(terminal(&rec, rec.state == RecordState::Expired).into());
        }
        if rec.body.kind == RecordKind::LauncherCredential {
            if rec.body.service.is_some() && approving {
                return Err(ErrorCode::SERVICE_LOGS_IN_WITH_TOKEN.into());
            }
            if rec.body.service.is_none() {
                let typed = code
                    .map(str::trim)
                    .filter(|c| !c.is_empty())
                    .ok_or_else(|| {
                        Error::with_message(
                            ErrorCode::CODE_REQUIRED,
                            "code is required to decide a machine login",
                        )
                    })?;
                let matches = match (crate::ids::ConfirmationCode::parse(typed), &rec.code) {
                    (Some(t), Some(c)) => ct_eq(t.as_str().as_bytes(), c.as_str().as_bytes()),
                    _ => false,
                };
                if !matches {
                    return Err(ErrorCode::CODE_MISMATCH.into());
                }
            }
        }
        Ok(stored)
    }

    /// Machine logins `approver` sees: every service's, and the person's own machines', not
    /// revoked, unexpired or expired with a session still running; newest first.
    pub async fn credentials_for(
        &self,
        approver: &Login,
    ) -> Result<Vec<LauncherCredential>, Error> {
        self.list_credentials(|c| c.service.is_some() || c.operator.as_ref() == Some(approver))
            .await
    }

    pub(crate) async fn list_credentials(
        &self,
        keep: impl Fn(&LauncherCredential) -> bool + Send + Sync,
    ) -> Result<Vec<LauncherCredential>, Error> {
        let now = self.now();
        let mut out = read!(self, "list machine logins", |tx| {
            let mut out = Vec::new();
            for c in tx.list_credentials().await? {
                if c.is_revoked() || !keep(&c) {
                    continue;
                }
                let running = c.is_expired(now)
                    && tx
                        .enrollments_by_credential(c.id)
                        .await?
                        .into_iter()
                        .any(|e| e.is_live(now));
                if !c.is_expired(now) || running {
                    out.push(c);
                }
            }
            Ok::<_, Fail>(out)
        })?;
        out.sort_by_key(|c| std::cmp::Reverse(c.issued_at));
        Ok(out)
    }

    /// Ends a machine login as `approver`: a service's by anyone signed in, a person's machine
    /// only by the person who approved it.
    pub async fn revoke_credential_by_approver(
        &self,
        approver: &Login,
        id: CredentialId,
    ) -> Result<&'static str, Error> {
        let now = self.now();
        transact!(self, "revoke machine login", |tx| {
            let c = tx.get_credential(id).await?.ok_or_else(|| {
                Error::with_message(ErrorCode::NOT_FOUND, "no such machine login")
            })?;
            if c.service.is_none() && c.approved_by != approver.as_str() {
                return Err(Error::with_message(
                    ErrorCode::NOT_APPROVER,
                    "only the person who approved a person's machine login may revoke it",
                )
                .into());
            }
            self.revoke_credential(tx, c, &format!("launcher:{id}"), now)
                .await?;
            Ok::<_, Fail>("revoked")
        })
    }

    /// Live grants of `who`'s sessions, and those `who` approved, newest first; with them, the
    /// ended ones whose issued credentials are not destroyed yet (being destroyed, or failing
    /// to be), so that a person sees a credential until it is gone.
    pub async fn grants_for(&self, who: &Login) -> Result<Vec<GrantListItem>, Error> {
        let now = self.now();
        let issued = !self.issued_secrets().is_empty();
        let mut out = read!(self, "list grants", |tx| {
            let mut out = Vec::new();
            let mut grants = tx.live_grants().await?;
            if issued {
                for c in tx.unsettled_issued(1_000).await? {
                    if !grants.iter().any(|g| g.id == c.grant_id)
                        && let Some(g) = tx.get_grant(c.grant_id).await?
                    {
                        grants.push(g);
                    }
                }
            }
            for g in grants {
                let Some(e) = tx.get_enrollment(g.enrollment_id).await? else {
                    continue;
                };
                let g = g.settled(now, &e);
                if !(e.operator.as_ref() == Some(who) || g.approver.as_ref() == Some(who)) {
                    continue;
                }
                let credentials = if issued {
                    tx.issued_of(g.id).await?
                } else {
                    Vec::new()
                };
                if g.is_live()
                    || credentials
                        .iter()
                        .any(|c| c.state != IssuedState::Destroyed)
                {
                    out.push(GrantListItem {
                        enrollment: e.summary(),
                        grant: g,
                        credentials,
                    });
                }
            }
            Ok::<_, Fail>(out)
        })?;
        out.sort_by_key(|g| std::cmp::Reverse(g.grant.created_at));
        Ok(out)
    }

    /// Revokes a grant as its approver or its enrollment's operator. With `withhold` (the
    /// operator route), also ends the session's other automatic grants of the same secrets and
    /// withholds those secrets: they need approval again.
    pub async fn revoke_grant_as(
        &self,
        who: &Login,
        id: GrantId,
        withhold: bool,
    ) -> Result<&'static str, Error> {
        let now = self.now();
        // Lock order: the enrollment before its grants (as ending a session does).
        let owner = super::read!(self, "read grant", |tx| Ok::<_, Fail>(
            tx.get_grant(id).await?.map(|g| g.enrollment_id)
        ))?;
        transact!(self, "revoke grant", |tx| {
            if let Some(eid) = owner {
                tx.get_enrollment(eid).await?;
            }
            let g = tx
                .get_grant(id)
                .await?
                .ok_or_else(|| Error::with_message(ErrorCode::NOT_FOUND, "no such grant"))?;
            let mut e = tx
                .get_enrollment(g.enrollment_id)
                .await?
                .ok_or(ErrorCode::NOT_FOUND)?;
            if g.approver.as_ref() != Some(who) && e.operator.as_ref() != Some(who) {
                return Err(Error::with_message(
                    ErrorCode::NOT_APPROVER,
                    "only the grant's approver or its enrollment's operator may revoke it",
                )
                .into());
            }
            let mut g = g.settled(now, &e);
            if g.end.is_none() {
                g.end = Some((GrantEnd::Revoked, now));
                tx.put_grant(&g).await?;
            }
            if withhold {
                // The revoked grant's secrets are withheld from the session: its other
                // automatic grants that got any of them end, and new requests for them need
                // approval. Nothing else is withheld, so no other grant is left half valid.
                let withheld: std::collections::BTreeSet<_> = g.names.iter().cloned().collect();
                for other in tx.grants_by_enrollment(e.id).await? {
                    if other.id == g.id
                        || other.granted != GrantedBy::Automatic
                        || !other.names.iter().any(|n| withheld.contains(n))
                    {
                        continue;
                    }
                    let mut other = other.settled(now, &e);
                    if other.end.is_none() {
                        other.end = Some((GrantEnd::Revoked, now));
                        tx.put_grant(&other).await?;
                    }
                }
                if !withheld.is_subset(&e.withheld) {
                    e.withheld.extend(withheld);
                    tx.put_enrollment(&e).await?;
                }
            }
            Ok::<_, Fail>(g.state_str())
        })
    }
}

/// RECORD_TERMINAL with the message for the record's kind and how it ended.
fn terminal(rec: &Record, expired: bool) -> Error {
    let msg = match (rec.body.kind, expired) {
        (RecordKind::AgentSecret, true) => "request expired before its approver acted",
        (RecordKind::AgentSecret, false) => "request is already decided",
        (RecordKind::LauncherCredential, true) => "machine login expired before its approver acted",
        (RecordKind::LauncherCredential, false) => "machine login has already been decided",
    };
    Error::with_message(ErrorCode::RECORD_TERMINAL, msg)
}
