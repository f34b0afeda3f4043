//! Account cooldowns: a supplier account that answered 429 (or failed) is skipped by every gateway
//! until its cooldown ends. Shared by all proxy instances through the store; a cooldown only ever
//! grows (a shorter new one never cuts a longer existing one, which keeps its cause) and ends by
//! itself (TTL). The cause decides what a client is told when every account cools: a usage limit
//! is a 429, failures are a 503.

use crate::error::StoreResult;
use async_trait::async_trait;
use std::time::Duration;

/// Why an account cools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CoolCause {
    /// The supplier said the account reached a usage (rate) limit.
    UsageLimit,
    /// The account failed: a server error, or no connection.
    Failure,
}

impl CoolCause {
    /// The stored form.
    pub fn as_str(self) -> &'static str {
        match self {
            CoolCause::UsageLimit => "limit",
            CoolCause::Failure => "failure",
        }
    }

    /// Reads the stored form; anything but `failure` (including v1's `1`) is a usage limit.
    pub fn parse(stored: &str) -> CoolCause {
        if stored == "failure" {
            CoolCause::Failure
        } else {
            CoolCause::UsageLimit
        }
    }
}

/// A cooldown in progress: the time it has left and its cause.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cooldown {
    pub left: Duration,
    pub cause: CoolCause,
}

/// Cooldowns of supplier accounts.
#[async_trait]
pub trait Cooldowns: Send + Sync {
    /// Cools `account` for `duration` from now, for `cause` (unless it is already cooling for
    /// longer).
    async fn cool(&self, account: &str, duration: Duration, cause: CoolCause) -> StoreResult<()>;

    /// For each account, its cooldown in progress (`None`: not cooling). One round trip.
    async fn remaining(&self, accounts: &[&str]) -> StoreResult<Vec<Option<Cooldown>>>;
}
