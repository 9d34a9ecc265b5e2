//! [`countersign_console_core::work::DeliveryTx`] on SQLite and PostgreSQL: delivery settings
//! and freshness (one row), the synced pull requests and runs (each record as JSON beside the
//! columns the reads filter and join on), the commits each deploy shipped, session groups
//! (with a member table that keeps a session in one group), architecture sources and the
//! imported component trees.

use async_trait::async_trait;
use countersign_common::sql::{Backend, db_err};
use countersign_console_core::Time;
use countersign_console_core::ids::SessionGroupId;
use countersign_console_core::storage::StorageError;
use countersign_console_core::work::delivery::{
    ArchitectureSource, Component, DeliverySettings, Freshness, Pull, Run, SessionGroup,
};
use countersign_console_core::work::store::ms;
use countersign_console_core::work::{DeliveryTx, Issue, IssueKey, ProjectKey};
use sqlx::Row;
use sqlx::any::AnyRow;

use crate::time;
use crate::work::{Args, DeliveryStore, ISSUE_COLUMNS, corrupt, id_of, issue_of, json_of, text};

/// Version 12: the synced data's generation (what a kept copy of it is good for).
pub(crate) const MIGRATION_12: &[&str] =
    &["ALTER TABLE console_delivery_state ADD COLUMN generation BIGINT NOT NULL DEFAULT 0"];

/// Version 7: delivery and architecture (issue 15).
pub(crate) const MIGRATION_7: &[&str] = &[
    "CREATE TABLE console_delivery_state (
        id BIGINT PRIMARY KEY,
        settings TEXT,
        synced_at BIGINT,
        error TEXT
    )",
    "CREATE TABLE console_delivery_pulls (
        repo TEXT NOT NULL,
        number BIGINT NOT NULL,
        body TEXT NOT NULL,
        merged_at BIGINT NOT NULL,
        merge_sha TEXT,
        reverts BIGINT,
        deploy_run BIGINT,
        deployed_at BIGINT,
        reverted_by BIGINT,
        PRIMARY KEY (repo, number)
    )",
    "CREATE INDEX console_delivery_pulls_merged ON console_delivery_pulls (merged_at)",
    "CREATE INDEX console_delivery_pulls_deployed ON console_delivery_pulls (deployed_at)",
    "CREATE INDEX console_delivery_pulls_sha ON console_delivery_pulls (repo, merge_sha)",
    "CREATE TABLE console_delivery_runs (
        id BIGINT PRIMARY KEY,
        repo TEXT NOT NULL,
        workflow_path TEXT NOT NULL,
        event TEXT NOT NULL,
        started_at BIGINT NOT NULL,
        has_jobs BIGINT NOT NULL,
        deploy_at BIGINT,
        body TEXT NOT NULL
    )",
    "CREATE INDEX console_delivery_runs_started ON console_delivery_runs (started_at)",
    "CREATE INDEX console_delivery_runs_workflow ON console_delivery_runs (workflow_path, event, started_at)",
    "CREATE INDEX console_delivery_runs_deploy ON console_delivery_runs (repo, deploy_at)",
    "CREATE TABLE console_delivery_deploy_commits (
        repo TEXT NOT NULL,
        sha TEXT NOT NULL,
        run BIGINT NOT NULL,
        at BIGINT NOT NULL,
        PRIMARY KEY (repo, sha)
    )",
    "CREATE INDEX console_delivery_deploy_commits_run ON console_delivery_deploy_commits (run)",
    "CREATE TABLE console_session_groups (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        name_key TEXT NOT NULL UNIQUE,
        sessions TEXT NOT NULL
    )",
    "CREATE TABLE console_session_group_members (
        session TEXT PRIMARY KEY,
        group_id TEXT NOT NULL
    )",
    "CREATE TABLE console_architecture_sources (
        project TEXT PRIMARY KEY,
        repo TEXT NOT NULL,
        branch TEXT NOT NULL,
        commit_sha TEXT,
        synced_at BIGINT,
        last_error TEXT
    )",
    "CREATE TABLE console_components (
        project TEXT NOT NULL,
        id TEXT NOT NULL,
        name TEXT NOT NULL,
        parent TEXT,
        position BIGINT NOT NULL,
        PRIMARY KEY (project, id)
    )",
];

fn pull_of(r: &AnyRow) -> Result<Pull, StorageError> {
    let mut p: Pull = json_of(
        &r.try_get::<String, _>("body").map_err(db_err)?,
        "pull request",
    )?;
    p.deploy_run = r.try_get("deploy_run").map_err(db_err)?;
    p.deployed_at = r
        .try_get::<Option<i64>, _>("deployed_at")
        .map_err(db_err)?
        .map(time)
        .transpose()?;
    p.reverted_by = r.try_get("reverted_by").map_err(db_err)?;
    Ok(p)
}

fn run_of(r: &AnyRow) -> Result<Run, StorageError> {
    json_of(&r.try_get::<String, _>("body").map_err(db_err)?, "run")
}

fn source_of(r: &AnyRow) -> Result<ArchitectureSource, StorageError> {
    let p: String = r.try_get("project").map_err(db_err)?;
    Ok(ArchitectureSource {
        project: ProjectKey::parse(&p).ok_or_else(|| corrupt("project key"))?,
        repo: r.try_get("repo").map_err(db_err)?,
        branch: r.try_get("branch").map_err(db_err)?,
        commit: r.try_get("commit_sha").map_err(db_err)?,
        synced_at: r
            .try_get::<Option<i64>, _>("synced_at")
            .map_err(db_err)?
            .map(time)
            .transpose()?,
        last_error: r.try_get("last_error").map_err(db_err)?,
    })
}

/// A session group from its row; a stored id that does not parse is an error naming its
/// column and value, stored sessions that do not parse one naming the group.
fn group_of(r: &AnyRow) -> Result<SessionGroup, StorageError> {
    let id: String = r.try_get("id").map_err(db_err)?;
    let row = format!("session group {id:?}");
    let sessions: String = r.try_get("sessions").map_err(db_err)?;
    Ok(SessionGroup {
        id: id_of("id", &id, SessionGroupId::parse)?,
        name: r.try_get("name").map_err(db_err)?,
        sessions: serde_json::from_str(&sessions).map_err(|_| {
            StorageError::Corrupt(format!("{row}: its stored sessions do not parse"))
        })?,
    })
}

const SOURCE_COLUMNS: &str = "project, repo, branch, commit_sha, synced_at, last_error";
const PULL_COLUMNS: &str = "body, deploy_run, deployed_at, reverted_by";

impl DeliveryStore<'_> {
    async fn state_row(&mut self) -> Result<Option<AnyRow>, StorageError> {
        let lock = self.lock_clause();
        sqlx::query(&format!(
            "SELECT settings, synced_at, error FROM console_delivery_state WHERE id = 1{lock}"
        ))
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)
    }

    async fn issues_where(
        &mut self,
        column: &str,
        values: &[String],
    ) -> Result<Vec<Issue>, StorageError> {
        if values.is_empty() {
            return Ok(Vec::new());
        }
        // A window's pull requests name thousands of keys and references: one parameter
        // holding them as a JSON array, not a parameter each (binding thousands costs more
        // than the lookups).
        let list = match self.backend {
            Backend::Sqlite => "SELECT value FROM json_each($1)",
            Backend::Postgres => "SELECT jsonb_array_elements_text($1::jsonb)",
        };
        sqlx::query(&format!(
            "SELECT {ISSUE_COLUMNS} FROM console_issues WHERE {column} IN ({list})"
        ))
        .bind(text(&values))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(issue_of)
        .collect()
    }
}

#[async_trait]
impl DeliveryTx for DeliveryStore<'_> {
    async fn delivery_settings(&mut self) -> Result<Option<DeliverySettings>, StorageError> {
        match self.state_row().await? {
            Some(r) => r
                .try_get::<Option<String>, _>("settings")
                .map_err(db_err)?
                .map(|s| json_of(&s, "delivery settings"))
                .transpose(),
            None => Ok(None),
        }
    }

    async fn put_delivery_settings(&mut self, s: &DeliverySettings) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_delivery_state (id, settings) VALUES (1, $1) \
             ON CONFLICT (id) DO UPDATE SET settings = excluded.settings",
        )
        .bind(text(s))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn freshness(&mut self) -> Result<Freshness, StorageError> {
        match self.state_row().await? {
            Some(r) => Ok(Freshness {
                synced_at: r
                    .try_get::<Option<i64>, _>("synced_at")
                    .map_err(db_err)?
                    .map(time)
                    .transpose()?,
                error: r.try_get("error").map_err(db_err)?,
            }),
            None => Ok(Freshness::default()),
        }
    }

    async fn put_freshness(&mut self, f: &Freshness) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_delivery_state (id, synced_at, error) VALUES (1, $1, $2) \
             ON CONFLICT (id) DO UPDATE SET synced_at = excluded.synced_at, error = excluded.error",
        )
        .bind(f.synced_at.as_ref().map(ms))
        .bind(f.error.clone())
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn clear_synced(&mut self) -> Result<(), StorageError> {
        self.delivery_written = true;
        for t in [
            "console_delivery_pulls",
            "console_delivery_runs",
            "console_delivery_deploy_commits",
        ] {
            sqlx::query(&format!("DELETE FROM {t}"))
                .execute(&mut *self.tx)
                .await
                .map_err(db_err)?;
        }
        sqlx::query("UPDATE console_delivery_state SET synced_at = NULL, error = NULL")
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(())
    }

    async fn put_pull(&mut self, p: &Pull) -> Result<(), StorageError> {
        self.delivery_written = true;
        sqlx::query(
            "INSERT INTO console_delivery_pulls \
             (repo, number, body, merged_at, merge_sha, reverts, deploy_run, deployed_at, reverted_by) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
             ON CONFLICT (repo, number) DO UPDATE SET body = excluded.body, \
             merged_at = excluded.merged_at, merge_sha = excluded.merge_sha, reverts = excluded.reverts, \
             deploy_run = COALESCE(excluded.deploy_run, console_delivery_pulls.deploy_run), \
             deployed_at = COALESCE(excluded.deployed_at, console_delivery_pulls.deployed_at), \
             reverted_by = COALESCE(excluded.reverted_by, console_delivery_pulls.reverted_by)",
        )
        .bind(p.repo.as_str())
        .bind(p.number)
        .bind(text(p))
        .bind(ms(&p.merged_at))
        .bind(p.merge_sha.clone())
        .bind(p.reverts)
        .bind(p.deploy_run)
        .bind(p.deployed_at.as_ref().map(ms))
        .bind(p.reverted_by)
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn pull(&mut self, repo: &str, number: i64) -> Result<Option<Pull>, StorageError> {
        sqlx::query(&format!(
            "SELECT {PULL_COLUMNS} FROM console_delivery_pulls WHERE repo = $1 AND number = $2"
        ))
        .bind(repo)
        .bind(number)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(pull_of)
        .transpose()
    }

    async fn delivery_generation(&mut self) -> Result<i64, StorageError> {
        let r = sqlx::query("SELECT generation FROM console_delivery_state WHERE id = 1")
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(db_err)?;
        match r {
            Some(r) => r.try_get("generation").map_err(db_err),
            None => Ok(0),
        }
    }

    async fn synced_rows(&mut self) -> Result<i64, StorageError> {
        sqlx::query(
            "SELECT (SELECT COUNT(*) FROM console_delivery_pulls) \
             + (SELECT COUNT(*) FROM console_delivery_runs) AS n",
        )
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?
        .try_get("n")
        .map_err(db_err)
    }

    async fn all_pulls(&mut self) -> Result<Vec<Pull>, StorageError> {
        sqlx::query(&format!(
            "SELECT {PULL_COLUMNS} FROM console_delivery_pulls ORDER BY merged_at, repo, number"
        ))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(pull_of)
        .collect()
    }

    async fn all_runs(&mut self) -> Result<Vec<Run>, StorageError> {
        sqlx::query("SELECT body FROM console_delivery_runs ORDER BY started_at, id")
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(run_of)
            .collect()
    }

    async fn pulls_for_window(&mut self, from: Time, to: Time) -> Result<Vec<Pull>, StorageError> {
        sqlx::query(&format!(
            "SELECT {PULL_COLUMNS} FROM console_delivery_pulls \
             WHERE (merged_at >= $1 AND merged_at < $2) \
                OR (deployed_at >= $1 AND deployed_at < $2) \
                OR (deploy_run IS NULL AND merged_at < $2) \
             ORDER BY merged_at, repo, number"
        ))
        .bind(ms(&from))
        .bind(ms(&to))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(pull_of)
        .collect()
    }

    async fn newest_merge(&mut self, repo: &str) -> Result<Option<Time>, StorageError> {
        let r =
            sqlx::query("SELECT MAX(merged_at) AS m FROM console_delivery_pulls WHERE repo = $1")
                .bind(repo)
                .fetch_one(&mut *self.tx)
                .await
                .map_err(db_err)?;
        r.try_get::<Option<i64>, _>("m")
            .map_err(db_err)?
            .map(time)
            .transpose()
    }

    async fn link_deploy(
        &mut self,
        repo: &str,
        shas: &[String],
        run: i64,
        at: Time,
    ) -> Result<u64, StorageError> {
        self.delivery_written = true;
        let mut n = 0;
        for chunk in shas.chunks(500) {
            let mut a = Args::default();
            let run_p = a.push(run);
            let at_p = a.push(ms(&at));
            let repo_p = a.push(repo.to_owned());
            let list: Vec<String> = chunk.iter().map(|s| a.push(s.clone())).collect();
            n += sqlx::query_with(
                &format!(
                    "UPDATE console_delivery_pulls SET deploy_run = {run_p}, deployed_at = {at_p} \
                     WHERE repo = {repo_p} AND deploy_run IS NULL AND merge_sha IN ({})",
                    list.join(", ")
                ),
                a.build(),
            )
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?
            .rows_affected();
        }
        Ok(n)
    }

    async fn put_deploy_commits(
        &mut self,
        repo: &str,
        run: i64,
        at: Time,
        shas: &[String],
    ) -> Result<(), StorageError> {
        // A deploy with no new commit still marks its range as read.
        let marker = format!("deploy:{run}");
        for sha in shas.iter().chain(std::iter::once(&marker)) {
            sqlx::query(
                "INSERT INTO console_delivery_deploy_commits (repo, sha, run, at) VALUES ($1, $2, $3, $4) \
                 ON CONFLICT (repo, sha) DO NOTHING",
            )
            .bind(repo)
            .bind(sha.as_str())
            .bind(run)
            .bind(ms(&at))
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn deploy_of_commit(
        &mut self,
        repo: &str,
        sha: &str,
    ) -> Result<Option<(i64, Time)>, StorageError> {
        match sqlx::query(
            "SELECT run, at FROM console_delivery_deploy_commits WHERE repo = $1 AND sha = $2",
        )
        .bind(repo)
        .bind(sha)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        {
            Some(r) => Ok(Some((
                r.try_get("run").map_err(db_err)?,
                time(r.try_get("at").map_err(db_err)?)?,
            ))),
            None => Ok(None),
        }
    }

    async fn mark_reverts(&mut self, repo: &str) -> Result<(), StorageError> {
        self.delivery_written = true;
        sqlx::query(
            "UPDATE console_delivery_pulls SET reverted_by = \
               (SELECT MIN(r.number) FROM console_delivery_pulls r \
                WHERE r.repo = console_delivery_pulls.repo AND r.reverts = console_delivery_pulls.number) \
             WHERE repo = $1 AND reverted_by IS NULL",
        )
        .bind(repo)
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn put_run(&mut self, r: &Run) -> Result<(), StorageError> {
        self.delivery_written = true;
        let deploy_at = r
            .production
            .as_ref()
            .filter(|p| p.success)
            .map(|p| ms(&p.finished_at));
        sqlx::query(
            "INSERT INTO console_delivery_runs \
             (id, repo, workflow_path, event, started_at, has_jobs, deploy_at, body) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
             ON CONFLICT (id) DO UPDATE SET repo = excluded.repo, workflow_path = excluded.workflow_path, \
             event = excluded.event, started_at = excluded.started_at, has_jobs = excluded.has_jobs, \
             deploy_at = excluded.deploy_at, body = excluded.body",
        )
        .bind(r.id)
        .bind(r.repo.as_str())
        .bind(r.workflow_path.as_str())
        .bind(r.event.as_str())
        .bind(ms(&r.started_at))
        .bind(i64::from(r.jobs.is_some()))
        .bind(deploy_at)
        .bind(text(r))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn run(&mut self, id: i64) -> Result<Option<Run>, StorageError> {
        sqlx::query("SELECT body FROM console_delivery_runs WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *self.tx)
            .await
            .map_err(db_err)?
            .as_ref()
            .map(run_of)
            .transpose()
    }

    async fn runs_between(&mut self, from: Time, to: Time) -> Result<Vec<Run>, StorageError> {
        sqlx::query(
            "SELECT body FROM console_delivery_runs WHERE started_at >= $1 AND started_at < $2 \
             ORDER BY started_at, id",
        )
        .bind(ms(&from))
        .bind(ms(&to))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(run_of)
        .collect()
    }

    async fn newest_run(
        &mut self,
        workflow_path: &str,
        event: &str,
    ) -> Result<Option<Time>, StorageError> {
        let r = sqlx::query(
            "SELECT MAX(started_at) AS m FROM console_delivery_runs WHERE workflow_path = $1 AND event = $2",
        )
        .bind(workflow_path)
        .bind(event)
        .fetch_one(&mut *self.tx)
        .await
        .map_err(db_err)?;
        r.try_get::<Option<i64>, _>("m")
            .map_err(db_err)?
            .map(time)
            .transpose()
    }

    async fn successful_deploys(&mut self, repo: &str) -> Result<Vec<Run>, StorageError> {
        sqlx::query(
            "SELECT body FROM console_delivery_runs WHERE repo = $1 AND deploy_at IS NOT NULL \
             ORDER BY deploy_at, id",
        )
        .bind(repo)
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(run_of)
        .collect()
    }

    async fn first_deploy(&mut self, repo: &str) -> Result<Option<Run>, StorageError> {
        sqlx::query(
            "SELECT body FROM console_delivery_runs WHERE repo = $1 AND deploy_at IS NOT NULL \
             ORDER BY deploy_at, id LIMIT 1",
        )
        .bind(repo)
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(run_of)
        .transpose()
    }

    async fn runs_without_jobs(
        &mut self,
        event: &str,
        limit: u32,
    ) -> Result<Vec<Run>, StorageError> {
        sqlx::query(
            "SELECT body FROM console_delivery_runs WHERE event = $1 AND has_jobs = 0 \
             ORDER BY started_at DESC, id DESC LIMIT $2",
        )
        .bind(event)
        .bind(i64::from(limit))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(run_of)
        .collect()
    }

    async fn deploys_with_commits(&mut self, repo: &str) -> Result<Vec<i64>, StorageError> {
        sqlx::query("SELECT DISTINCT run FROM console_delivery_deploy_commits WHERE repo = $1")
            .bind(repo)
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(|r| r.try_get("run").map_err(db_err))
            .collect()
    }

    async fn session_groups(&mut self) -> Result<Vec<SessionGroup>, StorageError> {
        sqlx::query("SELECT id, name, sessions FROM console_session_groups ORDER BY name_key")
            .fetch_all(&mut *self.tx)
            .await
            .map_err(db_err)?
            .iter()
            .map(group_of)
            .collect()
    }

    async fn session_group(
        &mut self,
        id: SessionGroupId,
    ) -> Result<Option<SessionGroup>, StorageError> {
        let lock = self.lock_clause();
        match sqlx::query(&format!(
            "SELECT id, name, sessions FROM console_session_groups WHERE id = $1{lock}"
        ))
        .bind(id.to_string())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        {
            Some(r) => group_of(&r).map(Some),
            None => Ok(None),
        }
    }

    async fn put_session_group(&mut self, g: &SessionGroup) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_session_groups (id, name, name_key, sessions) VALUES ($1, $2, $3, $4) \
             ON CONFLICT (id) DO UPDATE SET name = excluded.name, name_key = excluded.name_key, \
             sessions = excluded.sessions",
        )
        .bind(g.id.to_string())
        .bind(g.name.as_str())
        .bind(g.name.to_lowercase())
        .bind(text(&g.sessions))
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        sqlx::query("DELETE FROM console_session_group_members WHERE group_id = $1")
            .bind(g.id.to_string())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        for s in &g.sessions {
            sqlx::query(
                "INSERT INTO console_session_group_members (session, group_id) VALUES ($1, $2)",
            )
            .bind(s.as_str())
            .bind(g.id.to_string())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn delete_session_group(&mut self, id: SessionGroupId) -> Result<bool, StorageError> {
        let id = id.to_string();
        sqlx::query("DELETE FROM console_session_group_members WHERE group_id = $1")
            .bind(id.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        let r = sqlx::query("DELETE FROM console_session_groups WHERE id = $1")
            .bind(id.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(r.rows_affected() == 1)
    }

    async fn architecture_source(
        &mut self,
        project: &ProjectKey,
    ) -> Result<Option<ArchitectureSource>, StorageError> {
        sqlx::query(&format!(
            "SELECT {SOURCE_COLUMNS} FROM console_architecture_sources WHERE project = $1"
        ))
        .bind(project.as_str())
        .fetch_optional(&mut *self.tx)
        .await
        .map_err(db_err)?
        .as_ref()
        .map(source_of)
        .transpose()
    }

    async fn architecture_sources(&mut self) -> Result<Vec<ArchitectureSource>, StorageError> {
        sqlx::query(&format!(
            "SELECT {SOURCE_COLUMNS} FROM console_architecture_sources ORDER BY project"
        ))
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(source_of)
        .collect()
    }

    async fn put_architecture_source(
        &mut self,
        s: &ArchitectureSource,
    ) -> Result<(), StorageError> {
        sqlx::query(
            "INSERT INTO console_architecture_sources (project, repo, branch, commit_sha, synced_at, last_error) \
             VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (project) DO UPDATE SET repo = excluded.repo, branch = excluded.branch, \
             commit_sha = excluded.commit_sha, synced_at = excluded.synced_at, last_error = excluded.last_error",
        )
        .bind(s.project.as_str())
        .bind(s.repo.as_str())
        .bind(s.branch.as_str())
        .bind(s.commit.clone())
        .bind(s.synced_at.as_ref().map(ms))
        .bind(s.last_error.clone())
        .execute(&mut *self.tx)
        .await
        .map_err(db_err)?;
        Ok(())
    }

    async fn delete_architecture_source(
        &mut self,
        project: &ProjectKey,
    ) -> Result<bool, StorageError> {
        let r = sqlx::query("DELETE FROM console_architecture_sources WHERE project = $1")
            .bind(project.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        Ok(r.rows_affected() == 1)
    }

    async fn put_components(
        &mut self,
        project: &ProjectKey,
        components: &[Component],
    ) -> Result<(), StorageError> {
        sqlx::query("DELETE FROM console_components WHERE project = $1")
            .bind(project.as_str())
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        for (i, c) in components.iter().enumerate() {
            sqlx::query(
                "INSERT INTO console_components (project, id, name, parent, position) VALUES ($1, $2, $3, $4, $5)",
            )
            .bind(project.as_str())
            .bind(c.id.as_str())
            .bind(c.name.as_str())
            .bind(c.parent.clone())
            .bind(i as i64)
            .execute(&mut *self.tx)
            .await
            .map_err(db_err)?;
        }
        Ok(())
    }

    async fn components(&mut self, project: &ProjectKey) -> Result<Vec<Component>, StorageError> {
        sqlx::query(
            "SELECT id, name, parent FROM console_components WHERE project = $1 ORDER BY position",
        )
        .bind(project.as_str())
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            Ok(Component {
                id: r.try_get("id").map_err(db_err)?,
                name: r.try_get("name").map_err(db_err)?,
                parent: r.try_get("parent").map_err(db_err)?,
            })
        })
        .collect()
    }

    async fn all_components(&mut self) -> Result<Vec<(ProjectKey, Component)>, StorageError> {
        sqlx::query(
            "SELECT project, id, name, parent FROM console_components ORDER BY project, position",
        )
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(|r| {
            let p: String = r.try_get("project").map_err(db_err)?;
            Ok((
                ProjectKey::parse(&p).ok_or_else(|| corrupt("project key"))?,
                Component {
                    id: r.try_get("id").map_err(db_err)?,
                    name: r.try_get("name").map_err(db_err)?,
                    parent: r.try_get("parent").map_err(db_err)?,
                },
            ))
        })
        .collect()
    }

    async fn issues_by_keys(&mut self, keys: &[IssueKey]) -> Result<Vec<Issue>, StorageError> {
        let v: Vec<String> = keys.iter().map(|k| k.as_str().to_owned()).collect();
        self.issues_where("key", &v).await
    }

    async fn issues_by_refs(&mut self, refs: &[String]) -> Result<Vec<Issue>, StorageError> {
        self.issues_where("repo", refs).await
    }

    async fn open_p0_unowned(&mut self) -> Result<Vec<IssueKey>, StorageError> {
        sqlx::query(
            "SELECT key FROM console_issues WHERE is_open = 1 AND priority = 0 AND assignee IS NULL \
             ORDER BY project, number",
        )
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

    async fn project_issues(&mut self, project: &ProjectKey) -> Result<Vec<Issue>, StorageError> {
        sqlx::query(&format!(
            "SELECT {ISSUE_COLUMNS} FROM console_issues WHERE project = $1 ORDER BY number"
        ))
        .bind(project.as_str())
        .fetch_all(&mut *self.tx)
        .await
        .map_err(db_err)?
        .iter()
        .map(issue_of)
        .collect()
    }
}
