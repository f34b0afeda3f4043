//! Partner funding: identity, the funding view, top-ups, allocations and group prices.

use super::customers::CustomerError;
use super::fault::{Fault, Shortfall};
use super::group_prices;
use super::group_prices::ReservationError;
use crate::caller::Caller;
use crate::dto::{
    AllocationRequest, CustomerData, Funding, Group, GroupRateRequest, Multiplier, PartnerIdentity,
    TokenInfo, TopUpRequest, TopUpSession, Usd, multiplier_of, usd_of,
};
use crate::ledger::{self, AccountKind, AccountRef};
use crate::pricing;
use crate::services::customers;
use crate::services::effects::{Effect, Written};
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

/// Why a funding move (a top-up, an allocation, a group's price) is refused.
#[derive(Debug, thiserror::Error)]
pub enum FundingError {
    /// A top-up amount outside (0, 1 million] USD, or not whole cents of at least 0.50 USD with a
    /// payment provider.
    #[error("amount_usd must be a positive amount with at most 9 decimals")]
    InvalidTopUpAmount,
    /// The payment provider could not be reached or refused the call (nothing was stored).
    #[error("the payment provider is unavailable; retry shortly ({0})")]
    Provider(String),
    /// `action` is not `increase`, `decrease` or `set_limit`.
    #[error("action must be one of increase, decrease, set_limit")]
    InvalidAllocationAction,
    /// The allocation amount is not positive, has more than 9 decimals, or overflows.
    #[error("amount_usd must be a positive amount with at most 9 decimals")]
    InvalidAllocationAmount,
    /// The limit is negative or has more than 9 decimals.
    #[error("limit_usd must be a non-negative amount with at most 9 decimals")]
    InvalidAllocationLimit,
    /// The new allocation would be below what the customer already used.
    #[error("the allocation cannot go below what the customer already used")]
    LimitBelowUsed { used: NanoUsd },
    /// Money a decrease would take back is held by requests in flight.
    #[error("part of the organization balance is held by requests in flight")]
    BalanceReserved { available: NanoUsd },
    /// The organization's wallet mirror is missing, so its holds are unknown; it is being rebuilt.
    #[error("the organization's wallet mirror is being rebuilt; retry shortly")]
    MirrorMissing,
    /// The customer has no such group.
    #[error("the customer has no such model group")]
    GroupNotFound,
    /// The group's retail multiplier is missing or malformed.
    #[error("retail_rate_multiplier must be a positive number with at most 6 decimals")]
    InvalidGroupRate,
    /// The group's retail multiplier is below the partner's floor.
    #[error("the retail rate multiplier is below the retail floor {floor}")]
    RateBelowFloor { floor: RateMultiplier },
    /// Partner funding does not cover the reservation.
    #[error("available partner funding does not cover the reservation")]
    Short(Shortfall),
    #[error(transparent)]
    Customer(#[from] CustomerError),
    #[error(transparent)]
    Fault(Fault),
}
super::fault::faults!(FundingError);

impl From<ReservationError> for FundingError {
    fn from(e: ReservationError) -> Self {
        match e {
            ReservationError::Short(s) => FundingError::Short(s),
            ReservationError::Fault(f) => FundingError::Fault(f),
        }
    }
}

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
) -> Result<Funding, Fault> {
    view_of(db, state, caller.partner_id).await
}

/// The funding object of partner `p` (the API's and the dashboard's).
pub async fn view_of(
    db: &impl ConnectionTrait,
    state: &AppState,
    p: i64,
) -> Result<Funding, Fault> {
    let available = ledger::balance(db, &AccountRef::partner_available(p).code).await?;
    let reserved = ledger::partner_total(db, p, AccountKind::PartnerReserved).await?;
    let outstanding = ledger::balance(db, &AccountRef::partner_outstanding_usage(p).code).await?;
    Ok(Funding {
        reseller_id: p,
        available_funding_usd: Usd(available),
        reserved_allocations_usd: Usd(reserved),
        outstanding_usage_usd: Usd(outstanding),
        // A page a person can open: how to add funds (the session route itself takes POST only).
        top_up_url: state.public_url("/billing/top-up"),
    })
}

/// Largest single top-up accepted (1 million USD).
const MAX_TOP_UP: NanoUsd = NanoUsd::from_nanos(1_000_000 * 1_000_000_000);

/// Validates a top-up body.
pub fn top_up_amount(body: TopUpRequest) -> Result<NanoUsd, FundingError> {
    body.amount_usd
        .as_ref()
        .and_then(usd_of)
        .filter(|n| n.is_positive() && *n <= MAX_TOP_UP)
        .ok_or(FundingError::InvalidTopUpAmount)
}

/// Smallest top-up a payment provider takes (Stripe's minimum charge in USD: 0.50).
const MIN_PROVIDER_TOP_UP: NanoUsd = NanoUsd::from_nanos(500_000_000);
/// Nano-USD in a cent.
pub const NANOS_PER_CENT: i64 = 10_000_000;

/// `POST /funding/top-up-sessions`: with `[payments] provider = "stripe"`, a Stripe Checkout
/// Session for the amount (whole cents, at least 0.50 USD; else 400
/// `INVALID_PARTNER_TOP_UP_AMOUNT`) whose hosted URL is returned; paying it credits partner
/// funding through the webhook ([`super::stripe_events::stripe_event`]). Without a provider, a
/// hosted page on this service whose payment the operator settles (`partner fund`).
pub async fn create_top_up(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    amount: NanoUsd,
) -> Result<Written<TopUpSession>, FundingError> {
    const ALPHABET: &[u8] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    let token: String = {
        let mut rng = rand::rng();
        (0..32)
            .map(|_| char::from(ALPHABET[rng.random_range(0..ALPHABET.len())]))
            .collect()
    };
    if state.settings.payments.stripe.is_some()
        && (amount.nanos() % NANOS_PER_CENT != 0 || amount < MIN_PROVIDER_TOP_UP)
    {
        return Err(FundingError::InvalidTopUpAmount);
    }
    let row = top_up_sessions::ActiveModel {
        partner_id: Set(caller.partner_id),
        token_hash: Set(state.hasher.hash(&token)),
        amount_nanos: Set(amount.nanos()),
        status: Set(TopUpStatus::Open),
        created_at: Set(Utc::now()),
        paid_at: Set(None),
        provider: Set(state
            .settings
            .payments
            .stripe
            .as_ref()
            .map(|_| "stripe".to_string())),
        provider_session_id: Set(None),
        ..Default::default()
    }
    .insert(txn)
    .await?;
    let url = match (&state.settings.payments.stripe, &state.stripe) {
        (None, _) => state.public_url(&format!("/billing/top-up/{token}")),
        (Some(_), None) => {
            return Err(FundingError::Provider("not configured".into()));
        }
        (Some(_), Some(stripe)) => {
            // Inside the write's transaction: a refused or unreachable provider stores nothing
            // (the partner retries with the same Idempotency-Key; Stripe's own idempotency key,
            // derived from this row's id, is then new, as the row is).
            let session = stripe
                .create_session(row.id, caller.partner_id, amount.nanos() / NANOS_PER_CENT)
                .await
                .map_err(|e| {
                    tracing::warn!(error = %e, "top-up: checkout session not created");
                    FundingError::Provider(e.to_string())
                })?;
            let url = session
                .url
                .clone()
                .ok_or_else(|| FundingError::Provider("the checkout session has no URL".into()))?;
            let mut update: top_up_sessions::ActiveModel = row.clone().into();
            update.provider_session_id = Set(Some(session.id.clone()));
            update.update(txn).await?;
            url
        }
    };
    Ok(Written::plain(TopUpSession {
        id: row.id,
        amount_usd: Usd(amount),
        status: row.status.to_value(),
        url,
    }))
}

/// What the hosted top-up page shows.
pub struct TopUpPage {
    pub amount: NanoUsd,
    pub partner_id: i64,
    pub status: String,
}

/// The top-up session behind a page token (`None`: no such session).
pub async fn top_up_page(state: &AppState, token: &str) -> Result<Option<TopUpPage>, Fault> {
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

/// Credits partner funding once per `reference` (a paid top-up, an automatic recharge, the
/// operator's `partner fund`), with the partner's audit record in the same transaction (where
/// the money came from, by the reference's kind).
pub async fn fund(
    txn: &impl ConnectionTrait,
    partner_id: i64,
    amount: NanoUsd,
    reference: &str,
) -> Result<ledger::Posted, Fault> {
    customers::lock_partner(txn, partner_id).await?;
    let posted = ledger::transfer(
        txn,
        reference,
        "partner_top_up",
        &AccountRef::external(),
        &AccountRef::partner_available(partner_id),
        amount,
    )
    .await?;
    if posted != ledger::Posted::AlreadyPosted {
        let source = if reference.starts_with("stripe-recharge:") {
            "automatic recharge"
        } else if reference.starts_with("stripe:") {
            "top-up paid on Stripe Checkout"
        } else if reference.starts_with("demo:") {
            "the quickstart's demo"
        } else {
            "the operator's partner fund command"
        };
        crate::services::audit::audit(
            txn,
            crate::services::audit::Audit {
                organization: None,
                partner: Some(partner_id),
                actor: None,
                action: "funding_added",
                target: Some(reference.to_string()),
                detail: serde_json::json!({
                    "amount_usd": amount.to_decimal_usd().to_string(),
                    "source": source,
                }),
                ip: None,
            },
            chrono::Utc::now(),
        )
        .await?;
    }
    Ok(posted)
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
    pub fn parse(body: AllocationRequest) -> Result<Allocation, FundingError> {
        let amount = || {
            body.amount_usd
                .as_ref()
                .and_then(usd_of)
                .filter(|n| n.is_positive() && *n <= MAX_TOP_UP)
                .ok_or(FundingError::InvalidAllocationAmount)
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
                .ok_or(FundingError::InvalidAllocationLimit),
            _ => Err(FundingError::InvalidAllocationAction),
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
) -> Result<Written<CustomerData>, FundingError> {
    customers::lock_partner(txn, caller.partner_id).await?;
    let customer = customers::find(txn, caller, customer_id).await?;
    let org = customers::require_active(txn, &customer, state.clock.now()).await?;
    let cap = NanoUsd::from_nanos(customer.allocation_cap_nanos);
    let new_cap = match change {
        Allocation::Increase(a) => cap.checked_add(a),
        Allocation::Decrease(a) => cap.checked_sub(a),
        Allocation::SetLimit(l) => Some(l),
    }
    .ok_or(FundingError::InvalidAllocationAmount)?;
    let used = customers::used(txn, org.id).await?;
    if new_cap < used || new_cap.is_negative() {
        return Err(FundingError::LimitBelowUsed { used });
    }
    let delta = new_cap
        .checked_sub(cap)
        .ok_or(FundingError::InvalidAllocationAmount)?;
    let pairs = group_prices::price_pairs(txn, state, customer.id).await?;
    group_prices::rebalance_reservation(
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
    let data = customers::view(txn, state, &customer, None, None).await?;
    let effect = mirror(state, org.id, delta, format!("{op}:wallet")).await?;
    Ok(Written::with_effects(data, effect.into_iter().collect()))
}

/// The wallet mirror's side of an allocation change of `delta`. A decrease is the last step
/// before the commit: the mirror refuses, atomically, to take back money held by requests in
/// flight; should the commit then fail, the mirror is below the ledger (the safe direction) and
/// is reloaded from it. An increase credits the mirror after the commit.
async fn mirror(
    state: &AppState,
    org: i64,
    delta: NanoUsd,
    reference: String,
) -> Result<Option<Effect>, FundingError> {
    if delta.is_positive() {
        return Ok(Some(Effect::CreditWallet {
            org,
            amount: delta,
            reference,
        }));
    }
    if !delta.is_negative() {
        return Ok(None);
    }
    match state.stores.wallets.adjust(org, delta, &reference).await? {
        Adjustment::Applied { .. } | Adjustment::Duplicate => {
            Ok(Some(Effect::ReloadWalletIfAborted { org }))
        }
        Adjustment::Insufficient { available } => Err(FundingError::BalanceReserved { available }),
        // Without the mirror the holds are unknown: refuse until it is rebuilt.
        Adjustment::Missing => {
            state.wallet_stale(org);
            Err(FundingError::MirrorMissing)
        }
    }
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
) -> Result<Written<Vec<Group>>, FundingError> {
    customers::lock_partner(txn, caller.partner_id).await?;
    let customer = customers::find(txn, caller, customer_id).await?;
    customers::require_active(txn, &customer, state.clock.now()).await?;
    let group_id: i64 = group_id.parse().map_err(|_| FundingError::GroupNotFound)?;
    let row = customer_groups::Entity::find()
        .filter(customer_groups::Column::CustomerId.eq(customer.id))
        .filter(customer_groups::Column::GroupId.eq(group_id))
        .one(txn)
        .await?
        .ok_or(FundingError::GroupNotFound)?;
    let group = state.group(group_id).ok_or(FundingError::GroupNotFound)?;
    let floor = pricing::retail_floor(caller.min_rate, group.wholesale_rate_multiplier);
    if rate < floor {
        return Err(FundingError::RateBelowFloor { floor });
    }
    let mut active: customer_groups::ActiveModel = row.into();
    active.retail_rate_multiplier_ppm = Set(rate.ppm());
    active.updated_at = Set(Utc::now());
    active.update(txn).await?;
    let pairs = group_prices::price_pairs(txn, state, customer.id).await?;
    group_prices::rebalance_reservation(
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
    let data = group_prices::groups(txn, state, caller, &customer).await?;
    Ok(Written::with_effects(data, effects))
}

/// Validates a group-rate body: exactly `retail_rate_multiplier`, a positive number with at most
/// six decimals.
pub fn group_rate(body: GroupRateRequest) -> Result<RateMultiplier, FundingError> {
    if !body.unknown.is_empty() {
        return Err(FundingError::InvalidGroupRate);
    }
    body.retail_rate_multiplier
        .as_ref()
        .and_then(multiplier_of)
        .ok_or(FundingError::InvalidGroupRate)
}

/// A partner's top-ups still open (awaiting payment), the latest first.
pub async fn open_top_ups(
    db: &impl ConnectionTrait,
    partner_id: i64,
) -> Result<Vec<top_up_sessions::Model>, Fault> {
    use sea_orm::QueryOrder;
    Ok(top_up_sessions::Entity::find()
        .filter(top_up_sessions::Column::PartnerId.eq(partner_id))
        .filter(top_up_sessions::Column::Status.eq(TopUpStatus::Open))
        .order_by_desc(top_up_sessions::Column::Id)
        .all(db)
        .await?)
}
