//! The Gemini client format, best effort: the native Gemini surface serves Gemini models and
//! passes their bodies through, so this encoder only has to be correct, not complete.
//!
//! Stream: one `data: GenerateContentResponse` per text or thinking delta (`thought: true`), one
//! per tool call when it is complete (`functionCall` carries whole `args`), and a last one with
//! `finishReason` and `usageMetadata`. Collect: one response with every part. Signatures are
//! dropped. Errors are a data object `{"error": {code, message, status}}`, which google-genai
//! reads as an error body.

use serde_json::{Value, json};

use super::output::{Block, Change, Output};
use super::{Context, Frames, UPSTREAM_STATUS, arguments_object};
use crate::Format;
use crate::ir::{FinishReason, Usage};
use crate::response::errors::client_error;

pub(super) struct Gemini {
    id: String,
    model: String,
}

impl Gemini {
    pub fn new(context: &Context) -> Gemini {
        Gemini {
            id: context.request_id.clone(),
            model: context.model.clone(),
        }
    }

    fn response(&self, candidate: Value, output: Option<&Output>) -> Value {
        let mut response = json!({
            "candidates": [candidate], "modelVersion": self.model, "responseId": self.id,
        });
        if let (Some(usage), Some(object)) = (
            output.and_then(|output| output.usage),
            response.as_object_mut(),
        ) {
            let usage = json!({
                "promptTokenCount": usage.input,
                "cachedContentTokenCount": usage.cached,
                "candidatesTokenCount": usage.output.saturating_sub(usage.reasoning),
                "thoughtsTokenCount": usage.reasoning,
                "totalTokenCount": usage.input + usage.output,
            });
            object.insert("usageMetadata".into(), usage);
        }
        response
    }
}

fn part(block: &Block) -> Value {
    match block {
        Block::Text(text) => json!({"text": text}),
        Block::Thinking { text, .. } => json!({"text": text, "thought": true}),
        Block::Tool {
            id,
            name,
            arguments,
            ..
        } => json!({"functionCall": {"id": id, "name": name, "args": arguments_object(arguments)}}),
    }
}

fn content(parts: Vec<Value>) -> Value {
    json!({"role": "model", "parts": parts})
}

fn finish_reason(reason: Option<FinishReason>) -> &'static str {
    match reason {
        Some(FinishReason::Stop | FinishReason::ToolCalls) => "STOP",
        Some(FinishReason::Length) => "MAX_TOKENS",
        Some(FinishReason::ContentFilter) => "SAFETY",
        Some(FinishReason::Other) | None => "OTHER",
    }
}

impl Frames for Gemini {
    fn begin(&mut self, _: Option<&Usage>, _: &mut Vec<u8>) {}

    fn change(&mut self, output: &Output, change: &Change, out: &mut Vec<u8>) {
        let part = match (change, output.blocks.get(change_pos(change))) {
            (Change::Text(_, text), Some(Block::Thinking { .. })) => {
                json!({"text": text, "thought": true})
            }
            (Change::Text(_, text), _) => json!({"text": text}),
            (Change::Close(_), Some(tool @ Block::Tool { .. })) => part(tool),
            _ => return,
        };
        let candidate = json!({"content": content(vec![part]), "index": 0});
        crate::sse::data(out, &self.response(candidate, None));
    }

    fn end(&mut self, output: &Output, out: &mut Vec<u8>) {
        let candidate = json!({"finishReason": finish_reason(output.finish), "index": 0});
        crate::sse::data(out, &self.response(candidate, Some(output)));
    }

    fn fail(&mut self, message: &str, out: &mut Vec<u8>) {
        out.extend_from_slice(b"data: ");
        out.extend(client_error(Format::Gemini, UPSTREAM_STATUS, message));
        out.extend_from_slice(b"\n\n");
    }

    fn body(&self, output: &Output) -> Value {
        let candidate = json!({
            "content": content(output.blocks.iter().map(part).collect()),
            "finishReason": finish_reason(output.finish),
            "index": 0,
        });
        self.response(candidate, Some(output))
    }
}

/// The block a change is about (`usize::MAX` for none).
fn change_pos(change: &Change) -> usize {
    match change {
        Change::Open(pos)
        | Change::Text(pos, _)
        | Change::Signature(pos, _)
        | Change::Args(pos, _)
        | Change::Close(pos) => *pos,
        Change::Finish | Change::Error(_) => usize::MAX,
    }
}
