//! The organization billing API: balance and daily usage, behind the organization's billing token.

use super::answer::respond;
use super::customer_key::{customer_key, gateway};
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
