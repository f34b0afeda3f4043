//! A partner's side of a settled batch: which customers' calls belong to a partner, their
//! wholesale cost at the rates they were priced at, and the accrual posted with the batch.

use super::batch::{Charge, SettleError};
use crate::ledger::{self, AccountRef};
use crate::state::AppState;
use chrono::{DateTime, Utc};
use money::NanoUsd;
use sea_orm::{ConnectionTrait, DbErr, EntityTrait};

/// The customer of an organization a partner resells, with the retail rates of its groups as
/// they are read (cached for the batch).
pub(super) struct Partnered {
    pub(super) partner_id: i64,
    pub(super) customer_id: i64,
    pub(super) retail_of: std::collections::HashMap<i64, Option<i64>>,
}

/// The partner side of organization `org`, or `None` when no partner resells it.
pub(super) async fn partnered(
    txn: &impl ConnectionTrait,
    org: i64,
) -> Result<Option<Partnered>, DbErr> {
    use entities::customers;
    use sea_orm::{ColumnTrait, QueryFilter};
    Ok(customers::Entity::find()
        .filter(customers::Column::OrganizationId.eq(org))
        .one(txn)
        .await?
        .map(|c| Partnered {
            partner_id: c.partner_id,
            customer_id: c.id,
            retail_of: std::collections::HashMap::new(),
        }))
}

/// One charge's wholesale cost: the charge × wholesale / retail of its group, rounded down
/// (each charge at the rates it was charged at, carried by its event; only events of older
/// gateways fall back to today's rates). Zero for a charge of nothing, or when a rate is unknown.
pub(super) async fn wholesale_of(
    txn: &impl ConnectionTrait,
    state: &AppState,
    p: &mut Partnered,
    c: &Charge<'_>,
) -> Result<NanoUsd, DbErr> {
    use entities::customer_groups;
    use sea_orm::{ColumnTrait, QueryFilter};
    if !c.charged.is_positive() {
        return Ok(NanoUsd::ZERO);
    }
    let group = c.event.group_id;
    let retail = match (c.event.retail_rate, p.retail_of.get(&group)) {
        (Some(r), _) => Some(r.ppm()),
        (None, Some(r)) => *r,
        (None, None) => {
            let r = customer_groups::Entity::find()
                .filter(customer_groups::Column::CustomerId.eq(p.customer_id))
                .filter(customer_groups::Column::GroupId.eq(group))
                .one(txn)
                .await?
                .map(|g| g.retail_rate_multiplier_ppm);
            p.retail_of.insert(group, r);
            r
        }
    };
    let wholesale = c.event.wholesale_rate.map(|w| w.ppm()).or_else(|| {
        state
            .group(group)
            .map(|g| g.wholesale_rate_multiplier.ppm())
    });
    let (Some(retail), Some(wholesale)) = (retail, wholesale) else {
        return Ok(NanoUsd::ZERO);
    };
    Ok(wholesale_cost(c.charged, wholesale, retail))
}

/// `charged` × `wholesale` / `retail` (rates in millionths), rounded down; never negative, never
/// more than fits. The one formula of the partner's cost of a charge.
pub(super) fn wholesale_cost(charged: NanoUsd, wholesale_ppm: i64, retail_ppm: i64) -> NanoUsd {
    let cost = (i128::from(charged.nanos().max(0)) * i128::from(wholesale_ppm.max(0)))
        .div_euclid(i128::from(retail_ppm.max(1)));
    NanoUsd::from_nanos(i64::try_from(cost).unwrap_or(i64::MAX))
}

/// The partner's side of charges of one organization: the sum of their wholesale costs,
/// accrued on `partner:P:outstanding_usage` against `partner:P:usage_payable` (what the partner
/// owes for its customers' usage) in one posting, reference `wholesale:{reference}`.
pub(super) async fn book_partner_usage(
    txn: &impl ConnectionTrait,
    partner_id: i64,
    charges: &[&Charge<'_>],
    reference: &str,
    now: DateTime<Utc>,
) -> Result<(), SettleError> {
    if charges.iter().all(|c| !c.charged.is_positive()) {
        return Ok(());
    }
    let cost = NanoUsd::checked_sum(charges.iter().map(|c| c.wholesale))
        .ok_or(ledger::LedgerError::Overflow)?;
    let payable = AccountRef {
        code: format!("partner:{partner_id}:usage_payable"),
        kind: ledger::AccountKind::PartnerUsagePayable,
        partner_id: Some(partner_id),
        organization_id: None,
    };
    ledger::transfer_at(
        txn,
        &format!("wholesale:{reference}"),
        "wholesale_usage",
        &payable,
        &AccountRef::partner_outstanding_usage(partner_id),
        cost,
        now,
    )
    .await?;
    Ok(())
}

/// Each organization's partner (`None`: no partner resells it), as read for a batch.
pub(super) type Partners = std::collections::HashMap<i64, Option<Partnered>>;

/// Prices each new charge at its partner's wholesale (zero without a partner or a charge);
/// returns the partners read.
pub(super) async fn price_wholesale(
    txn: &impl ConnectionTrait,
    state: &AppState,
    fresh: &mut [Charge<'_>],
) -> Result<Partners, SettleError> {
    use std::collections::hash_map::Entry;
    let mut partners = Partners::new();
    for c in fresh.iter_mut() {
        let org = c.event.org_id;
        let p = match partners.entry(org) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => e.insert(partnered(txn, org).await?),
        };
        if let Some(p) = p
            && c.charged.is_positive()
        {
            c.wholesale = wholesale_of(txn, state, p, c).await?;
        }
    }
    Ok(partners)
}
