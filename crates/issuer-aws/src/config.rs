//! The issuer's configuration (what it makes and where) and its own admin credential (how it
//! signs in to IAM), both checked before a client is built, so that a bad prefix, path or policy
//! ARN is an error at start-up rather than a refused mint at a grant's first release.

use std::time::Duration;

use countersign_broker_core::issuer::max_prefix;
use serde::Deserialize;
use zeroize::Zeroizing;

/// IAM's longest user name.
pub const MAX_USER_NAME: usize = 64;

/// IAM's longest path.
const MAX_PATH: usize = 512;

/// The name of the inline policy [`AwsIamIssuerConfig::inline_policy`] is put as.
pub const INLINE_POLICY_NAME: &str = "countersign";

/// What the issuer makes, as the broker's configuration declares it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AwsIamIssuerConfig {
    /// What every user name it makes begins with: IAM user-name characters
    /// (`A-Z a-z 0-9 + = , . @ _ -`), at most [`max_prefix`]`(64)` = 32 of them.
    #[serde(default = "d_prefix")]
    pub prefix: String,
    /// The IAM path its users are made under (`/countersign/`): `/` alone or `/…/`. The admin's
    /// privileges are scoped to it, and [`crate::AwsIamIssuer`] touches no user outside it.
    #[serde(default = "d_path")]
    pub path: String,
    /// Managed policies attached to every user it makes (full policy ARNs).
    #[serde(default)]
    pub policy_arns: Vec<String>,
    /// A JSON policy document put on every user it makes, as the inline policy
    /// [`INLINE_POLICY_NAME`].
    #[serde(default)]
    pub inline_policy: Option<String>,
    /// The ARN of the managed policy every user it makes is bounded by.
    #[serde(default)]
    pub permissions_boundary: Option<String>,
    /// The region whose IAM endpoint is used; IAM is global, so this only picks the partition
    /// (`us-east-1` for `aws`, `cn-north-1` for `aws-cn`, …).
    #[serde(default = "d_region")]
    pub region: String,
    /// An endpoint to use instead of IAM's (an emulator in tests).
    #[serde(default)]
    pub endpoint_url: Option<String>,
    /// Budget of each IAM call, retries included, in seconds.
    #[serde(default = "d_timeout")]
    pub timeout_seconds: u64,
}

fn d_prefix() -> String {
    "countersign-".into()
}
fn d_path() -> String {
    "/countersign/".into()
}
fn d_region() -> String {
    "us-east-1".into()
}
fn d_timeout() -> u64 {
    5
}

/// A configuration that does not hold; the text names the offending field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("aws-iam issuer config: {0}")]
pub struct ConfigError(pub String);

impl AwsIamIssuerConfig {
    /// The defaults (prefix `countersign-`, path `/countersign/`, `us-east-1`, 5 s) with these
    /// managed policies.
    pub fn new(policy_arns: Vec<String>) -> Self {
        Self {
            prefix: d_prefix(),
            path: d_path(),
            policy_arns,
            inline_policy: None,
            permissions_boundary: None,
            region: d_region(),
            endpoint_url: None,
            timeout_seconds: d_timeout(),
        }
    }

    /// The per-call budget.
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(self.timeout_seconds)
    }

    /// Checks the configuration's shape.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |m: String| Err(ConfigError(m));
        let limit = max_prefix(MAX_USER_NAME);
        if self.prefix.is_empty() || self.prefix.len() > limit {
            return bad(format!("prefix must be 1 to {limit} characters"));
        }
        if !self.prefix.bytes().all(user_name_byte) {
            return bad("prefix may hold only A-Z a-z 0-9 + = , . @ _ -".into());
        }
        if !valid_path(&self.path) {
            return bad("path must be '/' or '/…/' of printable ASCII, at most 512".into());
        }
        if self.policy_arns.is_empty() && self.inline_policy.is_none() {
            return bad("give policy_arns, inline_policy or both".into());
        }
        for arn in self.policy_arns.iter().chain(&self.permissions_boundary) {
            if !policy_arn(arn) {
                return bad(format!(
                    "{arn:?} is not a policy ARN (arn:…:iam::…:policy/…)"
                ));
            }
        }
        if let Some(doc) = &self.inline_policy {
            match serde_json::from_str::<serde_json::Value>(doc) {
                Ok(serde_json::Value::Object(_)) => {}
                _ => return bad("inline_policy must be a JSON policy document (an object)".into()),
            }
        }
        if self.region.is_empty() {
            return bad("region is empty".into());
        }
        if let Some(url) = &self.endpoint_url
            && !(url.starts_with("http://") || url.starts_with("https://"))
        {
            return bad("endpoint_url must be an http:// or https:// URL".into());
        }
        if self.timeout_seconds == 0 {
            return bad("timeout_seconds must be positive".into());
        }
        Ok(())
    }
}

/// A byte IAM allows in a user name.
pub(crate) fn user_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"+=,.@_-".contains(&b)
}

/// IAM's path pattern: `/`, or `/` + printable ASCII + `/`.
fn valid_path(p: &str) -> bool {
    p.len() <= MAX_PATH
        && p.starts_with('/')
        && p.ends_with('/')
        && p.bytes().all(|b| (0x21..=0x7e).contains(&b))
}

fn policy_arn(arn: &str) -> bool {
    let mut parts = arn.splitn(6, ':');
    parts.next() == Some("arn")
        && parts.next().is_some_and(|p| !p.is_empty())
        && parts.next() == Some("iam")
        && parts.next() == Some("")
        && parts.next().is_some()
        && parts
            .next()
            .is_some_and(|r| r.len() > "policy/".len() && r.starts_with("policy/"))
}

/// How the issuer signs in to IAM: its own admin credential, which holds the privileges the
/// crate docs list and nothing more.
#[derive(Clone)]
pub enum AdminCredentials {
    /// The SDK's default chain: environment, profile, web identity, container and instance
    /// credentials.
    DefaultChain,
    /// An access key (read by the broker from a file or a store).
    Static {
        access_key_id: String,
        secret_access_key: Zeroizing<String>,
        session_token: Option<Zeroizing<String>>,
    },
}

impl std::fmt::Debug for AdminCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminCredentials::DefaultChain => f.write_str("DefaultChain"),
            AdminCredentials::Static { access_key_id, .. } => f
                .debug_struct("Static")
                .field("access_key_id", access_key_id)
                .finish_non_exhaustive(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok() -> AwsIamIssuerConfig {
        AwsIamIssuerConfig::new(vec!["arn:aws:iam::111122223333:policy/app-read".into()])
    }

    #[test]
    fn defaults_and_a_good_config_pass() {
        assert_eq!(ok().validate(), Ok(()));
        let c: AwsIamIssuerConfig =
            serde_json::from_str(r#"{"inline_policy": "{\"Version\": \"2012-10-17\"}"}"#)
                .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.prefix, "countersign-");
        assert_eq!(c.path, "/countersign/");
        assert_eq!(c.region, "us-east-1");
        assert_eq!(c.timeout(), Duration::from_secs(5));
        assert_eq!(c.validate(), Ok(()));
        let aws_managed =
            AwsIamIssuerConfig::new(vec!["arn:aws:iam::aws:policy/ReadOnlyAccess".into()]);
        assert_eq!(aws_managed.validate(), Ok(()));
    }

    #[test]
    fn unknown_fields_are_refused() {
        let r = serde_json::from_str::<AwsIamIssuerConfig>(r#"{"policy_arn": "x"}"#);
        assert!(r.is_err());
    }

    #[test]
    fn bad_configs_name_their_field() {
        let cases: Vec<(AwsIamIssuerConfig, &str)> = vec![
            (
                AwsIamIssuerConfig {
                    prefix: String::new(),
                    ..ok()
                },
                "prefix",
            ),
            (
                AwsIamIssuerConfig {
                    prefix: "x".repeat(33),
                    ..ok()
                },
                "prefix",
            ),
            (
                AwsIamIssuerConfig {
                    prefix: "cs/".into(),
                    ..ok()
                },
                "prefix",
            ),
            (
                AwsIamIssuerConfig {
                    prefix: "cs ".into(),
                    ..ok()
                },
                "prefix",
            ),
            (
                AwsIamIssuerConfig {
                    path: "countersign/".into(),
                    ..ok()
                },
                "path",
            ),
            (
                AwsIamIssuerConfig {
                    path: "/countersign".into(),
                    ..ok()
                },
                "path",
            ),
            (
                AwsIamIssuerConfig {
                    path: "/a b/".into(),
                    ..ok()
                },
                "path",
            ),
            (
                AwsIamIssuerConfig {
                    policy_arns: vec![],
                    ..ok()
                },
                "policy_arns",
            ),
            (
                AwsIamIssuerConfig {
                    policy_arns: vec!["app-read".into()],
                    ..ok()
                },
                "policy ARN",
            ),
            (
                AwsIamIssuerConfig {
                    policy_arns: vec!["arn:aws:iam::1:role/x".into()],
                    ..ok()
                },
                "policy ARN",
            ),
            (
                AwsIamIssuerConfig {
                    permissions_boundary: Some("arn:aws:s3:::bucket".into()),
                    ..ok()
                },
                "policy ARN",
            ),
            (
                AwsIamIssuerConfig {
                    inline_policy: Some("[]".into()),
                    ..ok()
                },
                "inline_policy",
            ),
            (
                AwsIamIssuerConfig {
                    inline_policy: Some("{".into()),
                    ..ok()
                },
                "inline_policy",
            ),
            (
                AwsIamIssuerConfig {
                    region: String::new(),
                    ..ok()
                },
                "region",
            ),
            (
                AwsIamIssuerConfig {
                    endpoint_url: Some("localhost:5000".into()),
                    ..ok()
                },
                "endpoint_url",
            ),
            (
                AwsIamIssuerConfig {
                    timeout_seconds: 0,
                    ..ok()
                },
                "timeout_seconds",
            ),
        ];
        for (c, field) in cases {
            match c.validate() {
                Err(ConfigError(m)) => assert!(m.contains(field), "{m} should name {field}"),
                Ok(()) => panic!("{c:?} passed"),
            }
        }
        let at_limit = AwsIamIssuerConfig {
            prefix: "x".repeat(32),
            path: "/".into(),
            ..ok()
        };
        assert_eq!(at_limit.validate(), Ok(()));
    }

    #[test]
    fn the_admin_secret_is_not_printed() {
        let a = AdminCredentials::Static {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: Zeroizing::new("very-secret".into()),
            session_token: Some(Zeroizing::new("token-secret".into())),
        };
        let shown = format!("{a:?}");
        assert!(shown.contains("AKIDEXAMPLE"));
        assert!(!shown.contains("very-secret") && !shown.contains("token-secret"));
    }
}
