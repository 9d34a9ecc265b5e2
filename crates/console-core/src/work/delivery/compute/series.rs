//! The chart's series: the measures' daily series as it is for a window of up to
//! [`DAILY_UP_TO`] days, summed by ISO week (Monday to Sunday) beyond, so a year is 53 bars
//! rather than 366. Weeks are sums of the days the API answers, so the page and the API agree.

use chrono::{Datelike, Duration, NaiveDate};
use serde::Serialize;

use super::Day;

/// The longest window charted day by day.
pub const DAILY_UP_TO: usize = 90;

/// What one bar of the series covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Unit {
    Day,
    Week,
}

/// One bar: the days `[first, last]` of the window it sums (a week cut by the window's ends
/// holds fewer than seven).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Period {
    pub first: NaiveDate,
    pub last: NaiveDate,
    pub merges: usize,
    pub deploys: usize,
    pub failed_deploy_runs: usize,
    pub failed_deploys: usize,
}

/// The series of a window's daily rows: by day up to [`DAILY_UP_TO`] days, else by ISO week.
pub fn series(daily: &[Day]) -> (Unit, Vec<Period>) {
    let unit = if daily.len() <= DAILY_UP_TO {
        Unit::Day
    } else {
        Unit::Week
    };
    let mut out: Vec<Period> = Vec::new();
    for d in daily {
        let start = match unit {
            Unit::Day => d.day,
            Unit::Week => monday_of(d.day),
        };
        match out.last_mut() {
            Some(p) if unit == Unit::Week && monday_of(p.first) == start => {
                p.last = d.day;
                p.merges += d.merges;
                p.deploys += d.deploys;
                p.failed_deploy_runs += d.failed_deploy_runs;
                p.failed_deploys += d.failed_deploys;
            }
            _ => out.push(Period {
                first: d.day,
                last: d.day,
                merges: d.merges,
                deploys: d.deploys,
                failed_deploy_runs: d.failed_deploy_runs,
                failed_deploys: d.failed_deploys,
            }),
        }
    }
    (unit, out)
}

/// The Monday that starts `d`'s ISO week.
pub fn monday_of(d: NaiveDate) -> NaiveDate {
    d - Duration::days(i64::from(d.weekday().num_days_from_monday()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn days(from: NaiveDate, n: usize) -> Vec<Day> {
        (0..n)
            .map(|i| Day {
                day: from + Duration::days(i as i64),
                merges: 1,
                deploys: i % 2,
                failed_deploy_runs: 0,
                failed_deploys: 0,
                merge_to_production_median: None,
            })
            .collect()
    }

    #[test]
    fn ninety_days_stay_daily() {
        let d0 = NaiveDate::from_ymd_opt(2026, 1, 1).unwrap_or_default();
        let (unit, p) = series(&days(d0, 90));
        assert_eq!((unit, p.len()), (Unit::Day, 90));
        assert_eq!((p[0].first, p[0].last), (d0, d0));
    }

    #[test]
    fn a_year_is_weekly_and_sums_every_day() {
        // 2025-04-01 is a Tuesday: the first week holds six days, the last (2026-03-30,
        // Monday, to 2026-03-31) two.
        let d0 = NaiveDate::from_ymd_opt(2025, 4, 1).unwrap_or_default();
        for n in [91, 365, 366] {
            let daily = days(d0, n);
            let (unit, p) = series(&daily);
            assert_eq!(unit, Unit::Week);
            assert!(p.len() <= 54, "{n} days: {} weeks", p.len());
            assert_eq!(p.iter().map(|x| x.merges).sum::<usize>(), n);
            assert_eq!(
                p.iter().map(|x| x.deploys).sum::<usize>(),
                daily.iter().map(|x| x.deploys).sum::<usize>()
            );
            assert!(
                p[1..]
                    .iter()
                    .all(|x| x.first.weekday() == chrono::Weekday::Mon)
            );
        }
        let (_, p) = series(&days(d0, 365));
        assert_eq!(p.len(), 53);
        assert_eq!(p[0].merges, 6);
        assert_eq!(
            p[0].last,
            NaiveDate::from_ymd_opt(2025, 4, 6).unwrap_or_default()
        );
    }
}
