//! The Anthropic Messages decoder: the named events of a stream (read by the `type` inside each
//! data object, which the `event:` name repeats), or one `message` body.
//!
//! Tool calls are numbered with a counter of this response, never by content-block index (a text
//! block first puts the first tool call at block 1). Usage is cumulative in every event that
//! carries it: a running copy keeps the last value of each field and the merged value is emitted,
//! never a sum. `redacted_thinking`, server-tool blocks and `citations_delta` are dropped.
//!
//! It is also the Messages format's meter, with one reading of the usage ([`RawUsage`], typed) for
//! a translated event (from the decoded tree) and a passed-through one ([`Messages::scan`], from
//! the bytes, only when they mention `"usage"`). Billed usage needs the final output count
//! (`message_delta`, or a whole message): `message_start`'s output is a placeholder, so a stream
//! cut after it has only its input reported ([`Messages::reported_so_far`]).
//!
//! Usage: `message_start.message.usage` carries the input side (`input_tokens` counts only the
//! tokens after the last cache breakpoint; `cache_read_input_tokens` and
//! `cache_creation_input_tokens` are separate), `message_delta.usage` the output side. Counts are
//! cumulative and newer API versions repeat input fields in `message_delta`: each field takes its
//! last value, nothing is added (`Running`). The gateway's input = `input_tokens` + cache
//! reads + cache writes; cached = cache reads (priced at `cached_input_per_mtok`); cache writes are
//! priced at `cache_write_per_mtok` (else as input).

use serde::Deserialize;
use serde_json::Value;

use super::{Key, Scanned, count, error_message, has_text, mentions, text};
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

/// Anthropic's usage fields, as last reported (each field present replaces the earlier value).
#[derive(Debug, Default, Clone, Copy)]
struct Running {
    input: Option<u64>,
    output: Option<u64>,
    cache_read: Option<u64>,
    cache_creation: Option<u64>,
    /// The hour-long part of `cache_creation` (`cache_creation.ephemeral_1h_input_tokens`).
    cache_creation_1h: Option<u64>,
    thinking: Option<u64>,
    /// The output count is final: a `message_delta` or a whole message carried it.
    output_final: bool,
}

impl Running {
    /// The counts so far in canonical form, once the input was reported and when plausible.
    fn counted(&self) -> Option<Usage> {
        let (read, written) = (
            self.cache_read.unwrap_or(0),
            self.cache_creation.unwrap_or(0),
        );
        Usage {
            input: self.input?.checked_add(read)?.checked_add(written)?,
            output: self.output.unwrap_or(0),
            cached: read,
            cache_write: written,
            cache_write_1h: self.cache_creation_1h.unwrap_or(0),
            reasoning: self.thinking.unwrap_or(0),
        }
        .plausible()
    }
}

/// Where usage sits in a Messages document: an event's `usage`, `message_start`'s
/// `message.usage`, a whole message's `usage`.
#[derive(Deserialize)]
struct Carrier<'a> {
    #[serde(rename = "type", borrow)]
    kind: Option<std::borrow::Cow<'a, str>>,
    usage: Option<RawUsage>,
    message: Option<MessageCarrier>,
}

#[derive(Deserialize)]
struct MessageCarrier {
    usage: Option<RawUsage>,
}

/// An Anthropic usage object.
#[derive(Deserialize)]
struct RawUsage {
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    /// The writes by lifetime (newer API versions); their sum is `cache_creation_input_tokens`.
    cache_creation: Option<CacheCreation>,
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct CacheCreation {
    ephemeral_1h_input_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OutputDetails {
    thinking_tokens: Option<u64>,
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
                    self.merge(usage, false, out);
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
                    self.merge(usage, true, out);
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
            self.merge(usage, true, out);
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

    /// The usage reported, once its output count is final.
    pub fn reported(&self) -> Option<Usage> {
        self.usage
            .output_final
            .then(|| self.usage.counted())
            .flatten()
    }

    /// The usage reported so far, final or not (a cut stream's input is known from
    /// `message_start`).
    pub fn reported_so_far(&self) -> Option<Usage> {
        self.usage.counted()
    }

    /// A passed-through event's data: its usage when it completes the report, else whether it
    /// carries text (a non-empty `text_delta`).
    pub fn scan(&mut self, data: &[u8]) -> Scanned {
        if mentions(data, Key::Usage) {
            self.scan_body(data);
            if self.reported().is_some() {
                return Scanned::Usage;
            }
        }
        match Key::TextDelta.in_(data) && has_text(data, Key::Text) {
            true => Scanned::Text,
            false => Scanned::Nothing,
        }
    }

    /// A whole passed-through document (a body, or one event's data): reads its usage.
    pub fn scan_body(&mut self, json: &[u8]) {
        let Ok(carrier) = serde_json::from_slice::<Carrier<'_>>(json) else {
            return;
        };
        let last = matches!(carrier.kind.as_deref(), Some("message_delta" | "message"));
        if let Some(usage) = carrier.usage.or(carrier.message.and_then(|m| m.usage)) {
            self.running(usage, last);
        }
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

    /// Reads a usage object of the decoded tree (`last`: it carries the final output count)
    /// and emits the counts so far.
    fn merge(&mut self, usage: &Value, last: bool, out: &mut Vec<Event>) {
        if let Ok(usage) = RawUsage::deserialize(usage) {
            self.running(usage, last);
        }
        out.extend(self.usage.counted().map(Event::Usage));
    }

    /// Each field present replaces the running one.
    fn running(&mut self, usage: RawUsage, last: bool) {
        let running = &mut self.usage;
        let thinking = usage.output_tokens_details.and_then(|d| d.thinking_tokens);
        running.input = usage.input_tokens.or(running.input);
        running.output = usage.output_tokens.or(running.output);
        running.cache_read = usage.cache_read_input_tokens.or(running.cache_read);
        running.cache_creation = usage.cache_creation_input_tokens.or(running.cache_creation);
        let hour = usage
            .cache_creation
            .and_then(|c| c.ephemeral_1h_input_tokens);
        running.cache_creation_1h = hour.or(running.cache_creation_1h);
        running.thinking = thinking.or(running.thinking);
        running.output_final |= last;
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

    /// A decoder that scanned `events` (passed through, as the meter reads them).
    fn scanned(events: &[&[u8]]) -> Messages {
        let mut decoder = Messages::default();
        for event in events {
            decoder.scan(event);
        }
        decoder
    }

    /// Moved from the gateway's meter (its Anthropic reader, gone): the billed usage.
    #[test]
    fn cumulative_fields_take_the_last_value() {
        let start: &[u8] = br#"{"type":"message_start","message":{"usage":{"input_tokens":9,"cache_read_input_tokens":4,"cache_creation_input_tokens":2,"output_tokens":1}}}"#;
        let delta: &[u8] = br#"{"type":"message_delta","usage":{"output_tokens":5}}"#;
        let again: &[u8] = br#"{"type":"message_delta","usage":{"input_tokens":9,"cache_read_input_tokens":4,"cache_creation_input_tokens":2,"output_tokens":7}}"#;
        let u = scanned(&[start, delta]).reported().unwrap();
        assert_eq!((u.input, u.output, u.cached), (15, 5, 4));
        let u = scanned(&[start, delta, again]).reported().unwrap();
        assert_eq!((u.input, u.output, u.cached), (15, 7, 4), "never added up");
        assert_eq!(
            scanned(&[delta]).reported(),
            None,
            "output alone is not a report"
        );
        assert_eq!(
            scanned(&[start]).reported(),
            None,
            "message_start's output count is a placeholder"
        );
        let so_far = scanned(&[start]).reported_so_far().unwrap();
        assert_eq!(
            (so_far.input, so_far.cached, so_far.cache_write),
            (15, 4, 2)
        );
        assert_eq!(scanned(&[start, delta]).scan(delta), Scanned::Usage);
        assert_eq!(
            Messages::default().scan(
                br#"{"type":"content_block_delta","delta":{"type":"text_delta","text":"a"}}"#
            ),
            Scanned::Text
        );
    }

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
                cache_write: 20,
                cache_write_1h: 0,
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

    /// The writes by lifetime (`cache_creation`): the hour-long part is kept apart, within the
    /// writes; a report whose hour-long part exceeds its writes is not plausible.
    #[test]
    fn hour_long_cache_writes_are_read_apart() {
        let start: &[u8] = br#"{"type":"message_start","message":{"usage":{"input_tokens":9,"cache_read_input_tokens":4,"cache_creation_input_tokens":20,"cache_creation":{"ephemeral_5m_input_tokens":12,"ephemeral_1h_input_tokens":8},"output_tokens":1}}}"#;
        let delta: &[u8] = br#"{"type":"message_delta","usage":{"output_tokens":5}}"#;
        let u = scanned(&[start, delta]).reported().unwrap();
        assert_eq!(
            (u.input, u.cached, u.cache_write, u.cache_write_1h),
            (33, 4, 20, 8)
        );
        let odd: &[u8] = br#"{"type":"message_start","message":{"usage":{"input_tokens":9,"cache_creation_input_tokens":2,"cache_creation":{"ephemeral_1h_input_tokens":8},"output_tokens":1}}}"#;
        assert_eq!(scanned(&[odd, delta]).reported(), None);
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
