//! Sticky sessions: which account a conversation last used, per organization, for a while.
//!
//! Rendezvous hashing already sends a session to the same account from every instance; the record
//! keeps a session on the account it moved to after a failover (its prompt cache lives there)
//! instead of moving back when the first choice recovers. Records expire by themselves.

use crate::error::StoreResult;
use async_trait::async_trait;
use std::time::Duration;

/// Session → account records with a TTL.
#[async_trait]
pub trait Sessions: Send + Sync {
    /// The account `session` of `org` last used, if the record is alive.
    async fn account_of(&self, org: i64, session: &str) -> StoreResult<Option<String>>;

    /// Records (and refreshes for `ttl`) the account `session` of `org` uses.
    async fn remember(
        &self,
        org: i64,
        session: &str,
        account: &str,
        ttl: Duration,
    ) -> StoreResult<()>;
}
