//! The OpenAI responses decoder: a `/v1/responses` body into the canonical request. Stateless
//! only (SPEC): whatever refers to state kept by OpenAI (`previous_response_id`, `conversation`,
//! `prompt`, `store: true`, `background`) is refused. Never encodes.

use serde_json::Value;

use crate::ir::{Part, Request, Role};
use crate::request::decode_shared::{self as shared, Conversation, Nesting};
use crate::request::json::{self, Object};
use crate::request::origin::Origin;
use crate::{Format, Refusal};

const TEXT_TYPES: &[&str] = &["input_text", "output_text"];

/// Decodes a responses body.
pub(in crate::request) fn decode(body: &Object) -> Result<(Request, Origin), Refusal> {
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
    request.tools = shared::openai_tools(body, Nesting::Flat)?;
    request.tool_choice = shared::openai_tool_choice(body, Nesting::Flat)?;
    request.parallel_tool_calls = json::opt_bool(body, "parallel_tool_calls", "")?;
    request.temperature = json::opt_f64(body, "temperature", "")?;
    request.top_p = json::opt_f64(body, "top_p", "")?;
    request.max_output_tokens = json::opt_u64(body, "max_output_tokens", "")?;
    if let Some(reasoning) = json::opt_object(body, "reasoning", "")?
        && let Some(effort) = json::opt_str(reasoning, "effort", "reasoning")?
    {
        request.reasoning = Some(shared::openai_effort(effort, "reasoning.effort")?);
    }
    if let Some(text) = json::opt_object(body, "text", "")?
        && let Some(format) = json::opt_object(text, "format", "text")?
    {
        request.response_format =
            shared::openai_response_format(format, "text.format", Nesting::Flat)?;
    }
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

/// Message content: text and images; `refusal` parts (history the model wrote) are dropped.
fn message_content(content: &Value, path: &str) -> Result<Vec<(Part, String)>, Refusal> {
    shared::content(content, path, |item, kind, path| match kind {
        "input_text" | "output_text" => Ok(Some(Part::Text(
            json::req_str(item, "text", path)?.to_string(),
        ))),
        "input_image" => {
            if json::field(item, "file_id").is_some() {
                return Err(json::unsupported(
                    &json::at(path, "file_id"),
                    "uploaded files are not translated; send the image as a data URL",
                ));
            }
            let url = json::req_str(item, "image_url", path)?;
            shared::image_url(url, &json::at(path, "image_url")).map(Some)
        }
        "refusal" => Ok(None),
        _ => Err(json::unsupported(
            &json::at(path, "type"),
            "only input_text, output_text and input_image parts are translated",
        )),
    })
}
