//! What the three decoders share: the conversation being built (canonical turns, the client path
//! of each part, the names of the tool calls seen so far) and readers for the shapes several
//! formats have in common (image URLs, JSON-string arguments, OpenAI reasoning efforts, text-only
//! content). Knows no format's top-level layout.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::Head;
use super::json::{self, Object};
use super::origin::Origin;
use super::top::{self, Malformed, TopLevel};
use crate::ir::{
    Effort, Message, Part, Reasoning, Request, ResponseFormat, Role, Tool, ToolChoice,
};
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

/// Message content at `path`: a string (one text part), or an array of typed parts, each read
/// by `part(object, type, path)`, which returns `None` for a part that is dropped. Each part is
/// paired with its client path.
pub(super) fn content(
    value: &Value,
    path: &str,
    mut part: impl FnMut(&Object, &str, &str) -> Result<Option<Part>, Refusal>,
) -> Result<Vec<(Part, String)>, Refusal> {
    if let Some(text) = value.as_str() {
        return Ok(vec![(Part::Text(text.to_string()), path.to_string())]);
    }
    let items = value
        .as_array()
        .ok_or_else(|| json::malformed(path, "a string or an array of parts"))?;
    let mut parts = Vec::with_capacity(items.len());
    for (j, item) in items.iter().enumerate() {
        let item_path = json::index(path, j);
        let item = json::as_object(item, &item_path)?;
        let kind = json::req_str(item, "type", &item_path)?;
        if let Some(decoded) = part(item, kind, &item_path)? {
            parts.push((decoded, item_path));
        }
    }
    Ok(parts)
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

/// Where the OpenAI formats keep a function's fields: chat nests them (`tools[i].function.name`,
/// `tool_choice.function.name`, `response_format.json_schema.name`), responses does not
/// (`tools[i].name`, `tool_choice.name`, `text.format.name`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Nesting {
    /// Chat: under `function` / `json_schema`.
    Nested,
    /// Responses: on the object itself.
    Flat,
}

impl Nesting {
    /// The object holding the fields inside `object` (at `path`), and its path.
    fn inner<'a>(
        self,
        object: &'a Object,
        key: &str,
        path: &str,
    ) -> Result<(&'a Object, String), Refusal> {
        match self {
            Nesting::Nested => Ok((json::req_object(object, key, path)?, json::at(path, key))),
            Nesting::Flat => Ok((object, path.to_string())),
        }
    }
}

/// OpenAI `tools`: function tools only (hosted and custom tools are refused naming
/// `tools[i].type`); `strict` is dropped.
pub(super) fn openai_tools(body: &Object, nesting: Nesting) -> Result<Vec<Tool>, Refusal> {
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
        let (function, path) = nesting.inner(tool, "function", &path)?;
        tools.push(Tool {
            name: json::req_str(function, "name", &path)?.to_string(),
            description: json::opt_str(function, "description", &path)?.map(str::to_string),
            parameters: match json::opt_object(function, "parameters", &path)? {
                Some(parameters) => Value::Object(parameters.clone()),
                None => Value::Null,
            },
        });
    }
    Ok(tools)
}

/// OpenAI `tool_choice`: `"auto"`, `"none"`, `"required"`, or a function by name. Other
/// choices (allowed tools, hosted tools) are refused naming `tool_choice.type`.
pub(super) fn openai_tool_choice(
    body: &Object,
    nesting: Nesting,
) -> Result<Option<ToolChoice>, Refusal> {
    let Some(choice) = json::field(body, "tool_choice") else {
        return Ok(None);
    };
    if let Some(mode) = choice.as_str() {
        return match mode {
            "auto" => Ok(Some(ToolChoice::Auto)),
            "none" => Ok(Some(ToolChoice::None)),
            "required" => Ok(Some(ToolChoice::Required)),
            _ => Err(json::malformed(
                "tool_choice",
                "one of auto, none, required, or a function",
            )),
        };
    }
    let choice = json::as_object(choice, "tool_choice")?;
    if json::req_str(choice, "type", "tool_choice")? != "function" {
        return Err(json::unsupported(
            "tool_choice.type",
            "only function tool choices are translated",
        ));
    }
    let (function, path) = nesting.inner(choice, "function", "tool_choice")?;
    let name = json::req_str(function, "name", &path)?;
    Ok(Some(ToolChoice::Tool(name.to_string())))
}

/// An OpenAI output format object found at `path` (chat `response_format`, responses
/// `text.format`): `text` is no constraint; `json_schema`'s `description` is dropped.
pub(super) fn openai_response_format(
    format: &Object,
    path: &str,
    nesting: Nesting,
) -> Result<Option<ResponseFormat>, Refusal> {
    match json::req_str(format, "type", path)? {
        "text" => Ok(None),
        "json_object" => Ok(Some(ResponseFormat::JsonObject)),
        "json_schema" => {
            let (schema, path) = nesting.inner(format, "json_schema", path)?;
            Ok(Some(ResponseFormat::JsonSchema {
                name: json::req_str(schema, "name", &path)?.to_string(),
                schema: json::field(schema, "schema")
                    .cloned()
                    .unwrap_or_else(|| Value::Object(Map::new())),
                strict: json::opt_bool(schema, "strict", &path)?,
            }))
        }
        _ => Err(json::unsupported(
            &json::at(path, "type"),
            "only text, json_object and json_schema are translated",
        )),
    }
}

/// What the gateway reads of an OpenAI-format body (chat completions or responses), in this
/// order: `model`, `stream`, the conversation field `conversation` checks, `stream_options`,
/// and the smallest of the output caps it sets (`max_tokens`, `max_completion_tokens`,
/// `max_output_tokens`).
pub(super) fn openai_head(
    fields: &TopLevel<'_>,
    conversation: fn(&TopLevel<'_>) -> Result<(), Malformed>,
) -> Result<Head, Malformed> {
    #[derive(serde::Deserialize)]
    struct StreamOptions {
        #[serde(default)]
        include_usage: bool,
    }
    let model = top::string_field(fields, "model")?;
    let stream = top::bool_field(fields, "stream")?;
    conversation(fields)?;
    let include_usage = match fields.get("stream_options") {
        None => false,
        Some(raw) if raw.get() == "null" => false,
        Some(raw) => {
            serde_json::from_str::<StreamOptions>(raw.get())
                .map_err(|_| {
                    Malformed::new("'stream_options' must be an object", Some("stream_options"))
                })?
                .include_usage
        }
    };
    let mut output_cap = None;
    for field in ["max_tokens", "max_completion_tokens", "max_output_tokens"] {
        match fields.get(field).map(|r| r.get()) {
            None | Some("null") => {}
            Some(raw) => {
                let n: u64 = raw.parse().map_err(|_| {
                    Malformed::new(format!("'{field}' must be a non-negative integer"), None)
                })?;
                output_cap = Some(output_cap.map_or(n, |c: u64| c.min(n)));
            }
        }
    }
    Ok(Head {
        model,
        stream,
        include_usage,
        output_cap,
    })
}
