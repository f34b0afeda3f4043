//! `GET {compat_base}/generations/{request_id}` through the gateway (issue 45, Done means 1): what
//! each call cost, read back by the `x-request-id` it was answered with, equals the ledger's
//! record to the nano-dollar — a chat, a stream, a stream cut short (estimated), a Messages call
//! translated to an OpenAI-format supplier, an embedding, an image call (two of three made: two charged) and a
//! video task (four seconds of eight made: four charged, read back by the create's request id)
//! — on the in-memory and the Redis store, on whichever database the suite runs (PostgreSQL,
//! then SQLite); another organization's key reads each of them as a 404.

use super::{database_with_demo_key, record_of};
use mock_supplier::{MockConfig, MockHandle, MockSupplier};
use serde_json::{Value, json};
use testkit::{Account, Group, Model, TestConfig};
use tollgate::{App, Role};

/// One call to make and what its read-back must say.
struct Call {
    what: &'static str,
    path: &'static str,
    body: Value,
    /// The mock's instance fault (a cut stream never reaches the supplier's usage).
    fault: Option<&'static str>,
    headers: &'static [(&'static str, &'static str)],
    measurement: &'static str,
    /// `(field, value)` the read-back carries besides the tokens (`images`, `video_seconds`).
    counts: &'static [(&'static str, i64)],
}

fn calls() -> Vec<Call> {
    let usage: &[(&str, &str)] = &[("x-mock-usage", "prompt=1234,completion=321")];
    let chat = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}]});
    let mut stream = chat.clone();
    stream["stream"] = json!(true);
    let call = |what, path, body: &Value| Call {
        what,
        path,
        body: body.clone(),
        fault: None,
        headers: usage,
        measurement: "exact",
        counts: &[],
    };
    vec![
        call("chat", "/compat/v1/chat/completions", &chat),
        call("stream", "/compat/v1/chat/completions", &stream),
        Call {
            fault: Some("cut_after=3"),
            headers: &[],
            measurement: "estimated",
            ..call("cut stream", "/compat/v1/chat/completions", &stream)
        },
        call(
            "messages",
            "/v1/messages",
            &json!({"model": "gpt-4o-mini", "max_tokens": 64,
                    "messages": [{"role": "user", "content": "hi"}]}),
        ),
        // Three asked, two made: two charged.
        Call {
            headers: &[("x-mock-images", "2")],
            counts: &[("images", 2)],
            ..call(
                "image",
                "/compat/v1/images/generations",
                &json!({"model": "gpt-image-x", "prompt": "a lighthouse", "n": 3}),
            )
        },
        // An embedding on an OpenAI-format supplier: its reported input tokens.
        call(
            "embedding",
            "/compat/v1/embeddings",
            &json!({"model": "text-embedding-x", "input": ["a lighthouse", "at dusk"]}),
        ),
        // Eight asked, four made: four charged, read back by the create's request id.
        Call {
            headers: &[("x-mock-video", "delay_ms=300,seconds=4")],
            counts: &[("video_seconds", 4), ("images", -1)],
            ..call(
                "video",
                "/compat/v1/videos",
                &json!({"model": "sora-2", "prompt": "a lighthouse", "durationSeconds": 8}),
            )
        },
    ]
}

/// Makes `call` and answers its `x-request-id` once the call is over (a video: once its task
/// completed).
async fn make(
    http: &reqwest::Client,
    base: &str,
    api_key: &str,
    mock: &MockHandle,
    call: &Call,
) -> String {
    let mut req = http
        .post(format!("{base}{}", call.path))
        .bearer_auth(api_key)
        .json(&call.body);
    for (name, value) in call.headers {
        req = req.header(*name, *value);
    }
    mock.set_fault(call.fault.map(|f| f.parse().unwrap()));
    let resp = req.send().await.unwrap();
    if resp.status() != 200 {
        panic!(
            "{}: {} {}",
            call.what,
            resp.status(),
            resp.text().await.unwrap()
        );
    }
    let id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    let body = resp.bytes().await.unwrap_or_default(); // a cut stream ends short
    mock.set_fault(None);
    if call.path == "/compat/v1/videos" {
        let task: Value = serde_json::from_slice(&body).unwrap();
        let task = task["id"].as_str().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
        loop {
            let polled: Value = http
                .get(format!("{base}/compat/v1/videos/{task}"))
                .bearer_auth(api_key)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            if polled["status"] == "completed" {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{polled}");
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    }
    id
}

/// `GET /compat/v1/generations/{id}` once it answers 200 (404 until the call is settled).
async fn read_back(http: &reqwest::Client, base: &str, api_key: &str, id: &str) -> Value {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let resp = http
            .get(format!("{base}/compat/v1/generations/{id}"))
            .bearer_auth(api_key)
            .send()
            .await
            .unwrap();
        if resp.status() == 200 {
            return resp.json().await.unwrap();
        }
        assert_eq!(resp.status(), 404, "{id}");
        assert!(std::time::Instant::now() < deadline, "{id} never readable");
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
        .model(Model::image("gpt-image-x", 0.04).author("openai"))
        .model(Model::video("sora-2", 0.10))
        .model(Model::embedding("text-embedding-x", 0.02))
        .account(Account::openai(
            "mock",
            &mock.base_url(),
            &["gpt-4o-mini", "text-embedding-x"],
        ))
        .account(
            Account::openai("mock-image", &mock.base_url(), &["gpt-image-x"])
                .capability("image_generation"),
        )
        .account(Account::openai("mock-video", &mock.base_url(), &["sora-2"]).capability("video"))
        .group(
            Group::new(
                1,
                &["gpt-4o-mini", "gpt-image-x", "sora-2", "text-embedding-x"],
            )
            .feature("video"),
        );
    let (db, minted) = database_with_demo_key(&db_url).await;
    let other = super::key_of_another_organization(
        &db,
        opstate::Stores::memory().keys.as_ref(),
        &credentials::KeyHasher::new(testkit::PEPPER.as_bytes()),
        credentials::Env::Dev,
    )
    .await;
    let mut deployments = vec![("memory", config.clone())];
    if let Some(url) = testkit::redis_url() {
        deployments.push(("redis", config.redis(&url, &testkit::redis_prefix("gen"))));
    }
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    for (name, config) in deployments {
        let app = App::build(config.settings(), Role::Proxy).await.unwrap();
        let running = app.start();
        let base = running.base_url().unwrap();
        for call in calls() {
            let what = format!("{name} {}", call.what);
            let id = make(&http, &base, &minted.api_key, &mock, &call).await;
            let record = record_of(&db, &id).await;
            let cost = read_back(&http, &base, &minted.api_key, &id).await;
            // Another organization's key: the 404 of a call that does not exist.
            let theirs = http
                .get(format!("{base}/compat/v1/generations/{id}"))
                .bearer_auth(&other)
                .send()
                .await
                .unwrap();
            assert_eq!(theirs.status(), 404, "{what}");
            let theirs: Value = theirs.json().await.unwrap();
            assert_eq!(theirs["error"]["code"], "generation_not_found", "{what}");
            assert_eq!(cost["id"], id.as_str(), "{what}: {cost}");
            assert_eq!(cost["measurement"], call.measurement, "{what}: {cost}");
            assert_eq!(record.measurement, call.measurement, "{what}");
            assert_eq!(
                cost["cost_usd"],
                admin_api::dto::usd_json(money::NanoUsd::from_nanos(record.charged_nanos)),
                "{what}: the ledger's charge to the nano-dollar"
            );
            assert!(record.charged_nanos > 0, "{what}");
            assert_eq!(
                (&cost["input_tokens"], &cost["output_tokens"]),
                (&json!(record.input_tokens), &json!(record.output_tokens)),
                "{what}"
            );
            for (field, want) in call.counts {
                let want = if *want < 0 { Value::Null } else { json!(want) };
                assert_eq!(
                    cost.get(*field).cloned().unwrap_or(Value::Null),
                    want,
                    "{what}: {cost}"
                );
            }
            assert_eq!(
                cost["images"].as_i64().unwrap_or(0),
                record.images,
                "{what}"
            );
            assert_eq!(
                cost["video_seconds"].as_i64().unwrap_or(0),
                record.video_seconds,
                "{what}"
            );
        }
        running.stop().await.unwrap();
    }
}
