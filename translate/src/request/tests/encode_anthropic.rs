//! The Anthropic Messages encoder, and the pitfalls of notes §10.

use serde_json::json;

use super::{assistant, encoded, plain, rich, text, translated, user};
use crate::Format;
use crate::ir::{Effort, Part, Reasoning, ResponseFormat, ToolChoice};

#[test]
fn encodes_a_rich_request() {
    let body = encoded(Format::Messages, &rich()).unwrap();
    let expected = json!({
        "model": "up",
        "max_tokens": 8192,
        "system": "Be brief.\n\nUse tools.",
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "Hmm.", "signature": "sig"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "call_1", "name": "look", "input": {"q": 1}},
                {"type": "tool_use", "id": "call_2", "name": "find", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "{\"n\":1}"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": "oops", "is_error": true},
                {"type": "text", "text": "also"},
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "Done."}]},
        ],
        "tools": [
            {"name": "look", "description": "Looks.", "input_schema": {"type": "object", "properties": {"q": {"type": "integer"}}}},
            {"name": "find", "input_schema": {"type": "object", "properties": {}}},
        ],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 40,
        "stop_sequences": ["END"],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "output_config": {"format": {"type": "json_schema", "schema": {"type": "object"}}},
        "metadata": {"user_id": "u"},
        "stream": true,
    });
    assert_eq!(body, expected);
}

#[test]
fn removes_empty_text_and_keeps_roles_alternating() {
    let request = plain(vec![
        user(vec![text("a")]),
        assistant(vec![text(""), text("  \n")]),
        user(vec![text("b"), text("")]),
        assistant(vec![
            text(""),
            Part::Thinking {
                text: "unsigned".into(),
                signature: None,
            },
            Part::ToolCall {
                id: "t".into(),
                name: "n".into(),
                arguments: json!({}),
            },
        ]),
        assistant(vec![text("more ")]),
        user(vec![text("c")]),
    ]);
    let body = encoded(Format::Messages, &request).unwrap();
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "name": "n", "input": {}},
                {"type": "text", "text": "more "},
            ]},
            {"role": "user", "content": [{"type": "text", "text": "c"}]},
        ])
    );
    assert_eq!(body["max_tokens"], json!(4096));
}

#[test]
fn trims_only_the_final_assistant_text() {
    let request = plain(vec![
        user(vec![text("a")]),
        assistant(vec![text("x \n"), text("y\t ")]),
    ]);
    let body = encoded(Format::Messages, &request).unwrap();
    assert_eq!(
        body["messages"][1]["content"],
        json!([{"type": "text", "text": "x \n"}, {"type": "text", "text": "y"}])
    );
}

#[test]
fn parallel_tool_results_from_chat_travel_in_one_user_message_first() {
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{\"x\":[1]}"}},
        ]},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "tool", "tool_call_id": "b", "content": ""},
        {"role": "user", "content": "thanks"},
    ]});
    let body = translated(Format::Chat, Format::Messages, body).unwrap();
    assert_eq!(
        body["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "go"}]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "a", "name": "f", "input": {}},
                {"type": "tool_use", "id": "b", "name": "g", "input": {"x": [1]}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "a", "content": "A"},
                {"type": "tool_result", "tool_use_id": "b"},
                {"type": "text", "text": "thanks"},
            ]},
        ])
    );
    assert_eq!(body["model"], json!("up-model"));
}

#[test]
fn maps_reasoning_to_thinking() {
    let thinking = |reasoning, max| {
        let mut request = plain(vec![user(vec![text("hi")])]);
        request.reasoning = Some(reasoning);
        request.max_output_tokens = max;
        encoded(Format::Messages, &request).map(|body| body.get("thinking").cloned())
    };
    let enabled = |budget: u64| Ok(Some(json!({"type": "enabled", "budget_tokens": budget})));
    assert_eq!(
        thinking(Reasoning::Disabled, None),
        Ok(Some(json!({"type": "disabled"})))
    );
    assert_eq!(
        thinking(Reasoning::Effort(Effort::Minimal), None),
        enabled(1024)
    );
    assert_eq!(
        thinking(Reasoning::Effort(Effort::Low), None),
        enabled(1024)
    );
    assert_eq!(
        thinking(Reasoning::Effort(Effort::Medium), None),
        enabled(2048)
    );
    assert_eq!(
        thinking(Reasoning::Effort(Effort::Medium), Some(20000)),
        enabled(4096)
    );
    assert_eq!(
        thinking(Reasoning::Effort(Effort::High), Some(64000)),
        enabled(16384)
    );
    assert_eq!(
        thinking(Reasoning::Effort(Effort::High), Some(2047)),
        Ok(None)
    );
    assert_eq!(thinking(Reasoning::Budget(1024), Some(1025)), enabled(1024));
    let refused = |result: Result<_, crate::Refusal>| result.unwrap_err().param.unwrap();
    assert_eq!(
        refused(thinking(Reasoning::Budget(1023), None)),
        "reasoning"
    );
    assert_eq!(
        refused(thinking(Reasoning::Budget(4096), None)),
        "reasoning"
    );
    let body = json!({"model": "m", "max_tokens": 2000, "thinking": {"type": "enabled", "budget_tokens": 2000}, "messages": []});
    let refusal = translated(Format::Messages, Format::Messages, body).unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("thinking.budget_tokens"));
}

#[test]
fn refuses_a_temperature_above_one() {
    let body =
        json!({"model": "m", "temperature": 1.2, "messages": [{"role": "user", "content": "hi"}]});
    let refusal = translated(Format::Chat, Format::Messages, body).unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("temperature"));
    let body =
        json!({"model": "m", "temperature": 1.0, "messages": [{"role": "user", "content": "hi"}]});
    assert_eq!(
        translated(Format::Chat, Format::Messages, body).unwrap()["temperature"],
        json!(1.0)
    );
}

#[test]
fn tool_choice_variants() {
    let choice = |choice: Option<ToolChoice>, parallel: Option<bool>| {
        let mut request = plain(vec![user(vec![text("hi")])]);
        request.tools = rich().tools;
        request.tool_choice = choice;
        request.parallel_tool_calls = parallel;
        encoded(Format::Messages, &request)
            .unwrap()
            .get("tool_choice")
            .cloned()
    };
    assert_eq!(choice(None, None), None);
    assert_eq!(choice(None, Some(true)), None);
    assert_eq!(
        choice(None, Some(false)),
        Some(json!({"type": "auto", "disable_parallel_tool_use": true}))
    );
    assert_eq!(
        choice(Some(ToolChoice::Auto), None),
        Some(json!({"type": "auto"}))
    );
    assert_eq!(
        choice(Some(ToolChoice::None), Some(false)),
        Some(json!({"type": "none"}))
    );
    assert_eq!(
        choice(Some(ToolChoice::Tool("look".into())), Some(false)),
        Some(json!({"type": "tool", "name": "look", "disable_parallel_tool_use": true}))
    );
    // Without tools there is nothing to choose from.
    let mut request = plain(vec![user(vec![text("hi")])]);
    request.tool_choice = Some(ToolChoice::Required);
    request.parallel_tool_calls = Some(false);
    let body = encoded(Format::Messages, &request).unwrap();
    assert_eq!(body.get("tool_choice"), None);
    assert_eq!(body.get("tools"), None);
}

#[test]
fn json_object_and_image_urls() {
    let mut request = plain(vec![user(vec![Part::ImageUrl("https://x/y.png".into())])]);
    request.response_format = Some(ResponseFormat::JsonObject);
    let body = encoded(Format::Messages, &request).unwrap();
    assert_eq!(
        body["output_config"],
        json!({"format": {"type": "json_schema", "schema": {"type": "object"}}})
    );
    assert_eq!(
        body["messages"][0]["content"][0],
        json!({"type": "image", "source": {"type": "url", "url": "https://x/y.png"}})
    );
}

#[test]
fn refuses_misplaced_tool_parts() {
    let result = Part::ToolResult {
        id: "t".into(),
        name: None,
        content: "r".into(),
        is_error: false,
    };
    let refusal = encoded(Format::Messages, &plain(vec![assistant(vec![result])])).unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("messages[0].content[0]"));
}
