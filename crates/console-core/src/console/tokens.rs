//! Bearer tokens: the agents' shared token and personal tokens people mint.

use super::*;

impl Console {
    // ----- agents -----

    /// The agent a bearer token names: the shared token or a live personal token.
    pub async fn authenticate_bearer(&self, token: &str) -> Result<Caller, Error> {
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
            .live_tokens(&human.login)
            .await?
            .iter()
            .map(TokenInfo::of)
            .collect())
    }

    /// Mints a personal token for the person; the token is in the answer and nowhere else.
    pub async fn mint_token(
        &self,
        human: &Human,
        name: Option<&str>,
    ) -> Result<MintedToken, Error> {
        let name = match name.map(str::trim) {
            None | Some("") => "agent token".to_owned(),
            Some(n) if n.chars().count() <= 100 && !n.chars().any(char::is_control) => n.to_owned(),
            Some(_) => return Err(ErrorCode::TOKEN_INPUT.into()),
        };
        if self.parts.storage.live_tokens(&human.login).await?.len() >= MAX_LIVE_TOKENS {
            return Err(ErrorCode::TOKEN_LIMIT.into());
        }
        let token = Zeroizing::new(format!("{PERSONAL_TOKEN_PREFIX}{}", self.random_token()));
        let t = PersonalToken {
            id: TokenId::from_random(clock::random::<16>(&*self.parts.entropy)),
            owner: human.login.clone(),
            name,
            hash: sha256_hex(&token),
            created_at: self.now(),
            revoked_at: None,
        };
        self.parts.storage.put_token(&t).await?;
        tracing::info!(owner = %t.owner, token_id = %t.id, "personal token minted");
        Ok(MintedToken {
            info: TokenInfo::of(&t),
            token,
        })
    }

    pub async fn revoke_token(&self, human: &Human, id: &str) -> Result<(), Error> {
        let not_found = || Error::with_message(ErrorCode::NOT_FOUND, "no such personal token");
        let id = TokenId::parse(id).ok_or_else(not_found)?;
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
