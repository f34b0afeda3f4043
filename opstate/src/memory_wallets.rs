//! Wallets in memory: every organization's wallet under one mutex;
//! the wallet itself is `wallet_state`.

use crate::budget::{BudgetPeriod, SpendReport, Windows};
use crate::error::{StoreError, StoreResult};
use crate::memory::*;
use crate::wallet_state::*;
use crate::wallets::{
    Adjustment, Confirmation, ExpiredHold, Reservation, Settlement, WalletSnapshot, Wallets,
};
use async_trait::async_trait;
use money::NanoUsd;
use std::collections::HashMap;
use std::sync::MutexGuard;
use std::time::Duration;

impl MemoryStore {
    pub(crate) fn wallets(&self) -> StoreResult<MutexGuard<'_, HashMap<i64, WalletState>>> {
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

    async fn load_booked(&self, org: i64, balance: NanoUsd, booked: &[String]) -> StoreResult<()> {
        self.load(org, balance).await?;
        let now = self.now();
        let mut w = self.wallets()?;
        if let Some(wallet) = w.get_mut(&org) {
            for id in booked {
                wallet.remember_confirmed(id, now);
            }
        }
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
