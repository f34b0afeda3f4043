//! The rules of the partner and billing APIs. Services take a connection or transaction and return
//! DTO values or [`crate::error::ApiError`]s; handlers only extract and map.

pub mod billing;
pub mod customer_list;
pub mod customers;
pub mod funding;
pub mod funding_history;
pub mod hashing;
pub mod invitations;
pub mod keys;
pub mod limiter;
pub mod partner_tokens;
pub mod people;
pub mod proof;
pub mod recharge;
pub mod statements;
pub mod teams;
pub mod two_factor;
pub mod usage;
pub mod wallets;
pub mod watch;
