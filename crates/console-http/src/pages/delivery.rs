//! The delivery pages: the timeline with its facets, a chart of the daily series (server-side
//! SVG) and the measures against their targets; the pipeline page; a project's component tree.
//! They read the same core operations as the API; the facet form is a plain GET form whose
//! parameters are the API's.

use askama::Template;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use countersign_console_core::Caller;
use countersign_console_core::console::{ComponentTree, PipelineAnswer, TimelineAnswer};
use countersign_console_core::work::delivery::compute::{FACETS, Filters, Measures};
use countersign_console_core::work::delivery::{ArchitectureSource, DeliverySettings};
use countersign_console_core::{Error, ErrorCode};

use super::{PageError, PageResult, St, chrome, human, page};
use crate::html::Chrome;

/// One bar group of the chart.
#[derive(Debug)]
pub struct Bar {
    pub day: String,
    pub x: i64,
    pub merges_y: i64,
    pub merges_h: i64,
    pub deploys_y: i64,
    pub deploys_h: i64,
    pub failed_y: i64,
    pub failed_h: i64,
    pub merges: usize,
    pub deploys: usize,
    pub failed: usize,
}

/// One value of a facet, checked when selected.
#[derive(Debug)]
pub struct FacetValue {
    pub value: String,
    pub count: usize,
    pub checked: bool,
}

/// A facet with its values.
#[derive(Debug)]
pub struct Facet {
    pub name: &'static str,
    pub values: Vec<FacetValue>,
}

/// A measure against its target.
#[derive(Debug)]
pub struct MeasureRow {
    pub name: String,
    pub value: String,
    pub target: String,
    pub met: &'static str,
}

#[derive(Debug, Template)]
#[template(path = "delivery_timeline.html")]
pub struct TimelinePage<'a> {
    pub chrome: Chrome<'a>,
    pub t: TimelineAnswer,
    pub bars: Vec<Bar>,
    pub chart_width: i64,
    pub facets: Vec<Facet>,
    pub measures: Vec<MeasureRow>,
    pub q: String,
    pub from: String,
    pub to: String,
}

#[derive(Debug, Template)]
#[template(path = "delivery_pipeline.html")]
pub struct PipelinePage<'a> {
    pub chrome: Chrome<'a>,
    pub p: PipelineAnswer,
}

#[derive(Debug, Template)]
#[template(path = "delivery_components.html")]
pub struct ComponentsPage<'a> {
    pub chrome: Chrome<'a>,
    pub tree: ComponentTree,
    /// `(depth, index)` of each component, in tree order.
    pub order: Vec<(usize, usize)>,
}

fn opt(v: Option<f64>) -> String {
    v.map(|x| format!("{x:.2}")).unwrap_or_else(|| "—".into())
}

fn seconds(v: Option<f64>) -> String {
    v.map(|s| crate::html::duration(s as i64))
        .unwrap_or_else(|| "—".into())
}

fn chart(t: &TimelineAnswer) -> (Vec<Bar>, i64) {
    const H: i64 = 100;
    let daily = &t.timeline.measures.daily;
    let max = daily
        .iter()
        .map(|d| d.merges.max(d.deploys + d.failed_deploy_runs))
        .max()
        .unwrap_or(0)
        .max(1) as i64;
    let scale = |n: usize| (n as i64 * H) / max;
    let bars = daily
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let (mh, dh, fh) = (
                scale(d.merges),
                scale(d.deploys),
                scale(d.failed_deploy_runs),
            );
            Bar {
                day: d.day.to_string(),
                x: i as i64 * 16,
                merges_y: H - mh,
                merges_h: mh,
                deploys_y: H - dh - fh,
                deploys_h: dh,
                failed_y: H - fh,
                failed_h: fh,
                merges: d.merges,
                deploys: d.deploys,
                failed: d.failed_deploy_runs,
            }
        })
        .collect();
    (bars, (daily.len() as i64 * 16).max(16))
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
        Err(e) => return Ok(not_configured_or(e).into_response()),
    };
    let (bars, chart_width) = chart(&t);
    let facets = facets(&t, &f);
    let measures = measure_rows(&t.timeline.measures);
    let fmt = |t: &countersign_console_core::Time| t.format("%Y-%m-%d").to_string();
    Ok(page(
        StatusCode::OK,
        &TimelinePage {
            chrome: chrome("Delivery", h, "/delivery"),
            from: fmt(&w.from),
            to: fmt(&w.to),
            q: f.q.clone().unwrap_or_default(),
            t,
            bars,
            chart_width,
            facets,
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
                            value: v.clone(),
                            count: *c,
                            checked: selected.contains(v),
                        })
                        .collect()
                })
                .unwrap_or_default();
            for s in selected {
                if !values.iter().any(|v| v.value == s) {
                    values.push(FacetValue {
                        value: s,
                        count: 0,
                        checked: true,
                    });
                }
            }
            Facet { name, values }
        })
        .collect()
}

/// One measure's row: its value, and its target (`key` in the settings; `secs`: a duration)
/// with whether it was met.
fn measure_row(m: &Measures, name: &str, value: String, key: &str, secs: bool) -> MeasureRow {
    let t = m.targets.get(key);
    MeasureRow {
        name: name.to_owned(),
        value,
        target: t
            .map(|t| {
                if secs {
                    seconds(Some(t.target))
                } else {
                    format!("{:.2}", t.target)
                }
            })
            .unwrap_or_else(|| "—".into()),
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
        |name: &str, value: String, key: &str, secs: bool| measure_row(m, name, value, key, secs);
    vec![
        row(
            "Deploys per day",
            format!("{:.2}", m.deploys_per_day),
            "deploys_per_day",
            false,
        ),
        row(
            "Merge to production (median)",
            seconds(m.lead_time.merge_to_production.median),
            "merge_to_production",
            true,
        ),
        row(
            "First commit to production (median)",
            seconds(m.lead_time.first_commit_to_production.median),
            "first_commit_to_production",
            true,
        ),
        row(
            "Open to production (median)",
            seconds(m.lead_time.open_to_production.median),
            "open_to_production",
            true,
        ),
        row(
            "Open to merge (median)",
            seconds(m.lead_time.open_to_merge.median),
            "open_to_merge",
            true,
        ),
        row(
            "Change failure rate per deploy",
            opt(m.change_failure_rate.per_deploy),
            "change_failure_rate",
            false,
        ),
        row(
            "Change failure rate per PR",
            opt(m.change_failure_rate.per_pr),
            "change_failure_rate_per_pr",
            false,
        ),
        row(
            "Time to restore (median)",
            seconds(m.time_to_restore.median),
            "time_to_restore",
            true,
        ),
        row("Rework share", opt(m.rework_share), "rework_share", false),
        row(
            "Deploy-run success",
            opt(m.deploy_run_success),
            "deploy_run_success",
            false,
        ),
        row(
            "Open P0 issues with no owner",
            m.open_p0_unowned.count.to_string(),
            "open_p0_unowned",
            false,
        ),
    ]
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
    Ok(match st.console.delivery().pipeline(at).await {
        Ok(p) => page(
            StatusCode::OK,
            &PipelinePage {
                chrome: chrome("Pipeline", h, "/delivery/pipeline"),
                p,
            },
        ),
        Err(e) => not_configured_or(e).into_response(),
    })
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

/// The error page of a delivery page: without settings, what to configure and where.
fn not_configured_or(e: Error) -> PageError {
    if e.is(ErrorCode::DELIVERY_NOT_CONFIGURED) {
        PageError::new(
            StatusCode::NOT_FOUND,
            e.code_str(),
            "Delivery is not configured yet: name the deploy repository, its workflow files and the production job names in the settings.",
        )
        .back("/settings#delivery", "Configure delivery")
    } else {
        PageError::from(e)
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
