//! Batch lines run in a supplier's own batch API (issue 46): the chunks of a batch sent to a
//! supplier (`supplier_batches`: the account, the supplier's file and batch ids, the chunk's
//! state), and on each line the chunk it is in, the account that holds it and the body to send
//! it (the gateway's, as made for that account).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum SupplierBatches {
    Table,
    Id,
    BatchId,
    AccountId,
    SupplierFileId,
    SupplierBatchId,
    Status,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum BatchLines {
    Table,
    SupplierBatch,
    SupplierAccount,
    SupplierBody,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(SupplierBatches::Table)
                    .col(big_pk_auto(SupplierBatches::Id))
                    .col(big_integer(SupplierBatches::BatchId))
                    .col(string_len(SupplierBatches::AccountId, 128))
                    .col(string_len_null(SupplierBatches::SupplierFileId, 128))
                    .col(string_len_null(SupplierBatches::SupplierBatchId, 128))
                    .col(string_len(SupplierBatches::Status, 16))
                    .col(timestamp_with_time_zone(SupplierBatches::CreatedAt))
                    .col(timestamp_with_time_zone(SupplierBatches::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_supplier_batches_batch")
                    .table(SupplierBatches::Table)
                    .col(SupplierBatches::BatchId)
                    .col(SupplierBatches::Status)
                    .to_owned(),
            )
            .await?;
        // One column at a time (SQLite adds one per statement).
        for column in [
            BatchLines::SupplierBatch,
            BatchLines::SupplierAccount,
            BatchLines::SupplierBody,
        ] {
            let def = match column {
                BatchLines::SupplierBatch => big_integer_null(column),
                BatchLines::SupplierAccount => string_len_null(column, 128),
                _ => text_null(column),
            };
            manager
                .alter_table(
                    Table::alter()
                        .table(BatchLines::Table)
                        .add_column(def)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("supplier batches are not removed".into()))
    }
}
