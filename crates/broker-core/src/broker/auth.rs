//! Proof verification (protocol.md §2): the `Proof` header names an enrolled key by `kid`, binds
//! the method, URL, time and body, and is single use. Credential refusals come before the route
//! runs, in the spec's order: the database first (503), then the proof (401). A replica whose
//! audit chain is broken (failed closed: its database is behind what it remembers) answers 503
//! to every launcher and session proof, since it cannot vouch for any credential's end.

use countersign_proto::claims::{self, ProofClaims};
use countersign_proto::jws;

use super::{Broker, Fail, ct_eq, read};
use crate::error::{Error, ErrorCode};
use crate::ids::{CredentialId, EnrollmentId};
use crate::model::{Enrollment, Grant, LauncherCredential};
use crate::storage::{ProofUse, StorageError};

/// What a proof must be bound to: the request as the server received it.
#[derive(Debug, Clone, Copy)]
pub struct ProofTarget<'a> {
    pub method: &'a str,
    /// The request path, without query.
    pub path: &'a str,
    /// The exact body bytes (empty for none).
    pub body: &'a [u8],
}

/// Which session-proof refusals a route gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SessionRoute {
    Plain,
    Renewal,
}

impl Broker {
    /// Authenticates a session proof: the enrollment it names, live.
    pub async fn authenticate_session(
        &self,
        proof: Option<&str>,
        target: ProofTarget<'_>,
    ) -> Result<Enrollment, Error> {
        let (e, _) = self
            .session_proof(proof, target, SessionRoute::Plain, false)
            .await?;
        Ok(e)
    }

    /// Authenticates a session proof and reads the enrollment's live grants with it, as
    /// [`Broker::own_grants`] does (`GET /v1/enrollments/self`): the enrollment and its grants
    /// are read together, where the storage can in one statement, before the proof is
    /// verified; a refused proof answers nothing of them.
    pub async fn authenticate_session_with_grants(
        &self,
        proof: Option<&str>,
        target: ProofTarget<'_>,
    ) -> Result<(Enrollment, Vec<Grant>), Error> {
        let (e, grants) = self
            .session_proof(proof, target, SessionRoute::Plain, true)
            .await?;
        let grants = Self::live_own(grants, &e, self.now());
        Ok((e, grants))
    }

    /// Authenticates a session proof on the renew route, where an ended enrollment is told
    /// apart (ENROLLMENT_NOT_LIVE).
    pub async fn authenticate_renewal(
        &self,
        proof: Option<&str>,
        target: ProofTarget<'_>,
    ) -> Result<Enrollment, Error> {
        let (e, _) = self
            .session_proof(proof, target, SessionRoute::Renewal, false)
            .await?;
        Ok(e)
    }

    async fn session_proof(
        &self,
        proof: Option<&str>,
        target: ProofTarget<'_>,
        route: SessionRoute,
        with_grants: bool,
    ) -> Result<(Enrollment, Vec<Grant>), Error> {
        // A replica failed closed cannot vouch that this enrollment has not ended (its
        // database may be a restored copy from before the end): DATABASE_UNAVAILABLE.
        self.audit_gate()?;
        let invalid = |msg: &'static str| Error::with_message(ErrorCode::PROOF_INVALID, msg);
        let token = proof.ok_or_else(|| invalid("proof invalid: no Proof header"))?;
        let parsed = jws::parse(token).map_err(|_| invalid("proof invalid"))?;
        match parsed.typ() {
            claims::TYP_SESSION_PROOF => {}
            claims::TYP_LAUNCHER_PROOF => {
                return Err(invalid(
                    "this route needs a session proof, not a launcher proof",
                ));
            }
            _ => return Err(invalid("proof invalid: wrong typ")),
        }
        if parsed.jwk().is_some() {
            return Err(invalid("proof invalid: a proof names its key by kid"));
        }
        let id = parsed
            .kid()
            .and_then(|k| EnrollmentId::parse(k).ok())
            .ok_or_else(|| invalid("proof invalid: kid"))?;
        let now = self.now();
        let (enrollment, grants) =
            read!(self, "proof check", |tx| Ok::<_, Fail>(if with_grants {
                tx.enrollment_with_grants(id).await?
            } else {
                (tx.get_enrollment(id).await?, Vec::new())
            }))?;
        let enrollment = enrollment
            .ok_or_else(|| invalid("proof invalid"))?
            .settled(now);
        let key = self
            .verifying_key(&enrollment.thumbprint, &enrollment.jwk)
            .ok_or_else(|| invalid("proof invalid"))?;
        let verified = parsed.verify(&key).map_err(|_| invalid("proof invalid"))?;
        let claims: ProofClaims = verified
            .claims()
            .map_err(|_| invalid("proof invalid: claims"))?;
        self.check_binding(&claims, target).map_err(invalid)?;
        if !enrollment.is_live(now) {
            return Err(match route {
                SessionRoute::Renewal => Error::new(ErrorCode::ENROLLMENT_NOT_LIVE),
                SessionRoute::Plain => invalid("proof invalid: not live"),
            });
        }
        self.check_proof_replay(
            &format!("session:{id}"),
            &claims.jti,
            claims.iat,
            "proof check",
        )
        .await?
        .then_some(())
        .ok_or_else(|| invalid("proof invalid: replayed"))?;
        Ok((enrollment, grants))
    }

    /// Authenticates a launcher proof: the launcher credential it names, not revoked. An
    /// expired credential still authenticates (its operator routes and unenrollment work);
    /// enrolling checks expiry itself.
    pub async fn authenticate_launcher(
        &self,
        proof: Option<&str>,
        target: ProofTarget<'_>,
    ) -> Result<LauncherCredential, Error> {
        // As for sessions: a replica failed closed cannot vouch that this machine login has
        // not been revoked, and refuses every route it authenticates, operator routes included.
        self.audit_gate()?;
        let invalid = |msg: &'static str| Error::with_message(ErrorCode::LAUNCHER_INVALID, msg);
        let token = proof
            .ok_or_else(|| invalid("the launcher credential is not valid: no Proof header"))?;
        let parsed =
            jws::parse(token).map_err(|_| invalid("the launcher credential is not valid"))?;
        match parsed.typ() {
            claims::TYP_LAUNCHER_PROOF => {}
            claims::TYP_SESSION_PROOF => {
                return Err(invalid(
                    "this route needs a launcher proof, not a session proof",
                ));
            }
            _ => return Err(invalid("the launcher credential is not valid: wrong typ")),
        }
        if parsed.jwk().is_some() {
            return Err(invalid(
                "the launcher credential is not valid: a proof names its key by kid",
            ));
        }
        let id = parsed
            .kid()
            .and_then(|k| CredentialId::parse(k).ok())
            .ok_or_else(|| invalid("the launcher credential is not valid: kid"))?;
        let credential = read!(self, "launcher credential read", |tx| Ok::<_, Fail>(
            tx.get_credential(id).await?
        ))?
        .ok_or_else(|| invalid("the launcher credential is not valid"))?;
        let key = self
            .verifying_key(&credential.thumbprint, &credential.jwk)
            .ok_or_else(|| invalid("the launcher credential is not valid"))?;
        let verified = parsed
            .verify(&key)
            .map_err(|_| invalid("the launcher credential is not valid"))?;
        let claims: ProofClaims = verified
            .claims()
            .map_err(|_| invalid("the launcher credential is not valid: claims"))?;
        self.check_binding(&claims, target).map_err(invalid)?;
        if credential.is_revoked() {
            return Err(invalid("the launcher credential is not valid: revoked"));
        }
        self.check_proof_replay(
            &format!("launcher:{id}"),
            &claims.jti,
            claims.iat,
            "launcher proof check",
        )
        .await?
        .then_some(())
        .ok_or_else(|| invalid("the launcher credential is not valid: proof replayed"))?;
        Ok(credential)
    }

    /// Checks `htm`, `htu`, `iat` and `bh` against the request.
    fn check_binding(&self, c: &ProofClaims, target: ProofTarget<'_>) -> Result<(), &'static str> {
        if c.htm != target.method {
            return Err("proof invalid: htm does not match the request");
        }
        if c.htu != claims::htu(&self.config.public_url, target.path) {
            return Err("proof invalid: htu does not match the request");
        }
        // `abs_diff`: `iat` is the sender's, any i64; a difference cannot overflow.
        let skew = self.config.proof_skew.num_seconds().unsigned_abs();
        if c.iat.abs_diff(self.now().timestamp()) > skew {
            return Err("proof invalid: iat outside the allowed window");
        }
        if c.jti.is_empty() || c.jti.len() > 256 {
            return Err("proof invalid: jti");
        }
        match (&c.bh, target.body.is_empty()) {
            (None, true) => Ok(()),
            (Some(bh), false)
                if ct_eq(bh.as_bytes(), claims::body_hash(target.body).as_bytes()) =>
            {
                Ok(())
            }
            (None, false) => Err("proof invalid: bh is required with a body"),
            (Some(_), true) => Err("proof invalid: bh given without a body"),
            (Some(_), false) => Err("proof invalid: bh does not match the body"),
        }
    }

    /// Remembers the `jti` of a proof or of a secret request object, whose `iat` was checked
    /// to be within the skew (see [`Storage::remember_proof`]): `false` for a replay, or for
    /// one signed before a restart that the broker cannot tell from a replay.
    ///
    /// [`Storage::remember_proof`]: crate::storage::Storage::remember_proof
    pub(crate) async fn check_proof_replay(
        &self,
        scope: &str,
        jti: &str,
        iat: i64,
        step: &'static str,
    ) -> Result<bool, Error> {
        let now = self.now();
        let until = now + self.config.proof_skew * 2 + self.config.max_request_object_lifetime;
        self.storage
            .remember_proof(ProofUse {
                scope,
                jti,
                iat,
                skew: self.config.proof_skew.num_seconds(),
                until,
                now,
            })
            .await
            .map_err(|e| match e {
                StorageError::Unavailable(m) if m == crate::exclusive::UNDECIDED => {
                    Error::with_message(
                        ErrorCode::DATABASE_UNAVAILABLE,
                        format!(
                            "{step}: the broker restarted a moment ago and cannot yet tell this proof from a replay; sign a fresh one and ask again"
                        ),
                    )
                }
                e => self.fail(Fail::Storage(e), step),
            })
    }

    /// Remembers a single-use value for the proof window (twice the skew, so that a proof
    /// accepted at either edge is remembered until it can no longer be accepted).
    pub(crate) async fn check_replay(
        &self,
        scope: &str,
        jti: &str,
        step: &'static str,
    ) -> Result<bool, Error> {
        let now = self.now();
        let until = now + self.config.proof_skew * 2 + self.config.max_request_object_lifetime;
        self.storage
            .remember_once(scope, jti, until, now)
            .await
            .map_err(|e| self.fail(Fail::Storage(e), step))
    }
}
