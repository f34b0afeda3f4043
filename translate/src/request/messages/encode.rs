//! The Anthropic Messages encoder: the canonical request into a `/v1/messages` body for an
//! Anthropic account (or an Anthropic-compatible one: `system` is always a plain string).
//! Enforces what Messages rejects (notes §10): no empty text, alternating roles, tool results
//! first and together, no trailing whitespace in a final assistant turn. Never decodes.

use serde_json::{Map, Value, json};

use crate::Refusal;
use crate::ir::{Effort, Part, Reasoning, Request, ResponseFormat, Role, ToolChoice};
use crate::request::Options;
use crate::request::encode_shared as shared;
use crate::request::origin::{Field, Origin};

/// Anthropic's smallest thinking budget.
const MIN_BUDGET: u64 = 1024;

/// Encodes `request` as a Messages body.
pub(in crate::request) fn encode(
    request: &Request,
    options: &Options,
    origin: &Origin,
) -> Result<Value, Refusal> {
    let mut body = Map::new();
    body.insert("model".into(), json!(request.model));
    let max_tokens = request
        .max_output_tokens
        .unwrap_or(options.default_max_tokens);
    body.insert("max_tokens".into(), json!(max_tokens));
    if let Some(system) = shared::system(request) {
        body.insert("system".into(), json!(system));
    }
    body.insert("messages".into(), Value::Array(messages(request, origin)?));
    if !request.tools.is_empty() {
        let tools = request.tools.iter().map(|tool| {
            let mut out = Map::new();
            out.insert("name".into(), json!(tool.name));
            if let Some(description) = &tool.description {
                out.insert("description".into(), json!(description));
            }
            let schema = if shared::empty_schema(&tool.parameters) {
                json!({"type": "object", "properties": {}})
            } else {
                tool.parameters.clone()
            };
            out.insert("input_schema".into(), schema);
            Value::Object(out)
        });
        body.insert("tools".into(), tools.collect());
        if let Some(choice) = tool_choice(request) {
            body.insert("tool_choice".into(), choice);
        }
    }
    if let Some(temperature) = request.temperature {
        if temperature > 1.0 {
            let param = origin.name(Field::Temperature);
            return Err(Refusal::new(
                format!("`{param}` above 1 cannot be sent to this supplier, whose range is 0 to 1"),
                param,
            ));
        }
        body.insert("temperature".into(), json!(temperature));
    }
    if let Some(top_p) = request.top_p {
        body.insert("top_p".into(), json!(top_p));
    }
    if let Some(top_k) = request.top_k {
        body.insert("top_k".into(), json!(top_k));
    }
    if !request.stop.is_empty() {
        body.insert("stop_sequences".into(), json!(request.stop));
    }
    if let Some(thinking) = thinking(request.reasoning, max_tokens, origin)? {
        body.insert("thinking".into(), thinking);
    }
    let schema = match &request.response_format {
        None => None,
        Some(ResponseFormat::JsonObject) => Some(json!({"type": "object"})),
        Some(ResponseFormat::JsonSchema { schema, .. }) => Some(schema.clone()),
    };
    if let Some(schema) = schema {
        body.insert(
            "output_config".into(),
            json!({"format": {"type": "json_schema", "schema": schema}}),
        );
    }
    if let Some(user) = &request.user {
        body.insert("metadata".into(), json!({"user_id": user}));
    }
    if request.stream {
        body.insert("stream".into(), json!(true));
    }
    Ok(Value::Object(body))
}

/// The tool choice, carrying `parallel_tool_calls: false` as `disable_parallel_tool_use`.
fn tool_choice(request: &Request) -> Option<Value> {
    let mut choice = match &request.tool_choice {
        None if request.parallel_tool_calls == Some(false) => json!({"type": "auto"}),
        None => return None,
        Some(ToolChoice::Auto) => json!({"type": "auto"}),
        Some(ToolChoice::Required) => json!({"type": "any"}),
        Some(ToolChoice::Tool(name)) => json!({"type": "tool", "name": name}),
        // `none` takes no other field.
        Some(ToolChoice::None) => return Some(json!({"type": "none"})),
    };
    if request.parallel_tool_calls == Some(false)
        && let Some(choice) = choice.as_object_mut()
    {
        choice.insert("disable_parallel_tool_use".into(), json!(true));
    }
    Some(choice)
}

/// `thinking`: a budget as given (refused outside Anthropic's bounds), an effort as a budget
/// capped to half the output cap (omitted below Anthropic's minimum), off as `disabled`.
fn thinking(
    reasoning: Option<Reasoning>,
    max_tokens: u64,
    origin: &Origin,
) -> Result<Option<Value>, Refusal> {
    match reasoning {
        None => Ok(None),
        Some(Reasoning::Disabled) => Ok(Some(json!({"type": "disabled"}))),
        Some(Reasoning::Budget(budget)) => {
            if budget < MIN_BUDGET || budget >= max_tokens {
                let param = origin.name(Field::Reasoning);
                return Err(Refusal::new(
                    format!(
                        "`{param}` must be at least {MIN_BUDGET} and less than the output cap \
                         ({max_tokens}) for this supplier"
                    ),
                    param,
                ));
            }
            Ok(Some(json!({"type": "enabled", "budget_tokens": budget})))
        }
        Some(Reasoning::Effort(effort)) => {
            let budget = match effort {
                Effort::Minimal | Effort::Low => 1024,
                Effort::Medium => 4096,
                Effort::High => 16384,
            };
            let budget = u64::min(budget, max_tokens / 2);
            Ok((budget >= MIN_BUDGET).then(|| json!({"type": "enabled", "budget_tokens": budget})))
        }
    }
}

/// Whether a part survives into a Messages body: no blank text (rejected), no unsigned or
/// user-side thinking (rejected without its signature).
fn keep(role: Role, part: &Part) -> bool {
    match part {
        Part::Text(text) => !text.trim().is_empty(),
        Part::Thinking { signature, .. } => role == Role::Assistant && signature.is_some(),
        Part::Image { .. }
        | Part::ImageUrl(_)
        | Part::ToolCall { .. }
        | Part::ToolResult { .. } => true,
    }
}

fn messages(request: &Request, origin: &Origin) -> Result<Vec<Value>, Refusal> {
    let turns = shared::turns(request, keep);
    let mut messages = Vec::with_capacity(turns.len());
    for mut turn in turns {
        let role = match turn.role {
            Role::User => {
                shared::tool_results_first(&mut turn);
                "user"
            }
            Role::Assistant => "assistant",
        };
        let blocks = turn
            .parts
            .iter()
            .map(|&(field, part)| block(turn.role, field, part, origin))
            .collect::<Result<Vec<_>, _>>()?;
        messages.push(json!({"role": role, "content": blocks}));
    }
    trim_final_assistant(&mut messages);
    Ok(messages)
}

/// Trims trailing whitespace from the last text of a final assistant turn (Messages rejects it;
/// blank texts are already gone, so the text stays non-empty).
fn trim_final_assistant(messages: &mut [Value]) {
    let Some(last) = messages.last_mut() else {
        return;
    };
    if last.get("role") != Some(&json!("assistant")) {
        return;
    }
    let Some(Value::Object(block)) = last
        .get_mut("content")
        .and_then(Value::as_array_mut)
        .and_then(|blocks| blocks.last_mut())
    else {
        return;
    };
    if block.get("type") == Some(&json!("text"))
        && let Some(Value::String(text)) = block.get_mut("text")
    {
        text.truncate(text.trim_end().len());
    }
}

fn block(role: Role, field: Field, part: &Part, origin: &Origin) -> Result<Value, Refusal> {
    Ok(match part {
        Part::Text(text) => json!({"type": "text", "text": text}),
        Part::Image { media_type, data } => json!({
            "type": "image",
            "source": {"type": "base64", "media_type": media_type, "data": data},
        }),
        Part::ImageUrl(url) => json!({"type": "image", "source": {"type": "url", "url": url}}),
        Part::ToolCall {
            id,
            name,
            arguments,
        } => {
            if role != Role::Assistant {
                return Err(shared::misplaced(origin, field, "a user turn"));
            }
            let id = crate::signature::bare_id(id);
            json!({"type": "tool_use", "id": id, "name": name, "input": arguments})
        }
        Part::ToolResult {
            id,
            content,
            is_error,
            ..
        } => {
            if role != Role::User {
                return Err(shared::misplaced(origin, field, "an assistant turn"));
            }
            let mut result = Map::new();
            result.insert("type".into(), json!("tool_result"));
            result.insert("tool_use_id".into(), json!(crate::signature::bare_id(id)));
            if !content.is_empty() {
                result.insert("content".into(), json!(content));
            }
            if *is_error {
                result.insert("is_error".into(), json!(true));
            }
            Value::Object(result)
        }
        Part::Thinking { text, signature } => {
            json!({"type": "thinking", "thinking": text, "signature": signature})
        }
    })
}
