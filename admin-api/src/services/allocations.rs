//! Automatic allocations (issue 32): partner funding moved to a customer's organization when its
//! balance falls below the rule's threshold, once per crossing across the fleet (see `watch`),
//! within the rule's monthly limit; their settings and run history.

use super::MAX_RULE_USD;
use super::contacts::{mail_all, partner_contacts};
use super::customers::CustomerError;
use super::fault::Fault;
use super::funding::FundingError;
use super::wallets::available;
use crate::caller::Caller;
use crate::services::funding::{self, Allocation};
use crate::state::AppState;
use chrono::{DateTime, Datelike, TimeZone, Utc};
use entities::{auto_allocation_rules as rules, auto_allocations as runs, customers, partners};
use money::NanoUsd;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};

/// Why an automatic allocation rule is refused, or its run failed.
#[derive(Debug, thiserror::Error)]
pub enum AutoAllocationError {
    /// The rule's body is malformed; the text says which field.
    #[error("invalid automatic allocation: {0}")]
    Invalid(String),
    #[error(transparent)]
    Customer(#[from] CustomerError),
    /// The allocation the rule made was refused (other than for funding, which is recorded).
    #[error(transparent)]
    Funding(#[from] FundingError),
    #[error(transparent)]
    Fault(Fault),
}
super::fault::faults!(AutoAllocationError);

/// An automatic allocation rule as set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AutoRule {
    pub below: NanoUsd,
    pub amount: NanoUsd,
    pub monthly_cap: NanoUsd,
}

impl AutoRule {
    /// Checks a rule: every amount positive and at most [`MAX_RULE_USD`], the amount at most the
    /// monthly cap. `Err`: the sentence to show.
    pub fn check(self) -> Result<AutoRule, String> {
        for (name, v) in [
            ("below_usd", self.below),
            ("amount_usd", self.amount),
            ("monthly_cap_usd", self.monthly_cap),
        ] {
            if !v.is_positive() || v > MAX_RULE_USD {
                return Err(format!(
                    "{name} must be a positive amount up to 1000000 with at most 9 decimals"
                ));
            }
        }
        if self.amount > self.monthly_cap {
            return Err("amount_usd must be at most monthly_cap_usd".into());
        }
        Ok(self)
    }
}

/// The automatic allocation rule of customer `customer_id`, if one is set.
pub async fn rule_of(
    db: &impl ConnectionTrait,
    customer_id: i64,
) -> Result<Option<rules::Model>, AutoAllocationError> {
    Ok(rules::Entity::find_by_id(customer_id).one(db).await?)
}

/// Sets (or, with `None`, removes) customer `customer_id`'s rule; a set rule starts armed.
pub async fn set_rule(
    db: &impl ConnectionTrait,
    customer_id: i64,
    rule: Option<AutoRule>,
    now: DateTime<Utc>,
) -> Result<Option<rules::Model>, AutoAllocationError> {
    let previous = rules::Entity::find_by_id(customer_id).one(db).await?;
    rules::Entity::delete_by_id(customer_id).exec(db).await?;
    let Some(rule) = rule else {
        return Ok(None);
    };
    // A new generation: a pass that read the old rule claims nothing.
    let generation = previous.map_or(0, |r| r.generation + 1);
    Ok(Some(
        rules::ActiveModel {
            customer_id: Set(customer_id),
            below_nanos: Set(rule.below.nanos()),
            amount_nanos: Set(rule.amount.nanos()),
            monthly_cap_nanos: Set(rule.monthly_cap.nanos()),
            armed: Set(true),
            generation: Set(generation),
            updated_at: Set(now),
        }
        .insert(db)
        .await?,
    ))
}

/// The last `limit` runs of customer `customer_id`'s rule, newest first.
pub async fn runs_of(
    db: &impl ConnectionTrait,
    customer_id: i64,
    limit: u64,
) -> Result<Vec<runs::Model>, AutoAllocationError> {
    Ok(runs::Entity::find()
        .filter(runs::Column::CustomerId.eq(customer_id))
        .order_by_desc(runs::Column::Id)
        .limit(limit)
        .all(db)
        .await?)
}

/// What allocated automatically for customer `customer_id` since `from`.
async fn allocated_since(
    db: &impl ConnectionTrait,
    customer_id: i64,
    from: DateTime<Utc>,
) -> Result<NanoUsd, AutoAllocationError> {
    let rows = runs::Entity::find()
        .filter(runs::Column::CustomerId.eq(customer_id))
        .filter(runs::Column::Outcome.eq("allocated"))
        .filter(runs::Column::CreatedAt.gte(from))
        .all(db)
        .await?;
    NanoUsd::checked_sum(rows.iter().map(|r| NanoUsd::from_nanos(r.amount_nanos)))
        .ok_or(Fault::Broken("a month of automatic allocations overflows").into())
}

/// The start of `now`'s UTC calendar month.
fn month_start(now: DateTime<Utc>) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(now.year(), now.month(), 1, 0, 0, 0)
        .single()
        .unwrap_or(now)
}

/// Checks one automatic allocation rule. `Some(true)`: allocated; `Some(false)`: refused (partner
/// funding short, or the month's cap reached), recorded and alerted; `None`: nothing to do.
pub(crate) async fn allocate_if_below(
    state: &AppState,
    rule: &rules::Model,
) -> Result<Option<bool>, AutoAllocationError> {
    let Some(customer) = customers::Entity::find_by_id(rule.customer_id)
        .one(&state.db)
        .await?
    else {
        return Ok(None);
    };
    let Some(available) = available(state, customer.organization_id).await? else {
        return Ok(None);
    };
    let below = NanoUsd::from_nanos(rule.below_nanos);
    if available >= below {
        rearm(&state.db, rule).await?;
        return Ok(None);
    }
    if !rule.armed {
        return Ok(None);
    }
    let amount = NanoUsd::from_nanos(rule.amount_nanos);
    let now = state.clock.now();
    let caller = system_caller(&state.db, customer.partner_id).await?;
    let txn = crate::db::begin(&state.db).await?;
    if !claim(&txn, rule).await? {
        return Ok(None);
    }
    let used = allocated_since(&txn, customer.id, month_start(now)).await?;
    if used
        .checked_add(amount)
        .is_none_or(|t| t > NanoUsd::from_nanos(rule.monthly_cap_nanos))
    {
        record(&txn, customer.id, amount, "refused_cap", "", now).await?;
        txn.commit().await?;
        refused_mail(
            state,
            &customer,
            amount,
            "the rule's monthly cap is reached",
        )
        .await?;
        return Ok(Some(false));
    }
    let run = record(&txn, customer.id, amount, "allocated", "", now).await?;
    let op = format!("auto-allocation:{}", run.id);
    let done = funding::allocate(
        &txn,
        state,
        &caller,
        &op,
        &customer.id.to_string(),
        Allocation::Increase(amount),
    )
    .await;
    match done {
        Ok(success) => {
            let mut r: runs::ActiveModel = run.into();
            r.reference = Set(op);
            r.update(&txn).await?;
            txn.commit().await?;
            crate::services::effects::apply(state, success.effects).await;
            tracing::info!(customer = customer.id, amount = %amount.to_decimal_usd(), "automatic allocation made");
            Ok(Some(true))
        }
        Err(FundingError::Short(_)) => {
            txn.rollback().await?;
            refused_funding(state, rule, &customer, amount, now).await
        }
        Err(e) => Err(e.into()),
    }
}

/// Arms a disarmed rule again once the balance is back above its threshold (in the generation
/// read, so a concurrent pass arms it once).
async fn rearm(db: &impl ConnectionTrait, rule: &rules::Model) -> Result<(), AutoAllocationError> {
    if !rule.armed {
        rules::Entity::update_many()
            .col_expr(rules::Column::Armed, Expr::value(true))
            .col_expr(rules::Column::Generation, Expr::value(rule.generation + 1))
            .filter(rules::Column::CustomerId.eq(rule.customer_id))
            .filter(rules::Column::Generation.eq(rule.generation))
            .exec(db)
            .await?;
    }
    Ok(())
}

/// Records and mails an allocation that partner funding could not cover, in a transaction of its
/// own under the same claim (the allocation's own rolled back).
async fn refused_funding(
    state: &AppState,
    rule: &rules::Model,
    customer: &customers::Model,
    amount: NanoUsd,
    now: DateTime<Utc>,
) -> Result<Option<bool>, AutoAllocationError> {
    let txn = crate::db::begin(&state.db).await?;
    if !claim(&txn, rule).await? {
        return Ok(None);
    }
    record(&txn, customer.id, amount, "refused_funding", "", now).await?;
    txn.commit().await?;
    refused_mail(state, customer, amount, "partner funding cannot cover it").await?;
    Ok(Some(false))
}

/// Disarms the rule if it is still in the generation read (armed): `true` when this transaction
/// did. The refusal's second claim (after a rollback) asks the same generation again.
async fn claim(
    txn: &impl ConnectionTrait,
    rule: &rules::Model,
) -> Result<bool, AutoAllocationError> {
    Ok(rules::Entity::update_many()
        .col_expr(rules::Column::Armed, Expr::value(false))
        .col_expr(rules::Column::Generation, Expr::value(rule.generation + 1))
        .filter(rules::Column::CustomerId.eq(rule.customer_id))
        .filter(rules::Column::Generation.eq(rule.generation))
        .filter(rules::Column::Armed.eq(true))
        .exec(txn)
        .await?
        .rows_affected
        == 1)
}

async fn record(
    txn: &impl ConnectionTrait,
    customer_id: i64,
    amount: NanoUsd,
    outcome: &str,
    reference: &str,
    now: DateTime<Utc>,
) -> Result<runs::Model, AutoAllocationError> {
    Ok(runs::ActiveModel {
        customer_id: Set(customer_id),
        amount_nanos: Set(amount.nanos()),
        outcome: Set(outcome.into()),
        reference: Set(reference.into()),
        created_at: Set(now),
        ..Default::default()
    }
    .insert(txn)
    .await?)
}

/// Tells the partner's owners that an automatic allocation was refused.
async fn refused_mail(
    state: &AppState,
    customer: &customers::Model,
    amount: NanoUsd,
    why: &str,
) -> Result<(), AutoAllocationError> {
    let (partner, to) = partner_contacts(&state.db, customer.partner_id).await?;
    let body = format!(
        "Hello,\n\nThe automatic allocation of {} USD to {} ({partner}'s customer {}) was refused: {why}.\n\nThe customer's balance stays below the rule's threshold; calls are refused once it cannot cover them. The rule acts again the next time the balance falls below its threshold.\n",
        amount.to_decimal_usd().normalize(),
        customer.display_name,
        customer.id,
    );
    mail_all(
        state,
        &to,
        &format!("Automatic allocation refused: {}", customer.display_name),
        &body,
    )
    .await;
    Ok(())
}

/// The partner acting through its own rules (the watcher): its owner role and agreement rate.
async fn system_caller(
    db: &impl ConnectionTrait,
    partner: i64,
) -> Result<Caller, AutoAllocationError> {
    let p = partners::Entity::find_by_id(partner)
        .one(db)
        .await?
        .ok_or(Fault::Broken(
            "a rule's partner has no row or a broken agreement rate",
        ))?;
    Ok(Caller {
        partner_id: p.id,
        partner_name: p.name,
        token_id: 0,
        token_preview: "automatic".into(),
        scopes: vec!["partner:write".into()],
        role: "owner".into(),
        min_rate: money::RateMultiplier::from_ppm(p.min_rate_multiplier_ppm).ok_or(
            Fault::Broken("a rule's partner has no row or a broken agreement rate"),
        )?,
    })
}

/// Validates an automatic allocation body (see [`AutoRule::check`]).
pub fn parse_rule(
    body: crate::dto::AutoAllocationRequest,
) -> Result<AutoRule, AutoAllocationError> {
    if let Some(k) = body.unknown.keys().next() {
        return Err(AutoAllocationError::Invalid(format!("unknown field {k:?}")));
    }
    let amount = |v: &Option<serde_json::Value>, name: &str| {
        v.as_ref().and_then(crate::dto::usd_of).ok_or_else(|| {
            AutoAllocationError::Invalid(format!(
                "{name} must be a positive amount up to 1000000 with at most 9 decimals"
            ))
        })
    };
    AutoRule {
        below: amount(&body.below_usd, "below_usd")?,
        amount: amount(&body.amount_usd, "amount_usd")?,
        monthly_cap: amount(&body.monthly_cap_usd, "monthly_cap_usd")?,
    }
    .check()
    .map_err(AutoAllocationError::Invalid)
}

/// The view of customer `customer_id`'s rule and its last runs.
pub async fn rule_view(
    db: &impl ConnectionTrait,
    customer_id: i64,
    now: DateTime<Utc>,
) -> Result<crate::dto::AutoAllocationView, AutoAllocationError> {
    use crate::dto::{AutoAllocationView, AutoRuleView, AutoRunView, Usd};
    let rule = match rule_of(db, customer_id).await? {
        None => None,
        Some(r) => Some(AutoRuleView {
            below_usd: Usd(NanoUsd::from_nanos(r.below_nanos)),
            amount_usd: Usd(NanoUsd::from_nanos(r.amount_nanos)),
            monthly_cap_usd: Usd(NanoUsd::from_nanos(r.monthly_cap_nanos)),
            armed: r.armed,
            allocated_this_month_usd: Usd(allocated_since(db, customer_id, month_start(now)).await?),
        }),
    };
    let runs = runs_of(db, customer_id, 20)
        .await?
        .into_iter()
        .map(|r| AutoRunView {
            amount_usd: Usd(NanoUsd::from_nanos(r.amount_nanos)),
            outcome: r.outcome,
            created_at: r
                .created_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        })
        .collect();
    Ok(AutoAllocationView { rule, runs })
}

/// `GET /customers/{id}/automatic-allocation`.
pub async fn customer_rule(
    db: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    customer_id: &str,
) -> Result<crate::dto::AutoAllocationView, AutoAllocationError> {
    let customer = crate::services::customers::find(db, caller, customer_id).await?;
    rule_view(db, customer.id, state.clock.now()).await
}

/// `PUT` (a rule) and `DELETE` (`None`) `/customers/{id}/automatic-allocation`.
pub async fn set_customer_rule(
    txn: &impl ConnectionTrait,
    state: &AppState,
    caller: &Caller,
    customer_id: &str,
    rule: Option<AutoRule>,
) -> Result<crate::dto::AutoAllocationView, AutoAllocationError> {
    let customer = crate::services::customers::find(txn, caller, customer_id).await?;
    set_rule(txn, customer.id, rule, state.clock.now()).await?;
    rule_view(txn, customer.id, state.clock.now()).await
}
