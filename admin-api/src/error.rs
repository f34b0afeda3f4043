//! Errors of the partner and billing APIs, and the one mapping to their wire envelope.
//!
//! Every failure is an [`ApiError`]; [`ApiError::parts`] gives its HTTP status, `reason` (absent
//! only where the spec says so), message and `metadata`. The match has no wildcard arm, so a new
//! variant cannot ship without a decided answer. Clients branch on `reason`, never on `message`.

use crate::dto::ErrorEnvelope;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use money::{NanoUsd, RateMultiplier};
use serde_json::{Value, json};

/// A partner-API or billing-API failure.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    #[error("a partner API token is required")]
    AuthenticationRequired,
    #[error("the partner API token is not valid")]
    TokenInvalid,
    #[error("the token's scopes do not allow this route (needs {needed})")]
    ScopeRequired { needed: &'static str },
    #[error("write routes need a partner role of owner, admin or operator")]
    AccessRequired,
    #[error("rate limit exceeded; retry after {retry_after_secs} s")]
    RateLimited { retry_after_secs: u64 },
    #[error("write routes require an Idempotency-Key header (1 to 255 visible ASCII characters)")]
    IdempotencyKeyRequired,
    #[error("this Idempotency-Key was used with a different request")]
    IdempotencyKeyConflict,
    #[error("a request with this Idempotency-Key is still in progress")]
    IdempotencyInProgress,
    #[error("amount_usd must be a positive amount with at most 9 decimals")]
    InvalidTopUpAmount,
    #[error("external_customer_id must be 1 to 128 letters, digits, '.', '_', ':' or '-'")]
    InvalidExternalCustomerId,
    #[error("invalid customer: {0}")]
    InvalidCustomer(String),
    #[error("contact_email must be a valid email address")]
    InvalidCustomerContact,
    #[error("initial_allocation_usd must be a non-negative amount with at most 9 decimals")]
    InvalidInitialAllocation,
    #[error(
        "retail_rate_multiplier is required and must be a positive number with at most 6 decimals"
    )]
    InvalidRetailRate,
    #[error("the retail rate multiplier is below the retail floor {floor}")]
    RetailRateBelowFloor { floor: RateMultiplier },
    #[error("available partner funding does not cover the reservation")]
    FundingInsufficient {
        available: NanoUsd,
        required: NanoUsd,
    },
    #[error("this external_customer_id is already used by another customer")]
    ExternalCustomerConflict,
    #[error("this organization slug is taken")]
    CustomerSlugExists,
    #[error("customer not found")]
    CustomerNotFound,
    #[error("the customer has not accepted the invitation yet")]
    PendingActivation {
        invited_email: String,
        invitation_status: String,
        invitation_expires_at: String,
    },
    #[error("action must be one of increase, decrease, set_limit")]
    InvalidAllocationAction,
    #[error("amount_usd must be a positive amount with at most 9 decimals")]
    InvalidAllocationAmount,
    #[error("limit_usd must be a non-negative amount with at most 9 decimals")]
    InvalidAllocationLimit,
    #[error("the allocation cannot go below what the customer already used")]
    AllocationLimitBelowUsed { used: NanoUsd },
    #[error("part of the organization balance is held by requests in flight")]
    BalanceReserved { available: NanoUsd },
    #[error("retail_rate_multiplier must be a positive number with at most 6 decimals")]
    InvalidGroupRate,
    #[error("the customer has no such model group")]
    GroupNotFound,
    #[error("invalid API key request: {0}")]
    InvalidApiKey(String),
    #[error("API key not found")]
    ApiKeyNotFound,
    #[error("granularity must be day or hour")]
    InvalidUsageGranularity,
    #[error("invalid usage window: {0}")]
    InvalidUsageWindow(String),
    #[error("the organization billing token is missing or not valid")]
    BillingTokenInvalid,
    #[error("the organization balance is being reconciled; retry shortly")]
    ReconciliationRequired,
    #[error("date must be a YYYY-MM-DD date")]
    InvalidDate,
    #[error("internal error")]
    Internal,
    #[error("a dependency is unavailable; retry shortly")]
    Unavailable,
    #[error("the month must be YYYY-MM, not after the current month (UTC)")]
    InvalidStatementMonth,
    #[error("statements are served as text/csv or application/pdf (the Accept header)")]
    StatementNotAcceptable,
    #[error("invalid automatic recharge: {0}")]
    InvalidRecharge(String),
    #[error("automatic recharge needs a payment provider ([payments] provider = \"stripe\")")]
    RechargeUnavailable,
    #[error("set the automatic recharge rule (PUT /funding/recharge) before saving a card")]
    RechargeRuleRequired,
    #[error("invalid alert: {0}")]
    InvalidAlert(String),
    #[error("invalid webhook: {0}")]
    InvalidWebhook(String),
    #[error("webhook endpoint not found")]
    WebhookNotFound,
    #[error("webhook delivery not found")]
    WebhookDeliveryNotFound,
    #[error("a partner has at most {max} webhook endpoints")]
    WebhookLimit { max: u64 },
    #[error("invalid automatic allocation: {0}")]
    InvalidAutoAllocation(String),
    /// The payment provider could not be reached or refused the call (nothing was stored).
    #[error("the payment provider is unavailable; retry shortly ({0})")]
    PaymentProvider(String),
}

fn usd(n: NanoUsd) -> Value {
    crate::dto::usd_json(n)
}

impl ApiError {
    /// HTTP status, `reason` (None: the body has no `reason`), and `metadata`.
    pub fn parts(&self) -> (StatusCode, Option<&'static str>, Value) {
        use ApiError::*;
        let none = json!({});
        match self {
            AuthenticationRequired => (
                StatusCode::UNAUTHORIZED,
                Some("PARTNER_API_AUTHENTICATION_REQUIRED"),
                none,
            ),
            TokenInvalid => (
                StatusCode::UNAUTHORIZED,
                Some("PARTNER_API_TOKEN_INVALID"),
                none,
            ),
            ScopeRequired { needed } => (
                StatusCode::FORBIDDEN,
                Some("PARTNER_API_SCOPE_REQUIRED"),
                json!({"required_scope": needed}),
            ),
            AccessRequired => (StatusCode::FORBIDDEN, Some("PARTNER_ACCESS_REQUIRED"), none),
            RateLimited { retry_after_secs } => (
                StatusCode::TOO_MANY_REQUESTS,
                Some("PARTNER_RATE_LIMITED"),
                json!({"retry_after_seconds": retry_after_secs}),
            ),
            IdempotencyKeyRequired => (
                StatusCode::BAD_REQUEST,
                Some("IDEMPOTENCY_KEY_REQUIRED"),
                none,
            ),
            IdempotencyKeyConflict => {
                (StatusCode::CONFLICT, Some("IDEMPOTENCY_KEY_CONFLICT"), none)
            }
            IdempotencyInProgress => (StatusCode::CONFLICT, Some("IDEMPOTENCY_IN_PROGRESS"), none),
            InvalidTopUpAmount => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_TOP_UP_AMOUNT"),
                none,
            ),
            InvalidExternalCustomerId => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_EXTERNAL_CUSTOMER_ID"),
                none,
            ),
            InvalidCustomer(_) => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_CUSTOMER"),
                none,
            ),
            InvalidCustomerContact => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_CUSTOMER_CONTACT"),
                none,
            ),
            InvalidInitialAllocation => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_INITIAL_ALLOCATION"),
                none,
            ),
            InvalidRetailRate => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_RETAIL_RATE"),
                none,
            ),
            RetailRateBelowFloor { floor } => (
                StatusCode::BAD_REQUEST,
                Some("PARTNER_RETAIL_RATE_BELOW_FLOOR"),
                json!({"retail_floor_rate_multiplier": crate::dto::multiplier_json(*floor)}),
            ),
            FundingInsufficient {
                available,
                required,
            } => {
                let shortfall = required.remaining_after(*available);
                (
                    StatusCode::FORBIDDEN,
                    Some("PARTNER_FUNDING_INSUFFICIENT"),
                    json!({
                        "available_funding_usd": usd(*available),
                        "required_usd": usd(*required),
                        "shortfall_usd": usd(shortfall),
                        "next_action": "top_up_partner_balance",
                    }),
                )
            }
            ExternalCustomerConflict => (
                StatusCode::CONFLICT,
                Some("PARTNER_EXTERNAL_CUSTOMER_CONFLICT"),
                none,
            ),
            CustomerSlugExists => (
                StatusCode::CONFLICT,
                Some("PARTNER_CUSTOMER_SLUG_EXISTS"),
                none,
            ),
            CustomerNotFound => (
                StatusCode::NOT_FOUND,
                Some("PARTNER_CUSTOMER_NOT_FOUND"),
                none,
            ),
            PendingActivation {
                invited_email,
                invitation_status,
                invitation_expires_at,
            } => (
                StatusCode::CONFLICT,
                Some("PARTNER_CUSTOMER_PENDING_ACTIVATION"),
                json!({
                    "invited_email": invited_email,
                    "invitation_status": invitation_status,
                    "invitation_expires_at": invitation_expires_at,
                    "next_action": "accept_invitation",
                }),
            ),
            InvalidAllocationAction => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_ALLOCATION_ACTION"),
                none,
            ),
            InvalidAllocationAmount => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_ALLOCATION_AMOUNT"),
                none,
            ),
            InvalidAllocationLimit => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_ALLOCATION_LIMIT"),
                none,
            ),
            AllocationLimitBelowUsed { used } => (
                StatusCode::BAD_REQUEST,
                Some("PARTNER_ALLOCATION_LIMIT_BELOW_USED"),
                json!({"partner_allocation_used_usd": usd(*used)}),
            ),
            BalanceReserved { available } => (
                StatusCode::CONFLICT,
                Some("PARTNER_CUSTOMER_BALANCE_RESERVED"),
                json!({"organization_available_usd": usd(*available)}),
            ),
            InvalidGroupRate => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_CUSTOMER_GROUP_RATE"),
                none,
            ),
            GroupNotFound => (
                StatusCode::NOT_FOUND,
                Some("PARTNER_CUSTOMER_GROUP_NOT_FOUND"),
                none,
            ),
            InvalidApiKey(_) => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_CUSTOMER_API_KEY"),
                none,
            ),
            ApiKeyNotFound => (
                StatusCode::NOT_FOUND,
                Some("PARTNER_CUSTOMER_API_KEY_NOT_FOUND"),
                none,
            ),
            InvalidUsageGranularity => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_USAGE_GRANULARITY"),
                none,
            ),
            InvalidUsageWindow(_) => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_USAGE_WINDOW"),
                none,
            ),
            BillingTokenInvalid => (
                StatusCode::UNAUTHORIZED,
                Some("ORG_BILLING_TOKEN_INVALID"),
                none,
            ),
            ReconciliationRequired => (
                StatusCode::SERVICE_UNAVAILABLE,
                Some("ORG_BALANCE_RECONCILIATION_REQUIRED"),
                none,
            ),
            InvalidDate => (StatusCode::BAD_REQUEST, None, none),
            InvalidStatementMonth => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_STATEMENT_MONTH"),
                none,
            ),
            StatementNotAcceptable => (
                StatusCode::NOT_ACCEPTABLE,
                Some("STATEMENT_FORMAT_NOT_ACCEPTABLE"),
                none,
            ),
            InvalidRecharge(_) => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_RECHARGE"),
                none,
            ),
            RechargeUnavailable => (
                StatusCode::CONFLICT,
                Some("RECHARGE_PROVIDER_REQUIRED"),
                none,
            ),
            RechargeRuleRequired => (StatusCode::CONFLICT, Some("RECHARGE_RULE_REQUIRED"), none),
            InvalidAlert(_) => (StatusCode::BAD_REQUEST, Some("INVALID_PARTNER_ALERT"), none),
            InvalidWebhook(_) => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_WEBHOOK"),
                none,
            ),
            WebhookNotFound => (
                StatusCode::NOT_FOUND,
                Some("PARTNER_WEBHOOK_NOT_FOUND"),
                none,
            ),
            WebhookDeliveryNotFound => (
                StatusCode::NOT_FOUND,
                Some("PARTNER_WEBHOOK_DELIVERY_NOT_FOUND"),
                none,
            ),
            WebhookLimit { max } => (
                StatusCode::CONFLICT,
                Some("PARTNER_WEBHOOK_LIMIT_REACHED"),
                json!({"max_endpoints": max}),
            ),
            InvalidAutoAllocation(_) => (
                StatusCode::BAD_REQUEST,
                Some("INVALID_PARTNER_AUTOMATIC_ALLOCATION"),
                none,
            ),
            Internal => (
                StatusCode::INTERNAL_SERVER_ERROR,
                Some("INTERNAL_ERROR"),
                none,
            ),
            Unavailable => (
                StatusCode::SERVICE_UNAVAILABLE,
                Some("SERVICE_UNAVAILABLE"),
                none,
            ),
            PaymentProvider(_) => (
                StatusCode::BAD_GATEWAY,
                Some("PAYMENT_PROVIDER_UNAVAILABLE"),
                none,
            ),
        }
    }

    /// Whether this error is a business outcome of an executed write (stored and replayed under
    /// its idempotency key) rather than a refusal before execution or a server failure.
    pub fn is_business_outcome(&self) -> bool {
        let (status, _, _) = self.parts();
        status.is_client_error()
            && !matches!(
                self,
                ApiError::AuthenticationRequired
                    | ApiError::TokenInvalid
                    | ApiError::ScopeRequired { .. }
                    | ApiError::AccessRequired
                    | ApiError::RateLimited { .. }
                    | ApiError::IdempotencyKeyRequired
                    | ApiError::IdempotencyKeyConflict
                    | ApiError::IdempotencyInProgress
            )
    }

    /// The envelope body: `{code, reason, message, metadata}`.
    pub fn body(&self) -> ErrorEnvelope {
        let (status, reason, metadata) = self.parts();
        ErrorEnvelope {
            code: status.as_u16(),
            reason,
            message: self.to_string(),
            metadata,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (status, _, _) = self.parts();
        let mut response = (status, axum::Json(self.body())).into_response();
        if let ApiError::RateLimited { retry_after_secs } = self
            && let Ok(v) = HeaderValue::from_str(&retry_after_secs.to_string())
        {
            response.headers_mut().insert(header::RETRY_AFTER, v);
        }
        response
    }
}
