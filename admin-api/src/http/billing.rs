//! The organization billing API: balance and daily usage, behind the organization's billing token.

use super::respond;
use crate::auth::billing_token;
use crate::services::billing;
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
