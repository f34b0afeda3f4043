//! Customers: creation, reads, balance, allocations, groups and their prices.

use super::answer::respond;
use super::params::{Seg, Segs};
use super::write::Write;
use crate::caller::Caller;
use crate::dto::CreateCustomerRequest;
use crate::error::ApiError;
use crate::services::group_prices;
use crate::services::{customers, funding};
use crate::state::AppState;
use axum::extract::{Extension, State};
use axum::response::Response;

#[utoipa::path(put, path = "/partner/v1/customers/by-external-id/{external_customer_id}", tag = "partner", security(("partner_token" = [])), params(("external_customer_id" = String, Path, description = "letters, digits, . _ : -; at most 128"), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::dto::CreateCustomerRequest, responses((status = 200, description = "data (created true or false)", body = crate::dto::CustomerData), (status = 400, description = "INVALID_PARTNER_EXTERNAL_CUSTOMER_ID, INVALID_PARTNER_CUSTOMER, INVALID_PARTNER_CUSTOMER_CONTACT, INVALID_PARTNER_INITIAL_ALLOCATION, INVALID_PARTNER_RETAIL_RATE, PARTNER_RETAIL_RATE_BELOW_FLOOR, IDEMPOTENCY_KEY_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_FUNDING_INSUFFICIENT", body = crate::dto::ErrorEnvelope), (status = 409, description = "PARTNER_EXTERNAL_CUSTOMER_CONFLICT, PARTNER_CUSTOMER_SLUG_EXISTS, IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn create(
    State(state): State<AppState>,
    Seg(external): Seg,
    write: Write,
) -> Response {
    let invalid = ApiError::InvalidCustomer("the body must be a JSON object".into());
    let parse = |body: CreateCustomerRequest| {
        Ok::<_, customers::CustomerError>((
            customers::external_id(&external)?,
            customers::NewCustomer::parse(body)?,
        ))
    };
    write
        .run(&state, invalid, parse, |txn, op, (external, new)| {
            Box::pin(async move {
                customers::create(txn, &op.state, &op.caller, &op.reference, &external, new).await
            })
        })
        .await
}

#[utoipa::path(get, path = "/partner/v1/customers/by-external-id/{external_customer_id}", tag = "partner", security(("partner_token" = [])), params(("external_customer_id" = String, Path)), responses((status = 200, description = "data", body = crate::dto::CustomerData), (status = 400, description = "INVALID_PARTNER_EXTERNAL_CUSTOMER_ID", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn by_external_id(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Seg(external): Seg,
) -> Response {
    let result = async {
        let customer = customers::find_by_external_id(&state.db, &caller, &external).await?;
        customers::view(&state.db, &state, &customer, None, None).await
    }
    .await;
    respond(result)
}

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path)), responses((status = 200, description = "data", body = crate::dto::CustomerData), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn by_id(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Seg(id): Seg,
) -> Response {
    let result = async {
        let customer = customers::find(&state.db, &caller, &id).await?;
        customers::view(&state.db, &state, &customer, None, None).await
    }
    .await;
    respond(result)
}

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/balance", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path)), responses((status = 200, description = "data", body = crate::dto::CustomerBalance), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 409, description = "PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn balance(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Seg(id): Seg,
) -> Response {
    let result = async {
        let customer = customers::find(&state.db, &caller, &id).await?;
        customers::balance(&state.db, &state, &customer).await
    }
    .await;
    respond(result)
}

#[utoipa::path(post, path = "/partner/v1/customers/{customer_id}/allocations", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::dto::AllocationRequest, responses((status = 200, description = "data", body = crate::dto::CustomerData), (status = 400, description = "INVALID_PARTNER_ALLOCATION_ACTION, INVALID_PARTNER_ALLOCATION_AMOUNT, INVALID_PARTNER_ALLOCATION_LIMIT, PARTNER_ALLOCATION_LIMIT_BELOW_USED", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_FUNDING_INSUFFICIENT", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 409, description = "PARTNER_CUSTOMER_PENDING_ACTIVATION, PARTNER_CUSTOMER_BALANCE_RESERVED", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn allocations(
    State(state): State<AppState>,
    Seg(id): Seg,
    write: Write,
) -> Response {
    write
        .run(
            &state,
            ApiError::InvalidAllocationAction,
            funding::Allocation::parse,
            |txn, op, change| {
                Box::pin(async move {
                    funding::allocate(txn, &op.state, &op.caller, &op.reference, &id, change).await
                })
            },
        )
        .await
}

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/groups", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path)), responses((status = 200, description = "data", body = [crate::dto::Group]), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 409, description = "PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn groups(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Seg(id): Seg,
) -> Response {
    let result = async {
        let customer = customers::find(&state.db, &caller, &id).await?;
        customers::require_active(&state.db, &customer, state.clock.now()).await?;
        Ok::<_, ApiError>(group_prices::groups(&state.db, &state, &caller, &customer).await?)
    }
    .await;
    respond(result)
}

#[utoipa::path(put, path = "/partner/v1/customers/{customer_id}/groups/{group_id}/rate", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("group_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::dto::GroupRateRequest, responses((status = 200, description = "data", body = [crate::dto::Group]), (status = 400, description = "INVALID_PARTNER_CUSTOMER_GROUP_RATE, PARTNER_RETAIL_RATE_BELOW_FLOOR", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_FUNDING_INSUFFICIENT", body = crate::dto::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND, PARTNER_CUSTOMER_GROUP_NOT_FOUND", body = crate::dto::ErrorEnvelope), (status = 400, description = "IDEMPOTENCY_KEY_REQUIRED and validation reasons", body = crate::dto::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS, PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::dto::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::dto::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn group_rate(
    State(state): State<AppState>,
    Segs(id, group): Segs,
    write: Write,
) -> Response {
    write
        .run(
            &state,
            ApiError::InvalidGroupRate,
            funding::group_rate,
            |txn, op, rate| {
                Box::pin(async move {
                    let (state, caller) = (&op.state, &op.caller);
                    funding::set_rate(txn, state, caller, &op.reference, &id, &group, rate).await
                })
            },
        )
        .await
}
