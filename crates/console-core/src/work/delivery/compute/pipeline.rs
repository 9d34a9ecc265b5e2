//! The pipeline page: seven UTC days of PR checks, staging and production deploy results
//! with lead times, the slowest PR-check jobs, the jobs failed in the last 24 hours, and the
//! targets (protocol §6.5).

use std::collections::BTreeMap;

use chrono::{Duration, NaiveDate};
use serde::Serialize;

use super::measures::check;
use super::*;
use crate::work::delivery::Job;

/// A job's duration and result.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobResult {
    pub runs: usize,
    pub success: Option<f64>,
    pub median_seconds: Option<f64>,
}

/// One UTC day of the pipeline page.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PipelineDay {
    pub day: NaiveDate,
    pub pr_checks: JobResult,
    pub staging_e2e: Option<JobResult>,
    pub staging_deploy: Option<JobResult>,
    pub production_deploy: JobResult,
    pub merge_to_production: Stat,
    pub open_to_merge: Stat,
}

/// A slow job of the PR checks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlowJob {
    pub name: String,
    pub results: usize,
    pub median_seconds: f64,
    pub max_seconds: f64,
}

/// A job that failed in the last 24 hours.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailedJob {
    pub run: i64,
    pub job: i64,
    pub name: String,
    pub workflow_path: String,
    pub event: String,
    pub failing_step: Option<String>,
    #[serde(with = "crate::work::model::rfc3339_opt")]
    pub completed_at: Option<Time>,
}

/// A stage's last run in the days: when it finished and whether it passed.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LastRun {
    pub run: i64,
    #[serde(with = "crate::work::model::rfc3339")]
    pub at: Time,
    pub success: bool,
    pub url: Option<String>,
}

/// One stage of the pipeline over the seven days: its runs' success share and median
/// duration, its last run, and the targets (keys of `targets`) it answers to.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    /// `pr_checks`, `staging_e2e`, `staging_deploy` or `production_deploy`.
    pub stage: &'static str,
    /// The job it reads, as the settings name it (the roll-up job for the PR checks, when
    /// named; else the whole run).
    pub job: Option<String>,
    pub result: JobResult,
    pub last_run: Option<LastRun>,
    pub targets: Vec<&'static str>,
}

/// The pipeline page (protocol §6.5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pipeline {
    pub days: Vec<PipelineDay>,
    /// Each configured stage over the seven days.
    pub stages: Vec<Stage>,
    /// The seven days' lead times, of the pull requests merged in them.
    pub merge_to_production: Stat,
    pub open_to_merge: Stat,
    pub slowest_jobs: Vec<SlowJob>,
    pub failed_jobs: Vec<FailedJob>,
    pub targets: BTreeMap<&'static str, TargetCheck>,
}

fn job_secs(j: &Job) -> Option<f64> {
    Some(secs(j.started_at?, j.completed_at?)).filter(|s| *s >= 0.0)
}

fn result_of<'a>(items: impl Iterator<Item = (bool, Option<f64>)> + 'a) -> JobResult {
    let v: Vec<(bool, Option<f64>)> = items.collect();
    JobResult {
        runs: v.len(),
        success: share(v.iter().filter(|(ok, _)| *ok).count(), v.len()),
        median_seconds: stat(v.iter().filter_map(|(_, s)| *s).collect()).median,
    }
}

/// Seven UTC days ending with `last_day`; failures of the 24 hours before `now`.
pub fn pipeline(
    s: &DeliverySettings,
    last_day: NaiveDate,
    now: Time,
    pulls: &[&Pull],
    runs: &[&Run],
    ctx: &Context,
) -> Pipeline {
    let first = last_day - Duration::days(6);
    let p = PipelineRuns {
        s,
        checks: runs
            .iter()
            .filter(|r| r.event == "pull_request" && r.repo == s.deploy_repository)
            .copied()
            .collect(),
        pushes: runs
            .iter()
            .filter(|r| r.event == "push" && r.repo == s.deploy_repository)
            .copied()
            .collect(),
        rows: rows(s, pulls, runs, ctx),
    };
    let mut days = Vec::new();
    let mut day = first;
    while day <= last_day {
        days.push(p.day(day));
        match day.succ_opt() {
            Some(d) => day = d,
            None => break,
        }
    }
    Pipeline {
        days,
        stages: p.stages(first, last_day),
        merge_to_production: merge_to_production(&p.merged_between(first, last_day)),
        open_to_merge: open_to_merge(&p.merged_between(first, last_day)),
        slowest_jobs: p.slowest_jobs(first, last_day),
        failed_jobs: failed_jobs(runs, now),
        targets: p.targets(&ctx.targets, first, last_day),
    }
}

/// The deploy repository's PR-check and push runs, and the rows, a pipeline page reads.
struct PipelineRuns<'a> {
    s: &'a DeliverySettings,
    checks: Vec<&'a Run>,
    pushes: Vec<&'a Run>,
    rows: Vec<PullRow>,
}

impl PipelineRuns<'_> {
    /// A PR-check run's result: its rollup job's when named and present, else the run's.
    fn check_ok(&self, r: &Run) -> bool {
        match (&self.s.pr_checks_rollup_job, &r.jobs) {
            (Some(n), Some(jobs)) => jobs
                .iter()
                .find(|j| &j.name == n)
                .map(|j| j.conclusion.as_deref() == Some("success"))
                .unwrap_or(r.conclusion.as_deref() == Some("success")),
            _ => r.conclusion.as_deref() == Some("success"),
        }
    }

    /// The push runs' results of the job `name` (when named) on `day`.
    fn named_job(&self, name: &Option<String>, day: NaiveDate) -> Option<JobResult> {
        let n = name.as_ref()?;
        Some(result_of(
            self.pushes
                .iter()
                .filter(|r| r.started_at.date_naive() == day)
                .filter_map(|r| {
                    let j = r.jobs.as_ref()?.iter().find(|j| &j.name == n)?;
                    Some((j.conclusion.as_deref() == Some("success"), job_secs(j)))
                }),
        ))
    }

    /// The PR checks' results of the runs started on the days `[first, last]`.
    fn checks_between(&self, first: NaiveDate, last: NaiveDate) -> JobResult {
        result_of(
            self.checks
                .iter()
                .filter(|r| r.started_at.date_naive() >= first && r.started_at.date_naive() <= last)
                .map(|r| (self.check_ok(r), Some(secs(r.started_at, r.completed_at)))),
        )
    }

    /// The rows merged in the days `[first, last]`.
    fn merged_between(&self, first: NaiveDate, last: NaiveDate) -> Vec<&PullRow> {
        self.rows
            .iter()
            .filter(|r| (first..=last).contains(&r.merged_at.date_naive()))
            .collect()
    }

    /// Whether a run started in the days `[first, last]`.
    fn within(r: &Run, first: NaiveDate, last: NaiveDate) -> bool {
        (first..=last).contains(&r.started_at.date_naive())
    }

    /// The results of the job `name` in the push runs of the days, each with its run, end
    /// and success.
    fn job_runs(
        &self,
        name: &str,
        first: NaiveDate,
        last: NaiveDate,
    ) -> Vec<(&Run, Time, bool, Option<f64>)> {
        self.pushes
            .iter()
            .filter(|r| Self::within(r, first, last))
            .filter_map(|r| {
                let j = r.jobs.as_ref()?.iter().find(|j| j.name == name)?;
                Some((
                    *r,
                    j.completed_at.unwrap_or(r.completed_at),
                    j.conclusion.as_deref() == Some("success"),
                    job_secs(j),
                ))
            })
            .collect()
    }

    /// Each configured stage over the days `[first, last]`.
    fn stages(&self, first: NaiveDate, last: NaiveDate) -> Vec<Stage> {
        fn stage(
            stage: &'static str,
            job: Option<String>,
            v: Vec<(&Run, Time, bool, Option<f64>)>,
            targets: Vec<&'static str>,
        ) -> Stage {
            let last_run =
                v.iter()
                    .max_by_key(|(r, at, _, _)| (*at, r.id))
                    .map(|(r, at, ok, _)| LastRun {
                        run: r.id,
                        at: *at,
                        success: *ok,
                        url: r.url.clone(),
                    });
            Stage {
                stage,
                job,
                result: result_of(v.into_iter().map(|(_, _, ok, s)| (ok, s))),
                last_run,
                targets,
            }
        }
        let checks = self
            .checks
            .iter()
            .filter(|r| Self::within(r, first, last))
            .map(|r| {
                (
                    *r,
                    r.completed_at,
                    self.check_ok(r),
                    Some(secs(r.started_at, r.completed_at)),
                )
            })
            .collect();
        let mut out = vec![stage(
            "pr_checks",
            self.s.pr_checks_rollup_job.clone(),
            checks,
            vec!["pr_checks_success", "pr_checks_wall"],
        )];
        for (name, job) in [
            ("staging_e2e", &self.s.staging_e2e_job),
            ("staging_deploy", &self.s.staging_deploy_job),
        ] {
            if let Some(n) = job {
                out.push(stage(
                    name,
                    Some(n.clone()),
                    self.job_runs(n, first, last),
                    Vec::new(),
                ));
            }
        }
        let production = self
            .pushes
            .iter()
            .filter(|r| Self::within(r, first, last))
            .filter_map(|r| {
                let p = r.production.as_ref()?;
                let secs = r
                    .jobs
                    .as_ref()
                    .and_then(|j| j.iter().find(|j| j.name == p.job))
                    .and_then(job_secs);
                Some((*r, p.finished_at, p.success, secs))
            })
            .collect();
        out.push(stage(
            "production_deploy",
            self.s.production_jobs.first().cloned(),
            production,
            vec!["deploy_run_success"],
        ));
        out
    }

    /// One day's row.
    fn day(&self, day: NaiveDate) -> PipelineDay {
        let merged: Vec<&PullRow> = self
            .rows
            .iter()
            .filter(|r| r.merged_at.date_naive() == day)
            .collect();
        PipelineDay {
            day,
            pr_checks: self.checks_between(day, day),
            staging_e2e: self.named_job(&self.s.staging_e2e_job, day),
            staging_deploy: self.named_job(&self.s.staging_deploy_job, day),
            production_deploy: result_of(self.pushes.iter().filter_map(|r| {
                let p = r.production.as_ref()?;
                (r.started_at.date_naive() == day).then(|| {
                    let secs = r
                        .jobs
                        .as_ref()
                        .and_then(|j| j.iter().find(|j| j.name == p.job))
                        .and_then(job_secs);
                    (p.success, secs)
                })
            })),
            merge_to_production: merge_to_production(&merged),
            open_to_merge: open_to_merge(&merged),
        }
    }

    /// The five slowest PR-check jobs, ranked from the 50 newest timed results in the days.
    fn slowest_jobs(&self, first: NaiveDate, last_day: NaiveDate) -> Vec<SlowJob> {
        let mut timed: Vec<(Time, &str, f64)> = self
            .checks
            .iter()
            .filter(|r| r.started_at.date_naive() >= first && r.started_at.date_naive() <= last_day)
            .flat_map(|r| {
                r.jobs
                    .iter()
                    .flatten()
                    .filter_map(|j| Some((j.completed_at?, j.name.as_str(), job_secs(j)?)))
            })
            .collect();
        timed.sort_by_key(|t| std::cmp::Reverse(t.0));
        timed.truncate(50);
        let mut by_name: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
        for (_, n, s) in &timed {
            by_name.entry(n).or_default().push(*s);
        }
        let mut slowest_jobs: Vec<SlowJob> = by_name
            .into_iter()
            .map(|(n, v)| SlowJob {
                name: n.to_owned(),
                results: v.len(),
                max_seconds: v.iter().copied().fold(0.0, f64::max),
                median_seconds: stat(v).median.unwrap_or(0.0),
            })
            .collect();
        slowest_jobs.sort_by(|a, b| {
            b.median_seconds
                .total_cmp(&a.median_seconds)
                .then(a.name.cmp(&b.name))
        });
        slowest_jobs.truncate(5);
        slowest_jobs
    }

    /// The page's targets over the days `[first, last_day]`.
    fn targets(
        &self,
        t: &Targets,
        first: NaiveDate,
        last_day: NaiveDate,
    ) -> BTreeMap<&'static str, TargetCheck> {
        let all_checks = self.checks_between(first, last_day);
        let merged_days = self.merged_between(first, last_day);
        let production = result_of(self.pushes.iter().filter_map(|r| {
            let p = r.production.as_ref()?;
            Self::within(r, first, last_day).then_some((p.success, None))
        }));
        let mut targets = BTreeMap::new();
        for (name, target, value, at_least) in [
            (
                "deploy_run_success",
                t.deploy_run_success,
                production.success,
                true,
            ),
            (
                "pr_checks_success",
                t.pr_checks_success,
                all_checks.success,
                true,
            ),
            (
                "pr_checks_wall",
                t.pr_checks_wall_seconds,
                all_checks.median_seconds,
                false,
            ),
            (
                "merge_to_production",
                t.merge_to_production_seconds,
                merge_to_production(&merged_days).median,
                false,
            ),
            (
                "open_to_merge",
                t.open_to_merge_seconds,
                open_to_merge(&merged_days).median,
                false,
            ),
        ] {
            check(&mut targets, name, target, value, at_least);
        }
        targets
    }
}

/// Merge to production of the rows that deployed.
fn merge_to_production(merged: &[&PullRow]) -> Stat {
    stat(
        merged
            .iter()
            .filter_map(|r| r.deployed_at.map(|d| secs(r.merged_at, d)))
            .collect(),
    )
}

/// Open to merge of the rows.
fn open_to_merge(merged: &[&PullRow]) -> Stat {
    stat(
        merged
            .iter()
            .map(|r| secs(r.created_at, r.merged_at))
            .collect(),
    )
}

/// The jobs that failed in the 24 hours before `now`, newest first.
fn failed_jobs(runs: &[&Run], now: Time) -> Vec<FailedJob> {
    let since = now - Duration::hours(24);
    let mut failed_jobs: Vec<FailedJob> = runs
        .iter()
        .flat_map(|r| {
            r.jobs.iter().flatten().filter_map(move |j| {
                let done = j.completed_at.unwrap_or(r.completed_at);
                let bad = matches!(j.conclusion.as_deref(), Some("failure" | "timed_out"));
                (bad && done > since && done <= now).then(|| FailedJob {
                    run: r.id,
                    job: j.id,
                    name: j.name.clone(),
                    workflow_path: r.workflow_path.clone(),
                    event: r.event.clone(),
                    failing_step: failing(std::slice::from_ref(j)).1,
                    completed_at: j.completed_at,
                })
            })
        })
        .collect();
    failed_jobs.sort_by_key(|j| std::cmp::Reverse(j.completed_at));
    failed_jobs
}
