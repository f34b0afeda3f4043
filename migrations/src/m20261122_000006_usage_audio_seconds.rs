//! Audio seconds on usage records (audio transcriptions are priced per minute of audio).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    AudioSeconds,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(UsageRecords::Table)
                    .add_column(big_integer(UsageRecords::AudioSeconds).default(0))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration(
            "usage audio seconds are not removed".into(),
        ))
    }
}
