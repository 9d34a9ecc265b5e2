//! Enrollment of session and pod keys under a machine credential, renewal, and unenrollment.

use countersign_proto::PublicJwk;

use super::requests::EnrollInput;
use super::{Broker, Fail, transact};
use crate::clock::Time;
use crate::error::{Error, ErrorCode};
use crate::ids::{EnrollmentId, Login, SessionId, Slot};
use crate::model::{Enrollment, EnrollmentKind, LauncherCredential};

fn bad(msg: &'static str) -> Error {
    Error::with_message(ErrorCode::INVALID_ENROLLMENT, msg)
}

/// An enrollment's body, checked field by field before anything is read or written.
struct Checked {
    kind: EnrollmentKind,
    slot: Option<Slot>,
    runtime_id: String,
    jwk: PublicJwk,
    session_id: Option<SessionId>,
}

impl Checked {
    fn of(credential: &LauncherCredential, input: &EnrollInput) -> Result<Self, Error> {
        let kind = EnrollmentKind::parse(&input.kind).ok_or(ErrorCode::INVALID_KIND)?;
        let slot = match input.slot.as_deref() {
            None => None,
            Some(_) if kind != EnrollmentKind::Pod => return Err(ErrorCode::INVALID_SLOT.into()),
            Some(s) => Some(Slot::parse(s)?),
        };
        let runtime_id = input.runtime_id.trim().to_owned();
        if runtime_id.is_empty()
            || runtime_id.len() > 256
            || runtime_id.chars().any(char::is_control)
            || crate::ids::has_format_char(&runtime_id)
        {
            return Err(bad(
                "body must be one valid JSON object: runtime_id must be 1 to 256 characters, none a control or format (Cf) character",
            ));
        }
        if let Some(op) = input.operator.as_deref() {
            let matches =
                Login::parse(op).is_some_and(|l| Some(&l) == credential.operator.as_ref());
            if !matches {
                return Err(ErrorCode::OPERATOR_MISMATCH.into());
            }
        }
        let jwk = PublicJwk::from_value(&input.jwk).map_err(|_| {
            bad("body must be one valid JSON object: jwk is not a public P-256 key")
        })?;
        if jwk.thumbprint() != input.thumbprint {
            return Err(bad(
                "body must be one valid JSON object: thumbprint is not the jwk's RFC 7638 thumbprint",
            ));
        }
        // A malformed notification session id is a malformed body here (the route's codes do
        // not include SESSION_ID_INPUT).
        let session_id = input
            .session_id
            .as_deref()
            .map(SessionId::parse)
            .transpose()
            .map_err(|_| {
                bad("body must be one valid JSON object: session_id must be 1 to 128 characters with no whitespace, control character, /, ?, #, or any of <>\"'`[]\\|")
            })?;
        Ok(Checked {
            kind,
            slot,
            runtime_id,
            jwk,
            session_id,
        })
    }
}

impl Broker {
    /// Enrolls a session's or pod's key under `credential` (already authenticated).
    /// Answers the enrollment.
    pub async fn enroll(
        &self,
        credential: &LauncherCredential,
        input: EnrollInput,
    ) -> Result<Enrollment, Error> {
        // A chain behind what this replica remembers may have lost the credential's revocation.
        self.audit_gate()?;
        let now = self.now();
        if credential.is_expired(now) {
            return Err(Error::with_message(
                ErrorCode::LAUNCHER_INVALID,
                "the launcher credential has expired: it enrolls nothing more",
            ));
        }
        let Checked {
            kind,
            slot,
            runtime_id,
            jwk,
            session_id,
        } = Checked::of(credential, &input)?;
        let mut pod_account = None;
        if let Some(token) = input.pod_token.as_deref() {
            if kind != EnrollmentKind::Pod {
                return Err(bad(
                    "body must be one valid JSON object: pod_token is for pods only",
                ));
            }
            pod_account = Some(
                self.verify_pod_token(credential, token, &runtime_id, now)
                    .await?,
            );
        }
        let operator = match kind {
            EnrollmentKind::Pod => None,
            EnrollmentKind::Session => credential.operator.clone(),
        };
        let enrollment = Enrollment {
            id: EnrollmentId::from_random(self.uuid()),
            credential_id: credential.id,
            kind,
            runtime_id,
            slot,
            operator,
            thumbprint: input.thumbprint,
            jwk,
            session_id,
            lease_expires_at: now + self.config.lease,
            created_at: now,
            ended: None,
            // POD_TOKEN_REQUIRED applies once the enrollment has *renewed* with a token (spec,
            // renew route); the account proved at enrollment is kept for that comparison.
            pod_token_seen: false,
            pod_account,
            withheld: Default::default(),
            // Sealed as it is written (see `broker::guard`).
            seal: String::new(),
        };
        self.write_enrollment(credential, &enrollment, now).await?;
        Ok(enrollment)
    }

    /// Writes a new enrollment under its credential (locked, so two enrollments of one runtime
    /// serialise): refused when the credential is revoked or a live enrollment of the same
    /// runtime and slot exists.
    async fn write_enrollment(
        &self,
        credential: &LauncherCredential,
        enrollment: &Enrollment,
        now: Time,
    ) -> Result<(), Error> {
        transact!(self, "enroll", |tx| {
            // Lock the credential row: two enrollments of one runtime serialise here.
            let c = tx
                .get_credential(credential.id)
                .await?
                .ok_or(ErrorCode::LAUNCHER_INVALID)?;
            if c.is_revoked() {
                return Err(ErrorCode::LAUNCHER_INVALID.into());
            }
            for other in tx.enrollments_by_credential(credential.id).await? {
                let other = other.settled(now);
                if other.is_live(now)
                    && other.runtime_id == enrollment.runtime_id
                    && other.slot == enrollment.slot
                {
                    return Err(ErrorCode::ALREADY_ENROLLED.into());
                }
            }
            tx.put_enrollment(enrollment).await?;
            Ok::<_, Fail>(())
        })
    }

    /// Ends an enrollment made under the caller's operator, or a pod enrollment made by the
    /// caller's own credential.
    pub async fn unenroll(
        &self,
        credential: &LauncherCredential,
        id: EnrollmentId,
    ) -> Result<(), Error> {
        let now = self.now();
        let by = format!("launcher:{}", credential.id);
        transact!(self, "unenroll", |tx| {
            let e = tx
                .get_enrollment(id)
                .await?
                .ok_or_else(|| Error::with_message(ErrorCode::NOT_FOUND, "no such enrollment"))?;
            match e.kind {
                EnrollmentKind::Pod if e.credential_id != credential.id => {
                    return Err(ErrorCode::NOT_ENROLLING_CREDENTIAL.into());
                }
                EnrollmentKind::Session
                    if e.credential_id != credential.id
                        && (e.operator.is_none() || e.operator != credential.operator) =>
                {
                    return Err(ErrorCode::OPERATOR_MISMATCH.into());
                }
                _ => {}
            }
            self.end_enrollment(tx, e, &by, now).await?;
            Ok::<_, Fail>(())
        })
    }

    /// Extends the caller's own lease. `path_id` is the enrollment the route names.
    pub async fn renew(
        &self,
        caller: &Enrollment,
        path_id: EnrollmentId,
        pod_token: Option<&str>,
    ) -> Result<Time, Error> {
        // A chain behind what this replica remembers may have lost the session's end.
        self.audit_gate()?;
        if caller.id != path_id {
            return Err(Error::with_message(
                ErrorCode::NOT_YOURS,
                "a session may only renew its own enrollment",
            ));
        }
        let now = self.now();
        let mut account = None;
        if caller.kind == EnrollmentKind::Pod {
            match pod_token {
                None if caller.pod_token_seen => return Err(ErrorCode::POD_TOKEN_REQUIRED.into()),
                None => {}
                Some(token) => {
                    let credential = self.credential(caller.credential_id).await?;
                    account = Some(
                        self.verify_pod_token(&credential, token, &caller.runtime_id, now)
                            .await?,
                    );
                }
            }
        }
        transact!(self, "renew", |tx| {
            let mut e = tx
                .get_enrollment(path_id)
                .await?
                .ok_or(ErrorCode::ENROLLMENT_NOT_LIVE)?
                .settled(now);
            if !e.is_live(now) {
                return Err(ErrorCode::ENROLLMENT_NOT_LIVE.into());
            }
            if let Some(acct) = &account {
                if e.pod_account.as_ref().is_some_and(|a| a != acct) {
                    return Err(ErrorCode::POD_IDENTITY_MISMATCH.into());
                }
                e.pod_account = Some(acct.clone());
                e.pod_token_seen = true;
            }
            e.lease_expires_at = now + self.config.lease;
            tx.put_enrollment(&e).await?;
            Ok::<_, Fail>(e.lease_expires_at)
        })
    }

    pub(crate) async fn credential(
        &self,
        id: crate::ids::CredentialId,
    ) -> Result<LauncherCredential, Error> {
        super::read!(self, "launcher credential read", |tx| Ok::<_, Fail>(
            tx.get_credential(id).await?
        ))?
        .ok_or_else(|| ErrorCode::LAUNCHER_INVALID.into())
    }

    /// Verifies a pod's projected token: it must verify, name `runtime_id` as its pod UID, and
    /// belong to an account listed for the enrolling credential's service. Answers the account.
    pub(crate) async fn verify_pod_token(
        &self,
        credential: &LauncherCredential,
        token: &str,
        runtime_id: &str,
        now: Time,
    ) -> Result<String, Error> {
        let verifier = self.tokens.as_ref().ok_or_else(|| {
            Error::with_message(
                ErrorCode::POD_IDENTITY_MISMATCH,
                "this broker trusts no token issuer, so a pod token cannot identify the pod",
            )
        })?;
        let sa = verifier
            .verify(token, now)
            .await
            .map_err(|e| match e.code {
                ErrorCode::TOKEN_EXPIRED => Error::new(ErrorCode::POD_TOKEN_EXPIRED),
                ErrorCode::TOKEN_INVALID | ErrorCode::TOKEN_TOO_LONG_LIVED => {
                    Error::new(ErrorCode::POD_IDENTITY_MISMATCH)
                }
                // The issuer's keys could not be fetched: not the pod's fault; try again.
                _ => e,
            })?;
        let account = sa.account();
        let listed = credential
            .service
            .as_ref()
            .and_then(|s| self.config.service_logins.get(s))
            .is_some_and(|accounts| accounts.contains(&account));
        if sa.pod_uid.as_deref() != Some(runtime_id) || !listed {
            return Err(ErrorCode::POD_IDENTITY_MISMATCH.into());
        }
        Ok(account)
    }
}
