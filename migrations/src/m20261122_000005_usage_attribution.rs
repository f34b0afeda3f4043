//! Attribution of usage records to a project and a workflow (client headers).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    Project,
    Workflow,
    OrganizationId,
    StartedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            string_null(UsageRecords::Project),
            string_null(UsageRecords::Workflow),
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(UsageRecords::Table)
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_index(
                Index::create()
                    .name("idx_usage_records_org_started")
                    .table(UsageRecords::Table)
                    .col(UsageRecords::OrganizationId)
                    .col(UsageRecords::StartedAt)
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("usage attribution is not removed".into()))
    }
}
