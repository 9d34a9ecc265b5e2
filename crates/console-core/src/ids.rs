//! Identifiers and validated values. Each id kind is a type that parses once, at the edge (a
//! path, a query, a body's field), by the rules the broker and the launcher helper use too
//! (`countersign_common::ids`): the UUID kinds by
//! [`countersign_common::ids::parse_uuid`] (the 36-character hyphenated
//! form, any case, written lowercase), a session id by [`common_is_session_id`] (protocol
//! §4.1). A value of one of these types is well formed, so the services, the records and the
//! storage take it without checking again.

use std::fmt;

use serde::{Deserialize, Serialize};

use countersign_common::ids::{is_session_id as common_is_session_id, uuid_text};
pub use countersign_common::login::Login;

use crate::error::{Error, ErrorCode};

/// A console id kind: the shared UUID id type ([`countersign_common::uuid_id!`]) with the
/// console's refusal of a malformed one (`NOT_FOUND`: it names nothing).
macro_rules! console_id {
    ($(#[$doc:meta])* $name:ident, $what:literal) => {
        countersign_common::uuid_id!($(#[$doc])* $name, $what);

        impl $name {
            /// The id `s` names, or `None`: it names nothing.
            pub fn parse(s: &str) -> Option<Self> {
                Self::read(s)
            }

            /// The id a path names, or the refusal a malformed one has always had:
            #[doc = concat!("`NOT_FOUND` \"no such ", $what, "\".")]
            pub fn named(s: &str) -> Result<Self, Error> {
                Self::parse(s).ok_or_else(|| {
                    Error::with_message(ErrorCode::NOT_FOUND, concat!("no such ", $what))
                })
            }
        }
    };
}

console_id!(
    /// A document (an artifact) of an issue, a project or an agent.
    ArtifactId,
    "artifact"
);
console_id!(
    /// An ask.
    AskId,
    "ask"
);
console_id!(
    /// A comment, or a comment thread's root.
    CommentId,
    "comment"
);
console_id!(
    /// A message, or a thread's root message.
    MessageId,
    "message"
);
console_id!(
    /// A broadcast.
    BroadcastId,
    "broadcast"
);
console_id!(
    /// A session group.
    SessionGroupId,
    "session group"
);
console_id!(
    /// A personal token's id, shown in lists and taken by revoke.
    TokenId,
    "personal token"
);
console_id!(
    /// A review of a document version.
    ReviewId,
    "review"
);

/// A session id (protocol §4.1): 1 to 128 characters with no whitespace, control character,
/// `/`, `?`, `#` or any of ``<>"'`[]\|``.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(transparent)]
pub struct SessionId(String);

impl SessionId {
    /// The session-id rule, written once: paths, bodies, documents' refs and the HTTP layer all
    /// ask here.
    pub fn is_valid(s: &str) -> bool {
        common_is_session_id(s)
    }

    /// The session id `s` is, or `None`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::is_valid(s).then(|| Self(s.to_owned()))
    }

    /// The session id `s` is, or the refusal a malformed one has always had:
    /// `INVALID_SESSION_ID`.
    pub fn named(s: &str) -> Result<Self, Error> {
        Self::parse(s).ok_or_else(|| ErrorCode::INVALID_SESSION_ID.into())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A session id equals the text it is, and no other.
impl PartialEq<str> for SessionId {
    fn eq(&self, other: &str) -> bool {
        self.0 == other
    }
}

impl PartialEq<&str> for SessionId {
    fn eq(&self, other: &&str) -> bool {
        self.0 == *other
    }
}

impl PartialEq<String> for SessionId {
    fn eq(&self, other: &String) -> bool {
        self.0 == *other
    }
}

impl PartialEq<SessionId> for String {
    fn eq(&self, other: &SessionId) -> bool {
        *self == other.0
    }
}

impl AsRef<str> for SessionId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Its equality, order and hash are its text's, so a `&str` looks it up and lists of them
/// join.
impl std::borrow::Borrow<str> for SessionId {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl<'de> Deserialize<'de> for SessionId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Self::parse(&s).ok_or_else(|| serde::de::Error::custom("not a session id"))
    }
}

/// Whether `s` is a session id: [`SessionId::is_valid`], for a value kept as text (a body's
/// member list, a document's ref).
pub fn is_session_id(s: &str) -> bool {
    SessionId::is_valid(s)
}

/// A UUID id as text, written as the console writes every id (lowercase, hyphenated); `None`:
/// it names nothing. For an id kept as text (a body's or a query's, where its refusal is its
/// own; a document's ref); a path's id takes its type.
pub fn uuid_id(s: &str) -> Option<String> {
    uuid_text(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LOWER: &str = "67e55044-10b1-426f-9247-bb680e5fe0c8";

    /// The forms of one id the shared rule reads: hyphenated, in any case.
    fn forms() -> [String; 3] {
        [
            LOWER.to_owned(),
            LOWER.to_uppercase(),
            "67E55044-10b1-426F-9247-bb680e5fe0c8".to_owned(),
        ]
    }

    /// Forms the `uuid` crate reads that the rule does not (the spec's UUIDs are hyphenated).
    fn other_forms() -> [String; 3] {
        [
            LOWER.replace('-', ""),
            format!("{{{LOWER}}}"),
            format!("urn:uuid:{LOWER}"),
        ]
    }

    macro_rules! uuid_kind {
        ($name:ident, $test:ident, $message:literal) => {
            #[test]
            fn $test() {
                for s in forms() {
                    let id = $name::parse(&s).unwrap_or_else(|| panic!("{s}"));
                    assert_eq!(id.to_string(), LOWER, "{s}");
                    assert_eq!(
                        $name::named(&s).map(|i| i.to_string()).ok(),
                        Some(LOWER.into())
                    );
                    let json = serde_json::to_string(&id).expect("serializes");
                    assert_eq!(json, format!("\"{LOWER}\""));
                    assert_eq!(serde_json::from_str::<$name>(&json).ok(), Some(id));
                    let text = id.to_string();
                    assert!(id == text && text == id && id == *LOWER);
                    assert_eq!(id == s, s == LOWER, "{s}");
                }
                let others = other_forms();
                for bad in [
                    "",
                    "x",
                    "67e55044-10b1-426f-9247-bb680e5fe0c",
                    "../etc",
                    " ",
                ]
                .into_iter()
                .chain(others.iter().map(String::as_str))
                {
                    assert_eq!($name::parse(bad), None, "{bad:?}");
                    let e = $name::named(bad).expect_err("refused");
                    assert_eq!(e.code_str(), "NOT_FOUND");
                    assert_eq!(e.message, $message);
                    assert!(serde_json::from_str::<$name>(&format!("{bad:?}")).is_err());
                }
            }
        };
    }

    uuid_kind!(ArtifactId, artifact_ids, "no such artifact");
    uuid_kind!(AskId, ask_ids, "no such ask");
    uuid_kind!(CommentId, comment_ids, "no such comment");
    uuid_kind!(MessageId, message_ids, "no such message");
    uuid_kind!(BroadcastId, broadcast_ids, "no such broadcast");
    uuid_kind!(SessionGroupId, session_group_ids, "no such session group");
    uuid_kind!(TokenId, token_ids, "no such personal token");
    uuid_kind!(ReviewId, review_ids, "no such review");

    #[test]
    fn uuid_text_is_the_same_rule() {
        for s in forms() {
            assert_eq!(uuid_id(&s).as_deref(), Some(LOWER));
        }
        assert_eq!(uuid_id("nope"), None);
        for s in other_forms() {
            assert_eq!(uuid_id(&s), None, "{s}");
        }
    }

    #[test]
    fn session_ids_follow_the_protocol_rule() {
        for good in ["sess-1.a_b:c", "x", "é", &"x".repeat(128), &"é".repeat(128)] {
            assert!(is_session_id(good), "{good:?}");
            assert_eq!(
                SessionId::parse(good).map(|s| s.to_string()),
                Some(good.to_owned())
            );
            let json = serde_json::to_string(good).expect("serializes");
            let id: SessionId = serde_json::from_str(&json).expect("a session id");
            assert_eq!(id.as_str(), good);
            assert_eq!(serde_json::to_string(&id).ok(), Some(json));
        }
        let long = "x".repeat(129);
        let mut bad: Vec<String> = [
            "", "a b", "a\tb", "a\nb", "a\u{7}b", "a\u{7f}b", "a\u{a0}b", &long,
        ]
        .map(String::from)
        .to_vec();
        bad.extend("/?#<>\"'`[]\\|".chars().map(|c| format!("a{c}b")));
        for b in &bad {
            assert!(!is_session_id(b), "{b:?}");
            assert_eq!(SessionId::parse(b), None, "{b:?}");
            assert_eq!(
                SessionId::named(b).expect_err("refused").code_str(),
                "INVALID_SESSION_ID"
            );
            let json = serde_json::to_string(b).expect("serializes");
            assert!(serde_json::from_str::<SessionId>(&json).is_err());
        }
    }
}
