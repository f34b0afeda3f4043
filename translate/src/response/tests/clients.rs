//! Reading what a client receives: a strict SSE check per client format (what each official SDK
//! needs), and a [`Summary`] of the response's meaning to compare across pairs and modes.

use serde_json::Value;

use super::super::decode::Decoder;
use crate::Format;
use crate::ir::{Event, FinishReason, Usage};
use crate::sse;

/// What a response means, whatever its format.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub text: String,
    pub thinking: String,
    pub signature: String,
    /// (id, name, arguments parsed as JSON)
    pub calls: Vec<(String, String, Value)>,
    pub finish: Option<FinishReason>,
    pub usage: Option<Usage>,
    pub error: Option<String>,
}

/// One frame of a client stream: its `event:` name (if any) and its data.
pub type Frame = (Option<String>, String);

/// Splits a client stream into frames, checking the SSE grammar strictly: frames end with a blank
/// line, each has at most one `event: ` line, then exactly one `data: ` line, and nothing else.
pub fn frames(bytes: &[u8]) -> Vec<Frame> {
    let text = std::str::from_utf8(bytes).expect("a client stream is UTF-8");
    assert!(
        text.is_empty() || text.ends_with("\n\n"),
        "the stream ends with a blank line"
    );
    let mut frames = Vec::new();
    for frame in text.split_terminator("\n\n") {
        let mut lines = frame.split('\n');
        let mut line = lines.next().expect("a frame has a line");
        let mut event = None;
        if let Some(name) = line.strip_prefix("event: ") {
            event = Some(name.to_string());
            line = lines.next().expect("an event line is followed by data");
        }
        let data = line.strip_prefix("data: ").expect("a data line");
        assert!(lines.next().is_none(), "one data line per frame: {frame}");
        frames.push((event, data.to_string()));
    }
    frames
}

/// Checks a client stream against what the client's SDK needs; returns its frames' data as JSON
/// (`[DONE]` excluded).
pub fn check_stream(client: Format, bytes: &[u8]) -> Vec<(Option<String>, Value)> {
    let frames = frames(bytes);
    let mut out = Vec::new();
    for (index, (event, data)) in frames.iter().enumerate() {
        if data == "[DONE]" {
            assert_eq!(client, Format::Chat, "only chat ends in [DONE]");
            assert_eq!(index, frames.len() - 1, "[DONE] is last");
            continue;
        }
        let value: Value = serde_json::from_str(data).expect("every data is JSON");
        match client {
            Format::Chat | Format::Gemini => assert!(event.is_none(), "data-only frames"),
            Format::Messages => {
                let name = event
                    .as_deref()
                    .expect("anthropic frames always have an event name");
                assert_eq!(value["type"], name);
            }
            Format::Responses => {
                let name = event.as_deref().expect("responses frames are named");
                assert_eq!(value["type"], name);
                assert_eq!(
                    value["sequence_number"],
                    out.len(),
                    "sequence numbers count from 0"
                );
            }
        }
        out.push((event.clone(), value));
    }
    out
}

/// The meaning of a client's body or stream.
pub fn summary(client: Format, stream: bool, bytes: &[u8]) -> Summary {
    if client == Format::Responses {
        return responses_summary(stream, bytes);
    }
    let mut decoder = Decoder::new(client, "client");
    let mut events = Vec::new();
    if stream {
        for (event, data) in frames(bytes) {
            let name = event.unwrap_or_default();
            let sse = sse::Event {
                name: name.as_bytes(),
                data: data.as_bytes(),
                skimmed: false,
            };
            decoder.sse(&sse, &mut events);
        }
    } else {
        let body: Value = serde_json::from_slice(bytes).expect("the body is JSON");
        assert!(
            decoder.body(&body, &mut events),
            "the body is a {client:?} response"
        );
    }
    fold(events)
}

/// The meaning of a sequence of events.
pub fn fold(events: Vec<Event>) -> Summary {
    let mut summary = Summary::default();
    let mut arguments: Vec<String> = Vec::new();
    for event in events {
        match event {
            Event::Start { .. } => {}
            Event::Text(text) => summary.text.push_str(&text),
            Event::Thinking(text) => summary.thinking.push_str(&text),
            Event::ThinkingSignature(signature) => summary.signature.push_str(&signature),
            Event::ToolCallStart { index, id, name } => {
                assert_eq!(index, summary.calls.len(), "tool calls count from 0");
                summary.calls.push((id, name, Value::Null));
                arguments.push(String::new());
            }
            Event::ToolCallArgs { index, fragment } => arguments[index].push_str(&fragment),
            Event::Usage(usage) => summary.usage = Some(usage),
            Event::Finish(reason) => summary.finish = Some(reason),
            Event::Error { message } => summary.error = Some(message),
        }
    }
    for (call, arguments) in summary.calls.iter_mut().zip(arguments) {
        // A cut stream may leave partial arguments: kept as text (never equal to a JSON object).
        call.2 = serde_json::from_str(&arguments).unwrap_or(Value::String(arguments));
    }
    summary
}

/// The Responses client: the final response object (from the terminal event or the body), after
/// checking that the stream's deltas add up to it.
fn responses_summary(stream: bool, bytes: &[u8]) -> Summary {
    let response = if stream {
        let frames = check_stream(Format::Responses, bytes);
        let mut texts: Vec<(String, String)> = Vec::new();
        let mut terminal = None;
        for (_, data) in &frames {
            let kind = data["type"].as_str().unwrap_or_default();
            let item = data["item_id"].as_str().unwrap_or_default().to_string();
            match kind {
                "response.output_text.delta"
                | "response.reasoning_summary_text.delta"
                | "response.function_call_arguments.delta" => {
                    let delta = data["delta"].as_str().expect("a delta is a string");
                    match texts.iter_mut().find(|(id, _)| *id == item) {
                        Some((_, text)) => text.push_str(delta),
                        None => texts.push((item, delta.to_string())),
                    }
                }
                "response.completed" | "response.incomplete" => {
                    terminal = Some(data["response"].clone())
                }
                "error" => {
                    let message = data["message"].as_str().unwrap_or_default();
                    assert_eq!(
                        data["error"]["message"], message,
                        "openai-python raises on `error`"
                    );
                    return Summary {
                        error: Some(message.to_string()),
                        ..Summary::default()
                    };
                }
                _ => {}
            }
        }
        let response = terminal.expect("a terminal event");
        for (id, text) in texts {
            let item = response["output"]
                .as_array()
                .and_then(|items| items.iter().find(|item| item["id"] == id.as_str()))
                .expect("every streamed item is in the final output");
            let whole = match item["type"].as_str() {
                Some("message") => item["content"][0]["text"].clone(),
                Some("reasoning") => item["summary"][0]["text"].clone(),
                _ => item["arguments"].clone(),
            };
            assert_eq!(whole, text.as_str(), "the deltas add up to the item");
        }
        response
    } else {
        let value: Value = serde_json::from_slice(bytes).expect("the body is JSON");
        if let Some(error) = value.get("error").filter(|error| !error.is_null()) {
            return Summary {
                error: error["message"].as_str().map(str::to_string),
                ..Summary::default()
            };
        }
        value
    };
    for key in [
        "id",
        "created_at",
        "model",
        "output",
        "parallel_tool_calls",
        "tool_choice",
        "tools",
    ] {
        assert!(
            response.get(key).is_some(),
            "openai-python's Response needs {key}"
        );
    }
    assert_eq!(response["object"], "response");
    let mut summary = Summary::default();
    for item in response["output"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    summary
                        .text
                        .push_str(part["text"].as_str().unwrap_or_default());
                }
            }
            Some("reasoning") => {
                for part in item["summary"].as_array().into_iter().flatten() {
                    summary
                        .thinking
                        .push_str(part["text"].as_str().unwrap_or_default());
                }
            }
            Some("function_call") => {
                let arguments = item["arguments"].as_str().expect("arguments are a string");
                summary.calls.push((
                    item["call_id"].as_str().unwrap_or_default().to_string(),
                    item["name"].as_str().unwrap_or_default().to_string(),
                    serde_json::from_str(arguments).expect("arguments are JSON"),
                ));
            }
            other => panic!("unexpected output item {other:?}"),
        }
    }
    summary.finish = Some(
        match (
            response["status"].as_str(),
            response["incomplete_details"]["reason"].as_str(),
        ) {
            (Some("completed"), _) if !summary.calls.is_empty() => FinishReason::ToolCalls,
            (Some("completed"), _) => FinishReason::Stop,
            (Some("incomplete"), Some("max_output_tokens")) => FinishReason::Length,
            (Some("incomplete"), Some("content_filter")) => FinishReason::ContentFilter,
            other => panic!("unexpected status {other:?}"),
        },
    );
    let usage = &response["usage"];
    if usage.is_object() {
        let count = |value: &Value| value.as_u64().expect("a count");
        summary.usage = Some(Usage {
            input: count(&usage["input_tokens"]),
            output: count(&usage["output_tokens"]),
            cached: count(&usage["input_tokens_details"]["cached_tokens"]),
            cache_write: usage["input_tokens_details"]["cache_write_tokens"]
                .as_u64()
                .unwrap_or(0),
            cache_write_1h: 0,
            reasoning: count(&usage["output_tokens_details"]["reasoning_tokens"]),
        });
        assert_eq!(
            count(&usage["total_tokens"]),
            count(&usage["input_tokens"]) + count(&usage["output_tokens"])
        );
    }
    summary
}
