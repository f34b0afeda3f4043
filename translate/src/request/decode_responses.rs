//! The OpenAI responses decoder: a `/v1/responses` body into the canonical request. Stateless
//! only (SPEC): whatever refers to state kept by OpenAI (`previous_response_id`, `conversation`,
//! `prompt`, `store: true`, `background`) is refused. Never encodes.

use serde_json::{Map, Value};

use super::decode_shared::{self as shared, Conversation};
use super::json::{self, Object};
use super::origin::Origin;
use crate::ir::{Part, Request, ResponseFormat, Role, Tool, ToolChoice};
use crate::{Format, Refusal};

const TEXT_TYPES: &[&str] = &["input_text", "output_text"];

/// Decodes a responses body.
pub(super) fn decode(body: &Object) -> Result<(Request, Origin), Refusal> {
    refuse_unsupported(body)?;
    let mut request = shared::common(body)?;
    if let Some(instructions) = json::opt_str(body, "instructions", "")? {
        request.system.push(instructions.to_string());
    }
    let mut conversation = Conversation::default();
    match json::required(body, "input", "")? {
        Value::String(text) => {
            conversation.push(
                Role::User,
                vec![(Part::Text(text.clone()), "input".to_string())],
            );
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                let path = json::index("input", i);
                decode_item(item, &path, &mut request, &mut conversation)?;
            }
        }
        _ => return Err(json::malformed("input", "a string or an array of items")),
    }
    request.tools = tools(body)?;
    request.tool_choice = tool_choice(body)?;
    request.parallel_tool_calls = json::opt_bool(body, "parallel_tool_calls", "")?;
    request.temperature = json::opt_f64(body, "temperature", "")?;
    request.top_p = json::opt_f64(body, "top_p", "")?;
    request.max_output_tokens = json::opt_u64(body, "max_output_tokens", "")?;
    if let Some(reasoning) = json::opt_object(body, "reasoning", "")?
        && let Some(effort) = json::opt_str(reasoning, "effort", "reasoning")?
    {
        request.reasoning = Some(shared::openai_effort(effort, "reasoning.effort")?);
    }
    request.response_format = response_format(body)?;
    request.user = json::opt_str(body, "user", "")?.map(str::to_string);
    let origin = conversation.finish(Format::Responses, &mut request);
    Ok((request, origin))
}

/// State kept by OpenAI, and what else the canonical form cannot carry.
fn refuse_unsupported(body: &Object) -> Result<(), Refusal> {
    if json::opt_bool(body, "store", "")? == Some(true) {
        return Err(json::unsupported(
            "store",
            "the gateway is stateless; send `store: false` and the whole conversation",
        ));
    }
    if json::opt_bool(body, "background", "")? == Some(true) {
        return Err(json::unsupported(
            "background",
            "background responses need stored state",
        ));
    }
    for key in ["previous_response_id", "conversation", "prompt"] {
        if json::field(body, key).is_some() {
            return Err(json::unsupported(
                key,
                "the gateway is stateless; send the whole conversation in `input`",
            ));
        }
    }
    if json::field(body, "top_logprobs").is_some() {
        return Err(json::unsupported(
            "top_logprobs",
            "log probabilities are not translated",
        ));
    }
    Ok(())
}

fn decode_item(
    item: &Value,
    path: &str,
    request: &mut Request,
    conversation: &mut Conversation,
) -> Result<(), Refusal> {
    let item = json::as_object(item, path)?;
    match json::opt_str(item, "type", path)?.unwrap_or("message") {
        "message" => {
            let content_path = json::at(path, "content");
            let content = json::required(item, "content", path)?;
            match json::req_str(item, "role", path)? {
                "system" | "developer" => {
                    request
                        .system
                        .extend(shared::texts(content, &content_path, TEXT_TYPES)?);
                }
                "user" => conversation.push(Role::User, message_content(content, &content_path)?),
                "assistant" => {
                    conversation.push(Role::Assistant, message_content(content, &content_path)?);
                }
                _ => {
                    return Err(json::malformed(
                        &json::at(path, "role"),
                        "one of user, assistant, system, developer",
                    ));
                }
            }
        }
        "function_call" => {
            let arguments = json::req_str(item, "arguments", path)?;
            let call = Part::ToolCall {
                id: json::req_str(item, "call_id", path)?.to_string(),
                name: json::req_str(item, "name", path)?.to_string(),
                arguments: shared::arguments(arguments, &json::at(path, "arguments"))?,
            };
            conversation.push(Role::Assistant, vec![(call, path.to_string())]);
        }
        "function_call_output" => {
            let id = json::req_str(item, "call_id", path)?;
            let output = json::required(item, "output", path)?;
            let output = shared::texts(output, &json::at(path, "output"), TEXT_TYPES)?;
            let result = Part::ToolResult {
                id: id.to_string(),
                name: conversation.tool_name(id),
                content: output.join(shared::TOOL_TEXT_SEPARATOR),
                is_error: false,
            };
            conversation.push(Role::User, vec![(result, path.to_string())]);
        }
        // Reasoning from an earlier response: opaque to every other supplier.
        "reasoning" => {}
        _ => {
            return Err(json::unsupported(
                &json::at(path, "type"),
                "only message, function_call, function_call_output and reasoning items are translated",
            ));
        }
    }
    Ok(())
}

fn message_content(content: &Value, path: &str) -> Result<Vec<(Part, String)>, Refusal> {
    if let Some(text) = content.as_str() {
        return Ok(vec![(Part::Text(text.to_string()), path.to_string())]);
    }
    let items = json::as_array(content, path)?;
    let mut parts = Vec::with_capacity(items.len());
    for (j, item) in items.iter().enumerate() {
        let part_path = json::index(path, j);
        let item = json::as_object(item, &part_path)?;
        let part = match json::req_str(item, "type", &part_path)? {
            "input_text" | "output_text" => {
                Part::Text(json::req_str(item, "text", &part_path)?.to_string())
            }
            "input_image" => {
                if json::field(item, "file_id").is_some() {
                    return Err(json::unsupported(
                        &json::at(&part_path, "file_id"),
                        "uploaded files are not translated; send the image as a data URL",
                    ));
                }
                let url = json::req_str(item, "image_url", &part_path)?;
                shared::image_url(url, &json::at(&part_path, "image_url"))?
            }
            // A refusal the model wrote earlier: history only.
            "refusal" => continue,
            _ => {
                return Err(json::unsupported(
                    &json::at(&part_path, "type"),
                    "only input_text, output_text and input_image parts are translated",
                ));
            }
        };
        parts.push((part, part_path));
    }
    Ok(parts)
}

fn tools(body: &Object) -> Result<Vec<Tool>, Refusal> {
    let mut tools = Vec::new();
    for (i, tool) in json::opt_array(body, "tools", "")?.iter().enumerate() {
        let path = json::index("tools", i);
        let tool = json::as_object(tool, &path)?;
        if json::req_str(tool, "type", &path)? != "function" {
            return Err(json::unsupported(
                &json::at(&path, "type"),
                "only function tools are translated",
            ));
        }
        tools.push(Tool {
            name: json::req_str(tool, "name", &path)?.to_string(),
            description: json::opt_str(tool, "description", &path)?.map(str::to_string),
            parameters: match json::opt_object(tool, "parameters", &path)? {
                Some(parameters) => Value::Object(parameters.clone()),
                None => Value::Null,
            },
        });
    }
    Ok(tools)
}

fn tool_choice(body: &Object) -> Result<Option<ToolChoice>, Refusal> {
    let Some(choice) = json::field(body, "tool_choice") else {
        return Ok(None);
    };
    if let Some(mode) = choice.as_str() {
        return shared::openai_tool_choice_mode(mode, "tool_choice").map(Some);
    }
    let choice = json::as_object(choice, "tool_choice")?;
    if json::req_str(choice, "type", "tool_choice")? != "function" {
        return Err(json::unsupported(
            "tool_choice.type",
            "only function tool choices are translated",
        ));
    }
    let name = json::req_str(choice, "name", "tool_choice")?;
    Ok(Some(ToolChoice::Tool(name.to_string())))
}

fn response_format(body: &Object) -> Result<Option<ResponseFormat>, Refusal> {
    let Some(text) = json::opt_object(body, "text", "")? else {
        return Ok(None);
    };
    let Some(format) = json::opt_object(text, "format", "text")? else {
        return Ok(None);
    };
    let path = "text.format";
    match json::req_str(format, "type", path)? {
        "text" => Ok(None),
        "json_object" => Ok(Some(ResponseFormat::JsonObject)),
        "json_schema" => Ok(Some(ResponseFormat::JsonSchema {
            name: json::req_str(format, "name", path)?.to_string(),
            schema: json::field(format, "schema")
                .cloned()
                .unwrap_or_else(|| Value::Object(Map::new())),
            strict: json::opt_bool(format, "strict", path)?,
        })),
        _ => Err(json::unsupported(
            "text.format.type",
            "only text, json_object and json_schema are translated",
        )),
    }
}
