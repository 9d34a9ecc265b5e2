//! Logins: a person's machine login (start, poll), a service's token login, and logout; all
//! launcher-level, so refused from inside a session.

use super::*;

pub(super) fn valid_host(h: &str) -> bool {
    !h.is_empty() && h.len() <= 253 && !h.chars().any(|c| c.is_whitespace() || c.is_control())
}

impl Helper {
    pub(super) async fn login_start(
        &self,
        m: Membership,
        a: LoginStart,
    ) -> Result<LoginStarted, HelperError> {
        let login = a.login.trim().to_ascii_lowercase();
        if login.len() > 254
            || !login.contains('@')
            || login.chars().any(|c| c.is_whitespace() || c.is_control())
        {
            return Err(bad("login must be the person's e-mail address"));
        }
        let host = a.host.unwrap_or_else(|| self.cfg.host.clone());
        if !valid_host(&host) {
            return Err(bad(
                "host must be 1 to 253 characters without whitespace or control characters",
            ));
        }
        Self::require_outside(m, "a machine login")?;
        let key = self.generate("machine")?;
        let iat = self.now_unix();
        let request = self.sign(
            &key,
            &Header::with_jwk(claims::TYP_MACHINE_LOGIN, key.public_jwk()),
            Claims::MachineLogin(&MachineLoginClaims {
                iat,
                exp: iat + claims::REQUEST_MAX_LIFETIME_SECONDS,
                jti: claims::new_jti().map_err(sign_err)?,
                login_hint: login.clone(),
                host: host.clone(),
                authorization_details: None,
            }),
        )?;
        let body = serde_json::to_vec(&json!({ "request": request }))
            .map_err(|_| err(HelperCode::LoginFailed, "could not build the login body"))?;
        let answer = self
            .broker
            .call("POST", "/v1/launcher-credentials", Some(&body), Auth::None)
            .await
            .map_err(|e| from_broker(HelperCode::LoginFailed, "machine login", &e))?;
        let started: wire::LoginStarted = answer
            .json()
            .map_err(|e| from_broker(HelperCode::LoginFailed, "machine login", &e))?;
        self.st().login = Some(PendingLogin {
            key: Arc::new(key),
            pending_id: Zeroizing::new(started.pending_id),
            login: login.clone(),
            host: host.clone(),
        });
        tracing::info!(%login, %host, "machine login started");
        Ok(LoginStarted {
            code: started.code,
            login,
            host,
            console_url: self.cfg.console_url.clone(),
        })
    }

    pub(super) async fn login_poll(&self, m: Membership) -> Result<LoginProgress, HelperError> {
        Self::require_outside(m, "a machine login")?;
        let (pending_id, key, login, host) = {
            let st = self.st();
            let p = st.login.as_ref().ok_or_else(|| {
                err(
                    HelperCode::LoginFailed,
                    "no machine login is in progress: start one",
                )
            })?;
            (
                p.pending_id.clone(),
                p.key.clone(),
                p.login.clone(),
                p.host.clone(),
            )
        };
        let (state, poll) = self.poll_broker(pending_id.as_str()).await?;
        if state == LoginState::Pending {
            return Ok(LoginProgress {
                state,
                credential: None,
            });
        }
        let same = |st: &State| {
            st.login
                .as_ref()
                .is_some_and(|p| p.pending_id.as_str() == pending_id.as_str())
        };
        if state != LoginState::Issued {
            let mut st = self.st();
            if same(&st) {
                st.login = None;
            }
            return Ok(LoginProgress {
                state,
                credential: None,
            });
        }
        let credential_id = poll.credential_id.ok_or_else(|| {
            err(
                HelperCode::LoginFailed,
                "machine login poll: issued without a credential id",
            )
        })?;
        let held = Held {
            id: credential_id,
            key,
            kind: CredentialKind::Person,
            host,
            login: Some(login),
            service: None,
            expires_at: poll.expires_at.flatten().map(rfc3339),
            token: None,
            next_refresh: None,
            refreshing: false,
        };
        self.save(&held).map_err(|e| {
            err(
                HelperCode::LoginFailed,
                format!("storing the credential: {e}"),
            )
        })?;
        let info = held.info(self.now());
        {
            let mut st = self.st();
            if same(&st) {
                st.login = None;
            }
            st.credential = Some(held);
        }
        tracing::info!(credential_id = %info.credential_id, "machine login approved; credential stored");
        Ok(LoginProgress {
            state,
            credential: Some(info),
        })
    }

    /// The broker's answer to a pending machine login, and its state.
    async fn poll_broker(
        &self,
        pending_id: &str,
    ) -> Result<(LoginState, wire::LoginPoll), HelperError> {
        let answer = self
            .broker
            .call(
                "GET",
                &format!("/v1/launcher-credentials/{pending_id}"),
                None,
                Auth::None,
            )
            .await
            .map_err(|e| from_broker(HelperCode::LoginFailed, "machine login poll", &e))?;
        let poll: wire::LoginPoll = answer
            .json()
            .map_err(|e| from_broker(HelperCode::LoginFailed, "machine login poll", &e))?;
        let state = match poll.state.as_str() {
            "pending" => LoginState::Pending,
            "issued" => LoginState::Issued,
            "denied" => LoginState::Denied,
            "expired" => LoginState::Expired,
            other => {
                return Err(err(
                    HelperCode::LoginFailed,
                    format!("machine login poll: unexpected state {other:?}"),
                ));
            }
        };
        Ok((state, poll))
    }

    pub(super) async fn token_login(
        &self,
        m: Membership,
        a: TokenLogin,
    ) -> Result<CredentialInfo, HelperError> {
        let service = a.service.trim().to_owned();
        if service.is_empty() || service.len() > 253 {
            return Err(bad("service must name the service"));
        }
        let source = match (a.token_file, a.token) {
            (Some(f), None) if std::path::Path::new(&f).is_absolute() => {
                TokenSource::File(PathBuf::from(f))
            }
            (Some(_), None) => return Err(bad("token_file must be an absolute path")),
            (None, Some(t)) => TokenSource::Inline(t),
            _ => return Err(bad("give exactly one of token_file and token")),
        };
        Self::require_outside(m, "a service login")?;
        // The same key logs in again (the broker extends its credential); another service, or
        // a person's machine, gets a new one.
        let reuse = self.st().credential.as_ref().and_then(|h| {
            (h.kind == CredentialKind::Service && h.service.as_deref() == Some(&service))
                .then(|| h.key.clone())
        });
        let key = match reuse {
            Some(k) => k,
            None => Arc::new(self.generate("machine")?),
        };
        let answer = self.token_login_call(&key, &service, &source).await?;
        let expires_at = rfc3339(answer.expires_at);
        let held = Held {
            id: answer.credential_id,
            key,
            kind: CredentialKind::Service,
            host: self.cfg.host.clone(),
            login: None,
            service: Some(service),
            next_refresh: Some(self.after(refresh_after(self.remaining(&expires_at)))),
            expires_at: Some(expires_at),
            token: Some(source),
            refreshing: false,
        };
        self.save(&held).map_err(|e| {
            err(
                HelperCode::LoginFailed,
                format!("storing the credential: {e}"),
            )
        })?;
        let info = held.info(self.now());
        self.st().credential = Some(held);
        tracing::info!(credential_id = %info.credential_id, "service logged in with its token");
        Ok(info)
    }

    /// Logs a service in with its token file, as the helper's own start-up does.
    ///
    /// # Errors
    /// As the `token_login` operation.
    pub async fn login_with_token_file(
        &self,
        service: &str,
        file: &std::path::Path,
    ) -> Result<CredentialInfo, HelperError> {
        self.token_login(
            Membership::Outside,
            TokenLogin {
                service: service.to_owned(),
                token_file: Some(file.display().to_string()),
                token: None,
            },
        )
        .await
    }

    pub(super) async fn token_login_call(
        &self,
        key: &SigningKey,
        service: &str,
        source: &TokenSource,
    ) -> Result<wire::TokenLogin, HelperError> {
        let token = match source {
            TokenSource::Inline(t) => t.clone(),
            TokenSource::File(p) => Secret::new(
                std::fs::read_to_string(p)
                    .map_err(|e| {
                        err(
                            HelperCode::LoginFailed,
                            format!("cannot read the token file {}: {e}", p.display()),
                        )
                    })?
                    .trim()
                    .to_owned(),
            ),
        };
        let iat = self.now_unix();
        let request = self.sign(
            key,
            &Header::with_jwk(claims::TYP_TOKEN_LOGIN, key.public_jwk()),
            Claims::TokenLogin(&TokenLoginClaims {
                iat,
                exp: iat + claims::REQUEST_MAX_LIFETIME_SECONDS,
                jti: claims::new_jti().map_err(sign_err)?,
                authorization_details: vec![AuthorizationDetail::launcher_credential(service)],
            }),
        )?;
        let body = Zeroizing::new(
            serde_json::to_vec(&json!({ "token": token.expose(), "request": request }))
                .map_err(|_| err(HelperCode::LoginFailed, "could not build the login body"))?,
        );
        let answer = self
            .broker
            .call(
                "POST",
                "/v1/launcher-credentials/token",
                Some(&body),
                Auth::None,
            )
            .await
            .map_err(|e| from_broker(HelperCode::LoginFailed, "token login", &e))?;
        answer
            .json()
            .map_err(|e| from_broker(HelperCode::LoginFailed, "token login", &e))
    }

    pub(super) fn logout(&self, m: Membership) -> Result<LoggedOut, HelperError> {
        Self::require_outside(m, "logging out")?;
        let held = self.st().credential.take();
        if self.cfg.no_store {
            return Ok(LoggedOut {
                credential_id: held.map(|h| h.id),
            });
        }
        self.store.remove().map_err(|e| {
            err(
                HelperCode::LoginFailed,
                format!("removing the stored credential: {e}"),
            )
        })?;
        Ok(LoggedOut {
            credential_id: held.map(|h| h.id),
        })
    }
}
