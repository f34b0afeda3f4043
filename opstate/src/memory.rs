//! The in-memory backend: one process, lost on restart. Used by the embedded default and tests.
//! Mutexes are held only for map operations, never across an `.await`.

use crate::budget::{
    BudgetPeriod, HoldTag, OverBudget, SpendAsk, SpendCounters, SpendReport, Windows,
};
use crate::calls::{Admitted, Calls, Finish, HoldAsk, Limited, Limits, MINUTE, SlotAsk, charged};
use crate::clock::{Clock, StoreClock};
use crate::cooldowns::{CoolCause, Cooldown, Cooldowns};
use crate::counters::{WindowCounters, WindowHit};
use crate::error::{StoreError, StoreResult};
use crate::keys::{KeyDirectory, KeyRecord};
use crate::media::{MEMORY_MEDIA_CAP, Media, MediaFile};
use crate::sessions::Sessions;
use crate::slots::Slots;
use crate::usage::{StreamEntry, UsageEvent, UsageStream};
use crate::wallets::{
    Adjustment, Confirmation, ExpiredHold, Reservation, Settlement, WalletSnapshot, Wallets,
};
use async_trait::async_trait;
use money::NanoUsd;
use std::collections::HashSet;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, RwLock};
use std::time::{Duration, Instant};

/// In-memory implementation of every store capability.
#[derive(Default)]
pub struct MemoryStore {
    clock: StoreClock,
    /// The clock's reading and the wall clock's at creation: the budget windows' calendar.
    epoch: Epoch,
    keys: RwLock<KeyState>,
    usage: Mutex<UsageState>,
    /// Counter name → (window index, count).
    counters: Mutex<HashMap<String, (u64, u64)>>,
    wallets: Mutex<HashMap<i64, WalletState>>,
    holding: Mutex<HashSet<i64>>,
    cooldowns: Mutex<HashMap<String, (Instant, CoolCause)>>,
    sessions: Mutex<HashMap<(i64, String), (String, Instant)>>,
    /// account → slot id → expiry
    slots: Mutex<HashMap<String, HashMap<String, Instant>>>,
    /// gate → slot id → expiry (the calls' limits, `crate::calls::Limits`)
    gates: Mutex<HashMap<String, HashMap<String, Instant>>>,
    /// per-minute counter → (start of its current minute, calls admitted in it)
    minutes: Mutex<HashMap<String, (Instant, u32)>>,
    /// Hosted media: id → (file, expiry).
    media: Mutex<HashMap<String, (MediaFile, Instant)>>,
}

/// A monotonic instant and the wall-clock time at it.
#[derive(Clone, Copy)]
struct Epoch(Instant, std::time::SystemTime);

impl Default for Epoch {
    fn default() -> Epoch {
        Epoch(Instant::now(), std::time::SystemTime::now())
    }
}

#[derive(Default)]
struct WalletState {
    present: bool,
    balance: NanoUsd,
    /// hold id → (amount, deadline)
    holds: HashMap<String, (NanoUsd, Instant)>,
    /// hold id → the gateway's description of the call
    meta: HashMap<String, String>,
    adjusted: HashSet<String>,
    pending: NanoUsd,
    /// Holds charged in this incarnation and not yet confirmed: hold id → amount.
    charged: HashMap<String, NanoUsd>,
    /// Charges confirmed in the last [`CONFIRMED_RETENTION`] (see [`Confirmed`]).
    confirmed: Confirmed,
    /// A settlement found the mirror below its open holds; cleared by the next load.
    unreconciled: bool,
    /// hold id → its key and admission windows (holds of a key's call, `crate::budget`).
    tags: HashMap<String, HoldTag>,
    /// key id → its spend counters.
    spend: HashMap<i64, SpendCounters>,
}

/// How long a confirmed charge's id is remembered. The settler marks each usage record whose
/// charge it confirmed (`usage_records.mirror_confirmed`) and never confirms a marked one again;
/// this memory covers only the moment between the confirmation and that mark (a redelivery comes
/// after the settler's 30 s claim timeout), so a minute is ample, and memory stays bounded by a
/// minute of traffic instead of growing with every request served.
const CONFIRMED_RETENTION: Duration = Duration::from_secs(60);
/// Confirmed ids are kept in buckets of this span, dropped whole once older than the retention.
const CONFIRMED_BUCKET: Duration = Duration::from_secs(15);

/// Recently confirmed charge ids, as 128-bit keys in time buckets (16 bytes per id, no allocation
/// per id): a request id (32 hexadecimal digits) is its own key, any other id a 128-bit hash.
#[derive(Default)]
struct Confirmed {
    buckets: std::collections::VecDeque<(Instant, HashSet<u128>)>,
}

impl Confirmed {
    /// Records a confirmed charge; `false` when it was confirmed within the retention.
    fn insert(&mut self, hold_id: &str, now: Instant) -> bool {
        while self.buckets.front().is_some_and(|(start, _)| {
            now.duration_since(*start) >= CONFIRMED_RETENTION + CONFIRMED_BUCKET
        }) {
            self.buckets.pop_front();
        }
        let key = confirmed_key(hold_id);
        if self.buckets.iter().any(|(_, ids)| ids.contains(&key)) {
            return false;
        }
        match self.buckets.back_mut() {
            Some((start, ids)) if now.duration_since(*start) < CONFIRMED_BUCKET => {
                ids.insert(key);
            }
            _ => self.buckets.push_back((now, HashSet::from([key]))),
        }
        true
    }

    /// Ids remembered now.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.buckets.iter().map(|(_, ids)| ids.len()).sum()
    }
}

/// The 128-bit key of a hold id.
fn confirmed_key(hold_id: &str) -> u128 {
    if hold_id.len() == 32
        && let Ok(key) = u128::from_str_radix(hold_id, 16)
    {
        return key;
    }
    use std::hash::{BuildHasher, Hasher};
    let half = |seed: u64| {
        let mut h =
            std::hash::BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default()
                .build_hasher();
        h.write_u64(seed);
        h.write(hold_id.as_bytes());
        h.finish()
    };
    (u128::from(half(0x5157)) << 64) | u128::from(half(0x7a11))
}

impl WalletState {
    /// Records a confirmed charge; `false` when it was confirmed before (within the retention).
    fn remember_confirmed(&mut self, hold_id: &str, now: Instant) -> bool {
        self.confirmed.insert(hold_id, now)
    }
}

impl WalletState {
    /// Takes a closed hold's tag off its key's held amount and counts what it charged.
    fn close_tag(&mut self, hold_id: &str, amount: NanoUsd, charged: NanoUsd) {
        if let Some(tag) = self.tags.remove(hold_id) {
            let c = self.spend.entry(tag.key_id).or_default();
            c.held = c
                .held
                .checked_sub(amount)
                .filter(|h| !h.is_negative())
                .unwrap_or(NanoUsd::ZERO);
            c.count(tag, charged);
        }
    }

    fn reserved(&self) -> StoreResult<NanoUsd> {
        NanoUsd::checked_sum(self.holds.values().map(|(a, _)| *a)).ok_or_else(overflow)
    }

    /// Balance minus open holds.
    fn available(&self) -> StoreResult<NanoUsd> {
        self.balance
            .checked_sub(self.reserved()?)
            .ok_or_else(overflow)
    }
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

    /// A store whose deadlines run on `clock` (tests advance a [`crate::ManualClock`]).
    pub fn with_clock(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            epoch: Epoch(clock.now(), std::time::SystemTime::now()),
            clock: StoreClock(clock),
            ..MemoryStore::default()
        }
    }

    fn now(&self) -> Instant {
        self.clock.0.now()
    }

    /// The store's clock as Unix milliseconds (the budget windows' calendar).
    fn unix_ms(&self) -> i64 {
        let Epoch(at, wall) = self.epoch;
        let since = self.now().saturating_duration_since(at);
        let wall = wall + since;
        wall.duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
    }

    /// [`Wallets::reserve`], with the key's spend counted and its budget checked in the same
    /// step (`crate::budget`). `Err`: refused by the budget, nothing taken.
    fn reserve_for(
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
    fn take_limits(
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
    fn give_limits_back(&self, limits: Limits<'_>, slot_id: &str) -> StoreResult<()> {
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

    fn release_gates(&self, gates: &[&str], slot_id: &str) -> StoreResult<()> {
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

    fn usage(&self) -> StoreResult<MutexGuard<'_, UsageState>> {
        self.usage
            .lock()
            .map_err(|_| StoreError::Unavailable("usage stream lock poisoned".into()))
    }
}

/// An amount outside 64-bit nano-USD: the mirror is broken, never wrapped.
fn overflow() -> StoreError {
    StoreError::Corrupt("wallet amount overflow".into())
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

impl MemoryStore {
    fn wallets(&self) -> StoreResult<MutexGuard<'_, HashMap<i64, WalletState>>> {
        self.wallets
            .lock()
            .map_err(|_| StoreError::Unavailable("wallet lock poisoned".into()))
    }
}

#[async_trait]
impl Wallets for MemoryStore {
    async fn load(&self, org: i64, balance: NanoUsd) -> StoreResult<()> {
        let mut w = self.wallets()?;
        let wallet = w.entry(org).or_default();
        wallet.present = true;
        wallet.balance = balance;
        wallet.pending = NanoUsd::ZERO;
        wallet.charged.clear();
        wallet.unreconciled = false;
        Ok(())
    }

    async fn adjust(&self, org: i64, delta: NanoUsd, reference: &str) -> StoreResult<Adjustment> {
        let mut w = self.wallets()?;
        let Some(wallet) = w.get_mut(&org).filter(|w| w.present) else {
            return Ok(Adjustment::Missing);
        };
        if wallet.adjusted.contains(reference) {
            return Ok(Adjustment::Duplicate);
        }
        let available = wallet.available()?;
        let after = available.checked_add(delta).ok_or_else(overflow)?;
        if delta.is_negative() && after.is_negative() {
            return Ok(Adjustment::Insufficient { available });
        }
        let balance = wallet.balance.checked_add(delta).ok_or_else(overflow)?;
        wallet.adjusted.insert(reference.to_string());
        wallet.balance = balance;
        Ok(Adjustment::Applied {
            balance: wallet.balance,
        })
    }

    async fn reserve(
        &self,
        org: i64,
        hold_id: &str,
        amount: NanoUsd,
        ttl_ms: u64,
        meta: &str,
    ) -> StoreResult<Reservation> {
        self.reserve_for(org, hold_id, amount, ttl_ms, meta, None)?
            .map_err(|_| StoreError::Corrupt("a budget without a key".into()))
    }

    async fn settle(&self, org: i64, hold_id: &str, actual: NanoUsd) -> StoreResult<Settlement> {
        let mut w = self.wallets()?;
        let Some(wallet) = w.get_mut(&org).filter(|w| w.present) else {
            return Ok(Settlement::Missing);
        };
        let Some((amount, _)) = wallet.holds.remove(hold_id) else {
            return Ok(Settlement::Unknown);
        };
        wallet.meta.remove(hold_id);
        let actual = actual.max(NanoUsd::ZERO);
        let payable = wallet.available()?;
        // Below its other holds the mirror can pay nothing: never a negative charge (a credit).
        let below_holds = payable.is_negative();
        if below_holds {
            wallet.unreconciled = true;
        }
        let charged = actual.min(payable.max(NanoUsd::ZERO));
        let excess = actual.checked_sub(charged).ok_or_else(overflow)?;
        wallet.balance = wallet.balance.checked_sub(charged).ok_or_else(overflow)?;
        if charged.is_positive() {
            wallet.pending = wallet.pending.checked_add(charged).ok_or_else(overflow)?;
            wallet.charged.insert(hold_id.to_string(), charged);
        }
        wallet.close_tag(hold_id, amount, charged);
        Ok(Settlement::Settled {
            charged,
            excess,
            below_holds,
        })
    }

    async fn extend(&self, org: i64, hold_id: &str, ttl_ms: u64) -> StoreResult<bool> {
        let deadline = self.now() + Duration::from_millis(ttl_ms);
        let mut w = self.wallets()?;
        Ok(w.get_mut(&org)
            .filter(|w| w.present)
            .and_then(|wallet| wallet.holds.get_mut(hold_id))
            .map(|(_, at)| *at = deadline)
            .is_some())
    }

    async fn release(&self, org: i64, hold_id: &str) -> StoreResult<bool> {
        let mut w = self.wallets()?;
        Ok(w.get_mut(&org).filter(|w| w.present).is_some_and(|wallet| {
            wallet.meta.remove(hold_id);
            match wallet.holds.remove(hold_id) {
                Some((amount, _)) => {
                    wallet.close_tag(hold_id, amount, NanoUsd::ZERO);
                    true
                }
                None => false,
            }
        }))
    }

    async fn confirm(&self, org: i64, hold_id: &str, amount: NanoUsd) -> StoreResult<Confirmation> {
        let mut w = self.wallets()?;
        let Some(wallet) = w.get_mut(&org).filter(|w| w.present) else {
            return Ok(Confirmation::Missing);
        };
        if wallet.charged.remove(hold_id).is_some() {
            wallet.pending = wallet.pending.checked_sub(amount).ok_or_else(overflow)?;
            wallet.remember_confirmed(hold_id, self.now());
            return Ok(Confirmation::Confirmed);
        }
        if !wallet.remember_confirmed(hold_id, self.now()) {
            return Ok(Confirmation::Duplicate);
        }
        wallet.balance = wallet.balance.checked_sub(amount).ok_or_else(overflow)?;
        Ok(Confirmation::Applied)
    }

    async fn expired(&self, org: i64) -> StoreResult<Vec<ExpiredHold>> {
        let now = self.now();
        let w = self.wallets()?;
        let mut out: Vec<ExpiredHold> = w
            .get(&org)
            .filter(|w| w.present)
            .map(|wallet| {
                wallet
                    .holds
                    .iter()
                    .filter(|(_, (_, deadline))| *deadline <= now)
                    .map(|(id, (amount, _))| ExpiredHold {
                        hold_id: id.clone(),
                        amount: *amount,
                        meta: wallet.meta.get(id).cloned().unwrap_or_default(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        out.sort_by(|a, b| a.hold_id.cmp(&b.hold_id));
        Ok(out)
    }

    async fn snapshot(&self, org: i64) -> StoreResult<Option<WalletSnapshot>> {
        let w = self.wallets()?;
        w.get(&org)
            .filter(|w| w.present)
            .map(|wallet| {
                let reserved = wallet.reserved()?;
                Ok(WalletSnapshot {
                    balance: wallet.balance,
                    reserved,
                    pending: wallet.pending,
                    unreconciled: wallet.unreconciled || wallet.balance < reserved,
                })
            })
            .transpose()
    }

    async fn holding_orgs(&self) -> StoreResult<Vec<i64>> {
        let h = self
            .holding
            .lock()
            .map_err(|_| StoreError::Unavailable("holding lock poisoned".into()))?;
        let mut v: Vec<i64> = h.iter().copied().collect();
        v.sort_unstable();
        Ok(v)
    }

    async fn key_spend(&self, org: i64, keys: &[i64]) -> StoreResult<Option<SpendReport>> {
        let unix_ms = self.unix_ms();
        let windows = Windows::at(unix_ms);
        let w = self.wallets()?;
        Ok(w.get(&org).filter(|w| w.present).map(|wallet| SpendReport {
            keys: keys
                .iter()
                .map(|k| {
                    wallet
                        .spend
                        .get(k)
                        .copied()
                        .unwrap_or_default()
                        .at(&windows)
                })
                .collect(),
            day_resets_in: windows.resets_in(BudgetPeriod::Day, unix_ms),
            month_resets_in: windows.resets_in(BudgetPeriod::Month, unix_ms),
        }))
    }

    async fn load_key_spend(
        &self,
        org: i64,
        windows: Windows,
        spends: &[(i64, NanoUsd, NanoUsd)],
    ) -> StoreResult<()> {
        let mut w = self.wallets()?;
        let wallet = w.entry(org).or_default();
        for (key, day, month) in spends {
            let c = wallet.spend.entry(*key).or_default();
            c.day.get_or_insert((windows.day, *day));
            c.month.get_or_insert((windows.month, *month));
        }
        Ok(())
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
}

#[async_trait]
impl Slots for MemoryStore {
    async fn acquire(
        &self,
        account: &str,
        slot_id: &str,
        max: u32,
        ttl: Duration,
    ) -> StoreResult<bool> {
        let now = self.now();
        let mut s = self
            .slots
            .lock()
            .map_err(|_| StoreError::Unavailable("slot lock poisoned".into()))?;
        let live = s.entry(account.to_string()).or_default();
        live.retain(|_, until| *until > now);
        if live.contains_key(slot_id) {
            return Ok(true);
        }
        if live.len() >= max as usize {
            return Ok(false);
        }
        live.insert(slot_id.to_string(), now + ttl);
        Ok(true)
    }

    async fn release(&self, account: &str, slot_id: &str) -> StoreResult<()> {
        let mut s = self
            .slots
            .lock()
            .map_err(|_| StoreError::Unavailable("slot lock poisoned".into()))?;
        if let Some(live) = s.get_mut(account) {
            live.remove(slot_id);
        }
        Ok(())
    }

    async fn in_use(&self, accounts: &[&str]) -> StoreResult<Vec<u32>> {
        let now = self.now();
        let s = self
            .slots
            .lock()
            .map_err(|_| StoreError::Unavailable("slot lock poisoned".into()))?;
        Ok(accounts
            .iter()
            .map(|a| {
                s.get(*a)
                    .map(|live| live.values().filter(|until| **until > now).count() as u32)
                    .unwrap_or(0)
            })
            .collect())
    }
}

/// The same steps as the Redis scripts, one after the other (one process: nothing else runs
/// between them that could see a half-done step and matter).
#[async_trait]
impl Calls for MemoryStore {
    async fn admit(
        &self,
        accounts: &[SlotAsk<'_>],
        slot_id: &str,
        slot_ttl: Duration,
        limits: Limits<'_>,
        hold: Option<HoldAsk<'_>>,
    ) -> StoreResult<Admitted> {
        let names: Vec<&str> = accounts.iter().map(|a| a.account).collect();
        let cooldowns = Cooldowns::remaining(self, &names).await?;
        let mut admitted = Admitted {
            cooldowns,
            taken: None,
            reservation: None,
            limited: None,
        };
        // A key revoked since the caller read its record: refused before anything is taken.
        if let Some(key) = limits.key {
            let keys = self.keys.read().map_err(poisoned)?;
            if keys.loaded && !keys.records.contains_key(key) {
                admitted.limited = Some(Limited::Revoked);
                return Ok(admitted);
            }
        }
        // The limits first, each checked and taken under its lock; given back below when the
        // call is not admitted after all.
        if let Some(limited) = self.take_limits(limits, slot_id, slot_ttl)? {
            admitted.limited = Some(limited);
            return Ok(admitted);
        }
        for (i, ask) in accounts.iter().enumerate() {
            if admitted.cooldowns.get(i).is_some_and(Option::is_some) {
                continue;
            }
            if !Slots::acquire(self, ask.account, slot_id, ask.max, slot_ttl).await? {
                continue;
            }
            admitted.taken = Some(i);
            if let Some(h) = hold {
                match self.reserve_for(h.org, h.hold_id, h.amount, h.ttl_ms, h.meta, h.spend)? {
                    Ok(r) => {
                        if !matches!(r, Reservation::Held { .. } | Reservation::AlreadyHeld) {
                            Slots::release(self, ask.account, slot_id).await?;
                            admitted.taken = None;
                        }
                        admitted.reservation = Some(r);
                    }
                    Err(over) => {
                        Slots::release(self, ask.account, slot_id).await?;
                        admitted.taken = None;
                        admitted.limited = Some(Limited::Budget(over));
                    }
                }
            }
            break;
        }
        if admitted.taken.is_none() {
            self.give_limits_back(limits, slot_id)?;
        }
        Ok(admitted)
    }

    async fn finish(&self, f: Finish<'_>) -> StoreResult<Option<Settlement>> {
        if let Some((account, slot_id)) = f.slot {
            Slots::release(self, account, slot_id).await?;
            self.release_gates(f.gates, slot_id)?;
        }
        let settlement = match f.hold {
            Some((org, hold_id)) => Some(self.settle(org, hold_id, f.cost).await?),
            None => None,
        };
        if let Some(event) = f.event {
            let mut event = event.clone();
            if f.hold.is_some() {
                (event.charged_nanos, event.excess_nanos) = charged(settlement, f.cost);
            }
            self.append(&event).await?;
        }
        Ok(settlement)
    }
}

#[cfg(test)]
mod confirmed_tests {
    use super::{CONFIRMED_BUCKET, CONFIRMED_RETENTION, Confirmed, confirmed_key};
    use std::time::{Duration, Instant};

    #[test]
    fn remembers_for_the_retention_then_forgets_whole_buckets() {
        let mut c = Confirmed::default();
        let t0 = Instant::now();
        let id = "0193a4b2c3d4e5f60718293a4b5c6d7e";
        assert!(c.insert(id, t0));
        assert!(!c.insert(id, t0 + Duration::from_secs(1)), "a duplicate");
        assert!(
            !c.insert(id, t0 + CONFIRMED_RETENTION),
            "still remembered at the retention"
        );
        // A steady flow: memory holds about a retention's worth of ids, never more.
        for i in 0..10_000u64 {
            let at = t0 + Duration::from_millis(i * 30);
            assert!(c.insert(&format!("{i:032x}"), at));
        }
        let per_second = 1_000 / 30;
        let most = (CONFIRMED_RETENTION + CONFIRMED_BUCKET * 2).as_secs() as usize * per_second;
        assert!(c.len() <= most, "{} ids kept", c.len());
        assert!(
            c.insert(id, t0 + Duration::from_secs(300)),
            "forgotten after the retention"
        );
    }

    #[test]
    fn request_ids_are_their_own_keys_and_other_ids_are_hashed() {
        assert_eq!(confirmed_key("0000000000000000000000000000002a"), 42);
        assert_ne!(confirmed_key("hold-1"), confirmed_key("hold-2"));
        assert_eq!(confirmed_key("hold-1"), confirmed_key("hold-1"));
    }
}
