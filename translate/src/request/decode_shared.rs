//! What the three decoders share: the conversation being built (canonical turns, the client path
//! of each part, the names of the tool calls seen so far) and readers for the shapes several
//! formats have in common (image URLs, JSON-string arguments, OpenAI reasoning efforts, text-only
//! content). Knows no format's top-level layout.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::json::{self, Object};
use super::origin::Origin;
use crate::ir::{Effort, Message, Part, Reasoning, Request, Role};
use crate::{Format, Refusal};

/// How the texts of one tool result sent as several text parts are joined.
pub(super) const TOOL_TEXT_SEPARATOR: &str = "\n";

/// The conversation a decoder builds, turn by turn.
#[derive(Debug, Default)]
pub(super) struct Conversation {
    messages: Vec<Message>,
    paths: Vec<Vec<String>>,
    /// Tool-call id → name, for results in formats that only carry the id.
    names: HashMap<String, String>,
}

impl Conversation {
    /// Appends a turn; `parts` pairs each part with its client path. An empty turn is skipped.
    pub(super) fn push(&mut self, role: Role, parts: Vec<(Part, String)>) {
        if parts.is_empty() {
            return;
        }
        for (part, _) in &parts {
            if let Part::ToolCall { id, name, .. } = part {
                self.names.insert(id.clone(), name.clone());
            }
        }
        let (parts, paths): (Vec<Part>, Vec<String>) = parts.into_iter().unzip();
        self.messages.push(Message { role, parts });
        self.paths.push(paths);
    }

    /// The name of the earlier tool call `id`, if one was seen.
    pub(super) fn tool_name(&self, id: &str) -> Option<String> {
        self.names.get(id).cloned()
    }

    /// Moves the turns into `request` and their paths into a new origin for `client`.
    pub(super) fn finish(self, client: Format, request: &mut Request) -> Origin {
        request.messages = self.messages;
        Origin {
            client: Some(client),
            parts: self.paths,
        }
    }
}

/// The fields every decoder reads the same way: `model` (present, a string; not kept — the
/// caller sets the upstream model) and `stream`.
pub(super) fn common(body: &Object) -> Result<Request, Refusal> {
    json::req_str(body, "model", "")?;
    Ok(Request {
        stream: json::opt_bool(body, "stream", "")?.unwrap_or(false),
        ..Request::default()
    })
}

/// An image given by URL: a `data:<mime>;base64,<data>` URL becomes an inline image, an
/// `http(s)` URL an image URL; anything else is refused naming `path`.
pub(super) fn image_url(url: &str, path: &str) -> Result<Part, Refusal> {
    if let Some(rest) = url.strip_prefix("data:") {
        let Some((header, data)) = rest.split_once(',') else {
            return Err(json::malformed(path, "a `data:<mime>;base64,<data>` URL"));
        };
        let Some(media_type) = header.strip_suffix(";base64") else {
            return Err(json::malformed(path, "a base64 `data:` URL"));
        };
        if media_type.is_empty() || data.is_empty() {
            return Err(json::malformed(path, "a `data:<mime>;base64,<data>` URL"));
        }
        return Ok(Part::Image {
            media_type: media_type.to_string(),
            data: data.to_string(),
        });
    }
    if url.starts_with("https://") || url.starts_with("http://") {
        return Ok(Part::ImageUrl(url.to_string()));
    }
    Err(json::malformed(
        path,
        "an http(s) URL or a base64 `data:` URL",
    ))
}

/// Tool-call arguments sent as a JSON string, as the object they encode (an empty string, which
/// some clients send for a call without arguments, is `{}`).
pub(super) fn arguments(text: &str, path: &str) -> Result<Value, Refusal> {
    if text.trim().is_empty() {
        return Ok(Value::Object(Map::new()));
    }
    match serde_json::from_str::<Value>(text) {
        Ok(value @ Value::Object(_)) => Ok(value),
        _ => Err(json::malformed(path, "a string holding a JSON object")),
    }
}

/// An OpenAI reasoning effort (`reasoning_effort`, `reasoning.effort`). `none` switches reasoning
/// off; `xhigh` and `max` are the canonical `High`.
pub(super) fn openai_effort(text: &str, path: &str) -> Result<Reasoning, Refusal> {
    Ok(match text {
        "none" => Reasoning::Disabled,
        "minimal" => Reasoning::Effort(Effort::Minimal),
        "low" => Reasoning::Effort(Effort::Low),
        "medium" => Reasoning::Effort(Effort::Medium),
        "high" | "xhigh" | "max" => Reasoning::Effort(Effort::High),
        _ => {
            return Err(json::malformed(
                path,
                "one of none, minimal, low, medium, high, xhigh, max",
            ));
        }
    })
}

/// Text-only content at `path`: a string, or an array of parts whose `type` is one of
/// `text_types` (each with a string `text`). Any other part is refused naming its `type`.
pub(super) fn texts(
    value: &Value,
    path: &str,
    text_types: &[&str],
) -> Result<Vec<String>, Refusal> {
    if let Some(text) = value.as_str() {
        return Ok(vec![text.to_string()]);
    }
    let parts = value
        .as_array()
        .ok_or_else(|| json::malformed(path, "a string or an array of text parts"))?;
    let mut texts = Vec::with_capacity(parts.len());
    for (i, part) in parts.iter().enumerate() {
        let part_path = json::index(path, i);
        let part = json::as_object(part, &part_path)?;
        let kind = json::req_str(part, "type", &part_path)?;
        if !text_types.contains(&kind) {
            return Err(json::unsupported(
                &json::at(&part_path, "type"),
                "only text is accepted here",
            ));
        }
        texts.push(json::req_str(part, "text", &part_path)?.to_string());
    }
    Ok(texts)
}

/// `"auto"`, `"none"`, `"required"` as a canonical tool choice (the OpenAI strings).
pub(super) fn openai_tool_choice_mode(
    text: &str,
    path: &str,
) -> Result<crate::ir::ToolChoice, Refusal> {
    use crate::ir::ToolChoice;
    match text {
        "auto" => Ok(ToolChoice::Auto),
        "none" => Ok(ToolChoice::None),
        "required" => Ok(ToolChoice::Required),
        _ => Err(json::malformed(
            path,
            "one of auto, none, required, or a function",
        )),
    }
}
