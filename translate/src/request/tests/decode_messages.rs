//! The Anthropic Messages decoder.

use serde_json::json;

use super::{assistant, decoded, refused, text, user};
use crate::Format;
use crate::ir::{Effort, Part, Reasoning, Request, ResponseFormat, Tool, ToolChoice};

#[test]
fn decodes_a_rich_request() {
    let body = json!({
        "model": "claude-x",
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}, {"type": "text", "text": "Use tools."}],
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/webp", "data": "CCCC"}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/c.gif"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Hmm.", "signature": "sig"},
                {"type": "redacted_thinking", "data": "xxx"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "look", "input": {"q": 1}},
                {"type": "tool_use", "id": "toolu_2", "name": "find", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "one"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}], "is_error": true},
                {"type": "text", "text": "Go on."},
            ]},
        ],
        "tools": [
            {"name": "look", "description": "Looks.", "input_schema": {"type": "object"}, "cache_control": {"type": "ephemeral"}},
            {"type": "custom", "name": "find", "input_schema": {"type": "object", "properties": {}}},
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "max_tokens": 2048,
        "temperature": 0.2,
        "top_p": 0.8,
        "top_k": 40,
        "stop_sequences": ["END", "STOP"],
        "thinking": {"type": "enabled", "budget_tokens": 1024, "display": "summarized"},
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        "metadata": {"user_id": "u-3"},
        "stream": true,
        "service_tier": "auto",
    });
    let request = decoded(Format::Messages, body).unwrap();
    let expected = Request {
        model: String::new(),
        system: vec!["Be brief.".into(), "Use tools.".into()],
        messages: vec![
            user(vec![
                text("What is this?"),
                Part::Image {
                    media_type: "image/webp".into(),
                    data: "CCCC".into(),
                },
                Part::ImageUrl("https://example.com/c.gif".into()),
            ]),
            assistant(vec![
                Part::Thinking {
                    text: "Hmm.".into(),
                    signature: Some("sig".into()),
                },
                text("Looking."),
                Part::ToolCall {
                    id: "toolu_1".into(),
                    name: "look".into(),
                    arguments: json!({"q": 1}),
                },
                Part::ToolCall {
                    id: "toolu_2".into(),
                    name: "find".into(),
                    arguments: json!({}),
                },
            ]),
            user(vec![
                Part::ToolResult {
                    id: "toolu_1".into(),
                    name: Some("look".into()),
                    content: "one".into(),
                    is_error: false,
                },
                Part::ToolResult {
                    id: "toolu_2".into(),
                    name: Some("find".into()),
                    content: "a\nb".into(),
                    is_error: true,
                },
                text("Go on."),
            ]),
        ],
        tools: vec![
            Tool {
                name: "look".into(),
                description: Some("Looks.".into()),
                parameters: json!({"type": "object"}),
            },
            Tool {
                name: "find".into(),
                description: None,
                parameters: json!({"type": "object", "properties": {}}),
            },
        ],
        tool_choice: Some(ToolChoice::Required),
        parallel_tool_calls: Some(false),
        temperature: Some(0.2),
        top_p: Some(0.8),
        top_k: Some(40),
        stop: vec!["END".into(), "STOP".into()],
        max_output_tokens: Some(2048),
        reasoning: Some(Reasoning::Budget(1024)),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "response".into(),
            schema: json!({"type": "object"}),
            strict: None,
        }),
        stream: true,
        user: Some("u-3".into()),
    };
    assert_eq!(request, expected);
}

#[test]
fn decodes_the_small_variants() {
    let with = |key: &str, value: serde_json::Value| {
        let mut body = json!({"model": "m", "max_tokens": 100, "system": "S", "messages": [{"role": "user", "content": "hi"}]});
        body[key] = value;
        decoded(Format::Messages, body).unwrap()
    };
    let plain = with("stream", json!(false));
    assert_eq!(plain.system, vec!["S"]);
    assert_eq!(plain.messages, vec![user(vec![text("hi")])]);
    assert_eq!(plain.max_output_tokens, Some(100));
    assert_eq!(
        with("thinking", json!({"type": "disabled"})).reasoning,
        Some(Reasoning::Disabled)
    );
    assert_eq!(
        with("thinking", json!({"type": "adaptive"})).reasoning,
        Some(Reasoning::Effort(Effort::Medium))
    );
    assert_eq!(
        with("output_config", json!({"effort": "max"})).reasoning,
        Some(Reasoning::Effort(Effort::High))
    );
    assert_eq!(
        with("output_config", json!({"effort": "low"})).reasoning,
        Some(Reasoning::Effort(Effort::Low))
    );
    let mut body = json!({"model": "m", "max_tokens": 100, "messages": [], "thinking": {"type": "adaptive"}, "output_config": {"effort": "low"}});
    assert_eq!(
        decoded(Format::Messages, body.take()).unwrap().reasoning,
        Some(Reasoning::Effort(Effort::Low))
    );
    assert_eq!(
        with("tool_choice", json!({"type": "auto"})).tool_choice,
        Some(ToolChoice::Auto)
    );
    assert_eq!(
        with("tool_choice", json!({"type": "none"})).tool_choice,
        Some(ToolChoice::None)
    );
    let tool = with(
        "tool_choice",
        json!({"type": "tool", "name": "t", "disable_parallel_tool_use": false}),
    );
    assert_eq!(tool.tool_choice, Some(ToolChoice::Tool("t".into())));
    assert_eq!(tool.parallel_tool_calls, Some(true));
    assert_eq!(with("metadata", json!({})).user, None);
}

#[test]
fn refuses_what_it_cannot_carry_naming_the_field() {
    let top = |key: &str, value: serde_json::Value| {
        let mut body = json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]});
        body[key] = value;
        body
    };
    let block = |role: &str, block: serde_json::Value| json!({"model": "m", "max_tokens": 100, "messages": [{"role": role, "content": [block]}]});
    let cases = [
        (json!({"model": "m", "messages": []}), "max_tokens"),
        (top("max_tokens", json!("lots")), "max_tokens"),
        (top("container", json!("c")), "container"),
        (top("mcp_servers", json!([])), "mcp_servers"),
        (top("system", json!([{"type": "image"}])), "system[0].type"),
        (top("system", json!(1)), "system"),
        (
            top(
                "tools",
                json!([{"type": "web_search_20250305", "name": "web_search"}]),
            ),
            "tools[0]",
        ),
        (
            top(
                "tools",
                json!([{"name": "a", "input_schema": {}}, {"type": "bash_20250124", "name": "bash"}]),
            ),
            "tools[1]",
        ),
        (
            top("tools", json!([{"name": "a"}])),
            "tools[0].input_schema",
        ),
        (
            top("tool_choice", json!({"type": "some"})),
            "tool_choice.type",
        ),
        (
            top("tool_choice", json!({"type": "tool"})),
            "tool_choice.name",
        ),
        (
            top("thinking", json!({"type": "enabled"})),
            "thinking.budget_tokens",
        ),
        (
            top("thinking", json!({"type": "sometimes"})),
            "thinking.type",
        ),
        (
            top("output_config", json!({"effort": "minimal"})),
            "output_config.effort",
        ),
        (
            top("output_config", json!({"format": {"type": "regex"}})),
            "output_config.format.type",
        ),
        (
            top("output_config", json!({"format": {"type": "json_schema"}})),
            "output_config.format.schema",
        ),
        (top("stop_sequences", json!("END")), "stop_sequences"),
        (top("top_k", json!(-3)), "top_k"),
        (top("metadata", json!({"user_id": 5})), "metadata.user_id"),
        (
            top("messages", json!([{"role": "system", "content": "x"}])),
            "messages[0].role",
        ),
        (
            block("user", json!({"type": "document", "source": {}})),
            "messages[0].content[0].type",
        ),
        (
            block("user", json!({"type": "search_result"})),
            "messages[0].content[0].type",
        ),
        (
            block(
                "assistant",
                json!({"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}),
            ),
            "messages[0].content[0].type",
        ),
        (
            block("user", json!({"type": "web_search_tool_result"})),
            "messages[0].content[0].type",
        ),
        (
            block(
                "user",
                json!({"type": "image", "source": {"type": "file", "file_id": "f"}}),
            ),
            "messages[0].content[0].source.type",
        ),
        (
            block(
                "user",
                json!({"type": "image", "source": {"type": "base64", "data": "x"}}),
            ),
            "messages[0].content[0].source.media_type",
        ),
        (
            block(
                "user",
                json!({"type": "tool_result", "tool_use_id": "t", "content": [{"type": "image", "source": {}}]}),
            ),
            "messages[0].content[0].content[0].type",
        ),
        (
            block("user", json!({"type": "tool_result", "content": "x"})),
            "messages[0].content[0].tool_use_id",
        ),
        (
            block(
                "user",
                json!({"type": "tool_use", "id": "t", "name": "n", "input": {}}),
            ),
            "messages[0].content[0].type",
        ),
        (
            block(
                "assistant",
                json!({"type": "tool_result", "tool_use_id": "t"}),
            ),
            "messages[0].content[0].type",
        ),
        (
            block(
                "assistant",
                json!({"type": "tool_use", "id": "t", "name": "n", "input": "{}"}),
            ),
            "messages[0].content[0].input",
        ),
        (
            block("assistant", json!({"type": "thinking"})),
            "messages[0].content[0].thinking",
        ),
        (
            block("user", json!({"text": "x"})),
            "messages[0].content[0].type",
        ),
    ];
    for (body, param) in cases {
        assert_eq!(refused(Format::Messages, body.clone()), param, "{body}");
    }
}

#[test]
fn gemini_requests_are_not_decoded() {
    let refusal = crate::request::decode(Format::Gemini, br#"{"contents":[]}"#).unwrap_err();
    assert_eq!(refusal.param, None);
}
