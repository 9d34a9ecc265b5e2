//! The delivery computation, with no IO: pull requests linked to issues and sessions, the
//! timeline with its facets, the measures (DORA's four keys as DevLake computes them, plus
//! rework share), and the pipeline page. Definitions are in `docs/delivery.md`.
//!
//! - this module: the window, filters and context a computation takes, the keys and trailers
//!   read from pull requests and commits, the statistics, and a run's production outcome;
//! - [`rows`]: the pull requests as rows, linked to issues, sessions and components, with
//!   their facet values;
//! - [`measures`]: the measures of a window; [`timeline`]: the timeline; [`pipeline`]: the
//!   pipeline page; [`series`]: the chart's series, by day or by ISO week.

mod measures;
mod pipeline;
mod rows;
mod series;
mod timeline;

pub use measures::{
    ChangeFailureRate, Day, LeadTime, Measures, TargetCheck, Unowned, measures, measures_of,
};
pub use pipeline::{
    FailedJob, JobResult, LastRun, Pipeline, PipelineDay, SlowJob, Stage, pipeline,
};
pub use rows::{PullRow, effective_components, rows};
pub use series::{DAILY_UP_TO, Period, Unit, monday_of, series};
pub use timeline::{DeployRow, FailureRow, NamedComponent, Timeline, failing, timeline};

use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::Pull;
use super::{Component, DeliverySettings, Run, SessionGroup, Targets};
use crate::clock::Time;
use crate::work::model::{Issue, IssueKey, ProjectKey};

/// Absence values of the facets (spec: Delivery).
pub const NO_ISSUE: &str = "__no_issue__";
pub const NO_PRIORITY: &str = "__no_priority__";
pub const NO_COMPONENT: &str = "__no_component__";
pub const NO_SESSION: &str = "__no_session__";
/// Labels that flag a change as failed in production (stored flags).
pub const FAILURE_LABELS: [&str; 2] = ["change-failure", "incident"];
/// Labels that mark rework.
pub const REWORK_LABELS: [&str; 2] = ["hotfix", "rework"];
/// The facets, in the answer's order.
pub const FACETS: [&str; 9] = [
    "repo",
    "parent_agent",
    "session",
    "issue",
    "priority",
    "component",
    "author",
    "rework",
    "deployed",
];

/// `[from, to)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Window {
    #[serde(with = "crate::work::model::rfc3339")]
    pub from: Time,
    #[serde(with = "crate::work::model::rfc3339")]
    pub to: Time,
}

impl Window {
    pub fn holds(&self, t: Time) -> bool {
        self.from <= t && t < self.to
    }

    fn days(&self) -> f64 {
        ((self.to - self.from).num_seconds() as f64 / 86_400.0).max(1.0 / 24.0)
    }
}

/// A pull request's deploy state (spec: States).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DeployedStatus {
    Deployed,
    Waiting,
    NotTracked,
}

impl DeployedStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeployedStatus::Deployed => "deployed",
            DeployedStatus::Waiting => "waiting",
            DeployedStatus::NotTracked => "not_tracked",
        }
    }
}

/// The timeline's search and facets: a repeated facet is OR, different facets AND.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filters {
    pub q: Option<String>,
    /// Facet name → selected values.
    pub facets: BTreeMap<String, Vec<String>>,
}

impl Filters {
    pub fn is_empty(&self) -> bool {
        self.q.is_none() && self.facets.values().all(Vec::is_empty)
    }
}

/// The issue keys in a text, in order: `[A-Z][A-Z0-9]{1,9}-[1-9][0-9]*` between word
/// boundaries.
pub fn issue_keys(text: &str) -> Vec<IssueKey> {
    let b = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let boundary = i == 0 || !b[i - 1].is_ascii_alphanumeric();
        if boundary && b[i].is_ascii_uppercase() {
            let mut j = i + 1;
            while j < b.len() && (b[j].is_ascii_uppercase() || b[j].is_ascii_digit()) {
                j += 1;
            }
            if j < b.len() && b[j] == b'-' {
                let mut k = j + 1;
                while k < b.len() && b[k].is_ascii_digit() {
                    k += 1;
                }
                let end_ok = k == b.len() || !b[k].is_ascii_alphanumeric();
                if k > j + 1
                    && end_ok
                    && let Some(key) = IssueKey::parse(&text[i..k])
                {
                    out.push(key);
                    i = k;
                    continue;
                }
            }
            i = j;
            continue;
        }
        i += 1;
    }
    out
}

/// The candidate keys of a pull request: its title's, then its head branch's (upper-cased:
/// branch names are often lower case).
pub fn candidate_keys(p: &Pull) -> (Vec<IssueKey>, Vec<IssueKey>) {
    (
        issue_keys(&p.title),
        issue_keys(&p.head_ref.to_ascii_uppercase()),
    )
}

/// The `Countersign-Session` trailers of commit messages (git interpret-trailers: the last
/// paragraph's `Key: value` lines), oldest commit first, each session once.
pub fn session_trailers<'a>(messages: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for m in messages {
        let m = m.replace("\r\n", "\n");
        let last = m.trim_end().rsplit("\n\n").next().unwrap_or("");
        for line in last.lines() {
            if let Some((k, v)) = line.split_once(':')
                && k.trim().eq_ignore_ascii_case("Countersign-Session")
            {
                let v = v.trim();
                if !v.is_empty() && !out.iter().any(|o| o == v) {
                    out.push(v.to_owned());
                }
            }
        }
    }
    out
}

/// The number a revert pull request's body names: "Reverts owner/repo#n" (GitHub's revert).
pub fn reverted_number(repo: &str, body: &str) -> Option<i64> {
    let needle = format!("Reverts {repo}#");
    let at = body.find(&needle)? + needle.len();
    let digits: String = body[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// What the computation reads besides the pull requests and runs.
#[derive(Debug, Default)]
pub struct Context {
    /// Issues by key: every candidate and imported issue, with their ancestors.
    pub issues: HashMap<String, Issue>,
    /// `owner/repo#n` → the issue imported from it.
    pub imported: HashMap<String, IssueKey>,
    /// Each project's component tree.
    pub components: HashMap<ProjectKey, Vec<Component>>,
    pub groups: Vec<SessionGroup>,
    pub open_p0_unowned: Vec<IssueKey>,
    pub targets: Targets,
}

/// A distribution of durations in seconds.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stat {
    pub count: usize,
    pub median: Option<f64>,
    pub p90: Option<f64>,
}

/// Median (the mean of the middle two for an even count) and the 90th percentile (nearest
/// rank).
pub fn stat(mut v: Vec<f64>) -> Stat {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    };
    let p90 = (n > 0).then(|| v[((0.9 * n as f64).ceil() as usize).clamp(1, n) - 1]);
    Stat {
        count: n,
        median,
        p90,
    }
}

fn secs(a: Time, b: Time) -> f64 {
    (b - a).num_milliseconds() as f64 / 1000.0
}

fn share(num: usize, den: usize) -> Option<f64> {
    (den > 0).then(|| num as f64 / den as f64)
}

/// A run's production outcome from its jobs (a push on the default branch with a job named
/// in `production_jobs`); `None` for any other run.
pub fn production_of(
    s: &DeliverySettings,
    r: &Run,
    default_branch: &str,
) -> Option<super::Production> {
    if r.repo != s.deploy_repository
        || r.event != "push"
        || r.branch.as_deref() != Some(default_branch)
    {
        return None;
    }
    let jobs = r.jobs.as_ref()?;
    let job = jobs.iter().find(|j| s.production_jobs.contains(&j.name))?;
    let success = job.conclusion.as_deref() == Some("success");
    let (fj, fs) = if success { (None, None) } else { failing(jobs) };
    // The apply step, when named and present, decides the failing step's name.
    let fs = match (&s.production_apply_step, success) {
        (Some(a), false)
            if job
                .steps
                .iter()
                .any(|x| &x.name == a && x.conclusion.as_deref() != Some("success")) =>
        {
            Some(a.clone()).or(fs)
        }
        _ => fs,
    };
    Some(super::Production {
        job: job.name.clone(),
        success,
        finished_at: job.completed_at.unwrap_or(r.completed_at),
        failing_job: fj,
        failing_step: fs,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_in_titles_and_branches() {
        let k = |s: &str| {
            issue_keys(s)
                .iter()
                .map(|k| k.as_str().to_owned())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            k("SHOP-1 Add cart (PAY-12, UTF-8)"),
            vec!["SHOP-1", "PAY-12", "UTF-8"]
        );
        assert_eq!(k("xSHOP-1 SHOP-01 SHOP-1a"), Vec::<String>::new());
        assert_eq!(k("SHOP-2-FOOTER"), vec!["SHOP-2"]);
    }

    #[test]
    fn trailers_oldest_first_once() {
        let m = [
            "Fix\n\nBody.\n\nCountersign-Session: s-b\nCo-authored-by: x",
            "More\n\nCountersign-Session: s-a",
            "Again\n\ncountersign-session: s-b",
            "Countersign-Session: in-the-subject-only\n\nbody",
        ];
        assert_eq!(session_trailers(m), vec!["s-b", "s-a"]);
        assert_eq!(
            reverted_number("acme/shop", "Reverts acme/shop#105\n\nwhy"),
            Some(105)
        );
        assert_eq!(reverted_number("acme/shop", "Reverts acme/other#105"), None);
    }

    #[test]
    fn stats() {
        let s = stat(vec![3.0, 1.0, 2.0, 10.0]);
        assert_eq!((s.count, s.median, s.p90), (4, Some(2.5), Some(10.0)));
        assert_eq!(stat(vec![]).median, None);
    }
}
