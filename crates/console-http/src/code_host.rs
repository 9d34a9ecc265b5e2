//! [`GitHubHost`]: the core's [`CodeHost`] over the GitHub client (`countersign-code-host`).
//! Each [`CodeHost::open`] reads the token file again (protocol §9); GitHub's shapes become the
//! core's records here: a run's start is `run_started_at` (else `created_at`) and its end
//! `updated_at`; a pull request's commits give its first commit time and its
//! `Countersign-Session` trailers; a revert's body gives the number it reverts.

use async_trait::async_trait;
use countersign_code_host::{GitHub, RepoName, RunFilter, catalog};
use countersign_console_core::Time;
use countersign_console_core::work::delivery::compute::{reverted_number, session_trailers};
use countersign_console_core::work::delivery::{
    CodeHost, Component, HostError, HostIssue, HostSession, Job, Pull, Run, Step,
};

/// GitHub as the console's code host.
#[derive(Debug, Clone)]
pub struct GitHubHost(pub GitHub);

fn err(e: countersign_code_host::Error) -> HostError {
    use countersign_code_host::Error as E;
    match e {
        E::NoAccess(m) => HostError::NoAccess(m),
        E::NotFound => HostError::NotFound,
        other => HostError::Unavailable(other.to_string()),
    }
}

fn repo(s: &str) -> Result<RepoName, HostError> {
    RepoName::parse(s).ok_or_else(|| HostError::NoAccess(format!("{s} is not owner/repo")))
}

#[async_trait]
impl CodeHost for GitHubHost {
    async fn open(&self) -> Result<Box<dyn HostSession>, HostError> {
        Ok(Box::new(Session(self.0.session().map_err(err)?)))
    }
}

struct Session(countersign_code_host::Session);

fn run_of(repo: &str, path: &str, r: countersign_code_host::WorkflowRun) -> Run {
    Run {
        id: r.id,
        repo: repo.to_owned(),
        workflow_path: r
            .path
            .clone()
            .filter(|p| !p.is_empty())
            .unwrap_or_else(|| path.to_owned()),
        name: r.name.unwrap_or_default(),
        event: r.event,
        branch: r.head_branch,
        head_sha: r.head_sha,
        conclusion: r.conclusion,
        created_at: r.created_at,
        started_at: r.run_started_at.unwrap_or(r.created_at),
        completed_at: r.updated_at,
        url: r.html_url,
        jobs: None,
        production: None,
    }
}

fn job_of(j: countersign_code_host::Job) -> Job {
    Job {
        id: j.id,
        name: j.name,
        conclusion: j.conclusion,
        started_at: j.started_at,
        completed_at: j.completed_at,
        steps: j
            .steps
            .into_iter()
            .map(|s| Step {
                name: s.name,
                number: s.number,
                conclusion: s.conclusion,
                started_at: s.started_at,
                completed_at: s.completed_at,
            })
            .collect(),
    }
}

#[async_trait]
impl HostSession for Session {
    async fn default_branch(&self, r: &str) -> Result<String, HostError> {
        Ok(self
            .0
            .repository(&repo(r)?)
            .await
            .map_err(err)?
            .default_branch)
    }

    async fn branch(&self, r: &str, branch: &str) -> Result<String, HostError> {
        Ok(self
            .0
            .branch(&repo(r)?, branch)
            .await
            .map_err(err)?
            .commit
            .sha)
    }

    async fn workflow(&self, r: &str, path: &str) -> Result<(), HostError> {
        let file = path.rsplit('/').next().unwrap_or(path);
        self.0.workflow(&repo(r)?, file).await.map_err(err)?;
        Ok(())
    }

    async fn runs(
        &self,
        r: &str,
        path: &str,
        branch: Option<&str>,
        event: &str,
        from: Time,
        to: Time,
    ) -> Result<Vec<Run>, HostError> {
        let file = path.rsplit('/').next().unwrap_or(path);
        let f = RunFilter {
            branch: branch.map(str::to_owned),
            event: Some(event.to_owned()),
            from,
            to,
        };
        Ok(self
            .0
            .workflow_runs(&repo(r)?, file, &f)
            .await
            .map_err(err)?
            .into_iter()
            .map(|x| run_of(r, path, x))
            .collect())
    }

    async fn run(&self, r: &str, id: i64) -> Result<Run, HostError> {
        let x = self.0.run(&repo(r)?, id).await.map_err(err)?;
        let path = x.path.clone().unwrap_or_default();
        Ok(run_of(r, &path, x))
    }

    async fn jobs(&self, r: &str, run: i64) -> Result<Vec<Job>, HostError> {
        Ok(self
            .0
            .jobs(&repo(r)?, run)
            .await
            .map_err(err)?
            .into_iter()
            .map(job_of)
            .collect())
    }

    async fn merged_pulls(&self, r: &str, base: &str, since: Time) -> Result<Vec<Pull>, HostError> {
        let name = repo(r)?;
        let mut out = Vec::new();
        for p in self
            .0
            .merged_pulls(&name, base, Some(since))
            .await
            .map_err(err)?
        {
            let Some(merged_at) = p.merged_at else {
                continue;
            };
            let commits = self.0.pull_commits(&name, p.number).await.map_err(err)?;
            out.push(Pull {
                repo: r.to_owned(),
                number: p.number,
                title: p.title,
                author: p.user.map(|u| u.login).unwrap_or_default(),
                head_ref: p.head.reference,
                url: p.html_url,
                labels: p.labels.into_iter().map(|l| l.name).collect(),
                reverts: p.body.as_deref().and_then(|b| reverted_number(r, b)),
                created_at: p.created_at,
                merged_at,
                merge_sha: p.merge_commit_sha,
                first_commit_at: commits.iter().map(|c| c.commit.author.date).min(),
                sessions: session_trailers(commits.iter().map(|c| c.commit.message.as_str())),
                deploy_run: None,
                deployed_at: None,
                reverted_by: None,
            });
        }
        Ok(out)
    }

    async fn compare(&self, r: &str, base: &str, head: &str) -> Result<Vec<String>, HostError> {
        Ok(self
            .0
            .compare(&repo(r)?, base, head)
            .await
            .map_err(err)?
            .commits
            .into_iter()
            .map(|c| c.sha)
            .collect())
    }

    async fn issue(&self, r: &str, number: i64) -> Result<HostIssue, HostError> {
        let i = self.0.issue(&repo(r)?, number).await.map_err(err)?;
        Ok(HostIssue {
            is_pull_request: i.is_pull_request(),
            number: i.number,
            title: i.title,
            state: i.state,
            url: i.html_url,
        })
    }

    async fn catalog(
        &self,
        r: &str,
        branch: &str,
    ) -> Result<Option<Result<Vec<Component>, String>>, HostError> {
        let Some(text) = self.0.catalog_file(&repo(r)?, branch).await.map_err(err)? else {
            return Ok(None);
        };
        Ok(Some(catalog::parse(&text).map(|v| {
            v.into_iter()
                .map(|e| Component {
                    id: e.id,
                    name: e.name,
                    parent: e.parent,
                })
                .collect()
        })))
    }
}
