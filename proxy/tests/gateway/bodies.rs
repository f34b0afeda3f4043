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

/// A client that stops sending its body gets 408 after `server.request_body_timeout_ms` (1 s
/// here), with `Connection: close`; nothing reached a supplier, nothing was held or charged.
#[tokio::test]
async fn a_stalled_request_body_answers_408() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let h = Harness::start().await;
    let before = h.stores.wallets.snapshot(42).await.unwrap().unwrap();
    let addr = h.base.trim_start_matches("http://").to_string();
    let mut sock = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let head = format!(
        "POST /compat/v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {}\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{{\"model\":\"gpt-4o-mini\",",
        h.key
    );
    sock.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), sock.read_to_end(&mut out))
        .await
        .expect("the gateway answered and closed")
        .unwrap();
    let text = String::from_utf8_lossy(&out).to_ascii_lowercase();
    assert!(text.starts_with("http/1.1 408"), "{text}");
    assert!(text.contains("connection: close"), "{text}");
    assert!(text.contains("request_timeout"), "{text}");
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "waited for the timeout"
    );
    assert_eq!(h.mock.request_count(), 0);
    h.no_usage_event().await;
    let after = h.stores.wallets.snapshot(42).await.unwrap().unwrap();
    assert_eq!(
        (after.balance, after.reserved),
        (before.balance, before.reserved)
    );
}

/// Only the headers a supplier needs reach it: an unused 64 KiB client header, cookies,
/// attribution, SDK telemetry and forwarding headers stay at the gateway.
#[tokio::test]
async fn only_allowlisted_client_headers_reach_the_supplier() {
    let h = Harness::start().await;
    let resp = h
        .post("/compat/v1/chat/completions", &chat("gpt-4o-mini", false))
        .header("x-padding", "p".repeat(60 * 1024))
        .header("cookie", "session=secret")
        .header("x-tollgate-project", "alpha")
        .header("x-stainless-lang", "python")
        .header("x-forwarded-for", "10.0.0.1")
        .header("openai-beta", "assistants=v2")
        .header("accept", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let names: Vec<String> = h.mock.requests()[0]
        .headers
        .iter()
        .map(|(k, _)| k.clone())
        .collect();
    for absent in [
        "x-padding",
        "cookie",
        "x-tollgate-project",
        "x-stainless-lang",
        "x-forwarded-for",
    ] {
        assert!(
            !names.iter().any(|n| n == absent),
            "{absent} reached the supplier: {names:?}"
        );
    }
    for present in [
        "openai-beta",
        "accept",
        "content-type",
        "authorization",
        "host",
        "content-length",
    ] {
        assert!(
            names.iter().any(|n| n == present),
            "{present} missing: {names:?}"
        );
    }
    let recorded = h.mock.requests();
    let auth = &recorded[0]
        .headers
        .iter()
        .find(|(k, _)| k == "authorization")
        .unwrap()
        .1;
    assert_eq!(
        auth, "Bearer sk-mock-supplier",
        "the account's credential, never the customer's"
    );
}
