//! The machine-readable description of the partner and billing APIs, generated from the handlers'
//! annotations and the [`crate::dto`] types the services return (utoipa), served at
//! `/partner/v1/openapi.json`.
//!
//! The schemas are the DTOs themselves, so they cannot drift from what is served; the API suite
//! still checks, for every documented response, that the documented properties and the served ones
//! are the same set, and that every route of the router is documented (and nothing else).

use crate::dto::*;
use crate::http::{
    batches, billing, customers, funding, keys, message_batches, partner_webhooks, rules, usage,
};
use utoipa::openapi::security::{ApiKey, ApiKeyValue, HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

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
        components.add_security_scheme(
            "customer_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The document.
#[derive(OpenApi)]
#[openapi(
    info(title = "Tollgate partner and organization billing APIs", description = "Success: {code: 0, message, data}. Error: {code, reason, message, metadata}. Writes need Idempotency-Key. Rate limits: 60 reads and 30 writes per token per fixed minute."),
    paths(
        funding::me, funding::view, funding::top_up,
        customers::create, customers::by_external_id, customers::by_id,
        customers::balance, customers::allocations, customers::groups, customers::group_rate,
        keys::list, keys::create, keys::disable,
        usage::customer, usage::key,
        billing::balance, billing::daily, billing::key_standing, billing::generation, billing::statement,
        batches::upload, batches::file, batches::content, batches::create, batches::list, batches::get, batches::cancel,
        message_batches::create, message_batches::list, message_batches::get, message_batches::results, message_batches::cancel,
        rules::customer_alert, rules::set_customer_alert, rules::funding_alert,
        rules::set_funding_alert, rules::customer_rule, rules::set_customer_rule,
        rules::delete_customer_rule, rules::recharge, rules::set_recharge, rules::delete_recharge,
        rules::card_session,
        partner_webhooks::create, partner_webhooks::list, partner_webhooks::get,
        partner_webhooks::update, partner_webhooks::delete, partner_webhooks::deliveries,
        partner_webhooks::redeliver
    ),
    components(schemas(
        ErrorEnvelope, CreateCustomerRequest, Customer, Activation, CustomerData, CustomerBalance, Funding,
        TopUpRequest, TopUpSession, TokenInfo, PartnerIdentity, AllocationRequest, Group, GroupRateRequest,
        CreateKeyRequest, KeyPreview, UsageBucket, UsageBuckets, OrganizationBalance, DailyUsage,
        DailyTotals, UsageTotals, KeyUsage, ModelUsage, ProjectUsage, WorkflowUsage, WalletSpend,
        UsageCoverage, KeyStanding, Generation, KeyLimitsView, KeySpendView, KeyBudgetView, AlertRequest,
        AlertView, AutoAllocationRequest, AutoAllocationView, AutoRuleView, AutoRunView,
        RechargeRequest, RechargeView, RechargeRuleView, RechargeAttemptView, CardSession,
        WebhookRequest, Webhook, WebhookAttempt, WebhookDelivery, WebhookDeliveries
    )),
    modifiers(&Security),
)]
pub struct ApiDoc;

/// The document as JSON.
pub fn document() -> utoipa::openapi::OpenApi {
    ApiDoc::openapi()
}
