//! Request bodies: large bodies forwarded intact, the size limit, chunked uploads with and without
//! a length, and malformed bodies refused before the supplier.

use super::*;

#[tokio::test]
async fn large_body_is_forwarded_intact_and_oversize_is_refused() {
    let h = Harness::start().await;
    let filler = "x".repeat(3 * 1024 * 1024);
    let body = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": filler}]});
    let sent = body.to_string();
    let resp = h
        .post("/compat/v1/chat/completions", &body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(h.mock.requests()[0].body.len(), sent.len());
    assert_eq!(
        h.mock.requests()[0].body,
        sent.as_bytes(),
        "3 MB body arrives byte for byte"
    );

    let too_big = json!({"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "x".repeat(MAX_BODY)}]});
    let (status, err) = json_of(
        h.post("/compat/v1/chat/completions", &too_big)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(status, 413);
    assert_eq!(err["error"]["code"], "request_too_large");
    assert_eq!(
        h.mock.request_count(),
        1,
        "the oversize body never reached the supplier"
    );
}

#[tokio::test]
async fn chunked_body_over_64k_needs_a_length() {
    let h = Harness::start().await;
    let body = chat(&"m".repeat(100 * 1024), false).to_string();
    let resp = h.post_chunked(&body, 16 * 1024).await;
    let (status, err) = json_of(resp).await;
    assert_eq!(status, 411);
    assert_eq!(err["error"]["code"], "length_required");
    assert_eq!(h.mock.request_count(), 0);
}

#[tokio::test]
async fn small_chunked_body_is_forwarded() {
    let h = Harness::start().await;
    let body = chat("gpt-4o-mini", false).to_string();
    let resp = h.post_chunked(&body, 7).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(h.mock.requests()[0].body, body.as_bytes());
}

#[tokio::test]
async fn malformed_bodies_are_refused_before_the_supplier() {
    let h = Harness::start().await;
    for (body, param) in [
        ("{not json".to_string(), Value::Null),
        (json!({"messages": []}).to_string(), json!("model")),
        (
            json!({"model": "gpt-4o-mini"}).to_string(),
            json!("messages"),
        ),
        (
            json!({"model": "gpt-4o-mini", "messages": [], "stream": "yes"}).to_string(),
            json!("stream"),
        ),
        (String::new(), Value::Null),
    ] {
        let resp = h
            .http
            .post(h.url("/compat/v1/chat/completions"))
            .bearer_auth(&h.key)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        let (status, err) = json_of(resp).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(err["error"]["type"], "invalid_request_error", "{body}");
        assert_eq!(err["error"]["param"], param, "{body}");
    }
    assert_eq!(h.mock.request_count(), 0);
}

/// A body nested deeper than the documented limit (128 levels) never reaches a supplier: one
/// customer must not be able to make an account fail (and cool) for every tenant.
#[tokio::test]
async fn deeply_nested_json_is_refused_before_the_supplier() {
    let h = Harness::start().await;
    let levels = 100_000;
    let arrays = format!("{}{}", "[".repeat(levels), "]".repeat(levels));
    let objects = format!("{}1{}", r#"{"a":"#.repeat(levels), "}".repeat(levels));
    let bodies = [
        (
            "/compat/v1/chat/completions",
            format!(r#"{{"model":"gpt-4o-mini","messages":{arrays}}}"#),
        ),
        (
            "/compat/v1/responses",
            format!(r#"{{"model":"gpt-4o-mini","input":{arrays}}}"#),
        ),
        (
            "/compat/v1/chat/completions",
            format!(
                r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"hi"}}],"extra":{objects}}}"#
            ),
        ),
    ];
    for (path, body) in bodies {
        let (status, err) = json_of(
            h.http
                .post(h.url(path))
                .bearer_auth(&h.key)
                .header("content-type", "application/json")
                .body(body)
                .send()
                .await
                .unwrap(),
        )
        .await;
        assert_eq!(status, 400, "{path}: {err}");
        assert_eq!(err["error"]["type"], "invalid_request_error", "{path}");
        assert!(
            err["error"]["message"]
                .as_str()
                .unwrap()
                .contains("128 levels"),
            "{err}"
        );
    }
    assert_eq!(h.mock.request_count(), 0, "nothing reached the supplier");
    h.no_usage_event().await;
    // At the limit, the body is forwarded.
    let nested = format!("{}{}", "[".repeat(120), "]".repeat(120));
    let body = format!(
        r#"{{"model":"gpt-4o-mini","messages":[{{"role":"user","content":"hi"}}],"extra":{nested}}}"#
    );
    let resp = h
        .http
        .post(h.url("/compat/v1/chat/completions"))
        .bearer_auth(&h.key)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(h.mock.request_count(), 1);
}
