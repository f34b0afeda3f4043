//! A customer's groups and retail prices: every configured group at the customer's retail
//! multiplier, the pairs a price change writes, and the wallet's reservation kept in step.

use super::fault::{Fault, Shortfall};
use crate::caller::Caller;
use crate::dto::{Group, Multiplier};
use crate::ledger::{self, AccountRef};
use crate::pricing;
use crate::state::AppState;
use entities::{customer_groups, customers};
use money::{NanoUsd, RateMultiplier};
use sea_orm::ActiveEnum;
use sea_orm::{ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder};

/// Why a customer's reservation cannot be brought to its formula's value.
#[derive(Debug, thiserror::Error)]
pub enum ReservationError {
    /// Available partner funding does not cover the increase.
    #[error("available partner funding does not cover the reservation")]
    Short(Shortfall),
    #[error(transparent)]
    Fault(Fault),
}
super::fault::faults!(ReservationError);

/// The customer's groups with prices.
pub async fn groups(
    db: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    customer: &customers::Model,
) -> Result<Vec<Group>, Fault> {
    let rows = customer_groups::Entity::find()
        .filter(customer_groups::Column::CustomerId.eq(customer.id))
        .order_by_asc(customer_groups::Column::GroupId)
        .all(db)
        .await?;
    let mut list = Vec::with_capacity(rows.len());
    for row in &rows {
        let Some(g) = state.group(row.group_id) else {
            continue;
        };
        list.push(Group {
            id: g.id,
            name: g.name.clone(),
            description: g.description.clone(),
            product_code: g.product_code.clone(),
            rate_multiplier: Multiplier(stored_rate(row.retail_rate_multiplier_ppm)?),
            status: row.status.to_value(),
            wholesale_rate_multiplier: Multiplier(g.wholesale_rate_multiplier),
            retail_floor_rate_multiplier: Multiplier(pricing::retail_floor(
                caller.min_rate,
                g.wholesale_rate_multiplier,
            )),
        });
    }
    Ok(list)
}

/// The customer's groups as (wholesale, retail) pairs, for reservations.
pub async fn price_pairs(
    db: &impl ConnectionTrait,
    state: &AppState,
    customer_id: i64,
) -> Result<Vec<(RateMultiplier, RateMultiplier)>, Fault> {
    let rows = customer_groups::Entity::find()
        .filter(customer_groups::Column::CustomerId.eq(customer_id))
        .all(db)
        .await?;
    let mut pairs = Vec::with_capacity(rows.len());
    for r in &rows {
        if let Some(g) = state.group(r.group_id) {
            pairs.push((
                g.wholesale_rate_multiplier,
                stored_rate(r.retail_rate_multiplier_ppm)?,
            ));
        }
    }
    Ok(pairs)
}

/// A multiplier read from the ledger database, where it was written validated: one that is not
/// positive is a broken row, an internal error (never a free price).
pub fn stored_rate(ppm: i64) -> Result<RateMultiplier, Fault> {
    RateMultiplier::from_ppm(ppm).ok_or(Fault::Broken("a stored rate multiplier is not positive"))
}

/// Brings the partner funding reserved for a customer to the formula's value; refuses with
/// `PARTNER_FUNDING_INSUFFICIENT` when available funding cannot cover an increase.
pub async fn rebalance_reservation(
    txn: &impl ConnectionTrait,
    partner_id: i64,
    customer_id: i64,
    cap: NanoUsd,
    pairs: &[(RateMultiplier, RateMultiplier)],
    reference: &str,
) -> Result<(), ReservationError> {
    let target = pricing::reservation(cap, pairs).ok_or(Fault::Broken(
        "a reservation does not fit in 64-bit nano-USD",
    ))?;
    let current = ledger::balance(
        txn,
        &AccountRef::partner_reserved(partner_id, customer_id).code,
    )
    .await?;
    let delta = target.checked_sub(current).ok_or(Fault::Broken(
        "a reservation change does not fit in 64-bit nano-USD",
    ))?;
    if delta.is_positive() {
        let available =
            ledger::balance(txn, &AccountRef::partner_available(partner_id).code).await?;
        if delta > available {
            return Err(ReservationError::Short(Shortfall {
                available,
                required: delta,
            }));
        }
    }
    ledger::transfer(
        txn,
        reference,
        "partner_reservation",
        &AccountRef::partner_available(partner_id),
        &AccountRef::partner_reserved(partner_id, customer_id),
        delta,
    )
    .await?;
    Ok(())
}
