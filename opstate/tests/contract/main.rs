//! One contract suite, run against every backend of the operational store.
//!
//! The in-memory backend always runs. The Redis backend runs when `REDIS_URL` is set, each test
//! under its own random key prefix, and so does the Redis Cluster backend (`testkit::redis_cluster`:
//! a local cluster of three masters and three replicas); with `TOLLGATE_REQUIRE_SERVICES=1` (CI) a
//! missing `REDIS_URL` or cluster fails instead of skipping. One file per store trait (`keys`, `usage`, `counters`, `wallets`,
//! `cooldowns`, `sessions`, `media`, `slots`, `calls`, `leases`); the backends and fixtures are here.

#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: failing loudly is the point"
)]

use opstate::{KeyLimits, KeyPermissions, KeyRecord, Measurement, RedisStore, Stores, UsageEvent};
use std::collections::HashSet;
use std::time::Duration;

mod budgets;
mod calls;
mod cooldowns;
mod counters;
mod keys;
mod leases;
mod media;
mod sessions;
mod slots;
mod usage;
mod wallets;

/// An amount of nano-USD.
fn nano(nanos: i64) -> money::NanoUsd {
    money::NanoUsd::from_nanos(nanos)
}

async fn backends() -> Vec<(&'static str, Stores)> {
    let mut out = vec![("memory", Stores::memory())];
    match testkit::redis_url() {
        Some(url) => {
            let prefix = testkit::redis_prefix("contract");
            let stores = Stores::redis(&url, &prefix)
                .await
                .unwrap_or_else(|e| panic!("REDIS_URL={url} is set but unusable: {e}"));
            out.push(("redis", stores));
        }
        None => eprintln!("REDIS_URL not set: contract suite runs on the in-memory backend only"),
    }
    if let Some(seeds) = testkit::redis_cluster() {
        let prefix = testkit::redis_prefix("contract");
        let stores = Stores::redis_cluster(&seeds, &prefix)
            .await
            .unwrap_or_else(|e| panic!("the Redis Cluster at {seeds:?} is unusable: {e}"));
        out.push(("redis-cluster", stores));
    }
    out
}

fn record(key_id: i64) -> KeyRecord {
    KeyRecord {
        key_id,
        org_id: 42,
        group_id: 1,
        permissions: KeyPermissions::default(),
        rate: money::RateMultiplier::from_ppm(1_000_000),
        expires_at: None,
        limits: KeyLimits::default(),
        budget: None,
    }
}

fn event(n: u64) -> UsageEvent {
    UsageEvent {
        request_id: format!("req-{n}"),
        key_id: 7,
        org_id: 42,
        group_id: 1,
        route: "chat_completions".into(),
        model_requested: "openai/gpt-4o-mini".into(),
        model_served: "gpt-4o-mini".into(),
        account_id: "a".into(),
        input_tokens: 10 + n,
        output_tokens: 5,
        cached_tokens: 0,
        cache_write_tokens: 0,
        cache_write_1h_tokens: 0,
        measurement: Measurement::Exact,
        status: 200,
        stream: n.is_multiple_of(2),
        started_at_ms: 1_700_000_000_000 + n,
        latency_ms: 12,
        ttfb_ms: Some(3),
        attempts: 1,
        cost_nanos: nano(4_500),
        charged_nanos: nano(4_500),
        excess_nanos: nano(0),
        hold_nanos: nano(9_000),
        project: None,
        workflow: None,
        audio_seconds: 0,
        images: 0,
        video_seconds: 0,
        retail_rate: None,
        wholesale_rate: None,
        resent: false,
        supplier: Default::default(),
        batch: None,
    }
}

#[tokio::test]
async fn unreachable_redis_fails_fast() {
    let started = std::time::Instant::now();
    // Port 1 on loopback: nothing listens there.
    let r = Stores::redis("redis://127.0.0.1:1", "test:").await;
    assert!(r.is_err());
    assert!(started.elapsed() < Duration::from_secs(5));
    let started = std::time::Instant::now();
    let r = Stores::redis_cluster(&["redis://127.0.0.1:1".to_string()], "test:").await;
    assert!(r.is_err());
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(Stores::redis_cluster(&[], "test:").await.is_err());
}
