//! Automatic recharge of partner funding from a saved card (issue 32), over Stripe:
//!
//! 1. The partner sets a rule (`PUT /funding/recharge`: below X, charge Y), then saves a card: a
//!    Checkout Session in **setup** mode for its Stripe Customer (`POST
//!    /funding/recharge/card-sessions` returns the hosted URL). Stripe's `checkout.session.completed`
//!    webhook for it, read back with its SetupIntent, stores the card (`pm_…`) on the rule: the
//!    rule is `active`.
//! 2. The balance watcher (`services::watch`) sees the partner's available funding below X once
//!    per crossing (the rule's `generation` claim, as for automatic allocations), records an
//!    attempt and creates a confirmed **off-session PaymentIntent** of Y with the
//!    `Idempotency-Key` `tollgate-recharge-{partner}-{generation}` — one per crossing, so a
//!    retried call (Stripe unreachable, the pass died) can never charge twice.
//! 3. Funding is credited **only by the signed webhook** `payment_intent.succeeded`, after reading
//!    the PaymentIntent back (its current status, amount and currency decide; a late, replayed or
//!    reordered event changes nothing): the ledger posting's reference is
//!    `stripe-recharge:{pi_…}`, unique, so it is credited exactly once.
//! 4. A declined card (Stripe's 402 `card_error` on the create, or `payment_intent.payment_failed`
//!    read back as not succeeded) marks the attempt `declined`, **stops the rule** (`stopped`, with
//!    Stripe's message) and mails the partner's owners; saving a card again (or setting the rule
//!    again) restarts it.

use super::fault::Fault;
use crate::ledger::{self, AccountRef};
use crate::payments::{Charge, StripeClient};
use crate::services::contacts::{mail_all, partner_contacts};
use crate::services::funding::{self, NANOS_PER_CENT};
use crate::state::AppState;
use chrono::{DateTime, Utc};
use entities::{recharge_attempts as attempts, recharge_rules as rules, recharge_setups as setups};
use money::NanoUsd;
use sea_orm::sea_query::Expr;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};

/// Why an automatic recharge, its rule or a payment event is refused.
#[derive(Debug, thiserror::Error)]
pub enum RechargeError {
    /// The rule is malformed; the text says which field.
    #[error("invalid automatic recharge: {0}")]
    Invalid(String),
    /// No payment provider is configured.
    #[error("automatic recharge needs a payment provider ([payments] provider = \"stripe\")")]
    NoProvider,
    /// A card is saved only for a rule that exists.
    #[error("set the automatic recharge rule (PUT /funding/recharge) before saving a card")]
    RuleRequired,
    /// The payment provider could not be reached or refused the call (nothing was stored).
    #[error("the payment provider is unavailable; retry shortly ({0})")]
    Provider(String),
    #[error(transparent)]
    Fault(Fault),
}
super::fault::faults!(RechargeError);

/// How long a charge being asked of Stripe may go unanswered before another pass asks again (the
/// asking pass died): far longer than a Stripe call may take (15 s).
pub(super) const STUCK: chrono::Duration = chrono::Duration::minutes(10);

/// The smallest charge Stripe takes in USD (0.50).
pub(super) const MIN_CHARGE: NanoUsd = NanoUsd::from_nanos(500_000_000);

/// What a recharge webhook did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A card was saved on the rule.
    CardSaved,
    /// Funding credited for a succeeded charge.
    Credited,
    /// Already done (a replay or a second event of one payment).
    AlreadyDone,
    /// The charge failed: the attempt declined, the rule stopped.
    Declined,
    /// Nothing to do yet (not succeeded, not failed), or nothing of ours.
    Pending,
    /// Stripe's amount or currency differs: nothing credited (logged).
    Mismatch,
}

impl Outcome {
    pub fn label(self) -> &'static str {
        match self {
            Outcome::CardSaved => "card_saved",
            Outcome::Credited => "credited",
            Outcome::AlreadyDone => "already_done",
            Outcome::Declined => "declined",
            Outcome::Pending => "pending",
            Outcome::Mismatch => "mismatch",
        }
    }
}

/// A setup session's completion (read back): its SetupIntent's card goes on the rule.
pub async fn on_setup_session(
    state: &AppState,
    stripe: &StripeClient,
    session: &crate::payments::CheckoutSession,
) -> Result<Outcome, RechargeError> {
    let Some(setup) = setups::Entity::find()
        .filter(setups::Column::ProviderSessionId.eq(session.id.as_str()))
        .one(&state.db)
        .await?
    else {
        return Ok(Outcome::Pending);
    };
    if setup.status == "saved" {
        return Ok(Outcome::AlreadyDone);
    }
    if session.status.as_deref() == Some("expired") {
        let mut a: setups::ActiveModel = setup.into();
        a.status = Set("expired".into());
        a.update(&state.db).await?;
        return Ok(Outcome::Pending);
    }
    let Some(intent_id) = session.setup_intent.as_deref() else {
        return Ok(Outcome::Pending);
    };
    let intent = stripe
        .setup_intent(intent_id)
        .await
        .map_err(|e| RechargeError::Provider(e.to_string()))?;
    let (Some("succeeded"), Some(card)) = (intent.status.as_deref(), intent.payment_method.clone())
    else {
        return Ok(Outcome::Pending);
    };
    let txn = crate::db::begin(&state.db).await?;
    let now = state.clock.now();
    let Some(rule) = rules::Entity::find_by_id(setup.partner_id)
        .one(&txn)
        .await?
    else {
        return Ok(Outcome::Pending);
    };
    let generation = rule.generation + 1;
    let mut a: rules::ActiveModel = rule.into();
    a.payment_method = Set(Some(card));
    if let Some(c) = intent.customer.or(session.customer.clone()) {
        a.stripe_customer = Set(Some(c));
    }
    a.status = Set("active".into());
    a.stop_reason = Set(None);
    a.card_saved_at = Set(Some(now));
    a.armed = Set(true);
    a.generation = Set(generation);
    a.updated_at = Set(now);
    a.update(&txn).await?;
    let mut s: setups::ActiveModel = setup.into();
    s.status = Set("saved".into());
    s.update(&txn).await?;
    txn.commit().await?;
    Ok(Outcome::CardSaved)
}

/// A PaymentIntent event: the intent is read back and its *current* status decides.
pub async fn on_payment_intent(
    state: &AppState,
    stripe: &StripeClient,
    id: &str,
) -> Result<Outcome, RechargeError> {
    let intent = stripe
        .payment_intent(id)
        .await
        .map_err(|e| RechargeError::Provider(e.to_string()))?;
    let attempt_id = intent
        .metadata
        .get("recharge_attempt_id")
        .and_then(|v| v.parse::<i64>().ok());
    let attempt = match attempt_id {
        Some(a) => attempts::Entity::find_by_id(a).one(&state.db).await?,
        None => {
            attempts::Entity::find()
                .filter(attempts::Column::PaymentIntent.eq(intent.id.as_str()))
                .one(&state.db)
                .await?
        }
    };
    let Some(attempt) = attempt else {
        return Ok(Outcome::Pending);
    };
    match intent.status.as_deref() {
        Some("succeeded") => credit(state, stripe, &attempt, &intent).await,
        Some("requires_payment_method" | "canceled") => {
            declined(state, &attempt, Some(&intent.id), "the card was declined").await
        }
        _ => Ok(Outcome::Pending),
    }
}

/// Credits a succeeded charge's funding, once (the ledger reference is the PaymentIntent's).
pub(super) async fn credit(
    state: &AppState,
    stripe: &StripeClient,
    attempt: &attempts::Model,
    intent: &crate::payments::PaymentIntent,
) -> Result<Outcome, RechargeError> {
    let cents = attempt.amount_nanos / NANOS_PER_CENT;
    if intent.amount_received != Some(cents)
        || intent.currency.as_deref() != Some(stripe.conf().currency.as_str())
    {
        tracing::error!(
            attempt = attempt.id, intent = %intent.id, expected_cents = cents,
            received = ?intent.amount_received, currency = ?intent.currency,
            "recharge: the amount received differs; nothing credited"
        );
        return Ok(Outcome::Mismatch);
    }
    let txn = crate::db::begin(&state.db).await?;
    let posted = funding::fund(
        &txn,
        attempt.partner_id,
        NanoUsd::from_nanos(attempt.amount_nanos),
        &format!("stripe-recharge:{}", intent.id),
    )
    .await?;
    attempts::Entity::update_many()
        .col_expr(attempts::Column::Status, Expr::value("succeeded"))
        .col_expr(
            attempts::Column::PaymentIntent,
            Expr::value(intent.id.clone()),
        )
        .col_expr(attempts::Column::CreditedAt, Expr::value(state.clock.now()))
        .filter(attempts::Column::Id.eq(attempt.id))
        .exec(&txn)
        .await?;
    if !matches!(posted, ledger::Posted::AlreadyPosted) {
        crate::services::partner_webhooks::emit(
            &txn,
            state,
            attempt.partner_id,
            "funding.recharge_succeeded",
            serde_json::json!({
                "recharge_id": attempt.id,
                "amount_usd": crate::dto::usd_json(NanoUsd::from_nanos(attempt.amount_nanos)),
                "payment_intent": intent.id,
            }),
            None,
        )
        .await?;
    }
    txn.commit().await?;
    Ok(match posted {
        ledger::Posted::AlreadyPosted => Outcome::AlreadyDone,
        _ => {
            tracing::info!(partner = attempt.partner_id, intent = %intent.id, "automatic recharge credited");
            Outcome::Credited
        }
    })
}

/// A declined charge: the attempt `declined` (unless already credited), the rule stopped, the
/// partner's owners mailed once.
pub(super) async fn declined(
    state: &AppState,
    attempt: &attempts::Model,
    intent: Option<&str>,
    message: &str,
) -> Result<Outcome, RechargeError> {
    if attempt.status == "succeeded" {
        return Ok(Outcome::AlreadyDone);
    }
    let txn = crate::db::begin(&state.db).await?;
    let changed = attempts::Entity::update_many()
        .col_expr(attempts::Column::Status, Expr::value("declined"))
        .col_expr(attempts::Column::Failure, Expr::value(message.to_string()))
        .col_expr(
            attempts::Column::PaymentIntent,
            Expr::value(
                intent
                    .map(str::to_string)
                    .or(attempt.payment_intent.clone()),
            ),
        )
        .filter(attempts::Column::Id.eq(attempt.id))
        .filter(attempts::Column::Status.eq("pending"))
        .exec(&txn)
        .await?
        .rows_affected
        == 1;
    if !changed {
        return Ok(Outcome::AlreadyDone);
    }
    rules::Entity::update_many()
        .col_expr(rules::Column::Status, Expr::value("stopped"))
        .col_expr(
            rules::Column::StopReason,
            Expr::value(format!("card declined: {message}")),
        )
        .filter(rules::Column::PartnerId.eq(attempt.partner_id))
        .exec(&txn)
        .await?;
    crate::services::partner_webhooks::emit(
        &txn,
        state,
        attempt.partner_id,
        "funding.recharge_failed",
        serde_json::json!({
            "recharge_id": attempt.id,
            "amount_usd": crate::dto::usd_json(NanoUsd::from_nanos(attempt.amount_nanos)),
            "failure": message,
        }),
        None,
    )
    .await?;
    txn.commit().await?;
    let (name, to) = partner_contacts(&state.db, attempt.partner_id).await?;
    let body = format!(
        "Hello,\n\nThe automatic recharge of {} USD of {name}'s funding was declined by the card's bank: {message}.\n\nAutomatic recharge is stopped. Save a card again (or set the rule again) in the partner dashboard's Funding page to restart it; until then, add funds by hand.\n",
        NanoUsd::from_nanos(attempt.amount_nanos)
            .to_decimal_usd()
            .normalize(),
    );
    mail_all(
        state,
        &to,
        &format!("Automatic recharge declined: {name}"),
        &body,
    )
    .await;
    Ok(Outcome::Declined)
}

/// The watcher's step for one partner's rule: charges when funding is below the threshold (once
/// per crossing), re-arms above it, and retries an attempt whose charge call never got an answer
/// (under its own idempotency key: Stripe answers the same PaymentIntent). `Some(true)`: a
/// charge was created; `Some(false)`: declined.
pub async fn recharge_if_below(
    state: &AppState,
    rule: &rules::Model,
) -> Result<Option<bool>, RechargeError> {
    let Some(stripe) = state.stripe.as_ref() else {
        return Ok(None);
    };
    // An attempt left without an answer (Stripe unreachable; or the pass that asked died, after
    // `STUCK`): asked again, by one pass only (a conditional claim of the attempt).
    let now = state.clock.now();
    let stuck_before = now - STUCK;
    let unanswered = || {
        sea_orm::Condition::any()
            .add(attempts::Column::InFlightSince.is_null())
            .add(attempts::Column::InFlightSince.lt(stuck_before))
    };
    if let Some(stuck) = attempts::Entity::find()
        .filter(attempts::Column::PartnerId.eq(rule.partner_id))
        .filter(attempts::Column::Status.eq("pending"))
        .filter(attempts::Column::PaymentIntent.is_null())
        .filter(unanswered())
        .one(&state.db)
        .await?
    {
        let claimed = attempts::Entity::update_many()
            .col_expr(attempts::Column::InFlightSince, Expr::value(now))
            .filter(attempts::Column::Id.eq(stuck.id))
            .filter(attempts::Column::PaymentIntent.is_null())
            .filter(unanswered())
            .exec(&state.db)
            .await?
            .rows_affected
            == 1;
        if !claimed {
            return Ok(None);
        }
        return charge(state, stripe, rule, &stuck).await;
    }
    if rule.status != "active" {
        return Ok(None);
    }
    let available = ledger::balance(
        &state.db,
        &AccountRef::partner_available(rule.partner_id).code,
    )
    .await?;
    if available >= NanoUsd::from_nanos(rule.below_nanos) {
        rearm(&state.db, rule).await?;
        return Ok(None);
    }
    if !rule.armed {
        return Ok(None);
    }
    let txn = crate::db::begin(&state.db).await?;
    let claimed = rules::Entity::update_many()
        .col_expr(rules::Column::Armed, Expr::value(false))
        .col_expr(rules::Column::Generation, Expr::value(rule.generation + 1))
        .filter(rules::Column::PartnerId.eq(rule.partner_id))
        .filter(rules::Column::Generation.eq(rule.generation))
        .filter(rules::Column::Armed.eq(true))
        .exec(&txn)
        .await?
        .rows_affected
        == 1;
    if !claimed {
        return Ok(None);
    }
    let attempt = new_attempt(&txn, rule, now).await?;
    txn.commit().await?;
    charge(state, stripe, rule, &attempt).await
}

/// Arms a disarmed rule again once funding is back above its threshold (in the generation read,
/// so a concurrent pass arms it once).
async fn rearm(
    db: &impl sea_orm::ConnectionTrait,
    rule: &rules::Model,
) -> Result<(), RechargeError> {
    if !rule.armed {
        rules::Entity::update_many()
            .col_expr(rules::Column::Armed, Expr::value(true))
            .col_expr(rules::Column::Generation, Expr::value(rule.generation + 1))
            .filter(rules::Column::PartnerId.eq(rule.partner_id))
            .filter(rules::Column::Generation.eq(rule.generation))
            .exec(db)
            .await?;
    }
    Ok(())
}

/// The pending attempt of the rule's current generation (its idempotency key names both, so
/// Stripe answers a retried charge with the same PaymentIntent).
async fn new_attempt(
    txn: &impl sea_orm::ConnectionTrait,
    rule: &rules::Model,
    now: DateTime<Utc>,
) -> Result<attempts::Model, RechargeError> {
    Ok(attempts::ActiveModel {
        partner_id: Set(rule.partner_id),
        amount_nanos: Set(rule.amount_nanos),
        idempotency_key: Set(format!(
            "tollgate-recharge-{}-{}",
            rule.partner_id, rule.generation
        )),
        payment_intent: Set(None),
        status: Set("pending".into()),
        failure: Set(None),
        in_flight_since: Set(Some(now)),
        created_at: Set(now),
        credited_at: Set(None),
        ..Default::default()
    }
    .insert(txn)
    .await?)
}

/// Charges the saved card for `attempt` (its own idempotency key).
pub(super) async fn charge(
    state: &AppState,
    stripe: &StripeClient,
    rule: &rules::Model,
    attempt: &attempts::Model,
) -> Result<Option<bool>, RechargeError> {
    let (Some(customer), Some(card)) = (
        rule.stripe_customer.as_deref(),
        rule.payment_method.as_deref(),
    ) else {
        return Ok(None);
    };
    let done = stripe
        .charge(
            attempt.id,
            rule.partner_id,
            customer,
            card,
            attempt.amount_nanos / NANOS_PER_CENT,
            &attempt.idempotency_key,
        )
        .await;
    match done {
        Ok(Charge::Created(intent)) => {
            attempts::Entity::update_many()
                .col_expr(
                    attempts::Column::PaymentIntent,
                    Expr::value(intent.id.clone()),
                )
                .filter(attempts::Column::Id.eq(attempt.id))
                .filter(attempts::Column::PaymentIntent.is_null())
                .exec(&state.db)
                .await?;
            if matches!(
                intent.status.as_deref(),
                Some("requires_payment_method" | "canceled" | "requires_action")
            ) {
                declined(
                    state,
                    attempt,
                    Some(&intent.id),
                    "the card needs its holder or was declined",
                )
                .await?;
                return Ok(Some(false));
            }
            tracing::info!(partner = rule.partner_id, intent = %intent.id, "automatic recharge charged; funding follows its webhook");
            Ok(Some(true))
        }
        Ok(Charge::Declined {
            payment_intent,
            message,
        }) => {
            declined(state, attempt, payment_intent.as_deref(), &message).await?;
            Ok(Some(false))
        }
        Err(e) => {
            // The attempt stays pending without a PaymentIntent and no one asking: the next pass
            // asks again under the same key.
            attempts::Entity::update_many()
                .col_expr(
                    attempts::Column::InFlightSince,
                    Expr::value(Option::<DateTime<Utc>>::None),
                )
                .filter(attempts::Column::Id.eq(attempt.id))
                .exec(&state.db)
                .await?;
            tracing::warn!(error = %e, partner = rule.partner_id, "automatic recharge: Stripe did not answer; retried next pass");
            Ok(None)
        }
    }
}
