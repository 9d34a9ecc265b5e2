//! Console refs (protocol §5 "Console ref") and a document's outgoing references: every
//! `countersign://…` link, image or autolink, with the block it appears in.

use serde::Serialize;

/// The scheme of a console ref, `countersign://`.
pub const SCHEME: &str = "countersign://";

/// What a console ref names. Ids are as written in the ref except UUIDs, which are
/// lower-cased (protocol §5: read in any case).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RefTarget {
    Issue { key: String },
    Project { key: String },
    Artifact { id: String },
    Ask { id: String },
    Comment { id: String },
    Message { id: String },
    AgentArtifact { session: String, slug: String },
}

impl RefTarget {
    /// An artifact (a console artifact or an agent conversation's).
    pub fn is_artifact(&self) -> bool {
        matches!(
            self,
            RefTarget::Artifact { .. } | RefTarget::AgentArtifact { .. }
        )
    }

    /// The ref written canonically: `countersign://issue/KEY`, ids lower-cased.
    pub fn to_url(&self) -> String {
        match self {
            RefTarget::Issue { key } => format!("{SCHEME}issue/{key}"),
            RefTarget::Project { key } => format!("{SCHEME}project/{key}"),
            RefTarget::Artifact { id } => format!("{SCHEME}artifact/{id}"),
            RefTarget::Ask { id } => format!("{SCHEME}ask/{id}"),
            RefTarget::Comment { id } => format!("{SCHEME}comment/{id}"),
            RefTarget::Message { id } => format!("{SCHEME}message/{id}"),
            RefTarget::AgentArtifact { session, slug } => {
                format!("{SCHEME}agent/{session}/artifact/{slug}")
            }
        }
    }
}

/// How a document refers: a link (or autolink), or an embed (an image).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RefKind {
    Link,
    Embed,
}

/// One outgoing reference: the block it appears in (the innermost), what it names, how.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct OutgoingRef {
    pub block: String,
    pub to: String,
    pub target: RefTarget,
    pub kind: RefKind,
}

fn project_key(s: &str) -> bool {
    let b = s.as_bytes();
    (2..=10).contains(&b.len())
        && b[0].is_ascii_uppercase()
        && b[1..]
            .iter()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

fn issue_key(s: &str) -> bool {
    let Some((project, n)) = s.rsplit_once('-') else {
        return false;
    };
    project_key(project)
        && !n.is_empty()
        && !n.starts_with('0')
        && n.bytes().all(|c| c.is_ascii_digit())
}

/// A ref's UUID: the console's one rule ([`crate::ids::uuid_id`]), written hyphenated (a ref
/// is text a person reads).
fn uuid(s: &str) -> Option<String> {
    crate::ids::uuid_id(s)
}

fn session_id(s: &str) -> bool {
    crate::ids::is_session_id(s)
}

fn slug(s: &str) -> bool {
    s.len() <= 64
        && !s.is_empty()
        && s.split('-').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// Reads a console ref; None for any other URL or a malformed ref.
pub fn parse_ref(url: &str) -> Option<RefTarget> {
    let rest = url
        .get(..SCHEME.len())
        .filter(|s| s.eq_ignore_ascii_case(SCHEME))?;
    let rest = url.get(rest.len()..)?;
    let parts: Vec<&str> = rest.split('/').collect();
    match parts.as_slice() {
        ["issue", key] if issue_key(key) => Some(RefTarget::Issue {
            key: (*key).to_owned(),
        }),
        ["project", key] if project_key(key) => Some(RefTarget::Project {
            key: (*key).to_owned(),
        }),
        ["artifact", id] => uuid(id).map(|id| RefTarget::Artifact { id }),
        ["ask", id] => uuid(id).map(|id| RefTarget::Ask { id }),
        ["comment", id] => uuid(id).map(|id| RefTarget::Comment { id }),
        ["message", id] => uuid(id).map(|id| RefTarget::Message { id }),
        ["agent", session, "artifact", s] if session_id(session) && slug(s) => {
            Some(RefTarget::AgentArtifact {
                session: (*session).to_owned(),
                slug: (*s).to_owned(),
            })
        }
        _ => None,
    }
}
