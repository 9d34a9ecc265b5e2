//! The delivery computation, with no IO: pull requests linked to issues and sessions, the
//! timeline with its facets, the measures (DORA's four keys as DevLake computes them, plus
//! rework share), and the pipeline page. Definitions are in `docs/delivery.md`.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{Duration, NaiveDate, TimeZone, Utc};
use serde::Serialize;

use super::{Component, DeliverySettings, Pull, Run, SessionGroup, Targets};
use crate::clock::Time;
use crate::work::model::{ComponentsMode, Issue, IssueKey, ProjectKey};

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

/// A pull request as the timeline shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PullRow {
    pub repo: String,
    pub number: i64,
    pub title: String,
    pub url: String,
    pub author: String,
    #[serde(with = "crate::work::model::rfc3339")]
    pub created_at: Time,
    #[serde(with = "crate::work::model::rfc3339")]
    pub merged_at: Time,
    #[serde(with = "crate::work::model::rfc3339_opt")]
    pub deployed_at: Option<Time>,
    pub deploy_run: Option<i64>,
    pub deployed_status: DeployedStatus,
    pub issue: Option<IssueKey>,
    pub issue_title: Option<String>,
    pub priority: Option<u8>,
    pub components: Vec<String>,
    pub sessions: Vec<String>,
    pub parent_agent: Option<String>,
    pub rework: bool,
    /// Flagged or reverted: a change that failed in production.
    pub failed_change: bool,
    pub reverts: Option<i64>,
    pub reverted_by: Option<i64>,
    #[serde(skip)]
    first_commit_at: Option<Time>,
    #[serde(skip)]
    flagged: bool,
    #[serde(skip)]
    facet_values: Vec<Vec<String>>,
}

/// The rows of the pull requests the population authored, linked to issues and sessions.
pub fn rows(s: &DeliverySettings, pulls: &[&Pull], runs: &[&Run], ctx: &Context) -> Vec<PullRow> {
    let excluded: HashSet<&str> = s.excluded_repositories.iter().map(String::as_str).collect();
    let population: HashSet<String> = s
        .population_authors
        .iter()
        .map(|a| a.to_ascii_lowercase())
        .collect();
    // Deploys are tracked from the first successful one synced: what merged before it cannot
    // be placed.
    let baseline = runs
        .iter()
        .filter_map(|r| {
            r.production
                .as_ref()
                .filter(|p| p.success)
                .map(|p| p.finished_at)
        })
        .min();
    let ancestors = ancestors_by_project(&ctx.components);
    let group_of: HashMap<&str, &str> = ctx
        .groups
        .iter()
        .flat_map(|g| {
            g.sessions
                .iter()
                .map(move |s| (s.as_str(), g.name.as_str()))
        })
        .collect();
    let mut out = Vec::new();
    for p in pulls {
        if excluded.contains(p.repo.as_str())
            || !population.contains(&p.author.to_ascii_lowercase())
        {
            continue;
        }
        let issue = link_issue(p, ctx);
        let issue_rec = issue.as_ref().and_then(|k| ctx.issues.get(k.as_str()));
        let components = issue_rec
            .map(|i| effective_components(i, &ctx.issues))
            .unwrap_or_default();
        let parent_agent = p.sessions.first().map(|s| {
            group_of
                .get(s.as_str())
                .map(|g| (*g).to_owned())
                .unwrap_or_else(|| s.clone())
        });
        let flagged = p
            .labels
            .iter()
            .any(|l| FAILURE_LABELS.contains(&l.as_str()));
        let rework = p.reverts.is_some()
            || p.labels.iter().any(|l| REWORK_LABELS.contains(&l.as_str()))
            || p.head_ref.starts_with("hotfix/")
            || p.head_ref.starts_with("revert-");
        let deployed_status = if p.deploy_run.is_some() {
            DeployedStatus::Deployed
        } else if p.repo == s.deploy_repository && baseline.is_some_and(|b| p.merged_at >= b) {
            DeployedStatus::Waiting
        } else {
            DeployedStatus::NotTracked
        };
        let comp_values: Vec<String> = match issue_rec {
            Some(i) if !components.is_empty() => {
                let anc = ancestors.get(&i.project);
                let mut v: Vec<String> = Vec::new();
                for c in &components {
                    for a in anc
                        .and_then(|m| m.get(c))
                        .cloned()
                        .unwrap_or_else(|| vec![c.clone()])
                    {
                        if !v.contains(&a) {
                            v.push(a);
                        }
                    }
                }
                v
            }
            _ => vec![NO_COMPONENT.to_owned()],
        };
        let priority = issue_rec.and_then(|i| i.priority);
        let facet_values = vec![
            vec![p.repo.clone()],
            vec![
                parent_agent
                    .clone()
                    .unwrap_or_else(|| NO_SESSION.to_owned()),
            ],
            if p.sessions.is_empty() {
                vec![NO_SESSION.to_owned()]
            } else {
                p.sessions.clone()
            },
            vec![
                issue
                    .as_ref()
                    .map(|k| k.as_str().to_owned())
                    .unwrap_or_else(|| NO_ISSUE.to_owned()),
            ],
            vec![
                priority
                    .map(|p| format!("P{p}"))
                    .unwrap_or_else(|| NO_PRIORITY.to_owned()),
            ],
            comp_values,
            vec![p.author.clone()],
            vec![rework.to_string()],
            vec![deployed_status.as_str().to_owned()],
        ];
        out.push(PullRow {
            repo: p.repo.clone(),
            number: p.number,
            title: p.title.clone(),
            url: p.url.clone(),
            author: p.author.clone(),
            created_at: p.created_at,
            merged_at: p.merged_at,
            deployed_at: p.deployed_at,
            deploy_run: p.deploy_run,
            deployed_status,
            issue_title: issue_rec.map(|i| i.title.clone()),
            priority,
            issue,
            components,
            sessions: p.sessions.clone(),
            parent_agent,
            rework,
            failed_change: flagged || p.reverted_by.is_some(),
            reverts: p.reverts,
            reverted_by: p.reverted_by,
            first_commit_at: p.first_commit_at,
            flagged,
            facet_values,
        });
    }
    out
}

/// The pull request's issue: the first existing key in its title, else in its head branch,
/// else the issue imported from it.
fn link_issue(p: &Pull, ctx: &Context) -> Option<IssueKey> {
    let (title, branch) = candidate_keys(p);
    title
        .into_iter()
        .chain(branch)
        .find(|k| ctx.issues.contains_key(k.as_str()))
        .or_else(|| {
            ctx.imported
                .get(&format!("{}#{}", p.repo, p.number))
                .cloned()
        })
}

/// An issue's components: its own when explicit, none when `none`, its parent's (up the
/// chain) when inherited.
pub fn effective_components(i: &Issue, issues: &HashMap<String, Issue>) -> Vec<String> {
    let mut cur = i;
    for _ in 0..32 {
        match cur.components.mode {
            ComponentsMode::Explicit => return cur.components.ids.clone(),
            ComponentsMode::None => return Vec::new(),
            ComponentsMode::Inherit => {
                match cur.parent.as_ref().and_then(|p| issues.get(p.as_str())) {
                    Some(p) => cur = p,
                    None => return Vec::new(),
                }
            }
        }
    }
    Vec::new()
}

/// Per project: component id → itself and its ancestors (a facet on a parent selects its
/// children).
fn ancestors_by_project(
    trees: &HashMap<ProjectKey, Vec<Component>>,
) -> HashMap<ProjectKey, HashMap<String, Vec<String>>> {
    trees
        .iter()
        .map(|(p, comps)| {
            let parent: HashMap<&str, &str> = comps
                .iter()
                .filter_map(|c| c.parent.as_deref().map(|x| (c.id.as_str(), x)))
                .collect();
            let m = comps
                .iter()
                .map(|c| {
                    let mut v = vec![c.id.clone()];
                    let mut cur = c.id.as_str();
                    while let Some(up) = parent.get(cur) {
                        if v.iter().any(|x| x == up) {
                            break;
                        }
                        v.push((*up).to_owned());
                        cur = up;
                    }
                    (c.id.clone(), v)
                })
                .collect();
            (p.clone(), m)
        })
        .collect()
}

fn matches_q(r: &PullRow, q: &str) -> bool {
    let q = q.trim();
    let n = q.trim_start_matches('#');
    (!n.is_empty() && n.bytes().all(|c| c.is_ascii_digit()) && n == r.number.to_string())
        || r.title.to_lowercase().contains(&q.to_lowercase())
}

/// Whether the row passes the filters, ignoring the facet at `skip`.
fn passes(r: &PullRow, f: &Filters, skip: Option<usize>) -> bool {
    if let Some(q) = &f.q
        && !matches_q(r, q)
    {
        return false;
    }
    FACETS.iter().enumerate().all(|(i, name)| {
        if Some(i) == skip {
            return true;
        }
        match f.facets.get(*name) {
            Some(sel) if !sel.is_empty() => r.facet_values[i].iter().any(|v| sel.contains(v)),
            _ => true,
        }
    })
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

fn check(
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

/// The measures of the selected rows over a window.
pub fn measures(
    w: Window,
    all_rows: &[PullRow],
    selected: &[&PullRow],
    filtered: bool,
    runs: &[&Run],
    ctx: &Context,
) -> Measures {
    // Successful production deploys in the window; with filters, those that shipped a
    // selected pull request.
    let shipped_by: HashMap<i64, Vec<&PullRow>> = {
        let mut m: HashMap<i64, Vec<&PullRow>> = HashMap::new();
        for r in all_rows {
            if let Some(d) = r.deploy_run {
                m.entry(d).or_default().push(r);
            }
        }
        m
    };
    let selected_ids: HashSet<(&str, i64)> = selected
        .iter()
        .map(|r| (r.repo.as_str(), r.number))
        .collect();
    let deploys: Vec<&Run> = runs
        .iter()
        .filter(|r| {
            r.production
                .as_ref()
                .is_some_and(|p| p.success && w.holds(p.finished_at))
        })
        .filter(|r| {
            !filtered
                || shipped_by.get(&r.id).is_some_and(|v| {
                    v.iter()
                        .any(|p| selected_ids.contains(&(p.repo.as_str(), p.number)))
                })
        })
        .copied()
        .collect();
    let production_runs: Vec<&Run> = runs
        .iter()
        .filter(|r| {
            r.production
                .as_ref()
                .is_some_and(|p| w.holds(p.finished_at))
        })
        .copied()
        .collect();
    let deployed_in: Vec<&&PullRow> = selected
        .iter()
        .filter(|r| r.deployed_at.is_some_and(|d| w.holds(d)))
        .collect();
    let merged_in: Vec<&&PullRow> = selected.iter().filter(|r| w.holds(r.merged_at)).collect();
    let lead = |f: &dyn Fn(&PullRow) -> Option<f64>| {
        stat(deployed_in.iter().filter_map(|r| f(r)).collect())
    };
    let lead_time = LeadTime {
        merge_to_production: lead(&|r| r.deployed_at.map(|d| secs(r.merged_at, d))),
        first_commit_to_production: lead(&|r| Some(secs(r.first_commit_at?, r.deployed_at?))),
        open_to_production: lead(&|r| r.deployed_at.map(|d| secs(r.created_at, d))),
        open_to_merge: stat(
            merged_in
                .iter()
                .map(|r| secs(r.created_at, r.merged_at))
                .collect(),
        ),
    };
    let failed_deploy = |d: &Run| {
        shipped_by
            .get(&d.id)
            .is_some_and(|v| v.iter().any(|p| p.failed_change))
    };
    let failed_deploys: Vec<&&Run> = deploys.iter().filter(|d| failed_deploy(d)).collect();
    let flags_source = if all_rows
        .iter()
        .any(|r| r.flagged && r.deployed_at.is_some_and(|d| w.holds(d)))
    {
        "stored"
    } else {
        "derived"
    };
    let change_failure_rate = ChangeFailureRate {
        per_pr: share(
            deployed_in.iter().filter(|r| r.failed_change).count(),
            deployed_in.len(),
        ),
        per_deploy: share(failed_deploys.len(), deploys.len()),
        flags_source,
    };
    // Restore: from a failed deploy to the first later successful deploy that shipped its
    // revert, else the first later one that shipped rework.
    let by_number: HashMap<(&str, i64), &PullRow> = all_rows
        .iter()
        .map(|r| ((r.repo.as_str(), r.number), r))
        .collect();
    let all_deploys: Vec<&Run> = {
        let mut v: Vec<&Run> = runs
            .iter()
            .filter(|r| r.production.as_ref().is_some_and(|p| p.success))
            .copied()
            .collect();
        v.sort_by_key(|r| r.production.as_ref().map(|p| p.finished_at));
        v
    };
    let finish = |r: &Run| r.production.as_ref().map(|p| p.finished_at);
    let mut restores = Vec::new();
    for d in &failed_deploys {
        let Some(t0) = finish(d) else { continue };
        let failed: Vec<&PullRow> = shipped_by
            .get(&d.id)
            .map(|v| v.iter().copied().filter(|p| p.failed_change).collect())
            .unwrap_or_default();
        let mut best: Option<Time> = None;
        for p in &failed {
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
                .find(|x| {
                    shipped_by
                        .get(&x.id)
                        .is_some_and(|v| v.iter().any(|p| p.rework))
                })
                .and_then(|x| finish(x));
        }
        if let Some(t) = best {
            restores.push(secs(t0, t));
        }
    }
    let rework_share = share(
        merged_in.iter().filter(|r| r.rework).count(),
        merged_in.len(),
    );
    let deploy_run_success = share(
        production_runs
            .iter()
            .filter(|r| r.production.as_ref().is_some_and(|p| p.success))
            .count(),
        production_runs.len(),
    );
    // The daily series: each row bucketed by its UTC day once.
    #[derive(Default)]
    struct Bucket {
        merges: usize,
        deploys: usize,
        failed_runs: usize,
        failed_deploys: usize,
        m2p: Vec<f64>,
    }
    let mut buckets: HashMap<NaiveDate, Bucket> = HashMap::new();
    for r in &merged_in {
        buckets.entry(r.merged_at.date_naive()).or_default().merges += 1;
    }
    for r in &deployed_in {
        if let Some(d) = r.deployed_at {
            buckets
                .entry(d.date_naive())
                .or_default()
                .m2p
                .push(secs(r.merged_at, d));
        }
    }
    for d in &deploys {
        if let Some(t) = finish(d) {
            buckets.entry(t.date_naive()).or_default().deploys += 1;
        }
    }
    for d in &failed_deploys {
        if let Some(t) = finish(d) {
            buckets.entry(t.date_naive()).or_default().failed_deploys += 1;
        }
    }
    for r in &production_runs {
        if let Some(p) = r.production.as_ref().filter(|p| !p.success) {
            buckets
                .entry(p.finished_at.date_naive())
                .or_default()
                .failed_runs += 1;
        }
    }
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
    let deploys_per_day = deploys.len() as f64 / w.days();
    let unowned = Unowned {
        count: ctx.open_p0_unowned.len(),
        issues: ctx.open_p0_unowned.clone(),
    };
    let t = &ctx.targets;
    let mut targets = BTreeMap::new();
    let time_to_restore = stat(restores);
    check(
        &mut targets,
        "deploys_per_day",
        t.deploys_per_day,
        Some(deploys_per_day),
        true,
    );
    check(
        &mut targets,
        "merge_to_production",
        t.merge_to_production_seconds,
        lead_time.merge_to_production.median,
        false,
    );
    check(
        &mut targets,
        "open_to_merge",
        t.open_to_merge_seconds,
        lead_time.open_to_merge.median,
        false,
    );
    check(
        &mut targets,
        "change_failure_rate",
        t.change_failure_rate,
        change_failure_rate.per_deploy,
        false,
    );
    check(
        &mut targets,
        "time_to_restore",
        t.time_to_restore_seconds,
        time_to_restore.median,
        false,
    );
    check(
        &mut targets,
        "rework_share",
        t.rework_share,
        rework_share,
        false,
    );
    check(
        &mut targets,
        "deploy_run_success",
        t.deploy_run_success,
        deploy_run_success,
        true,
    );
    check(
        &mut targets,
        "open_p0_unowned",
        t.open_p0_unowned,
        Some(unowned.count as f64),
        false,
    );
    Measures {
        window: w,
        deploys_per_day,
        lead_time,
        change_failure_rate,
        time_to_restore,
        rework_share,
        deploy_run_success,
        daily,
        open_p0_unowned: unowned,
        targets,
    }
}

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
pub fn failing(jobs: &[super::Job]) -> (Option<String>, Option<String>) {
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
    let mut facet_counts: BTreeMap<&'static str, BTreeMap<String, usize>> = BTreeMap::new();
    for (i, name) in FACETS.iter().enumerate() {
        let counts = facet_counts.entry(name).or_default();
        for r in in_window.iter().filter(|r| passes(r, f, Some(i))) {
            for v in &r.facet_values[i] {
                *counts.entry(v.clone()).or_default() += 1;
            }
        }
    }
    let mut color_counts: BTreeMap<String, usize> = BTreeMap::new();
    for r in &in_window {
        *color_counts
            .entry(r.facet_values[1][0].clone())
            .or_default() += 1;
    }
    let mut shipped_by: HashMap<i64, Vec<&PullRow>> = HashMap::new();
    for x in &all {
        if let Some(d) = x.deploy_run {
            shipped_by.entry(d).or_default().push(x);
        }
    }
    let mut deploys: Vec<DeployRow> = runs
        .iter()
        .filter_map(|r| {
            let p = r
                .production
                .as_ref()
                .filter(|p| p.success && w.holds(p.finished_at))?;
            let shipped: Vec<&PullRow> = shipped_by.get(&r.id).cloned().unwrap_or_default();
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
    let m = measures(w, &all, &selected, !f.is_empty(), runs, ctx);
    Timeline {
        window: w,
        merges,
        deploys,
        failures,
        waiting,
        facet_counts,
        color_counts,
        components,
        issue_titles,
        measures: m,
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

// ----- the pipeline page -----

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

fn job_secs(j: &super::Job) -> Option<f64> {
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
    let checks: Vec<&Run> = runs
        .iter()
        .filter(|r| r.event == "pull_request" && r.repo == s.deploy_repository)
        .copied()
        .collect();
    let pushes: Vec<&Run> = runs
        .iter()
        .filter(|r| r.event == "push" && r.repo == s.deploy_repository)
        .copied()
        .collect();
    let rows = rows(s, pulls, runs, ctx);
    let named_job = |name: &Option<String>, day: NaiveDate| -> Option<JobResult> {
        let n = name.as_ref()?;
        Some(result_of(
            pushes
                .iter()
                .filter(|r| r.started_at.date_naive() == day)
                .filter_map(|r| {
                    let j = r.jobs.as_ref()?.iter().find(|j| &j.name == n)?;
                    Some((j.conclusion.as_deref() == Some("success"), job_secs(j)))
                }),
        ))
    };
    let check_ok = |r: &Run| -> bool {
        match (&s.pr_checks_rollup_job, &r.jobs) {
            (Some(n), Some(jobs)) => jobs
                .iter()
                .find(|j| &j.name == n)
                .map(|j| j.conclusion.as_deref() == Some("success"))
                .unwrap_or(r.conclusion.as_deref() == Some("success")),
            _ => r.conclusion.as_deref() == Some("success"),
        }
    };
    let mut days = Vec::new();
    let mut day = first;
    while day <= last_day {
        let merged: Vec<&PullRow> = rows
            .iter()
            .filter(|r| r.merged_at.date_naive() == day)
            .collect();
        days.push(PipelineDay {
            day,
            pr_checks: result_of(
                checks
                    .iter()
                    .filter(|r| r.started_at.date_naive() == day)
                    .map(|r| (check_ok(r), Some(secs(r.started_at, r.completed_at)))),
            ),
            staging_e2e: named_job(&s.staging_e2e_job, day),
            staging_deploy: named_job(&s.staging_deploy_job, day),
            production_deploy: result_of(pushes.iter().filter_map(|r| {
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
            merge_to_production: stat(
                merged
                    .iter()
                    .filter_map(|r| r.deployed_at.map(|d| secs(r.merged_at, d)))
                    .collect(),
            ),
            open_to_merge: stat(
                merged
                    .iter()
                    .map(|r| secs(r.created_at, r.merged_at))
                    .collect(),
            ),
        });
        match day.succ_opt() {
            Some(d) => day = d,
            None => break,
        }
    }
    // The five slowest PR-check jobs, ranked from the 50 newest timed results in the days.
    let mut timed: Vec<(Time, &str, f64)> = checks
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
    let all_checks = result_of(
        checks
            .iter()
            .filter(|r| r.started_at.date_naive() >= first && r.started_at.date_naive() <= last_day)
            .map(|r| (check_ok(r), Some(secs(r.started_at, r.completed_at)))),
    );
    let merged_days: Vec<&PullRow> = rows
        .iter()
        .filter(|r| r.merged_at.date_naive() >= first && r.merged_at.date_naive() <= last_day)
        .collect();
    let t = &ctx.targets;
    let mut targets = BTreeMap::new();
    check(
        &mut targets,
        "pr_checks_success",
        t.pr_checks_success,
        all_checks.success,
        true,
    );
    check(
        &mut targets,
        "pr_checks_wall",
        t.pr_checks_wall_seconds,
        all_checks.median_seconds,
        false,
    );
    check(
        &mut targets,
        "merge_to_production",
        t.merge_to_production_seconds,
        stat(
            merged_days
                .iter()
                .filter_map(|r| r.deployed_at.map(|d| secs(r.merged_at, d)))
                .collect(),
        )
        .median,
        false,
    );
    check(
        &mut targets,
        "open_to_merge",
        t.open_to_merge_seconds,
        stat(
            merged_days
                .iter()
                .map(|r| secs(r.created_at, r.merged_at))
                .collect(),
        )
        .median,
        false,
    );
    Pipeline {
        days,
        slowest_jobs,
        failed_jobs,
        targets,
    }
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
