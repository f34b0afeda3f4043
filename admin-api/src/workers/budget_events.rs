//! `key.budget_exceeded` (issue 45), written by the settler in the transaction that books the
//! charge that used the budget up.
//!
//! *Decision*: a key's budget counts as exceeded once what is left of it in its period (UTC day
//! or month; the budget less the period's settled charges, read from the hourly buckets this
//! batch just added to) is less than the largest charge this batch booked for the key — the next
//! call like it would be refused at admission (`opstate::budget` refuses a hold that does not
//! fit), so the key has in effect run out. Once per key and period (the event's dedupe key),
//! for keys of a partner's customers.

use super::batch::Charge;
use super::wholesale::Partners;
use crate::services::partner_webhooks;
use crate::state::AppState;
use chrono::{DateTime, Datelike, TimeZone, Utc};
use entities::{customer_api_keys, usage_hourly};
use money::NanoUsd;
use sea_orm::sea_query::{Expr, ExprTrait, Func};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};
use std::collections::HashMap;

/// The start of the budget period `period` (`day` or `month`) that holds `now`.
pub(super) fn period_start(period: &str, now: DateTime<Utc>) -> DateTime<Utc> {
    let day = now.date_naive();
    let first = match period {
        "month" => day.with_day(1).unwrap_or(day),
        _ => day,
    };
    Utc.from_utc_datetime(&first.and_hms_opt(0, 0, 0).unwrap_or_default())
}

/// Writes `key.budget_exceeded` for each budgeted key of a partner's customer that this batch
/// used up.
pub(super) async fn budget_events(
    txn: &impl ConnectionTrait,
    state: &AppState,
    fresh: &[Charge<'_>],
    partners: &Partners,
    now: DateTime<Utc>,
) -> Result<(), DbErr> {
    // Per key of a partner's customer: its organization, partner, customer, largest charge.
    let mut keys: HashMap<i64, (i64, i64, i64, NanoUsd)> = HashMap::new();
    for c in fresh.iter().filter(|c| c.charged.is_positive()) {
        let Some(Some(p)) = partners.get(&c.event.org_id) else {
            continue;
        };
        let e = keys.entry(c.event.key_id).or_insert((
            c.event.org_id,
            p.partner_id,
            p.customer_id,
            NanoUsd::ZERO,
        ));
        e.3 = e.3.max(c.charged);
    }
    if keys.is_empty() {
        return Ok(());
    }
    let budgeted = customer_api_keys::Entity::find()
        .filter(customer_api_keys::Column::Id.is_in(keys.keys().copied()))
        .filter(customer_api_keys::Column::BudgetNanos.is_not_null())
        .all(txn)
        .await?;
    for key in budgeted {
        let (Some(limit), Some((org, partner, customer, largest))) =
            (key.budget_nanos, keys.get(&key.id).copied())
        else {
            continue;
        };
        let period = key.budget_period.as_deref().unwrap_or("month");
        let start = period_start(period, now);
        let spent: Option<i64> = usage_hourly::Entity::find()
            .select_only()
            .column_as(
                Func::sum(Expr::col(usage_hourly::Column::ChargedNanos)).cast_as("BIGINT"),
                "spent",
            )
            .filter(usage_hourly::Column::OrganizationId.eq(org))
            .filter(usage_hourly::Column::ApiKeyId.eq(key.id))
            .filter(usage_hourly::Column::HourStart.gte(start))
            .into_tuple()
            .one(txn)
            .await?
            .flatten();
        let spent = NanoUsd::from_nanos(spent.unwrap_or(0));
        let left = NanoUsd::from_nanos(limit).remaining_after(spent);
        if left >= largest {
            continue;
        }
        partner_webhooks::emit(
            txn,
            state,
            partner,
            "key.budget_exceeded",
            serde_json::json!({
                "customer_id": customer,
                "organization_id": org,
                "api_key_id": key.id,
                "key_name": key.name,
                "budget_usd": crate::dto::usd_json(NanoUsd::from_nanos(limit)),
                "budget_period": period,
                "period_start": start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                "spent_usd": crate::dto::usd_json(spent),
            }),
            Some(format!(
                "key.budget_exceeded:{}:{}",
                key.id,
                start.timestamp()
            )),
        )
        .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_start_at_the_utc_day_or_month() {
        let t = Utc.with_ymd_and_hms(2026, 11, 29, 10, 30, 0).unwrap();
        assert_eq!(
            period_start("day", t),
            Utc.with_ymd_and_hms(2026, 11, 29, 0, 0, 0).unwrap()
        );
        assert_eq!(
            period_start("month", t),
            Utc.with_ymd_and_hms(2026, 11, 1, 0, 0, 0).unwrap()
        );
    }
}
