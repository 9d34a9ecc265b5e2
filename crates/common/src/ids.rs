//! The id rules the broker, the console and the launcher helper share, written once:
//!
//! - a **session id** ([`is_session_id`]): 1 to 128 characters with no whitespace, control
//!   character, `/`, `?`, `#` or any of ``<>"'`[]\|`` (console-protocol §4.1: the spec's
//!   agent-artifact rule, "applied wherever a session id appears"). The broker's notification
//!   session is the same session (the console drops a notification whose session id this rule
//!   refuses), so the broker and the launcher helper take it by the same rule;
//! - a **UUID** ([`parse_uuid`]): RFC 9562's 36-character hyphenated form, read in any case
//!   and written lowercase (no braces, no `urn:uuid:`, no 32-digit simple form);
//! - [`uuid_id!`](crate::uuid_id): a UUID-backed id type that reads by that rule, writes
//!   lowercase and hyphenated, and (de)serializes as that text.
//!
//! Each side keeps its own refusal (the broker's `*_ID_INPUT`, the console's `NOT_FOUND`),
//! which is wire; the rule deciding what is refused is this one.

pub use uuid::Uuid;

#[doc(hidden)]
pub use serde as __serde;

/// The longest session id, in characters.
pub const SESSION_ID_MAX_CHARS: usize = 128;

/// Characters a session id may not hold besides whitespace and control characters: `/`, `?`
/// and `#` would change a path that names it, the others end a reference in text.
pub const SESSION_ID_FORBIDDEN: &str = "/?#<>\"'`[]\\|";

/// Whether `s` is a session id: 1 to 128 characters, none of them whitespace, a control
/// character or one of [`SESSION_ID_FORBIDDEN`].
pub fn is_session_id(s: &str) -> bool {
    let mut n = 0usize;
    for c in s.chars() {
        n += 1;
        if n > SESSION_ID_MAX_CHARS
            || c.is_whitespace()
            || c.is_control()
            || SESSION_ID_FORBIDDEN.contains(c)
        {
            return false;
        }
    }
    n > 0
}

/// The UUID `s` is written as, or `None`: only the 36-character hyphenated form, in any case.
pub fn parse_uuid(s: &str) -> Option<Uuid> {
    // Of the forms the `uuid` crate reads, only the hyphenated one is 36 bytes long.
    if s.len() != 36 {
        return None;
    }
    Uuid::try_parse(s).ok()
}

/// `s` written as an id is written (lowercase, hyphenated), if [`parse_uuid`] reads it.
pub fn uuid_text(s: &str) -> Option<String> {
    parse_uuid(s).map(|u| u.hyphenated().to_string())
}

/// A UUID-backed id type: `uuid_id!(/// doc \n Name, "what")` defines `Name(pub Uuid)` with
///
/// - `Name::read(s) -> Option<Name>` by [`parse_uuid`] (each side wraps it in its refusal);
/// - `Name::from_random(bytes)`, a version-4 id from 16 random bytes;
/// - `Display`, and equality with `str`/`String`, in the written form (lowercase, hyphenated);
/// - serde as that text, reading by the same rule (`"not a <what> id"` otherwise).
#[macro_export]
macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub struct $name(pub $crate::ids::Uuid);

        impl $name {
            /// The id `s` is written as, or `None` (the shared UUID rule).
            pub fn read(s: &str) -> Option<Self> {
                $crate::ids::parse_uuid(s).map(Self)
            }

            /// A fresh id from the given randomness.
            pub fn from_random(bytes: [u8; 16]) -> Self {
                Self($crate::ids::__Builder::from_random_bytes(bytes).into_uuid())
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                ::std::fmt::Display::fmt(&self.0.hyphenated(), f)
            }
        }

        /// An id equals the text it is written as (lowercase, hyphenated), and no other.
        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0
                    .hyphenated()
                    .encode_lower(&mut $crate::ids::Uuid::encode_buffer())
                    == other
            }
        }

        impl PartialEq<String> for $name {
            fn eq(&self, other: &String) -> bool {
                *self == *other.as_str()
            }
        }

        impl PartialEq<$name> for String {
            fn eq(&self, other: &$name) -> bool {
                *other == *self.as_str()
            }
        }

        impl $crate::ids::__serde::Serialize for $name {
            fn serialize<S: $crate::ids::__serde::Serializer>(
                &self,
                s: S,
            ) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> $crate::ids::__serde::Deserialize<'de> for $name {
            fn deserialize<D: $crate::ids::__serde::Deserializer<'de>>(
                d: D,
            ) -> Result<Self, D::Error> {
                let s = <::std::string::String as $crate::ids::__serde::Deserialize>::deserialize(d)?;
                Self::read(&s).ok_or_else(|| {
                    <D::Error as $crate::ids::__serde::de::Error>::custom(concat!(
                        "not a ", $what, " id"
                    ))
                })
            }
        }
    };
}

#[doc(hidden)]
pub use uuid::Builder as __Builder;

#[cfg(test)]
mod tests {
    use super::*;

    const LOWER: &str = "67e55044-10b1-426f-9247-bb680e5fe0c8";

    /// Every session-id case: the string and whether the rule takes it.
    fn session_table() -> Vec<(String, bool)> {
        let mut t: Vec<(String, bool)> = vec![
            ("sess-1.a_b:c".into(), true),
            ("x".into(), true),
            ("é".into(), true),
            ("日本~!@$%^&*()=+,;".into(), true),
            (LOWER.into(), true),
            ("x".repeat(128), true),
            ("é".repeat(128), true),
            (String::new(), false),
            ("x".repeat(129), false),
            ("é".repeat(129), false),
            ("a b".into(), false),
            ("a\tb".into(), false),
            ("a\nb".into(), false),
            ("a\u{7}b".into(), false),
            ("a\u{7f}b".into(), false),
            ("a\u{a0}b".into(), false),
            ("a\u{2028}b".into(), false),
        ];
        t.extend(
            SESSION_ID_FORBIDDEN
                .chars()
                .map(|c| (format!("a{c}b"), false)),
        );
        t
    }

    #[test]
    fn session_ids_by_the_table() {
        for (s, ok) in session_table() {
            assert_eq!(is_session_id(&s), ok, "{s:?}");
        }
        // The forbidden set is the spec's: path characters and the ends of a reference.
        assert_eq!(SESSION_ID_FORBIDDEN.chars().count(), 12);
    }

    /// Every UUID case: the string and the id it names (lowercase), if any.
    fn uuid_table() -> Vec<(String, Option<&'static str>)> {
        vec![
            (LOWER.into(), Some(LOWER)),
            (LOWER.to_uppercase(), Some(LOWER)),
            ("67E55044-10b1-426F-9247-bb680e5fe0c8".into(), Some(LOWER)),
            (
                "00000000-0000-0000-0000-000000000000".into(),
                Some("00000000-0000-0000-0000-000000000000"),
            ),
            (String::new(), None),
            ("x".into(), None),
            (LOWER.replace('-', ""), None),
            (format!("{{{LOWER}}}"), None),
            (format!("urn:uuid:{LOWER}"), None),
            (LOWER[..35].into(), None),
            (format!("{LOWER}0"), None),
            (format!(" {}", &LOWER[1..]), None),
            (LOWER.replace('-', "_"), None),
            ("67e55044-10b1-426f-9247-bb680e5fe0cg".into(), None),
            ("67e5504410b1-426f-9247-bb680e5fe0c8-".into(), None),
            ("../etc/passwd/../../../../../../aaaa".into(), None),
            ("é7e55044-10b1-426f-9247-bb680e5fe0c".into(), None),
        ]
    }

    #[test]
    fn uuids_by_the_table() {
        for (s, want) in uuid_table() {
            assert_eq!(
                parse_uuid(&s)
                    .map(|u| u.hyphenated().to_string())
                    .as_deref(),
                want,
                "{s:?}"
            );
            assert_eq!(uuid_text(&s).as_deref(), want, "{s:?}");
        }
    }

    crate::uuid_id!(
        /// A test id.
        ThingId,
        "thing"
    );

    #[test]
    fn the_macro_reads_writes_and_serializes_by_the_rule() {
        for (s, want) in uuid_table() {
            let id = ThingId::read(&s);
            assert_eq!(id.map(|i| i.to_string()).as_deref(), want, "{s:?}");
            let json = serde_json::to_string(&s).unwrap_or_default();
            let de = serde_json::from_str::<ThingId>(&json);
            assert_eq!(de.as_ref().ok(), id.as_ref(), "{s:?}");
            if let Err(e) = de {
                assert!(e.to_string().contains("not a thing id"), "{e}");
            }
            if let Some(id) = id {
                let written = want.unwrap_or_default();
                assert_eq!(
                    serde_json::to_string(&id).ok(),
                    Some(format!("\"{written}\""))
                );
                assert!(id == *written);
                assert_eq!(id == s, want == Some(s.as_str()), "{s:?}");
            }
        }
        let fresh = ThingId::from_random([7; 16]);
        assert_eq!(fresh.0.get_version_num(), 4);
        assert_eq!(ThingId::read(&fresh.to_string()), Some(fresh));
    }
}
