//! The broker's tunables (protocol.md §6 defaults), each configurable.

use std::collections::BTreeMap;

use chrono::Duration;

/// Durations and limits the core enforces.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    /// The broker's public URL, without a trailing `/`: `htu` and `aud` are checked against it.
    pub public_url: String,
    /// Enrollment lease; a renewal sets it to now + this.
    pub lease: Duration,
    /// A person's machine credential lifetime (not renewed).
    pub machine_credential_lifetime: Duration,
    /// How long a pending machine login waits for its approver.
    pub machine_login_ttl: Duration,
    /// How long a pending secret request waits for its approver.
    pub request_ttl: Duration,
    /// The largest grant lifetime a session may ask for.
    pub max_grant_lifetime: Duration,
    /// Proof `iat` tolerance, either side.
    pub proof_skew: Duration,
    /// Signed request objects: the longest `exp - iat`.
    pub max_request_object_lifetime: Duration,
    /// A token login's credential lives at most this long after the login.
    pub token_credential_max: Duration,
    /// The service-logins setting: service name → ServiceAccounts (`<ns>/<name>`).
    pub service_logins: BTreeMap<String, Vec<String>>,
    /// Where passkeys are used and which approvals need one; none: passkeys are off.
    pub passkeys: Option<crate::passkey::PasskeySettings>,
}

impl BrokerConfig {
    /// The defaults of protocol.md §6 for a broker at `public_url`.
    pub fn new(public_url: &str) -> Self {
        Self {
            public_url: public_url.trim_end_matches('/').to_owned(),
            lease: Duration::minutes(15),
            machine_credential_lifetime: Duration::hours(12),
            machine_login_ttl: Duration::minutes(10),
            request_ttl: Duration::minutes(30),
            max_grant_lifetime: Duration::hours(24),
            proof_skew: Duration::seconds(60),
            max_request_object_lifetime: Duration::seconds(300),
            token_credential_max: Duration::hours(1),
            service_logins: BTreeMap::new(),
            passkeys: None,
        }
    }
}
