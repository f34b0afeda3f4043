//! One contract suite, run against every backend of the operational store.
//!
//! The in-memory backend always runs. The Redis backend runs when `REDIS_URL` is set, each test
//! under its own random key prefix; with `TOLLGATE_REQUIRE_SERVICES=1` (CI) a missing `REDIS_URL`
//! fails instead of skipping.

#![allow(
    clippy::panic,
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test code: failing loudly is the point"
)]

use opstate::{KeyLimits, KeyPermissions, KeyRecord, Measurement, RedisStore, Stores, UsageEvent};
use std::collections::HashSet;
use std::time::Duration;

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
    }
}

#[tokio::test]
async fn key_directory_publish_lookup_revoke() {
    for (name, s) in backends().await {
        assert_eq!(s.keys.lookup("h1").await.unwrap(), None, "{name}");
        s.keys.publish("h1", &record(1)).await.unwrap();
        assert_eq!(
            s.keys.lookup("h1").await.unwrap(),
            Some(record(1)),
            "{name}"
        );
        let mut updated = record(1);
        updated.permissions.openai = false;
        s.keys.publish("h1", &updated).await.unwrap();
        assert_eq!(s.keys.lookup("h1").await.unwrap(), Some(updated), "{name}");
        s.keys.revoke("h1").await.unwrap();
        assert_eq!(s.keys.lookup("h1").await.unwrap(), None, "{name}");
        // Revoking twice is harmless.
        s.keys.revoke("h1").await.unwrap();
    }
}

#[tokio::test]
async fn key_directory_load_marks_loaded_after_entries() {
    for (name, s) in backends().await {
        assert!(
            !s.keys.is_loaded().await.unwrap(),
            "{name}: fresh store is not loaded"
        );
        let entries: Vec<(String, KeyRecord)> = (0..1200)
            .map(|i| (format!("hash-{i}"), record(i)))
            .collect();
        s.keys.load(&entries).await.unwrap();
        assert!(s.keys.is_loaded().await.unwrap(), "{name}");
        assert_eq!(
            s.keys.lookup("hash-0").await.unwrap(),
            Some(record(0)),
            "{name}"
        );
        assert_eq!(
            s.keys.lookup("hash-1199").await.unwrap(),
            Some(record(1199)),
            "{name}"
        );
    }
}

#[tokio::test]
async fn old_records_without_permissions_default_to_allowed() {
    let parsed: KeyRecord =
        serde_json::from_str(r#"{"key_id":1,"org_id":2,"group_id":3}"#).unwrap();
    assert_eq!(parsed.permissions, KeyPermissions::default());
}

#[tokio::test]
async fn usage_stream_delivers_in_order_and_acks_remove() {
    for (name, s) in backends().await {
        for n in 0..5 {
            s.usage.append(&event(n)).await.unwrap();
        }
        assert_eq!(s.usage.backlog().await.unwrap(), 5, "{name}");
        let first = s
            .usage
            .claim("c1", 3, Duration::from_secs(60))
            .await
            .unwrap();
        let ids: Vec<_> = first.iter().map(|e| e.event.request_id.clone()).collect();
        assert_eq!(ids, ["req-0", "req-1", "req-2"], "{name}");
        assert_eq!(
            first[1].event,
            event(1),
            "{name}: events round-trip exactly"
        );
        let rest = s
            .usage
            .claim("c1", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(
            rest.len(),
            2,
            "{name}: claimed entries are not delivered twice"
        );
        let all: Vec<String> = first
            .iter()
            .chain(rest.iter())
            .map(|e| e.id.clone())
            .collect();
        s.usage.ack(&all).await.unwrap();
        assert_eq!(s.usage.backlog().await.unwrap(), 0, "{name}");
        assert!(
            s.usage
                .claim("c1", 10, Duration::ZERO)
                .await
                .unwrap()
                .is_empty(),
            "{name}"
        );
        s.usage.ack(&[]).await.unwrap();
    }
}

#[tokio::test]
async fn usage_stream_redelivers_entries_of_a_dead_consumer() {
    for (name, s) in backends().await {
        s.usage.append(&event(1)).await.unwrap();
        s.usage.append(&event(2)).await.unwrap();
        let dead = s
            .usage
            .claim("dead", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(dead.len(), 2, "{name}");
        // Not idle long enough yet: nothing for the survivor.
        let early = s
            .usage
            .claim("alive", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert!(early.is_empty(), "{name}");
        tokio::time::sleep(Duration::from_millis(30)).await;
        let taken = s
            .usage
            .claim("alive", 10, Duration::from_millis(20))
            .await
            .unwrap();
        let got: HashSet<_> = taken.iter().map(|e| e.event.request_id.clone()).collect();
        assert_eq!(
            got,
            HashSet::from(["req-1".to_string(), "req-2".to_string()]),
            "{name}"
        );
        s.usage
            .ack(&taken.iter().map(|e| e.id.clone()).collect::<Vec<_>>())
            .await
            .unwrap();
        assert_eq!(s.usage.backlog().await.unwrap(), 0, "{name}");
    }
}

#[tokio::test]
async fn concurrent_appends_lose_nothing() {
    for (name, s) in backends().await {
        let mut tasks = tokio::task::JoinSet::new();
        for n in 0..64 {
            let usage = s.usage.clone();
            tasks.spawn(async move { usage.append(&event(n)).await });
        }
        while let Some(r) = tasks.join_next().await {
            r.unwrap().unwrap();
        }
        let got = s
            .usage
            .claim("c", 100, Duration::from_secs(60))
            .await
            .unwrap();
        let ids: HashSet<_> = got.iter().map(|e| e.event.request_id.clone()).collect();
        assert_eq!(ids.len(), 64, "{name}");
    }
}

#[tokio::test]
async fn redis_flush_is_detected_and_the_group_recovers() {
    let Some(url) = testkit::redis_url() else {
        return;
    };
    let prefix = format!("test:{}:", uuid::Uuid::new_v4().simple());
    let store = RedisStore::connect(&url, &prefix).await.unwrap();
    use opstate::{KeyDirectory, UsageStream};
    store.load(&[("h".into(), record(1))]).await.unwrap();
    store.append(&event(1)).await.unwrap();
    // Simulate the loss of this deployment's keys (a flush, scoped to the test's prefix).
    let mut conn = store.connection();
    let schema = store.schema();
    let _: () = redis::cmd("DEL")
        .arg(schema.key_directory())
        .arg(schema.key_directory_loaded())
        .arg(schema.usage_stream())
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(
        !store.is_loaded().await.unwrap(),
        "a lost directory reads as not loaded"
    );
    assert_eq!(store.lookup("h").await.unwrap(), None);
    // The consumer group vanished with the stream; claiming recreates it.
    assert!(
        store
            .claim("c", 10, Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
    store.append(&event(2)).await.unwrap();
    let got = store.claim("c", 10, Duration::from_secs(60)).await.unwrap();
    assert_eq!(got.len(), 1);
}

#[tokio::test]
async fn unreachable_redis_fails_fast() {
    let started = std::time::Instant::now();
    // Port 1 on loopback: nothing listens there.
    let r = Stores::redis("redis://127.0.0.1:1", "test:").await;
    assert!(r.is_err());
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn window_counters_count_per_key_and_window() {
    for (name, s) in backends().await {
        let window = Duration::from_secs(60);
        // Stay clear of a window edge so the test cannot straddle two windows.
        let first = s.counters.hit("token:1:read", window).await.unwrap();
        if first.resets_in < Duration::from_secs(2) {
            tokio::time::sleep(first.resets_in + Duration::from_millis(50)).await;
        }
        let base = s.counters.hit("token:1:read", window).await.unwrap().count;
        for i in 1..=5 {
            let hit = s.counters.hit("token:1:read", window).await.unwrap();
            assert_eq!(hit.count, base + i, "{name}");
            assert!(
                hit.resets_in <= window && hit.resets_in > Duration::ZERO,
                "{name}"
            );
        }
        assert_eq!(
            s.counters.hit("token:1:write", window).await.unwrap().count,
            1,
            "{name}"
        );
        assert_eq!(
            s.counters.hit("token:2:read", window).await.unwrap().count,
            1,
            "{name}"
        );
    }
}

#[tokio::test]
async fn window_counters_reset_with_the_window() {
    for (name, s) in backends().await {
        let window = Duration::from_millis(200);
        let mut last = s.counters.hit("short", window).await.unwrap();
        while last.resets_in < Duration::from_millis(100) {
            tokio::time::sleep(last.resets_in + Duration::from_millis(5)).await;
            last = s.counters.hit("short", window).await.unwrap();
        }
        let start = last.count;
        assert_eq!(
            s.counters.hit("short", window).await.unwrap().count,
            start + 1,
            "{name}"
        );
        tokio::time::sleep(last.resets_in + Duration::from_millis(20)).await;
        assert_eq!(
            s.counters.hit("short", window).await.unwrap().count,
            1,
            "{name}: new window"
        );
    }
}

#[tokio::test]
async fn concurrent_hits_are_all_counted() {
    for (name, s) in backends().await {
        let window = Duration::from_secs(3600);
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..50 {
            let c = s.counters.clone();
            tasks.spawn(async move { c.hit("burst", window).await.unwrap().count });
        }
        let mut counts = Vec::new();
        while let Some(r) = tasks.join_next().await {
            counts.push(r.unwrap());
        }
        counts.sort_unstable();
        let first = counts[0];
        assert_eq!(
            counts,
            (first..first + 50).collect::<Vec<_>>(),
            "{name}: each hit counted once"
        );
    }
}

mod wallets {
    use super::*;
    use opstate::{Adjustment, Confirmation, ExpiredHold, Reservation, Settlement, WalletSnapshot};
    use proptest::prelude::*;

    #[tokio::test]
    async fn an_open_hold_can_be_extended_past_its_deadline() {
        for (name, s) in backends().await {
            let w = &s.wallets;
            w.load(5, nano(1_000)).await.unwrap();
            w.reserve(5, "long", nano(100), 0, "{}").await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert_eq!(
                w.expired(5).await.unwrap().len(),
                1,
                "{name}: past its deadline"
            );
            assert!(w.extend(5, "long", 60_000).await.unwrap(), "{name}");
            assert!(w.expired(5).await.unwrap().is_empty(), "{name}: extended");
            let snap = w.snapshot(5).await.unwrap().unwrap();
            assert_eq!(snap.reserved, nano(100), "{name}: the amount stays");
            assert!(
                !w.extend(5, "nope", 60_000).await.unwrap(),
                "{name}: no such hold"
            );
            assert!(
                !w.extend(6, "long", 60_000).await.unwrap(),
                "{name}: no such wallet"
            );
            assert_eq!(
                w.settle(5, "long", nano(40)).await.unwrap(),
                Settlement::Settled {
                    charged: nano(40),
                    excess: nano(0),
                    below_holds: false,
                },
                "{name}: settled as usual"
            );
        }
    }

    /// A mirror loaded below its open holds: a settlement charges nothing (never a credit, the
    /// cost is excess), the mirror says it is unreconciled, and the next load from the ledger
    /// clears that.
    #[tokio::test]
    async fn a_mirror_below_its_holds_never_credits_and_waits_for_a_reload() {
        for (name, s) in backends().await {
            let w = &s.wallets;
            w.load(8, nano(1_000)).await.unwrap();
            for h in ["a", "b"] {
                w.reserve(8, h, nano(400), 60_000, "").await.unwrap();
            }
            // The ledger dropped to 300 while 800 was held.
            w.load(8, nano(300)).await.unwrap();
            let snap = w.snapshot(8).await.unwrap().unwrap();
            assert!(
                snap.unreconciled,
                "{name}: balance below reserved is not reported"
            );
            assert_eq!(
                w.settle(8, "a", nano(100)).await.unwrap(),
                Settlement::Settled {
                    charged: nano(0),
                    excess: nano(100),
                    below_holds: true,
                },
                "{name}: 300 - 400 held elsewhere: nothing payable, nothing credited"
            );
            let snap = w.snapshot(8).await.unwrap().unwrap();
            assert_eq!(
                (snap.balance, snap.reserved, snap.unreconciled),
                (nano(300), nano(400), true),
                "{name}"
            );
            // The other hold is payable now (300 with none other held): charged as usual, and
            // the mirror stays marked until a load.
            assert_eq!(
                w.settle(8, "b", nano(50)).await.unwrap(),
                Settlement::Settled {
                    charged: nano(50),
                    excess: nano(0),
                    below_holds: false,
                },
                "{name}"
            );
            assert!(w.snapshot(8).await.unwrap().unwrap().unreconciled, "{name}");
            w.load(8, nano(250)).await.unwrap();
            let snap = w.snapshot(8).await.unwrap().unwrap();
            assert!(!snap.unreconciled, "{name}: a reload clears the mark");
            assert_eq!(
                (snap.balance, snap.reserved),
                (nano(250), nano(0)),
                "{name}"
            );
        }
    }

    #[tokio::test]
    async fn missing_wallet_fails_closed() {
        for (name, s) in backends().await {
            let w = &s.wallets;
            assert_eq!(w.snapshot(7).await.unwrap(), None, "{name}");
            assert_eq!(
                w.reserve(7, "h", nano(1), 60_000, "").await.unwrap(),
                Reservation::Missing,
                "{name}"
            );
            assert_eq!(
                w.adjust(7, nano(5), "r").await.unwrap(),
                Adjustment::Missing,
                "{name}"
            );
            assert_eq!(
                w.settle(7, "h", nano(1)).await.unwrap(),
                Settlement::Missing,
                "{name}"
            );
            assert!(!w.release(7, "h").await.unwrap(), "{name}");
            assert!(w.expired(7).await.unwrap().is_empty(), "{name}");
        }
    }

    #[tokio::test]
    async fn reserve_settle_release_adjust() {
        for (name, s) in backends().await {
            let w = &s.wallets;
            // A balance over 1e14 nano-USD (100 000 USD) stays exact.
            let big = 123_456_789_012_345_i64;
            w.load(1, nano(big)).await.unwrap();
            assert_eq!(
                w.snapshot(1).await.unwrap(),
                Some(WalletSnapshot {
                    balance: nano(big),
                    reserved: nano(0),
                    pending: nano(0),
                    unreconciled: false,
                }),
                "{name}"
            );
            w.load(1, nano(1_000)).await.unwrap();
            assert_eq!(
                w.reserve(1, "a", nano(600), 60_000, "").await.unwrap(),
                Reservation::Held {
                    available: nano(400)
                },
                "{name}"
            );
            assert_eq!(
                w.reserve(1, "a", nano(600), 60_000, "").await.unwrap(),
                Reservation::AlreadyHeld,
                "{name}"
            );
            assert_eq!(
                w.reserve(1, "b", nano(500), 60_000, "").await.unwrap(),
                Reservation::Insufficient {
                    available: nano(400)
                },
                "{name}"
            );
            // A debit may not take held money.
            assert_eq!(
                w.adjust(1, nano(-500), "dec-1").await.unwrap(),
                Adjustment::Insufficient {
                    available: nano(400)
                },
                "{name}"
            );
            assert_eq!(
                w.adjust(1, nano(-100), "dec-2").await.unwrap(),
                Adjustment::Applied { balance: nano(900) },
                "{name}"
            );
            assert_eq!(
                w.adjust(1, nano(-100), "dec-2").await.unwrap(),
                Adjustment::Duplicate,
                "{name}"
            );
            assert_eq!(
                w.settle(1, "a", nano(250)).await.unwrap(),
                Settlement::Settled {
                    charged: nano(250),
                    excess: nano(0),
                    below_holds: false,
                },
                "{name}"
            );
            assert_eq!(
                w.settle(1, "a", nano(250)).await.unwrap(),
                Settlement::Unknown,
                "{name}: at most once"
            );
            assert!(!w.release(1, "a").await.unwrap(), "{name}");
            assert_eq!(
                w.snapshot(1).await.unwrap(),
                Some(WalletSnapshot {
                    balance: nano(650),
                    reserved: nano(0),
                    pending: nano(250),
                    unreconciled: false,
                }),
                "{name}"
            );
            // Excess over what the wallet can pay is returned, never overdrawn.
            w.reserve(1, "c", nano(100), 60_000, "").await.unwrap();
            w.reserve(1, "d", nano(500), 60_000, "").await.unwrap();
            assert_eq!(
                w.settle(1, "c", nano(300)).await.unwrap(),
                Settlement::Settled {
                    charged: nano(150),
                    excess: nano(150),
                    below_holds: false,
                },
                "{name}"
            );
            assert_eq!(
                w.snapshot(1).await.unwrap(),
                Some(WalletSnapshot {
                    balance: nano(500),
                    reserved: nano(500),
                    pending: nano(400),
                    unreconciled: false,
                }),
                "{name}"
            );
            assert!(w.release(1, "d").await.unwrap(), "{name}");
            assert_eq!(
                w.snapshot(1).await.unwrap().unwrap().available(),
                Some(nano(500)),
                "{name}"
            );
            assert!(w.holding_orgs().await.unwrap().contains(&1), "{name}");
        }
    }

    #[tokio::test]
    async fn expired_holds_are_listed_until_resolved() {
        for (name, s) in backends().await {
            let w = &s.wallets;
            w.load(2, nano(100)).await.unwrap();
            w.reserve(2, "old", nano(30), 0, "{\"key_id\":1}")
                .await
                .unwrap();
            w.reserve(2, "new", nano(30), 60_000, "").await.unwrap();
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert_eq!(
                w.expired(2).await.unwrap(),
                vec![ExpiredHold {
                    hold_id: "old".into(),
                    amount: nano(30),
                    meta: "{\"key_id\":1}".into()
                }],
                "{name}"
            );
            assert_eq!(
                w.settle(2, "old", nano(10)).await.unwrap(),
                Settlement::Settled {
                    charged: nano(10),
                    excess: nano(0),
                    below_holds: false,
                },
                "{name}"
            );
            assert!(w.expired(2).await.unwrap().is_empty(), "{name}");
        }
    }

    #[tokio::test]
    async fn concurrent_reserves_never_overdraw() {
        for (name, s) in backends().await {
            let w = s.wallets.clone();
            w.load(3, nano(1_000)).await.unwrap();
            let mut tasks = tokio::task::JoinSet::new();
            for i in 0..64 {
                let w = w.clone();
                tasks.spawn(async move {
                    w.reserve(3, &format!("h{i}"), nano(30), 60_000, "")
                        .await
                        .unwrap()
                });
            }
            let mut held = 0;
            while let Some(r) = tasks.join_next().await {
                if matches!(r.unwrap(), Reservation::Held { .. }) {
                    held += 1;
                }
            }
            assert_eq!(held, 33, "{name}: exactly floor(1000 / 30) holds");
            let snap = w.snapshot(3).await.unwrap().unwrap();
            assert_eq!(
                (snap.reserved, snap.available()),
                (nano(990), Some(nano(10))),
                "{name}"
            );
        }
    }

    /// What a wallet should do, in plain Rust.
    #[derive(Default, Clone, Debug)]
    struct Model {
        present: bool,
        balance: i64,
        holds: std::collections::BTreeMap<String, i64>,
        adjusted: std::collections::BTreeSet<String>,
        pending: i64,
        charged: std::collections::BTreeMap<String, i64>,
        confirmed: std::collections::BTreeSet<String>,
        /// Holds reserved with a zero deadline (expired at once).
        expiring: std::collections::BTreeSet<String>,
        /// A settlement found the mirror below its holds (cleared by a load).
        unreconciled: bool,
    }

    #[derive(Debug, Clone)]
    enum Op {
        Load(i64),
        Adjust(i64, u8),
        Reserve(u8, i64),
        ReserveExpired(u8, i64),
        Settle(u8, i64),
        Release(u8),
        Confirm(u8, i64),
        Crash,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0i64..10_000).prop_map(Op::Load),
            (-3_000i64..3_000, 0u8..6).prop_map(|(d, r)| Op::Adjust(d, r)),
            (0u8..8, 0i64..4_000).prop_map(|(h, a)| Op::Reserve(h, a)),
            (0u8..8, 0i64..6_000).prop_map(|(h, a)| Op::Settle(h, a)),
            (0u8..8).prop_map(Op::Release),
            (0u8..8, 0i64..2_000).prop_map(|(h, a)| Op::Confirm(h, a)),
            (0u8..8, 0i64..2_000).prop_map(|(h, a)| Op::ReserveExpired(h, a)),
            Just(Op::Crash),
        ]
    }

    /// `raw`: the Redis store behind `stores`, whose keys a crash deletes (a flush).
    async fn run(ops: Vec<Op>, stores: Stores, raw: Option<RedisStore>) {
        let mut s = stores;
        let mut m = Model::default();
        let org = 42;
        for (i, op) in ops.into_iter().enumerate() {
            match op {
                Op::Load(b) => {
                    s.wallets.load(org, nano(b)).await.unwrap();
                    m.present = true;
                    m.balance = b;
                    m.pending = 0;
                    m.charged.clear();
                    m.unreconciled = false;
                }
                Op::ReserveExpired(h, a) => {
                    let hold = format!("h{h}");
                    let got = s.wallets.reserve(org, &hold, nano(a), 0, "").await.unwrap();
                    let available = m.balance - m.holds.values().sum::<i64>();
                    let want = if !m.present {
                        Reservation::Missing
                    } else if m.holds.contains_key(&hold) {
                        Reservation::AlreadyHeld
                    } else if a > available {
                        Reservation::Insufficient {
                            available: nano(available),
                        }
                    } else {
                        m.holds.insert(hold.clone(), a);
                        m.expiring.insert(hold);
                        Reservation::Held {
                            available: nano(available - a),
                        }
                    };
                    assert_eq!(got, want, "step {i}");
                }
                Op::Confirm(h, amount) => {
                    let hold = format!("h{h}");
                    let amount = m.charged.get(&hold).copied().unwrap_or(amount);
                    let got = s.wallets.confirm(org, &hold, nano(amount)).await.unwrap();
                    let want = if !m.present {
                        Confirmation::Missing
                    } else if m.charged.remove(&hold).is_some() {
                        m.pending -= amount;
                        m.confirmed.insert(hold);
                        Confirmation::Confirmed
                    } else if !m.confirmed.insert(hold) {
                        Confirmation::Duplicate
                    } else {
                        m.balance -= amount;
                        Confirmation::Applied
                    };
                    assert_eq!(got, want, "step {i}");
                }
                Op::Adjust(delta, r) => {
                    let got = s
                        .wallets
                        .adjust(org, nano(delta), &format!("r{r}"))
                        .await
                        .unwrap();
                    let reserved: i64 = m.holds.values().sum();
                    let want = if !m.present {
                        Adjustment::Missing
                    } else if m.adjusted.contains(&format!("r{r}")) {
                        Adjustment::Duplicate
                    } else if delta < 0 && m.balance + delta - reserved < 0 {
                        Adjustment::Insufficient {
                            available: nano(m.balance - reserved),
                        }
                    } else {
                        m.adjusted.insert(format!("r{r}"));
                        m.balance += delta;
                        Adjustment::Applied {
                            balance: nano(m.balance),
                        }
                    };
                    assert_eq!(got, want, "step {i}");
                }
                Op::Reserve(h, a) => {
                    let got = s
                        .wallets
                        .reserve(org, &format!("h{h}"), nano(a), 60_000, "")
                        .await
                        .unwrap();
                    let available = m.balance - m.holds.values().sum::<i64>();
                    let want = if !m.present {
                        Reservation::Missing
                    } else {
                        match m.holds.entry(format!("h{h}")) {
                            std::collections::btree_map::Entry::Occupied(_) => {
                                Reservation::AlreadyHeld
                            }
                            std::collections::btree_map::Entry::Vacant(_) if a > available => {
                                Reservation::Insufficient {
                                    available: nano(available),
                                }
                            }
                            std::collections::btree_map::Entry::Vacant(slot) => {
                                m.expiring.remove(slot.key());
                                slot.insert(a);
                                Reservation::Held {
                                    available: nano(available - a),
                                }
                            }
                        }
                    };
                    assert_eq!(got, want, "step {i}");
                }
                Op::Settle(h, actual) => {
                    let got = s
                        .wallets
                        .settle(org, &format!("h{h}"), nano(actual))
                        .await
                        .unwrap();
                    let want = if !m.present {
                        Settlement::Missing
                    } else if m.holds.remove(&format!("h{h}")).is_none() {
                        Settlement::Unknown
                    } else {
                        // Never a credit: a mirror below its other holds pays nothing and is
                        // marked unreconciled until the next load.
                        let payable = m.balance - m.holds.values().sum::<i64>();
                        let below_holds = payable < 0;
                        m.unreconciled |= below_holds;
                        let charged = actual.min(payable.max(0));
                        m.balance -= charged;
                        if charged > 0 {
                            m.pending += charged;
                            m.charged.insert(format!("h{h}"), charged);
                        }
                        Settlement::Settled {
                            charged: nano(charged),
                            excess: nano(actual - charged),
                            below_holds,
                        }
                    };
                    if let Settlement::Settled { charged, .. } = got {
                        assert!(charged >= nano(0), "step {i}: a settlement never credits");
                    }
                    assert_eq!(got, want, "step {i}");
                }
                Op::Release(h) => {
                    let got = s.wallets.release(org, &format!("h{h}")).await.unwrap();
                    let want = m.present && m.holds.remove(&format!("h{h}")).is_some();
                    assert_eq!(got, want, "step {i}");
                }
                Op::Crash => {
                    match &raw {
                        None => s = Stores::memory(),
                        Some(r) => {
                            let mut conn = r.connection();
                            let keys = r.schema().wallet(org);
                            let _: () = redis::cmd("DEL")
                                .arg(&keys[0])
                                .arg(&keys[1])
                                .arg(&keys[2])
                                .arg(&keys[3])
                                .arg(&keys[4])
                                .query_async(&mut conn)
                                .await
                                .unwrap();
                        }
                    }
                    m = Model::default();
                }
            }
            // Exactly the open zero-deadline holds are expired (each still resolvable once).
            let expired: std::collections::BTreeSet<String> = s
                .wallets
                .expired(org)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.hold_id)
                .collect();
            let want: std::collections::BTreeSet<String> = m
                .expiring
                .iter()
                .filter(|h| m.holds.contains_key(*h))
                .cloned()
                .collect();
            assert_eq!(expired, want, "step {i}: expired holds");
            let snap = s.wallets.snapshot(org).await.unwrap();
            let reserved: i64 = m.holds.values().sum();
            match snap {
                None => assert!(!m.present, "step {i}: a present wallet vanished"),
                Some(w) => {
                    assert!(m.present, "step {i}");
                    assert_eq!(
                        (w.balance, w.reserved, w.pending),
                        (nano(m.balance), nano(reserved), nano(m.pending)),
                        "step {i}"
                    );
                    assert_eq!(
                        w.unreconciled,
                        m.unreconciled || m.balance < reserved,
                        "step {i}: unreconciled"
                    );
                    assert!(
                        w.available() >= Some(nano(0)) || m.balance < reserved,
                        "step {i}: available < 0 only if loaded below holds"
                    );
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]
        #[test]
        fn memory_wallet_matches_the_model(ops in proptest::collection::vec(op(), 1..60)) {
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
                .block_on(run(ops, Stores::memory(), None));
        }

        #[test]
        fn redis_wallet_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
            let Some(url) = testkit::redis_url() else { return Ok(()) };
            tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
                let prefix = format!("prop:{}:", uuid::Uuid::new_v4().simple());
                let stores = Stores::redis(&url, &prefix).await.unwrap();
                let raw = RedisStore::connect(&url, &prefix).await.unwrap();
                run(ops, stores, Some(raw)).await;
            });
        }
    }
}

#[tokio::test]
async fn cooldowns_grow_never_shrink_and_expire() {
    use opstate::CoolCause::{Failure, UsageLimit};
    for (name, s) in backends().await {
        let c = &s.cooldowns;
        assert_eq!(
            c.remaining(&["a", "b"]).await.unwrap(),
            vec![None, None],
            "{name}"
        );
        c.cool("a", Duration::from_millis(300), UsageLimit)
            .await
            .unwrap();
        c.cool("a", Duration::from_millis(50), Failure)
            .await
            .unwrap();
        let left = c.remaining(&["a", "b"]).await.unwrap();
        let a = left[0].unwrap();
        assert!(
            a.left > Duration::from_millis(200),
            "{name}: a shorter cooldown never cuts a longer one"
        );
        assert_eq!(
            a.cause, UsageLimit,
            "{name}: the longer cooldown keeps its cause"
        );
        assert_eq!(left[1], None, "{name}");
        c.cool("b", Duration::from_millis(60), Failure)
            .await
            .unwrap();
        assert_eq!(
            c.remaining(&["b"]).await.unwrap()[0].map(|b| b.cause),
            Some(Failure),
            "{name}"
        );
        // A longer cooldown of another cause replaces it, cause included.
        c.cool("b", Duration::from_millis(80), UsageLimit)
            .await
            .unwrap();
        assert_eq!(
            c.remaining(&["b"]).await.unwrap()[0].map(|b| b.cause),
            Some(UsageLimit),
            "{name}"
        );
        tokio::time::sleep(Duration::from_millis(120)).await;
        let left = c.remaining(&["a", "b"]).await.unwrap();
        assert!(
            left[0].is_some() && left[1].is_none(),
            "{name}: b expired: {left:?}"
        );
        assert!(c.remaining(&[]).await.unwrap().is_empty());
    }
}

#[tokio::test]
async fn sticky_sessions_remember_and_expire() {
    for (name, s) in backends().await {
        let m = &s.sessions;
        assert_eq!(m.account_of(1, "conv").await.unwrap(), None, "{name}");
        m.remember(1, "conv", "acct-b", Duration::from_millis(150))
            .await
            .unwrap();
        assert_eq!(
            m.account_of(1, "conv").await.unwrap().as_deref(),
            Some("acct-b"),
            "{name}"
        );
        assert_eq!(
            m.account_of(2, "conv").await.unwrap(),
            None,
            "{name}: per organization"
        );
        m.remember(1, "conv", "acct-c", Duration::from_millis(150))
            .await
            .unwrap();
        assert_eq!(
            m.account_of(1, "conv").await.unwrap().as_deref(),
            Some("acct-c"),
            "{name}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(
            m.account_of(1, "conv").await.unwrap(),
            None,
            "{name}: expired"
        );
    }
}

#[tokio::test]
async fn media_files_round_trip_and_expire() {
    for (name, s) in backends().await {
        let m = &s.media;
        assert_eq!(m.get("img").await.unwrap(), None, "{name}");
        let png = opstate::MediaFile {
            content_type: "image/png".into(),
            bytes: bytes::Bytes::from_static(b"\x89PNG\r\n\x1a\n\0binary\0bytes"),
        };
        m.put("img", &png, Duration::from_millis(150))
            .await
            .unwrap();
        assert_eq!(m.get("img").await.unwrap().as_ref(), Some(&png), "{name}");
        assert_eq!(m.get("other").await.unwrap(), None, "{name}");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert_eq!(m.get("img").await.unwrap(), None, "{name}: expired");
    }
}

#[tokio::test]
async fn slots_cap_concurrency_and_expire() {
    for (name, s) in backends().await {
        let sl = &s.slots;
        let ttl = Duration::from_millis(200);
        assert!(sl.acquire("acct", "r1", 2, ttl).await.unwrap(), "{name}");
        assert!(
            sl.acquire("acct", "r1", 2, ttl).await.unwrap(),
            "{name}: idempotent"
        );
        assert!(sl.acquire("acct", "r2", 2, ttl).await.unwrap(), "{name}");
        assert!(
            !sl.acquire("acct", "r3", 2, ttl).await.unwrap(),
            "{name}: full"
        );
        assert_eq!(
            sl.in_use(&["acct", "other"]).await.unwrap(),
            vec![2, 0],
            "{name}"
        );
        sl.release("acct", "r1").await.unwrap();
        assert!(
            sl.acquire("acct", "r3", 2, ttl).await.unwrap(),
            "{name}: a released slot is free"
        );
        // A dead proxy's slots stop counting after their TTL.
        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(sl.in_use(&["acct"]).await.unwrap(), vec![0], "{name}");
        assert!(sl.acquire("acct", "r4", 1, ttl).await.unwrap(), "{name}");
    }
}

#[tokio::test]
async fn concurrent_slot_takers_never_exceed_the_cap() {
    for (name, s) in backends().await {
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..40 {
            let sl = s.slots.clone();
            tasks.spawn(async move {
                sl.acquire("hot", &format!("r{i}"), 7, Duration::from_secs(60))
                    .await
                    .unwrap()
            });
        }
        let mut taken = 0;
        while let Some(r) = tasks.join_next().await {
            taken += usize::from(r.unwrap());
        }
        assert_eq!(taken, 7, "{name}");
    }
}

/// Redis only: confirmed charges live in their own pruned sorted set, never in the adjustment
/// set, and a reload removes the `confirmed:` members an earlier script version left there.
#[tokio::test]
async fn redis_confirmed_charges_stay_out_of_the_adjustment_set() {
    let Some(url) = testkit::redis_url() else {
        return;
    };
    let prefix = format!("confirmed:{}:", uuid::Uuid::new_v4().simple());
    let raw = RedisStore::connect(&url, &prefix).await.unwrap();
    let s = Stores::redis(&url, &prefix).await.unwrap();
    let keys = raw.schema().wallet(7);
    let mut conn = raw.connection();
    s.wallets.load(7, nano(1_000)).await.unwrap();
    for h in ["a", "b"] {
        s.wallets
            .reserve(7, h, nano(100), 60_000, "")
            .await
            .unwrap();
        s.wallets.settle(7, h, nano(40)).await.unwrap();
        assert_eq!(
            s.wallets.confirm(7, h, nano(40)).await.unwrap(),
            opstate::Confirmation::Confirmed
        );
        assert_eq!(
            s.wallets.confirm(7, h, nano(40)).await.unwrap(),
            opstate::Confirmation::Duplicate
        );
    }
    let adjusted: Vec<String> = redis::cmd("SMEMBERS")
        .arg(&keys[2])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(adjusted.is_empty(), "{adjusted:?}");
    let confirmed: u64 = redis::cmd("ZCARD")
        .arg(&keys[4])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(confirmed, 2);
    // A member written by wallet v1 is still recognised, and a reload clears it.
    let _: () = redis::cmd("SADD")
        .arg(&keys[2])
        .arg("confirmed:old")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        s.wallets.confirm(7, "old", nano(40)).await.unwrap(),
        opstate::Confirmation::Duplicate
    );
    s.wallets.load(7, nano(920)).await.unwrap();
    let adjusted: Vec<String> = redis::cmd("SMEMBERS")
        .arg(&keys[2])
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(adjusted.is_empty(), "{adjusted:?}");
    let snap = s.wallets.snapshot(7).await.unwrap().unwrap();
    assert_eq!((snap.balance, snap.pending), (nano(920), nano(0)));
}

/// Admission in one step: cooling accounts are skipped and reported, the slot goes to the first
/// open account with room, and the hold opens with it; a refused hold leaves no slot taken; no
/// room anywhere asks nothing of the wallet.
#[tokio::test]
async fn admission_takes_slot_and_hold_together_or_neither() {
    use opstate::{CoolCause, HoldAsk, Limits, Reservation, SlotAsk};
    for (name, s) in backends().await {
        let ttl = Duration::from_secs(30);
        s.wallets.load(42, nano(1_000)).await.unwrap();
        s.cooldowns
            .cool("cold", Duration::from_secs(20), CoolCause::UsageLimit)
            .await
            .unwrap();
        assert!(s.slots.acquire("full", "other", 1, ttl).await.unwrap());
        let asks = [
            SlotAsk {
                account: "cold",
                max: 5,
            },
            SlotAsk {
                account: "full",
                max: 1,
            },
            SlotAsk {
                account: "open",
                max: 2,
            },
        ];
        let hold = |id: &'static str, amount: i64| HoldAsk {
            org: 42,
            hold_id: id,
            amount: nano(amount),
            ttl_ms: 60_000,
            meta: "{\"route\":\"chat\"}",
        };
        let a = s
            .calls
            .admit(
                &asks,
                "call-1",
                ttl,
                Limits::default(),
                Some(hold("call-1", 600)),
            )
            .await
            .unwrap();
        assert_eq!(a.taken, Some(2), "{name}");
        assert_eq!(
            a.reservation,
            Some(Reservation::Held {
                available: nano(400)
            }),
            "{name}"
        );
        let cold = a.cooldowns[0].expect("cold account reported");
        assert_eq!(cold.cause, CoolCause::UsageLimit, "{name}");
        assert!(cold.left > Duration::from_secs(15), "{name}: {cold:?}");
        assert_eq!(a.cooldowns[1..], [None, None], "{name}");
        assert_eq!(
            s.slots.in_use(&["open", "full", "cold"]).await.unwrap(),
            [1, 1, 0],
            "{name}"
        );
        let snap = s.wallets.snapshot(42).await.unwrap().unwrap();
        assert_eq!(snap.reserved, nano(600), "{name}");

        // Not enough balance: refused, and the slot it would have taken is free again.
        let b = s
            .calls
            .admit(
                &asks,
                "call-2",
                ttl,
                Limits::default(),
                Some(hold("call-2", 500)),
            )
            .await
            .unwrap();
        assert_eq!(b.taken, None, "{name}");
        assert_eq!(
            b.reservation,
            Some(Reservation::Insufficient {
                available: nano(400)
            }),
            "{name}"
        );
        assert_eq!(s.slots.in_use(&["open"]).await.unwrap(), [1], "{name}");

        // Every open account full: nothing asked of the wallet.
        let c = s
            .calls
            .admit(
                &asks[..2],
                "call-3",
                ttl,
                Limits::default(),
                Some(hold("call-3", 1)),
            )
            .await
            .unwrap();
        assert_eq!((c.taken, c.reservation), (None, None), "{name}");
        assert_eq!(
            s.wallets.snapshot(42).await.unwrap().unwrap().reserved,
            nano(600),
            "{name}"
        );

        // No mirror: fail closed, no slot kept.
        let d = s
            .calls
            .admit(
                &asks,
                "call-4",
                ttl,
                Limits::default(),
                Some(HoldAsk {
                    org: 4242,
                    ..hold("call-4", 1)
                }),
            )
            .await
            .unwrap();
        assert_eq!(
            (d.taken, d.reservation),
            (None, Some(Reservation::Missing)),
            "{name}"
        );
        assert_eq!(s.slots.in_use(&["open"]).await.unwrap(), [1], "{name}");

        // Without a hold (a token count): the slot alone.
        let e = s
            .calls
            .admit(&asks, "call-5", ttl, Limits::default(), None)
            .await
            .unwrap();
        assert_eq!((e.taken, e.reservation), (Some(2), None), "{name}");
        assert_eq!(s.slots.in_use(&["open"]).await.unwrap(), [2], "{name}");
    }
}

/// The end of a call in one step: slot back, hold settled (at most what the wallet can pay), the
/// event appended with what was charged; a second end finds the hold resolved, charges nothing
/// and carries the cost as excess.
#[tokio::test]
async fn finish_releases_settles_and_appends_what_was_charged() {
    use opstate::{Finish, HoldAsk, Limits, Settlement, SlotAsk};
    for (name, s) in backends().await {
        let ttl = Duration::from_secs(30);
        s.wallets.load(42, nano(10_000)).await.unwrap();
        let asks = [SlotAsk {
            account: "a",
            max: 4,
        }];
        let hold = HoldAsk {
            org: 42,
            hold_id: "req-1",
            amount: nano(9_000),
            ttl_ms: 60_000,
            meta: "",
        };
        let admitted = s
            .calls
            .admit(&asks, "req-1", ttl, Limits::default(), Some(hold))
            .await
            .unwrap();
        assert_eq!(admitted.taken, Some(0), "{name}");
        let mut e = event(1);
        e.charged_nanos = nano(0);
        let end = Finish {
            slot: Some(("a", "req-1")),
            gates: &[],
            hold: Some((42, "req-1")),
            cost: nano(4_500),
            event: Some(&e),
        };
        let settled = s.calls.finish(end).await.unwrap();
        assert_eq!(
            settled,
            Some(Settlement::Settled {
                charged: nano(4_500),
                excess: nano(0),
                below_holds: false,
            }),
            "{name}"
        );
        assert_eq!(s.slots.in_use(&["a"]).await.unwrap(), [0], "{name}");
        let snap = s.wallets.snapshot(42).await.unwrap().unwrap();
        assert_eq!(
            (snap.balance, snap.reserved),
            (nano(5_500), nano(0)),
            "{name}"
        );
        // Again (a retry after a lost answer): nothing charged, the event again with excess.
        let again = s.calls.finish(end).await.unwrap();
        assert_eq!(again, Some(Settlement::Unknown), "{name}");
        let got = s
            .usage
            .claim("c", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(got.len(), 2, "{name}");
        assert_eq!(
            (got[0].event.charged_nanos, got[0].event.excess_nanos),
            (nano(4_500), nano(0)),
            "{name}"
        );
        assert_eq!(
            (got[1].event.charged_nanos, got[1].event.excess_nanos),
            (nano(0), nano(4_500)),
            "{name}"
        );
        assert_eq!(got[0].event.request_id, "req-1", "{name}");
        // An event without a hold is appended as it is; nothing else moves.
        let plain = event(2);
        let none = Finish {
            slot: None,
            gates: &[],
            hold: None,
            cost: nano(0),
            event: Some(&plain),
        };
        assert_eq!(s.calls.finish(none).await.unwrap(), None, "{name}");
        let got = s
            .usage
            .claim("c", 10, Duration::from_secs(60))
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "{name}");
        assert_eq!(got[0].event, plain, "{name}");
        assert_eq!(
            s.wallets.snapshot(42).await.unwrap().unwrap().balance,
            nano(5_500),
            "{name}"
        );
    }
}

/// Admission under limits: a full gate or a spent minute refuses the call and takes nothing (no
/// gate slot, no account slot, no hold, no count); an admitted call holds a slot in every gate
/// until its end gives them back, and counts once in its minute.
#[tokio::test]
async fn limits_refuse_before_anything_is_taken() {
    use opstate::{Finish, GateAsk, HoldAsk, Limited, Limits, RateAsk, Reservation, SlotAsk};
    for (name, s) in backends().await {
        // Redis counts minutes on its clock (this machine's): stay clear of a minute's end.
        let into = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis()
            % 60_000;
        if into > 55_000 {
            tokio::time::sleep(Duration::from_millis(60_100 - into as u64)).await;
        }
        let ttl = Duration::from_secs(30);
        s.wallets.load(42, nano(1_000)).await.unwrap();
        let asks = [SlotAsk {
            account: "acct",
            max: 10,
        }];
        let gates = [
            GateAsk {
                gate: "global",
                max: 3,
            },
            GateAsk {
                gate: "key:7",
                max: 2,
            },
        ];
        let limits = Limits {
            gates: &gates,
            per_minute: Some(RateAsk {
                counter: "key:7",
                limit: 3,
            }),
            key: None,
        };
        let hold = |id: &'static str| HoldAsk {
            org: 42,
            hold_id: id,
            amount: nano(10),
            ttl_ms: 60_000,
            meta: "",
        };
        for id in ["r1", "r2"] {
            let a = s
                .calls
                .admit(&asks, id, ttl, limits, Some(hold(id)))
                .await
                .unwrap();
            assert_eq!((a.taken, a.limited), (Some(0), None), "{name} {id}");
        }
        // The key's gate is full (2): refused, nothing taken.
        let c = s
            .calls
            .admit(&asks, "r3", ttl, limits, Some(hold("r3")))
            .await
            .unwrap();
        assert_eq!(c.limited, Some(Limited::Gate(1)), "{name}");
        assert_eq!((c.taken, c.reservation), (None, None), "{name}");
        assert_eq!(s.slots.in_use(&["acct"]).await.unwrap(), [2], "{name}");
        let snap = s.wallets.snapshot(42).await.unwrap().unwrap();
        assert_eq!(snap.reserved, nano(20), "{name}");
        // Another key still fits under the global gate (3), then the global gate is full.
        let other = Limits {
            gates: &gates[..1],
            per_minute: None,
            key: None,
        };
        let d = s.calls.admit(&asks, "o1", ttl, other, None).await.unwrap();
        assert_eq!((d.taken, d.limited), (Some(0), None), "{name}");
        let e = s.calls.admit(&asks, "o2", ttl, other, None).await.unwrap();
        assert_eq!(
            (e.taken, e.limited),
            (None, Some(Limited::Gate(0))),
            "{name}"
        );
        // An end gives the gate slots back: r3 now fits (the global gate has o1, r2 and r3).
        let end = Finish {
            slot: Some(("acct", "r1")),
            gates: &["global", "key:7"],
            hold: Some((42, "r1")),
            cost: nano(10),
            event: None,
        };
        s.calls.finish(end).await.unwrap();
        let f = s
            .calls
            .admit(&asks, "r3", ttl, limits, Some(hold("r3")))
            .await
            .unwrap();
        assert_eq!((f.taken, f.limited), (Some(0), None), "{name}");
        assert!(
            matches!(f.reservation, Some(Reservation::Held { .. })),
            "{name}"
        );
        // Three calls counted this minute (r1, r2, r3): the fourth is refused for the minute
        // even with room in the gates, and says when the minute ends.
        for (gate_slot, gates_of) in [
            ("r2", &["global", "key:7"][..]),
            ("r3", &["global", "key:7"][..]),
        ] {
            let end = Finish {
                slot: Some(("acct", gate_slot)),
                gates: gates_of,
                hold: Some((42, gate_slot)),
                cost: nano(10),
                event: None,
            };
            s.calls.finish(end).await.unwrap();
        }
        let g = s
            .calls
            .admit(&asks, "r4", ttl, limits, Some(hold("r4")))
            .await
            .unwrap();
        match g.limited {
            Some(Limited::PerMinute { resets_in }) => {
                assert!(
                    resets_in <= Duration::from_secs(60),
                    "{name}: {resets_in:?}"
                )
            }
            other => panic!("{name}: {other:?}"),
        }
        assert_eq!((g.taken, g.reservation), (None, None), "{name}");
        assert_eq!(
            s.slots.in_use(&["acct"]).await.unwrap(),
            [1],
            "{name} (o1 only)"
        );
        // A refusal by the wallet gives the gate slots and the minute's count back.
        let poor = Limits {
            gates: &gates[..1],
            per_minute: Some(RateAsk {
                counter: "key:8",
                limit: 1,
            }),
            key: None,
        };
        let h = s
            .calls
            .admit(
                &asks,
                "p1",
                ttl,
                poor,
                Some(HoldAsk {
                    amount: nano(1_000_000),
                    ..hold("p1")
                }),
            )
            .await
            .unwrap();
        assert_eq!(h.taken, None, "{name}");
        assert!(
            matches!(h.reservation, Some(Reservation::Insufficient { .. })),
            "{name}"
        );
        let i = s.calls.admit(&asks, "p2", ttl, poor, None).await.unwrap();
        assert_eq!(
            (i.taken, i.limited),
            (Some(0), None),
            "{name}: count given back"
        );
    }
}

/// Confirmations of a batch in one step: each as `confirm` would answer it.
#[tokio::test]
async fn confirm_many_answers_each_charge_like_confirm() {
    use opstate::Confirmation;
    for (name, s) in backends().await {
        s.wallets.load(42, nano(10_000)).await.unwrap();
        s.wallets
            .reserve(42, "h1", nano(100), 60_000, "")
            .await
            .unwrap();
        s.wallets.settle(42, "h1", nano(100)).await.unwrap();
        let got = s
            .wallets
            .confirm_many(&[
                (42, "h1", nano(100)),
                (42, "h1", nano(100)),
                (42, "h2", nano(50)),
                (99, "h3", nano(1)),
            ])
            .await
            .unwrap();
        assert_eq!(
            got,
            [
                Confirmation::Confirmed,
                Confirmation::Duplicate,
                Confirmation::Applied,
                Confirmation::Missing
            ],
            "{name}"
        );
        let snap = s.wallets.snapshot(42).await.unwrap().unwrap();
        assert_eq!(
            (snap.balance, snap.pending),
            (nano(9_850), nano(0)),
            "{name}"
        );
        assert!(
            s.wallets.confirm_many(&[]).await.unwrap().is_empty(),
            "{name}"
        );
    }
}

/// Admission checks the caller's key against the directory in its own step: a key revoked after
/// a proxy read (and cached) its record is refused and nothing is taken; a key still published is
/// admitted; a directory the store lost (not marked loaded) proves nothing and refuses no one.
#[tokio::test]
async fn admission_refuses_a_key_revoked_since_its_record_was_read() {
    use opstate::{HoldAsk, Limited, Limits, SlotAsk};
    for (name, s) in backends().await {
        s.keys.load(&[]).await.unwrap();
        s.keys.publish("hash-live", &record(1)).await.unwrap();
        s.keys.publish("hash-gone", &record(2)).await.unwrap();
        s.keys.revoke("hash-gone").await.unwrap();
        s.wallets.load(42, nano(1_000)).await.unwrap();
        let asks = [SlotAsk {
            account: "acct-rev",
            max: 10,
        }];
        let ttl = Duration::from_secs(30);
        let hold = |id: &'static str| HoldAsk {
            org: 42,
            hold_id: id,
            amount: nano(10),
            ttl_ms: 60_000,
            meta: "",
        };
        let with_key = |key: &'static str| Limits {
            key: Some(key),
            ..Limits::default()
        };
        let refused = s
            .calls
            .admit(&asks, "r1", ttl, with_key("hash-gone"), Some(hold("r1")))
            .await
            .unwrap();
        assert_eq!(refused.limited, Some(Limited::Revoked), "{name}");
        assert_eq!((refused.taken, refused.reservation), (None, None), "{name}");
        assert_eq!(s.slots.in_use(&["acct-rev"]).await.unwrap(), [0], "{name}");
        let snap = s.wallets.snapshot(42).await.unwrap().unwrap();
        assert_eq!(snap.reserved, nano(0), "{name}: nothing held");
        let admitted = s
            .calls
            .admit(&asks, "r2", ttl, with_key("hash-live"), Some(hold("r2")))
            .await
            .unwrap();
        assert_eq!(
            (admitted.limited, admitted.taken),
            (None, Some(0)),
            "{name}"
        );
        // Without a check (None) the directory is not consulted.
        let unchecked = s
            .calls
            .admit(&asks, "r3", ttl, Limits::default(), None)
            .await
            .unwrap();
        assert_eq!(unchecked.limited, None, "{name}");
    }
    // A directory that was never loaded (or was lost) proves nothing.
    let s = Stores::memory();
    s.wallets.load(42, nano(1_000)).await.unwrap();
    let asks = [SlotAsk {
        account: "a",
        max: 1,
    }];
    let limits = Limits {
        key: Some("hash-unknown"),
        ..Limits::default()
    };
    let admitted = s
        .calls
        .admit(&asks, "r", Duration::from_secs(30), limits, None)
        .await
        .unwrap();
    assert_eq!((admitted.limited, admitted.taken), (None, Some(0)));
}
