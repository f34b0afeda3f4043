//! The OpenAI chat completions client format: `chat.completion.chunk` frames (data-only SSE,
//! ending in `data: [DONE]`) or one `chat.completion` body.
//!
//! Thinking is shown as `reasoning_content` (the common extension: deltas in a stream, the
//! message field in a body); thinking signatures have no field and are dropped. The usage chunk
//! (`choices: []`) follows the finish chunk once usage is known; a response whose supplier never
//! reported usage ends without one rather than with made-up zeros. Errors are a data object with
//! an `error` key, which openai-python raises as `APIError`; no `[DONE]` follows them.

use serde_json::{Value, json};

use super::output::{Block, Change, Output};
use super::{Context, Frames, chat_finish, total};
use crate::ir::Usage;
use crate::sse;

pub(super) struct Chat {
    id: String,
    model: String,
    created: u64,
    /// A chunk's envelope up to its `choices`, written once: the hot frames (text deltas) are
    /// written directly after it.
    head: Vec<u8>,
}

impl Chat {
    pub fn new(context: &Context) -> Chat {
        let id = format!("chatcmpl-{}", context.request_id);
        let mut head = b"{\"id\":".to_vec();
        sse::string(&mut head, &id);
        head.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"created\":");
        head.extend_from_slice(context.created.to_string().as_bytes());
        head.extend_from_slice(b",\"model\":");
        sse::string(&mut head, &context.model);
        head.extend_from_slice(b",\"choices\":");
        Chat {
            id,
            model: context.model.clone(),
            created: context.created,
            head,
        }
    }

    /// A `chat.completion.chunk` with these `choices`.
    fn envelope(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }

    fn chunk(&self, delta: Value, finish_reason: Value, out: &mut Vec<u8>) {
        let choice = json!({"index": 0, "delta": delta, "finish_reason": finish_reason});
        sse::data(out, &self.envelope(json!([choice])));
    }
}

impl Frames for Chat {
    fn begin(&mut self, _: Option<&Usage>, out: &mut Vec<u8>) {
        self.chunk(
            json!({"role": "assistant", "content": ""}),
            Value::Null,
            out,
        );
    }

    fn change(&mut self, output: &Output, change: &Change, out: &mut Vec<u8>) {
        let delta = match change {
            Change::Text(pos, text) => {
                // The hot frame, written directly (the envelope's fixed part once per answer).
                let field: &[u8] = match output.blocks.get(*pos) {
                    Some(Block::Thinking { .. }) => b"reasoning_content",
                    _ => b"content",
                };
                out.extend_from_slice(b"data: ");
                out.extend_from_slice(&self.head);
                out.extend_from_slice(b"[{\"index\":0,\"delta\":{\"");
                out.extend_from_slice(field);
                out.extend_from_slice(b"\":");
                sse::string(out, text);
                out.extend_from_slice(b"},\"finish_reason\":null}]}");
                out.extend_from_slice(b"\n\n");
                return;
            }
            Change::Open(pos) => match output.blocks.get(*pos) {
                Some(Block::Tool {
                    index, id, name, ..
                }) => json!({"tool_calls": [{
                    "index": index, "id": id, "type": "function",
                    "function": {"name": name, "arguments": ""},
                }]}),
                _ => return,
            },
            Change::Args(pos, fragment) => match output.blocks.get(*pos) {
                Some(Block::Tool { index, .. }) => json!({"tool_calls": [{
                    "index": index, "function": {"arguments": fragment},
                }]}),
                _ => return,
            },
            Change::Finish => {
                let reason = output.finish.map(chat_finish).unwrap_or("stop");
                return self.chunk(json!({}), json!(reason), out);
            }
            Change::Signature(..) | Change::Close(_) | Change::Error(_) => return,
        };
        self.chunk(delta, Value::Null, out);
    }

    fn end(&mut self, output: &Output, out: &mut Vec<u8>) {
        if let Some(usage) = &output.usage {
            let mut chunk = self.envelope(json!([]));
            chunk["usage"] = usage_json(usage);
            sse::data(out, &chunk);
        }
        out.extend_from_slice(b"data: [DONE]\n\n");
    }

    fn fail(&mut self, message: &str, out: &mut Vec<u8>) {
        sse::data(
            out,
            &json!({"error": {"message": message, "type": "upstream_error", "param": null, "code": null}}),
        );
    }

    fn body(&self, output: &Output) -> Value {
        let text = output.text();
        let mut message = json!({
            "role": "assistant",
            "content": if text.is_empty() { Value::Null } else { Value::String(text) },
        });
        let calls: Vec<Value> = output
            .blocks
            .iter()
            .filter_map(|block| match block {
                Block::Tool {
                    id,
                    name,
                    arguments,
                    ..
                } => Some(json!({
                    "id": id, "type": "function",
                    "function": {"name": name, "arguments": arguments},
                })),
                _ => None,
            })
            .collect();
        let thinking = output.thinking();
        if let Some(message) = message.as_object_mut() {
            if !calls.is_empty() {
                message.insert("tool_calls".into(), Value::Array(calls));
            }
            if !thinking.is_empty() {
                message.insert("reasoning_content".into(), Value::String(thinking));
            }
        }
        let mut body = json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": output.finish.map(chat_finish).unwrap_or("stop"),
            }],
        });
        if let (Some(usage), Some(body)) = (&output.usage, body.as_object_mut()) {
            body.insert("usage".into(), usage_json(usage));
        }
        body
    }
}

/// Chat's usage; the cache write count (`cache_write_tokens`, which openai-python 3.3 knows) only
/// when there was one.
fn usage_json(usage: &Usage) -> Value {
    let mut prompt = json!({"cached_tokens": usage.cached});
    if usage.cache_write > 0 {
        prompt["cache_write_tokens"] = json!(usage.cache_write);
    }
    json!({
        "prompt_tokens": usage.input,
        "completion_tokens": usage.output,
        "total_tokens": total(usage),
        "prompt_tokens_details": prompt,
        "completion_tokens_details": {"reasoning_tokens": usage.reasoning},
    })
}
