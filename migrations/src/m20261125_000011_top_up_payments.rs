//! Partner top-ups paid through a payment provider: which provider, and its session id (unique:
//! one credit per paid session).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum TopUpSessions {
    Table,
    Provider,
    ProviderSessionId,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(TopUpSessions::Table)
                    .add_column(string_null(TopUpSessions::Provider))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(TopUpSessions::Table)
                    .add_column(string_null(TopUpSessions::ProviderSessionId))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_top_up_sessions_provider_session")
                    .table(TopUpSessions::Table)
                    .col(TopUpSessions::ProviderSessionId)
                    .unique()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration(
            "top-up payment columns are not removed".into(),
        ))
    }
}
