//! The partner and billing envelope's one answer to each service error: every service enum maps
//! here into an [`ApiError`] (whose `parts` give status, reason and metadata), each by one `match`
//! with no wildcard arm, so a new refusal cannot reach the wire without a decided answer. The
//! console words refusals from the same `ApiError` (`console::form::explain`); the CLI prints the
//! service error's own message. Faults are logged here, once, where they become an answer.

use crate::error::ApiError;
use crate::services::alerts::AlertError;
use crate::services::allocations::AutoAllocationError;
use crate::services::billing::BillingError;
use crate::services::customers::CustomerError;
use crate::services::fault::{Fault, Shortfall};
use crate::services::funding::FundingError;
use crate::services::keys::KeyError;
use crate::services::partner_webhooks::WebhookError;
use crate::services::recharge::RechargeError;
use crate::services::statements::StatementError;
use crate::services::usage::UsageError;

impl From<Fault> for ApiError {
    fn from(f: Fault) -> Self {
        match f {
            Fault::Store(e) => {
                tracing::error!(error = %e, "database error");
                ApiError::Unavailable
            }
            Fault::OpState(e) => {
                tracing::error!(error = %e, "operational store error");
                ApiError::Unavailable
            }
            Fault::Ledger(e) => {
                tracing::error!(error = %e, "ledger posting failed");
                ApiError::Internal
            }
            Fault::Broken(what) => {
                tracing::error!(what, "an invariant does not hold");
                ApiError::Internal
            }
        }
    }
}

impl From<sea_orm::DbErr> for ApiError {
    fn from(e: sea_orm::DbErr) -> Self {
        Fault::from(e).into()
    }
}

impl From<crate::ledger::LedgerError> for ApiError {
    fn from(e: crate::ledger::LedgerError) -> Self {
        Fault::from(e).into()
    }
}

impl From<opstate::StoreError> for ApiError {
    fn from(e: opstate::StoreError) -> Self {
        Fault::from(e).into()
    }
}

fn short(s: Shortfall) -> ApiError {
    ApiError::FundingInsufficient {
        available: s.available,
        required: s.required,
    }
}

impl From<CustomerError> for ApiError {
    fn from(e: CustomerError) -> Self {
        match e {
            CustomerError::InvalidExternalId => ApiError::InvalidExternalCustomerId,
            CustomerError::Invalid(m) => ApiError::InvalidCustomer(m),
            CustomerError::InvalidContact => ApiError::InvalidCustomerContact,
            CustomerError::InvalidInitialAllocation => ApiError::InvalidInitialAllocation,
            CustomerError::InvalidRetailRate => ApiError::InvalidRetailRate,
            CustomerError::RateBelowFloor { floor } => ApiError::RetailRateBelowFloor { floor },
            CustomerError::Short(s) => short(s),
            CustomerError::ExternalIdConflict => ApiError::ExternalCustomerConflict,
            CustomerError::SlugTaken => ApiError::CustomerSlugExists,
            CustomerError::NotFound => ApiError::CustomerNotFound,
            CustomerError::PendingActivation {
                invited_email,
                invitation_status,
                invitation_expires_at,
            } => ApiError::PendingActivation {
                invited_email,
                invitation_status,
                invitation_expires_at,
            },
            CustomerError::Fault(f) => f.into(),
        }
    }
}

impl From<FundingError> for ApiError {
    fn from(e: FundingError) -> Self {
        match e {
            FundingError::InvalidTopUpAmount => ApiError::InvalidTopUpAmount,
            FundingError::Provider(m) => ApiError::PaymentProvider(m),
            FundingError::InvalidAllocationAction => ApiError::InvalidAllocationAction,
            FundingError::InvalidAllocationAmount => ApiError::InvalidAllocationAmount,
            FundingError::InvalidAllocationLimit => ApiError::InvalidAllocationLimit,
            FundingError::LimitBelowUsed { used } => ApiError::AllocationLimitBelowUsed { used },
            FundingError::BalanceReserved { available } => ApiError::BalanceReserved { available },
            FundingError::MirrorMissing => ApiError::Unavailable,
            FundingError::GroupNotFound => ApiError::GroupNotFound,
            FundingError::InvalidGroupRate => ApiError::InvalidGroupRate,
            FundingError::RateBelowFloor { floor } => ApiError::RetailRateBelowFloor { floor },
            FundingError::Short(s) => short(s),
            FundingError::Customer(e) => e.into(),
            FundingError::Fault(f) => f.into(),
        }
    }
}

impl From<KeyError> for ApiError {
    fn from(e: KeyError) -> Self {
        match e {
            KeyError::Invalid(m) => ApiError::InvalidApiKey(m),
            KeyError::NotFound => ApiError::ApiKeyNotFound,
            KeyError::Customer(e) => e.into(),
            KeyError::Fault(f) => f.into(),
        }
    }
}

impl From<AlertError> for ApiError {
    fn from(e: AlertError) -> Self {
        match e {
            AlertError::Invalid(m) => ApiError::InvalidAlert(m),
            AlertError::Customer(e) => e.into(),
            AlertError::Fault(f) => f.into(),
        }
    }
}

impl From<WebhookError> for ApiError {
    fn from(e: WebhookError) -> Self {
        match e {
            WebhookError::Invalid(m) => ApiError::InvalidWebhook(m),
            WebhookError::NotFound => ApiError::WebhookNotFound,
            WebhookError::DeliveryNotFound => ApiError::WebhookDeliveryNotFound,
            WebhookError::Limit { max } => ApiError::WebhookLimit { max },
            WebhookError::Fault(f) => f.into(),
        }
    }
}

impl From<AutoAllocationError> for ApiError {
    fn from(e: AutoAllocationError) -> Self {
        match e {
            AutoAllocationError::Invalid(m) => ApiError::InvalidAutoAllocation(m),
            AutoAllocationError::Customer(e) => e.into(),
            AutoAllocationError::Funding(e) => e.into(),
            AutoAllocationError::Fault(f) => f.into(),
        }
    }
}

impl From<RechargeError> for ApiError {
    fn from(e: RechargeError) -> Self {
        match e {
            RechargeError::Invalid(m) => ApiError::InvalidRecharge(m),
            RechargeError::NoProvider => ApiError::RechargeUnavailable,
            RechargeError::RuleRequired => ApiError::RechargeRuleRequired,
            RechargeError::Provider(m) => ApiError::PaymentProvider(m),
            RechargeError::Fault(f) => f.into(),
        }
    }
}

impl From<BillingError> for ApiError {
    fn from(e: BillingError) -> Self {
        match e {
            BillingError::TokenInvalid => ApiError::BillingTokenInvalid,
            BillingError::ReconciliationRequired => ApiError::ReconciliationRequired,
            BillingError::InvalidDate => ApiError::InvalidDate,
            BillingError::Usage(e) => e.into(),
            BillingError::Fault(f) => f.into(),
        }
    }
}

impl From<UsageError> for ApiError {
    fn from(e: UsageError) -> Self {
        match e {
            UsageError::Granularity => ApiError::InvalidUsageGranularity,
            UsageError::Window(m) => ApiError::InvalidUsageWindow(m),
            UsageError::Fault(f) => f.into(),
        }
    }
}

impl From<StatementError> for ApiError {
    fn from(e: StatementError) -> Self {
        match e {
            StatementError::Month => ApiError::InvalidStatementMonth,
            StatementError::Render(what) => {
                tracing::error!(what, "a statement PDF could not be made");
                ApiError::Internal
            }
            StatementError::Fault(f) => f.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use money::NanoUsd;
    use serde_json::json;

    fn reason(e: impl Into<ApiError>) -> (u16, Option<&'static str>, serde_json::Value) {
        let (status, reason, metadata) = e.into().parts();
        (status.as_u16(), reason, metadata)
    }

    #[test]
    fn faults_answer_unavailable_or_internal_never_a_refusal() {
        let store = Fault::Store(sea_orm::DbErr::Custom("down".into()));
        assert_eq!(reason(store), (503, Some("SERVICE_UNAVAILABLE"), json!({})));
        let broken = Fault::Broken("a row is missing");
        assert_eq!(reason(broken).0, 500);
        assert_eq!(
            reason(FundingError::MirrorMissing).1,
            Some("SERVICE_UNAVAILABLE")
        );
        assert_eq!(reason(StatementError::Render("no font")).0, 500);
    }

    #[test]
    fn a_refusal_crossing_services_keeps_its_reason_and_metadata() {
        let short = Shortfall {
            available: NanoUsd::from_nanos(1_000_000_000),
            required: NanoUsd::from_nanos(3_000_000_000),
        };
        let direct = reason(CustomerError::Short(short));
        assert_eq!(direct.0, 403);
        assert_eq!(direct.1, Some("PARTNER_FUNDING_INSUFFICIENT"));
        assert_eq!(direct.2["shortfall_usd"], json!(2));
        assert_eq!(reason(FundingError::Short(short)), direct);
        let wrapped = AutoAllocationError::Funding(FundingError::Customer(CustomerError::NotFound));
        assert_eq!(
            reason(wrapped),
            (404, Some("PARTNER_CUSTOMER_NOT_FOUND"), json!({}))
        );
        let billing = BillingError::Usage(UsageError::Granularity);
        assert_eq!(reason(billing).1, Some("INVALID_PARTNER_USAGE_GRANULARITY"));
    }

    /// A refusal's words are the service's: the envelope's message (the `ApiError`'s) says what
    /// the service error says (the CLI prints), for every refusal mapped one to one. The two
    /// enums keep the sentence each (one is the wire's contract, beside its status and reason;
    /// the other the service's), and this keeps them one wording.
    #[test]
    fn every_refusal_says_the_service_words() {
        fn same(e: impl Into<ApiError> + std::fmt::Display) {
            let said = e.to_string();
            assert_eq!(e.into().to_string(), said);
        }
        let short = Shortfall {
            available: NanoUsd::ZERO,
            required: NanoUsd::from_nanos(1),
        };
        let floor = money::RateMultiplier::ONE;
        let (used, available) = (NanoUsd::from_nanos(5), NanoUsd::from_nanos(7));
        same(CustomerError::InvalidExternalId);
        same(CustomerError::Invalid("name".into()));
        same(CustomerError::InvalidContact);
        same(CustomerError::InvalidInitialAllocation);
        same(CustomerError::InvalidRetailRate);
        same(CustomerError::RateBelowFloor { floor });
        same(CustomerError::Short(short));
        same(CustomerError::ExternalIdConflict);
        same(CustomerError::SlugTaken);
        same(CustomerError::NotFound);
        same(CustomerError::PendingActivation {
            invited_email: "a@example.com".into(),
            invitation_status: "pending".into(),
            invitation_expires_at: "2026-12-01T00:00:00Z".into(),
        });
        same(FundingError::InvalidTopUpAmount);
        same(FundingError::Provider("timeout".into()));
        same(FundingError::InvalidAllocationAction);
        same(FundingError::InvalidAllocationAmount);
        same(FundingError::InvalidAllocationLimit);
        same(FundingError::LimitBelowUsed { used });
        same(FundingError::BalanceReserved { available });
        same(FundingError::GroupNotFound);
        same(FundingError::InvalidGroupRate);
        same(FundingError::RateBelowFloor { floor });
        same(FundingError::Short(short));
        same(KeyError::Invalid("name".into()));
        same(KeyError::NotFound);
        same(AlertError::Invalid("threshold".into()));
        same(AutoAllocationError::Invalid("amount".into()));
        same(RechargeError::Invalid("amount".into()));
        same(RechargeError::NoProvider);
        same(RechargeError::RuleRequired);
        same(RechargeError::Provider("timeout".into()));
        same(BillingError::TokenInvalid);
        same(BillingError::ReconciliationRequired);
        same(BillingError::InvalidDate);
        same(UsageError::Granularity);
        same(UsageError::Window("from".into()));
        same(StatementError::Month);
        same(WebhookError::Invalid("url".into()));
        same(WebhookError::NotFound);
        same(WebhookError::DeliveryNotFound);
        same(WebhookError::Limit { max: 16 });
    }
}
