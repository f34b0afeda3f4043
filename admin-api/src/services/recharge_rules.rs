//! An automatic recharge's setting (issue 32): the rule a partner sets (when its funding falls
//! below a threshold, charge its saved card an amount), its view, and the Stripe session that
//! saves the card. Charging it is `recharge`.

use super::recharge::*;
use crate::dto::{RechargeAttemptView, RechargeRuleView, RechargeView, Usd};
use crate::services::MAX_RULE_USD;
use crate::services::funding::NANOS_PER_CENT;
use crate::state::AppState;
use chrono::{DateTime, Utc};
use entities::{recharge_attempts as attempts, recharge_rules as rules, recharge_setups as setups};
use money::NanoUsd;
use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, ConnectionTrait, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect, Set,
};

/// A recharge rule as set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RechargeRule {
    pub below: NanoUsd,
    pub amount: NanoUsd,
}

/// Validates a recharge body: `below_usd` from 0 to 1,000,000; `amount_usd` whole cents, from
/// 0.50 to 1,000,000.
pub fn parse(body: crate::dto::RechargeRequest) -> Result<RechargeRule, RechargeError> {
    if let Some(k) = body.unknown.keys().next() {
        return Err(RechargeError::Invalid(format!("unknown field {k:?}")));
    }
    let below = body
        .below_usd
        .as_ref()
        .and_then(crate::dto::usd_of)
        .filter(|n| !n.is_negative() && *n <= MAX_RULE_USD)
        .ok_or_else(|| {
            RechargeError::Invalid(
                "below_usd must be an amount from 0 to 1000000 with at most 9 decimals".into(),
            )
        })?;
    let amount = body
        .amount_usd
        .as_ref()
        .and_then(crate::dto::usd_of)
        .filter(|n| *n >= MIN_CHARGE && *n <= MAX_RULE_USD && n.nanos() % NANOS_PER_CENT == 0)
        .ok_or_else(|| {
            RechargeError::Invalid("amount_usd must be whole cents from 0.50 to 1000000".into())
        })?;
    Ok(RechargeRule { below, amount })
}

/// The view of partner `partner_id`'s recharge: the rule and its last 20 attempts.
pub async fn view(
    db: &impl ConnectionTrait,
    partner_id: i64,
) -> Result<RechargeView, RechargeError> {
    let rule = rules::Entity::find_by_id(partner_id).one(db).await?;
    let attempts = attempts::Entity::find()
        .filter(attempts::Column::PartnerId.eq(partner_id))
        .order_by_desc(attempts::Column::Id)
        .limit(20)
        .all(db)
        .await?;
    Ok(RechargeView {
        rule: rule.map(|r| RechargeRuleView {
            below_usd: Usd(NanoUsd::from_nanos(r.below_nanos)),
            amount_usd: Usd(NanoUsd::from_nanos(r.amount_nanos)),
            status: r.status,
            stop_reason: r.stop_reason,
            card_saved: r.payment_method.is_some(),
            armed: r.armed,
        }),
        attempts: attempts
            .into_iter()
            .map(|a| RechargeAttemptView {
                amount_usd: Usd(NanoUsd::from_nanos(a.amount_nanos)),
                status: a.status,
                failure: a.failure,
                created_at: a
                    .created_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            })
            .collect(),
    })
}

/// Sets partner `partner_id`'s rule (keeping a saved card; a stopped rule restarts); `None`
/// removes it.
pub async fn set(
    txn: &impl ConnectionTrait,
    partner_id: i64,
    rule: Option<RechargeRule>,
    now: DateTime<Utc>,
) -> Result<RechargeView, RechargeError> {
    let existing = rules::Entity::find_by_id(partner_id).one(txn).await?;
    match (existing, rule) {
        (None, None) => {}
        (Some(_), None) => {
            rules::Entity::delete_by_id(partner_id).exec(txn).await?;
        }
        (Some(row), Some(r)) => {
            let status = if row.payment_method.is_some() {
                "active"
            } else {
                "needs_card"
            };
            let generation = row.generation + 1;
            let mut a: rules::ActiveModel = row.into();
            a.below_nanos = Set(r.below.nanos());
            a.amount_nanos = Set(r.amount.nanos());
            a.status = Set(status.into());
            a.stop_reason = Set(None);
            a.armed = Set(true);
            a.generation = Set(generation);
            a.updated_at = Set(now);
            a.update(txn).await?;
        }
        (None, Some(r)) => {
            rules::ActiveModel {
                partner_id: Set(partner_id),
                below_nanos: Set(r.below.nanos()),
                amount_nanos: Set(r.amount.nanos()),
                status: Set("needs_card".into()),
                stop_reason: Set(None),
                stripe_customer: Set(None),
                payment_method: Set(None),
                card_saved_at: Set(None),
                armed: Set(true),
                generation: Set(0),
                updated_at: Set(now),
            }
            .insert(txn)
            .await?;
        }
    }
    view(txn, partner_id).await
}

/// `POST /funding/recharge/card-sessions`: a setup-mode Checkout Session saving a card for the
/// partner's rule; returns Stripe's hosted URL. Needs `[payments] provider = "stripe"` and a rule.
pub async fn start_card_session(
    db: &impl ConnectionTrait,
    state: &AppState,
    partner_id: i64,
) -> Result<String, RechargeError> {
    let Some(stripe) = state.stripe.as_ref() else {
        return Err(RechargeError::NoProvider);
    };
    let Some(rule) = rules::Entity::find_by_id(partner_id).one(db).await? else {
        return Err(RechargeError::RuleRequired);
    };
    let customer = match rule.stripe_customer.clone() {
        Some(c) => c,
        None => {
            let c = stripe
                .create_customer(partner_id)
                .await
                .map_err(|e| RechargeError::Provider(e.to_string()))?;
            rules::Entity::update_many()
                .col_expr(rules::Column::StripeCustomer, Expr::value(c.id.clone()))
                .filter(rules::Column::PartnerId.eq(partner_id))
                .exec(db)
                .await?;
            c.id
        }
    };
    let setup = setups::ActiveModel {
        partner_id: Set(partner_id),
        provider_session_id: Set(None),
        status: Set("open".into()),
        created_at: Set(state.clock.now()),
        ..Default::default()
    }
    .insert(db)
    .await?;
    let session = stripe
        .create_setup_session(setup.id, partner_id, &customer)
        .await
        .map_err(|e| RechargeError::Provider(e.to_string()))?;
    let url = session
        .url
        .clone()
        .ok_or_else(|| RechargeError::Provider("the setup session has no URL".into()))?;
    let mut a: setups::ActiveModel = setup.into();
    a.provider_session_id = Set(Some(session.id));
    a.update(db).await?;
    Ok(url)
}
