//! Rules that watch balances (issue 32): a customer's and the partner's low-balance alerts, a
//! customer's automatic allocation. Reads behind `partner:read`, writes behind `partner:write`
//! with an `Idempotency-Key`, like every partner route.

use super::answer::respond;
use super::params::Seg;
use super::write::{Write, no_body};
use crate::caller::Caller;
use crate::error::ApiError;
use crate::services::alerts;
use crate::services::allocations;
use crate::services::recharge::RechargeError;
use crate::services::recharge_rules;
use crate::state::AppState;
use axum::extract::{Extension, State};
use axum::response::Response;

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/low-balance-alert", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path)), responses((status = 200, description = "data", body = crate::dto::AlertView), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn customer_alert(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Seg(id): Seg,
) -> Response {
    respond(alerts::customer_alert(&state.db, &caller, &id).await)
}

#[utoipa::path(put, path = "/partner/v1/customers/{customer_id}/low-balance-alert", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::dto::AlertRequest, responses((status = 200, description = "data", body = crate::dto::AlertView), (status = 400, description = "INVALID_PARTNER_ALERT, IDEMPOTENCY_KEY_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn set_customer_alert(
    State(state): State<AppState>,
    Seg(id): Seg,
    write: Write,
) -> Response {
    let invalid = ApiError::InvalidAlert("the body must be a JSON object".into());
    write
        .run_plain(
            &state,
            invalid,
            alerts::parse_alert,
            |txn, op, threshold| {
                Box::pin(async move {
                    alerts::set_customer_alert(txn, &op.state, &op.caller, &id, threshold).await
                })
            },
        )
        .await
}

#[utoipa::path(get, path = "/partner/v1/funding/low-balance-alert", tag = "partner", security(("partner_token" = [])), responses((status = 200, description = "data", body = crate::dto::AlertView), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn funding_alert(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    let result = alerts::alert_of(&state.db, alerts::Subject::Partner(caller.partner_id))
        .await
        .map(|row| alerts::alert_view(row.as_ref()));
    respond(result)
}

#[utoipa::path(put, path = "/partner/v1/funding/low-balance-alert", tag = "partner", security(("partner_token" = [])), params(("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::dto::AlertRequest, responses((status = 200, description = "data", body = crate::dto::AlertView), (status = 400, description = "INVALID_PARTNER_ALERT, IDEMPOTENCY_KEY_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn set_funding_alert(State(state): State<AppState>, write: Write) -> Response {
    let invalid = ApiError::InvalidAlert("the body must be a JSON object".into());
    write
        .run_plain(
            &state,
            invalid,
            alerts::parse_alert,
            |txn, op, threshold| {
                Box::pin(async move {
                    alerts::set_funding_alert(txn, &op.state, &op.caller, threshold).await
                })
            },
        )
        .await
}

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/automatic-allocation", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path)), responses((status = 200, description = "data", body = crate::dto::AutoAllocationView), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn customer_rule(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Seg(id): Seg,
) -> Response {
    respond(allocations::customer_rule(&state.db, &state, &caller, &id).await)
}

#[utoipa::path(put, path = "/partner/v1/customers/{customer_id}/automatic-allocation", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::dto::AutoAllocationRequest, responses((status = 200, description = "data", body = crate::dto::AutoAllocationView), (status = 400, description = "INVALID_PARTNER_AUTOMATIC_ALLOCATION, IDEMPOTENCY_KEY_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn set_customer_rule(
    State(state): State<AppState>,
    Seg(id): Seg,
    write: Write,
) -> Response {
    let invalid = ApiError::InvalidAutoAllocation("the body must be a JSON object".into());
    write
        .run_plain(&state, invalid, allocations::parse_rule, |txn, op, rule| {
            Box::pin(async move {
                allocations::set_customer_rule(txn, &op.state, &op.caller, &id, Some(rule)).await
            })
        })
        .await
}

#[utoipa::path(delete, path = "/partner/v1/customers/{customer_id}/automatic-allocation", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), responses((status = 200, description = "data: no rule, the runs kept", body = crate::dto::AutoAllocationView), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn delete_customer_rule(
    State(state): State<AppState>,
    Seg(id): Seg,
    write: Write,
) -> Response {
    let invalid = ApiError::InvalidAutoAllocation("no body is taken".into());
    write
        .without_body()
        .run_plain(&state, invalid, no_body, |txn, op, ()| {
            Box::pin(async move {
                allocations::set_customer_rule(txn, &op.state, &op.caller, &id, None).await
            })
        })
        .await
}

#[utoipa::path(get, path = "/partner/v1/funding/recharge", tag = "partner", security(("partner_token" = [])), responses((status = 200, description = "data", body = crate::dto::RechargeView), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn recharge(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    respond(recharge_rules::view(&state.db, caller.partner_id).await)
}

#[utoipa::path(put, path = "/partner/v1/funding/recharge", tag = "partner", security(("partner_token" = [])), params(("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::dto::RechargeRequest, responses((status = 200, description = "data", body = crate::dto::RechargeView), (status = 400, description = "INVALID_PARTNER_RECHARGE, IDEMPOTENCY_KEY_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn set_recharge(State(state): State<AppState>, write: Write) -> Response {
    let invalid = ApiError::InvalidRecharge("the body must be a JSON object".into());
    write
        .run_plain(&state, invalid, recharge_rules::parse, |txn, op, rule| {
            Box::pin(async move {
                let now = op.state.clock.now();
                recharge_rules::set(txn, op.caller.partner_id, Some(rule), now).await
            })
        })
        .await
}

#[utoipa::path(delete, path = "/partner/v1/funding/recharge", tag = "partner", security(("partner_token" = [])), params(("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), responses((status = 200, description = "data: no rule, the attempts kept", body = crate::dto::RechargeView), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn delete_recharge(State(state): State<AppState>, write: Write) -> Response {
    let invalid = ApiError::InvalidRecharge("no body is taken".into());
    write
        .without_body()
        .run_plain(&state, invalid, no_body, |txn, op, ()| {
            Box::pin(async move {
                let now = op.state.clock.now();
                recharge_rules::set(txn, op.caller.partner_id, None, now).await
            })
        })
        .await
}

#[utoipa::path(post, path = "/partner/v1/funding/recharge/card-sessions", tag = "partner", security(("partner_token" = [])), params(("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), responses((status = 200, description = "data: Stripe's hosted page that saves a card for the automatic recharge", body = crate::dto::CardSession), (status = 409, description = "RECHARGE_PROVIDER_REQUIRED, RECHARGE_RULE_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 502, description = "PAYMENT_PROVIDER_UNAVAILABLE", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn card_session(State(state): State<AppState>, write: Write) -> Response {
    let invalid = ApiError::InvalidRecharge("no body is taken".into());
    write
        .without_body()
        .run_plain(&state, invalid, no_body, |txn, op, ()| {
            Box::pin(async move {
                let partner = op.caller.partner_id;
                let url = recharge_rules::start_card_session(txn, &op.state, partner).await?;
                Ok::<_, RechargeError>(crate::dto::CardSession { url })
            })
        })
        .await
}
