//! Partner webhooks on the partner API (issue 45; DESIGN §6e): endpoints (`/webhooks`), their
//! delivery log and redelivery. Reads behind `partner:read`; writes behind `partner:write`, a role
//! other than viewer and an `Idempotency-Key`, like every partner write (the create's answer is
//! the only one with the signing secret: a replay answers without it).

use super::answer::respond;
use super::params::{Seg, Segs};
use super::write::{Write, no_body};
use crate::caller::Caller;
use crate::error::ApiError;
use crate::services::partner_webhooks::{self, EndpointInput};
use crate::state::AppState;
use axum::extract::{Extension, Query, State};
use axum::response::Response;
use std::collections::HashMap;

#[utoipa::path(post, path = "/partner/v1/webhooks", tag = "partner", security(("partner_token" = [])), params(("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::dto::WebhookRequest, responses((status = 200, description = "data with secret (first response only)", body = crate::dto::Webhook), (status = 400, description = "INVALID_PARTNER_WEBHOOK, IDEMPOTENCY_KEY_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 409, description = "PARTNER_WEBHOOK_LIMIT_REACHED, IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn create(State(state): State<AppState>, write: Write) -> Response {
    let invalid = ApiError::InvalidWebhook("the body must be a JSON object".into());
    let allow = state.settings.webhooks.allow_private_addresses;
    write
        .run(
            &state,
            invalid,
            move |req| EndpointInput::parse(req, true, allow),
            |txn, op, input| {
                Box::pin(async move {
                    partner_webhooks::create(txn, &op.state, &op.caller, input).await
                })
            },
        )
        .await
}

#[utoipa::path(get, path = "/partner/v1/webhooks", tag = "partner", security(("partner_token" = [])), responses((status = 200, description = "data: the endpoints, oldest first", body = Vec<crate::dto::Webhook>), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    respond(partner_webhooks::list(&state.db, caller.partner_id).await)
}

#[utoipa::path(get, path = "/partner/v1/webhooks/{webhook_id}", tag = "partner", security(("partner_token" = [])), params(("webhook_id" = i64, Path)), responses((status = 200, description = "data", body = crate::dto::Webhook), (status = 404, description = "PARTNER_WEBHOOK_NOT_FOUND (also another partner's)", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Seg(id): Seg,
) -> Response {
    respond(partner_webhooks::get(&state.db, caller.partner_id, &id).await)
}

#[utoipa::path(patch, path = "/partner/v1/webhooks/{webhook_id}", tag = "partner", security(("partner_token" = [])), params(("webhook_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::dto::WebhookRequest, responses((status = 200, description = "data", body = crate::dto::Webhook), (status = 400, description = "INVALID_PARTNER_WEBHOOK, IDEMPOTENCY_KEY_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_WEBHOOK_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn update(State(state): State<AppState>, Seg(id): Seg, write: Write) -> Response {
    let invalid = ApiError::InvalidWebhook("the body must be a JSON object".into());
    let allow = state.settings.webhooks.allow_private_addresses;
    write
        .run(
            &state,
            invalid,
            move |req| EndpointInput::parse(req, false, allow),
            |txn, op, input| {
                Box::pin(async move {
                    partner_webhooks::update(txn, &op.state, &op.caller, &id, input).await
                })
            },
        )
        .await
}

#[utoipa::path(delete, path = "/partner/v1/webhooks/{webhook_id}", tag = "partner", security(("partner_token" = [])), params(("webhook_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), responses((status = 200, description = "data: the endpoint as it was; its pending deliveries fail", body = crate::dto::Webhook), (status = 404, description = "PARTNER_WEBHOOK_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn delete(State(state): State<AppState>, Seg(id): Seg, write: Write) -> Response {
    let invalid = ApiError::InvalidWebhook("no body is taken".into());
    write
        .without_body()
        .run(&state, invalid, no_body, |txn, op, ()| {
            Box::pin(async move { partner_webhooks::delete(txn, &op.state, &op.caller, &id).await })
        })
        .await
}

#[utoipa::path(get, path = "/partner/v1/webhooks/{webhook_id}/deliveries", tag = "partner", security(("partner_token" = [])), params(("webhook_id" = i64, Path), ("before" = Option<i64>, Query, description = "next_before of the previous page")), responses((status = 200, description = "data: deliveries newest first, each with its attempts", body = crate::dto::WebhookDeliveries), (status = 400, description = "INVALID_PARTNER_WEBHOOK (before)", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_WEBHOOK_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn deliveries(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Seg(id): Seg,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let before = q.get("before").map(String::as_str);
    respond(partner_webhooks::deliveries(&state.db, caller.partner_id, &id, before).await)
}

#[utoipa::path(post, path = "/partner/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver", tag = "partner", security(("partner_token" = [])), params(("webhook_id" = i64, Path), ("delivery_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), responses((status = 200, description = "data: the delivery, due now with a fresh retry window", body = crate::dto::WebhookDelivery), (status = 400, description = "INVALID_PARTNER_WEBHOOK (a disabled endpoint)", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_WEBHOOK_NOT_FOUND, PARTNER_WEBHOOK_DELIVERY_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn redeliver(
    State(state): State<AppState>,
    Segs(id, delivery): Segs,
    write: Write,
) -> Response {
    let invalid = ApiError::InvalidWebhook("no body is taken".into());
    write
        .without_body()
        .run(&state, invalid, no_body, |txn, op, ()| {
            Box::pin(async move {
                partner_webhooks::redeliver(txn, &op.state, &op.caller, &id, &delivery).await
            })
        })
        .await
}
