//! Signing for callers: session proofs and secret request objects for a process inside an
//! enrolled session, launcher proofs for the four operator routes for a caller outside every
//! session; and the helper's own keys and proofs (through the injected [`Keys`] source and
//! clock).

use super::*;

pub(super) fn check_bh(bh: Option<&str>) -> Result<(), HelperError> {
    match bh {
        None => Ok(()),
        Some(h) if b64::decode(h).is_ok_and(|d| d.len() == 32) => Ok(()),
        Some(_) => Err(bad(
            "bh must be the base64url SHA-256 (32 bytes) of the request body",
        )),
    }
}

pub(super) fn valid_secret_name(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty()
        && b.len() <= 128
        && b[0].is_ascii_uppercase()
        && b.iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_')
}

impl Helper {
    /// Calls `method path` at the broker with a proof signed by `key` (`typ`, `kid`) over
    /// `body`, a fresh proof each attempt; a 503 (the broker's database in a failover, a proof it
    /// cannot decide yet after a restart) is sent again after the broker client's backoff
    /// ([`BrokerError::retry_delay`]). The outer error: the proof could not be signed.
    pub(super) async fn proved_call(
        &self,
        key: &SigningKey,
        typ: &str,
        kid: &str,
        method: &str,
        path: &str,
        body: Option<&[u8]>,
    ) -> Result<Result<countersign_broker_client::Answer, BrokerError>, HelperError> {
        let url = self.broker.url(path);
        countersign_broker_client::retrying(|| async {
            let p = self.proof(key, typ, kid, method, &url, body.map(claims::body_hash))?;
            Ok(self.broker.call(method, path, body, Auth::Proof(&p)).await)
        })
        .await
    }

    pub(super) fn generate(&self, what: &str) -> Result<SigningKey, HelperError> {
        self.keys.generate().map_err(|_| {
            err(
                HelperCode::Keygen,
                format!("the {what} key could not be made"),
            )
        })
    }

    pub(super) fn sign(
        &self,
        key: &SigningKey,
        header: &Header,
        claims: Claims<'_>,
    ) -> Result<String, HelperError> {
        self.keys.sign(key, header, claims).map_err(sign_err)
    }

    pub(super) fn proof(
        &self,
        key: &SigningKey,
        typ: &str,
        kid: &str,
        method: &str,
        url: &str,
        bh: Option<String>,
    ) -> Result<String, HelperError> {
        let claims = ProofClaims {
            htm: method.to_owned(),
            htu: url.to_owned(),
            iat: self.now_unix(),
            jti: claims::new_jti().map_err(sign_err)?,
            bh,
        };
        self.sign(key, &Header::with_kid(typ, kid), Claims::Proof(&claims))
    }

    pub(super) fn sign_session_proof(
        &self,
        m: Membership,
        a: &SignProof,
    ) -> Result<SignedProof, HelperError> {
        if !routes::is_session_route(&a.method, &a.path) {
            return Err(bad(
                "a session proof is signed only for the session routes (see docs/launcher-helper.md)",
            ));
        }
        check_bh(a.bh.as_deref())?;
        let (key, enrollment_id) = self.enrolled(m)?;
        let url = self.broker.url(&a.path);
        let p = self.proof(
            &key,
            claims::TYP_SESSION_PROOF,
            &enrollment_id,
            &a.method,
            &url,
            a.bh.clone(),
        )?;
        Ok(SignedProof {
            proof: p,
            url,
            kid: enrollment_id,
        })
    }

    pub(super) fn sign_request(
        &self,
        m: Membership,
        a: SignRequest,
    ) -> Result<SignedRequest, HelperError> {
        if a.secrets.is_empty() || a.secrets.len() > 100 {
            return Err(bad("secrets must name 1 to 100 secrets"));
        }
        if let Some(n) = a.secrets.iter().find(|n| !valid_secret_name(n)) {
            let shown: String = n.chars().take(40).collect();
            return Err(bad(format!(
                "{shown:?} is not a secret name (upper case, digits and _, starting with a letter)"
            )));
        }
        let reason_len = a.reason.chars().count();
        if a.reason.trim().is_empty() || reason_len > 1000 {
            return Err(bad("reason must be 1 to 1,000 characters"));
        }
        if a.lifetime_seconds == Some(0) {
            return Err(bad("lifetime_seconds must be positive"));
        }
        let (key, enrollment_id) = self.enrolled(m)?;
        let iat = self.now_unix();
        let request = self.sign(
            &key,
            &Header::with_kid(claims::TYP_SECRET_REQUEST, &enrollment_id),
            Claims::SecretRequest(&SecretRequestClaims {
                iat,
                exp: iat + claims::REQUEST_MAX_LIFETIME_SECONDS,
                jti: claims::new_jti().map_err(sign_err)?,
                aud: self.broker.base_url().to_owned(),
                authorization_details: a
                    .secrets
                    .iter()
                    .map(|n| AuthorizationDetail::agent_secret(n))
                    .collect(),
                reason: a.reason,
                lifetime_seconds: a.lifetime_seconds,
            }),
        )?;
        Ok(SignedRequest {
            request,
            enrollment_id,
            broker_url: self.broker.base_url().to_owned(),
        })
    }

    pub(super) fn sign_launcher_proof(
        &self,
        m: Membership,
        a: &SignProof,
    ) -> Result<SignedProof, HelperError> {
        if !routes::is_operator_route(&a.method, &a.path) {
            return Err(bad(
                "a launcher proof is signed only for the four operator routes: GET /v1/operator/machines, POST /v1/operator/machines/{id}/revoke, GET /v1/operator/grants, POST /v1/operator/grants/{id}/revoke",
            ));
        }
        check_bh(a.bh.as_deref())?;
        Self::require_outside(m, "launcher signing")?;
        let held = self.held()?;
        let url = self.broker.url(&a.path);
        let p = self.proof(
            &held.key,
            claims::TYP_LAUNCHER_PROOF,
            &held.id,
            &a.method,
            &url,
            a.bh.clone(),
        )?;
        Ok(SignedProof {
            proof: p,
            url,
            kid: held.id,
        })
    }
}
