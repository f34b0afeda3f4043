//! `GET {compat_base}/generations/{request_id}` through the gateway (issue 45, Done means 1): what
//! each call cost, read back by the `x-request-id` it was answered with, equals the ledger's
//! record to the nano-dollar — a chat, a stream, a stream cut short (estimated), a Messages call
//! translated to an OpenAI-format supplier — on the in-memory and the Redis store, on whichever
//! database the suite runs (PostgreSQL, then SQLite). Images and videos: issue 45's note.

use super::database_with_demo_key;
use mock_supplier::{MockConfig, MockSupplier};
use serde_json::{Value, json};
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

/// The settled record of `request_id` (10 s at most).
async fn record_of(
    db: &sea_orm::DatabaseConnection,
    request_id: &str,
) -> entities::usage_records::Model {
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let found = entities::usage_records::Entity::find()
            .filter(entities::usage_records::Column::RequestId.eq(request_id))
            .one(db)
            .await
            .unwrap();
        if let Some(r) = found {
            return r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{request_id} never settled"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_calls_cost_read_back_by_its_id_equals_the_ledger() {
    let mock = MockSupplier::start(MockConfig::default()).await.unwrap();
    let db_url = testkit::fresh_database_url().await;
    let config = TestConfig::embedded()
        .database(&db_url)
        .model(Model::gpt_4o_mini())
        .account(Account::openai("mock", &mock.base_url(), &["gpt-4o-mini"]))
        .group(Group::new(1, &["gpt-4o-mini"]));
    let (db, minted) = database_with_demo_key(&db_url).await;
    let mut deployments = vec![("memory", config.clone())];
    if let Some(url) = testkit::redis_url() {
        deployments.push(("redis", config.redis(&url, &testkit::redis_prefix("gen"))));
    }
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let chat = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let mut stream = chat.clone();
    stream["stream"] = json!(true);
    let messages = json!({"model": "gpt-4o-mini", "max_tokens": 64,
                          "messages": [{"role": "user", "content": "hi"}]});
    for (name, config) in deployments {
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let running = app.start();
        let base = running.base_url().unwrap();
        // (what, path, body, mock fault, the measurement the ledger must say)
        let calls = [
            ("chat", "/compat/v1/chat/completions", &chat, None, "exact"),
            (
                "stream",
                "/compat/v1/chat/completions",
                &stream,
                None,
                "exact",
            ),
            (
                "cut stream",
                "/compat/v1/chat/completions",
                &stream,
                Some("cut_after=3"),
                "estimated",
            ),
            ("messages", "/v1/messages", &messages, None, "exact"),
        ];
        for (what, path, body, fault, measurement) in calls {
            let mut req = http
                .post(format!("{base}{path}"))
                .bearer_auth(&minted.api_key)
                .json(body);
            // A cut stream never reaches the supplier's usage: the gateway estimates it.
            match fault {
                Some(f) => mock.set_fault(Some(f.parse().unwrap())),
                None => req = req.header("x-mock-usage", "prompt=1234,completion=321"),
            }
            let resp = req.send().await.unwrap();
            assert_eq!(resp.status(), 200, "{name} {what}");
            let id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
            let _ = resp.bytes().await;
            mock.set_fault(None);
            let record = record_of(&db, &id).await;
            let cost: Value = loop {
                let resp = http
                    .get(format!("{base}/compat/v1/generations/{id}"))
                    .bearer_auth(&minted.api_key)
                    .send()
                    .await
                    .unwrap();
                if resp.status() == 200 {
                    break resp.json().await.unwrap();
                }
                assert_eq!(resp.status(), 404, "{name} {what}");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            };
            assert_eq!(cost["id"], id.as_str(), "{name} {what}: {cost}");
            assert_eq!(cost["measurement"], measurement, "{name} {what}: {cost}");
            assert_eq!(record.measurement, measurement, "{name} {what}");
            assert_eq!(
                cost["cost_usd"],
                admin_api::dto::usd_json(money::NanoUsd::from_nanos(record.charged_nanos)),
                "{name} {what}: the ledger's charge to the nano-dollar"
            );
            assert!(record.charged_nanos > 0, "{name} {what}");
            assert_eq!(
                (&cost["input_tokens"], &cost["output_tokens"]),
                (&json!(record.input_tokens), &json!(record.output_tokens)),
                "{name} {what}"
            );
        }
        running.stop().await.unwrap();
    }
}
