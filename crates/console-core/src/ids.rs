//! Identifiers and validated values.

use std::fmt;

use serde::{Deserialize, Serialize};

pub use countersign_common::login::Login;

/// A personal token's id (a UUID), shown in lists and taken by revoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TokenId(pub uuid::Uuid);

impl TokenId {
    pub fn parse(s: &str) -> Option<Self> {
        uuid::Uuid::parse_str(s).ok().map(TokenId)
    }

    pub fn from_random(bytes: [u8; 16]) -> Self {
        TokenId(uuid::Builder::from_random_bytes(bytes).into_uuid())
    }
}

impl fmt::Display for TokenId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}
