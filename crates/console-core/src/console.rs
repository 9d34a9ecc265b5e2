//! [`Console`]: one method per operation of the console's first slice.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::Duration;
use serde::Serialize;
use zeroize::Zeroizing;

use crate::broker::{Approval, BrokerClient, CredentialRecord, GrantItem, MachineLogin};
use crate::caller::{Caller, Human};
use crate::clock::{self, Clock, Entropy, Time, ct_eq, sha256, sha256_hex};
use crate::error::{Error, ErrorCode};
use crate::idp::{IdentityProvider, IdpError};
use crate::ids::{Login, TokenId};
use crate::storage::{BrowserSession, PersonalToken, SignInAttempt, Storage};

/// At most this many live personal tokens per person.
pub const MAX_LIVE_TOKENS: usize = 50;
/// The prefix of every personal token, so that a leaked one is recognisable.
pub const PERSONAL_TOKEN_PREFIX: &str = "csp_";
/// Records whose facts the console remembers (a record's text never changes: it hashes to its
/// id), so that the inbox asks the broker for the pending list alone on each refresh.
const RECORD_CACHE: usize = 1024;

/// What the console is built from.
#[derive(Debug, Clone)]
pub struct Parts {
    pub storage: Arc<dyn Storage>,
    /// `None`: no broker configured (the credential routes say so).
    pub broker: Option<Arc<dyn BrokerClient>>,
    /// `None`: no OpenID Connect provider (only dev mode's local sign-in, if enabled).
    pub idp: Option<Arc<dyn IdentityProvider>>,
    pub clock: Arc<dyn Clock>,
    pub entropy: Arc<dyn Entropy>,
}

/// Policy knobs.
#[derive(Debug, Clone)]
pub struct ConsoleConfig {
    /// How long a browser session lasts from sign-in.
    pub session_lifetime: Duration,
    /// How long a person has to come back from the identity provider.
    pub sign_in_lifetime: Duration,
    /// Dev mode's sign-in by e-mail alone. Never on outside dev mode.
    pub local_sign_in: bool,
    /// Refuse an ID token whose `email_verified` is not true.
    pub require_verified_email: bool,
    /// When not empty, only logins of these domains sign in.
    pub allowed_domains: Vec<String>,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        Self {
            session_lifetime: Duration::hours(12),
            sign_in_lifetime: Duration::minutes(10),
            local_sign_in: false,
            require_verified_email: true,
            allowed_domains: Vec::new(),
        }
    }
}

/// A session just opened: the token goes into the cookie and nowhere else.
#[derive(Debug)]
pub struct NewSession {
    pub token: Zeroizing<String>,
    pub human: Human,
    pub expires_at: Time,
}

/// A sign-in just started at the identity provider.
#[derive(Debug)]
pub struct SignInStart {
    /// Where to send the browser.
    pub url: String,
    /// The `state`, which the browser also keeps (in a cookie) to prove at the callback that
    /// the sign-in is its own.
    pub state: String,
}

/// A personal token as its owner's list shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TokenInfo {
    pub id: String,
    pub name: String,
    pub created_at: String,
}

impl TokenInfo {
    fn of(t: &PersonalToken) -> Self {
        Self {
            id: t.id.to_string(),
            name: t.name.clone(),
            created_at: rfc3339(&t.created_at),
        }
    }
}

/// A token just minted: shown once, never stored.
#[derive(Debug)]
pub struct MintedToken {
    pub info: TokenInfo,
    pub token: Zeroizing<String>,
}

/// RFC 3339 with second precision and `Z`.
pub fn rfc3339(t: &Time) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The approval console's domain.
#[derive(Debug)]
pub struct Console {
    parts: Parts,
    config: ConsoleConfig,
    shared_token_hash: Option<[u8; 32]>,
    records: Mutex<HashMap<String, CredentialRecord>>,
}

impl Console {
    /// `shared_token`: the agents' shared bearer token, if any.
    pub fn new(parts: Parts, config: ConsoleConfig, shared_token: Option<&str>) -> Self {
        Self {
            parts,
            config,
            shared_token_hash: shared_token.map(sha256),
            records: Mutex::new(HashMap::new()),
        }
    }

    pub fn now(&self) -> Time {
        self.parts.clock.now()
    }

    pub fn config(&self) -> &ConsoleConfig {
        &self.config
    }

    pub fn has_broker(&self) -> bool {
        self.parts.broker.is_some()
    }

    /// The identity provider's display name, when one is configured.
    pub fn idp_name(&self) -> Option<String> {
        self.parts.idp.as_ref().map(|i| i.name())
    }

    fn broker(&self) -> Result<&Arc<dyn BrokerClient>, Error> {
        self.parts
            .broker
            .as_ref()
            .ok_or_else(|| ErrorCode::BROKER_NOT_CONFIGURED.into())
    }

    /// A fresh random token (32 bytes, base64url): sessions, CSRF and form tokens.
    pub fn random_token(&self) -> String {
        clock::random_token::<32>(&*self.parts.entropy)
    }

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

    /// Checks the CSRF token a browser's state change carries.
    pub fn check_csrf(&self, human: &Human, presented: Option<&str>) -> Result<(), Error> {
        match presented {
            Some(p) if ct_eq(p.as_bytes(), human.csrf_token.as_bytes()) => Ok(()),
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

    // ----- the broker front -----

    /// Credential requests the person may decide, newest first: those naming them, and those
    /// anyone signed in decides. `None` without a configured broker.
    pub async fn inbox(&self, human: &Human) -> Result<Option<Vec<CredentialRecord>>, Error> {
        let Some(broker) = &self.parts.broker else {
            return Ok(None);
        };
        let pending = broker.pending(&human.login).await?;
        let mut out = Vec::with_capacity(pending.len());
        for p in pending {
            let cached = self
                .records
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&p.record_id)
                .cloned();
            let rec = match cached {
                Some(r) => r,
                None => {
                    let r = match broker.record(&p.record_id).await {
                        Ok(r) => r,
                        // Decided or gone between the two calls: no longer in the inbox.
                        Err(e) if e.status() == 404 => continue,
                        Err(e) => return Err(e),
                    };
                    if r.state != "pending" {
                        continue;
                    }
                    let mut cache = self.records.lock().unwrap_or_else(|e| e.into_inner());
                    if cache.len() >= RECORD_CACHE {
                        cache.clear();
                    }
                    cache.insert(r.record_id.clone(), r.clone());
                    r
                }
            };
            out.push(rec);
        }
        Ok(Some(out))
    }

    /// One record's facts, as the broker has them now.
    pub async fn record(&self, _human: &Human, id: &str) -> Result<CredentialRecord, Error> {
        self.broker()?.record(id).await
    }

    /// A pending machine login by the confirmation code its machine shows.
    pub async fn lookup_machine_login(
        &self,
        _human: &Human,
        code: &str,
    ) -> Result<CredentialRecord, Error> {
        self.broker()?.lookup(code.trim()).await
    }

    /// Approves as the person; a machine login takes its code typed again.
    pub async fn approve(
        &self,
        human: &Human,
        id: &str,
        code: Option<&str>,
    ) -> Result<Approval, Error> {
        let code = code.map(str::trim).filter(|c| !c.is_empty());
        let a = self.broker()?.approve(id, &human.login, code).await?;
        tracing::info!(approver = %human.login, record_id = id, "approved");
        Ok(a)
    }

    /// Denies as the person.
    pub async fn deny(&self, human: &Human, id: &str, code: Option<&str>) -> Result<String, Error> {
        let code = code.map(str::trim).filter(|c| !c.is_empty());
        let s = self.broker()?.deny(id, &human.login, code).await?;
        tracing::info!(approver = %human.login, record_id = id, "denied");
        Ok(s)
    }

    /// Live grants the person may revoke.
    pub async fn grants(&self, human: &Human) -> Result<Vec<GrantItem>, Error> {
        self.broker()?.grants(&human.login).await
    }

    pub async fn revoke_grant(&self, human: &Human, id: &str) -> Result<String, Error> {
        let s = self.broker()?.revoke_grant(id, &human.login).await?;
        tracing::info!(approver = %human.login, grant_id = id, "grant revoked");
        Ok(s)
    }

    /// Machine logins the person may revoke that can still reach a secret.
    pub async fn machine_logins(&self, human: &Human) -> Result<Vec<MachineLogin>, Error> {
        self.broker()?.machine_logins(&human.login).await
    }

    pub async fn revoke_machine_login(&self, human: &Human, id: &str) -> Result<String, Error> {
        let s = self
            .broker()?
            .revoke_machine_login(id, &human.login)
            .await?;
        tracing::info!(approver = %human.login, credential_id = id, "machine login revoked");
        Ok(s)
    }

    // ----- housekeeping -----

    /// Deletes lapsed sessions and sign-in attempts.
    pub async fn purge(&self) -> Result<u64, Error> {
        Ok(self.parts.storage.purge_expired(self.now()).await?)
    }

    pub async fn health(&self) -> Result<(), Error> {
        Ok(self.parts.storage.ping().await?)
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
