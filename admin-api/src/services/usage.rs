//! Usage buckets for the partner usage routes, read from the hourly buckets the settler writes.
//!
//! Window rules (SPEC "GET usage routes"): `granularity` is `day` (default; buckets per UTC day,
//! default last 7 days, at most 366) or `hour` (per UTC hour, `start_time` rounded down to the
//! hour, default last 24 hours, at most 7 days). `start_time`/`end_time` are RFC 3339 timestamps;
//! an offset other than `Z` is accepted and converted to UTC. `end_time` defaults to now,
//! `start_time` to `end_time` minus the default window; `end_time` must be after `start_time`.

use crate::dto::{UsageBucket, UsageBuckets, Usd};
use crate::error::ApiError;
use chrono::{DateTime, Duration, DurationRound, SecondsFormat, TimeDelta, Utc};
use entities::usage_hourly;
use money::NanoUsd;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter};
use std::collections::{BTreeMap, BTreeSet, HashMap};

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

fn parse_time(value: Option<&String>, name: &str) -> Result<Option<DateTime<Utc>>, ApiError> {
    value
        .map(|v| {
            DateTime::parse_from_rfc3339(v.trim())
                .map(|t| t.with_timezone(&Utc))
                .map_err(|_| {
                    ApiError::InvalidUsageWindow(format!(
                        "{name} must be an ISO 8601 timestamp such as 2026-01-31T00:00:00Z"
                    ))
                })
        })
        .transpose()
}

impl Window {
    /// Validates the query parameters at time `now`.
    pub fn parse(query: &HashMap<String, String>, now: DateTime<Utc>) -> Result<Window, ApiError> {
        let granularity = match query.get("granularity").map(String::as_str) {
            None | Some("day") => Granularity::Day,
            Some("hour") => Granularity::Hour,
            Some(_) => return Err(ApiError::InvalidUsageGranularity),
        };
        let (default, longest, step) = match granularity {
            Granularity::Day => (Duration::days(7), Duration::days(366), TimeDelta::days(1)),
            Granularity::Hour => (Duration::hours(24), Duration::days(7), TimeDelta::hours(1)),
        };
        let end = parse_time(query.get("end_time"), "end_time")?.unwrap_or(now);
        let start = parse_time(query.get("start_time"), "start_time")?.unwrap_or(end - default);
        let start = start
            .duration_trunc(step)
            .map_err(|_| ApiError::InvalidUsageWindow("start_time is out of range".into()))?;
        if end <= start {
            return Err(ApiError::InvalidUsageWindow(
                "end_time must be after start_time".into(),
            ));
        }
        if end - start > longest {
            return Err(ApiError::InvalidUsageWindow(format!(
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

    fn step(&self) -> TimeDelta {
        match self.granularity {
            Granularity::Day => TimeDelta::days(1),
            Granularity::Hour => TimeDelta::hours(1),
        }
    }
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[derive(Default)]
struct Bucket {
    cost: i64,
    requests: i64,
    tokens: i64,
    images: i64,
    video_seconds: i64,
    keys: BTreeSet<i64>,
}

/// The buckets of an organization (optionally one key) over a window, every period listed.
pub async fn buckets(
    db: &impl ConnectionTrait,
    organization_id: i64,
    api_key_id: Option<i64>,
    w: Window,
) -> Result<UsageBuckets, ApiError> {
    let mut q = usage_hourly::Entity::find()
        .filter(usage_hourly::Column::OrganizationId.eq(organization_id))
        .filter(usage_hourly::Column::HourStart.gte(w.start))
        .filter(usage_hourly::Column::HourStart.lt(w.end));
    if let Some(k) = api_key_id {
        q = q.filter(usage_hourly::Column::ApiKeyId.eq(k));
    }
    let rows = q.all(db).await?;
    let step = w.step();
    let mut map: BTreeMap<DateTime<Utc>, Bucket> = BTreeMap::new();
    let mut t = w.start;
    while t < w.end {
        map.insert(t, Bucket::default());
        t += step;
    }
    for r in rows {
        let key = r.hour_start.duration_trunc(step).unwrap_or(r.hour_start);
        let b = map.entry(key).or_default();
        b.cost += r.cost_nanos;
        b.requests += r.requests;
        b.tokens += r.input_tokens + r.output_tokens;
        b.images += r.images;
        b.video_seconds += r.video_seconds;
        if r.requests > 0 {
            b.keys.insert(r.api_key_id);
        }
    }
    let buckets = map
        .into_iter()
        .map(|(start, b)| UsageBucket {
            start_time: ts(start),
            end_time: ts((start + step).min(w.end)),
            burn_usd: Usd(NanoUsd::from_nanos(b.cost)),
            requests: b.requests,
            total_tokens: b.tokens,
            images: b.images,
            video_seconds: b.video_seconds,
            active_api_keys: b.keys.len(),
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
                Err(ApiError::InvalidUsageGranularity)
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
                matches!(
                    Window::parse(&q(&pairs), now()),
                    Err(ApiError::InvalidUsageWindow(_))
                ),
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
}
