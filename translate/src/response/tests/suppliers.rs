//! Supplier fixtures: a scenario written the way each supplier sends it, as an SSE stream and as
//! a JSON body, following notes/wire-formats.md (field names, event order, usage conventions,
//! keep-alives and line ends as the real services send them).

use serde_json::{Value, json};

use crate::Format;
use crate::ir::{FinishReason, Usage};

/// One tool call of a scenario; `fragments` concatenate to its JSON arguments.
#[derive(Debug, Clone)]
pub struct Call {
    pub id: &'static str,
    pub name: &'static str,
    pub fragments: Vec<&'static str>,
}

/// What a supplier answers, independent of its format.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub thinking: Vec<&'static str>,
    pub signature: Option<&'static str>,
    pub text: Vec<&'static str>,
    pub calls: Vec<Call>,
    pub finish: FinishReason,
    pub usage: Usage,
}

const USAGE: Usage = Usage {
    input: 1200,
    output: 80,
    cached: 1000,
    cache_write: 100,
    cache_write_1h: 0,
    reasoning: 0,
};

pub fn text() -> Scenario {
    Scenario {
        thinking: vec![],
        signature: None,
        text: vec!["Hello, wö", "rld — 你好 ", "🎉 done."],
        calls: vec![],
        finish: FinishReason::Stop,
        usage: USAGE,
    }
}

pub fn tool() -> Scenario {
    Scenario {
        text: vec!["Let me check the weather."],
        calls: vec![
            Call {
                id: "call_weather_1",
                name: "get_weather",
                fragments: vec!["{\"city\":", " \"Paris\", \"unit\"", ": \"°C\"}"],
            },
            Call {
                id: "call_time_2",
                name: "get_time",
                fragments: vec!["{\"tz\":\"Europe/Paris\"}"],
            },
        ],
        finish: FinishReason::ToolCalls,
        ..text()
    }
}

pub fn thinking() -> Scenario {
    Scenario {
        thinking: vec![
            "The user asks for the answer. ",
            "It is 42 — ",
            "obviously 🤔",
        ],
        signature: Some("EqQBCkgIARABGAIiQL2"),
        text: vec!["The answer is ", "42."],
        usage: Usage {
            reasoning: 30,
            ..USAGE
        },
        ..text()
    }
}

pub fn length() -> Scenario {
    Scenario {
        text: vec!["Once upon a time, there ", "was a"],
        finish: FinishReason::Length,
        ..text()
    }
}

pub fn filtered() -> Scenario {
    Scenario {
        text: vec!["I can"],
        finish: FinishReason::ContentFilter,
        ..text()
    }
}

pub fn all() -> Vec<(&'static str, Scenario)> {
    vec![
        ("text", text()),
        ("tool", tool()),
        ("thinking", thinking()),
        ("length", length()),
        ("filtered", filtered()),
    ]
}

/// The scenario as `supplier` streams it.
pub fn stream(supplier: Format, scenario: &Scenario) -> String {
    match supplier {
        Format::Messages => anthropic_stream(scenario),
        Format::Gemini => gemini_stream(scenario),
        Format::Chat | Format::Responses => chat_stream(scenario),
    }
}

/// The scenario as `supplier` answers it without streaming.
pub fn body(supplier: Format, scenario: &Scenario) -> String {
    match supplier {
        Format::Messages => anthropic_body(scenario),
        Format::Gemini => gemini_body(scenario),
        Format::Chat | Format::Responses => chat_body(scenario),
    }
}

fn arguments(call: &Call) -> String {
    call.fragments.concat()
}

// ---- OpenAI chat completions ----

fn chat_chunk(delta: Value, finish: Value) -> Value {
    json!({"id": "chatcmpl-upstream", "object": "chat.completion.chunk", "created": 1_700_000_000,
        "model": "gpt-4o-2024-08-06", "system_fingerprint": "fp_50cad350e4",
        "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}],
        "usage": null})
}

fn chat_finish(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::Other => "stop",
        FinishReason::Length => "length",
        FinishReason::ToolCalls => "tool_calls",
        FinishReason::ContentFilter => "content_filter",
    }
}

fn chat_usage(usage: &Usage) -> Value {
    json!({"prompt_tokens": usage.input, "completion_tokens": usage.output,
        "total_tokens": usage.input + usage.output,
        "prompt_tokens_details": {"cached_tokens": usage.cached, "audio_tokens": 0, "cache_write_tokens": usage.cache_write},
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning, "audio_tokens": 0}})
}

fn chat_stream(s: &Scenario) -> String {
    let mut chunks = vec![chat_chunk(
        json!({"role": "assistant", "content": "", "refusal": null}),
        Value::Null,
    )];
    for thinking in &s.thinking {
        chunks.push(chat_chunk(
            json!({"reasoning_content": thinking}),
            Value::Null,
        ));
    }
    for text in &s.text {
        chunks.push(chat_chunk(json!({"content": text}), Value::Null));
    }
    for (index, call) in s.calls.iter().enumerate() {
        let start = json!({"tool_calls": [{"index": index, "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": ""}}]});
        chunks.push(chat_chunk(start, Value::Null));
        for fragment in &call.fragments {
            let args =
                json!({"tool_calls": [{"index": index, "function": {"arguments": fragment}}]});
            chunks.push(chat_chunk(args, Value::Null));
        }
    }
    chunks.push(chat_chunk(json!({}), json!(chat_finish(s.finish))));
    let mut usage = chat_chunk(json!({}), Value::Null);
    usage["choices"] = json!([]);
    usage["usage"] = chat_usage(&s.usage);
    chunks.push(usage);
    let mut out: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}

fn chat_body(s: &Scenario) -> String {
    let text = s.text.concat();
    let mut message = json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { json!(text) }, "refusal": null});
    if !s.thinking.is_empty() {
        message["reasoning_content"] = json!(s.thinking.concat());
    }
    if !s.calls.is_empty() {
        message["tool_calls"] = s
            .calls
            .iter()
            .map(|call| {
                json!({"id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": arguments(call)}})
            })
            .collect();
    }
    json!({"id": "chatcmpl-upstream", "object": "chat.completion", "created": 1_700_000_000,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": chat_finish(s.finish)}],
        "usage": chat_usage(&s.usage), "service_tier": "default"})
    .to_string()
}

// ---- Anthropic Messages ----

fn stop_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::Other => "end_turn",
        FinishReason::Length => "max_tokens",
        FinishReason::ToolCalls => "tool_use",
        FinishReason::ContentFilter => "refusal",
    }
}

fn anthropic_usage(usage: &Usage, output: u64) -> Value {
    json!({"input_tokens": usage.input - usage.cached - usage.cache_write,
        "cache_creation_input_tokens": usage.cache_write, "cache_read_input_tokens": usage.cached,
        "output_tokens": output, "service_tier": "standard"})
}

fn anthropic_blocks(s: &Scenario) -> Vec<Value> {
    let mut blocks = Vec::new();
    if !s.thinking.is_empty() {
        blocks.push(json!({"type": "thinking", "thinking": s.thinking.concat(), "signature": s.signature.unwrap_or_default()}));
    }
    if !s.text.is_empty() {
        blocks.push(json!({"type": "text", "text": s.text.concat()}));
    }
    for call in &s.calls {
        let input: Value = serde_json::from_str(&arguments(call)).unwrap_or_default();
        blocks.push(json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input}));
    }
    blocks
}

fn anthropic_stream(s: &Scenario) -> String {
    let message = json!({"id": "msg_upstream", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929", "content": [], "stop_reason": null,
        "stop_sequence": null, "usage": anthropic_usage(&s.usage, 1)});
    let mut events = vec![
        json!({"type": "message_start", "message": message}),
        json!({"type": "ping"}),
    ];
    let mut index = 0;
    let mut block = |events: &mut Vec<Value>, start: Value, deltas: Vec<Value>| {
        events.push(json!({"type": "content_block_start", "index": index, "content_block": start}));
        for delta in deltas {
            events.push(json!({"type": "content_block_delta", "index": index, "delta": delta}));
        }
        events.push(json!({"type": "content_block_stop", "index": index}));
        index += 1;
    };
    if !s.thinking.is_empty() {
        let mut deltas: Vec<Value> = s
            .thinking
            .iter()
            .map(|t| json!({"type": "thinking_delta", "thinking": t}))
            .collect();
        deltas.extend(
            s.signature
                .map(|sig| json!({"type": "signature_delta", "signature": sig})),
        );
        block(
            &mut events,
            json!({"type": "thinking", "thinking": "", "signature": ""}),
            deltas,
        );
    }
    if !s.text.is_empty() {
        let deltas = s
            .text
            .iter()
            .map(|t| json!({"type": "text_delta", "text": t}))
            .collect();
        block(&mut events, json!({"type": "text", "text": ""}), deltas);
    }
    for call in &s.calls {
        let mut deltas = vec![json!({"type": "input_json_delta", "partial_json": ""})];
        deltas.extend(
            call.fragments
                .iter()
                .map(|f| json!({"type": "input_json_delta", "partial_json": f})),
        );
        block(
            &mut events,
            json!({"type": "tool_use", "id": call.id, "name": call.name, "input": {}}),
            deltas,
        );
    }
    events.push(json!({"type": "message_delta", "delta": {"stop_reason": stop_reason(s.finish), "stop_sequence": null},
        "usage": {"output_tokens": s.usage.output}}));
    events.push(json!({"type": "message_stop"}));
    events
        .iter()
        .map(|event| {
            format!(
                "event: {}\r\ndata: {event}\r\n\r\n",
                event["type"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn anthropic_body(s: &Scenario) -> String {
    json!({"id": "msg_upstream", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-5-20250929", "content": anthropic_blocks(s),
        "stop_reason": stop_reason(s.finish), "stop_sequence": null,
        "usage": anthropic_usage(&s.usage, s.usage.output)})
    .to_string()
}

// ---- Gemini generateContent ----

fn gemini_finish(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop | FinishReason::ToolCalls => "STOP",
        FinishReason::Length => "MAX_TOKENS",
        FinishReason::ContentFilter => "SAFETY",
        FinishReason::Other => "OTHER",
    }
}

/// Gemini has no cache-write count: the scenario's `cache_write` is not sent.
fn gemini_usage(usage: &Usage, last: bool) -> Value {
    let mut value = json!({"promptTokenCount": usage.input, "cachedContentTokenCount": usage.cached,
        "totalTokenCount": usage.input + if last { usage.output } else { 0 },
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": usage.input}]});
    if last {
        value["candidatesTokenCount"] = json!(usage.output - usage.reasoning);
        if usage.reasoning > 0 {
            value["thoughtsTokenCount"] = json!(usage.reasoning);
        }
    }
    value
}

fn gemini_response(parts: Vec<Value>, finish: Option<FinishReason>, usage: Value) -> Value {
    let mut candidate = json!({"content": {"parts": parts, "role": "model"}, "index": 0});
    if let Some(finish) = finish {
        candidate["finishReason"] = json!(gemini_finish(finish));
    }
    json!({"candidates": [candidate], "usageMetadata": usage,
        "modelVersion": "gemini-2.5-flash", "responseId": "mCjYaJ7nLPuQ1MkP-upstream"})
}

/// The thought signature Gemini puts beside a turn's first function call (parallel calls: only
/// the first carries one).
pub(super) const SIGNATURE: &str = "CiQB0e2Kb+/Q==";

fn gemini_calls(s: &Scenario) -> Vec<Value> {
    s.calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let args: Value = serde_json::from_str(&arguments(call)).unwrap_or_default();
            let mut part = json!({"functionCall": {"name": call.name, "args": args}});
            if i == 0 {
                part["thoughtSignature"] = json!(SIGNATURE);
            }
            part
        })
        .collect()
}

fn gemini_stream(s: &Scenario) -> String {
    let mut responses = Vec::new();
    for thinking in &s.thinking {
        responses.push(gemini_response(
            vec![json!({"text": thinking, "thought": true})],
            None,
            gemini_usage(&s.usage, false),
        ));
    }
    for text in &s.text {
        responses.push(gemini_response(
            vec![json!({"text": text})],
            None,
            gemini_usage(&s.usage, false),
        ));
    }
    let last = gemini_calls(s);
    responses.push(gemini_response(
        last,
        Some(s.finish),
        gemini_usage(&s.usage, true),
    ));
    responses
        .iter()
        .map(|r| format!("data: {r}\r\n\r\n"))
        .collect()
}

fn gemini_body(s: &Scenario) -> String {
    let mut parts = Vec::new();
    if !s.thinking.is_empty() {
        parts.push(json!({"text": s.thinking.concat(), "thought": true}));
    }
    if !s.text.is_empty() {
        parts.push(json!({"text": s.text.concat()}));
    }
    parts.extend(gemini_calls(s));
    gemini_response(parts, Some(s.finish), gemini_usage(&s.usage, true)).to_string()
}
