//! A delivery sync: the deploy repository's merged pull requests, workflow runs, their jobs
//! and the commits each deploy shipped, read from the code host since the last sync and
//! stored in transactions of their own between the host's calls; then the freshness.

use std::collections::{HashMap, HashSet};

use serde_json::json;

use super::*;
use crate::storage::StorageError;
use crate::work::delivery::compute;
use crate::work::delivery::{DeliverySettings, Freshness, Pull, Run};

/// How far back the first sync reads.
pub const HISTORY_DAYS: i64 = 30;
/// PR-check runs whose jobs a sync reads (the pipeline page ranks 50 timed results).
const CHECK_JOBS: u32 = 50;

/// Why a delivery sync stopped: the code host (its message is what the freshness shows) or
/// the console's own storage.
#[derive(Debug, thiserror::Error)]
enum SyncFailure {
    #[error("{0}")]
    Host(String),
    #[error("the console's database: {}", .0.message)]
    Storage(#[from] Error),
}

impl SyncFailure {
    fn host(e: impl std::fmt::Display) -> Self {
        Self::Host(e.to_string())
    }
}

impl From<StorageError> for SyncFailure {
    fn from(e: StorageError) -> Self {
        Self::Storage(e.into())
    }
}

impl Delivery<'_> {
    /// Reads the deploy repository's merged pull requests, workflow runs, jobs and deploy
    /// commit ranges since the last sync, links deploys to pull requests, and records the
    /// freshness (the error, if any, beside the last good sync time). Nothing when no settings
    /// or code host are configured.
    pub async fn sync(&self) -> Result<Freshness, Error> {
        let _guard = self.console.delivery.sync.lock().await;
        let Some(settings) = self.settings().await? else {
            return Ok(Freshness::default());
        };
        if self.host().is_none() {
            return Ok(Freshness::default());
        }
        let result = self.sync_once(&settings).await;
        let now = self.console.now();
        let f = transact!(self.console, |tx| {
            let old = tx.delivery().freshness().await?;
            let mut f = old.clone();
            match &result {
                Ok(_) => {
                    f.synced_at = Some(now);
                    f.error = None;
                }
                Err(e) => f.error = Some(e.to_string()),
            }
            tx.delivery().put_freshness(&f).await?;
            // An event when the sync wrote something or its error changed: what a page shows
            // moved (a quiet sync every few minutes appends nothing).
            let wrote = matches!(&result, Ok(n) if *n > 0);
            if wrote || f.error != old.error {
                self.append(tx, "delivery.synced", &system(), None, json!(f))
                    .await?;
            }
            Ok(f)
        })?;
        if let Err(e) = &result {
            tracing::warn!(error = %e, "delivery sync failed");
        }
        // Readers after a sync find the synced data parsed already.
        if let Err(e) = self.keep_synced().await {
            tracing::warn!(error = %e, "the synced delivery data could not be read");
        }
        Ok(f)
    }

    /// One sync: what the code host lists since the last one, stored in transactions of its
    /// own between the host's calls (each retried on a conflict, none held across a call to
    /// the host). Answers how many rows it wrote.
    async fn sync_once(&self, s: &DeliverySettings) -> Result<usize, SyncFailure> {
        let host = self
            .host()
            .ok_or_else(|| SyncFailure::Host("no code host".into()))?;
        let session = host.open().await.map_err(SyncFailure::host)?;
        let repo = s.deploy_repository.as_str();
        let branch = session
            .default_branch(repo)
            .await
            .map_err(SyncFailure::host)?;
        let (pulls, runs) = self.listed(&*session, s, &branch).await?;
        let mut wrote = self.store_listed(repo, &pulls, &runs).await?;
        wrote += self.read_jobs(&*session, s, &branch).await?;
        wrote += self.ship_deploys(&*session, repo).await?;
        transact!(self.console, |tx| Ok(tx
            .delivery()
            .mark_reverts(repo)
            .await?))?;
        Ok(wrote)
    }

    /// What the code host lists since the last sync: the pull requests merged into `branch`
    /// from a day before the newest one stored, and each workflow's push (on `branch`) and
    /// pull-request runs from an hour before the newest stored; none older than
    /// [`HISTORY_DAYS`].
    async fn listed(
        &self,
        session: &dyn HostSession,
        s: &DeliverySettings,
        branch: &str,
    ) -> Result<(Vec<Pull>, Vec<Run>), SyncFailure> {
        let repo = s.deploy_repository.as_str();
        let now = self.console.now();
        let history = now - chrono::Duration::days(HISTORY_DAYS);
        let (newest_merge, cursors) = {
            let mut tx = self.console.parts.storage.read().await?;
            let m = tx.delivery().newest_merge(repo).await?;
            let mut c = HashMap::new();
            for p in &s.workflow_paths {
                for ev in ["push", "pull_request"] {
                    c.insert((p.clone(), ev), tx.delivery().newest_run(p, ev).await?);
                }
            }
            (m, c)
        };
        let since = newest_merge
            .map(|m| (m - chrono::Duration::days(1)).max(history))
            .unwrap_or(history);
        let pulls = session
            .merged_pulls(repo, branch, since)
            .await
            .map_err(SyncFailure::host)?;
        let mut runs: Vec<Run> = Vec::new();
        for p in &s.workflow_paths {
            for (ev, b) in [("push", Some(branch)), ("pull_request", None)] {
                let from = cursors
                    .get(&(p.clone(), ev))
                    .copied()
                    .flatten()
                    .map(|t| (t - chrono::Duration::hours(1)).max(history))
                    .unwrap_or(history);
                runs.extend(
                    session
                        .runs(repo, p, b, ev, from, now)
                        .await
                        .map_err(SyncFailure::host)?,
                );
            }
        }
        Ok((pulls, runs))
    }

    /// Stores what was listed, a pull request linked to the deploy that shipped its merge
    /// commit; runs already read keep their jobs. Answers how many rows it wrote.
    async fn store_listed(
        &self,
        repo: &str,
        pulls: &[Pull],
        runs: &[Run],
    ) -> Result<usize, SyncFailure> {
        Ok(transact!(self.console, |tx| {
            let mut wrote = 0;
            for p in pulls {
                let mut p = p.clone();
                if p.deploy_run.is_none()
                    && let Some(sha) = &p.merge_sha
                    && let Some((run, at)) = tx.delivery().deploy_of_commit(repo, sha).await?
                {
                    p.deploy_run = Some(run);
                    p.deployed_at = Some(at);
                }
                tx.delivery().put_pull(&p).await?;
                wrote += 1;
            }
            for r in runs {
                let keep = tx
                    .delivery()
                    .run(r.id)
                    .await?
                    .is_some_and(|old| old.jobs.is_some());
                if !keep {
                    tx.delivery().put_run(r).await?;
                    wrote += 1;
                }
            }
            Ok(wrote)
        })?)
    }

    /// Reads the jobs of every push run (deploy candidates) and of the newest PR-check runs
    /// that have none yet, and what each tells of production. Answers how many it stored.
    async fn read_jobs(
        &self,
        session: &dyn HostSession,
        s: &DeliverySettings,
        branch: &str,
    ) -> Result<usize, SyncFailure> {
        let repo = s.deploy_repository.as_str();
        let pending = {
            let mut tx = self.console.parts.storage.read().await?;
            let mut v = tx.delivery().runs_without_jobs("push", 1000).await?;
            v.extend(
                tx.delivery()
                    .runs_without_jobs("pull_request", CHECK_JOBS)
                    .await?,
            );
            v
        };
        let mut read = Vec::new();
        for mut r in pending {
            let jobs = session.jobs(repo, r.id).await.map_err(SyncFailure::host)?;
            r.jobs = Some(jobs);
            r.production = compute::production_of(s, &r, branch);
            read.push(r);
        }
        Ok(transact!(self.console, |tx| {
            for r in &read {
                tx.delivery().put_run(r).await?;
            }
            Ok(read.len())
        })?)
    }

    /// Deploys: each successful one ships the commits since the previous successful one;
    /// those not yet compared are, and the pull requests of their commits linked to them.
    /// Answers how many deploys it linked.
    async fn ship_deploys(
        &self,
        session: &dyn HostSession,
        repo: &str,
    ) -> Result<usize, SyncFailure> {
        let (deploys, known) = {
            let mut tx = self.console.parts.storage.read().await?;
            let deploys = tx.delivery().successful_deploys(repo).await?;
            (
                deploys,
                tx.delivery()
                    .deploys_with_commits(repo)
                    .await?
                    .into_iter()
                    .collect::<HashSet<i64>>(),
            )
        };
        let mut wrote = 0;
        for pair in deploys.windows(2) {
            let (prev, d) = (&pair[0], &pair[1]);
            if known.contains(&d.id) {
                continue;
            }
            let Some(at) = d.production.as_ref().map(|p| p.finished_at) else {
                continue;
            };
            let shas = session
                .compare(repo, &prev.head_sha, &d.head_sha)
                .await
                .map_err(SyncFailure::host)?;
            transact!(self.console, |tx| {
                tx.delivery()
                    .put_deploy_commits(repo, d.id, at, &shas)
                    .await?;
                tx.delivery().link_deploy(repo, &shas, d.id, at).await?;
                Ok(())
            })?;
            wrote += 1;
        }
        Ok(wrote)
    }
}
