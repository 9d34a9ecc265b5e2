//! The console's operations on delivery settings, the synced GitHub data behind the timeline and
//! measures, session groups and architecture sources (issue 15; protocol §6.5, §9). Each write
//! runs in one transaction (`transact!`) and appends its event there. The code host and the KPI
//! targets are set once at start ([`Console::set_code_host`]); syncs take a lock so that the
//! timer's and a PUT's never overlap.

use std::collections::{HashMap, HashSet};

use chrono::{NaiveDate, TimeZone};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::*;
use crate::storage::StorageError;
use crate::work::delivery::compute::{
    self, Context, Filters, Measures, Pipeline, Timeline, Window,
};
use crate::work::delivery::{
    ArchitectureSource, CodeHost, Component, DeliverySettings, Freshness, HostError, HostSession,
    Pull, Run, SessionGroup, Targets,
};
use crate::work::{Actor, ComponentsMode, Issue, IssueKey, ProjectKey, Status, WorkTx};

/// How far back the first sync reads.
pub const HISTORY_DAYS: i64 = 30;
/// PR-check runs whose jobs a sync reads (the pipeline page ranks 50 timed results).
const CHECK_JOBS: u32 = 50;
/// Session group names at most this many characters (protocol §2).
const GROUP_NAME_MAX: usize = 80;

/// The delivery area's process state: the code host, targets and sync locks.
#[derive(Debug, Default)]
pub struct DeliveryState {
    host: std::sync::OnceLock<(Arc<dyn CodeHost>, Targets)>,
    /// The synced data as last read whole, good while its generation holds.
    synced: std::sync::Mutex<Option<Arc<Synced>>>,
    sync: tokio::sync::Mutex<()>,
    architecture: tokio::sync::Mutex<()>,
}

impl DeliveryState {
    /// The kept copy of the synced data, if it is of `generation`.
    fn synced(&self, generation: i64) -> Option<Arc<Synced>> {
        let kept = self.synced.lock().ok()?;
        kept.as_ref()
            .filter(|s| s.generation == generation)
            .cloned()
    }

    /// Keeps a copy read whole, unless a newer one is kept already.
    fn keep(&self, s: Arc<Synced>) {
        if let Ok(mut kept) = self.synced.lock()
            && kept.as_ref().is_none_or(|k| k.generation <= s.generation)
        {
            *kept = Some(s);
        }
    }
}

/// Synced pull requests (by merge time, repository, number) and runs (by start, id), parsed
/// once: a year of a busy repository is thousands of each, and a sync every five minutes is
/// the only writer.
#[derive(Debug)]
struct Synced {
    generation: i64,
    pulls: Vec<Pull>,
    runs: Vec<Run>,
    run_at: HashMap<i64, usize>,
}

impl Synced {
    fn new(generation: i64, pulls: Vec<Pull>, runs: Vec<Run>) -> Self {
        let run_at = runs.iter().enumerate().map(|(i, r)| (r.id, i)).collect();
        Self {
            generation,
            pulls,
            runs,
            run_at,
        }
    }

    /// The window's rows, as the storage's window reads answer them: pull requests merged
    /// in `[from, to)`, deployed in it, or merged before `to` and not deployed; runs started
    /// from a day before `from` to `to`, the deploys that shipped those pull requests, and
    /// the first successful deploy of the deploy repository (the baseline).
    fn window(&self, s: &DeliverySettings, from: Time, to: Time) -> (Vec<usize>, Vec<usize>) {
        let within = |t: Time| from <= t && t < to;
        let pulls: Vec<usize> = (0..self.pulls.len())
            .filter(|&i| {
                let p = &self.pulls[i];
                within(p.merged_at)
                    || p.deployed_at.is_some_and(within)
                    || (p.deploy_run.is_none() && p.merged_at < to)
            })
            .collect();
        let since = from - chrono::Duration::days(1);
        let lo = self.runs.partition_point(|r| r.started_at < since);
        let hi = self.runs.partition_point(|r| r.started_at < to);
        let mut runs: Vec<usize> = (lo..hi.max(lo)).collect();
        let mut extra: Vec<usize> = pulls
            .iter()
            .filter_map(|&i| self.pulls[i].deploy_run)
            .filter_map(|id| self.run_at.get(&id).copied())
            .filter(|&i| i < lo || i >= hi)
            .collect();
        let first = self
            .runs
            .iter()
            .enumerate()
            .filter(|(_, r)| r.repo == s.deploy_repository)
            .filter_map(|(i, r)| {
                let p = r.production.as_ref().filter(|p| p.success)?;
                Some((p.finished_at, r.id, i))
            })
            .min()
            .map(|(_, _, i)| i);
        extra.extend(first.filter(|&i| i < lo || i >= hi));
        extra.sort_unstable();
        extra.dedup();
        runs.extend(extra);
        (pulls, runs)
    }
}

/// A window's inputs: indexes into the synced data.
struct Inputs {
    settings: DeliverySettings,
    synced: Arc<Synced>,
    pulls: Vec<usize>,
    runs: Vec<usize>,
    ctx: Context,
    freshness: Freshness,
}

impl Inputs {
    fn pulls(&self) -> Vec<&Pull> {
        self.pulls.iter().map(|&i| &self.synced.pulls[i]).collect()
    }

    fn runs(&self) -> Vec<&Run> {
        self.runs.iter().map(|&i| &self.synced.runs[i]).collect()
    }
}

/// The timeline answer (protocol §6.5).
#[derive(Debug, Clone, Serialize)]
pub struct TimelineAnswer {
    #[serde(flatten)]
    pub timeline: Timeline,
    pub freshness: Freshness,
    pub session_groups: Vec<SessionGroup>,
}

/// The measures answer: the measures and the data's freshness.
#[derive(Debug, Clone, Serialize)]
pub struct MeasuresAnswer {
    #[serde(flatten)]
    pub measures: Measures,
    pub freshness: Freshness,
}

/// The pipeline answer.
#[derive(Debug, Clone, Serialize)]
pub struct PipelineAnswer {
    #[serde(flatten)]
    pub pipeline: Pipeline,
    pub freshness: Freshness,
}

/// A session group create body.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewSessionGroup {
    pub name: String,
    pub sessions: Vec<String>,
    pub actor: Option<String>,
}

/// A session group edit.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionGroupPatch {
    pub name: Option<String>,
    #[serde(default)]
    pub add: Vec<String>,
    #[serde(default)]
    pub remove: Vec<String>,
    pub actor: Option<String>,
}

/// An issue row on the component tree.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentIssue {
    pub key: IssueKey,
    pub title: String,
    pub status: Status,
    pub priority: Option<u8>,
}

/// Per-component counts.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ComponentCounts {
    pub open: usize,
    pub total: usize,
    /// With every descendant's issues.
    pub open_with_children: usize,
}

/// A node with its work.
#[derive(Debug, Clone, Serialize)]
pub struct ComponentNode {
    pub id: String,
    pub name: String,
    pub parent: Option<String>,
    pub counts: ComponentCounts,
    pub issues: Vec<ComponentIssue>,
}

/// An issue naming components the tree no longer has.
#[derive(Debug, Clone, Serialize)]
pub struct RetiredLink {
    #[serde(flatten)]
    pub issue: ComponentIssue,
    pub ids: Vec<String>,
}

/// The component tree answer (protocol §6.5).
#[derive(Debug, Clone, Serialize)]
pub struct ComponentTree {
    pub project: ProjectKey,
    pub source: ArchitectureSource,
    pub components: Vec<ComponentNode>,
    pub unassigned: Vec<ComponentIssue>,
    pub not_architectural: Vec<ComponentIssue>,
    pub retired_links: Vec<RetiredLink>,
}

fn bad(message: impl Into<String>) -> Error {
    Error::with_message(ErrorCode::INVALID_BODY, message)
}

/// `owner/repo` with GitHub's characters.
pub fn is_repo(s: &str) -> bool {
    let Some((o, n)) = s.split_once('/') else {
        return false;
    };
    (1..=39).contains(&o.len())
        && o.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
        && !o.starts_with('-')
        && !o.ends_with('-')
        && (1..=100).contains(&n.len())
        && n.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
        && n != "."
        && n != ".."
}

fn is_login(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=39).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || b"-[]".contains(c))
}

fn is_name(s: &str) -> bool {
    !s.trim().is_empty() && s.chars().count() <= 200 && !s.chars().any(char::is_control)
}

fn check_settings(s: &DeliverySettings) -> Result<(), Error> {
    if !is_repo(&s.deploy_repository) {
        return Err(bad("`deploy_repository` is owner/repo"));
    }
    if s.workflow_paths.is_empty()
        || s.workflow_paths.iter().any(|p| {
            let f = p.strip_prefix(".github/workflows/").unwrap_or("");
            f.is_empty()
                || !(f.ends_with(".yml") || f.ends_with(".yaml"))
                || !f
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"._-".contains(&c))
        })
    {
        return Err(bad(
            "`workflow_paths` names one or more .github/workflows/<file>.yml",
        ));
    }
    if s.production_jobs.is_empty() || !s.production_jobs.iter().all(|j| is_name(j)) {
        return Err(bad("`production_jobs` names one or more jobs"));
    }
    if s.population_authors.iter().any(|a| !is_login(a)) {
        return Err(bad("`population_authors` are GitHub logins"));
    }
    if s.excluded_repositories.iter().any(|r| !is_repo(r)) {
        return Err(bad("`excluded_repositories` are owner/repo"));
    }
    for n in [
        &s.production_apply_step,
        &s.staging_e2e_job,
        &s.staging_deploy_job,
        &s.pr_checks_rollup_job,
    ]
    .into_iter()
    .flatten()
    {
        if !is_name(n) {
            return Err(bad("a job or step name is 1 to 200 characters"));
        }
    }
    Ok(())
}

fn host_error(e: HostError, access: ErrorCode) -> Error {
    match e {
        HostError::NoAccess(m) => Error::with_message(access, m),
        HostError::NotFound => Error::with_message(access, "the code host has no such thing"),
        HostError::Unavailable(m) => {
            tracing::warn!(error = %m, "code host unavailable");
            Error::new(ErrorCode::CODE_HOST_UNAVAILABLE)
        }
    }
}

fn not_configured() -> Error {
    Error::new(ErrorCode::DELIVERY_NOT_CONFIGURED)
}

fn system() -> Actor {
    Actor::System {
        name: "code-host".into(),
    }
}

fn component_issue(i: &Issue) -> ComponentIssue {
    ComponentIssue {
        key: i.key.clone(),
        title: i.title.clone(),
        status: i.status,
        priority: i.priority,
    }
}

impl Console {
    /// Sets the code host and the KPI targets (once, at start).
    pub fn set_code_host(&self, host: Arc<dyn CodeHost>, targets: Targets) {
        let _ = self.delivery.host.set((host, targets));
    }

    fn host(&self) -> Option<&Arc<dyn CodeHost>> {
        self.delivery.host.get().map(|(h, _)| h)
    }

    fn targets(&self) -> Targets {
        self.delivery
            .host
            .get()
            .map(|(_, t)| t.clone())
            .unwrap_or_default()
    }

    pub(super) async fn host_session(
        &self,
        access: ErrorCode,
    ) -> Result<Box<dyn HostSession>, Error> {
        let host = self.host().ok_or_else(|| {
            Error::with_message(access, "no [code_hosting] is configured for this console")
        })?;
        host.open().await.map_err(|e| host_error(e, access))
    }

    /// Whether a code host is configured (`[code_hosting]`): the delivery settings and the
    /// architecture sources need one.
    pub fn has_code_host(&self) -> bool {
        self.host().is_some()
    }

    /// The delivery session groups (the sessions page lists and edits them).
    pub async fn session_groups(&self) -> Result<Vec<SessionGroup>, Error> {
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.session_groups().await?)
    }

    // ----- settings -----

    pub async fn delivery_settings(&self) -> Result<Option<DeliverySettings>, Error> {
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.delivery_settings().await?)
    }

    /// Sets the delivery configuration after proving the code host reads the deploy
    /// repository, its default branch and every workflow (DELIVERY_SETTINGS_ACCESS,
    /// CODE_HOST_UNAVAILABLE). The caller starts a sync without waiting for it.
    pub async fn put_delivery_settings(
        &self,
        actor: &Actor,
        s: DeliverySettings,
    ) -> Result<DeliverySettings, Error> {
        check_settings(&s)?;
        let access = ErrorCode::DELIVERY_SETTINGS_ACCESS;
        let session = self.host_session(access).await?;
        let branch = session
            .default_branch(&s.deploy_repository)
            .await
            .map_err(|e| host_error(e, access))?;
        session
            .branch(&s.deploy_repository, &branch)
            .await
            .map_err(|e| host_error(e, access))?;
        for p in &s.workflow_paths {
            session
                .workflow(&s.deploy_repository, p)
                .await
                .map_err(|e| host_error(e, access))?;
        }
        let event = transact!(self, |tx| {
            let old = tx.delivery_settings().await?;
            if old
                .as_ref()
                .is_some_and(|o| o.deploy_repository != s.deploy_repository)
            {
                tx.clear_synced().await?;
            }
            tx.put_delivery_settings(&s).await?;
            self.append(tx, "delivery.settings_changed", actor, None, None, json!(s))
                .await
        })?;
        self.event_committed(event.id);
        Ok(s)
    }

    // ----- sync -----

    /// Reads the deploy repository's merged pull requests, workflow runs, jobs and deploy
    /// commit ranges since the last sync, links deploys to pull requests, and records the
    /// freshness (the error, if any, beside the last good sync time). Nothing when no settings
    /// or code host are configured.
    pub async fn sync_delivery(&self) -> Result<Freshness, Error> {
        let _guard = self.delivery.sync.lock().await;
        let Some(settings) = self.delivery_settings().await? else {
            return Ok(Freshness::default());
        };
        if self.host().is_none() {
            return Ok(Freshness::default());
        }
        let result = self.sync_once(&settings).await;
        let now = self.now();
        let (f, event) = transact!(self, |tx| {
            let old = tx.freshness().await?;
            let mut f = old.clone();
            match &result {
                Ok(_) => {
                    f.synced_at = Some(now);
                    f.error = None;
                }
                Err(e) => f.error = Some(e.to_string()),
            }
            tx.put_freshness(&f).await?;
            // An event when the sync wrote something or its error changed: what a page shows
            // moved (a quiet sync every few minutes appends nothing).
            let wrote = matches!(&result, Ok(n) if *n > 0);
            let event = if wrote || f.error != old.error {
                Some(
                    self.append(tx, "delivery.synced", &system(), None, None, json!(f))
                        .await?,
                )
            } else {
                None
            };
            Ok((f, event))
        })?;
        if let Err(e) = &result {
            tracing::warn!(error = %e, "delivery sync failed");
        }
        if let Some(e) = event {
            self.event_committed(e.id);
        }
        // Readers after a sync find the synced data parsed already.
        if let Err(e) = self.keep_synced().await {
            tracing::warn!(error = %e, "the synced delivery data could not be read");
        }
        Ok(f)
    }

    /// Reads the synced data whole into the copy kept in memory, unless it is kept already
    /// or is more than a copy holds.
    async fn keep_synced(&self) -> Result<(), Error> {
        let mut tx = self.parts.storage.read().await?;
        self.synced(&mut *tx).await?;
        Ok(())
    }

    /// The synced data of the storage's generation: the copy kept, else read whole and kept.
    /// `None` when it is more than a copy holds. The generation is read before the rows, so
    /// rows read after it are as new or newer than its label.
    async fn synced(&self, tx: &mut dyn WorkTx) -> Result<Option<Arc<Synced>>, Error> {
        let generation = tx.delivery_generation().await?;
        if let Some(kept) = self.delivery.synced(generation) {
            return Ok(Some(kept));
        }
        if tx.synced_rows().await? > self.config.delivery_kept_rows {
            return Ok(None);
        }
        let s = Arc::new(Synced::new(
            generation,
            tx.all_pulls().await?,
            tx.all_runs().await?,
        ));
        self.delivery.keep(s.clone());
        Ok(Some(s))
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
        let now = self.now();
        let history = now - chrono::Duration::days(HISTORY_DAYS);
        let (newest_merge, cursors) = {
            let mut tx = self.parts.storage.read().await?;
            let m = tx.newest_merge(repo).await?;
            let mut c = HashMap::new();
            for p in &s.workflow_paths {
                for ev in ["push", "pull_request"] {
                    c.insert((p.clone(), ev), tx.newest_run(p, ev).await?);
                }
            }
            (m, c)
        };
        let since = newest_merge
            .map(|m| (m - chrono::Duration::days(1)).max(history))
            .unwrap_or(history);
        let pulls = session
            .merged_pulls(repo, &branch, since)
            .await
            .map_err(SyncFailure::host)?;
        let mut runs: Vec<Run> = Vec::new();
        for p in &s.workflow_paths {
            for (ev, b) in [("push", Some(branch.as_str())), ("pull_request", None)] {
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
        // Store what was listed; runs already read keep their jobs.
        let mut wrote = transact!(self, |tx| {
            let mut wrote = 0;
            for p in &pulls {
                let mut p = p.clone();
                if p.deploy_run.is_none()
                    && let Some(sha) = &p.merge_sha
                    && let Some((run, at)) = tx.deploy_of_commit(repo, sha).await?
                {
                    p.deploy_run = Some(run);
                    p.deployed_at = Some(at);
                }
                tx.put_pull(&p).await?;
                wrote += 1;
            }
            for r in &runs {
                let keep = tx.run(r.id).await?.is_some_and(|old| old.jobs.is_some());
                if !keep {
                    tx.put_run(r).await?;
                    wrote += 1;
                }
            }
            Ok(wrote)
        })?;
        // Jobs: every push run (deploy candidates), the newest PR-check runs.
        let pending = {
            let mut tx = self.parts.storage.read().await?;
            let mut v = tx.runs_without_jobs("push", 1000).await?;
            v.extend(tx.runs_without_jobs("pull_request", CHECK_JOBS).await?);
            v
        };
        let mut read = Vec::new();
        for mut r in pending {
            let jobs = session.jobs(repo, r.id).await.map_err(SyncFailure::host)?;
            r.jobs = Some(jobs);
            r.production = compute::production_of(s, &r, &branch);
            read.push(r);
        }
        wrote += transact!(self, |tx| {
            for r in &read {
                tx.put_run(r).await?;
            }
            Ok(read.len())
        })?;
        // Deploys: each ships the commits since the previous successful one.
        let (deploys, known) = {
            let mut tx = self.parts.storage.read().await?;
            (
                tx.successful_deploys(repo).await?,
                tx.deploys_with_commits(repo)
                    .await?
                    .into_iter()
                    .collect::<HashSet<i64>>(),
            )
        };
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
            transact!(self, |tx| {
                tx.put_deploy_commits(repo, d.id, at, &shas).await?;
                tx.link_deploy(repo, &shas, d.id, at).await?;
                Ok(())
            })?;
            wrote += 1;
        }
        transact!(self, |tx| Ok(tx.mark_reverts(repo).await?))?;
        Ok(wrote)
    }

    // ----- reads -----

    /// The window: `[from, to)`, default the seven days before now.
    pub fn delivery_window(&self, from: Option<Time>, to: Option<Time>) -> Result<Window, Error> {
        let to = to.unwrap_or_else(|| self.now());
        let from = from.unwrap_or(to - chrono::Duration::days(7));
        if from >= to || to - from > chrono::Duration::days(366) {
            return Err(Error::with_message(
                ErrorCode::INVALID_QUERY,
                "`from` is before `to`, at most 366 days apart",
            ));
        }
        Ok(Window { from, to })
    }

    /// What the computation reads for a window: settings, pull requests, runs and context.
    /// What the timeline, measures and pipeline read for `[from, to)`: the synced pull
    /// requests and runs from the copy kept in memory while their generation holds (a sync
    /// moves it; other replicas' syncs too, as the storage counts it), else read afresh.
    async fn delivery_inputs(&self, from: Time, to: Time) -> Result<Inputs, Error> {
        let mut tx = self.parts.storage.read().await?;
        let settings = tx.delivery_settings().await?.ok_or_else(not_configured)?;
        let (synced, pulls, runs) = match self.synced(&mut *tx).await? {
            Some(s) => {
                let (p, r) = s.window(&settings, from, to);
                (s, p, r)
            }
            // More than a copy may hold: the window's rows alone.
            None => {
                let pulls = tx.pulls_for_window(from, to).await?;
                let mut runs = tx
                    .runs_between(from - chrono::Duration::days(1), to)
                    .await?;
                let have: HashSet<i64> = runs.iter().map(|r| r.id).collect();
                let mut extra: Vec<i64> = pulls
                    .iter()
                    .filter_map(|p| p.deploy_run)
                    .filter(|d| !have.contains(d))
                    .collect();
                extra.sort_unstable();
                extra.dedup();
                for id in extra {
                    if let Some(r) = tx.run(id).await? {
                        runs.push(r);
                    }
                }
                if let Some(first) = tx.first_deploy(&settings.deploy_repository).await?
                    && !runs.iter().any(|r| r.id == first.id)
                {
                    runs.push(first);
                }
                let (np, nr) = (pulls.len(), runs.len());
                (
                    // The window alone, never kept: no generation.
                    Arc::new(Synced::new(-1, pulls, runs)),
                    (0..np).collect(),
                    (0..nr).collect(),
                )
            }
        };
        let ctx = {
            let chosen: Vec<&Pull> = pulls.iter().map(|&i| &synced.pulls[i]).collect();
            self.context(&mut *tx, &chosen).await?
        };
        let freshness = tx.freshness().await?;
        Ok(Inputs {
            settings,
            synced,
            pulls,
            runs,
            ctx,
            freshness,
        })
    }

    async fn context(&self, tx: &mut dyn WorkTx, pulls: &[&Pull]) -> Result<Context, Error> {
        let mut keys: Vec<IssueKey> = Vec::new();
        for p in pulls {
            let (a, b) = compute::candidate_keys(p);
            keys.extend(a);
            keys.extend(b);
        }
        keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        keys.dedup();
        let mut issues: HashMap<String, Issue> = HashMap::new();
        for i in tx.issues_by_keys(&keys).await? {
            issues.insert(i.key.as_str().to_owned(), i);
        }
        let refs: Vec<String> = pulls
            .iter()
            .map(|p| format!("{}#{}", p.repo, p.number))
            .collect();
        let mut imported = HashMap::new();
        for i in tx.issues_by_refs(&refs).await? {
            if let Some(r) = &i.repo {
                imported.insert(r.clone(), i.key.clone());
            }
            issues.insert(i.key.as_str().to_owned(), i);
        }
        // Parents, for inherited components.
        for _ in 0..8 {
            let missing: Vec<IssueKey> = issues
                .values()
                .filter_map(|i| i.parent.clone())
                .filter(|p| !issues.contains_key(p.as_str()))
                .collect();
            if missing.is_empty() {
                break;
            }
            for i in tx.issues_by_keys(&missing).await? {
                issues.insert(i.key.as_str().to_owned(), i);
            }
        }
        let mut components: HashMap<ProjectKey, Vec<Component>> = HashMap::new();
        for (p, c) in tx.all_components().await? {
            components.entry(p).or_default().push(c);
        }
        Ok(Context {
            issues,
            imported,
            components,
            groups: tx.session_groups().await?,
            open_p0_unowned: tx.open_p0_unowned().await?,
            targets: self.targets(),
        })
    }

    /// The timeline over a window with search and facets (DELIVERY_NOT_CONFIGURED).
    pub async fn delivery_timeline(&self, w: Window, f: &Filters) -> Result<TimelineAnswer, Error> {
        let i = self.delivery_inputs(w.from, w.to).await?;
        let timeline = compute::timeline(&i.settings, w, f, &i.pulls(), &i.runs(), &i.ctx);
        Ok(TimelineAnswer {
            timeline,
            freshness: i.freshness,
            session_groups: i.ctx.groups,
        })
    }

    /// The measures over a window with search and facets.
    pub async fn delivery_measures(&self, w: Window, f: &Filters) -> Result<MeasuresAnswer, Error> {
        let i = self.delivery_inputs(w.from, w.to).await?;
        Ok(MeasuresAnswer {
            measures: compute::measures_of(&i.settings, w, f, &i.pulls(), &i.runs(), &i.ctx),
            freshness: i.freshness,
        })
    }

    /// The pipeline page: the seven UTC days ending with `at` (default today).
    pub async fn delivery_pipeline(&self, at: Option<NaiveDate>) -> Result<PipelineAnswer, Error> {
        let now = self.now();
        let last = at.unwrap_or_else(|| now.date_naive());
        let end = chrono::Utc.from_utc_datetime(
            &last
                .succ_opt()
                .unwrap_or(last)
                .and_time(chrono::NaiveTime::MIN),
        );
        let start = end - chrono::Duration::days(7);
        // Failures of the 24 hours before now, or before the end of a fixed day.
        let fail_end = if at.is_some() {
            end.min(now.max(end))
        } else {
            now
        };
        let i = self.delivery_inputs(start, end).await?;
        Ok(PipelineAnswer {
            pipeline: compute::pipeline(&i.settings, last, fail_end, &i.pulls(), &i.runs(), &i.ctx),
            freshness: i.freshness,
        })
    }

    /// One deploy-repository run with every job: synced, else read from the code host
    /// (NOT_FOUND when it has none).
    pub async fn delivery_run(&self, id: i64) -> Result<Run, Error> {
        let (settings, stored) = {
            let mut tx = self.parts.storage.read().await?;
            (
                tx.delivery_settings().await?.ok_or_else(not_configured)?,
                tx.run(id).await?,
            )
        };
        if let Some(r) = &stored
            && r.jobs.is_some()
        {
            return Ok(r.clone());
        }
        let not_found = || Error::with_message(ErrorCode::NOT_FOUND, "no such run");
        let Some(host) = self.host() else {
            return stored.ok_or_else(not_found);
        };
        let map = |e: HostError| match e {
            HostError::NotFound | HostError::NoAccess(_) => not_found(),
            HostError::Unavailable(m) => {
                tracing::warn!(error = %m, "code host unavailable");
                Error::new(ErrorCode::CODE_HOST_UNAVAILABLE)
            }
        };
        let session = host.open().await.map_err(map)?;
        let mut run = match stored {
            Some(r) => r,
            None => session
                .run(&settings.deploy_repository, id)
                .await
                .map_err(map)?,
        };
        run.jobs = Some(
            session
                .jobs(&settings.deploy_repository, id)
                .await
                .map_err(map)?,
        );
        Ok(run)
    }

    // ----- session groups -----

    fn group_name(name: &str) -> Result<String, Error> {
        let n = name.trim();
        if n.is_empty() || n.chars().any(char::is_control) {
            return Err(Error::with_message(
                ErrorCode::SESSION_GROUP_INPUT,
                "a session group has a name",
            ));
        }
        if n.chars().count() > GROUP_NAME_MAX {
            return Err(Error::with_message(
                ErrorCode::CAP_EXCEEDED,
                "a session group name is at most 80 characters",
            ));
        }
        Ok(n.to_owned())
    }

    /// The refusals shared by create and edit: the group holds one session at least, no
    /// session another group holds, a name no other group has and no live session outside
    /// the group is titled.
    async fn check_group(
        &self,
        tx: &mut dyn WorkTx,
        g: &SessionGroup,
        live_titles: &[(String, String)],
    ) -> Result<(), Error> {
        if g.sessions.is_empty() {
            return Err(Error::with_message(
                ErrorCode::SESSION_GROUP_INPUT,
                "a session group holds one session at least",
            ));
        }
        for other in tx.session_groups().await? {
            if other.id == g.id {
                continue;
            }
            if other.name.to_lowercase() == g.name.to_lowercase() {
                return Err(ErrorCode::SESSION_GROUP_NAME_TAKEN.into());
            }
            if let Some(s) = g.sessions.iter().find(|s| other.sessions.contains(s)) {
                return Err(Error::with_message(
                    ErrorCode::SESSION_IN_GROUP,
                    format!("session {s} is in the group {}", other.name),
                ));
            }
        }
        if live_titles
            .iter()
            .any(|(id, title)| *title == g.name && !g.sessions.contains(id))
        {
            return Err(ErrorCode::SESSION_GROUP_NAME_IS_SESSION_TITLE.into());
        }
        Ok(())
    }

    fn group_sessions(list: &[String]) -> Result<Vec<String>, Error> {
        let mut out: Vec<String> = Vec::new();
        for s in list {
            if !crate::work::delivery::is_session_id(s) {
                return Err(Error::with_message(
                    ErrorCode::SESSION_GROUP_INPUT,
                    "sessions are session ids",
                ));
            }
            if !out.contains(s) {
                out.push(s.clone());
            }
        }
        Ok(out)
    }

    /// Creates a session group; `live_titles` are the live sessions' `(id, title)`.
    pub async fn create_session_group(
        &self,
        actor: &Actor,
        name: &str,
        sessions: &[String],
        live_titles: &[(String, String)],
    ) -> Result<SessionGroup, Error> {
        let g = SessionGroup {
            id: crate::ids::TokenId::from_random(clock::random::<16>(&*self.parts.entropy))
                .to_string(),
            name: Self::group_name(name)?,
            sessions: Self::group_sessions(sessions)?,
        };
        let event = transact!(self, |tx| {
            self.check_group(tx, &g, live_titles).await?;
            tx.put_session_group(&g).await?;
            self.append(tx, "session_group.changed", actor, None, None, json!(g))
                .await
        })?;
        self.event_committed(event.id);
        Ok(g)
    }

    /// Renames a group, adds or removes sessions (an edit that empties it: SESSION_GROUP_INPUT).
    pub async fn update_session_group(
        &self,
        actor: &Actor,
        id: &str,
        patch: &SessionGroupPatch,
        live_titles: &[(String, String)],
    ) -> Result<SessionGroup, Error> {
        let id = uuid_of(id)?;
        let name = patch.name.as_deref().map(Self::group_name).transpose()?;
        let add = Self::group_sessions(&patch.add)?;
        let remove = Self::group_sessions(&patch.remove)?;
        let (g, event) = transact!(self, |tx| {
            let mut g = tx.session_group(&id).await?.ok_or_else(|| {
                Error::with_message(ErrorCode::NOT_FOUND, "no such session group")
            })?;
            if let Some(n) = &name {
                g.name = n.clone();
            }
            g.sessions.retain(|s| !remove.contains(s));
            for s in &add {
                if !g.sessions.contains(s) {
                    g.sessions.push(s.clone());
                }
            }
            self.check_group(tx, &g, live_titles).await?;
            tx.put_session_group(&g).await?;
            let e = self
                .append(tx, "session_group.changed", actor, None, None, json!(g))
                .await?;
            Ok((g, e))
        })?;
        self.event_committed(event.id);
        Ok(g)
    }

    /// Deletes a group: its sessions show as themselves again.
    pub async fn delete_session_group(&self, actor: &Actor, id: &str) -> Result<(), Error> {
        let id = uuid_of(id)?;
        let event = transact!(self, |tx| {
            if !tx.delete_session_group(&id).await? {
                return Err(Error::with_message(
                    ErrorCode::NOT_FOUND,
                    "no such session group",
                ));
            }
            self.append(tx, "session_group.changed", actor, None, None, json!(null))
                .await
        })?;
        self.event_committed(event.id);
        Ok(())
    }

    // ----- architecture sources -----

    fn project_key(key: &str) -> Result<ProjectKey, Error> {
        ProjectKey::parse(key)
            .ok_or_else(|| Error::with_message(ErrorCode::NOT_FOUND, "no such project"))
    }

    async fn known_project(&self, key: &str) -> Result<ProjectKey, Error> {
        let k = Self::project_key(key)?;
        let mut tx = self.parts.storage.read().await?;
        tx.project(&k)
            .await?
            .ok_or_else(|| Error::with_message(ErrorCode::NOT_FOUND, "no such project"))?;
        Ok(k)
    }

    pub async fn architecture_source(
        &self,
        key: &str,
    ) -> Result<Option<ArchitectureSource>, Error> {
        let k = self.known_project(key).await?;
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.architecture_source(&k).await?)
    }

    pub async fn architecture_sources(&self) -> Result<Vec<ArchitectureSource>, Error> {
        let mut tx = self.parts.storage.read().await?;
        Ok(tx.architecture_sources().await?)
    }

    /// Sets a project's source after proving the code host reads the repository and branch
    /// (SOURCE_ACCESS, CODE_HOST_UNAVAILABLE). The caller starts an import without waiting.
    pub async fn put_architecture_source(
        &self,
        actor: &Actor,
        key: &str,
        repo: &str,
        branch: &str,
    ) -> Result<ArchitectureSource, Error> {
        let k = self.known_project(key).await?;
        if !is_repo(repo) {
            return Err(bad("`repo` is owner/repo"));
        }
        if branch.trim().is_empty() || branch.chars().any(|c| c.is_control() || c == ' ') {
            return Err(bad("`branch` is a branch name"));
        }
        let access = ErrorCode::SOURCE_ACCESS;
        let session = self.host_session(access).await?;
        session
            .default_branch(repo)
            .await
            .map_err(|e| host_error(e, access))?;
        session
            .branch(repo, branch)
            .await
            .map_err(|e| host_error(e, access))?;
        let src = ArchitectureSource {
            project: k.clone(),
            repo: repo.to_owned(),
            branch: branch.to_owned(),
            commit: None,
            synced_at: None,
            last_error: None,
        };
        let event = transact!(self, |tx| {
            tx.put_architecture_source(&src).await?;
            self.append(tx, "architecture.synced", actor, Some(&k), None, json!(src))
                .await
        })?;
        self.event_committed(event.id);
        Ok(src)
    }

    /// Removes a project's source and its imported tree (SOURCE_NOT_FOUND).
    pub async fn delete_architecture_source(&self, actor: &Actor, key: &str) -> Result<(), Error> {
        let k = self.known_project(key).await?;
        let event = transact!(self, |tx| {
            if !tx.delete_architecture_source(&k).await? {
                return Err(ErrorCode::SOURCE_NOT_FOUND.into());
            }
            tx.put_components(&k, &[]).await?;
            self.append(
                tx,
                "architecture.synced",
                actor,
                Some(&k),
                None,
                json!(null),
            )
            .await
        })?;
        self.event_committed(event.id);
        Ok(())
    }

    /// Imports a project's catalog now: 200 with `last_error` set when the code host is down
    /// or the catalog is missing or malformed; SOURCE_ACCESS for a credential or branch
    /// problem (recorded as `last_error` too); SOURCE_NOT_FOUND without a source.
    pub async fn sync_architecture(
        &self,
        actor: Option<&Actor>,
        key: &str,
    ) -> Result<ArchitectureSource, Error> {
        let _guard = self.delivery.architecture.lock().await;
        let k = self.known_project(key).await?;
        let mut src = {
            let mut tx = self.parts.storage.read().await?;
            tx.architecture_source(&k)
                .await?
                .ok_or_else(|| Error::new(ErrorCode::SOURCE_NOT_FOUND))?
        };
        let access = ErrorCode::SOURCE_ACCESS;
        let imported: Result<(String, Vec<Component>), Error> = async {
            let session = self.host_session(access).await?;
            let commit = session
                .branch(&src.repo, &src.branch)
                .await
                .map_err(|e| host_error(e, access))?;
            match session
                .catalog(&src.repo, &src.branch)
                .await
                .map_err(|e| host_error(e, access))?
            {
                None => Err(Error::with_message(
                    ErrorCode::NOT_FOUND,
                    format!("{} has no catalog-info.yaml on {}", src.repo, src.branch),
                )),
                Some(Err(m)) => Err(Error::with_message(ErrorCode::NOT_FOUND, m)),
                Some(Ok(c)) => Ok((commit, c)),
            }
        }
        .await;
        let refusal = match imported {
            Ok((commit, components)) => {
                src.commit = Some(commit);
                src.synced_at = Some(self.now());
                src.last_error = None;
                let event = transact!(self, |tx| {
                    tx.put_components(&k, &components).await?;
                    tx.put_architecture_source(&src).await?;
                    self.append(
                        tx,
                        "architecture.synced",
                        actor.unwrap_or(&system()),
                        Some(&k),
                        None,
                        json!(src),
                    )
                    .await
                })?;
                self.event_committed(event.id);
                return Ok(src);
            }
            Err(e) => e,
        };
        src.last_error = Some(if refusal.is(ErrorCode::CODE_HOST_UNAVAILABLE) {
            "the code-hosting service could not be reached".to_owned()
        } else {
            refusal.message.clone()
        });
        let event = transact!(self, |tx| {
            tx.put_architecture_source(&src).await?;
            self.append(
                tx,
                "architecture.synced",
                actor.unwrap_or(&system()),
                Some(&k),
                None,
                json!(src),
            )
            .await
        })?;
        self.event_committed(event.id);
        if refusal.is(access) {
            return Err(refusal);
        }
        Ok(src)
    }

    /// Imports every project's source (the hourly task); failures land in `last_error`.
    pub async fn sync_architecture_all(&self) -> Result<(), Error> {
        for s in self.architecture_sources().await? {
            if let Err(e) = self.sync_architecture(None, s.project.as_str()).await {
                tracing::warn!(project = %s.project, code = e.code_str(), "architecture sync failed");
            }
        }
        Ok(())
    }

    /// A project's component tree with its issues (SOURCE_NOT_FOUND without a source).
    pub async fn component_tree(&self, key: &str) -> Result<ComponentTree, Error> {
        let k = self.known_project(key).await?;
        let mut tx = self.parts.storage.read().await?;
        let source = tx
            .architecture_source(&k)
            .await?
            .ok_or_else(|| Error::new(ErrorCode::SOURCE_NOT_FOUND))?;
        let comps = tx.components(&k).await?;
        let issues = tx.project_issues(&k).await?;
        let by_key: HashMap<String, Issue> = issues
            .iter()
            .map(|i| (i.key.as_str().to_owned(), i.clone()))
            .collect();
        let ids: HashSet<&str> = comps.iter().map(|c| c.id.as_str()).collect();
        let mut attached: HashMap<&str, Vec<&Issue>> = HashMap::new();
        let (mut unassigned, mut not_architectural, mut retired_links) = (vec![], vec![], vec![]);
        for i in &issues {
            if i.components.mode == ComponentsMode::None {
                not_architectural.push(component_issue(i));
                continue;
            }
            let eff = compute::effective_components(i, &by_key);
            if eff.is_empty() {
                unassigned.push(component_issue(i));
                continue;
            }
            let gone: Vec<String> = eff
                .iter()
                .filter(|c| !ids.contains(c.as_str()))
                .cloned()
                .collect();
            if !gone.is_empty() {
                retired_links.push(RetiredLink {
                    issue: component_issue(i),
                    ids: gone,
                });
            }
            for c in eff.iter().filter(|c| ids.contains(c.as_str())) {
                if let Some(id) = ids.get(c.as_str()) {
                    attached.entry(id).or_default().push(i);
                }
            }
        }
        let children: HashMap<&str, Vec<&str>> = comps.iter().fold(HashMap::new(), |mut m, c| {
            if let Some(p) = &c.parent {
                m.entry(p.as_str()).or_default().push(c.id.as_str());
            }
            m
        });
        let open_of = |id: &str| {
            attached
                .get(id)
                .map(|v| v.iter().filter(|i| i.status.is_open()).count())
                .unwrap_or(0)
        };
        let components = comps
            .iter()
            .map(|c| {
                let mine = attached.get(c.id.as_str()).cloned().unwrap_or_default();
                let mut with_children = 0;
                let mut stack = vec![c.id.as_str()];
                let mut seen = HashSet::new();
                while let Some(x) = stack.pop() {
                    if !seen.insert(x) {
                        continue;
                    }
                    with_children += open_of(x);
                    stack.extend(children.get(x).into_iter().flatten());
                }
                ComponentNode {
                    id: c.id.clone(),
                    name: c.name.clone(),
                    parent: c.parent.clone(),
                    counts: ComponentCounts {
                        open: mine.iter().filter(|i| i.status.is_open()).count(),
                        total: mine.len(),
                        open_with_children: with_children,
                    },
                    issues: mine.into_iter().map(component_issue).collect(),
                }
            })
            .collect();
        Ok(ComponentTree {
            project: k,
            source,
            components,
            unassigned,
            not_architectural,
            retired_links,
        })
    }
}

/// A UUID path id, lower-cased (protocol §5); anything else names nothing.
fn uuid_of(id: &str) -> Result<String, Error> {
    crate::ids::uuid_id(id)
        .ok_or_else(|| Error::with_message(ErrorCode::NOT_FOUND, "no such session group"))
}

/// Parses a full-date (`?at=`).
pub fn full_date(s: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .filter(|_| s.len() == 10)
}

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
