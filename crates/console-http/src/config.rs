//! Configuration: a TOML file, then environment overrides (`COUNTERSIGN_CONSOLE_*`). Secrets (the
//! broker's console token, the agents' shared token, the OpenID client secret) are read from
//! files or the environment, never from the command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use countersign_common::config::read_secret;
use serde::Deserialize;
use zeroize::Zeroizing;

/// The console's configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// The URL people's browsers use (`https://…` makes cookies `Secure`). Sign-in's redirect
    /// URI is `<public_url>/auth/callback`.
    pub public_url: String,
    /// `sqlite://PATH?mode=rwc` (default) or `postgres://…`: the console's own tables.
    #[serde(default = "default_database")]
    pub database_url: String,
    /// File holding the agents' shared bearer token (optional).
    #[serde(default)]
    pub shared_token_file: Option<PathBuf>,
    /// Hours a browser session lasts.
    #[serde(default = "default_session_hours")]
    pub session_hours: i64,
    /// When set, only logins of these e-mail domains sign in.
    #[serde(default)]
    pub allowed_email_domains: Vec<String>,
    /// The broker this console fronts; without it the credential routes say so.
    #[serde(default)]
    pub broker: Option<BrokerConfig>,
    /// The OpenID Connect provider people sign in with.
    #[serde(default)]
    pub oidc: Option<OidcConfig>,
    /// Agents that authenticate with Kubernetes ServiceAccount tokens (protocol §3.1).
    #[serde(default)]
    pub agents: Option<AgentsConfig>,
    /// The code host (GitHub) the delivery timeline and architecture sources read (protocol
    /// §9). None: delivery settings and sources refuse with their access codes.
    #[serde(default)]
    pub code_hosting: Option<CodeHostingConfig>,
    /// KPI targets the measures and pipeline page check (each optional).
    #[serde(default)]
    pub delivery_targets: Option<countersign_console_core::work::delivery::Targets>,
    /// Where traces go over OTLP (HTTP/protobuf), a base URL as `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// is; none: that variable, else no export (`docs/metrics.md`).
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
    /// Telling people where to approve: SMTP, and the generic webhook's secret (each person
    /// chooses their channels); none: no notices are sent.
    #[serde(default)]
    pub notifications: Option<crate::notify::NotificationsConfig>,
    /// Dev mode's sign-in by e-mail alone. Never read from a file: only `countersign-console
    /// dev` (and tests) turn it on, and only on a loopback listener.
    #[serde(skip)]
    pub local_sign_in: bool,
    /// Dev mode: the e-mail the local sign-in form suggests.
    #[serde(skip)]
    pub local_sign_in_hint: Option<String>,
    /// What only `countersign-console dev` adds ([`DevHooks`]); never read from a file.
    #[serde(skip)]
    pub dev: Option<DevHooks>,
}

/// What `countersign-console dev` adds to the console (issue 48).
#[derive(Clone)]
pub struct DevHooks {
    /// One more origin whose requests count as this console's own: dev mode prints and
    /// serves `http://localhost:<port>` (where passkeys work) and answers at
    /// `http://127.0.0.1:<port>` too. `serve` keeps its one exact origin.
    pub also_origin: Option<String>,
    /// A fresh enrollment code for the first passkey of the person named (dev mode holds the
    /// broker's seal key): the Passkeys page's button shows one.
    pub enroll_code: EnrollCodes,
}

/// Makes a fresh enrollment code for the person named ([`DevHooks::enroll_code`]).
pub type EnrollCodes = std::sync::Arc<dyn Fn(&str) -> anyhow::Result<String> + Send + Sync>;

impl std::fmt::Debug for DevHooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevHooks")
            .field("also_origin", &self.also_origin)
            .finish_non_exhaustive()
    }
}

/// `[agents]`: ServiceAccount tokens the console accepts as agents.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentsConfig {
    /// The accounts let in, as `<namespace>/<name>`.
    #[serde(default)]
    pub service_accounts: Vec<String>,
    /// The trusted issuer (`[agents.token_issuer]`, as the broker's `[token_issuer]`; the
    /// audience defaults to `countersign-console`). None: such tokens are refused.
    #[serde(default)]
    pub token_issuer: Option<countersign_k8s_tokens::IssuerConfig>,
}

/// `[code_hosting]`: GitHub's REST API.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodeHostingConfig {
    /// `https://api.github.com` (default), or `https://<host>/api/v3` for GitHub Enterprise
    /// Server.
    #[serde(default = "default_api_url")]
    pub api_url: String,
    /// A fine-grained personal access token or GitHub App installation token (read-only on
    /// Metadata, Contents, Actions, Pull requests and Issues), read again at each sync.
    #[serde(default)]
    pub token_file: Option<PathBuf>,
}

fn default_api_url() -> String {
    countersign_code_host::DEFAULT_API_URL.to_owned()
}

/// The audience the console's ServiceAccount tokens carry unless configured.
pub const DEFAULT_AUDIENCE: &str = "countersign-console";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BrokerConfig {
    /// The broker's base URL.
    pub url: String,
    /// File holding the broker's console token.
    #[serde(default)]
    pub console_token_file: Option<PathBuf>,
    #[serde(default = "default_broker_timeout")]
    pub timeout_seconds: u64,
    /// The secret the broker signs its expiry webhooks with (its `[notifications]
    /// secret_file`), for `POST /hooks/broker` (protocol §8); none: that route is 404.
    #[serde(default)]
    pub webhook_secret_file: Option<PathBuf>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OidcConfig {
    /// The issuer URL (discovery at `<issuer>/.well-known/openid-configuration`).
    pub issuer: String,
    pub client_id: String,
    /// File holding the client secret; none for a public client (PKCE protects the code).
    #[serde(default)]
    pub client_secret_file: Option<PathBuf>,
    /// Refuse ID tokens whose `email_verified` is not true (default true).
    #[serde(default = "default_true")]
    pub require_verified_email: bool,
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8081))
}
fn default_database() -> String {
    "sqlite://console.db?mode=rwc".into()
}
fn default_session_hours() -> i64 {
    12
}
fn default_broker_timeout() -> u64 {
    10
}
fn default_true() -> bool {
    true
}

impl Config {
    /// A configuration with defaults for `public_url`.
    pub fn new(public_url: &str) -> Self {
        Self {
            listen: default_listen(),
            public_url: public_url.to_owned(),
            database_url: default_database(),
            shared_token_file: None,
            session_hours: default_session_hours(),
            allowed_email_domains: Vec::new(),
            broker: None,
            agents: None,
            oidc: None,
            code_hosting: None,
            delivery_targets: None,
            otlp_endpoint: None,
            notifications: None,
            local_sign_in: false,
            local_sign_in_hint: None,
            dev: None,
        }
    }

    /// Reads the file, then applies the environment overrides.
    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let mut c: Config = countersign_common::config::read_toml(path)?;
        c.apply_env(|k| std::env::var(k).ok())?;
        Ok(c)
    }

    /// `COUNTERSIGN_CONSOLE_LISTEN`, `COUNTERSIGN_CONSOLE_PUBLIC_URL`,
    /// `COUNTERSIGN_CONSOLE_DATABASE_URL`, `COUNTERSIGN_BROKER_URL`,
    /// `COUNTERSIGN_CONSOLE_TOKEN_FILE`; then checks the result.
    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        if let Some(v) = var("COUNTERSIGN_CONSOLE_LISTEN") {
            self.listen = v.parse().context("COUNTERSIGN_CONSOLE_LISTEN")?;
        }
        if let Some(v) = var("COUNTERSIGN_CONSOLE_PUBLIC_URL") {
            self.public_url = v;
        }
        if let Some(v) = var("COUNTERSIGN_CONSOLE_DATABASE_URL") {
            self.database_url = v;
        }
        if let Some(v) = var("COUNTERSIGN_BROKER_URL") {
            match &mut self.broker {
                Some(b) => b.url = v,
                None => {
                    self.broker = Some(BrokerConfig {
                        url: v,
                        console_token_file: None,
                        timeout_seconds: default_broker_timeout(),
                        webhook_secret_file: None,
                    })
                }
            }
        }
        if let (Some(v), Some(b)) = (var("COUNTERSIGN_CONSOLE_TOKEN_FILE"), &mut self.broker) {
            b.console_token_file = Some(v.into());
        }
        self.check()
    }

    /// Refuses what cannot work or would be unsafe.
    pub fn check(&self) -> anyhow::Result<()> {
        let u = url::Url::parse(&self.public_url).context("public_url")?;
        if !matches!(u.scheme(), "http" | "https") || u.host().is_none() {
            bail!("public_url must be an http:// or https:// URL");
        }
        if self.local_sign_in && !self.listen.ip().is_loopback() {
            bail!(
                "local sign-in listens on loopback only; {} is not",
                self.listen
            );
        }
        if self.session_hours < 1 || self.session_hours > 24 * 30 {
            bail!("session_hours must be between 1 and 720");
        }
        Ok(())
    }

    /// `scheme://host[:port]` of `public_url`: what a same-origin `Origin` header says.
    pub fn public_origin(&self) -> String {
        url::Url::parse(&self.public_url)
            .map(|u| u.origin().ascii_serialization())
            .unwrap_or_default()
    }

    pub fn is_https(&self) -> bool {
        self.public_url.starts_with("https://")
    }

    /// The broker's console token: `COUNTERSIGN_CONSOLE_TOKEN`, else the broker's token file.
    pub fn console_token(&self) -> anyhow::Result<Option<Zeroizing<String>>> {
        let file = self
            .broker
            .as_ref()
            .and_then(|b| b.console_token_file.as_deref());
        Ok(countersign_common::config::console_token(file)?)
    }

    /// The broker's webhook signing secret, if configured (`[broker] webhook_secret_file`).
    pub fn webhook_secret(&self) -> anyhow::Result<Option<crate::hooks::WebhookSecret>> {
        match self
            .broker
            .as_ref()
            .and_then(|b| b.webhook_secret_file.as_ref())
        {
            Some(p) => {
                let text = Zeroizing::new(
                    std::fs::read_to_string(p)
                        .with_context(|| format!("read webhook secret file {}", p.display()))?,
                );
                crate::hooks::WebhookSecret::parse(&text)
                    .with_context(|| format!("webhook secret file {}", p.display()))
                    .map(Some)
            }
            None => Ok(None),
        }
    }

    /// The agents' shared token, if configured.
    pub fn shared_token(&self) -> anyhow::Result<Option<Zeroizing<String>>> {
        let file = self.shared_token_file.as_deref();
        Ok(file.map(|p| read_secret(p, "shared token")).transpose()?)
    }

    /// The OpenID client secret, if configured.
    pub fn oidc_client_secret(&self) -> anyhow::Result<Option<Zeroizing<String>>> {
        match self
            .oidc
            .as_ref()
            .and_then(|o| o.client_secret_file.as_ref())
        {
            Some(p) => {
                let text =
                    Zeroizing::new(std::fs::read_to_string(p).with_context(|| {
                        format!("read OIDC client secret file {}", p.display())
                    })?);
                Ok(Some(Zeroizing::new(text.trim().to_owned())))
            }
            None => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_file_and_refuses_unknown_fields() {
        let c: Config = toml::from_str(
            r#"
listen = "0.0.0.0:8443"
public_url = "https://console.example.com"
database_url = "postgres://c@db/console"
allowed_email_domains = ["example.com"]
[broker]
url = "https://broker.example.com"
console_token_file = "/etc/countersign/console-token"
[oidc]
issuer = "https://id.example.com"
client_id = "countersign"
"#,
        )
        .expect("parse");
        assert!(c.check().is_ok());
        assert!(c.is_https());
        assert_eq!(c.public_origin(), "https://console.example.com");
        assert!(!c.local_sign_in);
        assert!(
            toml::from_str::<Config>("public_url = \"http://x\"\nlocal_sign_in = true").is_err()
        );
    }

    #[test]
    fn local_sign_in_needs_loopback() {
        let mut c = Config::new("http://127.0.0.1:8081");
        c.local_sign_in = true;
        assert!(c.check().is_ok());
        c.listen = "0.0.0.0:8081".parse().expect("addr");
        assert!(c.check().is_err());
    }
}
