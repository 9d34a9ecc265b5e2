//! Secret stores, as the core needs them: list what is served under the prefix (the policy),
//! inspect one secret (a reread), and read a current value fresh at release time.

use async_trait::async_trait;
use serde::Serialize;
use zeroize::Zeroizing;

use crate::ids::SecretName;
use crate::policy::{PolicyEntry, Refusal};

/// A secret's value. Zeroized on drop; its `Debug` prints nothing of it.
pub struct SecretValue(Zeroizing<String>);

impl SecretValue {
    pub fn new(value: Zeroizing<String>) -> Self {
        Self(value)
    }

    /// The value, for the one place that writes it to a client.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for SecretValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SecretValue(..)")
    }
}

/// What a store says of one secret under the prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Inspection {
    Served(PolicyEntry),
    Refused(Refusal),
}

/// A full listing: every served secret, and every refused one with its reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Listing {
    pub served: Vec<PolicyEntry>,
    pub refused: Vec<(SecretName, Refusal)>,
}

/// A store failure. The text goes to logs only.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The secret is not (any longer) in the store.
    #[error("secret not in store")]
    NotFound,
    /// The store did not answer in time or could not be reached.
    #[error("secret store unavailable: {0}")]
    Unavailable(String),
    #[error("secret store failure: {0}")]
    Other(String),
}

/// The store's settings, as `GET /v1/settings` answers them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Settings {
    pub store: String,
    pub secrets_prefix: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud_a_key_arn: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud_a_account_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud_a_region: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud_b_key_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cloud_b_project: Option<String>,
}

/// A secret store.
#[async_trait]
pub trait SecretStore: Send + Sync + std::fmt::Debug + 'static {
    fn settings(&self) -> Settings;
    /// Lists every secret under the prefix.
    async fn list(&self) -> Result<Listing, StoreError>;
    /// Inspects one secret now.
    async fn inspect(&self, name: &SecretName) -> Result<Inspection, StoreError>;
    /// Reads a served secret's current value, fresh.
    async fn read_value(&self, entry: &PolicyEntry) -> Result<SecretValue, StoreError>;
}
