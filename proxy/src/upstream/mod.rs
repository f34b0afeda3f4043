//! Phase 5, the supplier side: the accounts ([`accounts`]) and the request and response headers
//! as they cross the gateway ([`rewrite`]). Bodies in another wire format are `wire`'s business.

pub(crate) mod accounts;
pub(crate) mod direct;
pub(crate) mod rewrite;

pub(crate) use accounts::{Accounts, Upstream};
