//! Configuration: a TOML file, then environment overrides (`COUNTERSIGN_*`). Secrets (the
//! console token, the sealing key) are read from files or the environment, never from the
//! command line.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::{Context, bail};
use serde::Deserialize;
use zeroize::Zeroizing;

use crate::limits::Quotas;

/// The broker's configuration file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Address to listen on.
    #[serde(default = "default_listen")]
    pub listen: SocketAddr,
    /// The URL clients use to reach the broker (proofs' `htu` and requests' `aud`).
    pub public_url: String,
    /// `sqlite://PATH?mode=rwc` (default) or `postgres://...`.
    #[serde(default = "default_database")]
    pub database_url: String,
    /// File holding the sealing key (base64url of at least 32 random bytes).
    pub seal_key_file: PathBuf,
    /// File holding the console token.
    #[serde(default)]
    pub console_token_file: Option<PathBuf>,
    #[serde(default)]
    pub tls: Option<Tls>,
    pub store: StoreConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub durations: Durations,
    /// service name → ServiceAccounts (`<namespace>/<name>`) that log in as it.
    #[serde(default)]
    pub service_logins: std::collections::BTreeMap<String, Vec<String>>,
    /// The trusted ServiceAccount token issuer; none: token login answers TOKEN_LOGIN_OFF.
    #[serde(default)]
    pub token_issuer: Option<TokenIssuerConfig>,
    /// Where expiry notifications go; none: they are dropped (docs/decisions.md).
    #[serde(default)]
    pub notifications: Option<NotificationsConfig>,
    /// This replica's audit log state file (the head it has verified, kept outside the
    /// database, `fsync`ed before an end is answered); none: in the state directory
    /// (`$STATE_DIRECTORY`, else `$XDG_STATE_HOME/countersign`, else
    /// `~/.local/state/countersign`), named by the database (the audit module's `state_path`).
    #[serde(default)]
    pub audit_state_file: Option<PathBuf>,
    /// Passkeys (WebAuthn): where people register them and countersign approvals; none:
    /// passkeys are off (docs/passkeys.md).
    #[serde(default)]
    pub passkeys: Option<PasskeysConfig>,
    /// `[[approval]]` rules: which approvals need a passkey countersignature.
    #[serde(default)]
    pub approval: Vec<ApprovalRuleConfig>,
    /// `[[issued]]`: dynamic secrets, a credential made per grant ([`crate::issuers`]).
    #[serde(default)]
    pub issued: Vec<crate::issuers::IssuedConfig>,
    /// Where traces go over OTLP (HTTP/protobuf), a base URL as `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// is; none: that variable, else no export (`docs/metrics.md`).
    #[serde(default)]
    pub otlp_endpoint: Option<String>,
}

/// `[token_issuer]`: a Kubernetes ServiceAccount token issuer (protocol.md §7), as the console's
/// `[agents.token_issuer]` is; the broker has no default audience.
pub use countersign_k8s_tokens::IssuerConfig as TokenIssuerConfig;

/// `[passkeys]`: the console people register passkeys and approve in.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PasskeysConfig {
    /// The relying party ID: the console's host name (`console.example.com`; `localhost` in
    /// dev). Never an IP address: WebAuthn refuses one.
    pub rp_id: String,
    /// The console's origins (`https://console.example.com`).
    pub origins: Vec<String>,
}

/// One `[[approval]]` rule: `approval = "passkey"` for a `tier`, a `secret`, or
/// `machine_logins = true`; optionally `device_bound` and `aaguids`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRuleConfig {
    #[serde(default)]
    pub tier: Option<String>,
    #[serde(default)]
    pub secret: Option<String>,
    #[serde(default)]
    pub machine_logins: bool,
    /// `"passkey"`: approvals it covers need the approver's passkey countersignature.
    pub approval: String,
    /// A passkey bound to one device (not a synced one).
    #[serde(default)]
    pub device_bound: bool,
    /// Authenticator models allowed, as AAGUIDs (`cb69481e-8ff7-4039-93ec-0a2729a154a8`);
    /// empty: any.
    #[serde(default)]
    pub aaguids: Vec<String>,
}

impl Config {
    /// The passkey settings, checked: every rule names exactly one of `tier`, `secret` and
    /// `machine_logins`, says `approval = "passkey"`, and needs `[passkeys]`.
    pub fn passkey_settings(
        &self,
    ) -> anyhow::Result<Option<countersign_broker_core::passkey::PasskeySettings>> {
        use countersign_broker_core::passkey::{
            ApprovalRule, Covers, PasskeySettings, Requirement,
        };
        let Some(p) = &self.passkeys else {
            if !self.approval.is_empty() {
                bail!("[[approval]] rules need a [passkeys] section (rp_id, origins)");
            }
            return Ok(None);
        };
        let host_like = !p.rp_id.is_empty()
            && p.rp_id.parse::<std::net::IpAddr>().is_err()
            && p.rp_id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
        if !host_like {
            bail!("[passkeys] rp_id must be a host name (not an IP address, no scheme or port)");
        }
        if p.origins.is_empty()
            || p.origins.iter().any(|o| {
                !(o.starts_with("https://") || o.starts_with("http://")) || o.ends_with('/')
            })
        {
            bail!("[passkeys] origins must be one or more http(s)://host[:port], with no path");
        }
        let mut rules = Vec::new();
        for (i, r) in self.approval.iter().enumerate() {
            let n = i + 1;
            if r.approval != "passkey" {
                bail!("[[approval]] rule {n}: approval must be \"passkey\"");
            }
            let covers = match (&r.tier, &r.secret, r.machine_logins) {
                (Some(t), None, false) => Covers::Tier(
                    countersign_broker_core::policy::Tier::from_tag(Some(t))
                        .with_context(|| format!("[[approval]] rule {n}: no tier {t:?}"))?,
                ),
                (None, Some(s), false) => Covers::Secret(
                    countersign_broker_core::ids::SecretName::parse(s).map_err(|_| {
                        anyhow::anyhow!("[[approval]] rule {n}: {s:?} is not an agent secret name")
                    })?,
                ),
                (None, None, true) => Covers::MachineLogins,
                _ => bail!(
                    "[[approval]] rule {n}: name exactly one of tier, secret and machine_logins = true"
                ),
            };
            let aaguids = r
                .aaguids
                .iter()
                .map(|a| {
                    let hex: String = a.chars().filter(|c| *c != '-').collect();
                    if hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit()) {
                        Ok(hex.to_ascii_lowercase())
                    } else {
                        bail!("[[approval]] rule {n}: {a:?} is not an AAGUID")
                    }
                })
                .collect::<anyhow::Result<Vec<_>>>()?;
            rules.push(ApprovalRule {
                covers,
                requirement: Requirement {
                    device_bound: r.device_bound,
                    aaguids: (!aaguids.is_empty()).then_some(aaguids),
                },
            });
        }
        Ok(Some(PasskeySettings {
            rp_id: p.rp_id.to_ascii_lowercase(),
            origins: p.origins.clone(),
            rules,
        }))
    }
}

/// `[notifications]`: expiry notifications (protocol.md §9) as Standard Webhooks.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotificationsConfig {
    /// The receiver's URL (http:// or https://).
    pub url: String,
    /// The signing secret: `whsec_<base64>` (Standard Webhooks), or else the file's bytes as
    /// they are (trimmed); at least 24 bytes of key either way.
    pub secret_file: PathBuf,
    /// Timeout of one delivery (connect included).
    #[serde(default = "d_notify_timeout")]
    pub timeout_seconds: u64,
    /// The first retry's delay; each later one doubles, up to `retry_max_seconds`, with jitter.
    #[serde(default = "d_retry_initial")]
    pub retry_initial_seconds: u64,
    #[serde(default = "d_retry_max")]
    pub retry_max_seconds: u64,
    /// Attempts before a message is given up (logged and removed).
    #[serde(default = "d_max_attempts")]
    pub max_attempts: u32,
}

fn d_notify_timeout() -> u64 {
    10
}
fn d_retry_initial() -> u64 {
    5
}
fn d_retry_max() -> u64 {
    3600
}
fn d_max_attempts() -> u32 {
    100
}

/// TLS with rustls: PEM certificate chain and key.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tls {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Where the secrets are.
#[derive(Debug, Clone, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case", deny_unknown_fields)]
pub enum StoreConfig {
    /// A local TOML file (see `countersign-store-local`).
    Local { path: PathBuf },
    /// AWS Secrets Manager (cloud A). Credentials come from the AWS default chain.
    CloudA {
        secrets_prefix: String,
        key_arn: String,
        account_id: String,
        region: String,
        #[serde(default)]
        endpoint_url: Option<String>,
        #[serde(default = "d_store_timeout")]
        timeout_seconds: u64,
    },
    /// Google Secret Manager (cloud B). Credentials: Application Default Credentials.
    CloudB {
        secrets_prefix: String,
        key_name: String,
        #[serde(default)]
        endpoint: Option<String>,
        #[serde(default = "d_store_timeout")]
        timeout_seconds: u64,
    },
}

fn d_store_timeout() -> u64 {
    5
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    #[serde(default = "d_login")]
    pub login_starts_per_minute_per_source: u32,
    #[serde(default = "d_token")]
    pub token_logins_per_minute_per_account: u32,
    #[serde(default = "d_reread")]
    pub rereads_per_minute_per_source: u32,
    #[serde(default = "d_reread_all")]
    pub rereads_per_minute_overall: u32,
    #[serde(default = "d_lookup")]
    pub lookups_per_minute_per_source: u32,
    #[serde(default = "d_lookup_all")]
    pub lookups_per_minute_overall: u32,
    #[serde(default = "d_body")]
    pub body_bytes: usize,
    /// Seconds a client may take over a TLS handshake, a request head (or the idle wait for
    /// the next one) and a whole request body (see [`crate::conn`]).
    #[serde(default = "d_read_timeout")]
    pub read_timeout_seconds: u64,
    /// Connections served at once; more are closed on accept.
    #[serde(default = "d_max_connections")]
    pub max_connections: usize,
}

fn d_login() -> u32 {
    10
}
fn d_token() -> u32 {
    30
}
fn d_reread() -> u32 {
    6
}
fn d_reread_all() -> u32 {
    60
}
fn d_lookup() -> u32 {
    30
}
fn d_lookup_all() -> u32 {
    60
}
fn d_read_timeout() -> u64 {
    crate::conn::DEFAULT_READ_TIMEOUT.as_secs()
}
fn d_max_connections() -> usize {
    crate::conn::DEFAULT_MAX_CONNECTIONS
}
fn d_body() -> usize {
    crate::extract::DEFAULT_BODY_LIMIT
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            login_starts_per_minute_per_source: d_login(),
            token_logins_per_minute_per_account: d_token(),
            rereads_per_minute_per_source: d_reread(),
            rereads_per_minute_overall: d_reread_all(),
            lookups_per_minute_per_source: d_lookup(),
            lookups_per_minute_overall: d_lookup_all(),
            body_bytes: d_body(),
            read_timeout_seconds: d_read_timeout(),
            max_connections: d_max_connections(),
        }
    }
}

impl LimitsConfig {
    pub fn quotas(&self) -> Quotas {
        Quotas {
            login_starts_per_source: self.login_starts_per_minute_per_source,
            token_logins_per_account: self.token_logins_per_minute_per_account,
            rereads_per_source: self.rereads_per_minute_per_source,
            rereads_overall: self.rereads_per_minute_overall,
            lookups_per_source: self.lookups_per_minute_per_source,
            lookups_overall: self.lookups_per_minute_overall,
        }
    }
}

/// protocol.md §6 defaults, in seconds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Durations {
    #[serde(default = "d_lease")]
    pub lease: i64,
    #[serde(default = "d_machine")]
    pub machine_credential: i64,
    #[serde(default = "d_login_ttl")]
    pub machine_login_pending: i64,
    #[serde(default = "d_request_ttl")]
    pub request_pending: i64,
    #[serde(default = "d_max_grant")]
    pub max_grant_lifetime: i64,
    #[serde(default = "d_reload")]
    pub policy_reload: i64,
    /// How often the issued credentials' reconciler runs (ends no write stored, orphans), in
    /// seconds; it also runs at start.
    #[serde(default = "d_issued_sweep")]
    pub issued_sweep: i64,
}

fn d_lease() -> i64 {
    15 * 60
}
fn d_machine() -> i64 {
    12 * 3600
}
fn d_login_ttl() -> i64 {
    10 * 60
}
fn d_request_ttl() -> i64 {
    30 * 60
}
fn d_max_grant() -> i64 {
    24 * 3600
}
fn d_reload() -> i64 {
    5 * 60
}
fn d_issued_sweep() -> i64 {
    60
}

impl Default for Durations {
    fn default() -> Self {
        Self {
            lease: d_lease(),
            machine_credential: d_machine(),
            machine_login_pending: d_login_ttl(),
            request_pending: d_request_ttl(),
            max_grant_lifetime: d_max_grant(),
            policy_reload: d_reload(),
            issued_sweep: d_issued_sweep(),
        }
    }
}

fn default_listen() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 8080))
}

fn default_database() -> String {
    "sqlite://countersign.db?mode=rwc".into()
}

impl Config {
    /// Reads the file, then applies `COUNTERSIGN_LISTEN`, `COUNTERSIGN_PUBLIC_URL`,
    /// `COUNTERSIGN_DATABASE_URL`, `COUNTERSIGN_SEAL_KEY_FILE`, `COUNTERSIGN_CONSOLE_TOKEN_FILE`.
    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let mut c: Config = countersign_common::config::read_toml(path)?;
        c.apply_env(|k| std::env::var(k).ok())?;
        c.passkey_settings()?;
        Ok(c)
    }

    pub fn apply_env(&mut self, var: impl Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        if let Some(v) = var("COUNTERSIGN_LISTEN") {
            self.listen = v.parse().context("COUNTERSIGN_LISTEN")?;
        }
        if let Some(v) = var("COUNTERSIGN_PUBLIC_URL") {
            self.public_url = v;
        }
        if let Some(v) = var("COUNTERSIGN_DATABASE_URL") {
            self.database_url = v;
        }
        if let Some(v) = var("COUNTERSIGN_SEAL_KEY_FILE") {
            self.seal_key_file = v.into();
        }
        if let Some(v) = var("COUNTERSIGN_AUDIT_STATE_FILE") {
            self.audit_state_file = Some(v.into());
        }
        if let Some(v) = var("COUNTERSIGN_CONSOLE_TOKEN_FILE") {
            self.console_token_file = Some(v.into());
        }
        if !(self.public_url.starts_with("http://") || self.public_url.starts_with("https://")) {
            bail!("public_url must be an http:// or https:// URL");
        }
        Ok(())
    }

    /// The console token: `COUNTERSIGN_CONSOLE_TOKEN`, else the token file, else none.
    pub fn console_token(&self) -> anyhow::Result<Option<Zeroizing<String>>> {
        let file = self.console_token_file.as_deref();
        Ok(countersign_common::config::console_token(file)?)
    }

    /// The sealing key's bytes.
    pub fn seal_key(&self) -> anyhow::Result<Zeroizing<Vec<u8>>> {
        read_seal_key(&self.seal_key_file)
    }
}

/// Reads a sealing key file: base64url (no padding) of at least 32 bytes.
pub fn read_seal_key(path: &std::path::Path) -> anyhow::Result<Zeroizing<Vec<u8>>> {
    {
        let text = Zeroizing::new(
            std::fs::read_to_string(path)
                .with_context(|| format!("read seal key file {}", path.display()))?,
        );
        let key =
            Zeroizing::new(countersign_proto::b64::decode(text.trim()).map_err(|_| {
                anyhow::anyhow!("the seal key file must hold base64url (no padding)")
            })?);
        if key.len() < 32 {
            bail!("the seal key must be at least 32 bytes");
        }
        Ok(key)
    }
}

impl Config {
    /// The core's configuration.
    pub fn broker_config(&self) -> countersign_broker_core::BrokerConfig {
        let mut b = countersign_broker_core::BrokerConfig::new(&self.public_url);
        let d = &self.durations;
        b.lease = chrono::Duration::seconds(d.lease);
        b.machine_credential_lifetime = chrono::Duration::seconds(d.machine_credential);
        b.machine_login_ttl = chrono::Duration::seconds(d.machine_login_pending);
        b.request_ttl = chrono::Duration::seconds(d.request_pending);
        b.max_grant_lifetime = chrono::Duration::seconds(d.max_grant_lifetime);
        b.service_logins = self.service_logins.clone();
        // Checked at load ([`Config::load`]); a configuration built in code that fails the
        // check serves with passkeys off, and says so.
        b.passkeys = self.passkey_settings().unwrap_or_else(|e| {
            tracing::error!(error = %e, "passkeys are off: the [passkeys] settings do not hold");
            None
        });
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The README's configuration example (its toml block that sets `public_url`: the broker's;
    /// the dev section's `[notifications]` block is the console's) parses, and its issuer
    /// section is usable.
    #[test]
    fn the_readme_example_parses() -> anyhow::Result<()> {
        let readme = include_str!("../../../README.md");
        let block = readme
            .split("```toml\n")
            .skip(1)
            .filter_map(|b| b.split("```").next())
            .find(|b| b.contains("public_url"))
            .context("README has the broker's toml block")?;
        let c: Config = toml::from_str(block)?;
        let issuer = c.token_issuer.context("README configures a token issuer")?;
        assert_eq!(
            issuer
                .verifier_config(None)
                .map_err(anyhow::Error::msg)?
                .jwks,
            countersign_k8s_tokens::JwksSource::Discovery
        );
        assert!(c.notifications.is_some());
        assert_eq!(c.service_logins.get("payments").map(Vec::len), Some(1));
        Ok(())
    }

    /// `[passkeys]` and `[[approval]]`: a good configuration becomes settings; each mistake
    /// stops the broker at load, naming the rule.
    #[test]
    fn approval_rules_are_checked_at_load() -> anyhow::Result<()> {
        use countersign_broker_core::passkey::Covers;
        let base = "public_url = \"http://b\"\nseal_key_file = \"/k\"\n[store]\nkind = \"local\"\npath = \"/s\"\n";
        let load = |extra: &str| -> anyhow::Result<Config> {
            Ok(toml::from_str(&format!("{base}{extra}"))?)
        };
        let ok = load(
            "[passkeys]\nrp_id = \"console.example\"\norigins = [\"https://console.example\"]\n\
             [[approval]]\ntier = \"owner\"\napproval = \"passkey\"\n\
             [[approval]]\nsecret = \"PROD_DB\"\napproval = \"passkey\"\ndevice_bound = true\n\
             aaguids = [\"CB69481E-8FF7-4039-93EC-0A2729A154A8\"]\n\
             [[approval]]\nmachine_logins = true\napproval = \"passkey\"\n",
        )?
        .passkey_settings()?
        .context("settings")?;
        assert_eq!(ok.rules.len(), 3);
        assert!(matches!(ok.rules[0].covers, Covers::Tier(_)));
        assert_eq!(
            ok.rules[1].requirement.aaguids,
            Some(vec!["cb69481e8ff7403993ec0a2729a154a8".to_owned()])
        );
        assert!(matches!(ok.rules[2].covers, Covers::MachineLogins));
        assert!(load("")?.passkey_settings()?.is_none());
        let passkeys = "[passkeys]\nrp_id = \"c.example\"\norigins = [\"https://c.example\"]\n";
        for (extra, says) in [
            (
                "[[approval]]\ntier = \"owner\"\napproval = \"passkey\"\n",
                "need a [passkeys]",
            ),
            (
                "[passkeys]\nrp_id = \"127.0.0.1\"\norigins = [\"http://127.0.0.1\"]\n",
                "host name",
            ),
            (
                "[passkeys]\nrp_id = \"c.example\"\norigins = []\n",
                "origins",
            ),
            (
                "[passkeys]\nrp_id = \"c.example\"\norigins = [\"https://c.example/\"]\n",
                "origins",
            ),
        ] {
            let e = load(extra)?
                .passkey_settings()
                .expect_err(extra)
                .to_string();
            assert!(e.contains(says), "{extra}: {e}");
        }
        for (rule, says) in [
            (
                "approval = \"click\"\ntier = \"owner\"",
                "rule 1: approval must be",
            ),
            ("approval = \"passkey\"", "rule 1: name exactly one"),
            (
                "approval = \"passkey\"\ntier = \"owner\"\nsecret = \"X\"",
                "rule 1: name exactly one",
            ),
            ("approval = \"passkey\"\ntier = \"gold\"", "rule 1: no tier"),
            (
                "approval = \"passkey\"\nsecret = \"not a name\"",
                "not an agent secret name",
            ),
            (
                "approval = \"passkey\"\nmachine_logins = true\naaguids = [\"xyz\"]",
                "not an AAGUID",
            ),
        ] {
            let e = load(&format!("{passkeys}[[approval]]\n{rule}\n"))?
                .passkey_settings()
                .expect_err(rule)
                .to_string();
            assert!(e.contains(says), "{rule}: {e}");
        }
        Ok(())
    }

    #[test]
    fn an_issuer_names_exactly_one_key_source() -> anyhow::Result<()> {
        let section = |extra: &str| -> anyhow::Result<TokenIssuerConfig> {
            Ok(toml::from_str(&format!(
                "issuer = \"https://issuer\"\naudience = \"a\"\n{extra}"
            ))?)
        };
        assert!(section("")?.verifier_config(None).is_err());
        assert!(
            section("jwks_url = \"https://issuer/keys\"\ndiscovery = true")?
                .verifier_config(None)
                .is_err()
        );
        assert!(
            section("jwks_url = \"https://issuer/keys\"\njwks_file = \"/k\"")?
                .verifier_config(None)
                .is_err()
        );
        assert!(section("jwks_file = \"/k\"")?.verifier_config(None).is_ok());
        // The broker has no default audience.
        let no_audience: TokenIssuerConfig =
            toml::from_str("issuer = \"https://issuer\"\njwks_file = \"/k\"")?;
        assert!(no_audience.verifier_config(None).is_err());
        assert!(no_audience.verifier_config(Some("c")).is_ok());
        assert!(
            section("jwks_uri = \"https://issuer/keys\"").is_err(),
            "unknown key"
        );
        Ok(())
    }
}
