//! The console's people (issue 28): console users (one email address, an argon2id password),
//! their server-side sessions, single-use mailed tokens (sign-up, password reset, membership
//! invitations), memberships in organizations and partner teams, and the audit log of every
//! change made through the console.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ConsoleUsers {
    Table,
    Id,
    Email,
    PasswordHash,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden)]
enum ConsoleSessions {
    Table,
    Id,
    UserId,
    Csrf,
    Ip,
    CreatedAt,
    LastSeenAt,
    ExpiresAt,
}

#[derive(DeriveIden)]
enum ConsoleTokens {
    Table,
    Id,
    TokenHash,
    Purpose,
    Email,
    OrganizationId,
    PartnerId,
    Role,
    InvitedBy,
    CreatedAt,
    ExpiresAt,
    UsedAt,
}

#[derive(DeriveIden)]
enum OrgMembers {
    Table,
    Id,
    OrganizationId,
    UserId,
    Role,
    CreatedAt,
}

#[derive(DeriveIden)]
enum PartnerMembers {
    Table,
    Id,
    PartnerId,
    UserId,
    Role,
    CreatedAt,
}

#[derive(DeriveIden)]
enum AuditRecords {
    Table,
    Id,
    OrganizationId,
    PartnerId,
    ActorUserId,
    Action,
    Target,
    Detail,
    Ip,
    CreatedAt,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .create_table(
                Table::create()
                    .table(ConsoleUsers::Table)
                    .col(big_pk_auto(ConsoleUsers::Id))
                    .col(string_len_uniq(ConsoleUsers::Email, 254))
                    .col(string_len(ConsoleUsers::PasswordHash, 256))
                    .col(timestamp_with_time_zone(ConsoleUsers::CreatedAt))
                    .col(timestamp_with_time_zone(ConsoleUsers::UpdatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ConsoleSessions::Table)
                    .col(string_len(ConsoleSessions::Id, 64).primary_key())
                    .col(big_integer(ConsoleSessions::UserId))
                    .col(string_len(ConsoleSessions::Csrf, 64))
                    .col(string_len_null(ConsoleSessions::Ip, 64))
                    .col(timestamp_with_time_zone(ConsoleSessions::CreatedAt))
                    .col(timestamp_with_time_zone(ConsoleSessions::LastSeenAt))
                    .col(timestamp_with_time_zone(ConsoleSessions::ExpiresAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_console_sessions_user")
                    .table(ConsoleSessions::Table)
                    .col(ConsoleSessions::UserId)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ConsoleTokens::Table)
                    .col(big_pk_auto(ConsoleTokens::Id))
                    .col(string_len_uniq(ConsoleTokens::TokenHash, 128))
                    .col(string_len(ConsoleTokens::Purpose, 32))
                    .col(string_len(ConsoleTokens::Email, 254))
                    .col(big_integer_null(ConsoleTokens::OrganizationId))
                    .col(big_integer_null(ConsoleTokens::PartnerId))
                    .col(string_len_null(ConsoleTokens::Role, 32))
                    .col(big_integer_null(ConsoleTokens::InvitedBy))
                    .col(timestamp_with_time_zone(ConsoleTokens::CreatedAt))
                    .col(timestamp_with_time_zone(ConsoleTokens::ExpiresAt))
                    .col(timestamp_with_time_zone_null(ConsoleTokens::UsedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(OrgMembers::Table)
                    .col(big_pk_auto(OrgMembers::Id))
                    .col(big_integer(OrgMembers::OrganizationId))
                    .col(big_integer(OrgMembers::UserId))
                    .col(string_len(OrgMembers::Role, 32))
                    .col(timestamp_with_time_zone(OrgMembers::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_org_members_org_user")
                    .table(OrgMembers::Table)
                    .col(OrgMembers::OrganizationId)
                    .col(OrgMembers::UserId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(PartnerMembers::Table)
                    .col(big_pk_auto(PartnerMembers::Id))
                    .col(big_integer(PartnerMembers::PartnerId))
                    .col(big_integer(PartnerMembers::UserId))
                    .col(string_len(PartnerMembers::Role, 32))
                    .col(timestamp_with_time_zone(PartnerMembers::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ux_partner_members_partner_user")
                    .table(PartnerMembers::Table)
                    .col(PartnerMembers::PartnerId)
                    .col(PartnerMembers::UserId)
                    .unique()
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(AuditRecords::Table)
                    .col(big_pk_auto(AuditRecords::Id))
                    .col(big_integer_null(AuditRecords::OrganizationId))
                    .col(big_integer_null(AuditRecords::PartnerId))
                    .col(big_integer_null(AuditRecords::ActorUserId))
                    .col(string_len(AuditRecords::Action, 64))
                    .col(string_len_null(AuditRecords::Target, 256))
                    .col(text(AuditRecords::Detail))
                    .col(string_len_null(AuditRecords::Ip, 64))
                    .col(timestamp_with_time_zone(AuditRecords::CreatedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_audit_records_org")
                    .table(AuditRecords::Table)
                    .col(AuditRecords::OrganizationId)
                    .col(AuditRecords::CreatedAt)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("console tables are not removed".into()))
    }
}
