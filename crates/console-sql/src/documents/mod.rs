//! [`countersign_console_core::work::DocumentTx`] on SQLite and PostgreSQL: artifacts, a
//! document's snapshot and edit log, versions (markdown, or the bytes of a file or image: BLOB on
//! SQLite, BYTEA on PostgreSQL), the reference graph's edges, unsubscribed sessions, and the
//! documents' full-text index.
//!
//! The index holds one row per part of an artifact: its filename (part `""`) and each of a
//! document's top-level blocks, so an edit re-indexes the blocks it changed, not the whole
//! document. A document matches a query when its parts hold every word between them; its score
//! and snippet are its best part's. SQLite: an FTS5 table over the rows (external content, kept
//! by triggers); PostgreSQL: a generated `tsvector` (configuration `simple`) with a GIN index,
//! as the issues' index.

use async_trait::async_trait;
use countersign_common::sql::{conflict_if_unique, db_err};
use countersign_console_core::Time;
use countersign_console_core::ids::{ArtifactId, SessionId};
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::documents::{
    Artifact, ArtifactKind, Content, DocumentTx, Edge, EdgeKind, EdgeQuery, LogEntry,
    PrimaryDocument, Scope, Snapshot, StoredDocument, Version, VersionKind, VersionRef,
};
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{Event, EventPage, Hit, IssueKey, ProjectKey};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::time;
use crate::work::{Args, DocumentStore, corrupt, event_of, id_in, json_of, subscribers_of, text};

mod migration;
pub(crate) mod search;

pub(crate) use migration::{MIGRATION_8_POSTGRES, MIGRATION_8_SQLITE};

const ARTIFACT_COLUMNS: &str = "id, scope, slug, filename, kind, content_type, size, token, \
     sequence, version, version_name, version_kind, settled, changed_at, changed_by, created_by, \
     created_at, updated_at, tasks_done, tasks_total, log_entry, log_len";
const VERSION_COLUMNS: &str = "number, name, kind, token, content_type, size, by_actor, created_at";
const EDGE_COLUMNS: &str = "from_ref, from_block, from_issue, to_ref, to_block, kind, at, event_id";
const EVENT_COLUMNS: &str =
    "id, kind, at, actor, project, issue, artifact, session, data, sequence";

fn artifact_of(r: &AnyRow) -> Result<Artifact, StorageError> {
    let g = |c: &str| -> Result<String, StorageError> { r.try_get(c).map_err(db_err) };
    let i = |c: &str| -> Result<i64, StorageError> { r.try_get(c).map_err(db_err) };
    let version = match r.try_get::<Option<i64>, _>("version").map_err(db_err)? {
        Some(number) => Some(VersionRef {
            number,
            name: r.try_get("version_name").map_err(db_err)?,
            kind: VersionKind::parse(
                &r.try_get::<Option<String>, _>("version_kind")
                    .map_err(db_err)?
                    .unwrap_or_default(),
            )
            .ok_or_else(|| corrupt("version kind"))?,
        }),
        None => None,
    };
    Ok(Artifact {
        id: id_in(r, "id", ArtifactId::parse)?,
        scope: Scope::parse(&g("scope")?).ok_or_else(|| corrupt("artifact scope"))?,
        slug: g("slug")?,
        filename: g("filename")?,
        kind: ArtifactKind::parse(&g("kind")?).ok_or_else(|| corrupt("artifact kind"))?,
        content_type: g("content_type")?,
        size: i("size")?,
        token: g("token")?,
        sequence: i("sequence")?,
        version,
        settled: i("settled")? != 0,
        changed_at: time(i("changed_at")?)?,
        changed_by: json_of(&g("changed_by")?, "actor")?,
        created_by: json_of(&g("created_by")?, "actor")?,
        created_at: time(i("created_at")?)?,
        updated_at: time(i("updated_at")?)?,
        tasks: (i("tasks_done")?, i("tasks_total")?),
        log_entry: i("log_entry")?,
        log_len: i("log_len")?,
    })
}

fn version_of(r: &AnyRow) -> Result<Version, StorageError> {
    let kind: String = r.try_get("kind").map_err(db_err)?;
    Ok(Version {
        number: r.try_get("number").map_err(db_err)?,
        name: r.try_get("name").map_err(db_err)?,
        kind: VersionKind::parse(&kind).ok_or_else(|| corrupt("version kind"))?,
        token: r.try_get("token").map_err(db_err)?,
        content_type: r.try_get("content_type").map_err(db_err)?,
        size: r.try_get("size").map_err(db_err)?,
        by: json_of(
            &r.try_get::<String, _>("by_actor").map_err(db_err)?,
            "actor",
        )?,
        created_at: time(r.try_get("created_at").map_err(db_err)?)?,
    })
}

fn edge_of(r: &AnyRow) -> Result<Edge, StorageError> {
    let kind: String = r.try_get("kind").map_err(db_err)?;
    Ok(Edge {
        from: r.try_get("from_ref").map_err(db_err)?,
        from_block: r.try_get("from_block").map_err(db_err)?,
        from_issue: r
            .try_get::<Option<String>, _>("from_issue")
            .map_err(db_err)?
            .map(|k| IssueKey::parse(&k).ok_or_else(|| corrupt("issue key")))
            .transpose()?,
        to: r.try_get("to_ref").map_err(db_err)?,
        to_block: r.try_get("to_block").map_err(db_err)?,
        kind: EdgeKind::parse(&kind).ok_or_else(|| corrupt("edge kind"))?,
        at: time(r.try_get("at").map_err(db_err)?)?,
        event_id: r.try_get("event_id").map_err(db_err)?,
    })
}

/// The issue's console ref (what edges to it name).
fn issue_ref(key: &IssueKey) -> String {
    format!("countersign://issue/{key}")
}

impl DocumentStore<'_> {
    // `lock` is messages' (`pub(crate)` in messages.rs): the same ` FOR UPDATE` on PostgreSQL
    // in a write transaction (merge of documents and messages).

    async fn artifacts_where(
        &mut self,
        cond: &str,
        a: Args,
    ) -> Result<Vec<Artifact>, StorageError> {
        let sql = format!("SELECT {ARTIFACT_COLUMNS} FROM console_artifacts WHERE {cond}");
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(artifact_of)
            .collect()
    }
}

#[async_trait]
impl DocumentTx for DocumentStore<'_> {
    async fn insert_artifact(&mut self, a: &Artifact) -> Result<(), StorageError> {
        sqlx::query(&format!(
            "INSERT INTO console_artifacts ({ARTIFACT_COLUMNS}, issue, project, session) VALUES \
             ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, \
             $19, $20, $21, $22, $23, $24, $25)"
        ))
        .bind(a.id.to_string())
        .bind(a.scope.key())
        .bind(a.slug.as_str())
        .bind(a.filename.as_str())
        .bind(a.kind.as_str())
        .bind(a.content_type.as_str())
        .bind(a.size)
        .bind(a.token.as_str())
        .bind(a.sequence)
        .bind(a.version.as_ref().map(|v| v.number))
        .bind(a.version.as_ref().and_then(|v| v.name.clone()))
        .bind(a.version.as_ref().map(|v| v.kind.as_str().to_owned()))
        .bind(i64::from(a.settled))
        .bind(ms(&a.changed_at))
        .bind(text(&a.changed_by))
        .bind(text(&a.created_by))
        .bind(ms(&a.created_at))
        .bind(ms(&a.updated_at))
        .bind(a.tasks.0)
        .bind(a.tasks.1)
        .bind(a.log_entry)
        .bind(a.log_len)
        .bind(a.scope.issue().map(|k| k.as_str().to_owned()))
        .bind(a.scope.project().map(|p| p.as_str().to_owned()))
        .bind(a.scope.session().map(SessionId::to_string))
        .execute(&mut *self.tx)
        .await
        // Another upload took the slug or filename first (PostgreSQL; SQLite's writers
        // are serial): run the upload again, which then finds that one.
        .map_err(conflict_if_unique)?;
        Ok(())
    }

    async fn update_artifact(&mut self, a: &Artifact) -> Result<(), StorageError> {
        sqlx::query(
            "UPDATE console_artifacts SET kind = $2, content_type = $3, size = $4, token = $5, \
             sequence = $6, version = $7, version_name = $8, version_kind = $9, settled = $10, \
             changed_at = $11, changed_by = $12, updated_at = $13, tasks_done = $14, \
             tasks_total = $15, log_entry = $16, log_len = $17 WHERE id = $1",
        )
        .bind(a.id.to_string())
        .bind(a.kind.as_str())
        .bind(a.content_type.as_str())
        .bind(a.size)
        .bind(a.token.as_str())
        .bind(a.sequence)
        .bind(a.version.as_ref().map(|v| v.number))
        .bind(a.version.as_ref().and_then(|v| v.name.clone()))
        .bind(a.version.as_ref().map(|v| v.kind.as_str().to_owned()))
        .bind(i64::from(a.settled))
        .bind(ms(&a.changed_at))
        .bind(text(&a.changed_by))
        .bind(ms(&a.updated_at))
        .bind(a.tasks.0)
        .bind(a.tasks.1)
        .bind(a.log_entry)
        .bind(a.log_len)
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn artifact(&mut self, id: ArtifactId) -> Result<Option<Artifact>, StorageError> {
        let id = &id.to_string();
        let lock = self.lock_clause();
        sqlx::query(&format!(
            "SELECT {ARTIFACT_COLUMNS} FROM console_artifacts WHERE id = $1{lock}"
        ))
        .bind(id)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(artifact_of)
        .transpose()
    }

    async fn artifact_by_slug(
        &mut self,
        scope: &Scope,
        slug: &str,
    ) -> Result<Option<Artifact>, StorageError> {
        let mut a = Args::default();
        let cond = format!(
            "scope = {} AND slug = {}{}",
            a.push(scope.key()),
            a.push(slug.to_owned()),
            self.lock_clause()
        );
        Ok(self.artifacts_where(&cond, a).await?.into_iter().next())
    }

    async fn artifacts_by_filename(
        &mut self,
        scope: &Scope,
        filename: &str,
    ) -> Result<Vec<Artifact>, StorageError> {
        let mut a = Args::default();
        let cond = format!(
            "scope = {} AND filename = {} ORDER BY created_at, id{}",
            a.push(scope.key()),
            a.push(filename.to_owned()),
            self.lock_clause()
        );
        self.artifacts_where(&cond, a).await
    }

    async fn artifacts(&mut self, scope: &Scope) -> Result<Vec<Artifact>, StorageError> {
        let mut a = Args::default();
        let cond = format!("scope = {} ORDER BY created_at, id", a.push(scope.key()));
        self.artifacts_where(&cond, a).await
    }

    async fn document(&mut self, id: ArtifactId) -> Result<Option<StoredDocument>, StorageError> {
        let id = &id.to_string();
        let Some(r) =
            sqlx::query("SELECT markdown, block_ids FROM console_documents WHERE artifact = $1")
                .bind(id)
                .fetch_optional(&mut *self.tx)
                .await
                .map_err(db_err)?
        else {
            return Ok(None);
        };
        let ids: String = r.try_get("block_ids").map_err(db_err)?;
        let snapshot = Snapshot {
            markdown: r.try_get("markdown").map_err(db_err)?,
            block_ids: ids.split_ascii_whitespace().map(str::to_owned).collect(),
        };
        let log = sqlx::query(
            "SELECT entry, start_at, end_at, text, ops, block_ids, token FROM console_document_log \
             WHERE artifact = $1 ORDER BY entry",
        )
        .bind(id)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            let ids: String = r.try_get("block_ids").map_err(db_err)?;
            Ok(LogEntry {
                entry: r.try_get("entry").map_err(db_err)?,
                start: r.try_get("start_at").map_err(db_err)?,
                end: r.try_get("end_at").map_err(db_err)?,
                text: r.try_get("text").map_err(db_err)?,
                ops: r.try_get("ops").map_err(db_err)?,
                ids: ids.split_ascii_whitespace().map(str::to_owned).collect(),
                token: r.try_get("token").map_err(db_err)?,
            })
        })
        .collect::<Result<Vec<_>, StorageError>>()?;
        Ok(Some(StoredDocument { snapshot, log }))
    }

    async fn put_snapshot(&mut self, id: ArtifactId, d: &Snapshot) -> Result<(), StorageError> {
        let id = &id.to_string();
        // Block ids are `[A-Za-z0-9_-]`: one space apart is unambiguous and quick to split.
        sqlx::query(
            "INSERT INTO console_documents (artifact, markdown, block_ids) VALUES ($1, $2, $3) \
             ON CONFLICT (artifact) DO UPDATE SET markdown = excluded.markdown, \
             block_ids = excluded.block_ids",
        )
        .bind(id)
        .bind(d.markdown.as_str())
        .bind(d.block_ids.join(" "))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        sqlx::query("DELETE FROM console_document_log WHERE artifact = $1")
            .bind(id)
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn append_log(&mut self, id: ArtifactId, e: &LogEntry) -> Result<(), StorageError> {
        let id = &id.to_string();
        sqlx::query(
            "INSERT INTO console_document_log \
             (artifact, entry, start_at, end_at, text, ops, block_ids, token) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(id)
        .bind(e.entry)
        .bind(e.start)
        .bind(e.end)
        .bind(e.text.as_str())
        .bind(e.ops.as_str())
        .bind(e.ids.join(" "))
        .bind(e.token.as_str())
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn insert_version(
        &mut self,
        artifact: ArtifactId,
        v: &Version,
        content: &Content,
    ) -> Result<(), StorageError> {
        let artifact = &artifact.to_string();
        let (markdown, bytes) = match content {
            Content::Markdown(m) => (Some(m.as_str()), None),
            Content::Bytes(b) => (None, Some(b.clone())),
        };
        sqlx::query(&format!(
            "INSERT INTO console_artifact_versions (artifact, {VERSION_COLUMNS}, markdown, bytes) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
        ))
        .bind(artifact)
        .bind(v.number)
        .bind(v.name.clone())
        .bind(v.kind.as_str())
        .bind(v.token.as_str())
        .bind(v.content_type.as_str())
        .bind(v.size)
        .bind(text(&v.by))
        .bind(ms(&v.created_at))
        .bind(markdown)
        .bind(bytes)
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn name_version(
        &mut self,
        artifact: ArtifactId,
        number: i64,
        name: &str,
    ) -> Result<(), StorageError> {
        let artifact = &artifact.to_string();
        sqlx::query(
            "UPDATE console_artifact_versions SET name = $3, kind = 'named' \
             WHERE artifact = $1 AND number = $2",
        )
        .bind(artifact)
        .bind(number)
        .bind(name)
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn version(
        &mut self,
        artifact: ArtifactId,
        number: i64,
    ) -> Result<Option<(Version, Content)>, StorageError> {
        let artifact = &artifact.to_string();
        let row = sqlx::query(&format!(
            "SELECT {VERSION_COLUMNS}, markdown, bytes FROM console_artifact_versions \
             WHERE artifact = $1 AND number = $2"
        ))
        .bind(artifact)
        .bind(number)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?;
        row.map(|r| -> Result<(Version, Content), StorageError> {
            let v = version_of(&r)?;
            let markdown: Option<String> = r.try_get("markdown").map_err(db_err)?;
            let content = match markdown {
                Some(m) => Content::Markdown(m),
                None => Content::Bytes(
                    r.try_get::<Option<Vec<u8>>, _>("bytes")
                        .map_err(db_err)?
                        .unwrap_or_default(),
                ),
            };
            Ok((v, content))
        })
        .transpose()
    }

    async fn versions(&mut self, artifact: ArtifactId) -> Result<Vec<Version>, StorageError> {
        let artifact = &artifact.to_string();
        sqlx::query(&format!(
            "SELECT {VERSION_COLUMNS} FROM console_artifact_versions WHERE artifact = $1 \
             ORDER BY number"
        ))
        .bind(artifact)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(version_of)
        .collect()
    }

    async fn document_events(
        &mut self,
        artifact: ArtifactId,
        page: &EventPage,
    ) -> Result<Vec<Event>, StorageError> {
        let artifact = &artifact.to_string();
        let mut a = Args::default();
        let mut conds = vec![
            format!("artifact = {}", a.push(artifact.to_owned())),
            "sequence IS NOT NULL".to_owned(),
        ];
        if let Some(x) = page.after {
            conds.push(format!("sequence > {}", a.push(x)));
        }
        if let Some(x) = page.before {
            conds.push(format!("sequence < {}", a.push(x)));
        }
        if !page.ids.is_empty() {
            conds.push(format!("id IN {}", a.int_list(self.backend, &page.ids)));
        }
        let order = if page.descending { "DESC" } else { "ASC" };
        let limit = a.push(i64::from(page.limit));
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM console_events WHERE {} ORDER BY sequence {order} LIMIT {limit}",
            conds.join(" AND ")
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(event_of)
            .collect()
    }

    async fn document_subscribers(
        &mut self,
        artifact: ArtifactId,
    ) -> Result<Vec<(SessionId, Time)>, StorageError> {
        let artifact = &artifact.to_string();
        let rows = sqlx::query(
            "SELECT e.session AS session, MIN(e.at) AS since FROM console_events e \
             LEFT JOIN console_artifact_unsubscribed u \
             ON u.artifact = e.artifact AND u.session = e.session \
             WHERE e.artifact = $1 AND e.session IS NOT NULL \
             AND (u.through_event IS NULL OR e.id > u.through_event) \
             GROUP BY e.session ORDER BY MIN(e.at), e.session",
        )
        .bind(artifact)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?;
        subscribers_of(&rows)
    }

    async fn document_unsubscribe(
        &mut self,
        artifact: ArtifactId,
        session: &SessionId,
    ) -> Result<(), StorageError> {
        let artifact = &artifact.to_string();
        sqlx::query(
            "INSERT INTO console_artifact_unsubscribed (artifact, session, through_event) \
             SELECT $1, $2, COALESCE(MAX(id), 0) FROM console_events WHERE true \
             ON CONFLICT (artifact, session) DO UPDATE SET through_event = excluded.through_event",
        )
        .bind(artifact)
        .bind(session.as_str())
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn index_text(
        &mut self,
        artifact: ArtifactId,
        parts: &[(String, String)],
        removed: &[String],
    ) -> Result<(), StorageError> {
        let artifact = &artifact.to_string();
        // Delete then insert (never UPDATE): SQLite's FTS5 triggers take each row out of the
        // index with the text it was indexed under.
        for part in removed.iter().chain(parts.iter().map(|(p, _)| p)) {
            sqlx::query("DELETE FROM console_artifact_text WHERE artifact = $1 AND part = $2")
                .bind(artifact)
                .bind(part.as_str())
                .execute(&mut *self.tx)
                .await
                .map_err(db_err)?;
        }
        for (part, body) in parts {
            sqlx::query(
                "INSERT INTO console_artifact_text (artifact, part, body) VALUES ($1, $2, $3)",
            )
            .bind(artifact)
            .bind(part.as_str())
            .bind(body.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn clear_text(&mut self, artifact: ArtifactId) -> Result<(), StorageError> {
        let artifact = &artifact.to_string();
        sqlx::query("DELETE FROM console_artifact_text WHERE artifact = $1")
            .bind(artifact)
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn search_documents(
        &mut self,
        words: &[String],
        any: bool,
        project: Option<&ProjectKey>,
        limit: u32,
    ) -> Result<(Vec<Hit>, i64), StorageError> {
        self.document_hits(words, any, project, limit).await
    }

    async fn edges_from(
        &mut self,
        from: &str,
        blocks: Option<&[String]>,
    ) -> Result<Vec<Edge>, StorageError> {
        let mut a = Args::default();
        let mut cond = format!("from_ref = {}", a.push(from.to_owned()));
        if let Some(b) = blocks {
            if b.is_empty() {
                return Ok(Vec::new());
            }
            let list = a.list(self.backend, b);
            cond.push_str(&format!(" AND from_block IN {list}"));
        }
        let sql = format!(
            "SELECT {EDGE_COLUMNS} FROM console_references WHERE {cond} ORDER BY event_id, to_ref"
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(edge_of)
            .collect()
    }

    async fn insert_edge(&mut self, e: &Edge) -> Result<(), StorageError> {
        sqlx::query(&format!(
            "INSERT INTO console_references ({EDGE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (from_ref, from_block, to_ref, to_block, kind) DO NOTHING"
        ))
        .bind(e.from.as_str())
        .bind(e.from_block.as_str())
        .bind(e.from_issue.as_ref().map(|k| k.as_str().to_owned()))
        .bind(e.to.as_str())
        .bind(e.to_block.as_str())
        .bind(e.kind.as_str())
        .bind(ms(&e.at))
        .bind(e.event_id)
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn delete_edge(&mut self, e: &Edge) -> Result<(), StorageError> {
        sqlx::query(
            "DELETE FROM console_references WHERE from_ref = $1 AND from_block = $2 \
             AND to_ref = $3 AND to_block = $4 AND kind = $5",
        )
        .bind(e.from.as_str())
        .bind(e.from_block.as_str())
        .bind(e.to.as_str())
        .bind(e.to_block.as_str())
        .bind(e.kind.as_str())
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn edges(&mut self, q: &EdgeQuery) -> Result<Vec<Edge>, StorageError> {
        let mut a = Args::default();
        let mut conds: Vec<String> = Vec::new();
        if let Some(t) = &q.to {
            conds.push(format!("to_ref = {}", a.push(t.clone())));
        }
        if let Some(f) = &q.from {
            conds.push(format!("from_ref = {}", a.push(f.clone())));
        }
        if let Some(k) = q.kind {
            conds.push(format!("kind = {}", a.push(k.as_str().to_owned())));
        }
        if let Some(s) = q.since {
            conds.push(format!("event_id > {}", a.push(s)));
        }
        let filter = if conds.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", conds.join(" AND "))
        };
        let sql = format!(
            "SELECT {EDGE_COLUMNS} FROM console_references{filter} \
             ORDER BY event_id, from_ref, from_block, to_ref, to_block, kind"
        );
        sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(edge_of)
            .collect()
    }

    async fn issue_edges(
        &mut self,
        key: &IssueKey,
    ) -> Result<(Vec<Edge>, Vec<Edge>), StorageError> {
        let incoming = self
            .edges(&EdgeQuery {
                to: Some(issue_ref(key)),
                from: None,
                kind: None,
                since: None,
            })
            .await?;
        let outgoing = sqlx::query(&format!(
            "SELECT {EDGE_COLUMNS} FROM console_references WHERE from_issue = $1 OR from_ref = $2 \
             ORDER BY event_id, from_ref, from_block, to_ref, to_block, kind"
        ))
        .bind(key.as_str())
        .bind(issue_ref(key))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(edge_of)
        .collect::<Result<Vec<_>, _>>()?;
        Ok((incoming, outgoing))
    }

    async fn block_ref_counts(
        &mut self,
        node: &str,
    ) -> Result<Vec<(String, i64, i64)>, StorageError> {
        let rows = sqlx::query(
            "SELECT block, SUM(incoming) AS incoming, SUM(outgoing) AS outgoing FROM ( \
             SELECT to_block AS block, 1 AS incoming, 0 AS outgoing FROM console_references \
             WHERE to_ref = $1 AND to_block <> '' \
             UNION ALL \
             SELECT from_block AS block, 0 AS incoming, 1 AS outgoing FROM console_references \
             WHERE from_ref = $2 AND from_block <> '') x GROUP BY block",
        )
        .bind(node)
        .bind(node)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?;
        rows.iter()
            .map(|r| {
                Ok((
                    r.try_get("block").map_err(db_err)?,
                    r.try_get("incoming").map_err(db_err)?,
                    r.try_get("outgoing").map_err(db_err)?,
                ))
            })
            .collect()
    }

    async fn primary_documents(
        &mut self,
        issues: &[IssueKey],
    ) -> Result<Vec<(IssueKey, PrimaryDocument)>, StorageError> {
        if issues.is_empty() {
            return Ok(Vec::new());
        }
        let mut a = Args::default();
        let keys: Vec<&str> = issues.iter().map(IssueKey::as_str).collect();
        let list = a.list(self.backend, &keys);
        let sql = format!(
            "SELECT issue, id, slug, tasks_done, tasks_total FROM console_artifacts \
             WHERE kind = 'document' AND issue IN {list} ORDER BY issue, created_at, id"
        );
        let rows = sqlx::query_with(&sql, a.build())
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?;
        let mut out: Vec<(IssueKey, PrimaryDocument)> = Vec::new();
        for r in &rows {
            let issue: String = r.try_get("issue").map_err(db_err)?;
            let issue = IssueKey::parse(&issue).ok_or_else(|| corrupt("issue key"))?;
            if out.last().is_some_and(|(k, _)| *k == issue) {
                continue;
            }
            out.push((
                issue,
                PrimaryDocument {
                    id: id_in(r, "id", ArtifactId::parse)?,
                    slug: r.try_get("slug").map_err(db_err)?,
                    tasks: (
                        r.try_get("tasks_done").map_err(db_err)?,
                        r.try_get("tasks_total").map_err(db_err)?,
                    ),
                },
            ));
        }
        Ok(out)
    }
}
