//! `GET {compat_base}/key` (DESIGN §6d): a customer key reads its own standing and its
//! organization's reconciled balance, nothing about other keys; refusals as the gateway's, and 503
//! in the gateway's shape when the balance is not reconciled (never a zero).
//! `GET {compat_base}/generations/{request_id}` (§6e, issue 45): what one settled call cost, for a
//! key of the same organization only.

use super::*;

async fn standing(api: &Api, headers: &[(&str, &str)]) -> (StatusCode, Value) {
    let mut req = api.http.get(format!("{}/compat/v1/key", api.base));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

#[tokio::test]
async fn a_key_reads_its_own_standing() {
    standing_on(Api::start().await).await;
    if let Some(url) = testkit::redis_url() {
        let stores = Stores::redis(&url, &testkit::redis_prefix("standing"))
            .await
            .unwrap();
        standing_on(Api::start_on("", stores).await).await;
    }
}

async fn standing_on(api: Api) {
    let owner = api.owner("100").await;
    let (id, org) = api.active_customer(&owner, "standing", 10.0, 1.0).await;
    let path = format!("/customers/{id}/api-keys");
    let (_, capped) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"name": "capped", "group_id": 1, "budget_usd": 2,
                "budget_period": "day", "max_concurrency": 3})),
        )
        .await;
    let (_, other) = api
        .write(
            &owner,
            Method::POST,
            &path,
            Some(&json!({"name": "other", "group_id": 1})),
        )
        .await;
    let secret = capped["data"]["key"].as_str().unwrap().to_string();
    let bearer = format!("Bearer {secret}");

    let (s, v) = standing(&api, &[("authorization", &bearer)]).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["code"], 0);
    let d = &v["data"];
    assert_eq!(d["api_key_id"], capped["data"]["api_key_id"]);
    assert_eq!(d["name"], "capped");
    assert_eq!(d["preview"], capped["data"]["preview"]);
    assert_eq!(d["group_id"], 1);
    assert_eq!(d["limits"]["max_concurrency"], 3);
    assert_eq!(d["budget"]["budget_usd"], 2);
    assert_eq!(d["budget"]["remaining_usd"], 2);
    assert_eq!(
        d["spend"],
        json!({"day_usd": 0, "month_usd": 0, "held_usd": 0})
    );
    assert_eq!(d["organization"]["organization_id"], org);
    assert_eq!(d["organization"]["available_usd"], 10);
    assert_eq!(d["organization"]["status"], "reconciled");
    // Nothing about any other key: no secret, no other key's id or name anywhere.
    let text = v.to_string();
    assert!(!text.contains(&secret), "{text}");
    assert!(!text.contains("\"other\""), "{text}");
    let mut fields: Vec<&str> = d.as_object().unwrap().keys().map(String::as_str).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "api_key_id",
            "budget",
            "expires_at",
            "group_id",
            "group_name",
            "limits",
            "name",
            "organization",
            "preview",
            "spend"
        ],
        "one key's fields, no list of keys"
    );
    // The same through x-api-key; a key without a budget shows none.
    let (s, v) = standing(
        &api,
        &[("x-api-key", other["data"]["key"].as_str().unwrap())],
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["data"]["name"], "other");
    assert_eq!(v["data"]["budget"], Value::Null);

    // Refusals are the gateway's: no key, a malformed or unknown key, two different keys.
    let (s, v) = standing(&api, &[]).await;
    assert_eq!(s, 401);
    assert_eq!(v["error"], "missing_api_key", "{v}");
    let unknown = credentials::generate(credentials::Kind::CustomerKey, credentials::Env::Dev);
    for headers in [
        vec![("authorization", "Bearer not-a-key".to_string())],
        vec![("authorization", format!("Bearer {}", unknown.expose()))],
        vec![
            ("authorization", bearer.clone()),
            (
                "x-api-key",
                other["data"]["key"].as_str().unwrap().to_string(),
            ),
        ],
    ] {
        let h: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let (s, v) = standing(&api, &h).await;
        assert_eq!(s, 401, "{headers:?}");
        assert_eq!(v["error"]["type"], "authentication_error", "{v}");
    }

    // A mirror that disagrees with the ledger: 503 in the gateway's shape (issue 45: never the
    // partner envelope on the gateway's base URL), never a figure.
    api.state
        .stores
        .wallets
        .adjust(org, nano(1), "drift-for-test")
        .await
        .unwrap();
    let (s, v) = standing(&api, &[("authorization", &bearer)]).await;
    assert_eq!(s, 503, "{v}");
    assert_eq!(v["error"]["code"], "balance_reconciliation_required", "{v}");
    assert_eq!(v["error"]["type"], "service_unavailable", "{v}");
    assert!(v.get("data").is_none() && v.get("reason").is_none(), "{v}");
    admin_api::services::wallets::reload(&api.state, org)
        .await
        .unwrap();
    assert_eq!(standing(&api, &[("authorization", &bearer)]).await.0, 200);

    // A disabled key reads nothing.
    let key_id = capped["data"]["api_key_id"].as_i64().unwrap();
    let (s, _) = api
        .write(&owner, Method::DELETE, &format!("{path}/{key_id}"), None)
        .await;
    assert_eq!(s, 200);
    let (s, v) = standing(&api, &[("authorization", &bearer)]).await;
    assert_eq!(s, 401, "{v}");
}

async fn generation(api: &Api, id: &str, key: Option<&str>) -> (StatusCode, Value) {
    let mut req = api
        .http
        .get(format!("{}/compat/v1/generations/{id}", api.base));
    if let Some(key) = key {
        req = req.bearer_auth(key);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status();
    (status, resp.json().await.unwrap())
}

/// A request id as the gateway writes them: a UUIDv7's 32 hex digits, its time `ms`.
fn request_id(ms: i64, n: u16) -> String {
    format!("{ms:012x}7{n:03x}8{:015x}", 0x5eed_u64)
}

fn event(org: i64, request_id: &str, route: &str, started_at_ms: u64) -> opstate::UsageEvent {
    opstate::UsageEvent {
        request_id: request_id.to_string(),
        key_id: 1,
        org_id: org,
        group_id: 1,
        route: route.into(),
        model_requested: "gpt-4o-mini".into(),
        model_served: "gpt-4o-mini".into(),
        account_id: "a".into(),
        input_tokens: 1000,
        output_tokens: 200,
        cached_tokens: 300,
        cache_write_tokens: 100,
        cache_write_1h_tokens: 0,
        measurement: opstate::Measurement::Exact,
        status: 200,
        stream: true,
        started_at_ms,
        latency_ms: 12,
        ttfb_ms: None,
        attempts: 1,
        cost_nanos: nano(1_234_000),
        charged_nanos: nano(1_234_000),
        excess_nanos: nano(0),
        hold_nanos: nano(2_000_000),
        project: None,
        workflow: None,
        audio_seconds: 0,
        images: if route == "image_generations" { 2 } else { 0 },
        video_seconds: 0,
        retail_rate: None,
        wholesale_rate: None,
        resent: false,
        supplier: Default::default(),
        batch: None,
    }
}

#[tokio::test]
async fn a_key_reads_what_one_call_cost() {
    let api = Api::start().await;
    let owner = api.owner("100").await;
    let (id, org) = api.active_customer(&owner, "costs", 10.0, 1.0).await;
    let (other_id, other_org) = api.active_customer(&owner, "others", 10.0, 1.0).await;
    let key = |customer: i64| {
        let api = &api;
        let owner = &owner;
        async move {
            let (_, k) = api
                .write(
                    owner,
                    Method::POST,
                    &format!("/customers/{customer}/api-keys"),
                    Some(&json!({"name": "k", "group_id": 1})),
                )
                .await;
            k["data"]["key"].as_str().unwrap().to_string()
        }
    };
    let (mine, theirs) = (key(id).await, key(other_id).await);
    let now = chrono::Utc::now().timestamp_millis();
    let chat = request_id(now, 1);
    let image = request_id(now, 2);
    let elsewhere = request_id(now, 3);

    // Not settled yet: 404, in the gateway's shape.
    let (s, v) = generation(&api, &chat, Some(&mine)).await;
    assert_eq!(s, 404, "{v}");
    assert_eq!(v["error"]["code"], "generation_not_found", "{v}");
    assert_eq!(v["error"]["type"], "invalid_request_error", "{v}");

    let started = u64::try_from(now).unwrap();
    for e in [
        event(org, &chat, "chat_completions", started),
        event(org, &image, "image_generations", started),
        event(other_org, &elsewhere, "chat_completions", started),
    ] {
        api.state.stores.usage.append(&e).await.unwrap();
    }
    admin_api::workers::settler::drain_once(&api.state, "t")
        .await
        .unwrap();

    let (s, v) = generation(&api, &chat, Some(&mine)).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["id"], chat.as_str());
    assert_eq!(v["model"], "gpt-4o-mini");
    assert_eq!(v["status"], 200);
    assert_eq!(v["measurement"], "exact");
    assert_eq!(
        (&v["input_tokens"], &v["output_tokens"]),
        (&json!(1000), &json!(200))
    );
    assert_eq!(
        (&v["cache_read_tokens"], &v["cache_write_tokens"]),
        (&json!(300), &json!(100))
    );
    assert_eq!(v["cost_usd"], json!(0.001234), "{v}");
    let created = chrono::DateTime::parse_from_rfc3339(v["created_at"].as_str().unwrap()).unwrap();
    assert_eq!(created.timestamp_millis(), now, "{v}");
    assert!(chrono::DateTime::parse_from_rfc3339(v["settled_at"].as_str().unwrap()).is_ok());
    // Counts that do not apply to a chat call are absent, not zero.
    assert!(
        v.get("images").is_none() && v.get("video_seconds").is_none(),
        "{v}"
    );
    let (s, v) = generation(&api, &image, Some(&mine)).await;
    assert_eq!((s, &v["images"]), (StatusCode::OK, &json!(2)), "{v}");

    // Another organization's call, an unknown id and a malformed one read the same 404; another
    // organization's key does not read this one's call.
    for (id, key) in [
        (elsewhere.as_str(), &mine),
        (chat.as_str(), &theirs),
        (request_id(now, 9).as_str(), &mine),
        ("not-a-request-id", &mine),
        ("01A225D33E0B75F287D89DC673838D57", &mine),
    ] {
        let (s, v) = generation(&api, id, Some(key)).await;
        assert_eq!(s, 404, "{id}: {v}");
        assert_eq!(v["error"]["code"], "generation_not_found", "{v}");
    }
    let (s, v) = generation(&api, &elsewhere, Some(&theirs)).await;
    assert_eq!(s, 200, "{v}");

    // Refusals are the gateway's.
    let (s, v) = generation(&api, &chat, None).await;
    assert_eq!(
        (s, &v["error"]),
        (StatusCode::UNAUTHORIZED, &json!("missing_api_key"))
    );
    let (s, v) = generation(&api, &chat, Some("not-a-key")).await;
    assert_eq!(s, 401, "{v}");
    assert_eq!(v["error"]["type"], "authentication_error", "{v}");
}
