//! The OpenAI chat completions decoder: the `chat.completion.chunk` objects of a stream (and its
//! `[DONE]`), or one `chat.completion` body. Only the choice with index 0 is read (the gateway
//! never asks for `n > 1`). Thinking comes from the common `reasoning_content` extension (or
//! `reasoning`), a `refusal` is shown as text. Settled: the finish reason and the usage both
//! seen (OpenAI sends the usage chunk after the finish chunk), or `[DONE]`.
//!
//! It is also the OpenAI format's meter: [`Chat::scan`] reads a passed-through event (chat
//! completions, responses, transcriptions) without building a tree, by typed decoding of the
//! usage object alone; a translated event's usage is read from the tree the decoder built, with
//! the same typed reading ([`RawUsage`]). One reading of OpenAI's usage for both.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::{Key, Scanned, count, error_message, has_text, mentions, text};
use crate::ir::{Event, FinishReason, Usage};

#[derive(Debug, Default)]
pub(crate) struct Chat {
    started: bool,
    /// The supplier's `tool_calls[].index` of each call seen, in order: the position is ours.
    tools: Vec<u64>,
    finished: bool,
    settled: bool,
    /// The last plausible usage reported.
    reported: Option<Usage>,
}

impl Chat {
    /// One event of a stream: read typed and borrowed from its bytes; an event whose fields have
    /// types the typed reading refuses (or with an `error`) is read off its decoded tree instead.
    pub fn event(&mut self, data: &[u8], out: &mut Vec<Event>) {
        if let Some(object) = serde_json::from_slice::<Typed<'_>>(data)
            .ok()
            .and_then(Typed::object)
        {
            return self.read(object, out);
        }
        if let Ok(value) = serde_json::from_slice::<Value>(data) {
            self.object(&value, out);
        }
    }

    /// One chunk of a stream (or a whole body: the same fields under `message`), decoded.
    pub fn object(&mut self, value: &Value, out: &mut Vec<Event>) {
        self.read(Object::of(value), out);
    }

    fn read(&mut self, object: Object<'_>, out: &mut Vec<Event>) {
        if let Some(message) = object.error {
            out.push(Event::Error { message });
            return;
        }
        if object.choices.is_none() && object.usage.is_none() {
            return;
        }
        if !self.started {
            self.started = true;
            out.push(Event::Start {
                id: object.id.unwrap_or_default().into_owned(),
                model: object.model.unwrap_or_default().into_owned(),
            });
        }
        let choice = object.choices.as_ref().and_then(|choices| {
            choices
                .iter()
                .find(|choice| choice.index == Some(0))
                .or(choices.first())
        });
        if let Some(content) = choice.and_then(|c| c.delta.as_ref().or(c.message.as_ref())) {
            self.content(content, out);
        }
        if let Some(Some(usage)) = object.usage {
            self.reported = Some(usage);
            out.push(Event::Usage(usage));
        }
        if let Some(reason) = choice.and_then(|choice| choice.finish_reason.as_deref()) {
            out.push(Event::Finish(finish_reason(reason)));
            self.finished = true;
        }
        if self.finished && object.usage.is_some() {
            self.settled = true;
        }
    }

    /// A whole `chat.completion` body; `false` when it is not one.
    pub fn body(&mut self, body: &Value, out: &mut Vec<Event>) -> bool {
        let recognised = body.get("choices").is_some_and(Value::is_array)
            || body.get("error").is_some_and(truthy);
        if recognised {
            self.object(body, out);
        }
        recognised
    }

    /// `data: [DONE]`: the stream said everything. A stream that began but never named its
    /// finish reason ends here explicitly (not cut): `Other`.
    pub fn done(&mut self, out: &mut Vec<Event>) {
        if self.started && !self.finished {
            self.finished = true;
            out.push(Event::Finish(FinishReason::Other));
        }
        self.settled = true;
    }

    pub fn settled(&self) -> bool {
        self.settled
    }

    /// The usage the answer reported (the last plausible one).
    pub fn reported(&self) -> Option<Usage> {
        self.reported
    }

    /// A passed-through event's data: its usage (a chat chunk's `usage`, a responses event's
    /// `response.usage`), else whether it carries text (a chat delta's `content`, a responses
    /// `delta`; role-only and finish chunks do not count).
    pub fn scan(&mut self, data: &[u8]) -> Scanned {
        if data.trim_ascii() == b"[DONE]" {
            return Scanned::Nothing;
        }
        if mentions(data, Key::Usage) && self.scan_body(data) {
            return Scanned::Usage;
        }
        match has_text(data, Key::Content) || has_text(data, Key::Delta) {
            true => Scanned::Text,
            false => Scanned::Nothing,
        }
    }

    /// A whole passed-through document (a body, or one event's data): reads its usage; `true`
    /// when it carried plausible usage.
    pub fn scan_body(&mut self, json: &[u8]) -> bool {
        let usage = serde_json::from_slice::<Carrier>(json)
            .ok()
            .and_then(|carrier| carrier.usage.or(carrier.response.and_then(|r| r.usage)))
            .and_then(RawUsage::usage);
        if usage.is_some() {
            self.reported = usage;
        }
        usage.is_some()
    }

    /// A `delta` (stream) or `message` (body).
    fn content(&mut self, content: &Delta<'_>, out: &mut Vec<Event>) {
        let thinking = [&content.reasoning_content, &content.reasoning];
        if let Some(thinking) = thinking.into_iter().flatten().find(|t| !t.is_empty()) {
            out.push(Event::Thinking(thinking.to_string()));
        }
        for reply in [&content.content, &content.refusal].into_iter().flatten() {
            if !reply.is_empty() {
                out.push(Event::Text(reply.to_string()));
            }
        }
        for (position, call) in content.tool_calls.iter().flatten().enumerate() {
            let key = call.index.unwrap_or(position as u64);
            let function = call.function.as_ref();
            let index = match self.tools.iter().position(|seen| *seen == key) {
                Some(index) => index,
                None => {
                    let index = self.tools.len();
                    self.tools.push(key);
                    out.push(Event::ToolCallStart {
                        index,
                        id: call
                            .id
                            .as_deref()
                            .map(str::to_string)
                            .unwrap_or_else(|| format!("call_{index}")),
                        name: function
                            .and_then(|f| f.name.as_deref())
                            .unwrap_or_default()
                            .to_string(),
                    });
                    index
                }
            };
            let arguments = function.and_then(|f| f.arguments.as_deref());
            if let Some(fragment) = arguments.filter(|f| !f.is_empty()) {
                out.push(Event::ToolCallArgs {
                    index,
                    fragment: fragment.to_string(),
                });
            }
        }
    }
}

/// A chat object as the decoder reads it, borrowed from the event's bytes ([`Typed`]) or from
/// its decoded tree ([`Object::of`]): the same fields, read the same way.
struct Object<'a> {
    id: Option<Cow<'a, str>>,
    model: Option<Cow<'a, str>>,
    choices: Option<Vec<Choice<'a>>>,
    /// A usage object was there; its counts when plausible.
    usage: Option<Option<Usage>>,
    /// A truthy `error`: its message.
    error: Option<String>,
}

impl<'a> Object<'a> {
    /// Read off a decoded tree: a field of another type than expected counts as absent.
    fn of(value: &'a Value) -> Object<'a> {
        let borrowed = |value: &'a Value, key: &str| text(value, key).map(Cow::Borrowed);
        let choices = value.get("choices").and_then(Value::as_array);
        let choices = choices.map(|choices| {
            choices
                .iter()
                .map(|choice| Choice {
                    index: count(choice, "index"),
                    delta: choice
                        .get("delta")
                        .or_else(|| choice.get("message"))
                        .map(|delta| Delta {
                            reasoning_content: borrowed(delta, "reasoning_content"),
                            reasoning: borrowed(delta, "reasoning"),
                            content: borrowed(delta, "content"),
                            refusal: borrowed(delta, "refusal"),
                            tool_calls: delta.get("tool_calls").and_then(Value::as_array).map(
                                |calls| {
                                    calls
                                        .iter()
                                        .map(|call| ToolCall {
                                            index: count(call, "index"),
                                            id: borrowed(call, "id"),
                                            function: call.get("function").map(|f| Function {
                                                name: borrowed(f, "name"),
                                                arguments: borrowed(f, "arguments"),
                                            }),
                                        })
                                        .collect()
                                },
                            ),
                        }),
                    message: None,
                    finish_reason: borrowed(choice, "finish_reason"),
                })
                .collect()
        });
        Object {
            id: borrowed(value, "id"),
            model: borrowed(value, "model"),
            choices,
            usage: value
                .get("usage")
                .filter(|usage| usage.is_object())
                .map(|usage| RawUsage::deserialize(usage).ok().and_then(RawUsage::usage)),
            error: value.get("error").filter(|e| truthy(e)).map(error_message),
        }
    }
}

/// A chat object decoded typed and borrowed from its bytes, without a tree.
#[derive(Deserialize)]
struct Typed<'a> {
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    model: Option<Cow<'a, str>>,
    #[serde(borrow)]
    choices: Option<Vec<Choice<'a>>>,
    #[serde(borrow)]
    usage: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

impl<'a> Typed<'a> {
    /// The object, unless it carries an `error` (read off the tree, for its message).
    fn object(self) -> Option<Object<'a>> {
        if self
            .error
            .is_some_and(|e| !matches!(e.get(), "null" | "false"))
        {
            return None;
        }
        let usage = self.usage.filter(|u| u.get().starts_with('{')).map(|u| {
            serde_json::from_str::<RawUsage>(u.get())
                .ok()
                .and_then(RawUsage::usage)
        });
        Some(Object {
            id: self.id,
            model: self.model,
            choices: self.choices,
            usage,
            error: None,
        })
    }
}

#[derive(Deserialize)]
struct Choice<'a> {
    index: Option<u64>,
    #[serde(borrow)]
    delta: Option<Delta<'a>>,
    #[serde(borrow)]
    message: Option<Delta<'a>>,
    #[serde(borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

/// A choice's `delta` (stream) or `message` (body).
#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(borrow)]
    reasoning_content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    reasoning: Option<Cow<'a, str>>,
    #[serde(borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(borrow)]
    refusal: Option<Cow<'a, str>>,
    #[serde(borrow)]
    tool_calls: Option<Vec<ToolCall<'a>>>,
}

#[derive(Deserialize)]
struct ToolCall<'a> {
    index: Option<u64>,
    #[serde(borrow)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow)]
    function: Option<Function<'a>>,
}

#[derive(Deserialize)]
struct Function<'a> {
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    arguments: Option<Cow<'a, str>>,
}

/// A JSON value that counts as present (openai-python raises for any truthy `error`).
fn truthy(value: &Value) -> bool {
    !matches!(value, Value::Null | Value::Bool(false))
}

/// What carries usage in an OpenAI document: a chat object's `usage`, or a responses event's
/// `response.usage`.
#[derive(Deserialize)]
struct Carrier {
    usage: Option<RawUsage>,
    response: Option<ResponseCarrier>,
}

#[derive(Deserialize)]
struct ResponseCarrier {
    usage: Option<RawUsage>,
}

/// An OpenAI usage object, in chat's spelling (`prompt_tokens`, …) or responses'
/// (`input_tokens`, …).
#[derive(Deserialize)]
struct RawUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    prompt_tokens_details: Option<InputDetails>,
    input_tokens_details: Option<InputDetails>,
    completion_tokens_details: Option<OutputDetails>,
    output_tokens_details: Option<OutputDetails>,
}

#[derive(Deserialize)]
struct InputDetails {
    cached_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct OutputDetails {
    reasoning_tokens: Option<u64>,
}

impl RawUsage {
    /// The usage, when both counts are there and plausible.
    fn usage(self) -> Option<Usage> {
        let input = self.prompt_tokens_details.or(self.input_tokens_details);
        let output = self
            .completion_tokens_details
            .or(self.output_tokens_details);
        Usage {
            input: self.prompt_tokens.or(self.input_tokens)?,
            output: self.completion_tokens.or(self.output_tokens)?,
            cached: input.as_ref().and_then(|d| d.cached_tokens).unwrap_or(0),
            cache_write: input.and_then(|d| d.cache_write_tokens).unwrap_or(0),
            cache_write_1h: 0,
            reasoning: output.and_then(|d| d.reasoning_tokens).unwrap_or(0),
        }
        .plausible()
    }
}

fn finish_reason(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "tool_calls" | "function_call" => FinishReason::ToolCalls,
        "content_filter" => FinishReason::ContentFilter,
        _ => FinishReason::Other,
    }
}

#[derive(Deserialize)]
struct AudioCarrier {
    usage: Option<AudioUsage>,
    duration: Option<f64>,
}

#[derive(Deserialize)]
struct AudioUsage {
    #[serde(rename = "type")]
    kind: Option<String>,
    seconds: Option<f64>,
}

/// Seconds of audio from a transcription body: `usage: {type: "duration", seconds}` or the
/// `duration` of a verbose answer, rounded up to whole seconds; implausible values are ignored.
pub fn audio_seconds(json: &[u8]) -> Option<u64> {
    let carrier: AudioCarrier = serde_json::from_slice(json).ok()?;
    let seconds = carrier
        .usage
        .filter(|u| u.kind.as_deref().is_none_or(|k| k == "duration"))
        .and_then(|u| u.seconds)
        .or(carrier.duration)?;
    (seconds.is_finite() && (0.0..=PLAUSIBLE_AUDIO_SECONDS).contains(&seconds))
        .then(|| seconds.ceil() as u64)
}

/// Longest plausible transcription (a week of audio); beyond it the duration is estimated.
const PLAUSIBLE_AUDIO_SECONDS: f64 = 604_800.0;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn decode(chunks: &[Value]) -> (Vec<Event>, bool) {
        let mut chat = Chat::default();
        let mut out = Vec::new();
        for chunk in chunks {
            chat.object(chunk, &mut out);
        }
        (out, chat.settled())
    }

    #[test]
    fn parallel_tool_calls_keep_their_own_index() {
        let (events, settled) = decode(&[
            json!({"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"f","arguments":""}}]},"finish_reason":null}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"x\":"}}]},"finish_reason":null}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"g","arguments":"{}"}}]},"finish_reason":null}]}),
            json!({"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"1}"}}]},"finish_reason":null}]}),
            json!({"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}],"usage":null}),
        ]);
        assert!(!settled, "the usage chunk is still to come");
        assert_eq!(
            events,
            vec![
                Event::Start {
                    id: "c1".into(),
                    model: "m".into()
                },
                Event::ToolCallStart {
                    index: 0,
                    id: "call_a".into(),
                    name: "f".into()
                },
                Event::ToolCallArgs {
                    index: 0,
                    fragment: "{\"x\":".into()
                },
                Event::ToolCallStart {
                    index: 1,
                    id: "call_b".into(),
                    name: "g".into()
                },
                Event::ToolCallArgs {
                    index: 1,
                    fragment: "{}".into()
                },
                Event::ToolCallArgs {
                    index: 0,
                    fragment: "1}".into()
                },
                Event::Finish(FinishReason::ToolCalls),
            ]
        );
    }

    #[test]
    fn usage_on_the_finish_chunk_settles_and_comes_first() {
        let (events, settled) = decode(&[
            json!({"id":"c","choices":[{"index":0,"delta":{"reasoning_content":"hm","content":"hi"},"finish_reason":"length"}],
            "usage":{"prompt_tokens":10,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":{"reasoning_tokens":2}}}),
        ]);
        assert!(settled);
        assert_eq!(
            &events[1..],
            &[
                Event::Thinking("hm".into()),
                Event::Text("hi".into()),
                Event::Usage(Usage {
                    input: 10,
                    output: 5,
                    cached: 4,
                    cache_write: 0,
                    cache_write_1h: 0,
                    reasoning: 2
                }),
                Event::Finish(FinishReason::Length),
            ]
        );
    }

    #[test]
    fn an_error_object_is_an_error_and_garbage_is_skipped() {
        let (events, _) = decode(&[
            json!({"unexpected": true}),
            json!([1, 2]),
            json!({"error":{"message":"overloaded","type":"server_error"}}),
        ]);
        assert_eq!(
            events,
            vec![Event::Error {
                message: "overloaded".into()
            }]
        );
    }
}
