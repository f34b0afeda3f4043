//! What an abandoned attempt served (issue 47): a supplier answer that began and broke before
//! anything reached the client, which the gateway failed over from. The supplier may bill it,
//! so its row in `supplier_attempts` carries its usage (reported, or estimated under the bounds
//! of a call's estimate, `measurement` says which) beside its cost; refused and unreachable
//! attempts keep zeros.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum SupplierAttempts {
    Table,
    InputTokens,
    OutputTokens,
    CachedTokens,
    CacheWriteTokens,
    #[sea_orm(iden = "cache_write_1h_tokens")]
    CacheWrite1hTokens,
    Images,
    Measurement,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        use SupplierAttempts as A;
        // One column a statement (SQLite adds one at a time); constant defaults.
        let counts = [
            A::InputTokens,
            A::OutputTokens,
            A::CachedTokens,
            A::CacheWriteTokens,
            A::CacheWrite1hTokens,
            A::Images,
        ];
        for column in counts {
            manager
                .alter_table(
                    Table::alter()
                        .table(A::Table)
                        .add_column(big_integer(column).default(0))
                        .to_owned(),
                )
                .await?;
        }
        manager
            .alter_table(
                Table::alter()
                    .table(A::Table)
                    .add_column(string_len(A::Measurement, 16).default("exact"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("supplier attempts are not removed".into()))
    }
}
