//! Batches run in a supplier's own batch API (issue 46): an account with the `batch`
//! capability gets the lines of a chat batch as OpenAI batches of at most `[batches]
//! supplier_lines` lines (one at a time), each line held at the gateway before it is sent and
//! booked once from the supplier's result at the batch price; none is sent as a call. A
//! supplier batch that expires books its lines `expired`, charged nothing; a cancelled batch
//! cancels the supplier's and charges only what the supplier finished. On both stores.

use super::batches::{
    batch_price, chat_lines, content, deployments, ended, records, start, wait_for, wallet,
};
use super::database_with_demo_key;
use mock_supplier::{MockConfig, MockHandle, MockSupplier};
use std::time::Duration;
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

fn config(mock: &MockHandle, db_url: &str) -> TestConfig {
    TestConfig::embedded()
        .database(db_url)
        .model(Model::gpt_4o_mini().line("batch_discount = 0.4"))
        .account(Account::openai("offload", &mock.base_url(), &["gpt-4o-mini"]).capability("batch"))
        .group(Group::new(1, &["gpt-4o-mini"]))
        .set("batches", "poll_interval_ms", 50)
        .set("batches", "supplier_lines", 4u64)
        .set("batches", "supplier_poll_interval_ms", 50)
}

/// How many requests the mock received on `path`.
fn calls_to(mock: &MockHandle, path: &str) -> usize {
    mock.requests().iter().filter(|r| r.path == path).count()
}

#[tokio::test]
async fn a_batch_runs_in_the_suppliers_batch_api_each_line_booked_once() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let (db, minted) = database_with_demo_key(&db_url).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let key = minted.api_key.as_str();
    let org = minted.organization_id;
    for (name, config) in deployments(&config(&mock, &db_url), "supplier-batch") {
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let running = app.start();
        let base = running.base_url().unwrap();
        let (chats, batches) = (
            calls_to(&mock, "/v1/chat/completions"),
            mock.batches_created(),
        );
        let before = wallet(&db, org).await;

        // Ten lines: three supplier batches (4, 4, 2), no call.
        let b = start(
            &http,
            &base,
            key,
            &chat_lines(10, "gpt-4o-mini", 16),
            "/v1/chat/completions",
        )
        .await;
        let id = b["id"].as_str().unwrap().to_string();
        let done = wait_for(&http, &base, key, &id, ended).await;
        assert_eq!(done["status"], "completed", "{name}: {done}");
        let errors = content(&http, &base, key, &done["error_file_id"]).await;
        assert_eq!(
            done["request_counts"]["completed"], 10,
            "{name}: {done} {errors:?}"
        );
        assert_eq!(mock.batches_created() - batches, 3, "{name}: chunks of 4");
        assert_eq!(
            calls_to(&mock, "/v1/chat/completions"),
            chats,
            "{name}: no line sent as a call"
        );
        let out = content(&http, &base, key, &done["output_file_id"]).await;
        assert_eq!(out.len(), 10, "{name}");
        for (i, row) in out.iter().enumerate() {
            assert_eq!(
                row["custom_id"],
                format!("req-{i}"),
                "{name}: in line order"
            );
            assert_eq!(row["response"]["status_code"], 200, "{name}");
            assert_eq!(
                row["response"]["body"]["object"], "chat.completion",
                "{name}"
            );
        }
        let recs = records(&db, &id, 10).await;
        assert_eq!(recs.len(), 10, "{name}: one record a line");
        for r in &recs {
            assert_eq!(r.account_id, "offload", "{name}");
            assert_eq!(r.measurement, "exact", "{name}");
            assert!(r.input_tokens > 0 && r.output_tokens > 0, "{name}");
            assert_eq!(r.charged_nanos, batch_price(r), "{name}: the batch price");
        }
        let charged: i64 = recs.iter().map(|r| r.charged_nanos).sum();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while wallet(&db, org).await != before - charged && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(wallet(&db, org).await, before - charged, "{name}");

        // The supplier lets a batch expire: every line expired, nothing charged.
        mock.set_batch_behaviour(Some("expire=true"));
        let before = wallet(&db, org).await;
        let b = start(
            &http,
            &base,
            key,
            &chat_lines(3, "gpt-4o-mini", 16),
            "/v1/chat/completions",
        )
        .await;
        let id = b["id"].as_str().unwrap().to_string();
        let done = wait_for(&http, &base, key, &id, ended).await;
        mock.set_batch_behaviour(None);
        assert_eq!(done["status"], "completed", "{name}: {done}");
        assert_eq!(done["request_counts"]["completed"], 0, "{name}: {done}");
        let errors = content(&http, &base, key, &done["error_file_id"]).await;
        assert_eq!(errors.len(), 3, "{name}");
        assert!(
            errors
                .iter()
                .all(|e| e["error"]["code"] == "batch_expired" && e["response"].is_null()),
            "{name}: {errors:?}"
        );
        let recs = records(&db, &id, 3).await;
        assert!(
            recs.iter().all(|r| r.charged_nanos == 0),
            "{name}: nothing charged"
        );
        assert_eq!(wallet(&db, org).await, before, "{name}");

        // Cancelled while the supplier runs it: the supplier's finished half charged, the rest
        // cancelled.
        mock.set_batch_behaviour(Some("polls=100000"));
        let created = mock.batches_created();
        let b = start(
            &http,
            &base,
            key,
            &chat_lines(4, "gpt-4o-mini", 16),
            "/v1/chat/completions",
        )
        .await;
        let id = b["id"].as_str().unwrap().to_string();
        // Cancelled once the supplier has the chunk.
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while mock.batches_created() == created {
            assert!(
                std::time::Instant::now() < deadline,
                "{name}: never submitted"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let cancel = http
            .post(format!("{base}/compat/v1/batches/{id}/cancel"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        assert_eq!(cancel.status(), 200, "{name}");
        let done = wait_for(&http, &base, key, &id, ended).await;
        mock.set_batch_behaviour(None);
        assert_eq!(done["status"], "cancelled", "{name}: {done}");
        assert_eq!(done["request_counts"]["completed"], 2, "{name}: {done}");
        let recs = records(&db, &id, 4).await;
        let paid: Vec<_> = recs.iter().filter(|r| r.charged_nanos > 0).collect();
        assert_eq!(paid.len(), 2, "{name}: the supplier's finished half");
        assert!(
            paid.iter().all(|r| r.charged_nanos == batch_price(r)),
            "{name}"
        );
        let errors = content(&http, &base, key, &done["error_file_id"]).await;
        assert_eq!(errors.len(), 2, "{name}");
        assert!(
            errors
                .iter()
                .all(|e| e["error"]["code"] == "batch_cancelled"),
            "{name}"
        );
        running.stop().await.unwrap();
    }
}

/// Anthropic's Message Batches as the supplier's batch API: a message batch whose model an
/// `anthropic` account with the `batch` capability serves runs there in chunks, each request
/// booked once from its message's usage at the batch price; a request the supplier refuses is
/// `errored`, charged nothing.
#[tokio::test]
async fn a_message_batch_runs_in_anthropics_message_batches() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let (db, minted) = database_with_demo_key(&db_url).await;
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let key = minted.api_key.as_str();
    let config = TestConfig::embedded()
        .database(&db_url)
        .model(Model::text("claude-x", 3.0, 15.0))
        .account(Account::anthropic("claude", &mock.root_url(), &["claude-x"]).capability("batch"))
        .group(Group::new(1, &["claude-x"]))
        .set("batches", "poll_interval_ms", 50)
        .set("batches", "supplier_lines", 2u64)
        .set("batches", "supplier_poll_interval_ms", 50);
    for (name, config) in deployments(&config, "supplier-msgbatch") {
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let running = app.start();
        let base = running.base_url().unwrap();
        let (calls, created) = (calls_to(&mock, "/v1/messages"), mock.batches_created());
        let request = |i: usize, messages: serde_json::Value| {
            serde_json::json!({"custom_id": format!("m-{i}"), "params": {"model": "claude-x",
                "max_tokens": 16, "messages": messages}})
        };
        let hi = serde_json::json!([{"role": "user", "content": "hi"}]);
        // The last one starts with the assistant: the supplier refuses it.
        let refused = serde_json::json!([{"role": "assistant", "content": "hi"}]);
        let requests = vec![
            request(0, hi.clone()),
            request(1, hi.clone()),
            request(2, hi),
            request(3, refused),
        ];
        let b: serde_json::Value = http
            .post(format!("{base}/v1/messages/batches"))
            .header("x-api-key", key)
            .header("anthropic-version", "2023-06-01")
            .json(&serde_json::json!({"requests": requests}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let id = b["id"].as_str().unwrap().to_string();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let done = loop {
            let b: serde_json::Value = http
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
            assert!(std::time::Instant::now() < deadline, "{name}: {b}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(
            done["request_counts"],
            serde_json::json!({"processing": 0, "succeeded": 3, "errored": 1, "canceled": 0, "expired": 0}),
            "{name}: {done}"
        );
        assert_eq!(mock.batches_created() - created, 2, "{name}: chunks of 2");
        assert_eq!(calls_to(&mock, "/v1/messages"), calls, "{name}: no call");
        let recs = records(&db, &id, 4).await;
        let paid: Vec<_> = recs.iter().filter(|r| r.charged_nanos > 0).collect();
        assert_eq!(paid.len(), 3, "{name}: {recs:?}");
        for r in paid {
            assert_eq!(r.account_id, "claude", "{name}");
            let weighted = i128::from(r.input_tokens) * 3_000_000_000
                + i128::from(r.output_tokens) * 15_000_000_000;
            let want = (weighted * 500_000 + 999_999_999_999) / 1_000_000_000_000;
            assert_eq!(i128::from(r.charged_nanos), want, "{name}: the batch price");
        }
        running.stop().await.unwrap();
    }
}

/// Out of balance in the supplier's batch API: the line the gateway refuses (402) stops the
/// batch; what was held before is sent to the supplier and booked (it was paid for), the rest
/// `failed` with `insufficient_quota`; nothing overdrawn, nothing sent as a call.
#[tokio::test]
async fn a_supplier_batch_out_of_balance_stops_with_the_rest_failed_and_no_overdraft() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for store in ["memory", "redis"] {
        // A fresh database each time: a demo organization of $100, held about $4 a line.
        let db_url = testkit::fresh_database_url().await;
        let config = TestConfig::embedded()
            .database(&db_url)
            .model(Model::text("pricey", 100_000.0, 100_000.0))
            .account(Account::openai("offload", &mock.base_url(), &["pricey"]).capability("batch"))
            .group(Group::new(1, &["pricey"]))
            .set("batches", "poll_interval_ms", 50)
            .set("batches", "supplier_lines", 1000u64)
            .set("batches", "supplier_poll_interval_ms", 50);
        let Some((name, config)) = deployments(&config, "supplier-broke")
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
        let (calls, created) = (
            calls_to(&mock, "/v1/chat/completions"),
            mock.batches_created(),
        );
        let n = 100;
        let b = start(
            &http,
            &base,
            key,
            &chat_lines(n, "pricey", 8),
            "/v1/chat/completions",
        )
        .await;
        let id = b["id"].as_str().unwrap().to_string();
        let done = wait_for(&http, &base, key, &id, ended).await;
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
        assert_eq!(
            mock.batches_created() - created,
            1,
            "{name}: one chunk of what was held"
        );
        assert_eq!(
            calls_to(&mock, "/v1/chat/completions"),
            calls,
            "{name}: no call"
        );
        let errors = content(&http, &base, key, &done["error_file_id"]).await;
        assert!(
            errors
                .iter()
                .all(|e| e["error"]["code"] == "insufficient_quota"),
            "{name}: {errors:?}"
        );
        let recs = records(&db, &id, usize::try_from(completed).unwrap()).await;
        assert_eq!(recs.len(), usize::try_from(completed).unwrap(), "{name}");
        let after = wallet(&db, minted.organization_id).await;
        assert!(after >= 0, "{name}: no overdraft ({after})");
        let charged: i64 = recs.iter().map(|r| r.charged_nanos).sum();
        assert_eq!(before - after, charged, "{name}");
        running.stop().await.unwrap();
    }
}
