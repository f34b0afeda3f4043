//! The Anthropic Messages client format: named events (`event:` lines always, which
//! anthropic-sdk-python dispatches on) or one `message` body.
//!
//! Content blocks are numbered by position: thinking → `thinking` block (with `signature_delta`s
//! when the supplier signed it; `signature` is `""` otherwise), text → `text`, tool call →
//! `tool_use` with `input_json_delta`s. `message_start` carries the input usage when the supplier's
//! first event had it (Gemini's does) and zeros otherwise (OpenAI reports usage last); the final
//! counts are always repeated in `message_delta`, in Anthropic's convention (`input_tokens` excludes the cache reads and
//! writes, which have their own fields). Errors are `event: error` with an `api_error`.

use std::io::Write;

use serde_json::{Value, json};

use super::output::{Block, Change, Output};
use super::{Context, Frames, arguments_object};
use crate::ir::{FinishReason, Usage};
use crate::sse;

pub(super) struct Messages {
    id: String,
    model: String,
}

impl Messages {
    pub fn new(context: &Context) -> Messages {
        Messages {
            id: format!("msg_{}", context.request_id),
            model: context.model.clone(),
        }
    }
}

impl Frames for Messages {
    fn begin(&mut self, usage: Option<&Usage>, out: &mut Vec<u8>) {
        let mut usage = usage_json(&usage.copied().unwrap_or_default());
        usage["output_tokens"] = json!(0);
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage,
        });
        sse::named(
            out,
            "message_start",
            &json!({"type": "message_start", "message": message}),
        );
    }

    fn change(&mut self, output: &Output, change: &Change, out: &mut Vec<u8>) {
        let (name, data) = match change {
            Change::Open(pos) => {
                let block = match output.blocks.get(*pos) {
                    Some(Block::Text(_)) => json!({"type": "text", "text": ""}),
                    Some(Block::Thinking { .. }) => {
                        json!({"type": "thinking", "thinking": "", "signature": ""})
                    }
                    Some(Block::Tool { id, name, .. }) => {
                        json!({"type": "tool_use", "id": id, "name": name, "input": {}})
                    }
                    None => return,
                };
                let start =
                    json!({"type": "content_block_start", "index": pos, "content_block": block});
                ("content_block_start", start)
            }
            Change::Text(pos, text) => {
                // The hot frame, written directly.
                let (kind, field): (&[u8], &[u8]) = match output.blocks.get(*pos) {
                    Some(Block::Thinking { .. }) => (b"thinking_delta", b"thinking"),
                    _ => (b"text_delta", b"text"),
                };
                out.extend_from_slice(b"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":");
                // Writing into a Vec cannot fail.
                let _ = write!(out, "{pos}");
                out.extend_from_slice(b",\"delta\":{\"type\":\"");
                out.extend_from_slice(kind);
                out.extend_from_slice(b"\",\"");
                out.extend_from_slice(field);
                out.extend_from_slice(b"\":");
                sse::string(out, text);
                out.extend_from_slice(b"}}\n\n");
                return;
            }
            Change::Signature(pos, signature) => {
                let delta = json!({"type": "signature_delta", "signature": signature});
                ("content_block_delta", delta_event(*pos, delta))
            }
            Change::Args(pos, fragment) => {
                let delta = json!({"type": "input_json_delta", "partial_json": fragment});
                ("content_block_delta", delta_event(*pos, delta))
            }
            Change::Close(pos) => (
                "content_block_stop",
                json!({"type": "content_block_stop", "index": pos}),
            ),
            Change::Finish | Change::Error(_) => return,
        };
        sse::named(out, name, &data);
    }

    fn end(&mut self, output: &Output, out: &mut Vec<u8>) {
        let delta = json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(output.finish), "stop_sequence": null},
            "usage": usage_json(&output.usage.unwrap_or_default()),
        });
        sse::named(out, "message_delta", &delta);
        sse::named(out, "message_stop", &json!({"type": "message_stop"}));
    }

    fn fail(&mut self, message: &str, out: &mut Vec<u8>) {
        let error = json!({"type": "error", "error": {"type": "api_error", "message": message}});
        sse::named(out, "error", &error);
    }

    fn body(&self, output: &Output) -> Value {
        let content: Vec<Value> = output
            .blocks
            .iter()
            .map(|block| match block {
                Block::Text(text) => json!({"type": "text", "text": text}),
                Block::Thinking { text, signature } => {
                    json!({"type": "thinking", "thinking": text, "signature": signature})
                }
                Block::Tool {
                    id,
                    name,
                    arguments,
                    ..
                } => json!({
                    "type": "tool_use", "id": id, "name": name,
                    "input": arguments_object(arguments),
                }),
            })
            .collect();
        json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": content,
            "stop_reason": stop_reason(output.finish),
            "stop_sequence": null,
            "usage": usage_json(&output.usage.unwrap_or_default()),
        })
    }
}

fn delta_event(pos: usize, delta: Value) -> Value {
    json!({"type": "content_block_delta", "index": pos, "delta": delta})
}

fn stop_reason(reason: Option<FinishReason>) -> &'static str {
    match reason {
        Some(FinishReason::Length) => "max_tokens",
        Some(FinishReason::ToolCalls) => "tool_use",
        Some(FinishReason::ContentFilter) => "refusal",
        Some(FinishReason::Stop | FinishReason::Other) | None => "end_turn",
    }
}

/// Anthropic's usage: `input_tokens` counts only what was neither read from nor written to the
/// cache.
fn usage_json(usage: &Usage) -> Value {
    json!({
        "input_tokens": usage.input.saturating_sub(usage.cached).saturating_sub(usage.cache_write),
        "output_tokens": usage.output,
        "cache_read_input_tokens": usage.cached,
        "cache_creation_input_tokens": usage.cache_write,
    })
}
