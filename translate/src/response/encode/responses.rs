//! The OpenAI responses client format: typed events (`event: TYPE` plus `data` with the same
//! `type` and an increasing `sequence_number`, no `[DONE]`) or one `response` object.
//!
//! Each block is one output item, `output_index` its position: text → a `message` item with one
//! `output_text` part; thinking → a `reasoning` item whose text is shown as its summary
//! (`response.reasoning_summary_*` events; signatures are dropped: `encrypted_content` is
//! OpenAI's own); tool call → a `function_call` item (`call_id` is the supplier's call id), or for
//! a tool a Codex-style request declared in its own kind (`crate::codex`) a `custom_tool_call`
//! item (its `input` sent in one delta once the call is complete) or a `local_shell_call`. The
//! terminal event carries the whole response: `response.completed`, or `response.incomplete` with
//! `incomplete_details.reason` `max_output_tokens` (Length) or `content_filter`. Errors are
//! `event: error` (`type: "error"`, `code`, `message`, `param`, `sequence_number`), with the same
//! message also under an `error` key: openai-python raises `APIError` for any data object with
//! one, and ignores a `response.failed`.

use serde_json::{Value, json};

use super::output::{Block, Change, Output};
use super::{Context, Frames, total};
use crate::codex::{self, CodexTools};
use crate::ir::{FinishReason, Usage};
use crate::sse;

pub(super) struct Responses {
    id: String,
    request_id: String,
    model: String,
    created: u64,
    sequence: u64,
    codex: CodexTools,
}

/// What a tool block is given back as.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Call {
    Function,
    Custom,
    LocalShell,
}

impl Responses {
    /// The events that close block `pos`: its text's or arguments' last word, then the item done.
    fn close(&mut self, pos: usize, block: &Block, at: &Value, out: &mut Vec<u8>) {
        let with = |fields: Value| with_place(at, fields);
        match block {
            Block::Text(text) => {
                let done = json!({"content_index": 0, "text": text, "logprobs": []});
                self.emit("response.output_text.done", with(done), out);
                let part = json!({"content_index": 0, "part": text_part(text)});
                self.emit("response.content_part.done", with(part), out);
            }
            Block::Thinking { text, .. } => {
                let done = json!({"summary_index": 0, "text": text});
                self.emit("response.reasoning_summary_text.done", with(done), out);
                let part =
                    json!({"summary_index": 0, "part": {"type": "summary_text", "text": text}});
                self.emit("response.reasoning_summary_part.done", with(part), out);
            }
            Block::Tool {
                name, arguments, ..
            } => match self.call_kind(block) {
                Call::Function => {
                    let done = json!({"name": name, "arguments": arguments});
                    self.emit("response.function_call_arguments.done", with(done), out);
                }
                Call::Custom => {
                    let input = codex::custom_input(arguments);
                    let delta = json!({"delta": input});
                    self.emit("response.custom_tool_call_input.delta", with(delta), out);
                    let done = json!({"input": input});
                    self.emit("response.custom_tool_call_input.done", with(done), out);
                }
                Call::LocalShell => {}
            },
        }
        let item = self.item(pos, block, true);
        let done = json!({"output_index": pos, "item": item});
        self.emit("response.output_item.done", done, out);
    }

    pub fn new(context: &Context) -> Responses {
        Responses {
            id: format!("resp_{}", context.request_id),
            request_id: context.request_id.clone(),
            model: context.model.clone(),
            created: context.created,
            sequence: 0,
            codex: context.codex.clone(),
        }
    }

    fn call_kind(&self, block: &Block) -> Call {
        match block {
            Block::Tool { name, .. } if self.codex.is_custom(name) => Call::Custom,
            Block::Tool { name, .. } if self.codex.local_shell && name == codex::LOCAL_SHELL => {
                Call::LocalShell
            }
            _ => Call::Function,
        }
    }

    fn emit(&mut self, kind: &str, mut data: Value, out: &mut Vec<u8>) {
        if let Some(object) = data.as_object_mut() {
            object.insert("type".into(), json!(kind));
            object.insert("sequence_number".into(), json!(self.sequence));
        }
        self.sequence += 1;
        sse::named(out, kind, &data);
    }

    fn item_id(&self, pos: usize, block: &Block) -> String {
        let prefix = match block {
            Block::Text(_) => "msg",
            Block::Thinking { .. } => "rs",
            Block::Tool { .. } => match self.call_kind(block) {
                Call::Function => "fc",
                Call::Custom => "ctc",
                Call::LocalShell => "lsh",
            },
        };
        format!("{prefix}_{}_{pos}", self.request_id)
    }

    /// The output item of a block: as it starts (`done == false`: empty) or complete.
    fn item(&self, pos: usize, block: &Block, done: bool) -> Value {
        let id = self.item_id(pos, block);
        let status = if done { "completed" } else { "in_progress" };
        match block {
            Block::Text(text) => json!({
                "type": "message", "id": id, "status": status, "role": "assistant",
                "content": if done { json!([text_part(text)]) } else { json!([]) },
            }),
            Block::Thinking { text, .. } => json!({
                "type": "reasoning", "id": id, "status": status,
                "summary": if done { json!([{"type": "summary_text", "text": text}]) } else { json!([]) },
            }),
            Block::Tool {
                id: call_id,
                name,
                arguments,
                ..
            } => match self.call_kind(block) {
                Call::Function => json!({
                    "type": "function_call", "id": id, "call_id": call_id, "name": name,
                    "arguments": if done { arguments.as_str() } else { "" }, "status": status,
                }),
                Call::Custom => json!({
                    "type": "custom_tool_call", "id": id, "call_id": call_id, "name": name,
                    "input": if done { codex::custom_input(arguments) } else { String::new() },
                    "status": status,
                }),
                Call::LocalShell => json!({
                    "type": "local_shell_call", "id": id, "call_id": call_id, "status": status,
                    "action": codex::local_shell_action(if done { arguments } else { "{}" }),
                }),
            },
        }
    }

    /// The response object: in progress (empty output) or final.
    fn response(&self, output: Option<&Output>) -> Value {
        let (status, incomplete) = match output.and_then(|output| output.finish) {
            None => ("in_progress", Value::Null),
            Some(FinishReason::Length) => ("incomplete", json!({"reason": "max_output_tokens"})),
            Some(FinishReason::ContentFilter) => {
                ("incomplete", json!({"reason": "content_filter"}))
            }
            Some(_) => ("completed", Value::Null),
        };
        let items: Vec<Value> = output
            .map(|output| {
                let blocks = output.blocks.iter().enumerate();
                blocks
                    .map(|(pos, block)| self.item(pos, block, true))
                    .collect()
            })
            .unwrap_or_default();
        let usage = match output.and_then(|output| output.usage) {
            Some(usage) => json!({
                "input_tokens": usage.input,
                "input_tokens_details": input_details(&usage),
                "output_tokens": usage.output,
                "output_tokens_details": {"reasoning_tokens": usage.reasoning},
                "total_tokens": total(&usage),
            }),
            None => Value::Null,
        };
        json!({
            "id": self.id, "object": "response", "created_at": self.created,
            "status": status, "error": null, "incomplete_details": incomplete,
            "instructions": null, "max_output_tokens": null, "model": self.model,
            "output": items, "parallel_tool_calls": true, "previous_response_id": null,
            "reasoning": null, "temperature": null, "text": {"format": {"type": "text"}},
            "tool_choice": "auto", "tools": [], "top_p": null, "truncation": "disabled",
            "usage": usage, "metadata": {},
        })
    }
}

/// `input_tokens_details`; the cache write count only when there was one.
fn input_details(usage: &Usage) -> Value {
    let mut details = json!({"cached_tokens": usage.cached});
    if usage.cache_write > 0 {
        details["cache_write_tokens"] = json!(usage.cache_write);
    }
    details
}

fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
}

impl Frames for Responses {
    fn begin(&mut self, _: Option<&Usage>, out: &mut Vec<u8>) {
        let response = self.response(None);
        self.emit("response.created", json!({"response": response}), out);
        self.emit("response.in_progress", json!({"response": response}), out);
    }

    fn change(&mut self, output: &Output, change: &Change, out: &mut Vec<u8>) {
        let (pos, fragment) = match change {
            Change::Open(pos) | Change::Close(pos) => (*pos, ""),
            Change::Text(pos, text) | Change::Args(pos, text) => (*pos, text.as_str()),
            Change::Signature(..) | Change::Finish | Change::Error(_) => return,
        };
        let Some(block) = output.blocks.get(pos) else {
            return;
        };
        let at = json!({"item_id": self.item_id(pos, block), "output_index": pos});
        let with = |fields: Value| with_place(&at, fields);
        match (change, block) {
            (Change::Open(_), _) => {
                let item = self.item(pos, block, false);
                let added = json!({"output_index": pos, "item": item});
                self.emit("response.output_item.added", added, out);
                match block {
                    Block::Text(_) => {
                        let part = json!({"content_index": 0, "part": text_part("")});
                        self.emit("response.content_part.added", with(part), out);
                    }
                    Block::Thinking { .. } => {
                        let part = json!({"summary_index": 0, "part": {"type": "summary_text", "text": ""}});
                        self.emit("response.reasoning_summary_part.added", with(part), out);
                    }
                    Block::Tool { .. } => {}
                }
            }
            (Change::Text(..), Block::Text(_)) => {
                let delta = json!({"content_index": 0, "delta": fragment, "logprobs": []});
                self.emit("response.output_text.delta", with(delta), out);
            }
            (Change::Text(..), Block::Thinking { .. }) => {
                let delta = json!({"summary_index": 0, "delta": fragment});
                self.emit("response.reasoning_summary_text.delta", with(delta), out);
            }
            (Change::Args(..), Block::Tool { .. }) if self.call_kind(block) == Call::Function => {
                let delta = json!({"delta": fragment});
                self.emit("response.function_call_arguments.delta", with(delta), out);
            }
            (Change::Close(_), _) => self.close(pos, block, &at, out),
            _ => {}
        }
    }

    fn end(&mut self, output: &Output, out: &mut Vec<u8>) {
        let response = self.response(Some(output));
        let kind = match output.finish {
            Some(FinishReason::Length | FinishReason::ContentFilter) => "response.incomplete",
            _ => "response.completed",
        };
        self.emit(kind, json!({"response": response}), out);
    }

    fn fail(&mut self, message: &str, out: &mut Vec<u8>) {
        let error = json!({
            "code": "upstream_error", "message": message, "param": null,
            "error": {"type": "upstream_error", "code": "upstream_error", "message": message},
        });
        self.emit("error", error, out);
    }

    fn body(&self, output: &Output) -> Value {
        self.response(Some(output))
    }
}

/// `fields` with an event's place (`item_id`, `output_index`) in front.
fn with_place(at: &Value, fields: Value) -> Value {
    let mut data = at.clone();
    if let (Some(data), Some(fields)) = (data.as_object_mut(), fields.as_object()) {
        data.extend(fields.clone());
    }
    data
}
