//! admin-api's HTTP surface: handlers extract and map, services hold the rules.
//!
//! - `/partner/v1/*`: the partner API behind [`gate`]; writes go through [`idempotency`]. Unknown
//!   paths answer 404 with the plain text `page not found` (before authentication).
//! - `/api/v1/organization/billing/*`: the organization billing API (read only).
//! - `/invitations/{token}`: the acceptance page and its form.
//! - `/billing/top-up/{token}`: the hosted top-up page.
//! - `/healthz`.

use crate::error::{ApiError, ok};
use crate::partner::gate::{Caller, gate};
use crate::partner::idempotency::{self, Request as IdemRequest, Work};
use crate::services::{billing, customers, funding, invitations, keys, usage};
use crate::state::AppState;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{Extension, OriginalUri, Path, Query, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::from_fn_with_state;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use serde_json::Value;
use std::collections::HashMap;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// The admin-api router.
pub fn router(state: AppState) -> Router {
    let partner = Router::new()
        .route("/me", get(me))
        .route("/funding", get(funding_view))
        .route("/funding/top-up-sessions", post(top_up))
        .route(
            "/customers/by-external-id/{external_id}",
            get(customer_by_external).put(create_customer),
        )
        .route("/customers/{customer_id}", get(customer_by_id))
        .route("/customers/{customer_id}/balance", get(customer_balance))
        .route("/customers/{customer_id}/allocations", post(allocations))
        .route("/customers/{customer_id}/groups", get(groups))
        .route(
            "/customers/{customer_id}/groups/{group_id}/rate",
            put(group_rate),
        )
        .route(
            "/customers/{customer_id}/api-keys",
            get(list_keys).post(create_key),
        )
        .route(
            "/customers/{customer_id}/api-keys/{api_key_id}",
            delete(disable_key),
        )
        .route("/customers/{customer_id}/usage", get(customer_usage))
        .route(
            "/customers/{customer_id}/api-keys/{api_key_id}/usage",
            get(key_usage),
        )
        .route_layer(from_fn_with_state(state.clone(), gate))
        .route("/openapi.json", get(openapi_json))
        .fallback(page_not_found);
    Router::new()
        .route("/healthz", get(health))
        .nest("/partner/v1", partner)
        .route("/api/v1/organization/billing/balance", get(billing_balance))
        .route(
            "/api/v1/organization/billing/usage/daily",
            get(billing_daily),
        )
        .route("/invitations/{token}", get(invitation_page))
        .route("/invitations/{token}/accept", post(invitation_accept))
        .route("/billing/top-up/{token}", get(top_up_page))
        .with_state(state)
}

/// Serves `router(state)` on `listener` until `shutdown` turns true.
pub async fn serve(
    listener: TcpListener,
    state: AppState,
    mut shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    axum::serve(listener, router(state))
        .with_graceful_shutdown(stop)
        .await
}

/// `GET /partner/v1/openapi.json`: the generated description of the partner and billing APIs.
async fn openapi_json() -> Response {
    axum::Json(crate::openapi::document()).into_response()
}

async fn health(State(state): State<AppState>) -> (StatusCode, &'static str) {
    match state.db.ping().await {
        Ok(()) => (StatusCode::OK, "ok"),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "database unavailable"),
    }
}

async fn page_not_found() -> (
    StatusCode,
    [(header::HeaderName, &'static str); 1],
    &'static str,
) {
    (
        StatusCode::NOT_FOUND,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        "page not found",
    )
}

fn respond(result: Result<Value, ApiError>) -> Response {
    match result {
        Ok(data) => axum::Json(ok(data)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The JSON body of a write (`Null` when empty); `invalid` answers a body that is not JSON.
fn json_body(body: &Bytes, invalid: ApiError) -> Result<Value, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Value::Null);
    }
    serde_json::from_slice(body).map_err(|_| invalid)
}

/// The idempotency identity of a write.
fn write_request(
    headers: &HeaderMap,
    method: &Method,
    uri: &OriginalUri,
    body: &Value,
) -> Result<IdemRequest, ApiError> {
    IdemRequest::new(headers, method.as_str(), uri.0.path(), body)
}

/// Validates a write before it may run: the idempotency key first (a missing key is reported
/// before body errors), then the JSON body (`invalid` when it is not JSON), then `parse`.
/// Returns the write's identity and the parsed input; nothing is stored when this fails.
fn prepare_write<T>(
    headers: &HeaderMap,
    method: &Method,
    uri: &OriginalUri,
    body: &Bytes,
    invalid: ApiError,
    parse: impl FnOnce(&Value) -> Result<T, ApiError>,
) -> Result<(IdemRequest, T), ApiError> {
    key_first(headers)?;
    let body = json_body(body, invalid)?;
    let parsed = parse(&body)?;
    Ok((write_request(headers, method, uri, &body)?, parsed))
}

/// Validates the idempotency key first (so a missing key is reported before body errors).
fn key_first(headers: &HeaderMap) -> Result<(), ApiError> {
    IdemRequest::new(headers, "", "", &Value::Null).map(|_| ())
}

#[utoipa::path(get, path = "/partner/v1/me", tag = "partner", security(("partner_token" = [])),  responses((status = 200, description = "data", body = crate::openapi::PartnerIdentity), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn me(Extension(caller): Extension<Caller>) -> Response {
    respond(Ok(funding::me(&caller)))
}

#[utoipa::path(get, path = "/partner/v1/funding", tag = "partner", security(("partner_token" = [])),  responses((status = 200, description = "data", body = crate::openapi::Funding), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn funding_view(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
) -> Response {
    respond(funding::view(&state.db, &state, &caller).await)
}

#[utoipa::path(post, path = "/partner/v1/funding/top-up-sessions", tag = "partner", security(("partner_token" = [])), params(("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::openapi::TopUpRequest, responses((status = 200, description = "data", body = crate::openapi::TopUpSession), (status = 400, description = "INVALID_PARTNER_TOP_UP_AMOUNT", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn top_up(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let prepared = prepare_write(
        &headers,
        &method,
        &uri,
        &body,
        ApiError::InvalidTopUpAmount,
        funding::top_up_amount,
    );
    let (req, amount) = match prepared {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let (s, c) = (state.clone(), caller.clone());
    let work: Work<'_> = Box::new(move |txn, _op| {
        Box::pin(async move { funding::create_top_up(txn, &s, &c, amount).await })
    });
    idempotency::execute(&state, &caller, req, work).await
}

#[utoipa::path(put, path = "/partner/v1/customers/by-external-id/{external_customer_id}", tag = "partner", security(("partner_token" = [])), params(("external_customer_id" = String, Path, description = "letters, digits, . _ : -; at most 128"), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::openapi::CreateCustomerRequest, responses((status = 200, description = "data (created true or false)", body = crate::openapi::CustomerData), (status = 400, description = "INVALID_PARTNER_EXTERNAL_CUSTOMER_ID, INVALID_PARTNER_CUSTOMER, INVALID_PARTNER_CUSTOMER_CONTACT, INVALID_PARTNER_INITIAL_ALLOCATION, INVALID_PARTNER_RETAIL_RATE, PARTNER_RETAIL_RATE_BELOW_FLOOR, IDEMPOTENCY_KEY_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_FUNDING_INSUFFICIENT", body = crate::openapi::ErrorEnvelope), (status = 409, description = "PARTNER_EXTERNAL_CUSTOMER_CONFLICT, PARTNER_CUSTOMER_SLUG_EXISTS, IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn create_customer(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(external): Path<String>,
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let invalid = ApiError::InvalidCustomer("the body must be a JSON object".into());
    let prepared = prepare_write(&headers, &method, &uri, &body, invalid, |b| {
        Ok((
            customers::external_id(&external)?,
            customers::NewCustomer::parse(b)?,
        ))
    });
    let (req, (external, new)) = match prepared {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let (s, c) = (state.clone(), caller.clone());
    let work: Work<'_> = Box::new(move |txn, op| {
        Box::pin(async move { customers::create(txn, &s, &c, &op, &external, new).await })
    });
    idempotency::execute(&state, &caller, req, work).await
}

#[utoipa::path(get, path = "/partner/v1/customers/by-external-id/{external_customer_id}", tag = "partner", security(("partner_token" = [])), params(("external_customer_id" = String, Path)), responses((status = 200, description = "data", body = crate::openapi::CustomerData), (status = 400, description = "INVALID_PARTNER_EXTERNAL_CUSTOMER_ID", body = crate::openapi::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn customer_by_external(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(external): Path<String>,
) -> Response {
    let result = async {
        let external = customers::external_id(&external)?;
        let customer = entities::customers::Entity::find()
            .filter(entities::customers::Column::PartnerId.eq(caller.partner_id))
            .filter(entities::customers::Column::ExternalId.eq(external))
            .one(&state.db)
            .await?
            .ok_or(ApiError::CustomerNotFound)?;
        customers::view(&state.db, &state, &customer, None, None).await
    }
    .await;
    respond(result)
}

use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path)), responses((status = 200, description = "data", body = crate::openapi::CustomerData), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn customer_by_id(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let result = async {
        let customer = customers::find(&state.db, &caller, &id).await?;
        customers::view(&state.db, &state, &customer, None, None).await
    }
    .await;
    respond(result)
}

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/balance", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path)), responses((status = 200, description = "data", body = crate::openapi::CustomerBalance), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::openapi::ErrorEnvelope), (status = 409, description = "PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn customer_balance(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let result = async {
        let customer = customers::find(&state.db, &caller, &id).await?;
        customers::require_active(&state.db, &customer).await?;
        let view = customers::view(&state.db, &state, &customer, None, None).await?;
        let c = &view["customer"];
        Ok(serde_json::json!({
            "customer_id": customer.id,
            "organization_id": customer.organization_id,
            "organization_balance_usd": c["organization_balance_usd"],
            "organization_available_usd": c["organization_available_usd"],
            "partner_allocation_cap_usd": c["partner_allocation_cap_usd"],
            "partner_allocation_used_usd": c["partner_allocation_used_usd"],
            "partner_allocation_remaining_usd": c["partner_allocation_remaining_usd"],
        }))
    }
    .await;
    respond(result)
}

#[utoipa::path(post, path = "/partner/v1/customers/{customer_id}/allocations", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::openapi::AllocationRequest, responses((status = 200, description = "data", body = crate::openapi::CustomerData), (status = 400, description = "INVALID_PARTNER_ALLOCATION_ACTION, INVALID_PARTNER_ALLOCATION_AMOUNT, INVALID_PARTNER_ALLOCATION_LIMIT, PARTNER_ALLOCATION_LIMIT_BELOW_USED", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_FUNDING_INSUFFICIENT", body = crate::openapi::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::openapi::ErrorEnvelope), (status = 409, description = "PARTNER_CUSTOMER_PENDING_ACTIVATION, PARTNER_CUSTOMER_BALANCE_RESERVED", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn allocations(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let prepared = prepare_write(
        &headers,
        &method,
        &uri,
        &body,
        ApiError::InvalidAllocationAction,
        funding::Allocation::parse,
    );
    let (req, change) = match prepared {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let (s, c) = (state.clone(), caller.clone());
    let work: Work<'_> = Box::new(move |txn, op| {
        Box::pin(async move { funding::allocate(txn, &s, &c, &op, &id, change).await })
    });
    idempotency::execute(&state, &caller, req, work).await
}

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/groups", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path)), responses((status = 200, description = "data", body = [crate::openapi::Group]), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::openapi::ErrorEnvelope), (status = 409, description = "PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn groups(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    let result = async {
        let customer = customers::find(&state.db, &caller, &id).await?;
        customers::require_active(&state.db, &customer).await?;
        customers::groups(&state.db, &state, &caller, &customer).await
    }
    .await;
    respond(result)
}

#[utoipa::path(put, path = "/partner/v1/customers/{customer_id}/groups/{group_id}/rate", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("group_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::openapi::GroupRateRequest, responses((status = 200, description = "data", body = [crate::openapi::Group]), (status = 400, description = "INVALID_PARTNER_CUSTOMER_GROUP_RATE, PARTNER_RETAIL_RATE_BELOW_FLOOR", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_FUNDING_INSUFFICIENT", body = crate::openapi::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND, PARTNER_CUSTOMER_GROUP_NOT_FOUND", body = crate::openapi::ErrorEnvelope), (status = 400, description = "IDEMPOTENCY_KEY_REQUIRED and validation reasons", body = crate::openapi::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS, PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn group_rate(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, group)): Path<(String, String)>,
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let prepared = prepare_write(
        &headers,
        &method,
        &uri,
        &body,
        ApiError::InvalidGroupRate,
        |b| Ok(b.clone()),
    );
    let (req, body) = match prepared {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let (s, c) = (state.clone(), caller.clone());
    let work: Work<'_> = Box::new(move |txn, op| {
        Box::pin(async move { funding::set_rate(txn, &s, &c, &op, &id, &group, &body).await })
    });
    idempotency::execute(&state, &caller, req, work).await
}

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/api-keys", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path)), responses((status = 200, description = "data: previews, never secrets", body = [crate::openapi::KeyPreview]), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn list_keys(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Response {
    respond(keys::list(&state.db, &caller, &id).await)
}

#[utoipa::path(post, path = "/partner/v1/customers/{customer_id}/api-keys", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), request_body = crate::openapi::CreateKeyRequest, responses((status = 200, description = "data with key (first response only)", body = crate::openapi::KeyPreview), (status = 400, description = "INVALID_PARTNER_CUSTOMER_API_KEY", body = crate::openapi::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND (also for a group the customer does not have)", body = crate::openapi::ErrorEnvelope), (status = 400, description = "IDEMPOTENCY_KEY_REQUIRED and validation reasons", body = crate::openapi::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS, PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn create_key(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let invalid = ApiError::InvalidApiKey("the body must be a JSON object".into());
    let prepared = prepare_write(&headers, &method, &uri, &body, invalid, keys::NewKey::parse);
    let (req, new) = match prepared {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let (s, c) = (state.clone(), caller.clone());
    let work: Work<'_> = Box::new(move |txn, _op| {
        Box::pin(async move { keys::create(txn, &s, &c, &id, new).await })
    });
    idempotency::execute(&state, &caller, req, work).await
}

#[utoipa::path(delete, path = "/partner/v1/customers/{customer_id}/api-keys/{api_key_id}", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("api_key_id" = i64, Path), ("Idempotency-Key" = String, Header, description = "1 to 255 visible ASCII characters; replays answer with Idempotent-Replayed: true")), responses((status = 200, description = "data", body = crate::openapi::KeyPreview), (status = 400, description = "INVALID_PARTNER_CUSTOMER_API_KEY", body = crate::openapi::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_API_KEY_NOT_FOUND", body = crate::openapi::ErrorEnvelope), (status = 400, description = "IDEMPOTENCY_KEY_REQUIRED and validation reasons", body = crate::openapi::ErrorEnvelope), (status = 409, description = "IDEMPOTENCY_KEY_CONFLICT, IDEMPOTENCY_IN_PROGRESS, PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn disable_key(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, key)): Path<(String, String)>,
    method: Method,
    uri: OriginalUri,
    headers: HeaderMap,
) -> Response {
    let prepared = (|| {
        key_first(&headers)?;
        if key.parse::<i64>().is_err() {
            return Err(ApiError::InvalidApiKey(
                "api_key_id must be an integer".into(),
            ));
        }
        let req = write_request(&headers, &method, &uri, &Value::Null)?;
        Ok::<_, ApiError>(req)
    })();
    let req = match prepared {
        Ok(p) => p,
        Err(e) => return e.into_response(),
    };
    let (s, c) = (state.clone(), caller.clone());
    let work: Work<'_> = Box::new(move |txn, _op| {
        Box::pin(async move { keys::disable(txn, &s, &c, &id, &key).await })
    });
    idempotency::execute(&state, &caller, req, work).await
}

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/usage", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("granularity" = Option<String>, Query, description = "day (default) or hour"), ("start_time" = Option<String>, Query, description = "RFC 3339"), ("end_time" = Option<String>, Query, description = "RFC 3339")), responses((status = 200, description = "data", body = crate::openapi::UsageBuckets), (status = 400, description = "INVALID_PARTNER_USAGE_GRANULARITY, INVALID_PARTNER_USAGE_WINDOW", body = crate::openapi::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND", body = crate::openapi::ErrorEnvelope), (status = 409, description = "PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn customer_usage(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let result = async {
        let customer = customers::find(&state.db, &caller, &id).await?;
        customers::require_active(&state.db, &customer).await?;
        let window = usage::Window::parse(&q, chrono::Utc::now())?;
        usage::buckets(&state.db, customer.organization_id, None, window).await
    }
    .await;
    respond(result)
}

#[utoipa::path(get, path = "/partner/v1/customers/{customer_id}/api-keys/{api_key_id}/usage", tag = "partner", security(("partner_token" = [])), params(("customer_id" = i64, Path), ("api_key_id" = i64, Path), ("granularity" = Option<String>, Query, description = "day (default) or hour"), ("start_time" = Option<String>, Query, description = "RFC 3339"), ("end_time" = Option<String>, Query, description = "RFC 3339")), responses((status = 200, description = "data", body = crate::openapi::UsageBuckets), (status = 400, description = "INVALID_PARTNER_USAGE_GRANULARITY, INVALID_PARTNER_USAGE_WINDOW", body = crate::openapi::ErrorEnvelope), (status = 404, description = "PARTNER_CUSTOMER_NOT_FOUND, PARTNER_CUSTOMER_API_KEY_NOT_FOUND", body = crate::openapi::ErrorEnvelope), (status = 409, description = "PARTNER_CUSTOMER_PENDING_ACTIVATION", body = crate::openapi::ErrorEnvelope), (status = 401, description = "PARTNER_API_AUTHENTICATION_REQUIRED, PARTNER_API_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 403, description = "PARTNER_API_SCOPE_REQUIRED, PARTNER_ACCESS_REQUIRED", body = crate::openapi::ErrorEnvelope), (status = 429, description = "PARTNER_RATE_LIMITED (Retry-After)", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn key_usage(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((id, key)): Path<(String, String)>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    let result = async {
        let (customer, key) = keys::find(&state.db, &caller, &id, &key).await?;
        customers::require_active(&state.db, &customer).await?;
        let window = usage::Window::parse(&q, chrono::Utc::now())?;
        usage::buckets(&state.db, customer.organization_id, Some(key.id), window).await
    }
    .await;
    respond(result)
}

/// The billing token of a request: `Authorization: Bearer` or `X-Organization-Billing-Token`.
fn billing_token(headers: &HeaderMap) -> Option<&str> {
    crate::partner::gate::bearer(headers).or_else(|| {
        headers
            .get("x-organization-billing-token")
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|t| !t.is_empty())
    })
}

#[utoipa::path(get, path = "/api/v1/organization/billing/balance", tag = "billing", security(("billing_token" = [])),  responses((status = 200, description = "data", body = crate::openapi::OrganizationBalance), (status = 401, description = "ORG_BILLING_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope), (status = 503, description = "ORG_BALANCE_RECONCILIATION_REQUIRED", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn billing_balance(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let result = async {
        let org = billing::authenticate(&state, billing_token(&headers)).await?;
        billing::balance(&state, &org).await
    }
    .await;
    respond(result)
}

#[utoipa::path(get, path = "/api/v1/organization/billing/usage/daily", tag = "billing", security(("billing_token" = [])), params(("date" = Option<String>, Query, description = "YYYY-MM-DD (UTC day); default today")), responses((status = 200, description = "data", body = crate::openapi::DailyUsage), (status = 400, description = "bad date (no reason)", body = crate::openapi::ErrorEnvelope), (status = 401, description = "ORG_BILLING_TOKEN_INVALID", body = crate::openapi::ErrorEnvelope)))]
pub(crate) async fn billing_daily(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(params): Query<Vec<(String, String)>>,
) -> Response {
    let result = async {
        let org = billing::authenticate(&state, billing_token(&headers)).await?;
        let date = billing::parse_date(&params, chrono::Utc::now().date_naive())?;
        billing::daily(&state, &org, date).await
    }
    .await;
    respond(result)
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
        .replace('\'', "&#39;")
}

fn page(title: &str, body: &str) -> Html<String> {
    Html(format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width\"><title>{t}</title>\
         <style>body{{font-family:system-ui,sans-serif;max-width:32rem;margin:3rem auto;padding:0 1rem}}input,button{{font-size:1rem;padding:.4rem}}</style>\
         </head><body><h1>{t}</h1>{body}</body></html>",
        t = escape(title)
    ))
}

fn invitation_status_code(e: &invitations::InvitationError) -> StatusCode {
    use invitations::InvitationError::*;
    match e {
        NotFound => StatusCode::NOT_FOUND,
        Expired => StatusCode::GONE,
        AlreadyAccepted => StatusCode::CONFLICT,
        Revoked => StatusCode::GONE,
        EmailMismatch => StatusCode::FORBIDDEN,
        Unavailable => StatusCode::SERVICE_UNAVAILABLE,
    }
}

async fn invitation_page(State(state): State<AppState>, Path(token): Path<String>) -> Response {
    match invitations::view(&state, &token).await {
        Ok(v) if v.status == "pending" => page(
            &format!("Join {}", v.organization_name),
            &format!(
                "<p>You were invited to activate <strong>{org}</strong>. Confirm the email address the invitation was sent to ({hint}).</p>\
                 <form method=\"post\" action=\"/invitations/{token}/accept\"><label>Email <input type=\"email\" name=\"email\" required></label> <button type=\"submit\">Accept invitation</button></form>",
                org = escape(&v.organization_name),
                hint = escape(&v.email_hint),
                token = escape(&token),
            ),
        )
        .into_response(),
        Ok(v) => {
            let message = match v.status.as_str() {
                "accepted" => "This invitation was already accepted.",
                "expired" => "This invitation has expired; ask your provider for a new one.",
                _ => "This invitation is no longer valid.",
            };
            (StatusCode::GONE, page("Invitation", &format!("<p>{message}</p>"))).into_response()
        }
        Err(e) => (invitation_status_code(&e), page("Invitation", &format!("<p>{}</p>", escape(&e.to_string())))).into_response(),
    }
}

/// `POST /invitations/{token}/accept` with `email` as JSON (`{"email": …}`, answered in JSON) or
/// as a form (answered with a page).
async fn invitation_accept(
    State(state): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.starts_with("application/json"));
    let email: Option<String> = if is_json {
        serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v.get("email").and_then(Value::as_str).map(str::to_string))
    } else {
        serde_urlencoded_email(&body)
    };
    let result = match email {
        Some(email) if customers::valid_email(email.trim()) => {
            invitations::accept(&state, &token, &email).await
        }
        _ => Err(invitations::InvitationError::EmailMismatch),
    };
    match (result, is_json) {
        (Ok(org_id), true) => axum::Json(ok(serde_json::json!({"organization_id": org_id, "status": "active"}))).into_response(),
        (Ok(_), false) => page("Welcome", "<p>Your organization is active. Your provider can now fund it and create API keys.</p>").into_response(),
        (Err(e), true) => (
            invitation_status_code(&e),
            axum::Json(serde_json::json!({"code": invitation_status_code(&e).as_u16(), "reason": invitation_reason(&e), "message": e.to_string(), "metadata": {}})),
        )
            .into_response(),
        (Err(e), false) => (invitation_status_code(&e), page("Invitation", &format!("<p>{}</p>", escape(&e.to_string())))).into_response(),
    }
}

fn invitation_reason(e: &invitations::InvitationError) -> &'static str {
    use invitations::InvitationError::*;
    match e {
        NotFound => "INVITATION_NOT_FOUND",
        Expired => "INVITATION_EXPIRED",
        AlreadyAccepted => "INVITATION_ALREADY_ACCEPTED",
        Revoked => "INVITATION_REVOKED",
        EmailMismatch => "INVITATION_EMAIL_MISMATCH",
        Unavailable => "SERVICE_UNAVAILABLE",
    }
}

/// The `email` field of an `application/x-www-form-urlencoded` body.
fn serde_urlencoded_email(body: &[u8]) -> Option<String> {
    form_urlencoded_pairs(body)
        .into_iter()
        .find(|(k, _)| k == "email")
        .map(|(_, v)| v)
}

fn form_urlencoded_pairs(body: &[u8]) -> Vec<(String, String)> {
    let text = String::from_utf8_lossy(body);
    text.split('&')
        .filter_map(|pair| {
            let (k, v) = pair.split_once('=')?;
            Some((percent_decode(k)?, percent_decode(v)?))
        })
        .collect()
}

fn percent_decode(s: &str) -> Option<String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = s.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

async fn top_up_page(State(state): State<AppState>, Path(token): Path<String>) -> Response {
    let row = entities::top_up_sessions::Entity::find()
        .filter(entities::top_up_sessions::Column::TokenHash.eq(state.hasher.hash(&token)))
        .one(&state.db)
        .await;
    match row {
        Ok(Some(s)) => page(
            "Partner top-up",
            &format!(
                "<p>Top-up of <strong>{} USD</strong> for partner {} ({}).</p><p>Payments are settled by the operator; this page confirms the request.</p>",
                money::NanoUsd::from_nanos(s.amount_nanos).to_decimal_usd(),
                s.partner_id,
                escape(&s.status)
            ),
        )
        .into_response(),
        Ok(None) => (StatusCode::NOT_FOUND, page("Partner top-up", "<p>No such top-up session.</p>")).into_response(),
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, page("Partner top-up", "<p>Please try again later.</p>")).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn form_email_is_decoded() {
        assert_eq!(
            serde_urlencoded_email(b"email=ann%40example.com"),
            Some("ann@example.com".into())
        );
        assert_eq!(
            serde_urlencoded_email(b"x=1&email=a+b%40c.d"),
            Some("a b@c.d".into())
        );
        assert_eq!(serde_urlencoded_email(b"email=%zz"), None);
    }
}
