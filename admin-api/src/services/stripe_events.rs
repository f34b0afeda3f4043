//! Stripe's webhook events, once their signature is checked (`http::webhooks`): a hosted top-up's
//! Checkout Session credits partner funding once; an automatic recharge's card session and
//! charges go to `recharge`. Stripe's *current* state, read back, decides; never the event's.

use super::funding::{NANOS_PER_CENT, fund};
use super::recharge::{self, RechargeError};
use crate::ledger;
use crate::state::AppState;
use chrono::Utc;
use entities::status::TopUpStatus;
use entities::top_up_sessions;
use money::NanoUsd;
use sea_orm::{ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, Set};

/// What a Stripe webhook event did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventOutcome {
    /// Not an event the top-up flow handles.
    Ignored,
    /// A session this deployment did not create.
    UnknownSession,
    /// The session is paid: partner funding was credited now.
    Credited,
    /// The session was paid and credited before (a replay, a second event of one payment).
    AlreadyCredited,
    /// Not paid (yet): nothing credited.
    Pending,
    /// The session expired or its payment failed: the top-up is closed, nothing credited.
    Closed,
    /// Stripe's amount or currency differs from the top-up's: nothing credited (logged).
    Mismatch,
    /// An automatic recharge's event (a card saved, a charge credited or declined).
    Recharge(recharge::Outcome),
}

impl EventOutcome {
    pub fn label(self) -> &'static str {
        match self {
            EventOutcome::Ignored => "ignored",
            EventOutcome::UnknownSession => "unknown_session",
            EventOutcome::Credited => "credited",
            EventOutcome::AlreadyCredited => "already_credited",
            EventOutcome::Pending => "pending",
            EventOutcome::Closed => "closed",
            EventOutcome::Mismatch => "mismatch",
            EventOutcome::Recharge(o) => o.label(),
        }
    }
}

/// Acts on a verified Stripe event: for the Checkout Session events, the session is read back
/// from Stripe and its *current* state decides (replayed, late or reordered events change
/// nothing): paid → partner funding credited once per session (the ledger posting's reference is
/// `stripe:{session id}`, unique) and the top-up `paid`; expired or failed → the open top-up
/// closed. Errors (Stripe or the database unreachable) make Stripe deliver the event again.
pub async fn stripe_event(
    state: &AppState,
    stripe: &crate::payments::StripeClient,
    event: &crate::payments::Event,
) -> Result<EventOutcome, RechargeError> {
    const HANDLED: [&str; 4] = [
        "checkout.session.completed",
        "checkout.session.async_payment_succeeded",
        "checkout.session.async_payment_failed",
        "checkout.session.expired",
    ];
    // An automatic recharge's charge (issue 32): read back, its current status decides.
    if matches!(
        event.kind.as_str(),
        "payment_intent.succeeded" | "payment_intent.payment_failed" | "payment_intent.canceled"
    ) {
        let Some(id) = event.data.object.get("id").and_then(|v| v.as_str()) else {
            return Ok(EventOutcome::Ignored);
        };
        let done = recharge::on_payment_intent(state, stripe, id).await?;
        return Ok(EventOutcome::Recharge(done));
    }
    if !HANDLED.contains(&event.kind.as_str()) {
        return Ok(EventOutcome::Ignored);
    }
    let Some(session_id) = event.data.object.get("id").and_then(|v| v.as_str()) else {
        return Ok(EventOutcome::Ignored);
    };
    let session = stripe.session(session_id).await.map_err(|e| {
        tracing::warn!(error = %e, event = %event.id, "stripe webhook: session not read back");
        RechargeError::Provider(e.to_string())
    })?;
    // A setup session saves an automatic recharge's card.
    if session.mode.as_deref() == Some("setup") {
        let done = recharge::on_setup_session(state, stripe, &session).await?;
        return Ok(EventOutcome::Recharge(done));
    }
    let txn = crate::db::begin(&state.db).await?;
    let Some(row) = top_up_sessions::Entity::find()
        .filter(top_up_sessions::Column::ProviderSessionId.eq(session.id.as_str()))
        .one(&txn)
        .await?
    else {
        tracing::warn!(session = %session.id, event = %event.id, "stripe webhook: unknown checkout session");
        return Ok(EventOutcome::UnknownSession);
    };
    if row.status == TopUpStatus::Paid {
        return Ok(EventOutcome::AlreadyCredited);
    }
    if session.is_paid() {
        return credit_paid(txn, stripe, &session, row).await;
    }
    let closed = match (event.kind.as_str(), session.status.as_deref()) {
        ("checkout.session.async_payment_failed", _) => Some(TopUpStatus::Failed),
        (_, Some("expired")) => Some(TopUpStatus::Expired),
        _ => None,
    };
    match closed {
        Some(status) if row.status == TopUpStatus::Open => {
            let mut update: top_up_sessions::ActiveModel = row.into();
            update.status = Set(status);
            update.update(&txn).await?;
            txn.commit().await?;
            Ok(EventOutcome::Closed)
        }
        Some(_) => Ok(EventOutcome::Closed),
        None => Ok(EventOutcome::Pending),
    }
}

/// A paid top-up: credited once (the posting's reference is `stripe:{session id}`) and marked
/// paid, in `txn`, when Stripe's amount and currency are the top-up's; else nothing (logged).
async fn credit_paid(
    txn: sea_orm::DatabaseTransaction,
    stripe: &crate::payments::StripeClient,
    session: &crate::payments::CheckoutSession,
    row: top_up_sessions::Model,
) -> Result<EventOutcome, RechargeError> {
    let amount = NanoUsd::from_nanos(row.amount_nanos);
    let expected_cents = row.amount_nanos / NANOS_PER_CENT;
    let currency = &stripe.conf().currency;
    if session.amount_total != Some(expected_cents)
        || session.currency.as_deref() != Some(currency.as_str())
    {
        tracing::error!(
            session = %session.id, top_up = row.id,
            expected_cents, amount_total = ?session.amount_total, currency = ?session.currency,
            "stripe webhook: paid amount differs from the top-up; nothing credited"
        );
        return Ok(EventOutcome::Mismatch);
    }
    let posted = fund(
        &txn,
        row.partner_id,
        amount,
        &format!("stripe:{}", session.id),
    )
    .await?;
    let partner_id = row.partner_id;
    let mut update: top_up_sessions::ActiveModel = row.into();
    update.status = Set(TopUpStatus::Paid);
    update.paid_at = Set(Some(Utc::now()));
    update.update(&txn).await?;
    txn.commit().await?;
    Ok(match posted {
        ledger::Posted::AlreadyPosted => EventOutcome::AlreadyCredited,
        _ => {
            tracing::info!(session = %session.id, partner_id, "partner top-up paid and credited");
            EventOutcome::Credited
        }
    })
}
