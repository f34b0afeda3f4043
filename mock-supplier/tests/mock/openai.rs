//! The OpenAI routes: exact non-streaming and streaming replies, usage and
//! delay headers.

use std::time::{Duration, Instant};

use futures_util::StreamExt;
use mock_supplier::reply::{body_hash_hex, default_prompt_tokens};
use serde_json::{Value, json};

use crate::common::*;

pub const CHAT: &str =
    r#"{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hello there"}]}"#;
pub const CHAT_STREAM: &str =
    r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true}"#;
pub const CHAT_STREAM_USAGE: &str = r#"{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"stream":true,"stream_options":{"include_usage":true}}"#;
pub const RESP: &str = r#"{"model":"o3-mini","input":"hello","max_output_tokens":50}"#;
pub const RESP_STREAM: &str =
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
