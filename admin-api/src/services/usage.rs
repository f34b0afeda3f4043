//! Usage buckets for the partner usage routes, read from the hourly buckets the settler writes.
//!
//! Window rules (SPEC "GET usage routes"): `granularity` is `day` (default; buckets per UTC day,
//! default last 7 days, at most 366) or `hour` (per UTC hour, `start_time` rounded down to the
//! hour, default last 24 hours, at most 7 days). `start_time`/`end_time` are RFC 3339 timestamps;
//! an offset other than `Z` is accepted and converted to UTC. `end_time` defaults to now,
//! `start_time` to `end_time` minus the default window; `end_time` must be after `start_time`.

use super::fault::Fault;
use crate::dto::{UsageBucket, UsageBuckets, Usd};
use chrono::{DateTime, Duration, DurationRound, SecondsFormat, TimeDelta, Utc};
use entities::usage_hourly;
use money::NanoUsd;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use std::collections::{BTreeMap, HashMap};

/// Why a usage question is refused.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum UsageError {
    /// `granularity` is neither `day` nor `hour`.
    #[error("granularity must be day or hour")]
    Granularity,
    /// The window is malformed, reversed, too long or too far back; the text says which.
    #[error("invalid usage window: {0}")]
    Window(String),
    #[error(transparent)]
    Fault(Fault),
}
super::fault::faults!(UsageError);

/// Bucket size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Granularity {
    Day,
    Hour,
}

/// A validated window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub granularity: Granularity,
    pub start: DateTime<Utc>,
    pub end: DateTime<Utc>,
}

fn parse_time(value: Option<&String>, name: &str) -> Result<Option<DateTime<Utc>>, UsageError> {
    value
        .map(|v| {
            DateTime::parse_from_rfc3339(v.trim())
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| {
                    UsageError::Window(format!(
                        "{name} must be an ISO 8601 timestamp such as 2026-01-31T00:00:00Z"
                    ))
                })
        })
        .transpose()
}

impl Window {
    /// Validates the query parameters at time `now`.
    pub fn parse(
        query: &HashMap<String, String>,
        now: DateTime<Utc>,
    ) -> Result<Window, UsageError> {
        let granularity = match query.get("granularity").map(String::as_str) {
            None | Some("day") => Granularity::Day,
            Some("hour") => Granularity::Hour,
            Some(_) => return Err(UsageError::Granularity),
        };
        let (default, longest, step) = match granularity {
            Granularity::Day => (Duration::days(7), Duration::days(366), TimeDelta::days(1)),
            Granularity::Hour => (Duration::hours(24), Duration::days(7), TimeDelta::hours(1)),
        };
        let end = parse_time(query.get("end_time"), "end_time")?.unwrap_or(now);
        let start = parse_time(query.get("start_time"), "start_time")?.unwrap_or(end - default);
        let start = start
            .duration_trunc(step)
            .map_err(|_| UsageError::Window("start_time is out of range".into()))?;
        if end <= start {
            return Err(UsageError::Window(
                "end_time must be after start_time".into(),
            ));
        }
        if end - start > longest {
            return Err(UsageError::Window(format!(
                "the window may span at most {} days at this granularity",
                longest.num_days()
            )));
        }
        Ok(Window {
            granularity,
            start,
            end,
        })
    }

    /// A window of whole UTC days, `first` to `last` inclusive (the console's date fields), under
    /// the same limits as the query form: at most 366 days by day, 7 days by hour.
    pub fn days(
        granularity: Granularity,
        first: chrono::NaiveDate,
        last: chrono::NaiveDate,
    ) -> Result<Window, UsageError> {
        if last < first {
            return Err(UsageError::Window(
                "the last day must not be before the first".into(),
            ));
        }
        let longest = match granularity {
            Granularity::Day => 366,
            Granularity::Hour => 7,
        };
        let span = (last - first).num_days() + 1;
        if span > longest {
            return Err(UsageError::Window(format!(
                "the window may span at most {longest} days at this granularity"
            )));
        }
        let midnight = |d: chrono::NaiveDate| d.and_time(chrono::NaiveTime::MIN).and_utc();
        Ok(Window {
            granularity,
            start: midnight(first),
            end: midnight(first) + Duration::days(span),
        })
    }

    /// The length of one bucket.
    pub fn step(&self) -> TimeDelta {
        match self.granularity {
            Granularity::Day => TimeDelta::days(1),
            Granularity::Hour => TimeDelta::hours(1),
        }
    }

    /// The start of each bucket, in order.
    pub fn periods(&self) -> Vec<DateTime<Utc>> {
        let step = self.step();
        let mut periods = Vec::new();
        let mut t = self.start;
        while t < self.end {
            periods.push(t);
            t += step;
        }
        periods
    }

    /// The index of the bucket `at` falls in, counted from the window's start; `None` before it
    /// (a negative offset must not truncate towards zero into the first bucket). An index past
    /// the last bucket is the caller's to skip.
    pub fn period_of(&self, at: DateTime<Utc>) -> Option<usize> {
        let offset = (at - self.start).num_seconds();
        usize::try_from(offset.div_euclid(self.step().num_seconds().max(1))).ok()
    }
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// Sums of usage (hourly buckets or single records). Additions saturate: a sum never wraps.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_write_tokens: i64,
    pub images: i64,
    pub video_seconds: i64,
    /// Retail cost in nano-USD.
    pub cost: i64,
    /// Debited from the wallet, nano-USD (the ledger's spend).
    pub charged: i64,
    /// The partner's wholesale cost of the charges, nano-USD.
    pub wholesale: i64,
}

impl Totals {
    /// Adds one hourly bucket.
    pub fn add(&mut self, r: &usage_hourly::Model) {
        self.add_parts([
            r.requests,
            r.input_tokens,
            r.output_tokens,
            r.cached_tokens,
            r.cache_write_tokens,
            r.images,
            r.video_seconds,
            r.cost_nanos,
            r.charged_nanos,
            r.wholesale_nanos,
        ]);
    }

    /// Sums given in [`Totals`]' field order (requests, the four token counts, images, video
    /// seconds, cost, charged, wholesale).
    pub fn from_parts(p: [i64; 10]) -> Totals {
        let mut t = Totals::default();
        t.add_parts(p);
        t
    }

    /// Adds another sum.
    pub fn merge(&mut self, o: &Totals) {
        self.add_parts([
            o.requests,
            o.input_tokens,
            o.output_tokens,
            o.cached_tokens,
            o.cache_write_tokens,
            o.images,
            o.video_seconds,
            o.cost,
            o.charged,
            o.wholesale,
        ]);
    }

    /// These sums less `o`, a part of them (the lines not listed: a total less the listed).
    pub fn without(&self, o: &Totals) -> Totals {
        Totals {
            requests: self.requests.saturating_sub(o.requests),
            input_tokens: self.input_tokens.saturating_sub(o.input_tokens),
            output_tokens: self.output_tokens.saturating_sub(o.output_tokens),
            cached_tokens: self.cached_tokens.saturating_sub(o.cached_tokens),
            cache_write_tokens: self.cache_write_tokens.saturating_sub(o.cache_write_tokens),
            images: self.images.saturating_sub(o.images),
            video_seconds: self.video_seconds.saturating_sub(o.video_seconds),
            cost: self.cost.saturating_sub(o.cost),
            charged: self.charged.saturating_sub(o.charged),
            wholesale: self.wholesale.saturating_sub(o.wholesale),
        }
    }

    fn add_parts(&mut self, p: [i64; 10]) {
        let fields = [
            &mut self.requests,
            &mut self.input_tokens,
            &mut self.output_tokens,
            &mut self.cached_tokens,
            &mut self.cache_write_tokens,
            &mut self.images,
            &mut self.video_seconds,
            &mut self.cost,
            &mut self.charged,
            &mut self.wholesale,
        ];
        for (f, v) in fields.into_iter().zip(p) {
            *f = f.saturating_add(v);
        }
    }

    /// The cost as money.
    pub fn cost_usd(&self) -> NanoUsd {
        NanoUsd::from_nanos(self.cost)
    }

    /// The margin: what was charged less the wholesale cost of it.
    pub fn margin(&self) -> NanoUsd {
        NanoUsd::from_nanos(self.charged.saturating_sub(self.wholesale))
    }

    /// The billing API's shape of these sums.
    pub fn to_dto(&self) -> crate::dto::UsageTotals {
        crate::dto::UsageTotals {
            requests: self.requests,
            input_tokens: self.input_tokens,
            output_tokens: self.output_tokens,
            cache_tokens: self.cached_tokens,
            cache_write_tokens: self.cache_write_tokens,
            images: self.images,
            video_seconds: self.video_seconds,
            cost_usd: Usd(self.cost_usd()),
        }
    }
}

/// The hourly buckets of an organization (optionally one key) over a window.
pub async fn hourly_rows(
    db: &impl ConnectionTrait,
    organization_id: i64,
    api_key_id: Option<i64>,
    w: &Window,
) -> Result<Vec<usage_hourly::Model>, UsageError> {
    let mut q = usage_hourly::Entity::find()
        .filter(usage_hourly::Column::OrganizationId.eq(organization_id))
        .filter(usage_hourly::Column::HourStart.gte(w.start))
        .filter(usage_hourly::Column::HourStart.lt(w.end));
    if let Some(k) = api_key_id {
        q = q.filter(usage_hourly::Column::ApiKeyId.eq(k));
    }
    Ok(q.all(db).await?)
}

/// Usage over a window split by period and by one dimension (model, key, group: whatever `of`
/// maps a bucket to), for the console's usage page and its CSV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Breakdown<D: Ord> {
    /// Every period of the window, oldest first.
    pub periods: Vec<DateTime<Utc>>,
    /// Per dimension value: its sums per period (parallel to `periods`) and over the window.
    pub lines: BTreeMap<D, (Vec<Totals>, Totals)>,
    /// Per period, over every value (parallel to `periods`).
    pub per_period: Vec<Totals>,
    /// Over the whole window.
    pub total: Totals,
    /// The values not in `lines` when only the largest were read: how many, and their sums.
    pub folded: Option<(usize, Totals)>,
}

/// Splits `rows` (buckets inside `w`) by period and by `of`.
pub fn breakdown<D: Ord>(
    rows: &[usage_hourly::Model],
    w: &Window,
    of: impl Fn(&usage_hourly::Model) -> D,
) -> Breakdown<D> {
    let periods = w.periods();
    let mut out = Breakdown {
        per_period: vec![Totals::default(); periods.len()],
        periods,
        lines: BTreeMap::new(),
        total: Totals::default(),
        folded: None,
    };
    let n = out.periods.len();
    for r in rows {
        // Rows outside the window are skipped.
        let Some(i) = w.period_of(r.hour_start).filter(|&i| i < n) else {
            continue;
        };
        let line = out
            .lines
            .entry(of(r))
            .or_insert_with(|| (vec![Totals::default(); n], Totals::default()));
        line.0[i].add(r);
        line.1.add(r);
        out.per_period[i].add(r);
        out.total.add(r);
    }
    out
}

/// The buckets of an organization (optionally one key) over a window, every period listed.
pub async fn buckets(
    db: &impl ConnectionTrait,
    organization_id: i64,
    api_key_id: Option<i64>,
    w: Window,
) -> Result<UsageBuckets, UsageError> {
    let rows = hourly_rows(db, organization_id, api_key_id, &w).await?;
    let b = breakdown(&rows, &w, |r| r.api_key_id);
    let step = w.step();
    let buckets = b
        .periods
        .iter()
        .zip(&b.per_period)
        .enumerate()
        .map(|(i, (start, t))| UsageBucket {
            start_time: ts(*start),
            end_time: ts((*start + step).min(w.end)),
            burn_usd: Usd(t.cost_usd()),
            requests: t.requests,
            total_tokens: t.input_tokens.saturating_add(t.output_tokens),
            images: t.images,
            video_seconds: t.video_seconds,
            active_api_keys: b
                .lines
                .values()
                .filter(|(per, _)| per.get(i).is_some_and(|p| p.requests > 0))
                .count(),
        })
        .collect();
    Ok(UsageBuckets {
        granularity: match w.granularity {
            Granularity::Day => "day",
            Granularity::Hour => "hour",
        },
        start_time: ts(w.start),
        end_time: ts(w.end),
        buckets,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::services::usage_sums::whole_weeks;
    use chrono::{Datelike, NaiveDate};

    proptest::proptest! {
        /// A window's whole weeks and the days at its ends cover each of its days exactly once,
        /// and nothing else; the weeks are ISO weeks (from Monday).
        #[test]
        fn weeks_and_end_days_cover_a_window_exactly_once(start in 0u64..3_000, len in 1u64..400) {
            let base = NaiveDate::from_ymd_opt(2020, 1, 1).unwrap();
            let first = base + chrono::Days::new(start);
            let end = first + chrono::Days::new(len);
            let mut covered: Vec<NaiveDate> = Vec::new();
            let day_range = |from: NaiveDate, to: NaiveDate| from.iter_days().take_while(move |d| *d < to);
            match whole_weeks(first, end) {
                Some((from, to)) => {
                    proptest::prop_assert_eq!(from.weekday(), chrono::Weekday::Mon);
                    proptest::prop_assert_eq!(to.weekday(), chrono::Weekday::Mon);
                    proptest::prop_assert!(first <= from && to <= end);
                    // At most six days at each end.
                    proptest::prop_assert!((from - first).num_days() < 7 && (end - to).num_days() < 7);
                    covered.extend(day_range(first, from));
                    covered.extend(day_range(from, to));
                    covered.extend(day_range(to, end));
                }
                None => {
                    proptest::prop_assert!(len < 13);
                    covered.extend(day_range(first, end));
                }
            }
            let expected: Vec<NaiveDate> = day_range(first, end).collect();
            proptest::prop_assert_eq!(covered, expected);
        }
    }

    fn q(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn now() -> DateTime<Utc> {
        DateTime::parse_from_rfc3339("2026-11-22T10:30:00Z")
            .unwrap()
            .with_timezone(&Utc)
    }

    #[test]
    fn defaults_and_rounding() {
        let w = Window::parse(&q(&[]), now()).unwrap();
        assert_eq!(w.granularity, Granularity::Day);
        assert_eq!(ts(w.start), "2026-11-15T00:00:00Z");
        let w = Window::parse(
            &q(&[
                ("granularity", "hour"),
                ("start_time", "2026-11-22T08:45:10Z"),
            ]),
            now(),
        )
        .unwrap();
        assert_eq!(ts(w.start), "2026-11-22T08:00:00Z");
        let w = Window::parse(
            &q(&[
                ("start_time", "2026-11-20T01:00:00+02:00"),
                ("end_time", "2026-11-21T00:00:00Z"),
            ]),
            now(),
        )
        .unwrap();
        assert_eq!(
            ts(w.start),
            "2026-11-19T00:00:00Z",
            "offsets convert to UTC before rounding"
        );
    }

    #[test]
    fn bad_windows() {
        for pairs in [vec![("granularity", "minute")], vec![("granularity", "")]] {
            assert_eq!(
                Window::parse(&q(&pairs), now()),
                Err(UsageError::Granularity)
            );
        }
        for pairs in [
            vec![("start_time", "yesterday")],
            vec![("start_time", "2026-11-22")],
            vec![
                ("start_time", "2026-11-22T00:00:00Z"),
                ("end_time", "2026-11-21T00:00:00Z"),
            ],
            vec![
                ("start_time", "2025-01-01T00:00:00Z"),
                ("end_time", "2026-11-21T00:00:00Z"),
            ],
            vec![
                ("granularity", "hour"),
                ("start_time", "2026-11-01T00:00:00Z"),
            ],
        ] {
            assert!(
                matches!(Window::parse(&q(&pairs), now()), Err(UsageError::Window(_))),
                "{pairs:?}"
            );
        }
        let ok = Window::parse(
            &q(&[
                ("start_time", "2025-11-22T00:00:00Z"),
                ("end_time", "2026-11-22T00:00:00Z"),
            ]),
            now(),
        );
        assert!(ok.is_ok(), "366 days is allowed");
    }

    fn bucket(key: i64, model: &str, hour: &str, cost: i64) -> usage_hourly::Model {
        usage_hourly::Model {
            id: 0,
            organization_id: 1,
            api_key_id: key,
            model: model.into(),
            hour_start: DateTime::parse_from_rfc3339(hour)
                .unwrap()
                .with_timezone(&Utc),
            requests: 1,
            input_tokens: 10,
            output_tokens: 5,
            cached_tokens: 0,
            cache_write_tokens: 0,
            estimated_requests: 0,
            cost_nanos: cost,
            charged_nanos: cost,
            wholesale_nanos: cost / 2,
            images: 0,
            video_seconds: 0,
            failed_requests: 0,
        }
    }

    #[test]
    fn whole_days_windows() {
        let d = |s: &str| chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        let w = Window::days(Granularity::Hour, d("2026-11-20"), d("2026-11-26")).unwrap();
        assert_eq!(
            (ts(w.start), ts(w.end)),
            ("2026-11-20T00:00:00Z".into(), "2026-11-27T00:00:00Z".into())
        );
        assert!(Window::days(Granularity::Hour, d("2026-11-19"), d("2026-11-26")).is_err());
        assert!(
            Window::days(Granularity::Day, d("2025-11-26"), d("2026-11-26")).is_ok(),
            "366 days"
        );
        assert!(Window::days(Granularity::Day, d("2025-11-25"), d("2026-11-26")).is_err());
        assert!(Window::days(Granularity::Day, d("2026-11-26"), d("2026-11-25")).is_err());
    }

    #[test]
    fn breakdown_sums_by_period_and_line() {
        let d = |s: &str| chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        let w = Window::days(Granularity::Day, d("2026-11-20"), d("2026-11-22")).unwrap();
        let rows = [
            bucket(1, "a", "2026-11-20T03:00:00Z", 100),
            bucket(1, "a", "2026-11-20T04:00:00Z", 50),
            bucket(2, "b", "2026-11-22T23:00:00Z", 7),
            // Outside the window: ignored.
            bucket(2, "b", "2026-11-23T00:00:00Z", 1_000),
            bucket(2, "b", "2026-11-19T23:00:00Z", 1_000),
        ];
        let b = breakdown(&rows, &w, |r| r.model.clone());
        assert_eq!(b.periods.len(), 3);
        assert_eq!(
            b.per_period.iter().map(|t| t.cost).collect::<Vec<_>>(),
            vec![150, 0, 7]
        );
        assert_eq!(b.total.cost, 157);
        assert_eq!(b.total.requests, 3);
        assert_eq!(b.lines["a"].1.cost, 150);
        assert_eq!(b.lines["b"].0[2].requests, 1);
        // Per line sums add up to the total, per period and overall.
        let mut sum = Totals::default();
        for (_, t) in b.lines.values() {
            sum.merge(t);
        }
        assert_eq!(sum, b.total);
    }
}
