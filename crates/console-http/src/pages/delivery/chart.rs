//! The timeline's chart as inline SVG drawn here: merges and deploys (failed deploy runs
//! stacked on them) per bar of the core's series (a day up to 90 days, else an ISO week),
//! with a y axis of counts, an x axis of dates and a legend whose swatches are drawn with the
//! bars' own fills. The SVG's viewBox is fixed and its width is its container's (the style
//! sheet), so a window of any length fits the page. Colours are presentation attributes (the
//! Content-Security-Policy allows no inline style).

use chrono::NaiveDate;
use countersign_console_core::work::delivery::compute::{Day, Period, Unit, series};

/// The viewBox: wide enough for eight date labels, short enough for a phone.
pub const WIDTH: f64 = 640.0;
pub const HEIGHT: f64 = 240.0;
const LEFT: f64 = 34.0;
const RIGHT: f64 = 8.0;
const TOP: f64 = 10.0;
const BOTTOM: f64 = 26.0;

/// A series the chart draws, with its fill (the bars' and the legend's).
#[derive(Debug, Clone, Copy)]
pub struct Series {
    pub key: &'static str,
    pub label: &'static str,
    pub fill: &'static str,
}

/// Merges, deploys, failed deploy runs: each fill at least 3:1 against white.
pub const SERIES: [Series; 3] = [
    Series {
        key: "merges",
        label: "merges",
        fill: "#3f6fc4",
    },
    Series {
        key: "deploys",
        label: "deploys",
        fill: "#2f8a55",
    },
    Series {
        key: "failed",
        label: "failed deploy runs",
        fill: "#c8423b",
    },
];

/// A rectangle, its numbers printed for the SVG.
#[derive(Debug)]
pub struct Rect {
    pub x: String,
    pub y: String,
    pub w: String,
    pub h: String,
}

/// One bar group: a period's merges, and its deploys with the failed runs stacked on them.
#[derive(Debug)]
pub struct Bar {
    /// The period's first day, `YYYY-MM-DD`.
    pub first: String,
    /// What the period is, for people: "Mar 2, 2026" or "week of Mar 2, 2026 (Mar 2–8)".
    pub label: String,
    pub merges: usize,
    pub deploys: usize,
    pub failed: usize,
    pub merges_rect: Rect,
    pub deploys_rect: Rect,
    pub failed_rect: Rect,
}

/// A labelled tick of an axis.
#[derive(Debug)]
pub struct Tick {
    /// The tick's position along its axis.
    pub at: String,
    pub label: String,
    /// How its label sits on it: `middle`, or `start` / `end` where a centred label would
    /// leave the view.
    pub anchor: &'static str,
}

/// The chart, ready to print.
#[derive(Debug)]
pub struct Chart {
    pub unit: &'static str,
    pub heading: String,
    /// One sentence: the window and its totals (the SVG's description).
    pub summary: String,
    pub bars: Vec<Bar>,
    pub x_ticks: Vec<Tick>,
    pub y_ticks: Vec<Tick>,
    pub series: [Series; 3],
    pub width: f64,
    pub height: f64,
    pub left: String,
    pub right: String,
    pub top: String,
    pub bottom: String,
    /// Where the x axis' ticks end and its labels sit.
    pub tick_end: String,
    pub label_y: String,
}

fn n(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_owned).unwrap_or(s)
}

/// "Mar 2".
fn short(d: NaiveDate) -> String {
    d.format("%b %-d").to_string()
}

/// "Mar 2, 2026".
fn long(d: NaiveDate) -> String {
    d.format("%b %-d, %Y").to_string()
}

fn plural(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A period for people.
fn period_label(unit: Unit, p: &Period) -> String {
    match unit {
        Unit::Day => long(p.first),
        Unit::Week if p.first == p.last => format!("week of {}", long(p.first)),
        Unit::Week => format!(
            "week of {} ({}–{})",
            long(p.first),
            short(p.first),
            if p.first.format("%m").to_string() == p.last.format("%m").to_string() {
                p.last.format("%-d").to_string()
            } else {
                short(p.last)
            }
        ),
    }
}

/// The y axis' step: 1, 2 or 5 times a power of ten, at most four steps to the top.
fn step(max: usize) -> usize {
    let mut base = 1usize;
    loop {
        for m in [1, 2, 5] {
            let s = base.saturating_mul(m);
            if max.div_ceil(s) <= 4 {
                return s;
            }
        }
        base = base.saturating_mul(10);
    }
}

/// The chart of a window's daily series.
pub fn chart(daily: &[Day]) -> Chart {
    let (unit, periods) = series(daily);
    let max = periods
        .iter()
        .map(|p| p.merges.max(p.deploys + p.failed_deploy_runs))
        .max()
        .unwrap_or(0)
        .max(1);
    let step = step(max);
    let top_value = max.div_ceil(step) * step;
    let (x0, x1, y0, y1) = (LEFT, WIDTH - RIGHT, TOP, HEIGHT - BOTTOM);
    let plot_h = y1 - y0;
    let y_of = |v: usize| y1 - plot_h * v as f64 / top_value as f64;
    let count = periods.len().max(1);
    let gw = (x1 - x0) / count as f64;
    let bars = bars(unit, &periods, &y_of, gw);
    let x_ticks = x_ticks(&periods, gw);
    let y_ticks = (0..=top_value / step)
        .map(|k| Tick {
            at: n(y_of(k * step)),
            label: (k * step).to_string(),
            anchor: "end",
        })
        .collect();
    let (what, heading) = match unit {
        Unit::Day => ("day", "Merges and deploys per day"),
        Unit::Week => ("week", "Merges and deploys per week"),
    };
    let summary = summary(daily, &periods, what);
    Chart {
        unit: what,
        heading: heading.to_owned(),
        summary,
        bars,
        x_ticks,
        y_ticks,
        series: SERIES,
        width: WIDTH,
        height: HEIGHT,
        left: n(x0),
        right: n(x1),
        top: n(y0),
        bottom: n(y1),
        tick_end: n(y1 + 4.0),
        label_y: n(y1 + 17.0),
    }
}

/// A bar group per period: merges beside deploys, failed deploy runs stacked on the deploys.
fn bars(unit: Unit, periods: &[Period], y_of: &dyn Fn(usize) -> f64, gw: f64) -> Vec<Bar> {
    let x0 = LEFT;
    periods
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let gx = x0 + gw * i as f64;
            let rect = |x: f64, lo: usize, hi: usize| Rect {
                x: n(x),
                y: n(y_of(hi)),
                w: n(gw * 0.38),
                h: n(y_of(lo) - y_of(hi)),
            };
            let deploys = p.deploys;
            Bar {
                first: p.first.to_string(),
                label: period_label(unit, p),
                merges: p.merges,
                deploys,
                failed: p.failed_deploy_runs,
                merges_rect: rect(gx + gw * 0.1, 0, p.merges),
                deploys_rect: rect(gx + gw * 0.52, 0, deploys),
                failed_rect: rect(gx + gw * 0.52, deploys, deploys + p.failed_deploy_runs),
            }
        })
        .collect()
}

/// About seven date labels along the x axis, the year on the first and where it changes.
fn x_ticks(periods: &[Period], gw: f64) -> Vec<Tick> {
    let x0 = LEFT;
    let count = periods.len().max(1);
    let stride = count.div_ceil(7).max(1);
    let spans_years = periods
        .first()
        .zip(periods.last())
        .is_some_and(|(a, b)| a.first.format("%Y").to_string() != b.last.format("%Y").to_string());
    let mut last_year = String::new();
    periods
        .iter()
        .enumerate()
        .filter(|(i, _)| i % stride == 0)
        .map(|(i, p)| {
            let year = p.first.format("%Y").to_string();
            let label = if spans_years && year != last_year {
                long(p.first)
            } else {
                short(p.first)
            };
            last_year = year;
            let at = x0 + gw * (i as f64 + 0.5);
            // Half a label's width, at the largest size the style sheet sets (a phone's).
            let half = label.chars().count() as f64 * 5.0;
            let anchor = if at - half < 0.0 {
                "start"
            } else if at + half > WIDTH {
                "end"
            } else {
                "middle"
            };
            Tick {
                at: n(at),
                label,
                anchor,
            }
        })
        .collect()
}

/// The chart in one sentence: the window, the bar's unit and the totals.
fn summary(daily: &[Day], periods: &[Period], what: &str) -> String {
    let sum = |f: fn(&Period) -> usize| periods.iter().map(f).sum::<usize>();
    match (daily.first(), daily.last()) {
        (Some(a), Some(b)) => format!(
            "{} from {} to {}, one bar a {what}: {}, {} and {}.",
            plural(daily.len(), "day", "days"),
            long(a.day),
            long(b.day),
            plural(sum(|p| p.merges), "merge", "merges"),
            plural(sum(|p| p.deploys), "deploy", "deploys"),
            plural(
                sum(|p| p.failed_deploy_runs),
                "failed deploy run",
                "failed deploy runs"
            ),
        ),
        _ => "No day in this window.".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn days(n: usize) -> Vec<Day> {
        let d0 = NaiveDate::from_ymd_opt(2025, 4, 1).unwrap_or_default();
        (0..n)
            .map(|i| Day {
                day: d0 + chrono::Duration::days(i as i64),
                merges: i % 3,
                deploys: 1,
                failed_deploy_runs: usize::from(i % 10 == 0),
                failed_deploys: 0,
                merge_to_production_median: None,
            })
            .collect()
    }

    #[test]
    fn steps_are_round() {
        assert_eq!(
            [1, 4, 5, 9, 17, 40, 41, 180].map(step),
            [1, 1, 2, 5, 5, 10, 20, 50]
        );
    }

    #[test]
    fn bars_fit_the_view_and_a_year_is_weekly() {
        for (len, bars, unit) in [(30, 30, "day"), (365, 53, "week")] {
            let c = chart(&days(len));
            assert_eq!((c.bars.len(), c.unit), (bars, unit));
            for b in &c.bars {
                for r in [&b.merges_rect, &b.deploys_rect, &b.failed_rect] {
                    let f = |s: &str| s.parse::<f64>().unwrap_or(f64::NAN);
                    assert!(
                        f(&r.x) >= LEFT && f(&r.x) + f(&r.w) <= WIDTH - RIGHT,
                        "{r:?}"
                    );
                    assert!(f(&r.y) >= TOP && f(&r.y) + f(&r.h) <= HEIGHT - BOTTOM + 0.1);
                }
            }
            assert!((5..=8).contains(&c.x_ticks.len()), "{}", c.x_ticks.len());
        }
        let c = chart(&days(365));
        assert_eq!(
            (c.x_ticks[0].label.as_str(), c.x_ticks[0].anchor),
            ("Apr 1, 2025", "start")
        );
        assert!(c.x_ticks.iter().any(|t| t.label.ends_with(", 2026")));
        assert_eq!(c.bars[0].label, "week of Apr 1, 2025 (Apr 1–6)");
    }
}
