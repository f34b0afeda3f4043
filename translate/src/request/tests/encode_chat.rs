//! The chat completions encoder.

use serde_json::json;

use super::{assistant, encoded, plain, rich, text, translated, user};
use crate::Format;
use crate::ir::{Effort, Part, Reasoning, ResponseFormat, ToolChoice};

#[test]
fn encodes_a_rich_request() {
    let body = encoded(Format::Chat, &rich()).unwrap();
    let expected = json!({
        "model": "up",
        "messages": [
            {"role": "system", "content": "Be brief.\n\nUse tools."},
            {"role": "user", "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ]},
            {"role": "assistant", "content": "Looking.", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}},
                {"id": "call_2", "type": "function", "function": {"name": "find", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "{\"n\":1}"},
            {"role": "tool", "tool_call_id": "call_2", "content": "oops"},
            {"role": "user", "content": "also"},
            {"role": "assistant", "content": "Done.  "},
        ],
        "tools": [
            {"type": "function", "function": {"name": "look", "description": "Looks.", "parameters": {"type": "object", "properties": {"q": {"type": "integer"}}}}},
            {"type": "function", "function": {"name": "find"}},
        ],
        "tool_choice": "required",
        "parallel_tool_calls": false,
        "temperature": 0.5,
        "top_p": 0.9,
        "stop": ["END"],
        "max_completion_tokens": 8192,
        "reasoning_effort": "low",
        "response_format": {"type": "json_schema", "json_schema": {"name": "out", "schema": {"type": "object"}, "strict": true}},
        "user": "u",
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    assert_eq!(body, expected);
}

#[test]
fn a_minimal_request_stays_minimal() {
    let body = encoded(Format::Chat, &plain(vec![user(vec![text("hi")])])).unwrap();
    assert_eq!(
        body,
        json!({"model": "up", "messages": [{"role": "user", "content": "hi"}]})
    );
}

#[test]
fn maps_reasoning_to_an_effort() {
    let effort = |reasoning| {
        let mut request = plain(vec![user(vec![text("hi")])]);
        request.reasoning = Some(reasoning);
        encoded(Format::Chat, &request)
            .unwrap()
            .get("reasoning_effort")
            .cloned()
    };
    assert_eq!(
        effort(Reasoning::Effort(Effort::Minimal)),
        Some(json!("minimal"))
    );
    assert_eq!(
        effort(Reasoning::Effort(Effort::Medium)),
        Some(json!("medium"))
    );
    assert_eq!(effort(Reasoning::Effort(Effort::High)), Some(json!("high")));
    assert_eq!(effort(Reasoning::Budget(1024)), Some(json!("low")));
    assert_eq!(effort(Reasoning::Budget(2048)), Some(json!("low")));
    assert_eq!(effort(Reasoning::Budget(2049)), Some(json!("medium")));
    assert_eq!(effort(Reasoning::Budget(8192)), Some(json!("medium")));
    assert_eq!(effort(Reasoning::Budget(8193)), Some(json!("high")));
    assert_eq!(effort(Reasoning::Disabled), None);
}

#[test]
fn small_variants() {
    let mut request = plain(vec![
        user(vec![text("a"), text("b")]),
        // Only reasoning: nothing chat can send.
        assistant(vec![Part::Thinking {
            text: "t".into(),
            signature: None,
        }]),
        assistant(vec![text("x"), text("y")]),
    ]);
    request.response_format = Some(ResponseFormat::JsonObject);
    request.top_k = Some(3);
    request.tool_choice = Some(ToolChoice::Tool("look".into()));
    let body = encoded(Format::Chat, &request).unwrap();
    assert_eq!(
        body,
        json!({
            "model": "up",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "assistant", "content": [{"type": "text", "text": "x"}, {"type": "text", "text": "y"}]},
            ],
            "response_format": {"type": "json_object"},
        })
    );
    let mut request = plain(vec![user(vec![text("hi")])]);
    request.tools = rich().tools;
    request.tool_choice = Some(ToolChoice::Tool("look".into()));
    let body = encoded(Format::Chat, &request).unwrap();
    assert_eq!(
        body["tool_choice"],
        json!({"type": "function", "function": {"name": "look"}})
    );
    assert_eq!(body.get("parallel_tool_calls"), None);
}

#[test]
fn refuses_more_than_four_stop_sequences_naming_the_clients_field() {
    let mut request = plain(vec![user(vec![text("hi")])]);
    request.stop = vec!["a".into(); 5];
    let refusal = encoded(Format::Chat, &request).unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("stop"));
    request.stop.pop();
    assert_eq!(
        encoded(Format::Chat, &request).unwrap()["stop"],
        json!(["a", "a", "a", "a"])
    );
    let body = json!({"model": "m", "max_tokens": 10, "stop_sequences": ["a", "b", "c", "d", "e"], "messages": [{"role": "user", "content": "hi"}]});
    let refusal = translated(Format::Messages, Format::Chat, body).unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("stop_sequences"));
}

#[test]
fn refuses_an_image_in_an_assistant_turn() {
    let request = plain(vec![
        user(vec![text("hi")]),
        assistant(vec![Part::ImageUrl("https://x/y.png".into())]),
    ]);
    let refusal = encoded(Format::Chat, &request).unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("messages[1].content[0]"));
    let body = json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "see"}, {"type": "image", "source": {"type": "url", "url": "https://x/y.png"}}]},
    ]});
    let refusal = translated(Format::Messages, Format::Chat, body).unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("messages[1].content[1]"));
}

#[test]
fn refuses_a_tool_call_in_a_user_turn() {
    let request = plain(vec![user(vec![Part::ToolCall {
        id: "c".into(),
        name: "n".into(),
        arguments: json!({}),
    }])]);
    let refusal = encoded(Format::Chat, &request).unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("messages[0].content[0]"));
}
