//! Uploads (protocol §6.2): a new artifact in a scope, or a new version of the one its
//! filename names.

use super::*;
use crate::work::documents::{
    classify, essence, is_filename, is_slug, media_type, slug_of, slug_with_suffix,
};

/// An upload checked before its transaction: what it stores, and a document as the engine
/// made it.
struct Checked {
    kind: ArtifactKind,
    /// The type it is stored under (a document's `text/markdown`, an image's sniffed type).
    content_type: String,
    parsed: Option<Parsed>,
    token: String,
    size: i64,
    content: Content,
}

impl Checked {
    fn tasks(&self) -> (i64, i64) {
        self.parsed.as_ref().map_or((0, 0), |p| p.tasks)
    }
}

impl Documents<'_> {
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
        let checked = self.check_upload(at, &up)?;
        // The whole `WorkTx`: a new version of a document goes through the asks' code in the
        // same transaction (an open approval ask follows the new content).
        let view = transact!(self.console, |tx, after| {
            let scope = self.scope_in(tx, at).await?;
            let mut existing = tx
                .documents()
                .artifacts_by_filename(&scope, &up.filename)
                .await?;
            let a = match existing.pop() {
                Some(a) => self.upload_version(tx, a, &up, &checked, actor).await?,
                None => self.upload_new(tx, scope, &up, &checked, actor).await?,
            };
            let view = ArtifactView::of(&a);
            after.keep_document(checked.parsed.as_ref().map(|p| (a, p.doc.clone())));
            Ok(view)
        })?;
        tracing::info!(artifact = %view.id, kind = view.kind.as_str(), "artifact uploaded");
        Ok(view)
    }

    /// An upload's filename, slug and type checked, and a document parsed.
    fn check_upload(&self, at: At<'_>, up: &Upload) -> Result<Checked, Error> {
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
        let (token, size, content) = match &parsed {
            Some(p) => (
                p.token.clone(),
                p.snapshot.markdown.len() as i64,
                Content::Markdown(p.snapshot.markdown.clone()),
            ),
            None => (
                bytes_token(&up.content),
                up.content.len() as i64,
                Content::Bytes(up.content.clone()),
            ),
        };
        Ok(Checked {
            kind,
            content_type,
            parsed,
            token,
            size,
            content,
        })
    }

    /// An upload of a filename the scope has: the artifact's next version (its edits not yet
    /// in a version settle first), appending `document.versioned`.
    async fn upload_version(
        &self,
        tx: &mut dyn WorkTx,
        mut a: Artifact,
        up: &Upload,
        c: &Checked,
        actor: &Actor,
    ) -> Result<Artifact, Error> {
        if up.slug.as_ref().is_some_and(|s| *s != a.slug) {
            return Err(artifact_input(format!(
                "this filename's artifact has the slug `{}`",
                a.slug
            )));
        }
        if (a.kind == ArtifactKind::Document) != (c.kind == ArtifactKind::Document) {
            return Err(artifact_input(if a.kind == ArtifactKind::Document {
                "this filename is a markdown document: a new version is markdown"
            } else {
                "this filename is a file: a new version is not markdown"
            }));
        }
        let now = self.console.now();
        // Edits not yet in a version are kept: they settle before the upload replaces them.
        if !a.settled {
            let by = a.changed_by.clone();
            self.new_version(tx, &mut a, None, VersionKind::Settled, &by, now, actor)
                .await?;
        }
        a.kind = c.kind;
        a.content_type = c.content_type.clone();
        a.size = c.size;
        a.token = c.token.clone();
        a.tasks = c.tasks();
        a.log_len = 0;
        a.changed_at = now;
        a.changed_by = actor.clone();
        a.updated_at = now;
        let number = a.version.as_ref().map_or(1, |v| v.number + 1);
        let info = self
            .store_upload(tx, &a, number, &c.content, c.parsed.as_ref(), actor)
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
        if let (Some(e), Some(p)) = (&e, &c.parsed) {
            self.keep_references(tx, &a, &p.refs, None, e).await?;
        }
        Ok(a)
    }

    /// An upload of a filename the scope lacks: a new artifact (its slug given, else a free
    /// one made from the filename) at version 1, appending `document.created`.
    async fn upload_new(
        &self,
        tx: &mut dyn WorkTx,
        scope: Scope,
        up: &Upload,
        c: &Checked,
        actor: &Actor,
    ) -> Result<Artifact, Error> {
        let slug = match &up.slug {
            Some(s) => {
                if tx.documents().artifact_by_slug(&scope, s).await?.is_some() {
                    return Err(artifact_input(format!(
                        "another artifact here has the slug `{s}`"
                    )));
                }
                s.clone()
            }
            None => self.free_slug(tx, &scope, &slug_of(&up.filename)).await?,
        };
        let agent = matches!(scope, Scope::Agent(_));
        let now = self.console.now();
        let a = Artifact {
            id: self.console.new_id(ArtifactId::from_random),
            scope,
            slug,
            filename: up.filename.clone(),
            kind: c.kind,
            content_type: c.content_type.clone(),
            size: c.size,
            token: c.token.clone(),
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
            tasks: c.tasks(),
            log_entry: 0,
            log_len: 0,
        };
        tx.documents().insert_artifact(&a).await?;
        self.store_upload(tx, &a, 1, &c.content, c.parsed.as_ref(), actor)
            .await?;
        if !agent {
            let e = self
                .append_document(tx, &a, "document.created", actor, &[])
                .await?;
            if let Some(p) = &c.parsed {
                self.keep_references(tx, &a, &p.refs, None, &e).await?;
            }
        }
        Ok(a)
    }

    /// The upload's content as version `number`, and for a document its current content; the
    /// artifact's index (filename, and a document's blocks) written afresh.
    /// The whole `WorkTx`: an open approval ask follows a document's new content (the asks'
    /// code, in the upload's transaction).
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
            created_at: self.console.now(),
        };
        tx.documents().insert_version(a.id, &v, content).await?;
        if let Some(p) = parsed {
            tx.documents().put_snapshot(a.id, &p.snapshot).await?;
            // An open approval ask follows the new content: its agent's turn.
            self.console.asks().approval_follows(tx, a.id).await?;
        }
        if !matches!(a.scope, Scope::Agent(_)) {
            tx.documents().clear_text(a.id).await?;
            let mut parts = vec![(String::new(), a.filename.clone())];
            if let Some(p) = parsed {
                parts.extend(p.parts.iter().cloned());
            }
            tx.documents().index_text(a.id, &parts, &[]).await?;
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
        if tx
            .documents()
            .artifact_by_slug(scope, base)
            .await?
            .is_none()
        {
            return Ok(base.to_owned());
        }
        for n in 2..10_000 {
            let s = slug_with_suffix(base, n);
            if tx.documents().artifact_by_slug(scope, &s).await?.is_none() {
                return Ok(s);
            }
        }
        Err(artifact_input("no free slug is left for this filename"))
    }
}
