//! Margin reporting (issue 29): what each settled call cost the partner at wholesale
//! (`usage_records.wholesale_nanos`: the charge × wholesale / retail of its group, rounded down —
//! exactly the amount the settler accrues on the partner's outstanding usage), and the hourly
//! buckets' sums of charges and wholesale costs (`usage_hourly.charged_nanos`,
//! `wholesale_nanos`), so retail spend, wholesale cost and margin are read from the buckets and
//! equal the ledger's postings to the nano-dollar. Rows settled before this migration carry 0
//! (their postings are in the ledger; reports say from when margins are kept).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    WholesaleNanos,
}

#[derive(DeriveIden)]
enum UsageHourly {
    Table,
    ChargedNanos,
    WholesaleNanos,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(UsageRecords::Table)
                    .add_column(big_integer(UsageRecords::WholesaleNanos).default(0))
                    .to_owned(),
            )
            .await?;
        // One column per statement: SQLite adds one at a time.
        for column in [UsageHourly::ChargedNanos, UsageHourly::WholesaleNanos] {
            manager
                .alter_table(
                    Table::alter()
                        .table(UsageHourly::Table)
                        .add_column(big_integer(column).default(0))
                        .to_owned(),
                )
                .await?;
        }
        Ok(())
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("wholesale columns are not removed".into()))
    }
}
