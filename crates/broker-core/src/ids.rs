//! Identifiers and small validated values. Each parses its wire form and refuses anything else,
//! so that a value of one of these types is always well formed.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::error::{Error, ErrorCode};

/// A broker id kind: the shared UUID id type ([`countersign_common::uuid_id!`], the
/// 36-character hyphenated form in any case, written lowercase) with the broker's refusal of a
/// malformed one, the route's `*_ID_INPUT` code.
macro_rules! broker_id {
    ($(#[$doc:meta])* $name:ident, $what:literal, $code:ident) => {
        countersign_common::uuid_id!($(#[$doc])* $name, $what);

        impl $name {
            /// Parses the hyphenated UUID form; anything else is refused with the route's code.
            pub fn parse(s: &str) -> Result<Self, Error> {
                Self::read(s).ok_or_else(|| ErrorCode::$code.into())
            }
        }
    };
}

broker_id!(
    /// An enrollment (a session's or pod's enrolled key).
    EnrollmentId,
    "enrollment",
    ENROLLMENT_ID_INPUT
);
broker_id!(
    /// A secret request.
    RequestId,
    "request",
    REQUEST_ID_INPUT
);
broker_id!(
    /// A grant.
    GrantId,
    "grant",
    GRANT_ID_INPUT
);
broker_id!(
    /// A launcher credential (machine login).
    CredentialId,
    "launcher credential",
    CREDENTIAL_ID_INPUT
);

/// A credential-request record's id: the SHA-256 of its canonical text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RecordId(pub [u8; 32]);

impl RecordId {
    /// Parses 64 lowercase hex digits.
    pub fn parse(s: &str) -> Result<Self, Error> {
        let ok = s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if !ok {
            return Err(ErrorCode::RECORD_ID_INPUT.into());
        }
        let mut out = [0u8; 32];
        hex::decode_to_slice(s, &mut out).map_err(|_| Error::new(ErrorCode::RECORD_ID_INPUT))?;
        Ok(Self(out))
    }

    /// The id of a record with this canonical text.
    pub fn of_text(text: &str) -> Self {
        let d = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, text.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(d.as_ref());
        Self(out)
    }
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl Serialize for RecordId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for RecordId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// Whether `s` holds a Unicode format character (general category Cf): the bidi embeddings,
/// overrides and isolates (U+202A-U+202E, U+2066-U+2069), zero-width characters (U+200B-U+200F),
/// the byte-order mark U+FEFF, the soft hyphen U+00AD, tag characters, ... They render as nothing
/// or reorder what surrounds them, so a value that an approver reads (a host, a runtime id, a
/// reason, a login) could show something other than what it is. The table is the
/// `unicode-properties` crate's.
pub fn has_format_char(s: &str) -> bool {
    use unicode_properties::{GeneralCategory, UnicodeGeneralCategory};
    s.chars()
        .any(|c| c.general_category() == GeneralCategory::Format)
}

/// A person's console login: an e-mail address, stored lower-cased.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Login(String);

impl Login {
    /// Lower-cases and checks the shape `local@domain` (no whitespace, control or format
    /// characters, at most 320 characters).
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        let ok = !s.is_empty()
            && s.len() <= 320
            && s.chars().all(|c| !c.is_whitespace() && !c.is_control())
            && !has_format_char(s)
            && matches!(s.split_once('@'), Some((l, d)) if !l.is_empty() && !d.is_empty() && !d.contains('@'));
        ok.then(|| Self(s.to_lowercase()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Login {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Who may decide a record: one person, or `anyone` signed in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Approver {
    Person(Login),
    Anyone,
}

impl Approver {
    pub fn as_str(&self) -> &str {
        match self {
            Approver::Person(l) => l.as_str(),
            Approver::Anyone => "anyone",
        }
    }

    /// Whether `who` may decide under this rule.
    pub fn admits(&self, who: &Login) -> bool {
        match self {
            Approver::Person(l) => l == who,
            Approver::Anyone => true,
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        if s == "anyone" {
            Some(Approver::Anyone)
        } else {
            Login::parse(s).map(Approver::Person)
        }
    }
}

impl fmt::Display for Approver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Approver {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Approver {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| serde::de::Error::custom("not an approver"))
    }
}

/// An agent secret's name as a session gives it: `^[A-Z][A-Z0-9_]{0,127}$`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SecretName(String);

impl SecretName {
    pub fn parse(s: &str) -> Result<Self, Error> {
        let b = s.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 128
            && b[0].is_ascii_uppercase()
            && b.iter()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == b'_');
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(ErrorCode::SECRET_NAME_INVALID.into())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The stored name's suffix: lower case, `_` turned into `-` (protocol.md §5).
    pub fn stored_suffix(&self) -> String {
        self.0.to_ascii_lowercase().replace('_', "-")
    }

    /// The agent name a stored suffix stands for, if it is one (the inverse of
    /// [`SecretName::stored_suffix`]).
    pub fn from_stored_suffix(suffix: &str) -> Option<Self> {
        let upper = suffix.replace('-', "_").to_ascii_uppercase();
        let name = Self::parse(&upper).ok()?;
        (name.stored_suffix() == suffix).then_some(name)
    }
}

impl TryFrom<String> for SecretName {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        Self::parse(&s)
    }
}

impl From<SecretName> for String {
    fn from(n: SecretName) -> String {
        n.0
    }
}

impl fmt::Display for SecretName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A notification session id, by the session-id rule the console and the launcher helper use
/// too ([`countersign_common::ids::is_session_id`]: 1 to 128 characters with no whitespace,
/// control character, `/`, `?`, `#` or any of ``<>"'`[]\|``).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(String);

impl SessionId {
    pub fn parse(s: &str) -> Result<Self, Error> {
        if countersign_common::ids::is_session_id(s) {
            Ok(Self(s.to_owned()))
        } else {
            Err(ErrorCode::SESSION_ID_INPUT.into())
        }
    }

    /// A stored notification session id (an enrollment's, a request's): one the rule refuses
    /// (kept by a broker whose rule was looser) is read as none, which is what it was worth,
    /// since the console drops a notification to it.
    pub fn stored<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Self>, D::Error> {
        let s = Option::<String>::deserialize(d)?;
        Ok(s.and_then(|s| Self::parse(&s).ok()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SessionId {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        Self::parse(&s)
    }
}

impl From<SessionId> for String {
    fn from(n: SessionId) -> String {
        n.0
    }
}

/// A pod slot: `^[a-z][a-z0-9-]{0,62}$`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Slot(String);

impl Slot {
    pub fn parse(s: &str) -> Result<Self, Error> {
        let b = s.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= 63
            && b[0].is_ascii_lowercase()
            && b.iter()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-');
        if ok {
            Ok(Self(s.to_owned()))
        } else {
            Err(ErrorCode::INVALID_SLOT.into())
        }
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for Slot {
    type Error = Error;
    fn try_from(s: String) -> Result<Self, Error> {
        Self::parse(&s)
    }
}

impl From<Slot> for String {
    fn from(n: Slot) -> String {
        n.0
    }
}

/// The alphabet of confirmation codes (RFC 8628 §6.1).
pub const CODE_ALPHABET: &[u8; 20] = b"BCDFGHJKLMNPQRSTVWXZ";

/// A machine login's confirmation code, kept in its canonical 8-letter upper-case form.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ConfirmationCode(String);

impl ConfirmationCode {
    /// Accepts `XXXX-XXXX` or `XXXXXXXX`, in any case.
    pub fn parse(s: &str) -> Option<Self> {
        let s = s.trim();
        let compact: String = match s.len() {
            9 if s.as_bytes().get(4) == Some(&b'-') => s.chars().filter(|c| *c != '-').collect(),
            8 => s.to_owned(),
            _ => return None,
        };
        let upper = compact.to_ascii_uppercase();
        (upper.len() == 8 && upper.bytes().all(|b| CODE_ALPHABET.contains(&b)))
            .then_some(Self(upper))
    }

    /// A code drawn from 8 random bytes (rejection sampling keeps the letters uniform).
    pub fn generate(entropy: &dyn crate::Entropy) -> Self {
        let mut out = String::with_capacity(8);
        while out.len() < 8 {
            let mut b = [0u8; 16];
            entropy.fill(&mut b);
            for byte in b {
                // 240 = 12 * 20: accept 0..240 so each letter is equally likely.
                if byte < 240 && out.len() < 8 {
                    out.push(CODE_ALPHABET[(byte % 20) as usize] as char);
                }
            }
        }
        Self(out)
    }

    /// The form shown to people: `XXXX-XXXX`.
    pub fn display(&self) -> String {
        format!("{}-{}", &self.0[..4], &self.0[4..])
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for ConfirmationCode {
    type Error = &'static str;
    fn try_from(s: String) -> Result<Self, &'static str> {
        Self::parse(&s).ok_or("not a confirmation code")
    }
}

impl From<ConfirmationCode> for String {
    fn from(n: ConfirmationCode) -> String {
        n.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Bidi override, isolate, zero-width space, BOM, soft hyphen, a tag character.
    const FORMAT: [char; 6] = [
        '\u{202E}',
        '\u{2066}',
        '\u{200B}',
        '\u{FEFF}',
        '\u{00AD}',
        '\u{E0041}',
    ];

    #[test]
    fn format_characters_are_found_and_logins_refuse_them() {
        for c in FORMAT {
            assert!(has_format_char(&format!("a{c}b")), "{:04X}", c as u32);
            assert!(Login::parse(&format!("ada{c}@example.com")).is_none());
            assert!(Login::parse(&format!("ada@example.com{c}")).is_none());
        }
        // Letters, marks, symbols and emoji of other scripts are not format characters.
        assert!(!has_format_char("héllo wörld ✓ 日本 😀 a\u{0301}"));
        assert!(Login::parse("ådä@exämple.com").is_some());
    }

    #[test]
    fn uuids_parse_only_hyphenated() {
        let id = "6f1c7c2a-3a1e-4b1d-9a63-2d3f7a0a1b2c";
        assert_eq!(
            GrantId::parse(&id.to_uppercase())
                .map(|g| g.to_string())
                .ok()
                .as_deref(),
            Some(id)
        );
        assert_eq!(
            EnrollmentId::parse(id)
                .map(|e| e.to_string())
                .ok()
                .as_deref(),
            Some(id)
        );
        for bad in [
            "",
            "6f1c7c2a3a1e4b1d9a632d3f7a0a1b2c",
            "{6f1c7c2a-3a1e-4b1d-9a63-2d3f7a0a1b2c}",
            "urn:uuid:6f1c7c2a-3a1e-4b1d-9a63-2d3f7a0a1b2c",
            "x",
        ] {
            assert_eq!(
                GrantId::parse(bad).map_err(|e| e.code),
                Err(ErrorCode::GRANT_ID_INPUT)
            );
        }
    }

    #[test]
    fn record_ids_are_lowercase_hex() {
        let id = RecordId::of_text("abc");
        assert_eq!(RecordId::parse(&id.to_string()), Ok(id));
        assert!(RecordId::parse(&id.to_string().to_uppercase()).is_err());
        assert!(RecordId::parse("abc").is_err());
    }

    #[test]
    fn secret_names_map_to_stored_names() {
        let n = SecretName::parse("GITHUB_TOKEN").expect("valid");
        assert_eq!(n.stored_suffix(), "github-token");
        assert_eq!(SecretName::from_stored_suffix("github-token"), Some(n));
        assert_eq!(SecretName::from_stored_suffix("Github-token"), None);
        assert_eq!(SecretName::from_stored_suffix("github_token"), None);
        for bad in ["", "github", "_A", "1A", "A-B", &"A".repeat(129)] {
            assert!(SecretName::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn slots_session_ids_codes() {
        assert!(Slot::parse("web-1").is_ok());
        assert!(Slot::parse(&"a".repeat(63)).is_ok());
        assert!(Slot::parse(&"a".repeat(64)).is_err());
        assert!(Slot::parse("1web").is_err());
        assert!(SessionId::parse(&"x".repeat(128)).is_ok());
        assert!(SessionId::parse(&"x".repeat(129)).is_err());
        assert!(SessionId::parse("a b").is_err());
        assert!(SessionId::parse("a\u{7}").is_err());
        for c in countersign_common::ids::SESSION_ID_FORBIDDEN.chars() {
            assert!(SessionId::parse(&format!("a{c}b")).is_err(), "{c}");
        }
        let c = ConfirmationCode::parse("bcdf-ghjk").expect("valid");
        assert_eq!(c.display(), "BCDF-GHJK");
        assert_eq!(ConfirmationCode::parse("BCDFGHJK"), Some(c));
        assert!(ConfirmationCode::parse("BCDF-GHJA").is_none());
        assert!(ConfirmationCode::parse("BCD-FGHJK").is_none());
    }

    #[test]
    fn logins_lowercase() {
        assert_eq!(
            Login::parse("Ada@Example.COM")
                .map(|l| l.to_string())
                .as_deref(),
            Some("ada@example.com")
        );
        assert!(Login::parse("no-at").is_none());
        assert!(Login::parse("a b@c").is_none());
        assert!(Approver::parse("anyone") == Some(Approver::Anyone));
    }

    proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC{0,200}") {
            let _ = EnrollmentId::parse(&s);
            let _ = RecordId::parse(&s);
            let _ = SecretName::parse(&s);
            let _ = SecretName::from_stored_suffix(&s);
            let _ = SessionId::parse(&s);
            let _ = Slot::parse(&s);
            let _ = ConfirmationCode::parse(&s);
            let _ = Login::parse(&s);
        }
    }
}
