//! What partner write bodies deserialize into. Fields keep their raw JSON (`Option<Value>`):
//! the service validates each into its own type in the order of the spec's error table, so a field
//! of the wrong type gets the route's reason. Routes that refuse unknown fields collect them in
//! `unknown` (never documented).

use serde::Deserialize;
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// `PUT /customers/by-external-id/{external_customer_id}`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CreateCustomerRequest {
    #[schema(value_type = String)]
    pub name: Option<Value>,
    /// Derived from `name` when omitted: lowercase letters, digits and single dashes.
    #[schema(value_type = Option<String>)]
    pub slug: Option<Value>,
    #[schema(value_type = String)]
    pub contact_email: Option<Value>,
    #[schema(value_type = Option<String>)]
    pub billing_email: Option<Value>,
    /// ≥ 0; 0 creates an unfunded customer.
    #[schema(value_type = f64)]
    pub initial_allocation_usd: Option<Value>,
    /// Positive; at or above the highest retail floor of the partner's groups.
    #[schema(value_type = f64)]
    pub retail_rate_multiplier: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub unknown: Map<String, Value>,
}

/// `POST /funding/top-up-sessions`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct TopUpRequest {
    #[schema(value_type = f64)]
    pub amount_usd: Option<Value>,
}

/// `POST /customers/{customer_id}/allocations`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AllocationRequest {
    /// `increase`, `decrease` or `set_limit`.
    #[schema(value_type = String)]
    pub action: Option<Value>,
    /// With `increase` and `decrease`.
    #[schema(value_type = Option<f64>)]
    pub amount_usd: Option<Value>,
    /// With `set_limit`.
    #[schema(value_type = Option<f64>)]
    pub limit_usd: Option<Value>,
}

/// `PUT /customers/{customer_id}/groups/{group_id}/rate`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct GroupRateRequest {
    #[schema(value_type = f64)]
    pub retail_rate_multiplier: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub unknown: Map<String, Value>,
}

/// `POST /customers/{customer_id}/api-keys`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct CreateKeyRequest {
    /// 1 to 100 characters.
    #[schema(value_type = String)]
    pub name: Option<Value>,
    /// A group of the customer.
    #[schema(value_type = i64)]
    pub group_id: Option<Value>,
    /// Optional: when the key stops authenticating, an ISO 8601 timestamp in the future such as
    /// `2027-01-31T00:00:00Z` (any offset is accepted and converted to UTC). Absent or null:
    /// the key never expires.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub expires_at: Option<Value>,
    /// Optional: calls of this key in flight at once, at most; 1 up to the group's
    /// `key_max_concurrency` when the operator set one. Absent: the group's default.
    #[schema(value_type = Option<i64>)]
    pub max_concurrency: Option<Value>,
    /// Optional: calls of this key per minute, at most; 1 up to the group's
    /// `key_requests_per_minute` when the operator set one. Absent: the group's default.
    #[schema(value_type = Option<i64>)]
    pub requests_per_minute: Option<Value>,
    /// Optional: at most this much (USD, up to 9 decimals) charged to the key per
    /// `budget_period`; a call whose worst case would pass it is refused with 429
    /// `budget_exceeded` before any supplier. Absent or null: no budget.
    #[schema(value_type = Option<f64>)]
    pub budget_usd: Option<Value>,
    /// With `budget_usd`: `day` or `month` (UTC calendar; default `month`).
    #[schema(value_type = Option<String>)]
    pub budget_period: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub unknown: Map<String, Value>,
}

/// `PUT /customers/{customer_id}/low-balance-alert` and `PUT /funding/low-balance-alert`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AlertRequest {
    /// One mail to the billing contact and owners (the partner's owners, for funding) each time
    /// the available balance falls below this many USD; `null` removes the alert.
    #[schema(value_type = Option<f64>)]
    #[serde(default, deserialize_with = "present")]
    pub threshold_usd: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub unknown: Map<String, Value>,
}

/// `PUT /customers/{customer_id}/automatic-allocation`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AutoAllocationRequest {
    /// When the customer's available balance falls below this (USD)…
    #[schema(value_type = f64)]
    pub below_usd: Option<Value>,
    /// …allocate this much from partner funding (USD)…
    #[schema(value_type = f64)]
    pub amount_usd: Option<Value>,
    /// …at most this much per UTC calendar month (USD).
    #[schema(value_type = f64)]
    pub monthly_cap_usd: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub unknown: Map<String, Value>,
}

/// A field that may be `null` on purpose: absent → `None`, `null` → `Some(Value::Null)`.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// `PUT /funding/recharge`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct RechargeRequest {
    /// When available funding falls below this (USD)…
    #[schema(value_type = f64)]
    pub below_usd: Option<Value>,
    /// …charge the saved card this much (USD, whole cents, at least 0.50).
    #[schema(value_type = f64)]
    pub amount_usd: Option<Value>,
    #[serde(flatten)]
    #[schema(ignore)]
    pub unknown: Map<String, Value>,
}
