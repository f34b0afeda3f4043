//! Key records kept in the proxy's memory for a short while ([`KeyCache`]), so a call does not
//! ask the store who its key belongs to each time; [`KeyCache::through`] puts it in front of a
//! [`KeyDirectory`].
//!
//! Freshness: every change of the directory (a key published or revoked, the directory reloaded)
//! is announced on the store's key channel (Redis pub/sub, [`crate::RedisStore::watch_keys`]), and
//! the announcement evicts the record at once; a proxy that lost the channel forgets everything it
//! kept and keeps nothing until it listens again. The TTL bounds what is left; and since
//! admission checks the key against the directory in its own store step (`Limits::key`), a kept
//! record never lets a revoked key's call through.
//! Unknown keys are never kept (a new key works at once). The map holds at most
//! [`MAX_ENTRIES`] records (cleared whole when full).

use crate::error::StoreResult;
use crate::keys::{KeyDirectory, KeyRecord};
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::RwLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Records kept at most.
pub const MAX_ENTRIES: usize = 100_000;

/// Key records kept in memory (see the module).
pub struct KeyCache {
    ttl: Duration,
    entries: RwLock<HashMap<String, (KeyRecord, Instant)>>,
    /// Whether the change channel is being listened to; nothing is kept while it is not.
    listening: AtomicBool,
    /// Changes seen so far: a record read from the store while a change arrived is not kept (it
    /// may predate the change).
    changes: AtomicU64,
}

impl KeyCache {
    pub fn new(ttl: Duration) -> KeyCache {
        KeyCache {
            ttl,
            entries: RwLock::new(HashMap::new()),
            listening: AtomicBool::new(false),
            changes: AtomicU64::new(0),
        }
    }

    /// The change channel is (or is no longer) listened to. Either way what was kept may have
    /// missed a change: it is forgotten.
    pub fn listening(&self, on: bool) {
        self.listening.store(on, Ordering::SeqCst);
        self.clear();
    }

    /// A change of the directory was announced: `key_hash`, or everything for `*`.
    pub fn changed(&self, key_hash: &str) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        if key_hash == "*" {
            self.clear();
        } else if let Ok(mut entries) = self.entries.write() {
            entries.remove(key_hash);
        }
    }

    /// Forgets every record.
    pub fn clear(&self) {
        self.changes.fetch_add(1, Ordering::SeqCst);
        if let Ok(mut entries) = self.entries.write() {
            entries.clear();
        }
    }

    /// Records kept now.
    pub fn len(&self) -> usize {
        self.entries.read().map_or(0, |e| e.len())
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn kept(&self, key_hash: &str) -> Option<KeyRecord> {
        let entries = self.entries.read().ok()?;
        let (record, at) = entries.get(key_hash)?;
        (at.elapsed() < self.ttl).then(|| record.clone())
    }

    fn keep(&self, key_hash: &str, record: &KeyRecord, seen: u64) {
        if self.ttl.is_zero() || !self.listening.load(Ordering::SeqCst) {
            return;
        }
        if let Ok(mut entries) = self.entries.write() {
            // Checked under the lock `changed` takes: no change slips between check and insert.
            if self.changes.load(Ordering::SeqCst) != seen {
                return;
            }
            if entries.len() >= MAX_ENTRIES {
                entries.clear();
            }
            entries.insert(key_hash.to_string(), (record.clone(), Instant::now()));
        }
    }
}

impl KeyCache {
    /// `inner` with this cache in front.
    pub fn through<'a>(&'a self, inner: &'a dyn KeyDirectory) -> CachedKeys<'a> {
        CachedKeys { cache: self, inner }
    }
}

/// A key directory with the cache in front: lookups are answered from the cache when they can,
/// writes go through and evict.
pub struct CachedKeys<'a> {
    cache: &'a KeyCache,
    inner: &'a dyn KeyDirectory,
}

#[async_trait]
impl KeyDirectory for CachedKeys<'_> {
    async fn lookup(&self, key_hash: &str) -> StoreResult<Option<KeyRecord>> {
        if let Some(record) = self.cache.kept(key_hash) {
            return Ok(Some(record));
        }
        let seen = self.cache.changes.load(Ordering::SeqCst);
        let found = self.inner.lookup(key_hash).await?;
        if let Some(record) = &found {
            self.cache.keep(key_hash, record, seen);
        }
        Ok(found)
    }

    async fn publish(&self, key_hash: &str, record: &KeyRecord) -> StoreResult<()> {
        self.cache.changed(key_hash);
        self.inner.publish(key_hash, record).await
    }

    async fn revoke(&self, key_hash: &str) -> StoreResult<()> {
        self.cache.changed(key_hash);
        self.inner.revoke(key_hash).await?;
        self.cache.changed(key_hash);
        Ok(())
    }

    async fn load(&self, entries: &[(String, KeyRecord)]) -> StoreResult<()> {
        self.cache.clear();
        self.inner.load(entries).await
    }

    async fn is_loaded(&self) -> StoreResult<bool> {
        self.inner.is_loaded().await
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]
    use super::*;
    use crate::MemoryStore;
    use crate::keys::{KeyLimits, KeyPermissions};

    fn record(org_id: i64) -> KeyRecord {
        KeyRecord {
            key_id: 1,
            org_id,
            group_id: 1,
            permissions: KeyPermissions::default(),
            rate: None,
            expires_at: None,
            limits: KeyLimits::default(),
            budget: None,
        }
    }

    /// A directory behind the cache, changed without the cache knowing (another process).
    fn setup(ttl_ms: u64) -> (MemoryStore, KeyCache) {
        (
            MemoryStore::default(),
            KeyCache::new(Duration::from_millis(ttl_ms)),
        )
    }

    #[tokio::test]
    async fn a_revocation_missed_by_the_channel_lasts_at_most_the_ttl() {
        let (inner, cache) = setup(150);
        cache.listening(true);
        inner.publish("h", &record(1)).await.unwrap();
        assert_eq!(
            cache.through(&inner).lookup("h").await.unwrap(),
            Some(record(1))
        );
        inner.revoke("h").await.unwrap();
        // Kept: the announcement was missed.
        assert_eq!(
            cache.through(&inner).lookup("h").await.unwrap(),
            Some(record(1))
        );
        tokio::time::sleep(Duration::from_millis(160)).await;
        assert_eq!(
            cache.through(&inner).lookup("h").await.unwrap(),
            None,
            "past the TTL the store decides"
        );
    }

    #[tokio::test]
    async fn an_announced_change_evicts_at_once_and_unknown_keys_are_never_kept() {
        let (inner, cache) = setup(60_000);
        cache.listening(true);
        assert_eq!(cache.through(&inner).lookup("h").await.unwrap(), None);
        inner.publish("h", &record(1)).await.unwrap();
        assert_eq!(
            cache.through(&inner).lookup("h").await.unwrap(),
            Some(record(1)),
            "new keys work at once"
        );
        inner.publish("h", &record(2)).await.unwrap();
        cache.changed("h");
        assert_eq!(
            cache.through(&inner).lookup("h").await.unwrap(),
            Some(record(2))
        );
        inner.revoke("h").await.unwrap();
        cache.changed("*");
        assert_eq!(cache.through(&inner).lookup("h").await.unwrap(), None);
        assert!(cache.is_empty());
    }

    #[tokio::test]
    async fn nothing_is_kept_while_the_channel_is_not_listened_to() {
        let (inner, cache) = setup(60_000);
        inner.publish("h", &record(1)).await.unwrap();
        assert_eq!(
            cache.through(&inner).lookup("h").await.unwrap(),
            Some(record(1))
        );
        assert!(cache.is_empty(), "not listening: not kept");
        cache.listening(true);
        cache.through(&inner).lookup("h").await.unwrap();
        assert_eq!(cache.len(), 1);
        cache.listening(false);
        assert!(cache.is_empty(), "the channel lost: everything forgotten");
    }

    /// A record read before a change but stored after it would outlive the change: not kept.
    #[test]
    fn a_record_read_across_a_change_is_not_kept() {
        let (_inner, cache) = setup(60_000);
        cache.listening(true);
        let seen = cache.changes.load(Ordering::SeqCst);
        cache.changed("h");
        cache.keep("h", &record(1), seen);
        assert!(cache.is_empty());
    }
}
