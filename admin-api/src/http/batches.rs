//! Batch work behind the gateway's base URL (issue 46), in OpenAI's shapes: `POST
//! {compat_base}/files` (multipart, `purpose=batch`), `GET …/files/{id}` and `…/files/{id}/content`,
//! `POST …/batches`, `GET …/batches/{id}`, `POST …/batches/{id}/cancel`. The caller is the customer
//! key presented (as at the gateway); refusals are the gateway's error bodies.

use super::customer_key::{answered, customer_key, gateway};
use crate::services::batch_files::{self, Refused};
use crate::services::batches::{self, CreateBatch};
use crate::services::key_reads;
use crate::state::AppState;
use axum::extract::{Multipart, Path, Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use entities::customer_api_keys;
use serde_json::json;
use std::collections::HashMap;

/// The key presented, active, or the gateway's refusal.
async fn caller(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<customer_api_keys::Model, Response> {
    let presented = customer_key(headers).map_err(|()| gateway::invalid_key())?;
    key_reads::authenticate(state, presented.as_deref())
        .await
        .map(|(key, _)| key)
        .map_err(gateway::refused)
}

/// A refusal in the gateway's OpenAI shape.
fn refused(e: Refused) -> Response {
    let (status, message, kind, code, param) = match e {
        Refused::Invalid {
            message,
            param,
            code,
        } => (
            StatusCode::BAD_REQUEST,
            message,
            "invalid_request_error",
            code,
            param,
        ),
        Refused::TooLarge(message) => (
            StatusCode::PAYLOAD_TOO_LARGE,
            message,
            "invalid_request_error",
            "file_too_large",
            Some("file"),
        ),
        Refused::NotFound(code) => (
            StatusCode::NOT_FOUND,
            match code {
                "file_not_found" => "No such file of this organization.".to_string(),
                _ => "No such batch of this organization.".to_string(),
            },
            "invalid_request_error",
            code,
            None,
        ),
        Refused::Conflict(message) => (
            StatusCode::CONFLICT,
            message,
            "invalid_request_error",
            "batch_not_cancellable",
            None,
        ),
        Refused::Database(e) => {
            tracing::error!(error = %e, "batch route: database failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "The service is temporarily unavailable; retry shortly.".to_string(),
                "service_unavailable",
                "service_unavailable",
                None,
            )
        }
    };
    let body = json!({"error": {"message": message, "type": kind, "code": code, "param": param}});
    (status, axum::Json(body)).into_response()
}

fn ok(v: serde_json::Value) -> Response {
    (StatusCode::OK, axum::Json(v)).into_response()
}

#[utoipa::path(post, path = "/compat/v1/files", tag = "batches", security(("customer_key" = [])), responses((status = 200, description = "OpenAI's file object"), (status = 400, description = "the gateway's body: purpose not batch, no file, a line refused (its number and why)"), (status = 401, description = "the gateway's bodies"), (status = 413, description = "larger than [batches] max_file_bytes")))]
pub(crate) async fn upload(
    State(state): State<AppState>,
    headers: HeaderMap,
    multipart: Result<Multipart, axum::extract::multipart::MultipartRejection>,
) -> Response {
    let key = match caller(&state, &headers).await {
        Ok(k) => k,
        Err(r) => return r,
    };
    let Ok(mut multipart) = multipart else {
        return refused(batch_files::invalid(
            "Send the file as multipart/form-data with fields purpose and file.",
            None,
        ));
    };
    let max = usize::try_from(state.settings.batches.max_file_bytes).unwrap_or(usize::MAX);
    let (mut purpose, mut file) = (None, None);
    loop {
        let field = match multipart.next_field().await {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => {
                return refused(too_large(max));
            }
            Err(e) => {
                return refused(batch_files::invalid(
                    format!("The form could not be read: {e}"),
                    None,
                ));
            }
        };
        match field.name() {
            Some("purpose") => purpose = field.text().await.ok(),
            Some("file") => {
                let name = field.file_name().unwrap_or("batch.jsonl").to_string();
                match read_capped(field, max).await {
                    Ok(bytes) => file = Some((name, bytes)),
                    Err(r) => return refused(r),
                }
            }
            _ => {}
        }
    }
    if purpose.as_deref() != Some("batch") {
        return refused(batch_files::invalid(
            "purpose must be \"batch\" (the only purpose this gateway keeps files for).",
            Some("purpose"),
        ));
    }
    let Some((name, bytes)) = file else {
        return refused(batch_files::invalid("No file was sent.", Some("file")));
    };
    let result = async {
        let lines = batch_files::check(&state, &bytes, &batch_files::ENDPOINTS)?;
        batch_files::store(&state, key.organization_id, &name, bytes, lines.len()).await
    }
    .await;
    match result {
        Ok(f) => ok(batch_files::view(&f)),
        Err(e) => refused(e),
    }
}

fn too_large(max: usize) -> Refused {
    Refused::TooLarge(format!(
        "The file is larger than {max} bytes (batches.max_file_bytes)."
    ))
}

/// A multipart field's bytes, at most `max` of them.
async fn read_capped(
    mut field: axum::extract::multipart::Field<'_>,
    max: usize,
) -> Result<Vec<u8>, Refused> {
    let mut out = Vec::new();
    loop {
        match field.chunk().await {
            Ok(Some(chunk)) => {
                if out.len() + chunk.len() > max {
                    return Err(too_large(max));
                }
                out.extend_from_slice(&chunk);
            }
            Ok(None) => return Ok(out),
            Err(e) if e.status() == StatusCode::PAYLOAD_TOO_LARGE => return Err(too_large(max)),
            Err(e) => {
                return Err(batch_files::invalid(
                    format!("The file could not be read: {e}"),
                    Some("file"),
                ));
            }
        }
    }
}

#[utoipa::path(get, path = "/compat/v1/files/{file_id}", tag = "batches", security(("customer_key" = [])), params(("file_id" = String, Path)), responses((status = 200, description = "OpenAI's file object"), (status = 404, description = "file_not_found")))]
pub(crate) async fn file(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let st = &state;
    answered(caller(st, &headers).await, refused, |key| async move {
        let f = batch_files::find(st, key.organization_id, &id).await?;
        Ok(axum::Json(batch_files::view(&f)))
    })
    .await
}

#[utoipa::path(get, path = "/compat/v1/files/{file_id}/content", tag = "batches", security(("customer_key" = [])), params(("file_id" = String, Path)), responses((status = 200, description = "the file's JSONL"), (status = 404, description = "file_not_found")))]
pub(crate) async fn content(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let st = &state;
    answered(caller(st, &headers).await, refused, |key| async move {
        let f = batch_files::find(st, key.organization_id, &id).await?;
        let bytes = batches::content(st, &f).await?;
        Ok((
            StatusCode::OK,
            [(header::CONTENT_TYPE, "application/jsonl")],
            bytes,
        ))
    })
    .await
}

#[utoipa::path(post, path = "/compat/v1/batches", tag = "batches", security(("customer_key" = [])), responses((status = 200, description = "OpenAI's batch object"), (status = 400, description = "the gateway's body naming the parameter")))]
pub(crate) async fn create(
    State(state): State<AppState>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    let st = &state;
    answered(caller(st, &headers).await, refused, |key| async move {
        let ask: CreateBatch = serde_json::from_slice(&body).map_err(|e| {
            batch_files::invalid(format!("The body is not a batch request: {e}"), None)
        })?;
        let b = batches::create(st, &key, ask).await?;
        Ok(axum::Json(batches::view(st, &b).await?))
    })
    .await
}

/// `limit` of a list's query: absent → 20; else 1 to `max`, or the refusal naming it.
pub(crate) fn limit(query: &HashMap<String, String>, max: u64) -> Result<u64, Refused> {
    match query.get("limit") {
        None => Ok(20),
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|n| (1..=max).contains(n))
            .ok_or_else(|| {
                batch_files::invalid(
                    format!("limit must be a whole number from 1 to {max}."),
                    Some("limit"),
                )
            }),
    }
}

#[utoipa::path(get, path = "/compat/v1/batches", tag = "batches", security(("customer_key" = [])), params(("after" = Option<String>, Query, description = "a batch id: the page older than it"), ("limit" = Option<u64>, Query, description = "1 to 100, default 20")), responses((status = 200, description = "OpenAI's list: {object: \"list\", data, first_id, last_id, has_more}, newest first"), (status = 400, description = "limit or after refused, naming it")))]
pub(crate) async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let st = &state;
    answered(caller(st, &headers).await, refused, |key| async move {
        let page = batches::Page {
            after: query.get("after").cloned(),
            before: None,
            limit: limit(&query, 100)?,
        };
        let (rows, more) =
            batches::list(st, key.organization_id, &batch_files::ENDPOINTS, &page).await?;
        let mut data = Vec::with_capacity(rows.len());
        for b in &rows {
            data.push(batches::view(st, b).await?);
        }
        Ok(axum::Json(json!({
            "object": "list",
            "first_id": rows.first().map(|b| &b.public_id),
            "last_id": rows.last().map(|b| &b.public_id),
            "has_more": more,
            "data": data,
        })))
    })
    .await
}

#[utoipa::path(get, path = "/compat/v1/batches/{batch_id}", tag = "batches", security(("customer_key" = [])), params(("batch_id" = String, Path)), responses((status = 200, description = "OpenAI's batch object"), (status = 404, description = "batch_not_found")))]
pub(crate) async fn get(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let st = &state;
    answered(caller(st, &headers).await, refused, |key| async move {
        let b = batches::find(st, key.organization_id, &id).await?;
        Ok(axum::Json(batches::view(st, &b).await?))
    })
    .await
}

#[utoipa::path(post, path = "/compat/v1/batches/{batch_id}/cancel", tag = "batches", security(("customer_key" = [])), params(("batch_id" = String, Path)), responses((status = 200, description = "OpenAI's batch object, cancelling"), (status = 404, description = "batch_not_found"), (status = 409, description = "batch_not_cancellable: it ended")))]
pub(crate) async fn cancel(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let st = &state;
    answered(caller(st, &headers).await, refused, |key| async move {
        let b = batches::cancel(st, key.organization_id, &id).await?;
        Ok(axum::Json(batches::view(st, &b).await?))
    })
    .await
}

/// The routes, the upload's body bounded by `[batches] max_file_bytes` (plus the form's own
/// bytes).
pub(crate) fn routes(state: &AppState) -> axum::Router<AppState> {
    use axum::routing::{get as get_, post};
    let limit = usize::try_from(state.settings.batches.max_file_bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(64 * 1024);
    axum::Router::new()
        .route(
            "/compat/v1/files",
            post(upload).layer(axum::extract::DefaultBodyLimit::max(limit)),
        )
        .route("/compat/v1/files/{file_id}", get_(file))
        .route("/compat/v1/files/{file_id}/content", get_(content))
        .route("/compat/v1/batches", post(create).get(list))
        .route("/compat/v1/batches/{batch_id}", get_(get))
        .route("/compat/v1/batches/{batch_id}/cancel", post(cancel))
}
