//! Proof of address and the one limiter (issue 42).
//!
//! - `console_users.email_verified_at`: when the address was last proven by a mailed code (or a
//!   mailed reset link, or vouched for by the operator's demo command). Every account that exists
//!   before this migration is left unproven (null): a link was taken as proof until now, and a
//!   link proves nothing, so each such account proves its address with a code at its next
//!   sign-in before it can act. Its memberships stay as they are.
//! - Every console session ends (their users are unproven now); people sign in again.
//! - `console_challenges`: a pending acceptance, join or sign-in waiting for its mailed code
//!   (only the code's keyed hash and the browser flow's SHA-256 are stored).
//! - `console_throttles`: the limiter's state per address and per client network.
//! - One active billing token per organization by a partial unique index; if two were ever
//!   active for one organization, all but the newest become `rotated` first.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[derive(DeriveIden)]
enum ConsoleUsers {
    Table,
    EmailVerifiedAt,
}

#[derive(DeriveIden)]
enum ConsoleChallenges {
    Table,
    Id,
    FlowHash,
    Purpose,
    Subject,
    Email,
    CodeHash,
    PasswordHash,
    UserId,
    Tries,
    CreatedAt,
    ExpiresAt,
    UsedAt,
}

#[derive(DeriveIden)]
enum ConsoleThrottles {
    Table,
    Key,
    Failures,
    LockedUntil,
    LastAt,
    Version,
}

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager
            .alter_table(
                Table::alter()
                    .table(ConsoleUsers::Table)
                    .add_column(timestamp_with_time_zone_null(ConsoleUsers::EmailVerifiedAt))
                    .to_owned(),
            )
            .await?;
        let db = manager.get_connection();
        db.execute_unprepared("DELETE FROM console_sessions")
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ConsoleChallenges::Table)
                    .col(big_pk_auto(ConsoleChallenges::Id))
                    .col(string_len_uniq(ConsoleChallenges::FlowHash, 64))
                    .col(string_len(ConsoleChallenges::Purpose, 16))
                    .col(string_len(ConsoleChallenges::Subject, 64))
                    .col(string_len(ConsoleChallenges::Email, 254))
                    .col(string_len(ConsoleChallenges::CodeHash, 128))
                    .col(string_len_null(ConsoleChallenges::PasswordHash, 256))
                    .col(big_integer_null(ConsoleChallenges::UserId))
                    .col(integer(ConsoleChallenges::Tries))
                    .col(timestamp_with_time_zone(ConsoleChallenges::CreatedAt))
                    .col(timestamp_with_time_zone(ConsoleChallenges::ExpiresAt))
                    .col(timestamp_with_time_zone_null(ConsoleChallenges::UsedAt))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(
                Index::create()
                    .name("ix_console_challenges_subject")
                    .table(ConsoleChallenges::Table)
                    .col(ConsoleChallenges::Subject)
                    .col(ConsoleChallenges::Email)
                    .to_owned(),
            )
            .await?;
        manager
            .create_table(
                Table::create()
                    .table(ConsoleThrottles::Table)
                    .col(string_len(ConsoleThrottles::Key, 96).primary_key())
                    .col(integer(ConsoleThrottles::Failures))
                    .col(timestamp_with_time_zone_null(ConsoleThrottles::LockedUntil))
                    .col(timestamp_with_time_zone(ConsoleThrottles::LastAt))
                    .col(big_integer(ConsoleThrottles::Version))
                    .to_owned(),
            )
            .await?;
        // One active billing token per organization: older duplicates become rotated, then the
        // database keeps it so (a partial unique index, on PostgreSQL and SQLite alike).
        db.execute_unprepared(
            "UPDATE org_billing_tokens SET status = 'rotated' WHERE status = 'active' AND id NOT IN \
             (SELECT MAX(id) FROM org_billing_tokens WHERE status = 'active' GROUP BY organization_id)",
        )
        .await?;
        db.execute_unprepared(
            "CREATE UNIQUE INDEX ux_org_billing_tokens_one_active ON org_billing_tokens \
             (organization_id) WHERE status = 'active'",
        )
        .await?;
        Ok(())
    }

    async fn down(&self, _manager: &SchemaManager) -> Result<(), DbErr> {
        Err(DbErr::Migration("proof of address is not removed".into()))
    }
}
