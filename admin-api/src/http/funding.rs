//! The partner itself: identity, funding and top-up sessions.

use super::answer::respond;
use super::write::Write;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::services::funding;
use crate::state::AppState;
use axum::extract::{Extension, State};
use axum::response::Response;

#[utoipa::path(get, path = "/partner/v1/me", tag = "partner", security(("partner_token" = [])),  responses((status = 200, description = "data", body = crate::dto::PartnerIdentity), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn me(Extension(caller): Extension<Caller>) -> Response {
    respond::<_, ApiError>(Ok(funding::me(&caller)))
}

#[utoipa::path(get, path = "/partner/v1/funding", tag = "partner", security(("partner_token" = [])),  responses((status = 200, description = "data", body = crate::dto::Funding), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn view(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    respond(funding::view(&state.db, &state, &caller).await)
}

#[utoipa::path(post, path = "/partner/v1/funding/top-up-sessions", tag = "partner", security(("partner_token" = [])), params(("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::dto::TopUpRequest, responses((status = 200, description = "data", body = crate::dto::TopUpSession), (status = 400, description = "INVALID_PARTNER_TOP_UP_AMOUNT", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn top_up(State(state): State<AppState>, write: Write) -> Response {
    write
        .run(
            &state,
            ApiError::InvalidTopUpAmount,
            funding::top_up_amount,
            |txn, op, amount| {
                Box::pin(
                    async move { funding::create_top_up(txn, &op.state, &op.caller, amount).await },
                )
            },
        )
        .await
}
