//! sea-orm entity models of the ledger of record (PostgreSQL or SQLite). Models only, no logic:
//! rules live in admin-api's services, which map these to their own DTOs.

pub mod audit_records;
pub mod auto_allocation_rules;
pub mod auto_allocations;
pub mod balance_alerts;
pub mod console_challenges;
pub mod console_recovery_codes;
pub mod console_sessions;
pub mod console_throttles;
pub mod console_tokens;
pub mod console_users;
pub mod customer_api_keys;
pub mod customer_groups;
pub mod customers;
pub mod idempotency_records;
pub mod invitations;
pub mod ledger_accounts;
pub mod ledger_entries;
pub mod ledger_transactions;
pub mod org_billing_tokens;
pub mod org_members;
pub mod organizations;
pub mod partner_members;
pub mod partner_tokens;
pub mod partner_usage;
pub mod partner_usage_hourly;
pub mod partners;
pub mod recharge_attempts;
pub mod recharge_rules;
pub mod recharge_setups;
pub mod status;
pub mod top_up_sessions;
pub mod usage_hourly;
pub mod usage_records;
pub mod video_tasks;
