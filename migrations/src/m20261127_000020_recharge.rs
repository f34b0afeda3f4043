//! Automatic recharge of partner funding from a saved card (issue 32): the partner's rule (with
//! the Stripe Customer and saved card, its state, and the crossing state and generation the
//! balance watcher claims by), the setup sessions that save a card, and each charge attempted.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum RechargeRules {
    Table,
    PartnerId,
    BelowNanos,
    AmountNanos,
    /// `needs_card`, `active` or `stopped` (a declined card stops the rule).
    Status,
    StopReason,
    StripeCustomer,
    PaymentMethod,
    CardSavedAt,
    Armed,
    Generation,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum RechargeSetups {
    Table,
    Id,
    PartnerId,
    ProviderSessionId,
    /// `open`, `saved`, `expired`.
    Status,
    CreatedAt,
}

#[derive(DeriveIden)]
enum RechargeAttempts {
    Table,
    Id,
    PartnerId,
    AmountNanos,
    IdempotencyKey,
    PaymentIntent,
    /// `pending`, `succeeded`, `declined`, `failed`.
    Status,
    Failure,
    /// A pass is asking Stripe for this charge since then (null: no one is; a charge left
    /// without an answer is asked again by the next pass).
    InFlightSince,
    CreatedAt,
    CreditedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(RechargeRules::Table)
                    .if_not_exists()
                    .col(big_integer(RechargeRules::PartnerId).primary_key())
                    .col(big_integer(RechargeRules::BelowNanos))
                    .col(big_integer(RechargeRules::AmountNanos))
                    .col(string_len(RechargeRules::Status, 16))
                    .col(string_null(RechargeRules::StopReason))
                    .col(string_null(RechargeRules::StripeCustomer))
                    .col(string_null(RechargeRules::PaymentMethod))
                    .col(timestamp_with_time_zone_null(RechargeRules::CardSavedAt))
                    .col(boolean(RechargeRules::Armed).default(true))
                    .col(big_integer(RechargeRules::Generation).default(0))
                    .col(timestamp_with_time_zone(RechargeRules::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(RechargeSetups::Table)
                    .if_not_exists()
                    .col(pk_auto(RechargeSetups::Id).big_integer())
                    .col(big_integer(RechargeSetups::PartnerId))
                    .col(string_null(RechargeSetups::ProviderSessionId).unique_key())
                    .col(string_len(RechargeSetups::Status, 16))
                    .col(timestamp_with_time_zone(RechargeSetups::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(RechargeAttempts::Table)
                    .if_not_exists()
                    .col(pk_auto(RechargeAttempts::Id).big_integer())
                    .col(big_integer(RechargeAttempts::PartnerId))
                    .col(big_integer(RechargeAttempts::AmountNanos))
                    .col(string(RechargeAttempts::IdempotencyKey).unique_key())
                    .col(string_null(RechargeAttempts::PaymentIntent).unique_key())
                    .col(string_len(RechargeAttempts::Status, 16))
                    .col(string_null(RechargeAttempts::Failure))
                    .col(timestamp_with_time_zone_null(
                        RechargeAttempts::InFlightSince,
                    ))
                    .col(timestamp_with_time_zone(RechargeAttempts::CreatedAt))
                    .col(timestamp_with_time_zone_null(RechargeAttempts::CreditedAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for t in [
            RechargeRules::Table.into_iden(),
            RechargeSetups::Table.into_iden(),
            RechargeAttempts::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(t).if_exists().to_owned())
                .await?;
        }
        Ok(())
    }
}
