//! A call's admission and end on one Redis server (a cluster splits them in `redis_cluster.rs`):
//! the slot, the gates and the hold in one script, and the finish that gives the slot back,
//! closes the hold and appends the usage event in another.

use crate::budget::OverBudget;
use crate::calls::{Admitted, Calls, Finish, HoldAsk, Limited, Limits, SlotAsk};
use crate::cooldowns::{CoolCause, Cooldown};
use crate::error::{StoreError, StoreResult};
use crate::redis_store::*;
use crate::wallets::{Reservation, Settlement};
use async_trait::async_trait;
use money::NanoUsd;
use std::time::Duration;
#[async_trait]
impl Calls for RedisStore {
    async fn admit(
        &self,
        accounts: &[SlotAsk<'_>],
        slot_id: &str,
        slot_ttl: Duration,
        limits: Limits<'_>,
        hold: Option<HoldAsk<'_>>,
    ) -> StoreResult<Admitted> {
        if self.schema.is_cluster() {
            return self
                .admit_split(accounts, slot_id, slot_ttl, limits, hold)
                .await;
        }
        let mut conn = self.conn.clone();
        let org = hold.map_or(0, |h| h.org);
        let mut invocation = ADMIT.prepare_invoke();
        for key in self.schema.wallet(org) {
            invocation.key(key);
        }
        invocation.key(self.schema.holding(org));
        invocation.key(
            self.schema
                .minute_counter(limits.per_minute.map_or("-", |r| r.counter)),
        );
        for gate in limits.gates {
            invocation.key(self.schema.gate(gate.gate));
        }
        for a in accounts {
            invocation
                .key(self.schema.cooldown(a.account))
                .key(self.schema.slots(a.account));
        }
        invocation
            .key(self.schema.key_directory())
            .key(self.schema.key_directory_loaded());
        invocation.arg(slot_id).arg(millis(slot_ttl));
        match hold {
            Some(h) => invocation
                .arg("1")
                .arg(h.org)
                .arg(h.hold_id)
                .arg(h.amount.nanos())
                .arg(h.ttl_ms)
                .arg(h.meta),
            None => invocation.arg("0").arg(0).arg("").arg(0).arg(0).arg(""),
        };
        invocation
            .arg(limits.gates.len())
            .arg(limits.per_minute.map_or(0, |r| r.limit));
        for gate in limits.gates {
            invocation.arg(gate.max);
        }
        for a in accounts {
            invocation.arg(a.max);
        }
        invocation
            .arg(
                hold.and_then(|h| h.spend)
                    .map(|a| a.wire())
                    .unwrap_or_default(),
            )
            .arg(limits.key.unwrap_or(""));
        let reply: Vec<redis::Value> = invocation.invoke_async(&mut conn).await?;
        admitted(&reply, accounts.len())
    }

    async fn finish(&self, f: Finish<'_>) -> StoreResult<Option<Settlement>> {
        if self.schema.is_cluster() {
            return self.finish_split(f).await;
        }
        let mut conn = self.conn.clone();
        let org = f.hold.map_or(0, |(org, _)| org);
        let mut invocation = FINISH.prepare_invoke();
        for key in self.schema.wallet(org) {
            invocation.key(key);
        }
        let (account, slot_id) = f.slot.unwrap_or(("-", ""));
        invocation
            .key(self.schema.slots(account))
            .key(self.schema.usage_stream(org));
        for gate in f.gates {
            invocation.key(self.schema.gate(gate));
        }
        let json = match f.event {
            Some(e) => serde_json::to_string(e)
                .map_err(|e| StoreError::Corrupt(format!("usage event: {e}")))?,
            None => String::new(),
        };
        invocation
            .arg(slot_id)
            .arg(f.hold.map_or("", |(_, id)| id))
            .arg(f.cost.nanos())
            .arg(json);
        let r: Vec<String> = invocation.invoke_async(&mut conn).await?;
        finished(&r)
    }

    async fn resolve(
        &self,
        org: i64,
        hold_id: &str,
        cost: money::NanoUsd,
        event: &crate::UsageEvent,
    ) -> StoreResult<Settlement> {
        let json = serde_json::to_string(event)
            .map_err(|e| StoreError::Corrupt(format!("usage event: {e}")))?;
        // On one server as on a cluster: the money slot's step alone.
        let settled = self.money_step(org, hold_id, cost, json, true).await?;
        Ok(settled.unwrap_or(Settlement::Unknown))
    }
}

/// The settlement a finish script reports (`None`: the call had no hold).
pub(crate) fn finished(r: &[String]) -> StoreResult<Option<Settlement>> {
    Ok(match int(r.first())? {
        9 => None,
        -1 => Some(Settlement::Missing),
        0 => Some(Settlement::Unknown),
        _ => Some(Settlement::Settled {
            charged: usd(r.get(1))?,
            excess: usd(r.get(2))?,
            below_holds: int(r.get(3))? == 1,
        }),
    })
}

/// The one-server admission script's reply: the account taken (1-based, 0 for none), the hold's
/// outcome and the wallet's available amount, the limit that refused and its detail, then each of
/// the `accounts` asked's cooldown (milliseconds left and cause).
fn admitted(reply: &[redis::Value], accounts: usize) -> StoreResult<Admitted> {
    let bad = || StoreError::Corrupt("admit script reply".into());
    let field = |i: usize| -> StoreResult<i64> {
        match reply.get(i) {
            Some(redis::Value::Int(n)) => Ok(*n),
            Some(v) => redis::from_redis_value_ref::<i64>(v).map_err(|_| bad()),
            None => Err(bad()),
        }
    };
    let text = |i: usize| -> String {
        reply
            .get(i)
            .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
            .unwrap_or_default()
    };
    let taken = usize::try_from(field(0)?)
        .ok()
        .and_then(|t| t.checked_sub(1));
    let available = NanoUsd::from_nanos(field(2)?);
    let reservation = match field(1)? {
        9 => None,
        -1 => Some(Reservation::Missing),
        2 => Some(Reservation::AlreadyHeld),
        0 => Some(Reservation::Insufficient { available }),
        _ => Some(Reservation::Held { available }),
    };
    let limited = match (field(3)?, field(4)?) {
        (0, _) => None,
        (1, gate) => Some(Limited::Gate(usize::try_from(gate - 1).map_err(|_| bad())?)),
        (2, ms) => Some(Limited::PerMinute {
            resets_in: Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
        }),
        (3, _) => Some(Limited::Revoked),
        (4, ms) => Some(Limited::Budget(OverBudget {
            resets_in: Duration::from_millis(u64::try_from(ms).unwrap_or(0)),
            remaining: available,
        })),
        _ => return Err(bad()),
    };
    let cooldowns = (0..accounts)
        .map(|i| {
            let left = u64::try_from(field(5 + 2 * i)?).unwrap_or(0);
            Ok((left > 0).then(|| Cooldown {
                left: Duration::from_millis(left),
                cause: CoolCause::parse(&text(6 + 2 * i)),
            }))
        })
        .collect::<StoreResult<Vec<_>>>()?;
    Ok(Admitted {
        cooldowns,
        taken,
        reservation,
        limited,
    })
}
