//! The customer key a request presents behind the gateway's base URL, read as the gateway reads
//! it, and the gateway's own error bodies for the routes admin-api answers there (issue 45, 46).

use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};

/// Answers what `work` makes of the caller's `key` (its value, or its error as `refuse` writes
/// it); a key refused is answered as it was.
pub(crate) async fn answered<K, E, F, Fut, R>(
    key: Result<K, Response>,
    refuse: fn(E) -> Response,
    work: F,
) -> Response
where
    F: FnOnce(K) -> Fut,
    Fut: std::future::Future<Output = Result<R, E>>,
    R: IntoResponse,
{
    let key = match key {
        Ok(k) => k,
        Err(r) => return r,
    };
    match work(key).await {
        Ok(r) => r.into_response(),
        Err(e) => refuse(e),
    }
}

/// The customer key of a request, as the gateway reads it: `Authorization: Bearer`, `x-api-key`
/// or `x-alt-api-key`. `Err`: two different keys (invalid, as at the gateway).
pub(crate) fn customer_key(headers: &HeaderMap) -> Result<Option<String>, ()> {
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

/// The gateway's error bodies (SPEC "Gateway errors"), for the routes a customer key reads behind
/// the gateway's base URL: never the partner envelope (issue 45).
pub(crate) mod gateway {
    use crate::services::billing::{BillingError, StandingRefused};
    use axum::http::StatusCode;
    use axum::response::{IntoResponse, Response};
    use serde_json::json;

    /// A key refused, or the ledger's answer unavailable.
    pub(crate) fn refused(refused: StandingRefused) -> Response {
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
    pub(crate) fn invalid_key() -> Response {
        (
            StatusCode::UNAUTHORIZED,
            axum::Json(
                json!({"error": {"message": "Invalid API key.", "type": "authentication_error"}}),
            ),
        )
            .into_response()
    }

    /// No settled call of the key's organization with that id (nor does it say why).
    pub(crate) fn not_found() -> Response {
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
