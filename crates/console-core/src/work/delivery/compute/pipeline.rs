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

/// The pipeline page (protocol §6.5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pipeline {
    pub days: Vec<PipelineDay>,
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
        let merged_days: Vec<&PullRow> = self
            .rows
            .iter()
            .filter(|r| r.merged_at.date_naive() >= first && r.merged_at.date_naive() <= last_day)
            .collect();
        let mut targets = BTreeMap::new();
        for (name, target, value, at_least) in [
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
