//! The chat completions decoder.

use serde_json::json;

use super::{assistant, decoded, refused, text, user};
use crate::Format;
use crate::ir::{Effort, Part, Reasoning, Request, ResponseFormat, Tool, ToolChoice};

#[test]
fn decodes_a_rich_request() {
    let body = json!({
        "model": "gpt-x",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "developer", "content": [{"type": "text", "text": "Use tools."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.jpg"}},
            ]},
            {"role": "assistant", "content": null, "refusal": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}},
                {"id": "call_2", "type": "function", "function": {"name": "find", "arguments": ""}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "one"},
            {"role": "tool", "tool_call_id": "call_2", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}, {"type": "refusal", "refusal": "no"}]},
        ],
        "tools": [{"type": "function", "function": {"name": "look", "description": "Looks.", "parameters": {"type": "object"}, "strict": true}}],
        "tool_choice": {"type": "function", "function": {"name": "look"}},
        "parallel_tool_calls": false,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": "END",
        "max_completion_tokens": 300,
        "max_tokens": 200,
        "reasoning_effort": "xhigh",
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": true}},
        "user": "u-1",
        "stream": true,
        "seed": 7, "frequency_penalty": 0.1, "presence_penalty": 0.2, "store": true,
        "metadata": {"a": "b"}, "stream_options": {"include_usage": true}, "n": 1,
        "some_future_field": {"x": 1},
    });
    let request = decoded(Format::Chat, body).unwrap();
    let expected = Request {
        model: String::new(),
        system: vec!["Be brief.".into(), "Use tools.".into()],
        messages: vec![
            user(vec![
                text("What is this?"),
                Part::Image {
                    media_type: "image/png".into(),
                    data: "AAAA".into(),
                },
                Part::ImageUrl("https://example.com/a.jpg".into()),
            ]),
            assistant(vec![
                Part::ToolCall {
                    id: "call_1".into(),
                    name: "look".into(),
                    arguments: json!({"q": 1}),
                },
                Part::ToolCall {
                    id: "call_2".into(),
                    name: "find".into(),
                    arguments: json!({}),
                },
            ]),
            user(vec![Part::ToolResult {
                id: "call_1".into(),
                name: Some("look".into()),
                content: "one".into(),
                is_error: false,
            }]),
            user(vec![Part::ToolResult {
                id: "call_2".into(),
                name: Some("find".into()),
                content: "a\nb".into(),
                is_error: false,
            }]),
            assistant(vec![text("Done.")]),
        ],
        tools: vec![Tool {
            name: "look".into(),
            description: Some("Looks.".into()),
            parameters: json!({"type": "object"}),
        }],
        tool_choice: Some(ToolChoice::Tool("look".into())),
        parallel_tool_calls: Some(false),
        temperature: Some(0.5),
        top_p: Some(0.9),
        top_k: None,
        stop: vec!["END".into()],
        max_output_tokens: Some(200),
        reasoning: Some(Reasoning::Effort(Effort::High)),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "out".into(),
            schema: json!({"type": "object"}),
            strict: Some(true),
        }),
        stream: true,
        user: Some("u-1".into()),
    };
    assert_eq!(request, expected);
}

#[test]
fn decodes_the_small_variants() {
    let base = || json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let with = |key: &str, value: serde_json::Value| {
        let mut body = base();
        body[key] = value;
        decoded(Format::Chat, body).unwrap()
    };
    assert_eq!(
        with("reasoning_effort", json!("none")).reasoning,
        Some(Reasoning::Disabled)
    );
    assert_eq!(
        with("reasoning_effort", json!("minimal")).reasoning,
        Some(Reasoning::Effort(Effort::Minimal))
    );
    assert_eq!(
        with("response_format", json!({"type": "text"})).response_format,
        None
    );
    assert_eq!(
        with("response_format", json!({"type": "json_object"})).response_format,
        Some(ResponseFormat::JsonObject)
    );
    assert_eq!(
        with("tool_choice", json!("required")).tool_choice,
        Some(ToolChoice::Required)
    );
    assert_eq!(
        with("tool_choice", json!("none")).tool_choice,
        Some(ToolChoice::None)
    );
    assert_eq!(with("stop", json!(["a", "b"])).stop, vec!["a", "b"]);
    assert_eq!(with("max_tokens", json!(10)).max_output_tokens, Some(10));
    assert_eq!(with("temperature", json!(null)).temperature, None);
    assert_eq!(with("logit_bias", json!({})).temperature, None);
    assert!(!with("modalities", json!(["text"])).stream);
    let plain = decoded(Format::Chat, base()).unwrap();
    assert_eq!(plain.messages, vec![user(vec![text("hi")])]);
    assert!(!plain.stream);
}

#[test]
fn a_tool_result_for_an_unknown_call_has_no_name() {
    let body =
        json!({"model": "m", "messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}]});
    let request = decoded(Format::Chat, body).unwrap();
    assert_eq!(
        request.messages[0].parts[0],
        Part::ToolResult {
            id: "x".into(),
            name: None,
            content: "r".into(),
            is_error: false
        }
    );
}

#[test]
fn refuses_what_it_cannot_carry_naming_the_field() {
    let message = |m: serde_json::Value| json!({"model": "m", "messages": [m]});
    let top = |key: &str, value: serde_json::Value| {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        body[key] = value;
        body
    };
    let cases = [
        (top("n", json!(2)), "n"),
        (top("logprobs", json!(true)), "logprobs"),
        (top("top_logprobs", json!(2)), "top_logprobs"),
        (top("logit_bias", json!({"50256": -100})), "logit_bias"),
        (
            top("audio", json!({"voice": "alloy", "format": "mp3"})),
            "audio",
        ),
        (top("modalities", json!(["text", "audio"])), "modalities"),
        (
            top("prediction", json!({"type": "content", "content": "x"})),
            "prediction",
        ),
        (top("web_search_options", json!({})), "web_search_options"),
        (top("functions", json!([])), "functions"),
        (
            top(
                "tools",
                json!([{"type": "custom", "custom": {"name": "x"}}]),
            ),
            "tools[0].type",
        ),
        (top("tool_choice", json!("sometimes")), "tool_choice"),
        (
            top("tool_choice", json!({"type": "allowed_tools"})),
            "tool_choice.type",
        ),
        (
            top("reasoning_effort", json!("extreme")),
            "reasoning_effort",
        ),
        (
            top("response_format", json!({"type": "grammar"})),
            "response_format.type",
        ),
        (
            top(
                "response_format",
                json!({"type": "json_schema", "json_schema": {"schema": {}}}),
            ),
            "response_format.json_schema.name",
        ),
        (top("temperature", json!("hot")), "temperature"),
        (top("stop", json!(3)), "stop"),
        (top("stop", json!(["a", 3])), "stop[1]"),
        (top("max_tokens", json!(-1)), "max_tokens"),
        (top("stream", json!("yes")), "stream"),
        (top("messages", json!({})), "messages"),
        (json!({"messages": []}), "model"),
        (json!({"model": "m"}), "messages"),
        (
            message(json!({"role": "function", "name": "f", "content": "x"})),
            "messages[0].role",
        ),
        (
            message(json!({"role": "robot", "content": "x"})),
            "messages[0].role",
        ),
        (message(json!({"content": "x"})), "messages[0].role"),
        (message(json!({"role": "user"})), "messages[0].content"),
        (
            message(
                json!({"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}),
            ),
            "messages[0].content[0].type",
        ),
        (
            message(json!({"role": "user", "content": [{"type": "file", "file": {}}]})),
            "messages[0].content[0].type",
        ),
        (
            message(
                json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ftp://x"}}]}),
            ),
            "messages[0].content[0].image_url.url",
        ),
        (
            message(
                json!({"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:image/png,AAAA"}}]}),
            ),
            "messages[0].content[0].image_url.url",
        ),
        (
            message(json!({"role": "user", "content": [{"type": "text"}]})),
            "messages[0].content[0].text",
        ),
        (
            message(json!({"role": "user", "content": 5})),
            "messages[0].content",
        ),
        (
            message(json!({"role": "system", "content": [{"type": "image_url"}]})),
            "messages[0].content[0].type",
        ),
        (
            message(json!({"role": "assistant", "content": [{"type": "image_url"}]})),
            "messages[0].content[0].type",
        ),
        (
            message(
                json!({"role": "assistant", "function_call": {"name": "f", "arguments": "{}"}}),
            ),
            "messages[0].function_call",
        ),
        (
            message(json!({"role": "assistant", "audio": {"id": "a"}})),
            "messages[0].audio",
        ),
        (
            message(
                json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "custom", "custom": {}}]}),
            ),
            "messages[0].tool_calls[0].type",
        ),
        (
            message(
                json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}),
            ),
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            message(
                json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "[1]"}}]}),
            ),
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            message(
                json!({"role": "assistant", "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {}}}]}),
            ),
            "messages[0].tool_calls[0].function.arguments",
        ),
        (
            message(
                json!({"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
            ),
            "messages[0].tool_calls[0].id",
        ),
        (
            message(json!({"role": "tool", "content": "x"})),
            "messages[0].tool_call_id",
        ),
        (
            message(
                json!({"role": "tool", "tool_call_id": "c", "content": [{"type": "image_url"}]}),
            ),
            "messages[0].content[0].type",
        ),
        (message(json!("hello")), "messages[0]"),
    ];
    for (body, param) in cases {
        assert_eq!(refused(Format::Chat, body.clone()), param, "{body}");
    }
}

#[test]
fn a_body_that_is_not_an_object_is_refused_without_a_param() {
    for body in [&b"[1]"[..], b"not json", b""] {
        let refusal = crate::request::decode(Format::Chat, body).unwrap_err();
        assert_eq!(refusal.param, None);
    }
}
