//! The Redis backend, for fleets of proxies sharing one operational store: one Redis server, or a
//! Redis Cluster.
//!
//! One multiplexed connection per process ([`Conn`]): on one server a [`ConnectionManager`]
//! (it reconnects by itself), on a cluster a cluster connection (it follows the slot map by
//! itself), both with short timeouts so an outage fails calls in a fraction of a second instead
//! of blocking for seconds. Key names come from [`KeySchema`]; on a cluster every script touches
//! one slot, and what touches several (a call's admission and end, the reads of several
//! accounts, the settler's streams) is split in `redis_cluster.rs`.

use crate::cooldowns::{CoolCause, Cooldown, Cooldowns};
use crate::counters::{WindowCounters, WindowHit};
use crate::error::{StoreError, StoreResult};
use crate::key_cache::KeyCache;
use crate::schema::{KeySchema, USAGE_GROUP};
use crate::sessions::Sessions;
use crate::slots::Slots;
use crate::usage::{StreamEntry, UsageEvent};
use async_trait::async_trait;
use money::NanoUsd;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::streams::{StreamAutoClaimReply, StreamReadReply};
use redis::{AsyncCommands, Script};
use std::sync::LazyLock;
use std::time::Duration;

pub(crate) static USAGE_ACK: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/usage_ack.v1.lua")));

pub(crate) static WINDOW_HIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/window_hit.v1.lua")));

pub(crate) static COOLDOWN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/cooldown.v2.lua")));

/// The wallet rules, the slot rule and their helpers, prepended to the scripts that use them.
macro_rules! with_hold_rules {
    ($file:literal) => {
        concat!(include_str!("lua/hold.lua"), include_str!($file))
    };
}

pub(crate) static SLOT_ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_hold_rules!("lua/slot_acquire.v1.lua")));

pub(crate) static WALLET: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_hold_rules!("lua/wallet.v5.lua")));

pub(crate) static ADMIT: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_hold_rules!("lua/admit.v4.lua")));

pub(crate) static FINISH: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_hold_rules!("lua/finish.v5.lua")));

/// Redis Cluster (`redis_cluster.rs`): a call's per-minute count, taken and given back, on the
/// counter's own slot.
pub(crate) static RATE_TAKE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_hold_rules!("lua/rate_take.v1.lua")));

pub(crate) static RATE_GIVE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/rate_give.v1.lua")));

/// Redis Cluster: an account's cooldown read and, when it is open, a slot taken, on the
/// account's own slot.
pub(crate) static ACCOUNT_TAKE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_hold_rules!("lua/account_take.v1.lua")));

/// Redis Cluster: a call's hold, with its organization entered in the work list, on the
/// organization's money slot.
pub(crate) static HOLD_TAKE: LazyLock<Script> =
    LazyLock::new(|| Script::new(with_hold_rules!("lua/hold_take.v2.lua")));

/// The server process (its `run_id`) that keeps a usage stream (`UsageStream::homes`).
pub(crate) static HOME: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/home.v1.lua")));

/// Entries written per round trip when loading the key directory.
pub(crate) const LOAD_BATCH: usize = 500;

/// The store's connection: one server's, or a cluster's.
#[derive(Clone)]
pub enum Conn {
    Single(ConnectionManager),
    Cluster(crate::cluster_conn::ClusterConn),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Single(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Single(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// Redis implementation of every store capability.
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) conn: Conn,
    pub(crate) schema: KeySchema,
    /// Cluster: the usage stream the settler's next claim starts at (each claim starts one
    /// further, so no stream waits behind a busy one).
    pub(crate) next_stream: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    /// A claim or an acknowledgement failed (an error, or a reply that timed out after Redis ran
    /// the command): entries may have been delivered to this process's consumer and never
    /// settled. Redis keeps them pending under that consumer, where no other settler takes them
    /// before the claim timeout (30 s); the next claim reads the consumer's own pending entries
    /// first instead (see [`RedisStore::claim_stream`]).
    pub(crate) unsure: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl RedisStore {
    /// Connects and prepares the usage stream's consumer group. Fails when Redis does not answer.
    pub async fn connect(url: &str, key_prefix: &str) -> StoreResult<RedisStore> {
        check_prefix(key_prefix)?;
        let client = redis::Client::open(url)?;
        let config = ConnectionManagerConfig::new()
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_millis(100))
            .set_connection_timeout(Some(Duration::from_millis(500)))
            .set_response_timeout(Some(Duration::from_millis(500)));
        let conn = ConnectionManager::new_with_config(client, config).await?;
        let store = RedisStore {
            conn: Conn::Single(conn),
            schema: KeySchema::new(key_prefix),
            next_stream: Default::default(),
            unsure: Default::default(),
        };
        store.ensure_groups().await?;
        Ok(store)
    }

    /// Connects to the Redis Cluster that the `seeds` belong to (any of its nodes; the rest are
    /// learned from them) and prepares the usage streams' consumer groups. Fails when no seed
    /// answers. A failed-over master is followed within a few retries (at most 2 s a command),
    /// and a connection that answers nothing for 3 s is rebuilt from the seeds (`cluster_conn`).
    pub async fn connect_cluster(seeds: &[String], key_prefix: &str) -> StoreResult<RedisStore> {
        check_prefix(key_prefix)?;
        if seeds.is_empty() {
            return Err(StoreError::Unavailable("no redis cluster seed".into()));
        }
        let client = redis::cluster::ClusterClientBuilder::new(seeds.iter().map(String::as_str))
            .retries(3)
            .min_retry_wait(50)
            .max_retry_wait(400)
            .connection_timeout(Duration::from_millis(500))
            .response_timeout(Duration::from_millis(500))
            .overall_response_timeout(Some(Duration::from_secs(2)))
            .build()?;
        let conn = crate::cluster_conn::ClusterConn::connect(client).await?;
        let store = RedisStore {
            conn: Conn::Cluster(conn),
            schema: KeySchema::cluster(key_prefix),
            next_stream: Default::default(),
            unsure: Default::default(),
        };
        store.ensure_groups().await?;
        Ok(store)
    }

    /// The key schema in use (tests inspect keys through it).
    pub fn schema(&self) -> &KeySchema {
        &self.schema
    }

    /// A clone of the connection, for callers (tests, operator tools) that need raw access.
    pub fn connection(&self) -> Conn {
        self.conn.clone()
    }

    /// Listens to the key channel of the deployment at `url` / `key_prefix` for as long as the
    /// task runs, evicting each announced key from `cache` (see [`KeyCache`]); a lost (or never
    /// opened) channel is retried every 500 ms, nothing being kept meanwhile. Its own connection:
    /// a subscribed connection can do nothing else.
    ///
    /// `urls` are one server's, or a cluster's seeds: a message published on any node of a
    /// cluster reaches every node, so one subscription anywhere hears them all; a lost one is
    /// opened again on the next seed.
    pub async fn watch_keys(urls: &[String], key_prefix: &str, cache: &KeyCache) {
        use futures_util::StreamExt;
        let channel = KeySchema::new(key_prefix).key_changes();
        for url in urls.iter().cycle() {
            let subscribed = async {
                let mut pubsub = redis::Client::open(url.as_str())?
                    .get_async_pubsub()
                    .await?;
                pubsub.subscribe(&channel).await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            match subscribed.await {
                Ok(mut pubsub) => {
                    cache.listening(true);
                    let mut messages = pubsub.on_message();
                    while let Some(m) = messages.next().await {
                        let key: String = m.get_payload().unwrap_or_else(|_| "*".into());
                        cache.changed(&key);
                    }
                    cache.listening(false);
                    tracing::warn!("key channel lost; reconnecting");
                }
                Err(e) => tracing::warn!(error = %e, "key channel unavailable; retrying"),
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Creates the settler's consumer group on every usage stream that has none.
    /// Concurrently: a cluster has one stream per money slot, and a proxy opens its own
    /// connection on its first request.
    async fn ensure_groups(&self) -> StoreResult<()> {
        let streams = self.schema.usage_streams();
        let created = futures_util::future::join_all(streams.iter().map(|s| self.ensure_group(s)));
        created.await.into_iter().collect()
    }

    pub(crate) async fn ensure_group(&self, stream: &str) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(stream)
            .arg(USAGE_GROUP)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut conn)
            .await;
        match created {
            Ok(()) => Ok(()),
            Err(e) if e.code() == Some("BUSYGROUP") => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Claims up to `max` entries of `stream` for `consumer` (see [`UsageStream::claim`]); a
    /// stream whose group vanished (a flush) gets it back first. With `own`, the entries already
    /// delivered to `consumer` and never acknowledged come first (after a failed claim or
    /// acknowledgement: see `unsure`); the second value says whether there may be more of them
    /// than `max`.
    pub(crate) async fn claim_stream(
        &self,
        stream: &str,
        consumer: &str,
        max: usize,
        min_idle: Duration,
        own: bool,
    ) -> StoreResult<(Vec<StreamEntry>, bool)> {
        let (ids, more) = match self.claim_once(stream, consumer, max, min_idle, own).await {
            Err(e) if e.code() == Some("NOGROUP") => {
                self.ensure_group(stream).await?;
                self.claim_once(stream, consumer, max, min_idle, own)
                    .await?
            }
            other => other?,
        };
        let entries = ids
            .into_iter()
            // An entry deleted while pending (only a trimmed stream has such) is read back
            // without fields: nothing to settle.
            .filter(|entry| !entry.map.is_empty())
            .map(stream_entry)
            .collect::<StoreResult<Vec<_>>>()?;
        Ok((entries, more))
    }

    /// The events of `stream` delivered to a settler and not yet acknowledged (at most
    /// [`PENDING_READ`]; see `UsageStream::pending`).
    pub(crate) async fn pending_of(&self, stream: &str) -> StoreResult<Vec<UsageEvent>> {
        let mut conn = self.conn.clone();
        let rows: redis::RedisResult<Vec<(String, String, u64, u64)>> = redis::cmd("XPENDING")
            .arg(stream)
            .arg(USAGE_GROUP)
            .arg("-")
            .arg("+")
            .arg(PENDING_READ)
            .query_async(&mut conn)
            .await;
        let rows = match rows {
            Err(e) if e.code() == Some("NOGROUP") => return Ok(Vec::new()),
            other => other?,
        };
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        for (id, ..) in &rows {
            pipe.cmd("XRANGE").arg(stream).arg(id).arg(id);
        }
        let ranges: Vec<redis::streams::StreamRangeReply> = pipe.query_async(&mut conn).await?;
        ranges
            .into_iter()
            .flat_map(|r| r.ids)
            .filter(|entry| !entry.map.is_empty())
            .map(|entry| stream_entry(entry).map(|e| e.event))
            .collect()
    }

    /// Claims with the `unsure` flag handled: taken (and, with `own`, the consumer's own pending
    /// entries read first) before the claim, set again when the claim fails or when the own
    /// entries filled the batch (there may be more).
    pub(crate) async fn claim_marked<F, Fut>(&self, claim: F) -> StoreResult<Vec<StreamEntry>>
    where
        F: FnOnce(bool) -> Fut,
        Fut: std::future::Future<Output = StoreResult<(Vec<StreamEntry>, bool)>>,
    {
        use std::sync::atomic::Ordering;
        let own = self.unsure.swap(false, Ordering::AcqRel);
        match claim(own).await {
            Ok((entries, more)) => {
                if more {
                    self.unsure.store(true, Ordering::Release);
                }
                Ok(entries)
            }
            Err(e) => {
                self.unsure.store(true, Ordering::Release);
                Err(e)
            }
        }
    }

    /// Acknowledges entries of one stream.
    pub(crate) async fn ack_stream(&self, stream: &str, ids: &[&str]) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let mut invocation = USAGE_ACK.key(stream);
        invocation.arg(USAGE_GROUP);
        for id in ids {
            invocation.arg(*id);
        }
        let _: i64 = invocation.invoke_async(&mut conn).await?;
        Ok(())
    }

    async fn claim_once(
        &self,
        stream: &str,
        consumer: &str,
        max: usize,
        min_idle: Duration,
        own: bool,
    ) -> redis::RedisResult<(Vec<redis::streams::StreamId>, bool)> {
        let mut conn = self.conn.clone();
        let mut ids = Vec::new();
        let mut more = false;
        if own {
            // ID 0: this consumer's pending entries, delivered and never acknowledged.
            ids = read_group(&mut conn, stream, consumer, max, "0").await?;
            more = ids.len() >= max;
        }
        if ids.len() < max {
            let stale: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
                .arg(stream)
                .arg(USAGE_GROUP)
                .arg(consumer)
                .arg(u64::try_from(min_idle.as_millis()).unwrap_or(u64::MAX))
                .arg("0-0")
                .arg("COUNT")
                .arg(max - ids.len())
                .query_async(&mut conn)
                .await?;
            ids.extend(stale.claimed);
        }
        if ids.len() < max {
            let fresh = read_group(&mut conn, stream, consumer, max - ids.len(), ">").await?;
            ids.extend(fresh);
        }
        Ok((ids, more))
    }
}

#[async_trait]
impl WindowCounters for RedisStore {
    async fn hit(&self, key: &str, window: Duration) -> StoreResult<WindowHit> {
        let mut conn = self.conn.clone();
        let (count, reset_ms): (u64, u64) = WINDOW_HIT
            .key(self.schema.window_counter(key))
            .arg(u64::try_from(window.as_millis()).unwrap_or(u64::MAX).max(1))
            .invoke_async(&mut conn)
            .await?;
        Ok(WindowHit {
            count,
            resets_in: Duration::from_millis(reset_ms),
        })
    }
}

pub(crate) fn int(v: Option<&String>) -> StoreResult<i64> {
    v.and_then(|s| s.parse().ok())
        .ok_or_else(|| StoreError::Corrupt("wallet script reply".into()))
}

/// An amount in a wallet script reply (integer nano-USD).
pub(crate) fn usd(v: Option<&String>) -> StoreResult<NanoUsd> {
    int(v).map(NanoUsd::from_nanos)
}

#[async_trait]
impl Cooldowns for RedisStore {
    async fn cool(&self, account: &str, duration: Duration, cause: CoolCause) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let ms = u64::try_from(duration.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let _: i64 = COOLDOWN
            .key(self.schema.cooldown(account))
            .arg(ms)
            .arg(cause.as_str())
            .invoke_async(&mut conn)
            .await?;
        Ok(())
    }

    async fn remaining(&self, accounts: &[&str]) -> StoreResult<Vec<Option<Cooldown>>> {
        if accounts.is_empty() {
            return Ok(Vec::new());
        }
        if self.schema.is_cluster() {
            return self.remaining_each(accounts).await;
        }
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        for a in accounts {
            let key = self.schema.cooldown(a);
            pipe.cmd("PTTL").arg(&key).cmd("GET").arg(&key);
        }
        let replies: Vec<(i64, Option<String>)> = pipe.query_async(&mut conn).await?;
        Ok(replies.into_iter().map(cooldown).collect())
    }
}

#[async_trait]
impl Sessions for RedisStore {
    async fn account_of(&self, org: i64, session: &str) -> StoreResult<Option<String>> {
        let mut conn = self.conn.clone();
        Ok(conn.get(self.schema.session(org, session)).await?)
    }

    async fn remember(
        &self,
        org: i64,
        session: &str,
        account: &str,
        ttl: Duration,
    ) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let _: () = conn
            .pset_ex(self.schema.session(org, session), account, ms)
            .await?;
        Ok(())
    }
}

#[async_trait]
impl Slots for RedisStore {
    async fn acquire(
        &self,
        account: &str,
        slot_id: &str,
        max: u32,
        ttl: Duration,
    ) -> StoreResult<bool> {
        let mut conn = self.conn.clone();
        let taken: i64 = SLOT_ACQUIRE
            .key(self.schema.slots(account))
            .arg(slot_id)
            .arg(max)
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1))
            .invoke_async(&mut conn)
            .await?;
        Ok(taken == 1)
    }

    async fn release(&self, account: &str, slot_id: &str) -> StoreResult<()> {
        let mut conn = self.conn.clone();
        let _: i64 = conn.zrem(self.schema.slots(account), slot_id).await?;
        Ok(())
    }

    async fn in_use(&self, accounts: &[&str]) -> StoreResult<Vec<u32>> {
        if accounts.is_empty() {
            return Ok(Vec::new());
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as f64)
            .unwrap_or(0.0);
        if self.schema.is_cluster() {
            return self.in_use_each(accounts, now_ms).await;
        }
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        for a in accounts {
            pipe.cmd("ZCOUNT")
                .arg(self.schema.slots(a))
                .arg(now_ms)
                .arg("+inf");
        }
        Ok(pipe.query_async(&mut conn).await?)
    }
}

/// A cooldown as read: `PTTL` of the key (ms; not positive: open) and its value (the cause).
pub(crate) fn cooldown((ms, cause): (i64, Option<String>)) -> Option<Cooldown> {
    let left = u64::try_from(ms)
        .ok()
        .filter(|ms| *ms > 0)
        .map(Duration::from_millis)?;
    let cause = CoolCause::parse(cause.as_deref().unwrap_or_default());
    Some(Cooldown { left, cause })
}

/// The prefix must not contain a hash tag's braces: the tags of [`KeySchema`] decide the slots.
fn check_prefix(key_prefix: &str) -> StoreResult<()> {
    if key_prefix.contains('{') || key_prefix.contains('}') {
        return Err(StoreError::Unavailable(
            "redis key prefix must not contain '{' or '}'".into(),
        ));
    }
    Ok(())
}

pub(crate) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

/// `XREADGROUP` of the settler's group on one stream from `from` (`>`: entries never delivered;
/// `0`: the consumer's own pending ones).
/// Most pending entries [`RedisStore::pending_of`] reads.
pub(crate) const PENDING_READ: usize = 10_000;

/// A stream entry read back: its event, with what the settlement charged when `finish` wrote it.
fn stream_entry(entry: redis::streams::StreamId) -> StoreResult<StreamEntry> {
    let json: String = entry
        .get("e")
        .ok_or_else(|| StoreError::Corrupt(format!("usage entry {} has no e", entry.id)))?;
    let mut event: UsageEvent = serde_json::from_str(&json)
        .map_err(|e| StoreError::Corrupt(format!("usage entry {}: {e}", entry.id)))?;
    // Appended by finish.v5: what the settlement charged, beside the event.
    if let (Some(c), Some(x)) = (entry.get::<i64>("c"), entry.get::<i64>("x")) {
        event.charged_nanos = NanoUsd::from_nanos(c);
        event.excess_nanos = NanoUsd::from_nanos(x);
    }
    Ok(StreamEntry {
        id: entry.id,
        event,
    })
}

pub(crate) async fn read_group(
    conn: &mut Conn,
    stream: &str,
    consumer: &str,
    count: usize,
    from: &str,
) -> redis::RedisResult<Vec<redis::streams::StreamId>> {
    let reply: Option<StreamReadReply> = redis::cmd("XREADGROUP")
        .arg("GROUP")
        .arg(USAGE_GROUP)
        .arg(consumer)
        .arg("COUNT")
        .arg(count)
        .arg("STREAMS")
        .arg(stream)
        .arg(from)
        .query_async(conn)
        .await?;
    Ok(reply
        .map(|r| r.keys.into_iter().flat_map(|k| k.ids).collect())
        .unwrap_or_default())
}
