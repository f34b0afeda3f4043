//! A call's admission and end in memory: the account slots, the calls' gates and per-minute
//! counters, and the hold, taken and given back together under their locks.

use crate::calls::{Admitted, Calls, Finish, HoldAsk, Limited, Limits, SlotAsk, charged};
use crate::cooldowns::Cooldowns;
use crate::error::{StoreError, StoreResult};
use crate::memory::*;
use crate::slots::Slots;
use crate::usage::UsageStream;
use crate::wallets::{Reservation, Settlement, Wallets};
use async_trait::async_trait;
use std::time::Duration;
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

    async fn resolve(
        &self,
        org: i64,
        hold_id: &str,
        cost: money::NanoUsd,
        event: &crate::UsageEvent,
    ) -> StoreResult<Settlement> {
        let settlement = self.settle(org, hold_id, cost).await?;
        if let Settlement::Settled {
            charged, excess, ..
        } = settlement
        {
            let mut event = event.clone();
            (event.charged_nanos, event.excess_nanos) = (charged, excess);
            self.append(&event).await?;
        }
        Ok(settlement)
    }
}
