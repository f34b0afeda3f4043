//! Tool-call replies in the OpenAI formats: the chat-completions message with
//! `tool_calls` (and its stream) and the responses-API `function_call` output
//! item (and its stream). Which tool is called is decided in `tools`; ids and
//! arguments follow the rules in [`reply`](crate::reply).

use bytes::Bytes;
use serde_json::{Value, json};

use crate::reply::{
    CREATED, DONE, Reply, SYSTEM_FINGERPRINT, TOOL_ARG_PIECES, TOOL_ARGS, sse_event, to_bytes,
};

impl Reply {
    /// The name of the tool to call (empty when none; callers check first).
    fn tool_name(&self) -> &str {
        self.tool.as_deref().unwrap_or_default()
    }

    /// `call_<hash>`: the chat tool call id and the responses `call_id`.
    pub(crate) fn call_id(&self) -> String {
        format!("call_{}", self.hash)
    }

    fn fc_id(&self) -> String {
        format!("fc_{}", self.hash)
    }

    /// Non-streaming chat completion calling the tool.
    pub(crate) fn chat_tool_completion(&self) -> Bytes {
        to_bytes(&json!({
            "id": self.chat_id(),
            "object": "chat.completion",
            "created": CREATED,
            "model": self.model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{
                        "id": self.call_id(),
                        "type": "function",
                        "function": {"name": self.tool_name(), "arguments": TOOL_ARGS},
                    }],
                },
                "finish_reason": "tool_calls",
            }],
            "usage": self.usage.chat_json(),
        }))
    }

    /// The SSE events of a streamed chat completion calling the tool: role
    /// chunk (`content: null`), the call head (id, type, name, empty
    /// arguments), two argument chunks, the `tool_calls` finish chunk, the
    /// usage chunk (with `include_usage`) and `[DONE]`.
    pub(crate) fn chat_tool_stream(&self) -> Vec<Bytes> {
        let mut events = vec![
            self.chat_chunk(json!({"role": "assistant", "content": null}), None),
            self.chat_chunk(
                json!({"tool_calls": [{
                    "index": 0,
                    "id": self.call_id(),
                    "type": "function",
                    "function": {"name": self.tool_name(), "arguments": ""},
                }]}),
                None,
            ),
        ];
        for piece in TOOL_ARG_PIECES {
            events.push(self.chat_chunk(
                json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                None,
            ));
        }
        events.push(self.chat_chunk(json!({}), Some("tool_calls")));
        if self.include_usage {
            events.push(self.chat_usage_chunk());
        }
        events.push(Bytes::from_static(DONE));
        events
    }

    fn function_call_item(&self, done: bool) -> Value {
        json!({
            "type": "function_call",
            "id": self.fc_id(),
            "call_id": self.call_id(),
            "name": self.tool_name(),
            "arguments": if done { TOOL_ARGS } else { "" },
            "status": if done { "completed" } else { "in_progress" },
        })
    }

    fn tool_response_object(&self) -> Value {
        json!({
            "id": self.resp_id(),
            "object": "response",
            "created_at": CREATED,
            "status": "completed",
            "model": self.model,
            "output": [self.function_call_item(true)],
            "usage": self.usage.responses_json(),
        })
    }

    /// Non-streaming responses-API body calling the tool.
    pub(crate) fn tool_response(&self) -> Bytes {
        to_bytes(&self.tool_response_object())
    }

    /// The SSE events of a streamed response calling the tool:
    /// `response.created`, `response.output_item.added`,
    /// `response.function_call_arguments.delta` ×2,
    /// `response.function_call_arguments.done`, `response.output_item.done`,
    /// `response.completed`; `sequence_number` counts from 0.
    pub(crate) fn tool_response_stream(&self) -> Vec<Bytes> {
        let mut events = vec![self.response_created()];
        let mut seq = 1;
        let mut push = |events: &mut Vec<Bytes>, ty: &str, mut v: Value| {
            if let Some(obj) = v.as_object_mut() {
                obj.insert("type".into(), Value::from(ty));
                obj.insert("sequence_number".into(), Value::from(seq));
            }
            seq += 1;
            events.push(sse_event(ty, &v));
        };
        push(
            &mut events,
            "response.output_item.added",
            json!({"output_index": 0, "item": self.function_call_item(false)}),
        );
        for piece in TOOL_ARG_PIECES {
            push(
                &mut events,
                "response.function_call_arguments.delta",
                json!({"item_id": self.fc_id(), "output_index": 0, "delta": piece}),
            );
        }
        push(
            &mut events,
            "response.function_call_arguments.done",
            json!({"item_id": self.fc_id(), "output_index": 0, "arguments": TOOL_ARGS}),
        );
        push(
            &mut events,
            "response.output_item.done",
            json!({"output_index": 0, "item": self.function_call_item(true)}),
        );
        push(
            &mut events,
            "response.completed",
            json!({"response": self.tool_response_object()}),
        );
        events
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reply::{Usage, body_hash_hex};

    fn reply(include_usage: bool) -> Reply {
        Reply {
            hash: body_hash_hex(b"{}"),
            model: "gpt-4o".into(),
            n: 3,
            usage: Usage::defaults(9, 3),
            include_usage,
            tool: Some("lookup".into()),
            pad: 0,
        }
    }

    fn data_json(event: &Bytes) -> Value {
        let s = std::str::from_utf8(event).unwrap();
        let data = s.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
        serde_json::from_str(data).unwrap()
    }

    #[test]
    fn chat_tool_shapes() {
        let r = reply(true);
        let v: Value = serde_json::from_slice(&r.chat_tool_completion()).unwrap();
        let choice = &v["choices"][0];
        assert_eq!(choice["finish_reason"], "tool_calls");
        assert!(choice["message"]["content"].is_null());
        assert_eq!(
            choice["message"]["tool_calls"],
            json!([{"id": r.call_id(), "type": "function", "function": {"name": "lookup", "arguments": "{\"q\":\"mock\"}"}}])
        );
        assert_eq!(v["usage"]["completion_tokens"], 3);

        let events = r.chat_tool_stream();
        assert_eq!(events.len(), 7);
        let args: String = events[2..4]
            .iter()
            .map(|e| {
                data_json(e)["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"]
                    .as_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(args, TOOL_ARGS);
        assert_eq!(
            data_json(&events[1])["choices"][0]["delta"]["tool_calls"][0]["id"],
            r.call_id()
        );
        assert_eq!(
            data_json(&events[4])["choices"][0]["finish_reason"],
            "tool_calls"
        );
        assert_eq!(data_json(&events[5])["usage"]["total_tokens"], 6);
        assert_eq!(events[6], Bytes::from_static(DONE));
        assert_eq!(reply(false).chat_tool_stream().len(), 6);
    }

    #[test]
    fn responses_tool_shapes() {
        let r = reply(false);
        let v: Value = serde_json::from_slice(&r.tool_response()).unwrap();
        let hash = body_hash_hex(b"{}");
        assert_eq!(
            v["output"],
            json!([{"type": "function_call", "id": format!("fc_{hash}"), "call_id": format!("call_{hash}"), "name": "lookup", "arguments": TOOL_ARGS, "status": "completed"}])
        );
        let events = r.tool_response_stream();
        let types: Vec<String> = events
            .iter()
            .map(|e| data_json(e)["type"].as_str().unwrap().to_owned())
            .collect();
        assert_eq!(
            types,
            [
                "response.created",
                "response.output_item.added",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.delta",
                "response.function_call_arguments.done",
                "response.output_item.done",
                "response.completed"
            ]
        );
        for (i, e) in events.iter().enumerate() {
            assert_eq!(data_json(e)["sequence_number"], i);
        }
        assert_eq!(data_json(&events[1])["item"]["arguments"], "");
        assert_eq!(
            data_json(&events[6])["response"]["usage"]["output_tokens"],
            3
        );
    }
}
