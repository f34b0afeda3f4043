//! The OpenAI chat completions encoder: the canonical request into a `/v1/chat/completions`
//! body for an OpenAI account. Refuses only what chat cannot hold (more than 4 stop sequences,
//! images or tool results in an assistant turn); never decodes.

use serde_json::{Map, Value, json};

use crate::Refusal;
use crate::ir::{Effort, Part, Reasoning, Request, ResponseFormat, Role, ToolChoice};
use crate::request::encode_shared::{self as shared, Turn};
use crate::request::origin::Origin;

/// Chat's limit on `stop`.
const MAX_STOP: usize = 4;

/// Encodes `request` as a chat completions body.
pub(in crate::request) fn encode(request: &Request, origin: &Origin) -> Result<Value, Refusal> {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    body.insert("messages".into(), Value::Array(messages(request, origin)?));
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(|tool| {
            let mut function = Map::new();
            function.insert("name".into(), json!(tool.name));
            if let Some(description) = &tool.description {
                function.insert("description".into(), json!(description));
            }
            if !tool.parameters.is_null() {
                function.insert("parameters".into(), tool.parameters.clone());
            }
            json!({"type": "function", "function": function})
        });
        body.insert("tools".into(), tools.collect());
        if let Some(choice) = &request.tool_choice {
            body.insert("tool_choice".into(), tool_choice(choice));
        }
        if let Some(parallel) = request.parallel_tool_calls {
            body.insert("parallel_tool_calls".into(), json!(parallel));
        }
    }
    if let Some(temperature) = request.temperature {
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        body.insert("top_p".into(), json!(top_p));
    }
    if let Some(stop) = shared::stop(request, origin, MAX_STOP)? {
        body.insert("stop".into(), stop);
    }
    if let Some(max) = request.max_output_tokens {
        body.insert("max_completion_tokens".into(), json!(max));
    }
    if let Some(effort) = request.reasoning.and_then(reasoning_effort) {
        body.insert("reasoning_effort".into(), json!(effort));
    }
    match &request.response_format {
        None => {}
        Some(ResponseFormat::JsonObject) => {
            body.insert("response_format".into(), json!({"type": "json_object"}));
        }
        Some(ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        }) => {
            let mut json_schema = Map::new();
            json_schema.insert("name".into(), json!(name));
            json_schema.insert("schema".into(), schema.clone());
            if let Some(strict) = strict {
                json_schema.insert("strict".into(), json!(strict));
            }
            body.insert(
                "response_format".into(),
                json!({"type": "json_schema", "json_schema": json_schema}),
            );
        }
    }
    if let Some(user) = &request.user {
        body.insert("user".into(), json!(user));
    }
    if request.stream {
        body.insert("stream".into(), json!(true));
        body.insert("stream_options".into(), json!({"include_usage": true}));
    }
    Ok(Value::Object(body))
}

fn tool_choice(choice: &ToolChoice) -> Value {
    match choice {
        ToolChoice::Auto => json!("auto"),
        ToolChoice::None => json!("none"),
        ToolChoice::Required => json!("required"),
        ToolChoice::Tool(name) => json!({"type": "function", "function": {"name": name}}),
    }
}

/// The chat effort for a canonical reasoning control; `None` when thinking is off (chat has no
/// portable "off").
fn reasoning_effort(reasoning: Reasoning) -> Option<&'static str> {
    match reasoning {
        Reasoning::Effort(Effort::Minimal) => Some("minimal"),
        Reasoning::Effort(Effort::Low) => Some("low"),
        Reasoning::Effort(Effort::Medium) => Some("medium"),
        Reasoning::Effort(Effort::High) => Some("high"),
        Reasoning::Budget(budget) if budget <= 2048 => Some("low"),
        Reasoning::Budget(budget) if budget <= 8192 => Some("medium"),
        Reasoning::Budget(_) => Some("high"),
        Reasoning::Disabled => None,
    }
}

fn messages(request: &Request, origin: &Origin) -> Result<Vec<Value>, Refusal> {
    let mut messages = Vec::new();
    if let Some(system) = shared::system(request) {
        messages.push(json!({"role": "system", "content": system}));
    }
    // Chat cannot replay reasoning.
    let turns = shared::turns(request, |_, part| !matches!(part, Part::Thinking { .. }));
    for turn in &turns {
        match turn.role {
            Role::User => user_turn(turn, origin, &mut messages)?,
            Role::Assistant => messages.extend(assistant_turn(turn, origin)?),
        }
    }
    Ok(messages)
}

/// A user turn: one `tool` message per tool result, then the rest as one user message.
fn user_turn(turn: &Turn<'_>, origin: &Origin, messages: &mut Vec<Value>) -> Result<(), Refusal> {
    let mut content = Vec::new();
    for &(field, part) in &turn.parts {
        match part {
            Part::ToolResult { id, content, .. } => {
                let id = crate::signature::bare_id(id);
                messages.push(json!({"role": "tool", "tool_call_id": id, "content": content}));
            }
            Part::Text(text) => content.push(json!({"type": "text", "text": text})),
            Part::Image { media_type, data } => content.push(json!({
                "type": "image_url",
                "image_url": {"url": format!("data:{media_type};base64,{data}")},
            })),
            Part::ImageUrl(url) => {
                content.push(json!({"type": "image_url", "image_url": {"url": url}}));
            }
            Part::ToolCall { .. } | Part::Thinking { .. } => {
                return Err(shared::misplaced(origin, field, "a user turn"));
            }
        }
    }
    let content = match content.as_slice() {
        [] => return Ok(()),
        [Value::Object(only)] if only.get("type") == Some(&json!("text")) => {
            only.get("text").cloned().unwrap_or(Value::Null)
        }
        _ => Value::Array(content),
    };
    messages.push(json!({"role": "user", "content": content}));
    Ok(())
}

/// An assistant turn: its texts as `content`, its calls as `tool_calls`.
fn assistant_turn(turn: &Turn<'_>, origin: &Origin) -> Result<Option<Value>, Refusal> {
    let mut texts = Vec::new();
    let mut calls = Vec::new();
    for &(field, part) in &turn.parts {
        match part {
            Part::Text(text) => texts.push(text.as_str()),
            Part::ToolCall {
                id,
                name,
                arguments,
            } => calls.push(json!({
                "id": crate::signature::bare_id(id),
                "type": "function",
                "function": {"name": name, "arguments": arguments.to_string()},
            })),
            Part::Image { .. }
            | Part::ImageUrl(_)
            | Part::ToolResult { .. }
            | Part::Thinking { .. } => {
                return Err(shared::misplaced(origin, field, "an assistant turn"));
            }
        }
    }
    let content = match texts.as_slice() {
        [] if calls.is_empty() => return Ok(None),
        [] => Value::Null,
        [text] => json!(text),
        texts => texts
            .iter()
            .map(|text| json!({"type": "text", "text": text}))
            .collect(),
    };
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    message.insert("content".into(), content);
    if !calls.is_empty() {
        message.insert("tool_calls".into(), Value::Array(calls));
    }
    Ok(Some(Value::Object(message)))
}
