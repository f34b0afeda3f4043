//! Organizations (the customers' wallets-to-be) and their customer API keys.
//!
//! Keys are stored only as the keyed hash of their secret plus a display preview; the secret itself
//! is never written anywhere.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
    Name,
    Slug,
    Status,
    CreatedAt,
}

#[derive(DeriveIden)]
enum CustomerApiKeys {
    Table,
    Id,
    OrganizationId,
    GroupId,
    Name,
    KeyHash,
    Preview,
    Status,
    AllowOpenai,
    AllowGemini,
    AllowAnthropic,
    CreatedAt,
    DisabledAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(Organizations::Table)
                    .if_not_exists()
                    .col(big_pk_auto(Organizations::Id))
                    .col(string(Organizations::Name))
                    .col(string_uniq(Organizations::Slug))
                    .col(string(Organizations::Status))
                    .col(timestamp_with_time_zone(Organizations::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(CustomerApiKeys::Table)
                    .if_not_exists()
                    .col(big_pk_auto(CustomerApiKeys::Id))
                    .col(big_integer(CustomerApiKeys::OrganizationId))
                    .col(big_integer(CustomerApiKeys::GroupId))
                    .col(string(CustomerApiKeys::Name))
                    .col(string_uniq(CustomerApiKeys::KeyHash))
                    .col(string(CustomerApiKeys::Preview))
                    .col(string(CustomerApiKeys::Status))
                    .col(boolean(CustomerApiKeys::AllowOpenai))
                    .col(boolean(CustomerApiKeys::AllowGemini))
                    .col(boolean(CustomerApiKeys::AllowAnthropic))
                    .col(timestamp_with_time_zone(CustomerApiKeys::CreatedAt))
                    .col(timestamp_with_time_zone_null(CustomerApiKeys::DisabledAt))
                    .foreign_key(
                        ForeignKey::create()
                            .name("fk_customer_api_keys_organization")
                            .from(CustomerApiKeys::Table, CustomerApiKeys::OrganizationId)
                            .to(Organizations::Table, Organizations::Id),
                    )
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_customer_api_keys_organization")
                    .table(CustomerApiKeys::Table)
                    .col(CustomerApiKeys::OrganizationId)
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .drop_table(Table::drop().table(CustomerApiKeys::Table).to_owned())
            .await?;
        manager
            .drop_table(Table::drop().table(Organizations::Table).to_owned())
            .await
    }
}
