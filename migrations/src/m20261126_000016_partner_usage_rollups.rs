//! A partner's usage, rolled up for its dashboard (issue 29): the usage pages of a partner with
//! 10,000 customers and a million calls a month must answer in well under 200 ms, and grouping
//! the window's hourly buckets of every customer (one per organization, key, model and hour:
//! about one per call at that size) cannot.
//!
//! - `partner_usage`: one row per partner, dimension, period and value of the dimension —
//!   `customer` (the organization's id in `ref_id`), `key` (the key's id), `group` (the key's
//!   group id) or `model` (its name in `model`; `ref_id` 0). The other of `ref_id` / `model` is 0
//!   or empty. A period is a UTC day (`span_days` 1, `day` that date) or an ISO week (`span_days`
//!   7, `day` its Monday). A window of whole days reads its whole weeks' rows and the days at its
//!   ends: a 30-day window at most about 10 rows per value, where days alone would be 30.
//! - `partner_usage_hourly`: the same per UTC hour, for the low-cardinality dimensions only
//!   (`group`, `model`): the hourly charts' period totals. Hourly lines of one customer or key read
//!   that organization's own buckets through `usage_hourly`'s index.
//!
//! The settler adds to both in the transaction that writes the usage records, the hourly buckets
//! and the ledger's postings, so the rollups equal the buckets (and the ledger) exactly. Existing
//! buckets of partners' customers are rolled up here.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DbBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden, Clone, Copy)]
enum PartnerUsage {
    Table,
    SpanDays,
    Day,
}

#[derive(DeriveIden, Clone, Copy)]
enum PartnerUsageHourly {
    Table,
    HourStart,
}

#[derive(DeriveIden, Clone, Copy)]
enum Col {
    PartnerId,
    Dim,
    RefId,
    Model,
    Requests,
    InputTokens,
    OutputTokens,
    CachedTokens,
    CacheWriteTokens,
    EstimatedRequests,
    CostNanos,
    ChargedNanos,
    WholesaleNanos,
    Images,
    VideoSeconds,
}

const SUMS: [Col; 11] = [
    Col::Requests,
    Col::InputTokens,
    Col::OutputTokens,
    Col::CachedTokens,
    Col::CacheWriteTokens,
    Col::EstimatedRequests,
    Col::CostNanos,
    Col::ChargedNanos,
    Col::WholesaleNanos,
    Col::Images,
    Col::VideoSeconds,
];

/// A rollup table: `period` are its period columns (after the partner and dimension).
fn rollup(table: impl IntoIden, period: Vec<ColumnDef>) -> TableCreateStatement {
    let names: Vec<String> = period.iter().map(ColumnDef::get_column_name).collect();
    let mut t = Table::create();
    t.table(table)
        .if_not_exists()
        .col(big_integer(Col::PartnerId))
        .col(string_len(Col::Dim, 16));
    for c in period {
        t.col(c);
    }
    t.col(big_integer(Col::RefId)).col(string(Col::Model));
    for c in SUMS {
        t.col(big_integer(c));
    }
    let mut key = Index::create();
    key.col(Col::PartnerId).col(Col::Dim);
    for n in names {
        key.col(Alias::new(n));
    }
    t.primary_key(key.col(Col::RefId).col(Col::Model));
    t.to_owned()
}

/// The rollups of every partner customer's existing hourly buckets, as `INSERT … SELECT`
/// statements for `backend` (also used by the dashboard benchmark after it seeds buckets in
/// SQL). A bucket's day is its hour's UTC date, its week that date's ISO week (from Monday), its
/// group its key's.
pub fn backfill(backend: DbBackend) -> Vec<String> {
    let (day, week) = match backend {
        DbBackend::Postgres => (
            "CAST(h.hour_start AT TIME ZONE 'UTC' AS DATE)",
            "CAST(date_trunc('week', h.hour_start AT TIME ZONE 'UTC') AS DATE)",
        ),
        // Timestamps are stored as ISO 8601 text: the date is their first ten characters (and
        // dates are stored as that text).
        _ => (
            "substr(h.hour_start, 1, 10)",
            "date(substr(h.hour_start, 1, 10), '-6 days', 'weekday 1')",
        ),
    };
    let sums = "sum(h.requests), sum(h.input_tokens), sum(h.output_tokens), sum(h.cached_tokens), \
         sum(h.cache_write_tokens), sum(h.estimated_requests), sum(h.cost_nanos), \
         sum(h.charged_nanos), sum(h.wholesale_nanos), sum(h.images), sum(h.video_seconds)";
    let columns = "partner_id, dim, {period}, ref_id, model, requests, input_tokens, \
         output_tokens, cached_tokens, cache_write_tokens, estimated_requests, cost_nanos, \
         charged_nanos, wholesale_nanos, images, video_seconds";
    let from = "FROM usage_hourly h JOIN customers c ON c.organization_id = h.organization_id \
         LEFT JOIN customer_api_keys k ON k.id = h.api_key_id";
    let every: &[(&str, &str, &str)] = &[
        ("customer", "h.organization_id", "''"),
        ("key", "h.api_key_id", "''"),
        ("group", "coalesce(k.group_id, 0)", "''"),
        ("model", "0", "h.model"),
    ];
    let mut out = Vec::new();
    for (table, period_cols, span, period, dims) in [
        ("partner_usage", "span_days, day", "1, ", day, every),
        ("partner_usage", "span_days, day", "7, ", week, every),
        (
            "partner_usage_hourly",
            "hour_start",
            "",
            "h.hour_start",
            &every[2..],
        ),
    ] {
        for (dim, ref_id, model) in dims {
            // Constants are not grouped by (PostgreSQL refuses them in GROUP BY).
            let group_by: Vec<&str> = ["c.partner_id", period, ref_id, model]
                .into_iter()
                .filter(|e| *e != "0" && *e != "''")
                .collect();
            out.push(format!(
                "INSERT INTO {table} ({}) SELECT c.partner_id, '{dim}', {span}{period}, \
                 {ref_id}, {model}, {sums} {from} GROUP BY {}",
                columns.replace("{period}", period_cols),
                group_by.join(", ")
            ));
        }
    }
    out
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(rollup(
                PartnerUsage::Table,
                vec![
                    small_integer(PartnerUsage::SpanDays),
                    date(PartnerUsage::Day),
                ],
            ))
            .await?;
        manager
            .create_table(rollup(
                PartnerUsageHourly::Table,
                vec![timestamp_with_time_zone(PartnerUsageHourly::HourStart)],
            ))
            .await?;
        // A line's days (the chart's lines): by value first.
        manager
            .create_index(
                Index::create()
                    .name("ix_partner_usage_line")
                    .table(PartnerUsage::Table)
                    .col(Col::PartnerId)
                    .col(Col::Dim)
                    .col(PartnerUsage::SpanDays)
                    .col(Col::RefId)
                    .col(Col::Model)
                    .col(PartnerUsage::Day)
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        for sql in backfill(manager.get_database_backend()) {
            db.execute_unprepared(&sql).await?;
        }
        Ok(())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(PartnerUsageHourly::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(PartnerUsage::Table).to_owned())
            .await
    }
}
