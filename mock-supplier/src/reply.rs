//! Deterministic reply construction shared by every wire format (the body
//! hash, ids, reply text, the `Reply` inputs) and the exact JSON bodies and
//! SSE events of the OpenAI routes `/v1/models`, `/v1/chat/completions` and
//! `/v1/responses`. The Anthropic and Gemini bodies, the tool-call replies and
//! the usage mapping live in sibling modules and follow the rules below.
//! Nothing here depends on time or randomness, so two identical requests
//! produce identical bytes.
//!
//! # Rules
//!
//! * **Hash**: `hash = format!("{:016x}", fnv1a64(request_body))` (see
//!   [`body_hash_hex`]). Chat `id` = `chatcmpl-<hash>`, responses `id` =
//!   `resp_<hash>`, the responses message item id = `msg_<hash>`; Anthropic
//!   message id = `msg_<hash>`, Gemini `responseId` = `<hash>`; tool calls:
//!   `call_<hash>` (chat `id`, responses `call_id`), `fc_<hash>` (responses
//!   item id), `toolu_<hash>` (Anthropic); Gemini function calls carry no id.
//! * `created` / `created_at` = [`CREATED`] (1700000000); `model` echoes the
//!   request's `model` (Gemini: the model in the path); chat objects carry
//!   `system_fingerprint: "fp_mock"`.
//! * **Pieces**: `n` = header `x-mock-events` (default [`DEFAULT_EVENTS`],
//!   clamped to [`MAX_EVENTS`]); piece `i` (1-based) is `" w{i}"`.
//!   Streams send exactly these pieces as content deltas, so the streamed text
//!   is `" w1 w2 … wn"`, and the text inside stream-final objects
//!   (`response.output_text.done`, `response.completed`) is that same string.
//!   Non-streaming replies use `"mock reply" + pieces` =
//!   `"mock reply w1 w2 … wn"` (see [`reply_text`]; `n = 0` gives
//!   `"mock reply"`).
//! * **Usage**: prompt = `ceil(request_body_bytes / 4)`, completion = `n`,
//!   cached = cache_creation = thoughts = 0; header
//!   `x-mock-usage: prompt=P,completion=C,cached=K,cache_creation=W,thoughts=T`
//!   (any subset) overrides each given value. total = prompt + completion.
//!   How each format reports these: [`Usage`].
//! * **Tool calls**: when the request declares a function tool and the
//!   conversation does not end with a tool result, the reply calls the first
//!   declared tool with the arguments [`TOOL_ARGS`] (`{"q":"mock"}`), streamed
//!   as the two pieces [`TOOL_ARG_PIECES`]; usage as for text.

use bytes::Bytes;
use serde_json::{Value, json};

pub use crate::usage::{Usage, default_prompt_tokens};

/// The fixed `created` / `created_at` timestamp.
pub const CREATED: u64 = 1_700_000_000;
/// Number of content pieces when `x-mock-events` is absent.
pub const DEFAULT_EVENTS: usize = 5;
/// Upper bound for `x-mock-events` (larger values are clamped).
pub const MAX_EVENTS: usize = 10_000;
/// The `system_fingerprint` of chat objects.
pub const SYSTEM_FINGERPRINT: &str = "fp_mock";
/// The arguments of every mock tool call, as a JSON string.
pub const TOOL_ARGS: &str = r#"{"q":"mock"}"#;
/// The two pieces [`TOOL_ARGS`] is streamed in.
pub const TOOL_ARG_PIECES: [&str; 2] = [r#"{"q":"#, r#""mock"}"#];
/// The models `GET /v1/models` lists, in order.
pub const MODELS: &[&str] = &["gpt-4o-mini", "gpt-4o", "o3-mini", "whisper-1"];

/// FNV-1a, 64-bit.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// The 16 lowercase hex digits of [`fnv1a64`] of a request body, as used in ids.
pub fn body_hash_hex(body: &[u8]) -> String {
    format!("{:016x}", fnv1a64(body))
}

/// The content pieces of a reply with `n` pieces: `" w1"`, …, `" wn"`.
pub fn stream_pieces(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!(" w{i}")).collect()
}

/// The text of a streamed reply: the pieces concatenated (`" w1 w2 … wn"`).
pub fn streamed_text(n: usize) -> String {
    stream_pieces(n).concat()
}

/// The text of a non-streaming reply: `"mock reply"` followed by the pieces.
pub fn reply_text(n: usize) -> String {
    format!("mock reply{}", streamed_text(n))
}

/// Everything a reply depends on.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    /// [`body_hash_hex`] of the request body.
    pub(crate) hash: String,
    /// The request's model.
    pub(crate) model: String,
    /// Number of content pieces.
    pub(crate) n: usize,
    /// Usage to report.
    pub(crate) usage: Usage,
    /// Chat only: `stream_options.include_usage == true`.
    pub(crate) include_usage: bool,
    /// The tool to call instead of answering with text (see `tools`).
    pub(crate) tool: Option<String>,
    /// Bytes of `x` appended to the reply's text (`x-mock-pad-bytes`; OpenAI routes and Gemini):
    /// to the non-streaming text, and to the last streamed piece.
    pub(crate) pad: usize,
}

pub(crate) fn to_bytes(v: &Value) -> Bytes {
    Bytes::from(v.to_string())
}

pub(crate) fn sse_data(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

pub(crate) fn sse_event(ty: &str, v: &Value) -> Bytes {
    Bytes::from(format!("event: {ty}\ndata: {v}\n\n"))
}

/// A stream's error event mid-answer (`error_after`): Anthropic's named `error` event, else
/// OpenAI's `data: {"error": …}`.
pub(crate) fn stream_error(anthropic: bool) -> Bytes {
    match anthropic {
        true => sse_event(
            "error",
            &serde_json::json!({"type": "error",
                "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        ),
        false => sse_data(&serde_json::json!({"error": {
            "message": "The server had an error while processing your request.",
            "type": "server_error", "param": null, "code": null}})),
    }
}

/// The first malformed event: a `data:` line that is not JSON.
pub(crate) const MALFORMED_DATA: &[u8] = b"data: {not json\n\n";
/// The second malformed event: a line without a `data:` prefix.
pub(crate) const GARBAGE_LINE: &[u8] = b"garbage line\n\n";
/// The chat stream terminator.
pub(crate) const DONE: &[u8] = b"data: [DONE]\n\n";

/// `GET /v1/models` body.
pub(crate) fn models_body() -> Bytes {
    let data: Vec<Value> = MODELS
        .iter()
        .map(|id| json!({"id": id, "object": "model", "owned_by": "mock"}))
        .collect();
    to_bytes(&json!({"object": "list", "data": data}))
}

/// An OpenAI-style error body.
pub(crate) fn error_body(message: &str, ty: &str, code: Option<&str>) -> Bytes {
    let mut error = json!({"message": message, "type": ty});
    if let (Some(code), Some(obj)) = (code, error.as_object_mut()) {
        obj.insert("code".into(), Value::from(code));
    }
    to_bytes(&json!({ "error": error }))
}

impl Reply {
    /// The whole (not streamed) body: a chat completion, or (`responses`) a response; with its
    /// tool call when it has one.
    pub(crate) fn whole(&self, responses: bool) -> Bytes {
        match (responses, self.tool.is_some()) {
            (false, false) => self.chat_completion(),
            (false, true) => self.chat_tool_completion(),
            (true, false) => self.response(),
            (true, true) => self.tool_response(),
        }
    }

    /// The non-streaming reply text ([`reply_text`] plus the padding).
    pub(crate) fn text(&self) -> String {
        let mut text = reply_text(self.n);
        text.extend(std::iter::repeat_n('x', self.pad));
        text
    }

    /// The streamed pieces ([`stream_pieces`], the last one padded).
    pub(crate) fn pieces(&self) -> Vec<String> {
        let mut pieces = stream_pieces(self.n);
        if self.pad > 0 {
            if pieces.is_empty() {
                pieces.push(String::new());
            }
            if let Some(last) = pieces.last_mut() {
                last.extend(std::iter::repeat_n('x', self.pad));
            }
        }
        pieces
    }

    pub(crate) fn chat_id(&self) -> String {
        format!("chatcmpl-{}", self.hash)
    }

    pub(crate) fn resp_id(&self) -> String {
        format!("resp_{}", self.hash)
    }

    fn msg_id(&self) -> String {
        format!("msg_{}", self.hash)
    }

    /// Non-streaming chat completion body.
    pub(crate) fn chat_completion(&self) -> Bytes {
        to_bytes(&json!({
            "id": self.chat_id(),
            "object": "chat.completion",
            "created": CREATED,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": self.text()},
                "finish_reason": "stop",
            }],
            "usage": self.usage.chat_json(),
        }))
    }

    pub(crate) fn chat_chunk(&self, delta: Value, finish_reason: Option<&str>) -> Bytes {
        let mut chunk = json!({
            "id": self.chat_id(),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        });
        if self.include_usage
            && let Some(obj) = chunk.as_object_mut()
        {
            obj.insert("usage".into(), Value::Null);
        }
        sse_data(&chunk)
    }

    pub(crate) fn chat_role_chunk(&self) -> Bytes {
        self.chat_chunk(json!({"role": "assistant", "content": ""}), None)
    }

    /// The SSE events of a streamed chat completion, one `Bytes` per event.
    pub(crate) fn chat_stream(&self) -> Vec<Bytes> {
        let mut events = Vec::with_capacity(self.n + 4);
        events.push(self.chat_role_chunk());
        for piece in self.pieces() {
            events.push(self.chat_chunk(json!({ "content": piece }), None));
        }
        events.push(self.chat_chunk(json!({}), Some("stop")));
        if self.include_usage {
            events.push(self.chat_usage_chunk());
        }
        events.push(Bytes::from_static(DONE));
        events
    }

    /// The final usage-only chunk of a chat stream with `include_usage`.
    pub(crate) fn chat_usage_chunk(&self) -> Bytes {
        sse_data(&json!({
            "id": self.chat_id(),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [],
            "usage": self.usage.chat_json(),
        }))
    }

    /// The `malformed_sse` chat stream.
    pub(crate) fn chat_malformed(&self) -> Vec<Bytes> {
        vec![
            self.chat_role_chunk(),
            Bytes::from_static(MALFORMED_DATA),
            Bytes::from_static(GARBAGE_LINE),
            self.chat_chunk(json!({ "content": " w1" }), None),
        ]
    }

    fn response_object(&self, status: &str, text: Option<String>) -> Value {
        let mut obj = json!({
            "id": self.resp_id(),
            "object": "response",
            "created_at": CREATED,
            "status": status,
            "model": self.model,
            "output": [],
        });
        if let (Some(text), Some(map)) = (text, obj.as_object_mut()) {
            map.insert(
                "output".into(),
                json!([{
                    "type": "message",
                    "id": self.msg_id(),
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": text}],
                }]),
            );
            map.insert("usage".into(), self.usage.responses_json());
        }
        obj
    }

    /// Non-streaming responses-API body.
    pub(crate) fn response(&self) -> Bytes {
        to_bytes(&self.response_object("completed", Some(self.text())))
    }

    pub(crate) fn response_created(&self) -> Bytes {
        sse_event(
            "response.created",
            &json!({
                "type": "response.created",
                "response": self.response_object("in_progress", None),
                "sequence_number": 0,
            }),
        )
    }

    fn response_delta(&self, piece: &str, seq: usize) -> Bytes {
        sse_event(
            "response.output_text.delta",
            &json!({
                "type": "response.output_text.delta",
                "item_id": self.msg_id(),
                "output_index": 0,
                "content_index": 0,
                "delta": piece,
                "sequence_number": seq,
            }),
        )
    }

    /// The SSE events of a streamed response, one `Bytes` per event.
    pub(crate) fn response_stream(&self) -> Vec<Bytes> {
        let mut events = Vec::with_capacity(self.n + 3);
        events.push(self.response_created());
        let pieces = self.pieces();
        for (i, piece) in pieces.iter().enumerate() {
            events.push(self.response_delta(piece, i + 1));
        }
        let text = pieces.concat();
        events.push(sse_event(
            "response.output_text.done",
            &json!({
                "type": "response.output_text.done",
                "item_id": self.msg_id(),
                "output_index": 0,
                "content_index": 0,
                "text": text,
                "sequence_number": self.n + 1,
            }),
        ));
        events.push(sse_event(
            "response.completed",
            &json!({
                "type": "response.completed",
                "response": self.response_object("completed", Some(text)),
                "sequence_number": self.n + 2,
            }),
        ));
        events
    }

    /// The `malformed_sse` responses stream.
    pub(crate) fn response_malformed(&self) -> Vec<Bytes> {
        vec![
            self.response_created(),
            Bytes::from_static(MALFORMED_DATA),
            Bytes::from_static(GARBAGE_LINE),
            self.response_delta(" w1", 1),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(include_usage: bool) -> Reply {
        Reply {
            hash: body_hash_hex(b"{}"),
            model: "gpt-4o-mini".into(),
            n: 3,
            usage: Usage::defaults(9, 3),
            include_usage,
            tool: None,
            pad: 0,
        }
    }

    fn data_json(event: &Bytes) -> Value {
        let s = std::str::from_utf8(event).unwrap();
        let data = s.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        serde_json::from_str(data).unwrap()
    }

    #[test]
    fn fnv_known_values() {
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(body_hash_hex(b"a"), "af63dc4c8601ec8c");
    }

    #[test]
    fn text_rules() {
        assert_eq!(stream_pieces(2), vec![" w1", " w2"]);
        assert_eq!(streamed_text(3), " w1 w2 w3");
        assert_eq!(reply_text(3), "mock reply w1 w2 w3");
        assert_eq!(reply_text(0), "mock reply");
    }

    #[test]
    fn chat_completion_shape() {
        let v: Value = serde_json::from_slice(&reply(false).chat_completion()).unwrap();
        assert_eq!(v["id"], format!("chatcmpl-{}", body_hash_hex(b"{}")));
        assert_eq!(v["created"], CREATED);
        assert_eq!(v["choices"][0]["message"]["content"], "mock reply w1 w2 w3");
        assert_eq!(v["usage"]["prompt_tokens"], 3);
        assert_eq!(v["usage"]["completion_tokens"], 3);
    }

    #[test]
    fn chat_stream_with_and_without_usage() {
        let plain = reply(false).chat_stream();
        assert_eq!(plain.len(), 1 + 3 + 1 + 1);
        assert_eq!(plain.last().unwrap(), &Bytes::from_static(DONE));
        assert!(data_json(&plain[0]).get("usage").is_none());
        assert_eq!(
            data_json(&plain[0])["choices"][0]["delta"]["role"],
            "assistant"
        );
        assert_eq!(data_json(&plain[4])["choices"][0]["finish_reason"], "stop");

        let with = reply(true).chat_stream();
        assert_eq!(with.len(), 1 + 3 + 1 + 1 + 1);
        assert!(data_json(&with[0])["usage"].is_null());
        assert!(data_json(&with[0]).get("usage").is_some());
        let usage = data_json(&with[5]);
        assert_eq!(usage["choices"], json!([]));
        assert_eq!(usage["usage"]["total_tokens"], 6);
    }

    #[test]
    fn response_stream_shape() {
        let events = reply(false).response_stream();
        assert_eq!(events.len(), 1 + 3 + 2);
        assert!(events[0].starts_with(b"event: response.created\ndata: "));
        let created = data_json(&events[0]);
        assert_eq!(created["response"]["status"], "in_progress");
        assert!(created["response"].get("usage").is_none());
        assert_eq!(data_json(&events[2])["delta"], " w2");
        assert_eq!(data_json(&events[2])["sequence_number"], 2);
        let done = data_json(&events[5]);
        assert_eq!(done["type"], "response.completed");
        assert_eq!(done["response"]["usage"]["input_tokens"], 3);
        assert_eq!(
            done["response"]["output"][0]["content"][0]["text"],
            " w1 w2 w3"
        );
    }

    #[test]
    fn error_body_shape() {
        let v: Value =
            serde_json::from_slice(&error_body("nope", "invalid_request_error", Some("c")))
                .unwrap();
        assert_eq!(
            v,
            json!({"error":{"message":"nope","type":"invalid_request_error","code":"c"}})
        );
    }
}
