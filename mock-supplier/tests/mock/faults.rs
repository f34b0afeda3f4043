//! Faults, instance faults, the OpenAI API key check, routing and validation
//! errors, request recording and shutdown.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mock_supplier::{Fault, MockConfig, MockSupplier};
use serde_json::{Value, json};
use tokio::net::TcpStream;

use crate::common::*;
use crate::openai::{CHAT, CHAT_STREAM, CHAT_STREAM_USAGE, RESP_STREAM};

#[tokio::test]
async fn status_faults() {
    let mock = start().await;

    let (status, headers, body) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-fault", "status=429;retry_after=7")],
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "7");
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json!({"error": {"message": "mock fault", "type": "rate_limit_exceeded"}})
    );

    let (status, headers, _) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-fault", "status=429;reset_header=12")],
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(headers["x-ratelimit-reset-requests"], "12s");
    assert!(headers.get("retry-after").is_none());

    let (status, _, body) = post_full(
        &mock,
        "/responses",
        RESP_STREAM,
        &[("x-mock-fault", "status=429;reset_body=12")],
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["error"]["message"],
        "Rate limit reached. Please try again in 12s."
    );

    let (status, _, body) = post_full(
        &mock,
        "/chat/completions",
        CHAT_STREAM,
        &[("x-mock-fault", "status=500")],
    )
    .await;
    assert_eq!(status, 500);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap(),
        json!({"error": {"message": "mock fault", "type": "server_error"}})
    );

    let (status, _, body) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-fault", "status=400")],
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["error"]["type"],
        "invalid_request_error"
    );

    let (status, _, _) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-fault", "explode")],
    )
    .await;
    assert_eq!(status, 400);

    let statuses: Vec<u16> = mock.requests().iter().map(|r| r.response_status).collect();
    assert_eq!(statuses, [429, 429, 429, 500, 400, 400]);
    assert_eq!(
        mock.requests()[3].header("x-mock-fault"),
        Some("status=500")
    );
}

#[tokio::test]
async fn stall_delays_headers_then_answers() {
    let mock = start().await;
    let t = Instant::now();
    let (status, _, body) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-fault", "stall_ms=200")],
    )
    .await;
    assert!(t.elapsed() >= Duration::from_millis(200));
    assert_eq!(status, 200);
    let (_, _, normal) = post_full(&mock, "/chat/completions", CHAT, &[]).await;
    assert_eq!(body, normal);

    let t = Instant::now();
    let (status, _, _) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-fault", "stall_ms=100;status=503")],
    )
    .await;
    assert!(t.elapsed() >= Duration::from_millis(100));
    assert_eq!(status, 503);
}

#[tokio::test]
async fn cut_after_on_a_stream() {
    let mock = start().await;
    let resp = post(
        &mock,
        "/chat/completions",
        CHAT_STREAM_USAGE,
        &[("x-mock-fault", "cut_after=3")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    let mut stream = resp.bytes_stream();
    let mut received = Vec::new();
    let mut errored = false;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => received.extend_from_slice(&c),
            Err(_) => {
                errored = true;
                break;
            }
        }
    }
    assert!(errored, "a cut stream must end in an error");
    let events = sse_events(&received);
    assert_eq!(events.len(), 3);
    let text = String::from_utf8_lossy(&received);
    assert!(!text.contains("[DONE]"));
    assert!(!text.contains("\"usage\":{"));
    let rec = &mock.requests()[0];
    assert_eq!(rec.response_status, 200);
    assert_eq!(&rec.response_body[..], &received[..]);

    // On the wire: chunked body without the terminating chunk.
    let (raw, _) = raw_exchange(
        mock.addr(),
        "POST",
        "/v1/responses",
        RESP_STREAM,
        "x-mock-fault: cut_after=2\r\n",
    )
    .await;
    let raw = String::from_utf8_lossy(&raw);
    assert!(raw.starts_with("HTTP/1.1 200"));
    assert!(raw.contains("response.created"));
    assert!(raw.contains("response.output_text.delta"));
    assert!(!raw.contains("response.completed"));
    assert!(!raw.ends_with("0\r\n\r\n"));
}

#[tokio::test]
async fn cut_after_on_a_plain_response() {
    let mock = start().await;
    let (_, _, full) = post_full(&mock, "/chat/completions", CHAT, &[]).await;
    let resp = post(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-fault", "cut_after=1")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.content_length(), Some(full.len() as u64));
    assert!(resp.bytes().await.is_err());
    let rec = &mock.requests()[1];
    assert_eq!(&rec.response_body[..], &full[..full.len() / 2]);

    let (raw, _) = raw_exchange(
        mock.addr(),
        "POST",
        "/v1/chat/completions",
        CHAT,
        "x-mock-fault: cut_after=1\r\n",
    )
    .await;
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    assert!(head.contains(&format!("content-length: {}", full.len())));
    assert_eq!(&raw[split..], &full[..full.len() / 2]);
}

#[tokio::test]
async fn malformed_sse() {
    let mock = start().await;
    let (status, _, body) = post_full(
        &mock,
        "/chat/completions",
        CHAT_STREAM_USAGE,
        &[("x-mock-fault", "malformed_sse")],
    )
    .await;
    assert_eq!(status, 200);
    let text = String::from_utf8(body.clone()).unwrap();
    let blocks: Vec<&str> = text.split_terminator("\n\n").collect();
    assert_eq!(blocks.len(), 4);
    assert!(blocks[0].contains("\"role\":\"assistant\""));
    assert_eq!(blocks[1], "data: {not json");
    assert_eq!(blocks[2], "garbage line");
    assert!(blocks[3].contains("\"content\":\" w1\""));
    assert!(!text.contains("[DONE]"));
    assert!(!text.contains("\"usage\":{"));
    assert_eq!(&mock.requests()[0].response_body[..], &body[..]);

    let (_, _, body) = post_full(
        &mock,
        "/responses",
        RESP_STREAM,
        &[("x-mock-fault", "malformed_sse")],
    )
    .await;
    let text = String::from_utf8(body).unwrap();
    assert!(text.starts_with("event: response.created\n"));
    assert!(text.contains("\n\ndata: {not json\n\ngarbage line\n\n"));
    assert!(!text.contains("response.completed"));
}

#[tokio::test]
async fn close_drops_the_connection() {
    let mock = start().await;
    let err = client()
        .post(format!("{}/chat/completions", mock.base_url()))
        .header("x-mock-fault", "close")
        .body(CHAT)
        .send()
        .await;
    assert!(err.is_err());

    let (raw, _) = raw_exchange(
        mock.addr(),
        "POST",
        "/v1/chat/completions",
        CHAT,
        "x-mock-fault: close\r\n",
    )
    .await;
    assert!(raw.is_empty(), "no response bytes expected, got {raw:?}");

    let reqs = mock.requests();
    assert_eq!(reqs.len(), 2);
    assert!(
        reqs.iter()
            .all(|r| r.response_status == 0 && r.response_body.is_empty())
    );

    // The instance keeps serving.
    let (status, _, _) = post_full(&mock, "/chat/completions", CHAT, &[]).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn instance_fault_set_and_clear() {
    let mock = start().await;
    mock.set_fault(Some("status=503;retry_after=2".parse().unwrap()));
    assert_eq!(
        mock.fault(),
        Some(Fault::Status {
            code: 503,
            retry_after: Some(2),
            reset_header: None,
            reset_body: None
        })
    );
    for _ in 0..2 {
        let (status, headers, _) = post_full(&mock, "/chat/completions", CHAT, &[]).await;
        assert_eq!(status, 503);
        assert_eq!(headers["retry-after"], "2");
    }
    let models = client()
        .get(format!("{}/models", mock.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(models.status(), 503);

    // The header wins over the instance fault; `none` means no fault.
    let (status, _, _) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-fault", "status=429")],
    )
    .await;
    assert_eq!(status, 429);
    let (status, _, _) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-fault", "none")],
    )
    .await;
    assert_eq!(status, 200);

    mock.set_fault(None);
    let (status, _, _) = post_full(&mock, "/chat/completions", CHAT, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(mock.request_count(), 6);
    mock.clear_requests();
    assert_eq!(mock.request_count(), 0);
}

#[tokio::test]
async fn api_key_is_checked() {
    let mock = MockSupplier::start(MockConfig {
        api_key: Some("sekrit".into()),
        name: "keyed".into(),
    })
    .await
    .unwrap();
    let expected = json!({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}});

    let (status, headers, body) = post_full(&mock, "/chat/completions", CHAT, &[]).await;
    assert_eq!(status, 401);
    assert_eq!(headers["x-mock-name"], "keyed");
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), expected);

    let (status, _, _) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("authorization", "Bearer wrong")],
    )
    .await;
    assert_eq!(status, 401);
    let (status, _, _) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("authorization", "sekrit")],
    )
    .await;
    assert_eq!(status, 401);

    let (status, _, _) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("authorization", "Bearer sekrit")],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(
        mock.requests()[3].header("authorization"),
        Some("Bearer sekrit")
    );
}

#[tokio::test]
async fn routing_and_validation_errors() {
    let mock = start().await;
    let models: Value = client()
        .get(format!("{}/models", mock.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["object"], "list");
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    for id in ["gpt-4o-mini", "gpt-4o", "o3-mini", "whisper-1"] {
        assert!(ids.contains(&id));
    }
    assert_eq!(models["data"][0]["object"], "model");
    assert_eq!(models["data"][0]["owned_by"], "mock");

    let not_found = json!({"error": {"message": "not found", "type": "invalid_request_error"}});
    let (status, _, body) = post_full(&mock, "/moderations", CHAT, &[]).await;
    assert_eq!(status, 404);
    assert_eq!(serde_json::from_slice::<Value>(&body).unwrap(), not_found);
    let resp = client()
        .get(format!("{}/chat/completions", mock.base_url()))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);

    let (status, _, body) = post_full(&mock, "/chat/completions", "{not json", &[]).await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_slice::<Value>(&body).unwrap()["error"]["type"],
        "invalid_request_error"
    );
    let (status, _, _) = post_full(&mock, "/responses", r#"{"input":"x"}"#, &[]).await;
    assert_eq!(status, 400);
    let (status, _, _) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-events", "many")],
    )
    .await;
    assert_eq!(status, 400);

    let paths: Vec<String> = mock.requests().into_iter().map(|r| r.path).collect();
    assert_eq!(
        paths,
        [
            "/v1/models",
            "/v1/moderations",
            "/v1/chat/completions",
            "/v1/chat/completions",
            "/v1/responses",
            "/v1/chat/completions"
        ]
    );
}

#[tokio::test]
async fn large_body_is_recorded_intact() {
    let mock = start().await;
    let filler: String = (0..3_000_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let body =
        json!({"model": "gpt-4o", "messages": [{"role": "user", "content": filler}]}).to_string();
    assert!(body.len() > 3_000_000);
    let (status, _, resp) = post_full(&mock, "/chat/completions", &body, &[]).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&resp).unwrap();
    assert_eq!(v["usage"]["prompt_tokens"], body.len().div_ceil(4) as u64);
    let rec = &mock.requests()[0];
    assert_eq!(rec.body.len(), body.len());
    assert_eq!(&rec.body[..], body.as_bytes());
}

#[tokio::test]
async fn query_is_recorded_and_ignored_for_routing() {
    let mock = start().await;
    let (status, _, _) = post_full(&mock, "/chat/completions?api-version=1", CHAT, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(
        mock.requests()[0].path,
        "/v1/chat/completions?api-version=1"
    );
}

#[tokio::test]
async fn shutdown_and_drop_stop_serving() {
    let mock = start().await;
    let addr = mock.addr();
    let clone = mock.clone();
    mock.shutdown();
    mock.shutdown();
    drop(clone);
    let mut refused = false;
    for _ in 0..50 {
        if TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(refused, "listener still open after shutdown");

    let mock = start().await;
    let addr = mock.addr();
    drop(mock);
    let mut refused = false;
    for _ in 0..50 {
        if TcpStream::connect(addr).await.is_err() {
            refused = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        refused,
        "listener still open after the last handle was dropped"
    );
}
