//! The organization billing API (read only) and the operator's billing-token commands.

use super::fault::Fault;
use super::usage::UsageError;
use crate::auth::{TokenKind, token_hash};
use crate::dto::{
    DailyTotals, DailyUsage, KeyUsage, ModelUsage, OrganizationBalance, ProjectUsage, Ratio,
    UsageCoverage, UsageTotals, Usd, WalletSpend, WorkflowUsage,
};
use crate::ledger::AccountRef;
use crate::services::usage::{self, Totals};
use crate::state::AppState;
use chrono::{DateTime, NaiveDate, SecondsFormat, Utc};
use credentials::{Kind, Secret};
use entities::status::{OrganizationStatus, TokenStatus};
use entities::{org_billing_tokens, organizations, usage_records};
use money::NanoUsd;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QuerySelect, Set,
};
use std::collections::BTreeMap;

/// Why the billing API refuses.
#[derive(Debug, PartialEq, thiserror::Error)]
pub enum BillingError {
    /// The billing token is missing, malformed, unknown, rotated or revoked, or its organization
    /// is not active.
    #[error("the organization billing token is missing or not valid")]
    TokenInvalid,
    /// The balance is not known right now (never reported as zero).
    #[error("the organization balance is being reconciled; retry shortly")]
    ReconciliationRequired,
    /// `date` is not one zero-padded YYYY-MM-DD date.
    #[error("date must be a YYYY-MM-DD date")]
    InvalidDate,
    /// The day's window is refused by the usage rules (too far back).
    #[error(transparent)]
    Usage(#[from] UsageError),
    #[error(transparent)]
    Fault(Fault),
}
super::fault::faults!(BillingError);

/// The organization a billing token belongs to. Missing, malformed, unknown, rotated, revoked, or
/// an organization that is not active: all `ORG_BILLING_TOKEN_INVALID`.
pub async fn authenticate(
    state: &AppState,
    presented: Option<&str>,
) -> Result<organizations::Model, BillingError> {
    let token = presented.ok_or(BillingError::TokenInvalid)?;
    let hash = token_hash(&state.hasher, state.env, TokenKind::Billing, token)
        .ok_or(BillingError::TokenInvalid)?;
    let row = org_billing_tokens::Entity::find()
        .filter(org_billing_tokens::Column::TokenHash.eq(hash))
        .filter(org_billing_tokens::Column::Status.eq(TokenStatus::Active))
        .one(&state.db)
        .await?
        .ok_or(BillingError::TokenInvalid)?;
    let org = organizations::Entity::find_by_id(row.organization_id)
        .one(&state.db)
        .await?
        .ok_or(BillingError::TokenInvalid)?;
    if org.status != OrganizationStatus::Active {
        return Err(BillingError::TokenInvalid);
    }
    Ok(org)
}

/// `GET /api/v1/organization/billing/balance`. A wallet that does not exist is never a zero
/// balance: 503 `ORG_BALANCE_RECONCILIATION_REQUIRED`.
pub async fn balance(
    state: &AppState,
    org: &organizations::Model,
) -> Result<OrganizationBalance, BillingError> {
    let Some((balance, reserved)) = crate::services::wallets::reconciled(state, org.id).await?
    else {
        return Err(BillingError::ReconciliationRequired);
    };
    Ok(OrganizationBalance {
        organization_id: org.id,
        balance_usd: Usd(balance),
        reserved_usd: Usd(reserved),
        available_usd: Usd(balance
            .checked_sub(reserved)
            .ok_or(Fault::Broken("an organization's holds exceed its balance"))?),
        status: "reconciled",
    })
}

/// Parses `date=YYYY-MM-DD` strictly (one parameter, zero-padded, a real date); absent = today.
pub fn parse_date(
    params: &[(String, String)],
    today: NaiveDate,
) -> Result<NaiveDate, BillingError> {
    let mut dates = params.iter().filter(|(k, _)| k == "date");
    let raw = match (dates.next(), dates.next()) {
        (None, _) => return Ok(today),
        (Some((_, v)), None) => v.as_str(),
        _ => return Err(BillingError::InvalidDate),
    };
    let b = raw.as_bytes();
    let shape = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    if !shape {
        return Err(BillingError::InvalidDate);
    }
    NaiveDate::parse_from_str(raw, "%Y-%m-%d").map_err(|_| BillingError::InvalidDate)
}

fn ts(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Secs, true)
}

/// `GET /api/v1/organization/billing/usage/daily`: one UTC day, [date 00:00Z, next 00:00Z).
pub async fn daily(
    state: &AppState,
    org: &organizations::Model,
    date: NaiveDate,
) -> Result<DailyUsage, BillingError> {
    let window = usage::Window::days(usage::Granularity::Day, date, date)?;
    let (from, to) = (window.start, window.end);
    let rows = usage::hourly_rows(&state.db, org.id, None, &window).await?;
    let mut totals = Totals::default();
    let mut by_key: BTreeMap<i64, Totals> = BTreeMap::new();
    let mut by_model: BTreeMap<String, Totals> = BTreeMap::new();
    let mut estimated = 0i64;
    for r in &rows {
        totals.add(r);
        by_key.entry(r.api_key_id).or_default().add(r);
        by_model.entry(r.model.clone()).or_default().add(r);
        estimated += r.estimated_requests;
    }
    let spend = wallet_spend(&state.db, org.id, from, to).await?;
    let (db, range) = (&state.db, (from, to));
    let projects = attributed(db, org.id, range, usage_records::Column::Project).await?;
    let workflows = attributed(db, org.id, range, usage_records::Column::Workflow).await?;
    let unavailable = [
        ("projects", projects.is_none()),
        ("workflows", workflows.is_none()),
    ]
    .into_iter()
    .filter_map(|(name, missing)| missing.then_some(name))
    .collect();
    Ok(DailyUsage {
        organization_id: org.id,
        from: ts(from),
        to: ts(to),
        totals: DailyTotals {
            usage: totals.to_dto(),
            actual_cost_usd: Usd(spend),
            usage_cost_usd: Usd(totals.cost_usd()),
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
                usage: a.to_dto(),
            })
            .collect(),
        models: by_model
            .iter()
            .map(|(m, a)| ModelUsage {
                model: m.clone(),
                usage: a.to_dto(),
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
        usage_coverage: coverage(totals.requests, estimated),
    })
}

/// How many of `requests` were measured exactly (the rest were estimated: the supplier's stream
/// ended before its usage).
fn coverage(requests: i64, estimated: i64) -> UsageCoverage {
    let exact = requests - estimated;
    UsageCoverage {
        requests,
        exact_requests: exact,
        estimated_requests: estimated,
        exact_ratio: if requests == 0 {
            Ratio::Whole(1)
        } else {
            Ratio::Fraction((exact as f64) / (requests as f64))
        },
    }
}

/// A breakdown by an attribution dimension (requests without it are grouped under `null`), or
/// `None` when no request of the window carries it (the breakdown cannot be computed). Summed
/// by the database over the organization's records of the window (its index on organization and
/// start time; on PostgreSQL only the window's month partitions are read), one row per value:
/// nothing is loaded per request. Records past `database.usage_retention_days` are gone, and
/// so is the breakdown of their days.
async fn attributed(
    db: &impl ConnectionTrait,
    org_id: i64,
    (from, to): (DateTime<Utc>, DateTime<Utc>),
    dimension: usage_records::Column,
) -> Result<Option<Vec<(Option<String>, UsageTotals)>>, BillingError> {
    use sea_orm::QuerySelect;
    use usage_records::Column as C;
    type Row = (
        Option<String>,
        i64,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
        Option<i64>,
    );
    let summed = [
        C::InputTokens,
        C::OutputTokens,
        C::CachedTokens,
        C::CacheWriteTokens,
        C::Images,
        C::VideoSeconds,
        C::CostNanos,
        C::ChargedNanos,
        C::WholesaleNanos,
    ];
    let query = usage_records::Entity::find()
        .select_only()
        .column(dimension);
    let rows: Vec<Row> = super::usage_sums::counted_sums(query, &summed)
        .filter(C::OrganizationId.eq(org_id))
        .filter(C::StartedAt.gte(from))
        .filter(C::StartedAt.lt(to))
        .group_by(dimension)
        .into_tuple()
        .all(db)
        .await?;
    if rows.iter().all(|r| r.0.is_none()) {
        return Ok(None);
    }
    let mut groups: BTreeMap<Option<String>, Totals> = BTreeMap::new();
    for (
        value,
        requests,
        input,
        output,
        cached,
        cache_write,
        images,
        video,
        cost,
        charged,
        wholesale,
    ) in rows
    {
        let n = |v: Option<i64>| v.unwrap_or(0);
        groups.entry(value).or_default().merge(&Totals::from_parts([
            requests,
            n(input),
            n(output),
            n(cached),
            n(cache_write),
            n(images),
            n(video),
            n(cost),
            n(charged),
            n(wholesale),
        ]));
    }
    Ok(Some(
        groups.into_iter().map(|(k, t)| (k, t.to_dto())).collect(),
    ))
}

/// Money debited from the wallet to spend in a window (settled usage), from the ledger.
async fn wallet_spend(
    db: &impl ConnectionTrait,
    org_id: i64,
    from: DateTime<Utc>,
    to: DateTime<Utc>,
) -> Result<NanoUsd, BillingError> {
    let code = AccountRef::org_spend(org_id).code;
    Ok(crate::ledger::posted_between(db, &code, from, to).await?)
}

/// What a billing-token command did.
pub enum TokenChange {
    Created(Secret),
    Revoked,
}

/// `billing-token create|rotate`: at most one active token per organization (the database holds
/// it so: a partial unique index); rotating revokes the previous one at once. `create` on an
/// organization that already has one is refused. Concurrent changes of one organization's token
/// queue on its row (locked first), and the change's audit record (`audit`, when a person or the
/// operator's command made it) commits in the same transaction.
pub async fn issue_token(
    state: &AppState,
    org_id: i64,
    rotate: bool,
    audit: Option<crate::services::audit::Audit<'_>>,
) -> Result<Secret, String> {
    let txn = crate::db::begin(&state.db)
        .await
        .map_err(|e| e.to_string())?;
    organizations::Entity::find_by_id(org_id)
        .lock_exclusive()
        .one(&txn)
        .await
        .map_err(|e| e.to_string())?
        .ok_or(format!("organization {org_id} does not exist"))?;
    let now = state.clock.now();
    let retired = retire(&txn, org_id, TokenStatus::Rotated, now)
        .await
        .map_err(|e| e.to_string())?;
    if retired > 0 && !rotate {
        return Err(format!(
            "organization {org_id} already has an active billing token; use rotate"
        ));
    }
    if retired == 0 && rotate {
        return Err(format!(
            "organization {org_id} has no active billing token; use create"
        ));
    }
    let secret = credentials::generate(Kind::BillingToken, state.env);
    org_billing_tokens::ActiveModel {
        organization_id: Set(org_id),
        token_hash: Set(state.hasher.hash(secret.expose())),
        preview: Set(credentials::preview(secret.expose())),
        status: Set(TokenStatus::Active),
        created_at: Set(now),
        revoked_at: Set(None),
        ..Default::default()
    }
    .insert(&txn)
    .await
    .map_err(|e| match e.sql_err() {
        Some(sea_orm::SqlErr::UniqueConstraintViolation(_)) => {
            "another change of this organization's billing token happened at the same time; try again"
                .to_string()
        }
        _ => e.to_string(),
    })?;
    if let Some(a) = audit {
        crate::services::audit::audit(&txn, a, now)
            .await
            .map_err(|e| e.to_string())?;
    }
    txn.commit().await.map_err(|e| e.to_string())?;
    Ok(secret)
}

/// `billing-token revoke`: the organization's active token stops working; with its audit record
/// in the same transaction.
pub async fn revoke_token(
    state: &AppState,
    org_id: i64,
    audit: Option<crate::services::audit::Audit<'_>>,
) -> Result<u64, String> {
    let txn = crate::db::begin(&state.db)
        .await
        .map_err(|e| e.to_string())?;
    let now = state.clock.now();
    let n = retire(&txn, org_id, TokenStatus::Revoked, now)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(a) = audit.filter(|_| n > 0) {
        crate::services::audit::audit(&txn, a, now)
            .await
            .map_err(|e| e.to_string())?;
    }
    txn.commit().await.map_err(|e| e.to_string())?;
    Ok(n)
}

/// Spend per UTC day (cost of usage, nano-USD) and requests, for the `days` days up to and
/// including `today`, oldest first; days without usage are zero. Read from the hourly buckets,
/// the same figures as the daily usage route.
/// Retires the organization's active billing token (if any) as `status` (rotated or revoked) at
/// `now`; the number of tokens retired.
async fn retire(
    txn: &impl ConnectionTrait,
    org_id: i64,
    status: TokenStatus,
    now: DateTime<Utc>,
) -> Result<u64, sea_orm::DbErr> {
    let retired = org_billing_tokens::Entity::update_many()
        .col_expr(
            org_billing_tokens::Column::Status,
            sea_orm::sea_query::Expr::value(status),
        )
        .col_expr(
            org_billing_tokens::Column::RevokedAt,
            sea_orm::sea_query::Expr::value(Some(now)),
        )
        .filter(org_billing_tokens::Column::OrganizationId.eq(org_id))
        .filter(org_billing_tokens::Column::Status.eq(TokenStatus::Active))
        .exec(txn)
        .await?;
    Ok(retired.rows_affected)
}

pub async fn daily_spend(
    db: &impl ConnectionTrait,
    org_id: i64,
    today: NaiveDate,
    days: u32,
) -> Result<Vec<(NaiveDate, NanoUsd, i64)>, BillingError> {
    let first = today - chrono::Duration::days(i64::from(days.clamp(1, 366)) - 1);
    let window = usage::Window::days(usage::Granularity::Day, first, today)?;
    let rows = usage::hourly_rows(db, org_id, None, &window).await?;
    let b = usage::breakdown(&rows, &window, |_| ());
    Ok(b.periods
        .iter()
        .zip(&b.per_period)
        .map(|(t, sums)| (t.date_naive(), sums.cost_usd(), sums.requests))
        .collect())
}

/// The active billing token of organization `org`, if one is.
pub async fn active_token(
    db: &impl ConnectionTrait,
    org: i64,
) -> Result<Option<org_billing_tokens::Model>, sea_orm::DbErr> {
    org_billing_tokens::Entity::find()
        .filter(org_billing_tokens::Column::OrganizationId.eq(org))
        .filter(org_billing_tokens::Column::Status.eq(TokenStatus::Active))
        .one(db)
        .await
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
                Err(BillingError::InvalidDate),
                "{bad:?}"
            );
        }
        assert_eq!(
            parse_date(&p(&["2024-01-05", "2024-01-06"]), today),
            Err(BillingError::InvalidDate)
        );
    }
}

/// Why a key's standing was not answered.
#[derive(Debug)]
pub enum StandingRefused {
    /// No key in the request (the gateway's 401 `missing_api_key`).
    MissingKey,
    /// Not a usable customer key of this environment: malformed, unknown, disabled or expired (the
    /// gateway's 401 `authentication_error`).
    InvalidKey,
    /// The envelope's error (503 `ORG_BALANCE_RECONCILIATION_REQUIRED`, `SERVICE_UNAVAILABLE`).
    Api(BillingError),
}

impl From<BillingError> for StandingRefused {
    fn from(e: BillingError) -> Self {
        StandingRefused::Api(e)
    }
}

/// `GET {compat_base}/key`: the standing of the customer key `presented` (never another key's)
/// and its organization's reconciled balance. A key the gateway would refuse is refused here the
/// same way; an unreconciled balance is 503, never a zero.
pub async fn key_standing(
    state: &AppState,
    presented: Option<&str>,
) -> Result<crate::dto::KeyStanding, StandingRefused> {
    use crate::dto::{KeyLimitsView, KeySpendView, KeyStanding};
    let (row, org) = super::key_reads::authenticate(state, presented).await?;
    let organization = balance(state, &org).await?;
    // One read of the key's spend gives both its budget's standing and its spend.
    let mut preview = crate::services::keys::preview(&row);
    let spent = match state.stores.wallets.key_spend(org.id, &[row.id]).await {
        Ok(report) => report.and_then(|r| r.keys.first().copied()),
        Err(e) => {
            tracing::warn!(error = %e, "key spend unreadable");
            None
        }
    };
    if let (Some(s), Some(view)) = (spent.as_ref(), preview.budget.as_mut()) {
        let windows = opstate::Windows::at(state.clock.now().timestamp_millis());
        crate::services::keys::fill_standing(view, s, &windows);
    }
    let spend = spent.map(|s| KeySpendView {
        day_usd: Usd(s.day),
        month_usd: Usd(s.month),
        held_usd: Usd(s.held),
    });
    let group = state.group(row.group_id);
    Ok(KeyStanding {
        api_key_id: row.id,
        name: row.name.clone(),
        preview: row.preview.clone(),
        group_id: row.group_id,
        group_name: group.as_ref().map(|g| g.name.clone()),
        expires_at: preview.expires_at.clone(),
        limits: KeyLimitsView {
            max_concurrency: row.max_concurrency.map(i64::from).or(group
                .as_ref()
                .and_then(|g| g.key_max_concurrency.map(i64::from))),
            requests_per_minute: row.requests_per_minute.map(i64::from).or(group
                .as_ref()
                .and_then(|g| g.key_requests_per_minute.map(i64::from))),
        },
        budget: preview.budget,
        spend,
        organization,
    })
}
