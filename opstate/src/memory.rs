//! The in-memory backend: one process, lost on restart. Used by the embedded default and tests.
//! Mutexes are held only for map operations, never across an `.await`.

use crate::budget::{HoldTag, OverBudget, SpendAsk, Windows};
use crate::calls::{Limited, Limits, MINUTE};
use crate::clock::{Clock, StoreClock};
use crate::cooldowns::{CoolCause, Cooldown, Cooldowns};
use crate::counters::{WindowCounters, WindowHit};
use crate::error::{StoreError, StoreResult};
use crate::keys::{KeyDirectory, KeyRecord};
use crate::media::{MEMORY_MEDIA_CAP, Media, MediaFile};
use crate::sessions::Sessions;
use crate::usage::{StreamEntry, UsageEvent, UsageStream};
use crate::wallet_state::{WalletState, overflow};
use crate::wallets::Reservation;
use async_trait::async_trait;
use money::NanoUsd;
use std::collections::HashSet;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

/// In-memory implementation of every store capability.
#[derive(Default)]
pub struct MemoryStore {
    pub(crate) clock: StoreClock,
    /// The clock's reading and the wall clock's at creation: the budget windows' calendar.
    pub(crate) epoch: Epoch,
    pub(crate) keys: RwLock<KeyState>,
    pub(crate) usage: Mutex<UsageState>,
    /// Counter name → (window index, count).
    pub(crate) counters: Mutex<HashMap<String, (u64, u64)>>,
    pub(crate) wallets: Mutex<HashMap<i64, WalletState>>,
    pub(crate) holding: Mutex<HashSet<i64>>,
    pub(crate) cooldowns: Mutex<HashMap<String, (Instant, CoolCause)>>,
    pub(crate) sessions: Mutex<HashMap<(i64, String), (String, Instant)>>,
    /// account → slot id → expiry
    pub(crate) slots: Mutex<HashMap<String, HashMap<String, Instant>>>,
    /// gate → slot id → expiry (the calls' limits, `crate::calls::Limits`)
    pub(crate) gates: Mutex<HashMap<String, HashMap<String, Instant>>>,
    /// per-minute counter → (start of its current minute, calls admitted in it)
    pub(crate) minutes: Mutex<HashMap<String, (Instant, u32)>>,
    /// Hosted media: id → (file, expiry).
    pub(crate) media: Mutex<HashMap<String, (MediaFile, Instant)>>,
    /// The usage stream's settler leases (`crate::leases`).
    pub(crate) leases: Mutex<crate::leases::MemoryLeases>,
}

/// A monotonic instant and the wall-clock time at it.
#[derive(Clone, Copy)]
pub(crate) struct Epoch(Instant, std::time::SystemTime);

impl Default for Epoch {
    fn default() -> Epoch {
        Epoch(Instant::now(), std::time::SystemTime::now())
    }
}

#[derive(Default)]
pub(crate) struct KeyState {
    pub(crate) records: HashMap<String, KeyRecord>,
    pub(crate) loaded: bool,
}

#[derive(Default)]
pub(crate) struct UsageState {
    pub(crate) next_seq: u64,
    /// Unacknowledged entries by sequence: the event and, once delivered, who has it since when.
    pub(crate) entries: BTreeMap<u64, (UsageEvent, Option<(String, Instant)>)>,
}

impl MemoryStore {
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    /// A store whose deadlines run on `clock` (tests advance a [`crate::ManualClock`]).
    pub fn with_clock(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            epoch: Epoch(clock.now(), std::time::SystemTime::now()),
            clock: StoreClock(clock),
            ..MemoryStore::default()
        }
    }

    pub(crate) fn now(&self) -> Instant {
        self.clock.0.now()
    }

    /// The store's clock as Unix milliseconds (the budget windows' calendar).
    pub(crate) fn unix_ms(&self) -> i64 {
        let Epoch(at, wall) = self.epoch;
        let since = self.now().saturating_duration_since(at);
        let wall = wall + since;
        wall.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// [`Wallets::reserve`], with the key's spend counted and its budget checked in the same
    /// step (`crate::budget`). `Err`: refused by the budget, nothing taken.
    pub(crate) fn reserve_for(
        &self,
        org: i64,
        hold_id: &str,
        amount: NanoUsd,
        ttl_ms: u64,
        meta: &str,
        spend: Option<SpendAsk>,
    ) -> StoreResult<Result<Reservation, OverBudget>> {
        if amount.is_negative() {
            return Err(StoreError::Corrupt("negative hold amount".into()));
        }
        if let Ok(mut h) = self.holding.lock() {
            h.insert(org);
        }
        let unix_ms = self.unix_ms();
        let mut w = self.wallets()?;
        let Some(wallet) = w.get_mut(&org).filter(|w| w.present) else {
            return Ok(Ok(Reservation::Missing));
        };
        if wallet.holds.contains_key(hold_id) {
            return Ok(Ok(Reservation::AlreadyHeld));
        }
        let windows = Windows::at(unix_ms);
        if let Some(SpendAsk {
            key_id,
            budget: Some(budget),
        }) = spend
        {
            let now = wallet
                .spend
                .get(&key_id)
                .copied()
                .unwrap_or_default()
                .at(&windows);
            let after = now
                .spent(budget.period)
                .checked_add(now.held)
                .and_then(|v| v.checked_add(amount))
                .ok_or_else(overflow)?;
            if after > budget.limit {
                return Ok(Err(OverBudget {
                    resets_in: windows.resets_in(budget.period, unix_ms),
                    remaining: now.remaining(budget),
                }));
            }
        }
        let available = wallet.available()?;
        if amount > available {
            return Ok(Ok(Reservation::Insufficient { available }));
        }
        let deadline = self.now() + Duration::from_millis(ttl_ms);
        wallet.holds.insert(hold_id.to_string(), (amount, deadline));
        if !meta.is_empty() {
            wallet.meta.insert(hold_id.to_string(), meta.to_string());
        }
        if let Some(ask) = spend {
            let c = wallet.spend.entry(ask.key_id).or_default();
            c.held = c.held.checked_add(amount).ok_or_else(overflow)?;
            wallet.tags.insert(
                hold_id.to_string(),
                HoldTag {
                    key_id: ask.key_id,
                    day: windows.day,
                    month: windows.month,
                },
            );
        }
        Ok(Ok(Reservation::Held {
            available: available.checked_sub(amount).ok_or_else(overflow)?,
        }))
    }

    /// Takes slot `slot_id` in every gate of `limits` and counts the call in its minute, all or
    /// nothing. `Some`: the limit that refused (nothing taken).
    pub(crate) fn take_limits(
        &self,
        limits: Limits<'_>,
        slot_id: &str,
        ttl: Duration,
    ) -> StoreResult<Option<Limited>> {
        let now = self.now();
        let poisoned = || StoreError::Unavailable("limit lock poisoned".into());
        let mut gates = self.gates.lock().map_err(|_| poisoned())?;
        for (i, gate) in limits.gates.iter().enumerate() {
            let live = gates.entry(gate.gate.to_string()).or_default();
            live.retain(|_, until| *until > now);
            if !live.contains_key(slot_id) && live.len() >= gate.max as usize {
                return Ok(Some(Limited::Gate(i)));
            }
        }
        if let Some(rate) = limits.per_minute {
            let mut minutes = self.minutes.lock().map_err(|_| poisoned())?;
            if minutes.len() > 10_000 {
                minutes.retain(|_, (start, _)| now.duration_since(*start) < MINUTE);
            }
            let (start, count) = minutes.entry(rate.counter.to_string()).or_insert((now, 0));
            if now.duration_since(*start) >= MINUTE {
                (*start, *count) = (now, 0);
            }
            if *count >= rate.limit {
                let resets_in = MINUTE.saturating_sub(now.duration_since(*start));
                return Ok(Some(Limited::PerMinute { resets_in }));
            }
            *count += 1;
        }
        for gate in limits.gates {
            gates
                .entry(gate.gate.to_string())
                .or_default()
                .insert(slot_id.to_string(), now + ttl);
        }
        Ok(None)
    }

    /// Gives back what [`MemoryStore::take_limits`] took for a call that was not admitted.
    pub(crate) fn give_limits_back(&self, limits: Limits<'_>, slot_id: &str) -> StoreResult<()> {
        let names: Vec<&str> = limits.gates.iter().map(|g| g.gate).collect();
        self.release_gates(&names, slot_id)?;
        if let Some(rate) = limits.per_minute {
            let mut minutes = self
                .minutes
                .lock()
                .map_err(|_| StoreError::Unavailable("limit lock poisoned".into()))?;
            if let Some((_, count)) = minutes.get_mut(rate.counter) {
                *count = count.saturating_sub(1);
            }
        }
        Ok(())
    }

    pub(crate) fn release_gates(&self, gates: &[&str], slot_id: &str) -> StoreResult<()> {
        if gates.is_empty() {
            return Ok(());
        }
        let mut all = self
            .gates
            .lock()
            .map_err(|_| StoreError::Unavailable("limit lock poisoned".into()))?;
        for gate in gates {
            if let Some(live) = all.get_mut(*gate) {
                live.remove(slot_id);
            }
        }
        Ok(())
    }

    pub(crate) fn usage(&self) -> StoreResult<MutexGuard<'_, UsageState>> {
        self.usage
            .lock()
            .map_err(|_| StoreError::Unavailable("usage stream lock poisoned".into()))
    }
}

pub(crate) fn poisoned<T>(_: T) -> StoreError {
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
        let now = self.now();
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

    async fn pending(&self, home: usize) -> StoreResult<Vec<UsageEvent>> {
        if home != 0 {
            return Ok(Vec::new());
        }
        Ok(self
            .usage()?
            .entries
            .values()
            .filter(|(_, owner)| owner.is_some())
            .map(|(event, _)| event.clone())
            .take(10_000)
            .collect())
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

#[async_trait]
impl Cooldowns for MemoryStore {
    async fn cool(&self, account: &str, duration: Duration, cause: CoolCause) -> StoreResult<()> {
        let until = self.now() + duration;
        let mut c = self
            .cooldowns
            .lock()
            .map_err(|_| StoreError::Unavailable("cooldown lock poisoned".into()))?;
        let entry = c.entry(account.to_string()).or_insert((until, cause));
        if entry.0 < until {
            *entry = (until, cause);
        }
        Ok(())
    }

    async fn remaining(&self, accounts: &[&str]) -> StoreResult<Vec<Option<Cooldown>>> {
        let now = self.now();
        let c = self
            .cooldowns
            .lock()
            .map_err(|_| StoreError::Unavailable("cooldown lock poisoned".into()))?;
        Ok(accounts
            .iter()
            .map(|a| {
                let (until, cause) = c.get(*a)?;
                let left = until.checked_duration_since(now).filter(|d| !d.is_zero())?;
                Some(Cooldown {
                    left,
                    cause: *cause,
                })
            })
            .collect())
    }
}

#[async_trait]
impl Sessions for MemoryStore {
    async fn account_of(&self, org: i64, session: &str) -> StoreResult<Option<String>> {
        let s = self
            .sessions
            .lock()
            .map_err(|_| StoreError::Unavailable("session lock poisoned".into()))?;
        Ok(s.get(&(org, session.to_string()))
            .filter(|(_, until)| *until > self.now())
            .map(|(a, _)| a.clone()))
    }

    async fn remember(
        &self,
        org: i64,
        session: &str,
        account: &str,
        ttl: Duration,
    ) -> StoreResult<()> {
        let mut s = self
            .sessions
            .lock()
            .map_err(|_| StoreError::Unavailable("session lock poisoned".into()))?;
        let now = self.now();
        if s.len() > 100_000 {
            s.retain(|_, (_, until)| *until > now);
        }
        s.insert((org, session.to_string()), (account.to_string(), now + ttl));
        Ok(())
    }
}

#[async_trait]
impl Media for MemoryStore {
    async fn put(&self, id: &str, file: &MediaFile, ttl: Duration) -> StoreResult<()> {
        let mut m = self
            .media
            .lock()
            .map_err(|_| StoreError::Unavailable("media lock poisoned".into()))?;
        let now = self.now();
        m.retain(|_, (_, until)| *until > now);
        m.remove(id);
        let held: usize = m.values().map(|(f, _)| f.bytes.len()).sum();
        if held + file.bytes.len() > MEMORY_MEDIA_CAP {
            return Err(StoreError::Unavailable("media store full".into()));
        }
        m.insert(id.to_string(), (file.clone(), now + ttl));
        Ok(())
    }

    async fn get(&self, id: &str) -> StoreResult<Option<MediaFile>> {
        let m = self
            .media
            .lock()
            .map_err(|_| StoreError::Unavailable("media lock poisoned".into()))?;
        Ok(m.get(id)
            .filter(|(_, until)| *until > self.now())
            .map(|(f, _)| f.clone()))
    }

    async fn put_new(
        &self,
        id: &str,
        file: &MediaFile,
        ttl: Duration,
    ) -> StoreResult<Option<MediaFile>> {
        let mut m = self
            .media
            .lock()
            .map_err(|_| StoreError::Unavailable("media lock poisoned".into()))?;
        let now = self.now();
        if let Some((existing, until)) = m.get(id)
            && *until > now
        {
            return Ok(Some(existing.clone()));
        }
        m.retain(|_, (_, until)| *until > now);
        let held: usize = m.values().map(|(f, _)| f.bytes.len()).sum();
        if held + file.bytes.len() > MEMORY_MEDIA_CAP {
            return Err(StoreError::Unavailable("media store full".into()));
        }
        m.insert(id.to_string(), (file.clone(), now + ttl));
        Ok(None)
    }

    async fn remove(&self, id: &str) -> StoreResult<()> {
        self.media
            .lock()
            .map_err(|_| StoreError::Unavailable("media lock poisoned".into()))?
            .remove(id);
        Ok(())
    }

    async fn touch(&self, id: &str, content_type: &str, ttl: Duration) -> StoreResult<bool> {
        let mut m = self
            .media
            .lock()
            .map_err(|_| StoreError::Unavailable("media lock poisoned".into()))?;
        let now = self.now();
        match m.get_mut(id) {
            Some((file, until)) if *until > now && file.content_type == content_type => {
                *until = now + ttl;
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}
