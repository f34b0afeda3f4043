//! Wallets on Redis: each organization's mirror is one hash, changed only by the wallet script
//! (`lua/wallet.v1.lua`), so a reservation, a settlement or a confirmation is one atomic step;
//! confirmations are pipelined per server or per cluster slot.

use crate::budget::{KeySpend, SpendReport, Windows};
use crate::error::StoreResult;
use crate::redis_store::*;
use crate::wallets::{
    Adjustment, Confirmation, ExpiredHold, Reservation, Settlement, WalletSnapshot, Wallets,
};
use async_trait::async_trait;
use money::NanoUsd;
use redis::AsyncCommands;
use std::time::Duration;
impl RedisStore {
    pub(crate) async fn wallet(&self, org: i64, args: &[&str]) -> StoreResult<Vec<String>> {
        let mut conn = self.conn.clone();
        let keys = self.schema.wallet(org);
        let mut invocation = WALLET.prepare_invoke();
        for key in &keys {
            invocation.key(key);
        }
        for a in args {
            invocation.arg(*a);
        }
        Ok(invocation.invoke_async(&mut conn).await?)
    }
}

#[async_trait]
impl Wallets for RedisStore {
    async fn load(&self, org: i64, balance: NanoUsd) -> StoreResult<()> {
        self.wallet(org, &["load", &balance.nanos().to_string()])
            .await?;
        Ok(())
    }

    async fn load_booked(&self, org: i64, balance: NanoUsd, booked: &[String]) -> StoreResult<()> {
        let balance = balance.nanos().to_string();
        let mut args = vec!["load", balance.as_str()];
        args.extend(booked.iter().map(String::as_str));
        self.wallet(org, &args).await?;
        Ok(())
    }

    async fn adjust(&self, org: i64, delta: NanoUsd, reference: &str) -> StoreResult<Adjustment> {
        let r = self
            .wallet(org, &["adjust", &delta.nanos().to_string(), reference])
            .await?;
        Ok(match int(r.first())? {
            -1 => Adjustment::Missing,
            2 => Adjustment::Duplicate,
            0 => Adjustment::Insufficient {
                available: usd(r.get(1))?,
            },
            _ => Adjustment::Applied {
                balance: usd(r.get(1))?,
            },
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
        // Index first: a crash after it leaves a harmless entry; the other order could orphan a hold.
        let mut conn = self.conn.clone();
        let _: i64 = conn.sadd(self.schema.holding(org), org).await?;
        let r = self
            .wallet(
                org,
                &[
                    "reserve",
                    hold_id,
                    &amount.nanos().to_string(),
                    &ttl_ms.to_string(),
                    meta,
                    "",
                ],
            )
            .await?;
        Ok(match int(r.first())? {
            -1 => Reservation::Missing,
            2 => Reservation::AlreadyHeld,
            0 => Reservation::Insufficient {
                available: usd(r.get(1))?,
            },
            _ => Reservation::Held {
                available: usd(r.get(1))?,
            },
        })
    }

    async fn settle(&self, org: i64, hold_id: &str, actual: NanoUsd) -> StoreResult<Settlement> {
        let r = self
            .wallet(org, &["settle", hold_id, &actual.nanos().to_string()])
            .await?;
        Ok(match int(r.first())? {
            -1 => Settlement::Missing,
            0 => Settlement::Unknown,
            _ => Settlement::Settled {
                charged: usd(r.get(1))?,
                excess: usd(r.get(2))?,
                below_holds: int(r.get(3))? == 1,
            },
        })
    }

    async fn release(&self, org: i64, hold_id: &str) -> StoreResult<bool> {
        let r = self.wallet(org, &["release", hold_id]).await?;
        Ok(int(r.first())? == 1)
    }

    async fn extend(&self, org: i64, hold_id: &str, ttl_ms: u64) -> StoreResult<bool> {
        let r = self
            .wallet(org, &["extend", hold_id, &ttl_ms.to_string()])
            .await?;
        Ok(int(r.first())? == 1)
    }

    async fn confirm(&self, org: i64, hold_id: &str, amount: NanoUsd) -> StoreResult<Confirmation> {
        let r = self
            .wallet(org, &["confirm", &amount.nanos().to_string(), hold_id])
            .await?;
        Ok(match int(r.first())? {
            -1 => Confirmation::Missing,
            1 => Confirmation::Confirmed,
            2 => Confirmation::Duplicate,
            _ => Confirmation::Applied,
        })
    }

    async fn confirm_many(
        &self,
        charges: &[(i64, &str, NanoUsd)],
    ) -> StoreResult<Vec<Confirmation>> {
        if charges.is_empty() {
            return Ok(Vec::new());
        }
        if self.schema.is_cluster() {
            return self.confirm_by_slot(charges).await;
        }
        self.confirm_batch(charges).await
    }

    async fn expired(&self, org: i64) -> StoreResult<Vec<ExpiredHold>> {
        let r = self.wallet(org, &["expired"]).await?;
        r.chunks(3)
            .map(|triple| {
                Ok(ExpiredHold {
                    hold_id: triple[0].clone(),
                    amount: usd(triple.get(1))?,
                    meta: triple.get(2).cloned().unwrap_or_default(),
                })
            })
            .collect()
    }

    async fn snapshot(&self, org: i64) -> StoreResult<Option<WalletSnapshot>> {
        let r = self.wallet(org, &["snapshot"]).await?;
        Ok(match int(r.first())? {
            -1 => None,
            _ => Some(WalletSnapshot {
                balance: usd(r.get(1))?,
                reserved: usd(r.get(2))?,
                pending: usd(r.get(3))?,
                unreconciled: int(r.get(4))? == 1,
            }),
        })
    }

    async fn holding_orgs(&self) -> StoreResult<Vec<i64>> {
        let mut orgs = Vec::new();
        for list in self.schema.holding_lists() {
            let mut conn = self.conn.clone();
            let members: Vec<i64> = conn.smembers(list).await?;
            orgs.extend(members);
        }
        Ok(orgs)
    }

    async fn key_spend(&self, org: i64, keys: &[i64]) -> StoreResult<Option<SpendReport>> {
        let ids: Vec<String> = keys.iter().map(i64::to_string).collect();
        let mut args = vec!["spend"];
        args.extend(ids.iter().map(String::as_str));
        let r = self.wallet(org, &args).await?;
        if int(r.first())? == -1 {
            return Ok(None);
        }
        let ms =
            |i: usize| int(r.get(i)).map(|v| Duration::from_millis(u64::try_from(v).unwrap_or(0)));
        let keys = (0..keys.len())
            .map(|i| {
                Ok(KeySpend {
                    day: usd(r.get(3 + 3 * i))?,
                    month: usd(r.get(4 + 3 * i))?,
                    held: usd(r.get(5 + 3 * i))?,
                })
            })
            .collect::<StoreResult<Vec<_>>>()?;
        Ok(Some(SpendReport {
            keys,
            day_resets_in: ms(1)?,
            month_resets_in: ms(2)?,
        }))
    }

    async fn load_key_spend(
        &self,
        org: i64,
        windows: Windows,
        spends: &[(i64, NanoUsd, NanoUsd)],
    ) -> StoreResult<()> {
        for chunk in spends.chunks(500) {
            let mut args = vec![
                "spend_load".to_string(),
                windows.day.to_string(),
                windows.month.to_string(),
            ];
            for (key, day, month) in chunk {
                args.extend([
                    key.to_string(),
                    day.nanos().to_string(),
                    month.nanos().to_string(),
                ]);
            }
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            self.wallet(org, &refs).await?;
        }
        Ok(())
    }
}

impl RedisStore {
    /// Confirms charges in one pipelined batch (one server, or one slot of a cluster).
    pub(crate) async fn confirm_batch(
        &self,
        charges: &[(i64, &str, NanoUsd)],
    ) -> StoreResult<Vec<Confirmation>> {
        let mut pipe = redis::pipe();
        for (org, hold_id, amount) in charges {
            let keys = self.schema.wallet(*org);
            pipe.cmd("EVALSHA")
                .arg(WALLET.get_hash())
                .arg(keys.len())
                .arg(&keys[..])
                .arg("confirm")
                .arg(amount.nanos())
                .arg(*hold_id);
        }
        let mut conn = self.conn.clone();
        let replies: Vec<Vec<String>> = match pipe.query_async(&mut conn).await {
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                // A fresh server (flushed, restarted): load the script and send the batch again.
                let _: String = WALLET.load_async(&mut conn).await?;
                pipe.query_async(&mut conn).await?
            }
            other => other?,
        };
        replies
            .iter()
            .map(|r| {
                Ok(match int(r.first())? {
                    -1 => Confirmation::Missing,
                    1 => Confirmation::Confirmed,
                    2 => Confirmation::Duplicate,
                    _ => Confirmation::Applied,
                })
            })
            .collect()
    }
}
