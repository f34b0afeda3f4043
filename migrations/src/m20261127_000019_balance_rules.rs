//! Rules that watch balances (issue 32): low-balance alerts (an organization's available balance,
//! a partner's available funding), automatic allocations from partner funding to a customer, and
//! their runs. Each rule carries the state of its last crossing (`below`, `armed`) and a
//! `generation` counted up by every change of that state, so that the watcher acts once per
//! crossing across every admin-api instance: the state changes by an update conditional on the
//! generation read, and only the instance whose update took acts.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum BalanceAlerts {
    Table,
    Id,
    /// `org` or `partner`.
    Subject,
    SubjectId,
    ThresholdNanos,
    /// The balance was last seen below the threshold (and the alert was sent for that crossing).
    Below,
    Generation,
    UpdatedAt,
    AlertedAt,
}

#[derive(DeriveIden)]
enum AutoAllocationRules {
    Table,
    CustomerId,
    BelowNanos,
    AmountNanos,
    MonthlyCapNanos,
    /// Ready to act at the next crossing below `below_nanos`.
    Armed,
    Generation,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum AutoAllocations {
    Table,
    Id,
    CustomerId,
    AmountNanos,
    /// `allocated`, `refused_funding` or `refused_cap`.
    Outcome,
    Reference,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(BalanceAlerts::Table)
                    .if_not_exists()
                    .col(pk_auto(BalanceAlerts::Id).big_integer())
                    .col(string_len(BalanceAlerts::Subject, 16))
                    .col(big_integer(BalanceAlerts::SubjectId))
                    .col(big_integer(BalanceAlerts::ThresholdNanos))
                    .col(boolean(BalanceAlerts::Below).default(false))
                    .col(big_integer(BalanceAlerts::Generation).default(0))
                    .col(timestamp_with_time_zone(BalanceAlerts::UpdatedAt))
                    .col(timestamp_with_time_zone_null(BalanceAlerts::AlertedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_balance_alerts_subject")
                    .table(BalanceAlerts::Table)
                    .col(BalanceAlerts::Subject)
                    .col(BalanceAlerts::SubjectId)
                    .unique()
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(AutoAllocationRules::Table)
                    .if_not_exists()
                    .col(big_integer(AutoAllocationRules::CustomerId).primary_key())
                    .col(big_integer(AutoAllocationRules::BelowNanos))
                    .col(big_integer(AutoAllocationRules::AmountNanos))
                    .col(big_integer(AutoAllocationRules::MonthlyCapNanos))
                    .col(boolean(AutoAllocationRules::Armed).default(true))
                    .col(big_integer(AutoAllocationRules::Generation).default(0))
                    .col(timestamp_with_time_zone(AutoAllocationRules::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(AutoAllocations::Table)
                    .if_not_exists()
                    .col(pk_auto(AutoAllocations::Id).big_integer())
                    .col(big_integer(AutoAllocations::CustomerId))
                    .col(big_integer(AutoAllocations::AmountNanos))
                    .col(string_len(AutoAllocations::Outcome, 32))
                    .col(string(AutoAllocations::Reference))
                    .col(timestamp_with_time_zone(AutoAllocations::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_auto_allocations_customer")
                    .table(AutoAllocations::Table)
                    .col(AutoAllocations::CustomerId)
                    .col(AutoAllocations::CreatedAt)
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for t in [
            BalanceAlerts::Table.into_iden(),
            AutoAllocationRules::Table.into_iden(),
            AutoAllocations::Table.into_iden(),
        ] {
            manager
                .drop_table(Table::drop().table(t).if_exists().to_owned())
                .await?;
        }
        Ok(())
    }
}
