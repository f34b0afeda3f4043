//! Two-factor sign-in (issue 42): a console user's authenticator secret (sealed), when it was
//! turned on and the step of the last code accepted; recovery codes (keyed hashes, each used
//! once). Existing users start without two-factor.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ConsoleUsers {
    Table,
    TotpSecret,
    TotpEnabledAt,
    TotpLastStep,
}

#[derive(DeriveIden)]
enum ConsoleRecoveryCodes {
    Table,
    Id,
    UserId,
    CodeHash,
    CreatedAt,
    UsedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite's ALTER TABLE adds one column at a time.
        manager
            .alter_table(
                Table::alter()
                    .table(ConsoleUsers::Table)
                    .add_column(string_len_null(ConsoleUsers::TotpSecret, 256))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(ConsoleUsers::Table)
                    .add_column(timestamp_with_time_zone_null(ConsoleUsers::TotpEnabledAt))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(ConsoleUsers::Table)
                    .add_column(big_integer_null(ConsoleUsers::TotpLastStep))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ConsoleRecoveryCodes::Table)
                    .col(big_pk_auto(ConsoleRecoveryCodes::Id))
                    .col(big_integer(ConsoleRecoveryCodes::UserId))
                    .col(string_len(ConsoleRecoveryCodes::CodeHash, 128))
                    .col(timestamp_with_time_zone(ConsoleRecoveryCodes::CreatedAt))
                    .col(timestamp_with_time_zone_null(ConsoleRecoveryCodes::UsedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_console_recovery_codes_user")
                    .table(ConsoleRecoveryCodes::Table)
                    .col(ConsoleRecoveryCodes::UserId)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("two-factor sign-in is not removed".into()))
    }
}
