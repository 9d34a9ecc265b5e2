//! Documents, files and images (issue 12): uploads, reads by id or by slug, versions, the
//! document event log, references and backlinks, subscribers; with the document engine
//! ([`crate::doc`]) the blocks, edits and rebuilds of a document.
//!
//! **Versions** are numbered from 1 per artifact. An upload is one at once (a file's content
//! changes only by uploads). A document's edits settle into a version when the content has
//! had no edit for five minutes: the console has no timer; whichever read or write of the
//! document first finds its last edit five minutes old writes the version (dated five minutes
//! after that edit, `by` the editor, appending `document.versioned` by the console). Naming
//! (`POST …/versions {name}`) makes a new `named` version of the current content, and an
//! approval request settles the content first ([`Console::settle_now`]).
//!
//! Every write runs in one transaction and appends its `document.*` event (with the
//! document's own sequence) in it; an agent conversation's artifacts append none (spec).

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use super::work::{invalid, not_found};
use super::*;
use crate::doc::{self, Document};
use crate::storage::StorageError;
use crate::work::documents::{
    Artifact, ArtifactKind, ArtifactView, Content, DocumentVersion, Edge, EdgeKind, EdgeQuery,
    EdgeView, LogEntry, References, Scope, Snapshot, StoredDocument, Version, VersionInfo,
    VersionKind, VersionRef, classify, essence, is_filename, is_session_id, is_slug, media_type,
    slug_of, slug_with_suffix, sniff_image, splice,
};
use crate::work::{
    Actor, DocumentTx, Event, EventPage, IssueKey, NewEvent, ProjectKey, Subscriber, WorkTx, rules,
};

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

/// A path's artifact id: a UUID in any case, answered lowercase with hyphens; else the path
/// names nothing (404).
fn artifact_id(id: &str) -> Result<String, Error> {
    crate::ids::uuid_id(id).ok_or_else(|| not_found("artifact"))
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

impl Console {
    fn new_uuid(&self) -> String {
        uuid::Builder::from_random_bytes(clock::random::<16>(&*self.parts.entropy))
            .into_uuid()
            .hyphenated()
            .to_string()
    }

    /// A fresh block id: 12 random bytes, base64url (16 characters of `[A-Za-z0-9_-]`).
    pub(crate) fn new_block_id(&self) -> String {
        clock::random_token::<12>(&*self.parts.entropy)
    }

    /// The scope a path names: an issue or project that exists (else 404), or an agent session
    /// id (else INVALID_SESSION_ID).
    async fn scope_in(&self, tx: &mut dyn WorkTx, at: At<'_>) -> Result<Scope, Error> {
        match at {
            At::Issue(k) => {
                let key = IssueKey::parse(k).ok_or_else(|| not_found("issue"))?;
                tx.issue(&key).await?.ok_or_else(|| not_found("issue"))?;
                Ok(Scope::Issue(key))
            }
            At::Project(k) => {
                let key = ProjectKey::parse(k).ok_or_else(|| not_found("project"))?;
                tx.project(&key)
                    .await?
                    .ok_or_else(|| not_found("project"))?;
                Ok(Scope::Project(key))
            }
            At::Agent(s) => {
                if !is_session_id(s) {
                    return Err(ErrorCode::INVALID_SESSION_ID.into());
                }
                Ok(Scope::Agent(s.to_owned()))
            }
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
        if let Some(a) = tx.artifact_by_slug(scope, slug).await? {
            return Ok(a);
        }
        let mut named = tx.artifacts_by_filename(scope, slug).await?;
        match (named.pop(), named.is_empty()) {
            (Some(a), true) => Ok(a),
            _ => Err(not_found("artifact")),
        }
    }

    /// The id of the artifact a scope's `{slug}` names.
    pub async fn resolve_artifact(&self, at: At<'_>, slug: &str) -> Result<String, Error> {
        let mut tx = self.parts.storage.read().await?;
        let scope = self.scope_in(&mut *tx, at).await?;
        Ok(self.by_slug_in(&mut *tx, &scope, slug).await?.id)
    }

    /// An artifact by id, its content settled first when it is due (so no read answers
    /// content older than five minutes as unsettled).
    async fn current(&self, id: &str) -> Result<Artifact, Error> {
        let id = artifact_id(id)?;
        let a = {
            let mut tx = self.parts.storage.read().await?;
            tx.artifact(&id)
                .await?
                .ok_or_else(|| not_found("artifact"))?
        };
        if !self.settle_due(&a) {
            return Ok(a);
        }
        let (a, events) = transact!(self, |tx| {
            let mut a = tx
                .artifact(&id)
                .await?
                .ok_or_else(|| not_found("artifact"))?;
            let mut events = Vec::new();
            self.settle_if_due(tx, &mut a, &mut events).await?;
            Ok((a, events))
        })?;
        self.committed_all(&events);
        Ok(a)
    }

    fn committed_all(&self, events: &[Event]) {
        if let Some(id) = events.iter().map(|e| e.id).max() {
            self.event_committed(id);
        }
    }

    /// Whether a document's content waits to settle and has had no edit for five minutes.
    fn settle_due(&self, a: &Artifact) -> bool {
        a.kind == ArtifactKind::Document
            && !a.settled
            && self.now() - a.changed_at >= settle_after()
    }

    /// Settles a document's content into a version when it is due, in the caller's
    /// transaction (a write finds it first, then makes its own change).
    async fn settle_if_due(
        &self,
        tx: &mut dyn WorkTx,
        a: &mut Artifact,
        events: &mut Vec<Event>,
    ) -> Result<(), Error> {
        if !self.settle_due(a) {
            return Ok(());
        }
        let at = a.changed_at + settle_after();
        let by = a.changed_by.clone();
        let (_, e) = self
            .new_version(tx, a, None, VersionKind::Settled, &by, at, &console_actor())
            .await?;
        events.extend(e);
        Ok(())
    }

    /// Settles a document's current content into a version now, if any of it is not in one
    /// (what an approval request does before it asks about "the latest version"); answers the
    /// latest version. For the asks' routes, in their transaction.
    pub async fn settle_now(
        &self,
        tx: &mut dyn WorkTx,
        id: &str,
        actor: &Actor,
        events: &mut Vec<Event>,
    ) -> Result<Option<VersionRef>, Error> {
        let mut a = tx
            .artifact(id)
            .await?
            .ok_or_else(|| not_found("artifact"))?;
        if !a.settled {
            let by = a.changed_by.clone();
            let (_, e) = self
                .new_version(
                    tx,
                    &mut a,
                    None,
                    VersionKind::Settled,
                    &by,
                    self.now(),
                    actor,
                )
                .await?;
            events.extend(e);
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
                match tx.version(&a.id, latest).await? {
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
        tx.insert_version(&a.id, &v, &content).await?;
        a.version = Some(VersionRef {
            number: v.number,
            name: v.name.clone(),
            kind,
        });
        a.settled = true;
        a.updated_at = self.now();
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
            tx.update_artifact(a).await?;
            return Ok(None);
        }
        a.sequence += 1;
        tx.update_artifact(a).await?;
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
        let e = NewEvent {
            kind,
            at: self.now(),
            actor: actor.clone(),
            project: a.scope.project(),
            issue: a.scope.issue().cloned(),
            artifact: Some(a.id.clone()),
            session: actor.session().map(str::to_owned),
            data,
        };
        Ok(tx.append_event(&e, Some(a.sequence)).await?)
    }

    // ----- uploads -----

    /// Uploads a document, file or image into a scope (protocol §6.2): `text/markdown` is a
    /// document; other bytes are an image when their signature says PNG, JPEG, GIF or WebP
    /// (stored under the type they are), else a file under the declared type. A filename the
    /// scope has already gets a new version; a new one a slug (given, or made from the
    /// filename with `-2`, `-3` … on a collision). An agent conversation takes files and images
    /// only, and appends no event.
    pub async fn upload(
        &self,
        actor: &Actor,
        at: At<'_>,
        up: Upload,
    ) -> Result<ArtifactView, Error> {
        if !is_filename(&up.filename) {
            return Err(artifact_input(
                "a filename is 1 to 255 characters with no control character, `/` or `\\`",
            ));
        }
        if let Some(s) = &up.slug
            && !is_slug(s)
        {
            return Err(artifact_input(
                "a slug is ^[a-z0-9]+(-[a-z0-9]+)*$, at most 64 characters",
            ));
        }
        let declared = media_type(&up.content_type)
            .ok_or_else(|| artifact_input("content_type is a media type: type/subtype"))?;
        let markdown = if essence(&declared) == "text/markdown" {
            if matches!(at, At::Agent(_)) {
                return Err(artifact_input(
                    "an agent's conversation takes files and images, not markdown documents",
                ));
            }
            Some(
                String::from_utf8(up.content.clone())
                    .map_err(|_| artifact_input("a markdown document is UTF-8 text"))?,
            )
        } else {
            None
        };
        let (kind, content_type) = match &markdown {
            Some(_) => (ArtifactKind::Document, "text/markdown".to_owned()),
            None => classify(&declared, &up.content),
        };
        let parsed = match &markdown {
            Some(m) => Some(self.parse_document(m)?),
            None => None,
        };
        let (view, events, kept) = transact!(self, |tx| {
            let scope = self.scope_in(tx, at).await?;
            let mut existing = tx.artifacts_by_filename(&scope, &up.filename).await?;
            let existing = existing.pop();
            let mut events = Vec::new();
            let now = self.now();
            let (token, size) = match &parsed {
                Some(p) => (p.token.clone(), p.snapshot.markdown.len() as i64),
                None => (bytes_token(&up.content), up.content.len() as i64),
            };
            let content = match &parsed {
                Some(p) => Content::Markdown(p.snapshot.markdown.clone()),
                None => Content::Bytes(up.content.clone()),
            };
            let a = match existing {
                Some(mut a) => {
                    if up.slug.as_ref().is_some_and(|s| *s != a.slug) {
                        return Err(artifact_input(format!(
                            "this filename's artifact has the slug `{}`",
                            a.slug
                        )));
                    }
                    if (a.kind == ArtifactKind::Document) != (kind == ArtifactKind::Document) {
                        return Err(artifact_input(if a.kind == ArtifactKind::Document {
                            "this filename is a markdown document: a new version is markdown"
                        } else {
                            "this filename is a file: a new version is not markdown"
                        }));
                    }
                    // Edits not yet in a version are kept: they settle before the upload
                    // replaces them.
                    if !a.settled {
                        let by = a.changed_by.clone();
                        let (_, e) = self
                            .new_version(tx, &mut a, None, VersionKind::Settled, &by, now, actor)
                            .await?;
                        events.extend(e);
                    }
                    a.kind = kind;
                    a.content_type = content_type.clone();
                    a.size = size;
                    a.token = token.clone();
                    a.tasks = parsed.as_ref().map_or((0, 0), |p| p.tasks);
                    a.log_len = 0;
                    a.changed_at = now;
                    a.changed_by = actor.clone();
                    a.updated_at = now;
                    let number = a.version.as_ref().map_or(1, |v| v.number + 1);
                    let info = self
                        .store_upload(tx, &a, number, &content, parsed.as_ref(), actor)
                        .await?;
                    a.version = Some(VersionRef {
                        number,
                        name: None,
                        kind: VersionKind::Settled,
                    });
                    a.settled = true;
                    let e = self
                        .write_back(
                            tx,
                            &mut a,
                            "document.versioned",
                            actor,
                            &[("version", json!(info))],
                        )
                        .await?;
                    if let (Some(e), Some(p)) = (&e, &parsed) {
                        self.keep_references(tx, &a, &p.refs, None, e).await?;
                    }
                    events.extend(e);
                    a
                }
                None => {
                    let slug = match &up.slug {
                        Some(s) => {
                            if tx.artifact_by_slug(&scope, s).await?.is_some() {
                                return Err(artifact_input(format!(
                                    "another artifact here has the slug `{s}`"
                                )));
                            }
                            s.clone()
                        }
                        None => self.free_slug(tx, &scope, &slug_of(&up.filename)).await?,
                    };
                    let agent = matches!(scope, Scope::Agent(_));
                    let a = Artifact {
                        id: self.new_uuid(),
                        scope: scope.clone(),
                        slug,
                        filename: up.filename.clone(),
                        kind,
                        content_type: content_type.clone(),
                        size,
                        token: token.clone(),
                        sequence: if agent { 0 } else { 1 },
                        version: Some(VersionRef {
                            number: 1,
                            name: None,
                            kind: VersionKind::Settled,
                        }),
                        settled: true,
                        changed_at: now,
                        changed_by: actor.clone(),
                        created_by: actor.clone(),
                        created_at: now,
                        updated_at: now,
                        tasks: parsed.as_ref().map_or((0, 0), |p| p.tasks),
                        log_entry: 0,
                        log_len: 0,
                    };
                    tx.insert_artifact(&a).await?;
                    self.store_upload(tx, &a, 1, &content, parsed.as_ref(), actor)
                        .await?;
                    if !agent {
                        let e = self
                            .append_document(tx, &a, "document.created", actor, &[])
                            .await?;
                        if let Some(p) = &parsed {
                            self.keep_references(tx, &a, &p.refs, None, &e).await?;
                        }
                        events.push(e);
                    }
                    a
                }
            };
            Ok((ArtifactView::of(&a), events, a))
        })?;
        if let Some(p) = &parsed {
            self.documents.keep_loaded(&kept, &p.doc);
        }
        self.committed_all(&events);
        tracing::info!(artifact = %view.id, kind = view.kind.as_str(), "artifact uploaded");
        Ok(view)
    }

    /// The upload's content as version `number`, and for a document its current content; the
    /// artifact's index (filename, and a document's blocks) written afresh.
    async fn store_upload(
        &self,
        tx: &mut dyn WorkTx,
        a: &Artifact,
        number: i64,
        content: &Content,
        parsed: Option<&Parsed>,
        actor: &Actor,
    ) -> Result<VersionInfo, Error> {
        let v = Version {
            number,
            name: None,
            kind: VersionKind::Settled,
            token: a.token.clone(),
            content_type: a.content_type.clone(),
            size: a.size,
            by: actor.clone(),
            created_at: self.now(),
        };
        tx.insert_version(&a.id, &v, content).await?;
        if let Some(p) = parsed {
            tx.put_snapshot(&a.id, &p.snapshot).await?;
            // An open approval ask follows the new content: its agent's turn.
            self.asks().approval_follows(tx, &a.id).await?;
        }
        if !matches!(a.scope, Scope::Agent(_)) {
            tx.clear_text(&a.id).await?;
            let mut parts = vec![(String::new(), a.filename.clone())];
            if let Some(p) = parsed {
                parts.extend(p.parts.iter().cloned());
            }
            tx.index_text(&a.id, &parts, &[]).await?;
        }
        Ok(VersionInfo::of(&v))
    }

    /// `base`, or the first of `base-2`, `base-3` … no artifact of the scope has.
    async fn free_slug(
        &self,
        tx: &mut dyn WorkTx,
        scope: &Scope,
        base: &str,
    ) -> Result<String, Error> {
        if tx.artifact_by_slug(scope, base).await?.is_none() {
            return Ok(base.to_owned());
        }
        for n in 2..10_000 {
            let s = slug_with_suffix(base, n);
            if tx.artifact_by_slug(scope, &s).await?.is_none() {
                return Ok(s);
            }
        }
        Err(artifact_input("no free slug is left for this filename"))
    }

    // ----- reads -----

    /// Document metadata and current version.
    pub async fn artifact(&self, id: &str) -> Result<ArtifactView, Error> {
        Ok(ArtifactView::of(&self.current(id).await?))
    }

    /// The artifacts of an issue or project, oldest first.
    pub async fn artifacts_of(&self, at: At<'_>) -> Result<Vec<ArtifactView>, Error> {
        let ids: Vec<String> = {
            let mut tx = self.parts.storage.read().await?;
            let scope = self.scope_in(&mut *tx, at).await?;
            let list = tx.artifacts(&scope).await?;
            if !list.iter().any(|a| self.settle_due(a)) {
                return Ok(list.iter().map(ArtifactView::of).collect());
            }
            list.into_iter().map(|a| a.id).collect()
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(ArtifactView::of(&self.current(&id).await?));
        }
        Ok(out)
    }

    /// An agent conversation's artifact with its versions.
    pub async fn agent_artifact(
        &self,
        session: &str,
        slug: &str,
    ) -> Result<ArtifactWithVersions, Error> {
        let mut tx = self.parts.storage.read().await?;
        let scope = self.scope_in(&mut *tx, At::Agent(session)).await?;
        let a = self.by_slug_in(&mut *tx, &scope, slug).await?;
        let versions = tx.versions(&a.id).await?;
        Ok(ArtifactWithVersions {
            artifact: ArtifactView::of(&a),
            versions: versions.iter().map(VersionInfo::of).collect(),
        })
    }

    /// Every version of an artifact, oldest first (the document page's list).
    pub async fn versions(&self, id: &str) -> Result<Vec<VersionInfo>, Error> {
        let a = self.current(id).await?;
        let mut tx = self.parts.storage.read().await?;
        Ok(tx
            .versions(&a.id)
            .await?
            .iter()
            .map(VersionInfo::of)
            .collect())
    }

    /// A document's canonical markdown, token and current version.
    pub async fn text(&self, id: &str) -> Result<TextView, Error> {
        let a = self.current(id).await?;
        if a.kind != ArtifactKind::Document {
            return Err(not_document());
        }
        let mut tx = self.parts.storage.read().await?;
        Ok(TextView {
            markdown: self.markdown_of(&mut *tx, &a).await?,
            token: a.token,
            version: a.version,
        })
    }

    /// One version: a document's as JSON, a file's or image's bytes. A number that is not a
    /// version: 404.
    pub async fn version(&self, id: &str, number: &str) -> Result<VersionRead, Error> {
        let a = self.current(id).await?;
        self.version_of(&a, number).await
    }

    /// One version of an agent conversation's artifact.
    pub async fn agent_version(
        &self,
        session: &str,
        slug: &str,
        number: &str,
    ) -> Result<VersionRead, Error> {
        let a = {
            let mut tx = self.parts.storage.read().await?;
            let scope = self.scope_in(&mut *tx, At::Agent(session)).await?;
            self.by_slug_in(&mut *tx, &scope, slug).await?
        };
        self.version_of(&a, number).await
    }

    async fn version_of(&self, a: &Artifact, number: &str) -> Result<VersionRead, Error> {
        let number: i64 = number
            .parse()
            .ok()
            .filter(|n| *n >= 1)
            .ok_or_else(|| not_found("version"))?;
        let mut tx = self.parts.storage.read().await?;
        let (v, content) = tx
            .version(&a.id, number)
            .await?
            .ok_or_else(|| not_found("version"))?;
        Ok(match content {
            Content::Markdown(markdown) => VersionRead::Document(DocumentVersion {
                number: v.number,
                name: v.name,
                kind: v.kind,
                token: v.token,
                markdown,
                by: v.by,
                created_at: v.created_at,
            }),
            Content::Bytes(bytes) => VersionRead::Bytes {
                // Inline only what the bytes themselves say is one of the four images.
                image: sniff_image(&bytes).is_some(),
                bytes,
                content_type: v.content_type,
                filename: a.filename.clone(),
            },
        })
    }

    /// Names the current content: a new `named` version of it (CAP_EXCEEDED over 80
    /// characters). Answers the version as its read route does (a file's as its record: the
    /// read route answers its bytes).
    pub async fn name_version(
        &self,
        actor: &Actor,
        id: &str,
        name: &str,
    ) -> Result<NamedVersion, Error> {
        let id = artifact_id(id)?;
        let name = name.trim();
        if name.is_empty() || name.chars().any(char::is_control) {
            return Err(invalid(
                "a version name has a visible character and no control character",
            ));
        }
        if rules::chars(name) > VERSION_NAME_MAX {
            return Err(Error::with_message(
                ErrorCode::CAP_EXCEEDED,
                "a version name is at most 80 characters",
            ));
        }
        let (info, events) = transact!(self, |tx| {
            let mut a = tx
                .artifact(&id)
                .await?
                .ok_or_else(|| not_found("artifact"))?;
            let mut events = Vec::new();
            self.settle_if_due(tx, &mut a, &mut events).await?;
            let by = actor.clone();
            let now = self.now();
            let (info, e) = self
                .new_version(
                    tx,
                    &mut a,
                    Some(name.to_owned()),
                    VersionKind::Named,
                    &by,
                    now,
                    actor,
                )
                .await?;
            events.extend(e);
            let answer = match a.kind {
                ArtifactKind::Document => NamedVersion::Document(DocumentVersion {
                    number: info.number,
                    name: info.name.clone(),
                    kind: info.kind,
                    token: info.token.clone(),
                    markdown: self.markdown_of(tx, &a).await?,
                    by: info.by.clone(),
                    created_at: info.created_at,
                }),
                ArtifactKind::Image | ArtifactKind::File => NamedVersion::File(info),
            };
            Ok((answer, events))
        })?;
        self.committed_all(&events);
        Ok(info)
    }

    /// A page of a document's event log.
    pub async fn document_events(&self, id: &str, page: &EventPage) -> Result<Vec<Event>, Error> {
        let a = self.current(id).await?;
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.document_events(&a.id, page).await?)
    }

    // ----- references -----

    /// Cross-references to and from a document.
    pub async fn artifact_references(&self, id: &str) -> Result<References, Error> {
        let a = self.current(id).await?;
        let node = artifact_ref(&a);
        let mut tx = self.parts.storage.read().await?;
        let incoming = tx
            .edges(&EdgeQuery {
                to: Some(node.clone()),
                from: None,
                kind: None,
                since: None,
            })
            .await?;
        let outgoing = tx
            .edges(&EdgeQuery {
                to: None,
                from: Some(node),
                kind: None,
                since: None,
            })
            .await?;
        Ok(References {
            incoming: incoming.iter().map(EdgeView::of).collect(),
            outgoing: outgoing.iter().map(EdgeView::of).collect(),
        })
    }

    /// Cross-references to and from an issue (and from its documents).
    pub async fn issue_references(&self, key: &str) -> Result<References, Error> {
        let key = IssueKey::parse(key).ok_or_else(|| not_found("issue"))?;
        let mut tx = self.parts.storage.read().await?;
        tx.issue(&key).await?.ok_or_else(|| not_found("issue"))?;
        let (incoming, outgoing) = tx.issue_edges(&key).await?;
        Ok(References {
            incoming: incoming.iter().map(EdgeView::of).collect(),
            outgoing: outgoing.iter().map(EdgeView::of).collect(),
        })
    }

    /// The edges of one node of the reference graph (`GET /references`): `to` (backlinks) or
    /// `from` (links), exactly one, a console ref (a fragment naming a block is dropped: a
    /// node is a whole document); `since` (an event id) pages mentions only (it implies
    /// `kind=mention`; another kind with it is refused). INVALID_QUERY otherwise.
    pub async fn references(
        &self,
        to: Option<&str>,
        from: Option<&str>,
        kind: Option<&str>,
        since: Option<i64>,
    ) -> Result<Vec<EdgeView>, Error> {
        let bad = |m: &str| Error::with_message(ErrorCode::INVALID_QUERY, m);
        // A console ref, written as the engine writes one (UUIDs lower-cased).
        let node = |r: &str| -> Result<String, Error> {
            let r = r.split('#').next().unwrap_or("");
            doc::parse_ref(r)
                .map(|t| t.to_url())
                .ok_or_else(|| bad("`to` and `from` are console refs (countersign://…)"))
        };
        let (to, from) = match (to, from) {
            (Some(t), None) => (Some(node(t)?), None),
            (None, Some(f)) => (None, Some(node(f)?)),
            _ => return Err(bad("name one node: `to` or `from`")),
        };
        let mut kind = kind
            .map(|k| EdgeKind::parse(k).ok_or_else(|| bad("`kind` is link, mention or embed")))
            .transpose()?;
        if since.is_some() {
            match kind {
                None => kind = Some(EdgeKind::Mention),
                Some(EdgeKind::Mention) => {}
                Some(_) => return Err(bad("`since` pages mentions only")),
            }
        }
        let mut tx = self.parts.storage.read().await?;
        Ok(tx
            .edges(&EdgeQuery {
                to,
                from,
                kind,
                since,
            })
            .await?
            .iter()
            .map(EdgeView::of)
            .collect())
    }

    // ----- subscribers -----

    /// Sessions subscribed to a document's topics, first subscribed first.
    pub async fn document_subscribers(&self, id: &str) -> Result<Vec<Subscriber>, Error> {
        let a = self.current(id).await?;
        let mut tx = self.parts.storage.read().await?;
        Ok(tx
            .document_subscribers(&a.id)
            .await?
            .into_iter()
            .map(|(session_id, since)| Subscriber { session_id, since })
            .collect())
    }

    /// Unsubscribes a session from a document (a later action there subscribes it again);
    /// appends `subscription.removed`. A session not subscribed: done already.
    pub async fn document_unsubscribe(
        &self,
        actor: &Actor,
        id: &str,
        session: &str,
    ) -> Result<(), Error> {
        let id = artifact_id(id)?;
        let event = transact!(self, |tx| {
            let a = tx
                .artifact(&id)
                .await?
                .ok_or_else(|| not_found("artifact"))?;
            if !tx
                .document_subscribers(&a.id)
                .await?
                .iter()
                .any(|(s, _)| s == session)
            {
                return Ok(None);
            }
            tx.document_unsubscribe(&a.id, session).await?;
            let data = json!({
                "issue": a.scope.issue(),
                "artifact": a.id,
                "session_id": session,
                "by": actor,
            });
            let e = NewEvent {
                kind: "subscription.removed",
                at: self.now(),
                actor: actor.clone(),
                project: a.scope.project(),
                issue: a.scope.issue().cloned(),
                artifact: Some(a.id.clone()),
                session: actor.session().map(str::to_owned),
                data,
            };
            Ok(Some(tx.append_event(&e, None).await?))
        })?;
        if let Some(e) = event {
            self.event_committed(e.id);
        }
        Ok(())
    }
}

/// Index parts are cut to this many bytes (a huge code block still indexes its start).
const PART_MAX: usize = 64 * 1024;
/// Loaded documents a console keeps.
const LOADED_MAX: usize = 32;
/// A document's edit log is folded into a new snapshot every this many edits (bounding what a
/// load replays).
const LOG_MAX: i64 = 256;
/// Serialized blocks answers a console keeps, at most this many bytes in all.
const ANSWERS_BYTES: usize = 64 * 1024 * 1024;
/// How many documents' rendered HTML a console keeps.
const RENDERED_KEPT: usize = 32;

/// What one [`Console`] keeps of its documents, each entry good only for the state it was made
/// from (see [`Kept`]): the engine's loaded documents (an edit of a large document skips
/// parsing it again), serialized blocks answers, and rendered HTML (a 1 MiB document's costs
/// ~40 ms to make). Each is bounded and forgets the entry used least recently. Every write
/// moves an artifact's sequence (another replica's too), so no entry answers for another
/// state; the caches belong to their console, so two consoles in one process (an embedder's,
/// the tests') share nothing.
#[derive(Debug, Default)]
pub(crate) struct DocumentCaches {
    loaded: Mutex<Kept<Document>>,
    answers: Mutex<Kept<Answer>>,
    rendered: Mutex<Kept<doc::SafeHtml>>,
}

/// A kept blocks answer: the reference counts it was made with, and its JSON.
type Answer = (Vec<(String, i64, i64)>, Arc<[u8]>);

/// Entries by artifact id, each with the state it was made for (the artifact's token, its
/// last event and its last edit-log entry) and when it was last used.
#[derive(Debug)]
struct Kept<T> {
    entries: HashMap<String, KeptEntry<T>>,
    /// A counter, not a time: what was used least recently has the lowest.
    uses: u64,
    /// The sum of the entries' sizes (as `size` said when each was kept).
    bytes: usize,
}

#[derive(Debug)]
struct KeptEntry<T> {
    state: State,
    used: u64,
    bytes: usize,
    value: T,
}

/// The state an entry is good for: the artifact's token, sequence and last edit-log entry.
type State = (String, i64, i64);

fn state_of(a: &Artifact) -> State {
    (a.token.clone(), a.sequence, a.log_entry)
}

impl<T> Default for Kept<T> {
    fn default() -> Self {
        Self {
            entries: HashMap::new(),
            uses: 0,
            bytes: 0,
        }
    }
}

impl<T: Clone> Kept<T> {
    /// The entry for `a` when it was made for `a`'s state.
    fn get(&mut self, a: &Artifact) -> Option<T> {
        self.uses += 1;
        let uses = self.uses;
        let e = self.entries.get_mut(&a.id)?;
        if e.state != state_of(a) {
            return None;
        }
        e.used = uses;
        Some(e.value.clone())
    }

    /// Keeps `value` (of `bytes`) for `a`'s state, forgetting the least recently used entries
    /// until at most `max_entries` and `max_bytes` are kept.
    fn put(&mut self, a: &Artifact, value: T, bytes: usize, max_entries: usize, max_bytes: usize) {
        if bytes > max_bytes {
            return;
        }
        self.uses += 1;
        if let Some(old) = self.entries.remove(&a.id) {
            self.bytes -= old.bytes;
        }
        while self.entries.len() >= max_entries || self.bytes + bytes > max_bytes {
            let Some(oldest) = self
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = self.entries.remove(&oldest) {
                self.bytes -= e.bytes;
            }
        }
        self.bytes += bytes;
        self.entries.insert(
            a.id.clone(),
            KeptEntry {
                state: state_of(a),
                used: self.uses,
                bytes,
                value,
            },
        );
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl DocumentCaches {
    fn loaded(&self, a: &Artifact) -> Option<Document> {
        lock(&self.loaded).get(a)
    }

    fn keep_loaded(&self, a: &Artifact, doc: &Document) {
        lock(&self.loaded).put(a, doc.clone(), 0, LOADED_MAX, usize::MAX);
    }

    fn answered(&self, a: &Artifact, counts: &[(String, i64, i64)]) -> Option<Arc<[u8]>> {
        lock(&self.answers)
            .get(a)
            .filter(|(c, _)| c == counts)
            .map(|(_, json)| json)
    }

    fn keep_answer(&self, a: &Artifact, counts: Vec<(String, i64, i64)>, json: &Arc<[u8]>) {
        // One answer may take at most a quarter of the budget.
        if json.len() > ANSWERS_BYTES / 4 {
            return;
        }
        lock(&self.answers).put(
            a,
            (counts, json.clone()),
            json.len(),
            usize::MAX,
            ANSWERS_BYTES,
        );
    }

    fn html(&self, a: &Artifact, render: impl FnOnce() -> doc::SafeHtml) -> doc::SafeHtml {
        if let Some(html) = lock(&self.rendered).get(a) {
            return html;
        }
        let html = render();
        lock(&self.rendered).put(a, html.clone(), 0, RENDERED_KEPT, usize::MAX);
        html
    }

    fn forget(&self) {
        lock(&self.loaded).clear();
        lock(&self.answers).clear();
        lock(&self.rendered).clear();
    }
}

/// The blocks answer of a document with its reference counts.
fn blocks_view(d: &Document, counts: &HashMap<String, RefCounts>) -> BlocksView {
    BlocksView {
        token: d.token().to_owned(),
        blocks: d
            .blocks()
            .into_iter()
            .map(|block| BlockEntry {
                refs: counts.get(&*block.id).copied().unwrap_or_default(),
                block,
            })
            .collect(),
    }
}

impl Console {
    /// Drops every document this console keeps in memory (what a restart does): the next read
    /// loads from the stored snapshot and edit log. For tests and benchmarks.
    pub fn forget_loaded_documents(&self) {
        self.documents.forget();
    }
}

/// What the engine made of a document, for storing it.
#[derive(Debug, Clone)]
pub(crate) struct Parsed {
    pub doc: Document,
    pub snapshot: Snapshot,
    pub tasks: (i64, i64),
    pub token: String,
    /// The index's parts: each top-level block's id and text.
    pub parts: Vec<(String, String)>,
    /// Outgoing references: the block each is in, the console ref, how it refers.
    pub refs: Vec<(String, String, EdgeKind)>,
}

impl Parsed {
    fn of(doc: Document) -> Self {
        let parts = doc
            .blocks()
            .into_iter()
            .filter(|b| b.path.is_empty())
            .map(|b| (b.id.to_string(), part_text(doc.markdown(), &b.range)))
            .collect();
        Self {
            snapshot: snapshot_of(&doc),
            tasks: tasks_of(&doc),
            token: doc.token().to_owned(),
            parts,
            refs: references_of(&doc),
            doc,
        }
    }
}

/// A document's snapshot: its markdown and block ids.
fn snapshot_of(doc: &Document) -> Snapshot {
    Snapshot {
        markdown: doc.markdown().to_owned(),
        block_ids: doc.block_ids(),
    }
}

/// `(done, total)` of a document's task-list items.
fn tasks_of(doc: &Document) -> (i64, i64) {
    doc.tasks()
        .map(|(d, t)| (i64::from(d), i64::from(t)))
        .unwrap_or((0, 0))
}

/// A stored document as the engine holds it: its snapshot loaded, then each logged edit
/// replayed with the block ids it took, checked against the token it left. The error says
/// why it does not load.
fn replay(stored: &StoredDocument) -> Result<Document, String> {
    let mut d = Document::load(&stored.snapshot.markdown, &stored.snapshot.block_ids)
        .map_err(|e| e.to_string())?;
    for e in &stored.log {
        let ops: Vec<doc::EditOp> = serde_json::from_str(&e.ops)
            .map_err(|_| format!("the edit log's entry {} does not read", e.entry))?;
        let mut ids = e.ids.iter();
        let mut short = false;
        let edited = {
            let mut give = || match ids.next() {
                Some(i) => i.clone(),
                None => {
                    short = true;
                    String::new()
                }
            };
            d.apply(None, &ops, &mut give)
        }
        .map_err(|err| format!("the edit log's entry {} does not apply ({err})", e.entry))?;
        if short || ids.next().is_some() || edited.document.token() != e.token {
            return Err(format!(
                "the edit log's entry {} replays to another document",
                e.entry
            ));
        }
        d = edited.document;
    }
    Ok(d)
}

/// A block's text for the index, at most [`PART_MAX`] bytes.
fn part_text(markdown: &str, r: &doc::Range) -> String {
    let t = markdown.get(r.start..r.end).unwrap_or("");
    let mut end = t.len().min(PART_MAX);
    while !t.is_char_boundary(end) {
        end -= 1;
    }
    t[..end].to_owned()
}

fn references_of(doc: &Document) -> Vec<(String, String, EdgeKind)> {
    doc.references()
        .into_iter()
        .map(|r| {
            let kind = match r.kind {
                doc::RefKind::Link => EdgeKind::Link,
                doc::RefKind::Embed => EdgeKind::Embed,
            };
            (r.block, r.to, kind)
        })
        .collect()
}

/// A stored document the engine does not load: refused until a person rebuilds it.
fn unloadable(id: &str, e: &str) -> Error {
    tracing::error!(artifact = id, error = %e, "a stored document does not load");
    Error::with_message(
        ErrorCode::INTERNAL,
        format!(
            "the document's stored blocks do not load ({e}); a person rebuilds it from its \
             markdown: POST /api/v1/artifacts/{id}/rebuild"
        ),
    )
}

/// One block whose token changed (or that is new): `{id, token}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ChangedBlock {
    pub id: String,
    pub token: String,
}

/// The edit answer: `{token, changed, removed}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EditAnswer {
    pub token: String,
    pub changed: Vec<ChangedBlock>,
    pub removed: Vec<String>,
}

/// `{incoming, outgoing}` reference counts of a block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RefCounts {
    pub incoming: i64,
    pub outgoing: i64,
}

/// A block of the blocks answer: the engine's entry with its reference counts.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockEntry {
    #[serde(flatten)]
    pub block: doc::BlockInfo,
    pub refs: RefCounts,
}

/// `{token, blocks}`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlocksView {
    pub token: String,
    pub blocks: Vec<BlockEntry>,
}

/// One block's position: the entry, with `table` for a table, row or cell.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BlockView {
    #[serde(flatten)]
    pub position: doc::BlockPosition,
    pub refs: RefCounts,
}

/// A document as its page shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub artifact: ArtifactView,
    /// The engine's sanitized HTML (no raw HTML passes; only safe URL schemes), which knows its
    /// top-level blocks ([`doc::SafeHtml::part`]).
    pub html: doc::SafeHtml,
    /// The document's token: the HTML is of this text.
    pub token: String,
    pub versions: Vec<VersionInfo>,
}

/// The typed document block schema (JSON Schema 2020-12).
pub fn block_schema() -> Value {
    doc::block_schema()
}

/// Where a console ref goes on the pages, if anywhere.
fn page_of(url: &str) -> Option<String> {
    Some(match doc::parse_ref(url)? {
        doc::RefTarget::Issue { key } => format!("/issues/{key}"),
        doc::RefTarget::Project { key } => format!("/projects/{key}/issues"),
        doc::RefTarget::Artifact { id } => format!("/artifacts/{id}"),
        _ => return None,
    })
}

impl Console {
    /// Parses a document with the engine: fresh block ids from the injected entropy.
    fn parse_document(&self, markdown: &str) -> Result<Parsed, Error> {
        Ok(Parsed::of(Document::parse(markdown, &mut || {
            self.new_block_id()
        })))
    }

    /// A document as the engine holds it: the cache's for this state, else loaded from its
    /// stored snapshot and log (and kept: `a` was read in this transaction, so the state is
    /// committed).
    pub(crate) async fn loaded(
        &self,
        tx: &mut dyn DocumentTx,
        a: &Artifact,
    ) -> Result<Document, Error> {
        if let Some(d) = self.documents.loaded(a) {
            return Ok(d);
        }
        let stored = self.stored(tx, a).await?;
        let d = replay(&stored).map_err(|e| unloadable(&a.id, &e))?;
        self.documents.keep_loaded(a, &d);
        Ok(d)
    }

    async fn stored(&self, tx: &mut dyn DocumentTx, a: &Artifact) -> Result<StoredDocument, Error> {
        tx.document(&a.id)
            .await?
            .ok_or_else(|| Error::from(StorageError::Corrupt("a document without content".into())))
    }

    /// A document's latest saved markdown: the cached document's, else the snapshot with the
    /// logged splices (no engine: it reads even when the document does not load).
    async fn markdown_of(&self, tx: &mut dyn WorkTx, a: &Artifact) -> Result<String, Error> {
        if let Some(d) = self.documents.loaded(a) {
            return Ok(d.markdown().to_owned());
        }
        Ok(self.stored(tx, a).await?.markdown())
    }

    /// A document by id for a read: settled first when due, loaded, with its row.
    async fn read_document(
        &self,
        id: &str,
    ) -> Result<(Artifact, Document, Box<dyn WorkTx>), Error> {
        let a = self.current(id).await?;
        if a.kind != ArtifactKind::Document {
            return Err(not_document());
        }
        let mut tx = self.parts.storage.read().await?;
        let d = self.loaded(&mut *tx, &a).await?;
        Ok((a, d, tx))
    }

    /// Per block, its reference counts.
    async fn ref_counts(
        &self,
        tx: &mut dyn WorkTx,
        a: &Artifact,
    ) -> Result<HashMap<String, RefCounts>, Error> {
        Ok(tx
            .block_ref_counts(&artifact_ref(a))
            .await?
            .into_iter()
            .map(|(b, incoming, outgoing)| (b, RefCounts { incoming, outgoing }))
            .collect())
    }

    /// A document's blocks with ranges, tokens and reference counts, in document order.
    pub async fn blocks(&self, id: &str) -> Result<BlocksView, Error> {
        let (a, d, mut tx) = self.read_document(id).await?;
        let counts = self.ref_counts(&mut *tx, &a).await?;
        Ok(blocks_view(&d, &counts))
    }

    /// The blocks answer as JSON, serialized once per document state and reference counts:
    /// listing a large document's blocks costs far more than sending them again (a 1 MiB
    /// document has tens of thousands), and the answer changes only with the document (its
    /// sequence and token) or its edges.
    pub async fn blocks_json(&self, id: &str) -> Result<Arc<[u8]>, Error> {
        let a = self.current(id).await?;
        if a.kind != ArtifactKind::Document {
            return Err(not_document());
        }
        let mut tx = self.parts.storage.read().await?;
        let mut counts = tx.block_ref_counts(&artifact_ref(&a)).await?;
        counts.sort();
        if let Some(json) = self.documents.answered(&a, &counts) {
            return Ok(json);
        }
        let d = self.loaded(&mut *tx, &a).await?;
        let by_block: HashMap<&str, (i64, i64)> = counts
            .iter()
            .map(|(b, incoming, outgoing)| (b.as_str(), (*incoming, *outgoing)))
            .collect();
        // The engine writes the list straight from its tree (the bytes serde would give for
        // [`BlocksView`]), each block's `refs` added before its closing brace.
        let mut out = Vec::new();
        out.extend_from_slice(b"{\"token\":\"");
        out.extend_from_slice(d.token().as_bytes());
        out.extend_from_slice(b"\",\"blocks\":");
        d.write_blocks_json(&mut out, &mut |id, out| match by_block.get(id) {
            None => out.extend_from_slice(b",\"refs\":{\"incoming\":0,\"outgoing\":0}"),
            Some((incoming, outgoing)) => out.extend_from_slice(
                format!(",\"refs\":{{\"incoming\":{incoming},\"outgoing\":{outgoing}}}").as_bytes(),
            ),
        });
        out.push(b'}');
        let json: Arc<[u8]> = out.into();
        self.documents.keep_answer(&a, counts, &json);
        Ok(json)
    }

    /// One block's position (TARGET_NOT_FOUND for an id the document lacks).
    pub async fn block(&self, id: &str, block: &str) -> Result<BlockView, Error> {
        let (a, d, mut tx) = self.read_document(id).await?;
        let position = d.position(block).ok_or_else(|| {
            Error::with_message(
                ErrorCode::TARGET_NOT_FOUND,
                "the document has no block with this id",
            )
        })?;
        let refs = self
            .ref_counts(&mut *tx, &a)
            .await?
            .get(block)
            .copied()
            .unwrap_or_default();
        Ok(BlockView { position, refs })
    }

    /// A document for its page: the sanitized HTML (console refs pointing at the pages) and
    /// the versions.
    pub async fn rendered(&self, id: &str) -> Result<Rendered, Error> {
        let (a, d, mut tx) = self.read_document(id).await?;
        let versions = tx.versions(&a.id).await?;
        Ok(Rendered {
            artifact: ArtifactView::of(&a),
            html: self.documents.html(&a, || d.to_html_with(&page_of)),
            token: d.token().to_owned(),
            versions: versions.iter().map(VersionInfo::of).collect(),
        })
    }

    /// Applies quote-anchored edit ops (protocol §6.2), all or none: a stale `expected_token`
    /// or `block_token` is DOCUMENT_CHANGED (nothing applies); QUOTE_NOT_FOUND,
    /// QUOTE_AMBIGUOUS, TARGET_NOT_FOUND as the engine finds them. Content due to settle
    /// settles first. Appends `document.edited` with `changed` and `removed`; an edit that
    /// changes nothing appends nothing.
    pub async fn edit(
        &self,
        actor: &Actor,
        id: &str,
        expected_token: Option<&str>,
        ops: &[doc::EditOp],
    ) -> Result<EditAnswer, Error> {
        let id = artifact_id(id)?;
        let (answer, events, kept) = transact!(self, |tx| {
            self.change_document(tx, actor, &id, expected_token, ops)
                .await
        })?;
        self.document_committed(&events, kept);
        Ok(answer)
    }

    /// After a transaction that ran [`Console::change_document`] committed: the loaded
    /// document kept for the next edit, and the event streams woken.
    pub(crate) fn document_committed(&self, events: &[Event], kept: Option<(Artifact, Document)>) {
        if let Some((a, doc)) = kept {
            self.documents.keep_loaded(&a, &doc);
        }
        self.committed_all(events);
    }

    /// The body of an edit in the caller's transaction (the asks' block asks and accepted
    /// suggestions run theirs through it): as [`Console::edit`], answering the edit, its
    /// events and the document to keep once the transaction commits
    /// ([`Console::document_committed`]).
    #[allow(clippy::type_complexity)]
    pub(crate) async fn change_document(
        &self,
        tx: &mut dyn WorkTx,
        actor: &Actor,
        id: &str,
        expected_token: Option<&str>,
        ops: &[doc::EditOp],
    ) -> Result<(EditAnswer, Vec<Event>, Option<(Artifact, Document)>), Error> {
        let mut a = tx
            .artifact(id)
            .await?
            .ok_or_else(|| not_found("artifact"))?;
        if a.kind != ArtifactKind::Document {
            return Err(not_document());
        }
        let before = self.loaded(tx, &a).await?;
        let mut events = Vec::new();
        self.settle_if_due(tx, &mut a, &mut events).await?;
        let mut made: Vec<String> = Vec::new();
        let edited = before.apply(expected_token, ops, &mut || {
            let id = self.new_block_id();
            made.push(id.clone());
            id
        })?;
        let answer = EditAnswer {
            token: edited.document.token().to_owned(),
            changed: edited
                .changed
                .iter()
                .map(|(id, token)| ChangedBlock {
                    id: id.clone(),
                    token: token.clone(),
                })
                .collect(),
            removed: edited.removed.clone(),
        };
        if edited.document.token() == before.token()
            && answer.changed.is_empty()
            && answer.removed.is_empty()
        {
            return Ok((answer, events, None));
        }
        let doc = edited.document;
        let now = self.now();
        // An open approval ask follows the new content: its agent's turn.
        self.asks().approval_follows(tx, &a.id).await?;
        // The edit goes into the log (what it spliced, and what replays it), or, every
        // LOG_MAX edits, the whole document becomes the snapshot.
        if a.log_len + 1 >= LOG_MAX {
            tx.put_snapshot(&a.id, &snapshot_of(&doc)).await?;
            a.log_len = 0;
        } else {
            let (start, end, text) = splice(before.markdown(), doc.markdown());
            a.log_entry += 1;
            a.log_len += 1;
            tx.append_log(
                &a.id,
                &LogEntry {
                    entry: a.log_entry,
                    start: start as i64,
                    end: end as i64,
                    text,
                    ops: serde_json::to_string(ops).unwrap_or_default(),
                    ids: made,
                    token: doc.token().to_owned(),
                },
            )
            .await?;
        }
        a.tasks = tasks_of(&doc);
        a.token = doc.token().to_owned();
        a.size = doc.markdown().len() as i64;
        a.settled = false;
        a.changed_at = now;
        a.changed_by = actor.clone();
        a.updated_at = now;
        // The index: the top-level blocks changed, made or removed.
        let mut parts = Vec::new();
        for c in &answer.changed {
            if let Some(p) = doc.position(&c.id)
                && p.block.path.is_empty()
            {
                parts.push((c.id.clone(), part_text(doc.markdown(), &p.block.range)));
            }
        }
        let agent = matches!(a.scope, Scope::Agent(_));
        if !agent {
            tx.index_text(&a.id, &parts, &answer.removed).await?;
        }
        let e = self
            .write_back(
                tx,
                &mut a,
                "document.edited",
                actor,
                &[
                    ("changed", json!(answer.changed)),
                    ("removed", json!(answer.removed)),
                ],
            )
            .await?;
        // The reference graph: only when a touched block has a console ref, or had one
        // (parsing a large document's references again on every edit would cost more
        // than the edit).
        if let Some(e) = &e {
            let touched: Vec<String> = answer
                .changed
                .iter()
                .map(|c| c.id.clone())
                .chain(answer.removed.iter().cloned())
                .collect();
            let refers = parts.iter().any(|(_, t)| has_console_ref(t));
            if refers
                || !tx
                    .edges_from(&artifact_ref(&a), Some(&touched))
                    .await?
                    .is_empty()
            {
                self.keep_references(tx, &a, &references_of(&doc), Some(&touched), e)
                    .await?;
            }
        }
        events.extend(e);
        Ok((answer, events, Some((a, doc))))
    }

    /// Rebuilds a document the engine cannot load from its latest saved markdown, parsed
    /// afresh (new block ids); appends `document.rebuilt`. A document that loads is 409
    /// DOCUMENT_LIVE when it has edits of the last five minutes not yet settled (someone is
    /// working in it: new ids would fail their next edits), else DOCUMENT_LOADS.
    pub async fn rebuild(&self, actor: &Actor, id: &str) -> Result<ArtifactView, Error> {
        let id = artifact_id(id)?;
        let (view, events, kept) = transact!(self, |tx| {
            let mut a = tx
                .artifact(&id)
                .await?
                .ok_or_else(|| not_found("artifact"))?;
            if a.kind != ArtifactKind::Document {
                return Err(not_document());
            }
            let stored = self.stored(tx, &a).await?;
            if replay(&stored).is_ok() {
                return Err(if self.is_document_live(&a) {
                    Error::new(ErrorCode::DOCUMENT_LIVE)
                } else {
                    Error::new(ErrorCode::DOCUMENT_LOADS)
                });
            }
            let p = self.parse_document(&stored.markdown())?;
            let now = self.now();
            tx.put_snapshot(&a.id, &p.snapshot).await?;
            a.log_len = 0;
            a.tasks = p.tasks;
            if p.token != a.token {
                a.token = p.token.clone();
                a.size = p.snapshot.markdown.len() as i64;
                a.settled = false;
                a.changed_at = now;
                a.changed_by = actor.clone();
            }
            a.updated_at = now;
            if !matches!(a.scope, Scope::Agent(_)) {
                tx.clear_text(&a.id).await?;
                let mut parts = vec![(String::new(), a.filename.clone())];
                parts.extend(p.parts.iter().cloned());
                tx.index_text(&a.id, &parts, &[]).await?;
            }
            let e = self
                .write_back(tx, &mut a, "document.rebuilt", actor, &[])
                .await?;
            if let Some(e) = &e {
                self.keep_references(tx, &a, &p.refs, None, e).await?;
            }
            tracing::warn!(artifact = %a.id, "document rebuilt from its markdown");
            Ok((
                ArtifactView::of(&a),
                e.into_iter().collect::<Vec<_>>(),
                (a, p.doc),
            ))
        })?;
        self.documents.keep_loaded(&kept.0, &kept.1);
        self.committed_all(&events);
        Ok(view)
    }

    /// Whether a document has edits of the last five minutes not yet settled.
    fn is_document_live(&self, a: &Artifact) -> bool {
        !a.settled && self.now() - a.changed_at < settle_after()
    }

    /// Keeps the `mention` edges from a comment or a message (`from`, its console ref) in step
    /// with the console refs its text names ([`mentioned_refs`]): an edge that stays keeps its
    /// time and event; a new one is `event`'s. The edges count for `from_issue`'s outgoing
    /// references. `edited`: the text replaces an earlier one (a new text has no edges yet).
    pub(crate) async fn keep_mentions(
        &self,
        tx: &mut dyn DocumentTx,
        from: &str,
        from_issue: Option<&IssueKey>,
        (text, edited): (&str, bool),
        event: &Event,
    ) -> Result<(), Error> {
        let old = match (edited, has_console_ref(text)) {
            (true, _) => tx.edges_from(from, None).await?,
            (false, true) => Vec::new(),
            (false, false) => return Ok(()),
        };
        let new: Vec<Edge> = mentioned_refs(text)
            .into_iter()
            .map(|(to, to_block)| Edge {
                from: from.to_owned(),
                from_block: String::new(),
                from_issue: from_issue.cloned(),
                to,
                to_block,
                kind: EdgeKind::Mention,
                at: event.at,
                event_id: event.id,
            })
            .collect();
        for o in &old {
            if !new.iter().any(|n| n.same(o)) {
                tx.delete_edge(o).await?;
            }
        }
        for n in &new {
            if !old.iter().any(|o| o.same(n)) {
                tx.insert_edge(n).await?;
            }
        }
        Ok(())
    }

    /// Keeps the reference graph's edges from a document in step with its references: those
    /// in `blocks` (every block when `None`) are replaced by `refs`' (an edge that stays keeps
    /// its time and event; a new one is `event`'s).
    async fn keep_references(
        &self,
        tx: &mut dyn WorkTx,
        a: &Artifact,
        refs: &[(String, String, EdgeKind)],
        blocks: Option<&[String]>,
        event: &Event,
    ) -> Result<(), Error> {
        let from = artifact_ref(a);
        let old = tx.edges_from(&from, blocks).await?;
        let within: Option<HashSet<&str>> = blocks.map(|b| b.iter().map(String::as_str).collect());
        let new: Vec<Edge> = refs
            .iter()
            .filter(|(b, _, _)| within.as_ref().is_none_or(|w| w.contains(b.as_str())))
            .map(|(block, to, kind)| {
                let (to, to_block) = to.split_once('#').unwrap_or((to.as_str(), ""));
                Edge {
                    from: from.clone(),
                    from_block: block.clone(),
                    from_issue: a.scope.issue().cloned(),
                    to: to.to_owned(),
                    to_block: to_block.to_owned(),
                    kind: *kind,
                    at: event.at,
                    event_id: event.id,
                }
            })
            .collect();
        for o in &old {
            if !new.iter().any(|n| n.same(o)) {
                tx.delete_edge(o).await?;
            }
        }
        for n in &new {
            if !old.iter().any(|o| o.same(n)) {
                tx.insert_edge(n).await?;
            }
        }
        Ok(())
    }
}

/// The console refs a plain text (a comment's or a message's body) names, each once, in the
/// order they first appear: every `countersign://…` up to a space, a bracket or a quote, with
/// trailing punctuation dropped, read as the engine reads a link (`#<block>` kept apart).
/// Anything that does not parse as a console ref is not a mention.
pub(crate) fn mentioned_refs(text: &str) -> Vec<(String, String)> {
    const SCHEME: &str = "countersign://";
    let mut out: Vec<(String, String)> = Vec::new();
    let mut at = 0;
    while let Some(i) = text.get(at..).and_then(|rest| {
        rest.as_bytes()
            .windows(SCHEME.len())
            .position(|w| w.eq_ignore_ascii_case(SCHEME.as_bytes()))
    }) {
        let start = at + i;
        let end = text[start..]
            .find(|c: char| c.is_whitespace() || "<>()[]{}\"'`|".contains(c))
            .map_or(text.len(), |e| start + e);
        at = end;
        let r = text[start..end].trim_end_matches(|c: char| ".,;:!?*_~".contains(c));
        let (node, block) = r.split_once('#').unwrap_or((r, ""));
        if let Some(t) = doc::parse_ref(node) {
            let pair = (t.to_url(), block.to_owned());
            if !out.contains(&pair) {
                out.push(pair);
            }
        }
    }
    out
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

#[cfg(test)]
mod tests {
    use super::mentioned_refs;

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter().map(|(a, b)| ((*a).into(), (*b).into())).collect()
    }

    #[test]
    fn mentions_are_the_console_refs_a_text_names() {
        let id = "6f1c0a4e-0000-4000-8000-00000000000a";
        let text = format!(
            "See countersign://issue/PAY-1. Also [the plan](countersign://artifact/{id}#b-2), \
             <COUNTERSIGN://issue/PAY-1>, \"countersign://project/PAY\"; again \
             countersign://issue/PAY-1, countersign://issue/pay-1 countersign:// \
             countersign://agent/s-1/artifact/notes-2!"
        );
        assert_eq!(
            mentioned_refs(&text),
            pairs(&[
                ("countersign://issue/PAY-1", ""),
                (&format!("countersign://artifact/{id}"), "b-2"),
                ("countersign://project/PAY", ""),
                ("countersign://agent/s-1/artifact/notes-2", ""),
            ])
        );
        assert!(mentioned_refs("no refs here, just countersign: words").is_empty());
        // Multi-byte text around a ref, and a ref at the very end.
        assert_eq!(
            mentioned_refs("é→countersign://issue/AB-12"),
            pairs(&[("countersign://issue/AB-12", "")])
        );
    }
}
