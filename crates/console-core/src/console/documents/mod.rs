//! Documents, files and images (issue 12) as one service, [`Documents`], reached as
//! [`Console::documents`]: uploads, reads by id or by slug, versions, the document event log,
//! references and backlinks, subscribers; with the document engine ([`crate::doc`]) the
//! blocks, edits and rebuilds of a document.
//!
//! - this module: the inputs and answers, and what every operation shares (the scope a path
//!   names, an artifact settled when due, a new version, writing an artifact back with its
//!   event);
//! - [`uploads`]: uploads, a new artifact or a new version of one;
//! - [`reads`]: an artifact, its versions and text, naming a version, its event log and its
//!   subscribers;
//! - [`references`]: the reference graph (a document's and an issue's references, the
//!   `mention` edges of comments and messages);
//! - [`engine`]: what the engine makes of a document, and loading a stored one;
//! - [`blocks`]: a document's blocks and its page's HTML; [`edits`]: edits and rebuilds;
//! - [`cache`]: what a console keeps of its documents (bounded, per console).
//!
//! **Versions** are numbered from 1 per artifact. An upload is one at once (a file's content
//! changes only by uploads). A document's edits settle into a version when the content has
//! had no edit for five minutes: the console has no timer; whichever read or write of the
//! document first finds its last edit five minutes old writes the version (dated five minutes
//! after that edit, `by` the editor, appending `document.versioned` by the console). Naming
//! (`POST …/versions {name}`) makes a new `named` version of the current content, and an
//! approval request settles the content first ([`Documents::settle_now`]).
//!
//! Every write runs in one transaction (`transact!`, the area's store `tx.documents()`) and
//! appends its `document.*` event (with the document's own sequence) in it; an agent
//! conversation's artifacts append none (spec).

mod blocks;
mod cache;
mod edits;
mod engine;
mod reads;
mod references;
mod uploads;

pub use blocks::{BlockEntry, BlockView, BlocksView, RefCounts, Rendered, block_schema};
pub(crate) use cache::DocumentCaches;
pub use edits::{ChangedBlock, EditAnswer};

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::work::{invalid, not_found};
use super::*;
use crate::doc::{self, Document};
use crate::ids::{ArtifactId, SessionId};
use crate::storage::StorageError;
use crate::work::documents::{
    Artifact, ArtifactKind, ArtifactView, Content, DocumentVersion, Scope, Version, VersionInfo,
    VersionKind, VersionRef,
};
use crate::work::{Actor, Event, EventFacts, IssueKey, NewEvent, ProjectKey, WorkTx};
use engine::{Parsed, part_text, references_of, replay, snapshot_of, tasks_of};

/// How long a document's content goes without an edit before it settles into a version.
pub fn settle_after() -> Duration {
    Duration::minutes(5)
}

/// Version names are at most this many characters (protocol §2).
const VERSION_NAME_MAX: usize = 80;

/// The scope a path names, as given (checked by the operation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At<'a> {
    Issue(&'a str),
    Project(&'a str),
    /// An agent session's conversation.
    Agent(&'a str),
}

/// An upload (protocol §6.2): JSON or one multipart `file` part.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upload {
    pub filename: String,
    pub slug: Option<String>,
    /// As declared (JSON `content_type`, the part's `Content-Type`).
    pub content_type: String,
    pub content: Vec<u8>,
}

/// What reading a version answers: a document's version, or a file's or image's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VersionRead {
    Document(DocumentVersion),
    Bytes {
        bytes: Vec<u8>,
        /// The type the bytes were stored as (sniffed at upload).
        content_type: String,
        filename: String,
        /// An image (PNG, JPEG, GIF or WebP by its bytes): safe to show inline.
        image: bool,
    },
}

/// An agent conversation's artifact with its versions (spec: "file or image with its
/// versions").
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ArtifactWithVersions {
    #[serde(flatten)]
    pub artifact: ArtifactView,
    pub versions: Vec<VersionInfo>,
}

/// A version just named: a document's as its read route answers it, a file's record.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum NamedVersion {
    Document(DocumentVersion),
    File(VersionInfo),
}

impl NamedVersion {
    pub fn number(&self) -> i64 {
        match self {
            NamedVersion::Document(d) => d.number,
            NamedVersion::File(f) => f.number,
        }
    }
}

/// `{markdown, token, version}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TextView {
    pub markdown: String,
    pub token: String,
    pub version: Option<VersionRef>,
}

/// An artifact's console ref.
pub fn artifact_ref(a: &Artifact) -> String {
    match &a.scope {
        Scope::Agent(s) => format!("countersign://agent/{s}/artifact/{}", a.slug),
        _ => format!("countersign://artifact/{}", a.id),
    }
}

/// The console itself, as the actor of what no request did (content settling).
fn console_actor() -> Actor {
    Actor::System {
        name: "console".into(),
    }
}

/// Lowercase hex SHA-256 of bytes: a file's token.
pub fn bytes_token(b: &[u8]) -> String {
    hex::encode(aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, b))
}

fn artifact_input(message: impl Into<String>) -> Error {
    Error::with_message(ErrorCode::ARTIFACT_INPUT, message)
}

/// The documents area's operations over the console they belong to:
/// `console.documents().artifact(id)`. It borrows the console (its storage, clock, entropy,
/// the documents it keeps, and the asks area an upload or an edit writes through in its
/// transaction: an open approval ask follows new content) and holds nothing of its own.
#[derive(Debug, Clone, Copy)]
pub struct Documents<'c> {
    console: &'c Console,
}

impl Console {
    /// The documents area: documents, files and images, their versions, blocks and edits.
    pub fn documents(&self) -> Documents<'_> {
        Documents { console: self }
    }
}

impl Documents<'_> {
    /// A read transaction, seen as the area sees one.
    async fn read(&self) -> Result<Box<dyn WorkTx>, Error> {
        let tx: Box<dyn WorkTx> = self.console.parts.storage.read().await?;
        Ok(tx)
    }

    /// A fresh block id: 12 random bytes, base64url (16 characters of `[A-Za-z0-9_-]`).
    pub(crate) fn new_block_id(&self) -> String {
        clock::random_token::<12>(&*self.console.parts.entropy)
    }

    /// The scope a path names: an issue or project that exists (else 404), or an agent session
    /// id (else INVALID_SESSION_ID).
    async fn scope_in(&self, tx: &mut dyn WorkTx, at: At<'_>) -> Result<Scope, Error> {
        match at {
            At::Issue(k) => {
                let key = IssueKey::parse(k).ok_or_else(|| not_found("issue"))?;
                tx.issues()
                    .issue(&key)
                    .await?
                    .ok_or_else(|| not_found("issue"))?;
                Ok(Scope::Issue(key))
            }
            At::Project(k) => {
                let key = ProjectKey::parse(k).ok_or_else(|| not_found("project"))?;
                tx.projects()
                    .project(&key)
                    .await?
                    .ok_or_else(|| not_found("project"))?;
                Ok(Scope::Project(key))
            }
            At::Agent(s) => Ok(Scope::Agent(SessionId::named(s)?)),
        }
    }

    /// The artifact a `{slug}` segment names in its scope: the one with that slug, else the
    /// one artifact carrying that filename (none or several: 404).
    async fn by_slug_in(
        &self,
        tx: &mut dyn WorkTx,
        scope: &Scope,
        slug: &str,
    ) -> Result<Artifact, Error> {
        if let Some(a) = tx.documents().artifact_by_slug(scope, slug).await? {
            return Ok(a);
        }
        let mut named = tx.documents().artifacts_by_filename(scope, slug).await?;
        match (named.pop(), named.is_empty()) {
            (Some(a), true) => Ok(a),
            _ => Err(not_found("artifact")),
        }
    }

    /// The id of the artifact a scope's `{slug}` names.
    pub async fn resolve_artifact(&self, at: At<'_>, slug: &str) -> Result<ArtifactId, Error> {
        let mut tx = self.read().await?;
        let scope = self.scope_in(&mut *tx, at).await?;
        Ok(self.by_slug_in(&mut *tx, &scope, slug).await?.id)
    }

    /// An artifact by id, its content settled first when it is due (so no read answers
    /// content older than five minutes as unsettled).
    async fn current(&self, id: ArtifactId) -> Result<Artifact, Error> {
        let a = {
            let mut tx = self.read().await?;
            tx.documents()
                .artifact(id)
                .await?
                .ok_or_else(|| not_found("artifact"))?
        };
        if !self.settle_due(&a) {
            return Ok(a);
        }
        transact!(self.console, |tx| self.settled_in(tx, id).await)
    }

    /// An artifact by id in a transaction (locked there when it writes), else 404.
    async fn artifact_in(tx: &mut dyn WorkTx, id: ArtifactId) -> Result<Artifact, Error> {
        tx.documents()
            .artifact(id)
            .await?
            .ok_or_else(|| not_found("artifact"))
    }

    /// An artifact by id in a write transaction, its content settled first when it is due.
    async fn settled_in(&self, tx: &mut dyn WorkTx, id: ArtifactId) -> Result<Artifact, Error> {
        let mut a = Self::artifact_in(tx, id).await?;
        self.settle_if_due(tx, &mut a).await?;
        Ok(a)
    }

    /// Whether a document's content waits to settle and has had no edit for five minutes.
    fn settle_due(&self, a: &Artifact) -> bool {
        a.kind == ArtifactKind::Document
            && !a.settled
            && self.console.now() - a.changed_at >= settle_after()
    }

    /// Settles a document's content into a version when it is due, in the caller's
    /// transaction (a write finds it first, then makes its own change).
    async fn settle_if_due(&self, tx: &mut dyn WorkTx, a: &mut Artifact) -> Result<(), Error> {
        if !self.settle_due(a) {
            return Ok(());
        }
        let at = a.changed_at + settle_after();
        let by = a.changed_by.clone();
        self.new_version(tx, a, None, VersionKind::Settled, &by, at, &console_actor())
            .await?;
        Ok(())
    }

    /// Settles a document's current content into a version now, if any of it is not in one
    /// (what an approval request does before it asks about "the latest version"); answers the
    /// latest version. For the asks' routes, in their transaction.
    pub async fn settle_now(
        &self,
        tx: &mut dyn WorkTx,
        id: ArtifactId,
        actor: &Actor,
    ) -> Result<Option<VersionRef>, Error> {
        let mut a = Self::artifact_in(tx, id).await?;
        if !a.settled {
            let by = a.changed_by.clone();
            self.new_version(
                tx,
                &mut a,
                None,
                VersionKind::Settled,
                &by,
                self.console.now(),
                actor,
            )
            .await?;
        }
        Ok(a.version)
    }

    /// Writes the current content as the next version and appends `document.versioned`.
    #[allow(clippy::too_many_arguments)]
    async fn new_version(
        &self,
        tx: &mut dyn WorkTx,
        a: &mut Artifact,
        name: Option<String>,
        kind: VersionKind,
        by: &Actor,
        at: Time,
        actor: &Actor,
    ) -> Result<(VersionInfo, Option<Event>), Error> {
        let content = match a.kind {
            ArtifactKind::Document => Content::Markdown(self.markdown_of(tx, a).await?),
            ArtifactKind::Image | ArtifactKind::File => {
                let latest = a.version.as_ref().map_or(0, |v| v.number);
                match tx.documents().version(a.id, latest).await? {
                    Some((_, c)) => c,
                    None => {
                        return Err(StorageError::Corrupt("a file without a version".into()).into());
                    }
                }
            }
        };
        let v = Version {
            number: a.version.as_ref().map_or(1, |v| v.number + 1),
            name,
            kind,
            token: a.token.clone(),
            content_type: a.content_type.clone(),
            size: a.size,
            by: by.clone(),
            created_at: at,
        };
        tx.documents().insert_version(a.id, &v, &content).await?;
        a.version = Some(VersionRef {
            number: v.number,
            name: v.name.clone(),
            kind,
        });
        a.settled = true;
        a.updated_at = self.console.now();
        let info = VersionInfo::of(&v);
        let e = self
            .write_back(
                tx,
                a,
                "document.versioned",
                actor,
                &[("version", json!(info))],
            )
            .await?;
        Ok((info, e))
    }

    /// Writes an artifact back with its next sequence and appends its event (the metadata,
    /// plus `extra`); an agent conversation's artifact is written back and appends none.
    async fn write_back(
        &self,
        tx: &mut dyn WorkTx,
        a: &mut Artifact,
        kind: &'static str,
        actor: &Actor,
        extra: &[(&str, Value)],
    ) -> Result<Option<Event>, Error> {
        if matches!(a.scope, Scope::Agent(_)) {
            tx.documents().update_artifact(a).await?;
            return Ok(None);
        }
        a.sequence += 1;
        tx.documents().update_artifact(a).await?;
        Ok(Some(self.append_document(tx, a, kind, actor, extra).await?))
    }

    /// Appends an event of an artifact's log with its current sequence.
    async fn append_document(
        &self,
        tx: &mut dyn WorkTx,
        a: &Artifact,
        kind: &'static str,
        actor: &Actor,
        extra: &[(&str, Value)],
    ) -> Result<Event, Error> {
        let mut data = json!(ArtifactView::of(a));
        for (k, v) in extra {
            data[*k] = v.clone();
        }
        let e = self.artifact_event(a, kind, actor, data);
        Ok(tx.events().append_event(&e, Some(a.sequence)).await?)
    }

    /// An event about artifact `a`, by `actor`, now.
    fn artifact_event(
        &self,
        a: &Artifact,
        kind: &'static str,
        actor: &Actor,
        data: Value,
    ) -> NewEvent {
        NewEvent {
            kind,
            facts: EventFacts {
                at: self.console.now(),
                actor: actor.clone(),
                project: a.scope.project(),
                issue: a.scope.issue().cloned(),
                artifact: Some(a.id),
                session: actor.session().cloned(),
                data,
            },
        }
    }
}

/// Whether text holds a console ref (`countersign:`, any case).
fn has_console_ref(t: &str) -> bool {
    t.as_bytes()
        .windows(12)
        .any(|w| w.eq_ignore_ascii_case(b"countersign:"))
}

fn not_document() -> Error {
    Error::with_message(
        ErrorCode::NOT_FOUND,
        "no such document: this artifact is a file or an image",
    )
}
