//! End-to-end tests of the mock supplier over real loopback HTTP: deterministic
//! replies, streaming, usage and delay headers, every fault, instance faults,
//! the API key check and request recording.

// Test helpers outside `#[test]` functions may fail loudly too.
#![allow(clippy::unwrap_used, clippy::panic)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mock_supplier::reply::{body_hash_hex, default_prompt_tokens};
use mock_supplier::{Fault, MockConfig, MockHandle, MockSupplier};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn start() -> MockHandle {
    MockSupplier::start(MockConfig::default()).await.unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

async fn post(
    mock: &MockHandle,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> reqwest::Response {
    let mut req = client()
        .post(format!("{}{path}", mock.base_url()))
        .header("content-type", "application/json")
        .body(body.to_owned());
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    req.send().await.unwrap()
}

/// Sends `body` to `path` and returns status, headers and the full body.
async fn post_full(
    mock: &MockHandle,
    path: &str,
    body: &str,
    headers: &[(&str, &str)],
) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let resp = post(mock, path, body, headers).await;
    let status = resp.status().as_u16();
    let h = resp.headers().clone();
    let bytes = resp.bytes().await.unwrap().to_vec();
    (status, h, bytes)
}

/// Writes a raw HTTP/1.1 request and reads until EOF or error; returns the
/// bytes read and whether the connection ended with a clean EOF.
async fn raw_exchange(
    addr: SocketAddr,
    method: &str,
    path: &str,
    body: &str,
    extra: &str,
) -> (Vec<u8>, bool) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nhost: mock\r\nconnection: close\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{extra}\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    loop {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk)).await {
            Ok(Ok(0)) => return (buf, true),
            Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
            Ok(Err(_)) => return (buf, false),
            Err(_) => panic!("raw exchange timed out"),
        }
    }
}

/// Splits an SSE body into (event name, data) pairs.
fn sse_events(body: &[u8]) -> Vec<(Option<String>, String)> {
    let text = std::str::from_utf8(body).unwrap();
    text.split("\n\n")
        .filter(|b| !b.is_empty())
        .map(|block| {
            let mut event = None;
            let mut data = String::new();
            for line in block.lines() {
                if let Some(e) = line.strip_prefix("event: ") {
                    event = Some(e.to_owned());
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = d.to_owned();
                } else {
                    data = line.to_owned();
                }
            }
            (event, data)
        })
        .collect()
}

const CHAT: &str =
    r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there"}]}"#;
const CHAT_STREAM: &str =
    r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
const CHAT_STREAM_USAGE: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
const RESP: &str = r#"{"model":"o3-mini","input":"hello","max_output_tokens":50}"#;
const RESP_STREAM: &str =
    r#"{"model":"o3-mini","input":[{"role":"user","content":"hello"}],"stream":true}"#;

#[tokio::test]
async fn non_streaming_chat_is_exact_and_deterministic() {
    let mock = start().await;
    let (status, headers, body) = post_full(&mock, "/chat/completions", CHAT, &[]).await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["x-mock-name"], "mock");
    let v: Value = serde_json::from_slice(&body).unwrap();
    let p = default_prompt_tokens(CHAT.len());
    assert_eq!(p, CHAT.len().div_ceil(4) as u64);
    assert_eq!(
        v,
        json!({
            "id": format!("chatcmpl-{}", body_hash_hex(CHAT.as_bytes())),
            "object": "chat.completion",
            "created": 1700000000,
            "model": "gpt-4o-mini",
            "system_fingerprint": "fp_mock",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "mock reply w1 w2 w3 w4 w5"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": p, "completion_tokens": 5, "total_tokens": p + 5, "prompt_tokens_details": {"cached_tokens": 0}},
        })
    );
    let (_, _, again) = post_full(&mock, "/chat/completions", CHAT, &[]).await;
    assert_eq!(body, again);

    let reqs = mock.requests();
    assert_eq!(mock.request_count(), 2);
    assert_eq!(reqs[0].method, "POST");
    assert_eq!(reqs[0].path, "/v1/chat/completions");
    assert_eq!(reqs[0].response_status, 200);
    assert_eq!(&reqs[0].response_body[..], &body[..]);
    assert_eq!(reqs[0].json().unwrap()["model"], "gpt-4o-mini");
    assert_eq!(reqs[0].header("Content-Type"), Some("application/json"));
}

#[tokio::test]
async fn non_streaming_responses_is_exact() {
    let mock = start().await;
    let (status, _, body) = post_full(&mock, "/responses", RESP, &[("x-mock-events", "2")]).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_slice(&body).unwrap();
    let hash = body_hash_hex(RESP.as_bytes());
    let p = RESP.len().div_ceil(4) as u64;
    assert_eq!(
        v,
        json!({
            "id": format!("resp_{hash}"),
            "object": "response",
            "created_at": 1700000000,
            "status": "completed",
            "model": "o3-mini",
            "output": [{"type": "message", "id": format!("msg_{hash}"), "role": "assistant", "content": [{"type": "output_text", "text": "mock reply w1 w2"}]}],
            "usage": {"input_tokens": p, "output_tokens": 2, "total_tokens": p + 2, "input_tokens_details": {"cached_tokens": 0}},
        })
    );
    let (_, _, again) = post_full(&mock, "/responses", RESP, &[("x-mock-events", "2")]).await;
    assert_eq!(body, again);
    assert_eq!(&mock.requests()[1].response_body[..], &again[..]);
}

#[tokio::test]
async fn streaming_chat_without_include_usage() {
    let mock = start().await;
    let (status, headers, body) = post_full(
        &mock,
        "/chat/completions",
        CHAT_STREAM,
        &[("x-mock-events", "3")],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    let events = sse_events(&body);
    assert_eq!(events.len(), 1 + 3 + 1 + 1);
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    for c in &chunks {
        assert_eq!(c["object"], "chat.completion.chunk");
        assert_eq!(
            c["id"],
            format!("chatcmpl-{}", body_hash_hex(CHAT_STREAM.as_bytes()))
        );
        assert_eq!(c["model"], "gpt-4o");
        assert_eq!(c["created"], 1700000000);
        assert_eq!(c["system_fingerprint"], "fp_mock");
        assert!(
            c.get("usage").is_none(),
            "no usage key without include_usage"
        );
    }
    assert_eq!(
        chunks[0]["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
    let text: String = chunks[1..4]
        .iter()
        .map(|c| c["choices"][0]["delta"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, " w1 w2 w3");
    assert_eq!(chunks[4]["choices"][0]["delta"], json!({}));
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "stop");
    assert_eq!(&mock.requests()[0].response_body[..], &body[..]);
}

#[tokio::test]
async fn streaming_chat_with_include_usage() {
    let mock = start().await;
    let (_, _, body) = post_full(&mock, "/chat/completions", CHAT_STREAM_USAGE, &[]).await;
    let events = sse_events(&body);
    assert_eq!(events.len(), 1 + 5 + 1 + 1 + 1);
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let usage: Value = serde_json::from_str(&events[events.len() - 2].1).unwrap();
    let p = CHAT_STREAM_USAGE.len().div_ceil(4) as u64;
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": p, "completion_tokens": 5, "total_tokens": p + 5, "prompt_tokens_details": {"cached_tokens": 0}})
    );
    for (_, d) in &events[..events.len() - 2] {
        let c: Value = serde_json::from_str(d).unwrap();
        assert!(c.get("usage").unwrap().is_null());
    }
    // identical requests, identical bytes
    let (_, _, again) = post_full(&mock, "/chat/completions", CHAT_STREAM_USAGE, &[]).await;
    assert_eq!(body, again);
}

#[tokio::test]
async fn streaming_responses_with_completed_usage() {
    let mock = start().await;
    let (status, headers, body) = post_full(
        &mock,
        "/responses",
        RESP_STREAM,
        &[
            ("x-mock-events", "2"),
            ("x-mock-usage", "prompt=11,completion=5,cached=2"),
        ],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    let events = sse_events(&body);
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.completed"
        ]
    );
    let data: Vec<Value> = events
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    for (i, (d, name)) in data.iter().zip(&names).enumerate() {
        assert_eq!(d["type"], *name);
        assert_eq!(d["sequence_number"], i);
    }
    assert_eq!(data[0]["response"]["status"], "in_progress");
    assert!(data[0]["response"].get("usage").is_none());
    assert_eq!(data[1]["delta"], " w1");
    assert_eq!(data[2]["delta"], " w2");
    let hash = body_hash_hex(RESP_STREAM.as_bytes());
    assert_eq!(data[1]["item_id"], format!("msg_{hash}"));
    assert_eq!(data[4]["response"]["id"], format!("resp_{hash}"));
    assert_eq!(data[4]["response"]["status"], "completed");
    assert_eq!(
        data[4]["response"]["usage"],
        json!({"input_tokens": 11, "output_tokens": 5, "total_tokens": 16, "input_tokens_details": {"cached_tokens": 2}})
    );
    assert!(!String::from_utf8_lossy(&body).contains("[DONE]"));
    assert_eq!(&mock.requests()[0].response_body[..], &body[..]);
}

#[tokio::test]
async fn usage_header_partial_overrides() {
    let mock = start().await;
    let (_, _, body) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-usage", "cached=3"), ("x-mock-events", "4")],
    )
    .await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    let p = CHAT.len().div_ceil(4) as u64;
    assert_eq!(
        v["usage"],
        json!({"prompt_tokens": p, "completion_tokens": 4, "total_tokens": p + 4, "prompt_tokens_details": {"cached_tokens": 3}})
    );
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "mock reply w1 w2 w3 w4"
    );

    let (status, _, _) = post_full(
        &mock,
        "/chat/completions",
        CHAT,
        &[("x-mock-usage", "prompt=x")],
    )
    .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn delay_spaces_events() {
    let mock = start().await;
    let resp = post(
        &mock,
        "/chat/completions",
        CHAT_STREAM,
        &[("x-mock-events", "3"), ("x-mock-delay-ms", "60")],
    )
    .await;
    let start = Instant::now();
    let mut stream = resp.bytes_stream();
    let mut first = None;
    let mut body = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.unwrap();
        first.get_or_insert_with(|| start.elapsed());
        body.extend_from_slice(&chunk);
    }
    let last = start.elapsed();
    let first = first.unwrap();
    // 6 events → 5 pauses of 60 ms after the first.
    assert!(
        first < Duration::from_millis(50),
        "first event after {first:?}"
    );
    assert!(
        last >= Duration::from_millis(280),
        "last event after {last:?}"
    );
    assert!(last - first >= Duration::from_millis(250));
    assert_eq!(sse_events(&body).len(), 6);
}

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
    let (status, _, body) = post_full(&mock, "/embeddings", CHAT, &[]).await;
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
            "/v1/embeddings",
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
