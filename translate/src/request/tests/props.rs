//! Properties: decoding never panics on arbitrary JSON (and what decodes also encodes without
//! panicking), and within one family a body the encoder wrote survives decode → encode unchanged.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

use super::{decode, encode, options};
use crate::Format;
use crate::ir::{
    Effort, Message, Part, Reasoning, Request, ResponseFormat, Role, Tool, ToolChoice,
};

const CLIENTS: [Format; 4] = [
    Format::Chat,
    Format::Responses,
    Format::Messages,
    Format::Gemini,
];
const SUPPLIERS: [Format; 4] = [
    Format::Chat,
    Format::Messages,
    Format::Gemini,
    Format::Responses,
];

/// Keys the decoders look for, so that arbitrary objects reach deep into them.
const KEYS: &[&str] = &[
    "model",
    "messages",
    "input",
    "role",
    "content",
    "type",
    "text",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "id",
    "call_id",
    "tool_call_id",
    "tool_use_id",
    "output",
    "image_url",
    "url",
    "source",
    "data",
    "media_type",
    "input",
    "tools",
    "tool_choice",
    "parameters",
    "input_schema",
    "system",
    "instructions",
    "max_tokens",
    "thinking",
    "budget_tokens",
    "reasoning",
    "effort",
    "stop",
    "temperature",
    "response_format",
    "json_schema",
    "schema",
    "format",
    "output_config",
    "metadata",
    "user_id",
    "stream",
    "n",
    "store",
    "is_error",
];

const WORDS: &[&str] = &[
    "user",
    "assistant",
    "system",
    "developer",
    "tool",
    "text",
    "image_url",
    "image",
    "tool_use",
    "tool_result",
    "function",
    "function_call",
    "function_call_output",
    "message",
    "input_text",
    "input_image",
    "output_text",
    "thinking",
    "base64",
    "url",
    "enabled",
    "adaptive",
    "json_schema",
    "auto",
    "any",
    "required",
    "none",
    "high",
    "data:image/png;base64,AA",
    "https://x/y",
    "{}",
    "{\"a\":1}",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-3.0f64..3.0).prop_map(|x| json!(x)),
        prop::sample::select(WORDS).prop_map(|word| json!(word)),
        ".{0,6}".prop_map(Value::String),
    ]
}

fn arbitrary_json() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(5, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|entries| {
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.to_string(), v))
                        .collect::<Map<_, _>>(),
                )
            }),
        ]
    })
}

proptest! {
    #[test]
    fn decoding_arbitrary_json_never_panics(value in arbitrary_json()) {
        let bytes = value.to_string().into_bytes();
        for client in CLIENTS {
            if let Ok(request) = decode(client, &bytes) {
                for supplier in SUPPLIERS {
                    let _ = encode(supplier, &request, &options());
                }
            }
        }
    }

    #[test]
    fn decoding_a_mutated_body_never_panics((client, body) in mutated()) {
        if let Ok(request) = decode(client, body.to_string().as_bytes()) {
            for supplier in SUPPLIERS {
                let _ = encode(supplier, &request, &options());
            }
        }
    }

    #[test]
    fn decoding_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
        for client in CLIENTS {
            let _ = decode(client, &bytes);
        }
    }

    #[test]
    fn a_chat_body_survives_decode_and_encode(request in request(false)) {
        if let Ok(body) = encode(Format::Chat, &request, &options()) {
            let again = decode(Format::Chat, &body).unwrap();
            let again = encode(Format::Chat, &Request { model: request.model.clone(), ..again }, &options()).unwrap();
            prop_assert_eq!(parse(&again), parse(&body));
        }
    }

    #[test]
    fn a_messages_body_survives_decode_and_encode(request in request(true)) {
        if let Ok(body) = encode(Format::Messages, &request, &options()) {
            let again = decode(Format::Messages, &body).unwrap();
            let again = encode(Format::Messages, &Request { model: request.model.clone(), ..again }, &options()).unwrap();
            prop_assert_eq!(parse(&again), parse(&body));
        }
    }
}

/// Valid bodies of each client format, with one value somewhere inside replaced by arbitrary
/// JSON: reaches the decoders' inner paths, which arbitrary JSON alone rarely does.
fn mutated() -> impl Strategy<Value = (Format, Value)> {
    let mut seeds: Vec<(Format, Value)> = super::pairs::bodies().to_vec();
    for format in [Format::Chat, Format::Messages] {
        let body = encode(format, &super::rich(), &options()).unwrap();
        seeds.push((format, parse(&body)));
    }
    (
        prop::sample::select(seeds),
        any::<prop::sample::Index>(),
        arbitrary_json(),
    )
        .prop_map(|((format, mut body), index, replacement)| {
            let mut pointers = Vec::new();
            pointers_of(&body, String::new(), &mut pointers);
            let pointer = index.get(&pointers).clone();
            if let Some(slot) = body.pointer_mut(&pointer) {
                *slot = replacement;
            }
            (format, body)
        })
}

/// Every JSON pointer inside `value` (including `""`, the value itself).
fn pointers_of(value: &Value, at: String, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, child) in map {
                pointers_of(child, format!("{at}/{key}"), out);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                pointers_of(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
    out.push(at);
}

fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

fn id() -> impl Strategy<Value = String> {
    prop::sample::select(&["c0", "c1", "c2"][..]).prop_map(str::to_string)
}

fn text() -> impl Strategy<Value = String> {
    prop::sample::select(&["", " ", "hi", "hi ", "a\nb", "{\"k\":2}", "[1]"][..])
        .prop_map(str::to_string)
}

fn part(role: Role) -> BoxedStrategy<Part> {
    let common = prop_oneof![
        text().prop_map(Part::Text),
        Just(Part::Image {
            media_type: "image/png".into(),
            data: "AA".into()
        }),
        Just(Part::ImageUrl("https://x/y.png".into())),
    ];
    match role {
        Role::User => prop_oneof![
            common,
            (id(), prop::option::of(id()), text(), any::<bool>()).prop_map(
                |(id, name, content, is_error)| {
                    Part::ToolResult {
                        id,
                        name,
                        content,
                        is_error,
                    }
                }
            ),
        ]
        .boxed(),
        Role::Assistant => prop_oneof![
            text().prop_map(Part::Text),
            (id(), id(), prop::option::of(0u8..3)).prop_map(|(id, name, arg)| Part::ToolCall {
                id,
                name,
                arguments: arg.map_or_else(|| json!({}), |a| json!({"a": a})),
            }),
            (text(), prop::option::of(text()))
                .prop_map(|(text, signature)| Part::Thinking { text, signature }),
        ]
        .boxed(),
    }
}

fn message() -> impl Strategy<Value = Message> {
    prop_oneof![Just(Role::User), Just(Role::Assistant)].prop_flat_map(|role| {
        prop::collection::vec(part(role), 0..4).prop_map(move |parts| Message { role, parts })
    })
}

fn reasoning() -> impl Strategy<Value = Reasoning> {
    prop_oneof![
        Just(Reasoning::Disabled),
        prop::sample::select(&[Effort::Minimal, Effort::Low, Effort::Medium, Effort::High][..])
            .prop_map(Reasoning::Effort),
        (1024u64..3000).prop_map(Reasoning::Budget),
    ]
}

/// A request; `unit_temperature` keeps the temperature within Anthropic's 0–1.
fn request(unit_temperature: bool) -> impl Strategy<Value = Request> {
    let top = if unit_temperature { 1.0 } else { 2.0 };
    let tools = prop::collection::vec(
        (id(), prop::option::of(text()), prop::bool::ANY).prop_map(|(name, description, typed)| {
            Tool {
                name,
                description,
                parameters: if typed {
                    json!({"type": "object"})
                } else {
                    Value::Null
                },
            }
        }),
        0..3,
    );
    let choice = prop::option::of(prop_oneof![
        Just(ToolChoice::Auto),
        Just(ToolChoice::None),
        Just(ToolChoice::Required),
        id().prop_map(ToolChoice::Tool),
    ]);
    let format = prop::option::of(prop_oneof![
        Just(ResponseFormat::JsonObject),
        prop::option::of(any::<bool>()).prop_map(|strict| ResponseFormat::JsonSchema {
            name: "response".into(),
            schema: json!({"type": "object"}),
            strict,
        }),
    ]);
    (
        (
            prop::collection::vec(text(), 0..3),
            prop::collection::vec(message(), 0..6),
            tools,
            choice,
        ),
        (
            prop::option::of(any::<bool>()),
            prop::option::of(0.0..top),
            prop::option::of(0.0f64..1.0),
            prop::option::of(1u64..100),
        ),
        (
            prop::collection::vec(text(), 0..4),
            prop::option::of(4000u64..9000),
            prop::option::of(reasoning()),
            format,
        ),
        (any::<bool>(), prop::option::of(text())),
    )
        .prop_map(
            |(
                (system, messages, tools, tool_choice),
                (parallel_tool_calls, temperature, top_p, top_k),
                (stop, max_output_tokens, reasoning, response_format),
                (stream, user),
            )| Request {
                model: "up".into(),
                system,
                messages,
                tools,
                tool_choice,
                parallel_tool_calls,
                temperature,
                top_p,
                top_k,
                stop,
                max_output_tokens,
                reasoning,
                response_format,
                stream,
                user,
            },
        )
}
