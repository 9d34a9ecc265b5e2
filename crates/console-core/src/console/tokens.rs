//! Bearer tokens: the agents' shared token and personal tokens people mint.

use super::*;

impl Console {
    // ----- agents -----

    /// The agent a bearer token names: the shared token or a live personal token.
    /// Which bearer (protocol §3.1): three dot-separated parts is a ServiceAccount token, a
    /// `csp_` prefix a personal token, anything else is compared with the shared token.
    pub async fn authenticate_bearer(&self, token: &str) -> Result<Caller, Error> {
        if crate::caller::looks_like_jws(token) {
            let Some((verifier, allowed)) = &self.parts.service_tokens else {
                return Err(ErrorCode::UNAUTHENTICATED.into());
            };
            let sub = verifier
                .verify(token, self.now())
                .await
                .ok_or(ErrorCode::UNAUTHENTICATED)?;
            // `system:serviceaccount:<ns>:<name>`, listed as `<ns>/<name>`.
            let listed = sub
                .strip_prefix("system:serviceaccount:")
                .and_then(|r| r.split_once(':'))
                .is_some_and(|(ns, name)| allowed.iter().any(|a| *a == format!("{ns}/{name}")));
            if !listed {
                tracing::info!(service = %sub, "a service account not listed in [agents] service_accounts was refused");
                return Err(ErrorCode::UNAUTHENTICATED.into());
            }
            return Ok(Caller::Agent {
                owner: None,
                service: Some(sub),
            });
        }
        let presented = sha256(token);
        if let Some(h) = &self.shared_token_hash
            && ct_eq(&presented, h)
        {
            return Ok(Caller::Agent {
                owner: None,
                service: None,
            });
        }
        if token.starts_with(PERSONAL_TOKEN_PREFIX)
            && let Some(t) = self
                .parts
                .storage
                .token_by_hash(&hex::encode(presented))
                .await?
            && t.revoked_at.is_none()
            && t.expires_at.is_none_or(|e| e > self.now())
        {
            return Ok(Caller::Agent {
                owner: Some(t.owner),
                service: None,
            });
        }
        Err(ErrorCode::UNAUTHENTICATED.into())
    }

    // ----- personal tokens -----

    pub async fn tokens(&self, human: &Human) -> Result<Vec<TokenInfo>, Error> {
        Ok(self
            .parts
            .storage
            .live_tokens(&human.login, self.now())
            .await?
            .iter()
            .map(TokenInfo::of)
            .collect())
    }

    /// Mints a personal token for the person; the token is in the answer and nowhere else.
    /// `expires_at`: when the token stops working, at most 365 days ahead (TOKEN_INPUT).
    pub async fn mint_token(
        &self,
        human: &Human,
        name: Option<&str>,
        expires_at: Option<Time>,
    ) -> Result<MintedToken, Error> {
        let now = self.now();
        if let Some(e) = expires_at
            && (e <= now || e > now + Duration::days(365))
        {
            return Err(Error::with_message(
                ErrorCode::TOKEN_INPUT,
                "expires_at is in the future, at most 365 days ahead",
            ));
        }
        // 1 to 100 characters, the default only when the field is absent (protocol §4.1): an
        // empty name, or one of spaces only, is refused, not replaced.
        let name = match name.map(str::trim) {
            None => "agent token".to_owned(),
            Some(n)
                if !n.is_empty()
                    && n.chars().count() <= 100
                    && !n.chars().any(char::is_control) =>
            {
                n.to_owned()
            }
            Some(_) => {
                return Err(Error::with_message(
                    ErrorCode::TOKEN_INPUT,
                    "name is 1 to 100 characters",
                ));
            }
        };
        if self
            .parts
            .storage
            .live_tokens(&human.login, now)
            .await?
            .len()
            >= MAX_LIVE_TOKENS
        {
            return Err(ErrorCode::TOKEN_LIMIT.into());
        }
        let token = Zeroizing::new(format!("{PERSONAL_TOKEN_PREFIX}{}", self.random_token()));
        let t = PersonalToken {
            id: self.new_id(TokenId::from_random),
            owner: human.login.clone(),
            name,
            hash: sha256_hex(&token),
            created_at: now,
            expires_at,
            revoked_at: None,
        };
        self.parts.storage.put_token(&t).await?;
        tracing::info!(owner = %t.owner, token_id = %t.id, "personal token minted");
        Ok(MintedToken {
            info: TokenInfo::of(&t),
            token,
        })
    }

    pub async fn revoke_token(&self, human: &Human, id: TokenId) -> Result<(), Error> {
        let not_found = || Error::with_message(ErrorCode::NOT_FOUND, "no such personal token");
        if self
            .parts
            .storage
            .revoke_token(&human.login, id, self.now())
            .await?
        {
            tracing::info!(owner = %human.login, token_id = %id, "personal token revoked");
            Ok(())
        } else {
            Err(not_found())
        }
    }

    /// Everyone who has signed in.
    pub async fn people(&self) -> Result<Vec<Login>, Error> {
        Ok(self.parts.storage.people().await?)
    }
}
