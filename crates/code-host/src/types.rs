//! GitHub's answers as the console reads them (REST API 2022-11-28): only the fields it uses,
//! unknown ones ignored, so a newer GitHub does not break it.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// A user or bot as GitHub names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct User {
    pub login: String,
}

/// `GET /repos/{owner}/{repo}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repository {
    pub id: i64,
    pub name: String,
    pub full_name: String,
    pub default_branch: String,
    #[serde(default)]
    pub private: bool,
    pub html_url: String,
}

/// A commit as a branch names it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitRef {
    pub sha: String,
}

/// `GET /repos/{owner}/{repo}/branches/{branch}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Branch {
    pub name: String,
    pub commit: CommitRef,
}

/// `GET /repos/{owner}/{repo}/actions/workflows/{file}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Workflow {
    pub id: i64,
    pub name: String,
    pub path: String,
    pub state: String,
}

/// A workflow run (`GET /actions/runs/{id}`, and the run lists).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkflowRun {
    pub id: i64,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub head_branch: Option<String>,
    pub head_sha: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub run_number: i64,
    pub event: String,
    #[serde(default)]
    pub status: Option<String>,
    #[serde(default)]
    pub conclusion: Option<String>,
    #[serde(default)]
    pub workflow_id: i64,
    #[serde(default)]
    pub run_attempt: Option<i64>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default)]
    pub run_started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub html_url: Option<String>,
    #[serde(default)]
    pub display_title: Option<String>,
    #[serde(default)]
    pub actor: Option<User>,
}

/// One page of a run list.
#[derive(Debug, Clone, Deserialize)]
pub struct RunPage {
    pub total_count: i64,
    pub workflow_runs: Vec<WorkflowRun>,
}

/// One step of a job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Step {
    pub name: String,
    pub status: String,
    #[serde(default)]
    pub conclusion: Option<String>,
    pub number: i64,
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub completed_at: Option<DateTime<Utc>>,
}

/// One job of a run, with its steps.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Job {
    pub id: i64,
    pub run_id: i64,
    pub name: String,
    pub status: String,
    #[serde(default)]
    pub conclusion: Option<String>,
    #[serde(default)]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub completed_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub steps: Vec<Step>,
    #[serde(default)]
    pub html_url: Option<String>,
}

/// One page of a run's jobs.
#[derive(Debug, Clone, Deserialize)]
pub struct JobPage {
    pub total_count: i64,
    pub jobs: Vec<Job>,
}

/// A pull request's head or base.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullEnd {
    #[serde(rename = "ref")]
    pub reference: String,
    pub sha: String,
}

/// A label.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Label {
    pub name: String,
}

/// A pull request as the pull list answers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullRequest {
    pub number: i64,
    pub title: String,
    pub state: String,
    pub html_url: String,
    #[serde(default)]
    pub user: Option<User>,
    #[serde(default)]
    pub body: Option<String>,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
    #[serde(default)]
    pub closed_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub merged_at: Option<DateTime<Utc>>,
    #[serde(default)]
    pub merge_commit_sha: Option<String>,
    pub head: PullEnd,
    pub base: PullEnd,
    #[serde(default)]
    pub draft: bool,
    #[serde(default)]
    pub labels: Vec<Label>,
}

/// A git identity with its time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitActor {
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub email: Option<String>,
    pub date: DateTime<Utc>,
}

/// The git part of a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitCommit {
    pub message: String,
    pub author: GitActor,
    pub committer: GitActor,
}

/// A commit (`GET /pulls/{n}/commits`, `GET /compare/…`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Commit {
    pub sha: String,
    pub commit: GitCommit,
    #[serde(default)]
    pub author: Option<User>,
    #[serde(default)]
    pub parents: Vec<CommitRef>,
}

/// `GET /compare/{base}...{head}`: the commits reachable from `head` and not from `base`,
/// oldest first, every page joined.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Comparison {
    pub status: String,
    pub ahead_by: i64,
    pub behind_by: i64,
    pub total_commits: i64,
    pub commits: Vec<Commit>,
}

/// The pull-request marker on an issue that is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullMarker {
    #[serde(default)]
    pub html_url: Option<String>,
    #[serde(default)]
    pub merged_at: Option<DateTime<Utc>>,
}

/// `GET /repos/{owner}/{repo}/issues/{n}`: an issue or a pull request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Issue {
    pub number: i64,
    pub title: String,
    pub state: String,
    pub html_url: String,
    #[serde(default)]
    pub user: Option<User>,
    #[serde(default)]
    pub labels: Vec<Label>,
    /// Present when the issue is a pull request.
    #[serde(default)]
    pub pull_request: Option<PullMarker>,
    pub created_at: DateTime<Utc>,
    #[serde(default)]
    pub closed_at: Option<DateTime<Utc>>,
}

impl Issue {
    pub fn is_pull_request(&self) -> bool {
        self.pull_request.is_some()
    }
}
