//! The delivery pages: the timeline with its facets, a chart of the daily series (server-side
//! SVG) and the measures against their targets; the pipeline page; a project's component tree.
//! They read the same core operations as the API; the facet form is a plain GET form whose
//! parameters are the API's.

use askama::Template;
use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::Response;
use countersign_console_core::Caller;
use countersign_console_core::console::{ComponentTree, PipelineAnswer, TimelineAnswer};
use countersign_console_core::work::delivery::compute::FACETS;

use super::{St, chrome, error_text, human, page, status_of};
use crate::html::{Chrome, notice};

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
) -> Response {
    let h = match human(&caller) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let q = crate::api::Query::of(&uri);
    let (w, f) = match crate::api::delivery::window_and_filters(&st, &q) {
        Ok(x) => x,
        Err(e) => return page(status_of(&e.0), &notice("error", error_text(&e.0))),
    };
    let t = match st.console.delivery_timeline(w, &f).await {
        Ok(t) => t,
        Err(e) => return page(status_of(&e), &notice("error", error_text(&e))),
    };
    let (bars, chart_width) = chart(&t);
    let facets = FACETS
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
        .collect();
    let m = &t.timeline.measures;
    let target = |n: &str| m.targets.get(n);
    let row = |name: &str, value: String, key: &str, secs: bool| {
        let t = target(key);
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
    };
    let measures = vec![
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
    ];
    let fmt = |t: &countersign_console_core::Time| t.format("%Y-%m-%d").to_string();
    page(
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
    )
}

pub async fn pipeline_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    uri: Uri,
) -> Response {
    let h = match human(&caller) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    let q = crate::api::Query::of(&uri);
    let at = match q.one("at") {
        Ok(Some(v)) => match countersign_console_core::console::full_date(v) {
            Some(d) => Some(d),
            None => {
                return page(
                    StatusCode::BAD_REQUEST,
                    &notice("error", "`at` is a full-date (YYYY-MM-DD)".to_owned()),
                );
            }
        },
        _ => None,
    };
    match st.console.delivery_pipeline(at).await {
        Ok(p) => page(
            StatusCode::OK,
            &PipelinePage {
                chrome: chrome("Pipeline", h, "/delivery"),
                p,
            },
        ),
        Err(e) => page(status_of(&e), &notice("error", error_text(&e))),
    }
}

pub async fn components_page(
    State(st): St,
    Extension(caller): Extension<Caller>,
    Path(key): Path<String>,
) -> Response {
    let h = match human(&caller) {
        Ok(h) => h,
        Err(r) => return *r,
    };
    match st.console.component_tree(&key).await {
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
        Err(e) => page(status_of(&e), &notice("error", error_text(&e))),
    }
}
