//! The Anthropic Messages wire format: Anthropic-shaped error bodies and the
//! exact reply bodies and SSE events of `POST /v1/messages` (text and
//! `tool_use`). Request validation lives in `anthropic_check`.
//!
//! # Stream events
//!
//! Every event is `event: NAME\ndata: JSON\n\n`. Text: `message_start`
//! (content `[]`, `stop_reason: null`, usage with `output_tokens: 1`),
//! `content_block_start` (index 0, `{"type":"text","text":""}`), `ping`,
//! `content_block_delta` × n (`text_delta` `" wi"`), `content_block_stop`,
//! `message_delta` (`stop_reason: "end_turn"` and the CUMULATIVE usage:
//! `input_tokens`, `cache_creation_input_tokens`, `cache_read_input_tokens`
//! repeated and the final `output_tokens`), `message_stop`. Tool call:
//! `message_start`, `content_block_start` (`{"type":"tool_use","id","name","input":{}}`),
//! `content_block_delta` × 2 (`input_json_delta`, `partial_json` `{"q":` then
//! `"mock"}`), `content_block_stop`, `message_delta` (`stop_reason: "tool_use"`),
//! `message_stop`.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::reply::{
    GARBAGE_LINE, MALFORMED_DATA, Reply, TOOL_ARG_PIECES, reply_text, sse_event, stream_pieces,
    to_bytes,
};

/// The `request_id` of every Anthropic error body.
pub const REQUEST_ID: &str = "req_mock";

/// The Anthropic error `type` for an HTTP status.
pub(crate) fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// `{"type":"error","error":{"type":T,"message":M},"request_id":"req_mock"}`.
pub(crate) fn error_body(status: u16, message: &str) -> Bytes {
    to_bytes(&json!({
        "type": "error",
        "error": {"type": error_type(status), "message": message},
        "request_id": REQUEST_ID,
    }))
}

impl Reply {
    /// `msg_<hash>`.
    pub(crate) fn anthropic_id(&self) -> String {
        format!("msg_{}", self.hash)
    }

    /// `toolu_<hash>`.
    pub(crate) fn toolu_id(&self) -> String {
        format!("toolu_{}", self.hash)
    }

    fn stop_reason(&self) -> &'static str {
        if self.tool.is_some() {
            "tool_use"
        } else {
            "end_turn"
        }
    }

    fn anthropic_message_object(&self, content: Value, stop: Value, output_tokens: u64) -> Value {
        json!({
            "id": self.anthropic_id(),
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": null,
            "usage": self.usage.anthropic_json(output_tokens),
        })
    }

    /// Non-streaming `POST /v1/messages` body.
    pub(crate) fn anthropic_message(&self) -> Bytes {
        let content = match &self.tool {
            Some(name) => json!([{
                "type": "tool_use",
                "id": self.toolu_id(),
                "name": name,
                "input": {"q": "mock"},
            }]),
            None => json!([{"type": "text", "text": reply_text(self.n)}]),
        };
        to_bytes(&self.anthropic_message_object(
            content,
            Value::from(self.stop_reason()),
            self.usage.completion,
        ))
    }

    fn message_start(&self) -> Bytes {
        sse_event(
            "message_start",
            &json!({
                "type": "message_start",
                "message": self.anthropic_message_object(json!([]), Value::Null, 1),
            }),
        )
    }

    fn block_delta(delta: Value) -> Bytes {
        sse_event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": delta}),
        )
    }

    fn text_delta(piece: &str) -> Bytes {
        Self::block_delta(json!({"type": "text_delta", "text": piece}))
    }

    /// The SSE events of a streamed `POST /v1/messages` (see the module docs).
    pub(crate) fn anthropic_stream(&self) -> Vec<Bytes> {
        let mut events = vec![self.message_start()];
        let block = match &self.tool {
            Some(name) => {
                json!({"type": "tool_use", "id": self.toolu_id(), "name": name, "input": {}})
            }
            None => json!({"type": "text", "text": ""}),
        };
        events.push(sse_event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": block}),
        ));
        if self.tool.is_some() {
            for piece in TOOL_ARG_PIECES {
                events.push(Self::block_delta(
                    json!({"type": "input_json_delta", "partial_json": piece}),
                ));
            }
        } else {
            events.push(sse_event("ping", &json!({"type": "ping"})));
            for piece in stream_pieces(self.n) {
                events.push(Self::text_delta(&piece));
            }
        }
        events.push(sse_event(
            "content_block_stop",
            &json!({"type": "content_block_stop", "index": 0}),
        ));
        events.push(sse_event(
            "message_delta",
            &json!({
                "type": "message_delta",
                "delta": {"stop_reason": self.stop_reason(), "stop_sequence": null},
                "usage": self.usage.anthropic_json(self.usage.completion),
            }),
        ));
        events.push(sse_event("message_stop", &json!({"type": "message_stop"})));
        events
    }

    /// The `malformed_sse` Anthropic stream: `message_start`, a
    /// `data: {not json` event, a garbage line, one text delta, then the end
    /// without `message_stop`.
    pub(crate) fn anthropic_malformed(&self) -> Vec<Bytes> {
        vec![
            self.message_start(),
            Bytes::from_static(MALFORMED_DATA),
            Bytes::from_static(GARBAGE_LINE),
            Self::text_delta(" w1"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::{Usage, body_hash_hex};

    fn reply(tool: Option<&str>) -> Reply {
        Reply {
            hash: body_hash_hex(b"{}"),
            model: "claude-x".into(),
            n: 3,
            usage: Usage::defaults(0, 3)
                .with_header("prompt=100,cached=30,cache_creation=20")
                .unwrap(),
            include_usage: false,
            tool: tool.map(str::to_owned),
            pad: 0,
        }
    }

    fn parse(event: &Bytes) -> (String, Value) {
        let s = std::str::from_utf8(event).unwrap();
        let name = s.lines().find_map(|l| l.strip_prefix("event: ")).unwrap();
        let data = s.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        (name.to_owned(), serde_json::from_str(data).unwrap())
    }

    #[test]
    fn error_shape() {
        let v: Value = serde_json::from_slice(&error_body(529, "busy")).unwrap();
        assert_eq!(
            v,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}, "request_id": "req_mock"})
        );
        for (code, ty) in [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (429, "rate_limit_error"),
            (500, "api_error"),
            (503, "api_error"),
        ] {
            assert_eq!(error_type(code), ty);
        }
    }

    #[test]
    fn text_reply_and_stream() {
        let r = reply(None);
        let v: Value = serde_json::from_slice(&r.anthropic_message()).unwrap();
        assert_eq!(
            v["content"],
            json!([{"type": "text", "text": "mock reply w1 w2 w3"}])
        );
        assert_eq!(v["stop_reason"], "end_turn");
        assert_eq!(
            v["usage"],
            json!({"input_tokens": 50, "cache_creation_input_tokens": 20, "cache_read_input_tokens": 30, "output_tokens": 3})
        );
        let events: Vec<(String, Value)> = r.anthropic_stream().iter().map(parse).collect();
        let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "ping",
                "content_block_delta",
                "content_block_delta",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        for (name, data) in &events {
            assert_eq!(data["type"], *name);
        }
        assert_eq!(events[0].1["message"]["usage"]["output_tokens"], 1);
        assert!(events[0].1["message"]["stop_reason"].is_null());
        assert_eq!(events[4].1["delta"]["text"], " w2");
        assert_eq!(events[7].1["usage"], v["usage"]);
    }

    #[test]
    fn tool_reply_and_stream() {
        let r = reply(Some("get"));
        let v: Value = serde_json::from_slice(&r.anthropic_message()).unwrap();
        assert_eq!(
            v["content"],
            json!([{"type": "tool_use", "id": r.toolu_id(), "name": "get", "input": {"q": "mock"}}])
        );
        assert_eq!(v["stop_reason"], "tool_use");
        let events: Vec<(String, Value)> = r.anthropic_stream().iter().map(parse).collect();
        assert_eq!(events.len(), 7);
        assert_eq!(events[1].1["content_block"]["input"], json!({}));
        let partial: String = events[2..4]
            .iter()
            .map(|(_, d)| d["delta"]["partial_json"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(partial, r#"{"q":"mock"}"#);
        assert_eq!(events[5].1["delta"]["stop_reason"], "tool_use");
    }
}
