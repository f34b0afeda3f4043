//! The Redis backend on a Redis Cluster: what would touch keys of several slots, split into
//! steps of one slot each ([`KeySchema::cluster`] decides the slots).
//!
//! **A call's admission** is one round of concurrent steps, each atomic on its own slot: the
//! key's standing (`{keydir}`), each gate (`{gate:NAME}`, `slot_acquire`), the per-minute count
//! (`{rpm:NAME}`, `rate_take`), the hold with the work-list entry (the organization's money slot,
//! `hold_take`), the first account's cooldown and slot (`{a:ACCOUNT}`, `account_take`) and the
//! other accounts' cooldowns. When the first account cannot serve, the next open ones are asked
//! one by one (one more round trip each). Whatever was taken is given back when another step
//! refused (a limit, no account with room, the hold): the outcome is the one-server script's
//! (`admit.v4`), and nothing stays taken. Between the steps another call may see a gate or an
//! account briefly fuller than it ends up (it is refused as it would be at that fill); money is
//! never at stake: the hold is one atomic step on the organization's slot, as on one server.
//!
//! **A call's end** settles the hold and appends the usage event in one step on the money slot
//! (`finish.v5` with no account slot), so a usage record is never lost nor written twice for a
//! settled hold; the account's slot and the gates' are given back beside it (a failure there is
//! logged: they expire after the slot TTL).
//!
//! **The settler** reads the [`MONEY_SLOTS`](crate::schema::MONEY_SLOTS) usage streams in turn;
//! an entry id is `i/ID` (stream `i`, Redis' id).

use crate::calls::{Finish, HoldAsk, SlotAsk};
use crate::cooldowns::{CoolCause, Cooldown};
use crate::error::{StoreError, StoreResult};
use crate::redis_calls::finished;
use crate::redis_store::{
    ACCOUNT_TAKE, FINISH, HOLD_TAKE, RATE_GIVE, RATE_TAKE, RedisStore, SLOT_ACQUIRE, cooldown, int,
    usd,
};
use crate::usage::StreamEntry;
use crate::wallets::{Confirmation, Settlement};
use futures_util::future::join_all;
use money::NanoUsd;
use redis::AsyncCommands;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// What one admission took so far, given back when another step refuses the call.
#[derive(Default)]
pub(crate) struct Taken {
    pub(crate) gates: Vec<String>,
    /// The per-minute counter and the minute counted in.
    pub(crate) minute: Option<(String, i64)>,
    /// The organization and hold id of a hold this admission opened (not one that existed).
    pub(crate) hold: Option<(i64, String)>,
    /// The account's slots key.
    pub(crate) account: Option<String>,
}

/// One account's step: whether a slot was taken, and its cooldown.
pub(crate) type AccountRead = (bool, Option<Cooldown>);

impl RedisStore {
    pub(crate) async fn finish_split(&self, f: Finish<'_>) -> StoreResult<Option<Settlement>> {
        let org = f.hold.map(|(org, _)| org).or(f.event.map(|e| e.org_id));
        let money = async {
            let Some(org) = org else {
                return Ok(None);
            };
            let json = match f.event {
                Some(e) => serde_json::to_string(e)
                    .map_err(|e| StoreError::Corrupt(format!("usage event: {e}")))?,
                None => String::new(),
            };
            let hold = f.hold.map_or("", |(_, id)| id);
            self.money_step(org, hold, f.cost, json, false).await
        };
        let mut slots: Vec<String> = Vec::new();
        let mut slot_id = "";
        if let Some((account, id)) = f.slot {
            slot_id = id;
            slots.push(self.schema.slots(account));
            slots.extend(f.gates.iter().map(|g| self.schema.gate(g)));
        }
        let given = join_all(slots.iter().map(|key| self.zrem(key, slot_id)));
        let (settled, given) = tokio::join!(money, given);
        for (key, r) in slots.iter().zip(given) {
            if let Err(e) = r {
                tracing::warn!(key = %key, error = %e, "slot not given back; it expires with its ttl");
            }
        }
        settled
    }

    /// The money part of a call's end on the organization's money slot (`finish.v5` with no
    /// account slot: a key of the money slot stands in): the hold settled and the event (JSON,
    /// empty for none) appended; with `resolve`, appended only when this settlement charged.
    pub(crate) async fn money_step(
        &self,
        org: i64,
        hold_id: &str,
        cost: NanoUsd,
        json: String,
        resolve: bool,
    ) -> StoreResult<Option<Settlement>> {
        let mut invocation = FINISH.prepare_invoke();
        for key in self.schema.wallet(org) {
            invocation.key(key);
        }
        invocation
            .key(self.schema.money_placeholder(org))
            .key(self.schema.usage_stream(org))
            .arg("")
            .arg(hold_id)
            .arg(cost.nanos())
            .arg(json);
        if resolve {
            invocation.arg("resolve");
        }
        let mut conn = self.conn.clone();
        let r: Vec<String> = invocation.invoke_async(&mut conn).await?;
        finished(&r)
    }

    /// Gives back what an admission took (each step on its own slot); a step that fails is
    /// logged: gate and account slots expire with their TTL, a count with its minute, a hold
    /// with its deadline (the reconciler releases it).
    pub(crate) async fn give_back(&self, taken: Taken, slot_id: &str) {
        let slots = taken.gates.iter().chain(taken.account.as_ref());
        let slots = join_all(slots.map(|key| async move { (key, self.zrem(key, slot_id).await) }));
        let minute = async {
            if let Some((key, minute)) = &taken.minute {
                let mut conn = self.conn.clone();
                let given: redis::RedisResult<i64> = RATE_GIVE
                    .key(key)
                    .arg(*minute)
                    .invoke_async(&mut conn)
                    .await;
                if let Err(e) = given {
                    tracing::warn!(key = %key, error = %e, "count not given back");
                }
            }
        };
        let hold = async {
            if let Some((org, id)) = &taken.hold
                && let Err(e) = self.wallet(*org, &["release", id]).await
            {
                tracing::warn!(org, hold = %id, error = %e, "hold not released; the reconciler will");
            }
        };
        let (slots, (), ()) = tokio::join!(slots, minute, hold);
        for (key, r) in slots {
            if let Err(e) = r {
                tracing::warn!(key = %key, error = %e, "slot not given back; it expires with its ttl");
            }
        }
    }

    async fn zrem(&self, key: &str, member: &str) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let _: i64 = conn.zrem(key, member).await?;
        Ok(())
    }

    /// Whether the key `hash` is revoked: the directory is complete (loaded) and has no record.
    pub(crate) async fn key_revoked(&self, hash: &str) -> StoreResult<bool> {
        let mut conn = self.conn.clone();
        let (loaded, present): (bool, bool) = redis::pipe()
            .exists(self.schema.key_directory_loaded())
            .hexists(self.schema.key_directory(), hash)
            .query_async(&mut conn)
            .await?;
        Ok(loaded && !present)
    }

    pub(crate) async fn take_slot(
        &self,
        key: String,
        slot_id: &str,
        max: u32,
        ttl: u64,
    ) -> StoreResult<bool> {
        let mut conn = self.conn.clone();
        let taken: i64 = SLOT_ACQUIRE
            .key(key)
            .arg(slot_id)
            .arg(max)
            .arg(ttl)
            .invoke_async(&mut conn)
            .await?;
        Ok(taken == 1)
    }

    /// Counts the call in its minute: `Ok(minute)` counted, `Err(resets_in)` the limit is reached.
    pub(crate) async fn rate_take(
        &self,
        counter: &str,
        limit: u32,
    ) -> StoreResult<Result<i64, Duration>> {
        let mut conn = self.conn.clone();
        let (counted, detail): (i64, i64) = RATE_TAKE
            .key(self.schema.minute_counter(counter))
            .arg(limit)
            .invoke_async(&mut conn)
            .await?;
        Ok(if counted == 1 {
            Ok(detail)
        } else {
            Err(Duration::from_millis(u64::try_from(detail).unwrap_or(0)))
        })
    }

    /// Opens the hold: its code (see `hold_reserve`), the available balance it reports (code 3:
    /// the milliseconds until the budget's period ends) and the budget's remaining amount.
    pub(crate) async fn hold_take(&self, h: HoldAsk<'_>) -> StoreResult<(i64, NanoUsd, NanoUsd)> {
        let mut conn = self.conn.clone();
        let mut invocation = HOLD_TAKE.prepare_invoke();
        for key in self.schema.wallet(h.org) {
            invocation.key(key);
        }
        invocation
            .key(self.schema.holding(h.org))
            .arg(h.org)
            .arg(h.hold_id)
            .arg(h.amount.nanos())
            .arg(h.ttl_ms)
            .arg(h.meta)
            .arg(h.spend.map(|a| a.wire()).unwrap_or_default());
        let r: Vec<String> = invocation.invoke_async(&mut conn).await?;
        Ok((int(r.first())?, usd(r.get(1))?, usd(r.get(2))?))
    }

    pub(crate) async fn account_take(
        &self,
        a: &SlotAsk<'_>,
        slot_id: &str,
        ttl: u64,
        take: bool,
    ) -> StoreResult<AccountRead> {
        let mut conn = self.conn.clone();
        let (taken, left, cause): (i64, i64, String) = ACCOUNT_TAKE
            .key(self.schema.cooldown(a.account))
            .key(self.schema.slots(a.account))
            .arg(slot_id)
            .arg(a.max)
            .arg(ttl)
            .arg(if take { "1" } else { "0" })
            .invoke_async(&mut conn)
            .await?;
        let cd = (left > 0).then(|| Cooldown {
            left: Duration::from_millis(u64::try_from(left).unwrap_or(0)),
            cause: CoolCause::parse(&cause),
        });
        Ok((taken == 1, cd))
    }

    /// The accounts' cooldowns, each read on its own slot, concurrently.
    pub(crate) async fn remaining_each(
        &self,
        accounts: &[&str],
    ) -> StoreResult<Vec<Option<Cooldown>>> {
        let reads = join_all(accounts.iter().map(|a| async move {
            let key = self.schema.cooldown(a);
            let mut conn = self.conn.clone();
            let read: (i64, Option<String>) = redis::pipe()
                .cmd("PTTL")
                .arg(&key)
                .cmd("GET")
                .arg(&key)
                .query_async(&mut conn)
                .await?;
            Ok::<_, StoreError>(cooldown(read))
        }));
        reads.await.into_iter().collect()
    }

    /// The accounts' live slots, each counted on its own slot, concurrently.
    pub(crate) async fn in_use_each(
        &self,
        accounts: &[&str],
        now_ms: f64,
    ) -> StoreResult<Vec<u32>> {
        let counts = join_all(accounts.iter().map(|a| async move {
            let mut conn = self.conn.clone();
            let n: u32 = redis::cmd("ZCOUNT")
                .arg(self.schema.slots(a))
                .arg(now_ms)
                .arg("+inf")
                .query_async(&mut conn)
                .await?;
            Ok::<_, StoreError>(n)
        }));
        counts.await.into_iter().collect()
    }

    /// Confirms charges of several organizations: each on its own money slot, concurrently.
    pub(crate) async fn confirm_by_slot(
        &self,
        charges: &[(i64, &str, NanoUsd)],
    ) -> StoreResult<Vec<Confirmation>> {
        let replies = join_all(charges.iter().map(|(org, hold_id, amount)| async move {
            let amount = amount.nanos().to_string();
            let r = self.wallet(*org, &["confirm", &amount, hold_id]).await?;
            Ok::<_, StoreError>(match int(r.first())? {
                -1 => Confirmation::Missing,
                1 => Confirmation::Confirmed,
                2 => Confirmation::Duplicate,
                _ => Confirmation::Applied,
            })
        }));
        replies.await.into_iter().collect()
    }

    /// Claims from the usage streams in turn, each claim starting one stream further, until
    /// `max` entries (ids written `i/ID`).
    pub(crate) async fn claim_streams(
        &self,
        consumer: &str,
        max: usize,
        min_idle: Duration,
        own: bool,
    ) -> StoreResult<(Vec<StreamEntry>, bool)> {
        let all: Vec<usize> = (0..self.schema.usage_streams().len()).collect();
        self.claim_leased(consumer, &all, |_| min_idle, max, own)
            .await
    }

    /// Claims from the usage streams `which` in turn (each with its own idle time), each claim
    /// starting one stream further, until `max` entries (ids written `i/ID`).
    pub(crate) async fn claim_leased(
        &self,
        consumer: &str,
        which: &[usize],
        min_idle: impl Fn(usize) -> Duration,
        max: usize,
        own: bool,
    ) -> StoreResult<(Vec<StreamEntry>, bool)> {
        let streams = self.schema.usage_streams();
        let which: Vec<usize> = which
            .iter()
            .copied()
            .filter(|&i| i < streams.len())
            .collect();
        let start = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let mut out = Vec::new();
        let mut more = false;
        for k in 0..which.len() {
            if out.len() >= max {
                // Streams not read this time may still hold this consumer's own entries.
                more |= own;
                break;
            }
            let i = which[(start + k) % which.len()];
            let (claimed, rest) = self
                .claim_stream(&streams[i], consumer, max - out.len(), min_idle(i), own)
                .await?;
            more |= rest;
            out.extend(claimed.into_iter().map(|e| StreamEntry {
                id: format!("{i}/{}", e.id),
                event: e.event,
            }));
        }
        Ok((out, more))
    }

    /// Acknowledges entries of several streams (ids `i/ID`), stream by stream.
    pub(crate) async fn ack_streams(&self, ids: &[String]) -> StoreResult<()> {
        let streams = self.schema.usage_streams();
        let mut by_stream: Vec<Vec<&str>> = vec![Vec::new(); streams.len()];
        for id in ids {
            let (i, entry) = id
                .split_once('/')
                .and_then(|(i, e)| Some((i.parse::<usize>().ok()?, e)))
                .filter(|(i, _)| *i < streams.len())
                .ok_or_else(|| StoreError::Corrupt(format!("{id} is not a usage entry id")))?;
            by_stream[i].push(entry);
        }
        for (stream, entries) in streams.iter().zip(by_stream) {
            if !entries.is_empty() {
                self.ack_stream(stream, &entries).await?;
            }
        }
        Ok(())
    }
}
