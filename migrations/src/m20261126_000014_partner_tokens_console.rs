//! Partner tokens made in the partner dashboard (issue 29): the team role of the person who made
//! the token, frozen at creation (`role`; none for a token the operator's command made, which
//! acts with its partner's role as before), who made it (`created_by`, a console user) and when
//! it was last used (`last_used_at`, written at most once a minute per token).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum PartnerTokens {
    Table,
    Role,
    CreatedBy,
    LastUsedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite adds one at a time.
        for column in [
            string_null(PartnerTokens::Role),
            big_integer_null(PartnerTokens::CreatedBy),
            timestamp_with_time_zone_null(PartnerTokens::LastUsedAt),
        ] {
            let mut column = column;
            manager
                .alter_table(
                    Table::alter()
                        .table(PartnerTokens::Table)
                        .add_column(&mut column)
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration(
            "partner token columns are not removed".into(),
        ))
    }
}
