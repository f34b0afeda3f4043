//! Usage of a customer and of one of its keys, in day or hour buckets.

use super::answer::respond;
use super::params::{Seg, Segs};
use crate::caller::Caller;
use crate::error::ApiError;
use crate::services::{customers, keys, usage};
use crate::state::AppState;
use axum::extract::{Extension, Query, State};
use axum::response::Response;
use std::collections::HashMap;

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/usage", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("granularity" = Option<String>, Query, description = "day (default) or hour"), ("start_time" = Option<String>, Query, description = "RFC 3339"), ("end_time" = Option<String>, Query, description = "RFC 3339")), responses((status = 200, description = "data", body = crate::dto::UsageBuckets), (status = 400, description = "INVALID_PARTNER_USAGE_GRANULARITY, INVALID_PARTNER_USAGE_WINDOW", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 409, description = "PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn customer(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Seg(id): Seg,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let result = async {
        let customer = customers::find(&state.db, &caller, &id).await?;
        customers::require_active(&state.db, &customer, state.clock.now()).await?;
        let window = usage::Window::parse(&q, chrono::Utc::now())?;
        Ok::<_, ApiError>(usage::buckets(&state.db, customer.organization_id, None, window).await?)
    }
    .await;
    respond(result)
}

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/api-keys/{api_key_id}/usage", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("api_key_id" = i64, Path), ("granularity" = Option<String>, Query, description = "day (default) or hour"), ("start_time" = Option<String>, Query, description = "RFC 3339"), ("end_time" = Option<String>, Query, description = "RFC 3339")), responses((status = 200, description = "data", body = crate::dto::UsageBuckets), (status = 400, description = "INVALID_PARTNER_USAGE_GRANULARITY, INVALID_PARTNER_USAGE_WINDOW", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND, PARTNER_CUSTOMER_API_KEY_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 409, description = "PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn key(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Segs(id, key): Segs,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let result = async {
        let (customer, key) = keys::find(&state.db, &caller, &id, &key).await?;
        customers::require_active(&state.db, &customer, state.clock.now()).await?;
        let window = usage::Window::parse(&q, chrono::Utc::now())?;
        Ok::<_, ApiError>(
            usage::buckets(&state.db, customer.organization_id, Some(key.id), window).await?,
        )
    }
    .await;
    respond(result)
}
