//! Customer API keys: list (previews), create (the secret once), disable.

use super::answer::respond;
use super::params::{Seg, Segs};
use super::write::Write;
use crate::caller::Caller;
use crate::error::ApiError;
use crate::services::keys;
use crate::state::AppState;
use axum::extract::{Extension, State};
use axum::response::Response;

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/api-keys", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path)), responses((status = 200, description = "data: previews, never secrets", body = [crate::dto::KeyPreview]), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Seg(id): Seg,
) -> Response {
    respond(keys::list(&state, &caller, &id).await)
}

#[utoipa::path(post, path = "/partner/v1/customers/{customer_id}/api-keys", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::dto::CreateKeyRequest, responses((status = 200, description = "data with key (first response only)", body = crate::dto::KeyPreview), (status = 400, description = "INVALID_PARTNER_CUSTOMER_API_KEY", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND (also for a group the customer does not have)", body = crate::dto::ErrorEnvelope), (status = 400, description = "IDEMPOTENCY_KEY_REQUIRED and validation reasons", body = crate::dto::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS, PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn create(State(state): State<AppState>, Seg(id): Seg, write: Write) -> Response {
    let invalid = ApiError::InvalidApiKey("the body must be a JSON object".into());
    write
        .run(&state, invalid, keys::NewKey::parse, |txn, op, new| {
            Box::pin(async move { keys::create(txn, &op.state, &op.caller, &id, new).await })
        })
        .await
}

#[utoipa::path(delete, path = "/partner/v1/customers/{customer_id}/api-keys/{api_key_id}", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("api_key_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), responses((status = 200, description = "data", body = crate::dto::KeyPreview), (status = 400, description = "INVALID_PARTNER_CUSTOMER_API_KEY", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_API_KEY_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 400, description = "IDEMPOTENCY_KEY_REQUIRED and validation reasons", body = crate::dto::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS, PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn disable(
    State(state): State<AppState>,
    Segs(id, key): Segs,
    write: Write,
) -> Response {
    let invalid = ApiError::InvalidApiKey("api_key_id must be an integer".into());
    let parse = |(): ()| match key.parse::<i64>() {
        Ok(_) => Ok(key.clone()),
        Err(_) => Err(invalid.clone()),
    };
    write
        .without_body()
        .run(&state, invalid.clone(), parse, |txn, op, key| {
            Box::pin(async move { keys::disable(txn, &op.state, &op.caller, &id, &key).await })
        })
        .await
}
