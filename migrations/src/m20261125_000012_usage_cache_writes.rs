//! Prompt-cache writes on usage records and hourly buckets (`cache_write_tokens`): Anthropic bills
//! tokens written to its prompt cache above plain input, so they are metered and priced apart
//! (`[[models]] cache_write_per_mtok`). Older rows wrote none: 0.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    CacheWriteTokens,
}

#[derive(DeriveIden)]
enum UsageHourly {
    Table,
    CacheWriteTokens,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(UsageRecords::Table)
                    .add_column(big_integer(UsageRecords::CacheWriteTokens).default(0))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(UsageHourly::Table)
                    .add_column(big_integer(UsageHourly::CacheWriteTokens).default(0))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("cache_write_tokens is not removed".into()))
    }
}
