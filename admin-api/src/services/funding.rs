//! Partner funding: identity, the funding view, top-ups, allocations and group prices.

use crate::caller::Caller;
use crate::dto::{
    AllocationRequest, CustomerData, Funding, Group, GroupRateRequest, Multiplier, PartnerIdentity,
    TokenInfo, TopUpRequest, TopUpSession, Usd, multiplier_of, usd_of,
};
use crate::error::ApiError;
use crate::ledger::{self, AccountKind, AccountRef};
use crate::partner::idempotency::{Effect, Success};
use crate::pricing;
use crate::services::customers;
use crate::state::AppState;
use chrono::Utc;
use entities::status::{KeyStatus, TopUpStatus};
use entities::{customer_groups, customers as customer_rows, top_up_sessions};
use money::{NanoUsd, RateMultiplier};
use opstate::Adjustment;
use rand::Rng;
use sea_orm::ActiveEnum;
use sea_orm::{ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, Set};
use serde_json::Value;

/// `GET /me`.
pub fn me(caller: &Caller) -> PartnerIdentity {
    PartnerIdentity {
        partner_id: caller.partner_id,
        reseller_id: caller.partner_id,
        name: caller.partner_name.clone(),
        role: caller.role.clone(),
        token: TokenInfo {
            id: caller.token_id,
            preview: caller.token_preview.clone(),
            scopes: caller.scopes.clone(),
        },
        agreement_minimum_rate_multiplier: Multiplier(caller.min_rate),
    }
}

/// `GET /funding`.
pub async fn view(
    db: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
) -> Result<Funding, ApiError> {
    let p = caller.partner_id;
    let available = ledger::balance(db, &AccountRef::partner_available(p).code).await?;
    let reserved = ledger::partner_total(db, p, AccountKind::PartnerReserved).await?;
    let outstanding = ledger::balance(db, &AccountRef::partner_outstanding_usage(p).code).await?;
    Ok(Funding {
        reseller_id: p,
        available_funding_usd: Usd(available),
        reserved_allocations_usd: Usd(reserved),
        outstanding_usage_usd: Usd(outstanding),
        top_up_url: format!("{}/partner/v1/funding/top-up-sessions", base(state)),
    })
}

fn base(state: &AppState) -> String {
    state
        .settings
        .server
        .public_base_url
        .as_str()
        .trim_end_matches('/')
        .to_string()
}

/// Largest single top-up accepted (1 million USD).
const MAX_TOP_UP: NanoUsd = NanoUsd::from_nanos(1_000_000 * 1_000_000_000);

/// Validates a top-up body.
pub fn top_up_amount(body: TopUpRequest) -> Result<NanoUsd, ApiError> {
    body.amount_usd
        .as_ref()
        .and_then(usd_of)
        .filter(|n| n.is_positive() && *n <= MAX_TOP_UP)
        .ok_or(ApiError::InvalidTopUpAmount)
}

/// `POST /funding/top-up-sessions`: a hosted link on this service. Paying it is the operator's
/// `partner fund` command until a payment provider is wired.
pub async fn create_top_up(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    amount: NanoUsd,
) -> Result<Success<TopUpSession>, ApiError> {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let token: String = {
        let mut rng = rand::rng();
        (0..32)
            .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
            .collect()
    };
    let row = top_up_sessions::ActiveModel {
        partner_id: Set(caller.partner_id),
        token_hash: Set(state.hasher.hash(&token)),
        amount_nanos: Set(amount.nanos()),
        status: Set(TopUpStatus::Open),
        created_at: Set(Utc::now()),
        paid_at: Set(None),
        ..Default::default()
    }
    .insert(txn)
    .await?;
    Ok(Success::plain(TopUpSession {
        id: row.id,
        amount_usd: Usd(amount),
        status: row.status.to_value(),
        url: format!("{}/billing/top-up/{token}", base(state)),
    }))
}

/// What the hosted top-up page shows.
pub struct TopUpPage {
    pub amount: NanoUsd,
    pub partner_id: i64,
    pub status: String,
}

/// The top-up session behind a page token (`None`: no such session).
pub async fn top_up_page(state: &AppState, token: &str) -> Result<Option<TopUpPage>, ApiError> {
    let row = top_up_sessions::Entity::find()
        .filter(top_up_sessions::Column::TokenHash.eq(state.hasher.hash(token)))
        .one(&state.db)
        .await?;
    Ok(row.map(|s| TopUpPage {
        amount: NanoUsd::from_nanos(s.amount_nanos),
        partner_id: s.partner_id,
        status: s.status.to_value(),
    }))
}

/// The operator's `partner fund`: credits partner funding (what a paid top-up does), once per
/// `reference`.
pub async fn fund(
    txn: &impl ConnectionTrait,
    partner_id: i64,
    amount: NanoUsd,
    reference: &str,
) -> Result<ledger::Posted, ApiError> {
    customers::lock_partner(txn, partner_id).await?;
    ledger::transfer(
        txn,
        reference,
        "partner_top_up",
        &AccountRef::external(),
        &AccountRef::partner_available(partner_id),
        amount,
    )
    .await
    .map_err(ApiError::from)
}

/// An allocation change.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allocation {
    Increase(NanoUsd),
    Decrease(NanoUsd),
    SetLimit(NanoUsd),
}

impl Allocation {
    /// Validates an allocations body.
    pub fn parse(body: AllocationRequest) -> Result<Allocation, ApiError> {
        let amount = || {
            body.amount_usd
                .as_ref()
                .and_then(usd_of)
                .filter(|n| n.is_positive() && *n <= MAX_TOP_UP)
                .ok_or(ApiError::InvalidAllocationAmount)
        };
        match body.action.as_ref().and_then(Value::as_str) {
            Some("increase") => Ok(Allocation::Increase(amount()?)),
            Some("decrease") => Ok(Allocation::Decrease(amount()?)),
            Some("set_limit") => body
                .limit_usd
                .as_ref()
                .and_then(usd_of)
                .filter(|n| !n.is_negative() && *n <= MAX_TOP_UP)
                .map(Allocation::SetLimit)
                .ok_or(ApiError::InvalidAllocationLimit),
            _ => Err(ApiError::InvalidAllocationAction),
        }
    }
}

/// `POST /customers/{id}/allocations`: moves the allocation (the partner-funded reporting target),
/// the organization balance by the same difference, and the partner funding reserved for it.
pub async fn allocate(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    op: &str,
    customer_id: &str,
    change: Allocation,
) -> Result<Success<CustomerData>, ApiError> {
    customers::lock_partner(txn, caller.partner_id).await?;
    let customer = customers::find(txn, caller, customer_id).await?;
    let org = customers::require_active(txn, &customer).await?;
    let cap = NanoUsd::from_nanos(customer.allocation_cap_nanos);
    let new_cap = match change {
        Allocation::Increase(a) => cap.checked_add(a),
        Allocation::Decrease(a) => cap.checked_sub(a),
        Allocation::SetLimit(l) => Some(l),
    }
    .ok_or(ApiError::InvalidAllocationAmount)?;
    let used = customers::used(txn, org.id).await?;
    if new_cap < used || new_cap.is_negative() {
        return Err(ApiError::AllocationLimitBelowUsed { used });
    }
    let delta = new_cap
        .checked_sub(cap)
        .ok_or(ApiError::InvalidAllocationAmount)?;
    let pairs = customers::price_pairs(txn, state, customer.id).await?;
    customers::rebalance_reservation(
        txn,
        caller.partner_id,
        customer.id,
        new_cap,
        &pairs,
        &format!("{op}:reserve"),
    )
    .await?;
    ledger::transfer(
        txn,
        &format!("{op}:allocate"),
        "allocation",
        &AccountRef::partner_allocations(caller.partner_id),
        &AccountRef::org_wallet(org.id),
        delta,
    )
    .await?;
    let mut row: customer_rows::ActiveModel = customer.clone().into();
    row.allocation_cap_nanos = Set(new_cap.nanos());
    let customer = row.update(txn).await?;
    let wallet_ref = format!("{op}:wallet");
    let data = customers::view(txn, state, &customer, None, None).await?;
    let mut effects = Vec::new();
    if delta.is_negative() {
        // The last step before the commit: the mirror refuses, atomically, to take back money
        // held by requests in flight. Should the commit then fail, the mirror is below the ledger
        // (the safe direction) and is reloaded from it.
        match state
            .stores
            .wallets
            .adjust(org.id, delta, &wallet_ref)
            .await?
        {
            Adjustment::Applied { .. } | Adjustment::Duplicate => {
                effects.push(Effect::ReloadWalletIfAborted { org: org.id });
            }
            Adjustment::Insufficient { available } => {
                return Err(ApiError::BalanceReserved { available });
            }
            // Without the mirror the holds are unknown: refuse until it is rebuilt.
            Adjustment::Missing => {
                state.wallet_stale(org.id);
                return Err(ApiError::Unavailable);
            }
        }
    } else if delta.is_positive() {
        effects.push(Effect::CreditWallet {
            org: org.id,
            amount: delta,
            reference: wallet_ref,
        });
    }
    Ok(Success::with_effects(data, effects))
}

/// `PUT /customers/{id}/groups/{group}/rate`.
pub async fn set_rate(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    op: &str,
    customer_id: &str,
    group_id: &str,
    rate: RateMultiplier,
) -> Result<Success<Vec<Group>>, ApiError> {
    customers::lock_partner(txn, caller.partner_id).await?;
    let customer = customers::find(txn, caller, customer_id).await?;
    customers::require_active(txn, &customer).await?;
    let group_id: i64 = group_id.parse().map_err(|_| ApiError::GroupNotFound)?;
    let row = customer_groups::Entity::find()
        .filter(customer_groups::Column::CustomerId.eq(customer.id))
        .filter(customer_groups::Column::GroupId.eq(group_id))
        .one(txn)
        .await?
        .ok_or(ApiError::GroupNotFound)?;
    let group = state
        .settings
        .group(group_id)
        .ok_or(ApiError::GroupNotFound)?;
    let floor = pricing::retail_floor(caller.min_rate, group.wholesale_rate_multiplier);
    if rate < floor {
        return Err(ApiError::RetailRateBelowFloor { floor });
    }
    let mut active: customer_groups::ActiveModel = row.into();
    active.retail_rate_multiplier_ppm = Set(rate.ppm());
    active.updated_at = Set(Utc::now());
    active.update(txn).await?;
    let pairs = customers::price_pairs(txn, state, customer.id).await?;
    customers::rebalance_reservation(
        txn,
        caller.partner_id,
        customer.id,
        NanoUsd::from_nanos(customer.allocation_cap_nanos),
        &pairs,
        &format!("{op}:reserve"),
    )
    .await?;
    // The group's keys carry their price to the gateway: republish them after the commit.
    let keys = entities::customer_api_keys::Entity::find()
        .filter(entities::customer_api_keys::Column::OrganizationId.eq(customer.organization_id))
        .filter(entities::customer_api_keys::Column::GroupId.eq(group_id))
        .filter(entities::customer_api_keys::Column::Status.eq(KeyStatus::Active))
        .all(txn)
        .await?;
    let effects = keys
        .iter()
        .map(|k| Effect::PublishKey {
            hash: k.key_hash.clone(),
            record: crate::keys::record_of(k, Some(rate)),
        })
        .collect();
    let data = customers::groups(txn, state, caller, &customer).await?;
    Ok(Success::with_effects(data, effects))
}

/// Validates a group-rate body: exactly `retail_rate_multiplier`, a positive number with at most
/// six decimals.
pub fn group_rate(body: GroupRateRequest) -> Result<RateMultiplier, ApiError> {
    if !body.unknown.is_empty() {
        return Err(ApiError::InvalidGroupRate);
    }
    body.retail_rate_multiplier
        .as_ref()
        .and_then(multiplier_of)
        .ok_or(ApiError::InvalidGroupRate)
}
