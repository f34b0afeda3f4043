//! Whether the wallet mirror was told a usage record's charge (`mirror_confirmed`): the settler
//! confirms each charge to the mirror once, and skips redelivered or duplicate events of a request
//! whose charge the mirror already has. Records written before this column existed were confirmed
//! by the settler that wrote them: they default to true.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    MirrorConfirmed,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(UsageRecords::Table)
                    .add_column(boolean(UsageRecords::MirrorConfirmed).default(true))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("mirror_confirmed is not removed".into()))
    }
}
