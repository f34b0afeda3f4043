//! Faults: a proxy or admin-api killed mid-call, an event sent twice, two proxies racing on one
//! wallet — no overdraft, no double charge, no lost usage.

use super::*;

/// A real `proxy` process killed with SIGKILL mid-stream leaves its hold behind; the reconciler
/// (admin-api, in this test process) settles it exactly once after its deadline, the settler books
/// it, and the organization's balance is reconciled with a balanced ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_proxy_leaves_a_hold_the_reconciler_resolves_once() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: crash scenario skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let prefix = format!("crash:{}:", std::process::id());
    let port = free_port();
    let text = redis_deployment(&redis_url, &prefix, port, &mock.base_url());
    // admin-api in this process: ledger, settler, reconciler, keeper.
    let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
    let admin = AdminApi::start(settings).await;
    let (state, stores) = (admin.state.clone(), admin.stores.clone());
    let demo = admin.demo_key().await;
    let org = demo.organization_id;

    // The gateway as its own process.
    let mut proxy = spawn_proxy(&text, port, "crash").await;
    let base = format!("http://127.0.0.1:{port}");

    // A slow stream: 20 events, 300 ms apart.
    let resp = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(format!("{base}/compat/v1/chat/completions"))
        .bearer_auth(&demo.api_key)
        .header("x-mock-events", "20")
        .header("x-mock-delay-ms", "300")
        .body(chat("gpt-4o-mini", true).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    stream.next().await.unwrap().unwrap();
    let held = stores.wallets.snapshot(org).await.unwrap().unwrap();
    assert!(
        held.reserved.is_positive(),
        "the call holds money: {held:?}"
    );

    // SIGKILL mid-stream: nothing settles.
    proxy.0.kill().unwrap();
    proxy.0.wait().unwrap();
    drop(stream);

    // After the deadline the reconciler settles the hold once, and the settler books it.
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        use sea_orm::{EntityTrait, PaginatorTrait};
        let w = stores.wallets.snapshot(org).await.unwrap().unwrap();
        let records = entities::usage_records::Entity::find()
            .count(&state.db)
            .await
            .unwrap();
        if w.reserved.is_zero() && records == 1 && w.pending.is_zero() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not reconciled: {w:?}, {records} records"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    use sea_orm::EntityTrait;
    let records = entities::usage_records::Entity::find()
        .all(&state.db)
        .await
        .unwrap();
    assert_eq!(records[0].measurement, "estimated");
    assert!(
        records[0].charged_nanos > 0,
        "the input estimate is charged"
    );
    let book = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    let w = stores.wallets.snapshot(org).await.unwrap().unwrap();
    assert_eq!(
        w.balance.checked_add(w.pending),
        Some(book),
        "mirror and ledger agree"
    );
    assert_eq!(
        book.nanos(),
        100 * NANOS - records[0].charged_nanos,
        "charged exactly once"
    );
    assert_eq!(
        admin_api::ledger::imbalance(&state.db).await.unwrap(),
        money::NanoUsd::ZERO
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while stores.slots.in_use(&["mock"]).await.unwrap() != vec![0] {
        assert!(
            Instant::now() < deadline,
            "the dead proxy's slot never stopped counting"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Two proxy processes sharing one Redis: 200 concurrent calls against a balance that covers
/// about 20 never overdraw, and every refused call is refused before reaching the supplier.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_on_one_redis_never_overdraw() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: two-proxy scenario skipped");
        return;
    };
    two_proxies_never_overdraw(&|builder| {
        builder.redis(&redis_url, &format!("two:{}:", std::process::id()))
    })
    .await;
}

/// The same on a Redis Cluster (three masters, three replicas): the admission's steps on several
/// shards never let two proxies overdraw one wallet, and every hold closes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_proxies_on_a_redis_cluster_never_overdraw() {
    let Some(seeds) = testkit::redis_cluster() else {
        eprintln!("no Redis Cluster: two-proxy cluster scenario skipped");
        return;
    };
    let prefix = format!("two-cluster:{}:", uuid_like());
    two_proxies_never_overdraw(&|builder| builder.redis_cluster(&seeds, &prefix)).await;
}

/// Two proxies on one store (`store` sets the `[redis]` section) serve 200 calls against a
/// wallet that covers about 20: the covered ones succeed, the rest are refused before the
/// supplier, the wallet is never overdrawn and every hold closes.
async fn two_proxies_never_overdraw(store: &dyn Fn(TestConfig) -> TestConfig) {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let ports = [free_port(), free_port()];
    let texts: Vec<String> = ports
        .iter()
        .map(|p| {
            store(redis_deployment_builder(
                "redis://unused",
                "unused:",
                *p,
                &mock.base_url(),
            ))
            .toml()
        })
        .collect();
    let settings = Arc::new(Settings::parse(&texts[0], &|_| None).unwrap());
    let admin = AdminApi::start(settings.clone()).await;
    let (state, stores) = (admin.state.clone(), admin.stores.clone());
    let demo = admin.demo_key().await;
    let org = demo.organization_id;
    let _a = spawn_proxy(&texts[0], ports[0], "two-a").await;
    let _b = spawn_proxy(&texts[1], ports[1], "two-b").await;

    let mut body = chat("gpt-4o-mini", false);
    body["max_tokens"] = json!(1000);
    let (hold, _) = proxy::worst_case(
        &settings.model("gpt-4o-mini").unwrap().prices,
        Some(money::RateMultiplier::ONE),
        body.to_string().len(),
        Some(1000),
        4096,
    )
    .unwrap();
    // Leave about 20 holds' worth in the wallet (the mirror and the ledger together).
    let book = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    let keep = money::NanoUsd::from_nanos(hold.nanos() * 20 + hold.nanos() / 2);
    assert_eq!(
        stores
            .wallets
            .adjust(org, keep.checked_sub(book).unwrap(), "test:shrink")
            .await
            .unwrap(),
        opstate::Adjustment::Applied { balance: keep }
    );
    let http = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(64)
        .build()
        .unwrap();
    let mut calls = JoinSet::new();
    for i in 0..200 {
        let (http, body, key) = (http.clone(), body.clone(), demo.api_key.clone());
        let port = ports[i % 2];
        calls.spawn(async move {
            let resp = http
                .post(format!(
                    "http://127.0.0.1:{port}/compat/v1/chat/completions"
                ))
                .bearer_auth(key)
                .header("x-mock-usage", "prompt=50,completion=1000")
                .header("x-mock-delay-ms", "20")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            resp.bytes().await.unwrap();
            status
        });
    }
    let (mut ok, mut refused) = (0, 0);
    while let Some(r) = calls.join_next().await {
        match r.unwrap() {
            200 => ok += 1,
            402 => refused += 1,
            other => panic!("unexpected status {other}"),
        }
    }
    assert_eq!(ok + refused, 200);
    assert!(ok >= 20, "the covered calls succeed ({ok})");
    assert_eq!(
        mock.request_count(),
        ok,
        "refused calls never reached the supplier"
    );
    let w = settled_wallet(&stores, org).await;
    assert!(
        !w.balance.is_negative() && w.reserved.is_zero(),
        "never overdrawn, every hold closed: {w:?}"
    );
}

/// The `admin-api` process killed with SIGKILL while its settler books a backlog, then started
/// again: every usage event is booked exactly once (one record each, the spend posted once), the
/// ledger stays balanced, and the wallet mirror agrees with it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_admin_api_loses_no_usage_and_posts_nothing_twice() {
    let Some(redis_url) = testkit::redis_url() else {
        return;
    };
    let db_url = testkit::fresh_database_url().await;
    let prefix = testkit::redis_prefix("settler-crash");
    let admin_port = free_port();
    let text = TestConfig::embedded()
        .set("admin", "embedded", false)
        .set("admin", "listen", format!("127.0.0.1:{admin_port}"))
        .database(&db_url)
        .redis(&redis_url, &prefix)
        .model(Model::gpt_4o_mini())
        .account(Account::openai(
            "mock",
            "http://127.0.0.1:9/v1",
            &["gpt-4o-mini"],
        ))
        .group(Group::new(1, &["gpt-4o-mini"]))
        .toml();
    let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
    // The organization, its key and wallet, through a state of our own on the same stores.
    let stores = Stores::redis(&redis_url, &prefix).await.unwrap();
    let state = admin_api::AppState::connect(settings.clone(), stores.clone())
        .await
        .unwrap();
    let demo =
        admin_api::demo::demo_key(&state.db, stores.keys.as_ref(), &state.hasher, state.env, 1)
            .await
            .unwrap();
    let org = demo.organization_id;
    admin_api::services::wallets::reload(&state, org)
        .await
        .unwrap();
    let before = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    // A backlog of 300 settled calls, as gateways leave it in the usage stream.
    const CALLS: i64 = 300;
    const COST: i64 = 1_000;
    for i in 0..CALLS {
        let id = format!("req-{i}");
        let amount = money::NanoUsd::from_nanos(COST);
        stores
            .wallets
            .reserve(org, &id, amount, 600_000, "")
            .await
            .unwrap();
        stores.wallets.settle(org, &id, amount).await.unwrap();
        stores
            .usage
            .append(&opstate::UsageEvent {
                request_id: id,
                key_id: demo.key_id,
                org_id: org,
                group_id: 1,
                route: "chat_completions".into(),
                model_requested: "gpt-4o-mini".into(),
                model_served: "gpt-4o-mini".into(),
                account_id: "mock".into(),
                input_tokens: 1,
                output_tokens: 1,
                cached_tokens: 0,
                cache_write_tokens: 0,
                cache_write_1h_tokens: 0,
                measurement: opstate::Measurement::Exact,
                status: 200,
                stream: false,
                started_at_ms: 1_700_000_000_000 + i as u64,
                latency_ms: 1,
                ttfb_ms: None,
                attempts: 1,
                cost_nanos: amount,
                charged_nanos: amount,
                excess_nanos: money::NanoUsd::ZERO,
                hold_nanos: amount,
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
            })
            .await
            .unwrap();
    }
    let dir = testkit::temp_dir("settler-crash");
    let path = dir.join("config.toml");
    std::fs::write(&path, &text).unwrap();
    let spawn = || {
        KillOnDrop(
            std::process::Command::new(env!("CARGO_BIN_EXE_admin-api"))
                .arg("--config")
                .arg(&path)
                .env_remove("DATABASE_URL")
                .env_remove("TOLLGATE_DATABASE_URL")
                .env_remove("TOLLGATE_REDIS_URL")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap(),
        )
    };
    let records = || {
        let db = state.db.clone();
        async move {
            use sea_orm::{EntityTrait, PaginatorTrait};
            entities::usage_records::Entity::find()
                .count(&db)
                .await
                .unwrap()
        }
    };
    // Killed as soon as its settler has booked something.
    let mut first = spawn();
    let deadline = Instant::now() + Duration::from_secs(30);
    while records().await == 0 {
        assert!(Instant::now() < deadline, "the settler never booked");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    first.0.kill().unwrap();
    first.0.wait().unwrap();
    let booked_at_kill = records().await;
    // Started again: it takes the rest over (claims of the dead consumer included).
    let _second = spawn();
    let deadline = Instant::now() + Duration::from_secs(60);
    while records().await < CALLS as u64 {
        assert!(
            Instant::now() < deadline,
            "usage lost: {} of {CALLS}",
            records().await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(records().await, CALLS as u64, "one record per call");
    let spend = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_spend(org).code,
    )
    .await
    .unwrap();
    assert_eq!(
        spend.nanos(),
        CALLS * COST,
        "spend posted once (killed after {booked_at_kill})"
    );
    assert_eq!(
        admin_api::ledger::imbalance(&state.db).await.unwrap(),
        money::NanoUsd::ZERO
    );
    let book = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    assert_eq!(book.nanos(), before.nanos() - CALLS * COST);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let w = stores.wallets.snapshot(org).await.unwrap().unwrap();
        if w.pending.is_zero() {
            assert_eq!(w.balance, book, "mirror and ledger agree");
            break;
        }
        assert!(Instant::now() < deadline, "confirmations missing: {w:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A usage event re-sent by its gateway after Redis lost its data, for a call the settler had
/// already booked, is neither booked again nor confirmed again: the wallet mirror, reloaded from
/// the ledger after the loss, already has the charge.
#[tokio::test]
async fn a_re_sent_event_already_booked_changes_nothing() {
    let Some(redis_url) = testkit::redis_url() else {
        return;
    };
    let db_url = testkit::fresh_database_url().await;
    let prefix = testkit::redis_prefix("resent");
    let text = TestConfig::embedded()
        .database(&db_url)
        .redis(&redis_url, &prefix)
        .model(Model::gpt_4o_mini())
        .account(Account::openai(
            "mock",
            "http://127.0.0.1:9/v1",
            &["gpt-4o-mini"],
        ))
        .group(Group::new(1, &["gpt-4o-mini"]))
        .toml();
    let settings = Arc::new(Settings::parse(&text, &|_| None).unwrap());
    let stores = Stores::redis(&redis_url, &prefix).await.unwrap();
    let state = admin_api::AppState::connect(settings, stores.clone())
        .await
        .unwrap();
    let demo =
        admin_api::demo::demo_key(&state.db, stores.keys.as_ref(), &state.hasher, state.env, 1)
            .await
            .unwrap();
    let org = demo.organization_id;
    admin_api::services::wallets::reload(&state, org)
        .await
        .unwrap();
    let amount = money::NanoUsd::from_nanos(7_000);
    stores
        .wallets
        .reserve(org, "req-x", amount, 600_000, "")
        .await
        .unwrap();
    stores.wallets.settle(org, "req-x", amount).await.unwrap();
    let mut event = opstate::UsageEvent {
        request_id: "req-x".into(),
        key_id: demo.key_id,
        org_id: org,
        group_id: 1,
        route: "chat_completions".into(),
        model_requested: "gpt-4o-mini".into(),
        model_served: "gpt-4o-mini".into(),
        account_id: "mock".into(),
        input_tokens: 1,
        output_tokens: 1,
        cached_tokens: 0,
        cache_write_tokens: 0,
        cache_write_1h_tokens: 0,
        measurement: opstate::Measurement::Exact,
        status: 200,
        stream: false,
        started_at_ms: 1_700_000_000_000,
        latency_ms: 1,
        ttfb_ms: None,
        attempts: 1,
        cost_nanos: amount,
        charged_nanos: amount,
        excess_nanos: money::NanoUsd::ZERO,
        hold_nanos: amount,
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
    };
    stores.usage.append(&event).await.unwrap();
    admin_api::workers::settler::drain_once(&state, "t")
        .await
        .unwrap();
    // Redis loses everything; the mirror is rebuilt from the ledger (which has the charge).
    let mut conn = redis::Client::open(redis_url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut conn)
        .await
        .unwrap();
    admin_api::services::wallets::reload(&state, org)
        .await
        .unwrap();
    let book = admin_api::ledger::balance(
        &state.db,
        &admin_api::ledger::AccountRef::org_wallet(org).code,
    )
    .await
    .unwrap();
    // The gateway re-sends the event.
    event.resent = true;
    stores.usage.append(&event).await.unwrap();
    admin_api::workers::settler::drain_once(&state, "t")
        .await
        .unwrap();
    let w = stores.wallets.snapshot(org).await.unwrap().unwrap();
    assert_eq!(w.balance, book, "the mirror is not debited a second time");
    use sea_orm::{EntityTrait, PaginatorTrait};
    assert_eq!(
        entities::usage_records::Entity::find()
            .count(&state.db)
            .await
            .unwrap(),
        1
    );
    assert_eq!(
        admin_api::ledger::balance(
            &state.db,
            &admin_api::ledger::AccountRef::org_wallet(org).code
        )
        .await
        .unwrap(),
        book,
        "the ledger is not debited a second time"
    );
}
