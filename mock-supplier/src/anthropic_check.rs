//! Validation of Anthropic Messages requests, like the real
//! `api.anthropic.com`: `model`, `max_tokens` (not for `count_tokens`),
//! `system` (string or text blocks), `messages` (non-empty, `user` /
//! `assistant` roles, first one `user`, string or block content, no empty
//! text) and tool pairing (every `tool_use` id answered by a `tool_result` in
//! the immediately following user message, and no `tool_result` without a
//! `tool_use` in the message before). Every `Err` is the 400 message.

use serde_json::Value;

/// The message of the empty-text rejection, as the real API words it.
const EMPTY_TEXT: &str = "messages: text content blocks must be non-empty";

/// Content block types the mock accepts in messages.
const BLOCK_TYPES: &[&str] = &[
    "text",
    "image",
    "document",
    "search_result",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "mcp_tool_use",
    "mcp_tool_result",
    "container_upload",
];

/// Which Anthropic endpoint a request targets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// `POST /v1/messages`.
    Messages,
    /// `POST /v1/messages/count_tokens` (no `max_tokens`).
    CountTokens,
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn blocks(m: &Value) -> &[Value] {
    m.get("content")
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
}

/// The ids of the blocks of type `ty` in message `m`, read from `key`.
fn block_ids<'a>(m: &'a Value, ty: &str, key: &str) -> Vec<&'a str> {
    blocks(m)
        .iter()
        .filter(|b| str_of(b, "type") == Some(ty))
        .filter_map(|b| str_of(b, key))
        .collect()
}

/// Validates a request body; returns its model.
pub(crate) fn validate(body: &Value, endpoint: Endpoint) -> Result<&str, String> {
    if !body.is_object() {
        return Err("request body must be a JSON object".into());
    }
    let model = match body.get("model") {
        None => return Err("model: Field required".into()),
        Some(v) => v.as_str().ok_or("model: Input should be a valid string")?,
    };
    if endpoint == Endpoint::Messages {
        match body.get("max_tokens") {
            None => return Err("max_tokens: Field required".into()),
            Some(v) => match v.as_u64() {
                None => return Err("max_tokens: Input should be a valid integer".into()),
                Some(0) => {
                    return Err("max_tokens: Input should be greater than or equal to 1".into());
                }
                Some(_) => {}
            },
        }
    }
    validate_system(body.get("system"))?;
    let messages = match body.get("messages") {
        None => return Err("messages: Field required".into()),
        Some(v) => v
            .as_array()
            .ok_or("messages: Input should be a valid list")?,
    };
    validate_messages(messages)?;
    if let Some(tools) = body.get("tools") {
        let tools = tools
            .as_array()
            .ok_or("tools: Input should be a valid list")?;
        for (k, t) in tools.iter().enumerate() {
            if str_of(t, "name").is_none() {
                return Err(format!("tools.{k}.name: Field required"));
            }
        }
    }
    Ok(model)
}

fn validate_system(system: Option<&Value>) -> Result<(), String> {
    match system {
        None | Some(Value::String(_)) => Ok(()),
        Some(Value::Array(blocks)) => {
            for (k, b) in blocks.iter().enumerate() {
                if str_of(b, "type") != Some("text") {
                    return Err(format!("system.{k}.type: Input should be 'text'"));
                }
                match str_of(b, "text") {
                    None => return Err(format!("system.{k}.text: Field required")),
                    Some("") => return Err("system: text content blocks must be non-empty".into()),
                    Some(_) => {}
                }
            }
            Ok(())
        }
        Some(_) => Err("system: Input should be a valid string or a list of text blocks".into()),
    }
}

fn validate_messages(messages: &[Value]) -> Result<(), String> {
    if messages.is_empty() {
        return Err("messages: at least one message is required".into());
    }
    for (i, m) in messages.iter().enumerate() {
        let role = str_of(m, "role");
        if !matches!(role, Some("user" | "assistant")) {
            return Err(format!(
                "messages.{i}.role: Input should be 'user' or 'assistant'"
            ));
        }
        if i == 0 && role != Some("user") {
            return Err("messages: first message must use the \"user\" role".into());
        }
        let last = i + 1 == messages.len();
        match m.get("content") {
            None => return Err(format!("messages.{i}.content: Field required")),
            Some(Value::String(s)) if s.is_empty() => return Err(EMPTY_TEXT.into()),
            Some(Value::String(_)) => {}
            Some(Value::Array(content)) => {
                if content.is_empty() && !(last && role == Some("assistant")) {
                    return Err(format!(
                        "messages.{i}: all messages must have non-empty content except for the optional final assistant message"
                    ));
                }
                for (j, b) in content.iter().enumerate() {
                    validate_block(b, i, j, role == Some("user"))?;
                }
            }
            Some(_) => {
                return Err(format!(
                    "messages.{i}.content: Input should be a valid string or list"
                ));
            }
        }
    }
    validate_tool_pairing(messages)
}

fn validate_block(b: &Value, i: usize, j: usize, user: bool) -> Result<(), String> {
    let at = format!("messages.{i}.content.{j}");
    let ty = str_of(b, "type").ok_or_else(|| format!("{at}.type: Field required"))?;
    if !BLOCK_TYPES.contains(&ty) {
        return Err(format!(
            "{at}: Input tag '{ty}' found using 'type' does not match any of the expected tags"
        ));
    }
    let require = |key: &str| {
        b.get(key)
            .map(|_| ())
            .ok_or_else(|| format!("{at}.{key}: Field required"))
    };
    match ty {
        "text" => match str_of(b, "text") {
            None => Err(format!("{at}.text: Field required")),
            Some("") => Err(EMPTY_TEXT.into()),
            Some(_) => Ok(()),
        },
        "tool_use" => {
            if user {
                return Err(format!(
                    "{at}: `tool_use` blocks are only allowed in assistant messages"
                ));
            }
            require("id")?;
            require("name")?;
            match b.get("input") {
                Some(Value::Object(_)) => Ok(()),
                Some(_) => Err(format!("{at}.input: Input should be a valid dictionary")),
                None => Err(format!("{at}.input: Field required")),
            }
        }
        "tool_result" => {
            if !user {
                return Err(format!(
                    "{at}: `tool_result` blocks are only allowed in user messages"
                ));
            }
            require("tool_use_id")
        }
        _ => Ok(()),
    }
}

/// Every `tool_use` id of an assistant message needs a `tool_result` with that
/// `tool_use_id` in the immediately following user message, and every
/// `tool_result` needs a `tool_use` in the message before.
fn validate_tool_pairing(messages: &[Value]) -> Result<(), String> {
    for (i, m) in messages.iter().enumerate() {
        let uses = block_ids(m, "tool_use", "id");
        if !uses.is_empty() {
            let results = messages
                .get(i + 1)
                .map(|next| block_ids(next, "tool_result", "tool_use_id"))
                .unwrap_or_default();
            let missing: Vec<&str> = uses
                .iter()
                .copied()
                .filter(|id| !results.contains(id))
                .collect();
            if !missing.is_empty() {
                return Err(format!(
                    "messages.{}: `tool_use` ids were found without `tool_result` blocks immediately after: {}. Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
                    i,
                    missing.join(", ")
                ));
            }
        }
        let results = block_ids(m, "tool_result", "tool_use_id");
        if !results.is_empty() {
            let previous = i
                .checked_sub(1)
                .and_then(|p| messages.get(p))
                .map(|prev| block_ids(prev, "tool_use", "id"))
                .unwrap_or_default();
            if let Some(id) = results.iter().find(|id| !previous.contains(id)) {
                return Err(format!(
                    "messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(body: Value) -> Result<(), String> {
        validate(&body, Endpoint::Messages).map(|_| ())
    }

    #[test]
    fn validation() {
        let ok =
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]});
        assert_eq!(validate(&ok, Endpoint::Messages), Ok("m"));
        let mut no_max = ok.clone();
        no_max.as_object_mut().unwrap().remove("max_tokens");
        assert!(check(no_max.clone()).unwrap_err().contains("max_tokens"));
        assert!(validate(&no_max, Endpoint::CountTokens).is_ok());
        let msgs = |m: Value| json!({"model": "m", "max_tokens": 5, "messages": m});
        assert_eq!(
            check(msgs(json!([{"role": "user", "content": ""}]))),
            Err(EMPTY_TEXT.into())
        );
        assert_eq!(
            check(msgs(
                json!([{"role": "user", "content": [{"type": "text", "text": ""}]}])
            )),
            Err(EMPTY_TEXT.into())
        );
        assert!(check(msgs(json!([]))).is_err());
        assert!(check(msgs(json!([{"role": "system", "content": "x"}]))).is_err());
        assert!(check(msgs(json!([{"role": "assistant", "content": "x"}]))).is_err());
        assert!(
            check(msgs(
                json!([{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}])
            ))
            .is_err()
        );
        let mut sys = ok.clone();
        sys["system"] = json!([{"type": "text", "text": "be brief"}]);
        assert!(check(sys.clone()).is_ok());
        sys["system"] = json!(5);
        assert!(check(sys).is_err());
    }

    #[test]
    fn tool_pairing() {
        let msgs = |m: Value| json!({"model": "m", "max_tokens": 5, "messages": m});
        let call = json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}]});
        let result = |id: &str| json!({"role": "user", "content": [{"type": "tool_result", "tool_use_id": id, "content": "r"}]});
        let q = json!({"role": "user", "content": "q"});
        assert!(check(msgs(json!([q, call, result("t1")]))).is_ok());
        let e = check(msgs(json!([q, call, result("t2")]))).unwrap_err();
        assert!(e.contains("t1"), "{e}");
        assert!(check(msgs(json!([q, call]))).is_err());
        assert!(check(msgs(json!([q, call, q]))).is_err());
        assert!(check(msgs(json!([result("t1")]))).is_err());
    }
}
