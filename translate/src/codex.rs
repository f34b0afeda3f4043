//! Codex-style responses payloads, adapted for suppliers that do not speak OpenAI's Responses API
//! (the `codex` group feature; without it a payload is translated as it is).
//!
//! Codex-style clients (the Codex CLI and tools built like it) send `/v1/responses` bodies with
//! pieces only OpenAI runs: freeform `custom` tools (e.g. `apply_patch` with a Lark grammar), the
//! `local_shell` tool, hosted tools (`web_search`, …) and the history items these leave
//! (`custom_tool_call`, `local_shell_call`, `web_search_call`, …). [`adapt`] rewrites such a body
//! into the responses subset the request translator carries, and [`CodexTools`] tells the response
//! translator which function calls to give back as the client's own kinds:
//!
//! | Codex sends | adapted to |
//! |---|---|
//! | tool `{type: "custom", name, description, format}` | function tool `name` with one required string parameter `input`; the description gains "free-form text input" and, for a grammar format, its syntax and definition |
//! | tool `{type: "local_shell"}` | function tool `local_shell` with `command` (array of strings, required), `workdir` (string), `timeout_ms` (integer) |
//! | hosted tools (`web_search`, `web_search_preview`, `file_search`, `code_interpreter`, `image_generation`, `computer_use_preview`, `mcp`) | dropped: no other supplier can run them |
//! | `tool_choice` `{type: "custom", name}` | `{type: "function", name}`; a hosted tool's choice → `auto` |
//! | item `custom_tool_call` `{call_id, name, input}` | `function_call` with `arguments` `{"input": input}` |
//! | item `custom_tool_call_output` | `function_call_output` |
//! | item `local_shell_call` `{call_id, action}` | `function_call` `local_shell` with the action's `command`, `workdir`, `timeout_ms` |
//! | item `local_shell_call_output` | `function_call_output` |
//! | items of hosted tools (`web_search_call`, `file_search_call`, `code_interpreter_call`, `image_generation_call`, `computer_call`, `computer_call_output`, `mcp_*`) | dropped (history no other supplier can read) |
//!
//! On the way back (responses clients only), a call of a custom tool becomes a
//! `custom_tool_call` item whose `input` is the `input` argument (streamed as
//! `response.custom_tool_call_input.delta`/`.done` once the call is complete: its JSON arguments
//! are held until then), and a call of `local_shell` a `local_shell_call` item with an `exec`
//! action. Everything else Codex sends (`instructions`, `developer` messages, `reasoning` items,
//! `include`, `store: false`, `prompt_cache_key`, `text.verbosity`, `parallel_tool_calls`) the
//! request translator already carries or drops (its table).

use serde_json::{Map, Value, json};

/// The tools of an adapted payload that the response translator gives back in Codex's kinds.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodexTools {
    /// Names of the `custom` (freeform) tools.
    pub custom: Vec<String>,
    /// Whether the `local_shell` tool was declared.
    pub local_shell: bool,
}

impl CodexTools {
    /// Whether anything comes back in a Codex kind.
    pub fn is_empty(&self) -> bool {
        self.custom.is_empty() && !self.local_shell
    }

    /// Whether `name` was declared as a custom tool.
    pub fn is_custom(&self, name: &str) -> bool {
        self.custom.iter().any(|c| c == name)
    }
}

/// The name of the function tool that stands for Codex's `local_shell`.
pub const LOCAL_SHELL: &str = "local_shell";

const HOSTED_TOOLS: &[&str] = &[
    "web_search",
    "web_search_preview",
    "web_search_preview_2025_03_11",
    "file_search",
    "code_interpreter",
    "image_generation",
    "computer_use_preview",
    "mcp",
];

const HOSTED_ITEMS: &[&str] = &[
    "web_search_call",
    "file_search_call",
    "code_interpreter_call",
    "image_generation_call",
    "computer_call",
    "computer_call_output",
    "mcp_list_tools",
    "mcp_approval_request",
    "mcp_approval_response",
    "mcp_call",
];

/// Adapts a responses body from a Codex-style client. `None` when nothing needed adapting (or the
/// body is not a JSON object: the translator refuses it as it is), so the original bytes are used.
pub fn adapt(body: &[u8]) -> Option<(Vec<u8>, CodexTools)> {
    let Ok(Value::Object(mut body)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    let mut tools = CodexTools::default();
    let mut changed = false;
    if let Some(Value::Array(list)) = body.get_mut("tools") {
        let before = list.len();
        list.retain(|t| {
            !t["type"]
                .as_str()
                .is_some_and(|k| HOSTED_TOOLS.contains(&k))
        });
        changed |= list.len() != before;
        for tool in list.iter_mut() {
            changed |= adapt_tool(tool, &mut tools);
        }
    }
    if let Some(choice) = body.get_mut("tool_choice") {
        changed |= adapt_choice(choice);
    }
    if let Some(Value::Array(items)) = body.get_mut("input") {
        let before = items.len();
        items.retain(|i| {
            !i["type"]
                .as_str()
                .is_some_and(|k| HOSTED_ITEMS.contains(&k))
        });
        changed |= items.len() != before;
        for item in items.iter_mut() {
            changed |= adapt_item(item);
        }
    }
    let bytes = serde_json::to_vec(&body).ok()?;
    (changed || !tools.is_empty()).then_some((bytes, tools))
}

fn adapt_tool(tool: &mut Value, tools: &mut CodexTools) -> bool {
    match tool["type"].as_str() {
        Some("custom") => {
            let name = tool["name"].as_str().unwrap_or_default().to_string();
            let mut description = tool["description"].as_str().unwrap_or_default().to_string();
            if !description.is_empty() {
                description.push_str("\n\n");
            }
            description.push_str("Pass the tool's free-form text input as the string `input`.");
            let format = &tool["format"];
            if format["type"] == "grammar" {
                let syntax = format["syntax"].as_str().unwrap_or("grammar");
                let definition = format["definition"].as_str().unwrap_or_default();
                description.push_str(&format!(
                    " The input must follow this {syntax} grammar:\n{definition}"
                ));
            }
            *tool = json!({
                "type": "function", "name": name, "description": description,
                "parameters": {
                    "type": "object",
                    "properties": {"input": {"type": "string", "description": "The free-form input."}},
                    "required": ["input"],
                    "additionalProperties": false,
                },
            });
            tools.custom.push(name);
            true
        }
        Some("local_shell") => {
            *tool = json!({
                "type": "function", "name": LOCAL_SHELL,
                "description": "Runs a command on the user's machine and returns its output.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "command": {"type": "array", "items": {"type": "string"}, "description": "The command and its arguments."},
                        "workdir": {"type": "string", "description": "The working directory."},
                        "timeout_ms": {"type": "integer", "description": "The timeout in milliseconds."},
                    },
                    "required": ["command"],
                },
            });
            tools.local_shell = true;
            true
        }
        _ => false,
    }
}

fn adapt_choice(choice: &mut Value) -> bool {
    let kind = choice["type"].as_str().map(str::to_string);
    match kind.as_deref() {
        Some("custom") => {
            choice["type"] = json!("function");
            true
        }
        Some("local_shell") => {
            *choice = json!({"type": "function", "name": LOCAL_SHELL});
            true
        }
        Some(k) if HOSTED_TOOLS.contains(&k) => {
            *choice = json!("auto");
            true
        }
        _ => false,
    }
}

fn adapt_item(item: &mut Value) -> bool {
    let Some(object) = item.as_object() else {
        return false;
    };
    let call_id = object
        .get("call_id")
        .or_else(|| object.get("id"))
        .cloned()
        .unwrap_or(Value::Null);
    match object.get("type").and_then(Value::as_str) {
        Some("custom_tool_call") => {
            let input = object.get("input").cloned().unwrap_or(json!(""));
            *item = json!({
                "type": "function_call", "call_id": call_id, "name": object.get("name"),
                "arguments": json!({"input": input}).to_string(),
            });
            true
        }
        Some("local_shell_call") => {
            let action = object.get("action").and_then(Value::as_object);
            let mut arguments = Map::new();
            for key in ["command", "workdir", "timeout_ms"] {
                if let Some(v) = action.and_then(|a| a.get(key)).filter(|v| !v.is_null()) {
                    arguments.insert(key.to_string(), v.clone());
                }
            }
            *item = json!({
                "type": "function_call", "call_id": call_id, "name": LOCAL_SHELL,
                "arguments": Value::Object(arguments).to_string(),
            });
            true
        }
        Some("custom_tool_call_output" | "local_shell_call_output") => {
            let output = object.get("output").cloned().unwrap_or(json!(""));
            *item = json!({"type": "function_call_output", "call_id": call_id, "output": output});
            true
        }
        _ => false,
    }
}

/// The `input` of a custom tool call from its JSON arguments (`{"input": "..."}`); arguments of
/// another shape are given as they are.
pub fn custom_input(arguments: &str) -> String {
    match serde_json::from_str::<Value>(arguments) {
        Ok(Value::Object(o)) => match o.get("input") {
            Some(Value::String(s)) => s.clone(),
            _ => arguments.to_string(),
        },
        _ => arguments.to_string(),
    }
}

/// The `exec` action of a `local_shell_call` from its JSON arguments; a command given as one
/// string is that string alone.
pub fn local_shell_action(arguments: &str) -> Value {
    let args: Map<String, Value> = match serde_json::from_str(arguments) {
        Ok(Value::Object(o)) => o,
        _ => Map::new(),
    };
    let command = match args.get("command") {
        Some(Value::Array(a)) => Value::Array(a.clone()),
        Some(Value::String(s)) => json!([s]),
        _ => json!([]),
    };
    json!({
        "type": "exec", "command": command, "env": {},
        "workdir": args.get("workdir").cloned().unwrap_or(Value::Null),
        "timeout_ms": args.get("timeout_ms").cloned().unwrap_or(Value::Null),
        "user": null,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapted(body: Value) -> (Value, CodexTools) {
        let (bytes, tools) = adapt(body.to_string().as_bytes()).expect("adapted");
        (serde_json::from_slice(&bytes).unwrap(), tools)
    }

    #[test]
    fn codex_tools_become_function_tools() {
        let (body, tools) = adapted(json!({
            "model": "m", "input": "hi", "tool_choice": {"type": "custom", "name": "apply_patch"},
            "tools": [
                {"type": "function", "name": "shell", "parameters": {"type": "object"}},
                {"type": "custom", "name": "apply_patch", "description": "Edits files.",
                 "format": {"type": "grammar", "syntax": "lark", "definition": "start: patch"}},
                {"type": "local_shell"},
                {"type": "web_search"},
            ],
        }));
        let names: Vec<&str> = body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| {
                assert_eq!(t["type"], "function");
                t["name"].as_str().unwrap()
            })
            .collect();
        assert_eq!(names, ["shell", "apply_patch", "local_shell"]);
        let patch = &body["tools"][1];
        assert_eq!(patch["parameters"]["required"], json!(["input"]));
        let description = patch["description"].as_str().unwrap();
        assert!(description.starts_with("Edits files."));
        assert!(description.contains("lark grammar:\nstart: patch"));
        assert_eq!(
            body["tool_choice"],
            json!({"type": "function", "name": "apply_patch"})
        );
        assert_eq!(
            tools,
            CodexTools {
                custom: vec!["apply_patch".into()],
                local_shell: true
            }
        );
    }

    #[test]
    fn codex_history_becomes_function_calls() {
        let (body, _) = adapted(json!({
            "model": "m", "tool_choice": {"type": "web_search"},
            "input": [
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
                {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin Patch"},
                {"type": "custom_tool_call_output", "call_id": "c1", "output": "Done"},
                {"type": "local_shell_call", "call_id": "c2", "status": "completed",
                 "action": {"type": "exec", "command": ["ls", "-a"], "workdir": null, "env": {}}},
                {"type": "local_shell_call_output", "call_id": "c2", "output": "a b"},
                {"type": "web_search_call", "id": "ws1", "status": "completed"},
            ],
        }));
        let items = body["input"].as_array().unwrap();
        assert_eq!(items.len(), 5, "the hosted tool's item is dropped");
        assert_eq!(body["tool_choice"], "auto");
        assert_eq!(items[1]["type"], "function_call");
        assert_eq!(
            serde_json::from_str::<Value>(items[1]["arguments"].as_str().unwrap()).unwrap(),
            json!({"input": "*** Begin Patch"})
        );
        assert_eq!(
            items[2],
            json!({"type": "function_call_output", "call_id": "c1", "output": "Done"})
        );
        assert_eq!(items[3]["name"], LOCAL_SHELL);
        assert_eq!(
            serde_json::from_str::<Value>(items[3]["arguments"].as_str().unwrap()).unwrap(),
            json!({"command": ["ls", "-a"]})
        );
        assert_eq!(items[4]["call_id"], "c2");
    }

    #[test]
    fn plain_payloads_are_left_alone() {
        assert_eq!(adapt(br#"{"model":"m","input":"hi"}"#), None);
        assert_eq!(adapt(b"not json"), None);
        assert_eq!(
            adapt(br#"{"model":"m","input":"hi","tools":[{"type":"function","name":"f"}]}"#),
            None
        );
    }

    #[test]
    fn arguments_back_to_codex_kinds() {
        assert_eq!(custom_input(r#"{"input":"*** Begin"}"#), "*** Begin");
        assert_eq!(custom_input("{broken"), "{broken");
        assert_eq!(
            local_shell_action(r#"{"command":["ls"],"workdir":"/tmp"}"#)["command"],
            json!(["ls"])
        );
        assert_eq!(
            local_shell_action(r#"{"command":"ls -a"}"#)["command"],
            json!(["ls -a"])
        );
    }
}
