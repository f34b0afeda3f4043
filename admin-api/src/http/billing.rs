//! The organization billing API: balance and daily usage, behind the organization's billing token.

use super::answer::respond;
use crate::auth::billing_token;
use crate::error::ApiError;
use crate::services::billing;
use crate::services::statement_files;
use crate::state::AppState;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;

#[utoipa::path(get, path = "/api/v1/organization/billing/balance", tag = "billing", security(("billing_token" = [])),  responses((status = 200, description = "data", body = crate::dto::OrganizationBalance), (status = 401, description = "ORG_BILLING_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 503, description = "ORG_BALANCE_RECONCILIATION_REQUIRED", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn balance(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let result = async {
        let org = billing::authenticate(&state, billing_token(&headers)).await?;
        billing::balance(&state, &org).await
    }
    .await;
    respond(result)
}

#[utoipa::path(get, path = "/api/v1/organization/billing/usage/daily", tag = "billing", security(("billing_token" = [])), params(("date" = Option<String>, Query, description = "YYYY-MM-DD (UTC day); default today")), responses((status = 200, description = "data", body = crate::dto::DailyUsage), (status = 400, description = "bad date (no reason)", body = crate::dto::ErrorEnvelope), (status = 401, description = "ORG_BILLING_TOKEN_INVALID", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn daily(
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

#[utoipa::path(get, path = "/compat/v1/key", tag = "billing", security(("customer_key" = [])), responses((status = 200, description = "data: the key's own standing", body = crate::dto::KeyStanding), (status = 401, description = "the gateway's bodies: {error: \"missing_api_key\", message} or {error: {message, type: \"authentication_error\"}}"), (status = 503, description = "the gateway's body: {error: {message, type: \"service_unavailable\", code: \"balance_reconciliation_required\"}} (never a zero balance)")))]
pub(crate) async fn key_standing(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let presented = match customer_key(&headers) {
        Ok(k) => k,
        Err(()) => return gateway::invalid_key(),
    };
    match billing::key_standing(&state, presented.as_deref()).await {
        Ok(data) => respond::<_, ApiError>(Ok(data)),
        Err(refused) => gateway::refused(refused),
    }
}

#[utoipa::path(get, path = "/compat/v1/generations/{request_id}", tag = "billing", security(("customer_key" = [])), params(("request_id" = String, Path, description = "the x-request-id the gateway answered the call with")), responses((status = 200, description = "the settled call's cost (not in the envelope)", body = crate::dto::Generation), (status = 401, description = "the gateway's bodies, as for /compat/v1/key"), (status = 404, description = "the gateway's body: {error: {message, type: \"invalid_request_error\", code: \"generation_not_found\"}} (not settled yet, another organization's call, or none)"), (status = 503, description = "the gateway's body: {error: {message, type: \"service_unavailable\", code}}")))]
pub(crate) async fn generation(
    State(state): State<AppState>,
    headers: HeaderMap,
    axum::extract::Path(request_id): axum::extract::Path<String>,
) -> Response {
    use crate::services::key_reads::{self, GenerationRefused};
    use axum::response::IntoResponse;
    let presented = match customer_key(&headers) {
        Ok(k) => k,
        Err(()) => return gateway::invalid_key(),
    };
    match key_reads::generation(&state, presented.as_deref(), &request_id).await {
        Ok(data) => axum::Json(data).into_response(),
        Err(GenerationRefused::Key(refused)) => gateway::refused(refused),
        Err(GenerationRefused::NotFound) => gateway::not_found(),
    }
}

/// The gateway's error bodies (SPEC "Gateway errors"), for the routes a customer key reads behind
/// the gateway's base URL: never the partner envelope (issue 45).
mod gateway {
    use crate::services::billing::{BillingError, StandingRefused};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use serde_json::json;

    /// A key refused, or the ledger's answer unavailable.
    pub(super) fn refused(refused: StandingRefused) -> Response {
        match refused {
            StandingRefused::MissingKey => (
                StatusCode::UNAUTHORIZED,
                axum::Json(json!({"error": "missing_api_key", "message": "No API key was provided. Send it as 'Authorization: Bearer KEY', 'x-api-key' or 'x-alt-api-key'."})),
            )
                .into_response(),
            StandingRefused::InvalidKey => invalid_key(),
            StandingRefused::Api(BillingError::ReconciliationRequired) => unavailable(
                "The organization's balance is being reconciled; retry shortly.",
                "balance_reconciliation_required",
            ),
            StandingRefused::Api(e) => {
                tracing::warn!(error = %e, "a key's ledger read failed");
                unavailable(
                    "The service is temporarily unavailable; retry shortly.",
                    "service_unavailable",
                )
            }
        }
    }

    /// The gateway's 401 for a key it would not serve.
    pub(super) fn invalid_key() -> Response {
        (
            StatusCode::UNAUTHORIZED,
            axum::Json(
                json!({"error": {"message": "Invalid API key.", "type": "authentication_error"}}),
            ),
        )
            .into_response()
    }

    /// No settled call of the key's organization with that id (nor does it say why).
    pub(super) fn not_found() -> Response {
        (
            StatusCode::NOT_FOUND,
            axum::Json(json!({"error": {
                "message": "No settled call of this organization has that id (a call is found once it is settled).",
                "type": "invalid_request_error",
                "code": "generation_not_found",
            }})),
        )
            .into_response()
    }

    fn unavailable(message: &str, code: &str) -> Response {
        let mut resp = (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(
                json!({"error": {"message": message, "type": "service_unavailable", "code": code}}),
            ),
        )
            .into_response();
        resp.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
        resp
    }
}

/// The customer key of a request, as the gateway reads it: `Authorization: Bearer`, `x-api-key`
/// or `x-alt-api-key`. `Err`: two different keys (invalid, as at the gateway).
fn customer_key(headers: &HeaderMap) -> Result<Option<String>, ()> {
    let bearer = headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .map(str::trim);
    let others = ["x-api-key", "x-alt-api-key"]
        .into_iter()
        .filter_map(|h| headers.get(h).and_then(|v| v.to_str().ok()).map(str::trim));
    let mut found: Option<&str> = None;
    for k in bearer.into_iter().chain(others).filter(|k| !k.is_empty()) {
        match found {
            Some(f) if f != k => return Err(()),
            _ => found = Some(k),
        }
    }
    Ok(found.map(str::to_string))
}

/// A statement's format, from the request's `Accept` (the first acceptable media type; absent or
/// `*/*`: CSV).
pub(crate) fn statement_format(headers: &HeaderMap) -> Option<&'static str> {
    let Some(accept) = headers
        .get(axum::http::header::ACCEPT)
        .and_then(|v| v.to_str().ok())
    else {
        return Some("csv");
    };
    for part in accept.split(',') {
        let media = part
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "text/csv" | "text/*" | "*/*" => return Some("csv"),
            "application/pdf" => return Some("pdf"),
            _ => {}
        }
    }
    None
}

/// A statement as a download in `format` (`csv` or `pdf`).
pub(crate) fn statement_download(
    statement: &crate::services::statements::Statement,
    format: &str,
) -> Response {
    use axum::http::{HeaderValue, StatusCode, header};
    use axum::response::IntoResponse;
    let name = format!(
        "statement-{}-{}-{}.{format}",
        statement.kind, statement.subject_id, statement.month
    );
    let (body, content_type) = if format == "pdf" {
        match statement_files::pdf(statement) {
            Ok(bytes) => (bytes, "application/pdf"),
            Err(e) => return ApiError::from(e).into_response(),
        }
    } else {
        (
            statement_files::csv(statement).into_bytes(),
            "text/csv; charset=utf-8",
        )
    };
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{name}\"")) {
        h.insert(header::CONTENT_DISPOSITION, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

#[utoipa::path(get, path = "/api/v1/organization/billing/statements/{month}", tag = "billing", security(("billing_token" = [])), params(("month" = String, Path, description = "YYYY-MM (UTC); the current month is provisional"), ("Accept" = String, Header, description = "text/csv (default) or application/pdf")), responses((status = 200, description = "the statement: text/csv or application/pdf (opening balance, movements, usage per model and group, closing balance; equal to the ledger to the nano-dollar)"), (status = 400, description = "INVALID_STATEMENT_MONTH", body = crate::dto::ErrorEnvelope), (status = 401, description = "ORG_BILLING_TOKEN_INVALID", body = crate::dto::ErrorEnvelope), (status = 406, description = "STATEMENT_FORMAT_NOT_ACCEPTABLE", body = crate::dto::ErrorEnvelope)))]
pub(crate) async fn statement(
    State(state): State<AppState>,
    headers: HeaderMap,
    crate::http::params::Seg(month): crate::http::params::Seg,
) -> Response {
    use crate::error::ApiError;
    use crate::services::statements::{self, Month};
    use axum::response::IntoResponse;
    let result = async {
        let org = billing::authenticate(&state, billing_token(&headers)).await?;
        let month = Month::parse(&month).ok_or(ApiError::InvalidStatementMonth)?;
        let format = statement_format(&headers).ok_or(ApiError::StatementNotAcceptable)?;
        let s = statements::for_org(&state, org.id, month).await?;
        Ok::<_, ApiError>(statement_download(&s, format))
    }
    .await;
    match result {
        Ok(resp) => resp,
        Err(e) => e.into_response(),
    }
}
