//! Batches (issue 46): uploaded batch files (their JSONL content kept in the database), the
//! batches run from them (OpenAI's statuses, the counts, each status's time, the runner's lease
//! on the batch), every line of a batch with its state, its request id and its answer; and on
//! each usage record the batch line it ran (null for every other call).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::ConnectionTrait;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum BatchFiles {
    Table,
    Id,
    PublicId,
    OrganizationId,
    Purpose,
    Filename,
    Bytes,
    Lines,
    Content,
    BatchId,
    CreatedAt,
    ExpiresAt,
}

#[derive(DeriveIden)]
enum Batches {
    Table,
    Id,
    PublicId,
    OrganizationId,
    ApiKeyId,
    Endpoint,
    CompletionWindow,
    Metadata,
    InputFileId,
    OutputFileId,
    ErrorFileId,
    Status,
    Total,
    Completed,
    Failed,
    Errors,
    CreatedAt,
    InProgressAt,
    FinalizingAt,
    CompletedAt,
    FailedAt,
    ExpiredAt,
    CancellingAt,
    CancelledAt,
    ExpiresAt,
    ClaimedBy,
    ClaimedUntil,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum BatchLines {
    Table,
    BatchId,
    Line,
    CustomId,
    Body,
    Status,
    RequestId,
    AnswerStatus,
    Answer,
    ErrorCode,
    ErrorMessage,
    Attempts,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    BatchId,
    BatchLine,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(BatchFiles::Table)
                    .col(big_pk_auto(BatchFiles::Id))
                    .col(string_len_uniq(BatchFiles::PublicId, 64))
                    .col(big_integer(BatchFiles::OrganizationId))
                    .col(string_len(BatchFiles::Purpose, 16))
                    .col(string_len(BatchFiles::Filename, 255))
                    .col(big_integer(BatchFiles::Bytes))
                    .col(integer(BatchFiles::Lines))
                    .col(blob_null(BatchFiles::Content))
                    .col(big_integer_null(BatchFiles::BatchId))
                    .col(timestamp_with_time_zone(BatchFiles::CreatedAt))
                    .col(timestamp_with_time_zone(BatchFiles::ExpiresAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_batch_files_expires")
                    .table(BatchFiles::Table)
                    .col(BatchFiles::ExpiresAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Batches::Table)
                    .col(big_pk_auto(Batches::Id))
                    .col(string_len_uniq(Batches::PublicId, 64))
                    .col(big_integer(Batches::OrganizationId))
                    .col(big_integer(Batches::ApiKeyId))
                    .col(string_len(Batches::Endpoint, 64))
                    .col(string_len(Batches::CompletionWindow, 16))
                    .col(text_null(Batches::Metadata))
                    .col(big_integer(Batches::InputFileId))
                    .col(big_integer_null(Batches::OutputFileId))
                    .col(big_integer_null(Batches::ErrorFileId))
                    .col(string_len(Batches::Status, 16))
                    .col(integer(Batches::Total))
                    .col(integer(Batches::Completed).default(0))
                    .col(integer(Batches::Failed).default(0))
                    .col(text_null(Batches::Errors))
                    .col(timestamp_with_time_zone(Batches::CreatedAt))
                    .col(timestamp_with_time_zone_null(Batches::InProgressAt))
                    .col(timestamp_with_time_zone_null(Batches::FinalizingAt))
                    .col(timestamp_with_time_zone_null(Batches::CompletedAt))
                    .col(timestamp_with_time_zone_null(Batches::FailedAt))
                    .col(timestamp_with_time_zone_null(Batches::ExpiredAt))
                    .col(timestamp_with_time_zone_null(Batches::CancellingAt))
                    .col(timestamp_with_time_zone_null(Batches::CancelledAt))
                    .col(timestamp_with_time_zone(Batches::ExpiresAt))
                    .col(string_len_null(Batches::ClaimedBy, 64))
                    .col(timestamp_with_time_zone_null(Batches::ClaimedUntil))
                    .col(timestamp_with_time_zone(Batches::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_batches_status")
                    .table(Batches::Table)
                    .col(Batches::Status)
                    .col(Batches::CreatedAt)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(BatchLines::Table)
                    .col(big_integer(BatchLines::BatchId))
                    .col(integer(BatchLines::Line))
                    .col(string_len(BatchLines::CustomId, 512))
                    .col(text(BatchLines::Body))
                    .col(string_len(BatchLines::Status, 16))
                    .col(string_len_null(BatchLines::RequestId, 64))
                    .col(integer_null(BatchLines::AnswerStatus))
                    .col(text_null(BatchLines::Answer))
                    .col(string_len_null(BatchLines::ErrorCode, 64))
                    .col(text_null(BatchLines::ErrorMessage))
                    .col(integer(BatchLines::Attempts).default(0))
                    .col(timestamp_with_time_zone(BatchLines::UpdatedAt))
                    .primary_key(
                        Index::create()
                            .col(BatchLines::BatchId)
                            .col(BatchLines::Line),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_batch_lines_status")
                    .table(BatchLines::Table)
                    .col(BatchLines::BatchId)
                    .col(BatchLines::Status)
                    .to_owned(),
            )
            .await?;
        // One column at a time (SQLite adds one per statement); nullable, so instant on
        // PostgreSQL's partitioned table.
        for column in [UsageRecords::BatchId, UsageRecords::BatchLine] {
            let def = match column {
                UsageRecords::BatchId => string_len_null(column, 64),
                _ => integer_null(column),
            };
            manager
                .alter_table(
                    Table::alter()
                        .table(UsageRecords::Table)
                        .add_column(def)
                        .to_owned(),
                )
                .await?;
        }
        // A batch's spend is summed from its records: a partial index holds only batch lines.
        manager
            .get_connection()
            .execute_unprepared(
                "CREATE INDEX ix_usage_records_batch ON usage_records (batch_id) \
                 WHERE batch_id IS NOT NULL",
            )
            .await?;
        Ok(())
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("batches are not removed".into()))
    }
}
