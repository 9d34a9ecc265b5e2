//! The records and storage of delivery settings, the synced GitHub data behind the timeline and
//! measures, session groups and architecture sources (issue 15; protocol §6.5, §9), and the code
//! host as the core sees it ([`CodeHost`]). One storage trait, [`DeliveryTx`], joined into
//! [`crate::work::WorkTx`] with the others.
//!
//! - [`compute`]: the pure computation: deploys linked to pull requests, pull requests linked
//!   to issues and sessions, the measures, the timeline and the pipeline page.

pub mod compute;

use async_trait::async_trait;
use countersign_common::storage::StorageError;
use serde::{Deserialize, Serialize};

use crate::clock::Time;
use crate::ids::{SessionGroupId, SessionId};
use crate::work::model::{Issue, IssueKey, ProjectKey};

pub use crate::ids::is_session_id;

/// The delivery configuration (protocol §6.5): the PUT body and the GET answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliverySettings {
    /// `owner/repo` whose workflow runs deploy production.
    pub deploy_repository: String,
    /// `.github/workflows/<file>` whose runs are synced.
    pub workflow_paths: Vec<String>,
    /// Job names that deploy production.
    pub production_jobs: Vec<String>,
    /// The production job's step that applies the change, or null.
    #[serde(default)]
    pub production_apply_step: Option<String>,
    /// GitHub logins whose pull requests the timeline and measures count.
    pub population_authors: Vec<String>,
    /// `owner/repo` names left out.
    #[serde(default)]
    pub excluded_repositories: Vec<String>,
    #[serde(default)]
    pub staging_e2e_job: Option<String>,
    #[serde(default)]
    pub staging_deploy_job: Option<String>,
    #[serde(default)]
    pub pr_checks_rollup_job: Option<String>,
}

/// KPI targets (server configuration, `[delivery_targets]`); each `None` is "no target".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Targets {
    /// At least this many successful production deploys per day.
    #[serde(default)]
    pub deploys_per_day: Option<f64>,
    /// Median merge to production at most this many seconds.
    #[serde(default)]
    pub merge_to_production_seconds: Option<f64>,
    /// Median PR open to merge at most this many seconds.
    #[serde(default)]
    pub open_to_merge_seconds: Option<f64>,
    /// Change failure rate per deploy at most this share (0 to 1).
    #[serde(default)]
    pub change_failure_rate: Option<f64>,
    /// Median time to restore at most this many seconds.
    #[serde(default)]
    pub time_to_restore_seconds: Option<f64>,
    /// Rework share at most this share.
    #[serde(default)]
    pub rework_share: Option<f64>,
    /// Production deploy runs succeeding at least this share.
    #[serde(default)]
    pub deploy_run_success: Option<f64>,
    /// PR-checks runs succeeding at least this share.
    #[serde(default)]
    pub pr_checks_success: Option<f64>,
    /// PR-checks run wall time (median) at most this many seconds.
    #[serde(default)]
    pub pr_checks_wall_seconds: Option<f64>,
    /// Open P0 issues with no owner: at most this many.
    #[serde(default)]
    pub open_p0_unowned: Option<f64>,
}

/// A merged pull request as synced.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pull {
    /// `owner/repo`.
    pub repo: String,
    pub number: i64,
    pub title: String,
    pub author: String,
    pub head_ref: String,
    pub url: String,
    pub labels: Vec<String>,
    /// The pull request this one reverts (a body "Reverts owner/repo#n"), if any.
    pub reverts: Option<i64>,
    pub created_at: Time,
    pub merged_at: Time,
    pub merge_sha: Option<String>,
    /// The oldest commit's author date.
    pub first_commit_at: Option<Time>,
    /// `Countersign-Session` trailers, oldest commit first, each once.
    pub sessions: Vec<String>,
    /// The successful production deploy run that first shipped it.
    pub deploy_run: Option<i64>,
    pub deployed_at: Option<Time>,
    /// The pull request that reverted it, if any.
    pub reverted_by: Option<i64>,
}

/// One step of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub name: String,
    pub number: i64,
    pub conclusion: Option<String>,
    pub started_at: Option<Time>,
    pub completed_at: Option<Time>,
}

/// One job of a run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: i64,
    pub name: String,
    pub conclusion: Option<String>,
    pub started_at: Option<Time>,
    pub completed_at: Option<Time>,
    pub steps: Vec<Step>,
}

/// A completed workflow run as synced, with its jobs once read.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Run {
    pub id: i64,
    pub repo: String,
    pub workflow_path: String,
    pub name: String,
    pub event: String,
    pub branch: Option<String>,
    pub head_sha: String,
    pub conclusion: Option<String>,
    pub created_at: Time,
    pub started_at: Time,
    pub completed_at: Time,
    pub url: Option<String>,
    /// `None` until its jobs are read.
    pub jobs: Option<Vec<Job>>,
    /// Whether it is a production deploy run (a push on the default branch with a job named
    /// in `production_jobs`), known once its jobs are read.
    pub production: Option<Production>,
}

/// A production deploy run's outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Production {
    pub job: String,
    pub success: bool,
    /// When the production job finished (the deploy's time).
    pub finished_at: Time,
    /// The first failing job and step, for a failure.
    pub failing_job: Option<String>,
    pub failing_step: Option<String>,
}

/// Freshness of the synced data.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Freshness {
    #[serde(with = "crate::work::model::rfc3339_opt")]
    pub synced_at: Option<Time>,
    pub error: Option<String>,
}

/// A session group (protocol §6.5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionGroup {
    pub id: SessionGroupId,
    pub name: String,
    pub sessions: Vec<SessionId>,
}

/// A project's architecture source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArchitectureSource {
    pub project: ProjectKey,
    pub repo: String,
    pub branch: String,
    /// The commit last imported.
    pub commit: Option<String>,
    #[serde(with = "crate::work::model::rfc3339_opt")]
    pub synced_at: Option<Time>,
    pub last_error: Option<String>,
}

/// A node of a project's imported component tree.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Component {
    /// Text: the imported file names its components (no id kind of the console's).
    pub id: String,
    pub name: String,
    pub parent: Option<String>,
}

/// Storage of delivery settings, the synced GitHub data, session groups and architecture
/// sources.
#[async_trait]
pub trait DeliveryTx: Send {
    async fn delivery_settings(&mut self) -> Result<Option<DeliverySettings>, StorageError>;
    async fn put_delivery_settings(&mut self, s: &DeliverySettings) -> Result<(), StorageError>;
    async fn freshness(&mut self) -> Result<Freshness, StorageError>;
    async fn put_freshness(&mut self, f: &Freshness) -> Result<(), StorageError>;
    /// Forgets every synced pull request, run and deploy commit (the deploy repository
    /// changed).
    async fn clear_synced(&mut self) -> Result<(), StorageError>;

    /// Adds or replaces a pull request (the deploy link and `reverted_by` kept when the
    /// argument has none).
    async fn put_pull(&mut self, p: &Pull) -> Result<(), StorageError>;
    async fn pull(&mut self, repo: &str, number: i64) -> Result<Option<Pull>, StorageError>;
    /// A number that moves at the commit of every transaction that writes synced pull
    /// requests or runs (0 before any): what a copy of them kept in memory is good for.
    async fn delivery_generation(&mut self) -> Result<i64, StorageError>;
    /// How many pull requests and runs are synced, together.
    async fn synced_rows(&mut self) -> Result<i64, StorageError>;
    /// Every synced pull request, by merge time (then repository and number).
    async fn all_pulls(&mut self) -> Result<Vec<Pull>, StorageError>;
    /// Every synced run, by start (then id).
    async fn all_runs(&mut self) -> Result<Vec<Run>, StorageError>;
    /// Pull requests merged in `[from, to)`, or deployed in it, or merged before `to` and not
    /// deployed: what a window's timeline and measures read; by merge time.
    async fn pulls_for_window(&mut self, from: Time, to: Time) -> Result<Vec<Pull>, StorageError>;
    /// The latest `updated` cursor of the pull list (the newest merge synced).
    async fn newest_merge(&mut self, repo: &str) -> Result<Option<Time>, StorageError>;
    /// Links each undeployed pull request whose merge commit is among `shas` to the deploy.
    async fn link_deploy(
        &mut self,
        repo: &str,
        shas: &[String],
        run: i64,
        at: Time,
    ) -> Result<u64, StorageError>;
    /// Records which commits a deploy shipped (so that a pull request synced later links).
    async fn put_deploy_commits(
        &mut self,
        repo: &str,
        run: i64,
        at: Time,
        shas: &[String],
    ) -> Result<(), StorageError>;
    /// The deploy whose commits hold `sha`, with its time.
    async fn deploy_of_commit(
        &mut self,
        repo: &str,
        sha: &str,
    ) -> Result<Option<(i64, Time)>, StorageError>;
    /// Sets `reverted_by` from the reverting pull requests' `reverts`.
    async fn mark_reverts(&mut self, repo: &str) -> Result<(), StorageError>;

    async fn put_run(&mut self, r: &Run) -> Result<(), StorageError>;
    async fn run(&mut self, id: i64) -> Result<Option<Run>, StorageError>;
    /// Runs started in `[from, to)`, by start.
    async fn runs_between(&mut self, from: Time, to: Time) -> Result<Vec<Run>, StorageError>;
    /// The newest run start synced for a workflow and event.
    async fn newest_run(
        &mut self,
        workflow_path: &str,
        event: &str,
    ) -> Result<Option<Time>, StorageError>;
    /// Successful production deploy runs, by deploy time, each with its head commit.
    async fn successful_deploys(&mut self, repo: &str) -> Result<Vec<Run>, StorageError>;
    /// The first successful production deploy run synced (the baseline).
    async fn first_deploy(&mut self, repo: &str) -> Result<Option<Run>, StorageError>;
    /// Runs whose jobs are not read yet, newest first, at most `limit`, of `event`.
    async fn runs_without_jobs(
        &mut self,
        event: &str,
        limit: u32,
    ) -> Result<Vec<Run>, StorageError>;
    /// Deploys whose commits are known (the deploy commits table names them).
    async fn deploys_with_commits(&mut self, repo: &str) -> Result<Vec<i64>, StorageError>;

    async fn session_groups(&mut self) -> Result<Vec<SessionGroup>, StorageError>;
    async fn session_group(
        &mut self,
        id: SessionGroupId,
    ) -> Result<Option<SessionGroup>, StorageError>;
    /// Adds or replaces a group with its sessions.
    async fn put_session_group(&mut self, g: &SessionGroup) -> Result<(), StorageError>;
    async fn delete_session_group(&mut self, id: SessionGroupId) -> Result<bool, StorageError>;

    async fn architecture_source(
        &mut self,
        project: &ProjectKey,
    ) -> Result<Option<ArchitectureSource>, StorageError>;
    async fn architecture_sources(&mut self) -> Result<Vec<ArchitectureSource>, StorageError>;
    async fn put_architecture_source(&mut self, s: &ArchitectureSource)
    -> Result<(), StorageError>;
    async fn delete_architecture_source(
        &mut self,
        project: &ProjectKey,
    ) -> Result<bool, StorageError>;
    /// Replaces a project's component tree.
    async fn put_components(
        &mut self,
        project: &ProjectKey,
        components: &[Component],
    ) -> Result<(), StorageError>;
    async fn components(&mut self, project: &ProjectKey) -> Result<Vec<Component>, StorageError>;
    /// Every project's component tree: `(project, component)`.
    async fn all_components(&mut self) -> Result<Vec<(ProjectKey, Component)>, StorageError>;

    /// Issues by key (those that exist).
    async fn issues_by_keys(&mut self, keys: &[IssueKey]) -> Result<Vec<Issue>, StorageError>;
    /// Issues imported from these `owner/repo#n` refs.
    async fn issues_by_refs(&mut self, refs: &[String]) -> Result<Vec<Issue>, StorageError>;
    /// Open issues of priority 0 with no assignee, by key.
    async fn open_p0_unowned(&mut self) -> Result<Vec<IssueKey>, StorageError>;
    /// A project's issues (every status), by number.
    async fn project_issues(&mut self, project: &ProjectKey) -> Result<Vec<Issue>, StorageError>;
}

/// What a code-host call failed on (protocol §9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostError {
    /// No token, 401, a 403 that is no rate limit, a 404 for the repository, branch or
    /// workflow: 409 SOURCE_ACCESS / DELIVERY_SETTINGS_ACCESS.
    NoAccess(String),
    /// No such run or issue.
    NotFound,
    /// Unreachable, 5xx, rate limited, nonsense: 503 CODE_HOST_UNAVAILABLE on a PUT.
    Unavailable(String),
}

impl std::fmt::Display for HostError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HostError::NoAccess(m) => write!(f, "no access: {m}"),
            HostError::NotFound => f.write_str("not found"),
            HostError::Unavailable(m) => write!(f, "unavailable: {m}"),
        }
    }
}

/// A pull request as the host lists it, with its commits read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostPull {
    pub pull: Pull,
    pub updated_at: Time,
}

/// An issue or pull request an `owner/repo#n` ref names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostIssue {
    pub number: i64,
    pub title: String,
    pub state: String,
    pub url: String,
    pub is_pull_request: bool,
}

/// The code host (GitHub), as the core uses it: a session reads the token again.
#[async_trait]
pub trait CodeHost: Send + Sync + std::fmt::Debug {
    async fn open(&self) -> Result<Box<dyn HostSession>, HostError>;
}

/// One session with the code host.
#[async_trait]
pub trait HostSession: Send + Sync {
    /// The repository's default branch; proves the token reads it.
    async fn default_branch(&self, repo: &str) -> Result<String, HostError>;
    /// The branch's head commit; proves it exists.
    async fn branch(&self, repo: &str, branch: &str) -> Result<String, HostError>;
    /// Proves a workflow file (`.github/workflows/<file>`) exists.
    async fn workflow(&self, repo: &str, path: &str) -> Result<(), HostError>;
    /// Completed runs of a workflow created in `[from, to]`.
    async fn runs(
        &self,
        repo: &str,
        path: &str,
        branch: Option<&str>,
        event: &str,
        from: Time,
        to: Time,
    ) -> Result<Vec<Run>, HostError>;
    async fn run(&self, repo: &str, id: i64) -> Result<Run, HostError>;
    async fn jobs(&self, repo: &str, run: i64) -> Result<Vec<Job>, HostError>;
    /// Merged pull requests into `base` updated since `since`, each with its commits read
    /// (first commit time, session trailers).
    async fn merged_pulls(
        &self,
        repo: &str,
        base: &str,
        since: Time,
    ) -> Result<Vec<Pull>, HostError>;
    /// Commit shas in `head` and not in `base`.
    async fn compare(&self, repo: &str, base: &str, head: &str) -> Result<Vec<String>, HostError>;
    async fn issue(&self, repo: &str, number: i64) -> Result<HostIssue, HostError>;
    /// The catalog file's nodes at `branch`: `Ok(None)` when the file is missing, an `Err`
    /// string in `Ok(Some(Err))` when it does not parse.
    async fn catalog(
        &self,
        repo: &str,
        branch: &str,
    ) -> Result<Option<Result<Vec<Component>, String>>, HostError>;
}
