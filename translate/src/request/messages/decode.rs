//! The Anthropic Messages decoder: a `/v1/messages` body into the canonical request. Refuses
//! server tools, documents and containers (see the table in [`super`]); never encodes.

use serde_json::Value;

use crate::ir::{Effort, Part, Reasoning, Request, ResponseFormat, Role, Tool, ToolChoice};
use crate::request::decode_shared::{self as shared, Conversation};
use crate::request::json::{self, Object};
use crate::request::origin::Origin;
use crate::{Format, Refusal};

/// Decodes a Messages body.
pub(in crate::request) fn decode(body: &Object) -> Result<(Request, Origin), Refusal> {
    for (key, why) in [
        ("container", "code execution containers are not translated"),
        ("mcp_servers", "MCP servers are not translated"),
    ] {
        if json::field(body, key).is_some() {
            return Err(json::unsupported(key, why));
        }
    }
    let mut request = shared::common(body)?;
    if let Some(system) = json::field(body, "system") {
        request.system = shared::texts(system, "system", &["text"])?;
    }
    let mut conversation = Conversation::default();
    for (i, message) in json::req_array(body, "messages", "")?.iter().enumerate() {
        let path = json::index("messages", i);
        decode_message(message, &path, &mut conversation)?;
    }
    request.tools = tools(body)?;
    if let Some(choice) = json::opt_object(body, "tool_choice", "")? {
        request.tool_choice = Some(tool_choice(choice)?);
        if let Some(disable) = json::opt_bool(choice, "disable_parallel_tool_use", "tool_choice")? {
            request.parallel_tool_calls = Some(!disable);
        }
    }
    request.max_output_tokens = Some(json::req_u64(body, "max_tokens", "")?);
    request.temperature = json::opt_f64(body, "temperature", "")?;
    request.top_p = json::opt_f64(body, "top_p", "")?;
    request.top_k = json::opt_u64(body, "top_k", "")?;
    for (i, stop) in json::opt_array(body, "stop_sequences", "")?
        .iter()
        .enumerate()
    {
        let stop = json::as_str(stop, &json::index("stop_sequences", i))?;
        request.stop.push(stop.to_string());
    }
    let output_config = json::opt_object(body, "output_config", "")?;
    let effort = match output_config {
        Some(config) => json::opt_str(config, "effort", "output_config")?
            .map(|effort| anthropic_effort(effort, "output_config.effort"))
            .transpose()?,
        None => None,
    };
    request.reasoning = match json::opt_object(body, "thinking", "")? {
        Some(thinking) => Some(match json::req_str(thinking, "type", "thinking")? {
            "enabled" => Reasoning::Budget(json::req_u64(thinking, "budget_tokens", "thinking")?),
            "disabled" => Reasoning::Disabled,
            "adaptive" => Reasoning::Effort(effort.unwrap_or(Effort::Medium)),
            _ => {
                return Err(json::malformed(
                    "thinking.type",
                    "one of enabled, disabled, adaptive",
                ));
            }
        }),
        None => effort.map(Reasoning::Effort),
    };
    if let Some(config) = output_config
        && let Some(format) = json::opt_object(config, "format", "output_config")?
    {
        let path = "output_config.format";
        if json::req_str(format, "type", path)? != "json_schema" {
            return Err(json::unsupported(
                "output_config.format.type",
                "only json_schema is translated",
            ));
        }
        request.response_format = Some(ResponseFormat::JsonSchema {
            name: "response".to_string(),
            schema: json::required(format, "schema", path)?.clone(),
            strict: None,
        });
    }
    if let Some(metadata) = json::opt_object(body, "metadata", "")? {
        request.user = json::opt_str(metadata, "user_id", "metadata")?.map(str::to_string);
    }
    let origin = conversation.finish(Format::Messages, &mut request);
    Ok((request, origin))
}

fn anthropic_effort(text: &str, path: &str) -> Result<Effort, Refusal> {
    match text {
        "low" => Ok(Effort::Low),
        "medium" => Ok(Effort::Medium),
        "high" | "xhigh" | "max" => Ok(Effort::High),
        _ => Err(json::malformed(
            path,
            "one of low, medium, high, xhigh, max",
        )),
    }
}

fn decode_message(
    message: &Value,
    path: &str,
    conversation: &mut Conversation,
) -> Result<(), Refusal> {
    let message = json::as_object(message, path)?;
    let role = match json::req_str(message, "role", path)? {
        "user" => Role::User,
        "assistant" => Role::Assistant,
        _ => {
            return Err(json::malformed(
                &json::at(path, "role"),
                "one of user, assistant",
            ));
        }
    };
    let content = json::required(message, "content", path)?;
    let parts = shared::content(content, &json::at(path, "content"), |block, kind, path| {
        block_part(block, kind, path, role, conversation)
    })?;
    conversation.push(role, parts);
    Ok(())
}

/// One content block; `None` for a block that is dropped (`redacted_thinking`).
fn block_part(
    block: &Object,
    kind: &str,
    path: &str,
    role: Role,
    conversation: &Conversation,
) -> Result<Option<Part>, Refusal> {
    let type_path = json::at(path, "type");
    let misplaced = |expected: Role| {
        if role == expected {
            Ok(())
        } else {
            let turn = match expected {
                Role::User => "a user",
                Role::Assistant => "an assistant",
            };
            Err(Refusal::new(
                format!("`{type_path}`: a `{kind}` block belongs in {turn} turn"),
                type_path.clone(),
            ))
        }
    };
    Ok(Some(match kind {
        "text" => Part::Text(json::req_str(block, "text", path)?.to_string()),
        "image" => image(block, path)?,
        "tool_use" => {
            misplaced(Role::Assistant)?;
            Part::ToolCall {
                id: json::req_str(block, "id", path)?.to_string(),
                name: json::req_str(block, "name", path)?.to_string(),
                arguments: Value::Object(json::req_object(block, "input", path)?.clone()),
            }
        }
        "tool_result" => {
            misplaced(Role::User)?;
            let id = json::req_str(block, "tool_use_id", path)?;
            let content = match json::field(block, "content") {
                Some(content) => shared::texts(content, &json::at(path, "content"), &["text"])?
                    .join(shared::TOOL_TEXT_SEPARATOR),
                None => String::new(),
            };
            Part::ToolResult {
                id: id.to_string(),
                name: conversation.tool_name(id),
                content,
                is_error: json::opt_bool(block, "is_error", path)?.unwrap_or(false),
            }
        }
        "thinking" => Part::Thinking {
            text: json::req_str(block, "thinking", path)?.to_string(),
            signature: json::opt_str(block, "signature", path)?.map(str::to_string),
        },
        // Encrypted reasoning only Anthropic can read.
        "redacted_thinking" => return Ok(None),
        _ => {
            return Err(json::unsupported(
                &type_path,
                "only text, image, tool_use, tool_result and thinking blocks are translated",
            ));
        }
    }))
}

fn image(block: &Object, path: &str) -> Result<Part, Refusal> {
    let source_path = json::at(path, "source");
    let source = json::req_object(block, "source", path)?;
    match json::req_str(source, "type", &source_path)? {
        "base64" => Ok(Part::Image {
            media_type: json::req_str(source, "media_type", &source_path)?.to_string(),
            data: json::req_str(source, "data", &source_path)?.to_string(),
        }),
        "url" => {
            let url = json::req_str(source, "url", &source_path)?;
            shared::image_url(url, &json::at(&source_path, "url"))
        }
        _ => Err(json::unsupported(
            &json::at(&source_path, "type"),
            "only base64 and url image sources are translated",
        )),
    }
}

fn tools(body: &Object) -> Result<Vec<Tool>, Refusal> {
    let mut tools = Vec::new();
    for (i, tool) in json::opt_array(body, "tools", "")?.iter().enumerate() {
        let path = json::index("tools", i);
        let tool = json::as_object(tool, &path)?;
        if json::opt_str(tool, "type", &path)?.is_some_and(|kind| kind != "custom") {
            return Err(json::unsupported(&path, "server tools are not translated"));
        }
        tools.push(Tool {
            name: json::req_str(tool, "name", &path)?.to_string(),
            description: json::opt_str(tool, "description", &path)?.map(str::to_string),
            parameters: Value::Object(json::req_object(tool, "input_schema", &path)?.clone()),
        });
    }
    Ok(tools)
}

fn tool_choice(choice: &Object) -> Result<ToolChoice, Refusal> {
    match json::req_str(choice, "type", "tool_choice")? {
        "auto" => Ok(ToolChoice::Auto),
        "any" => Ok(ToolChoice::Required),
        "none" => Ok(ToolChoice::None),
        "tool" => Ok(ToolChoice::Tool(
            json::req_str(choice, "name", "tool_choice")?.to_string(),
        )),
        _ => Err(json::malformed(
            "tool_choice.type",
            "one of auto, any, tool, none",
        )),
    }
}
