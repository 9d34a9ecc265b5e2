//! Machine logins. A person's machine sends a signed login object naming the person; the
//! broker answers a poll handle and a confirmation code; the person types the code in the
//! console and approves, which mints the launcher credential. A service logs in with its
//! ServiceAccount token instead, with no person.

use countersign_proto::claims::{self, MachineLoginClaims, TokenLoginClaims};
use countersign_proto::{PublicJwk, jws};
use serde::de::DeserializeOwned;

use super::{Broker, Fail, read, sha256_hex, transact};
use crate::clock::{Time, random};
use crate::error::{Error, ErrorCode};
use crate::ids::{Approver, ConfirmationCode, CredentialId, Login, RecordId};
use crate::model::{
    LauncherCredential, PendingLogin, Record, RecordKind, RecordState, RecordText, SessionIds,
};

/// The answer to a login start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineLoginStarted {
    pub pending_id: String,
    pub code: ConfirmationCode,
}

/// The answer to a poll.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PollState {
    Pending,
    Issued {
        credential_id: CredentialId,
        expires_at: Option<Time>,
    },
    Denied,
    Expired,
}

/// A verified signed request object: its claims and the key that signed it.
pub(crate) struct Verified<C> {
    pub claims: C,
    pub jwk: PublicJwk,
}

fn invalid(msg: &'static str) -> Error {
    Error::with_message(ErrorCode::REQUEST_INVALID, msg)
}

/// A machine's host name as a login states it, trimmed: 1 to 253 bytes with no whitespace,
/// control or format (Cf) character.
fn checked_host(host: &str) -> Result<&str, Error> {
    let host = host.trim();
    if host.is_empty()
        || host.len() > 253
        || host.chars().any(|c| c.is_control() || c.is_whitespace())
        || crate::ids::has_format_char(host)
    {
        return Err(invalid("request object invalid: host"));
    }
    Ok(host)
}

impl Broker {
    /// Verifies a signed request object signed by the key in its own `jwk` header (machine and
    /// token logins): type, signature, `iat`/`exp` window, single-use `jti`.
    pub(crate) async fn verify_self_signed<C: DeserializeOwned + Timed>(
        &self,
        token: &str,
        typ: &str,
        scope: &str,
    ) -> Result<Verified<C>, Error> {
        let parsed = jws::parse(token)
            .map_err(|_| invalid("request object invalid: not a valid ES256 JWS"))?;
        parsed
            .expect_typ(typ)
            .map_err(|_| invalid("request object invalid: wrong typ"))?;
        let (verified, jwk) = parsed
            .verify_with_embedded_jwk()
            .map_err(|_| invalid("request object invalid: signature"))?;
        let claims: C = verified
            .claims()
            .map_err(|_| invalid("request object invalid: claims"))?;
        self.check_window(claims.iat(), claims.exp())?;
        if !self
            .check_replay(scope, claims.jti(), "request object check")
            .await?
        {
            return Err(invalid("request object invalid: replayed"));
        }
        Ok(Verified { claims, jwk })
    }

    /// `iat` within the skew, `exp` in the future and at most the object lifetime after `iat`.
    pub(crate) fn check_window(&self, iat: i64, exp: i64) -> Result<(), Error> {
        let now = self.now().timestamp();
        // `abs_diff` and `saturating_sub`: the times are the sender's, any i64 (fuzzing found
        // `iat - now` overflowing).
        if iat.abs_diff(now) > self.config.proof_skew.num_seconds().unsigned_abs() {
            return Err(invalid(
                "request object invalid: iat outside the allowed window",
            ));
        }
        if exp <= now {
            return Err(invalid("request object invalid: expired"));
        }
        if exp.saturating_sub(iat) > self.config.max_request_object_lifetime.num_seconds()
            || exp < iat
        {
            return Err(invalid("request object invalid: exp too far after iat"));
        }
        Ok(())
    }

    /// Starts a person's machine login.
    pub async fn start_machine_login(&self, request: &str) -> Result<MachineLoginStarted, Error> {
        let v: Verified<MachineLoginClaims> = self
            .verify_self_signed(request, claims::TYP_MACHINE_LOGIN, "machine-login")
            .await?;
        if v.claims
            .authorization_details
            .iter()
            .flatten()
            .any(|d| d.kind == "launcher_credential")
        {
            return Err(ErrorCode::SERVICE_LOGS_IN_WITH_TOKEN.into());
        }
        let login = Login::parse(&v.claims.login_hint).ok_or_else(|| {
            invalid("request object invalid: login_hint is not an e-mail address")
        })?;
        let host = checked_host(&v.claims.host)?;
        let now = self.now();
        let pending_id = countersign_proto::b64::encode(&random::<32>(&*self.entropy));
        let policy = self.policy();
        let body = RecordText {
            version: 1,
            kind: RecordKind::LauncherCredential,
            approver: Approver::Person(login),
            enrollment: None,
            session: SessionIds {
                request: None,
                enrollment: None,
            },
            identifiers: vec![host.to_owned()],
            service: None,
            reason: format!("machine login for {host}"),
            lifetime_seconds: u64::try_from(self.config.machine_credential_lifetime.num_seconds())
                .ok(),
            rules_version: policy.rules_version().to_owned(),
            expires_at: now + self.config.machine_login_ttl,
            requested_at: now,
            enrollment_id: None,
            request_id: None,
            thumbprint: Some(v.jwk.thumbprint()),
            jwk: Some(v.jwk.clone()),
            nonce: self.nonce(),
        };
        let text = body.canonical();
        let id = RecordId::of_text(&text);
        let pending_hash = sha256_hex(&pending_id);
        let code = transact!(self, "start machine login", |tx| {
            // A code is live only while its login is pending; draw again on the rare collision.
            let mut code = ConfirmationCode::generate(&*self.entropy);
            while tx
                .record_by_code(&code)
                .await?
                .is_some_and(|r| r.clone().settled(now).state == RecordState::Pending)
            {
                code = ConfirmationCode::generate(&*self.entropy);
            }
            let record = Record {
                id,
                text: text.clone(),
                body: body.clone(),
                state: RecordState::Pending,
                decided: None,
                code: Some(code.clone()),
            };
            tx.put_record(&record).await?;
            self.notify_pending(tx, &record).await?;
            tx.put_login(&PendingLogin {
                pending_hash: pending_hash.clone(),
                record_id: id,
                code: code.clone(),
            })
            .await?;
            Ok::<_, Fail>(code)
        })?;
        Ok(MachineLoginStarted { pending_id, code })
    }

    /// Polls a machine login by its pending id.
    pub async fn poll_machine_login(&self, pending_id: &str) -> Result<PollState, Error> {
        if pending_id.is_empty() || pending_id.len() > 128 {
            return Err(Error::with_message(
                ErrorCode::NOT_FOUND,
                "no such pending machine login",
            ));
        }
        let now = self.now();
        let hash = sha256_hex(pending_id);
        read!(self, "poll machine login", |tx| {
            let login = tx.get_login(&hash).await?.ok_or_else(|| {
                Error::with_message(ErrorCode::NOT_FOUND, "no such pending machine login")
            })?;
            let rec = tx
                .get_record(&login.record_id)
                .await?
                .ok_or_else(|| {
                    Error::with_message(ErrorCode::NOT_FOUND, "no such pending machine login")
                })?
                .settled(now);
            Ok::<_, Fail>(match rec.state {
                RecordState::Pending => PollState::Pending,
                RecordState::Approved | RecordState::Revoked => {
                    let cid = rec.decided.as_ref().and_then(|d| d.credential_id);
                    match cid {
                        Some(cid) => {
                            let expires_at = tx.get_credential(cid).await?.map(|c| c.expires_at);
                            PollState::Issued {
                                credential_id: cid,
                                expires_at,
                            }
                        }
                        None => PollState::Denied,
                    }
                }
                RecordState::Denied | RecordState::Cancelled => PollState::Denied,
                RecordState::Expired => PollState::Expired,
            })
        })
    }

    /// Finds a pending machine login by its confirmation code.
    pub async fn lookup_machine_login(&self, code: &str) -> Result<Record, Error> {
        if code.trim().is_empty() {
            return Err(Error::with_message(
                ErrorCode::CODE_REQUIRED,
                "code is required",
            ));
        }
        let code = ConfirmationCode::parse(code).ok_or(ErrorCode::NO_SUCH_CODE)?;
        let now = self.now();
        let rec = read!(self, "machine login lookup", |tx| Ok::<_, Fail>(
            tx.record_by_code(&code).await?
        ))?
        .map(|r| r.settled(now))
        .filter(|r| r.state == RecordState::Pending)
        .ok_or(ErrorCode::NO_SUCH_CODE)?;
        Ok(rec)
    }

    /// Verifies a ServiceAccount token (the first step of a token login; the caller may rate
    /// limit per account before the second).
    pub async fn verify_service_token(
        &self,
        token: &str,
    ) -> Result<crate::identity::ServiceAccountToken, Error> {
        let verifier = self.tokens.as_ref().ok_or(ErrorCode::TOKEN_LOGIN_OFF)?;
        verifier.verify(token, self.now()).await
    }

    /// A service's token login: verifies the token and the signed login object, then mints or
    /// extends the service's credential for that key.
    pub async fn token_login(
        &self,
        token: &str,
        request: &str,
    ) -> Result<LauncherCredential, Error> {
        let sa = self.verify_service_token(token).await?;
        self.token_login_verified(&sa, request).await
    }

    /// The second step of a token login, for a token already verified.
    pub async fn token_login_verified(
        &self,
        sa: &crate::identity::ServiceAccountToken,
        request: &str,
    ) -> Result<LauncherCredential, Error> {
        let now = self.now();
        let v: Verified<TokenLoginClaims> = self
            .verify_self_signed(request, claims::TYP_TOKEN_LOGIN, "token-login")
            .await?;
        let [detail] = v.claims.authorization_details.as_slice() else {
            return Err(invalid(
                "request object invalid: exactly one launcher_credential detail",
            ));
        };
        let service = match (detail.kind.as_str(), detail.service.as_deref()) {
            ("launcher_credential", Some(s)) if !s.is_empty() => s.to_owned(),
            _ => {
                return Err(invalid(
                    "request object invalid: exactly one launcher_credential detail",
                ));
            }
        };
        let account = sa.account();
        let listed = self
            .config
            .service_logins
            .get(&service)
            .is_some_and(|accounts| accounts.contains(&account));
        if !listed {
            return Err(ErrorCode::ACCOUNT_NOT_LISTED.into());
        }
        let thumbprint = v.jwk.thumbprint();
        let expires_at = sa.expires_at.min(now + self.config.token_credential_max);
        transact!(self, "token login", |tx| {
            let existing = tx.credentials_by_thumbprint(&thumbprint).await?;
            let mut mine = None;
            for c in existing.into_iter().filter(|c| c.is_live(now)) {
                if c.service.as_deref() == Some(service.as_str())
                    && c.subject.as_deref() == Some(sa.subject.as_str())
                {
                    mine = Some(c);
                } else {
                    return Err(ErrorCode::KEY_HOLDS_LIVE_CREDENTIAL.into());
                }
            }
            let credential = match mine {
                // Each login moves the expiry to this token's: later as the kubelet rotates the
                // token, never past the token just shown nor more than the maximum ahead.
                Some(mut c) => {
                    c.expires_at = expires_at;
                    c
                }
                None => LauncherCredential {
                    id: CredentialId::from_random(self.uuid()),
                    thumbprint: thumbprint.clone(),
                    jwk: v.jwk.clone(),
                    host: account.clone(),
                    service: Some(service.clone()),
                    subject: Some(sa.subject.clone()),
                    operator: None,
                    approved_by: String::new(),
                    issued_at: now,
                    expires_at,
                    revoked_at: None,
                    record_id: None,
                    // Sealed as it is written (see `broker::guard`).
                    seal: String::new(),
                },
            };
            tx.put_credential(&credential).await?;
            Ok::<_, Fail>(credential)
        })
    }
}

/// Claims with a validity window and a single-use id.
pub(crate) trait Timed {
    fn iat(&self) -> i64;
    fn exp(&self) -> i64;
    fn jti(&self) -> &str;
}

macro_rules! timed {
    ($($t:ty),*) => {$(
        impl Timed for $t {
            fn iat(&self) -> i64 { self.iat }
            fn exp(&self) -> i64 { self.exp }
            fn jti(&self) -> &str { &self.jti }
        }
    )*};
}

timed!(
    MachineLoginClaims,
    TokenLoginClaims,
    claims::SecretRequestClaims
);
