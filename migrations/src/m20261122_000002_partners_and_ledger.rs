//! Partners and their tokens, customers (a partner's view of an organization), invitations, model
//! groups per customer, organization billing tokens, idempotency records, and the double-entry
//! ledger.
//!
//! Money columns are BIGINT nano-USD; rate multipliers are BIGINT millionths (`*_ppm`). Ledger
//! entries are immutable: a transaction's entries sum to zero, an account's balance is the sum of
//! its entries.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum Organizations {
    Table,
    Id,
    OwnerEmail,
    BillingEmail,
    ActivatedAt,
}

#[derive(DeriveIden)]
enum Partners {
    Table,
    Id,
    Name,
    MinRateMultiplierPpm,
    Role,
    CreatedAt,
}

#[derive(DeriveIden)]
enum PartnerTokens {
    Table,
    Id,
    PartnerId,
    TokenHash,
    Preview,
    Scopes,
    Status,
    CreatedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum Customers {
    Table,
    Id,
    PartnerId,
    ExternalId,
    OrganizationId,
    DisplayName,
    ContactEmail,
    BillingMode,
    BillingAllocationMode,
    AllocationCapNanos,
    CreatedAt,
}

#[derive(DeriveIden)]
enum Invitations {
    Table,
    Id,
    CustomerId,
    TokenHash,
    Email,
    Status,
    ExpiresAt,
    AcceptedAt,
    CreatedAt,
}

#[derive(DeriveIden)]
enum CustomerGroups {
    Table,
    Id,
    CustomerId,
    GroupId,
    RetailRateMultiplierPpm,
    Status,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum OrgBillingTokens {
    Table,
    Id,
    OrganizationId,
    TokenHash,
    Preview,
    Status,
    CreatedAt,
    RevokedAt,
}

#[derive(DeriveIden)]
enum IdempotencyRecords {
    Table,
    Id,
    PartnerId,
    IdemKey,
    Method,
    Path,
    Fingerprint,
    State,
    ResponseStatus,
    ResponseBody,
    CreatedAt,
    LockedAt,
}

#[derive(DeriveIden)]
enum TopUpSessions {
    Table,
    Id,
    PartnerId,
    TokenHash,
    AmountNanos,
    Status,
    CreatedAt,
    PaidAt,
}

#[derive(DeriveIden)]
enum LedgerAccounts {
    Table,
    Id,
    Code,
    Kind,
    PartnerId,
    OrganizationId,
    CreatedAt,
}

#[derive(DeriveIden)]
enum LedgerTransactions {
    Table,
    Id,
    Reference,
    Kind,
    Memo,
    CreatedAt,
}

#[derive(DeriveIden)]
enum LedgerEntries {
    Table,
    Id,
    TransactionId,
    AccountId,
    AmountNanos,
    CreatedAt,
}

fn fk(
    name: &str,
    from: (impl IntoIden, impl IntoIden),
    to: (impl IntoIden, impl IntoIden),
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .name(name)
        .from(from.0, from.1)
        .to(to.0, to.1)
        .to_owned()
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            string_null(Organizations::OwnerEmail),
            string_null(Organizations::BillingEmail),
            timestamp_with_time_zone_null(Organizations::ActivatedAt),
        ] {
            manager
                .alter_table(
                    Table::alter()
                        .table(Organizations::Table)
                        .add_column(column)
                        .to_owned(),
                )
                .await?;
        }
        manager
            .create_table(
                Table::create()
                    .table(Partners::Table)
                    .if_not_exists()
                    .col(big_pk_auto(Partners::Id))
                    .col(string(Partners::Name))
                    .col(big_integer(Partners::MinRateMultiplierPpm))
                    .col(string(Partners::Role))
                    .col(timestamp_with_time_zone(Partners::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(PartnerTokens::Table)
                    .if_not_exists()
                    .col(big_pk_auto(PartnerTokens::Id))
                    .col(big_integer(PartnerTokens::PartnerId))
                    .col(string_uniq(PartnerTokens::TokenHash))
                    .col(string(PartnerTokens::Preview))
                    .col(string(PartnerTokens::Scopes))
                    .col(string(PartnerTokens::Status))
                    .col(timestamp_with_time_zone(PartnerTokens::CreatedAt))
                    .col(timestamp_with_time_zone_null(PartnerTokens::RevokedAt))
                    .foreign_key(&mut fk(
                        "fk_partner_tokens_partner",
                        (PartnerTokens::Table, PartnerTokens::PartnerId),
                        (Partners::Table, Partners::Id),
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Customers::Table)
                    .if_not_exists()
                    .col(big_pk_auto(Customers::Id))
                    .col(big_integer(Customers::PartnerId))
                    .col(string(Customers::ExternalId))
                    .col(big_integer_uniq(Customers::OrganizationId))
                    .col(string(Customers::DisplayName))
                    .col(string(Customers::ContactEmail))
                    .col(string(Customers::BillingMode))
                    .col(string(Customers::BillingAllocationMode))
                    .col(big_integer(Customers::AllocationCapNanos))
                    .col(timestamp_with_time_zone(Customers::CreatedAt))
                    .foreign_key(&mut fk(
                        "fk_customers_partner",
                        (Customers::Table, Customers::PartnerId),
                        (Partners::Table, Partners::Id),
                    ))
                    .foreign_key(&mut fk(
                        "fk_customers_organization",
                        (Customers::Table, Customers::OrganizationId),
                        (Organizations::Table, Organizations::Id),
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_customers_partner_external")
                    .table(Customers::Table)
                    .col(Customers::PartnerId)
                    .col(Customers::ExternalId)
                    .unique()
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(Invitations::Table)
                    .if_not_exists()
                    .col(big_pk_auto(Invitations::Id))
                    .col(big_integer(Invitations::CustomerId))
                    .col(string_uniq(Invitations::TokenHash))
                    .col(string(Invitations::Email))
                    .col(string(Invitations::Status))
                    .col(timestamp_with_time_zone(Invitations::ExpiresAt))
                    .col(timestamp_with_time_zone_null(Invitations::AcceptedAt))
                    .col(timestamp_with_time_zone(Invitations::CreatedAt))
                    .foreign_key(&mut fk(
                        "fk_invitations_customer",
                        (Invitations::Table, Invitations::CustomerId),
                        (Customers::Table, Customers::Id),
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(CustomerGroups::Table)
                    .if_not_exists()
                    .col(big_pk_auto(CustomerGroups::Id))
                    .col(big_integer(CustomerGroups::CustomerId))
                    .col(big_integer(CustomerGroups::GroupId))
                    .col(big_integer(CustomerGroups::RetailRateMultiplierPpm))
                    .col(string(CustomerGroups::Status))
                    .col(timestamp_with_time_zone(CustomerGroups::CreatedAt))
                    .col(timestamp_with_time_zone(CustomerGroups::UpdatedAt))
                    .foreign_key(&mut fk(
                        "fk_customer_groups_customer",
                        (CustomerGroups::Table, CustomerGroups::CustomerId),
                        (Customers::Table, Customers::Id),
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_customer_groups_customer_group")
                    .table(CustomerGroups::Table)
                    .col(CustomerGroups::CustomerId)
                    .col(CustomerGroups::GroupId)
                    .unique()
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(OrgBillingTokens::Table)
                    .if_not_exists()
                    .col(big_pk_auto(OrgBillingTokens::Id))
                    .col(big_integer(OrgBillingTokens::OrganizationId))
                    .col(string_uniq(OrgBillingTokens::TokenHash))
                    .col(string(OrgBillingTokens::Preview))
                    .col(string(OrgBillingTokens::Status))
                    .col(timestamp_with_time_zone(OrgBillingTokens::CreatedAt))
                    .col(timestamp_with_time_zone_null(OrgBillingTokens::RevokedAt))
                    .foreign_key(&mut fk(
                        "fk_org_billing_tokens_organization",
                        (OrgBillingTokens::Table, OrgBillingTokens::OrganizationId),
                        (Organizations::Table, Organizations::Id),
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(IdempotencyRecords::Table)
                    .if_not_exists()
                    .col(big_pk_auto(IdempotencyRecords::Id))
                    .col(big_integer(IdempotencyRecords::PartnerId))
                    .col(string(IdempotencyRecords::IdemKey))
                    .col(string(IdempotencyRecords::Method))
                    .col(string(IdempotencyRecords::Path))
                    .col(string(IdempotencyRecords::Fingerprint))
                    .col(string(IdempotencyRecords::State))
                    .col(integer_null(IdempotencyRecords::ResponseStatus))
                    .col(text_null(IdempotencyRecords::ResponseBody))
                    .col(timestamp_with_time_zone(IdempotencyRecords::CreatedAt))
                    .col(timestamp_with_time_zone(IdempotencyRecords::LockedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("uq_idempotency_partner_key")
                    .table(IdempotencyRecords::Table)
                    .col(IdempotencyRecords::PartnerId)
                    .col(IdempotencyRecords::IdemKey)
                    .unique()
                    .if_not_exists()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(TopUpSessions::Table)
                    .if_not_exists()
                    .col(big_pk_auto(TopUpSessions::Id))
                    .col(big_integer(TopUpSessions::PartnerId))
                    .col(string_uniq(TopUpSessions::TokenHash))
                    .col(big_integer(TopUpSessions::AmountNanos))
                    .col(string(TopUpSessions::Status))
                    .col(timestamp_with_time_zone(TopUpSessions::CreatedAt))
                    .col(timestamp_with_time_zone_null(TopUpSessions::PaidAt))
                    .foreign_key(&mut fk(
                        "fk_top_up_sessions_partner",
                        (TopUpSessions::Table, TopUpSessions::PartnerId),
                        (Partners::Table, Partners::Id),
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(LedgerAccounts::Table)
                    .if_not_exists()
                    .col(big_pk_auto(LedgerAccounts::Id))
                    .col(string_uniq(LedgerAccounts::Code))
                    .col(string(LedgerAccounts::Kind))
                    .col(big_integer_null(LedgerAccounts::PartnerId))
                    .col(big_integer_null(LedgerAccounts::OrganizationId))
                    .col(timestamp_with_time_zone(LedgerAccounts::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(LedgerTransactions::Table)
                    .if_not_exists()
                    .col(big_pk_auto(LedgerTransactions::Id))
                    .col(string_uniq(LedgerTransactions::Reference))
                    .col(string(LedgerTransactions::Kind))
                    .col(string_null(LedgerTransactions::Memo))
                    .col(timestamp_with_time_zone(LedgerTransactions::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(LedgerEntries::Table)
                    .if_not_exists()
                    .col(big_pk_auto(LedgerEntries::Id))
                    .col(big_integer(LedgerEntries::TransactionId))
                    .col(big_integer(LedgerEntries::AccountId))
                    .col(big_integer(LedgerEntries::AmountNanos))
                    .col(timestamp_with_time_zone(LedgerEntries::CreatedAt))
                    .foreign_key(&mut fk(
                        "fk_ledger_entries_transaction",
                        (LedgerEntries::Table, LedgerEntries::TransactionId),
                        (LedgerTransactions::Table, LedgerTransactions::Id),
                    ))
                    .foreign_key(&mut fk(
                        "fk_ledger_entries_account",
                        (LedgerEntries::Table, LedgerEntries::AccountId),
                        (LedgerAccounts::Table, LedgerAccounts::Id),
                    ))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("idx_ledger_entries_account")
                    .table(LedgerEntries::Table)
                    .col(LedgerEntries::AccountId)
                    .if_not_exists()
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration(
            "the ledger is append-only: this migration is not reversible".into(),
        ))
    }
}
