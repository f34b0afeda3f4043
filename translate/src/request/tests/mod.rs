//! Tests of request translation: each decoder, each encoder, every client × supplier pair, and
//! properties (no panic on arbitrary JSON, round trips within one family).

mod decode_chat;
mod decode_messages;
mod decode_responses;
mod encode_anthropic;
mod encode_chat;
mod encode_gemini;
mod head;
mod pairs;
mod props;

use serde_json::Value;

use super::{Options, decode, encode, translate};
use crate::ir::{Message, Part, Request, Role};
use crate::{Format, Refusal};

fn options() -> Options {
    Options {
        default_max_tokens: 4096,
    }
}

/// Decodes a JSON body.
fn decoded(client: Format, body: Value) -> Result<Request, Refusal> {
    decode(client, body.to_string().as_bytes())
}

/// The `param` of the refusal decoding `body` must produce.
fn refused(client: Format, body: Value) -> String {
    match decoded(client, body) {
        Ok(request) => panic!("expected a refusal, decoded {request:?}"),
        Err(refusal) => refusal.param.unwrap_or_default(),
    }
}

/// Encodes and parses back.
fn encoded(supplier: Format, request: &Request) -> Result<Value, Refusal> {
    let bytes = encode(supplier, request, &options())?;
    Ok(serde_json::from_slice(&bytes).unwrap())
}

/// Translates a JSON body and parses the result.
fn translated(client: Format, supplier: Format, body: Value) -> Result<Value, Refusal> {
    let bytes = translate(
        client,
        supplier,
        body.to_string().as_bytes(),
        "up-model",
        &options(),
    )?;
    Ok(serde_json::from_slice(&bytes).unwrap())
}

fn user(parts: Vec<Part>) -> Message {
    Message {
        role: Role::User,
        parts,
    }
}

fn assistant(parts: Vec<Part>) -> Message {
    Message {
        role: Role::Assistant,
        parts,
    }
}

fn text(text: &str) -> Part {
    Part::Text(text.to_string())
}

/// A request using every canonical field: two system texts, an inline image, signed thinking,
/// parallel tool calls, results split over two user messages (one by name, one only by id,
/// one an error, one with text after it), and a final assistant text with trailing spaces.
fn rich() -> Request {
    use crate::ir::{Reasoning, ResponseFormat, Tool, ToolChoice};
    use serde_json::json;
    Request {
        model: "up".into(),
        system: vec!["Be brief.".into(), "Use tools.".into()],
        messages: vec![
            user(vec![
                text("What is this?"),
                Part::Image {
                    media_type: "image/png".into(),
                    data: "AAAA".into(),
                },
            ]),
            assistant(vec![
                Part::Thinking {
                    text: "Hmm.".into(),
                    signature: Some("sig".into()),
                },
                text("Looking."),
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
                content: "{\"n\":1}".into(),
                is_error: false,
            }]),
            user(vec![
                text("also"),
                Part::ToolResult {
                    id: "call_2".into(),
                    name: None,
                    content: "oops".into(),
                    is_error: true,
                },
            ]),
            assistant(vec![text("Done.  ")]),
        ],
        tools: vec![
            Tool {
                name: "look".into(),
                description: Some("Looks.".into()),
                parameters: json!({"type": "object", "properties": {"q": {"type": "integer"}}}),
            },
            Tool {
                name: "find".into(),
                description: None,
                parameters: Value::Null,
            },
        ],
        tool_choice: Some(ToolChoice::Required),
        parallel_tool_calls: Some(false),
        temperature: Some(0.5),
        top_p: Some(0.9),
        top_k: Some(40),
        stop: vec!["END".into()],
        max_output_tokens: Some(8192),
        reasoning: Some(Reasoning::Budget(2048)),
        response_format: Some(ResponseFormat::JsonSchema {
            name: "out".into(),
            schema: json!({"type": "object"}),
            strict: Some(true),
        }),
        stream: true,
        user: Some("u".into()),
    }
}

/// A request with only `messages`.
fn plain(messages: Vec<Message>) -> Request {
    Request {
        model: "up".into(),
        messages,
        ..Request::default()
    }
}
