//! Usage summed in the database, grouped by a dimension (`Dim`) and a period: what statements
//! and the partner's usage pages read (a day, a week or a month of hourly buckets or usage
//! lines, summed by SQL rather than in memory).

use super::usage::*;
use chrono::{DateTime, Datelike, NaiveDate, Utc};
use entities::usage_records;
use sea_orm::{ColumnTrait, ConnectionTrait};

/// A dimension the database groups a partner's usage by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dim {
    Organization,
    Model,
    Key,
    Group,
}

impl Dim {
    /// Its name in the partner rollups' `dim` column.
    pub fn name(self) -> &'static str {
        match self {
            Dim::Organization => "customer",
            Dim::Model => "model",
            Dim::Key => "key",
            Dim::Group => "group",
        }
    }
}

/// One grouped row: the group's key (a dimension value as text, or an hour) and its sums.
#[derive(Debug, sea_orm::FromQueryResult)]
pub struct SumRow {
    pub k: Option<String>,
    pub h: Option<String>,
    pub requests: Option<i64>,
    pub input_tokens: Option<i64>,
    pub output_tokens: Option<i64>,
    pub cached_tokens: Option<i64>,
    pub cache_write_tokens: Option<i64>,
    pub images: Option<i64>,
    pub video_seconds: Option<i64>,
    pub cost: Option<i64>,
    pub charged: Option<i64>,
    pub wholesale: Option<i64>,
    /// A ranking's count of every value.
    pub values: Option<i64>,
}

impl SumRow {
    pub fn totals(&self) -> Totals {
        let v = |x: Option<i64>| x.unwrap_or(0);
        Totals {
            requests: v(self.requests),
            input_tokens: v(self.input_tokens),
            output_tokens: v(self.output_tokens),
            cached_tokens: v(self.cached_tokens),
            cache_write_tokens: v(self.cache_write_tokens),
            images: v(self.images),
            video_seconds: v(self.video_seconds),
            cost: v(self.cost),
            charged: v(self.charged),
            wholesale: v(self.wholesale),
        }
    }
}

/// Where a partner's sums are read (migration 000016).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// `partner_usage`, its whole weeks and the days at the window's ends: the window's totals
    /// per value, in the fewest rows.
    Lines,
    /// `partner_usage`, its days: every dimension, per UTC day.
    Daily,
    /// `partner_usage_hourly`: groups and models, per hour.
    Hourly,
    /// `usage_hourly`: one customer's or key's own hours (always with `only`).
    Buckets,
}

impl Source {
    /// Where each value's sums per period are read: by day from the daily rollup; by hour from
    /// the hourly rollup (models, groups) or the organizations' own buckets (customers, keys).
    pub fn of_periods(granularity: Granularity, dim: Dim) -> Source {
        match (granularity, dim) {
            (Granularity::Day, _) => Source::Daily,
            (Granularity::Hour, Dim::Model | Dim::Group) => Source::Hourly,
            (Granularity::Hour, Dim::Organization | Dim::Key) => Source::Buckets,
        }
    }
}

/// The whole UTC days of a window, `[first, end)`; refused unless the window is whole days (the
/// console's windows are).
pub fn whole_days(w: &Window) -> Result<(NaiveDate, NaiveDate), UsageError> {
    if w.start.time() != chrono::NaiveTime::MIN || w.end.time() != chrono::NaiveTime::MIN {
        return Err(UsageError::Window(
            "a partner's usage is read in whole UTC days".into(),
        ));
    }
    Ok((w.start.date_naive(), w.end.date_naive()))
}

/// The ISO weeks wholly inside the days `[first, end)`, as the range of their Mondays
/// `[from, to)`; `None` when there is none.
pub fn whole_weeks(first: NaiveDate, end: NaiveDate) -> Option<(NaiveDate, NaiveDate)> {
    let ahead = (7 - first.weekday().num_days_from_monday()) % 7;
    let from = first.checked_add_days(chrono::Days::new(u64::from(ahead)))?;
    let to = end.checked_sub_days(chrono::Days::new(u64::from(
        end.weekday().num_days_from_monday(),
    )))?;
    (from < to).then_some((from, to))
}

/// What a grouped read asks for.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ask<'a> {
    /// Grouped by the dimension's value (as text in `k`).
    pub by_value: bool,
    /// Grouped by period (as text in `h`).
    pub by_period: bool,
    /// Only where the value is one of these.
    pub only: Option<&'a [String]>,
    /// Only the `n` values with the largest charge (ties by value), with the charge alone summed
    /// and the number of values there are in `values`: a ranking, not the sums.
    pub largest: Option<u64>,
    /// Ordered by period, then by value.
    pub ordered: bool,
}

/// Sums of partner `partner_id`'s usage in window `w` read from `source`, for dimension `dim`,
/// as `ask` says.
pub async fn grouped(
    db: &impl ConnectionTrait,
    partner_id: i64,
    w: &Window,
    source: Source,
    dim: Dim,
    ask: Ask<'_>,
) -> Result<Vec<SumRow>, UsageError> {
    use sea_orm::FromQueryResult;
    let statement = grouped_statement(db.get_database_backend(), partner_id, w, source, dim, ask)?;
    Ok(SumRow::find_by_statement(statement).all(db).await?)
}

/// The statement of [`grouped`].
pub fn grouped_statement(
    backend: sea_orm::DbBackend,
    partner_id: i64,
    w: &Window,
    source: Source,
    dim: Dim,
    ask: Ask<'_>,
) -> Result<sea_orm::Statement, UsageError> {
    use sea_orm::ExprTrait;
    use sea_orm::sea_query::{Alias, Expr, Order, Query};
    let col = |c: &str| Expr::col(Alias::new(c));
    let ids =
        |values: &[String]| -> Vec<i64> { values.iter().filter_map(|v| v.parse().ok()).collect() };
    let (table, period) = match source {
        Source::Lines | Source::Daily => ("partner_usage", "day"),
        Source::Hourly => ("partner_usage_hourly", "hour_start"),
        Source::Buckets => ("usage_hourly", "hour_start"),
    };
    // The value's column: grouped by as it is (grouping by a cast is several times slower),
    // selected as text.
    let column = match (source, dim) {
        (_, Dim::Model) if source != Source::Buckets => "model",
        (Source::Buckets, Dim::Organization) => "organization_id",
        (Source::Buckets, _) => "api_key_id",
        _ => "ref_id",
    };
    let none = || Expr::val(Option::<String>::None);
    let mut q = Query::select();
    q.from(Alias::new(table))
        .expr_as(
            if ask.by_value {
                col(column).cast_as("TEXT")
            } else {
                none()
            },
            Alias::new("k"),
        )
        .expr_as(
            if ask.by_period {
                col(period).cast_as("TEXT")
            } else {
                none()
            },
            Alias::new("h"),
        );
    measures(&mut q, ask, column);
    scope(&mut q, source, w, partner_id, dim, ask)?;
    if let Some(values) = ask.only {
        if column == "model" {
            q.and_where(col("model").is_in(values.iter().cloned()));
        } else {
            q.and_where(col(column).is_in(ids(values)));
        }
    }
    // Period first: an ordered read then follows the rollups' primary key (period, then value)
    // and streams without a sort.
    if ask.by_period {
        q.add_group_by([col(period)]);
    }
    if ask.by_value {
        q.add_group_by([col(column)]);
    }
    if ask.ordered {
        q.order_by(Alias::new(period), Order::Asc)
            .order_by(Alias::new(column), Order::Asc);
    }
    Ok(backend.build(&q))
}

/// The sums a grouped read selects (a ranking sums the charge alone: ten sums over a large
/// partner's rows cost several times one), and for a ranking the count of values and the order.
fn measures(q: &mut sea_orm::sea_query::SelectStatement, ask: Ask<'_>, column: &str) {
    use sea_orm::ExprTrait;
    use sea_orm::sea_query::{Alias, Expr, Func, Order};
    let col = |c: &str| Expr::col(Alias::new(c));
    let sum = |c: &str| Func::sum(col(c)).cast_as("BIGINT");
    for (column, name) in [
        ("requests", "requests"),
        ("input_tokens", "input_tokens"),
        ("output_tokens", "output_tokens"),
        ("cached_tokens", "cached_tokens"),
        ("cache_write_tokens", "cache_write_tokens"),
        ("images", "images"),
        ("video_seconds", "video_seconds"),
        ("cost_nanos", "cost"),
        ("charged_nanos", "charged"),
        ("wholesale_nanos", "wholesale"),
    ] {
        if ask.largest.is_none() || column == "charged_nanos" {
            q.expr_as(sum(column), Alias::new(name));
        } else {
            q.expr_as(Expr::val(Option::<i64>::None), Alias::new(name));
        }
    }
    match ask.largest {
        Some(n) => {
            q.expr_as(Expr::cust("COUNT(*) OVER ()"), Alias::new("values"))
                .order_by_expr(sum("charged_nanos"), Order::Desc)
                .order_by(Alias::new(column), Order::Asc)
                .limit(n);
        }
        None => {
            q.expr_as(Expr::val(Option::<i64>::None), Alias::new("values"));
        }
    }
}

/// The rows a grouped read covers: the partner's, of the dimension, in the window (whole weeks
/// and days of the rollups, hours, or the organizations' buckets).
fn scope(
    q: &mut sea_orm::sea_query::SelectStatement,
    source: Source,
    w: &Window,
    partner_id: i64,
    dim: Dim,
    ask: Ask<'_>,
) -> Result<(), UsageError> {
    use sea_orm::ExprTrait;
    use sea_orm::sea_query::{Alias, Condition, Expr};
    let col = |c: &str| Expr::col(Alias::new(c));
    let days = |span: i16, from: NaiveDate, to: NaiveDate| {
        Condition::all()
            .add(col("span_days").eq(span))
            .add(col("day").gte(from))
            .add(col("day").lt(to))
    };
    match source {
        Source::Lines => {
            let (first, end) = whole_days(w)?;
            let periods = match whole_weeks(first, end) {
                Some((from, to)) => Condition::any()
                    .add(days(7, from, to))
                    .add(days(1, first, from))
                    .add(days(1, to, end)),
                None => Condition::any().add(days(1, first, end)),
            };
            q.and_where(col("partner_id").eq(partner_id))
                .and_where(col("dim").eq(dim.name()))
                .cond_where(periods);
        }
        Source::Daily => {
            let (first, end) = whole_days(w)?;
            q.and_where(col("partner_id").eq(partner_id))
                .and_where(col("dim").eq(dim.name()))
                .cond_where(days(1, first, end));
        }
        Source::Hourly => {
            q.and_where(col("partner_id").eq(partner_id))
                .and_where(col("dim").eq(dim.name()))
                .and_where(col("hour_start").gte(w.start))
                .and_where(col("hour_start").lt(w.end));
        }
        Source::Buckets => {
            // The organizations of the asked values that are this partner's customers (a few:
            // the buckets' index, organization first, serves), or all of them.
            let orgs = bucket_orgs(partner_id, dim, ask);
            q.and_where(col("organization_id").in_subquery(orgs))
                .and_where(col("hour_start").gte(w.start))
                .and_where(col("hour_start").lt(w.end));
        }
    }
    Ok(())
}

/// The organizations whose buckets a read covers: the partner's customers' (every one, or those
/// of the asked organizations or keys: a few, so the buckets' index, organization first, serves).
fn bucket_orgs(partner_id: i64, dim: Dim, ask: Ask<'_>) -> sea_orm::sea_query::SelectStatement {
    use sea_orm::sea_query::Query;
    let asked: Vec<i64> = ask
        .only
        .unwrap_or_default()
        .iter()
        .filter_map(|v| v.parse().ok())
        .collect();
    if ask.only.is_none() {
        Query::select()
            .column(entities::customers::Column::OrganizationId)
            .from(entities::customers::Entity)
            .and_where(entities::customers::Column::PartnerId.eq(partner_id))
            .to_owned()
    } else if dim == Dim::Organization {
        Query::select()
            .column(entities::customers::Column::OrganizationId)
            .from(entities::customers::Entity)
            .and_where(entities::customers::Column::PartnerId.eq(partner_id))
            .and_where(entities::customers::Column::OrganizationId.is_in(asked))
            .to_owned()
    } else {
        let of_keys = Query::select()
            .column(entities::customer_api_keys::Column::OrganizationId)
            .from(entities::customer_api_keys::Entity)
            .and_where(entities::customer_api_keys::Column::Id.is_in(asked))
            .to_owned();
        Query::select()
            .column(entities::customers::Column::OrganizationId)
            .from(entities::customers::Entity)
            .and_where(entities::customers::Column::PartnerId.eq(partner_id))
            .and_where(entities::customers::Column::OrganizationId.in_subquery(of_keys))
            .to_owned()
    }
}

/// `query` (of usage records, its grouping columns selected) with the count of the group's
/// records, then the sum of each of `columns` in order, as `BIGINT` (a sum of nothing is NULL).
pub fn counted_sums(
    query: sea_orm::Select<usage_records::Entity>,
    columns: &[usage_records::Column],
) -> sea_orm::Select<usage_records::Entity> {
    use sea_orm::QuerySelect;
    use sea_orm::sea_query::{Expr, ExprTrait, Func};
    let counted = query.expr(Func::count(Expr::col(usage_records::Column::Id)));
    columns.iter().fold(counted, |q, &c| {
        q.expr(Func::sum(Expr::col(c)).cast_as("BIGINT"))
    })
}

/// Folds period rows (an hour as the database renders it as text, or a `YYYY-MM-DD` day) into
/// the window's periods.
pub fn fold_hours<'a>(
    w: &Window,
    hours: impl Iterator<Item = (Option<&'a str>, Totals)>,
) -> (Vec<DateTime<Utc>>, Vec<Totals>) {
    let periods = w.periods();
    let mut per = vec![Totals::default(); periods.len()];
    for (hour, totals) in hours {
        let at = hour.and_then(parse_db_time);
        if let Some(p) = at
            .and_then(|at| w.period_of(at))
            .and_then(|i| per.get_mut(i))
        {
            p.merge(&totals);
        }
    }
    (periods, per)
}

/// A timestamp as PostgreSQL (`2026-03-04 10:00:00+00`) or SQLite (`2026-03-04 10:00:00+00:00`,
/// or RFC 3339) renders it as text.
pub fn parse_db_time(s: &str) -> Option<DateTime<Utc>> {
    let s = s.trim();
    if s.len() == 10 {
        return chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .ok()
            .map(|d| d.and_time(chrono::NaiveTime::MIN).and_utc());
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&Utc));
    }
    for f in [
        "%Y-%m-%d %H:%M:%S%#z",
        "%Y-%m-%d %H:%M:%S%.f%#z",
        "%Y-%m-%d %H:%M:%S%:z",
    ] {
        if let Ok(t) = DateTime::parse_from_str(s, f) {
            return Some(t.with_timezone(&Utc));
        }
    }
    chrono::NaiveDateTime::parse_from_str(s, "%Y-%m-%d %H:%M:%S")
        .ok()
        .map(|n| n.and_utc())
}
