//! A partner's usage, its customers together: per cell (period × line), the summary (charged,
//! wholesale, margin) and the periods a partner's figures cover.

use super::usage::*;
use super::usage_sums::*;
use chrono::{DateTime, Utc};
use sea_orm::ConnectionTrait;
use std::collections::HashMap;

/// One cell of a partner's usage: a value of a dimension (as text: an id or a model) in one
/// period, with its sums.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cell {
    pub value: String,
    pub period: DateTime<Utc>,
    pub totals: Totals,
}

/// Every cell of partner `partner_id`'s usage of `dim` in window `w` (whole UTC days), oldest
/// period first and by value within it, streamed from the rollups: per day from the daily
/// rollup; per hour from the hourly rollup (models, groups) or the customers' own buckets
/// (customers, keys). A partner's CSV, however many customers it has, is never held whole.
pub async fn partner_cells<'a, C>(
    db: &'a C,
    partner_id: i64,
    w: &Window,
    dim: Dim,
) -> Result<impl futures_util::Stream<Item = Result<Cell, UsageError>> + Send + 'a, UsageError>
where
    C: ConnectionTrait + sea_orm::StreamTrait + Send + Sync,
{
    use futures_util::StreamExt;
    use sea_orm::FromQueryResult;
    let source = Source::of_periods(w.granularity, dim);
    let ask = Ask {
        by_value: true,
        by_period: true,
        ordered: true,
        ..Ask::default()
    };
    let statement = grouped_statement(
        ConnectionTrait::get_database_backend(db),
        partner_id,
        w,
        source,
        dim,
        ask,
    )?;
    let rows = SumRow::find_by_statement(statement).stream(db).await?;
    Ok(rows.filter_map(|row| async move {
        match row {
            Err(e) => Some(Err(UsageError::from(e))),
            Ok(r) => {
                let period = r.h.as_deref().and_then(parse_db_time)?;
                Some(Ok(Cell {
                    value: r.k.clone().unwrap_or_default(),
                    period,
                    totals: r.totals(),
                }))
            }
        }
    }))
}

/// A partner's usage over a window for its pages, grouped by the database: the window's totals
/// per period, the largest values of the dimension with their totals, and how many values there
/// are, so nothing per bucket (nor per value past the largest) is read into memory. Values are
/// the dimension as text (an id or a model).
pub struct PartnerSummary {
    pub periods: Vec<DateTime<Utc>>,
    pub per_period: Vec<Totals>,
    /// The `largest` values by charge (ties by value), largest first, with their totals.
    pub lines: Vec<(String, Totals)>,
    /// How many values have usage in the window (`lines` and the rest).
    pub values: usize,
    pub total: Totals,
}

/// The totals per period (from the models' daily or hourly sums) and of the `largest` values of
/// `dim` by charge, from the partner's rollups (the lines from its weeks and days; `w` is whole
/// UTC days). The values are ranked by their charge alone first, then only the largest are
/// summed in full: a partner's every customer is a ranking's row, not ten sums'.
pub async fn partner_summary(
    db: &impl ConnectionTrait,
    partner_id: i64,
    w: &Window,
    dim: Dim,
    largest: u64,
) -> Result<PartnerSummary, UsageError> {
    let ranked = grouped(
        db,
        partner_id,
        w,
        Source::Lines,
        dim,
        Ask {
            by_value: true,
            largest: Some(largest),
            ..Ask::default()
        },
    )
    .await?;
    let values = ranked
        .first()
        .and_then(|r| r.values)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(0);
    let top: Vec<String> = ranked.iter().filter_map(|r| r.k.clone()).collect();
    let mut sums: HashMap<String, Totals> = if top.is_empty() {
        HashMap::new()
    } else {
        let only = Ask {
            by_value: true,
            only: Some(&top),
            ..Ask::default()
        };
        grouped(db, partner_id, w, Source::Lines, dim, only)
            .await?
            .into_iter()
            .map(|r| (r.k.clone().unwrap_or_default(), r.totals()))
            .collect()
    };
    let lines = top
        .into_iter()
        .map(|v| {
            let t = sums.remove(&v).unwrap_or_default();
            (v, t)
        })
        .collect();
    let source = match w.granularity {
        Granularity::Day => Source::Daily,
        Granularity::Hour => Source::Hourly,
    };
    let by_period = Ask {
        by_period: true,
        ..Ask::default()
    };
    let periods = grouped(db, partner_id, w, source, Dim::Model, by_period).await?;
    let (periods, per_period) = fold_hours(w, periods.iter().map(|r| (r.h.as_deref(), r.totals())));
    let mut total = Totals::default();
    for t in &per_period {
        total.merge(t);
    }
    Ok(PartnerSummary {
        periods,
        per_period,
        lines,
        values,
        total,
    })
}

/// The per-period sums of the values `values` of `dim` (the chart's lines), each value apart:
/// by day from the daily rollup; by hour from the hourly rollup (models, groups) or from the
/// organizations' own buckets (customers, keys).
pub async fn partner_periods_of(
    db: &impl ConnectionTrait,
    partner_id: i64,
    w: &Window,
    dim: Dim,
    values: &[String],
) -> Result<HashMap<String, Vec<Totals>>, UsageError> {
    let mut out = HashMap::new();
    if values.is_empty() {
        return Ok(out);
    }
    let source = Source::of_periods(w.granularity, dim);
    let ask = Ask {
        by_value: true,
        by_period: true,
        only: Some(values),
        ..Ask::default()
    };
    let rows = grouped(db, partner_id, w, source, dim, ask).await?;
    let mut by_value: HashMap<String, Vec<(Option<String>, Totals)>> = HashMap::new();
    for r in rows {
        by_value
            .entry(r.k.clone().unwrap_or_default())
            .or_default()
            .push((r.h.clone(), r.totals()));
    }
    for (value, hours) in by_value {
        let (_, per) = fold_hours(w, hours.iter().map(|(h, t)| (h.as_deref(), *t)));
        out.insert(value, per);
    }
    Ok(out)
}
