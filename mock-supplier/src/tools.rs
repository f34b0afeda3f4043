//! The tool-call rule, the same for every API: if a request declares at least
//! one function tool AND its conversation does not end with a tool result,
//! the reply calls the FIRST declared tool (arguments `{"q":"mock"}`) instead
//! of answering with text. This module owns only that decision, per format:
//!
//! | format    | declared function tools                             | ends with a tool result when                                        |
//! |-----------|-----------------------------------------------------|---------------------------------------------------------------------|
//! | chat      | `tools[]` (type `function` or absent) → `function.name` | the last `messages[]` item has role `tool`                       |
//! | responses | `tools[]` with `type: "function"` → `name`          | `input` is an array whose last item has `type: "function_call_output"` |
//! | Anthropic | `tools[]` (type absent or `custom`) → `name`        | the last message is a `user` message whose content array holds a `tool_result` block |
//! | Gemini    | `tools[].functionDeclarations[].name`               | the last `contents[]` item has a part with `functionResponse`       |

use serde_json::Value;

/// The wire format a request body is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ToolApi {
    Chat,
    Responses,
    Anthropic,
    Gemini,
}

fn array<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map_or(&[][..], Vec::as_slice)
}

fn str_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// Either camelCase or snake_case key (Gemini accepts both).
fn either<'a>(v: &'a Value, camel: &str, snake: &str) -> Option<&'a Value> {
    v.get(camel).or_else(|| v.get(snake))
}

/// The first declared function tool's name, if any.
pub(crate) fn first_tool(api: ToolApi, body: &Value) -> Option<String> {
    let tools = array(body, "tools");
    let name = match api {
        ToolApi::Chat => tools.iter().find_map(|t| {
            match str_of(t, "type") {
                None | Some("function") => {}
                Some(_) => return None,
            }
            t.get("function").and_then(|f| str_of(f, "name"))
        }),
        ToolApi::Responses => tools
            .iter()
            .filter(|t| str_of(t, "type") == Some("function"))
            .find_map(|t| str_of(t, "name")),
        ToolApi::Anthropic => tools
            .iter()
            .filter(|t| matches!(str_of(t, "type"), None | Some("custom")))
            .find_map(|t| str_of(t, "name")),
        ToolApi::Gemini => tools.iter().find_map(|t| {
            either(t, "functionDeclarations", "function_declarations")
                .and_then(Value::as_array)
                .and_then(|decls| decls.iter().find_map(|d| str_of(d, "name")))
        }),
    };
    name.map(str::to_owned)
}

/// Whether the conversation ends with a tool result.
pub(crate) fn ends_with_tool_result(api: ToolApi, body: &Value) -> bool {
    match api {
        ToolApi::Chat => array(body, "messages")
            .last()
            .is_some_and(|m| str_of(m, "role") == Some("tool")),
        ToolApi::Responses => body
            .get("input")
            .and_then(Value::as_array)
            .and_then(|items| items.last())
            .is_some_and(|i| str_of(i, "type") == Some("function_call_output")),
        ToolApi::Anthropic => array(body, "messages").last().is_some_and(|m| {
            str_of(m, "role") == Some("user")
                && array(m, "content")
                    .iter()
                    .any(|b| str_of(b, "type") == Some("tool_result"))
        }),
        ToolApi::Gemini => array(body, "contents").last().is_some_and(|c| {
            array(c, "parts")
                .iter()
                .any(|p| either(p, "functionResponse", "function_response").is_some())
        }),
    }
}

/// The tool the reply calls, or `None` for a text reply.
pub(crate) fn tool_to_call(api: ToolApi, body: &Value) -> Option<String> {
    if ends_with_tool_result(api, body) {
        return None;
    }
    first_tool(api, body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn chat_rule() {
        let mut b = json!({"messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "custom", "custom": {"name": "c"}}, {"type": "function", "function": {"name": "f"}}, {"type": "function", "function": {"name": "g"}}]});
        assert_eq!(tool_to_call(ToolApi::Chat, &b).as_deref(), Some("f"));
        b["messages"] = json!([{"role": "user", "content": "x"}, {"role": "tool", "tool_call_id": "1", "content": "r"}]);
        assert_eq!(tool_to_call(ToolApi::Chat, &b), None);
        assert_eq!(
            tool_to_call(ToolApi::Chat, &json!({"messages": [], "tools": []})),
            None
        );
    }

    #[test]
    fn responses_rule() {
        let mut b = json!({"input": "hi", "tools": [{"type": "web_search"}, {"type": "function", "name": "lookup"}]});
        assert_eq!(
            tool_to_call(ToolApi::Responses, &b).as_deref(),
            Some("lookup")
        );
        b["input"] = json!([{"type": "function_call_output", "call_id": "c", "output": "r"}]);
        assert_eq!(tool_to_call(ToolApi::Responses, &b), None);
    }

    #[test]
    fn anthropic_rule() {
        let mut b = json!({"messages": [{"role": "user", "content": "x"}],
            "tools": [{"type": "web_search_20250305", "name": "web_search"}, {"name": "get", "input_schema": {}}]});
        assert_eq!(tool_to_call(ToolApi::Anthropic, &b).as_deref(), Some("get"));
        b["messages"] = json!([{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "r"}]}]);
        assert_eq!(tool_to_call(ToolApi::Anthropic, &b), None);
    }

    #[test]
    fn gemini_rule() {
        let mut b = json!({"contents": [{"role": "user", "parts": [{"text": "x"}]}],
            "tools": [{"googleSearch": {}}, {"functionDeclarations": [{"name": "find"}, {"name": "other"}]}]});
        assert_eq!(tool_to_call(ToolApi::Gemini, &b).as_deref(), Some("find"));
        b["contents"] = json!([{"role": "user", "parts": [{"functionResponse": {"name": "find", "response": {}}}]}]);
        assert_eq!(tool_to_call(ToolApi::Gemini, &b), None);
    }
}
