//! Video tasks (a task outlives the request that created it: any proxy answers its polls and
//! downloads, after a restart too) and seconds of video on usage records and hourly buckets.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum VideoTasks {
    Table,
    Id,
    OrganizationId,
    ApiKeyId,
    GroupId,
    ModelRequested,
    ModelServed,
    Resolution,
    SecondsRequested,
    AccountId,
    SupplierTaskId,
    HoldId,
    HoldNanos,
    RetailRatePpm,
    WholesaleRatePpm,
    Status,
    Progress,
    FailureCode,
    FailureMessage,
    SecondsCharged,
    CostNanos,
    CreatedAt,
    UpdatedAt,
    CheckedAt,
    CompletedAt,
}

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    VideoSeconds,
}

#[derive(DeriveIden)]
enum UsageHourly {
    Table,
    VideoSeconds,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(VideoTasks::Table)
                    .col(string_len(VideoTasks::Id, 64).primary_key())
                    .col(big_integer(VideoTasks::OrganizationId))
                    .col(big_integer(VideoTasks::ApiKeyId))
                    .col(big_integer(VideoTasks::GroupId))
                    .col(string_len(VideoTasks::ModelRequested, 256))
                    .col(string_len(VideoTasks::ModelServed, 256))
                    .col(string_len(VideoTasks::Resolution, 16))
                    .col(big_integer_null(VideoTasks::SecondsRequested))
                    .col(string_len_null(VideoTasks::AccountId, 256))
                    .col(string_len_null(VideoTasks::SupplierTaskId, 512))
                    .col(string_len(VideoTasks::HoldId, 128))
                    .col(big_integer(VideoTasks::HoldNanos))
                    .col(big_integer(VideoTasks::RetailRatePpm))
                    .col(big_integer_null(VideoTasks::WholesaleRatePpm))
                    .col(string_len(VideoTasks::Status, 16))
                    .col(integer(VideoTasks::Progress).default(0))
                    .col(string_len_null(VideoTasks::FailureCode, 128))
                    .col(text_null(VideoTasks::FailureMessage))
                    .col(big_integer_null(VideoTasks::SecondsCharged))
                    .col(big_integer_null(VideoTasks::CostNanos))
                    .col(timestamp_with_time_zone(VideoTasks::CreatedAt))
                    .col(timestamp_with_time_zone(VideoTasks::UpdatedAt))
                    .col(timestamp_with_time_zone(VideoTasks::CheckedAt))
                    .col(timestamp_with_time_zone_null(VideoTasks::CompletedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_video_tasks_status_checked")
                    .table(VideoTasks::Table)
                    .col(VideoTasks::Status)
                    .col(VideoTasks::CheckedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(UsageRecords::Table)
                    .add_column(big_integer(UsageRecords::VideoSeconds).default(0))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(UsageHourly::Table)
                    .add_column(big_integer(UsageHourly::VideoSeconds).default(0))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("video tasks are not removed".into()))
    }
}
