//! The Anthropic Messages routes: exact replies and streams with usage,
//! `count_tokens`, validation, auth, error shapes and faults.

use std::time::{SystemTime, UNIX_EPOCH};

use mock_supplier::reply::{body_hash_hex, default_prompt_tokens};
use serde_json::{Value, json};

use crate::common::*;

pub const MSG: &str = r#"{"model":"claude-sonnet-4","max_tokens":256,"system":[{"type":"text","text":"be brief"}],"messages":[{"role":"user","content":"hello"},{"role":"assistant","content":[{"type":"text","text":"hi"}]},{"role":"user","content":[{"type":"text","text":"again"}]}]}"#;
pub const MSG_STREAM: &str = r#"{"model":"claude-sonnet-4","max_tokens":256,"stream":true,"messages":[{"role":"user","content":"hello"}]}"#;
pub const VERSION: (&str, &str) = ("anthropic-version", "2023-06-01");
const USAGE: (&str, &str) = (
    "x-mock-usage",
    "prompt=100,completion=7,cached=30,cache_creation=20",
);

fn expected_usage() -> Value {
    json!({"input_tokens": 50, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 30, "output_tokens": 7})
}

#[tokio::test]
async fn messages_json_is_exact() {
    let mock = start().await;
    let (status, headers, body) =
        post_root_full(&mock, "/v1/messages", MSG, &[VERSION, USAGE]).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(headers["x-mock-name"], "mock");
    assert_eq!(
        json_of(&body),
        json!({
            "id": format!("msg_{}", body_hash_hex(MSG.as_bytes())),
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4",
            "content": [{"type": "text", "text": "mock reply w1 w2 w3 w4 w5"}],
            "stop_reason": "end_turn",
            "stop_sequence": null,
            "usage": expected_usage(),
        })
    );
    let (_, _, again) = post_root_full(&mock, "/v1/messages", MSG, &[VERSION, USAGE]).await;
    assert_eq!(body, again);

    // Defaults: everything is uncached input.
    let (_, _, body) = post_root_full(
        &mock,
        "/v1/messages",
        MSG,
        &[VERSION, ("x-mock-events", "2")],
    )
    .await;
    let v = json_of(&body);
    let p = default_prompt_tokens(MSG.len());
    assert_eq!(
        v["usage"],
        json!({"input_tokens": p, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0, "output_tokens": 2})
    );
    assert_eq!(v["content"][0]["text"], "mock reply w1 w2");
    assert_eq!(mock.requests()[0].path, "/v1/messages");
}

#[tokio::test]
async fn messages_stream_has_cumulative_message_delta() {
    let mock = start().await;
    let (status, headers, body) = post_root_full(
        &mock,
        "/v1/messages",
        MSG_STREAM,
        &[VERSION, USAGE, ("x-mock-events", "3")],
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(headers["content-type"], "text/event-stream");
    let text = String::from_utf8(body.clone()).unwrap();
    for block in text.split_terminator("\n\n") {
        let lines: Vec<&str> = block.lines().collect();
        assert_eq!(lines.len(), 2, "{block:?}");
        assert!(lines[0].starts_with("event: ") && lines[1].starts_with("data: "));
    }
    let events = sse_json(&body);
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for (name, data) in &events {
        assert_eq!(data["type"], name.as_deref().unwrap());
    }
    let hash = body_hash_hex(MSG_STREAM.as_bytes());
    assert_eq!(
        events[0].1["message"],
        json!({
            "id": format!("msg_{hash}"),
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4",
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": 50, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 30, "output_tokens": 1},
        })
    );
    assert_eq!(
        events[1].1,
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    );
    let streamed: String = events[3..6]
        .iter()
        .map(|(_, d)| {
            assert_eq!(d["index"], 0);
            assert_eq!(d["delta"]["type"], "text_delta");
            d["delta"]["text"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(streamed, " w1 w2 w3");
    assert_eq!(
        events[6].1,
        json!({"type": "content_block_stop", "index": 0})
    );
    // Cumulative: a gateway adding message_start and message_delta usage
    // would double the input and cache counts.
    assert_eq!(
        events[7].1,
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": null}, "usage": expected_usage()})
    );
    let (_, _, again) = post_root_full(
        &mock,
        "/v1/messages",
        MSG_STREAM,
        &[VERSION, USAGE, ("x-mock-events", "3")],
    )
    .await;
    assert_eq!(body, again);
    assert_eq!(&mock.requests()[0].response_body[..], &body[..]);
}

#[tokio::test]
async fn count_tokens_reports_the_prompt() {
    let mock = start().await;
    let body = r#"{"model":"claude-sonnet-4","messages":[{"role":"user","content":"count me"}]}"#;
    let (status, _, resp) =
        post_root_full(&mock, "/v1/messages/count_tokens", body, &[VERSION]).await;
    assert_eq!(status, 200);
    assert_eq!(
        json_of(&resp),
        json!({"input_tokens": default_prompt_tokens(body.len())})
    );
    let (_, _, resp) = post_root_full(
        &mock,
        "/v1/messages/count_tokens",
        body,
        &[VERSION, ("x-mock-usage", "prompt=42,cached=10")],
    )
    .await;
    assert_eq!(json_of(&resp), json!({"input_tokens": 42}));
    let (status, _, resp) = post_root_full(&mock, "/v1/messages/count_tokens", body, &[]).await;
    assert_eq!(status, 400);
    assert_eq!(json_of(&resp)["error"]["type"], "invalid_request_error");
}

async fn rejected(mock: &mock_supplier::MockHandle, body: &str) -> (u16, Value) {
    let (status, _, resp) = post_root_full(mock, "/v1/messages", body, &[VERSION]).await;
    (status, json_of(&resp))
}

#[tokio::test]
async fn validation_errors_are_anthropic_shaped() {
    let mock = start().await;
    let (status, _, body) = post_root_full(&mock, "/v1/messages", MSG, &[]).await;
    assert_eq!(status, 400);
    assert_eq!(
        json_of(&body),
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "anthropic-version: header is required"}, "request_id": "req_mock"})
    );

    let (status, v) = rejected(
        &mock,
        r#"{"model":"m","messages":[{"role":"user","content":"x"}]}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(v["error"]["message"], "max_tokens: Field required");

    let empty = "messages: text content blocks must be non-empty";
    for body in [
        r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":""}]}"#,
        r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":[{"type":"text","text":""}]}]}"#,
    ] {
        let (status, v) = rejected(&mock, body).await;
        assert_eq!((status, v["error"]["message"].as_str()), (400, Some(empty)));
    }
    for body in [
        "{not json",
        r#"{"max_tokens":5,"messages":[{"role":"user","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":5,"messages":[]}"#,
        r#"{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":5,"messages":[{"role":"assistant","content":"x"}]}"#,
        r#"{"model":"m","max_tokens":5,"system":7,"messages":[{"role":"user","content":"x"}]}"#,
        // tool_use without a tool_result right after
        r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":"y"}]}"#,
        // tool_result naming another id
        r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_2","content":"r"}]}]}"#,
    ] {
        let (status, v) = rejected(&mock, body).await;
        assert_eq!(status, 400, "{body}");
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error", "{body}");
        assert_eq!(v["request_id"], "req_mock");
    }
    let (status, v) = rejected(
        &mock,
        r#"{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"x"},{"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"f","input":{}}]},{"role":"user","content":"y"}]}"#,
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("toolu_1"),
        "{v}"
    );

    let (status, _, body) = get_root(&mock, "/v1/messages", &[VERSION]).await;
    assert_eq!(status, 404);
    assert_eq!(json_of(&body)["error"]["type"], "not_found_error");
    let (status, _, _) = post_root_full(
        &mock,
        "/v1/messages",
        MSG,
        &[VERSION, ("x-mock-usage", "bogus=1")],
    )
    .await;
    assert_eq!(status, 400);
}

#[tokio::test]
async fn api_key_is_x_api_key() {
    let mock = start_keyed("sk-ant").await;
    let denied = json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}, "request_id": "req_mock"});
    for headers in [
        vec![VERSION],
        vec![VERSION, ("x-api-key", "wrong")],
        vec![VERSION, ("authorization", "Bearer sk-ant")],
    ] {
        let (status, _, body) = post_root_full(&mock, "/v1/messages", MSG, &headers).await;
        assert_eq!(status, 401);
        assert_eq!(json_of(&body), denied);
        let (status, _, _) =
            post_root_full(&mock, "/v1/messages/count_tokens", MSG, &headers).await;
        assert_eq!(status, 401);
    }
    let ok = [VERSION, ("x-api-key", "sk-ant")];
    let (status, _, _) = post_root_full(&mock, "/v1/messages", MSG, &ok).await;
    assert_eq!(status, 200);
    let (status, _, _) = post_root_full(&mock, "/v1/messages/count_tokens", MSG, &ok).await;
    assert_eq!(status, 200);
    // The OpenAI routes of the same instance still want the Bearer key.
    let (status, _, _) = post_full(
        &mock,
        "/chat/completions",
        crate::openai::CHAT,
        &[("x-api-key", "sk-ant")],
    )
    .await;
    assert_eq!(status, 401);
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// Seconds since the epoch of a `YYYY-MM-DDTHH:MM:SSZ` timestamp.
fn parse_rfc3339(s: &str) -> u64 {
    assert_eq!(s.len(), 20, "{s}");
    assert!(s.ends_with('Z') && &s[10..11] == "T", "{s}");
    let n = |r: std::ops::Range<usize>| s[r].parse::<i64>().unwrap();
    let (y, m, d) = (n(0..4), n(5..7), n(8..10));
    // days from civil (Howard Hinnant)
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    (days * 86_400 + n(11..13) * 3600 + n(14..16) * 60 + n(17..19)) as u64
}

#[tokio::test]
async fn status_faults_are_anthropic_shaped() {
    let mock = start().await;
    let (status, headers, body) = post_root_full(
        &mock,
        "/v1/messages",
        MSG,
        &[VERSION, ("x-mock-fault", "status=429;retry_after=7")],
    )
    .await;
    assert_eq!(status, 429);
    assert_eq!(headers["retry-after"], "7");
    assert!(headers.get("anthropic-ratelimit-requests-reset").is_none());
    assert_eq!(
        json_of(&body),
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "mock fault"}, "request_id": "req_mock"})
    );

    let before = unix_now();
    let (status, headers, _) = post_root_full(
        &mock,
        "/v1/messages",
        MSG_STREAM,
        &[VERSION, ("x-mock-fault", "status=429;reset_header=30")],
    )
    .await;
    let after = unix_now();
    assert_eq!(status, 429);
    assert!(headers.get("retry-after").is_none());
    assert!(headers.get("x-ratelimit-reset-requests").is_none());
    let requests = headers["anthropic-ratelimit-requests-reset"]
        .to_str()
        .unwrap();
    let tokens = headers["anthropic-ratelimit-tokens-reset"]
        .to_str()
        .unwrap();
    assert_eq!(requests, tokens);
    let at = parse_rfc3339(requests);
    assert!(
        (before + 30..=after + 30).contains(&at),
        "{requests} not 30 s from now"
    );

    let (_, _, body) = post_root_full(
        &mock,
        "/v1/messages",
        MSG,
        &[VERSION, ("x-mock-fault", "status=429;reset_body=12")],
    )
    .await;
    assert_eq!(
        json_of(&body)["error"]["message"],
        "Rate limit reached. Please try again in 12s."
    );

    for (code, ty) in [
        (529, "overloaded_error"),
        (500, "api_error"),
        (503, "api_error"),
        (413, "request_too_large"),
        (403, "permission_error"),
    ] {
        let fault = format!("status={code}");
        let (status, _, body) = post_root_full(
            &mock,
            "/v1/messages",
            MSG,
            &[VERSION, ("x-mock-fault", &fault)],
        )
        .await;
        assert_eq!(status, code);
        assert_eq!(json_of(&body)["error"]["type"], ty);
    }
}

#[tokio::test]
async fn cut_after_and_malformed_on_a_stream() {
    let mock = start().await;
    let resp = post_root(
        &mock,
        "/v1/messages",
        MSG_STREAM,
        &[VERSION, ("x-mock-fault", "cut_after=4")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    let (received, errored) = read_stream(resp).await;
    assert!(errored, "a cut stream must end in an error");
    let names: Vec<String> = sse_events(&received)
        .into_iter()
        .map(|(e, _)| e.unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta"
        ]
    );
    assert_eq!(&mock.requests()[0].response_body[..], &received[..]);

    let (status, _, body) = post_root_full(
        &mock,
        "/v1/messages",
        MSG_STREAM,
        &[VERSION, ("x-mock-fault", "malformed_sse")],
    )
    .await;
    assert_eq!(status, 200);
    let text = String::from_utf8(body).unwrap();
    let blocks: Vec<&str> = text.split_terminator("\n\n").collect();
    assert_eq!(blocks.len(), 4);
    assert!(blocks[0].starts_with("event: message_start\n"));
    assert_eq!(blocks[1], "data: {not json");
    assert_eq!(blocks[2], "garbage line");
    assert!(blocks[3].starts_with("event: content_block_delta\n"));
    assert!(blocks[3].contains("\" w1\""));
    assert!(!text.contains("message_stop"));

    // Non-streaming: half the body, then the abort.
    let resp = post_root(
        &mock,
        "/v1/messages",
        MSG,
        &[VERSION, ("x-mock-fault", "cut_after=1")],
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert!(resp.bytes().await.is_err());
}
