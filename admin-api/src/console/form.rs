//! The console's forms, read once into the request types the partner and billing APIs take (the
//! same parsing, rules and reasons behind every surface), and the words a refusal is explained in.

use crate::error::ApiError;
use serde_json::Value;

/// A form value as the API's JSON: a number when it reads as one, else the text (which the
/// API's parsing then refuses with its reason).
pub(crate) fn number(s: &str) -> Option<Value> {
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    Some(match serde_json::from_str::<Value>(s) {
        Ok(v @ Value::Number(_)) => v,
        _ => Value::String(s.to_string()),
    })
}

/// What to tell the person about a refusal of the partner API's rules (the dashboard's forms
/// show it beside the reason code): the console's one mapping of a refusal, reached from any
/// service error through `crate::refusal` (so a page and the API give the same reason), with no
/// wildcard arm.
pub(crate) fn explain(e: &ApiError) -> String {
    match e {
        ApiError::InvalidExternalCustomerId => {
            "Use 1 to 128 letters, digits, dots, underscores, colons or dashes.".into()
        }
        ApiError::ExternalCustomerConflict => {
            "A customer with this external id exists with another contact email.".into()
        }
        ApiError::InvalidCustomer(m)
        | ApiError::InvalidApiKey(m)
        | ApiError::InvalidAlert(m)
        | ApiError::InvalidWebhook(m)
        | ApiError::InvalidRecharge(m)
        | ApiError::InvalidAutoAllocation(m) => format!("{m}."),
        ApiError::CustomerSlugExists => {
            "An organization with this name already exists; choose another name.".into()
        }
        ApiError::InvalidCustomerContact => "Enter a valid email address.".into(),
        ApiError::InvalidInitialAllocation => {
            "Enter an amount of USD of at least 0 with at most 9 decimals.".into()
        }
        ApiError::InvalidAllocationAmount => {
            "Enter a positive amount of USD with at most 9 decimals.".into()
        }
        ApiError::AllocationLimitBelowUsed { used } => format!(
            "The allocation cannot go below zero or below what the customer has used ({} USD).",
            usd(*used)
        ),
        ApiError::BalanceReserved { available } => format!(
            "Only {} USD is free right now; the rest is held by calls in flight.",
            usd(*available)
        ),
        ApiError::FundingInsufficient {
            available,
            required,
        } => format!(
            "This needs {} USD of funding; {} USD is available. Top up or allocate less.",
            usd(*required),
            usd(*available)
        ),
        ApiError::InvalidRetailRate => {
            "Enter a positive multiplier with at most 6 decimals, such as 1.25.".into()
        }
        ApiError::RetailRateBelowFloor { floor } => format!(
            "The rate must be at least the floor, {}.",
            floor.to_decimal()
        ),
        ApiError::PendingActivation { .. } => {
            "The customer has not activated yet: allocations and keys wait for activation.".into()
        }
        // The envelope's own message says it as a person needs it.
        ApiError::AuthenticationRequired
        | ApiError::TokenInvalid
        | ApiError::ScopeRequired { .. }
        | ApiError::AccessRequired
        | ApiError::RateLimited { .. }
        | ApiError::IdempotencyKeyRequired
        | ApiError::IdempotencyKeyConflict
        | ApiError::IdempotencyInProgress
        | ApiError::InvalidTopUpAmount
        | ApiError::CustomerNotFound
        | ApiError::InvalidAllocationAction
        | ApiError::InvalidAllocationLimit
        | ApiError::InvalidGroupRate
        | ApiError::GroupNotFound
        | ApiError::ApiKeyNotFound
        | ApiError::InvalidUsageGranularity
        | ApiError::InvalidUsageWindow(_)
        | ApiError::BillingTokenInvalid
        | ApiError::ReconciliationRequired
        | ApiError::InvalidDate
        | ApiError::Internal
        | ApiError::Unavailable
        | ApiError::InvalidStatementMonth
        | ApiError::StatementNotAcceptable
        | ApiError::RechargeUnavailable
        | ApiError::RechargeRuleRequired
        | ApiError::WebhookNotFound
        | ApiError::WebhookDeliveryNotFound
        | ApiError::WebhookLimit { .. }
        | ApiError::PaymentProvider(_) => e.to_string(),
    }
}

/// An amount as the pages write it: decimal USD, no trailing zeros.
pub(crate) fn usd(n: money::NanoUsd) -> String {
    n.to_decimal_usd().to_string()
}

/// A posted form, decoded once (`http::form`'s strict decoding): the first value of each name.
pub(crate) struct Posted(Vec<(String, String)>);

impl Posted {
    /// Decodes a posted `application/x-www-form-urlencoded` body.
    pub(crate) fn read(body: &[u8]) -> Posted {
        Posted(crate::http::form::pairs(body))
    }

    /// The first value of `name`, if it was sent.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The value of `name`, or empty when it was not sent.
    pub(crate) fn text(&self, name: &str) -> String {
        self.get(name).unwrap_or_default().to_string()
    }

    /// An amount or count as the API's JSON (see [`number`]); absent or blank: `None`.
    fn number(&self, name: &str) -> Option<Value> {
        number(self.get(name)?)
    }
}

/// The low-balance alert form of every console page that has one (an organization's overview,
/// a partner's funding, a partner's customer): `threshold_usd`, empty to remove the alert.
pub(crate) struct AlertForm {
    pub threshold_usd: String,
}

impl AlertForm {
    pub(crate) fn read(body: &[u8]) -> AlertForm {
        AlertForm {
            threshold_usd: Posted::read(body).text("threshold_usd"),
        }
    }

    /// The API's request (a blank threshold is the API's `null`: remove).
    pub(crate) fn request(&self) -> crate::dto::AlertRequest {
        crate::dto::AlertRequest {
            threshold_usd: Some(number(&self.threshold_usd).unwrap_or(Value::Null)),
            unknown: Default::default(),
        }
    }
}

/// The create-key form of both consoles (an organization's keys page; a partner's customer page,
/// which has no expiry or limits fields): `name`, `group_id`, optional `expires_on`
/// (YYYY-MM-DD, the key stops at its start, UTC), `max_concurrency`, `requests_per_minute`,
/// `budget_usd` and `budget_period`.
pub(crate) struct KeyForm {
    pub posted: Posted,
}

impl KeyForm {
    pub(crate) fn read(body: &[u8]) -> KeyForm {
        KeyForm {
            posted: Posted::read(body),
        }
    }

    /// The partner API's create-key request the form stands for (its rules decide).
    pub(crate) fn request(&self) -> crate::dto::CreateKeyRequest {
        let f = &self.posted;
        let filled = |name: &str| f.get(name).filter(|v| !v.trim().is_empty());
        crate::dto::CreateKeyRequest {
            name: f.get("name").map(|n| Value::String(n.to_string())),
            group_id: f.number("group_id"),
            expires_at: filled("expires_on")
                .map(|d| Value::String(format!("{}T00:00:00Z", d.trim()))),
            max_concurrency: f.number("max_concurrency"),
            requests_per_minute: f.number("requests_per_minute"),
            budget_usd: f.number("budget_usd"),
            // The period's select always sends a value: it counts only with an amount.
            budget_period: filled("budget_period")
                .filter(|_| filled("budget_usd").is_some())
                .map(|p| Value::String(p.to_string())),
            unknown: Default::default(),
        }
    }
}

/// A partner's allocation form: `direction` (`increase` or `decrease`) and `amount_usd`.
pub(crate) struct AllocationForm {
    pub direction: String,
    pub amount_usd: Option<String>,
}

impl AllocationForm {
    pub(crate) fn read(body: &[u8]) -> AllocationForm {
        let f = Posted::read(body);
        AllocationForm {
            direction: f.text("direction"),
            amount_usd: f.get("amount_usd").map(str::to_string),
        }
    }

    pub(crate) fn request(&self) -> crate::dto::AllocationRequest {
        crate::dto::AllocationRequest {
            action: Some(Value::String(self.direction.clone())),
            amount_usd: number(self.amount_usd.as_deref().unwrap_or_default()),
            limit_usd: None,
        }
    }
}

/// A partner's automatic-allocation form: `action` = `remove`, or the rule's `below_usd`,
/// `amount_usd` and `monthly_cap_usd`.
pub(crate) struct AutoAllocationForm {
    pub posted: Posted,
}

impl AutoAllocationForm {
    pub(crate) fn read(body: &[u8]) -> AutoAllocationForm {
        AutoAllocationForm {
            posted: Posted::read(body),
        }
    }

    /// The API's rule request, or `None` when the form removes the rule.
    pub(crate) fn request(&self) -> Option<crate::dto::AutoAllocationRequest> {
        let f = &self.posted;
        (f.get("action") != Some("remove")).then(|| crate::dto::AutoAllocationRequest {
            below_usd: f.number("below_usd"),
            amount_usd: f.number("amount_usd"),
            monthly_cap_usd: f.number("monthly_cap_usd"),
            unknown: Default::default(),
        })
    }
}

/// A partner's automatic-recharge form: `action` (`set`, `remove` or `card`), and with `set`
/// the rule's `below_usd` and `amount_usd` (as typed, for the audit record too).
pub(crate) struct RechargeForm {
    pub action: String,
    pub below_usd: Option<String>,
    pub amount_usd: Option<String>,
}

impl RechargeForm {
    pub(crate) fn read(body: &[u8]) -> RechargeForm {
        let f = Posted::read(body);
        RechargeForm {
            action: f.text("action"),
            below_usd: f.get("below_usd").map(str::to_string),
            amount_usd: f.get("amount_usd").map(str::to_string),
        }
    }

    pub(crate) fn request(&self) -> crate::dto::RechargeRequest {
        crate::dto::RechargeRequest {
            below_usd: number(self.below_usd.as_deref().unwrap_or_default()),
            amount_usd: number(self.amount_usd.as_deref().unwrap_or_default()),
            unknown: Default::default(),
        }
    }
}

/// A partner's group-price form: `group_id` and `retail_rate_multiplier`.
pub(crate) struct RateForm {
    pub group_id: String,
    retail_rate_multiplier: Option<Value>,
}

impl RateForm {
    pub(crate) fn read(body: &[u8]) -> RateForm {
        let f = Posted::read(body);
        RateForm {
            group_id: f.text("group_id"),
            retail_rate_multiplier: f.number("retail_rate_multiplier"),
        }
    }

    pub(crate) fn request(&self) -> crate::dto::GroupRateRequest {
        crate::dto::GroupRateRequest {
            retail_rate_multiplier: self.retail_rate_multiplier.clone(),
            unknown: Default::default(),
        }
    }
}

/// A partner's top-up form: `amount_usd`.
pub(crate) struct TopUpForm {
    pub amount_usd: String,
}

impl TopUpForm {
    pub(crate) fn read(body: &[u8]) -> TopUpForm {
        TopUpForm {
            amount_usd: Posted::read(body).text("amount_usd"),
        }
    }

    pub(crate) fn request(&self) -> crate::dto::TopUpRequest {
        crate::dto::TopUpRequest {
            amount_usd: number(&self.amount_usd),
        }
    }
}
