//! Tool calls in every format, streamed and not: a request declaring a
//! function tool gets a call of the first one (`{"q":"mock"}`), unless its
//! conversation ends with a tool result, which gets text.

use mock_supplier::reply::body_hash_hex;
use serde_json::{Value, json};

use crate::anthropic::VERSION;
use crate::common::*;
use crate::gemini::STREAM_PATH;

const ARGS: &str = r#"{"q":"mock"}"#;

fn chat_body(stream: bool, tool_result: bool) -> String {
    let mut messages = vec![json!({"role": "user", "content": "weather?"})];
    if tool_result {
        messages.push(json!({"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": ARGS}}]}));
        messages.push(json!({"role": "tool", "tool_call_id": "call_1", "content": "sunny"}));
    }
    json!({
        "model": "gpt-4o",
        "messages": messages,
        "tools": [
            {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}},
            {"type": "function", "function": {"name": "second"}}
        ],
        "stream": stream,
        "stream_options": {"include_usage": true},
    })
    .to_string()
}

#[tokio::test]
async fn chat_tool_calls() {
    let mock = start().await;
    let body = chat_body(false, false);
    let (status, _, resp) = post_full(&mock, "/chat/completions", &body, &[]).await;
    assert_eq!(status, 200);
    let v = json_of(&resp);
    let call_id = format!("call_{}", body_hash_hex(body.as_bytes()));
    assert_eq!(
        v["choices"][0],
        json!({
            "index": 0,
            "message": {"role": "assistant", "content": null, "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": ARGS}}]},
            "finish_reason": "tool_calls",
        })
    );
    assert_eq!(v["usage"]["completion_tokens"], 5);

    let body = chat_body(true, false);
    let (_, _, resp) = post_full(
        &mock,
        "/chat/completions",
        &body,
        &[("x-mock-usage", "completion=3")],
    )
    .await;
    let events = sse_events(&resp);
    assert_eq!(events.last().unwrap().1, "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(chunks.len(), 6);
    let delta = |i: usize| chunks[i]["choices"][0]["delta"].clone();
    assert_eq!(delta(0)["role"], "assistant");
    assert_eq!(
        delta(1),
        json!({"tool_calls": [{"index": 0, "id": format!("call_{}", body_hash_hex(body.as_bytes())), "type": "function", "function": {"name": "lookup", "arguments": ""}}]})
    );
    assert_eq!(
        delta(2)["tool_calls"][0]["function"]["arguments"],
        r#"{"q":"#
    );
    assert_eq!(
        delta(3)["tool_calls"][0]["function"]["arguments"],
        r#""mock"}"#
    );
    assert_eq!(chunks[4]["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(chunks[5]["choices"], json!([]));
    assert_eq!(chunks[5]["usage"]["completion_tokens"], 3);

    // Ends with a tool result: text again.
    let (_, _, resp) = post_full(&mock, "/chat/completions", &chat_body(false, true), &[]).await;
    let v = json_of(&resp);
    assert_eq!(
        v["choices"][0]["message"]["content"],
        "mock reply w1 w2 w3 w4 w5"
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn responses_tool_calls() {
    let mock = start().await;
    let tools =
        json!([{"type": "web_search"}, {"type": "function", "name": "lookup", "parameters": {}}]);
    let body = json!({"model": "o3-mini", "input": "weather?", "tools": tools}).to_string();
    let (_, _, resp) = post_full(&mock, "/responses", &body, &[]).await;
    let hash = body_hash_hex(body.as_bytes());
    let item = json!({"type": "function_call", "id": format!("fc_{hash}"), "call_id": format!("call_{hash}"), "name": "lookup", "arguments": ARGS, "status": "completed"});
    let v = json_of(&resp);
    assert_eq!(v["output"], json!([item]));
    assert_eq!(v["status"], "completed");
    assert_eq!(v["usage"]["output_tokens"], 5);

    let body = json!({"model": "o3-mini", "input": "weather?", "tools": tools, "stream": true})
        .to_string();
    let (_, _, resp) = post_full(&mock, "/responses", &body, &[]).await;
    let events = sse_json(&resp);
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    let hash = body_hash_hex(body.as_bytes());
    assert_eq!(events[1].1["item"]["arguments"], "");
    assert_eq!(events[1].1["item"]["call_id"], format!("call_{hash}"));
    let args: String = events[2..4]
        .iter()
        .map(|(_, d)| d["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(args, ARGS);
    assert_eq!(events[4].1["arguments"], ARGS);
    assert_eq!(events[5].1["item"]["status"], "completed");
    assert_eq!(events[6].1["response"]["output"][0]["name"], "lookup");
    assert_eq!(events[6].1["response"]["usage"]["output_tokens"], 5);

    let body = json!({"model": "o3-mini", "tools": tools, "input": [
        {"role": "user", "content": "weather?"},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": ARGS},
        {"type": "function_call_output", "call_id": "c1", "output": "sunny"}
    ]})
    .to_string();
    let (_, _, resp) = post_full(&mock, "/responses", &body, &[]).await;
    assert_eq!(json_of(&resp)["output"][0]["type"], "message");
}

fn anthropic_body(stream: bool, tool_result: bool) -> String {
    let mut messages = vec![json!({"role": "user", "content": "weather?"})];
    if tool_result {
        messages.push(json!({"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"q": "x"}}]}));
        messages.push(json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "sunny"}]}));
    }
    json!({
        "model": "claude-sonnet-4",
        "max_tokens": 100,
        "messages": messages,
        "tools": [{"name": "lookup", "input_schema": {"type": "object"}}, {"name": "second", "input_schema": {}}],
        "stream": stream,
    })
    .to_string()
}

#[tokio::test]
async fn anthropic_tool_calls() {
    let mock = start().await;
    let body = anthropic_body(false, false);
    let (status, _, resp) = post_root_full(&mock, "/v1/messages", &body, &[VERSION]).await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    let v = json_of(&resp);
    let id = format!("toolu_{}", body_hash_hex(body.as_bytes()));
    assert_eq!(
        v["content"],
        json!([{"type": "tool_use", "id": id, "name": "lookup", "input": {"q": "mock"}}])
    );
    assert_eq!(v["stop_reason"], "tool_use");
    assert_eq!(v["usage"]["output_tokens"], 5);

    let body = anthropic_body(true, false);
    let (_, _, resp) = post_root_full(&mock, "/v1/messages", &body, &[VERSION]).await;
    let events = sse_json(&resp);
    let names: Vec<&str> = events.iter().map(|(e, _)| e.as_deref().unwrap()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let id = format!("toolu_{}", body_hash_hex(body.as_bytes()));
    assert_eq!(
        events[1].1["content_block"],
        json!({"type": "tool_use", "id": id, "name": "lookup", "input": {}})
    );
    let partial: String = events[2..4]
        .iter()
        .map(|(_, d)| {
            assert_eq!(d["delta"]["type"], "input_json_delta");
            d["delta"]["partial_json"].as_str().unwrap().to_owned()
        })
        .collect();
    assert_eq!(partial, ARGS);
    assert_eq!(events[5].1["delta"]["stop_reason"], "tool_use");
    assert_eq!(events[5].1["usage"]["output_tokens"], 5);

    let (status, _, resp) = post_root_full(
        &mock,
        "/v1/messages",
        &anthropic_body(false, true),
        &[VERSION],
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    let v = json_of(&resp);
    assert_eq!(v["content"][0]["type"], "text");
    assert_eq!(v["stop_reason"], "end_turn");
}

fn gemini_body(tool_result: bool) -> String {
    let mut contents = vec![json!({"role": "user", "parts": [{"text": "weather?"}]})];
    if tool_result {
        // The call comes back with the thought signature it was given (Gemini 3 refuses it
        // otherwise; see `thought_signature_refusal`).
        contents.push(json!({"role": "model", "parts": [{"functionCall": {"name": "lookup", "args": {"q": "x"}}, "thoughtSignature": mock_signature("earlier")}]}));
        contents.push(json!({"role": "user", "parts": [{"functionResponse": {"name": "lookup", "response": {"result": "sunny"}}}]}));
    }
    json!({
        "contents": contents,
        "tools": [{"functionDeclarations": [{"name": "lookup", "parameters": {"type": "OBJECT"}}, {"name": "second"}]}],
        "toolConfig": {"functionCallingConfig": {"mode": "AUTO"}},
    })
    .to_string()
}

/// A thought signature the mock accepts.
fn mock_signature(tail: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .encode(format!("{}{tail}", mock_supplier::gemini::THOUGHT_PREFIX))
}

#[tokio::test]
async fn gemini_tool_calls() {
    let mock = start().await;
    let body = gemini_body(false);
    let usage = ("x-mock-usage", "prompt=20,completion=6");
    let (status, _, resp) = post_root_full(
        &mock,
        "/v1beta/models/gemini-2.5-flash:generateContent",
        &body,
        &[usage],
    )
    .await;
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&resp));
    let v = json_of(&resp);
    let signature = mock_signature(&mock_supplier::reply::body_hash_hex(body.as_bytes()));
    assert_eq!(
        v["candidates"][0],
        json!({"content": {"parts": [{"functionCall": {"name": "lookup", "args": {"q": "mock"}}, "thoughtSignature": signature}], "role": "model"}, "finishReason": "STOP", "index": 0})
    );
    assert_eq!(
        v["usageMetadata"],
        json!({"promptTokenCount": 20, "candidatesTokenCount": 6, "totalTokenCount": 26})
    );

    let (_, _, resp) = post_root_full(&mock, STREAM_PATH, &body, &[usage]).await;
    let chunks = gemini_chunks(&resp);
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0], v);

    let (_, _, resp) = post_root_full(
        &mock,
        "/v1beta/models/gemini-2.5-flash:generateContent",
        &gemini_body(true),
        &[],
    )
    .await;
    let v = json_of(&resp);
    assert_eq!(
        v["candidates"][0]["content"]["parts"][0]["text"],
        "mock reply w1 w2 w3 w4 w5"
    );
}

/// A function-call turn sent back without its thought signature is refused as Gemini 3 refuses
/// it: 400 `INVALID_ARGUMENT` naming the call and the content's position.
#[tokio::test]
async fn thought_signature_refusal() {
    let mock = start().await;
    let body = gemini_body(true).replace(
        &format!(",\"thoughtSignature\":\"{}\"", mock_signature("earlier")),
        "",
    );
    assert!(!body.contains("thoughtSignature"));
    let (status, _, resp) = post_root_full(
        &mock,
        "/v1beta/models/gemini-2.5-flash:generateContent",
        &body,
        &[],
    )
    .await;
    assert_eq!(status, 400);
    let v = json_of(&resp);
    assert_eq!(v["error"]["status"], "INVALID_ARGUMENT");
    let message = v["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("missing a thought_signature")
            && message.contains("default_api:lookup")
            && message.contains("position 2"),
        "{message}"
    );
}
