//! Batches through the gateway (issue 46): files and batches in OpenAI's shapes, each line run
//! through the gateway as the key that made the batch, at the model's batch price, settled once.
//! On the in-memory and the Redis store, on whichever database the suite runs.

use super::database_with_demo_key;
use mock_supplier::{MockConfig, MockHandle, MockSupplier};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

/// `gpt-4o-mini` sold at 0.4 of its price for batch work.
const DISCOUNT_PPM: i128 = 400_000;

pub(super) fn config(mock: &MockHandle, db_url: &str) -> TestConfig {
    TestConfig::embedded()
        .database(db_url)
        .model(Model::gpt_4o_mini().line("batch_discount = 0.4"))
        .model(Model::text("pricey", 100_000.0, 100_000.0))
        .model(Model::embedding("text-embedding-x", 0.02))
        .account(Account::openai(
            "mock",
            &mock.base_url(),
            &["gpt-4o-mini", "pricey", "text-embedding-x"],
        ))
        .group(Group::new(
            1,
            &["gpt-4o-mini", "pricey", "text-embedding-x"],
        ))
        .set("batches", "poll_interval_ms", 50)
}

/// The deployments to run on: memory, and Redis when the suite has it.
pub(super) fn deployments(config: &TestConfig, what: &str) -> Vec<(&'static str, TestConfig)> {
    let mut out = vec![("memory", config.clone())];
    if let Some(url) = testkit::redis_url() {
        out.push((
            "redis",
            config.clone().redis(&url, &testkit::redis_prefix(what)),
        ));
    }
    out
}

/// A JSONL of `n` chat lines of `model` (line i says "line i"), `max_tokens` each.
pub(super) fn chat_lines(n: usize, model: &str, max_tokens: u32) -> String {
    (0..n)
        .map(|i| {
            json!({"custom_id": format!("req-{i}"), "method": "POST", "url": "/v1/chat/completions",
                   "body": {"model": model, "max_tokens": max_tokens,
                            "messages": [{"role": "user", "content": format!("line {i}")}]}})
            .to_string()
                + "\n"
        })
        .collect()
}

/// Uploads `content` as a batch file (multipart, as the SDKs send it).
async fn upload(http: &reqwest::Client, base: &str, key: &str, content: &str) -> reqwest::Response {
    let boundary = "tollgate-test-boundary";
    let body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"in.jsonl\"\r\n\
         Content-Type: application/jsonl\r\n\r\n{content}\r\n--{boundary}--\r\n"
    );
    http.post(format!("{base}/compat/v1/files"))
        .bearer_auth(key)
        .header(
            "content-type",
            format!("multipart/form-data; boundary={boundary}"),
        )
        .body(body)
        .send()
        .await
        .unwrap()
}

/// Uploads `content` and creates a batch of it on `endpoint`; the batch object.
pub(super) async fn start(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    content: &str,
    endpoint: &str,
) -> Value {
    let file = upload(http, base, key, content).await;
    assert_eq!(file.status(), 200);
    let file: Value = file.json().await.unwrap();
    assert_eq!(file["object"], "file");
    assert_eq!(file["purpose"], "batch");
    let batch = http
        .post(format!("{base}/compat/v1/batches"))
        .bearer_auth(key)
        .json(
            &json!({"input_file_id": file["id"], "endpoint": endpoint, "completion_window": "24h"}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(batch.status(), 200);
    let batch: Value = batch.json().await.unwrap();
    assert_eq!(batch["object"], "batch");
    batch
}

/// The batch once `done(batch)` holds (60 s at most).
pub(super) async fn wait_for(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    id: &str,
    done: impl Fn(&Value) -> bool,
) -> Value {
    // The clock runs from the last progress, not from the start: a loaded machine slows a
    // batch down, and only a batch that stops moving for a minute fails the test.
    let mut deadline = Instant::now() + Duration::from_secs(60);
    let mut seen = Value::Null;
    loop {
        let b: Value = http
            .get(format!("{base}/compat/v1/batches/{id}"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if done(&b) {
            return b;
        }
        let now = json!([b["status"], b["request_counts"]]);
        if now != seen {
            seen = now;
            deadline = Instant::now() + Duration::from_secs(60);
        }
        assert!(Instant::now() < deadline, "batch stopped moving: {b}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) fn ended(b: &Value) -> bool {
    ["completed", "failed", "expired", "cancelled"].contains(&b["status"].as_str().unwrap_or(""))
}

/// A file's JSONL content, parsed.
pub(super) async fn content(
    http: &reqwest::Client,
    base: &str,
    key: &str,
    file: &Value,
) -> Vec<Value> {
    let Some(id) = file.as_str() else {
        return Vec::new();
    };
    let text = http
        .get(format!("{base}/compat/v1/files/{id}/content"))
        .bearer_auth(key)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The usage records of `batch`, once `n` of them are settled (10 s at most).
pub(super) async fn records(
    db: &sea_orm::DatabaseConnection,
    batch: &str,
    n: usize,
) -> Vec<entities::usage_records::Model> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let found = entities::usage_records::Entity::find()
            .filter(entities::usage_records::Column::BatchId.eq(batch))
            .all(db)
            .await
            .unwrap();
        if found.len() >= n || Instant::now() > deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `gpt-4o-mini`'s batch price of a record's tokens: ⌈(in × 0.15 + out × 0.60) USD/Mtok × 0.4⌉.
pub(super) fn batch_price(r: &entities::usage_records::Model) -> i64 {
    let weighted =
        i128::from(r.input_tokens) * 150_000_000 + i128::from(r.output_tokens) * 600_000_000;
    let num = weighted * DISCOUNT_PPM;
    i64::try_from((num + 999_999_999_999) / 1_000_000_000_000).unwrap()
}

pub(super) async fn wallet(db: &sea_orm::DatabaseConnection, org: i64) -> i64 {
    admin_api::ledger::balance(db, &admin_api::ledger::AccountRef::org_wallet(org).code)
        .await
        .unwrap()
        .nanos()
}

#[tokio::test]
async fn a_batch_runs_every_line_once_at_the_batch_price() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let (db, minted) = database_with_demo_key(&db_url).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let hasher = credentials::KeyHasher::new(testkit::PEPPER.as_bytes());
    for (name, config) in deployments(&config(&mock, &db_url), "batch") {
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let running = app.start();
        let base = running.base_url().unwrap();
        let key = minted.api_key.as_str();
        let before = wallet(&db, minted.organization_id).await;
        let n = 60;
        let batch = start(
            &http,
            &base,
            key,
            &chat_lines(n, "gpt-4o-mini", 16),
            "/v1/chat/completions",
        )
        .await;
        let id = batch["id"].as_str().unwrap();
        let done = wait_for(&http, &base, key, id, ended).await;
        assert_eq!(done["status"], "completed", "{name}: {done}");
        assert_eq!(
            done["request_counts"],
            json!({"total": n, "completed": n, "failed": 0}),
            "{name}"
        );
        assert!(done["error_file_id"].is_null(), "{name}: {done}");
        let output = content(&http, &base, key, &done["output_file_id"]).await;
        assert_eq!(output.len(), n, "{name}");
        let recs = records(&db, id, n).await;
        assert_eq!(recs.len(), n, "{name}: one usage record per line");
        let mut charged = 0;
        for (i, line) in output.iter().enumerate() {
            assert_eq!(
                line["custom_id"],
                format!("req-{i}"),
                "{name}: in line order"
            );
            assert_eq!(line["response"]["status_code"], 200, "{name}: {line}");
            assert_eq!(
                line["response"]["body"]["object"], "chat.completion",
                "{name}: {line}"
            );
            let rid = line["response"]["request_id"].as_str().unwrap();
            let rec = recs
                .iter()
                .find(|r| r.request_id == rid)
                .expect("a record of the line");
            assert_eq!(rec.batch_line, Some(i32::try_from(i).unwrap()), "{name}");
            assert_eq!(
                rec.charged_nanos,
                batch_price(rec),
                "{name}: charged at the batch price"
            );
            assert_eq!(rec.cost_nanos, rec.charged_nanos, "{name}");
            charged += rec.charged_nanos;
        }
        // The ledger: exactly the lines' charges.
        assert_eq!(
            before - wallet(&db, minted.organization_id).await,
            charged,
            "{name}"
        );

        // A line sent again (a runner that lost its answer): the same answer from the store,
        // charged nothing.
        let rec = recs.iter().find(|r| r.batch_line == Some(0)).unwrap();
        let line = credentials::batch_line::BatchLine {
            batch_id: id.to_string(),
            line: 0,
            request_id: rec.request_id.clone(),
            key_hash: hasher.hash(key),
        };
        let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap();
        let signed = credentials::batch_line::sign(&hasher, &line, now_ms);
        let again = http
            .post(format!("{base}/compat/v1/chat/completions"))
            .header(credentials::batch_line::HEADER, &signed)
            .json(&json!({"model": "gpt-4o-mini", "max_tokens": 16, "messages": [{"role": "user", "content": "line 0"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 200, "{name}");
        assert_eq!(again.headers()["x-tollgate-batch-replay"], "true", "{name}");
        assert_eq!(
            again.headers()["x-request-id"].to_str().unwrap(),
            rec.request_id,
            "{name}"
        );
        let body: Value = again.json().await.unwrap();
        let first = output.iter().find(|l| l["custom_id"] == "req-0").unwrap();
        assert_eq!(
            body, first["response"]["body"],
            "{name}: the line's own answer"
        );
        // A signature that does not verify is no call at all.
        let forged = signed.replacen(":0:", ":1:", 1);
        let refused = http
            .post(format!("{base}/compat/v1/chat/completions"))
            .header(credentials::batch_line::HEADER, forged)
            .json(&json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(refused.status(), 401, "{name}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            records(&db, id, n + 1).await.len(),
            n,
            "{name}: no second charge"
        );
        assert_eq!(
            before - wallet(&db, minted.organization_id).await,
            charged,
            "{name}"
        );
        running.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_batch_out_of_balance_stops_with_the_rest_failed_and_no_overdraft() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for store in ["memory", "redis"] {
        // A fresh database each time: a demo organization of $100, spent by lines of about $2.
        let db_url = testkit::fresh_database_url().await;
        let Some((name, config)) = deployments(&config(&mock, &db_url), "batch-broke")
            .into_iter()
            .find(|(n, _)| *n == store)
        else {
            continue;
        };
        let (db, minted) = database_with_demo_key(&db_url).await;
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let running = app.start();
        let base = running.base_url().unwrap();
        let key = minted.api_key.as_str();
        let before = wallet(&db, minted.organization_id).await;
        let n = 200;
        let batch = start(
            &http,
            &base,
            key,
            &chat_lines(n, "pricey", 8),
            "/v1/chat/completions",
        )
        .await;
        let id = batch["id"].as_str().unwrap();
        let done = wait_for(&http, &base, key, id, ended).await;
        assert_eq!(done["status"], "failed", "{name}: {done}");
        assert_eq!(
            done["errors"]["data"][0]["code"], "insufficient_quota",
            "{name}: {done}"
        );
        let (completed, failed) = (
            done["request_counts"]["completed"].as_i64().unwrap(),
            done["request_counts"]["failed"].as_i64().unwrap(),
        );
        assert!(completed > 0 && failed > 0, "{name}: {done}");
        assert_eq!(
            completed + failed,
            i64::try_from(n).unwrap(),
            "{name}: {done}"
        );
        let errors = content(&http, &base, key, &done["error_file_id"]).await;
        assert_eq!(errors.len(), usize::try_from(failed).unwrap(), "{name}");
        assert!(
            errors
                .iter()
                .all(|e| e["error"]["code"] == "insufficient_quota"),
            "{name}"
        );
        let recs = records(&db, id, usize::try_from(completed).unwrap()).await;
        assert_eq!(
            recs.len(),
            usize::try_from(completed).unwrap(),
            "{name}: failed lines cost nothing"
        );
        let after = wallet(&db, minted.organization_id).await;
        assert!(after >= 0, "{name}: no overdraft ({after})");
        let charged: i64 = recs.iter().map(|r| r.charged_nanos).sum();
        assert_eq!(before - after, charged, "{name}");
        running.stop().await.unwrap();
    }
}

#[tokio::test]
async fn a_cancelled_batch_charges_only_what_finished() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let (db, minted) = database_with_demo_key(&db_url).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let config = config(&mock, &db_url).set("batches", "concurrency", 2);
    for (name, config) in deployments(&config, "batch-cancel") {
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let running = app.start();
        let base = running.base_url().unwrap();
        let key = minted.api_key.as_str();
        let before = wallet(&db, minted.organization_id).await;
        mock.set_fault(Some("stall_ms=150".parse().unwrap()));
        let n = 100;
        let batch = start(
            &http,
            &base,
            key,
            &chat_lines(n, "gpt-4o-mini", 8),
            "/v1/chat/completions",
        )
        .await;
        let id = batch["id"].as_str().unwrap();
        wait_for(&http, &base, key, id, |b| {
            b["request_counts"]["completed"].as_i64() >= Some(4)
        })
        .await;
        let cancelling = http
            .post(format!("{base}/compat/v1/batches/{id}/cancel"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(cancelling.status(), 200, "{name}");
        let cancelling: Value = cancelling.json().await.unwrap();
        assert!(
            ["cancelling", "cancelled"].contains(&cancelling["status"].as_str().unwrap()),
            "{name}: {cancelling}"
        );
        let done = wait_for(&http, &base, key, id, ended).await;
        mock.set_fault(None);
        assert_eq!(done["status"], "cancelled", "{name}: {done}");
        let completed =
            usize::try_from(done["request_counts"]["completed"].as_i64().unwrap()).unwrap();
        assert!(completed >= 4 && completed < n, "{name}: {done}");
        let errors = content(&http, &base, key, &done["error_file_id"]).await;
        assert_eq!(errors.len(), n - completed, "{name}");
        assert!(
            errors
                .iter()
                .all(|e| e["error"]["code"] == "batch_cancelled"),
            "{name}"
        );
        let recs = records(&db, id, completed).await;
        assert_eq!(
            recs.len(),
            completed,
            "{name}: only what finished is charged"
        );
        let charged: i64 = recs.iter().map(|r| r.charged_nanos).sum();
        assert_eq!(
            before - wallet(&db, minted.organization_id).await,
            charged,
            "{name}"
        );
        // An ended batch cannot be cancelled again.
        let again = http
            .post(format!("{base}/compat/v1/batches/{id}/cancel"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 409, "{name}");
        let again: Value = again.json().await.unwrap();
        assert_eq!(again["error"]["code"], "batch_not_cancellable", "{name}");
        running.stop().await.unwrap();
    }
}

/// `n` embedding lines of `text-embedding-x`.
fn embedding_lines(n: usize) -> String {
    (0..n)
        .map(|i| {
            json!({"custom_id": format!("emb-{i}"), "method": "POST", "url": "/v1/embeddings",
                   "body": {"model": "text-embedding-x", "input": format!("line {i}")}})
            .to_string()
                + "\n"
        })
        .collect()
}

/// Issue 46's Done means: a 1,000-line batch completes with one charge per line at the batch
/// price across a restart of the gateway and of admin-api mid-batch (the whole deployment stopped
/// and started again on the same ledger and Redis). The in-process stop cuts the connections in
/// flight, as a crash would: a line answered but not yet settled is answered from the store after
/// the start and its hold is settled by the reconciler (at its input estimate, once the hold's
/// short TTL here lapses); never twice. `app/tests/deployments/batches.rs` restarts real
/// processes, the proxy gracefully.
#[tokio::test]
async fn a_thousand_line_batch_survives_a_restart_mid_batch() {
    let Some(redis) = testkit::redis_url() else {
        eprintln!("no Redis: the restart test needs a store that outlives the process");
        return;
    };
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let (db, minted) = database_with_demo_key(&db_url).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let config = config(&mock, &db_url)
        .set("batches", "concurrency", 16)
        .set("money", "hold_ttl_ms", 2000u64)
        .set("money", "reconcile_interval_ms", 200u64)
        .redis(&redis, &testkit::redis_prefix("batch-restart"));
    let key = minted.api_key.as_str();
    let before = wallet(&db, minted.organization_id).await;
    let n = 1000;
    let running = App::build(config.settings(), Role::Proxy)
        .await
        .unwrap()
        .start();
    let base = running.base_url().unwrap();
    let batch = start(&http, &base, key, &embedding_lines(n), "/v1/embeddings").await;
    let id = batch["id"].as_str().unwrap().to_string();
    let midway = wait_for(&http, &base, key, &id, |b| {
        b["request_counts"]["completed"].as_i64() >= Some(250)
    })
    .await;
    assert_eq!(midway["status"], "in_progress", "{midway}");
    running.stop().await.unwrap();
    let stopped = entities::batches::Entity::find()
        .filter(entities::batches::Column::PublicId.eq(id.as_str()))
        .one(&db)
        .await
        .unwrap()
        .unwrap();
    assert!(
        stopped.completed < i32::try_from(n).unwrap(),
        "stopped mid-batch"
    );
    let running = App::build(config.settings(), Role::Proxy)
        .await
        .unwrap()
        .start();
    let base = running.base_url().unwrap();
    let done = wait_for(&http, &base, key, &id, ended).await;
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        done["request_counts"],
        json!({"total": n, "completed": n, "failed": 0})
    );
    let output = content(&http, &base, key, &done["output_file_id"]).await;
    assert_eq!(output.len(), n);
    let recs = records(&db, &id, n).await;
    assert_eq!(recs.len(), n, "one usage record per line");
    let mut lines: Vec<i32> = recs.iter().map(|r| r.batch_line.unwrap()).collect();
    lines.sort_unstable();
    assert_eq!(lines, (0..i32::try_from(n).unwrap()).collect::<Vec<_>>());
    // text-embedding-x at 0.02 USD per million input tokens × 0.5 (the default discount).
    for r in &recs {
        let want = (i128::from(r.input_tokens) * 20_000_000 * 500_000 + 999_999_999_999)
            / 1_000_000_000_000;
        assert_eq!(i128::from(r.charged_nanos), want, "{}", r.request_id);
    }
    let charged: i64 = recs.iter().map(|r| r.charged_nanos).sum();
    assert_eq!(before - wallet(&db, minted.organization_id).await, charged);
    // What the output says each line cost is what the ledger booked for it.
    for line in &output {
        let rid = line["response"]["request_id"].as_str().unwrap();
        assert!(recs.iter().any(|r| r.request_id == rid), "{line}");
    }
    running.stop().await.unwrap();
}

/// Anthropic's Message Batches on the Messages surface (issue 46, scope 4), through HTTP as the
/// `anthropic` SDK sends them: each request charged once at the batch price, results in
/// Anthropic's shape, refusals in Anthropic's error shape, cancel.
#[tokio::test]
async fn a_message_batch_runs_on_the_messages_surface() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let (db, minted) = database_with_demo_key(&db_url).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for (name, config) in deployments(&config(&mock, &db_url), "msgbatch") {
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let running = app.start();
        let base = running.base_url().unwrap();
        let key = minted.api_key.as_str();
        let post = |path: &str, body: Value| {
            http.post(format!("{base}{path}"))
                .header("x-api-key", key)
                .header("anthropic-version", "2023-06-01")
                .json(&body)
        };
        let requests: Vec<Value> = (0..5)
            .map(|i| json!({"custom_id": format!("m-{i}"), "params": {"model": "gpt-4o-mini", "max_tokens": 16,
                            "messages": [{"role": "user", "content": format!("line {i}")}]}}))
            .collect();
        let created = post("/v1/messages/batches", json!({"requests": requests}))
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 200, "{name}");
        let created: Value = created.json().await.unwrap();
        assert_eq!(created["type"], "message_batch", "{name}: {created}");
        assert_eq!(
            created["processing_status"], "in_progress",
            "{name}: {created}"
        );
        assert!(created["results_url"].is_null(), "{name}: {created}");
        let id = created["id"].as_str().unwrap().to_string();
        assert!(id.starts_with("msgbatch_"), "{name}: {id}");
        let deadline = Instant::now() + Duration::from_secs(60);
        let ended = loop {
            let b: Value = http
                .get(format!("{base}/v1/messages/batches/{id}"))
                .header("x-api-key", key)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if b["processing_status"] == "ended" {
                break b;
            }
            assert!(Instant::now() < deadline, "{name}: {b}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(
            ended["request_counts"],
            json!({"processing": 0, "succeeded": 5, "errored": 0, "canceled": 0, "expired": 0}),
            "{name}: {ended}"
        );
        let url = ended["results_url"].as_str().unwrap();
        assert_eq!(
            url,
            format!("{base}/v1/messages/batches/{id}/results"),
            "{name}"
        );
        let results = http.get(url).header("x-api-key", key).send().await.unwrap();
        assert_eq!(results.status(), 200, "{name}");
        let results: Vec<Value> = results
            .text()
            .await
            .unwrap()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(results.len(), 5, "{name}");
        for (i, r) in results.iter().enumerate() {
            assert_eq!(r["custom_id"], format!("m-{i}"), "{name}");
            assert_eq!(r["result"]["type"], "succeeded", "{name}: {r}");
            assert_eq!(r["result"]["message"]["type"], "message", "{name}: {r}");
        }
        let recs = records(&db, &id, 5).await;
        assert_eq!(recs.len(), 5, "{name}: one record per request");
        assert!(
            recs.iter()
                .all(|r| r.route == "messages" && r.charged_nanos == batch_price(r)),
            "{name}"
        );

        // Refusals in Anthropic's shape, nothing made.
        let bad = post(
            "/v1/messages/batches",
            json!({"requests": [{"custom_id": "has space", "params": {}}]}),
        )
        .send()
        .await
        .unwrap();
        assert_eq!(bad.status(), 400, "{name}");
        let bad: Value = bad.json().await.unwrap();
        assert_eq!(bad["type"], "error", "{name}: {bad}");
        assert_eq!(
            bad["error"]["type"], "invalid_request_error",
            "{name}: {bad}"
        );
        assert!(
            bad["error"]["message"]
                .as_str()
                .unwrap()
                .contains("requests.0.custom_id"),
            "{name}: {bad}"
        );
        let unknown_model = post("/v1/messages/batches", json!({"requests": [{"custom_id": "a", "params": {"model": "nope", "max_tokens": 1, "messages": []}}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(unknown_model.status(), 400, "{name}");
        let missing = http
            .get(format!("{base}/v1/messages/batches/msgbatch_none"))
            .header("x-api-key", key)
            .send()
            .await
            .unwrap();
        assert_eq!(missing.status(), 404, "{name}");
        let missing: Value = missing.json().await.unwrap();
        assert_eq!(missing["error"]["type"], "not_found_error", "{name}");
        let no_key = http
            .get(format!("{base}/v1/messages/batches/{id}"))
            .header("x-api-key", "tgk_dev_nope")
            .send()
            .await
            .unwrap();
        assert_eq!(no_key.status(), 401, "{name}");
        let no_key: Value = no_key.json().await.unwrap();
        assert_eq!(no_key["error"]["type"], "authentication_error", "{name}");
        // An ended batch cannot be cancelled (409); an OpenAI batch id is not a message batch.
        let again = post(&format!("/v1/messages/batches/{id}/cancel"), json!({}))
            .send()
            .await
            .unwrap();
        assert_eq!(again.status(), 409, "{name}");
        running.stop().await.unwrap();
    }
}

/// A signed batch line of `key` (as the runner sends it) for `request_id`.
pub(super) fn signed(
    hasher: &credentials::KeyHasher,
    key: &str,
    batch: &str,
    line: u32,
    request_id: &str,
) -> String {
    let l = credentials::batch_line::BatchLine {
        batch_id: batch.to_string(),
        line,
        request_id: request_id.to_string(),
        key_hash: hasher.hash(key),
    };
    let now_ms = u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap();
    credentials::batch_line::sign(hasher, &l, now_ms)
}

/// The gateway's batch path as the runner meets it (issue 46), each of its own answers provoked:
/// a line sent again while it is served is 409 `batch_line_in_progress`, then answered from the
/// store; a line whose answer was cut keeps 502 `batch_line_interrupted`; batch lines above
/// `yield_above` of an account's capacity are 429 `batch_capacity_yielded` while an interactive
/// call still gets the slot left; a stale signature or one on another route is 401.
#[tokio::test]
async fn the_signed_batch_path_refuses_waits_and_replays() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let (_db, minted) = database_with_demo_key(&db_url).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let hasher = credentials::KeyHasher::new(testkit::PEPPER.as_bytes());
    let config = TestConfig::embedded()
        .database(&db_url)
        .model(Model::gpt_4o_mini())
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]).max_concurrency(2))
        .group(Group::new(1, &["gpt-4o-mini"]));
    for (name, config) in deployments(&config, "batch-path") {
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let metrics = app.metrics().clone();
        let running = app.start();
        let base = running.base_url().unwrap();
        let key = minted.api_key.as_str();
        let url = format!("{base}/compat/v1/chat/completions");
        let body = json!({"model": "gpt-4o-mini", "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]});
        let send = |header: String| {
            http.post(&url)
                .header(credentials::batch_line::HEADER, header)
                .json(&body)
                .send()
        };
        let code = |v: &Value| v["error"]["code"].as_str().unwrap_or("").to_string();

        // 409 while served, then the same answer from the store.
        mock.set_fault(Some("stall_ms=600".parse().unwrap()));
        let id = uuid::Uuid::now_v7().simple().to_string();
        let header = signed(&hasher, key, "batch_path", 0, &id);
        let mut first = tokio::task::JoinSet::new();
        first.spawn(send(header.clone()));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let during = send(header.clone()).await.unwrap();
        assert_eq!(during.status(), 409, "{name}");
        assert_eq!(during.headers()["retry-after"], "1", "{name}");
        let during: Value = during.json().await.unwrap();
        assert_eq!(code(&during), "batch_line_in_progress", "{name}: {during}");
        let first = first.join_next().await.unwrap().unwrap().unwrap();
        assert_eq!(first.status(), 200, "{name}");
        assert_eq!(
            first.headers()["x-request-id"].to_str().unwrap(),
            id,
            "{name}: the line's own id"
        );
        let first: Value = first.json().await.unwrap();
        let again = send(header.clone()).await.unwrap();
        assert_eq!(again.headers()["x-tollgate-batch-replay"], "true", "{name}");
        assert_eq!(again.json::<Value>().await.unwrap(), first, "{name}");

        // Above yield_above (one slot of two): a second batch line is refused at once, an
        // interactive call gets the other slot.
        let mut holder = tokio::task::JoinSet::new();
        holder.spawn(send(signed(
            &hasher,
            key,
            "batch_path",
            1,
            &uuid::Uuid::now_v7().simple().to_string(),
        )));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let yielded = send(signed(
            &hasher,
            key,
            "batch_path",
            2,
            &uuid::Uuid::now_v7().simple().to_string(),
        ))
        .await
        .unwrap();
        assert_eq!(yielded.status(), 429, "{name}");
        let yielded: Value = yielded.json().await.unwrap();
        assert_eq!(
            code(&yielded),
            "batch_capacity_yielded",
            "{name}: {yielded}"
        );
        let interactive = http
            .post(&url)
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(
            interactive.status(),
            200,
            "{name}: interactive calls go first"
        );
        assert_eq!(
            holder.join_next().await.unwrap().unwrap().unwrap().status(),
            200,
            "{name}"
        );
        assert!(
            metrics.limits_hit.with_label_values(&["batch_yield"]).get() >= 1,
            "{name}"
        );
        mock.set_fault(None);

        // A cut answer is kept as 502 batch_line_interrupted: sent again, the same.
        mock.set_fault(Some("cut_after=1".parse().unwrap()));
        let header = signed(
            &hasher,
            key,
            "batch_path",
            3,
            &uuid::Uuid::now_v7().simple().to_string(),
        );
        let cut = send(header.clone()).await;
        mock.set_fault(None);
        drop(cut);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let kept = send(header).await.unwrap();
        assert_eq!(kept.status(), 502, "{name}");
        assert_eq!(kept.headers()["x-tollgate-batch-replay"], "true", "{name}");
        let kept: Value = kept.json().await.unwrap();
        assert_eq!(code(&kept), "batch_line_interrupted", "{name}: {kept}");

        // Signatures that do not hold: stale, and on a route a batch does not run.
        let l = credentials::batch_line::BatchLine {
            batch_id: "batch_path".into(),
            line: 4,
            request_id: uuid::Uuid::now_v7().simple().to_string(),
            key_hash: hasher.hash(key),
        };
        let stale_ms =
            u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap() - 6 * 60 * 1000;
        let stale = send(credentials::batch_line::sign(&hasher, &l, stale_ms))
            .await
            .unwrap();
        assert_eq!(stale.status(), 401, "{name}");
        let elsewhere = http
            .get(format!("{base}/compat/v1/models"))
            .header(
                credentials::batch_line::HEADER,
                signed(&hasher, key, "batch_path", 5, &l.request_id),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(elsewhere.status(), 401, "{name}");
        running.stop().await.unwrap();
    }
}

/// Files and batches refused, each with the gateway's body naming what is wrong, nothing kept:
/// a bad line (its number), duplicate custom ids, two endpoints, a streamed body, a model of
/// another kind, too many lines, too many bytes, another purpose, no file; a batch on an unknown
/// file, endpoint or window; another organization's file and batch are the 404 of no such id.
#[tokio::test]
async fn files_and_batches_refuse_what_they_cannot_run() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let (db, minted) = database_with_demo_key(&db_url).await;
    let other = super::key_of_another_organization(
        &db,
        opstate::Stores::memory().keys.as_ref(),
        &credentials::KeyHasher::new(testkit::PEPPER.as_bytes()),
        credentials::Env::Dev,
    )
    .await;
    let config = config(&mock, &db_url)
        .set("batches", "max_lines", 3u64)
        .set("batches", "max_file_bytes", 2048u64);
    let app = App::build(config.settings(), Role::Proxy).await.unwrap();
    let running = app.start();
    let base = running.base_url().unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let key = minted.api_key.as_str();
    let line = |id: &str, url: &str, body: Value| {
        json!({"custom_id": id, "method": "POST", "url": url, "body": body}).to_string() + "\n"
    };
    let chat = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x"}]});
    let mut streamed = chat.clone();
    streamed["stream"] = json!(true);
    let emb = json!({"model": "text-embedding-x", "input": "x"});
    let cases: Vec<(&str, String, u16, &str)> = vec![
        (
            "not JSON",
            "{nope\n".into(),
            400,
            "Line 1: not a JSON object",
        ),
        (
            "second line bad",
            line("a", "/v1/chat/completions", chat.clone()) + "[1]\n",
            400,
            "Line 2",
        ),
        (
            "duplicate custom_id",
            line("a", "/v1/chat/completions", chat.clone())
                + &line("a", "/v1/chat/completions", chat.clone()),
            400,
            "Line 2: custom_id",
        ),
        (
            "two endpoints",
            line("a", "/v1/chat/completions", chat.clone())
                + &line("b", "/v1/embeddings", emb.clone()),
            400,
            "a batch runs one endpoint",
        ),
        (
            "streamed",
            line("a", "/v1/chat/completions", streamed),
            400,
            "body.stream",
        ),
        (
            "wrong kind",
            line("a", "/v1/embeddings", chat.clone()),
            400,
            "cannot serve /v1/embeddings",
        ),
        (
            "unknown model",
            line("a", "/v1/chat/completions", json!({"model": "nope"})),
            400,
            "not a model this gateway serves",
        ),
        (
            "unknown url",
            line("a", "/v1/completions", chat.clone()),
            400,
            "url must be one of",
        ),
        (
            "too many lines",
            (0..4)
                .map(|i| line(&format!("l{i}"), "/v1/chat/completions", chat.clone()))
                .collect(),
            400,
            "more than 3 lines",
        ),
        (
            "too many bytes",
            line(
                "a",
                "/v1/chat/completions",
                json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x".repeat(3000)}]}),
            ),
            413,
            "larger than 2048 bytes",
        ),
        ("empty", String::new(), 400, "no lines"),
    ];
    for (what, content, status, says) in cases {
        let resp = upload(&http, &base, key, &content).await;
        assert_eq!(resp.status(), status, "{what}");
        let v: Value = resp.json().await.unwrap();
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{what}: {v}"
        );
        assert_eq!(v["error"]["type"], "invalid_request_error", "{what}: {v}");
    }
    let files = entities::batch_files::Entity::find()
        .all(&db)
        .await
        .unwrap();
    assert!(files.is_empty(), "nothing kept");
    // Another purpose; no file at all.
    let form = |parts: &str| {
        http.post(format!("{base}/compat/v1/files"))
            .bearer_auth(key)
            .header("content-type", "multipart/form-data; boundary=B")
            .body(format!("{parts}--B--\r\n"))
            .send()
    };
    let wrong =
        form("--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nfine-tune\r\n")
            .await
            .unwrap();
    assert_eq!(wrong.status(), 400);
    assert_eq!(
        wrong.json::<Value>().await.unwrap()["error"]["param"],
        "purpose"
    );
    let none = form("--B\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n")
        .await
        .unwrap();
    assert_eq!(none.status(), 400);
    assert_eq!(
        none.json::<Value>().await.unwrap()["error"]["param"],
        "file"
    );
    let no_key = http
        .post(format!("{base}/compat/v1/files"))
        .send()
        .await
        .unwrap();
    assert_eq!(no_key.status(), 401);

    // A good file; batches refused on it by field.
    let good: Value = upload(
        &http,
        &base,
        key,
        &line("a", "/v1/chat/completions", chat.clone()),
    )
    .await
    .json()
    .await
    .unwrap();
    let create = |body: Value, who: &str| {
        http.post(format!("{base}/compat/v1/batches"))
            .bearer_auth(who)
            .json(&body)
            .send()
    };
    for (body, param) in [
        (
            json!({"input_file_id": "file-none", "endpoint": "/v1/chat/completions", "completion_window": "24h"}),
            "input_file_id",
        ),
        (
            json!({"input_file_id": good["id"], "endpoint": "/v1/embeddings", "completion_window": "24h"}),
            "endpoint",
        ),
        (
            json!({"input_file_id": good["id"], "endpoint": "/v1/moderations", "completion_window": "24h"}),
            "endpoint",
        ),
        (
            json!({"input_file_id": good["id"], "endpoint": "/v1/chat/completions", "completion_window": "1h"}),
            "completion_window",
        ),
        (
            json!({"input_file_id": good["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h", "metadata": {"n": 1}}),
            "metadata",
        ),
    ] {
        let resp = create(body.clone(), key).await.unwrap();
        assert_eq!(resp.status(), 400, "{body}");
        assert_eq!(
            resp.json::<Value>().await.unwrap()["error"]["param"],
            param,
            "{body}"
        );
    }
    let unknown_field = create(json!({"input_file_id": good["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h", "priority": 1}), key).await.unwrap();
    assert_eq!(unknown_field.status(), 400);
    assert!(
        entities::batches::Entity::find()
            .all(&db)
            .await
            .unwrap()
            .is_empty(),
        "no batch made"
    );
    // Another organization: the file is not found, nor is a batch made on it.
    let theirs = http
        .get(format!(
            "{base}/compat/v1/files/{}",
            good["id"].as_str().unwrap()
        ))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status(), 404);
    assert_eq!(
        theirs.json::<Value>().await.unwrap()["error"]["code"],
        "file_not_found"
    );
    let on_theirs = create(json!({"input_file_id": good["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}), &other).await.unwrap();
    assert_eq!(on_theirs.status(), 400);
    let mine: Value = create(json!({"input_file_id": good["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}), key)
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let id = mine["id"].as_str().unwrap();
    for path in [
        format!("/compat/v1/batches/{id}"),
        "/compat/v1/batches/batch_none".to_string(),
    ] {
        let resp = http
            .get(format!("{base}{path}"))
            .bearer_auth(&other)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 404, "{path}");
        assert_eq!(
            resp.json::<Value>().await.unwrap()["error"]["code"],
            "batch_not_found",
            "{path}"
        );
    }
    let cancel = http
        .post(format!("{base}/compat/v1/batches/{id}/cancel"))
        .bearer_auth(&other)
        .send()
        .await
        .unwrap();
    assert_eq!(
        cancel.status(),
        404,
        "another organization cannot cancel it"
    );
    running.stop().await.unwrap();
}
