//! Identifiers and validated values.

use std::fmt;

use serde::{Deserialize, Serialize};

pub use countersign_common::login::Login;

/// A personal token's id (a UUID), shown in lists and taken by revoke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TokenId(pub uuid::Uuid);

impl TokenId {
    pub fn parse(s: &str) -> Option<Self> {
        uuid::Uuid::try_parse(s).ok().map(TokenId)
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

/// A session id (protocol §4.1): 1 to 128 characters with no whitespace, control character,
/// `/`, `?`, `#` or any of ``<>"'`[]\|``. The one rule: paths, bodies, documents' refs and the
/// HTTP layer all ask here.
pub fn is_session_id(s: &str) -> bool {
    (1..=128).contains(&s.chars().count())
        && !s
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || "/?#<>\"'`[]\\|".contains(c))
}

/// A UUID id (an artifact's, ask's, comment's, message's, session group's, token's) as a path
/// or body gives it, in any case and any form the `uuid` crate parses, answered as the console
/// writes every id: lowercase and hyphenated. `None`: it names nothing.
pub fn uuid_id(s: &str) -> Option<String> {
    uuid::Uuid::try_parse(s)
        .ok()
        .map(|u| u.hyphenated().to_string())
}
