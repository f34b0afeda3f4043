//! The operator's margin (issue 47): per UTC day × supplier account × served model, the calls
//! and attempts, what the supplier served and bills, what partners owe at wholesale, what
//! customers were charged, and what is left to the operator. Read from the usage records (each
//! carries its answering attempt's supplier cost) and the attempts calls moved on from
//! (`supplier_attempts`). Operator-only: partners never see supplier prices.
//!
//! The operator's revenue of a call is what a partner owes for it (wholesale) when a partner
//! resells its organization, else what the customer was charged (retail). A supplier cost that
//! is unknown (a price not configured) is never counted as zero: the row says how many calls
//! lack one and its margin is unknown.

use chrono::{DateTime, NaiveDate, TimeDelta, Utc};
use entities::{customers, supplier_attempts, usage_records};
use money::NanoUsd;
use sea_orm::sea_query::{Expr, ExprTrait, Func, Query};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, FromQueryResult, QueryFilter, QuerySelect,
};
use std::collections::BTreeMap;

/// The longest range one report reads, in days.
pub const MAX_DAYS: i64 = 92;

/// One day × account × model.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarginRow {
    pub day: NaiveDate,
    pub account: String,
    pub model: String,
    /// Calls this account answered (its usage records).
    pub calls: i64,
    /// Attempts on this account: its calls plus the attempts calls moved on from here.
    pub attempts: i64,
    /// What the supplier served: the answering attempts' usage plus what abandoned attempts
    /// served before they broke (`supplier_attempts`).
    pub input_tokens: i64,
    pub output_tokens: i64,
    pub cached_tokens: i64,
    pub cache_write_tokens: i64,
    pub images: i64,
    pub video_seconds: i64,
    /// The supplier's bill for the attempts whose cost is known (answering and abandoned).
    pub supplier_cost: NanoUsd,
    /// Answering and abandoned attempts whose supplier cost is unknown (a price not
    /// configured, or settled before it was recorded).
    pub supplier_cost_unknown: i64,
    /// What partners owe for these calls.
    pub wholesale: NanoUsd,
    /// What customers were charged.
    pub retail: NanoUsd,
    /// The operator's revenue: wholesale for resold organizations, retail for the others.
    pub revenue: NanoUsd,
}

impl MarginRow {
    /// Revenue less the supplier's bill; `None` when a supplier cost in the row is unknown.
    pub fn margin(&self) -> Option<NanoUsd> {
        (self.supplier_cost_unknown == 0)
            .then(|| self.revenue.checked_sub(self.supplier_cost))
            .flatten()
    }

    fn add(&mut self, o: &MarginRow) -> Option<()> {
        self.calls += o.calls;
        self.attempts += o.attempts;
        self.input_tokens += o.input_tokens;
        self.output_tokens += o.output_tokens;
        self.cached_tokens += o.cached_tokens;
        self.cache_write_tokens += o.cache_write_tokens;
        self.images += o.images;
        self.video_seconds += o.video_seconds;
        self.supplier_cost = self.supplier_cost.checked_add(o.supplier_cost)?;
        self.supplier_cost_unknown += o.supplier_cost_unknown;
        self.wholesale = self.wholesale.checked_add(o.wholesale)?;
        self.retail = self.retail.checked_add(o.retail)?;
        self.revenue = self.revenue.checked_add(o.revenue)?;
        Some(())
    }
}

/// A report: its rows (by day, account, model) and their totals (day, account and model empty).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Margin {
    pub rows: Vec<MarginRow>,
    pub totals: MarginRow,
}

#[derive(Debug, FromQueryResult)]
struct Sums {
    account_id: String,
    model_served: String,
    calls: i64,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
    cached_tokens: Option<i64>,
    cache_write_tokens: Option<i64>,
    images: Option<i64>,
    video_seconds: Option<i64>,
    supplier: Option<i64>,
    unknown: Option<i64>,
    wholesale: Option<i64>,
    charged: Option<i64>,
}

/// The report of the UTC days `from` to `to`, both included (at most [`MAX_DAYS`]).
pub async fn report(
    db: &impl ConnectionTrait,
    from: NaiveDate,
    to: NaiveDate,
) -> Result<Margin, DbErr> {
    let days = (to - from).num_days() + 1;
    if !(1..=MAX_DAYS).contains(&days) {
        return Err(DbErr::Custom(format!(
            "the range must be 1 to {MAX_DAYS} days, from before to"
        )));
    }
    let mut rows: BTreeMap<(NaiveDate, String, String), MarginRow> = BTreeMap::new();
    let overflow = || DbErr::Custom("a sum does not fit in 64-bit nano-USD".into());
    for day in from.iter_days().take(usize::try_from(days).unwrap_or(0)) {
        let start = day
            .and_hms_opt(0, 0, 0)
            .map(|t| t.and_utc())
            .ok_or_else(overflow)?;
        let end = start + TimeDelta::days(1);
        for resold in [true, false] {
            for s in sums(db, start, end, resold).await? {
                let row = rows
                    .entry((day, s.account_id.clone(), s.model_served.clone()))
                    .or_insert_with(|| MarginRow {
                        day,
                        account: s.account_id.clone(),
                        model: s.model_served.clone(),
                        ..MarginRow::default()
                    });
                row.add(&of(&s, resold, day)).ok_or_else(overflow)?;
            }
        }
        for m in moved_on(db, start, end).await? {
            let row = rows
                .entry((day, m.account_id.clone(), m.model.clone()))
                .or_insert_with(|| MarginRow {
                    day,
                    account: m.account_id.clone(),
                    model: m.model.clone(),
                    ..MarginRow::default()
                });
            let v = |x: Option<i64>| x.unwrap_or(0);
            row.add(&MarginRow {
                attempts: m.n,
                input_tokens: v(m.input_tokens),
                output_tokens: v(m.output_tokens),
                cached_tokens: v(m.cached_tokens),
                cache_write_tokens: v(m.cache_write_tokens),
                images: v(m.images),
                supplier_cost: NanoUsd::from_nanos(v(m.supplier)),
                supplier_cost_unknown: v(m.unknown),
                ..MarginRow::default()
            })
            .ok_or_else(overflow)?;
        }
    }
    let mut totals = MarginRow {
        day: from,
        ..MarginRow::default()
    };
    for row in rows.values() {
        totals.add(row).ok_or_else(overflow)?;
    }
    Ok(Margin {
        rows: rows.into_values().collect(),
        totals,
    })
}

fn of(s: &Sums, resold: bool, day: NaiveDate) -> MarginRow {
    let v = |x: Option<i64>| x.unwrap_or(0);
    let (wholesale, retail) = (
        NanoUsd::from_nanos(v(s.wholesale)),
        NanoUsd::from_nanos(v(s.charged)),
    );
    MarginRow {
        day,
        account: s.account_id.clone(),
        model: s.model_served.clone(),
        calls: s.calls,
        attempts: s.calls,
        input_tokens: v(s.input_tokens),
        output_tokens: v(s.output_tokens),
        cached_tokens: v(s.cached_tokens),
        cache_write_tokens: v(s.cache_write_tokens),
        images: v(s.images),
        video_seconds: v(s.video_seconds),
        supplier_cost: NanoUsd::from_nanos(v(s.supplier)),
        supplier_cost_unknown: v(s.unknown),
        wholesale,
        retail,
        revenue: if resold { wholesale } else { retail },
    }
}

/// A day's usage records of resold (or direct) organizations, summed by account and model.
async fn sums(
    db: &impl ConnectionTrait,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
    resold: bool,
) -> Result<Vec<Sums>, DbErr> {
    use usage_records::Column as C;
    let sum = |c: C| Func::sum(Expr::col(c)).cast_as("BIGINT");
    let partnered = Query::select()
        .column(customers::Column::OrganizationId)
        .from(customers::Entity)
        .to_owned();
    let org = Expr::col(C::OrganizationId);
    let q = usage_records::Entity::find()
        .select_only()
        .column(C::AccountId)
        .column(C::ModelServed)
        .column_as(C::Id.count(), "calls")
        .column_as(sum(C::InputTokens), "input_tokens")
        .column_as(sum(C::OutputTokens), "output_tokens")
        .column_as(sum(C::CachedTokens), "cached_tokens")
        .column_as(sum(C::CacheWriteTokens), "cache_write_tokens")
        .column_as(sum(C::Images), "images")
        .column_as(sum(C::VideoSeconds), "video_seconds")
        .column_as(sum(C::SupplierCostNanos), "supplier")
        .column_as(
            Func::sum(Expr::case(Expr::col(C::SupplierCostNanos).is_null(), 1).finally(0))
                .cast_as("BIGINT"),
            "unknown",
        )
        .column_as(sum(C::WholesaleNanos), "wholesale")
        .column_as(sum(C::ChargedNanos), "charged")
        .filter(C::StartedAt.gte(start))
        .filter(C::StartedAt.lt(end))
        .filter(if resold {
            org.in_subquery(partnered)
        } else {
            org.not_in_subquery(partnered)
        })
        .group_by(C::AccountId)
        .group_by(C::ModelServed);
    q.into_model::<Sums>().all(db).await
}

/// The attempts of a day that calls moved on from, by account and model.
#[derive(Debug, FromQueryResult)]
struct MovedOn {
    account_id: String,
    model: String,
    n: i64,
    input_tokens: Option<i64>,
    output_tokens: Option<i64>,
    cached_tokens: Option<i64>,
    cache_write_tokens: Option<i64>,
    images: Option<i64>,
    supplier: Option<i64>,
    unknown: Option<i64>,
}

/// A day's attempts calls moved on from, summed by account and model: what abandoned ones
/// served and cost (refused and unreachable ones are zeros).
async fn moved_on(
    db: &impl ConnectionTrait,
    start: DateTime<Utc>,
    end: DateTime<Utc>,
) -> Result<Vec<MovedOn>, DbErr> {
    use supplier_attempts::Column as C;
    let sum = |c: C| Func::sum(Expr::col(c)).cast_as("BIGINT");
    supplier_attempts::Entity::find()
        .select_only()
        .column(C::AccountId)
        .column(C::Model)
        .column_as(C::Id.count(), "n")
        .column_as(sum(C::InputTokens), "input_tokens")
        .column_as(sum(C::OutputTokens), "output_tokens")
        .column_as(sum(C::CachedTokens), "cached_tokens")
        .column_as(sum(C::CacheWriteTokens), "cache_write_tokens")
        .column_as(sum(C::Images), "images")
        .column_as(sum(C::SupplierCostNanos), "supplier")
        .column_as(
            Func::sum(Expr::case(Expr::col(C::SupplierCostNanos).is_null(), 1).finally(0))
                .cast_as("BIGINT"),
            "unknown",
        )
        .filter(C::StartedAt.gte(start))
        .filter(C::StartedAt.lt(end))
        .group_by(C::AccountId)
        .group_by(C::Model)
        .into_model::<MovedOn>()
        .all(db)
        .await
}
