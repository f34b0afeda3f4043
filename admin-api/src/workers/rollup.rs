//! The hourly buckets the settler writes with a batch: one upsert per organization, key, model
//! and hour (the figures the billing API, the consoles and statements read), and the per-period
//! rollups beside them.

use super::batch::{Charge, started_at};
use super::wholesale::Partners;
use chrono::{DateTime, Datelike, DurationRound, NaiveDate, TimeDelta, Utc};
use money::NanoUsd;
use opstate::{Measurement, UsageEvent};
use sea_orm::{ConnectionTrait, DbBackend, DbErr, Statement};

/// The hourly sums of a batch's events for one organization, key, model and hour.
#[derive(Default)]
pub(super) struct Bucket {
    pub(super) requests: i64,
    pub(super) charged: i64,
    pub(super) wholesale: i64,
    pub(super) input: i64,
    pub(super) output: i64,
    pub(super) cached: i64,
    pub(super) cache_write: i64,
    pub(super) estimated: i64,
    pub(super) cost: i64,
    pub(super) images: i64,
    pub(super) video_seconds: i64,
    /// Failed requests (status 400 or above): the organization's buckets only.
    pub(super) failed: i64,
}

/// A partner rollup's row: partner, dimension, period, id and model (see migration 000016).
pub(super) type RollupKey<P> = (i64, &'static str, P, i64, String);

/// The sums' columns, in [`Bucket::values`]' order.
pub(super) const SUM_COLUMNS: [&str; 11] = [
    "requests",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "cache_write_tokens",
    "estimated_requests",
    "cost_nanos",
    "charged_nanos",
    "wholesale_nanos",
    "images",
    "video_seconds",
];

/// `col = table.col + EXCLUDED.col` for every sum: an upsert that adds.
pub(super) fn adding(table: &str) -> String {
    SUM_COLUMNS
        .iter()
        .map(|c| format!("{c} = {table}.{c} + EXCLUDED.{c}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The placeholder of parameter `n` (1-based) on `backend`.
pub(super) fn placeholder(backend: DbBackend, n: usize) -> String {
    match backend {
        DbBackend::Postgres => format!("${n}"),
        _ => "?".to_string(),
    }
}

impl Bucket {
    /// The sums, in [`SUM_COLUMNS`]' order.
    pub(super) fn values(&self) -> [i64; 11] {
        [
            self.requests,
            self.input,
            self.output,
            self.cached,
            self.cache_write,
            self.estimated,
            self.cost,
            self.charged,
            self.wholesale,
            self.images,
            self.video_seconds,
        ]
    }

    pub(super) fn add(&mut self, e: &UsageEvent, charged: NanoUsd, wholesale: NanoUsd) {
        let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
        self.requests += 1;
        self.failed += i64::from(e.status >= 400);
        self.charged = self.charged.saturating_add(charged.nanos());
        self.wholesale = self.wholesale.saturating_add(wholesale.nanos());
        self.input = self.input.saturating_add(tokens(e.input_tokens));
        self.output = self.output.saturating_add(tokens(e.output_tokens));
        self.cached = self.cached.saturating_add(tokens(e.cached_tokens));
        self.cache_write = self
            .cache_write
            .saturating_add(tokens(e.cache_write_tokens));
        self.estimated += i64::from(e.measurement == Measurement::Estimated);
        self.cost = self.cost.saturating_add(e.cost_nanos.nanos());
        self.images = self.images.saturating_add(tokens(e.images));
        self.video_seconds = self.video_seconds.saturating_add(tokens(e.video_seconds));
    }
}

pub(super) async fn add_to_bucket(
    db: &impl ConnectionTrait,
    org: i64,
    key: i64,
    model: &str,
    hour: DateTime<Utc>,
    b: &Bucket,
) -> Result<(), DbErr> {
    let backend = db.get_database_backend();
    let placeholders: Vec<String> = (1..=5 + SUM_COLUMNS.len())
        .map(|n| placeholder(backend, n))
        .collect();
    let sql = format!(
        "INSERT INTO usage_hourly (organization_id, api_key_id, model, hour_start, {}, failed_requests) \
         VALUES ({}) ON CONFLICT (organization_id, hour_start, api_key_id, model) DO UPDATE SET {}, \
         failed_requests = usage_hourly.failed_requests + EXCLUDED.failed_requests",
        SUM_COLUMNS.join(", "),
        placeholders.join(", "),
        adding("usage_hourly"),
    );
    let mut values: Vec<sea_orm::Value> = vec![org.into(), key.into(), model.into(), hour.into()];
    values.extend(b.values().map(sea_orm::Value::from));
    values.push(b.failed.into());
    db.execute_raw(Statement::from_sql_and_values(backend, sql, values))
        .await?;
    Ok(())
}

/// A rollup row's period: its column values.
pub(super) trait Period {
    fn values(&self) -> Vec<sea_orm::Value>;
}

impl Period for DateTime<Utc> {
    fn values(&self) -> Vec<sea_orm::Value> {
        vec![(*self).into()]
    }
}

impl Period for (i16, NaiveDate) {
    fn values(&self) -> Vec<sea_orm::Value> {
        vec![self.0.into(), self.1.into()]
    }
}

/// Adds `rows` to the partner rollup `table` (`period`: its period columns), many rows per
/// statement. The rows are distinct and in key order, so concurrent settlers lock them in one
/// order.
pub(super) async fn add_to_rollup<P: Period>(
    db: &impl ConnectionTrait,
    table: &str,
    period: &str,
    rows: &std::collections::BTreeMap<RollupKey<P>, Bucket>,
) -> Result<(), DbErr> {
    /// Rows per statement (at most 17 parameters each: far below either backend's limit).
    const ROWS: usize = 200;
    let backend = db.get_database_backend();
    let rows: Vec<_> = rows.iter().collect();
    let width = 4 + period.split(',').count() + SUM_COLUMNS.len();
    for chunk in rows.chunks(ROWS) {
        let tuples: Vec<String> = (0..chunk.len())
            .map(|r| {
                let p: Vec<String> = (1..=width)
                    .map(|i| placeholder(backend, r * width + i))
                    .collect();
                format!("({})", p.join(", "))
            })
            .collect();
        let sql = format!(
            "INSERT INTO {table} (partner_id, dim, {period}, ref_id, model, {}) VALUES {} \
             ON CONFLICT (partner_id, dim, {period}, ref_id, model) DO UPDATE SET {}",
            SUM_COLUMNS.join(", "),
            tuples.join(", "),
            adding(table),
        );
        let mut values: Vec<sea_orm::Value> = Vec::with_capacity(chunk.len() * width);
        for ((partner, dim, at, ref_id, model), b) in chunk {
            values.extend([(*partner).into(), (*dim).into()]);
            values.extend(at.values());
            values.extend([(*ref_id).into(), model.clone().into()]);
            values.extend(b.values().map(sea_orm::Value::from));
        }
        db.execute_raw(Statement::from_sql_and_values(backend, sql, values))
            .await?;
    }
    Ok(())
}

/// Adds a batch's new charges to the hourly buckets (one upsert per organization, key, model and
/// hour) and, for a partner's customers, to the partner's rollups (migration 000016) with the
/// same sums: per UTC day and ISO week by customer, key, group and model, and per hour by group
/// and model.
pub(super) async fn add_usage(
    txn: &impl ConnectionTrait,
    fresh: &[Charge<'_>],
    partners: &Partners,
) -> Result<(), DbErr> {
    use std::collections::BTreeMap;
    let mut buckets: BTreeMap<(i64, i64, String, DateTime<Utc>), Bucket> = BTreeMap::new();
    let mut daily: BTreeMap<RollupKey<(i16, NaiveDate)>, Bucket> = BTreeMap::new();
    let mut hourly: BTreeMap<RollupKey<DateTime<Utc>>, Bucket> = BTreeMap::new();
    for c in fresh {
        let e = c.event;
        let started = started_at(e);
        let hour = started
            .duration_trunc(TimeDelta::hours(1))
            .unwrap_or(started);
        buckets
            .entry((e.org_id, e.key_id, e.model_served.clone(), hour))
            .or_default()
            .add(e, c.charged, c.wholesale);
        let Some(Some(p)) = partners.get(&e.org_id) else {
            continue;
        };
        let day = hour.date_naive();
        let monday = day - chrono::Days::new(u64::from(day.weekday().num_days_from_monday()));
        let model = e.model_served.as_str();
        for period in [(1, day), (7, monday)] {
            for (dim, ref_id, model) in [
                ("customer", e.org_id, ""),
                ("key", e.key_id, ""),
                ("group", e.group_id, ""),
                ("model", 0, model),
            ] {
                daily
                    .entry((p.partner_id, dim, period, ref_id, model.to_string()))
                    .or_default()
                    .add(e, c.charged, c.wholesale);
            }
        }
        for (dim, ref_id, model) in [("group", e.group_id, ""), ("model", 0, model)] {
            hourly
                .entry((p.partner_id, dim, hour, ref_id, model.to_string()))
                .or_default()
                .add(e, c.charged, c.wholesale);
        }
    }
    for ((org, key, model, hour), b) in &buckets {
        add_to_bucket(txn, *org, *key, model, *hour, b).await?;
    }
    add_to_rollup(txn, "partner_usage", "span_days, day", &daily).await?;
    add_to_rollup(txn, "partner_usage_hourly", "hour_start", &hourly).await?;
    Ok(())
}
