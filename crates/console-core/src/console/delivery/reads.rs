//! The delivery reads: the window a read covers, the synced data (kept parsed in memory while
//! its generation holds), what a window's computation reads, and the timeline, measures,
//! pipeline and one run.

use std::collections::{HashMap, HashSet};

use chrono::{NaiveDate, TimeZone};
use serde::Serialize;

use super::*;
use crate::work::delivery::compute::{
    self, Context, Filters, Measures, Pipeline, Timeline, Window,
};
use crate::work::delivery::{Component, DeliverySettings, Freshness, Pull, Run, SessionGroup};
use crate::work::{Issue, IssueKey, ProjectKey};

/// Synced pull requests (by merge time, repository, number) and runs (by start, id), parsed
/// once: a year of a busy repository is thousands of each, and a sync every five minutes is
/// the only writer.
#[derive(Debug)]
pub(super) struct Synced {
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

impl Delivery<'_> {
    /// Reads the synced data whole into the copy kept in memory, unless it is kept already
    /// or is more than a copy holds.
    pub(super) async fn keep_synced(&self) -> Result<(), Error> {
        let mut tx = self.console.parts.storage.read().await?;
        self.synced(&mut *tx).await?;
        Ok(())
    }

    /// The synced data of the storage's generation: the copy kept, else read whole and kept.
    /// `None` when it is more than a copy holds. The generation is read before the rows, so
    /// rows read after it are as new or newer than its label.
    async fn synced(&self, tx: &mut dyn WorkTx) -> Result<Option<Arc<Synced>>, Error> {
        let generation = tx.delivery().delivery_generation().await?;
        if let Some(kept) = self.console.delivery.synced(generation) {
            return Ok(Some(kept));
        }
        if tx.delivery().synced_rows().await? > self.console.config.delivery_kept_rows {
            return Ok(None);
        }
        let pulls = tx.delivery().all_pulls().await?;
        let runs = tx.delivery().all_runs().await?;
        let s = Arc::new(Synced::new(generation, pulls, runs));
        self.console.delivery.keep(s.clone());
        Ok(Some(s))
    }

    /// The window: `[from, to)`, default the seven days before now.
    pub fn window(&self, from: Option<Time>, to: Option<Time>) -> Result<Window, Error> {
        let to = to.unwrap_or_else(|| self.console.now());
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
    async fn inputs(&self, from: Time, to: Time) -> Result<Inputs, Error> {
        let mut tx = self.console.parts.storage.read().await?;
        let settings = tx
            .delivery()
            .delivery_settings()
            .await?
            .ok_or_else(not_configured)?;
        let (synced, pulls, runs) = match self.synced(&mut *tx).await? {
            Some(s) => {
                let (p, r) = s.window(&settings, from, to);
                (s, p, r)
            }
            // More than a copy may hold: the window's rows alone.
            None => {
                let pulls = tx.delivery().pulls_for_window(from, to).await?;
                let mut runs = tx
                    .delivery()
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
                    if let Some(r) = tx.delivery().run(id).await? {
                        runs.push(r);
                    }
                }
                if let Some(first) = tx
                    .delivery()
                    .first_deploy(&settings.deploy_repository)
                    .await?
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
        let freshness = tx.delivery().freshness().await?;
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
        for i in tx.delivery().issues_by_keys(&keys).await? {
            issues.insert(i.key.as_str().to_owned(), i);
        }
        let refs: Vec<String> = pulls
            .iter()
            .map(|p| format!("{}#{}", p.repo, p.number))
            .collect();
        let mut imported = HashMap::new();
        for i in tx.delivery().issues_by_refs(&refs).await? {
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
            for i in tx.delivery().issues_by_keys(&missing).await? {
                issues.insert(i.key.as_str().to_owned(), i);
            }
        }
        let mut components: HashMap<ProjectKey, Vec<Component>> = HashMap::new();
        for (p, c) in tx.delivery().all_components().await? {
            components.entry(p).or_default().push(c);
        }
        let groups = tx.delivery().session_groups().await?;
        let open_p0_unowned = tx.delivery().open_p0_unowned().await?;
        Ok(Context {
            issues,
            imported,
            components,
            groups,
            open_p0_unowned,
            targets: self.targets(),
        })
    }

    /// The timeline over a window with search and facets (DELIVERY_NOT_CONFIGURED).
    pub async fn timeline(&self, w: Window, f: &Filters) -> Result<TimelineAnswer, Error> {
        let i = self.inputs(w.from, w.to).await?;
        let timeline = compute::timeline(&i.settings, w, f, &i.pulls(), &i.runs(), &i.ctx);
        Ok(TimelineAnswer {
            timeline,
            freshness: i.freshness,
            session_groups: i.ctx.groups,
        })
    }

    /// The measures over a window with search and facets.
    pub async fn measures(&self, w: Window, f: &Filters) -> Result<MeasuresAnswer, Error> {
        let i = self.inputs(w.from, w.to).await?;
        Ok(MeasuresAnswer {
            measures: compute::measures_of(&i.settings, w, f, &i.pulls(), &i.runs(), &i.ctx),
            freshness: i.freshness,
        })
    }

    /// The pipeline page: the seven UTC days ending with `at` (default today).
    pub async fn pipeline(&self, at: Option<NaiveDate>) -> Result<PipelineAnswer, Error> {
        let now = self.console.now();
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
        let i = self.inputs(start, end).await?;
        Ok(PipelineAnswer {
            pipeline: compute::pipeline(&i.settings, last, fail_end, &i.pulls(), &i.runs(), &i.ctx),
            freshness: i.freshness,
        })
    }

    /// One deploy-repository run with every job: synced, else read from the code host
    /// (NOT_FOUND when it has none).
    pub async fn run(&self, id: i64) -> Result<Run, Error> {
        let (settings, stored) = {
            let mut tx = self.console.parts.storage.read().await?;
            let settings = tx.delivery().delivery_settings().await?;
            (
                settings.ok_or_else(not_configured)?,
                tx.delivery().run(id).await?,
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
}

/// Parses a full-date (`?at=`).
pub fn full_date(s: &str) -> Option<NaiveDate> {
    NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .filter(|_| s.len() == 10)
}
