//! The measures of a window (DORA's four keys as DevLake computes them, plus rework share,
//! deploy-run success and open unowned P0s), each against its target; `docs/delivery.md`.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{NaiveDate, TimeZone, Utc};
use serde::Serialize;

use super::rows::passes;
use super::*;

/// The four lead times.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LeadTime {
    pub merge_to_production: Stat,
    pub first_commit_to_production: Stat,
    pub open_to_production: Stat,
    pub open_to_merge: Stat,
}

/// Change failure rate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ChangeFailureRate {
    pub per_pr: Option<f64>,
    pub per_deploy: Option<f64>,
    /// `stored` when a stored flag (a `change-failure` or `incident` label) marked a change in
    /// the window; `derived` when reverts alone did.
    pub flags_source: &'static str,
}

/// One UTC day of the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Day {
    pub day: NaiveDate,
    pub merges: usize,
    pub deploys: usize,
    pub failed_deploy_runs: usize,
    pub failed_deploys: usize,
    pub merge_to_production_median: Option<f64>,
}

/// Open P0 issues with no owner.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Unowned {
    pub count: usize,
    pub issues: Vec<IssueKey>,
}

/// A target and whether it is met.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetCheck {
    pub target: f64,
    pub value: Option<f64>,
    pub met: Option<bool>,
}

/// The measures (protocol §6.5).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Measures {
    pub window: Window,
    pub deploys_per_day: f64,
    pub lead_time: LeadTime,
    pub change_failure_rate: ChangeFailureRate,
    pub time_to_restore: Stat,
    pub rework_share: Option<f64>,
    pub deploy_run_success: Option<f64>,
    pub daily: Vec<Day>,
    pub open_p0_unowned: Unowned,
    pub targets: BTreeMap<&'static str, TargetCheck>,
}

/// A target check: `value` against `target`, met when at least (`at_least`) or at most it.
/// Nothing without a target.
pub(super) fn check(
    out: &mut BTreeMap<&'static str, TargetCheck>,
    name: &'static str,
    target: Option<f64>,
    value: Option<f64>,
    at_least: bool,
) {
    if let Some(t) = target {
        out.insert(
            name,
            TargetCheck {
                target: t,
                value,
                met: value.map(|v| if at_least { v >= t } else { v <= t }),
            },
        );
    }
}

/// A run's production finish time.
fn finish(r: &Run) -> Option<Time> {
    r.production.as_ref().map(|p| p.finished_at)
}

/// The rows each deploy shipped, by its run id.
pub(super) struct Shipped<'a>(HashMap<i64, Vec<&'a PullRow>>);

impl<'a> Shipped<'a> {
    pub(super) fn of(rows: &'a [PullRow]) -> Self {
        let mut m: HashMap<i64, Vec<&PullRow>> = HashMap::new();
        for r in rows {
            if let Some(d) = r.deploy_run {
                m.entry(d).or_default().push(r);
            }
        }
        Self(m)
    }

    /// What the deploy `run` shipped.
    pub(super) fn by(&self, run: i64) -> &[&'a PullRow] {
        self.0.get(&run).map(Vec::as_slice).unwrap_or_default()
    }

    /// Whether the deploy shipped a change that failed.
    fn failed(&self, d: &Run) -> bool {
        self.by(d.id).iter().any(|p| p.failed_change)
    }

    /// Successful production deploys in the window; with filters, those that shipped a
    /// selected pull request.
    fn deploys_in<'r>(
        &self,
        w: Window,
        selected: &[&PullRow],
        filtered: bool,
        runs: &[&'r Run],
    ) -> Vec<&'r Run> {
        let selected_ids: HashSet<(&str, i64)> = selected
            .iter()
            .map(|r| (r.repo.as_str(), r.number))
            .collect();
        runs.iter()
            .filter(|r| {
                r.production
                    .as_ref()
                    .is_some_and(|p| p.success && w.holds(p.finished_at))
            })
            .filter(|r| {
                !filtered
                    || self
                        .by(r.id)
                        .iter()
                        .any(|p| selected_ids.contains(&(p.repo.as_str(), p.number)))
            })
            .copied()
            .collect()
    }

    /// Restore times: from each failed deploy to the first later successful deploy that
    /// shipped its revert, else the first later one that shipped rework.
    fn restores(&self, all_rows: &[PullRow], failed_deploys: &[&Run], runs: &[&Run]) -> Vec<f64> {
        let by_number: HashMap<(&str, i64), &PullRow> = all_rows
            .iter()
            .map(|r| ((r.repo.as_str(), r.number), r))
            .collect();
        let mut all_deploys: Vec<&Run> = runs
            .iter()
            .filter(|r| r.production.as_ref().is_some_and(|p| p.success))
            .copied()
            .collect();
        all_deploys.sort_by_key(|r| finish(r));
        let mut restores = Vec::new();
        for d in failed_deploys {
            let Some(t0) = finish(d) else { continue };
            let mut best: Option<Time> = None;
            for p in self.by(d.id).iter().filter(|p| p.failed_change) {
                let fix = p
                    .reverted_by
                    .and_then(|n| by_number.get(&(p.repo.as_str(), n)))
                    .and_then(|r| r.deployed_at);
                if let Some(t) = fix.filter(|t| *t >= t0) {
                    best = Some(best.map_or(t, |b: Time| b.min(t)));
                }
            }
            if best.is_none() {
                best = all_deploys
                    .iter()
                    .filter(|x| finish(x).is_some_and(|t| t > t0))
                    .find(|x| self.by(x.id).iter().any(|p| p.rework))
                    .and_then(|x| finish(x));
            }
            if let Some(t) = best {
                restores.push(secs(t0, t));
            }
        }
        restores
    }
}

/// The measures of the selected rows over a window.
pub fn measures(
    w: Window,
    all_rows: &[PullRow],
    selected: &[&PullRow],
    filtered: bool,
    runs: &[&Run],
    ctx: &Context,
) -> Measures {
    let shipped = Shipped::of(all_rows);
    let deploys = shipped.deploys_in(w, selected, filtered, runs);
    let production_runs: Vec<&Run> = runs
        .iter()
        .filter(|r| finish(r).is_some_and(|t| w.holds(t)))
        .copied()
        .collect();
    let deployed_in: Vec<&PullRow> = selected
        .iter()
        .filter(|r| r.deployed_at.is_some_and(|d| w.holds(d)))
        .copied()
        .collect();
    let merged_in: Vec<&PullRow> = selected
        .iter()
        .filter(|r| w.holds(r.merged_at))
        .copied()
        .collect();
    let failed_deploys: Vec<&Run> = deploys
        .iter()
        .filter(|d| shipped.failed(d))
        .copied()
        .collect();
    let change_failure_rate = ChangeFailureRate {
        per_pr: share(
            deployed_in.iter().filter(|r| r.failed_change).count(),
            deployed_in.len(),
        ),
        per_deploy: share(failed_deploys.len(), deploys.len()),
        flags_source: flags_source(w, all_rows),
    };
    let deploy_run_success = share(
        production_runs
            .iter()
            .filter(|r| r.production.as_ref().is_some_and(|p| p.success))
            .count(),
        production_runs.len(),
    );
    let series = Series {
        merged_in: &merged_in,
        deployed_in: &deployed_in,
        deploys: &deploys,
        failed_deploys: &failed_deploys,
        production_runs: &production_runs,
    };
    let mut m = Measures {
        window: w,
        deploys_per_day: deploys.len() as f64 / w.days(),
        lead_time: lead_time(&deployed_in, &merged_in),
        change_failure_rate,
        time_to_restore: stat(shipped.restores(all_rows, &failed_deploys, runs)),
        rework_share: share(
            merged_in.iter().filter(|r| r.rework).count(),
            merged_in.len(),
        ),
        deploy_run_success,
        daily: series.daily(w),
        open_p0_unowned: Unowned {
            count: ctx.open_p0_unowned.len(),
            issues: ctx.open_p0_unowned.clone(),
        },
        targets: BTreeMap::new(),
    };
    m.targets = m.checks(&ctx.targets);
    m
}

/// The four lead times: of the rows deployed in the window, and (open to merge) of those
/// merged in it.
fn lead_time(deployed_in: &[&PullRow], merged_in: &[&PullRow]) -> LeadTime {
    let lead = |f: &dyn Fn(&PullRow) -> Option<f64>| {
        stat(deployed_in.iter().filter_map(|r| f(r)).collect())
    };
    LeadTime {
        merge_to_production: lead(&|r| r.deployed_at.map(|d| secs(r.merged_at, d))),
        first_commit_to_production: lead(&|r| Some(secs(r.first_commit_at?, r.deployed_at?))),
        open_to_production: lead(&|r| r.deployed_at.map(|d| secs(r.created_at, d))),
        open_to_merge: stat(
            merged_in
                .iter()
                .map(|r| secs(r.created_at, r.merged_at))
                .collect(),
        ),
    }
}

/// `stored` when a stored flag marked a change deployed in the window, else `derived`.
fn flags_source(w: Window, all_rows: &[PullRow]) -> &'static str {
    if all_rows
        .iter()
        .any(|r| r.flagged && r.deployed_at.is_some_and(|d| w.holds(d)))
    {
        "stored"
    } else {
        "derived"
    }
}

/// What the daily series counts.
struct Series<'s, 'a> {
    merged_in: &'s [&'a PullRow],
    deployed_in: &'s [&'a PullRow],
    deploys: &'s [&'a Run],
    failed_deploys: &'s [&'a Run],
    production_runs: &'s [&'a Run],
}

/// One day's counts.
#[derive(Default)]
struct Bucket {
    merges: usize,
    deploys: usize,
    failed_runs: usize,
    failed_deploys: usize,
    m2p: Vec<f64>,
}

impl Series<'_, '_> {
    /// The daily series: each row bucketed by its UTC day once, every day of the window.
    fn daily(&self, w: Window) -> Vec<Day> {
        let mut buckets = self.buckets();
        let mut daily = Vec::new();
        let mut day = w.from.date_naive();
        while Utc.from_utc_datetime(&day.and_time(chrono::NaiveTime::MIN)) < w.to {
            let b = buckets.remove(&day).unwrap_or_default();
            daily.push(Day {
                day,
                merges: b.merges,
                deploys: b.deploys,
                failed_deploy_runs: b.failed_runs,
                failed_deploys: b.failed_deploys,
                merge_to_production_median: stat(b.m2p).median,
            });
            match day.succ_opt() {
                Some(d) => day = d,
                None => break,
            }
        }
        daily
    }

    fn buckets(&self) -> HashMap<NaiveDate, Bucket> {
        fn at(b: &mut HashMap<NaiveDate, Bucket>, t: Time) -> &mut Bucket {
            b.entry(t.date_naive()).or_default()
        }
        let mut buckets: HashMap<NaiveDate, Bucket> = HashMap::new();
        for r in self.merged_in {
            at(&mut buckets, r.merged_at).merges += 1;
        }
        for r in self.deployed_in {
            if let Some(d) = r.deployed_at {
                at(&mut buckets, d).m2p.push(secs(r.merged_at, d));
            }
        }
        for d in self.deploys {
            if let Some(t) = finish(d) {
                at(&mut buckets, t).deploys += 1;
            }
        }
        for d in self.failed_deploys {
            if let Some(t) = finish(d) {
                at(&mut buckets, t).failed_deploys += 1;
            }
        }
        for r in self.production_runs {
            if let Some(p) = r.production.as_ref().filter(|p| !p.success) {
                at(&mut buckets, p.finished_at).failed_runs += 1;
            }
        }
        buckets
    }
}

impl Measures {
    /// Each measure that has a target, checked against it.
    fn checks(&self, t: &Targets) -> BTreeMap<&'static str, TargetCheck> {
        let mut out = BTreeMap::new();
        let lead = &self.lead_time;
        for (name, target, value, at_least) in [
            (
                "deploys_per_day",
                t.deploys_per_day,
                Some(self.deploys_per_day),
                true,
            ),
            (
                "merge_to_production",
                t.merge_to_production_seconds,
                lead.merge_to_production.median,
                false,
            ),
            (
                "open_to_merge",
                t.open_to_merge_seconds,
                lead.open_to_merge.median,
                false,
            ),
            (
                "change_failure_rate",
                t.change_failure_rate,
                self.change_failure_rate.per_deploy,
                false,
            ),
            (
                "time_to_restore",
                t.time_to_restore_seconds,
                self.time_to_restore.median,
                false,
            ),
            ("rework_share", t.rework_share, self.rework_share, false),
            (
                "deploy_run_success",
                t.deploy_run_success,
                self.deploy_run_success,
                true,
            ),
            (
                "open_p0_unowned",
                t.open_p0_unowned,
                Some(self.open_p0_unowned.count as f64),
                false,
            ),
        ] {
            check(&mut out, name, target, value, at_least);
        }
        out
    }
}

/// The measures alone (the measures route).
pub fn measures_of(
    s: &DeliverySettings,
    w: Window,
    f: &Filters,
    pulls: &[&Pull],
    runs: &[&Run],
    ctx: &Context,
) -> Measures {
    let all = rows(s, pulls, runs, ctx);
    let selected: Vec<&PullRow> = all.iter().filter(|r| passes(r, f, None)).collect();
    measures(w, &all, &selected, !f.is_empty(), runs, ctx)
}
