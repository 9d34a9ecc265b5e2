//! The login rule: a person is named by their e-mail address, lowercased, on both the broker
//! (approvers) and the console (people, token owners).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A person's login: their e-mail address, lowercased (the broker names approvers the same way).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Login(String);

impl Login {
    /// Trims, lowercases and checks the shape `local@domain` (no whitespace or control
    /// characters, at most 320 characters).
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        let ok = !s.is_empty()
            && s.len() <= 320
            && s.chars().all(|c| !c.is_whitespace() && !c.is_control())
            && matches!(s.split_once('@'), Some((l, d)) if !l.is_empty() && !d.is_empty() && !d.contains('@'));
        ok.then(|| Self(s.to_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The part after `@`.
    pub fn domain(&self) -> &str {
        self.0.rsplit_once('@').map(|(_, d)| d).unwrap_or("")
    }
}

impl fmt::Display for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<String> for Login {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        Login::parse(&s).ok_or_else(|| "not a login".to_owned())
    }
}

impl From<Login> for String {
    fn from(l: Login) -> String {
        l.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logins_are_lowercased_and_checked() {
        assert_eq!(
            Login::parse(" Ada@Example.COM ")
                .map(String::from)
                .as_deref(),
            Some("ada@example.com")
        );
        assert!(Login::parse("no-at").is_none());
        assert!(Login::parse("a b@c").is_none());
        assert!(Login::parse("a@b@c").is_none());
        assert!(Login::parse("@c").is_none());
        assert_eq!(
            Login::parse("x@Example.com").map(|l| l.domain().to_owned()),
            Some("example.com".into())
        );
    }
}
