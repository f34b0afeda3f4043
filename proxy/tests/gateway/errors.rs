//! Error answers: unknown routes and models, unreachable, failing and stalled suppliers, and admin
//! routes while admin-api cannot be reached.

use super::*;

#[tokio::test]
async fn unknown_routes_and_models() {
    let h = Harness::start().await;
    // /responses without the compat segment is not a route, with or without a key.
    for path in ["/responses", "/v1/responses", "/compat/v1/nope"] {
        let (status, body) = json_of(
            h.post(path, &json!({"model": "gpt-4o-mini", "input": "x"}))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 404, "{path}");
        assert_eq!(body["error"]["code"], "unknown_route", "{path}");
    }
    let (status, _) = json_of(h.http.post(h.url("/responses")).send().await.unwrap()).await;
    assert_eq!(status, 404);
    // Unknown model, a model outside the key's group, and a wrong author prefix all read as unknown.
    for model in ["gpt-9", "gpt-4o", "anthropic/gpt-4o-mini", "openai/o3-mini"] {
        let (status, body) = json_of(
            h.post("/compat/v1/chat/completions", &chat(model, false))
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 404, "{model}");
        assert_eq!(body["error"]["code"], "model_not_found", "{model}");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
    // A configured model no account serves.
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &chat("o3-mini", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 503);
    assert_eq!(body["error"]["code"], "no_account_available");
    assert_eq!(h.mock.request_count(), 0);
    h.no_usage_event().await;
}

#[tokio::test]
async fn unreachable_supplier_gets_a_json_error() {
    let h = Harness::start().await;
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &chat("dead-model", false))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["type"], "upstream_error");
    assert_eq!(body["error"]["code"], "upstream_unreachable");
    let e = h.usage_event().await;
    assert_eq!(
        (e.input_tokens, e.output_tokens),
        (0, 0),
        "nothing was served"
    );
    assert_eq!(e.status, 502);
    assert_eq!(e.account_id, "dead");
}

#[tokio::test]
async fn supplier_errors_pass_through_unchanged() {
    let h = Harness::start().await;
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .header("x-mock-fault", "status=400")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let received = resp.bytes().await.unwrap();
    assert_eq!(received, h.mock.requests()[0].response_body);
}

#[tokio::test]
async fn stalled_supplier_times_out_with_a_json_error() {
    let h = Harness::start_with(300).await;
    let (status, body) = json_of(
        h.post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
            .header("x-mock-fault", "stall_ms=2000")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 504);
    assert_eq!(body["error"]["code"], "upstream_timeout");
    let e = h.usage_event().await;
    assert_eq!(e.status, 504);
    assert_eq!((e.input_tokens, e.output_tokens), (0, 0));
}

/// Admin routes while admin-api cannot be reached: the partner API's envelope, 503
/// `SERVICE_UNAVAILABLE` (retry later), never a supplier error or an authentication error.
#[tokio::test]
async fn admin_routes_without_admin_api_answer_503() {
    let h = Harness::start().await;
    for path in ["/partner/v1/me", "/api/v1/organization/billing/balance"] {
        let (status, body) = json_of(
            h.http
                .get(h.url(path))
                .bearer_auth("tgp_dev_whatever")
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 503, "{path}: {body}");
        assert_eq!(body["code"], 503, "{body}");
        assert_eq!(body["reason"], "SERVICE_UNAVAILABLE", "{body}");
        assert!(
            body["message"].as_str().unwrap().contains("admin API"),
            "{body}"
        );
        assert!(body["metadata"].is_object(), "{body}");
    }
    assert_eq!(h.mock.request_count(), 0);
    h.no_usage_event().await;
}
