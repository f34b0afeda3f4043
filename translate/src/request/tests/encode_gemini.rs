//! The Gemini encoder, and its pitfalls from notes §10 (roles, function response names).

use serde_json::json;

use super::{assistant, encoded, plain, rich, text, translated, user};
use crate::Format;
use crate::ir::{Effort, Part, Reasoning, ResponseFormat, ToolChoice};

#[test]
fn encodes_a_rich_request() {
    let body = encoded(Format::Gemini, &rich()).unwrap();
    let expected = json!({
        "systemInstruction": {"parts": [{"text": "Be brief.\n\nUse tools."}]},
        "contents": [
            {"role": "user", "parts": [
                {"text": "What is this?"},
                {"inlineData": {"mimeType": "image/png", "data": "AAAA"}},
            ]},
            {"role": "model", "parts": [
                {"text": "Looking."},
                {"functionCall": {"name": "look", "args": {"q": 1}}},
                {"functionCall": {"name": "find", "args": {}}},
            ]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "look", "response": {"output": {"n": 1}}}},
                {"functionResponse": {"name": "find", "response": {"error": "oops"}}},
                {"text": "also"},
            ]},
            {"role": "model", "parts": [{"text": "Done.  "}]},
        ],
        "tools": [{"functionDeclarations": [
            {"name": "look", "description": "Looks.", "parametersJsonSchema": {"type": "object", "properties": {"q": {"type": "integer"}}}},
            {"name": "find"},
        ]}],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
        "generationConfig": {
            "temperature": 0.5,
            "topP": 0.9,
            "topK": 40,
            "stopSequences": ["END"],
            "maxOutputTokens": 8192,
            "thinkingConfig": {"thinkingBudget": 2048},
            "responseMimeType": "application/json",
            "responseJsonSchema": {"type": "object"},
        },
    });
    assert_eq!(body, expected);
}

#[test]
fn a_minimal_request_has_no_model_and_no_config() {
    let body = encoded(Format::Gemini, &plain(vec![user(vec![text("hi")])])).unwrap();
    assert_eq!(
        body,
        json!({"contents": [{"role": "user", "parts": [{"text": "hi"}]}]})
    );
}

#[test]
fn merges_roles_and_drops_reasoning_and_empty_text() {
    let request = plain(vec![
        user(vec![text("a")]),
        user(vec![text(""), text("b")]),
        assistant(vec![Part::Thinking {
            text: "t".into(),
            signature: Some("s".into()),
        }]),
        user(vec![text("c")]),
        assistant(vec![text("d")]),
        assistant(vec![text("e")]),
    ]);
    let body = encoded(Format::Gemini, &request).unwrap();
    assert_eq!(
        body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "a"}, {"text": "b"}, {"text": "c"}]},
            {"role": "model", "parts": [{"text": "d"}, {"text": "e"}]},
        ])
    );
}

#[test]
fn function_responses_carry_the_name_of_the_earlier_call() {
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "tool_calls": [{"id": "a", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "[1,2]"},
        {"role": "tool", "tool_call_id": "a", "content": "sunny"},
    ]});
    let body = translated(Format::Chat, Format::Gemini, body).unwrap();
    assert_eq!(
        body["contents"],
        json!([
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
            {"role": "user", "parts": [
                {"functionResponse": {"name": "weather", "response": {"output": [1, 2]}}},
                {"functionResponse": {"name": "weather", "response": {"output": "sunny"}}},
            ]},
        ])
    );
    // A result without a name is looked up from the earlier call.
    let request = plain(vec![
        assistant(vec![Part::ToolCall {
            id: "x".into(),
            name: "n".into(),
            arguments: json!({}),
        }]),
        user(vec![Part::ToolResult {
            id: "x".into(),
            name: None,
            content: "42".into(),
            is_error: false,
        }]),
    ]);
    let body = encoded(Format::Gemini, &request).unwrap();
    assert_eq!(
        body["contents"][1]["parts"][0],
        json!({"functionResponse": {"name": "n", "response": {"output": 42}}})
    );
}

#[test]
fn refuses_a_result_whose_call_is_unknown() {
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "hi"},
        {"role": "tool", "tool_call_id": "ghost", "content": "x"},
    ]});
    let refusal = translated(Format::Chat, Format::Gemini, body).unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("messages[1]"));
    let body = json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "ghost", "output": "x"}]});
    let refusal = translated(Format::Responses, Format::Gemini, body).unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("input[0]"));
}

#[test]
fn refuses_an_image_url_naming_the_clients_part() {
    let body = json!({"model": "m", "messages": [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "see"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]},
    ]});
    let refusal = translated(Format::Chat, Format::Gemini, body).unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("messages[1].content[1]"));
    let refusal = encoded(
        Format::Gemini,
        &plain(vec![user(vec![Part::ImageUrl("https://x".into())])]),
    )
    .unwrap_err();
    assert_eq!(refusal.param.as_deref(), Some("messages[0].content[0]"));
}

#[test]
fn maps_reasoning_and_formats() {
    let config = |reasoning: Option<Reasoning>, format: Option<ResponseFormat>| {
        let mut request = plain(vec![user(vec![text("hi")])]);
        request.reasoning = reasoning;
        request.response_format = format;
        encoded(Format::Gemini, &request).unwrap()["generationConfig"].clone()
    };
    let budget =
        |reasoning| config(Some(reasoning), None)["thinkingConfig"]["thinkingBudget"].clone();
    assert_eq!(budget(Reasoning::Disabled), json!(0));
    assert_eq!(budget(Reasoning::Budget(3000)), json!(3000));
    assert_eq!(budget(Reasoning::Effort(Effort::Minimal)), json!(512));
    assert_eq!(budget(Reasoning::Effort(Effort::Low)), json!(1024));
    assert_eq!(budget(Reasoning::Effort(Effort::Medium)), json!(8192));
    assert_eq!(budget(Reasoning::Effort(Effort::High)), json!(24576));
    assert_eq!(
        config(None, Some(ResponseFormat::JsonObject)),
        json!({"responseMimeType": "application/json"})
    );
}

#[test]
fn tool_config_variants_and_stop_limit() {
    let tool_config = |choice| {
        let mut request = plain(vec![user(vec![text("hi")])]);
        request.tools = rich().tools;
        request.tool_choice = Some(choice);
        request.parallel_tool_calls = Some(true);
        encoded(Format::Gemini, &request).unwrap()["toolConfig"].clone()
    };
    let mode = |mode: &str| json!({"functionCallingConfig": {"mode": mode}});
    assert_eq!(tool_config(ToolChoice::Auto), mode("AUTO"));
    assert_eq!(tool_config(ToolChoice::None), mode("NONE"));
    assert_eq!(tool_config(ToolChoice::Required), mode("ANY"));
    assert_eq!(
        tool_config(ToolChoice::Tool("look".into())),
        json!({"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["look"]}})
    );
    let mut request = plain(vec![user(vec![text("hi")])]);
    request.stop = vec!["s".into(); 6];
    assert_eq!(
        encoded(Format::Gemini, &request)
            .unwrap_err()
            .param
            .as_deref(),
        Some("stop")
    );
    request.stop.pop();
    assert_eq!(
        encoded(Format::Gemini, &request).unwrap()["generationConfig"]["stopSequences"],
        json!(vec!["s"; 5])
    );
}

/// A tool call whose id carries a Gemini thought signature (as the gateway gave it to a chat
/// client) goes back to Gemini with `thoughtSignature` beside its `functionCall`, in standard
/// base64; Anthropic and chat suppliers get the bare id on the call and on its result.
#[test]
fn thought_signatures_ride_in_tool_call_ids() {
    let signed = crate::signature::signed_id("call_r_0", "Zm9v+/8=");
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": null, "tool_calls": [
            {"id": signed, "type": "function", "function": {"name": "look", "arguments": "{\"q\":1}"}},
            {"id": "call_r_1", "type": "function", "function": {"name": "find", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": signed, "content": "sunny"},
        {"role": "tool", "tool_call_id": "call_r_1", "content": "found"},
    ]});
    let gemini = translated(Format::Chat, Format::Gemini, body.clone()).unwrap();
    let model = &gemini["contents"][1]["parts"];
    assert_eq!(model[0]["thoughtSignature"], "Zm9v+/8=", "{gemini}");
    assert_eq!(model[0]["functionCall"]["name"], "look");
    assert!(
        model[1].get("thoughtSignature").is_none(),
        "only the call that had one"
    );
    assert_eq!(
        gemini["contents"][2]["parts"][0]["functionResponse"]["name"], "look",
        "the result still finds its call"
    );
    let claude = translated(Format::Chat, Format::Messages, body.clone()).unwrap();
    assert_eq!(claude["messages"][1]["content"][0]["id"], "call_r_0");
    assert_eq!(
        claude["messages"][2]["content"][0]["tool_use_id"],
        "call_r_0"
    );
    let chat = translated(Format::Messages, Format::Chat, json!({"model": "m", "max_tokens": 10, "messages": [
        {"role": "user", "content": "weather?"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": signed, "name": "look", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": signed, "content": "sunny"}]},
    ]}))
    .unwrap();
    assert_eq!(
        chat["messages"][1]["tool_calls"][0]["id"], "call_r_0",
        "{chat}"
    );
    assert_eq!(chat["messages"][2]["tool_call_id"], "call_r_0");
}
