//! Repository mappings (protocol §6.5): which project an issue imported from `owner/repo#n`
//! lands in, and each project's one default repository. Each change appends
//! `repo_mapping.changed` (the mapping; `null` once removed) in its own transaction.

use serde_json::{Value, json};

use super::work::not_found;
use super::*;
use crate::work::{Actor, ProjectKey, RepoMapping, RepoName};

fn repo_of(owner: &str, repo: &str) -> Result<RepoName, Error> {
    RepoName::of(owner, repo).ok_or_else(|| not_found("repository"))
}

impl Console {
    /// Every mapping, by repository.
    pub async fn repo_mappings(&self) -> Result<Vec<RepoMapping>, Error> {
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.projects().mappings().await?)
    }

    /// Maps a repository to a project (a whole record: `default` absent is false); `default`
    /// makes it the project's one default. INVALID_PROJECT for a project that is not a
    /// project's key.
    pub async fn put_repo_mapping(
        &self,
        actor: &Actor,
        owner: &str,
        repo: &str,
        project: &str,
        default: bool,
    ) -> Result<RepoMapping, Error> {
        let repo = repo_of(owner, repo)?;
        let project = ProjectKey::parse(project).ok_or_else(|| {
            Error::with_message(ErrorCode::INVALID_PROJECT, "`project` is a project key")
        })?;
        let mapping = RepoMapping {
            repo,
            project,
            default,
        };
        transact!(self, |tx| {
            if tx.projects().project(&mapping.project).await?.is_none() {
                return Err(Error::with_message(
                    ErrorCode::INVALID_PROJECT,
                    "no project has this key",
                ));
            }
            if tx.projects().mapping(&mapping.repo).await?.as_ref() == Some(&mapping) {
                return Ok(());
            }
            tx.projects().put_mapping(&mapping).await?;
            self.append(
                tx,
                "repo_mapping.changed",
                actor,
                Some(&mapping.project),
                None,
                json!(mapping),
            )
            .await?;
            Ok(())
        })?;
        Ok(mapping)
    }

    /// Removes a mapping no issue names as its repo: MAPPING_IN_USE (with the issues' keys)
    /// while one does; NOT_FOUND when there is none.
    pub async fn delete_repo_mapping(
        &self,
        actor: &Actor,
        owner: &str,
        repo: &str,
    ) -> Result<(), Error> {
        let repo = repo_of(owner, repo)?;
        transact!(self, |tx| {
            let m = tx
                .projects()
                .mapping(&repo)
                .await?
                .ok_or_else(|| not_found("repository mapping"))?;
            let issues = tx.projects().issues_of_repo(&repo).await?;
            if !issues.is_empty() {
                return Err(Error::new(ErrorCode::MAPPING_IN_USE).with_detail("issues", &issues));
            }
            tx.projects().delete_mapping(&repo).await?;
            self.append(
                tx,
                "repo_mapping.changed",
                actor,
                Some(&m.project),
                None,
                Value::Null,
            )
            .await
        })?;
        Ok(())
    }
}
