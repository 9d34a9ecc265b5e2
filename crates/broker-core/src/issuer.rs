//! Issuers: dynamic secrets. A secret policy declares as *issued* is not read from a store: an
//! issuer makes a credential for one grant (a PostgreSQL login role, an AWS IAM user and its
//! access key) at the grant's first release, every release of that grant answers the same
//! credential, and every end of the grant destroys it.
//!
//! The core names each credential (`<prefix><grant id as 32 hex digits>`, see
//! [`credential_name`]) and records the name, sealed into the audit chain, *before* it calls
//! [`Issuer::mint`]; so a crash at any point leaves a name the core knows, and
//! [`Issuer::destroy`] and the orphan sweep ([`Issuer::list`]) can end whatever the issuer holds.
//! An issuer is one declared secret's: its prefix is its own, and it never makes a credential
//! outside it.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::ids::{GrantId, SecretName};
use crate::secrets::SecretValue;

/// What a mint makes: the secret's value (a connection URL; the key pair as AWS's
/// `credential_process` JSON), and its parts as environment variables for tools that read
/// them (`PGHOST`, `PGPASSWORD`, …; `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`).
#[derive(Debug)]
pub struct Minted {
    pub value: SecretValue,
    pub env: Vec<(String, SecretValue)>,
    /// The names in `env` whose values are not secret (`PGHOST`, `PGPORT`, `PGDATABASE`,
    /// `PGUSER`): a client need not mask them in a command's output (a port or a database
    /// name masked everywhere would hide the output it is there to read).
    pub public: Vec<String>,
}

/// An issuer's failure. The text goes to logs, to the operator's view of the credential and to
/// the console's grants page: it never holds a secret.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IssuerError {
    /// The issuer's system did not answer, or answered that it cannot now (a timeout, a refused
    /// connection, a throttle): worth trying again.
    #[error("issuer unavailable: {0}")]
    Unavailable(String),
    /// The issuer's system refused what was asked (a missing privilege, a role or policy that
    /// does not exist): trying again will not help until an operator acts.
    #[error("issuer refused: {0}")]
    Refused(String),
}

/// One declared dynamic secret's issuer.
#[async_trait]
pub trait Issuer: Send + Sync + std::fmt::Debug + 'static {
    /// `postgres` or `aws-iam`: the kind routes and pages show with the secret.
    fn kind(&self) -> &'static str;
    /// What every credential name it makes begins with.
    fn prefix(&self) -> &str;
    /// Makes the credential `name` (which begins with [`Issuer::prefix`]), valid no later than
    /// `until` where the issuer can say so. When one of that name exists already (a mint
    /// interrupted before the core recorded it live), it is replaced: whatever secret it had
    /// stops working.
    async fn mint(&self, name: &str, until: Option<Time>) -> Result<Minted, IssuerError>;
    /// Destroys the credential `name` and what it holds, ending its open sessions where the
    /// issuer has any. `Ok` when nothing of that name exists (destroying twice, or racing
    /// another replica, is no error).
    async fn destroy(&self, name: &str) -> Result<(), IssuerError>;
    /// The names of every credential it holds under its prefix, for the orphan sweep.
    async fn list(&self) -> Result<Vec<String>, IssuerError>;
}

/// Where an issued credential is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IssuedState {
    /// Its name is recorded; the issuer is being (or was, before a crash) asked to make it.
    Minting,
    /// Made, and released with its grant.
    Live,
    /// Its grant ended: a destroy is queued in the outbox.
    Destroying,
    /// The issuer destroyed it.
    Destroyed,
}

impl IssuedState {
    pub fn as_str(self) -> &'static str {
        match self {
            IssuedState::Minting => "minting",
            IssuedState::Live => "live",
            IssuedState::Destroying => "destroying",
            IssuedState::Destroyed => "destroyed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        [Self::Minting, Self::Live, Self::Destroying, Self::Destroyed]
            .into_iter()
            .find(|st| st.as_str() == s)
    }

    /// Minting or live: the issuer may hold it and no destroy is queued.
    pub fn unended(self) -> bool {
        matches!(self, IssuedState::Minting | IssuedState::Live)
    }
}

/// One credential an issuer made (or is making) for one secret of one grant: the row the core
/// keeps of it. Its secret is kept only encrypted under a key derived from the seal key
/// (`Sealer::encrypt`), so that every release of the grant answers the same
/// credential and a copy of the database alone does not hold it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issued {
    pub grant_id: GrantId,
    pub secret: SecretName,
    /// The issuer's kind (`postgres`, `aws-iam`).
    pub issuer: String,
    /// The issuer's name for it ([`credential_name`]).
    pub name: String,
    pub state: IssuedState,
    /// While minting: until when the minter holds its claim (another release waits, a
    /// destroy is put off until then).
    pub claimed_until: Option<Time>,
    /// The value and its environment parts, encrypted (base64url); none before the mint.
    pub sealed_value: Option<String>,
    /// When it stops working on its own, if the issuer can say (the grant's expiry).
    pub expires_at: Option<Time>,
    pub created_at: Time,
    pub destroyed_at: Option<Time>,
    /// Destroy attempts that failed, the last one's error and the next try.
    pub attempts: u32,
    pub last_error: Option<String>,
    pub next_attempt_at: Option<Time>,
}

/// The name of the credential an issuer with `prefix` makes for `grant`.
pub fn credential_name(prefix: &str, grant: GrantId) -> String {
    format!("{prefix}{}", grant.0.simple())
}

/// The grant a credential name of `prefix` was made for, when it is one.
pub fn grant_of(prefix: &str, name: &str) -> Option<GrantId> {
    let hex = name.strip_prefix(prefix)?;
    if hex.len() != 32
        || !hex
            .bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    {
        return None;
    }
    uuid::Uuid::try_parse(hex).ok().map(GrantId)
}

/// The longest prefix a credential name can have within `limit` characters.
pub fn max_prefix(limit: usize) -> usize {
    limit.saturating_sub(32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_reads_back_as_its_grant_and_nothing_else_does() {
        let g = GrantId(uuid::Uuid::from_u128(
            0x0123_4567_89ab_cdef_0123_4567_89ab_cdef,
        ));
        let n = credential_name("cs_", g);
        assert_eq!(n, "cs_0123456789abcdef0123456789abcdef");
        assert_eq!(grant_of("cs_", &n), Some(g));
        assert_eq!(grant_of("cx_", &n), None);
        assert_eq!(grant_of("cs_", "cs_0123"), None);
        assert_eq!(
            grant_of("cs_", &n.to_uppercase().replace("CS_", "cs_")),
            None
        );
        assert_eq!(grant_of("cs_", "cs_0123456789abcdef0123456789abcdeg"), None);
    }
}
