//! A string that is secret: zeroized on drop, never printed by `Debug`.

use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// A secret string (a ServiceAccount token, a secret's value). `Debug` prints nothing of it;
/// its memory is zeroized when dropped.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(Zeroizing<String>);

impl Secret {
    /// Wraps a string.
    #[must_use]
    pub fn new(s: String) -> Self {
        Self(Zeroizing::new(s))
    }

    /// The secret text.
    #[must_use]
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Self::new(s)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides() {
        let s = Secret::new("hunter2".into());
        assert_eq!(format!("{s:?}"), "Secret(..)");
        assert_eq!(s.expose(), "hunter2");
    }
}
