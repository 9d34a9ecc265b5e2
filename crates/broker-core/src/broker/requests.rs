//! A session's own operations: secret requests, their grants, and the values a live grant
//! releases after its approval chain verifies again.

use std::collections::BTreeSet;

use countersign_proto::claims::{self, SecretRequestClaims};
use countersign_proto::jws;

use super::{Broker, Fail, guard, read, transact};
use crate::clock::Time;
use crate::error::{Error, ErrorCode};
use crate::ids::{Approver, EnrollmentId, GrantId, RecordId, RequestId, SecretName, SessionId};
use crate::model::{
    Enrollment, Grant, GrantEnd, GrantedBy, Record, RecordKind, RecordState, RecordText, Request,
    RequestState, SessionIds,
};
use crate::policy::Outcome;
use crate::seal::Sealer;
use crate::secrets::SecretValue;

/// The body of an enrollment.
#[derive(Debug, Clone, Default)]
pub struct EnrollInput {
    pub kind: String,
    pub runtime_id: String,
    pub slot: Option<String>,
    pub operator: Option<String>,
    pub thumbprint: String,
    /// The session's public key (its thumbprint must equal `thumbprint`).
    pub jwk: serde_json::Value,
    pub session_id: Option<String>,
    pub pod_token: Option<String>,
}

/// The answer to a new request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedRequest {
    pub request: Request,
    /// It joined an identical pending request.
    pub coalesced: bool,
}

/// Values released by a grant.
#[derive(Debug)]
pub struct Released {
    pub expires_at: Option<Time>,
    pub values: Vec<(SecretName, SecretValue)>,
    /// For each issued secret (`crate::issuer`): its credential's parts as environment
    /// variables (`PGPASSWORD`, `AWS_ACCESS_KEY_ID`, …).
    pub parts: Vec<(SecretName, Vec<(String, SecretValue)>)>,
    /// For each issued secret: the names of its parts that are not secret (`PGHOST`, …).
    pub public_parts: Vec<(SecretName, Vec<String>)>,
}

/// Released values, and the parts of each issued one.
type ReadValues = (
    Vec<(SecretName, SecretValue)>,
    Vec<(SecretName, Vec<(String, SecretValue)>)>,
    Vec<(SecretName, Vec<String>)>,
);

fn invalid(msg: &'static str) -> Error {
    Error::with_message(ErrorCode::REQUEST_INVALID, msg)
}

/// What a verified request object asks for, checked: its distinct names in the order given,
/// its reason (trimmed) and its lifetime.
struct Ask<'a> {
    names: Vec<SecretName>,
    reason: &'a str,
    lifetime_seconds: Option<u64>,
}

impl<'a> Ask<'a> {
    fn of(c: &'a SecretRequestClaims, max_lifetime: i64) -> Result<Self, Error> {
        let mut names: Vec<SecretName> = Vec::new();
        for d in &c.authorization_details {
            let name = match (d.kind.as_str(), d.name.as_deref()) {
                (claims::DETAIL_AGENT_SECRET, Some(n)) => SecretName::parse(n).map_err(|_| {
                    invalid(
                        "request object invalid: a secret name must match ^[A-Z][A-Z0-9_]{0,127}$",
                    )
                })?,
                _ => {
                    return Err(invalid(
                        "request object invalid: authorization_details must be agent_secret entries with a name",
                    ));
                }
            };
            if !names.contains(&name) {
                names.push(name);
            }
        }
        if names.is_empty() {
            return Err(invalid("request object invalid: no secret named"));
        }
        let reason = c.reason.trim();
        if reason.is_empty() || reason.chars().count() > 1000 {
            return Err(invalid(
                "request object invalid: reason must be 1 to 1,000 characters",
            ));
        }
        if crate::ids::has_format_char(reason) {
            return Err(invalid(
                "request object invalid: reason has a Unicode format (Cf) character",
            ));
        }
        if let Some(l) = c.lifetime_seconds
            && (l == 0 || l > max_lifetime.unsigned_abs())
        {
            return Err(Error::with_message(
                ErrorCode::REQUEST_INVALID,
                format!("request object invalid: lifetime_seconds must be 1 to {max_lifetime}"),
            ));
        }
        Ok(Ask {
            names,
            reason,
            lifetime_seconds: c.lifetime_seconds,
        })
    }
}

/// Counts a new request by what policy made of it.
fn count_created(r: &Request) {
    let outcome = match r.state {
        RequestState::Granted => "granted",
        RequestState::Denied => "denied",
        _ => "pending",
    };
    metrics::counter!("countersign_requests_total", "outcome" => outcome).increment(1);
}

impl Broker {
    /// Creates a request from a signed secret request object.
    pub async fn create_request(
        &self,
        caller: &Enrollment,
        request: &str,
        session_id: Option<&str>,
    ) -> Result<CreatedRequest, Error> {
        self.audit_gate()?;
        let session_id = session_id.map(SessionId::parse).transpose()?;
        let c = self.verify_secret_request(caller, request).await?;
        let ask = Ask::of(&c, self.config.max_grant_lifetime.num_seconds())?;
        let now = self.now();
        let policy = self.policy();
        let created = transact!(self, "create request", |tx| {
            // One round trip on PostgreSQL: the enrollment (locked) and its pending requests.
            let (e, pending) = tx.enrollment_with_pending(caller.id).await?;
            let e = e.ok_or(ErrorCode::PROOF_INVALID)?.settled(now);
            if !e.is_live(now) {
                return Err(Error::with_message(
                    ErrorCode::PROOF_INVALID,
                    "proof invalid: not live",
                )
                .into());
            }
            let decided = policy.decide(&ask.names, &e.withheld)?;
            if let Some(pending) = Self::coalesced(pending, &e, &ask, now)? {
                return Ok(CreatedRequest {
                    request: pending,
                    coalesced: true,
                });
            }
            let mut r = Request {
                id: RequestId::from_random(self.uuid()),
                enrollment_id: e.id,
                state: RequestState::Pending,
                secrets: decided.secrets.clone(),
                grant_id: None,
                record_id: None,
                approver: None,
                lifetime_seconds: ask.lifetime_seconds,
                session_id: session_id.clone(),
                stated_id: session_id.as_ref().map(|s| s.as_str().to_owned()),
                reason: ask.reason.to_owned(),
                created_at: now,
                decided_at: None,
                decision: None,
                expires_at: None,
            };
            match decided.outcome {
                Outcome::Denied => {
                    r.state = RequestState::Denied;
                    r.decided_at = Some(now);
                }
                Outcome::Granted => {
                    let g = self.automatic_grant(&r, &ask, policy.rules_version(), now);
                    tx.put_grant(&g).await?;
                    r.state = RequestState::Granted;
                    r.grant_id = Some(g.id);
                    r.decided_at = Some(now);
                }
                Outcome::NeedsApproval(approver) => {
                    let record =
                        self.approval_record(&r, &e, &ask, &approver, policy.rules_version(), now);
                    tx.put_record(&record).await?;
                    self.notify_pending(tx, &record).await?;
                    r.record_id = Some(record.id);
                    r.approver = Some(approver);
                    r.expires_at = Some(record.body.expires_at);
                }
            }
            tx.put_request(&r).await?;
            Ok::<_, Fail>(CreatedRequest {
                request: r,
                coalesced: false,
            })
        })?;
        if !created.coalesced {
            count_created(&created.request);
        }
        Ok(created)
    }

    /// This session's pending request asking for exactly these names with this lifetime, which
    /// a new ask joins; `REQUEST_PENDING` when a pending one asks for some of them.
    fn coalesced(
        pending: Vec<Request>,
        e: &Enrollment,
        ask: &Ask<'_>,
        now: Time,
    ) -> Result<Option<Request>, Fail> {
        let wanted: BTreeSet<&SecretName> = ask.names.iter().collect();
        for p in pending {
            let p = p.settled(now, e);
            if p.state != RequestState::Pending {
                continue;
            }
            let theirs: BTreeSet<SecretName> = p.names().into_iter().collect();
            if theirs.iter().collect::<BTreeSet<_>>() == wanted
                && p.lifetime_seconds == ask.lifetime_seconds
            {
                return Ok(Some(p));
            }
            if wanted.iter().any(|n| theirs.contains(*n)) {
                return Err(Error::from(ErrorCode::REQUEST_PENDING).into());
            }
        }
        Ok(None)
    }

    /// The grant policy gives at once, sealed with its automatic decision.
    fn automatic_grant(&self, r: &Request, ask: &Ask<'_>, rules_version: &str, now: Time) -> Grant {
        let mut sorted = ask.names.clone();
        sorted.sort();
        let decision_seal =
            self.sealer
                .seal_automatic(&r.id, &r.enrollment_id, &sorted, rules_version, now);
        let mut g = Grant {
            id: GrantId::from_random(self.uuid()),
            request_id: r.id,
            enrollment_id: r.enrollment_id,
            names: sorted,
            granted: GrantedBy::Automatic,
            record_id: None,
            approver: None,
            expires_at: ask
                .lifetime_seconds
                .map(|s| now + chrono::Duration::seconds(s as i64)),
            created_at: now,
            rules_version: rules_version.to_owned(),
            end: None,
            seal: String::new(),
            decision_seal: Some(decision_seal),
        };
        g.seal = self.sealer.seal_grant(&g);
        g
    }

    /// The approval record a person countersigns for a request policy sends to `approver`.
    fn approval_record(
        &self,
        r: &Request,
        e: &Enrollment,
        ask: &Ask<'_>,
        approver: &Approver,
        rules_version: &str,
        now: Time,
    ) -> Record {
        let body = RecordText {
            version: 1,
            kind: RecordKind::AgentSecret,
            approver: approver.clone(),
            enrollment: Some(e.summary()),
            session: SessionIds {
                request: r.stated_id.clone(),
                enrollment: e.session_id.as_ref().map(|s| s.as_str().to_owned()),
            },
            identifiers: ask.names.iter().map(|n| n.as_str().to_owned()).collect(),
            service: None,
            reason: ask.reason.to_owned(),
            lifetime_seconds: ask.lifetime_seconds,
            rules_version: rules_version.to_owned(),
            expires_at: now + self.config.request_ttl,
            requested_at: now,
            enrollment_id: Some(e.id),
            request_id: Some(r.id),
            thumbprint: None,
            jwk: None,
            nonce: self.nonce(),
        };
        let text = body.canonical();
        Record {
            id: RecordId::of_text(&text),
            text,
            body,
            state: RecordState::Pending,
            decided: None,
            code: None,
        }
    }

    async fn verify_secret_request(
        &self,
        caller: &Enrollment,
        token: &str,
    ) -> Result<SecretRequestClaims, Error> {
        let parsed = jws::parse(token)
            .map_err(|_| invalid("request object invalid: not a valid ES256 JWS"))?;
        parsed
            .expect_typ(claims::TYP_SECRET_REQUEST)
            .map_err(|_| invalid("request object invalid: wrong typ"))?;
        if parsed.jwk().is_some() || parsed.kid() != Some(caller.id.to_string().as_str()) {
            return Err(invalid(
                "request object invalid: kid must be the session's enrollment id",
            ));
        }
        let key = self
            .verifying_key(&caller.thumbprint, &caller.jwk)
            .ok_or_else(|| invalid("request object invalid"))?;
        let verified = parsed
            .verify(&key)
            .map_err(|_| invalid("request object invalid: signature"))?;
        let c: SecretRequestClaims = verified
            .claims()
            .map_err(|_| invalid("request object invalid: claims"))?;
        if c.aud != self.config.public_url {
            return Err(invalid(
                "request object invalid: aud is not this broker's public URL",
            ));
        }
        self.check_window(c.iat, c.exp)?;
        if !self
            .check_proof_replay(
                &format!("request:{}", caller.id),
                &c.jti,
                c.iat,
                "request object check",
            )
            .await?
        {
            return Err(invalid("request object invalid: replayed"));
        }
        Ok(c)
    }

    /// A request of the caller's, as of now.
    pub async fn get_request(&self, caller: &Enrollment, id: RequestId) -> Result<Request, Error> {
        let now = self.now();
        read!(self, "read request", |tx| {
            let r = own(tx.get_request(id).await?, caller)?;
            Ok::<_, Fail>(r.settled(now, caller))
        })
    }

    /// Cancels the caller's pending request. Answers the state it left it in.
    pub async fn cancel_own_request(
        &self,
        caller: &Enrollment,
        id: RequestId,
    ) -> Result<RequestState, Error> {
        let now = self.now();
        let by = format!("session:{}", caller.id);
        transact!(self, "cancel request", |tx| {
            // Lock order: enrollment, request, record.
            tx.get_enrollment(caller.id).await?;
            let r = own(tx.get_request(id).await?, caller)?;
            if r.clone().settled(now, caller).state != RequestState::Pending {
                return Err(ErrorCode::REQUEST_TERMINAL.into());
            }
            if let Some(rid) = r.record_id {
                // The record is locked too: an approver deciding at the same moment serialises here.
                if tx
                    .get_record(&rid)
                    .await?
                    .is_some_and(|rec| rec.settled(now).state != RecordState::Pending)
                {
                    return Err(ErrorCode::REQUEST_TERMINAL.into());
                }
            }
            let r = self.cancel_request(tx, r, &by, now).await?;
            Ok::<_, Fail>(r.state)
        })
    }

    /// The caller's live grants, soonest to expire first (those lasting until the session
    /// ends last).
    pub async fn own_grants(&self, caller: &Enrollment) -> Result<Vec<Grant>, Error> {
        let grants = read!(self, "read grants", |tx| Ok::<_, Fail>(
            tx.grants_by_enrollment(caller.id).await?
        ))?;
        Ok(Self::live_own(grants, caller, self.now()))
    }

    /// Of an enrollment's grants, the live ones as of `now`, soonest to expire first.
    pub(crate) fn live_own(grants: Vec<Grant>, caller: &Enrollment, now: Time) -> Vec<Grant> {
        let mut grants = grants
            .into_iter()
            .map(|g| g.settled(now, caller))
            .filter(Grant::is_live)
            .collect::<Vec<_>>();
        grants.sort_by_key(|g| (g.expires_at.is_none(), g.expires_at, g.created_at));
        grants
    }

    /// Releases a live grant's values, fresh from the store, after verifying its chain.
    pub async fn release_values(
        &self,
        caller: &Enrollment,
        id: GrantId,
    ) -> Result<Released, Error> {
        self.audit_gate()?;
        let now = self.now();
        let (grant, record, ended_in_log) = read!(self, "read grant", |tx| {
            let g = own(tx.get_grant(id).await?, caller)?;
            let record = match g.record_id {
                Some(rid) => tx.get_record(&rid).await?,
                None => None,
            };
            // The passkey that countersigned the approval, when one did (a row failing its
            // seal reads as none, and the countersignature then fails below).
            let passkey = match record
                .as_ref()
                .and_then(|r| r.decided.as_ref())
                .and_then(|d| d.countersignature.as_ref())
            {
                Some(c) => tx.get_passkey(&c.credential).await?,
                None => None,
            };
            // An end recorded in the audit log ends the grant, whatever its row says.
            let mut ended = false;
            for subject in [format!("grant:{id}"), format!("enrollment:{}", caller.id)] {
                for e in tx.audit_ends(&subject).await? {
                    if crate::audit::check_entry(&self.sealer, &e).is_err() {
                        guard::tampered("audit_log", &e.position.to_string(), "seal");
                        return Err(ErrorCode::GRANT_CHAIN_INVALID.into());
                    }
                    ended |= crate::audit::ends(&e);
                }
            }
            Ok::<_, Fail>((g.settled(now, caller), (record, passkey), ended))
        })?;
        let (record, passkey) = record;
        if ended_in_log && grant.is_live() {
            guard::tampered("grants", &grant.id.to_string(), "end in the audit log");
        }
        if !grant.is_live() || ended_in_log {
            return Err(ErrorCode::GRANT_NOT_LIVE.into());
        }
        self.verify_chain(&grant, record.as_ref(), caller)?;
        let policy = self.policy();
        self.check_countersignature(&grant, record.as_ref(), passkey.as_ref(), &policy)?;
        policy.check_standing(&grant.names, grant.approver.as_ref(), &caller.withheld)?;
        let (values, parts, public_parts) = self.read_values(&policy, &grant).await?;
        // The release is in the log (names, never values) before any value leaves.
        let names: Vec<&str> = grant.names.iter().map(|n| n.as_str()).collect();
        let event = crate::audit::AuditEvent {
            kind: "release",
            subject: format!("grant:{}", grant.id),
            body: serde_json::json!({ "enrollment": caller.id.to_string(), "names": names })
                .to_string(),
        };
        transact!(self, "audit log", |tx| {
            crate::audit::append(tx, &self.sealer, now, std::slice::from_ref(&event)).await?;
            Ok::<_, Fail>(())
        })?;
        tracing::info!(grant = %grant.id, enrollment = %caller.id, secrets = ?grant.names.iter().map(|n| n.as_str()).collect::<Vec<_>>(), "values released");
        let by = match grant.granted {
            GrantedBy::Automatic => "automatic",
            GrantedBy::Approval => "approval",
        };
        metrics::counter!("countersign_releases_total", "granted" => by).increment(1);
        metrics::counter!("countersign_released_secrets_total").increment(values.len() as u64);
        Ok(Released {
            expires_at: grant.expires_at,
            values,
            parts,
            public_parts,
        })
    }

    /// Each name's value, fresh from the store, or for an issued secret its grant's credential
    /// (minted at the first release): `SECRET_NOT_IN_STORE` for a name the policy or the store
    /// no longer has; a store failure is logged (never a value) and answered as an unavailable
    /// dependency, an issuer's as ISSUER_UNAVAILABLE.
    async fn read_values(
        &self,
        policy: &crate::policy::Policy,
        grant: &Grant,
    ) -> Result<ReadValues, Error> {
        let names = &grant.names;
        let mut values = Vec::with_capacity(names.len());
        let mut parts = Vec::new();
        let mut public = Vec::new();
        for n in names {
            let entry = policy.get(n).ok_or(ErrorCode::SECRET_NOT_IN_STORE)?;
            if entry.issuer.is_some() {
                let minted = self.issued_value(grant, n).await?;
                values.push((n.clone(), minted.value));
                parts.push((n.clone(), minted.env));
                public.push((n.clone(), minted.public));
                continue;
            }
            let v = tracing::Instrument::instrument(
                self.store.read_value(entry),
                tracing::info_span!("secret store read", otel.kind = "client"),
            )
            .await
            .map_err(|e| match e {
                crate::secrets::StoreError::NotFound => Error::new(ErrorCode::SECRET_NOT_IN_STORE),
                other => {
                    tracing::warn!(error = %other, secret = %n, "secret store read failed");
                    Error::with_message(
                        ErrorCode::DATABASE_UNAVAILABLE,
                        "secret store read: a dependency the broker needs is unavailable",
                    )
                }
            })?;
            values.push((n.clone(), v));
        }
        Ok((values, parts, public))
    }

    /// Recomputes every link of a grant's chain: the grant's seal; for an approved grant, the
    /// record's text against its id, its sealed approval, and that it names this session and
    /// these secrets; for an automatic grant, the sealed policy decision.
    pub fn verify_chain(
        &self,
        g: &Grant,
        record: Option<&Record>,
        e: &Enrollment,
    ) -> Result<(), Error> {
        if g.enrollment_id != e.id || !grant_chain_verifies(&self.sealer, g, record) {
            return Err(Error::new(ErrorCode::GRANT_CHAIN_INVALID));
        }
        Ok(())
    }

    /// At release, the approval's passkey countersignature checked again: where policy now
    /// asks for one, an approval without it releases nothing (PASSKEY_REQUIRED: ask again);
    /// one that no longer verifies against its passkey's sealed key (a decision or passkey
    /// edited in the database) releases nothing and is reported as tampering.
    fn check_countersignature(
        &self,
        g: &Grant,
        record: Option<&Record>,
        passkey: Option<&crate::model::Passkey>,
        policy: &crate::policy::Policy,
    ) -> Result<(), Error> {
        let Some(settings) = self.config.passkeys.as_ref() else {
            return Ok(());
        };
        let requirement = settings.requirement_for(policy, &g.names, false);
        let decided = record.and_then(|r| r.decided.as_ref().map(|d| (r, d)));
        let countersigned =
            decided.and_then(|(r, d)| d.countersignature.as_ref().map(|c| (r, d, c)));
        let Some((rec, d, c)) = countersigned else {
            if requirement.is_some() {
                tracing::warn!(grant = %g.id, "release refused: policy asks for a passkey countersignature the approval does not carry");
                return Err(Error::with_message(
                    ErrorCode::PASSKEY_REQUIRED,
                    "this grant was approved without the passkey countersignature policy now asks for; request it again",
                ));
            }
            return Ok(());
        };
        let statement =
            crate::passkey::Statement::of(rec, crate::passkey::Decision::Approve, &d.by, &c.nonce);
        let Some(p) = passkey else {
            return Err(self.countersignature_broken(
                g,
                rec,
                "the passkey is not registered, or its row fails its seal",
            ));
        };
        // The count moved on since; what is checked again is the signature and its context.
        match crate::passkey::verify_countersignature(
            settings,
            p,
            &statement,
            c,
            0,
            requirement.as_ref(),
        ) {
            Ok(_) => Ok(()),
            Err(crate::passkey::CountersignError::Requirement(why)) => {
                tracing::warn!(grant = %g.id, why, "release refused: the countersigning passkey no longer meets policy");
                Err(Error::with_message(ErrorCode::PASSKEY_REQUIRED, why))
            }
            Err(_) => {
                Err(self.countersignature_broken(g, rec, "the countersignature does not verify"))
            }
        }
    }

    fn countersignature_broken(&self, g: &Grant, rec: &Record, why: &'static str) -> Error {
        guard::tampered("records", &rec.id.to_string(), "countersignature");
        tracing::error!(grant = %g.id, record = %rec.id, why, "release refused");
        Error::new(ErrorCode::GRANT_CHAIN_INVALID)
    }

    /// Ends a grant the caller holds. Answers the grant's state after the call.
    pub async fn revoke_own_grant(
        &self,
        caller: &Enrollment,
        id: GrantId,
    ) -> Result<&'static str, Error> {
        let now = self.now();
        transact!(self, "revoke grant", |tx| {
            // Lock order: the enrollment before its grants.
            tx.get_enrollment(caller.id).await?;
            let g = own(tx.get_grant(id).await?, caller)?;
            let mut g = g.settled(now, caller);
            if g.end.is_none() {
                g.end = Some((GrantEnd::Revoked, now));
                tx.put_grant(&g).await?;
            }
            Ok::<_, Fail>(g.state_str())
        })
    }
}

/// A row a session owns (its request or its grant), as the session's routes look it up.
trait SessionOwned {
    /// NOT_FOUND's message.
    const MISSING: &'static str;
    /// NOT_YOURS's message.
    const OTHERS: &'static str;
    fn owner(&self) -> EnrollmentId;
}

impl SessionOwned for Request {
    const MISSING: &'static str = "no such request";
    const OTHERS: &'static str = "this request belongs to another session";
    fn owner(&self) -> EnrollmentId {
        self.enrollment_id
    }
}

impl SessionOwned for Grant {
    const MISSING: &'static str = "no such grant";
    const OTHERS: &'static str = "this grant belongs to another session";
    fn owner(&self) -> EnrollmentId {
        self.enrollment_id
    }
}

/// The caller's own row: NOT_FOUND when there is none, NOT_YOURS when another session owns it.
fn own<T: SessionOwned>(row: Option<T>, caller: &Enrollment) -> Result<T, Error> {
    let row = row.ok_or_else(|| Error::with_message(ErrorCode::NOT_FOUND, T::MISSING))?;
    if row.owner() != caller.id {
        return Err(Error::with_message(ErrorCode::NOT_YOURS, T::OTHERS));
    }
    Ok(row)
}

/// Every link of a grant's chain: the grant's seal; for an approved grant, the record's text
/// against its id, its sealed approval, and that it names the grant's session and secrets; for
/// an automatic grant, the sealed policy decision. (`audit verify` checks every grant with it.)
pub fn grant_chain_verifies(sealer: &Sealer, g: &Grant, record: Option<&Record>) -> bool {
    if !sealer.verify_grant(g) {
        return false;
    }
    match (g.granted, g.record_id, record) {
        (GrantedBy::Automatic, None, None) => g.decision_seal.as_deref().is_some_and(|seal| {
            sealer.verify_automatic(
                &g.request_id,
                &g.enrollment_id,
                &g.names,
                &g.rules_version,
                g.created_at,
                seal,
            )
        }),
        (GrantedBy::Approval, Some(rid), Some(rec)) if rec.id == rid => {
            let (Some(d), Some(approver)) = (rec.decided.as_ref(), g.approver.as_ref()) else {
                return false;
            };
            let mut asked: Vec<String> = rec.body.identifiers.clone();
            asked.sort();
            let granted: Vec<String> = g.names.iter().map(|n| n.as_str().to_owned()).collect();
            rec.text_verifies()
                && rec.state == RecordState::Approved
                && d.event == RecordState::Approved
                && d.by == approver.as_str()
                && rec.body.approver.admits(approver)
                && rec.body.kind == RecordKind::AgentSecret
                && rec.body.enrollment_id == Some(g.enrollment_id)
                && rec.body.request_id == Some(g.request_id)
                && asked == granted
                && sealer.verify_decision(
                    &rec.id,
                    d.event,
                    &d.by,
                    d.at,
                    d.countersignature.as_ref(),
                    &d.seal,
                )
        }
        _ => false,
    }
}
