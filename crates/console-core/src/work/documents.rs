//! The records and storage of artifacts (issue 12): documents (typed-block markdown), files and
//! images, their versions, the reference graph's edges, and the documents' full-text index; one
//! trait ([`DocumentTx`]), joined into [`crate::work::WorkTx`] with the others.
//!
//! An artifact belongs to one scope: an issue, a project, or an agent session's conversation.
//! Its current content is, for a document, a [`Snapshot`] (canonical markdown and block ids)
//! and the [`LogEntry`]s of the edits since (so an edit of a large document writes what it
//! changed, not the whole document); for a file or an image, its latest version's bytes.
//! Versions are numbered from 1 per artifact and never change.

use async_trait::async_trait;
use countersign_common::storage::StorageError;
use serde::Serialize;

use crate::clock::Time;
use crate::ids::{ArtifactId, SessionId};
use crate::work::model::{Actor, Event, EventPage, Hit, IssueKey, ProjectKey};

/// What an artifact is: a markdown document, an image (its bytes are PNG, JPEG, GIF or WebP),
/// or any other file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactKind {
    Document,
    Image,
    File,
}

impl ArtifactKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ArtifactKind::Document => "document",
            ArtifactKind::Image => "image",
            ArtifactKind::File => "file",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "document" => Some(ArtifactKind::Document),
            "image" => Some(ArtifactKind::Image),
            "file" => Some(ArtifactKind::File),
            _ => None,
        }
    }
}

/// Where an artifact lives; slugs and filenames are unique within one.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Scope {
    Issue(IssueKey),
    Project(ProjectKey),
    /// An agent session's conversation (files and images only; no events).
    Agent(SessionId),
}

impl Scope {
    /// The scope as one stored text: `issue:KEY`, `project:KEY`, `agent:SESSION`.
    pub fn key(&self) -> String {
        match self {
            Scope::Issue(k) => format!("issue:{k}"),
            Scope::Project(k) => format!("project:{k}"),
            Scope::Agent(s) => format!("agent:{s}"),
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        let (kind, rest) = s.split_once(':')?;
        match kind {
            "issue" => IssueKey::parse(rest).map(Scope::Issue),
            "project" => ProjectKey::parse(rest).map(Scope::Project),
            "agent" => SessionId::parse(rest).map(Scope::Agent),
            _ => None,
        }
    }

    /// The issue, when the scope is one.
    pub fn issue(&self) -> Option<&IssueKey> {
        match self {
            Scope::Issue(k) => Some(k),
            _ => None,
        }
    }

    /// The project the scope belongs to (an issue's project), if any.
    pub fn project(&self) -> Option<ProjectKey> {
        match self {
            Scope::Issue(k) => Some(k.project()),
            Scope::Project(p) => Some(p.clone()),
            Scope::Agent(_) => None,
        }
    }

    /// The agent session, when the scope is a conversation.
    pub fn session(&self) -> Option<&SessionId> {
        match self {
            Scope::Agent(s) => Some(s),
            _ => None,
        }
    }
}

/// How a version came to be: a name given to it, or the content settling (no edit for five
/// minutes, an upload, an approval request).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum VersionKind {
    Named,
    Settled,
}

impl VersionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            VersionKind::Named => "named",
            VersionKind::Settled => "settled",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "named" => Some(VersionKind::Named),
            "settled" => Some(VersionKind::Settled),
            _ => None,
        }
    }
}

/// `{number, name, kind}`: a version as the metadata names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionRef {
    pub number: i64,
    pub name: Option<String>,
    pub kind: VersionKind,
}

/// An artifact as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    pub id: ArtifactId,
    pub scope: Scope,
    pub slug: String,
    pub filename: String,
    pub kind: ArtifactKind,
    /// A document's is `text/markdown`; an image's the type its bytes are; a file's the type
    /// declared at upload.
    pub content_type: String,
    /// Bytes of the current content.
    pub size: i64,
    /// Lowercase hex SHA-256: of a document's canonical markdown, of a file's bytes.
    pub token: String,
    /// The sequence of its last event (its own log; 0 for an agent conversation's artifacts,
    /// which append none).
    pub sequence: i64,
    /// The latest version, if any.
    pub version: Option<VersionRef>,
    /// Whether the current content is the latest version's (nothing waits to settle).
    pub settled: bool,
    /// When the content last changed, and who changed it: what settling reads.
    pub changed_at: Time,
    pub changed_by: Actor,
    pub created_by: Actor,
    pub created_at: Time,
    pub updated_at: Time,
    /// A document's `(done, total)` task-list items, nested lists included (the issue's
    /// progress reads them).
    pub tasks: (i64, i64),
    /// A document's last edit-log entry number, and how many entries follow its snapshot.
    pub log_entry: i64,
    pub log_len: i64,
}

/// A document's snapshot: canonical markdown and the id of each block, in the engine's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    pub markdown: String,
    pub block_ids: Vec<String>,
}

/// One edit made after a document's snapshot: the splice it made to the canonical markdown
/// (`[start, end)` became `text`: what the markdown is, with no engine), the ops and the block
/// ids the engine took for them (what replays the edit, ids included), and the token after it
/// (what checks the replay).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub entry: i64,
    pub start: i64,
    pub end: i64,
    pub text: String,
    /// The ops as JSON.
    pub ops: String,
    pub ids: Vec<String>,
    pub token: String,
}

/// A document as stored: its snapshot and the edits since, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredDocument {
    pub snapshot: Snapshot,
    pub log: Vec<LogEntry>,
}

impl StoredDocument {
    /// The latest saved markdown: the snapshot with every logged splice applied in order (no
    /// engine needed, so it reads even when the engine cannot load the document).
    pub fn markdown(&self) -> String {
        let mut md = self.snapshot.markdown.clone();
        for e in &self.log {
            let (s, t) = (e.start as usize, e.end as usize);
            if s <= t && t <= md.len() && md.is_char_boundary(s) && md.is_char_boundary(t) {
                md.replace_range(s..t, &e.text);
            }
        }
        md
    }
}

/// The splice that turns `old` into `new`: `(start, end, text)` with `old[start..end]`
/// replaced by `text`, the longest common prefix and suffix kept (on character boundaries).
pub fn splice(old: &str, new: &str) -> (usize, usize, String) {
    let (a, b) = (old.as_bytes(), new.as_bytes());
    let n = a.len().min(b.len());
    let mut p = 0;
    while p + 64 <= n && a[p..p + 64] == b[p..p + 64] {
        p += 64;
    }
    while p < n && a[p] == b[p] {
        p += 1;
    }
    while !old.is_char_boundary(p) {
        p -= 1;
    }
    let room = n - p;
    let mut s = 0;
    while s + 64 <= room && a[a.len() - s - 64..a.len() - s] == b[b.len() - s - 64..b.len() - s] {
        s += 64;
    }
    while s < room && a[a.len() - s - 1] == b[b.len() - s - 1] {
        s += 1;
    }
    while !old.is_char_boundary(a.len() - s) || !new.is_char_boundary(b.len() - s) {
        s -= 1;
    }
    (p, a.len() - s, new[p..b.len() - s].to_owned())
}

/// A version as stored (without its content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Version {
    pub number: i64,
    pub name: Option<String>,
    pub kind: VersionKind,
    pub token: String,
    /// For a file or image, the type its bytes were served as (sniffed at upload).
    pub content_type: String,
    pub size: i64,
    pub by: Actor,
    pub created_at: Time,
}

/// A version's content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    Markdown(String),
    Bytes(Vec<u8>),
}

/// How an edge of the reference graph refers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EdgeKind {
    Link,
    Mention,
    Embed,
}

impl EdgeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EdgeKind::Link => "link",
            EdgeKind::Mention => "mention",
            EdgeKind::Embed => "embed",
        }
    }

    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "link" => Some(EdgeKind::Link),
            "mention" => Some(EdgeKind::Mention),
            "embed" => Some(EdgeKind::Embed),
            _ => None,
        }
    }
}

/// One edge of the reference graph: from a node (a console ref, with the block it is in) to
/// another (a console ref, with a block when it names one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Edge {
    /// The source's console ref (`countersign://artifact/<id>`, …) without a fragment.
    pub from: String,
    /// The block of the source the reference is in; empty for none.
    pub from_block: String,
    /// The issue the source belongs to (an issue's document), for the issue's references.
    pub from_issue: Option<IssueKey>,
    /// The target's console ref without a fragment.
    pub to: String,
    /// The target's block, when the reference names one (`#<block id>`); empty for none.
    pub to_block: String,
    pub kind: EdgeKind,
    pub at: Time,
    /// The event that made it.
    pub event_id: i64,
}

impl Edge {
    /// Whether two edges say the same (where, to what, how), whenever they were made.
    pub fn same(&self, other: &Edge) -> bool {
        self.from == other.from
            && self.from_block == other.from_block
            && self.to == other.to
            && self.to_block == other.to_block
            && self.kind == other.kind
    }
}

/// Which edges to list: those to a node or from one (a console ref without a fragment), of one
/// kind, made by an event above `since`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EdgeQuery {
    pub to: Option<String>,
    pub from: Option<String>,
    pub kind: Option<EdgeKind>,
    pub since: Option<i64>,
}

/// An issue's primary document (its earliest markdown document): what the issue answer names
/// and the task counts its progress reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrimaryDocument {
    pub id: ArtifactId,
    pub slug: String,
    pub tasks: (i64, i64),
}

/// Storage of artifacts, their versions, the reference graph and the documents' index.
#[async_trait]
pub trait DocumentTx: Send {
    /// Adds an artifact (its slug and filename are free in its scope: the caller checked in
    /// this transaction).
    async fn insert_artifact(&mut self, a: &Artifact) -> Result<(), StorageError>;
    /// Writes an artifact's changed fields back.
    async fn update_artifact(&mut self, a: &Artifact) -> Result<(), StorageError>;
    /// The artifact; in a write transaction its row is locked until commit (PostgreSQL's
    /// `FOR UPDATE`; SQLite's write transactions are serial).
    async fn artifact(&mut self, id: ArtifactId) -> Result<Option<Artifact>, StorageError>;
    /// The artifact of `scope` with this slug.
    async fn artifact_by_slug(
        &mut self,
        scope: &Scope,
        slug: &str,
    ) -> Result<Option<Artifact>, StorageError>;
    /// The artifacts of `scope` carrying this filename (at most one is kept per filename; a
    /// list, so that a caller tells none from several).
    async fn artifacts_by_filename(
        &mut self,
        scope: &Scope,
        filename: &str,
    ) -> Result<Vec<Artifact>, StorageError>;
    /// Every artifact of `scope`, oldest first.
    async fn artifacts(&mut self, scope: &Scope) -> Result<Vec<Artifact>, StorageError>;

    /// A document's snapshot and the edit-log entries after it.
    async fn document(&mut self, id: ArtifactId) -> Result<Option<StoredDocument>, StorageError>;
    /// Sets a document's snapshot; the edit log before it goes.
    async fn put_snapshot(&mut self, id: ArtifactId, s: &Snapshot) -> Result<(), StorageError>;
    /// Appends an entry to a document's edit log.
    async fn append_log(&mut self, id: ArtifactId, e: &LogEntry) -> Result<(), StorageError>;

    async fn insert_version(
        &mut self,
        artifact: ArtifactId,
        v: &Version,
        content: &Content,
    ) -> Result<(), StorageError>;
    /// Gives a version its name (it becomes `named`).
    async fn name_version(
        &mut self,
        artifact: ArtifactId,
        number: i64,
        name: &str,
    ) -> Result<(), StorageError>;
    /// One version with its content.
    async fn version(
        &mut self,
        artifact: ArtifactId,
        number: i64,
    ) -> Result<Option<(Version, Content)>, StorageError>;
    /// Every version of an artifact, by number (without content).
    async fn versions(&mut self, artifact: ArtifactId) -> Result<Vec<Version>, StorageError>;

    /// A page of a document's event log (events with its sequence).
    async fn document_events(
        &mut self,
        artifact: ArtifactId,
        page: &EventPage,
    ) -> Result<Vec<Event>, StorageError>;
    /// Sessions subscribed to a document: each that acted there since its last unsubscribe,
    /// with the time of its first such event; by that time.
    async fn document_subscribers(
        &mut self,
        artifact: ArtifactId,
    ) -> Result<Vec<(SessionId, Time)>, StorageError>;
    /// Unsubscribes a session from a document: its events up to now no longer subscribe it.
    async fn document_unsubscribe(
        &mut self,
        artifact: ArtifactId,
        session: &SessionId,
    ) -> Result<(), StorageError>;

    /// Sets the indexed text of some of an artifact's parts (a block id, or `""` for its
    /// filename), and removes the parts named in `removed`.
    async fn index_text(
        &mut self,
        artifact: ArtifactId,
        parts: &[(String, String)],
        removed: &[String],
    ) -> Result<(), StorageError>;
    /// Removes every indexed part of an artifact.
    async fn clear_text(&mut self, artifact: ArtifactId) -> Result<(), StorageError>;
    /// The issue and project artifacts whose indexed parts hold every one of `words` between
    /// them (with `any`, one at least), within `project`, best first, at most `limit`, and how
    /// many match in all. A hit's snippet is from its best part.
    async fn search_documents(
        &mut self,
        words: &[String],
        any: bool,
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError>;

    /// The edges from a node, those in `blocks` only when given.
    async fn edges_from(
        &mut self,
        from: &str,
        blocks: Option<&[String]>,
    ) -> Result<Vec<Edge>, StorageError>;
    async fn insert_edge(&mut self, e: &Edge) -> Result<(), StorageError>;
    async fn delete_edge(&mut self, e: &Edge) -> Result<(), StorageError>;
    /// The edges a query selects, oldest first.
    async fn edges(&mut self, q: &EdgeQuery) -> Result<Vec<Edge>, StorageError>;
    /// An issue's edges: those to it, and those from it or from its artifacts.
    async fn issue_edges(&mut self, key: &IssueKey)
    -> Result<(Vec<Edge>, Vec<Edge>), StorageError>;
    /// Per block of a document: `(block, incoming, outgoing)` edge counts, for blocks with any.
    async fn block_ref_counts(
        &mut self,
        node: &str,
    ) -> Result<Vec<(String, i64, i64)>, StorageError>;

    /// The primary document of each of `issues` that has one.
    async fn primary_documents(
        &mut self,
        issues: &[IssueKey],
    ) -> Result<Vec<(IssueKey, PrimaryDocument)>, StorageError>;
}

// ----- the answers (protocol §6.2) -----

/// Document metadata (protocol §6.2): what `GET /artifacts/{id}` answers and the `document.*`
/// events carry. An agent conversation's artifact also names its session, `ref_key` and
/// `address` (spec, "Agent conversation artifact").
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArtifactView {
    pub id: ArtifactId,
    pub slug: String,
    pub filename: String,
    pub kind: ArtifactKind,
    pub content_type: String,
    pub size: i64,
    pub issue: Option<IssueKey>,
    pub project: Option<ProjectKey>,
    pub token: String,
    pub version: Option<VersionRef>,
    #[serde(with = "crate::work::model::rfc3339")]
    pub created_at: Time,
    #[serde(with = "crate::work::model::rfc3339")]
    pub updated_at: Time,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub session: Option<SessionId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ref_key: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

impl ArtifactView {
    pub fn of(a: &Artifact) -> Self {
        let session = a.scope.session().cloned();
        Self {
            id: a.id,
            slug: a.slug.clone(),
            filename: a.filename.clone(),
            kind: a.kind,
            content_type: a.content_type.clone(),
            size: a.size,
            issue: a.scope.issue().cloned(),
            project: a.scope.project(),
            token: a.token.clone(),
            version: a.version.clone(),
            created_at: a.created_at,
            updated_at: a.updated_at,
            ref_key: session.as_ref().map(|s| format!("agent/{s}/{}", a.slug)),
            address: session
                .as_ref()
                .map(|s| format!("countersign://agent/{s}/artifact/{}", a.slug)),
            session,
        }
    }
}

/// A version as lists and events name it (a document's read adds its markdown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionInfo {
    pub number: i64,
    pub name: Option<String>,
    pub kind: VersionKind,
    pub token: String,
    pub content_type: String,
    pub size: i64,
    pub by: Actor,
    #[serde(with = "crate::work::model::rfc3339")]
    pub created_at: Time,
}

impl VersionInfo {
    pub fn of(v: &Version) -> Self {
        Self {
            number: v.number,
            name: v.name.clone(),
            kind: v.kind,
            token: v.token.clone(),
            content_type: v.content_type.clone(),
            size: v.size,
            by: v.by.clone(),
            created_at: v.created_at,
        }
    }
}

/// A document's version as its read route answers it: `{number, name, kind, token, markdown,
/// by, created_at}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DocumentVersion {
    pub number: i64,
    pub name: Option<String>,
    pub kind: VersionKind,
    pub token: String,
    pub markdown: String,
    pub by: Actor,
    #[serde(with = "crate::work::model::rfc3339")]
    pub created_at: Time,
}

/// An edge on the wire: `{from, to, kind, at, event_id}`, a block named as the ref's fragment
/// (`countersign://artifact/<id>#<block id>`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EdgeView {
    pub from: String,
    pub to: String,
    pub kind: EdgeKind,
    #[serde(with = "crate::work::model::rfc3339")]
    pub at: Time,
    pub event_id: i64,
}

impl EdgeView {
    pub fn of(e: &Edge) -> Self {
        let with = |r: &str, b: &str| {
            if b.is_empty() {
                r.to_owned()
            } else {
                format!("{r}#{b}")
            }
        };
        Self {
            from: with(&e.from, &e.from_block),
            to: with(&e.to, &e.to_block),
            kind: e.kind,
            at: e.at,
            event_id: e.event_id,
        }
    }
}

/// `{incoming, outgoing}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct References {
    pub incoming: Vec<EdgeView>,
    pub outgoing: Vec<EdgeView>,
}

// ----- the input rules (protocol §5, §6.2) -----

/// Slugs are at most this long.
pub const SLUG_MAX: usize = 64;

/// A slug: `^[a-z0-9]+(-[a-z0-9]+)*$`, at most 64 characters.
pub fn is_slug(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= SLUG_MAX
        && s.split('-').all(|p| {
            !p.is_empty()
                && p.bytes()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        })
}

/// The slug a filename gives (protocol §5): lower-cased, its extension dropped, every other
/// character than `a-z0-9` a `-` (runs of them one), at most 64 characters; `file` when
/// nothing is left.
pub fn slug_of(filename: &str) -> String {
    let stem = match filename.rsplit_once('.') {
        Some((stem, ext)) if !stem.is_empty() && !ext.is_empty() => stem,
        _ => filename,
    };
    let mut out = String::new();
    for c in stem.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    let mut out = fit(&out, SLUG_MAX);
    if out.is_empty() {
        out.push_str("file");
    }
    out
}

/// `base` with the collision suffix `-n` (n ≥ 2), cut so the whole fits in 64 characters.
pub fn slug_with_suffix(base: &str, n: u32) -> String {
    let suffix = format!("-{n}");
    format!("{}{suffix}", fit(base, SLUG_MAX - suffix.len()))
}

/// At most `max` characters of a slug, with no `-` left at the end.
fn fit(s: &str, max: usize) -> String {
    let cut: String = s.chars().take(max).collect();
    cut.trim_end_matches('-').to_owned()
}

/// A filename: 1 to 255 characters, none a control character, `/` or `\`, not all spaces.
pub fn is_filename(s: &str) -> bool {
    let n = s.chars().count();
    (1..=255).contains(&n)
        && !s.trim().is_empty()
        && !s.chars().any(|c| c.is_control() || c == '/' || c == '\\')
}

pub use crate::ids::is_session_id;

/// A declared media type (RFC 9110 §8.3.1: `type/subtype` of token characters, optional
/// parameters), visible ASCII only, at most 255 characters: answers it with its essence
/// lower-cased, or `None`.
pub fn media_type(s: &str) -> Option<String> {
    let s = s.trim();
    if s.is_empty() || s.len() > 255 || !s.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return None;
    }
    let (essence, params) = match s.split_once(';') {
        Some((e, p)) => (e.trim(), Some(p)),
        None => (s, None),
    };
    let token = |t: &str| {
        !t.is_empty()
            && t.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    let (ty, sub) = essence.split_once('/')?;
    if !token(ty) || !token(sub) {
        return None;
    }
    let essence = essence.to_ascii_lowercase();
    Some(match params {
        Some(p) => format!("{essence};{p}"),
        None => essence,
    })
}

/// A media type's essence: `type/subtype`, lower-cased, without parameters.
pub fn essence(media_type: &str) -> String {
    media_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// The image type the bytes are, by the signatures of WHATWG MIME Sniffing §6.1 for PNG, JPEG,
/// GIF and WebP (the only images the console takes as such).
pub fn sniff_image(b: &[u8]) -> Option<&'static str> {
    if b.starts_with(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if b.starts_with(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if b.starts_with(b"GIF87a") || b.starts_with(b"GIF89a") {
        Some("image/gif")
    } else if b.len() >= 14 && &b[..4] == b"RIFF" && &b[8..14] == b"WEBPVP" {
        Some("image/webp")
    } else {
        None
    }
}

/// What uploaded bytes are: an image when their signature says so (under the type they are),
/// else a file under the declared type, except that a declared raster image type the bytes do
/// not bear out becomes `application/octet-stream` (served as its bytes say, never as an image
/// it is not).
pub fn classify(declared: &str, bytes: &[u8]) -> (ArtifactKind, String) {
    if let Some(t) = sniff_image(bytes) {
        return (ArtifactKind::Image, t.to_owned());
    }
    let e = essence(declared);
    if e.starts_with("image/") && e != "image/svg+xml" {
        return (ArtifactKind::File, "application/octet-stream".to_owned());
    }
    (ArtifactKind::File, declared.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_from_filenames() {
        assert_eq!(slug_of("Design Notes.md"), "design-notes");
        assert_eq!(slug_of("README"), "readme");
        assert_eq!(slug_of(".env"), "env");
        assert_eq!(slug_of("a..b.tar.gz"), "a-b-tar");
        assert_eq!(slug_of("Ünïcode plan.md"), "n-code-plan");
        assert_eq!(slug_of("--x--.txt"), "x");
        assert_eq!(slug_of("日本.md"), "file");
        let long = slug_of(&format!("{}.md", "ab-".repeat(40)));
        assert!(long.len() <= 64 && is_slug(&long), "{long}");
        let s = slug_with_suffix(&"x".repeat(64), 12);
        assert_eq!(s.len(), 64);
        assert!(s.ends_with("-12") && is_slug(&s));
        for good in ["a", "a-b", "a1-2b", &"z".repeat(64)] {
            assert!(is_slug(good), "{good}");
        }
        for bad in ["", "A", "a--b", "-a", "a-", "a_b", &"z".repeat(65)] {
            assert!(!is_slug(bad), "{bad}");
        }
    }

    #[test]
    fn splices_and_the_markdown_they_rebuild() {
        let old = "# Title\n\nSome text é here.\n";
        for new in [
            "# Title\n\nSome other text é here.\n",
            "# Title\n\nSome text ê here.\n",
            "",
            "# Title\n\nSome text é here.\n\nMore.\n",
            "X# Title\n\nSome text é here.\n",
            old,
        ] {
            let (s, e, t) = splice(old, new);
            let mut m = old.to_owned();
            m.replace_range(s..e, &t);
            assert_eq!(m, new);
        }
        let long_a = "a".repeat(300) + "b" + &"c".repeat(300);
        let long_b = "a".repeat(300) + "xy" + &"c".repeat(300);
        assert_eq!(splice(&long_a, &long_b), (300, 301, "xy".to_owned()));
        let stored = StoredDocument {
            snapshot: Snapshot {
                markdown: "abc".into(),
                block_ids: vec![],
            },
            log: vec![
                LogEntry {
                    entry: 1,
                    start: 1,
                    end: 2,
                    text: "XY".into(),
                    ops: "[]".into(),
                    ids: vec![],
                    token: String::new(),
                },
                LogEntry {
                    entry: 2,
                    start: 0,
                    end: 0,
                    text: "0".into(),
                    ops: "[]".into(),
                    ids: vec![],
                    token: String::new(),
                },
            ],
        };
        assert_eq!(stored.markdown(), "0aXYc");
    }

    #[test]
    fn media_types_and_sniffing() {
        assert_eq!(
            media_type("Text/Markdown; charset=utf-8").as_deref(),
            Some("text/markdown; charset=utf-8")
        );
        assert_eq!(essence("Text/Markdown; charset=utf-8"), "text/markdown");
        for bad in [
            "",
            "text",
            "text/",
            "/x",
            "te xt/plain",
            "text/pl\rain",
            "tëxt/plain",
        ] {
            assert!(media_type(bad).is_none(), "{bad:?}");
        }
        assert_eq!(sniff_image(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(sniff_image(b"\xff\xd8\xff\xe0"), Some("image/jpeg"));
        assert_eq!(sniff_image(b"GIF89a.."), Some("image/gif"));
        assert_eq!(sniff_image(b"RIFF\x10\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(sniff_image(b"RIFF\x10\0\0\0WAVEfmt "), None);
        assert_eq!(sniff_image(b"<svg><script>alert(1)</script></svg>"), None);
        assert_eq!(
            classify("text/plain", b"\x89PNG\r\n\x1a\n"),
            (ArtifactKind::Image, "image/png".into())
        );
        assert_eq!(
            classify("image/png", b"just text"),
            (ArtifactKind::File, "application/octet-stream".into())
        );
        assert_eq!(
            classify("image/svg+xml", b"<svg/>"),
            (ArtifactKind::File, "image/svg+xml".into())
        );
        assert_eq!(
            classify("text/html", b"<script>"),
            (ArtifactKind::File, "text/html".into())
        );
        assert!(
            is_filename("notes.md")
                && !is_filename("a/b")
                && !is_filename(" ")
                && !is_filename("a\nb")
        );
    }
}
