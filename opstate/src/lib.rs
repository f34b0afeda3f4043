//! The operational store: the state the gateway's hot path reads and writes, shared by every proxy
//! and admin-api instance of a deployment.
//!
//! Each capability is a trait named for what it holds ([`KeyDirectory`], [`UsageStream`],
//! [`WindowCounters`], [`Wallets`], [`Cooldowns`], [`Sessions`], [`Slots`], [`Media`], and [`Calls`], a call's admission and end in one step each), with two
//! backends passing one contract suite: Redis ([`RedisStore`], for fleets) and in-memory
//! ([`MemoryStore`], for the embedded single-process default). Callers hold them as `Arc<dyn …>`
//! through [`Stores`].
//!
//! Video tasks are kept by a [`TaskBook`]: the ledger database's (in admin-api) or
//! [`MemoryTaskBook`], one contract suite for both.
//!
//! This is not the ledger of record. PostgreSQL (or SQLite) is; whatever lives here can be rebuilt
//! from it, and code must treat "missing here" as "unknown", never as zero or absent.
//!
//! Redis rules (see [`schema`]): every key carries the configured prefix; every multi-step
//! operation is one versioned Lua script; no `SCAN` and no read-modify-write across round trips.

mod budget;
mod calls;
mod clock;
mod cluster_conn;
mod cooldowns;
mod counters;
mod error;
mod key_cache;
mod keys;
pub mod leases;
mod media;
mod memory;
mod memory_calls;
mod memory_wallets;
mod redis_calls;
mod redis_cluster;
mod redis_cluster_admit;
mod redis_media;
mod redis_store;
mod redis_streams;
mod redis_wallets;
pub mod schema;
mod sessions;
mod slots;
mod tasks;
mod usage;
mod wallet_state;
mod wallets;

pub use budget::{BudgetPeriod, KeyBudget, KeySpend, OverBudget, SpendAsk, SpendReport, Windows};
pub use calls::{
    Admitted, Calls, Finish, GateAsk, HoldAsk, Limited, Limits, MINUTE, RateAsk, SlotAsk, charged,
};
pub use clock::{Clock, ManualClock, SystemClock};
pub use cluster_conn::ClusterConn;
pub use cooldowns::{CoolCause, Cooldown, Cooldowns};
pub use counters::{WindowCounters, WindowHit};
pub use error::{StoreError, StoreResult};
pub use key_cache::{CachedKeys, KeyCache};
pub use keys::{KeyDirectory, KeyLimits, KeyPermissions, KeyRecord};
pub use leases::StreamLeases;
pub use media::{MEMORY_MEDIA_CAP, Media, MediaFile};
pub use memory::MemoryStore;
pub use redis_store::{Conn, RedisStore};
pub use sessions::Sessions;
pub use slots::Slots;
pub use tasks::{
    Ending, MEMORY_TASK_CAP, MemoryTaskBook, Task, TaskBook, TaskBookError, TaskStatus,
};
pub use usage::{
    AttemptOutcome, BatchRef, EarlierAttempt, Measurement, Served, StreamEntry, Supplier,
    UsageEvent, UsageStream, moved_homes,
};
pub use wallets::{
    Adjustment, Confirmation, ExpiredHold, HoldMeta, Reservation, Settlement, WalletSnapshot,
    Wallets,
};

use std::sync::Arc;

/// Every capability of the operational store, as shared trait objects.
#[derive(Clone)]
pub struct Stores {
    pub keys: Arc<dyn KeyDirectory>,
    pub usage: Arc<dyn UsageStream>,
    pub counters: Arc<dyn WindowCounters>,
    pub wallets: Arc<dyn Wallets>,
    pub cooldowns: Arc<dyn Cooldowns>,
    pub sessions: Arc<dyn Sessions>,
    pub slots: Arc<dyn Slots>,
    pub media: Arc<dyn Media>,
    /// A call's admission and end, each one round trip ([`Calls`]).
    pub calls: Arc<dyn Calls>,
    /// The settlers' leases on the usage streams (`leases`).
    pub leases: Arc<dyn StreamLeases>,
    /// The store is this process's own memory: it cannot lose its data while the process lives
    /// (and is gone with it).
    pub in_process: bool,
}

impl Stores {
    /// A fresh in-memory store (single process; lost on restart).
    pub fn memory() -> Stores {
        Stores::memory_with_clock(Arc::new(SystemClock))
    }

    /// A fresh in-memory store whose deadlines run on `clock` (tests).
    pub fn memory_with_clock(clock: Arc<dyn Clock>) -> Stores {
        let m = Arc::new(MemoryStore::with_clock(clock));
        Stores {
            keys: m.clone(),
            usage: m.clone(),
            counters: m.clone(),
            wallets: m.clone(),
            cooldowns: m.clone(),
            sessions: m.clone(),
            slots: m.clone(),
            media: m.clone(),
            leases: m.clone(),
            calls: m,
            in_process: true,
        }
    }

    /// Connects to Redis. Fails (and the caller stops) when Redis does not answer: a backend that
    /// fails to start never turns into "off".
    pub async fn redis(url: &str, key_prefix: &str) -> StoreResult<Stores> {
        Ok(Stores::of_redis(
            RedisStore::connect(url, key_prefix).await?,
        ))
    }

    /// Connects to a Redis Cluster through its `seeds` (see [`RedisStore::connect_cluster`]).
    pub async fn redis_cluster(seeds: &[String], key_prefix: &str) -> StoreResult<Stores> {
        Ok(Stores::of_redis(
            RedisStore::connect_cluster(seeds, key_prefix).await?,
        ))
    }

    /// Connects to one Redis server (`url`), or to a cluster when `cluster` names its seeds.
    pub async fn redis_at(url: &str, cluster: &[String], key_prefix: &str) -> StoreResult<Stores> {
        if cluster.is_empty() {
            Stores::redis(url, key_prefix).await
        } else {
            Stores::redis_cluster(cluster, key_prefix).await
        }
    }

    fn of_redis(r: RedisStore) -> Stores {
        let r = Arc::new(r);
        Stores {
            keys: r.clone(),
            usage: r.clone(),
            counters: r.clone(),
            wallets: r.clone(),
            cooldowns: r.clone(),
            sessions: r.clone(),
            slots: r.clone(),
            media: r.clone(),
            leases: r.clone(),
            calls: r,
            in_process: false,
        }
    }
}
