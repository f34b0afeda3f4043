//! Settlers that share the usage streams (issue 48): several settlers, each holding leases on
//! its share of the streams, book every event once; one killed mid-run (no final drain, no
//! leases given back) loses nothing, its streams and the entries it had claimed taken over at
//! once when its leases lapse.

use super::settlement::settled_event;
use super::*;
use admin_api::workers::settler_share;
use sea_orm::{EntityTrait, PaginatorTrait};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The stores of the test: one Redis server and a Redis Cluster (16 streams), each as present.
async fn shared_stores(name: &str) -> Vec<(&'static str, Stores)> {
    let mut out = Vec::new();
    if let Some(url) = testkit::redis_url() {
        out.push((
            "one-redis",
            Stores::redis(&url, &testkit::redis_prefix(name))
                .await
                .unwrap(),
        ));
    }
    if let Some(seeds) = testkit::redis_cluster() {
        out.push((
            "redis-cluster",
            Stores::redis_cluster(&seeds, &testkit::redis_prefix(name))
                .await
                .unwrap(),
        ));
    }
    out
}

async fn booked(api: &Api) -> u64 {
    entities::usage_records::Entity::find()
        .count(&api.state.db)
        .await
        .unwrap()
}

async fn wait_booked(api: &Api, n: u64, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        let got = booked(api).await;
        if got >= n {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {got} of {n} booked");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn four_settlers_share_the_streams_and_one_killed_loses_nothing() {
    let stores = shared_stores("settlers").await;
    if stores.is_empty() {
        eprintln!("no Redis: leases are shared through a store that outlives a settler");
        return;
    }
    for (name, stores) in stores {
        let api = Api::start_on("", stores).await;
        let owner = api.owner("1000").await;
        // 16 organizations of consecutive ids: one on every money slot (each cluster stream).
        let mut orgs = Vec::new();
        for i in 0..16 {
            orgs.push(
                api.active_customer(&owner, &format!("org{i}"), 10.0, 1.0)
                    .await
                    .1,
            );
        }
        let usage = api.state.stores.usage.clone();
        let append = |from: usize, to: usize| {
            let usage = usage.clone();
            let orgs = orgs.clone();
            async move {
                for n in from..to {
                    let org = orgs[n % orgs.len()];
                    let at = 1_700_000_000_000 + n as u64;
                    let e =
                        settled_event(&format!("{name}-{n}"), org, "gpt-4o-mini", at, 1_000, 1_000);
                    usage.append(&e).await.unwrap();
                }
            }
        };
        let ids = ["s0", "s1", "s2", "s3"];
        let mut stops = Vec::new();
        let mut tasks = JoinSet::new();
        let mut handles = HashMap::new();
        for id in ids {
            let (stop, rx) = tokio::sync::watch::channel(false);
            stops.push(stop);
            let h = tasks.spawn(settler_share::run(
                api.state.clone(),
                id.to_string(),
                Duration::from_millis(50),
                rx,
            ));
            handles.insert(id, h);
        }
        append(0, 2000).await;
        wait_booked(&api, 500, Duration::from_secs(60), name).await;
        let leases = api.state.stores.leases.clone();
        let count = leases.stream_count();
        // Within a few rounds every stream is leased, on a cluster 4 to each settler.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let mut by: HashMap<String, usize> = HashMap::new();
            for i in 0..count {
                if let Some(h) = leases.holder(i).await.unwrap() {
                    *by.entry(h).or_default() += 1;
                }
            }
            let fair = by.values().sum::<usize>() == count
                && (count < ids.len() || (by.len() == 4 && by.values().all(|&n| n == 4)));
            if fair {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{name}: shares never fair: {by:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        // The holder of stream 0 dies mid-run: no final drain, no leases given back.
        let victim = leases.holder(0).await.unwrap().unwrap();
        handles[victim.as_str()].abort();
        let killed = Instant::now();
        append(2000, 4000).await;
        // Its streams are taken once its leases lapse (5 s), and what it had claimed is claimed
        // at once by the new owner: everything is booked well before the 30 s claim timeout.
        wait_booked(&api, 4000, Duration::from_secs(25), name).await;
        eprintln!("{name}: all booked {:?} after the kill", killed.elapsed());
        for stop in &stops {
            let _ = stop.send(true);
        }
        while tasks.join_next().await.is_some() {}
        assert_eq!(booked(&api).await, 4000, "{name}: each event once");
        assert_eq!(api.state.stores.usage.backlog().await.unwrap(), 0, "{name}");
        // Each organization's spend is its events' charges, once each.
        for org in &orgs {
            let spent = admin_api::ledger::balance(
                &api.state.db,
                &admin_api::ledger::AccountRef::org_spend(*org).code,
            )
            .await
            .unwrap();
            assert_eq!(spent, nano(1_000 * 4000 / 16), "{name}: organization {org}");
        }
        // The settlers left: every lease is free again (the victim's lapsed).
        tokio::time::sleep(opstate::leases::LEASE_TTL).await;
        for i in 0..count {
            assert!(
                leases
                    .take(i, "after", Duration::from_millis(100))
                    .await
                    .unwrap(),
                "{name}: stream {i}"
            );
        }
    }
}

/// A usage stream whose server the test changes (`homes`), over the in-memory store.
struct Moving {
    inner: Arc<dyn opstate::UsageStream>,
    home: std::sync::Mutex<String>,
}

#[async_trait::async_trait]
impl opstate::UsageStream for Moving {
    async fn append(&self, event: &opstate::UsageEvent) -> opstate::StoreResult<()> {
        self.inner.append(event).await
    }
    async fn claim(
        &self,
        consumer: &str,
        max: usize,
        min_idle: Duration,
    ) -> opstate::StoreResult<Vec<opstate::StreamEntry>> {
        self.inner.claim(consumer, max, min_idle).await
    }
    async fn ack(&self, ids: &[String]) -> opstate::StoreResult<()> {
        self.inner.ack(ids).await
    }
    async fn backlog(&self) -> opstate::StoreResult<u64> {
        self.inner.backlog().await
    }
    async fn homes(&self) -> opstate::StoreResult<Vec<Option<String>>> {
        Ok(vec![Some(self.home.lock().unwrap().clone())])
    }
}

/// Issue 48: a stream's server changed (a failover) and lost a confirmation the settler had
/// made: the mirror's pending charge is too high (the balance answers 503). The settler leasing
/// the stream reloads the mirror from the ledger on its own, with no reload by hand.
#[tokio::test]
async fn a_stream_whose_server_changed_has_its_mirrors_reloaded_by_its_settler() {
    let mut stores = Stores::memory();
    let moving = Arc::new(Moving {
        inner: stores.usage.clone(),
        home: std::sync::Mutex::new("server-a".into()),
    });
    stores.usage = moving.clone();
    let api = Api::start_on("", stores).await;
    let owner = api.owner("100").await;
    let (_, org) = api.active_customer(&owner, "moved", 10.0, 1.0).await;
    let state = &api.state;
    let reconciled = || admin_api::services::wallets::reconciled(state, org);
    assert!(reconciled().await.unwrap().is_some());
    // A call's charge settled in the mirror and booked in the ledger, whose confirmation the
    // failover lost: the mirror still counts it pending.
    let w = &state.stores.wallets;
    w.reserve(org, "lost", nano(2_000_000), 60_000, "")
        .await
        .unwrap();
    w.settle(org, "lost", nano(1_500_000)).await.unwrap();
    admin_api::ledger::transfer_at(
        &state.db,
        "spend:lost+1",
        "spend",
        &admin_api::ledger::AccountRef::org_wallet(org),
        &admin_api::ledger::AccountRef::org_spend(org),
        nano(1_500_000),
        chrono::Utc::now(),
    )
    .await
    .unwrap();
    assert!(
        reconciled().await.unwrap().is_none(),
        "the mirror disagrees"
    );
    let (stop, rx) = tokio::sync::watch::channel(false);
    let mut tasks = JoinSet::new();
    tasks.spawn(settler_share::run(
        state.clone(),
        "s".into(),
        Duration::from_millis(50),
        rx,
    ));
    // The settler sees the first server, then the change.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        reconciled().await.unwrap().is_none(),
        "no change, no reload"
    );
    *moving.home.lock().unwrap() = "server-b".into();
    let deadline = Instant::now() + Duration::from_secs(10);
    while reconciled().await.unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the settler never reloaded the mirror"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let snap = w.snapshot(org).await.unwrap().unwrap();
    assert_eq!(
        (snap.balance, snap.pending),
        (nano(10_000_000_000 - 1_500_000), NanoUsd::ZERO)
    );
    let _ = stop.send(true);
    while tasks.join_next().await.is_some() {}
}

/// Booking throughput with 1, 2 and 4 settlers (issue 48; `BENCH_SETTLERS`, default `1,2,4`):
/// `BENCH_EVENTS` usage events (default 40,000) of 16 organizations, one on every money slot,
/// appended to the streams, then drained by k settlers started together, each with its own
/// database pool and store connection as k admin-api processes would have; the rate is read
/// between 5 % and 95 % booked (the settlers' start and the last batch's tail left out). On a
/// Redis Cluster (16 streams) and on one Redis (one stream: only one settler can read it).
/// Not a pass/fail test: `scripts/bench --fleet --settlers 1,2,4` runs it and prints the table
/// for docs/SCALE.md.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a benchmark: scripts/bench --fleet --settlers runs it"]
async fn bench_booking_with_several_settlers() {
    use futures_util::StreamExt;
    let events: usize = std::env::var("BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40_000);
    let counts: Vec<usize> = std::env::var("BENCH_SETTLERS")
        .unwrap_or_else(|_| "1,2,4".into())
        .split(',')
        .filter_map(|k| k.trim().parse().ok())
        .collect();
    let mut stores = shared_stores("bench-settlers").await;
    // The cluster first: the figures that matter.
    stores.reverse();
    for (name, stores) in stores {
        let api = Api::start_on("", stores.clone()).await;
        // This month's partitions, as admin-api makes them before its settler writes.
        let retention = admin_api::workers::partitions::retention(&api.state);
        admin_api::workers::partitions::round(&api.state.db, retention, chrono::Utc::now())
            .await
            .unwrap();
        let owner = api.owner("100000").await;
        let mut orgs = Vec::new();
        for i in 0..16 {
            orgs.push(
                api.active_customer(&owner, &format!("b{i}"), 1000.0, 1.0)
                    .await
                    .1,
            );
        }
        for &k in &counts {
            let before = booked(&api).await;
            let usage = stores.usage.clone();
            let appends = (0..events).map(|n| {
                let usage = usage.clone();
                let org = orgs[n % orgs.len()];
                async move {
                    // Request ids as the gateway mints them (UUIDv7 of the call's start): the
                    // settler looks each up in its month's partition by (id, start).
                    let at = chrono::Utc::now();
                    let id = super::partitions::request_id_at(at);
                    let ms = u64::try_from(at.timestamp_millis()).unwrap();
                    let e = settled_event(&id, org, "gpt-4o-mini", ms, 1_000, 1_000);
                    usage.append(&e).await.unwrap();
                }
            });
            futures_util::stream::iter(appends)
                .buffer_unordered(64)
                .collect::<Vec<()>>()
                .await;
            let target = before + events as u64;
            let (mut stops, mut tasks) = (Vec::new(), JoinSet::new());
            let t0 = Instant::now();
            for i in 0..k {
                let state =
                    admin_api::AppState::connect(api.state.settings.clone(), stores.clone())
                        .await
                        .unwrap();
                let (stop, rx) = tokio::sync::watch::channel(false);
                stops.push(stop);
                tasks.spawn(settler_share::run(
                    state,
                    format!("bench-{k}-{i}-{}", uuid::Uuid::new_v4().simple()),
                    admin_api::workers::SETTLER_IDLE,
                    rx,
                ));
            }
            let (lo, hi) = (
                before + events as u64 / 20,
                before + events as u64 * 19 / 20,
            );
            let (mut t_lo, mut t_hi) = (None, None);
            let deadline = Instant::now() + Duration::from_secs(600);
            loop {
                let n = booked(&api).await;
                if n >= lo && t_lo.is_none() {
                    t_lo = Some(t0.elapsed());
                }
                if n >= hi && t_hi.is_none() {
                    t_hi = Some(t0.elapsed());
                }
                if n >= target {
                    break;
                }
                assert!(Instant::now() < deadline, "{name}: {n} of {target} booked");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let all = t0.elapsed();
            for stop in &stops {
                let _ = stop.send(true);
            }
            while tasks.join_next().await.is_some() {}
            let (t_lo, t_hi) = (t_lo.unwrap(), t_hi.unwrap());
            let rate = (hi - lo) as f64 / (t_hi - t_lo).as_secs_f64().max(1e-3);
            println!(
                "bench: settlers {name} k={k}: {events} events, {rate:.0} events/s (5-95 %), all booked in {:.1} s",
                all.as_secs_f64()
            );
        }
    }
}
