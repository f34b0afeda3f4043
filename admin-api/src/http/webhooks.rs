//! `POST /billing/webhooks/stripe`: Stripe's deliveries of Checkout Session events.
//!
//! The raw body is verified against `Stripe-Signature` before anything is parsed; an unsigned,
//! badly signed or stale delivery answers 400 and changes nothing. A verified event answers 200
//! with what it did (`{"received": true, "outcome": …}`), also for events that change nothing
//! (replays, other types), so Stripe stops re-sending them; a failure to read the session back or
//! to write the ledger answers 5xx, so Stripe delivers again later.

use crate::error::ApiError;
use crate::payments;
use crate::services::stripe_events;
use crate::state::AppState;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::json;

/// Largest webhook body read (Stripe's events are a few KiB).
pub(super) const MAX_BODY: usize = 256 * 1024;

fn refused(status: StatusCode, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(json!({"error": {"message": message.into()}})),
    )
        .into_response()
}

pub(super) async fn stripe(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let (Some(conf), Some(client)) = (
        state.settings.payments.stripe.as_ref(),
        state.stripe.as_ref(),
    ) else {
        return refused(StatusCode::NOT_FOUND, "no payment provider is configured");
    };
    let signature = headers
        .get("stripe-signature")
        .and_then(|v| v.to_str().ok());
    let now = chrono::Utc::now().timestamp();
    if let Err(e) = payments::verify_signature(
        signature,
        &body,
        &conf.webhook_secret,
        now,
        conf.webhook_tolerance_seconds,
    ) {
        tracing::warn!(reason = %e, "stripe webhook refused");
        return refused(StatusCode::BAD_REQUEST, format!("signature: {e}"));
    }
    let event: payments::Event = match serde_json::from_slice(&body) {
        Ok(e) => e,
        Err(e) => return refused(StatusCode::BAD_REQUEST, format!("not an event: {e}")),
    };
    match stripe_events::stripe_event(&state, client, &event).await {
        Ok(outcome) => {
            tracing::info!(event = %event.id, kind = %event.kind, outcome = outcome.label(), "stripe webhook");
            axum::Json(json!({"received": true, "outcome": outcome.label()})).into_response()
        }
        Err(e) => {
            tracing::warn!(event = %event.id, error = %e, "stripe webhook not processed; Stripe retries");
            ApiError::from(e).into_response()
        }
    }
}
