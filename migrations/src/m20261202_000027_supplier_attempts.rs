//! The supplier's side of each call (issue 47): on every usage record, the part of its cache
//! writes made for an hour (`cache_write_1h_tokens`, priced apart from the 5-minute ones), and what its answering
//! attempt costs at the supplier's prices (`supplier_cost_nanos`; null when a price it needs is
//! unknown, and on records settled before this migration), and in `supplier_attempts` the
//! attempts a call moved on from before that one (a failover: the account, the supplier's status,
//! why it ended). Those cost nothing today (a refusal or no connection); the table says so per
//! row, so an attempt the supplier does bill can join them with its usage. And
//! `supplier_reconciliations`: per UTC day × account × model, what the ledger booked on that
//! account and what the supplier's own usage report says, the difference in tokens and its cost at
//! the supplier's prices, and whether it is beyond the configured tolerance (one row per day,
//! account and model, rewritten by each check).

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum UsageRecords {
    Table,
    SupplierCostNanos,
    #[sea_orm(iden = "cache_write_1h_tokens")]
    CacheWrite1hTokens,
}

#[derive(DeriveIden)]
enum SupplierAttempts {
    Table,
    Id,
    RequestId,
    Attempt,
    OrganizationId,
    AccountId,
    Model,
    Outcome,
    Status,
    SupplierCostNanos,
    StartedAt,
    SettledAt,
}

#[derive(DeriveIden)]
enum SupplierReconciliations {
    Table,
    Id,
    Day,
    AccountId,
    Model,
    OursRequests,
    OursInput,
    OursOutput,
    OursCached,
    OursCacheWrite,
    TheirsRequests,
    TheirsInput,
    TheirsOutput,
    TheirsCached,
    TheirsCacheWrite,
    DriftCostNanos,
    OverTolerance,
    CheckedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        // Nullable: instant on PostgreSQL's partitioned table (no row is rewritten).
        manager
            .alter_table(
                Table::alter()
                    .table(UsageRecords::Table)
                    .add_column(big_integer_null(UsageRecords::SupplierCostNanos))
                    .to_owned(),
            )
            .await?;
        // A constant default: instant as well (PostgreSQL 11 and later).
        manager
            .alter_table(
                Table::alter()
                    .table(UsageRecords::Table)
                    .add_column(big_integer(UsageRecords::CacheWrite1hTokens).default(0))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(SupplierAttempts::Table)
                    .col(big_pk_auto(SupplierAttempts::Id))
                    .col(string_len(SupplierAttempts::RequestId, 64))
                    .col(integer(SupplierAttempts::Attempt))
                    .col(big_integer(SupplierAttempts::OrganizationId))
                    .col(string_len(SupplierAttempts::AccountId, 128))
                    .col(string_len(SupplierAttempts::Model, 128))
                    .col(string_len(SupplierAttempts::Outcome, 16))
                    .col(integer(SupplierAttempts::Status))
                    .col(big_integer_null(SupplierAttempts::SupplierCostNanos))
                    .col(timestamp_with_time_zone(SupplierAttempts::StartedAt))
                    .col(timestamp_with_time_zone(SupplierAttempts::SettledAt))
                    .to_owned(),
            )
            .await?;
        // Once per request and attempt: a redelivered event writes nothing.
        manager
            .create_index(
                Index::create()
                    .name("ux_supplier_attempts_request")
                    .table(SupplierAttempts::Table)
                    .col(SupplierAttempts::RequestId)
                    .col(SupplierAttempts::Attempt)
                    .unique()
                    .to_owned(),
            )
            .await?;
        // The margin report and reconciliation read a day of one account.
        manager
            .create_index(
                Index::create()
                    .name("ix_supplier_attempts_started")
                    .table(SupplierAttempts::Table)
                    .col(SupplierAttempts::StartedAt)
                    .col(SupplierAttempts::AccountId)
                    .to_owned(),
            )
            .await?;
        reconciliations(manager).await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("supplier attempts are not removed".into()))
    }
}

async fn reconciliations(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    use SupplierReconciliations as R;
    manager
        .create_table(
            Table::create()
                .table(R::Table)
                .col(big_pk_auto(R::Id))
                .col(string_len(R::Day, 10))
                .col(string_len(R::AccountId, 128))
                .col(string_len(R::Model, 128))
                .col(big_integer(R::OursRequests))
                .col(big_integer(R::OursInput))
                .col(big_integer(R::OursOutput))
                .col(big_integer(R::OursCached))
                .col(big_integer(R::OursCacheWrite))
                .col(big_integer_null(R::TheirsRequests))
                .col(big_integer(R::TheirsInput))
                .col(big_integer(R::TheirsOutput))
                .col(big_integer(R::TheirsCached))
                .col(big_integer(R::TheirsCacheWrite))
                .col(big_integer_null(R::DriftCostNanos))
                .col(boolean(R::OverTolerance))
                .col(timestamp_with_time_zone(R::CheckedAt))
                .to_owned(),
        )
        .await?;
    manager
        .create_index(
            Index::create()
                .name("ux_supplier_reconciliations")
                .table(R::Table)
                .col(R::Day)
                .col(R::AccountId)
                .col(R::Model)
                .unique()
                .to_owned(),
        )
        .await
}
