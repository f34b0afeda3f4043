//! Schema migrations for PostgreSQL and SQLite (sea-orm-migration). Migrations never import
//! `entities`: each describes the schema as it was when written, and is never edited after it
//! shipped (write a new one instead). Foreign keys are declared inside `CREATE TABLE` because SQLite
//! cannot add them later.

use sea_orm_migration::prelude::*;

pub use sea_orm_migration::MigratorTrait;

mod m20261122_000001_organizations_and_keys;
mod m20261122_000002_partners_and_ledger;
mod m20261122_000003_usage;
mod m20261122_000004_usage_records;
mod m20261122_000005_usage_attribution;
mod m20261122_000006_usage_audio_seconds;
mod m20261124_000007_usage_images;
mod m20261124_000008_video_tasks;
mod m20261125_000009_usage_mirror_confirmed;
mod m20261125_000010_key_expiry_and_limits;
mod m20261125_000011_top_up_payments;
mod m20261125_000012_usage_cache_writes;
mod m20261125_000013_console_people;
mod m20261126_000014_partner_tokens_console;
mod m20261126_000015_usage_wholesale;
mod m20261126_000016_partner_usage_rollups;
mod m20261127_000017_usage_partitions;
mod m20261127_000018_key_budgets;
mod m20261127_000019_balance_rules;
mod m20261127_000020_recharge;
mod m20261128_000021_proof_of_address;
mod m20261128_000022_two_factor;
mod m20261129_000023_request_log;
mod m20261129_000024_partner_webhooks;
mod m20261130_000025_batches;
mod m20261201_000026_supplier_batches;
mod m20261202_000027_supplier_attempts;
mod m20261203_000028_abandoned_attempts;
pub mod usage_partitions;

pub use m20261126_000016_partner_usage_rollups::backfill as partner_usage_backfill;

/// Every migration, in order.
pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261122_000001_organizations_and_keys::Migration),
            Box::new(m20261122_000002_partners_and_ledger::Migration),
            Box::new(m20261122_000003_usage::Migration),
            Box::new(m20261122_000004_usage_records::Migration),
            Box::new(m20261122_000005_usage_attribution::Migration),
            Box::new(m20261122_000006_usage_audio_seconds::Migration),
            Box::new(m20261124_000007_usage_images::Migration),
            Box::new(m20261124_000008_video_tasks::Migration),
            Box::new(m20261125_000009_usage_mirror_confirmed::Migration),
            Box::new(m20261125_000010_key_expiry_and_limits::Migration),
            Box::new(m20261125_000011_top_up_payments::Migration),
            Box::new(m20261125_000012_usage_cache_writes::Migration),
            Box::new(m20261125_000013_console_people::Migration),
            Box::new(m20261126_000014_partner_tokens_console::Migration),
            Box::new(m20261126_000015_usage_wholesale::Migration),
            Box::new(m20261126_000016_partner_usage_rollups::Migration),
            Box::new(m20261127_000017_usage_partitions::Migration),
            Box::new(m20261127_000018_key_budgets::Migration),
            Box::new(m20261127_000019_balance_rules::Migration),
            Box::new(m20261127_000020_recharge::Migration),
            Box::new(m20261128_000021_proof_of_address::Migration),
            Box::new(m20261128_000022_two_factor::Migration),
            Box::new(m20261129_000023_request_log::Migration),
            Box::new(m20261129_000024_partner_webhooks::Migration),
            Box::new(m20261130_000025_batches::Migration),
            Box::new(m20261201_000026_supplier_batches::Migration),
            Box::new(m20261202_000027_supplier_attempts::Migration),
            Box::new(m20261203_000028_abandoned_attempts::Migration),
        ]
    }
}
