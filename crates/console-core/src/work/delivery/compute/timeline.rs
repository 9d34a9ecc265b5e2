//! The timeline of a window: its merges, deploys, pipeline failures and waiting pull
//! requests, the facet and colour counts, the components and issues they name, and the
//! measures (protocol §6.5).

use std::collections::BTreeMap;

use serde::Serialize;

use super::measures::Shipped;
use super::rows::passes;
use super::*;

/// A deploy on the timeline, with every window pull request it first shipped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DeployRow {
    pub run: i64,
    pub head_sha: String,
    #[serde(with = "crate::work::model::rfc3339")]
    pub at: Time,
    pub url: Option<String>,
    pub pulls: Vec<i64>,
    pub failed_change: bool,
}

/// A pipeline failure on the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FailureRow {
    pub run: i64,
    pub name: String,
    pub workflow_path: String,
    pub head_sha: String,
    #[serde(with = "crate::work::model::rfc3339")]
    pub at: Time,
    pub url: Option<String>,
    pub production_job: Option<String>,
    pub failing_job: Option<String>,
    pub failing_step: Option<String>,
}

/// A component named on the timeline.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NamedComponent {
    pub name: String,
    pub parent: Option<String>,
}

/// The timeline (protocol §6.5), less `freshness` and `session_groups`, which the caller adds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Timeline {
    pub window: Window,
    pub merges: Vec<PullRow>,
    pub deploys: Vec<DeployRow>,
    pub failures: Vec<FailureRow>,
    pub waiting: Vec<PullRow>,
    pub facet_counts: BTreeMap<&'static str, BTreeMap<String, usize>>,
    pub color_counts: BTreeMap<String, usize>,
    pub components: BTreeMap<String, NamedComponent>,
    pub issue_titles: BTreeMap<String, String>,
    pub measures: Measures,
}

/// The first failing job and step of a run.
pub fn failing(jobs: &[crate::work::delivery::Job]) -> (Option<String>, Option<String>) {
    let bad = |c: &Option<String>| {
        matches!(
            c.as_deref(),
            Some("failure" | "timed_out" | "cancelled" | "startup_failure")
        )
    };
    match jobs.iter().find(|j| bad(&j.conclusion)) {
        Some(j) => (
            Some(j.name.clone()),
            j.steps
                .iter()
                .find(|s| bad(&s.conclusion))
                .map(|s| s.name.clone()),
        ),
        None => (None, None),
    }
}

/// The timeline over a window.
pub fn timeline(
    s: &DeliverySettings,
    w: Window,
    f: &Filters,
    pulls: &[&Pull],
    runs: &[&Run],
    ctx: &Context,
) -> Timeline {
    let all = rows(s, pulls, runs, ctx);
    let in_window: Vec<&PullRow> = all.iter().filter(|r| w.holds(r.merged_at)).collect();
    let selected: Vec<&PullRow> = all.iter().filter(|r| passes(r, f, None)).collect();
    let mut merges: Vec<PullRow> = selected
        .iter()
        .filter(|r| w.holds(r.merged_at))
        .map(|r| (*r).clone())
        .collect();
    merges.sort_by(|a, b| b.merged_at.cmp(&a.merged_at).then(b.number.cmp(&a.number)));
    let mut waiting: Vec<PullRow> = selected
        .iter()
        .filter(|r| r.deployed_status == DeployedStatus::Waiting && r.merged_at < w.to)
        .map(|r| (*r).clone())
        .collect();
    waiting.sort_by_key(|r| r.merged_at);
    let mut color_counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in &in_window {
        *color_counts
            .entry(r.facet_values[1][0].clone())
            .or_default() += 1;
    }
    let (components, issue_titles) = named(&merges, &waiting, ctx);
    let m = measures(w, &all, &selected, !f.is_empty(), runs, ctx);
    Timeline {
        window: w,
        deploys: deploy_rows(w, runs, &Shipped::of(&all)),
        failures: failure_rows(s, w, runs),
        merges,
        waiting,
        facet_counts: facet_counts(&in_window, f),
        color_counts,
        components,
        issue_titles,
        measures: m,
    }
}

/// Each facet's values counted over the window's rows that pass the other facets.
fn facet_counts(
    in_window: &[&PullRow],
    f: &Filters,
) -> BTreeMap<&'static str, BTreeMap<String, usize>> {
    let mut facet_counts: BTreeMap<&'static str, BTreeMap<String, usize>> = BTreeMap::new();
    for (i, name) in FACETS.iter().enumerate() {
        let counts = facet_counts.entry(name).or_default();
        for r in in_window.iter().filter(|r| passes(r, f, Some(i))) {
            for v in &r.facet_values[i] {
                *counts.entry(v.clone()).or_default() += 1;
            }
        }
    }
    facet_counts
}

/// The window's successful production deploys, newest first, each with what it shipped.
fn deploy_rows(w: Window, runs: &[&Run], shipped: &Shipped<'_>) -> Vec<DeployRow> {
    let mut deploys: Vec<DeployRow> = runs
        .iter()
        .filter_map(|r| {
            let p = r
                .production
                .as_ref()
                .filter(|p| p.success && w.holds(p.finished_at))?;
            let shipped = shipped.by(r.id);
            Some(DeployRow {
                run: r.id,
                head_sha: r.head_sha.clone(),
                at: p.finished_at,
                url: r.url.clone(),
                pulls: shipped.iter().map(|x| x.number).collect(),
                failed_change: shipped.iter().any(|x| x.failed_change),
            })
        })
        .collect();
    deploys.sort_by_key(|d| std::cmp::Reverse(d.at));
    deploys
}

/// The deploy repository's push runs that failed in the window, newest first.
fn failure_rows(s: &DeliverySettings, w: Window, runs: &[&Run]) -> Vec<FailureRow> {
    let mut failures: Vec<FailureRow> = runs
        .iter()
        .filter(|r| {
            r.repo == s.deploy_repository
                && r.event == "push"
                && w.holds(r.completed_at)
                && matches!(
                    r.conclusion.as_deref(),
                    Some("failure" | "timed_out" | "startup_failure")
                )
        })
        .map(|r| {
            let (fj, fs) = r.jobs.as_deref().map(failing).unwrap_or((None, None));
            FailureRow {
                run: r.id,
                name: r.name.clone(),
                workflow_path: r.workflow_path.clone(),
                head_sha: r.head_sha.clone(),
                at: r.completed_at,
                url: r.url.clone(),
                production_job: r.production.as_ref().map(|p| p.job.clone()),
                failing_job: fj,
                failing_step: fs,
            }
        })
        .collect();
    failures.sort_by_key(|f| std::cmp::Reverse(f.at));
    failures
}

/// The components and issue titles the merges and waiting rows name.
fn named(
    merges: &[PullRow],
    waiting: &[PullRow],
    ctx: &Context,
) -> (BTreeMap<String, NamedComponent>, BTreeMap<String, String>) {
    let mut components = BTreeMap::new();
    let mut issue_titles = BTreeMap::new();
    for r in merges.iter().chain(waiting.iter()) {
        if let (Some(k), Some(t)) = (&r.issue, &r.issue_title) {
            issue_titles.insert(k.as_str().to_owned(), t.clone());
        }
        let project = r.issue.as_ref().map(IssueKey::project);
        for c in &r.components {
            let node = project
                .as_ref()
                .and_then(|p| ctx.components.get(p))
                .and_then(|v| v.iter().find(|x| x.id == *c));
            components.insert(
                c.clone(),
                NamedComponent {
                    name: node.map(|n| n.name.clone()).unwrap_or_else(|| c.clone()),
                    parent: node.and_then(|n| n.parent.clone()),
                },
            );
        }
    }
    (components, issue_titles)
}
