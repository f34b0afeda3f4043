//! The machine-readable description of the partner and billing APIs, generated from the handlers'
//! annotations and the schema types below (utoipa) and served at `/partner/v1/openapi.json`.
//!
//! The schema types describe exactly the JSON the services build; the API suite checks, for every
//! documented response, that the documented properties and the served ones are the same set, and
//! that every route of the router is documented (and nothing else).

use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi, ToSchema};

/// Error envelope: clients branch on `reason`.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct ErrorEnvelope {
    /// The HTTP status.
    code: u16,
    /// Stable error code (absent only for a bad `date` on the billing usage route).
    reason: Option<String>,
    message: String,
    #[schema(value_type = Object)]
    metadata: serde_json::Value,
}

/// `PUT /customers/by-external-id/{external_customer_id}` body.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct CreateCustomerRequest {
    name: String,
    /// Derived from `name` when omitted: lowercase letters, digits and single dashes.
    slug: Option<String>,
    contact_email: String,
    billing_email: Option<String>,
    /// ≥ 0; 0 creates an unfunded customer.
    initial_allocation_usd: f64,
    /// Positive; at or above the highest retail floor of the partner's groups.
    retail_rate_multiplier: f64,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Customer {
    id: i64,
    organization_name: String,
    organization_slug: String,
    display_name: String,
    email: String,
    /// `prepaid`.
    billing_mode: String,
    /// `partner_funded`.
    billing_allocation_mode: String,
    partner_allocation_cap_usd: f64,
    partner_allocation_used_usd: f64,
    partner_allocation_remaining_usd: f64,
    organization_balance_usd: f64,
    organization_available_usd: f64,
    /// `pending_activation` or `active`.
    status: String,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Activation {
    /// `email_invitation`.
    method: String,
    invited_email: String,
    /// `pending`, `accepted`, `expired`, `revoked`.
    invitation_status: String,
    invitation_expires_at: String,
    /// Only on the response that created the customer.
    invite_url: Option<String>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct CustomerData {
    external_customer_id: String,
    /// Create route only.
    created: Option<bool>,
    status: String,
    customer: Customer,
    activation: Activation,
    activation_hint: String,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct CustomerBalance {
    customer_id: i64,
    organization_id: i64,
    organization_balance_usd: f64,
    organization_available_usd: f64,
    partner_allocation_cap_usd: f64,
    partner_allocation_used_usd: f64,
    partner_allocation_remaining_usd: f64,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Funding {
    reseller_id: i64,
    available_funding_usd: f64,
    reserved_allocations_usd: f64,
    outstanding_usage_usd: f64,
    top_up_url: String,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct TopUpRequest {
    amount_usd: f64,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct TopUpSession {
    id: i64,
    amount_usd: f64,
    status: String,
    /// The hosted link to pay the top-up.
    url: String,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct TokenInfo {
    id: i64,
    preview: String,
    scopes: Vec<String>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct PartnerIdentity {
    partner_id: i64,
    reseller_id: i64,
    name: String,
    role: String,
    token: TokenInfo,
    agreement_minimum_rate_multiplier: f64,
}

/// `POST /customers/{customer_id}/allocations` body.
#[derive(ToSchema)]
#[allow(dead_code)]
pub struct AllocationRequest {
    /// `increase`, `decrease` or `set_limit`.
    action: String,
    /// With `increase` and `decrease`.
    amount_usd: Option<f64>,
    /// With `set_limit`.
    limit_usd: Option<f64>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct Group {
    id: i64,
    name: String,
    description: String,
    product_code: String,
    rate_multiplier: f64,
    status: String,
    wholesale_rate_multiplier: f64,
    retail_floor_rate_multiplier: f64,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct GroupRateRequest {
    retail_rate_multiplier: f64,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct CreateKeyRequest {
    name: String,
    group_id: i64,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct KeyPreview {
    api_key_id: i64,
    name: String,
    group_id: i64,
    preview: String,
    /// `active` or `disabled`.
    status: String,
    created_at: String,
    disabled_at: Option<String>,
    /// The full secret: in the first successful create response only.
    key: Option<String>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct UsageBucket {
    start_time: String,
    end_time: String,
    burn_usd: f64,
    requests: i64,
    total_tokens: i64,
    active_api_keys: i64,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct UsageBuckets {
    /// `day` or `hour`.
    granularity: String,
    start_time: String,
    end_time: String,
    buckets: Vec<UsageBucket>,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct OrganizationBalance {
    organization_id: i64,
    balance_usd: f64,
    reserved_usd: f64,
    available_usd: f64,
    /// `reconciled`.
    status: String,
}

#[derive(ToSchema)]
#[allow(dead_code)]
pub struct DailyUsage {
    organization_id: i64,
    from: String,
    to: String,
    #[schema(value_type = Object)]
    totals: serde_json::Value,
    #[schema(value_type = Vec<Object>)]
    projects: Vec<serde_json::Value>,
    #[schema(value_type = Vec<Object>)]
    api_keys: Vec<serde_json::Value>,
    #[schema(value_type = Vec<Object>)]
    models: Vec<serde_json::Value>,
    #[schema(value_type = Vec<Object>)]
    workflows: Vec<serde_json::Value>,
    unavailable_dimensions: Vec<String>,
    #[schema(value_type = Object)]
    wallet_spend: serde_json::Value,
    #[schema(value_type = Object)]
    usage_coverage: serde_json::Value,
}

struct Security;

impl Modify for Security {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "partner_token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        components.add_security_scheme(
            "billing_token",
            SecurityScheme::ApiKey(ApiKey::Header(ApiKeyValue::new(
                "X-Organization-Billing-Token",
            ))),
        );
    }
}

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(title = "Tollgate partner and organization billing APIs", description = "Success: {code: 0, message, data}. Error: {code, reason, message, metadata}. Writes need Idempotency-Key. Rate limits: 60 reads and 30 writes per token per fixed minute."),
    paths(
        crate::http::me, crate::http::funding_view, crate::http::top_up,
        crate::http::create_customer, crate::http::customer_by_external, crate::http::customer_by_id,
        crate::http::customer_balance, crate::http::allocations, crate::http::groups, crate::http::group_rate,
        crate::http::list_keys, crate::http::create_key, crate::http::disable_key,
        crate::http::customer_usage, crate::http::key_usage,
        crate::http::billing_balance, crate::http::billing_daily
    ),
    components(schemas(
        ErrorEnvelope, CreateCustomerRequest, Customer, Activation, CustomerData, CustomerBalance, Funding,
        TopUpRequest, TopUpSession, TokenInfo, PartnerIdentity, AllocationRequest, Group, GroupRateRequest,
        CreateKeyRequest, KeyPreview, UsageBucket, UsageBuckets, OrganizationBalance, DailyUsage
    )),
    modifiers(&Security),
)]
pub struct ApiDoc;

/// The document as JSON.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
