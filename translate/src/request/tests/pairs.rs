//! `translate()` end to end for every client × supplier pair, and round trips within one family.

use serde_json::{Value, json};

use super::{decoded, translated};
use crate::Format;
use crate::ir::{Message, Request};

/// One conversation (system prompt, a question, a tool call and its result, a tool, sampling,
/// an output cap, streaming) as each client format spells it.
pub(super) fn bodies() -> [(Format, Value); 3] {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    [
        (
            Format::Chat,
            json!({
                "model": "client-model",
                "messages": [
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
                ],
                "tools": [{"type": "function", "function": {"name": "weather", "description": "Gets weather.", "parameters": schema}}],
                "temperature": 0.3,
                "max_completion_tokens": 500,
                "stream": true,
            }),
        ),
        (
            Format::Responses,
            json!({
                "model": "client-model",
                "instructions": "Be brief.",
                "input": [
                    {"role": "user", "content": "Weather in Paris?"},
                    {"type": "function_call", "call_id": "call_1", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
                    {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
                ],
                "tools": [{"type": "function", "name": "weather", "description": "Gets weather.", "parameters": schema}],
                "temperature": 0.3,
                "max_output_tokens": 500,
                "store": false,
                "stream": true,
            }),
        ),
        (
            Format::Messages,
            json!({
                "model": "client-model",
                "system": "Be brief.",
                "messages": [
                    {"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}}]},
                    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]},
                ],
                "tools": [{"name": "weather", "description": "Gets weather.", "input_schema": schema}],
                "temperature": 0.3,
                "max_tokens": 500,
                "stream": true,
            }),
        ),
    ]
}

/// What each supplier must receive for that conversation.
fn expected(supplier: Format) -> Value {
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}}});
    match supplier {
        Format::Chat => json!({
            "model": "up-model",
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Weather in Paris?"},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]},
                {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
            ],
            "tools": [{"type": "function", "function": {"name": "weather", "description": "Gets weather.", "parameters": schema}}],
            "temperature": 0.3,
            "max_completion_tokens": 500,
            "stream": true,
            "stream_options": {"include_usage": true},
        }),
        Format::Messages => json!({
            "model": "up-model",
            "max_tokens": 500,
            "system": "Be brief.",
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "call_1", "name": "weather", "input": {"city": "Paris"}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_1", "content": "sunny"}]},
            ],
            "tools": [{"name": "weather", "description": "Gets weather.", "input_schema": schema}],
            "temperature": 0.3,
            "stream": true,
        }),
        Format::Gemini => json!({
            "systemInstruction": {"parts": [{"text": "Be brief."}]},
            "contents": [
                {"role": "user", "parts": [{"text": "Weather in Paris?"}]},
                {"role": "model", "parts": [{"functionCall": {"name": "weather", "args": {"city": "Paris"}}}]},
                {"role": "user", "parts": [{"functionResponse": {"name": "weather", "response": {"output": "sunny"}}}]},
            ],
            "tools": [{"functionDeclarations": [{"name": "weather", "description": "Gets weather.", "parametersJsonSchema": schema}]}],
            "generationConfig": {"temperature": 0.3, "maxOutputTokens": 500},
        }),
        Format::Responses => Value::Null,
    }
}

#[test]
fn every_client_reaches_every_supplier() {
    for (client, body) in bodies() {
        for supplier in [Format::Chat, Format::Messages, Format::Gemini] {
            let got = translated(client, supplier, body.clone());
            assert_eq!(
                got,
                Ok(expected(supplier)),
                "{} → {}",
                client.label(),
                supplier.label()
            );
        }
    }
}

#[test]
fn the_responses_format_is_not_a_supplier_format() {
    let (client, body) = bodies()[0].clone();
    let refusal = translated(client, Format::Responses, body).unwrap_err();
    assert_eq!(refusal.param, None);
}

/// Consecutive turns of one role as one (what every encoder does).
fn merged(request: Request) -> Request {
    let mut messages: Vec<Message> = Vec::new();
    for message in request.messages {
        match messages.last_mut() {
            Some(last) if last.role == message.role => last.parts.extend(message.parts),
            _ => messages.push(message),
        }
    }
    Request {
        messages,
        ..request
    }
}

#[test]
fn chat_to_chat_keeps_the_body() {
    let body = super::encoded(Format::Chat, &super::rich()).unwrap();
    assert_eq!(
        translated(Format::Chat, Format::Chat, body.clone()),
        Ok(with_model(body, "up-model"))
    );
}

#[test]
fn messages_to_messages_keeps_the_body() {
    let body = super::encoded(Format::Messages, &super::rich()).unwrap();
    assert_eq!(
        translated(Format::Messages, Format::Messages, body.clone()),
        Ok(with_model(body, "up-model"))
    );
}

#[test]
fn responses_to_chat_keeps_the_meaning() {
    let body = json!({
        "model": "m",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "Look"}, {"type": "input_image", "image_url": "data:image/png;base64,AA"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Sure."}]},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{\"a\":1}"},
            {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "x"},
            {"type": "function_call_output", "call_id": "c2", "output": "y"},
        ],
        "tools": [{"type": "function", "name": "f", "parameters": {"type": "object"}}],
        "tool_choice": "required",
        "parallel_tool_calls": true,
        "reasoning": {"effort": "high"},
        "text": {"format": {"type": "json_schema", "name": "o", "schema": {"type": "object"}, "strict": true}},
        "max_output_tokens": 99,
        "temperature": 0.1,
        "top_p": 0.2,
        "user": "u",
    });
    let original = merged(decoded(Format::Responses, body.clone()).unwrap());
    let chat = translated(Format::Responses, Format::Chat, body).unwrap();
    let again = merged(decoded(Format::Chat, with_model(chat, "m")).unwrap());
    assert_eq!(again, original);
}

fn with_model(mut body: Value, model: &str) -> Value {
    body["model"] = json!(model);
    body
}
