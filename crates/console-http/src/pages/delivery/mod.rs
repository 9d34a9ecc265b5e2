//! The delivery pages: the timeline with its filter bar, a chart of the series (server-side
//! SVG, [`chart`]) and the measures against their targets; the pipeline page with each stage's
//! success, median duration, last run and targets; a project's component tree; and, while
//! delivery is not set up, a page that says how. They read the same core operations as the
//! API; the filter bar is a plain GET form whose parameters are the API's.

use askama::Template;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use countersign_console_core::Caller;
use countersign_console_core::console::{ComponentTree, PipelineAnswer, TimelineAnswer};
use countersign_console_core::work::delivery::compute::{
    DeployedStatus, FACETS, Filters, JobResult, Measures, NO_COMPONENT, NO_ISSUE, NO_PRIORITY,
    NO_SESSION, Pipeline, TargetCheck,
};
use countersign_console_core::work::delivery::{ArchitectureSource, DeliverySettings};
use countersign_console_core::{Error, ErrorCode};

use super::{PageError, PageResult, St, chrome, human, page};
use crate::html::{Chrome, When};

mod chart;

pub use chart::{Bar, Chart, Series, Tick};

/// The delivery pages' style sheet (the chart, the filter bar, the stage cards).
const STYLE: &str = include_str!("../../../assets/delivery.css");

pub async fn style() -> Response {
    super::style_asset(STYLE)
}

/// One value of a facet, checked when selected.
#[derive(Debug)]
pub struct FacetValue {
    pub value: String,
    /// The value as people say it: "no session", "P1", a component's name.
    pub label: String,
    pub count: usize,
    pub checked: bool,
}

/// A facet with its values.
#[derive(Debug)]
pub struct Facet {
    pub name: &'static str,
    /// The facet as people say it: "Agent or group", "Deploy status".
    pub label: &'static str,
    pub values: Vec<FacetValue>,
    pub selected: usize,
}

/// A filter in force, with the link that drops it.
#[derive(Debug)]
pub struct Chip {
    pub label: String,
    pub href: String,
}

/// A measure against its target.
#[derive(Debug)]
pub struct MeasureRow {
    pub name: String,
    pub value: String,
    pub target: String,
    pub met: &'static str,
}

/// A window the page offers in one click: its label and link.
#[derive(Debug)]
pub struct Preset {
    pub label: &'static str,
    pub href: String,
    pub current: bool,
}

#[derive(Debug, Template)]
#[template(path = "delivery_timeline.html")]
pub struct TimelinePage<'a> {
    pub chrome: Chrome<'a>,
    pub t: TimelineAnswer,
    pub chart: Chart,
    pub facets: Vec<Facet>,
    pub chips: Vec<Chip>,
    pub presets: Vec<Preset>,
    pub clear: String,
    pub measures: Vec<MeasureRow>,
    pub q: String,
    pub from: String,
    pub to: String,
    pub synced: Option<When>,
}

/// A stage of the pipeline as its card shows it.
#[derive(Debug)]
pub struct StageCard {
    pub key: &'static str,
    pub name: &'static str,
    pub job: Option<String>,
    /// "94 % of 37 runs", or "no run".
    pub success: String,
    pub median: String,
    /// The last run: when, whether it passed, its link.
    pub last: Option<(When, &'static str, Option<String>, i64)>,
    /// Each target: what it asks, the value, met or missed.
    pub targets: Vec<MeasureRow>,
}

/// One day of the pipeline, each cell in words.
#[derive(Debug)]
pub struct DayRow {
    pub day: String,
    pub label: String,
    pub cells: Vec<String>,
}

#[derive(Debug, Template)]
#[template(path = "delivery_pipeline.html")]
pub struct PipelinePage<'a> {
    pub chrome: Chrome<'a>,
    pub p: PipelineAnswer,
    pub span: String,
    pub earlier: String,
    pub later: Option<String>,
    pub stages: Vec<StageCard>,
    pub lead_times: Vec<MeasureRow>,
    pub day_heads: Vec<&'static str>,
    pub days: Vec<DayRow>,
    /// Each slow PR-check job: its name and its times in words.
    pub slowest: Vec<(String, String)>,
    pub failed: Vec<(String, When)>,
    pub synced: Option<When>,
}

/// Delivery without settings: what to configure, and where.
#[derive(Debug, Template)]
#[template(path = "delivery_setup.html")]
pub struct SetupPage<'a> {
    pub chrome: Chrome<'a>,
    pub heading: &'static str,
    /// Whether `[code_hosting]` is configured.
    pub code_host: bool,
}

#[derive(Debug, Template)]
#[template(path = "delivery_components.html")]
pub struct ComponentsPage<'a> {
    pub chrome: Chrome<'a>,
    pub tree: ComponentTree,
    /// `(depth, index)` of each component, in tree order.
    pub order: Vec<(usize, usize)>,
}

/// `n thing` or `n things`.
pub fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

fn share(v: Option<f64>) -> String {
    v.map(percent).unwrap_or_else(|| "—".into())
}

/// A share as a percentage: "94 %", "100 %", "93.8 %" when a whole number would round it to
/// 100 or 0.
fn percent(x: f64) -> String {
    let p = x * 100.0;
    if (p.round() == 100.0 && p < 100.0) || (p.round() == 0.0 && p > 0.0) {
        format!("{p:.1} %")
    } else {
        format!("{p:.0} %")
    }
}

fn seconds(v: Option<f64>) -> String {
    v.map(|s| crate::html::duration(s as i64))
        .unwrap_or_else(|| "—".into())
}

/// The time of the last sync, if any.
fn synced(f: &countersign_console_core::work::delivery::Freshness) -> Option<When> {
    f.synced_at.as_ref().map(crate::html::when)
}

/// A merge's deploy status in words.
pub fn deployed_label(d: &DeployedStatus) -> &'static str {
    match d {
        DeployedStatus::Deployed => "deployed",
        DeployedStatus::Waiting => "waiting to deploy",
        DeployedStatus::NotTracked => "not tracked",
    }
}

/// A time as the pages show it.
pub fn at(t: &countersign_console_core::Time) -> When {
    crate::html::when(t)
}

/// A facet's name as people say it.
fn facet_label(name: &str) -> &'static str {
    match name {
        "repo" => "Repository",
        "parent_agent" => "Agent or group",
        "session" => "Session",
        "issue" => "Issue",
        "priority" => "Priority",
        "component" => "Component",
        "author" => "Author",
        "rework" => "Rework",
        "deployed" => "Deploy status",
        _ => "Other",
    }
}

/// A facet's value as people say it.
fn value_label(t: &TimelineAnswer, facet: &str, v: &str) -> String {
    match (facet, v) {
        (_, NO_SESSION) => "no session".into(),
        (_, NO_ISSUE) => "no issue".into(),
        (_, NO_PRIORITY) => "no priority".into(),
        (_, NO_COMPONENT) => "no component".into(),
        ("rework", "true") => "rework".into(),
        ("rework", "false") => "not rework".into(),
        ("deployed", "deployed") => "deployed".into(),
        ("deployed", "waiting") => "waiting to deploy".into(),
        ("deployed", "not_tracked") => "not tracked".into(),
        ("component", id) => t
            .timeline
            .components
            .get(id)
            .map(|c| c.name.clone())
            .unwrap_or_else(|| id.to_owned()),
        ("issue", key) => match t.timeline.issue_titles.get(key) {
            Some(title) => format!("{key} {title}"),
            None => key.to_owned(),
        },
        _ => v.to_owned(),
    }
}

/// `/delivery?…` with the window the person asked for, the search and the facets.
fn timeline_href(from: Option<&str>, to: Option<&str>, f: &Filters) -> String {
    let mut q = url::form_urlencoded::Serializer::new(String::new());
    if let Some(v) = from {
        q.append_pair("from", v);
    }
    if let Some(v) = to {
        q.append_pair("to", v);
    }
    if let Some(v) = &f.q {
        q.append_pair("q", v);
    }
    for (name, values) in &f.facets {
        for v in values {
            q.append_pair(name, v);
        }
    }
    let q = q.finish();
    if q.is_empty() {
        "/delivery".into()
    } else {
        format!("/delivery?{q}")
    }
}

pub async fn timeline_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    uri: Uri,
) -> PageResult {
    let h = human(&caller)?;
    let q = crate::api::Query::of(&uri);
    let (w, f) = match crate::api::delivery::window_and_filters(&st, &q) {
        Ok(x) => x,
        Err(e) => return Ok(PageError::from(e.0).into_response()),
    };
    let t = match st.console.delivery().timeline(w, &f).await {
        Ok(t) => t,
        Err(e) => return not_configured_or(&st, h, e, "Delivery", "/delivery"),
    };
    let (from_q, to_q) = (
        q.one("from").ok().flatten().map(str::to_owned),
        q.one("to").ok().flatten().map(str::to_owned),
    );
    let chart = chart::chart(&t.timeline.measures.daily);
    let facets = facets(&t, &f);
    let chips = chips(&t, &f, from_q.as_deref(), to_q.as_deref());
    let measures = measure_rows(&t.timeline.measures);
    let fmt = |t: &countersign_console_core::Time| t.format("%Y-%m-%d").to_string();
    let (from, to) = (fmt(&w.from), fmt(&w.to));
    let presets = [
        ("7 days", 7),
        ("30 days", 30),
        ("90 days", 90),
        ("A year", 365),
    ]
    .into_iter()
    .map(|(label, days)| {
        let start = fmt(&(w.to - chrono::Duration::days(days)));
        Preset {
            label,
            current: (w.to - w.from).num_days() == days,
            href: timeline_href(Some(&start), Some(&to), &f),
        }
    })
    .collect();
    Ok(page(
        StatusCode::OK,
        &TimelinePage {
            chrome: chrome("Delivery", h, "/delivery"),
            q: f.q.clone().unwrap_or_default(),
            clear: timeline_href(from_q.as_deref(), to_q.as_deref(), &Filters::default()),
            synced: synced(&t.freshness),
            from,
            to,
            t,
            chart,
            facets,
            chips,
            presets,
            measures,
        },
    ))
}

/// The timeline's facets, each value with its count and checked when selected; a selected
/// value the window has none of is listed too, with 0.
fn facets(t: &TimelineAnswer, f: &Filters) -> Vec<Facet> {
    FACETS
        .iter()
        .map(|name| {
            let selected = f.facets.get(*name).cloned().unwrap_or_default();
            let mut values: Vec<FacetValue> = t
                .timeline
                .facet_counts
                .get(name)
                .map(|m| {
                    m.iter()
                        .map(|(v, c)| FacetValue {
                            label: value_label(t, name, v),
                            value: v.clone(),
                            count: *c,
                            checked: selected.contains(v),
                        })
                        .collect()
                })
                .unwrap_or_default();
            for s in &selected {
                if !values.iter().any(|v| &v.value == s) {
                    values.push(FacetValue {
                        label: value_label(t, name, s),
                        value: s.clone(),
                        count: 0,
                        checked: true,
                    });
                }
            }
            Facet {
                name,
                label: facet_label(name),
                selected: selected.len(),
                values,
            }
        })
        .collect()
}

/// The filters in force, each with the link that drops it.
fn chips(t: &TimelineAnswer, f: &Filters, from: Option<&str>, to: Option<&str>) -> Vec<Chip> {
    let mut out = Vec::new();
    if let Some(text) = &f.q {
        let mut rest = f.clone();
        rest.q = None;
        out.push(Chip {
            label: format!("Search: {text}"),
            href: timeline_href(from, to, &rest),
        });
    }
    for (name, values) in &f.facets {
        for v in values {
            let mut rest = f.clone();
            if let Some(vs) = rest.facets.get_mut(name) {
                vs.retain(|x| x != v);
            }
            out.push(Chip {
                label: format!("{}: {}", facet_label(name), value_label(t, name, v)),
                href: timeline_href(from, to, &rest),
            });
        }
    }
    out
}

/// One measure's row: its value, and its target (`key` in the settings; `secs`: a duration,
/// `pct`: a share) with whether it was met.
fn measure_row(m: &Measures, name: &str, value: String, key: &str, kind: Kind) -> MeasureRow {
    target_row(m.targets.get(key), name, value, kind)
}

/// How a measure's numbers read.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Number,
    Share,
    Duration,
}

impl Kind {
    fn show(self, v: f64) -> String {
        match self {
            Kind::Number => format!("{v:.2}"),
            Kind::Share => percent(v),
            Kind::Duration => seconds(Some(v)),
        }
    }
}

/// A row of a value against its target, if any.
fn target_row(t: Option<&TargetCheck>, name: &str, value: String, kind: Kind) -> MeasureRow {
    MeasureRow {
        name: name.to_owned(),
        value,
        target: t.map(|t| kind.show(t.target)).unwrap_or_else(|| "—".into()),
        met: match t.and_then(|t| t.met) {
            Some(true) => "met",
            Some(false) => "missed",
            None => "",
        },
    }
}

/// The measures' rows, in the page's order.
fn measure_rows(m: &Measures) -> Vec<MeasureRow> {
    let row =
        |name: &str, value: String, key: &str, kind: Kind| measure_row(m, name, value, key, kind);
    vec![
        row(
            "Deploys per day",
            format!("{:.2}", m.deploys_per_day),
            "deploys_per_day",
            Kind::Number,
        ),
        row(
            "Merge to production (median)",
            seconds(m.lead_time.merge_to_production.median),
            "merge_to_production",
            Kind::Duration,
        ),
        row(
            "First commit to production (median)",
            seconds(m.lead_time.first_commit_to_production.median),
            "first_commit_to_production",
            Kind::Duration,
        ),
        row(
            "Open to production (median)",
            seconds(m.lead_time.open_to_production.median),
            "open_to_production",
            Kind::Duration,
        ),
        row(
            "Open to merge (median)",
            seconds(m.lead_time.open_to_merge.median),
            "open_to_merge",
            Kind::Duration,
        ),
        row(
            "Change failure rate per deploy",
            share(m.change_failure_rate.per_deploy),
            "change_failure_rate",
            Kind::Share,
        ),
        row(
            "Change failure rate per PR",
            share(m.change_failure_rate.per_pr),
            "change_failure_rate_per_pr",
            Kind::Share,
        ),
        row(
            "Time to restore (median)",
            seconds(m.time_to_restore.median),
            "time_to_restore",
            Kind::Duration,
        ),
        row(
            "Rework share",
            share(m.rework_share),
            "rework_share",
            Kind::Share,
        ),
        row(
            "Deploy-run success",
            share(m.deploy_run_success),
            "deploy_run_success",
            Kind::Share,
        ),
        row(
            "Open P0 issues with no owner",
            m.open_p0_unowned.count.to_string(),
            "open_p0_unowned",
            Kind::Number,
        ),
    ]
}

/// A stage's name for people.
fn stage_name(key: &str) -> &'static str {
    match key {
        "pr_checks" => "PR checks",
        "staging_e2e" => "Staging end-to-end",
        "staging_deploy" => "Staging deploy",
        "production_deploy" => "Production deploy",
        _ => "Other",
    }
}

/// A target of the pipeline: its name, how its numbers read, and whether it is met at
/// least (else at most).
fn target_meta(key: &str) -> (&'static str, Kind, bool) {
    match key {
        "pr_checks_success" | "deploy_run_success" => ("Success", Kind::Share, true),
        "pr_checks_wall" => ("Median duration", Kind::Duration, false),
        "merge_to_production" => ("Merge → production (median)", Kind::Duration, false),
        "open_to_merge" => ("Open → merge (median)", Kind::Duration, false),
        _ => ("Target", Kind::Number, true),
    }
}

/// A pipeline target's row, its target saying "at least" or "at most".
fn pipeline_target(t: Option<&TargetCheck>, key: &str, value: Option<String>) -> MeasureRow {
    let (name, kind, at_least) = target_meta(key);
    let value = value
        .or_else(|| t.and_then(|t| t.value).map(|v| kind.show(v)))
        .unwrap_or_else(|| "—".into());
    let mut row = target_row(t, name, value, kind);
    if t.is_some() {
        let bound = if at_least { "at least" } else { "at most" };
        row.target = format!("{bound} {}", row.target);
    }
    row
}

/// A day's job results in words: "3 runs · 67 % passed · 5 min".
fn job_cell(j: Option<&JobResult>) -> String {
    match j {
        None => "—".into(),
        Some(j) if j.runs == 0 => "no run".into(),
        Some(j) => {
            let mut s = plural(j.runs, "run", "runs");
            if let Some(x) = j.success {
                s.push_str(&format!(" · {} passed", percent(x)));
            }
            if let Some(m) = j.median_seconds {
                s.push_str(&format!(" · {}", seconds(Some(m))));
            }
            s
        }
    }
}

/// A day's lead time in words: "2 PRs · median 4 h".
fn lead_cell(s: &countersign_console_core::work::delivery::compute::Stat) -> String {
    match s.median {
        Some(m) => format!(
            "{} · median {}",
            plural(s.count, "PR", "PRs"),
            seconds(Some(m))
        ),
        None => "no PR".into(),
    }
}

/// The pipeline page's context: each stage's card, the lead times against their targets,
/// the days in words, the slowest and the failed jobs, the week's span and its links.
fn pipeline_view<'a>(chrome: Chrome<'a>, p: PipelineAnswer) -> PipelinePage<'a> {
    let stages = stage_cards(&p.pipeline);
    let lead_times = lead_times(&p.pipeline);
    let (day_heads, days) = day_rows(&p.pipeline);
    let failed = failed_jobs(&p.pipeline);
    let slowest = p
        .pipeline
        .slowest_jobs
        .iter()
        .map(|j| {
            (
                j.name.clone(),
                format!(
                    "median {}, longest {}, over {}",
                    seconds(Some(j.median_seconds)),
                    seconds(Some(j.max_seconds)),
                    plural(j.results, "result", "results")
                ),
            )
        })
        .collect();
    let (first, last) = (
        p.pipeline.days.first().map(|d| d.day),
        p.pipeline.days.last().map(|d| d.day),
    );
    let span = match (first, last) {
        (Some(a), Some(b)) => format!(
            "{} to {} (UTC days)",
            a.format("%b %-d"),
            b.format("%b %-d, %Y")
        ),
        _ => String::new(),
    };
    let earlier = last
        .map(|b| format!("/delivery/pipeline?at={}", b - chrono::Duration::days(7)))
        .unwrap_or_else(|| "/delivery/pipeline".into());
    PipelinePage {
        chrome,
        synced: synced(&p.freshness),
        span,
        earlier,
        later: None,
        stages,
        lead_times,
        day_heads,
        days,
        slowest,
        failed,
        p,
    }
}

/// One card per configured stage: success over its runs, median, last run, targets.
fn stage_cards(pipeline: &Pipeline) -> Vec<StageCard> {
    let targets = &pipeline.targets;
    pipeline
        .stages
        .iter()
        .map(|s| StageCard {
            key: s.stage,
            name: stage_name(s.stage),
            job: s.job.clone(),
            success: match s.result.success {
                Some(x) => format!("{} of {}", percent(x), plural(s.result.runs, "run", "runs")),
                None => "no run".into(),
            },
            median: seconds(s.result.median_seconds),
            last: s.last_run.as_ref().map(|l| {
                (
                    at(&l.at),
                    if l.success { "passed" } else { "failed" },
                    l.url.clone(),
                    l.run,
                )
            }),
            targets: s
                .targets
                .iter()
                .filter_map(|k| Some(pipeline_target(Some(targets.get(k)?), k, None)))
                .collect(),
        })
        .collect()
}

/// The seven days' lead times, each against its target.
fn lead_times(pipeline: &Pipeline) -> Vec<MeasureRow> {
    let targets = &pipeline.targets;
    [
        ("merge_to_production", &pipeline.merge_to_production),
        ("open_to_merge", &pipeline.open_to_merge),
    ]
    .into_iter()
    .map(|(k, stat)| {
        let value = match stat.median {
            Some(m) => format!(
                "{} (median of {})",
                seconds(Some(m)),
                plural(stat.count, "PR", "PRs")
            ),
            None => "no PR".into(),
        };
        pipeline_target(targets.get(k), k, Some(value))
    })
    .collect()
}

/// The days in words: a column per configured stage, then the lead times.
fn day_rows(pipeline: &Pipeline) -> (Vec<&'static str>, Vec<DayRow>) {
    let has_e2e = pipeline.stages.iter().any(|s| s.stage == "staging_e2e");
    let has_staging = pipeline.stages.iter().any(|s| s.stage == "staging_deploy");
    let mut day_heads = vec!["Day", "PR checks"];
    if has_e2e {
        day_heads.push("Staging end-to-end");
    }
    if has_staging {
        day_heads.push("Staging deploy");
    }
    day_heads.extend(["Production deploy", "Merge → production", "Open → merge"]);
    let days = pipeline
        .days
        .iter()
        .map(|d| {
            let mut cells = vec![job_cell(Some(&d.pr_checks))];
            if has_e2e {
                cells.push(job_cell(d.staging_e2e.as_ref()));
            }
            if has_staging {
                cells.push(job_cell(d.staging_deploy.as_ref()));
            }
            cells.push(job_cell(Some(&d.production_deploy)));
            cells.push(lead_cell(&d.merge_to_production));
            cells.push(lead_cell(&d.open_to_merge));
            DayRow {
                day: d.day.to_string(),
                label: d.day.format("%a %b %-d").to_string(),
                cells,
            }
        })
        .collect();
    (day_heads, days)
}

/// The failed jobs, each with where it failed and when.
fn failed_jobs(pipeline: &Pipeline) -> Vec<(String, When)> {
    pipeline
        .failed_jobs
        .iter()
        .map(|j| {
            let what = match &j.failing_step {
                Some(s) => format!("{} failed at the step “{s}”", j.name),
                None => format!("{} failed", j.name),
            };
            let kind = if j.event == "pull_request" {
                "PR checks"
            } else {
                "push"
            };
            (
                format!("{what} · run {} ({kind})", j.run),
                at(&j.completed_at.unwrap_or_default()),
            )
        })
        .collect()
}

pub async fn pipeline_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    uri: Uri,
) -> PageResult {
    let h = human(&caller)?;
    let q = crate::api::Query::of(&uri);
    let at = match q.one("at") {
        Ok(Some(v)) => match countersign_console_core::console::full_date(v) {
            Some(d) => Some(d),
            None => {
                return Ok(PageError::new(
                    StatusCode::BAD_REQUEST,
                    "INVALID_QUERY",
                    "`at` is a full-date (YYYY-MM-DD)",
                )
                .back("/delivery/pipeline", "Back to this week's pipeline")
                .into_response());
            }
        },
        _ => None,
    };
    match st.console.delivery().pipeline(at).await {
        Ok(p) => {
            let mut v = pipeline_view(chrome("Pipeline", h, "/delivery/pipeline"), p);
            // No later week than the one that ends today.
            let today = st.console.now().date_naive();
            v.later = match at {
                Some(a) if a < today => Some(format!(
                    "/delivery/pipeline?at={}",
                    (a + chrono::Duration::days(7)).min(today)
                )),
                _ => None,
            };
            Ok(page(StatusCode::OK, &v))
        }
        Err(e) => not_configured_or(&st, h, e, "Pipeline", "/delivery/pipeline"),
    }
}

pub async fn components_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
) -> PageResult {
    let h = human(&caller)?;
    Ok(match st.console.delivery().component_tree(&key).await {
    Ok(tree) => {
        // Depth-first from the roots.
        let mut order = Vec::new();
        let mut stack: Vec<(usize, usize)> = tree
            .components
            .iter()
            .enumerate()
            .filter(|(_, c)| c.parent.is_none())
            .map(|(i, _)| (0, i))
            .rev()
            .collect();
        while let Some((d, i)) = stack.pop() {
            if order.iter().any(|(_, j)| *j == i) || order.len() > tree.components.len() {
                continue;
            }
            order.push((d, i));
            let id = &tree.components[i].id;
            let kids: Vec<(usize, usize)> = tree
                .components
                .iter()
                .enumerate()
                .filter(|(_, c)| c.parent.as_ref() == Some(id))
                .map(|(j, _)| (d + 1, j))
                .rev()
                .collect();
            stack.extend(kids);
        }
        page(
            StatusCode::OK,
            &ComponentsPage {
                chrome: chrome("Components", h, "/projects"),
                tree,
                order,
            },
        )
    }
    Err(e) if e.is(ErrorCode::SOURCE_NOT_FOUND) => PageError::new(
        StatusCode::NOT_FOUND,
        e.code_str(),
        format!(
            "{key} has no architecture source yet: name the repository and branch whose catalog describes its components."
        ),
    )
    .back("/settings#sources", "Set the architecture source")
    .into_response(),
    Err(e) => PageError::from(e).into_response(),
    })
}

/// A delivery page's answer to an error: without settings, a page that says what to
/// configure and where (200: nothing is wrong, delivery is just not set up); else the error.
fn not_configured_or(
    st: &crate::AppState,
    h: &countersign_console_core::Human,
    e: Error,
    title: &'static str,
    active: &'static str,
) -> PageResult {
    if e.is(ErrorCode::DELIVERY_NOT_CONFIGURED) {
        Ok(page(
            StatusCode::OK,
            &SetupPage {
                chrome: chrome(title, h, active),
                heading: title,
                code_host: st.console.delivery().has_code_host(),
            },
        ))
    } else {
        Err(PageError::from(e))
    }
}

/// A repository mapping as the settings page lists it.
#[derive(Debug)]
pub struct MappingRow {
    pub repo: String,
    pub owner: String,
    pub name: String,
    pub project: String,
    pub default: bool,
}

/// A project with its architecture source, if any.
#[derive(Debug)]
pub struct SourceRow {
    pub project: String,
    pub name: String,
    pub source: Option<ArchitectureSource>,
}

#[derive(Debug, Template)]
#[template(path = "delivery_settings.html")]
pub struct SettingsPage<'a> {
    pub chrome: Chrome<'a>,
    /// Whether `[code_hosting]` is configured (settings and sources need it).
    pub code_host: bool,
    pub s: DeliverySettings,
    pub configured: bool,
    pub mappings: Vec<MappingRow>,
    pub sources: Vec<SourceRow>,
    pub projects: Vec<String>,
}

/// `GET /settings`: the delivery settings, each project's architecture source and the
/// repository mappings, as forms; what configuration they need, when it is missing.
pub async fn settings_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
) -> Result<Response, PageError> {
    let h = human(&caller)?;
    let settings = st.console.delivery().settings().await?;
    let mappings = st
        .console
        .repo_mappings()
        .await?
        .into_iter()
        .map(|m| MappingRow {
            repo: m.repo.to_string(),
            owner: m.repo.owner().to_owned(),
            name: m
                .repo
                .as_str()
                .split_once('/')
                .map(|(_, n)| n.to_owned())
                .unwrap_or_default(),
            project: m.project.to_string(),
            default: m.default,
        })
        .collect();
    let projects = st.console.issues().projects().await?;
    let sources = st.console.delivery().architecture_sources().await?;
    let rows = projects
        .iter()
        .map(|p| SourceRow {
            project: p.key.to_string(),
            name: p.name.clone(),
            source: sources.iter().find(|s| s.project == p.key).cloned(),
        })
        .collect();
    Ok(page(
        StatusCode::OK,
        &SettingsPage {
            chrome: chrome("Settings", h, "/settings"),
            code_host: st.console.delivery().has_code_host(),
            configured: settings.is_some(),
            s: settings.unwrap_or_else(|| DeliverySettings {
                deploy_repository: String::new(),
                workflow_paths: Vec::new(),
                production_jobs: Vec::new(),
                production_apply_step: None,
                population_authors: Vec::new(),
                excluded_repositories: Vec::new(),
                staging_e2e_job: None,
                staging_deploy_job: None,
                pr_checks_rollup_job: None,
            }),
            mappings,
            sources: rows,
            projects: projects.iter().map(|p| p.key.to_string()).collect(),
        },
    ))
}
