//! Anthropic's Message Batches behind the gateway's base URL (issue 46, scope 4): `POST
//! /v1/messages/batches`, `GET /v1/messages/batches/{id}`, `GET …/{id}/results`, `POST
//! …/{id}/cancel`. The caller is the customer key presented (`x-api-key`, as the Messages surface
//! reads it); refusals are in Anthropic's error shape `{type: "error", error: {type, message}}`.

use super::customer_key::{answered, customer_key, gateway};
use crate::services::batch_files::Refused;
use crate::services::{batches, key_reads, message_batches};
use crate::state::AppState;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use entities::customer_api_keys;
use serde_json::json;
use std::collections::HashMap;

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// The key presented, active, or the refusal in Anthropic's shape.
async fn caller(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<customer_api_keys::Model, Response> {
    use crate::services::billing::StandingRefused;
    let invalid = || {
        error(
            StatusCode::UNAUTHORIZED,
            "authentication_error",
            "Invalid API key.",
        )
    };
    let presented = customer_key(headers).map_err(|()| invalid())?;
    match key_reads::authenticate(state, presented.as_deref()).await {
        Ok((key, _)) => Ok(key),
        // The no-key body is the same on every gateway route.
        Err(StandingRefused::MissingKey) => Err(gateway::refused(StandingRefused::MissingKey)),
        Err(StandingRefused::InvalidKey) => Err(invalid()),
        Err(StandingRefused::Api(e)) => {
            tracing::warn!(error = %e, "a key's ledger read failed");
            Err(error(
                StatusCode::SERVICE_UNAVAILABLE,
                "api_error",
                "The service is temporarily unavailable; retry shortly.",
            ))
        }
    }
}

fn refused(e: Refused) -> Response {
    match e {
        Refused::Invalid { message, code, .. } => match code {
            "permission_denied" => error(StatusCode::FORBIDDEN, "permission_error", &message),
            _ => error(StatusCode::BAD_REQUEST, "invalid_request_error", &message),
        },
        Refused::TooLarge(message) => {
            error(StatusCode::PAYLOAD_TOO_LARGE, "request_too_large", &message)
        }
        Refused::NotFound(_) => error(
            StatusCode::NOT_FOUND,
            "not_found_error",
            "No such message batch of this organization.",
        ),
        Refused::Conflict(message) => {
            error(StatusCode::CONFLICT, "invalid_request_error", &message)
        }
        Refused::Database(e) => {
            tracing::error!(error = %e, "message batch route: database failed");
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "api_error",
                "The service is temporarily unavailable; retry shortly.",
            )
        }
    }
}

/// The base its results are read from: `[server] public_base_url` when configured, else the
/// request's own host (as the gateway builds the URLs it hands out).
fn base(state: &AppState, headers: &HeaderMap) -> Option<String> {
    let server = &state.settings.server;
    if server.public_base_url_configured {
        return Some(
            server
                .public_base_url
                .as_str()
                .trim_end_matches('/')
                .to_string(),
        );
    }
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| b.is_ascii_graphic()))
        .map(|h| format!("http://{h}"))
}

/// A batch of the key's organization made on this surface.
async fn find(
    state: &AppState,
    key: &customer_api_keys::Model,
    id: &str,
) -> Result<entities::batches::Model, Refused> {
    let b = batches::find(state, key.organization_id, id).await?;
    match b.endpoint == message_batches::ENDPOINT {
        true => Ok(b),
        false => Err(Refused::NotFound("batch_not_found")),
    }
}

#[utoipa::path(post, path = "/v1/messages/batches", tag = "batches", security(("customer_key" = [])), responses((status = 200, description = "Anthropic's message batch object"), (status = 400, description = "Anthropic's error body naming the request")))]
pub(crate) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let (st, base) = (&state, base(&state, &headers));
    answered(caller(st, &headers).await, refused, |key| async move {
        let b = message_batches::create(st, &key, &body).await?;
        Ok(axum::Json(
            message_batches::view(st, &b, base.as_deref()).await?,
        ))
    })
    .await
}

#[utoipa::path(get, path = "/v1/messages/batches", tag = "batches", security(("customer_key" = [])), params(("after_id" = Option<String>, Query, description = "the page older than this batch"), ("before_id" = Option<String>, Query, description = "the page newer than this batch"), ("limit" = Option<u64>, Query, description = "1 to 1000, default 20")), responses((status = 200, description = "Anthropic's list: {data, has_more, first_id, last_id}, newest first"), (status = 400, description = "a cursor or limit refused")))]
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let (st, base) = (&state, base(&state, &headers));
    answered(caller(st, &headers).await, refused, |key| async move {
        let page = batches::Page {
            after: query.get("after_id").cloned(),
            before: query.get("before_id").cloned(),
            limit: super::batches::limit(&query, 1000)?,
        };
        if page.after.is_some() && page.before.is_some() {
            return Err(crate::services::batch_files::invalid(
                "Give after_id or before_id, not both.",
                Some("before_id"),
            ));
        }
        let endpoints = [message_batches::ENDPOINT];
        let (rows, more) = batches::list(st, key.organization_id, &endpoints, &page).await?;
        let mut data = Vec::with_capacity(rows.len());
        for b in &rows {
            data.push(message_batches::view(st, b, base.as_deref()).await?);
        }
        Ok(axum::Json(json!({
            "data": data,
            "has_more": more,
            "first_id": rows.first().map(|b| &b.public_id),
            "last_id": rows.last().map(|b| &b.public_id),
        })))
    })
    .await
}

#[utoipa::path(get, path = "/v1/messages/batches/{message_batch_id}", tag = "batches", security(("customer_key" = [])), params(("message_batch_id" = String, Path)), responses((status = 200, description = "Anthropic's message batch object"), (status = 404, description = "not_found_error")))]
pub(crate) async fn get(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (st, base) = (&state, base(&state, &headers));
    answered(caller(st, &headers).await, refused, |key| async move {
        let b = find(st, &key, &id).await?;
        Ok(axum::Json(
            message_batches::view(st, &b, base.as_deref()).await?,
        ))
    })
    .await
}

#[utoipa::path(get, path = "/v1/messages/batches/{message_batch_id}/results", tag = "batches", security(("customer_key" = [])), params(("message_batch_id" = String, Path)), responses((status = 200, description = "JSONL, one result per request"), (status = 404, description = "not_found_error"), (status = 409, description = "not ended yet")))]
pub(crate) async fn results(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let st = &state;
    answered(caller(st, &headers).await, refused, |key| async move {
        let b = find(st, &key, &id).await?;
        let bytes = message_batches::results(st, &b).await?;
        Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/binary")],
            bytes,
        ))
    })
    .await
}

#[utoipa::path(post, path = "/v1/messages/batches/{message_batch_id}/cancel", tag = "batches", security(("customer_key" = [])), params(("message_batch_id" = String, Path)), responses((status = 200, description = "Anthropic's message batch object, canceling"), (status = 404, description = "not_found_error"), (status = 409, description = "it ended")))]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let (st, base) = (&state, base(&state, &headers));
    answered(caller(st, &headers).await, refused, |key| async move {
        let b = find(st, &key, &id).await?;
        let b = batches::cancel(st, key.organization_id, &b.public_id).await?;
        Ok(axum::Json(
            message_batches::view(st, &b, base.as_deref()).await?,
        ))
    })
    .await
}

/// The routes, the create's body bounded by `[batches] max_file_bytes`.
pub(crate) fn routes(state: &AppState) -> axum::Router<AppState> {
    use axum::routing::{get as get_, post};
    let limit = usize::try_from(state.settings.batches.max_file_bytes).unwrap_or(usize::MAX);
    axum::Router::new()
        .route(
            "/v1/messages/batches",
            post(create)
                .layer(axum::extract::DefaultBodyLimit::max(limit))
                .get(list),
        )
        .route("/v1/messages/batches/{message_batch_id}", get_(get))
        .route(
            "/v1/messages/batches/{message_batch_id}/results",
            get_(results),
        )
        .route(
            "/v1/messages/batches/{message_batch_id}/cancel",
            post(cancel),
        )
}
