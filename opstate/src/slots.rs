//! Capacity slots: how many calls an account is serving right now, across every proxy instance.
//!
//! A slot is taken before a call goes to an account and given back when it ends; each slot also
//! expires by itself after its TTL, so a proxy that died cannot hold capacity forever. Counting and
//! taking are one atomic step (a Lua script on the Redis server's clock).

use crate::error::StoreResult;
use async_trait::async_trait;
use std::time::Duration;

/// Per-account concurrency slots.
#[async_trait]
pub trait Slots: Send + Sync {
    /// Takes slot `slot_id` on `account` if fewer than `max` live slots are taken. `true`: taken.
    async fn acquire(
        &self,
        account: &str,
        slot_id: &str,
        max: u32,
        ttl: Duration,
    ) -> StoreResult<bool>;

    /// Gives a slot back (unknown slots are ignored).
    async fn release(&self, account: &str, slot_id: &str) -> StoreResult<()>;

    /// Live slots per account, in the order given.
    async fn in_use(&self, accounts: &[&str]) -> StoreResult<Vec<u32>>;
}
