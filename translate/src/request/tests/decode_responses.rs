//! The responses decoder.

use serde_json::json;

use super::{assistant, decoded, refused, text, user};
use crate::Format;
use crate::ir::{Effort, Part, Reasoning, Request, ResponseFormat, Tool, ToolChoice};

#[test]
fn decodes_a_rich_request() {
    let body = json!({
        "model": "gpt-x",
        "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Use tools."},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": "data:image/jpeg;base64,BBBB", "detail": "auto"},
                {"type": "input_image", "image_url": "https://example.com/b.png"},
            ]},
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "zzz"},
            {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
             "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
            {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "look", "arguments": "{\"q\":\"x\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "found"},
            {"type": "function_call_output", "call_id": "call_1", "output": [{"type": "input_text", "text": "again"}]},
        ],
        "tools": [{"type": "function", "name": "look", "description": "Looks.", "parameters": {"type": "object"}, "strict": true}],
        "tool_choice": {"type": "function", "name": "look"},
        "parallel_tool_calls": true,
        "max_output_tokens": 1000,
        "temperature": 1.5,
        "top_p": 0.5,
        "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "json_schema", "name": "out", "schema": {"type": "object"}, "strict": false}, "verbosity": "low"},
        "user": "u-2",
        "stream": true,
        "store": false,
        "include": ["reasoning.encrypted_content"],
        "truncation": "auto", "metadata": {}, "service_tier": "auto", "prompt_cache_key": "k",
        "safety_identifier": "s", "max_tool_calls": 3,
    });
    let request = decoded(Format::Responses, body).unwrap();
    let expected = Request {
        model: String::new(),
        system: vec!["Be brief.".into(), "Use tools.".into()],
        messages: vec![
            user(vec![
                text("What is this?"),
                Part::Image {
                    media_type: "image/jpeg".into(),
                    data: "BBBB".into(),
                },
                Part::ImageUrl("https://example.com/b.png".into()),
            ]),
            assistant(vec![text("Let me look.")]),
            assistant(vec![Part::ToolCall {
                id: "call_1".into(),
                name: "look".into(),
                arguments: json!({"q": "x"}),
            }]),
            user(vec![Part::ToolResult {
                id: "call_1".into(),
                name: Some("look".into()),
                content: "found".into(),
                is_error: false,
            }]),
            user(vec![Part::ToolResult {
                id: "call_1".into(),
                name: Some("look".into()),
                content: "again".into(),
                is_error: false,
            }]),
        ],
        tools: vec![Tool {
            name: "look".into(),
            description: Some("Looks.".into()),
            parameters: json!({"type": "object"}),
        }],
        tool_choice: Some(ToolChoice::Tool("look".into())),
        parallel_tool_calls: Some(true),
        temperature: Some(1.5),
        top_p: Some(0.5),
        top_k: None,
        stop: vec![],
        max_output_tokens: Some(1000),
        reasoning: Some(Reasoning::Effort(Effort::Low)),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "out".into(),
            schema: json!({"type": "object"}),
            strict: Some(false),
        }),
        stream: true,
        user: Some("u-2".into()),
    };
    assert_eq!(request, expected);
}

#[test]
fn a_string_input_is_one_user_text() {
    let request = decoded(Format::Responses, json!({"model": "m", "input": "Hello"})).unwrap();
    assert_eq!(request.messages, vec![user(vec![text("Hello")])]);
    assert!(request.system.is_empty());
}

#[test]
fn decodes_the_small_variants() {
    let with = |key: &str, value: serde_json::Value| {
        let mut body = json!({"model": "m", "input": "hi"});
        body[key] = value;
        decoded(Format::Responses, body).unwrap()
    };
    assert_eq!(
        with("reasoning", json!({"effort": "none"})).reasoning,
        Some(Reasoning::Disabled)
    );
    assert_eq!(
        with("reasoning", json!({"summary": "auto"})).reasoning,
        None
    );
    assert_eq!(
        with("text", json!({"format": {"type": "text"}})).response_format,
        None
    );
    assert_eq!(
        with("text", json!({"format": {"type": "json_object"}})).response_format,
        Some(ResponseFormat::JsonObject)
    );
    assert_eq!(
        with("tool_choice", json!("auto")).tool_choice,
        Some(ToolChoice::Auto)
    );
    assert_eq!(with("store", json!(false)).user, None);
    assert_eq!(with("background", json!(false)).user, None);
}

#[test]
fn refuses_what_it_cannot_carry_naming_the_field() {
    let top = |key: &str, value: serde_json::Value| {
        let mut body = json!({"model": "m", "input": "hi"});
        body[key] = value;
        body
    };
    let item = |item: serde_json::Value| json!({"model": "m", "input": [item]});
    let cases = [
        (top("store", json!(true)), "store"),
        (
            top("previous_response_id", json!("resp_1")),
            "previous_response_id",
        ),
        (top("conversation", json!("conv_1")), "conversation"),
        (top("prompt", json!({"id": "pmpt_1"})), "prompt"),
        (top("background", json!(true)), "background"),
        (top("top_logprobs", json!(3)), "top_logprobs"),
        (
            top("tools", json!([{"type": "web_search"}])),
            "tools[0].type",
        ),
        (
            top(
                "tools",
                json!([{"type": "function", "name": "a"}, {"type": "file_search"}]),
            ),
            "tools[1].type",
        ),
        (
            top("tools", json!([{"type": "mcp", "server_label": "x"}])),
            "tools[0].type",
        ),
        (top("tools", json!([{"type": "function"}])), "tools[0].name"),
        (
            top("tool_choice", json!({"type": "web_search_preview"})),
            "tool_choice.type",
        ),
        (
            top("reasoning", json!({"effort": "lots"})),
            "reasoning.effort",
        ),
        (
            top("text", json!({"format": {"type": "grammar"}})),
            "text.format.type",
        ),
        (
            top(
                "text",
                json!({"format": {"type": "json_schema", "schema": {}}}),
            ),
            "text.format.name",
        ),
        (top("max_output_tokens", json!("many")), "max_output_tokens"),
        (top("input", json!(5)), "input"),
        (json!({"model": "m"}), "input"),
        (
            item(json!({"type": "item_reference", "id": "x"})),
            "input[0].type",
        ),
        (
            item(json!({"type": "web_search_call", "id": "x"})),
            "input[0].type",
        ),
        (
            item(json!({"type": "computer_call_output"})),
            "input[0].type",
        ),
        (
            item(json!({"role": "user", "content": [{"type": "input_file", "file_id": "f"}]})),
            "input[0].content[0].type",
        ),
        (
            item(json!({"role": "user", "content": [{"type": "input_audio"}]})),
            "input[0].content[0].type",
        ),
        (
            item(json!({"role": "user", "content": [{"type": "input_image", "file_id": "f"}]})),
            "input[0].content[0].file_id",
        ),
        (
            item(
                json!({"role": "user", "content": [{"type": "input_image", "image_url": "gopher://x"}]}),
            ),
            "input[0].content[0].image_url",
        ),
        (
            item(json!({"role": "user", "content": [{"type": "input_image"}]})),
            "input[0].content[0].image_url",
        ),
        (
            item(json!({"role": "tool", "content": "x"})),
            "input[0].role",
        ),
        (
            item(json!({"role": "system", "content": [{"type": "input_image"}]})),
            "input[0].content[0].type",
        ),
        (
            item(
                json!({"type": "function_call", "call_id": "c", "name": "f", "arguments": "nope"}),
            ),
            "input[0].arguments",
        ),
        (
            item(json!({"type": "function_call", "name": "f", "arguments": "{}"})),
            "input[0].call_id",
        ),
        (
            item(json!({"type": "function_call_output", "call_id": "c"})),
            "input[0].output",
        ),
        (
            item(
                json!({"type": "function_call_output", "call_id": "c", "output": [{"type": "input_image"}]}),
            ),
            "input[0].output[0].type",
        ),
        (item(json!(7)), "input[0]"),
    ];
    for (body, param) in cases {
        assert_eq!(refused(Format::Responses, body.clone()), param, "{body}");
    }
}
