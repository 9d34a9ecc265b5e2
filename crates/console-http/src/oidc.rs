//! [`OidcProvider`]: the core's [`IdentityProvider`] over OpenID Connect (the `openidconnect`
//! crate): discovery, authorization code flow with PKCE (S256), a nonce, and ID token
//! verification (signature against the provider's JWKS with the algorithms it advertises,
//! issuer, audience, expiry, nonce).
//!
//! Discovery is lazy and cached for an hour, so the console starts while the provider is down;
//! a signature that does not verify refreshes the cache once (the provider may have rotated
//! its keys) before the sign-in is refused.

use std::sync::RwLock;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use countersign_console_core::idp::{AuthStart, IdentityProvider, IdpError, VerifiedIdentity};
use openidconnect::core::{
    CoreAuthenticationFlow, CoreClient, CoreProviderMetadata, CoreTokenResponse,
};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken,
    EndpointMaybeSet, EndpointNotSet, EndpointSet, IssuerUrl, Nonce, PkceCodeChallenge,
    PkceCodeVerifier, RedirectUrl, Scope, TokenResponse,
};
use zeroize::Zeroizing;

type Client = CoreClient<
    EndpointSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointNotSet,
    EndpointMaybeSet,
    EndpointMaybeSet,
>;

/// How long discovery (endpoints and keys) is trusted before it is fetched again.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);

/// An OpenID Connect provider.
pub struct OidcProvider {
    issuer: IssuerUrl,
    client_id: ClientId,
    client_secret: Option<Zeroizing<String>>,
    redirect: RedirectUrl,
    http: reqwest::Client,
    cached: RwLock<Option<(Client, Instant)>>,
}

impl std::fmt::Debug for OidcProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OidcProvider")
            .field("issuer", &self.issuer.as_str())
            .field("client_id", &self.client_id.as_str())
            .finish_non_exhaustive()
    }
}

impl OidcProvider {
    /// `redirect_uri` is the console's `<public_url>/auth/callback`.
    pub fn new(
        issuer: &str,
        client_id: &str,
        client_secret: Option<Zeroizing<String>>,
        redirect_uri: &str,
    ) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            // Following redirects would let a provider's answer steer the console elsewhere.
            .redirect(reqwest::redirect::Policy::none())
            .build()?;
        Ok(Self {
            issuer: IssuerUrl::new(issuer.to_owned())?,
            client_id: ClientId::new(client_id.to_owned()),
            client_secret,
            redirect: RedirectUrl::new(redirect_uri.to_owned())?,
            http,
            cached: RwLock::new(None),
        })
    }

    async fn client(&self, refresh: bool) -> Result<Client, IdpError> {
        if !refresh
            && let Some((c, at)) = self
                .cached
                .read()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
            && at.elapsed() < DISCOVERY_TTL
        {
            return Ok(c.clone());
        }
        let meta = CoreProviderMetadata::discover_async(self.issuer.clone(), &self.http)
            .await
            .map_err(|e| IdpError::Unavailable(format!("discovery: {e}")))?;
        let client = CoreClient::from_provider_metadata(
            meta,
            self.client_id.clone(),
            self.client_secret
                .as_ref()
                .map(|s| ClientSecret::new(s.to_string())),
        )
        .set_redirect_uri(self.redirect.clone());
        *self.cached.write().unwrap_or_else(|e| e.into_inner()) =
            Some((client.clone(), Instant::now()));
        Ok(client)
    }

    fn verify(
        client: &Client,
        tokens: &CoreTokenResponse,
        nonce: &str,
    ) -> Result<VerifiedIdentity, ClaimsVerificationError> {
        let id_token = tokens.id_token().ok_or_else(|| {
            ClaimsVerificationError::Other("the token answer has no id_token".into())
        })?;
        let claims = id_token.claims(&client.id_token_verifier(), &Nonce::new(nonce.to_owned()))?;
        Ok(VerifiedIdentity {
            subject: claims.subject().to_string(),
            email: claims.email().map(|e| e.to_string()),
            email_verified: claims.email_verified(),
        })
    }
}

#[async_trait]
impl IdentityProvider for OidcProvider {
    fn name(&self) -> String {
        url::Url::parse(self.issuer.as_str())
            .ok()
            .and_then(|u| u.host_str().map(str::to_owned))
            .unwrap_or_else(|| self.issuer.to_string())
    }

    async fn begin(&self) -> Result<AuthStart, IdpError> {
        let client = self.client(false).await?;
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let (url, state, nonce) = client
            .authorize_url(
                CoreAuthenticationFlow::AuthorizationCode,
                CsrfToken::new_random,
                Nonce::new_random,
            )
            .add_scope(Scope::new("email".into()))
            .add_scope(Scope::new("profile".into()))
            .set_pkce_challenge(challenge)
            .url();
        Ok(AuthStart {
            url: url.to_string(),
            state: state.secret().clone(),
            nonce: nonce.secret().clone(),
            pkce_verifier: verifier.secret().clone(),
        })
    }

    async fn finish(
        &self,
        code: &str,
        pkce_verifier: &str,
        nonce: &str,
    ) -> Result<VerifiedIdentity, IdpError> {
        let client = self.client(false).await?;
        let tokens = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| IdpError::Unavailable(format!("token endpoint: {e}")))?
            .set_pkce_verifier(PkceCodeVerifier::new(pkce_verifier.to_owned()))
            .request_async(&self.http)
            .await
            .map_err(|e| IdpError::Refused(format!("code exchange: {e}")))?;
        match Self::verify(&client, &tokens, nonce) {
            Ok(id) => Ok(id),
            Err(ClaimsVerificationError::SignatureVerification(_)) => {
                // The provider may have rotated its keys since discovery.
                let fresh = self.client(true).await?;
                Self::verify(&fresh, &tokens, nonce)
                    .map_err(|e| IdpError::Refused(format!("id_token: {e}")))
            }
            Err(e) => Err(IdpError::Refused(format!("id_token: {e}"))),
        }
    }
}
