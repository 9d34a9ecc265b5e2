//! Projects and the repositories mapped to them ([`ProjectTx`]).

use async_trait::async_trait;
use countersign_common::sql::db_err;
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{
    IssueKey, Project, ProjectKey, ProjectTx, RepoMapping, RepoName,
};
use sqlx::Row;
use sqlx::any::AnyRow;

use super::{ProjectStore, corrupt};
use crate::time;

fn project_of(r: &AnyRow) -> Result<Project, StorageError> {
    let key: String = r.try_get("key").map_err(db_err)?;
    Ok(Project {
        key: ProjectKey::parse(&key).ok_or_else(|| corrupt("project key"))?,
        name: r.try_get("name").map_err(db_err)?,
        created_at: time(r.try_get("created_at").map_err(db_err)?)?,
    })
}

fn mapping_of(r: &AnyRow) -> Result<RepoMapping, StorageError> {
    let repo: String = r.try_get("repo").map_err(db_err)?;
    let project: String = r.try_get("project").map_err(db_err)?;
    let default: i64 = r.try_get("is_default").map_err(db_err)?;
    Ok(RepoMapping {
        repo: RepoName::parse(&repo).ok_or_else(|| corrupt("repository"))?,
        project: ProjectKey::parse(&project).ok_or_else(|| corrupt("project key"))?,
        default: default != 0,
    })
}

#[async_trait]
impl ProjectTx for ProjectStore<'_> {
    async fn insert_project(&mut self, p: &Project) -> Result<bool, StorageError> {
        // ON CONFLICT, not a caught unique violation: on PostgreSQL a failed statement aborts
        // the whole transaction.
        let r = sqlx::query(
            "INSERT INTO console_projects (key, name, created_at, next_issue) VALUES ($1, $2, $3, 1) \
             ON CONFLICT (key) DO NOTHING",
        )
        .bind(p.key.as_str())
        .bind(p.name.as_str())
        .bind(ms(&p.created_at))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(r.rows_affected() == 1)
    }

    async fn project(&mut self, key: &ProjectKey) -> Result<Option<Project>, StorageError> {
        sqlx::query("SELECT key, name, created_at FROM console_projects WHERE key = $1")
            .bind(key.as_str())
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(db_err)?
            .as_ref()
            .map(project_of)
            .transpose()
    }

    async fn projects(&mut self) -> Result<Vec<Project>, StorageError> {
        sqlx::query("SELECT key, name, created_at FROM console_projects ORDER BY key")
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(project_of)
            .collect()
    }

    async fn take_issue_number(
        &mut self,
        key: &ProjectKey,
    ) -> Result<Option<(i64, Option<String>)>, StorageError> {
        let Some(row) = sqlx::query(
            "UPDATE console_projects SET next_issue = next_issue + 1 WHERE key = $1 \
             RETURNING next_issue - 1 AS n, \
             (SELECT MAX(rank) FROM console_issues WHERE project = $1) AS last_rank",
        )
        .bind(key.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        else {
            return Ok(None);
        };
        Ok(Some((
            row.try_get("n").map_err(db_err)?,
            row.try_get("last_rank").map_err(db_err)?,
        )))
    }

    async fn put_mapping(&mut self, m: &RepoMapping) -> Result<(), StorageError> {
        if m.default {
            sqlx::query(
                "UPDATE console_repo_projects SET is_default = 0 WHERE project = $1 AND repo <> $2",
            )
            .bind(m.project.as_str())
            .bind(m.repo.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        sqlx::query(
            "INSERT INTO console_repo_projects (repo, project, is_default) VALUES ($1, $2, $3) \
             ON CONFLICT (repo) DO UPDATE SET project = $2, is_default = $3",
        )
        .bind(m.repo.as_str())
        .bind(m.project.as_str())
        .bind(i64::from(m.default))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn mapping(&mut self, repo: &RepoName) -> Result<Option<RepoMapping>, StorageError> {
        let lock = self.lock_clause();
        sqlx::query(&format!(
            "SELECT repo, project, is_default FROM console_repo_projects WHERE repo = $1{lock}"
        ))
        .bind(repo.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(mapping_of)
        .transpose()
    }

    async fn mappings(&mut self) -> Result<Vec<RepoMapping>, StorageError> {
        sqlx::query("SELECT repo, project, is_default FROM console_repo_projects ORDER BY repo")
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(mapping_of)
            .collect()
    }

    async fn delete_mapping(&mut self, repo: &RepoName) -> Result<bool, StorageError> {
        let r = sqlx::query("DELETE FROM console_repo_projects WHERE repo = $1")
            .bind(repo.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(r.rows_affected() > 0)
    }

    async fn issues_of_repo(&mut self, repo: &RepoName) -> Result<Vec<IssueKey>, StorageError> {
        // A prefix compare, not LIKE: repository names hold `_`, which LIKE reads as a wildcard.
        let prefix = format!("{repo}#");
        sqlx::query(
            "SELECT key FROM console_issues WHERE repo IS NOT NULL \
             AND substr(repo, 1, CAST($2 AS INTEGER)) = $1 ORDER BY project, number",
        )
        .bind(prefix.as_str())
        .bind(prefix.len() as i64)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            let k: String = r.try_get("key").map_err(db_err)?;
            IssueKey::parse(&k).ok_or_else(|| corrupt("issue key"))
        })
        .collect()
    }
}
