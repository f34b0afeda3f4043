//! The request log (issue 45): an organization's settled calls, newest first, filtered by key,
//! model, outcome and UTC day, one page at a time by keyset on `(started_at, id)` (never OFFSET).
//! The console's Requests pages read it, for an organization and for a partner's customer.
//!
//! A filter that matches few calls must not make a page read the whole ledger: before reading
//! records, the hourly buckets (`usage_hourly`, written in the settler's transaction with the
//! records, with the same key, served model and hour, and their failed calls) name the newest
//! hours that hold a match, enough of them for a page; the records are then read hour range by
//! hour range, newest first, until the page is full. A page therefore reads the records of the
//! hours that hold its calls and no others, whatever the filter. Nothing of a prompt or an answer
//! is in a record; none is shown.

use chrono::{DateTime, DurationRound, NaiveDate, TimeDelta, Utc};
use entities::{usage_hourly, usage_records};
use sea_orm::sea_query::{Condition, Expr, Func};
use sea_orm::{
    ColumnTrait, DatabaseConnection, DbErr, EntityTrait, FromQueryResult, QueryFilter, QueryOrder,
    QuerySelect,
};

/// Rows a page may hold, and its default.
pub const PAGE_SIZES: [u64; 3] = [10, 50, 100];
pub const DEFAULT_PAGE_SIZE: u64 = 50;

/// Which calls by outcome.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Outcome {
    #[default]
    Any,
    /// Status below 400.
    Succeeded,
    /// Status 400 or above.
    Failed,
}

impl Outcome {
    /// The query value: `any`, `succeeded`, `failed`.
    pub fn parse(s: &str) -> Option<Outcome> {
        match s {
            "" | "any" => Some(Outcome::Any),
            "succeeded" => Some(Outcome::Succeeded),
            "failed" => Some(Outcome::Failed),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Any => "any",
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
        }
    }
}

/// What a page shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    pub key: Option<i64>,
    /// The served model.
    pub model: Option<String>,
    pub outcome: Outcome,
    /// A UTC day.
    pub day: Option<NaiveDate>,
}

/// Where a page starts: just before (older than) this record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cursor {
    pub started_at: DateTime<Utc>,
    pub id: i64,
}

impl Cursor {
    /// `{microseconds since the epoch}-{id}`, as the page's link carries it.
    pub fn encode(&self) -> String {
        format!("{}-{}", self.started_at.timestamp_micros(), self.id)
    }

    pub fn decode(s: &str) -> Option<Cursor> {
        let (micros, id) = s.split_once('-')?;
        let micros: i64 = micros.parse().ok()?;
        let id: i64 = id.parse().ok().filter(|n| *n > 0)?;
        Some(Cursor {
            started_at: DateTime::from_timestamp_micros(micros)?,
            id,
        })
    }
}

/// A page of calls and where the next (older) one starts.
pub struct Page {
    pub rows: Vec<usage_records::Model>,
    pub next: Option<Cursor>,
}

#[derive(FromQueryResult)]
struct Hour {
    hour_start: DateTime<Utc>,
    requests: i64,
    failed: i64,
}

fn hour_of(t: DateTime<Utc>) -> DateTime<Utc> {
    t.duration_trunc(TimeDelta::hours(1)).unwrap_or(t)
}

/// The hours before `upper`'s own that hold a match of `filter`, newest first, until they hold
/// more than `size` matches (the page and the one that says another page follows), or all of
/// them when they hold fewer; none older than `lower`.
async fn matching_hours(
    db: &DatabaseConnection,
    org: i64,
    filter: &Filter,
    upper: DateTime<Utc>,
    lower: Option<DateTime<Utc>>,
    size: u64,
) -> Result<Vec<DateTime<Utc>>, DbErr> {
    use sea_orm::sea_query::ExprTrait;
    let mut q = usage_hourly::Entity::find()
        .select_only()
        .column(usage_hourly::Column::HourStart)
        .column_as(
            Func::sum(Expr::col(usage_hourly::Column::Requests)).cast_as("BIGINT"),
            "requests",
        )
        .column_as(
            Func::sum(Expr::col(usage_hourly::Column::FailedRequests)).cast_as("BIGINT"),
            "failed",
        )
        .filter(usage_hourly::Column::OrganizationId.eq(org))
        .filter(usage_hourly::Column::HourStart.lt(hour_of(upper)));
    if let Some(lower) = lower {
        q = q.filter(usage_hourly::Column::HourStart.gte(lower));
    }
    if let Some(key) = filter.key {
        q = q.filter(usage_hourly::Column::ApiKeyId.eq(key));
    }
    if let Some(model) = &filter.model {
        q = q.filter(usage_hourly::Column::Model.eq(model.as_str()));
    }
    let requests = || Expr::from(Func::sum(Expr::col(usage_hourly::Column::Requests)));
    let failed = || Expr::from(Func::sum(Expr::col(usage_hourly::Column::FailedRequests)));
    let matched = match filter.outcome {
        Outcome::Any => requests(),
        Outcome::Failed => failed(),
        Outcome::Succeeded => requests().sub(failed()),
    };
    let hours: Vec<Hour> = q
        .group_by(usage_hourly::Column::HourStart)
        .having(matched.gt(0))
        .order_by_desc(usage_hourly::Column::HourStart)
        .limit(size + 1)
        .into_model()
        .all(db)
        .await?;
    let mut found: u64 = 0;
    let mut needed = Vec::new();
    for h in &hours {
        let n = match filter.outcome {
            Outcome::Any => h.requests,
            Outcome::Failed => h.failed,
            Outcome::Succeeded => h.requests - h.failed,
        };
        found += u64::try_from(n).unwrap_or(0);
        needed.push(h.hour_start);
        if found > size {
            break;
        }
    }
    Ok(needed)
}

/// The time ranges `[start, end)` a page reads, newest first: `upper`'s own hour whole, then the
/// matching hours, adjacent ones joined.
fn ranges(upper: DateTime<Utc>, hours: &[DateTime<Utc>]) -> Vec<(DateTime<Utc>, DateTime<Utc>)> {
    let head = hour_of(upper);
    let mut out = vec![(head, head + TimeDelta::hours(1))];
    for &h in hours {
        match out.last_mut() {
            Some(last) if last.0 == h + TimeDelta::hours(1) => last.0 = h,
            _ => out.push((h, h + TimeDelta::hours(1))),
        }
    }
    out
}

/// The page of organization `org`'s calls matching `filter` that starts after `before` (the
/// newest when `None`), `size` rows at most. Reads the hours the buckets name, newest first, one
/// range at a time, until the page and one more row are found.
pub async fn page(
    db: &DatabaseConnection,
    org: i64,
    filter: &Filter,
    before: Option<Cursor>,
    size: u64,
) -> Result<Page, DbErr> {
    let day = filter.day.map(|d| {
        let start = d.and_hms_opt(0, 0, 0).unwrap_or_default().and_utc();
        (start, start + TimeDelta::days(1))
    });
    // The newest start a record of this page may have (the cursor's own is read past by id).
    let upper = match (before, day) {
        (Some(c), Some((_, end))) => c.started_at.min(end),
        (Some(c), None) => c.started_at,
        (None, Some((_, end))) => end,
        (None, None) => Utc::now() + TimeDelta::days(1),
    };
    let lower = day.map(|(start, _)| start);
    let hours = matching_hours(db, org, filter, upper, lower, size).await?;
    let mut base =
        usage_records::Entity::find().filter(usage_records::Column::OrganizationId.eq(org));
    if let Some(c) = before {
        base = base.filter(
            Condition::any()
                .add(usage_records::Column::StartedAt.lt(c.started_at))
                .add(
                    Condition::all()
                        .add(usage_records::Column::StartedAt.eq(c.started_at))
                        .add(usage_records::Column::Id.lt(c.id)),
                ),
        );
    }
    if let Some((start, end)) = day {
        base = base
            .filter(usage_records::Column::StartedAt.gte(start))
            .filter(usage_records::Column::StartedAt.lt(end));
    }
    if let Some(key) = filter.key {
        base = base.filter(usage_records::Column::ApiKeyId.eq(key));
    }
    if let Some(model) = &filter.model {
        base = base.filter(usage_records::Column::ModelServed.eq(model.as_str()));
    }
    base = match filter.outcome {
        Outcome::Any => base,
        Outcome::Succeeded => base.filter(usage_records::Column::Status.lt(400)),
        Outcome::Failed => base.filter(usage_records::Column::Status.gte(400)),
    };
    let want = usize::try_from(size).unwrap_or(usize::MAX);
    let mut rows: Vec<usage_records::Model> = Vec::new();
    for (start, end) in ranges(upper, &hours) {
        let more = u64::try_from(want + 1 - rows.len()).unwrap_or(u64::MAX);
        let found = base
            .clone()
            .filter(usage_records::Column::StartedAt.gte(start))
            .filter(usage_records::Column::StartedAt.lt(end))
            .order_by_desc(usage_records::Column::StartedAt)
            .order_by_desc(usage_records::Column::Id)
            .limit(more)
            .all(db)
            .await?;
        rows.extend(found);
        if rows.len() > want {
            break;
        }
    }
    let more = rows.len() > want;
    rows.truncate(want);
    let next = more.then(|| rows.last()).flatten().map(|r| Cursor {
        started_at: r.started_at,
        id: r.id,
    });
    Ok(Page { rows, next })
}

/// The models organization `org` has calls of (from its hourly buckets), sorted.
pub async fn models(db: &DatabaseConnection, org: i64) -> Result<Vec<String>, DbErr> {
    usage_hourly::Entity::find()
        .select_only()
        .column(usage_hourly::Column::Model)
        .distinct()
        .filter(usage_hourly::Column::OrganizationId.eq(org))
        .order_by_asc(usage_hourly::Column::Model)
        .into_tuple()
        .all(db)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_refuse_garbage() {
        let c = Cursor {
            started_at: DateTime::from_timestamp_micros(1_764_410_000_123_456).unwrap(),
            id: 42,
        };
        assert_eq!(Cursor::decode(&c.encode()), Some(c));
        for bad in [
            "",
            "1",
            "x-1",
            "1-x",
            "1-0",
            "1--1",
            "99999999999999999999-1",
        ] {
            assert_eq!(Cursor::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn ranges_join_adjacent_hours_newest_first() {
        let h = |n: i64| DateTime::from_timestamp(3_600 * n, 0).unwrap();
        let upper = h(10) + TimeDelta::minutes(30);
        assert_eq!(
            ranges(upper, &[h(9), h(8), h(5), h(3), h(2)]),
            [(h(8), h(11)), (h(5), h(6)), (h(2), h(4))]
        );
        assert_eq!(ranges(upper, &[]), [(h(10), h(11))]);
    }

    #[test]
    fn outcomes_parse() {
        assert_eq!(Outcome::parse(""), Some(Outcome::Any));
        assert_eq!(Outcome::parse("failed"), Some(Outcome::Failed));
        assert_eq!(Outcome::parse("FAILED"), None);
        for o in [Outcome::Any, Outcome::Succeeded, Outcome::Failed] {
            assert_eq!(Outcome::parse(o.as_str()), Some(o));
        }
    }
}
