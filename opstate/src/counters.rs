//! Fixed-window counters, shared by every instance: the partner API's per-token rate limits.
//!
//! Windows are aligned to multiples of their length on one clock (the Redis server's, or the
//! process clock in memory), so all instances agree where a window ends. A counter expires two
//! windows after its last hit: a failure can never leave a key without a TTL.

use crate::error::StoreResult;
use async_trait::async_trait;
use std::time::Duration;

/// The state of one counter after a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowHit {
    /// Events counted in the current window, this one included.
    pub count: u64,
    /// Time until the current window ends.
    pub resets_in: Duration,
}

/// Fixed-window counters.
#[async_trait]
pub trait WindowCounters: Send + Sync {
    /// Counts one event for `key` in the current window of length `window`.
    async fn hit(&self, key: &str, window: Duration) -> StoreResult<WindowHit>;
}
