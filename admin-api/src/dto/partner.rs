//! What the partner API answers (`data` of the success envelope).

use super::{Multiplier, Usd};
use serde::Serialize;
use utoipa::ToSchema;

/// `GET /me`: the calling partner and its token.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct PartnerIdentity {
    pub partner_id: i64,
    pub reseller_id: i64,
    pub name: String,
    pub role: String,
    pub token: TokenInfo,
    #[schema(value_type = f64)]
    pub agreement_minimum_rate_multiplier: Multiplier,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TokenInfo {
    pub id: i64,
    pub preview: String,
    pub scopes: Vec<String>,
}

/// `GET /funding`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Funding {
    pub reseller_id: i64,
    #[schema(value_type = f64)]
    pub available_funding_usd: Usd,
    #[schema(value_type = f64)]
    pub reserved_allocations_usd: Usd,
    #[schema(value_type = f64)]
    pub outstanding_usage_usd: Usd,
    pub top_up_url: String,
}

/// `POST /funding/top-up-sessions`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct TopUpSession {
    pub id: i64,
    #[schema(value_type = f64)]
    pub amount_usd: Usd,
    pub status: String,
    /// The hosted link to pay the top-up.
    pub url: String,
}

/// A customer as the create and read routes answer it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CustomerData {
    pub external_customer_id: String,
    /// Create route only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    /// `pending_activation` or `active`.
    pub status: String,
    pub customer: Customer,
    pub activation: Activation,
    pub activation_hint: String,
}

impl CustomerData {
    /// The same data without the invitation link (what an idempotency record stores).
    pub fn without_secrets(&self) -> CustomerData {
        let mut stored = self.clone();
        stored.activation.invite_url = None;
        stored
    }
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Customer {
    pub id: i64,
    pub organization_name: String,
    pub organization_slug: String,
    pub display_name: String,
    pub email: String,
    /// The billing contact stored on the organization (`billing_email` on create; `null` when
    /// none was given).
    pub billing_email: Option<String>,
    /// `prepaid`.
    pub billing_mode: String,
    /// `partner_funded`.
    pub billing_allocation_mode: String,
    #[schema(value_type = f64)]
    pub partner_allocation_cap_usd: Usd,
    #[schema(value_type = f64)]
    pub partner_allocation_used_usd: Usd,
    #[schema(value_type = f64)]
    pub partner_allocation_remaining_usd: Usd,
    #[schema(value_type = f64)]
    pub organization_balance_usd: Usd,
    #[schema(value_type = f64)]
    pub organization_available_usd: Usd,
    /// `pending_activation` or `active`.
    pub status: String,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Activation {
    /// `email_invitation`.
    pub method: &'static str,
    pub invited_email: String,
    /// `pending`, `accepted`, `expired`, `revoked` (absent when the customer has no invitation).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invitation_status: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invitation_expires_at: Option<String>,
    /// Only on the response that created the customer.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub invite_url: Option<String>,
}

/// `GET /customers/{id}/balance`.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CustomerBalance {
    pub customer_id: i64,
    pub organization_id: i64,
    #[schema(value_type = f64)]
    pub organization_balance_usd: Usd,
    #[schema(value_type = f64)]
    pub organization_available_usd: Usd,
    #[schema(value_type = f64)]
    pub partner_allocation_cap_usd: Usd,
    #[schema(value_type = f64)]
    pub partner_allocation_used_usd: Usd,
    #[schema(value_type = f64)]
    pub partner_allocation_remaining_usd: Usd,
}

/// A model group of a customer with its prices.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Group {
    pub id: i64,
    pub name: String,
    pub description: String,
    pub product_code: String,
    #[schema(value_type = f64)]
    pub rate_multiplier: Multiplier,
    pub status: String,
    #[schema(value_type = f64)]
    pub wholesale_rate_multiplier: Multiplier,
    #[schema(value_type = f64)]
    pub retail_floor_rate_multiplier: Multiplier,
}

/// A customer API key: its preview, never its secret (except `key`, once).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeyPreview {
    pub api_key_id: i64,
    pub name: String,
    pub group_id: i64,
    pub preview: String,
    /// `active` or `disabled`.
    pub status: String,
    pub created_at: String,
    pub disabled_at: Option<String>,
    /// When the key stops authenticating (`null`: never).
    pub expires_at: Option<String>,
    /// Whether the key has expired: an expired key is refused like an unknown one.
    pub expired: bool,
    /// The key's own in-flight limit (`null`: its group's default).
    pub max_concurrency: Option<i64>,
    /// The key's own per-minute limit (`null`: its group's default).
    pub requests_per_minute: Option<i64>,
    /// The key's spend budget and its standing (only on a key with a budget).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub budget: Option<KeyBudgetView>,
    /// The full secret: in the first successful create response only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// A key's budget and where it stands in the current period. The standing is read from the
/// operational store; when it cannot be read right now, its fields are `null` (never zero).
#[derive(Debug, Clone, Serialize, ToSchema, PartialEq, Eq)]
pub struct KeyBudgetView {
    #[schema(value_type = f64)]
    pub budget_usd: Usd,
    /// `day` or `month` (UTC).
    pub budget_period: &'static str,
    /// Charged to the key in the current period.
    #[schema(value_type = Option<f64>)]
    pub spent_usd: Option<Usd>,
    /// Reserved by the key's calls in flight.
    #[schema(value_type = Option<f64>)]
    pub held_usd: Option<Usd>,
    /// What the budget has left: budget − spent − held, at least zero.
    #[schema(value_type = Option<f64>)]
    pub remaining_usd: Option<Usd>,
    /// When the period ends (RFC 3339, UTC).
    pub resets_at: Option<String>,
}

impl KeyPreview {
    /// The same preview without the secret (what an idempotency record stores).
    pub fn without_secrets(&self) -> KeyPreview {
        KeyPreview {
            key: None,
            ..self.clone()
        }
    }
}

/// `POST /invitations/{token}/accept` answered in JSON.
#[derive(Debug, Clone, Serialize)]
pub struct InvitationAccepted {
    pub organization_id: i64,
    /// `active`.
    pub status: &'static str,
}

/// Usage of a customer (or one key) over a window, every period listed.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UsageBuckets {
    /// `day` or `hour`.
    pub granularity: &'static str,
    pub start_time: String,
    pub end_time: String,
    pub buckets: Vec<UsageBucket>,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UsageBucket {
    pub start_time: String,
    pub end_time: String,
    #[schema(value_type = f64)]
    pub burn_usd: Usd,
    pub requests: i64,
    pub total_tokens: i64,
    /// Images served (image generations and edits).
    pub images: i64,
    /// Seconds of video charged (video tasks).
    pub video_seconds: i64,
    pub active_api_keys: usize,
}

/// A low-balance alert.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AlertView {
    /// `null`: no alert.
    #[schema(value_type = Option<f64>)]
    pub threshold_usd: Option<Usd>,
    /// The balance was last seen below the threshold (this crossing's mail was sent).
    pub below: bool,
    /// When the last alert was sent (RFC 3339).
    pub alerted_at: Option<String>,
}

/// A customer's automatic allocation rule and its recent runs.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AutoAllocationView {
    /// `null`: no rule.
    pub rule: Option<AutoRuleView>,
    /// The last 20 runs, newest first.
    pub runs: Vec<AutoRunView>,
}

/// An automatic allocation rule.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AutoRuleView {
    #[schema(value_type = f64)]
    pub below_usd: Usd,
    #[schema(value_type = f64)]
    pub amount_usd: Usd,
    #[schema(value_type = f64)]
    pub monthly_cap_usd: Usd,
    /// Ready for the next crossing (false between a run and the balance's return above).
    pub armed: bool,
    /// Allocated by the rule in the current UTC month.
    #[schema(value_type = f64)]
    pub allocated_this_month_usd: Usd,
}

/// One run of an automatic allocation rule.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct AutoRunView {
    #[schema(value_type = f64)]
    pub amount_usd: Usd,
    /// `allocated`, `refused_funding` or `refused_cap`.
    pub outcome: String,
    pub created_at: String,
}

/// A partner's automatic recharge and its last attempts.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RechargeView {
    /// `null`: no rule.
    pub rule: Option<RechargeRuleView>,
    /// The last 20 charges, newest first.
    pub attempts: Vec<RechargeAttemptView>,
}

/// An automatic recharge rule.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RechargeRuleView {
    #[schema(value_type = f64)]
    pub below_usd: Usd,
    #[schema(value_type = f64)]
    pub amount_usd: Usd,
    /// `needs_card`, `active` or `stopped` (a declined card).
    pub status: String,
    pub stop_reason: Option<String>,
    /// A card is saved.
    pub card_saved: bool,
    /// Ready for the next crossing.
    pub armed: bool,
}

/// One charge of the saved card.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct RechargeAttemptView {
    #[schema(value_type = f64)]
    pub amount_usd: Usd,
    /// `pending` (funding follows the payment's webhook), `succeeded` (credited), `declined`.
    pub status: String,
    pub failure: Option<String>,
    pub created_at: String,
}

/// `POST /funding/recharge/card-sessions`: the hosted page that saves a card.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CardSession {
    pub url: String,
}
