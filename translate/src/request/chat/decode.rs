//! The OpenAI chat completions decoder: a `/v1/chat/completions` body into the canonical request.
//! Refuses what no other format can carry (see the table in [`super`]); never encodes.

use serde_json::Value;

use crate::ir::{Part, Request, Role};
use crate::request::decode_shared::{self as shared, Conversation, Nesting};
use crate::request::json::{self, Object};
use crate::request::origin::Origin;
use crate::{Format, Refusal};

/// Decodes a chat completions body.
pub(in crate::request) fn decode(body: &Object) -> Result<(Request, Origin), Refusal> {
    refuse_unsupported(body)?;
    let mut request = shared::common(body)?;
    let mut conversation = Conversation::default();
    for (i, message) in json::req_array(body, "messages", "")?.iter().enumerate() {
        let path = json::index("messages", i);
        decode_message(message, &path, &mut request, &mut conversation)?;
    }
    request.tools = shared::openai_tools(body, Nesting::Nested)?;
    request.tool_choice = shared::openai_tool_choice(body, Nesting::Nested)?;
    request.parallel_tool_calls = json::opt_bool(body, "parallel_tool_calls", "")?;
    request.temperature = json::opt_f64(body, "temperature", "")?;
    request.top_p = json::opt_f64(body, "top_p", "")?;
    request.stop = stop(body)?;
    request.max_output_tokens = match (
        json::opt_u64(body, "max_completion_tokens", "")?,
        json::opt_u64(body, "max_tokens", "")?,
    ) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    if let Some(effort) = json::opt_str(body, "reasoning_effort", "")? {
        request.reasoning = Some(shared::openai_effort(effort, "reasoning_effort")?);
    }
    if let Some(format) = json::opt_object(body, "response_format", "")? {
        request.response_format =
            shared::openai_response_format(format, "response_format", Nesting::Nested)?;
    }
    request.user = json::opt_str(body, "user", "")?.map(str::to_string);
    let origin = conversation.finish(Format::Chat, &mut request);
    Ok((request, origin))
}

/// The top-level fields that change the answer and that the canonical form cannot carry.
fn refuse_unsupported(body: &Object) -> Result<(), Refusal> {
    if json::opt_u64(body, "n", "")?.is_some_and(|n| n > 1) {
        return Err(json::unsupported("n", "only one choice can be generated"));
    }
    if json::opt_bool(body, "logprobs", "")? == Some(true) {
        return Err(json::unsupported(
            "logprobs",
            "log probabilities are not translated",
        ));
    }
    if json::field(body, "top_logprobs").is_some() {
        return Err(json::unsupported(
            "top_logprobs",
            "log probabilities are not translated",
        ));
    }
    if json::opt_object(body, "logit_bias", "")?.is_some_and(|bias| !bias.is_empty()) {
        return Err(json::unsupported(
            "logit_bias",
            "token ids differ between suppliers",
        ));
    }
    for (i, modality) in json::opt_array(body, "modalities", "")?.iter().enumerate() {
        if json::as_str(modality, &json::index("modalities", i))? != "text" {
            return Err(json::unsupported(
                "modalities",
                "only text output is translated",
            ));
        }
    }
    for (key, why) in [
        ("audio", "audio output is not translated"),
        ("prediction", "predicted outputs are not translated"),
        ("web_search_options", "web search is not translated"),
        (
            "functions",
            "the deprecated `functions` are not translated; send `tools`",
        ),
        (
            "function_call",
            "the deprecated `function_call` is not translated; send `tool_choice`",
        ),
    ] {
        if json::field(body, key).is_some() {
            return Err(json::unsupported(key, why));
        }
    }
    Ok(())
}

fn decode_message(
    message: &Value,
    path: &str,
    request: &mut Request,
    conversation: &mut Conversation,
) -> Result<(), Refusal> {
    let message = json::as_object(message, path)?;
    let content_path = json::at(path, "content");
    match json::req_str(message, "role", path)? {
        "system" | "developer" => {
            let content = json::required(message, "content", path)?;
            request
                .system
                .extend(shared::texts(content, &content_path, &["text"])?);
        }
        "user" => {
            let content = json::required(message, "content", path)?;
            conversation.push(Role::User, user_content(content, &content_path)?);
        }
        "assistant" => {
            for key in ["function_call", "audio"] {
                if json::field(message, key).is_some() {
                    return Err(json::unsupported(&json::at(path, key), "not translated"));
                }
            }
            let mut parts = match json::field(message, "content") {
                Some(content) => assistant_content(content, &content_path)?,
                None => Vec::new(),
            };
            for (k, call) in json::opt_array(message, "tool_calls", path)?
                .iter()
                .enumerate()
            {
                let call_path = json::index(&json::at(path, "tool_calls"), k);
                parts.push((tool_call(call, &call_path)?, call_path));
            }
            conversation.push(Role::Assistant, parts);
        }
        "tool" => {
            let id = json::req_str(message, "tool_call_id", path)?;
            let content = json::required(message, "content", path)?;
            let content = shared::texts(content, &content_path, &["text"])?;
            let result = Part::ToolResult {
                id: id.to_string(),
                name: conversation.tool_name(id),
                content: content.join(shared::TOOL_TEXT_SEPARATOR),
                is_error: false,
            };
            conversation.push(Role::User, vec![(result, path.to_string())]);
        }
        "function" => {
            return Err(json::unsupported(
                &json::at(path, "role"),
                "the deprecated `function` role is not translated; send `tool` messages",
            ));
        }
        _ => {
            return Err(json::malformed(
                &json::at(path, "role"),
                "one of system, developer, user, assistant, tool",
            ));
        }
    }
    Ok(())
}

fn user_content(content: &Value, path: &str) -> Result<Vec<(Part, String)>, Refusal> {
    shared::content(content, path, |item, kind, path| match kind {
        "text" => Ok(Some(Part::Text(
            json::req_str(item, "text", path)?.to_string(),
        ))),
        "image_url" => {
            let image_path = json::at(path, "image_url");
            let image = json::req_object(item, "image_url", path)?;
            let url = json::req_str(image, "url", &image_path)?;
            shared::image_url(url, &json::at(&image_path, "url")).map(Some)
        }
        _ => Err(json::unsupported(
            &json::at(path, "type"),
            "only text and image_url parts are translated",
        )),
    })
}

/// Assistant content: text, with `refusal` parts dropped (history the model wrote).
fn assistant_content(content: &Value, path: &str) -> Result<Vec<(Part, String)>, Refusal> {
    shared::content(content, path, |item, kind, path| match kind {
        "text" => Ok(Some(Part::Text(
            json::req_str(item, "text", path)?.to_string(),
        ))),
        "refusal" => Ok(None),
        _ => Err(json::unsupported(
            &json::at(path, "type"),
            "assistant content can only hold text",
        )),
    })
}

fn tool_call(call: &Value, path: &str) -> Result<Part, Refusal> {
    let call = json::as_object(call, path)?;
    if let Some(kind) = json::opt_str(call, "type", path)?
        && kind != "function"
    {
        return Err(json::unsupported(
            &json::at(path, "type"),
            "only function tool calls are translated",
        ));
    }
    let function_path = json::at(path, "function");
    let function = json::req_object(call, "function", path)?;
    let arguments = json::req_str(function, "arguments", &function_path)?;
    Ok(Part::ToolCall {
        id: json::req_str(call, "id", path)?.to_string(),
        name: json::req_str(function, "name", &function_path)?.to_string(),
        arguments: shared::arguments(arguments, &json::at(&function_path, "arguments"))?,
    })
}

fn stop(body: &Object) -> Result<Vec<String>, Refusal> {
    match json::field(body, "stop") {
        None => Ok(Vec::new()),
        Some(Value::String(stop)) => Ok(vec![stop.clone()]),
        Some(Value::Array(stops)) => stops
            .iter()
            .enumerate()
            .map(|(i, stop)| json::as_str(stop, &json::index("stop", i)).map(str::to_string))
            .collect(),
        Some(_) => Err(json::malformed("stop", "a string or an array of strings")),
    }
}
