//! The rules of the partner and billing APIs and the consoles. Services take a connection or
//! transaction and plain inputs and return values or their own error enum (each with a
//! [`fault::Fault`] for what is below the rules); they know nothing of HTTP. A write returns
//! [`effects::Written`]; the surface in front of it (the partner API's idempotent write, a console
//! form, the CLI) commits and applies its effects, and maps the error once
//! (`crate::refusal` for the partner and billing envelope).

pub mod alerts;
pub mod allocations;
pub mod audit;
pub mod batch_files;
pub mod batch_log;
pub mod batches;
pub mod billing;
pub mod contacts;
pub mod customer_list;
pub mod customers;
pub mod effects;
pub mod fault;
pub mod funding;
pub mod funding_history;
pub mod group_prices;
pub mod hashing;
pub mod invitations;
pub mod key_reads;
pub mod keys;
pub mod limiter;
pub mod margin;
pub mod memberships;
pub mod message_batches;
pub mod org_keys;
pub mod partner_tokens;
pub mod partner_usage;
pub mod partner_webhooks;
pub mod partners;
pub mod people;
pub mod proof;
pub mod recharge;
pub mod recharge_rules;
pub mod request_log;
pub mod sealing;
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
pub mod webhook_sweeps;

/// The largest threshold or amount a rule takes (1 million USD): alerts, automatic allocations
/// and automatic recharges alike.
pub const MAX_RULE_USD: money::NanoUsd = money::NanoUsd::from_nanos(1_000_000 * 1_000_000_000);
