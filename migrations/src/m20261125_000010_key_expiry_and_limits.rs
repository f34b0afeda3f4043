//! Customer keys: an optional expiry, and optional per-key capacity limits (a concurrency cap and
//! a requests-per-minute cap, each at most its group's default).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum CustomerApiKeys {
    Table,
    ExpiresAt,
    MaxConcurrency,
    RequestsPerMinute,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite's ALTER TABLE adds one column at a time.
        manager
            .alter_table(
                Table::alter()
                    .table(CustomerApiKeys::Table)
                    .add_column(timestamp_with_time_zone_null(CustomerApiKeys::ExpiresAt))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(CustomerApiKeys::Table)
                    .add_column(integer_null(CustomerApiKeys::MaxConcurrency))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(CustomerApiKeys::Table)
                    .add_column(integer_null(CustomerApiKeys::RequestsPerMinute))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration(
            "key expiry and limits are not removed".into(),
        ))
    }
}
