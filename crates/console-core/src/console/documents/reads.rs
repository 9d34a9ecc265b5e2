//! Reads of an artifact (its metadata, versions, text, event log, subscribers), naming a
//! version, and unsubscribing a session from a document.

use super::*;
use crate::work::documents::sniff_image;
use crate::work::{EventPage, Subscriber, rules};

impl Documents<'_> {
    /// Document metadata and current version.
    pub async fn artifact(&self, id: ArtifactId) -> Result<ArtifactView, Error> {
        Ok(ArtifactView::of(&self.current(id).await?))
    }

    /// The artifacts of an issue or project, oldest first.
    pub async fn artifacts_of(&self, at: At<'_>) -> Result<Vec<ArtifactView>, Error> {
        let ids: Vec<ArtifactId> = {
            let mut tx = self.read().await?;
            let scope = self.scope_in(&mut *tx, at).await?;
            let list = tx.documents().artifacts(&scope).await?;
            if !list.iter().any(|a| self.settle_due(a)) {
                return Ok(list.iter().map(ArtifactView::of).collect());
            }
            list.into_iter().map(|a| a.id).collect()
        };
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push(ArtifactView::of(&self.current(id).await?));
        }
        Ok(out)
    }

    /// An agent conversation's artifact with its versions.
    pub async fn agent_artifact(
        &self,
        session: &str,
        slug: &str,
    ) -> Result<ArtifactWithVersions, Error> {
        let mut tx = self.read().await?;
        let scope = self.scope_in(&mut *tx, At::Agent(session)).await?;
        let a = self.by_slug_in(&mut *tx, &scope, slug).await?;
        let versions = tx.documents().versions(a.id).await?;
        Ok(ArtifactWithVersions {
            artifact: ArtifactView::of(&a),
            versions: versions.iter().map(VersionInfo::of).collect(),
        })
    }

    /// Every version of an artifact, oldest first (the document page's list).
    pub async fn versions(&self, id: ArtifactId) -> Result<Vec<VersionInfo>, Error> {
        let a = self.current(id).await?;
        let mut tx = self.read().await?;
        Ok(tx
            .documents()
            .versions(a.id)
            .await?
            .iter()
            .map(VersionInfo::of)
            .collect())
    }

    /// A document's canonical markdown, token and current version.
    pub async fn text(&self, id: ArtifactId) -> Result<TextView, Error> {
        let a = self.current(id).await?;
        if a.kind != ArtifactKind::Document {
            return Err(not_document());
        }
        let mut tx = self.read().await?;
        Ok(TextView {
            markdown: self.markdown_of(&mut *tx, &a).await?,
            token: a.token,
            version: a.version,
        })
    }

    /// One version: a document's as JSON, a file's or image's bytes. A number that is not a
    /// version: 404.
    pub async fn version(&self, id: ArtifactId, number: &str) -> Result<VersionRead, Error> {
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
            let mut tx = self.read().await?;
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
        let mut tx = self.read().await?;
        let (v, content) = tx
            .documents()
            .version(a.id, number)
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
        id: ArtifactId,
        name: &str,
    ) -> Result<NamedVersion, Error> {
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
        transact!(self.console, |tx| {
            let mut a = self.settled_in(tx, id).await?;
            let by = actor.clone();
            let now = self.console.now();
            let (info, _) = self
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
            Ok(answer)
        })
    }

    /// A page of a document's event log.
    pub async fn document_events(
        &self,
        id: ArtifactId,
        page: &EventPage,
    ) -> Result<Vec<Event>, Error> {
        let a = self.current(id).await?;
        let mut tx = self.read().await?;
        Ok(tx.documents().document_events(a.id, page).await?)
    }

    /// Sessions subscribed to a document's topics, first subscribed first.
    pub async fn document_subscribers(&self, id: ArtifactId) -> Result<Vec<Subscriber>, Error> {
        let a = self.current(id).await?;
        let mut tx = self.read().await?;
        Ok(tx
            .documents()
            .document_subscribers(a.id)
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
        id: ArtifactId,
        session: &SessionId,
    ) -> Result<(), Error> {
        transact!(self.console, |tx| {
            let a = Self::artifact_in(tx, id).await?;
            if !tx
                .documents()
                .document_subscribers(a.id)
                .await?
                .iter()
                .any(|(s, _)| s == session)
            {
                return Ok(());
            }
            tx.documents().document_unsubscribe(a.id, session).await?;
            let data = json!({
                "issue": a.scope.issue(),
                "artifact": a.id,
                "session_id": session,
                "by": actor,
            });
            let e = self.artifact_event(&a, "subscription.removed", actor, data);
            tx.events().append_event(&e, None).await?;
            Ok(())
        })
    }
}
