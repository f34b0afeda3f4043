//! Usage records (one per metered request, drained from the usage stream) and hourly buckets
//! (what the partner usage routes and the organization daily usage read).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum UsageHourly {
    Table,
    Id,
    OrganizationId,
    ApiKeyId,
    Model,
    HourStart,
    Requests,
    InputTokens,
    OutputTokens,
    CachedTokens,
    EstimatedRequests,
    CostNanos,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(UsageHourly::Table)
                    .if_not_exists()
                    .col(big_pk_auto(UsageHourly::Id))
                    .col(big_integer(UsageHourly::OrganizationId))
                    .col(big_integer(UsageHourly::ApiKeyId))
                    .col(string(UsageHourly::Model))
                    .col(timestamp_with_time_zone(UsageHourly::HourStart))
                    .col(big_integer(UsageHourly::Requests))
                    .col(big_integer(UsageHourly::InputTokens))
                    .col(big_integer(UsageHourly::OutputTokens))
                    .col(big_integer(UsageHourly::CachedTokens))
                    .col(big_integer(UsageHourly::EstimatedRequests))
                    .col(big_integer(UsageHourly::CostNanos))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_usage_hourly_bucket")
                    .table(UsageHourly::Table)
                    .col(UsageHourly::OrganizationId)
                    .col(UsageHourly::HourStart)
                    .col(UsageHourly::ApiKeyId)
                    .col(UsageHourly::Model)
                    .unique()
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(UsageHourly::Table).to_owned())
            .await
    }
}
