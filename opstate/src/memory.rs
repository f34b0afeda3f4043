//! The in-memory backend: one process, lost on restart. Used by the embedded default and tests.
//! Mutexes are held only for map operations, never across an `.await`.

use crate::counters::{WindowCounters, WindowHit};
use crate::error::{StoreError, StoreResult};
use crate::keys::{KeyDirectory, KeyRecord};
use crate::usage::{StreamEntry, UsageEvent, UsageStream};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

/// In-memory implementation of every store capability.
#[derive(Default)]
pub struct MemoryStore {
    keys: RwLock<KeyState>,
    usage: Mutex<UsageState>,
    /// Counter name → (window index, count).
    counters: Mutex<HashMap<String, (u64, u64)>>,
}

#[derive(Default)]
struct KeyState {
    records: HashMap<String, KeyRecord>,
    loaded: bool,
}

#[derive(Default)]
struct UsageState {
    next_seq: u64,
    /// Unacknowledged entries by sequence: the event and, once delivered, who has it since when.
    entries: BTreeMap<u64, (UsageEvent, Option<(String, Instant)>)>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn usage(&self) -> StoreResult<MutexGuard<'_, UsageState>> {
        self.usage
            .lock()
            .map_err(|_| StoreError::Unavailable("usage stream lock poisoned".into()))
    }
}

fn poisoned<T>(_: T) -> StoreError {
    StoreError::Unavailable("key directory lock poisoned".into())
}

#[async_trait]
impl KeyDirectory for MemoryStore {
    async fn lookup(&self, key_hash: &str) -> StoreResult<Option<KeyRecord>> {
        Ok(self
            .keys
            .read()
            .map_err(poisoned)?
            .records
            .get(key_hash)
            .cloned())
    }

    async fn publish(&self, key_hash: &str, record: &KeyRecord) -> StoreResult<()> {
        self.keys
            .write()
            .map_err(poisoned)?
            .records
            .insert(key_hash.to_string(), record.clone());
        Ok(())
    }

    async fn revoke(&self, key_hash: &str) -> StoreResult<()> {
        self.keys
            .write()
            .map_err(poisoned)?
            .records
            .remove(key_hash);
        Ok(())
    }

    async fn load(&self, entries: &[(String, KeyRecord)]) -> StoreResult<()> {
        let mut keys = self.keys.write().map_err(poisoned)?;
        for (hash, record) in entries {
            keys.records.insert(hash.clone(), record.clone());
        }
        keys.loaded = true;
        Ok(())
    }

    async fn is_loaded(&self) -> StoreResult<bool> {
        Ok(self.keys.read().map_err(poisoned)?.loaded)
    }
}

#[async_trait]
impl UsageStream for MemoryStore {
    async fn append(&self, event: &UsageEvent) -> StoreResult<()> {
        let mut u = self.usage()?;
        u.next_seq += 1;
        let seq = u.next_seq;
        u.entries.insert(seq, (event.clone(), None));
        Ok(())
    }

    async fn claim(
        &self,
        consumer: &str,
        max: usize,
        min_idle: Duration,
    ) -> StoreResult<Vec<StreamEntry>> {
        let now = Instant::now();
        let mut u = self.usage()?;
        let mut out = Vec::new();
        // Stale deliveries first, then never-delivered entries, each in stream order.
        for pass in [true, false] {
            for (seq, (event, owner)) in u.entries.iter_mut() {
                if out.len() >= max {
                    break;
                }
                let take = match owner {
                    Some((_, since)) => pass && now.duration_since(*since) >= min_idle,
                    None => !pass,
                };
                if take {
                    *owner = Some((consumer.to_string(), now));
                    out.push(StreamEntry {
                        id: seq.to_string(),
                        event: event.clone(),
                    });
                }
            }
        }
        Ok(out)
    }

    async fn ack(&self, ids: &[String]) -> StoreResult<()> {
        let mut u = self.usage()?;
        for id in ids {
            if let Ok(seq) = id.parse::<u64>() {
                u.entries.remove(&seq);
            }
        }
        Ok(())
    }

    async fn backlog(&self) -> StoreResult<u64> {
        Ok(self.usage()?.entries.len() as u64)
    }
}

#[async_trait]
impl WindowCounters for MemoryStore {
    async fn hit(&self, key: &str, window: Duration) -> StoreResult<WindowHit> {
        let window_ms = u64::try_from(window.as_millis()).unwrap_or(u64::MAX).max(1);
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0);
        let index = now_ms / window_ms;
        let mut counters = self
            .counters
            .lock()
            .map_err(|_| StoreError::Unavailable("counter lock poisoned".into()))?;
        // Forget counters of past windows so the map stays bounded by the active keys.
        if counters.len() > 10_000 {
            counters.retain(|_, (w, _)| *w >= index.saturating_sub(1));
        }
        let entry = counters.entry(key.to_string()).or_insert((index, 0));
        if entry.0 != index {
            *entry = (index, 0);
        }
        entry.1 += 1;
        Ok(WindowHit {
            count: entry.1,
            resets_in: Duration::from_millis((index + 1) * window_ms - now_ms),
        })
    }
}
