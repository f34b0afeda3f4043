//! One row per metered gateway request, written by the settler exactly once (unique request id):
//! the facts the usage reports and the ledger's spend postings are derived from.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    Id,
    RequestId,
    OrganizationId,
    ApiKeyId,
    GroupId,
    Route,
    ModelRequested,
    ModelServed,
    AccountId,
    InputTokens,
    OutputTokens,
    CachedTokens,
    Measurement,
    Status,
    Stream,
    CostNanos,
    ChargedNanos,
    ExcessNanos,
    StartedAt,
    SettledAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(UsageRecords::Table)
                    .if_not_exists()
                    .col(big_pk_auto(UsageRecords::Id))
                    .col(string_uniq(UsageRecords::RequestId))
                    .col(big_integer(UsageRecords::OrganizationId))
                    .col(big_integer(UsageRecords::ApiKeyId))
                    .col(big_integer(UsageRecords::GroupId))
                    .col(string(UsageRecords::Route))
                    .col(string(UsageRecords::ModelRequested))
                    .col(string(UsageRecords::ModelServed))
                    .col(string(UsageRecords::AccountId))
                    .col(big_integer(UsageRecords::InputTokens))
                    .col(big_integer(UsageRecords::OutputTokens))
                    .col(big_integer(UsageRecords::CachedTokens))
                    .col(string(UsageRecords::Measurement))
                    .col(integer(UsageRecords::Status))
                    .col(boolean(UsageRecords::Stream))
                    .col(big_integer(UsageRecords::CostNanos))
                    .col(big_integer(UsageRecords::ChargedNanos))
                    .col(big_integer(UsageRecords::ExcessNanos))
                    .col(timestamp_with_time_zone(UsageRecords::StartedAt))
                    .col(timestamp_with_time_zone(UsageRecords::SettledAt))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(UsageRecords::Table).to_owned())
            .await
    }
}
