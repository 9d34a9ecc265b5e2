//! The issuer's configuration as the broker's `[token_issuer]` and the console's
//! `[agents.token_issuer]` both read it, and the [`VerifierConfig`] it makes.

use std::path::PathBuf;

use serde::Deserialize;

use crate::verifier::{JwksSource, VerifierConfig};

/// A Kubernetes ServiceAccount token issuer (protocol.md §7). Exactly one of `jwks_url`,
/// `jwks_file`, `discovery = true` says where its keys are.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssuerConfig {
    /// The issuer URL, as tokens carry it in `iss`.
    pub issuer: String,
    /// The audience the services' projected tokens are minted for (the console defaults it).
    #[serde(default)]
    pub audience: Option<String>,
    #[serde(default)]
    pub jwks_url: Option<String>,
    #[serde(default)]
    pub jwks_file: Option<PathBuf>,
    /// OIDC discovery: `<issuer>/.well-known/openid-configuration` names `jwks_uri`.
    #[serde(default)]
    pub discovery: bool,
    /// Extra PEM roots for the issuer's HTTPS (a cluster CA).
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    /// A bearer token file sent when fetching keys (reread each time).
    #[serde(default)]
    pub bearer_token_file: Option<PathBuf>,
    #[serde(default = "d_issuer_timeout")]
    pub timeout_seconds: u64,
}

fn d_issuer_timeout() -> u64 {
    5
}

impl IssuerConfig {
    /// The verifier's configuration; `default_audience` when the file names none (`None`: the
    /// audience is required).
    pub fn verifier_config(
        &self,
        default_audience: Option<&str>,
    ) -> Result<VerifierConfig, String> {
        let source = match (&self.jwks_url, &self.jwks_file, self.discovery) {
            (Some(url), None, false) => JwksSource::Url(url.clone()),
            (None, Some(path), false) => JwksSource::File(path.clone()),
            (None, None, true) => JwksSource::Discovery,
            _ => {
                return Err(
                    "the token issuer needs exactly one of jwks_url, jwks_file, discovery = true"
                        .into(),
                );
            }
        };
        let audience = self
            .audience
            .as_deref()
            .or(default_audience)
            .ok_or("the token issuer needs an audience")?;
        let mut c = VerifierConfig::new(&self.issuer, audience, source);
        c.timeout = std::time::Duration::from_secs(self.timeout_seconds.max(1));
        c.ca_file = self.ca_file.clone();
        c.bearer_token_file = self.bearer_token_file.clone();
        Ok(c)
    }
}
