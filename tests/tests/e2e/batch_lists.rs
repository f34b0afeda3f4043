//! Listing batches (issue 46): `GET /compat/v1/batches` (OpenAI's list, `after`, `limit`) and `GET
//! /v1/messages/batches` (Anthropic's, `after_id`, `before_id`, `limit`), newest first, each
//! surface its own batches, an organization only its own; refusals naming the parameter.

use super::batches::{config, start};
use super::database_with_demo_key;
use mock_supplier::{MockConfig, MockSupplier};
use serde_json::{Value, json};
use tollgate::{App, Role};

fn ids(list: &Value) -> Vec<&str> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["id"].as_str().unwrap())
        .collect()
}

#[tokio::test]
async fn batches_are_listed_newest_first_page_by_page() {
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
    let app = App::build(config(&mock, &db_url).settings(), Role::Proxy)
        .await
        .unwrap();
    let running = app.start();
    let base = running.base_url().unwrap();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();
    let key = minted.api_key.as_str();
    let line = json!({"custom_id": "a", "method": "POST", "url": "/v1/chat/completions",
                      "body": {"model": "gpt-4o-mini", "max_tokens": 4,
                               "messages": [{"role": "user", "content": "x"}]}})
    .to_string()
        + "\n";
    let mut made = Vec::new();
    for _ in 0..3 {
        let b = start(&http, &base, key, &line, "/v1/chat/completions").await;
        made.push(b["id"].as_str().unwrap().to_string());
    }
    let mut messages = Vec::new();
    for _ in 0..2 {
        let b: Value = http
            .post(format!("{base}/v1/messages/batches"))
            .header("x-api-key", key)
            .json(
                &json!({"requests": [{"custom_id": "m", "params": {"model": "gpt-4o-mini",
                  "max_tokens": 4, "messages": [{"role": "user", "content": "x"}]}}]}),
            )
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        messages.push(b["id"].as_str().unwrap().to_string());
    }
    let get = |path: String, auth: String| {
        let http = http.clone();
        async move {
            let resp = http
                .get(path)
                .bearer_auth(&auth)
                .header("x-api-key", &auth)
                .send()
                .await
                .unwrap();
            let status = resp.status().as_u16();
            (status, resp.json::<Value>().await.unwrap())
        }
    };

    // OpenAI's surface: its three, newest first, two at a time.
    let (status, page) = get(format!("{base}/compat/v1/batches?limit=2"), key.into()).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["object"], "list");
    assert_eq!(ids(&page), [made[2].as_str(), made[1].as_str()], "{page}");
    assert_eq!(page["has_more"], true);
    assert_eq!(page["first_id"], made[2].as_str());
    assert_eq!(page["last_id"], made[1].as_str());
    assert_eq!(page["data"][0]["object"], "batch");
    let (_, rest) = get(
        format!("{base}/compat/v1/batches?limit=2&after={}", made[1]),
        key.into(),
    )
    .await;
    assert_eq!(ids(&rest), [made[0].as_str()], "{rest}");
    assert_eq!(rest["has_more"], false);
    let (_, all) = get(format!("{base}/compat/v1/batches"), key.into()).await;
    assert_eq!(
        ids(&all).len(),
        3,
        "message batches are not on this list: {all}"
    );

    // Anthropic's surface: its two, and pages both ways.
    let (status, page) = get(format!("{base}/v1/messages/batches?limit=1"), key.into()).await;
    assert_eq!(status, 200, "{page}");
    assert_eq!(ids(&page), [messages[1].as_str()], "{page}");
    assert_eq!(page["has_more"], true);
    assert_eq!(page["data"][0]["type"], "message_batch");
    let (_, older) = get(
        format!("{base}/v1/messages/batches?after_id={}", messages[1]),
        key.into(),
    )
    .await;
    assert_eq!(ids(&older), [messages[0].as_str()], "{older}");
    assert_eq!(older["has_more"], false);
    let (_, newer) = get(
        format!("{base}/v1/messages/batches?before_id={}", messages[0]),
        key.into(),
    )
    .await;
    assert_eq!(ids(&newer), [messages[1].as_str()], "{newer}");

    // Another organization sees none of them, and cannot page from them.
    let (status, theirs) = get(format!("{base}/compat/v1/batches"), other.clone()).await;
    assert_eq!(status, 200);
    assert_eq!(ids(&theirs).len(), 0, "{theirs}");
    assert_eq!(theirs["first_id"], Value::Null);
    let (status, body) = get(
        format!("{base}/compat/v1/batches?after={}", made[0]),
        other.clone(),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["param"], "after", "{body}");

    // Refusals, each naming its parameter, in the surface's shape.
    for q in ["limit=0", "limit=101", "limit=x"] {
        let (status, body) = get(format!("{base}/compat/v1/batches?{q}"), key.into()).await;
        assert_eq!(status, 400, "{q}: {body}");
        assert_eq!(body["error"]["param"], "limit", "{q}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{q}");
    }
    for q in [
        "limit=1001".to_string(),
        format!("after_id={}&before_id={}", messages[0], messages[1]),
        format!("after_id={}", made[0]),
    ] {
        let (status, body) = get(format!("{base}/v1/messages/batches?{q}"), key.into()).await;
        assert_eq!(status, 400, "{q}: {body}");
        assert_eq!(body["type"], "error", "{q}: {body}");
        assert_eq!(body["error"]["type"], "invalid_request_error", "{q}");
    }
    let (status, body) = get(format!("{base}/compat/v1/batches"), "tgk_dev_nope".into()).await;
    assert_eq!(status, 401, "{body}");
    running.stop().await.unwrap();
}
