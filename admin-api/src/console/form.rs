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
        | ApiError::PaymentProvider(_) => e.to_string(),
    }
}

/// An amount as the pages write it: decimal USD, no trailing zeros.
pub(crate) fn usd(n: money::NanoUsd) -> String {
    n.to_decimal_usd().to_string()
}
