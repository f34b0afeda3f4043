//! Customer keys at the gateway: every accepted key header, missing, invalid and revoked keys, the
//! OpenAI permission, the key group's model list, and a lost key directory.

use super::*;

fn assert_invalid_key(status: u16, body: &Value) {
    assert_eq!(status, 401, "{body}");
    assert_eq!(body["error"]["type"], "authentication_error", "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
}

#[tokio::test]
async fn each_key_header_authenticates() {
    let h = Harness::start().await;
    for (name, value) in [
        ("authorization", format!("Bearer {}", h.key)),
        ("x-api-key", h.key.clone()),
        ("x-alt-api-key", h.key.clone()),
    ] {
        let resp = h
            .http
            .get(h.url("/compat/v1/models"))
            .header(name, value)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
    }
    assert_eq!(
        h.mock.request_count(),
        0,
        "the model list is answered locally"
    );
}

#[tokio::test]
async fn missing_key_body() {
    let h = Harness::start().await;
    for resp in [
        h.http.get(h.url("/compat/v1/models")).send().await.unwrap(),
        h.http
            .post(h.url("/compat/v1/chat/completions"))
            .body(chat("gpt-4o-mini", false).to_string())
            .send()
            .await
            .unwrap(),
        h.http
            .get(h.url("/compat/v1/models"))
            .header("authorization", "Basic dXNlcjpwYXNz")
            .send()
            .await
            .unwrap(),
    ] {
        let (status, body) = json_of(resp).await;
        assert_eq!(status, 401);
        assert!(body["error"].is_string(), "{body}");
        assert!(body["message"].is_string(), "{body}");
    }
    assert_eq!(h.mock.request_count(), 0);
    h.no_usage_event().await;
}

#[tokio::test]
async fn invalid_keys_get_the_authentication_error() {
    let h = Harness::start().await;
    let unknown = credentials::generate(Kind::CustomerKey, Env::Dev);
    let partner = credentials::generate(Kind::PartnerToken, Env::Dev);
    let billing = credentials::generate(Kind::BillingToken, Env::Dev);
    let live = credentials::generate(Kind::CustomerKey, Env::Live);
    let mut typo = h.key.clone();
    typo.replace_range(12..13, if &typo[12..13] == "a" { "b" } else { "a" });
    // A production key: well formed, registered, but this gateway runs as development.
    h.stores
        .keys
        .publish(
            &h.hasher.hash(live.expose()),
            &KeyRecord {
                key_id: 9,
                org_id: 42,
                group_id: 1,
                permissions: KeyPermissions::default(),
                rate: Some(RateMultiplier::ONE),
                expires_at: None,
                limits: KeyLimits::default(),
                budget: None,
            },
        )
        .await
        .unwrap();
    for key in [
        "sk-not-ours",
        unknown.expose(),
        partner.expose(),
        billing.expose(),
        live.expose(),
        typo.as_str(),
    ] {
        let resp = h
            .http
            .get(h.url("/compat/v1/models"))
            .bearer_auth(key)
            .send()
            .await
            .unwrap();
        let (status, body) = json_of(resp).await;
        assert_invalid_key(status, &body);
    }
    // Two different keys in two headers are refused, never picked from.
    let resp = h
        .http
        .get(h.url("/compat/v1/models"))
        .bearer_auth(&h.key)
        .header("x-api-key", unknown.expose())
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(resp).await;
    assert_invalid_key(status, &body);
    assert_eq!(h.mock.request_count(), 0);
}

#[tokio::test]
async fn revoked_key_stops_working_at_once() {
    let h = Harness::start().await;
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    h.stores.keys.revoke(&h.hasher.hash(&h.key)).await.unwrap();
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_invalid_key(status, &body);
    assert_eq!(h.mock.request_count(), 1);
}

#[tokio::test]
async fn key_without_openai_permission_is_forbidden() {
    let h = Harness::start().await;
    let key = h
        .add_key(
            1,
            KeyPermissions {
                openai: false,
                ..KeyPermissions::default()
            },
        )
        .await;
    for req in [
        h.http.get(h.url("/compat/v1/models")),
        h.http
            .post(h.url("/compat/v1/chat/completions"))
            .body(chat("gpt-4o-mini", false).to_string()),
    ] {
        let (status, body) = json_of(req.bearer_auth(&key).send().await.unwrap()).await;
        assert_eq!(status, 403);
        assert_eq!(body["error"]["type"], "permission_denied");
        assert_eq!(body["error"]["code"], "permission_denied");
        assert!(body["error"]["message"].is_string());
    }
    assert_eq!(h.mock.request_count(), 0);
}

#[tokio::test]
async fn model_list_shows_only_the_keys_group() {
    let h = Harness::start().await;
    let (status, body) = json_of(
        h.http
            .get(h.url("/compat/v1/models"))
            .bearer_auth(&h.key)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(body["object"], "list");
    let ids: Vec<&str> = body["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["gpt-4o-mini", "o3-mini", "dead-model"]);
    assert!(
        body["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["object"] == "model")
    );
    let premium = h.add_key(2, KeyPermissions::default()).await;
    let (_, body) = json_of(
        h.http
            .get(h.url("/compat/v1/models"))
            .bearer_auth(&premium)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        body["data"],
        json!([{"id": "gpt-4o", "object": "model"}, {"id": "narrow-model", "object": "model"}, {"id": "big-model", "object": "model"}])
    );
}

#[tokio::test]
async fn a_lost_directory_is_unavailable_not_invalid() {
    let h = Harness::start().await;
    // The store restarted empty: nothing is loaded, every lookup misses.
    let h2 = Harness::start_with_stores(Stores::memory()).await;
    let (status, body) = json_of(
        h2.post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(body["error"]["code"], "store_unavailable");
    assert_eq!(h2.mock.request_count(), 0);
    // With a complete directory the same miss is an invalid key.
    let unknown = credentials::generate(Kind::CustomerKey, Env::Dev);
    let (status, body) = json_of(
        h.http
            .get(h.url("/compat/v1/models"))
            .bearer_auth(unknown.expose())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_invalid_key(status, &body);
}

/// Publishes the harness key again with `expires_at` (Unix seconds).
async fn expire_key_at(h: &Harness, expires_at: i64) {
    let record = KeyRecord {
        key_id: 101,
        org_id: 42,
        group_id: 1,
        permissions: KeyPermissions::default(),
        rate: Some(RateMultiplier::ONE),
        expires_at: Some(expires_at),
        limits: KeyLimits::default(),
        budget: None,
    };
    h.stores
        .keys
        .publish(&h.hasher.hash(&h.key), &record)
        .await
        .unwrap();
}

fn unix_now() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs(),
    )
    .unwrap()
}

#[tokio::test]
async fn an_expired_key_is_refused_like_an_unknown_one() {
    let h = Harness::start().await;
    // Expired a second ago: refused on every route, before anything reaches the supplier or the
    // wallet, and the connection stays usable.
    expire_key_at(&h, unix_now() - 1).await;
    for _ in 0..2 {
        let resp = h
            .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
            .send()
            .await
            .unwrap();
        let (status, body) = json_of(resp).await;
        assert_invalid_key(status, &body);
        let resp = h
            .http
            .get(h.url("/compat/v1/models"))
            .bearer_auth(&h.key)
            .send()
            .await
            .unwrap();
        let (status, body) = json_of(resp).await;
        assert_invalid_key(status, &body);
    }
    assert_eq!(h.mock.request_count(), 0);
    h.no_usage_event().await;

    // Expiring in the future: served until the expiry instant, refused from it on.
    let at = unix_now() + 2;
    expire_key_at(&h, at).await;
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(h.mock.request_count(), 1);
    while unix_now() < at {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .send()
        .await
        .unwrap();
    let (status, body) = json_of(resp).await;
    assert_invalid_key(status, &body);
    assert_eq!(
        h.mock.request_count(),
        1,
        "nothing more reached the supplier"
    );
}

/// SPEC's three customer-key forms work on the native surface too (besides Google's own
/// `x-goog-api-key` and `key`), for the model list and a generation.
#[tokio::test]
async fn the_native_surface_takes_every_spec_key_form() {
    let h = Harness::start_with_config(super::surfaces::surfaces).await;
    let key = h.add_key(5, KeyPermissions::default()).await;
    let body = json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]});
    for (name, value) in [
        ("authorization", format!("Bearer {key}")),
        ("x-api-key", key.clone()),
        ("x-alt-api-key", key.clone()),
    ] {
        let resp = h
            .http
            .post(h.url("/v1beta/models/gemini-x:generateContent"))
            .header(name, &value)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name}");
        let v: Value = resp.json().await.unwrap();
        assert!(
            v["candidates"][0]["content"]["parts"][0]["text"].is_string(),
            "{name}: {v}"
        );
        let resp = h
            .http
            .get(h.url("/v1beta/models"))
            .header(name, &value)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{name}: model list");
    }
}

/// Speech generation and audio translation are not supported capabilities: their paths are
/// refused (404 `unknown_route`), reach no supplier and hold nothing.
#[tokio::test]
async fn speech_and_audio_translation_are_refused() {
    let h = Harness::start().await;
    for path in ["/compat/v1/audio/speech", "/compat/v1/audio/translations"] {
        let resp = h
            .post(
                path,
                &json!({"model": "whisper-1", "input": "hello", "voice": "alloy"}),
            )
            .send()
            .await
            .unwrap();
        let (status, v) = json_of(resp).await;
        assert_eq!(status, 404, "{path}: {v}");
        assert_eq!(v["error"]["code"], "unknown_route", "{path}");
    }
    assert_eq!(h.mock.request_count(), 0);
    assert_eq!(h.wallet().await.reserved, NanoUsd::ZERO);
    h.no_usage_event().await;
}
