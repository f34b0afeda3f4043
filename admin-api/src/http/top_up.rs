//! The hosted top-up page a top-up session links to.

use super::pages::{escape, page};
use super::params::Seg;
use crate::services::funding;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// `GET /billing/top-up`: where the funding object's `top_up_url` leads a person. Adding funds
/// needs the partner's identity, so the page says how: a top-up session created with a
/// `partner:write` token answers a payment link (`data.url`) to open.
pub(super) async fn start(State(state): State<AppState>) -> Response {
    let sessions = state.public_url("/partner/v1/funding/top-up-sessions");
    let payment = if state.stripe.is_some() {
        "The link opens the payment provider's checkout; the funds appear in your partner funding as soon as the payment is confirmed."
    } else {
        "Payments are settled by the operator of this deployment; the link shows the request to settle."
    };
    page(
        "Add partner funds",
        &format!(
            "<p>To add funds, create a top-up session: <code>POST {}</code> with <code>{{\"amount_usd\": 100}}</code>, a <code>partner:write</code> token and an <code>Idempotency-Key</code>. Open the link it answers (<code>data.url</code>).</p><p>{}</p>",
            escape(&sessions),
            payment
        ),
    )
    .into_response()
}

/// `GET /billing/top-up/{token}`.
pub(super) async fn show(State(state): State<AppState>, Seg(token): Seg) -> Response {
    let row = funding::top_up_page(&state, &token).await;
    match row {
        Ok(Some(s)) => page(
            "Partner top-up",
            &format!(
                "<p>Top-up of <strong>{} USD</strong> for partner {} ({}).</p><p>Payments are settled by the operator; this page confirms the request.</p>",
                s.amount.to_decimal_usd(),
                s.partner_id,
                escape(&s.status)
            ),
        )
        .into_response(),
        Ok(None) => (
            StatusCode::NOT_FOUND,
            page("Partner top-up", "<p>No such top-up session.</p>"),
        )
            .into_response(),
        Err(_) => (
            StatusCode::SERVICE_UNAVAILABLE,
            page("Partner top-up", "<p>Please try again later.</p>"),
        )
            .into_response(),
    }
}

/// `GET /billing/top-up/done`: where Stripe Checkout sends the payer after paying. Funds are
/// credited by the webhook, never by this page.
pub(super) async fn done() -> Response {
    page(
        "Partner top-up",
        "<p>Thank you. The payment is being confirmed; the funds appear in your partner funding as soon as the payment provider confirms it.</p>",
    )
    .into_response()
}

/// `GET /billing/top-up/cancelled`: where Stripe Checkout sends a payer who gave up.
pub(super) async fn cancelled() -> Response {
    page(
        "Partner top-up",
        "<p>The payment was cancelled; nothing was charged. Create a new top-up link to try again.</p>",
    )
    .into_response()
}
