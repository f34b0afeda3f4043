//! Customer keys: an optional spend budget per UTC day or calendar month (`budget_nanos`, a
//! positive nano-USD amount, and `budget_period`, `day` or `month`; both null: no budget).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum CustomerApiKeys {
    Table,
    BudgetNanos,
    BudgetPeriod,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // One column per statement: SQLite's ALTER TABLE adds one column at a time.
        manager
            .alter_table(
                Table::alter()
                    .table(CustomerApiKeys::Table)
                    .add_column(big_integer_null(CustomerApiKeys::BudgetNanos))
                    .to_owned(),
            )
            .await?;
        manager
            .alter_table(
                Table::alter()
                    .table(CustomerApiKeys::Table)
                    .add_column(string_len_null(CustomerApiKeys::BudgetPeriod, 8))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("key budgets are not removed".into()))
    }
}
