//! The rules of the partner and billing APIs. Services take a connection or transaction and return
//! DTO values or [`crate::error::ApiError`]s; handlers only extract and map.

pub mod alerts;
pub mod allocations;
pub mod audit;
pub mod billing;
pub mod contacts;
pub mod customer_list;
pub mod customers;
pub mod funding;
pub mod funding_history;
pub mod group_prices;
pub mod hashing;
pub mod invitations;
pub mod keys;
pub mod limiter;
pub mod memberships;
pub mod partner_tokens;
pub mod partner_usage;
pub mod partners;
pub mod people;
pub mod proof;
pub mod recharge;
pub mod recharge_rules;
pub mod sessions;
pub mod statement_files;
pub mod statements;
pub mod stripe_events;
pub mod teams;
pub mod two_factor;
pub mod usage;
pub mod usage_sums;
pub mod wallets;
pub mod watch;

/// The largest threshold or amount a rule takes (1 million USD): alerts, automatic allocations
/// and automatic recharges alike.
pub const MAX_RULE_USD: money::NanoUsd = money::NanoUsd::from_nanos(1_000_000 * 1_000_000_000);
