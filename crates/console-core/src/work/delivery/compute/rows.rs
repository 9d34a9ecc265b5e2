//! The pull requests as rows: the population's, each linked to its issue, sessions and
//! components, its deploy state, and its values of every facet; and the filters over them.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use super::*;
use crate::work::model::ComponentsMode;

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
    pub(super) first_commit_at: Option<Time>,
    #[serde(skip)]
    pub(super) flagged: bool,
    #[serde(skip)]
    pub(super) facet_values: Vec<Vec<String>>,
}

/// The rows of the pull requests the population authored, linked to issues and sessions.
pub fn rows(s: &DeliverySettings, pulls: &[&Pull], runs: &[&Run], ctx: &Context) -> Vec<PullRow> {
    let linker = Linker::new(s, runs, ctx);
    pulls
        .iter()
        .filter(|p| linker.counts(p))
        .map(|p| linker.row(p))
        .collect()
}

/// What linking a pull request reads besides it: the population, the deploy baseline, the
/// component trees' ancestors and the session groups.
struct Linker<'a> {
    s: &'a DeliverySettings,
    ctx: &'a Context,
    excluded: HashSet<&'a str>,
    population: HashSet<String>,
    /// Deploys are tracked from the first successful one synced: what merged before it
    /// cannot be placed.
    baseline: Option<Time>,
    ancestors: HashMap<ProjectKey, HashMap<String, Vec<String>>>,
    group_of: HashMap<&'a str, &'a str>,
}

impl<'a> Linker<'a> {
    fn new(s: &'a DeliverySettings, runs: &[&Run], ctx: &'a Context) -> Self {
        let baseline = runs
            .iter()
            .filter_map(|r| {
                r.production
                    .as_ref()
                    .filter(|p| p.success)
                    .map(|p| p.finished_at)
            })
            .min();
        let group_of = ctx
            .groups
            .iter()
            .flat_map(|g| {
                g.sessions
                    .iter()
                    .map(move |s| (s.as_str(), g.name.as_str()))
            })
            .collect();
        Self {
            s,
            ctx,
            excluded: s.excluded_repositories.iter().map(String::as_str).collect(),
            population: s
                .population_authors
                .iter()
                .map(|a| a.to_ascii_lowercase())
                .collect(),
            baseline,
            ancestors: ancestors_by_project(&ctx.components),
            group_of,
        }
    }

    /// Whether the pull request is the population's, in a repository not excluded.
    fn counts(&self, p: &Pull) -> bool {
        !self.excluded.contains(p.repo.as_str())
            && self.population.contains(&p.author.to_ascii_lowercase())
    }

    /// The pull request's row.
    fn row(&self, p: &Pull) -> PullRow {
        let ctx = self.ctx;
        let issue = link_issue(p, ctx);
        let issue_rec = issue.as_ref().and_then(|k| ctx.issues.get(k.as_str()));
        let components = issue_rec
            .map(|i| effective_components(i, &ctx.issues))
            .unwrap_or_default();
        let parent_agent = p.sessions.first().map(|s| {
            self.group_of
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
        let mut row = PullRow {
            repo: p.repo.clone(),
            number: p.number,
            title: p.title.clone(),
            url: p.url.clone(),
            author: p.author.clone(),
            created_at: p.created_at,
            merged_at: p.merged_at,
            deployed_at: p.deployed_at,
            deploy_run: p.deploy_run,
            deployed_status: self.deployed_status(p),
            issue_title: issue_rec.map(|i| i.title.clone()),
            priority: issue_rec.and_then(|i| i.priority),
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
            facet_values: Vec::new(),
        };
        row.facet_values = self.facet_values(&row, issue_rec);
        row
    }

    /// Deployed when a deploy shipped it; waiting when it merged into the deploy repository
    /// since the baseline; else not tracked.
    fn deployed_status(&self, p: &Pull) -> DeployedStatus {
        if p.deploy_run.is_some() {
            DeployedStatus::Deployed
        } else if p.repo == self.s.deploy_repository
            && self.baseline.is_some_and(|b| p.merged_at >= b)
        {
            DeployedStatus::Waiting
        } else {
            DeployedStatus::NotTracked
        }
    }

    /// The row's values of each facet, in [`FACETS`]' order.
    fn facet_values(&self, r: &PullRow, issue_rec: Option<&Issue>) -> Vec<Vec<String>> {
        vec![
            vec![r.repo.clone()],
            vec![
                r.parent_agent
                    .clone()
                    .unwrap_or_else(|| NO_SESSION.to_owned()),
            ],
            if r.sessions.is_empty() {
                vec![NO_SESSION.to_owned()]
            } else {
                r.sessions.clone()
            },
            vec![
                r.issue
                    .as_ref()
                    .map(|k| k.as_str().to_owned())
                    .unwrap_or_else(|| NO_ISSUE.to_owned()),
            ],
            vec![
                r.priority
                    .map(|p| format!("P{p}"))
                    .unwrap_or_else(|| NO_PRIORITY.to_owned()),
            ],
            self.component_values(&r.components, issue_rec),
            vec![r.author.clone()],
            vec![r.rework.to_string()],
            vec![r.deployed_status.as_str().to_owned()],
        ]
    }

    /// The component facet's values: each component with its ancestors (a facet on a parent
    /// selects its children), once each.
    fn component_values(&self, components: &[String], issue_rec: Option<&Issue>) -> Vec<String> {
        match issue_rec {
            Some(i) if !components.is_empty() => {
                let anc = self.ancestors.get(&i.project);
                let mut v: Vec<String> = Vec::new();
                for c in components {
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
        }
    }
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
pub(super) fn passes(r: &PullRow, f: &Filters, skip: Option<usize>) -> bool {
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
