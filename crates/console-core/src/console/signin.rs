//! Signing in: OpenID Connect, dev mode's local sign-in, browser sessions and CSRF.

use super::*;

impl Console {
    // ----- sign-in -----

    /// Starts an OpenID Connect sign-in; `return_to` is kept if it is a local path.
    pub async fn begin_sign_in(&self, return_to: Option<&str>) -> Result<SignInStart, Error> {
        let idp = self.parts.idp.as_ref().ok_or(ErrorCode::SIGN_IN_OFF)?;
        let start = idp.begin().await.map_err(idp_error)?;
        let attempt = SignInAttempt {
            key: sha256_hex(&start.state),
            nonce: start.nonce,
            pkce_verifier: start.pkce_verifier,
            return_to: safe_return_to(return_to).to_owned(),
            expires_at: self.now() + self.config.sign_in_lifetime,
        };
        self.parts.storage.put_attempt(&attempt).await?;
        Ok(SignInStart {
            url: start.url,
            state: start.state,
        })
    }

    /// Finishes a sign-in at the callback: the `state` must be the one this browser started
    /// (`browser_state`, from its cookie), unused and recent; the provider's code is exchanged
    /// and its ID token verified. Answers the new session and where to go.
    pub async fn finish_sign_in(
        &self,
        state: &str,
        code: &str,
        browser_state: Option<&str>,
    ) -> Result<(NewSession, String), Error> {
        let failed = |m: &str| Error::with_message(ErrorCode::SIGN_IN_FAILED, m);
        let idp = self.parts.idp.as_ref().ok_or(ErrorCode::SIGN_IN_OFF)?;
        match browser_state {
            Some(b) if ct_eq(b.as_bytes(), state.as_bytes()) => {}
            _ => {
                return Err(failed(
                    "sign-in failed: this sign-in was not started in this browser; start again",
                ));
            }
        }
        let attempt = self
            .parts
            .storage
            .take_attempt(&sha256_hex(state))
            .await?
            .ok_or_else(|| {
                failed("sign-in failed: unknown or already used sign-in; start again")
            })?;
        if attempt.expires_at <= self.now() {
            return Err(failed("sign-in failed: it took too long; start again"));
        }
        let id = idp
            .finish(code, &attempt.pkce_verifier, &attempt.nonce)
            .await
            .map_err(idp_error)?;
        let email = id
            .email
            .ok_or_else(|| failed("sign-in failed: the identity provider gave no e-mail"))?;
        if self.config.require_verified_email && id.email_verified != Some(true) {
            return Err(failed(
                "sign-in failed: the identity provider has not verified this e-mail",
            ));
        }
        let login = Login::parse(&email)
            .ok_or_else(|| failed("sign-in failed: the e-mail is not a valid login"))?;
        let session = self.open_session(login).await?;
        Ok((session, attempt.return_to))
    }

    /// Dev mode's sign-in: the person names their e-mail. Refused unless enabled.
    pub async fn sign_in_local(&self, email: &str) -> Result<NewSession, Error> {
        if !self.config.local_sign_in {
            return Err(ErrorCode::LOCAL_SIGN_IN_OFF.into());
        }
        let login = Login::parse(email).ok_or(ErrorCode::LOGIN_INPUT)?;
        self.open_session(login).await
    }

    async fn open_session(&self, login: Login) -> Result<NewSession, Error> {
        if !self.config.allowed_domains.is_empty()
            && !self
                .config
                .allowed_domains
                .iter()
                .any(|d| d.eq_ignore_ascii_case(login.domain()))
        {
            return Err(Error::with_message(
                ErrorCode::SIGN_IN_FAILED,
                "sign-in failed: logins of this domain may not sign in here",
            ));
        }
        let now = self.now();
        let token = Zeroizing::new(self.random_token());
        let s = BrowserSession {
            key: sha256_hex(&token),
            login: login.clone(),
            csrf_token: self.random_token(),
            created_at: now,
            expires_at: now + self.config.session_lifetime,
        };
        self.parts.storage.put_session(&s).await?;
        self.parts.storage.saw_person(&login, now).await?;
        tracing::info!(login = %login, "signed in");
        Ok(NewSession {
            token,
            human: Human {
                login,
                csrf_token: s.csrf_token,
                session_key: s.key,
            },
            expires_at: s.expires_at,
        })
    }

    /// The person a session cookie names; UNAUTHENTICATED when unknown or lapsed.
    pub async fn session(&self, token: &str) -> Result<Human, Error> {
        let s = self
            .parts
            .storage
            .get_session(&sha256_hex(token))
            .await?
            .ok_or(ErrorCode::UNAUTHENTICATED)?;
        if s.expires_at <= self.now() {
            return Err(ErrorCode::UNAUTHENTICATED.into());
        }
        Ok(Human {
            login: s.login,
            csrf_token: s.csrf_token,
            session_key: s.key,
        })
    }

    /// Checks the CSRF token a browser's state change carries: a masking of the session's
    /// token, as the pages print it ([`Human::masked_csrf`]).
    pub fn check_csrf(&self, human: &Human, presented: Option<&str>) -> Result<(), Error> {
        match presented {
            Some(p) if human.csrf_matches(p) => Ok(()),
            _ => Err(ErrorCode::CSRF_REJECTED.into()),
        }
    }

    pub async fn sign_out(&self, human: &Human) -> Result<(), Error> {
        self.parts
            .storage
            .delete_session(&human.session_key)
            .await?;
        Ok(())
    }
}

fn idp_error(e: IdpError) -> Error {
    tracing::warn!(error = %e, "sign-in failed at the identity provider");
    Error::with_message(ErrorCode::SIGN_IN_FAILED, format!("sign-in failed: {e}"))
}

/// `return_to` when it is a path on this site (`/…`, not `//…` and without `\`), else `/`.
pub fn safe_return_to(return_to: Option<&str>) -> &str {
    match return_to {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && !p.contains('\\')
                && p.len() <= 512
                && !p.chars().any(char::is_control) =>
        {
            p
        }
        _ => "/",
    }
}
