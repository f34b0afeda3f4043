//! The Anthropic Messages decoder: the named events of a stream (read by the `type` inside each
//! data object, which the `event:` name repeats), or one `message` body.
//!
//! Tool calls are numbered with a counter of this response, never by content-block index (a text
//! block first puts the first tool call at block 1). Usage is cumulative in every event that
//! carries it: a running copy keeps the last value of each field and the merged value is emitted,
//! never a sum. `redacted_thinking`, server-tool blocks and `citations_delta` are dropped.

use serde_json::Value;

use super::{count, error_message, overwrite, text};
use crate::ir::{Event, FinishReason, Usage};

/// What a content block of the stream is, by its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    Text,
    Thinking,
    /// A tool call, with our index.
    Tool(usize),
    Other,
}

/// Anthropic's usage fields, as last reported (each field is overwritten when present).
#[derive(Debug, Default, Clone, Copy)]
struct Running {
    input: u64,
    output: u64,
    cache_read: u64,
    cache_creation: u64,
    thinking: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Messages {
    started: bool,
    blocks: Vec<(u64, Block)>,
    tools: usize,
    usage: Running,
    settled: bool,
}

impl Messages {
    /// One event of a stream.
    pub fn event(&mut self, value: &Value, out: &mut Vec<Event>) {
        match text(value, "type").unwrap_or_default() {
            "message_start" => {
                let message = value.get("message").unwrap_or(&Value::Null);
                self.start(message, out);
                if let Some(usage) = message.get("usage") {
                    out.push(Event::Usage(self.merge(usage)));
                }
            }
            "content_block_start" => {
                let block = value.get("content_block").unwrap_or(&Value::Null);
                let kind = self.block(block, false, out);
                self.blocks
                    .push((count(value, "index").unwrap_or(u64::MAX), kind));
            }
            "content_block_delta" => {
                let index = count(value, "index").unwrap_or(u64::MAX);
                let kind = self
                    .blocks
                    .iter()
                    .rev()
                    .find(|(seen, _)| *seen == index)
                    .map(|(_, kind)| *kind);
                self.delta(kind, value.get("delta").unwrap_or(&Value::Null), out);
            }
            "message_delta" => {
                if let Some(usage) = value.get("usage") {
                    out.push(Event::Usage(self.merge(usage)));
                }
                let delta = value.get("delta").unwrap_or(&Value::Null);
                if let Some(reason) = text(delta, "stop_reason") {
                    out.push(Event::Finish(stop_reason(reason)));
                    self.settled = true;
                }
            }
            "message_stop" => self.settled = true,
            "error" => out.push(Event::Error {
                message: error_message(value.get("error").unwrap_or(value)),
            }),
            _ => {}
        }
    }

    /// A whole `message` body; `false` when it is not one.
    pub fn body(&mut self, body: &Value, out: &mut Vec<Event>) -> bool {
        if text(body, "type") == Some("error") {
            self.event(body, out);
            return true;
        }
        let Some(content) = body.get("content").and_then(Value::as_array) else {
            return false;
        };
        self.start(body, out);
        for block in content {
            self.block(block, true, out);
        }
        if let Some(usage) = body.get("usage") {
            out.push(Event::Usage(self.merge(usage)));
        }
        if let Some(reason) = text(body, "stop_reason") {
            out.push(Event::Finish(stop_reason(reason)));
        }
        self.settled = true;
        true
    }

    pub fn settled(&self) -> bool {
        self.settled
    }

    fn start(&mut self, message: &Value, out: &mut Vec<Event>) {
        if !self.started {
            self.started = true;
            out.push(Event::Start {
                id: text(message, "id").unwrap_or_default().to_string(),
                model: text(message, "model").unwrap_or_default().to_string(),
            });
        }
    }

    /// A content block as it starts (stream) or whole (body: a tool's `input` is its arguments).
    fn block(&mut self, block: &Value, whole: bool, out: &mut Vec<Event>) -> Block {
        match text(block, "type").unwrap_or_default() {
            "text" => {
                if let Some(reply) = text(block, "text").filter(|t| !t.is_empty()) {
                    out.push(Event::Text(reply.to_string()));
                }
                Block::Text
            }
            "thinking" => {
                if let Some(thinking) = text(block, "thinking").filter(|t| !t.is_empty()) {
                    out.push(Event::Thinking(thinking.to_string()));
                }
                if let Some(signature) = text(block, "signature").filter(|s| !s.is_empty()) {
                    out.push(Event::ThinkingSignature(signature.to_string()));
                }
                Block::Thinking
            }
            "tool_use" => {
                let index = self.tools;
                self.tools += 1;
                out.push(Event::ToolCallStart {
                    index,
                    id: text(block, "id").unwrap_or_default().to_string(),
                    name: text(block, "name").unwrap_or_default().to_string(),
                });
                let input = block.get("input");
                let empty =
                    input.is_none_or(|input| input.as_object().is_some_and(|o| o.is_empty()));
                if whole || !empty {
                    let fragment = input.map_or_else(|| "{}".to_string(), Value::to_string);
                    out.push(Event::ToolCallArgs { index, fragment });
                }
                Block::Tool(index)
            }
            _ => Block::Other,
        }
    }

    fn delta(&mut self, kind: Option<Block>, delta: &Value, out: &mut Vec<Event>) {
        let fragment = |key| {
            text(delta, key)
                .filter(|t| !t.is_empty())
                .map(str::to_string)
        };
        match text(delta, "type").unwrap_or_default() {
            "text_delta" => out.extend(fragment("text").map(Event::Text)),
            "thinking_delta" => out.extend(fragment("thinking").map(Event::Thinking)),
            "signature_delta" => {
                out.extend(fragment("signature").map(Event::ThinkingSignature));
            }
            "input_json_delta" => {
                if let Some(Block::Tool(index)) = kind {
                    out.extend(
                        fragment("partial_json")
                            .map(|fragment| Event::ToolCallArgs { index, fragment }),
                    );
                }
            }
            _ => {}
        }
    }

    /// Overwrites the running usage with the fields present; returns it in canonical form.
    fn merge(&mut self, usage: &Value) -> Usage {
        let running = &mut self.usage;
        let fields = [
            ("input_tokens", &mut running.input),
            ("output_tokens", &mut running.output),
            ("cache_read_input_tokens", &mut running.cache_read),
            ("cache_creation_input_tokens", &mut running.cache_creation),
        ];
        overwrite(usage, fields);
        if let Some(thinking) = usage
            .get("output_tokens_details")
            .and_then(|details| count(details, "thinking_tokens"))
        {
            running.thinking = thinking;
        }
        Usage {
            input: running.input + running.cache_read + running.cache_creation,
            output: running.output,
            cached: running.cache_read,
            cache_creation: running.cache_creation,
            reasoning: running.thinking,
        }
    }
}

fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "end_turn" | "stop_sequence" => FinishReason::Stop,
        "max_tokens" | "model_context_window_exceeded" => FinishReason::Length,
        "tool_use" => FinishReason::ToolCalls,
        "refusal" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn cumulative_usage_is_merged_never_added() {
        let mut decoder = Messages::default();
        let mut out = Vec::new();
        decoder.event(&json!({"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude","content":[],
            "usage":{"input_tokens":100,"cache_read_input_tokens":50,"cache_creation_input_tokens":20,"output_tokens":1}}}), &mut out);
        decoder.event(&json!({"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":30}}), &mut out);
        decoder.event(&json!({"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":42}}), &mut out);
        let expected = |output| {
            Event::Usage(Usage {
                input: 170,
                output,
                cached: 50,
                cache_creation: 20,
                reasoning: 0,
            })
        };
        assert_eq!(
            out,
            vec![
                Event::Start {
                    id: "msg_1".into(),
                    model: "claude".into()
                },
                expected(1),
                expected(30),
                expected(42),
                Event::Finish(FinishReason::Stop),
            ]
        );
        assert!(decoder.settled());
    }

    #[test]
    fn tool_calls_count_from_zero_after_a_text_block() {
        let mut decoder = Messages::default();
        let mut out = Vec::new();
        for event in [
            json!({"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}),
            json!({"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me check."}}),
            json!({"type":"content_block_stop","index":0}),
            json!({"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_1","name":"get_weather","input":{}}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":""}}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}),
            json!({"type":"ping"}),
            json!({"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}),
            json!({"type":"some_future_event","index":1}),
        ] {
            decoder.event(&event, &mut out);
        }
        assert_eq!(
            out,
            vec![
                Event::Text("Let me check.".into()),
                Event::ToolCallStart {
                    index: 0,
                    id: "toolu_1".into(),
                    name: "get_weather".into()
                },
                Event::ToolCallArgs {
                    index: 0,
                    fragment: "{\"city\":".into()
                },
                Event::ToolCallArgs {
                    index: 0,
                    fragment: "\"Paris\"}".into()
                },
            ]
        );
    }

    #[test]
    fn a_body_gives_whole_tool_input_and_thinking() {
        let mut decoder = Messages::default();
        let mut out = Vec::new();
        assert!(decoder.body(
            &json!({"id":"msg_2","type":"message","role":"assistant","model":"claude","content":[
            {"type":"thinking","thinking":"hmm","signature":"sig"},
            {"type":"redacted_thinking","data":"xx"},
            {"type":"tool_use","id":"toolu_2","name":"f","input":{"a":[1,2]}}],
            "stop_reason":"tool_use","usage":{"input_tokens":5,"output_tokens":7}}),
            &mut out
        ));
        assert_eq!(
            &out[1..],
            &[
                Event::Thinking("hmm".into()),
                Event::ThinkingSignature("sig".into()),
                Event::ToolCallStart {
                    index: 0,
                    id: "toolu_2".into(),
                    name: "f".into()
                },
                Event::ToolCallArgs {
                    index: 0,
                    fragment: "{\"a\":[1,2]}".into()
                },
                Event::Usage(Usage {
                    input: 5,
                    output: 7,
                    ..Usage::default()
                }),
                Event::Finish(FinishReason::ToolCalls),
            ]
        );
        assert!(!Messages::default().body(&json!({"choices": []}), &mut out));
    }
}
