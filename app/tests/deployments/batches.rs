//! A batch across real processes (issue 46, Done means): 1,000 lines run by an `admin-api`
//! process through a `proxy` process on Redis; admin-api is killed (SIGKILL) mid-batch and
//! started again, the proxy is restarted (SIGTERM, then started again) mid-batch; the batch
//! completes with one charge per line at the batch price and nothing charged twice.

use super::*;
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};

/// The batch's row, as the ledger has it.
async fn batch_row(db: &sea_orm::DatabaseConnection, id: &str) -> entities::batches::Model {
    entities::batches::Entity::find()
        .filter(entities::batches::Column::PublicId.eq(id))
        .one(db)
        .await
        .unwrap()
        .unwrap()
}

/// Waits until the batch has `n` lines completed (or ended), 90 s at most.
async fn until_completed(
    db: &sea_orm::DatabaseConnection,
    id: &str,
    n: i32,
) -> entities::batches::Model {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let b = batch_row(db, id).await;
        if b.completed >= n
            || ["completed", "failed", "cancelled", "expired"].contains(&b.status.as_str())
        {
            return b;
        }
        assert!(
            Instant::now() < deadline,
            "stuck at {} of {n}: {}",
            b.completed,
            b.status
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `url` answers (any status), 20 s at most.
async fn until_up(http: &reqwest::Client, url: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while http.get(url).send().await.is_err() {
        assert!(Instant::now() < deadline, "{url} never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Uploads `lines` as `key` and starts a chat batch of them; the batch's id.
async fn start(http: &reqwest::Client, base: &str, key: &str, lines: &str) -> String {
    let boundary = "b0undary";
    let form = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\r\n\
         {lines}\r\n--{boundary}--\r\n"
    );
    let file: Value = http
        .post(format!("{base}/compat/v1/files"))
        .bearer_auth(key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let batch: Value = http
        .post(format!("{base}/compat/v1/batches"))
        .bearer_auth(key)
        .json(&json!({"input_file_id": file["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    batch["id"].as_str().unwrap().to_string()
}

/// `n` chat lines (`r0`…).
fn chat_lines(n: usize) -> String {
    (0..n)
        .map(|i| {
            json!({"custom_id": format!("r{i}"), "method": "POST", "url": "/v1/chat/completions",
                   "body": {"model": "gpt-4o-mini", "max_tokens": 8,
                            "messages": [{"role": "user", "content": format!("line {i}")}]}})
            .to_string()
                + "\n"
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_survives_a_killed_admin_api_and_a_restarted_proxy() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: batch restart scenario skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    // Each line takes at least 100 ms at the supplier: the batch runs for seconds.
    mock.set_fault(Some("stall_ms=100".parse().unwrap()));
    let (port, admin_port, metrics_port) = (free_port(), free_port(), free_port());
    let dir = testkit::temp_dir("batch-restart");
    let db_url = testkit::fresh_database_url().await;
    let text = TestConfig::embedded()
        .set("server", "listen", format!("127.0.0.1:{port}"))
        .set("server", "shutdown_grace_ms", 20_000u64)
        .set("metrics", "listen", format!("127.0.0.1:{metrics_port}"))
        .set("admin", "embedded", false)
        .set("admin", "listen", format!("127.0.0.1:{admin_port}"))
        .set("batches", "poll_interval_ms", 50u64)
        .set("batches", "concurrency", 16u64)
        .database(&db_url)
        .redis(&redis_url, &testkit::redis_prefix("batch-restart"))
        .model(Model::gpt_4o_mini())
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]).max_concurrency(1000))
        .group(Group::new(1, &["gpt-4o-mini"]))
        .toml();
    let path = dir.join("proxy.toml");
    std::fs::write(&path, &text).unwrap();
    // The demo customer's key: retail rate 1.25, so a line costs its tokens × 1.25 × 0.5.
    let key = demo_key_cli(&path);
    let db = admin_api::db::connect(&db_url).await.unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut admin = webhooks::spawn_admin(&path);
    until_up(&http, &format!("http://127.0.0.1:{admin_port}/healthz")).await;
    let mut proxy = proxy_process(&path, &[]);
    wait_ready(&http, metrics_port).await;
    let base = format!("http://127.0.0.1:{port}");
    let org = {
        let hash = credentials::KeyHasher::new(testkit::PEPPER.as_bytes()).hash(&key);
        entities::customer_api_keys::Entity::find()
            .filter(entities::customer_api_keys::Column::KeyHash.eq(hash))
            .one(&db)
            .await
            .unwrap()
            .unwrap()
            .organization_id
    };
    let wallet = || async {
        admin_api::ledger::balance(&db, &admin_api::ledger::AccountRef::org_wallet(org).code)
            .await
            .unwrap()
            .nanos()
    };
    let before = wallet().await;

    let n = 1000;
    let lines = chat_lines(n);
    let id = start(&http, &base, &key, &lines).await;

    // admin-api killed mid-batch, lines in flight; another takes the batch on once the lease
    // lapses.
    let at_kill = until_completed(&db, &id, 150).await;
    assert_eq!(at_kill.status, "in_progress");
    admin.0.kill().unwrap();
    admin.0.wait().unwrap();
    admin = webhooks::spawn_admin(&path);

    // The proxy restarted mid-batch: SIGTERM (it finishes what it serves), then started again.
    let at_restart = until_completed(&db, &id, 500).await;
    assert_eq!(
        at_restart.status, "in_progress",
        "the proxy restart must come mid-batch"
    );
    let term = std::process::Command::new("kill")
        .args(["-TERM", &proxy.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    proxy.0.wait().unwrap();
    proxy = proxy_process(&path, &[]);
    wait_ready(&http, metrics_port).await;

    let done = until_completed(&db, &id, i32::try_from(n).unwrap()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = loop {
        let b = batch_row(&db, &id).await;
        if b.status != "in_progress" {
            break b;
        }
        assert!(Instant::now() < deadline, "never finished: {done:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done.status, "completed", "{done:?}");
    assert_eq!(
        (done.completed, done.failed),
        (i32::try_from(n).unwrap(), 0)
    );

    // One usage record per line, each at the batch price, and the ledger moved by their sum.
    let deadline = Instant::now() + Duration::from_secs(20);
    let records = loop {
        let found = entities::usage_records::Entity::find()
            .filter(entities::usage_records::Column::BatchId.eq(id.as_str()))
            .all(&db)
            .await
            .unwrap();
        if found.len() >= n || Instant::now() > deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(records.len(), n, "one record per line, none twice");
    let mut seen: Vec<i32> = records.iter().map(|r| r.batch_line.unwrap()).collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..i32::try_from(n).unwrap()).collect::<Vec<_>>());
    for r in &records {
        let weighted =
            i128::from(r.input_tokens) * 150_000_000 + i128::from(r.output_tokens) * 600_000_000;
        let want = (weighted * 625_000 + 999_999_999_999) / 1_000_000_000_000;
        assert_eq!(
            i128::from(r.charged_nanos),
            want,
            "{} at 1.25 × 0.5",
            r.request_id
        );
        assert_eq!(r.measurement, "exact", "{}", r.request_id);
    }
    let charged: i64 = records.iter().map(|r| r.charged_nanos).sum();
    assert_eq!(
        before - wallet().await,
        charged,
        "the ledger holds exactly the lines' charges"
    );
    mock.set_fault(None);
    drop(proxy);
    drop(admin);
}

/// The supplier's own batch API across real processes (issue 46): 300 lines on an account with
/// the `batch` capability go to the mock's OpenAI batches in chunks of 100; admin-api is killed
/// while a chunk runs at the supplier, the proxy restarted while another does; every chunk is
/// created at the supplier once, every line booked once at the batch price, nothing sent as a
/// call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn supplier_batches_survive_a_killed_admin_api_and_a_restarted_proxy() {
    let Some(redis_url) = testkit::redis_url() else {
        eprintln!("REDIS_URL not set: supplier batch restart scenario skipped");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    // Each chunk stays at the supplier for 30 reads (1.5 s at one read each 50 ms).
    mock.set_batch_behaviour(Some("polls=30"));
    let (port, admin_port, metrics_port) = (free_port(), free_port(), free_port());
    let dir = testkit::temp_dir("supplier-batch-restart");
    let db_url = testkit::fresh_database_url().await;
    let text = TestConfig::embedded()
        .set("server", "listen", format!("127.0.0.1:{port}"))
        .set("server", "shutdown_grace_ms", 20_000u64)
        .set("metrics", "listen", format!("127.0.0.1:{metrics_port}"))
        .set("admin", "embedded", false)
        .set("admin", "listen", format!("127.0.0.1:{admin_port}"))
        .set("batches", "poll_interval_ms", 50u64)
        .set("batches", "concurrency", 16u64)
        .set("batches", "supplier_lines", 100u64)
        .set("batches", "supplier_poll_interval_ms", 50u64)
        .database(&db_url)
        .redis(&redis_url, &testkit::redis_prefix("supplier-batch-restart"))
        .model(Model::gpt_4o_mini())
        .account(
            Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"])
                .max_concurrency(1000)
                .capability("batch"),
        )
        .group(Group::new(1, &["gpt-4o-mini"]))
        .toml();
    let path = dir.join("proxy.toml");
    std::fs::write(&path, &text).unwrap();
    let key = demo_key_cli(&path);
    let db = admin_api::db::connect(&db_url).await.unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let mut admin = webhooks::spawn_admin(&path);
    until_up(&http, &format!("http://127.0.0.1:{admin_port}/healthz")).await;
    let mut proxy = proxy_process(&path, &[]);
    wait_ready(&http, metrics_port).await;
    let base = format!("http://127.0.0.1:{port}");
    let n = 300;
    let id = start(&http, &base, &key, &chat_lines(n)).await;
    let chunk_at_supplier = |k: usize| {
        let mock = &mock;
        async move {
            let deadline = Instant::now() + Duration::from_secs(90);
            while mock.batches_created() < k {
                assert!(
                    Instant::now() < deadline,
                    "chunk {k} never reached the supplier"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };

    // admin-api killed while the first chunk runs at the supplier; another takes the batch on
    // (after the lease lapses) and follows that chunk.
    chunk_at_supplier(1).await;
    admin.0.kill().unwrap();
    admin.0.wait().unwrap();
    admin = webhooks::spawn_admin(&path);

    // The proxy restarted while the second does (the held lines' holds and records live in
    // Redis: their bookings find them).
    chunk_at_supplier(2).await;
    let term = std::process::Command::new("kill")
        .args(["-TERM", &proxy.0.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    proxy.0.wait().unwrap();
    proxy = proxy_process(&path, &[]);
    wait_ready(&http, metrics_port).await;

    let done = until_completed(&db, &id, i32::try_from(n).unwrap()).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let done = loop {
        let b = batch_row(&db, &id).await;
        if b.status != "in_progress" {
            break b;
        }
        assert!(Instant::now() < deadline, "never finished: {done:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done.status, "completed", "{done:?}");
    assert_eq!((done.completed, done.failed), (300, 0));
    assert_eq!(
        mock.batches_created(),
        3,
        "each chunk created once at the supplier"
    );
    assert_eq!(
        mock.requests()
            .iter()
            .filter(|r| r.path == "/v1/chat/completions")
            .count(),
        0,
        "no line sent as a call"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let records = loop {
        let found = entities::usage_records::Entity::find()
            .filter(entities::usage_records::Column::BatchId.eq(id.as_str()))
            .all(&db)
            .await
            .unwrap();
        if found.len() >= n || Instant::now() > deadline {
            break found;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(records.len(), n, "one record per line, none twice");
    for r in &records {
        let weighted =
            i128::from(r.input_tokens) * 150_000_000 + i128::from(r.output_tokens) * 600_000_000;
        let want = (weighted * 625_000 + 999_999_999_999) / 1_000_000_000_000;
        assert_eq!(
            i128::from(r.charged_nanos),
            want,
            "{} at 1.25 × 0.5",
            r.request_id
        );
        assert_eq!(
            (r.measurement.as_str(), r.account_id.as_str()),
            ("exact", "mock")
        );
    }
    mock.set_batch_behaviour(None);
    drop(proxy);
    drop(admin);
}
