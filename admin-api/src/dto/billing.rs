//! What the organization billing API answers (`data` of the success envelope).

use super::Usd;
use serde::Serialize;
use utoipa::ToSchema;

/// `GET /api/v1/organization/billing/balance`: only ever a reconciled balance.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct OrganizationBalance {
    pub organization_id: i64,
    #[schema(value_type = f64)]
    pub balance_usd: Usd,
    #[schema(value_type = f64)]
    pub reserved_usd: Usd,
    #[schema(value_type = f64)]
    pub available_usd: Usd,
    /// `reconciled`.
    pub status: &'static str,
}

/// `GET /api/v1/organization/billing/usage/daily`: one UTC day.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DailyUsage {
    pub organization_id: i64,
    pub from: String,
    pub to: String,
    pub totals: DailyTotals,
    /// Empty when no request of the day carries a project (see `unavailable_dimensions`).
    pub projects: Vec<ProjectUsage>,
    pub api_keys: Vec<KeyUsage>,
    pub models: Vec<ModelUsage>,
    /// Empty when no request of the day carries a workflow (see `unavailable_dimensions`).
    pub workflows: Vec<WorkflowUsage>,
    /// Breakdowns that cannot be computed for the day (`projects`, `workflows`).
    pub unavailable_dimensions: Vec<&'static str>,
    pub wallet_spend: WalletSpend,
    pub usage_coverage: UsageCoverage,
}

/// Requests, tokens and their usage cost.
#[derive(Debug, Clone, Default, Serialize, ToSchema)]
pub struct UsageTotals {
    pub requests: i64,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Input tokens read from a supplier's prompt cache (part of `input_tokens`).
    pub cache_tokens: i64,
    /// Input tokens written to a supplier's prompt cache (part of `input_tokens`; Anthropic's
    /// cache creation, priced at the model's cache-write price).
    pub cache_write_tokens: i64,
    /// Images served (image generations and edits).
    pub images: i64,
    /// Seconds of video charged (video tasks).
    pub video_seconds: i64,
    #[schema(value_type = f64)]
    pub cost_usd: Usd,
}

/// The day's totals, with the money that actually left the wallet.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DailyTotals {
    #[serde(flatten)]
    pub usage: UsageTotals,
    /// Debited from the wallet (the ledger's spend postings of the day).
    #[schema(value_type = f64)]
    pub actual_cost_usd: Usd,
    /// Σ of the usage records' costs.
    #[schema(value_type = f64)]
    pub usage_cost_usd: Usd,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeyUsage {
    pub api_key_id: i64,
    #[serde(flatten)]
    pub usage: UsageTotals,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ModelUsage {
    pub model: String,
    #[serde(flatten)]
    pub usage: UsageTotals,
}

/// Usage of one project (`null`: requests without one).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ProjectUsage {
    pub project: Option<String>,
    #[serde(flatten)]
    pub usage: UsageTotals,
}

/// Usage of one workflow (`null`: requests without one).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WorkflowUsage {
    pub workflow: Option<String>,
    #[serde(flatten)]
    pub usage: UsageTotals,
}

#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct WalletSpend {
    #[schema(value_type = f64)]
    pub amount_usd: Usd,
    /// `USD`.
    pub currency: &'static str,
}

/// How much of the day's usage was measured exactly (the rest is a documented estimate).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct UsageCoverage {
    pub requests: i64,
    pub exact_requests: i64,
    pub estimated_requests: i64,
    /// `exact_requests / requests`; 1 for a day without requests.
    #[schema(value_type = f64)]
    pub exact_ratio: Ratio,
}

/// A ratio on the wire: the integer 1 for "no requests, nothing estimated", else a fraction.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Ratio {
    Whole(i64),
    Fraction(f64),
}

/// `GET {compat_base}/key` (DESIGN §6d): a customer key's own standing and its organization's
/// available balance, read with the key itself.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeyStanding {
    pub api_key_id: i64,
    pub name: String,
    pub preview: String,
    pub group_id: i64,
    /// The group's name in the operator's configuration.
    pub group_name: Option<String>,
    /// When the key stops authenticating (`null`: never).
    pub expires_at: Option<String>,
    /// The limits in force: the key's own, else its group's per-key default (`null`: none).
    pub limits: KeyLimitsView,
    /// The key's budget and where it stands (`null`: no budget).
    pub budget: Option<super::KeyBudgetView>,
    /// What the key was charged in the current UTC day and month, and what its calls in flight
    /// hold (`null` when the operational store cannot say right now).
    pub spend: Option<KeySpendView>,
    /// The organization's balance, reported only when reconciled (else the answer is 503).
    pub organization: OrganizationBalance,
}

/// `GET {compat_base}/generations/{request_id}` (DESIGN §6e): what one settled call cost, read
/// from its usage record with a key of the same organization (issue 45).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct Generation {
    /// The request id the gateway answered the call with (`x-request-id`).
    pub id: String,
    /// The model that served the call.
    pub model: String,
    /// The HTTP status the call was answered with.
    pub status: i32,
    /// `exact` (the supplier's reported usage) or `estimated` (bounded estimate).
    pub measurement: String,
    pub input_tokens: i64,
    pub output_tokens: i64,
    /// Input tokens read from the supplier's prompt cache (part of `input_tokens`).
    pub cache_read_tokens: i64,
    /// Input tokens written to the supplier's prompt cache (part of `input_tokens`).
    pub cache_write_tokens: i64,
    /// Images served (image calls only; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub images: Option<i64>,
    /// Seconds of video charged (video tasks only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub video_seconds: Option<i64>,
    /// Seconds of audio transcribed (transcriptions only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audio_seconds: Option<i64>,
    /// What the organization was charged for the call, USD.
    #[schema(value_type = f64)]
    pub cost_usd: super::Usd,
    /// When the call started (RFC 3339, UTC, milliseconds).
    pub created_at: String,
    /// When it was settled into the ledger.
    pub settled_at: String,
}

/// The limits a key's calls are admitted under.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeyLimitsView {
    pub max_concurrency: Option<i64>,
    pub requests_per_minute: Option<i64>,
}

/// A key's spend in the current windows.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct KeySpendView {
    #[schema(value_type = f64)]
    pub day_usd: Usd,
    #[schema(value_type = f64)]
    pub month_usd: Usd,
    #[schema(value_type = f64)]
    pub held_usd: Usd,
}
