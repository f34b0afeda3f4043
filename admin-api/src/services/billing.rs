//! The organization billing API (read only) and the operator's billing-token commands.

use crate::auth::{TokenKind, token_hash};
use crate::dto::{
    DailyTotals, DailyUsage, KeyUsage, ModelUsage, OrganizationBalance, ProjectUsage, Ratio,
    UsageCoverage, UsageTotals, Usd, WalletSpend, WorkflowUsage,
};
use crate::error::ApiError;
use crate::ledger::AccountRef;
use crate::state::AppState;
use chrono::{DateTime, NaiveDate, SecondsFormat, TimeDelta, Utc};
use credentials::{Kind, Secret};
use entities::status::{OrganizationStatus, TokenStatus};
use entities::{org_billing_tokens, organizations, usage_hourly, usage_records};
use money::NanoUsd;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use std::collections::BTreeMap;

/// The organization a billing token belongs to. Missing, malformed, unknown, rotated, revoked, or
/// an organization that is not active: all `ORG_BILLING_TOKEN_INVALID`.
pub async fn authenticate(
    state: &AppState,
    presented: Option<&str>,
) -> Result<organizations::Model, ApiError> {
    let token = presented.ok_or(ApiError::BillingTokenInvalid)?;
    let hash = token_hash(&state.hasher, state.env, TokenKind::Billing, token)
        .ok_or(ApiError::BillingTokenInvalid)?;
    let row = org_billing_tokens::Entity::find()
        .filter(org_billing_tokens::Column::TokenHash.eq(hash))
        .filter(org_billing_tokens::Column::Status.eq(TokenStatus::Active))
        .one(&state.db)
        .await?
        .ok_or(ApiError::BillingTokenInvalid)?;
    let org = organizations::Entity::find_by_id(row.organization_id)
        .one(&state.db)
        .await?
        .ok_or(ApiError::BillingTokenInvalid)?;
    if org.status != OrganizationStatus::Active {
        return Err(ApiError::BillingTokenInvalid);
    }
    Ok(org)
}

/// `GET /api/v1/organization/billing/balance`. A wallet that does not exist is never a zero
/// balance: 503 `ORG_BALANCE_RECONCILIATION_REQUIRED`.
pub async fn balance(
    state: &AppState,
    org: &organizations::Model,
) -> Result<OrganizationBalance, ApiError> {
    let Some((balance, reserved)) = crate::services::wallets::reconciled(state, org.id).await?
    else {
        return Err(ApiError::ReconciliationRequired);
    };
    Ok(OrganizationBalance {
        organization_id: org.id,
        balance_usd: Usd(balance),
        reserved_usd: Usd(reserved),
        available_usd: Usd(balance.checked_sub(reserved).ok_or(ApiError::Internal)?),
        status: "reconciled",
    })
}

/// Parses `date=YYYY-MM-DD` strictly (one parameter, zero-padded, a real date); absent = today.
pub fn parse_date(params: &[(String, String)], today: NaiveDate) -> Result<NaiveDate, ApiError> {
    let mut dates = params.iter().filter(|(k, _)| k == "date");
    let raw = match (dates.next(), dates.next()) {
        (None, _) => return Ok(today),
        (Some((_, v)), None) => v.as_str(),
        _ => return Err(ApiError::InvalidDate),
    };
    let b = raw.as_bytes();
    let shape = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    if !shape {
        return Err(ApiError::InvalidDate);
    }
    NaiveDate::parse_from_str(raw, "%Y-%m-%d").map_err(|_| ApiError::InvalidDate)
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

#[derive(Default)]
struct Agg {
    requests: i64,
    input: i64,
    output: i64,
    cached: i64,
    cache_write: i64,
    cost: i64,
    images: i64,
    video_seconds: i64,
}

impl Agg {
    fn add(&mut self, r: &usage_hourly::Model) {
        self.requests += r.requests;
        self.input += r.input_tokens;
        self.output += r.output_tokens;
        self.cached += r.cached_tokens;
        self.cache_write += r.cache_write_tokens;
        self.cost += r.cost_nanos;
        self.images += r.images;
        self.video_seconds += r.video_seconds;
    }
    fn totals(&self) -> UsageTotals {
        UsageTotals {
            requests: self.requests,
            input_tokens: self.input,
            output_tokens: self.output,
            cache_tokens: self.cached,
            cache_write_tokens: self.cache_write,
            images: self.images,
            video_seconds: self.video_seconds,
            cost_usd: Usd(NanoUsd::from_nanos(self.cost)),
        }
    }
}

/// `GET /api/v1/organization/billing/usage/daily`: one UTC day, [date 00:00Z, next 00:00Z).
pub async fn daily(
    state: &AppState,
    org: &organizations::Model,
    date: NaiveDate,
) -> Result<DailyUsage, ApiError> {
    let from = date
        .and_hms_opt(0, 0, 0)
        .ok_or(ApiError::InvalidDate)?
        .and_utc();
    let to = from + TimeDelta::days(1);
    let rows = usage_hourly::Entity::find()
        .filter(usage_hourly::Column::OrganizationId.eq(org.id))
        .filter(usage_hourly::Column::HourStart.gte(from))
        .filter(usage_hourly::Column::HourStart.lt(to))
        .all(&state.db)
        .await?;
    let mut totals = Agg::default();
    let mut by_key: BTreeMap<i64, Agg> = BTreeMap::new();
    let mut by_model: BTreeMap<String, Agg> = BTreeMap::new();
    let mut estimated = 0i64;
    for r in &rows {
        totals.add(r);
        by_key.entry(r.api_key_id).or_default().add(r);
        by_model.entry(r.model.clone()).or_default().add(r);
        estimated += r.estimated_requests;
    }
    let spend = wallet_spend(&state.db, org.id, from, to).await?;
    let records = usage_records::Entity::find()
        .filter(usage_records::Column::OrganizationId.eq(org.id))
        .filter(usage_records::Column::StartedAt.gte(from))
        .filter(usage_records::Column::StartedAt.lt(to))
        .all(&state.db)
        .await?;
    let projects = attributed(&records, |r| r.project.clone());
    let workflows = attributed(&records, |r| r.workflow.clone());
    let mut unavailable = Vec::new();
    if projects.is_none() {
        unavailable.push("projects");
    }
    if workflows.is_none() {
        unavailable.push("workflows");
    }
    let exact = totals.requests - estimated;
    Ok(DailyUsage {
        organization_id: org.id,
        from: ts(from),
        to: ts(to),
        totals: DailyTotals {
            usage: totals.totals(),
            actual_cost_usd: Usd(spend),
            usage_cost_usd: Usd(NanoUsd::from_nanos(totals.cost)),
        },
        projects: projects
            .unwrap_or_default()
            .into_iter()
            .map(|(project, usage)| ProjectUsage { project, usage })
            .collect(),
        api_keys: by_key
            .iter()
            .map(|(k, a)| KeyUsage {
                api_key_id: *k,
                usage: a.totals(),
            })
            .collect(),
        models: by_model
            .iter()
            .map(|(m, a)| ModelUsage {
                model: m.clone(),
                usage: a.totals(),
            })
            .collect(),
        workflows: workflows
            .unwrap_or_default()
            .into_iter()
            .map(|(workflow, usage)| WorkflowUsage { workflow, usage })
            .collect(),
        unavailable_dimensions: unavailable,
        wallet_spend: WalletSpend {
            amount_usd: Usd(spend),
            currency: "USD",
        },
        usage_coverage: UsageCoverage {
            requests: totals.requests,
            exact_requests: exact,
            estimated_requests: estimated,
            exact_ratio: if totals.requests == 0 {
                Ratio::Whole(1)
            } else {
                Ratio::Fraction((exact as f64) / (totals.requests as f64))
            },
        },
    })
}

/// A breakdown by an attribution dimension (requests without it are grouped under `null`), or
/// `None` when no request of the window carries it (the breakdown cannot be computed).
fn attributed(
    records: &[usage_records::Model],
    key: impl Fn(&usage_records::Model) -> Option<String>,
) -> Option<Vec<(Option<String>, UsageTotals)>> {
    if records.iter().all(|r| key(r).is_none()) {
        return None;
    }
    // requests, input, output, cached, cost, images, video seconds, cache writes
    type Sums = (i64, i64, i64, i64, i64, i64, i64, i64);
    let mut groups: BTreeMap<Option<String>, Sums> = BTreeMap::new();
    for r in records {
        let g = groups.entry(key(r)).or_default();
        g.0 += 1;
        g.1 += r.input_tokens;
        g.2 += r.output_tokens;
        g.3 += r.cached_tokens;
        g.4 += r.cost_nanos;
        g.5 += r.images;
        g.6 += r.video_seconds;
        g.7 += r.cache_write_tokens;
    }
    Some(
        groups
            .into_iter()
            .map(
                |(k, (requests, input, output, cached, cost, images, video_seconds, written))| {
                    let usage = UsageTotals {
                        requests,
                        input_tokens: input,
                        output_tokens: output,
                        cache_tokens: cached,
                        cache_write_tokens: written,
                        images,
                        video_seconds,
                        cost_usd: Usd(NanoUsd::from_nanos(cost)),
                    };
                    (k, usage)
                },
            )
            .collect(),
    )
}

/// Money debited from the wallet to spend in a window (settled usage), from the ledger.
async fn wallet_spend(
    db: &impl ConnectionTrait,
    org_id: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<NanoUsd, ApiError> {
    let code = AccountRef::org_spend(org_id).code;
    Ok(crate::ledger::posted_between(db, &code, from, to).await?)
}

/// What a billing-token command did.
pub enum TokenChange {
    Created(Secret),
    Revoked,
}

/// `billing-token create|rotate`: at most one active token per organization; rotating revokes the
/// previous one at once. `create` on an organization that already has one is refused.
pub async fn issue_token(state: &AppState, org_id: i64, rotate: bool) -> Result<Secret, String> {
    let txn = crate::db::begin(&state.db)
        .await
        .map_err(|e| e.to_string())?;
    organizations::Entity::find_by_id(org_id)
        .one(&txn)
        .await
        .map_err(|e| e.to_string())?
        .ok_or(format!("organization {org_id} does not exist"))?;
    let active = org_billing_tokens::Entity::find()
        .filter(org_billing_tokens::Column::OrganizationId.eq(org_id))
        .filter(org_billing_tokens::Column::Status.eq(TokenStatus::Active))
        .all(&txn)
        .await
        .map_err(|e| e.to_string())?;
    if !active.is_empty() && !rotate {
        return Err(format!(
            "organization {org_id} already has an active billing token; use rotate"
        ));
    }
    if active.is_empty() && rotate {
        return Err(format!(
            "organization {org_id} has no active billing token; use create"
        ));
    }
    for t in active {
        let mut row: org_billing_tokens::ActiveModel = t.into();
        row.status = Set(TokenStatus::Rotated);
        row.revoked_at = Set(Some(Utc::now()));
        row.update(&txn).await.map_err(|e| e.to_string())?;
    }
    let secret = credentials::generate(Kind::BillingToken, state.env);
    org_billing_tokens::ActiveModel {
        organization_id: Set(org_id),
        token_hash: Set(state.hasher.hash(secret.expose())),
        preview: Set(credentials::preview(secret.expose())),
        status: Set(TokenStatus::Active),
        created_at: Set(Utc::now()),
        revoked_at: Set(None),
        ..Default::default()
    }
    .insert(&txn)
    .await
    .map_err(|e| e.to_string())?;
    txn.commit().await.map_err(|e| e.to_string())?;
    Ok(secret)
}

/// `billing-token revoke`.
pub async fn revoke_token(state: &AppState, org_id: i64) -> Result<usize, String> {
    let rows = org_billing_tokens::Entity::find()
        .filter(org_billing_tokens::Column::OrganizationId.eq(org_id))
        .filter(org_billing_tokens::Column::Status.eq(TokenStatus::Active))
        .all(&state.db)
        .await
        .map_err(|e| e.to_string())?;
    let n = rows.len();
    for t in rows {
        let mut row: org_billing_tokens::ActiveModel = t.into();
        row.status = Set(TokenStatus::Revoked);
        row.revoked_at = Set(Some(Utc::now()));
        row.update(&state.db).await.map_err(|e| e.to_string())?;
    }
    Ok(n)
}

/// Spend per UTC day (cost of usage, nano-USD) and requests, for the `days` days up to and
/// including `today`, oldest first; days without usage are zero. Read from the hourly buckets,
/// the same figures as the daily usage route.
pub async fn daily_spend(
    db: &impl ConnectionTrait,
    org_id: i64,
    today: NaiveDate,
    days: u32,
) -> Result<Vec<(NaiveDate, NanoUsd, i64)>, ApiError> {
    let first = today - chrono::Duration::days(i64::from(days.max(1)) - 1);
    let from = first
        .and_hms_opt(0, 0, 0)
        .ok_or(ApiError::InvalidDate)?
        .and_utc();
    let rows = usage_hourly::Entity::find()
        .filter(usage_hourly::Column::OrganizationId.eq(org_id))
        .filter(usage_hourly::Column::HourStart.gte(from))
        .all(db)
        .await?;
    let mut by_day: BTreeMap<NaiveDate, (i64, i64)> = BTreeMap::new();
    for r in rows {
        let day = r.hour_start.date_naive();
        let e = by_day.entry(day).or_default();
        e.0 = e.0.saturating_add(r.cost_nanos);
        e.1 = e.1.saturating_add(r.requests);
    }
    Ok(first
        .iter_days()
        .take_while(|d| *d <= today)
        .map(|d| {
            let (cost, requests) = by_day.get(&d).copied().unwrap_or_default();
            (d, NanoUsd::from_nanos(cost), requests)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(v: &[&str]) -> Vec<(String, String)> {
        v.iter()
            .map(|d| ("date".to_string(), d.to_string()))
            .collect()
    }

    #[test]
    fn dates_are_strict() {
        let today = NaiveDate::from_ymd_opt(2026, 11, 22).unwrap();
        assert_eq!(parse_date(&[], today), Ok(today));
        assert_eq!(
            parse_date(&p(&["2024-02-29"]), today),
            Ok(NaiveDate::from_ymd_opt(2024, 2, 29).unwrap())
        );
        for bad in [
            "2024-02-30",
            "2024-1-5",
            "20240105",
            "2024-01-05T00:00:00Z",
            "",
            " 2024-01-05",
            "2024-13-01",
        ] {
            assert_eq!(
                parse_date(&p(&[bad]), today),
                Err(ApiError::InvalidDate),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_date(&p(&["2024-01-05", "2024-01-06"]), today),
            Err(ApiError::InvalidDate)
        );
    }
}
