//! The Gemini encoder: the canonical request into a `generateContent` body for a Gemini account.
//! The model goes in the path (the caller's job), so the body has none. Gemini takes only
//! `user`/`model` turns, inline image data, and tool results with the function's name; the name
//! is looked up from the earlier call when the client's format carries only the call id. Never
//! decodes.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use crate::Refusal;
use crate::ir::{Effort, Part, Reasoning, Request, ResponseFormat, Role, ToolChoice};
use crate::request::encode_shared as shared;
use crate::request::origin::{Field, Origin};

/// Gemini's limit on `stopSequences`.
const MAX_STOP: usize = 5;

/// Encodes `request` as a `generateContent` body.
pub(in crate::request) fn encode(request: &Request, origin: &Origin) -> Result<Value, Refusal> {
    let mut body = Map::new();
    if let Some(system) = shared::system(request) {
        body.insert(
            "systemInstruction".into(),
            json!({"parts": [{"text": system}]}),
        );
    }
    body.insert("contents".into(), Value::Array(contents(request, origin)?));
    if !request.tools.is_empty() {
        let declarations = request.tools.iter().map(|tool| {
            let mut declaration = Map::new();
            declaration.insert("name".into(), json!(tool.name));
            if let Some(description) = &tool.description {
                declaration.insert("description".into(), json!(description));
            }
            if !shared::empty_schema(&tool.parameters) {
                declaration.insert("parametersJsonSchema".into(), tool.parameters.clone());
            }
            Value::Object(declaration)
        });
        body.insert(
            "tools".into(),
            json!([{"functionDeclarations": declarations.collect::<Vec<_>>()}]),
        );
        if let Some(choice) = &request.tool_choice {
            let config = match choice {
                ToolChoice::Auto => json!({"mode": "AUTO"}),
                ToolChoice::None => json!({"mode": "NONE"}),
                ToolChoice::Required => json!({"mode": "ANY"}),
                ToolChoice::Tool(name) => json!({"mode": "ANY", "allowedFunctionNames": [name]}),
            };
            body.insert(
                "toolConfig".into(),
                json!({"functionCallingConfig": config}),
            );
        }
    }
    let config = generation_config(request, origin)?;
    if !config.is_empty() {
        body.insert("generationConfig".into(), Value::Object(config));
    }
    Ok(Value::Object(body))
}

fn generation_config(request: &Request, origin: &Origin) -> Result<Map<String, Value>, Refusal> {
    let mut config = Map::new();
    if let Some(temperature) = request.temperature {
        config.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        config.insert("topP".into(), json!(top_p));
    }
    if let Some(top_k) = request.top_k {
        config.insert("topK".into(), json!(top_k));
    }
    if let Some(stop) = shared::stop(request, origin, MAX_STOP)? {
        config.insert("stopSequences".into(), stop);
    }
    if let Some(max) = request.max_output_tokens {
        config.insert("maxOutputTokens".into(), json!(max));
    }
    if let Some(reasoning) = request.reasoning {
        let budget = match reasoning {
            Reasoning::Budget(budget) => budget,
            Reasoning::Disabled => 0,
            Reasoning::Effort(Effort::Minimal) => 512,
            Reasoning::Effort(Effort::Low) => 1024,
            Reasoning::Effort(Effort::Medium) => 8192,
            Reasoning::Effort(Effort::High) => 24576,
        };
        config.insert("thinkingConfig".into(), json!({"thinkingBudget": budget}));
    }
    match &request.response_format {
        None => {}
        Some(ResponseFormat::JsonObject) => {
            config.insert("responseMimeType".into(), json!("application/json"));
        }
        Some(ResponseFormat::JsonSchema { schema, .. }) => {
            config.insert("responseMimeType".into(), json!("application/json"));
            config.insert("responseJsonSchema".into(), schema.clone());
        }
    }
    Ok(config)
}

/// Whether a part survives into a Gemini body: no reasoning (Gemini's own thought signatures
/// cannot be rebuilt), no empty text part.
fn keep(_: Role, part: &Part) -> bool {
    match part {
        Part::Text(text) => !text.is_empty(),
        Part::Thinking { .. } => false,
        Part::Image { .. }
        | Part::ImageUrl(_)
        | Part::ToolCall { .. }
        | Part::ToolResult { .. } => true,
    }
}

fn contents(request: &Request, origin: &Origin) -> Result<Vec<Value>, Refusal> {
    let mut names: HashMap<&str, &str> = HashMap::new();
    let mut contents = Vec::new();
    for mut turn in shared::turns(request, keep) {
        let role = match turn.role {
            Role::User => {
                shared::tool_results_first(&mut turn);
                "user"
            }
            Role::Assistant => "model",
        };
        let mut parts = Vec::with_capacity(turn.parts.len());
        for &(field, part) in &turn.parts {
            if let Some(p) = gemini_part(turn.role, field, part, &mut names, origin)? {
                parts.push(p);
            }
        }
        contents.push(json!({"role": role, "parts": parts}));
    }
    Ok(contents)
}

/// A part of a turn as Gemini's `parts` entry (`None`: a part Gemini is not sent, thinking);
/// remembers each tool call's name by its id in `names`, which a later result needs.
fn gemini_part<'a>(
    role: Role,
    field: Field,
    part: &'a Part,
    names: &mut HashMap<&'a str, &'a str>,
    origin: &Origin,
) -> Result<Option<Value>, Refusal> {
    Ok(Some(match (role, part) {
        (_, Part::Text(text)) => json!({"text": text}),
        (_, Part::Image { media_type, data }) => {
            json!({"inlineData": {"mimeType": media_type, "data": data}})
        }
        (_, Part::ImageUrl(_)) => {
            let param = origin.name(field);
            return Err(Refusal::new(
                format!(
                    "`{param}`: this supplier takes images as inline data only; send a \
                     base64 data URL"
                ),
                param,
            ));
        }
        (
            Role::Assistant,
            Part::ToolCall {
                id,
                name,
                arguments,
            },
        ) => {
            names.insert(id, name);
            // The signature the call arrived with goes back in the same part.
            match crate::signature::split_id(id).1 {
                Some(signature) => json!({
                    "functionCall": {"name": name, "args": arguments},
                    "thoughtSignature": signature,
                }),
                None => json!({"functionCall": {"name": name, "args": arguments}}),
            }
        }
        (
            Role::User,
            Part::ToolResult {
                id,
                name,
                content,
                is_error,
            },
        ) => {
            let Some(name) = name.as_deref().or_else(|| names.get(id.as_str()).copied()) else {
                let param = origin.name(field);
                return Err(Refusal::new(
                    format!(
                        "`{param}` answers the tool call `{id}`, which no earlier turn \
                         made; this supplier needs the tool's name"
                    ),
                    param,
                ));
            };
            let output = serde_json::from_str::<Value>(content)
                .unwrap_or_else(|_| Value::String(content.clone()));
            let key = if *is_error { "error" } else { "output" };
            json!({"functionResponse": {"name": name, "response": {key: output}}})
        }
        (Role::User, Part::ToolCall { .. }) => {
            return Err(shared::misplaced(origin, field, "a user turn"));
        }
        (Role::Assistant, Part::ToolResult { .. }) => {
            return Err(shared::misplaced(origin, field, "an assistant turn"));
        }
        (_, Part::Thinking { .. }) => return Ok(None),
    }))
}
