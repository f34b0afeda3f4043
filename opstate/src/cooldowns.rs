//! Account cooldowns: a supplier account that answered 429 (or failed) is skipped by every gateway
//! until its cooldown ends. Shared by all proxy instances through the store; a cooldown only ever
//! grows (a shorter new one never cuts a longer existing one) and ends by itself (TTL).

use crate::error::StoreResult;
use async_trait::async_trait;
use std::time::Duration;

/// Cooldowns of supplier accounts.
#[async_trait]
pub trait Cooldowns: Send + Sync {
    /// Cools `account` for `duration` from now (unless it is already cooling for longer).
    async fn cool(&self, account: &str, duration: Duration) -> StoreResult<()>;

    /// For each account, the time its cooldown has left (`None`: not cooling). One round trip.
    async fn remaining(&self, accounts: &[&str]) -> StoreResult<Vec<Option<Duration>>>;
}
